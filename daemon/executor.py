"""The executor: the only code that changes Slurm on the policy's behalf.

Owns carrying out a :class:`~slurmpolicy.policy.actions.Plan` through a
:class:`~slurmpolicy.slurm.client.SlurmClient`, journal first: the intent of
every Slurm call is on disk before the call, its outcome after. It also owns
the bookkeeping of the preemption state machine from what Slurm shows
(acknowledgement seen in the victim's comment, deadline passed, victim
ended, victim requeued), and the reconciliation of calls left unfinished by a
daemon that died mid-step.

Rules held here, whatever the plan says:

- never cancel a job (there is no call for it);
- at most one checkpoint signal per (preemption, job, restart count), and
  one requeue, only after the victim was signalled and then acknowledged or
  reached its deadline (keys name the preemption: none is reused after an
  abort);
- Slurm's "already pending", "already finished" and "invalid job id"
  answers mean the goal is reached;
- at most ``settings.daemon.max_slurm_calls_per_cycle`` calls per cycle,
  the safety-relevant ones (requeue, finish, signal) first;
- site factors are written in batches: the jobs that get the same value go
  in one call (``scontrol update jobid=1,2,3 sitefactor=V``, at most
  ``SITE_FACTOR_BATCH`` jobs), one journal step per call and one audit row
  per job;
- a new preemption in one cycle: journal it, reserve its nodes (a reservation
  that is not MAGNETIC, so no job uses it unless it names it), name that
  reservation on the beneficiary (``scontrol update jobid=N
  reservationname=R``), then signal its victims (the plan lists their signals
  after the StartPreemption); no signal while the nodes are not held for the
  beneficiary alone;
- a step Slurm refuses ``_RESERVE_TRIES`` times (reserve, bind, signal,
  requeue) aborts its preemption, with Slurm's words as the reason; an
  aborted or finished preemption first takes its reservation off a still
  pending beneficiary, then deletes it;
- only reservations that carry our (non-empty) prefix *and* that the journal
  recorded as made by us are updated or deleted; an admin's reservation is
  never touched, whatever its name;
- before its signal, a victim whose admin_comment our job_submit plugin wrote
  is marked ``preempting=<preemption>:<restart count>`` there, so that it may
  requeue itself right after its ack (``slurmpolicy ckpt ack --requeue``,
  :mod:`slurmpolicy.job`) instead of training on, for nothing, until our
  requeue; an elastic victim is not (its requeue shrinks it). A mark whose
  preemption is no longer open (aborted, done, or unknown to this journal) is
  taken off a job still running in that restart, every cycle: a signal sent
  for nothing must not make the job requeue itself.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from slurmpolicy.durations import humanize
from slurmpolicy.errors import (
    JobAlreadyFinished,
    JobAlreadyPending,
    JobGone,
    SlurmError,
    SlurmUnavailable,
)
from slurmpolicy.job import MARK_PREFIX, preemption_mark, requeuing, with_mark, without_mark
from slurmpolicy.jobpolicy import (
    PREFIX,
    Checkpoint,
    last_checkpoint,
    parse_admin_comment,
    read_acks,
)
from slurmpolicy.model import Job, Snapshot
from slurmpolicy.policy.actions import (
    Action,
    Annotate,
    CreateReservation,
    DeleteReservation,
    FinishPreemption,
    Plan,
    PreemptionState,
    Requeue,
    SetBeginTime,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    UpdateReservation,
    VictimState,
    in_execution_order,
    site_factor_batches,
)
from slurmpolicy.policy.preemption import checkpoint_age_basis, exited_to_continue
from slurmpolicy.protocol import effective_policy
from slurmpolicy.settings import Settings
from slurmpolicy.slurm.client import ReservationSpec, SignalTarget, SlurmClient
from slurmpolicy.store import FAILED, OK, REACHED, STARTED, UNKNOWN, Journal

log = logging.getLogger("slurmpolicy.daemon")
_site_factor = attrgetter("site_factor")

#: Starvation reservations: IGNORE_JOBS because the nodes are busy when we
#: reserve them; MAGNETIC so that the waiting job uses the reservation without
#: being modified (only its user may use it).
RESERVATION_FLAGS = ("IGNORE_JOBS", "MAGNETIC")
#: A preemption's reservation is not MAGNETIC: only a job that names it may
#: use it, and the executor names it on the beneficiary alone. Another job of
#: the same user does not take the freed nodes.
PREEMPTION_FLAGS = ("IGNORE_JOBS",)
#: Reservations of a preemption last the beneficiary's time limit plus this,
#: or a day when it has none; they are deleted once the work is done.
_DEFAULT_RESERVATION = 86400.0
#: A preemption whose reservation Slurm refused this often is aborted.
_RESERVE_TRIES = 3
_RESERVATION_MARGIN = 3600.0


#: SlurmUnavailable messages that prove the request never reached slurmctld.
_NOT_SENT = re.compile(r"connect failure|connection refused|munge|configuration|"
                       r"unable to establish|not found in", re.IGNORECASE)


#: Durations and amounts of work in a note ("within 3m", "loses 1.5 GPU-h"): they
#: drift from cycle to cycle without changing what it says. Job ids and host
#: names stay: a note about another job or host is another note.
_NUMBERS = re.compile(r"\b(?:\d+[dhms])+\b|\d+(?:\.\d+)? GPU-h")

#: Steps whose repetition would hurt a job: their intent is fsync'd before the call.
_DURABLE = frozenset({"signal", "requeue", "reserve", "bind"})
#: Seconds a marked victim that acked with ``requeuing:`` is left to requeue
#: itself before we do: its own ``scontrol requeue`` follows its ack within a
#: second; the bound is for one that failed (or a comment that lied).
SELF_REQUEUE_WAIT = 10.0


class CallBudgetExhausted(Exception):
    """Internal: the per-cycle cap on Slurm calls is reached."""


@dataclass
class CycleReport:
    """What one execute() (and its reconcile) did, for metrics and logs."""

    calls: int = 0
    deferred: int = 0
    #: (action kind, outcome) -> count
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    acks: int = 0
    deadline_misses: int = 0
    lost_gpu_seconds: float = 0.0
    requeued: list[int] = field(default_factory=list)
    signalled: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Victims signalled, by protocol (spolicy, slurm-signal).
    signals_by_protocol: Counter[str] = field(default_factory=Counter)
    #: (protocol, how: ack, self-requeue, exit) -> acknowledgements seen.
    acks_by: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: (protocol, seconds from the signal to the acknowledgement), one per ack.
    ack_seconds: list[tuple[str, float]] = field(default_factory=list)
    #: Deadline misses by protocol.
    misses_by_protocol: Counter[str] = field(default_factory=Counter)

    def merge(self, other: CycleReport) -> None:
        self.calls += other.calls
        self.deferred += other.deferred
        self.outcomes.update(other.outcomes)
        self.acks += other.acks
        self.deadline_misses += other.deadline_misses
        self.lost_gpu_seconds += other.lost_gpu_seconds
        self.requeued += other.requeued
        self.signalled += other.signalled
        self.notes += other.notes
        self.signals_by_protocol.update(other.signals_by_protocol)
        self.acks_by.update(other.acks_by)
        self.ack_seconds += other.ack_seconds
        self.misses_by_protocol.update(other.misses_by_protocol)


def _ack_time(job: Job, now: float) -> float | None:
    """The victim's latest valid ack (finite, not beyond ``now`` + the clock skew)."""
    return last_checkpoint(job.comment, now)


def checkpoint_of(job: Job) -> Checkpoint | None:
    """The job's checkpoint promise: its directives, else its own --signal."""
    return effective_policy(parse_admin_comment(job.admin_comment), job).checkpoint


def _acknowledged(job: Job, signalled_at: float, now: float) -> bool:
    """The victim wrote a checkpoint acknowledgement at or after the signal.

    Jobs write whole seconds; compare with the signal's whole second so that
    an ack written within the same second as the signal counts. An ack
    stamped in the future (beyond the clock skew), or not a finite number,
    does not count (see :func:`slurmpolicy.jobpolicy.read_acks`).
    """
    ack = _ack_time(job, now)
    return ack is not None and ack >= math.floor(signalled_at)


class Executor:
    """Carries out plans; one per daemon. ``client`` may be None in dry-run."""

    def __init__(self, client: SlurmClient | None, journal: Journal, settings: Settings, *,
                 dry_run: bool = False, clock: Callable[[], float] | None = None) -> None:
        if client is None and not dry_run:
            raise ValueError("an Executor without a Slurm client can only dry-run")
        self.client = client
        self.journal = journal
        self.settings = settings
        self.dry_run = dry_run
        self._clock = clock or journal.now
        self._budget = settings.daemon.max_slurm_calls_per_cycle
        self._report = CycleReport()
        #: Polled between actions: SIGTERM lets the current step finish, then stops.
        self.should_stop: Callable[[], bool] = lambda: False
        #: Fault injection for the crash tests: ``kill-after:<step kind>`` makes the
        #: daemon SIGKILL itself right after such a Slurm call succeeded and
        #: before its outcome is journalled (the worst moment to die).
        self._fault = os.environ.get("SLURMPOLICY_FAULT", "")
        #: The note in force per job: (its words without numbers, audit id, since).
        self._annotations: dict[int | None, tuple[str, int, float] | None] = {}
        #: Refused acks already audited, by (preemption, job, restart, what).
        self._refused_noted: set[tuple[str, int, int, str]] = set()
        #: Elastic victims requeued to be shrunk (policy/elastic.py): job id ->
        #: the Requeue. Kept in memory: after a daemon restart the victim simply
        #: restarts at its old size, as Slurm leaves it.
        self._shrinks: dict[int, Requeue] = {}
        #: Requeue keys whose wait for the victim's own requeue was audited.
        self._self_requeue_noted: set[str] = set()

    # ------------------------------------------------------------- plumbing
    def _call(self, key: str, kind: str, fn: Callable[[], None], *, job_id: int | None = None,
              restart_count: int | None = None, preemption_id: str | None = None,
              params: dict[str, Any] | None = None,
              reached: tuple[type[SlurmError], ...] = ()) -> tuple[str, str]:
        """Journal the intent, make one Slurm call, journal its outcome.

        Returns (status, Slurm's message). ``reached`` lists the errors that
        mean the goal is already reached. SlurmUnavailable propagates (the
        cycle stops; the step stays ``started`` and is reconciled next time).
        """
        if self._report.calls >= self._budget:
            raise CallBudgetExhausted
        step = self.journal.begin_step(key, kind, job_id=job_id, restart_count=restart_count,
                                       preemption_id=preemption_id, params=params,
                                       durable=kind in _DURABLE)
        self._report.calls += 1
        try:
            fn()
        except SlurmUnavailable as exc:
            # When the request surely never reached slurmctld, say so: the step
            # may then be retried. A timeout is ambiguous and stays ``started``,
            # for reconcile() to judge from the next snapshot.
            text = f"{exc} {exc.slurm_message}"
            if _NOT_SENT.search(text):
                self.journal.finish_step(step, FAILED, f"not sent: {exc}")
            raise
        except reached as exc:
            self.journal.finish_step(step, REACHED, f"{type(exc).__name__}: {exc}")
            return REACHED, type(exc).__name__
        except (SlurmError, ValueError) as exc:
            # ValueError: the adapter refused the arguments before calling Slurm.
            message = getattr(exc, "slurm_message", "") or str(exc)
            self.journal.finish_step(step, FAILED, message)
            return FAILED, message
        if self._fault == f"kill-after:{kind}":
            log.warning("fault injection: SIGKILL after %s", key)
            os.kill(os.getpid(), signal.SIGKILL)
        self.journal.finish_step(step, OK)
        return OK, ""

    def _audit(self, action: Action | None, kind: str, reason: str, outcome: str, *,
               job_id: int | None = None, jobs: tuple[int, ...] = (),
               detail: dict[str, Any] | None = None, at: float | None = None,
               quiet: bool = False) -> int:
        self._report.outcomes[(kind, outcome.split(":", 1)[0])] += 1
        record = self.journal.audit(kind, reason, outcome, job_id=job_id, jobs=jobs,
                                    detail=detail, dry_run=self.dry_run, at=at)
        if outcome.startswith("failed"):
            # Slurm refused: one line naming the job and where its story is.
            log.warning("%s job=%s %s; planned again next cycle (slurmpolicy log --job %s)",
                        kind, job_id, outcome, job_id)
        elif not quiet:
            log.info("%s job=%s %s: %s", kind, job_id, outcome, reason)
        return record

    # ----------------------------------------------------------- reconcile
    def reconcile(self, snapshot: Snapshot, now: float | None = None) -> CycleReport:
        """Bring the journal in line with what Slurm shows; no Slurm calls but
        the cleanup of our own reservations (within the call budget).

        Run before each plan; at start-up it also resolves the calls a dead
        daemon left ``started``.
        """
        now = self._clock() if now is None else now
        self._report = CycleReport()
        if self.dry_run:
            return self._report
        with self.journal.transaction():
            self._resolve_unfinished(snapshot)
            self._observe_victims(snapshot, now)
            self._advance_preemptions(snapshot)
        return self._report

    def _resolve_unfinished(self, snapshot: Snapshot) -> None:
        for step in self.journal.unfinished_steps():
            kind, job_id = step["kind"], step["job_id"]
            rc, pid = step["restart_count"], step["preemption_id"]
            job = snapshot.job(job_id) if job_id is not None else None
            note = f"step {step['key']} was in flight when the daemon stopped"
            if kind == "signal" and pid is not None:
                # It may have reached the job: count it as sent, never send it twice.
                params = step["params"]
                self.journal.update_victim(
                    pid, job_id, rc, state=VictimState.SIGNALLED,
                    signal=params.get("signal"),
                    signalled_at=float(math.floor(step["started_at"])),
                    deadline=params.get("deadline"))
                self.journal.finish_step(step["id"], UNKNOWN, note + "; counted as sent")
                self._audit(None, "Reconcile", note + "; counted as sent, not repeated",
                            "reconciled", job_id=job_id, jobs=(job_id,))
            elif kind == "requeue" and pid is not None:
                done = job is None or not job.is_running or job.restart_count > rc
                status = REACHED if done else FAILED
                self.journal.finish_step(step["id"], status,
                                         note + ("; Slurm shows it done" if done
                                                 else "; not carried out"))
                if done:
                    self._victim_requeued(pid, job_id, rc, job, step["started_at"])
                self._audit(None, "Reconcile", note + ("; Slurm shows the job requeued"
                                                       if done else "; it will be retried"),
                            "reconciled", job_id=job_id, jobs=(job_id,))
            elif kind == "reserve" and pid is not None:
                name = step["params"].get("name", "")
                found = snapshot.reservation(name)
                self.journal.finish_step(step["id"], REACHED if found else FAILED, note)
                if found is not None:
                    # Ours; carry_on() names it on the beneficiary.
                    self.journal.record_reservation(name, job_id, found.nodes,
                                                    found.start_time or 0.0, 0.0,
                                                    state="preemption")
            elif kind == "bind" and pid is not None:
                named = job is not None and job.reservation == step["params"].get("name")
                self.journal.finish_step(step["id"], REACHED if named else FAILED, note)
                if named:
                    self.journal.set_preemption_state(pid, PreemptionState.RESERVED)
            else:
                # Site factors, begin times and reservations: the next plan
                # re-emits whatever is still needed; these calls are idempotent.
                self.journal.finish_step(step["id"], UNKNOWN, note)

    def _victim_requeued(self, pid: str, job_id: int, rc: int, job: Job | None,
                         at: float) -> None:
        victim = self.journal.victim(pid, job_id, rc)
        if victim is None or victim["state"] == VictimState.REQUEUED.value:
            return
        self.journal.update_victim(pid, job_id, rc, state=VictimState.REQUEUED, requeued_at=at)
        self.journal.record_preempted(job_id, at)
        lost = self._lost_gpu_seconds(job, victim, at)
        self._report.lost_gpu_seconds += lost
        self._report.requeued.append(job_id)

    def _lost_gpu_seconds(self, job: Job | None, victim: dict[str, Any], at: float) -> float:
        """GPU-seconds of work since the victim's last checkpoint (or its start)."""
        if job is None:
            return 0.0
        gpus = victim.get("gpus") or job.gpus
        if job.start_time is None and _ack_time(job, at) is None:
            return 0.0
        ck = checkpoint_of(job)
        since = checkpoint_age_basis(job, ck.interval if ck is not None else None, at)
        if victim.get("acked_at") is not None:
            # It saved when it answered the signal (an ack, an exit, a self-requeue).
            since = max(since, float(victim["acked_at"]))
            if requeuing(job.comment, int(victim["restart_count"])):
                return 0.0  # `ckpt ack --requeue`: it stopped itself right after its ack
        return max(0.0, at - since) * gpus

    def _note_ack(self, victim: dict[str, Any], job: Job, at: float, how: str,
                  words: str) -> None:
        """Record a victim's acknowledgement once: its time, how it answered,
        the audit line (which protocol it spoke), the cycle's figures."""
        pid, job_id, rc = victim["preemption_id"], victim["job_id"], victim["restart_count"]
        signalled_at = float(victim["signalled_at"] or at)
        protocol = victim.get("protocol") or "spolicy"
        self.journal.update_victim(pid, job_id, rc, acked_at=at, ack_how=how)
        self._report.acks += 1
        self._report.acks_by[(protocol, how)] += 1
        self._report.ack_seconds.append((protocol, max(0.0, at - signalled_at)))
        self._audit(None, "CheckpointAck",
                    f"victim {job_id} {words} {max(0.0, at - signalled_at):.0f}s after the"
                    f" signal (protocol {protocol})", "observed", job_id=job_id, jobs=(job_id,),
                    detail={"protocol": protocol, "how": how,
                            "seconds": max(0.0, at - signalled_at)})

    def _observe_victims(self, snapshot: Snapshot, now: float) -> None:
        for victim in self.journal.open_victims():
            pid, job_id, rc = victim["preemption_id"], victim["job_id"], victim["restart_count"]
            state = VictimState(victim["state"])
            job = snapshot.job(job_id)
            answering = state in (VictimState.SIGNALLED, VictimState.ACKNOWLEDGED,
                                  VictimState.DEADLINE)
            if job is not None and job.restart_count == rc and answering and \
                    exited_to_continue(job, checkpoint_of(job)) and \
                    not self.journal.has_step(_requeue_key(pid, job_id, rc), (OK, REACHED)):
                # Saved and exited after the signal (NeMo-style): the planner
                # requeues the finished batch job so that it continues.
                if victim["acked_at"] is None and state is VictimState.SIGNALLED:
                    ended = job.end_time if job.end_time is not None else now
                    deadline = victim["deadline"]
                    if deadline is None or ended <= float(deadline) + 1:
                        self._note_ack(victim, job, ended, "exit",
                                       f"saved and exited ({job.state.value})")
                    elif not victim["deadline_noted"]:
                        self._miss(victim, job_id, "it exited after its deadline; it is "
                                   "requeued to continue")
                continue
            if job is not None and (job.restart_count > rc or (
                    job.is_pending and state is not VictimState.PLANNED)):
                # Requeued (by us, in a step whose outcome was lost, by Slurm, or
                # by the job itself: Lightning and submitit answer the signal so).
                # Before the look at ended jobs: behind an epilog Slurm shows a
                # requeued job COMPLETING (22.05, pyslurm: read as COMPLETED)
                # with its restart count already raised.
                if state is VictimState.SIGNALLED and victim["acked_at"] is None and \
                        not self.journal.has_step(_requeue_key(pid, job_id, rc)):
                    self._note_ack(victim, job, now, "self-requeue", "requeued itself")
                self._victim_requeued(pid, job_id, rc, job, now)
                continue
            if job is None or job.state.is_finished:
                if state in (VictimState.ACKNOWLEDGED, VictimState.DEADLINE) and \
                        self.journal.has_step(_requeue_key(pid, job_id, rc), (OK, REACHED)):
                    continue
                self.journal.update_victim(pid, job_id, rc, state=VictimState.ENDED)
                self._audit(None, "VictimEnded",
                            f"victim {job_id} ended by itself"
                            f" ({job.state.value if job else 'gone from Slurm'}); no requeue",
                            "observed", job_id=job_id, jobs=(job_id,))
                continue
            if state is VictimState.SIGNALLED:
                # Note the ack or the missed deadline once (audit, metrics); the
                # state moves to acknowledged/deadline when the requeue is made,
                # so that the planner words its reason from what it sees.
                signalled_at = float(victim["signalled_at"] or now)
                self._note_refused_acks(pid, job, rc, now)
                if victim["acked_at"] is None and _acknowledged(job, signalled_at, now):
                    self._note_ack(victim, job, _ack_time(job, now) or now, "ack",
                                   "acknowledged its checkpoint")
                elif victim["acked_at"] is None and victim["deadline"] is not None and \
                        now >= float(victim["deadline"]) and not victim["deadline_noted"]:
                    self._miss(victim, job_id, "it is requeued anyway")

    def _miss(self, victim: dict[str, Any], job_id: int, then: str) -> None:
        pid, rc = victim["preemption_id"], victim["restart_count"]
        self.journal.update_victim(pid, job_id, rc, deadline_noted=1)
        self.journal.add_missed_ack(job_id)
        self._report.deadline_misses += 1
        self._report.misses_by_protocol[victim.get("protocol") or "spolicy"] += 1
        self._audit(None, "CheckpointDeadline",
                    f"victim {job_id} did not acknowledge its checkpoint by its"
                    f" deadline; {then}", "observed", job_id=job_id, jobs=(job_id,))

    def _note_refused_acks(self, pid: str, job: Job, rc: int, now: float) -> None:
        """Journal, once each, the acks of a signalled victim that do not count."""
        for what in read_acks(job.comment, now)[1]:
            key = (pid, job.job_id, rc, what.split(" ")[0])
            if key in self._refused_noted:
                continue
            self._refused_noted.add(key)
            self._audit(None, "CheckpointAck",
                        f"victim {job.job_id}: a checkpoint acknowledgement in its comment "
                        f"was refused: {what}", "refused", job_id=job.job_id,
                        jobs=(job.job_id,))

    def _advance_preemptions(self, snapshot: Snapshot) -> None:
        for p in self.journal.preemptions(open_only=True):
            victims = self.journal.victims_of(p["preemption_id"])
            states = {VictimState(v["state"]) for v in victims}
            current = PreemptionState(p["state"])
            if victims and states <= {VictimState.REQUEUED, VictimState.ENDED}:
                target = PreemptionState.REQUEUED
            elif current is PreemptionState.RESERVED and VictimState.PLANNED not in states:
                target = PreemptionState.SIGNALLED
            else:
                continue
            if target is not current:
                self.journal.set_preemption_state(p["preemption_id"], target)

    # -------------------------------------------------------------- execute
    def execute(self, plan: Plan, snapshot: Snapshot, now: float | None = None) -> CycleReport:
        """Carry out ``plan`` (call reconcile() first, on the same snapshot)."""
        now = self._clock() if now is None else now
        report = self._report
        actions = in_execution_order(plan.actions)
        pending = list(actions)
        # What the planner saw (not a Slurm call): the fragmentation bonus's memory.
        if plan.fragmented_since is not None:
            self.journal.set_fragmented(plan.fragmented_since)
        try:
            self._cleanup_orphans(snapshot)
            self._shrink_requeued(snapshot)
            self._clear_stale_marks(snapshot)
            while pending and not self.should_stop():
                action = pending[0]
                if isinstance(action, SetSiteFactor) and not self.dry_run:
                    batch = [a for a in pending if isinstance(a, SetSiteFactor)]
                    pending = [a for a in pending if not isinstance(a, SetSiteFactor)]
                    self._site_factors(batch, snapshot, now, pending)
                    continue
                self._one(action, snapshot, now)
                pending.pop(0)
            # The preemptions this plan called off: their victims' marks go now.
            self._clear_stale_marks(snapshot)
        except CallBudgetExhausted:
            report.deferred += plan.held_back + len(
                [a for a in pending if not isinstance(a, Annotate)])
            report.notes.append(f"call budget of {self._budget} reached; "
                                f"{report.deferred} action(s) left for the next cycle")
            log.warning(report.notes[-1])
        else:
            if plan.held_back:
                # The planner left out the site factors this budget could never write.
                report.deferred += plan.held_back
                report.notes.append(f"call budget of {self._budget} reached; "
                                    f"{plan.held_back} site factor(s) left for the next cycle")
                log.warning(report.notes[-1])
        return report

    def _one(self, action: Action, snapshot: Snapshot, now: float) -> None:
        handler = getattr(self, f"_do_{action.kind}", None)
        if handler is None:
            self._audit(action, action.kind, action.reason, "skipped: unknown action")
            return
        if self.dry_run:
            job_id = getattr(action, "job_id", None) or getattr(action, "beneficiary", None)
            self._audit(action, action.kind, action.reason, "dry-run", job_id=job_id,
                        jobs=tuple(getattr(action, "victims", ())),
                        detail=_describe(action))
            return
        handler(action, snapshot, now)

    # Each handler: guard, journal, call, record, audit.
    def _do_Annotate(self, a: Annotate, snapshot: Snapshot, now: float) -> None:
        # The planner repeats its explanations every cycle: a note is recorded
        # once (durations that drift, like "within 3m", do not make it new, nor
        # does a restart of the daemon), and closed with how long it held
        # when another note replaces it.
        key = _NUMBERS.sub("#", a.reason)
        if a.job_id not in self._annotations:
            last = self.journal.last_audit("Annotate", a.job_id) if a.job_id is not None \
                else None
            first = self.journal.job_since(a.job_id) if a.job_id is not None else None
            self._annotations[a.job_id] = (
                (_NUMBERS.sub("#", last.reason), last.id, last.at)
                if last is not None and last.outcome == "noted"
                and (first is None or last.at >= first) else None)
        held = self._annotations[a.job_id]
        if held is not None and held[0] == key:
            return
        if held is not None:
            self.journal.set_audit_outcome(held[1], f"noted; held {humanize(now - held[2])}")
        record = self._audit(a, "Annotate", a.reason, "noted", job_id=a.job_id, at=now)
        self._annotations[a.job_id] = (key, record, now)

    def _do_SetSiteFactor(self, a: SetSiteFactor, snapshot: Snapshot, now: float) -> None:
        assert self.client is not None
        client = self.client
        status, msg = self._call(
            f"sitefactor:{a.job_id}:{a.site_factor}", "sitefactor",
            lambda: client.set_site_factor(a.job_id, a.site_factor), job_id=a.job_id,
            params={"site_factor": a.site_factor},
            reached=(JobGone, JobAlreadyFinished))
        if status == OK:
            self.journal.set_site_factor(a.job_id, a.site_factor)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail={"site_factor": a.site_factor, "previous": a.previous})

    def _site_factors(self, actions: list[SetSiteFactor], snapshot: Snapshot, now: float,
                      pending: list[Action]) -> None:
        """Every SetSiteFactor of the plan, jobs that share a value in one call.

        Batches go largest change first (the plan's order); when the call
        budget runs out, what is left goes back on ``pending`` (deferred).
        """
        batches = site_factor_batches(actions, _site_factor)
        for n, batch in enumerate(batches):
            if self.should_stop():
                pending[:0] = [a for b in batches[n:] for a in b]
                return
            try:
                self._site_factor_batch(batch, snapshot, now)
            except CallBudgetExhausted:
                pending[:0] = [a for b in batches[n:] for a in b]
                raise

    def _site_factor_batch(self, batch: list[SetSiteFactor], snapshot: Snapshot,
                           now: float) -> None:
        assert self.client is not None
        client = self.client
        write = getattr(client, "set_site_factors", None)
        if write is None or len(batch) == 1:
            # One job, or an adapter without batches: the single-job call.
            for a in batch:
                self._do_SetSiteFactor(a, snapshot, now)
            return
        value = batch[0].site_factor
        ids = [a.job_id for a in batch]
        refused: dict[int, SlurmError] = {}

        def call() -> None:
            refused.update(write(ids, value))

        status, msg = self._call(f"sitefactor:{value}:{ids[0]}:{len(ids)}", "sitefactor", call,
                                 params={"site_factor": value, "jobs": ids})
        rows = []
        for a in batch:
            error = refused.get(a.job_id)
            if status != OK:
                outcome = _outcome(status, msg)
            elif error is None:
                outcome = "ok"
            elif isinstance(error, (JobGone, JobAlreadyFinished)):
                outcome = f"reached: {type(error).__name__}"
            else:
                outcome = f"failed: {error.slurm_message or error}"
            self._report.outcomes[(a.kind, outcome.split(":", 1)[0])] += 1
            rows.append((a.job_id, a.reason, outcome,
                         {"site_factor": a.site_factor, "previous": a.previous,
                          "batch": len(ids)}))
        with self.journal.transaction():
            if status == OK:
                self.journal.set_site_factors({j: value for j in ids if j not in refused})
            self.journal.audit_many("SetSiteFactor", rows, dry_run=self.dry_run)
        refusals = [f"job {j}: {e}" for j, e in refused.items()
                    if not isinstance(e, (JobGone, JobAlreadyFinished))]
        (log.warning if status != OK or refusals else log.info)(
            "SetSiteFactor site_factor=%d jobs=%d call=1 %s%s", value, len(ids),
            "ok" if status == OK else _outcome(status, msg),
            f"; {len(refusals)} refused ({'; '.join(refusals[:3])})" if refusals else "")

    def _do_SetBeginTime(self, a: SetBeginTime, snapshot: Snapshot, now: float) -> None:
        assert self.client is not None
        client = self.client
        status, msg = self._call(
            f"begin:{a.job_id}:{a.begin_time}", "begintime",
            lambda: client.set_begin_time(a.job_id, a.begin_time), job_id=a.job_id,
            params={"begin_time": a.begin_time}, reached=(JobGone, JobAlreadyFinished))
        if status in (OK, REACHED):
            self.journal.set_begin_time(a.job_id, a.begin_time)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail={"begin_time": a.begin_time})

    def _prefixed(self, name: str) -> bool:
        prefix = self.settings.reservations.name_prefix
        return bool(prefix) and name.startswith(prefix)

    def _ours(self, name: str) -> bool:
        """Made by us: our prefix, and our journal's record of creating it."""
        return self._prefixed(name) and self.journal.reservation_state(name) is not None

    def _may_create(self, name: str, snapshot: Snapshot) -> str:
        """"" when we may create (or move our own) reservation ``name``; else why not."""
        if not self._prefixed(name):
            return f"reservation name {name!r} lacks our prefix"
        if snapshot.reservation(name) is not None and not self._ours(name):
            return f"reservation {name} exists and was not made by slurmpolicy"
        return ""

    def _spec(self, a: CreateReservation | UpdateReservation) -> ReservationSpec:
        return ReservationSpec(
            name=a.name, nodes=tuple(a.nodes), start_time=a.start_time,
            duration_minutes=max(1, math.ceil(a.duration / 60)), users=(a.user,),
            partition=a.partition, flags=RESERVATION_FLAGS)

    def _do_CreateReservation(self, a: CreateReservation, snapshot: Snapshot,
                              now: float) -> None:
        self._reservation(a, snapshot, create=snapshot.reservation(a.name) is None)

    def _do_UpdateReservation(self, a: UpdateReservation, snapshot: Snapshot,
                              now: float) -> None:
        self._reservation(a, snapshot, create=snapshot.reservation(a.name) is None)

    def _reservation(self, a: CreateReservation | UpdateReservation, snapshot: Snapshot,
                     create: bool) -> None:
        assert self.client is not None
        client = self.client
        problem = self._may_create(a.name, snapshot)
        if problem:
            self._audit(a, a.kind, a.reason, f"refused: {problem}", job_id=a.job_id)
            return
        spec = self._spec(a)
        fn = (lambda: client.create_reservation(spec)) if create else (
            lambda: client.update_reservation(spec))
        status, msg = self._call(f"resv:{a.name}:{a.start_time}", "reservation", fn,
                                 job_id=a.job_id, params={"name": a.name, "create": create})
        if status == OK:
            self.journal.record_reservation(a.name, a.job_id, a.nodes, a.start_time, a.duration)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail=_describe(a))

    def _do_DeleteReservation(self, a: DeleteReservation, snapshot: Snapshot,
                              now: float) -> None:
        if not self._ours(a.name):
            self._audit(a, a.kind, a.reason, "refused: not a slurmpolicy reservation",
                        job_id=a.job_id)
            return
        users = _jobs_in(snapshot, a.name)
        if users:
            # Slurm refuses while a job runs in it; _cleanup_orphans deletes it after.
            first = self.journal.reservation_state(a.name) != "orphan"
            if first:
                if self.journal.reservation_state(a.name) is None:
                    self.journal.record_reservation(a.name, a.job_id, (), now, 0.0,
                                                    state="orphan")
                else:
                    self.journal.set_reservation_state(a.name, "orphan")
                self._audit(a, a.kind, a.reason,
                            f"deferred: in use by job {users[0]}; deleted once it ends",
                            job_id=a.job_id)
            return
        status, msg = self._delete_reservation(a.name, a.job_id, snapshot)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail={"name": a.name})

    def _delete_reservation(self, name: str, job_id: int | None,
                            snapshot: Snapshot) -> tuple[str, str]:
        assert self.client is not None
        client = self.client
        if snapshot.reservation(name) is None or self.journal.reservation_state(name) == "deleted":
            self.journal.set_reservation_state(name, "deleted")
            return REACHED, "no such reservation"
        status, msg = self._call(f"resvdel:{name}", "reservation-delete",
                                 lambda: client.delete_reservation(name), job_id=job_id,
                                 params={"name": name})
        if status in (OK, REACHED):
            self.journal.set_reservation_state(name, "deleted")
        else:
            # Slurm refuses while a job runs in it: delete it later.
            self.journal.set_reservation_state(name, "orphan")
        return status, msg

    def _cleanup_orphans(self, snapshot: Snapshot) -> None:
        in_use = {p["reservation"] for p in self.journal.preemptions(open_only=True)}
        for row in self.journal.reservations("orphan"):
            if row["name"] in in_use:
                continue  # a new preemption of the same job took the name over
            resv = snapshot.reservation(row["name"])
            if resv is None:
                self.journal.set_reservation_state(row["name"], "deleted")
                continue
            if not _jobs_in(snapshot, row["name"]):
                status, msg = self._delete_reservation(row["name"], row["job_id"], snapshot)
                self._audit(None, "DeleteReservation",
                            f"reservation {row['name']} is no longer used", _outcome(status, msg),
                            job_id=row["job_id"])

    def _do_StartPreemption(self, a: StartPreemption, snapshot: Snapshot, now: float) -> None:
        jobs = (a.beneficiary, *a.victims)
        if self.journal.preemption(a.preemption_id) is not None:
            self._audit(a, a.kind, a.reason, "reached: already started",
                        job_id=a.beneficiary, jobs=jobs)
            return
        busy = {v["job_id"] for v in self.journal.open_victims()}
        taken = sorted(set(a.victims) & busy)
        beneficiary = snapshot.job(a.beneficiary)
        problem = ""
        if taken:
            problem = f"victim(s) {taken} already in another preemption"
        elif beneficiary is None or not beneficiary.is_pending:
            problem = f"beneficiary {a.beneficiary} is not pending"
        else:
            problem = self._may_create(a.reservation, snapshot)
        victims = []
        counts = a.restart_counts or (None,) * len(a.victims)
        for job_id, planned_rc in zip(a.victims, counts, strict=True):
            job = snapshot.job(job_id)
            if job is None or not job.is_running:
                problem = problem or f"victim {job_id} is not running"
                continue
            if planned_rc is not None and planned_rc != job.restart_count:
                problem = problem or f"victim {job_id} restarted since the plan"
                continue
            victims.append((job_id, job.restart_count, job.gpus))
        if problem:
            self._audit(a, a.kind, a.reason, f"refused: {problem}", job_id=a.beneficiary,
                        jobs=jobs)
            return
        assert beneficiary is not None
        self.journal.open_preemption(a.preemption_id, a.beneficiary, a.nodes, a.reservation,
                                     victims, a.reason, a.expected_lost_gpu_seconds)
        limit = a.duration or beneficiary.time_limit
        duration = (limit + _RESERVATION_MARGIN) if limit and math.isfinite(limit) else (
            _DEFAULT_RESERVATION)
        spec = ReservationSpec(
            name=a.reservation, nodes=tuple(a.nodes), start_time=now,
            duration_minutes=max(1, math.ceil(duration / 60)),
            users=(a.user or beneficiary.user,), flags=PREEMPTION_FLAGS)
        self._reserve(a.preemption_id, spec, a.beneficiary, snapshot)
        self._audit(a, a.kind, a.reason,
                    "ok" if self.journal.preemption(a.preemption_id)["state"]  # type: ignore[index]
                    == PreemptionState.RESERVED.value else "ok: reservation pending",
                    job_id=a.beneficiary, jobs=jobs, detail=_describe(a))

    def _reserve(self, pid: str, spec: ReservationSpec, beneficiary: int,
                 snapshot: Snapshot) -> None:
        """Reserve the beneficiary's nodes; an existing reservation of that name
        (left by an earlier preemption of the same job) is moved, not adopted."""
        assert self.client is not None
        client = self.client
        exists = snapshot.reservation(spec.name) is not None
        fn = (lambda: client.update_reservation(spec)) if exists else (
            lambda: client.create_reservation(spec))
        status, msg = self._call(f"reserve:{pid}", "reserve", fn, job_id=beneficiary,
                                 preemption_id=pid,
                                 params={"name": spec.name, "nodes": list(spec.nodes)})
        if status == OK:
            self.journal.record_reservation(spec.name, beneficiary, spec.nodes, spec.start_time,
                                            spec.duration_minutes * 60.0, state="preemption")
            self._bind(pid, spec.name, beneficiary)
        else:
            self._audit(None, "Reserve", f"reservation {spec.name} for preemption {pid}",
                        _outcome(status, msg), job_id=beneficiary)

    def _bind(self, pid: str, name: str, beneficiary: int) -> bool:
        """Name the reservation on the beneficiary: from then on it alone may use
        the held nodes. The preemption counts as reserved (victims may be
        signalled) only once this succeeded."""
        assert self.client is not None
        client = self.client
        status, msg = self._call(f"bind:{pid}", "bind",
                                 lambda: client.set_job_reservation(beneficiary, name),
                                 job_id=beneficiary, preemption_id=pid,
                                 params={"name": name})
        if status == OK:
            self.journal.set_preemption_state(pid, PreemptionState.RESERVED)
            return True
        self._audit(None, "Reserve", f"reservation {name} named on beneficiary {beneficiary} "
                    f"for preemption {pid}", _outcome(status, msg), job_id=beneficiary)
        return False

    def _victim_or_refuse(self, a: SignalCheckpoint | Requeue) -> dict[str, Any] | None:
        """The journal's row of the victim this step is for, or None (audited as refused)."""
        victim = self.journal.victim(a.preemption_id, a.job_id, a.restart_count)
        p = self.journal.preemption(a.preemption_id)
        if victim is None or p is None or p["state"] in (PreemptionState.DONE.value,
                                                         PreemptionState.ABORTED.value):
            self._audit(a, a.kind, a.reason, "refused: not a victim of an open preemption",
                        job_id=a.job_id)
            return None
        return victim

    def _do_SignalCheckpoint(self, a: SignalCheckpoint, snapshot: Snapshot, now: float) -> None:
        assert self.client is not None
        client = self.client
        key = f"signal:{a.preemption_id}:{a.job_id}:{a.restart_count}"
        victim = self._victim_or_refuse(a)
        if victim is None:
            return
        if self.journal.has_step(key) or victim["state"] != VictimState.PLANNED.value:
            self._audit(a, a.kind, a.reason, "reached: already signalled", job_id=a.job_id)
            return
        if not self._reserved(a.preemption_id):
            # Never make a victim give up its nodes before they are reserved
            # for the beneficiary; carry_on() retries the reservation.
            self._audit(a, a.kind, a.reason, "deferred: reservation not in place yet",
                        job_id=a.job_id)
            return
        job = snapshot.job(a.job_id)
        if job is None or not job.is_running or job.restart_count != a.restart_count:
            self._audit(a, a.kind, a.reason, "skipped: victim no longer running as planned",
                        job_id=a.job_id)
            return
        target: SignalTarget = "steps" if a.target == "steps" else "batch"
        self._mark_victim(a, job)
        ck = checkpoint_of(job)
        protocol = ck.protocol if ck is not None else "spolicy"
        self.journal.update_victim(a.preemption_id, a.job_id, a.restart_count,
                                   protocol=protocol)
        status, msg = self._call(
            key, "signal", lambda: client.signal(a.job_id, a.signal, target), job_id=a.job_id,
            restart_count=a.restart_count, preemption_id=a.preemption_id,
            params={"signal": a.signal, "deadline": a.deadline, "target": target},
            reached=(JobGone, JobAlreadyFinished))
        if status == OK:
            self._report.signals_by_protocol[protocol] += 1
            # Whole seconds: jobs acknowledge in whole seconds, and an ack in
            # the same second as the signal must count (the planner compares too).
            self.journal.update_victim(a.preemption_id, a.job_id, a.restart_count,
                                       state=VictimState.SIGNALLED, signal=a.signal,
                                       signalled_at=float(math.floor(now)),
                                       deadline=a.deadline)
            self._report.signalled.append(a.job_id)
        elif status == REACHED:
            self.journal.update_victim(a.preemption_id, a.job_id, a.restart_count,
                                       state=VictimState.ENDED)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail={"signal": a.signal, "deadline": a.deadline, "target": target,
                            "protocol": protocol, "restart_count": a.restart_count})
        if status == FAILED:
            self._give_up_after_refusals(a.preemption_id, key, f"victim {a.job_id}'s signal",
                                         snapshot)

    def _mark_victim(self, a: SignalCheckpoint, job: Job) -> None:
        """Mark the victim in its admin_comment before its signal (module docstring).

        Best effort: a refused mark leaves the requeue to us, as before."""
        assert self.client is not None
        client = self.client
        key = f"mark:{a.preemption_id}:{a.job_id}:{a.restart_count}"
        if not job.admin_comment.startswith(PREFIX):
            return  # not written by our plugin: not ours to change
        if parse_admin_comment(job.admin_comment).node_range is not None:
            return  # elastic: our requeue shrinks it (policy/elastic.py)
        if preemption_mark(job.admin_comment) == (a.preemption_id, a.restart_count) or \
                self.journal.has_step(key):
            return
        text = with_mark(job.admin_comment, a.preemption_id, a.restart_count)
        status, msg = self._call(
            key, "mark", lambda: client.set_admin_comment(a.job_id, text), job_id=a.job_id,
            restart_count=a.restart_count, preemption_id=a.preemption_id,
            reached=(JobGone, JobAlreadyFinished))
        self._audit(None, "MarkVictim",
                    f"victim {a.job_id} marked for preemption {a.preemption_id}: after its"
                    " checkpoint it may requeue itself (slurmpolicy ckpt ack --requeue)",
                    _outcome(status, msg), job_id=a.job_id, jobs=(a.job_id,),
                    detail={"preemption": a.preemption_id, "restart_count": a.restart_count},
                    quiet=True)

    def _clear_stale_marks(self, snapshot: Snapshot) -> None:
        """Take our mark off running jobs whose preemption is no longer open.

        A mark of an older restart needs nothing: the job compares it with its
        own restart count. At most ``_RESERVE_TRIES`` refused tries a mark."""
        if self.dry_run:
            return
        assert self.client is not None
        client = self.client
        for job in snapshot.by_state()[1]:  # the running jobs (the planner's table)
            if MARK_PREFIX not in job.admin_comment:
                continue
            mark = preemption_mark(job.admin_comment)
            if mark is None or mark[1] != job.restart_count:
                continue
            pid, rc = mark
            victim = self.journal.victim(pid, job.job_id, rc)
            if victim is not None and victim["state"] in (VictimState.REQUEUED.value,
                                                          VictimState.ENDED.value):
                continue  # that run is over (this snapshot was read before our requeue)
            p = self.journal.preemption(pid)
            if victim is not None and p is not None and \
                    p["state"] not in (PreemptionState.DONE.value, PreemptionState.ABORTED.value):
                continue
            key = f"unmark:{pid}:{job.job_id}:{rc}"
            if self.journal.has_step(key, (OK, REACHED)) or \
                    len(self.journal.steps(key=key, status=FAILED)) >= _RESERVE_TRIES:
                continue
            status, msg = self._call(
                key, "unmark", functools.partial(client.set_admin_comment, job.job_id,
                                                 without_mark(job.admin_comment)),
                job_id=job.job_id, restart_count=rc, preemption_id=pid,
                reached=(JobGone, JobAlreadyFinished))
            why = (f"preemption {pid} is {p['state']}" if p is not None
                   else f"preemption {pid} is not in this daemon's journal")
            self._audit(None, "UnmarkVictim",
                        f"job {job.job_id}'s preemption mark taken off: {why}; it must not "
                        "requeue itself", _outcome(status, msg), job_id=job.job_id,
                        jobs=(job.job_id,), detail={"preemption": pid, "restart_count": rc})

    def _do_Requeue(self, a: Requeue, snapshot: Snapshot, now: float) -> None:
        assert self.client is not None
        key = _requeue_key(a.preemption_id, a.job_id, a.restart_count)
        victim = self._victim_or_refuse(a)
        if victim is None:
            return
        state = VictimState(victim["state"])
        job = snapshot.job(a.job_id)
        if a.after == "exited":
            self._requeue_exited(a, victim, job, now)
            return
        if a.after in ("no-checkpoint", "periodic") and state is VictimState.PLANNED and \
                job is not None:
            ck = checkpoint_of(job)
            if ck is not None and ck.signal is not None:
                self._audit(a, a.kind, a.reason,
                            "refused: the victim has a checkpoint signal; signal it first",
                            job_id=a.job_id)
                return
            self.journal.update_victim(a.preemption_id, a.job_id, a.restart_count,
                                       protocol=ck.protocol if ck is not None else "none")
            if not self._reserved(a.preemption_id):
                self._audit(a, a.kind, a.reason, "deferred: reservation not in place yet",
                            job_id=a.job_id)
                return
            state = VictimState.DEADLINE  # nothing to wait for
        if state in (VictimState.REQUEUED, VictimState.ENDED) or \
                self.journal.has_step(key, (OK, REACHED, STARTED)):
            self._audit(a, a.kind, a.reason, "reached: already requeued or ended",
                        job_id=a.job_id)
            return
        if state is VictimState.SIGNALLED and job is not None:
            # The plan may have seen the ack or the deadline before our bookkeeping.
            if _acknowledged(job, float(victim["signalled_at"] or now), now):
                state = VictimState.ACKNOWLEDGED
            elif victim["deadline"] is not None and now >= float(victim["deadline"]):
                state = VictimState.DEADLINE
        if state not in (VictimState.ACKNOWLEDGED, VictimState.DEADLINE):
            self._audit(a, a.kind, a.reason,
                        f"refused: victim is {state.value}, neither acknowledged nor past"
                        " its deadline", job_id=a.job_id)
            return
        if job is None or not job.is_running or job.restart_count != a.restart_count:
            self._audit(a, a.kind, a.reason, "skipped: victim no longer running as planned",
                        job_id=a.job_id)
            return
        if state is VictimState.ACKNOWLEDGED and requeuing(job.comment, a.restart_count):
            # `ckpt ack --requeue`: the job's own requeue is on its way; two
            # would race (one of them refused, or a requeue of its next run).
            until = (_ack_time(job, now) or now) + SELF_REQUEUE_WAIT
            if now < until:
                if key not in self._self_requeue_noted:
                    self._self_requeue_noted.add(key)
                    self._audit(a, a.kind, a.reason,
                                "deferred: the victim is requeuing itself; requeued here if "
                                f"it still runs {SELF_REQUEUE_WAIT:.0f}s after its ack",
                                job_id=a.job_id)
                return
        self.journal.update_victim(a.preemption_id, a.job_id, a.restart_count, state=state)
        status = self._requeue_victim(a, key, job, now, {"after": state.value})
        if status == OK and a.shrink_to is not None and a.shrink_min is not None:
            self._shrinks[a.job_id] = a
        if status == FAILED:
            self._give_up_after_refusals(a.preemption_id, key, f"victim {a.job_id}'s requeue",
                                         snapshot)

    def _shrink_requeued(self, snapshot: Snapshot) -> None:
        """Set the node range of elastic victims requeued to be shrunk, once Slurm
        shows them pending and no longer completing (policy/elastic.py).

        Not during the completion: the update makes the job eligible at once,
        and Slurm could start it on a node its old run still occupies (the
        launch then fails). Until then Slurm's requeue delay (BeginTime, about two
        minutes) holds it back; the shrink lifts it (``StartTime=now``).
        """
        for job_id, a in list(self._shrinks.items()):
            job = snapshot.job(job_id)
            if job is not None and "COMPLETING" in job.state_flags:
                continue  # 22.05 shows it COMPLETING, 25.11 PENDING+COMPLETING: wait
            self._shrinks.pop(job_id)
            if job is None or not job.is_pending:
                if job is not None and job.is_running:
                    self._audit(a, "ShrinkElastic", f"elastic victim {job_id} restarted before"
                                " it could be shrunk", "skipped: already running",
                                job_id=job_id)
                continue
            self._shrink(a)

    def _shrink(self, a: Requeue) -> None:
        """An elastic victim, requeued and pending: restart it smaller. Journalled
        once per restart; a failure leaves it at its old size, and says so."""
        assert self.client is not None and a.shrink_to is not None and a.shrink_min is not None
        client, lo, hi = self.client, a.shrink_min, a.shrink_to

        def shrink() -> None:
            client.set_node_count(a.job_id, lo, hi)
            # Its old run is over: no need for Slurm's requeue delay (BeginTime).
            client.set_begin_time(a.job_id, None)

        status, msg = self._call(
            f"shrink:{a.job_id}:{a.restart_count}", "shrink", shrink, job_id=a.job_id,
            restart_count=a.restart_count, preemption_id=a.preemption_id,
            params={"min_nodes": lo, "max_nodes": hi}, reached=(JobGone,))
        self._audit(a, "ShrinkElastic",
                    f"elastic victim {a.job_id} requeued at {lo}-{hi} node(s) instead of its "
                    "old size", _outcome(status, msg), job_id=a.job_id,
                    detail={"min_nodes": lo, "max_nodes": hi})

    def _give_up_after_refusals(self, pid: str, key: str, what: str,
                                snapshot: Snapshot) -> bool:
        """Abort preemption ``pid`` once Slurm refused step ``key`` ``_RESERVE_TRIES``
        times: a step that cannot succeed must not be retried every cycle."""
        failures = self.journal.steps(key=key, status=FAILED)
        if len(failures) < _RESERVE_TRIES:
            return False
        self._abort_preemption(pid, f"Slurm refused {what} {len(failures)} times: "
                                    f"{failures[-1]['error']}", snapshot)
        return True

    def _abort_preemption(self, pid: str, why: str, snapshot: Snapshot) -> None:
        p = self.journal.preemption(pid)
        if p is None or p["state"] in (PreemptionState.DONE.value,
                                       PreemptionState.ABORTED.value):
            return
        beneficiary = int(p["beneficiary"])
        reason = f"preemption {pid} aborted: {why}"
        self.journal.set_preemption_state(pid, PreemptionState.ABORTED, reason=reason)
        victims = tuple(v["job_id"] for v in self.journal.victims_of(pid))
        deleted = self._close_reservation(pid, p["reservation"], beneficiary, snapshot)
        self._audit(None, "FinishPreemption", reason, "aborted", job_id=beneficiary,
                    jobs=(beneficiary, *victims),
                    detail={"reservation": p["reservation"], "reservation_deleted": deleted})

    def _close_reservation(self, pid: str, name: str, beneficiary: int,
                           snapshot: Snapshot) -> bool:
        """Take the reservation off a still pending beneficiary (so that it is not
        left waiting for a reservation that is gone), then delete it; or leave it
        to _cleanup_orphans while a job runs in it. True when it is gone."""
        assert self.client is not None
        client = self.client
        job = snapshot.job(beneficiary)
        if job is not None and job.is_pending and job.reservation == name:
            status, msg = self._call(f"unbind:{pid}", "unbind",
                                     lambda: client.set_job_reservation(beneficiary, ""),
                                     job_id=beneficiary, preemption_id=pid,
                                     params={"name": name}, reached=(JobGone, JobAlreadyFinished))
            if status == FAILED:
                self._audit(None, "Reserve", f"reservation {name} taken off beneficiary "
                            f"{beneficiary}", _outcome(status, msg), job_id=beneficiary)
        if not self._ours(name):
            return False
        if _jobs_in(snapshot, name):
            self.journal.set_reservation_state(name, "orphan")
            return False
        status, _ = self._delete_reservation(name, beneficiary, snapshot)
        return status in (OK, REACHED)

    def _requeue_exited(self, a: Requeue, victim: dict[str, Any], job: Job | None,
                        now: float) -> None:
        """Requeue a victim that saved and exited after its signal: Slurm requeues
        a finished batch job (22.05 and 25.11 alike) while it still knows it."""
        assert self.client is not None
        key = _requeue_key(a.preemption_id, a.job_id, a.restart_count)
        state = VictimState(victim["state"])
        if state not in (VictimState.SIGNALLED, VictimState.ACKNOWLEDGED, VictimState.DEADLINE):
            self._audit(a, a.kind, a.reason, f"refused: victim is {state.value}, not signalled",
                        job_id=a.job_id)
            return
        if self.journal.has_step(key, (OK, REACHED, STARTED)):
            self._audit(a, a.kind, a.reason, "reached: already requeued", job_id=a.job_id)
            return
        if job is None or job.restart_count != a.restart_count or \
                not exited_to_continue(job, checkpoint_of(job)):
            self._audit(a, a.kind, a.reason, "skipped: victim is not a finished batch job "
                        "that saved and exited", job_id=a.job_id)
            return
        self._requeue_victim(a, key, job, now, {"after": "exited", "state": job.state.value})

    def _requeue_victim(self, a: Requeue, key: str, job: Job | None, now: float,
                        detail: dict[str, Any]) -> str:
        """``scontrol requeue`` a victim (already pending counts as reached),
        record it as requeued when it was, and audit it with ``detail``."""
        assert self.client is not None
        client = self.client
        status, msg = self._call(
            key, "requeue", lambda: client.requeue(a.job_id), job_id=a.job_id,
            restart_count=a.restart_count, preemption_id=a.preemption_id,
            params={"after": a.after}, reached=(JobAlreadyPending,))
        if status in (OK, REACHED):
            self._victim_requeued(a.preemption_id, a.job_id, a.restart_count, job, now)
        self._audit(a, a.kind, a.reason, _outcome(status, msg), job_id=a.job_id,
                    detail={**detail, "why": a.after, "restart_count": a.restart_count})
        return status

    def _reserved(self, pid: str) -> bool:
        """The nodes are held for the beneficiary alone (and the preemption is open)."""
        p = self.journal.preemption(pid)
        return p is not None and p["state"] in (PreemptionState.RESERVED.value,
                                                PreemptionState.SIGNALLED.value,
                                                PreemptionState.REQUEUED.value)

    def _do_FinishPreemption(self, a: FinishPreemption, snapshot: Snapshot, now: float) -> None:
        p = self.journal.preemption(a.preemption_id)
        if p is None:
            self._audit(a, a.kind, a.reason, "refused: unknown preemption")
            return
        victims = tuple(v["job_id"] for v in self.journal.victims_of(a.preemption_id))
        jobs = (int(p["beneficiary"]), *victims)
        if p["state"] in (PreemptionState.DONE.value, PreemptionState.ABORTED.value):
            self._audit(a, a.kind, a.reason, "reached: already closed",
                        job_id=int(p["beneficiary"]), jobs=jobs)
            return
        target = PreemptionState.ABORTED if a.aborted else PreemptionState.DONE
        self.journal.set_preemption_state(a.preemption_id, target,
                                          reason=a.reason if a.aborted else None)
        deleted = self._close_reservation(a.preemption_id, p["reservation"],
                                          int(p["beneficiary"]), snapshot)
        self._audit(a, a.kind, a.reason, target.value, job_id=int(p["beneficiary"]), jobs=jobs,
                    detail={"reservation": p["reservation"], "reservation_deleted": deleted})

    def carry_on(self, snapshot: Snapshot, now: float | None = None) -> None:
        """Retry what the executor owns alone: the reservation of a planned
        preemption and its naming on the beneficiary (a bounded number of times)."""
        if self.dry_run:
            return
        now = self._clock() if now is None else now
        try:
            for p in self.journal.preemptions(open_only=True):
                self._carry_on_one(p, snapshot, now)
        except CallBudgetExhausted:
            pass

    def _carry_on_one(self, p: dict[str, Any], snapshot: Snapshot, now: float) -> None:
        pid, name = p["preemption_id"], p["reservation"]
        b = int(p["beneficiary"])
        beneficiary = snapshot.job(b)
        if beneficiary is None or not beneficiary.is_pending:
            return  # the planner closes it
        existing = snapshot.reservation(name)
        if p["state"] != PreemptionState.PLANNED.value:
            if existing is not None and self._ours(name) and not beneficiary.reservation:
                # Someone took the reservation off the beneficiary: name it again,
                # a bounded number of times.
                if len(self.journal.steps(key=f"bind:{pid}")) > _RESERVE_TRIES:
                    self._abort_preemption(pid, f"beneficiary {b} keeps leaving its "
                                                f"reservation {name}", snapshot)
                else:
                    self._bind(pid, name, b)
            return
        if existing is not None and self.journal.has_step(f"reserve:{pid}"):
            if not self._ours(name):
                # Made by a step whose outcome a dead daemon did not record.
                self.journal.record_reservation(name, b, existing.nodes,
                                                existing.start_time or now, 0.0,
                                                state="preemption")
            if beneficiary.reservation == name:
                self.journal.set_preemption_state(pid, PreemptionState.RESERVED)
            elif not self._give_up_after_refusals(
                    pid, f"bind:{pid}", f"naming reservation {name} on beneficiary {b}",
                    snapshot):
                self._bind(pid, name, b)
            return
        if self._give_up_after_refusals(pid, f"reserve:{pid}", f"the reservation {name}",
                                        snapshot):
            return
        problem = self._may_create(name, snapshot)
        if problem:
            self._abort_preemption(pid, problem, snapshot)
            return
        spec = ReservationSpec(
            name=name, nodes=tuple(_json_list(p["nodes"])), start_time=now,
            duration_minutes=max(1, math.ceil(_DEFAULT_RESERVATION / 60)),
            users=(beneficiary.user,), flags=PREEMPTION_FLAGS)
        self._reserve(pid, spec, b, snapshot)


def _requeue_key(pid: str, job_id: int, restart_count: int) -> str:
    return f"requeue:{pid}:{job_id}:{restart_count}"


def _jobs_in(snapshot: Snapshot, reservation: str) -> list[int]:
    """Running jobs inside a reservation (Slurm will not delete it under them)."""
    return [j.job_id for j in snapshot.jobs if j.is_running and j.reservation == reservation]


def _json_list(text: str) -> list[str]:
    return list(json.loads(text or "[]"))


def _outcome(status: str, message: str) -> str:
    if status == OK:
        return "ok"
    if status == REACHED:
        return f"reached: {message}" if message else "reached"
    return f"failed: {message}"


def _describe(action: Action) -> dict[str, Any]:
    """The action's fields as plain data for the audit's detail column."""
    out: dict[str, Any] = {}
    for name in getattr(type(action), "__slots__", ()):
        if name == "reason":
            continue
        value = getattr(action, name, None)
        out[name] = list(value) if isinstance(value, tuple) else value
    # Slots of the base classes too (reason excluded).
    for base in type(action).__mro__[1:]:
        for name in getattr(base, "__slots__", ()):
            if name != "reason" and name not in out:
                out[name] = getattr(action, name, None)
    return out

