"""What a job told slurmpolicy through its ``#SPOLICY`` directives, as policy reads it.

Owns the parsed, normalized form (:class:`JobPolicy`) and its wire form in
the job's ``admin_comment``, which job_submit.lua writes and users cannot
change::

    spolicy:v1 class=research ckpt=signal:USR1,grace=120,interval=1800 preempt=after=3600
        topo=leaf,strict runtime=7200 gpu_type=h100 gpu_mem=80 data=imagenet
        defer=night,deadline=86400 retry=3 nodes=2-8

Tokens are separated by single spaces, values never contain spaces, durations
are whole seconds. Keys absent mean "not said" and take the defaults below.
Text before ``spolicy:`` or an unknown key is ignored (forward compatible);
a known key with a bad value makes the job's record "unreadable" (the
inspector reports it) and the defaults apply.

The directive schema, validation messages and the Lua renderer live in
:mod:`slurmpolicy.directives`; this module is what the planner needs and is
kept free of them so that the core stays small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PREFIX = "spolicy:v1"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """``--checkpoint=signal:SIG,grace=D[,interval=D][,exit=done]``,
    ``--checkpoint=periodic,interval=D`` or ``--checkpoint=none``; or what
    :mod:`slurmpolicy.protocol` learned from the job's own ``--signal``."""

    #: Signal name without "SIG" (USR1, TERM, ...); None: no signal to send
    #: (a periodic checkpointer when ``interval`` is set, else unable).
    signal: str | None
    #: Seconds the job needs to save after the signal.
    grace: float = 0.0
    #: Seconds between the job's own periodic checkpoints; None: unknown.
    interval: float | None = None
    #: Who gets the signal: "batch" (the batch shell, ``--signal=B:``) or
    #: "steps" (the job steps, Slurm's own ``--signal`` without ``B:``).
    target: str = "batch"
    #: What an exit after the signal means: "requeue" (saved and exited: the
    #: job continues, requeued) or "done" (the job finished; no requeue).
    on_exit: str = "requeue"
    #: "" when declared by ``#SPOLICY --checkpoint``; else where it was learned,
    #: in words ("--signal=USR2@90 in its batch script").
    learned: str = ""

    @property
    def capable(self) -> bool:
        return self.signal is not None or self.interval is not None

    @property
    def protocol(self) -> str:
        """The protocol's name for logs and metrics: spolicy, slurm-signal, periodic, none."""
        if self.learned:
            return "slurm-signal"
        if self.signal is not None:
            return "spolicy"
        return "periodic" if self.interval is not None else "none"


@dataclass(frozen=True, slots=True)
class JobPolicy:
    """A job's directives, normalized. Defaults are what a job without lines gets."""

    job_class: str | None = None
    #: None: the job said nothing about checkpoints (treated as unable).
    checkpoint: Checkpoint | None = None
    #: False: never a victim.
    preemptible: bool = True
    #: Seconds after start before the job may be preempted.
    preemptible_after: float = 0.0
    #: nvlink, leaf, spine or any.
    topology: str = "any"
    topology_strict: bool = False
    #: Seconds the user expects the job to run (else its time limit counts).
    expected_runtime: float | None = None
    gpu_type: str | None = None
    min_gpu_memory_gb: float | None = None
    data: str | None = None
    #: Name of a deferral window from the settings.
    defer_window: str | None = None
    #: Seconds after submission by which a deferred job must be released.
    defer_deadline: float | None = None
    #: Retries after failures not of the job's own making (``--retry``); None: not said.
    retries: int | None = None
    #: ``--nodes=MIN-MAX`` as submitted (an elastic job), recorded by job_submit.lua:
    #: Slurm reports only the allocated count once the job has started.
    node_range: tuple[int, int] | None = None
    #: False when the admin_comment carried our prefix but could not be read.
    readable: bool = True

    @property
    def can_checkpoint(self) -> bool:
        return self.checkpoint is not None and self.checkpoint.capable

    @property
    def elastic(self) -> bool:
        """Accepts a node range and checkpoints: may be shrunk instead of evicted."""
        return self.node_range is not None and self.can_checkpoint


DEFAULT = JobPolicy()


def _seconds(text: str) -> float:
    value = float(text)
    if value < 0 or value != value:
        raise ValueError(text)
    return value


def parse_admin_comment(text: str) -> JobPolicy:
    """The JobPolicy stored in an admin_comment; defaults when there is none."""
    start = text.find(PREFIX)
    if start < 0:
        return DEFAULT
    fields: dict[str, object] = {}
    try:
        for token in text[start + len(PREFIX):].split():
            key, _, value = token.partition("=")
            if key == "class":
                fields["job_class"] = value
            elif key == "ckpt":
                fields["checkpoint"] = _parse_ckpt(value)
            elif key == "preempt":
                if value == "yes":
                    fields["preemptible"] = True
                elif value == "no":
                    fields["preemptible"] = False
                elif value.startswith("after="):
                    fields["preemptible_after"] = _seconds(value[len("after="):])
                else:
                    raise ValueError(value)
            elif key == "topo":
                level, _, flag = value.partition(",")
                if level not in ("nvlink", "leaf", "spine", "any") or flag not in ("", "strict"):
                    raise ValueError(value)
                fields["topology"] = level
                fields["topology_strict"] = flag == "strict"
            elif key == "runtime":
                fields["expected_runtime"] = _seconds(value)
            elif key == "gpu_type":
                fields["gpu_type"] = value
            elif key == "gpu_mem":
                fields["min_gpu_memory_gb"] = _seconds(value)
            elif key == "data":
                fields["data"] = value
            elif key == "defer":
                window, _, rest = value.partition(",")
                fields["defer_window"] = window
                if rest:
                    name, _, deadline = rest.partition("=")
                    if name != "deadline":
                        raise ValueError(value)
                    fields["defer_deadline"] = _seconds(deadline)
            elif key == "retry":
                if not value.isdigit():
                    raise ValueError(value)
                fields["retries"] = int(value)
            elif key == "nodes":
                lo, _, hi = value.partition("-")
                if not (lo.isdigit() and hi.isdigit()) or not 1 <= int(lo) < int(hi):
                    raise ValueError(value)
                fields["node_range"] = (int(lo), int(hi))
            # Unknown keys come from a newer plugin: ignore them.
    except ValueError:
        return JobPolicy(readable=False)
    return JobPolicy(**fields)  # type: ignore[arg-type]


def _parse_ckpt(value: str) -> Checkpoint:
    if value == "none":
        return Checkpoint(signal=None)
    parts = dict(p.partition("=")[::2] for p in value.split(",") if "=" in p)
    head = value.split(",", 1)[0]
    interval = parts.get("interval")
    if head == "periodic":
        if not interval:
            raise ValueError(value)
        return Checkpoint(signal=None, interval=_seconds(interval))
    if not head.startswith("signal:"):
        raise ValueError(value)
    target = parts.get("target", "batch")
    on_exit = parts.get("exit", "requeue")
    if target not in ("batch", "steps") or on_exit not in ("requeue", "done"):
        raise ValueError(value)
    return Checkpoint(
        signal=head[len("signal:"):],
        grace=_seconds(parts.get("grace", "0")),
        interval=_seconds(interval) if interval else None,
        target=target, on_exit=on_exit,
    )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def render_admin_comment(policy: JobPolicy) -> str:
    """The canonical wire form; ``parse_admin_comment`` inverts it."""
    tokens = [PREFIX]
    if policy.job_class:
        tokens.append(f"class={policy.job_class}")
    if policy.checkpoint is not None:
        ck = policy.checkpoint
        if ck.signal is None and ck.interval is not None:
            tokens.append(f"ckpt=periodic,interval={_num(ck.interval)}")
        elif ck.signal is None:
            tokens.append("ckpt=none")
        else:
            text = f"ckpt=signal:{ck.signal},grace={_num(ck.grace)}"
            if ck.interval is not None:
                text += f",interval={_num(ck.interval)}"
            if ck.target != "batch":
                text += f",target={ck.target}"
            if ck.on_exit != "requeue":
                text += f",exit={ck.on_exit}"
            tokens.append(text)
    if not policy.preemptible:
        tokens.append("preempt=no")
    elif policy.preemptible_after:
        tokens.append(f"preempt=after={_num(policy.preemptible_after)}")
    if policy.topology != "any" or policy.topology_strict:
        tokens.append(f"topo={policy.topology}" + (",strict" if policy.topology_strict else ""))
    if policy.expected_runtime is not None:
        tokens.append(f"runtime={_num(policy.expected_runtime)}")
    if policy.gpu_type:
        tokens.append(f"gpu_type={policy.gpu_type}")
    if policy.min_gpu_memory_gb is not None:
        tokens.append(f"gpu_mem={_num(policy.min_gpu_memory_gb)}")
    if policy.data:
        tokens.append(f"data={policy.data}")
    if policy.defer_window:
        text = f"defer={policy.defer_window}"
        if policy.defer_deadline is not None:
            text += f",deadline={_num(policy.defer_deadline)}"
        tokens.append(text)
    if policy.retries is not None:
        tokens.append(f"retry={policy.retries}")
    if policy.node_range is not None:
        tokens.append(f"nodes={policy.node_range[0]}-{policy.node_range[1]}")
    return " ".join(tokens)


def with_node_range(admin_comment: str | None, min_nodes: int,
                    max_nodes: int | None) -> str | None:
    """The admin_comment job_submit.lua writes for a job submitted with
    ``--nodes=MIN-MAX``: the directives' (or just the prefix) and ``nodes=MIN-MAX``;
    unchanged without a range."""
    if max_nodes is None or max_nodes <= min_nodes or min_nodes < 1:
        return admin_comment
    return f"{admin_comment or PREFIX} nodes={min_nodes}-{max_nodes}"


# --- the job's acknowledgements, in its own ``comment`` -------------------------
#: The job writes ``ckpt:<epoch seconds>`` (last checkpoint written) into its
#: comment through ``scontrol update``; optionally ``ckpt:<epoch>:<restart count>``.
ACK_PREFIX = "ckpt:"


#: How far in the future (beyond the reader's clock) an acknowledgement may be
#: stamped and still count: the job's node and the head node's clocks differ a
#: little; more than that is a forged or broken stamp.
ACK_SKEW = 60.0


def read_acks(comment: str, now: float | None = None,
              skew: float = ACK_SKEW) -> tuple[float | None, tuple[str, ...]]:
    """The latest valid acknowledgement in ``comment``, and the refused ones.

    A token ``ckpt:<stamp>[:<restart>]`` counts when its stamp is a finite
    number of epoch seconds, not negative, and (when ``now`` is given) not
    more than ``skew`` seconds in the future. Every other ``ckpt:`` token is
    refused, described in inert words (never the token itself: it is the
    job's text). Never raises, whatever the comment holds.
    """
    best: float | None = None
    refused: list[str] = []
    for token in comment.split():
        if not token.startswith(ACK_PREFIX):
            continue
        stamp = token[len(ACK_PREFIX):].split(":", 1)[0]
        try:
            value = float(stamp)
        except ValueError:
            refused.append("malformed (not a number of epoch seconds)")
            continue
        if not math.isfinite(value):
            refused.append("not a finite number")
            continue
        if value < 0:
            refused.append("stamped before 1970")
            continue
        if now is not None and value > now + skew:
            refused.append(f"stamped {value - now:.0f}s in the future (more than the "
                           f"allowed clock skew of {skew:.0f}s)")
            continue
        best = value if best is None else max(best, value)
    return best, tuple(refused)


def last_checkpoint(comment: str, now: float | None = None,
                    skew: float = ACK_SKEW) -> float | None:
    """Epoch seconds of the job's last valid checkpoint acknowledgement (see
    :func:`read_acks`), or None."""
    return read_acks(comment, now, skew)[0]


#: Figures the job reports itself (``slurmpolicy ckpt report NAME=VALUE``).
METRIC_PREFIX = "spm:"


def reported_metrics(comment: str) -> dict[str, float]:
    """The ``spm:NAME=VALUE`` figures of a job's comment (bad tokens ignored)."""
    out: dict[str, float] = {}
    for token in comment.split():
        if token.startswith(METRIC_PREFIX):
            name, _, value = token[len(METRIC_PREFIX):].partition("=")
            try:
                number = float(value)
            except ValueError:
                continue
            if name and number == number and abs(number) != float("inf"):
                out[name[:32]] = number
    return out
