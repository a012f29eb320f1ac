"""The job's side of the checkpoint handshake, for Python training scripts.

Owns how a job tells slurmpolicy "my checkpoint is written": it updates its
*own* Slurm record, the job ``comment``, which only its owner and admins may
change, with a token ``ckpt:<epoch seconds>`` (read back by
:func:`slurmpolicy.jobpolicy.last_checkpoint`). Other text in the comment is
kept; older ``ckpt:`` tokens are replaced. No network port, no daemon address.

Standard library only, and imported by ``slurmpolicy ckpt ack`` too, so that
it costs a training job nothing::

    import slurmpolicy.job as spjob

    def save():
        torch.save(state, "ckpt.pt")

    spjob.install(save)          # on the checkpoint signal: save(), then ack
    ...
    save(); spjob.checkpointed() # after a periodic checkpoint (optional)

After acknowledging, the job keeps running: slurmpolicy requeues it (Slurm
stops it and later starts it again with ``SLURM_RESTART_COUNT`` set), and the
script resumes from its checkpoint. A job that exits instead is simply done.

Until the daemon's requeue, the job trains on, and that work is lost. With
``requeue=True`` (``slurmpolicy ckpt ack --requeue``) the job requeues itself
right after its ack, as PyTorch Lightning's auto-requeue does, but only when
the daemon marked it as the victim of a preemption still open: the mark
``preempting=<preemption>:<restart count>`` in its ``admin_comment``, which
only admins can write. A signal the daemon sent for a preemption it then
called off (its mark is cleared), or Slurm's own ``--signal`` before the time
limit, finds no mark: the job just goes on.
"""

from __future__ import annotations

import os
import re
import shutil
import signal as signal_mod
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ACK_PREFIX = "ckpt:"
#: Signal slurmpolicy sends when the job's directives do not name one.
DEFAULT_SIGNAL = "USR1"
_TIMEOUT = 30.0


class HandshakeError(RuntimeError):
    """The acknowledgement could not be written (no job id, scontrol refused...)."""


def job_id_from_env(environ: dict[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    text = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    if not text.isdigit():
        raise HandshakeError("no job id: $SLURM_JOB_ID is not set (pass --job N outside a job)")
    return int(text)


def restart_count_from_env(environ: dict[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    text = env.get("SLURM_RESTART_COUNT", "0")
    return int(text) if text.isdigit() else 0


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise HandshakeError(f"{name} not found on $PATH; the acknowledgement needs Slurm's tools")
    return found


def _run(args: list[str]) -> str:
    try:
        out = subprocess.run(args, capture_output=True, timeout=_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise HandshakeError(f"{args[0]} did not answer in {_TIMEOUT:.0f}s") from exc
    if out.returncode != 0:
        message = out.stderr.decode(errors="replace").strip() or f"exit status {out.returncode}"
        raise HandshakeError(f"{' '.join(args[:3])}: {message}")
    return out.stdout.decode(errors="replace")


def read_comment(job_id: int) -> str:
    """The job's current comment (squeue's %k prints it whole)."""
    text = _run([_tool("squeue"), "--noheader", "--jobs", str(job_id), "--format", "%k"])
    comment = text.rstrip("\n")
    # squeue shows "(null)" for an unset comment.
    return "" if comment.strip() in ("(null)", "") else comment.strip()


#: Written with an ack by a job about to requeue itself (``requeuing:<restart
#: count>``): the daemon leaves it a few seconds to, rather than race it.
REQUEUING_PREFIX = "requeuing:"


def merge_ack(comment: str, stamp: int, restart_count: int | None = None, *,
              requeuing: bool = False) -> str:
    """``comment`` with its ckpt: tokens replaced by one for ``stamp`` (and, with
    ``requeuing``, a ``requeuing:`` token for ``restart_count``; an older one goes)."""
    kept = [t for t in comment.split()
            if not t.startswith(ACK_PREFIX) and not t.startswith(REQUEUING_PREFIX)]
    token = f"{ACK_PREFIX}{stamp}" + (f":{restart_count}" if restart_count is not None else "")
    extra = [f"{REQUEUING_PREFIX}{restart_count or 0}"] if requeuing else []
    return " ".join([*kept, token, *extra])


def requeuing(comment: str, restart_count: int) -> bool:
    """The job's comment says it is requeuing itself in its run ``restart_count``."""
    return f"{REQUEUING_PREFIX}{restart_count}" in comment.split()


def acknowledge(job_id: int | None = None, *, restart_count: int | None = None,
                stamp: float | None = None, requeuing: bool = False) -> int:
    """Write ``ckpt:<now>`` into the job's comment; returns the stamp written.

    Call it after the checkpoint is safely on disk: the daemon may requeue the
    job as soon as it sees the acknowledgement. ``requeuing``: say that the
    job requeues itself next (:func:`acknowledge_and_requeue`).
    """
    jid = job_id_from_env() if job_id is None else job_id
    when = int(time.time() if stamp is None else stamp)
    comment = merge_ack(read_comment(jid), when, restart_count, requeuing=requeuing)
    _run([_tool("scontrol"), "update", f"jobid={jid}", f"comment={comment}"])
    return when


#: The daemon's mark in a victim's admin_comment while its preemption is open.
MARK_PREFIX = "preempting="


def preemption_mark(admin_comment: str) -> tuple[str, int] | None:
    """``(preemption id, restart count)`` of the daemon's mark, or None."""
    for token in admin_comment.split():
        if token.startswith(MARK_PREFIX):
            pid, sep, count = token[len(MARK_PREFIX):].rpartition(":")
            if sep and pid and count.isdigit():
                return pid, int(count)
    return None


def without_mark(admin_comment: str) -> str:
    """``admin_comment`` with the daemon's mark taken out, the rest kept."""
    return " ".join(t for t in admin_comment.split() if not t.startswith(MARK_PREFIX))


def with_mark(admin_comment: str, preemption_id: str, restart_count: int) -> str:
    """``admin_comment`` marked for ``preemption_id`` (an older mark replaced)."""
    if any(c.isspace() for c in preemption_id) or not preemption_id:
        raise ValueError(f"invalid preemption id {preemption_id!r}; allowed: no spaces")
    return " ".join([*without_mark(admin_comment).split(),
                     f"{MARK_PREFIX}{preemption_id}:{restart_count}"])


#: squeue pads -O fields to their width: one longer than any admin_comment ours.
_ADMIN_COMMENT_FIELD = "admin_comment:4096"


def read_admin_comment(job_id: int) -> str:
    """The job's admin_comment (``squeue -O admin_comment``, Slurm 22.05 to 25.11)."""
    text = _run([_tool("squeue"), "--noheader", "--jobs", str(job_id),
                 "--Format", _ADMIN_COMMENT_FIELD]).strip()
    return "" if text == "(null)" else text


def acknowledge_and_requeue(job_id: int | None = None, *, restart_count: int | None = None,
                            stamp: float | None = None) -> tuple[int, str | None]:
    """:func:`acknowledge`, then requeue this job at once if the daemon marked it
    as a victim of an open preemption in this run (its restart count).

    Returns the stamp written and that preemption's id (None: not marked, the
    job goes on). The job stops having lost nothing, instead of training on
    until the daemon's requeue. The ack then says ``requeuing:<restart
    count>``, so that the daemon does not requeue it too (it waits a few
    seconds for the job's own requeue, then requeues it itself)."""
    jid = job_id_from_env() if job_id is None else job_id
    rc = restart_count_from_env() if restart_count is None else restart_count
    mark = preemption_mark(read_admin_comment(jid))
    pid = mark[0] if mark is not None and mark[1] == rc else None
    when = acknowledge(jid, restart_count=rc, stamp=stamp, requeuing=pid is not None)
    if pid is not None:
        _run([_tool("scontrol"), "requeue", str(jid)])
    return when, pid


#: Figures Slurm does not know (data loading throughput, time to the first
#: step...), reported by the job as ``spm:NAME=VALUE`` tokens of its comment.
METRIC_PREFIX = "spm:"
_METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def parse_metrics(pairs: list[str]) -> dict[str, float]:
    """``["data_mbps=250", ...]`` -> {"data_mbps": 250.0}; ValueError naming a bad one."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"{pair!r}: expected NAME=NUMBER with NAME of a-z, 0-9, _ "
                             "(at most 32, starting with a letter)")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{pair!r}: {value!r} is not a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(f"{pair!r}: {value!r} is not a finite number")
        out[name] = number
    return out


def merge_metrics(comment: str, metrics: dict[str, float]) -> str:
    """``comment`` with ``spm:`` tokens for ``metrics`` (others of ours kept)."""
    kept = [t for t in comment.split()
            if not (t.startswith(METRIC_PREFIX) and t[len(METRIC_PREFIX):].partition("=")[0]
                    in metrics)]
    return " ".join([*kept, *(f"{METRIC_PREFIX}{k}={v:g}" for k, v in metrics.items())])


def report_metrics(metrics: dict[str, float], job_id: int | None = None) -> str:
    """Write figures into the job's comment for the daemon; returns the new comment."""
    jid = job_id_from_env() if job_id is None else job_id
    comment = merge_metrics(read_comment(jid), metrics)
    _run([_tool("scontrol"), "update", f"jobid={jid}", f"comment={comment}"])
    return comment


#: A periodic checkpoint is reported the same way; the daemon uses it to
#: estimate the work a preemption would lose.
checkpointed = acknowledge


def _signal_number(name: str | int) -> int:
    if isinstance(name, int):
        return name
    text = name.upper()
    if text.isdigit():
        return int(text)
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(getattr(signal_mod, text))
    except AttributeError as exc:
        raise ValueError(f"unknown signal {name!r}; use a name like USR1, USR2, TERM") from exc


def install(save: Callable[[], Any], signal: str | int | None = None, *,
            job_id: int | None = None, on_error: Callable[[BaseException], Any] | None = None,
            in_thread: bool = True, requeue: bool = False) -> Callable[[], None]:
    """On the checkpoint signal: ``save()``, then acknowledge; with ``requeue``,
    then requeue the job if the daemon marked it (:func:`acknowledge_and_requeue`).

    ``signal`` defaults to $SPOLICY_CKPT_SIGNAL or USR1. The save runs in a
    thread by default so that the handler returns at once (a training step
    in progress is not interrupted mid-way by Python). Returns a function
    that uninstalls the handler.
    """
    signum = _signal_number(signal or os.environ.get("SPOLICY_CKPT_SIGNAL", DEFAULT_SIGNAL))
    done = threading.Event()

    def work() -> None:
        try:
            save()
            rc = restart_count_from_env()
            if requeue:
                acknowledge_and_requeue(job_id, restart_count=rc)
            else:
                acknowledge(job_id, restart_count=rc)
        except BaseException as exc:
            if on_error is not None:
                on_error(exc)
            else:
                print(f"slurmpolicy.job: checkpoint not acknowledged: {exc}", file=sys.stderr)
        finally:
            done.set()

    def handler(num: int, frame: Any) -> None:
        if in_thread:
            threading.Thread(target=work, name="slurmpolicy-ckpt", daemon=False).start()
        else:
            work()

    previous = signal_mod.signal(signum, handler)

    def uninstall() -> None:
        signal_mod.signal(signum, previous)

    return uninstall


def main(argv: list[str] | None = None) -> int:
    """``slurmpolicy-ckpt ack [--job N] [--restart-count R]`` (the console
    script), or ``python3 -m slurmpolicy.job ack``.

    The same acknowledgement as ``slurmpolicy ckpt ack``, for compute nodes
    where only the standard library is installed: this one file is all it needs.
    """
    import argparse

    # Installed as the console script slurmpolicy-ckpt too (same code, no click).
    prog = "slurmpolicy-ckpt" if sys.argv[0].endswith("slurmpolicy-ckpt") else \
        "python3 -m slurmpolicy.job"
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Acknowledge a checkpoint to slurmpolicy.")
    sub = parser.add_subparsers(dest="command", required=True)
    ack = sub.add_parser("ack", help="write ckpt:<now> into this job's comment")
    ack.add_argument("--job", type=int, default=None, help="job id (default $SLURM_JOB_ID)")
    ack.add_argument("--restart-count", type=int, default=None,
                     help="restart count to record (default $SLURM_RESTART_COUNT)")
    ack.add_argument("--requeue", action="store_true",
                     help="then requeue this job if slurmpolicy is preempting it")
    args = parser.parse_args(argv)
    rc = restart_count_from_env() if args.restart_count is None else args.restart_count
    try:
        if args.requeue:
            stamp, pid = acknowledge_and_requeue(args.job, restart_count=rc)
        else:
            stamp, pid = acknowledge(args.job, restart_count=rc), None
    except HandshakeError as exc:
        print(f"slurmpolicy: error: checkpoint not acknowledged, or not requeued: {exc}",
              file=sys.stderr)
        return 3
    print(f"{ACK_PREFIX}{stamp}")
    if pid is not None:
        print(f"requeued for preemption {pid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
