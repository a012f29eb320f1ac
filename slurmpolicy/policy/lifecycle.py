"""Pure decisions about a job's whole life: why a run ended, whether it is
retried from its checkpoint, and which nodes are suspect.

Owns three things, all pure functions of their inputs (no I/O, no clock):

- :func:`classify`: the cause of a run's end (node failure, a node that went
  down or drained under it, a hardware exit code, a start-up fault, or the
  job's own fault: its exit code, its own OOM, its time limit);
- :func:`decide_retry`: whether a failed checkpointing job is requeued,
  away from which nodes, after which back-off, or why not;
- :func:`suspicion`: nodes on which jobs of different users keep failing,
  and whether one may be drained (never more than a share of the cluster,
  never the last schedulable node of its kind of hardware).

The daemon (``slurmpolicy.daemon.lifecycle``) feeds them what it observed
and carries out the answers through Slurm; the inspector shows them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from slurmpolicy.model import Node
from slurmpolicy.settings import Settings


class Cause(StrEnum):
    """Why a run ended. The first five are not the job's fault."""

    NODE_FAIL = "node_fail"  # Slurm ended it NODE_FAIL / BOOT_FAIL
    NODE_LOST = "node_lost"  # a node went down or drained under it
    HARDWARE = "hardware"  # an exit code the site classifies as hardware
    STARTUP = "startup"  # a platform exit code within its first minutes
    REQUEUED_BY_SLURM = "requeued_by_slurm"  # Slurm requeued it (node failure)
    EXIT = "exit"  # its own exit code
    OOM = "oom"  # out of memory of its own making
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    COMPLETED = "completed"
    PREEMPTED = "preempted"  # by slurmpolicy or by Slurm: not a failure
    UNKNOWN = "unknown"  # it left Slurm's memory unseen

    @property
    def not_own_fault(self) -> bool:
        return self in _NOT_OWN

    @property
    def abnormal(self) -> bool:
        return self not in (Cause.COMPLETED, Cause.PREEMPTED, Cause.UNKNOWN)


_NOT_OWN = frozenset({Cause.NODE_FAIL, Cause.NODE_LOST, Cause.HARDWARE, Cause.STARTUP,
                      Cause.REQUEUED_BY_SLURM})

#: Node flags that say the node failed or was taken away under a running job.
_LOST_FLAGS = frozenset({"NOT_RESPONDING", "FAIL", "DRAIN", "DRAINED", "DRAINING",
                         "POWERED_DOWN", "REBOOT_ISSUED"})


@dataclass(frozen=True, slots=True)
class RunEnd:
    """One run of a job that ended (or was requeued), as the daemon saw it."""

    job_id: int
    user: str
    #: Slurm's end state (FAILED, NODE_FAIL, ...), or PENDING when Slurm requeued it.
    state: str
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    exit_signal: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    restart_count: int = 0
    #: Slurm requeued it by itself (restart count went up without a step of ours).
    requeued_by_slurm: bool = False
    #: slurmpolicy preempted it in this run (a victim requeued or ended).
    preempted_by_us: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: Cause
    #: Nodes that may be at fault (empty for the job's own faults).
    suspects: tuple[str, ...]
    #: The evidence, in words, for the journal and the timeline.
    evidence: str

    @property
    def not_own_fault(self) -> bool:
        return self.cause.not_own_fault


def _node_trouble(node: Node | None) -> str:
    if node is None:
        return "gone from Slurm"
    words = []
    if node.state in ("DOWN", "UNKNOWN", "FUTURE"):
        words.append(node.state)
    words += sorted(node.flags & _LOST_FLAGS)
    if not words:
        return ""
    reason = f" ({node.reason})" if node.reason else ""
    return "+".join(words) + reason


def classify(end: RunEnd, nodes: Mapping[str, Node], settings: Settings) -> Verdict:
    """Why ``end`` happened, from its state, exit and the state of its nodes now."""
    life = settings.lifecycle
    exit_words = f"exit code {end.exit_code}" + (
        f", signal {end.exit_signal}" if end.exit_signal else "")
    troubled = {n: t for n in end.nodes if (t := _node_trouble(nodes.get(n)))}
    node_words = "; ".join(f"node {n} {t}" for n, t in sorted(troubled.items()))
    state = end.state.upper()
    if end.preempted_by_us or state == "PREEMPTED":
        return Verdict(Cause.PREEMPTED, (), "preempted")
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return Verdict(Cause.NODE_FAIL, tuple(sorted(troubled) or end.nodes),
                       f"Slurm ended it {state}" + (f"; {node_words}" if node_words else ""))
    if end.requeued_by_slurm:
        if troubled:
            return Verdict(Cause.REQUEUED_BY_SLURM, tuple(sorted(troubled)),
                           f"Slurm requeued it; {node_words}")
        return Verdict(Cause.REQUEUED_BY_SLURM, (), "Slurm requeued it")
    if state == "COMPLETED":
        return Verdict(Cause.COMPLETED, (), "completed")
    if state in ("CANCELLED",):
        return Verdict(Cause.CANCELLED, (), "cancelled")
    if state in ("TIMEOUT", "DEADLINE"):
        return Verdict(Cause.TIMEOUT, (), f"reached its {state.lower()}")
    if state == "OUT_OF_MEMORY":
        return Verdict(Cause.OOM, (), "out of memory (its own allocation)")
    if troubled and state == "FAILED":
        return Verdict(Cause.NODE_LOST, tuple(sorted(troubled)),
                       f"failed ({exit_words}) while {node_words}")
    if end.exit_code is not None and end.exit_code in life.hardware_exit_codes:
        return Verdict(Cause.HARDWARE, end.nodes,
                       f"{exit_words}, classified as hardware (lifecycle.hardware_exit_codes)")
    ran = (end.end_time - end.start_time
           if end.end_time is not None and end.start_time is not None else None)
    if (end.exit_code is not None and end.exit_code in life.startup_exit_codes
            and ran is not None and ran <= life.startup_window):
        return Verdict(Cause.STARTUP, end.nodes,
                       f"{exit_words} {ran:.0f}s after its start, a start-up fault "
                       "(lifecycle.startup_exit_codes)")
    if state == "FAILED":
        return Verdict(Cause.EXIT, (), f"its own {exit_words}")
    return Verdict(Cause.UNKNOWN, (), f"ended {state}")


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    #: The whole story in one line, for the journal.
    reason: str
    #: Nodes to add to the job's ExcNodeList.
    exclude: tuple[str, ...] = ()
    #: Earliest start (epoch) after the back-off; None: no back-off.
    begin_at: float | None = None
    #: Retries used after this one.
    attempt: int = 0
    #: Retries allowed.
    allowed: int = 0


def backoff(attempt: int, settings: Settings) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): doubling, capped."""
    life = settings.lifecycle
    return min(life.max_backoff, life.backoff * 2 ** max(0, attempt - 1))


def decide_retry(verdict: Verdict, *, can_checkpoint: bool, job_class: str | None,
                 asked: int | None, retries_done: int, already_excluded: Sequence[str],
                 settings: Settings, now: float) -> RetryDecision:
    """Whether a run that ended with ``verdict`` is retried, and how."""
    allowed = settings.retries_of(job_class, asked)
    if not verdict.not_own_fault:
        return RetryDecision(False, f"not retried: {verdict.evidence} (its own end)",
                             allowed=allowed, attempt=retries_done)
    if not settings.lifecycle.retry:
        return RetryDecision(False, f"not retried: retries are off (lifecycle.retry); "
                             f"{verdict.evidence}", allowed=allowed, attempt=retries_done)
    if not can_checkpoint:
        return RetryDecision(False, f"not retried: the job cannot resume from a checkpoint "
                             f"(no --checkpoint); {verdict.evidence}", allowed=allowed,
                             attempt=retries_done)
    if retries_done >= allowed:
        return RetryDecision(False, f"not retried: all {allowed} retr"
                             f"{'y' if allowed == 1 else 'ies'} used; {verdict.evidence}",
                             allowed=allowed, attempt=retries_done)
    attempt = retries_done + 1
    wait = backoff(attempt, settings)
    exclude = tuple(sorted(set(already_excluded) | set(verdict.suspects)))
    away = f", away from {','.join(verdict.suspects)}" if verdict.suspects else ""
    return RetryDecision(
        True, f"retry {attempt} of {allowed} from its checkpoint{away} after "
        f"{wait:.0f}s: {verdict.evidence}", exclude=exclude, begin_at=now + wait,
        attempt=attempt, allowed=allowed)


# ------------------------------------------------------------------ node health


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """A run on ``node`` that ended for a reason not its own."""

    node: str
    job_id: int
    user: str
    at: float
    cause: str


@dataclass(frozen=True, slots=True)
class Suspicion:
    node: str
    jobs: tuple[int, ...]
    users: int
    #: The evidence in words; the drain reason starts with the site's prefix.
    evidence: str
    #: True: threshold reached and a drain is allowed now.
    drain: bool
    #: Why a node over the threshold is not drained (share limit, last of its kind).
    held_back: str = ""
    #: The node is out of service already (drained, down): Slurm's words.
    out_of_service: str = ""

    @property
    def over_threshold(self) -> bool:
        return self.drain or bool(self.held_back) or bool(self.out_of_service)


def hardware_kind(node: Node) -> tuple[tuple[str, ...], int]:
    """Nodes of one kind can stand in for each other: GPU types and count."""
    return node.gpu_types, node.gpus


def drained_by_us(node: Node, settings: Settings) -> bool:
    return node.reason.startswith(settings.node_health.reason_prefix) and bool(
        node.flags & {"DRAIN", "DRAINED", "DRAINING"})


def _window_words(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:.0f}s"


def suspicion(failures: Iterable[NodeFailure], nodes: Sequence[Node], settings: Settings,
              now: float) -> list[Suspicion]:
    """Suspect nodes, worst first; ``drain`` set on those that may be drained now."""
    health = settings.node_health
    since = now - health.window
    by_node: dict[str, list[NodeFailure]] = {}
    for f in failures:
        if f.at >= since:
            by_node.setdefault(f.node, []).append(f)
    known = {n.name: n for n in nodes}
    total = len(nodes)
    budget = math.floor(health.max_drained_share * total + 1e-9)
    drained = sum(1 for n in nodes if drained_by_us(n, settings))
    # Schedulable nodes per kind of hardware, to keep the last one of each.
    usable: dict[tuple[tuple[str, ...], int], int] = {}
    for n in nodes:
        if n.schedulable:
            usable[hardware_kind(n)] = usable.get(hardware_kind(n), 0) + 1
    ranked = sorted(by_node.items(), key=lambda kv: (-len({f.user for f in kv[1]}),
                                                     -len(kv[1]), kv[0]))
    out: list[Suspicion] = []
    for name, fails in ranked:
        node = known.get(name)
        if node is None:
            continue
        jobs = tuple(sorted({f.job_id for f in fails}))
        users = len({f.user for f in fails})
        causes = sorted({f.cause for f in fails})
        evidence = (f"{health.reason_prefix} {len(jobs)} failed job(s) of {users} user(s) in "
                    f"{_window_words(health.window)}: jobs {','.join(map(str, jobs))} "
                    f"({','.join(causes)})")
        over = len(jobs) >= health.min_failures and users >= health.min_users
        if not over:
            out.append(Suspicion(name, jobs, users, evidence, False))
            continue
        if drained_by_us(node, settings) or not node.schedulable:
            out.append(Suspicion(name, jobs, users, evidence, False, out_of_service=(
                "+".join([node.state, *sorted(node.flags)])
                + (f" ({node.reason})" if node.reason else ""))))
            continue
        if not health.drain:
            out.append(Suspicion(name, jobs, users, evidence, False,
                                 "draining is off (node_health.drain)"))
            continue
        if drained + 1 > budget:
            out.append(Suspicion(name, jobs, users, evidence, False,
                                 f"share limit: {drained} of {total} node(s) drained by "
                                 f"slurmpolicy, at most {budget} "
                                 f"(node_health.max_drained_share {health.max_drained_share:g})"))
            continue
        kind = hardware_kind(node)
        if usable.get(kind, 0) <= 1:
            out.append(Suspicion(name, jobs, users, evidence, False,
                                 "the last schedulable node of its kind "
                                 f"({'/'.join(kind[0]) or 'no GPU type'} x{kind[1]})"))
            continue
        drained += 1
        usable[kind] -= 1
        out.append(Suspicion(name, jobs, users, evidence, True))
    return out


# ------------------------------------------------------------------- figures

#: Figure names, by what they measure (docs/lifecycle.md lists them).
LIFE_FIGURES = (
    "startup_success_ratio", "abnormal_exit_ratio", "checkpoint_success_ratio",
    "recovery_seconds_mean", "progress_recovery_seconds_mean", "retries_per_job",
    "queueing_share_mean", "gpu_hours_finished", "gpu_hours_allocated", "jobs_ended",
)


def _reported(row: Mapping[str, object]) -> dict[str, float]:
    text = row.get("reported")
    if not isinstance(text, str) or not text.startswith("{"):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def _f(row: Mapping[str, object], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def life_figures(rows: Iterable[Mapping[str, object]]) -> dict[tuple[str, str], dict[str, float]]:
    """Lifecycle figures of ended jobs, by (class, account).

    ``rows`` are the journal's per-job records (``life_jobs``) plus ``signals``
    and ``acks`` (checkpoint signals sent to the job, acknowledged ones).
    A ratio with nothing to divide is left out rather than shown as 0 or 1.
    """
    groups: dict[tuple[str, str], list[Mapping[str, object]]] = {}
    for row in rows:
        key = (str(row.get("job_class") or "?"), str(row.get("account") or "(none)"))
        groups.setdefault(key, []).append(row)
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, jobs in sorted(groups.items()):
        runs = sum(_f(r, "runs") for r in jobs)
        failed_starts = sum(_f(r, "failed_starts") for r in jobs)
        abnormal = sum(1 for r in jobs if r.get("cause") and Cause(str(r["cause"])).abnormal)
        signals = sum(_f(r, "signals") for r in jobs)
        acks = sum(_f(r, "acks") for r in jobs)
        recoveries = sum(_f(r, "recoveries") for r in jobs)
        shares = []
        for r in jobs:
            life = _f(r, "ended_at") - _f(r, "submit_time")
            if r.get("submit_time") is not None and life > 0:
                shares.append(min(1.0, _f(r, "pending_seconds") / life))
        finished = sum(max(0.0, _f(r, "gpu_seconds") - _f(r, "lost_gpu_seconds"))
                       for r in jobs if r.get("cause") == Cause.COMPLETED.value)
        figures: dict[str, float] = {
            "jobs_ended": float(len(jobs)),
            "abnormal_exit_ratio": abnormal / len(jobs),
            "retries_per_job": sum(_f(r, "retries") for r in jobs) / len(jobs),
            "gpu_hours_finished": finished / 3600.0,
            "gpu_hours_allocated": sum(_f(r, "gpu_seconds") for r in jobs) / 3600.0,
        }
        if runs:
            figures["startup_success_ratio"] = 1.0 - failed_starts / runs
        if signals:
            figures["checkpoint_success_ratio"] = min(1.0, acks / signals)
        if recoveries:
            figures["recovery_seconds_mean"] = sum(
                _f(r, "recovery_seconds") for r in jobs) / recoveries
            figures["progress_recovery_seconds_mean"] = sum(
                _f(r, "progress_recovery_seconds") for r in jobs) / recoveries
        if shares:
            figures["queueing_share_mean"] = sum(shares) / len(shares)
        # Figures the jobs reported themselves (``slurmpolicy ckpt report``).
        reported: dict[str, list[float]] = {}
        for r in jobs:
            for name, value in _reported(r).items():
                reported.setdefault(name, []).append(value)
        for name, values in sorted(reported.items()):
            figures[f"reported_{name}_mean"] = sum(values) / len(values)
        out[key] = figures
    return out
