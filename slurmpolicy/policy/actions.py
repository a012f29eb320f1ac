"""What the planner may ask for, and what it is told has already been started.

Owns the Action types of a Plan (each with the job or reservation it concerns
and a reason a person can read) and the Intents the daemon's journal hands
back to the planner, so that planning twice never starts the same thing twice.
The daemon executor carries Actions out; the simulator applies them with
Slurm's semantics; the inspector shows them. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """Base: every action says why."""

    reason: str

    @property
    def kind(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, slots=True, kw_only=True)
class SetSiteFactor(Action):
    job_id: int
    site_factor: int
    previous: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReservationAction(Action):
    """A starvation reservation for ``job_id``: its nodes, start and duration (seconds)."""

    name: str
    job_id: int
    nodes: tuple[str, ...]
    start_time: float
    duration: float
    user: str
    account: str = ""
    partition: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateReservation(ReservationAction):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateReservation(ReservationAction):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteReservation(Action):
    name: str
    job_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartPreemption(Action):
    """Open a preemption: one beneficiary, its victims, the nodes it will get.

    The executor journals it (state ``planned``), creates the reservation
    ``reservation`` on ``nodes`` for the beneficiary, then carries out the
    victims' first steps (SignalCheckpoint, or Requeue of a victim without a
    signal) that the same plan lists after it, in that cycle, and only once
    the reservation is in place. Later cycles emit the Requeue after the
    acknowledgement or the deadline.
    """

    preemption_id: str
    beneficiary: int
    victims: tuple[int, ...]
    nodes: tuple[str, ...]
    reservation: str
    #: GPU-seconds of work the victims will lose (since their last checkpoint).
    expected_lost_gpu_seconds: float = 0.0
    #: Slurm's restart count of each victim (parallel to ``victims``): with
    #: the job id it keys the victim's intent.
    restart_counts: tuple[int, ...] = ()
    #: Start and length (seconds) of the beneficiary's reservation on ``nodes``:
    #: it starts now and lasts the beneficiary's time limit.
    start_time: float = 0.0
    duration: float = 0.0
    #: The beneficiary's user, account and partition, for the reservation.
    user: str = ""
    account: str = ""
    partition: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalCheckpoint(Action):
    preemption_id: str
    job_id: int
    #: Slurm's restart count of the victim when signalled: (job, restart) keys the intent.
    restart_count: int
    signal: str
    #: Epoch seconds by which the victim must acknowledge, else it is requeued anyway.
    deadline: float
    #: "batch" (the batch shell) or "steps" (the job steps): where Slurm itself
    #: would send the job's own --signal.
    target: str = "batch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Requeue(Action):
    """Requeue a victim (``scontrol requeue``); never cancel.

    ``after`` says why now: "acknowledged" (its checkpoint ack came after the
    signal), "deadline" (grace passed without an ack), "no-checkpoint" (the
    job has no checkpoint signal to wait for, so none was sent), "periodic"
    (it checkpoints by itself and has no signal: requeued at once) or
    "exited" (it saved and exited after the signal: the finished batch job
    is requeued so that it continues).
    """

    preemption_id: str
    job_id: int
    restart_count: int
    after: str
    #: An elastic victim (policy/elastic.py): after the requeue its node count
    #: becomes ``shrink_min``-``shrink_to``, the nodes the beneficiary leaves it.
    shrink_to: int | None = None
    shrink_min: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishPreemption(Action):
    """Close a preemption: done, or aborted (``aborted`` True) with the reason."""

    preemption_id: str
    aborted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SetBeginTime(Action):
    """Defer (begin in the future) or release (begin None) a deferrable job."""

    job_id: int
    begin_time: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotate(Action):
    """Explains a decision that needs no change in Slurm (e.g. 'not a victim: ...')."""

    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...] = ()
    #: Per-job effective priorities as computed (site factor + Slurm's), for views.
    effective_priority: Mapping[int, int] = field(default_factory=dict)
    #: Pending jobs seen blocked by fragmentation alone, since when (epoch
    #: seconds): the daemon journals it as ``Intents.fragmented_since``
    #: (None: a plan made by hand, which leaves the journal's as it is).
    fragmented_since: Mapping[int, float] | None = None
    #: Site factors the plan wanted but left out, as the executor's call budget
    #: could not write them this cycle (``priority.site_factor_actions``): the
    #: next plan asks again. Counted with the executor's deferred actions.
    held_back: int = 0
    #: Seconds of each step of ``plan()`` by name
    #: (:data:`slurmpolicy.policy.plan.STEPS`), on the clock its caller gave
    #: (the daemon and the simulator: process CPU time; none given: empty):
    #: where a plan's time goes. Not a decision: two plans that differ only
    #: here are equal.
    timings: Mapping[str, float] = field(default_factory=dict, compare=False)

    def of_kind(self, kind: type[Action]) -> list[Action]:
        return [a for a in self.actions if isinstance(a, kind)]


class VictimState(StrEnum):
    PLANNED = "planned"
    SIGNALLED = "signalled"
    ACKNOWLEDGED = "acknowledged"
    DEADLINE = "deadline"
    REQUEUED = "requeued"
    #: The victim ended by itself; no requeue needed.
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class VictimIntent:
    job_id: int
    restart_count: int
    state: VictimState
    signal: str = "USR1"
    signalled_at: float | None = None
    deadline: float | None = None


class PreemptionState(StrEnum):
    PLANNED = "planned"
    RESERVED = "reserved"
    SIGNALLED = "signalled"
    REQUEUED = "requeued"
    DONE = "done"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class PreemptionIntent:
    preemption_id: str
    beneficiary: int
    nodes: tuple[str, ...]
    reservation: str
    state: PreemptionState
    victims: tuple[VictimIntent, ...]
    started_at: float

    @property
    def open(self) -> bool:
        return self.state not in (PreemptionState.DONE, PreemptionState.ABORTED)


@dataclass(frozen=True, slots=True)
class ReservationIntent:
    """A reservation slurmpolicy created for a starving large job."""

    name: str
    job_id: int
    nodes: tuple[str, ...]
    start_time: float
    duration: float


@dataclass(frozen=True, slots=True)
class Intents:
    """What the daemon already started, from its journal."""

    preemptions: tuple[PreemptionIntent, ...] = ()
    reservations: tuple[ReservationIntent, ...] = ()
    #: Decayed GPU-seconds of usage per account, as of ``usage_at``.
    usage: Mapping[str, float] = field(default_factory=dict)
    usage_at: float | None = None
    #: Epoch seconds of each past preemption of a job (for the per-day budget).
    preempted_at: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    #: Jobs that missed acknowledging a promised checkpoint, and how often.
    missed_acks: Mapping[int, int] = field(default_factory=dict)
    #: Site factors the daemon last set (to emit only real changes).
    site_factors: Mapping[int, int] = field(default_factory=dict)
    #: Begin times the daemon last set for deferrable jobs (None: released).
    begin_times: Mapping[int, float | None] = field(default_factory=dict)
    #: Pending jobs the daemon saw blocked by fragmentation alone, and when it
    #: first did: they keep the fragmentation bonus while they wait.
    fragmented_since: Mapping[int, float] = field(default_factory=dict)

    def open_preemptions(self) -> list[PreemptionIntent]:
        return [p for p in self.preemptions if p.open]


T = TypeVar("T")

#: Most jobs named in one batched site-factor call (its argv stays far below ARG_MAX).
SITE_FACTOR_BATCH = 1000


def site_factor_batches(items: Sequence[T], value_of: Callable[[T], int]) -> list[list[T]]:
    """The daemon executor's Slurm calls for a plan's site factors, in its
    order, one call a batch: the items grouped by value (groups in the order
    their value first comes), each group cut in batches of
    ``SITE_FACTOR_BATCH``. ``value_of`` gives an item's site factor."""
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(value_of(item), []).append(item)
    return [group[i:i + SITE_FACTOR_BATCH] for group in groups.values()
            for i in range(0, len(group), SITE_FACTOR_BATCH)]


def site_factors_within(job_ids: list[int], value: Mapping[int, int], calls: int) -> list[int]:
    """Of the jobs whose site factor a plan writes, in its order, those the
    daemon's executor writes within its first ``calls`` calls
    (:func:`site_factor_batches`). The plan's order is kept."""
    batches = site_factor_batches(job_ids, value.__getitem__)
    if len(batches) <= calls:
        return job_ids  # every batch gets its call: the common case
    kept = {job_id for batch in batches[:calls] for job_id in batch}
    return [job_id for job_id in job_ids if job_id in kept]


#: Order in which actions of one plan are carried out when the call budget is short:
#: finishing what is in flight comes before starting anything new.
EXECUTION_ORDER = {
    "Requeue": 0, "FinishPreemption": 1, "SignalCheckpoint": 2, "StartPreemption": 3,
    "DeleteReservation": 4, "CreateReservation": 5, "UpdateReservation": 6,
    "SetBeginTime": 7, "SetSiteFactor": 8, "Annotate": 9,
}


def in_execution_order(actions: tuple[Action, ...]) -> list[Action]:
    """The plan's actions in the order the daemon's executor carries them out
    (the simulator follows it when the call budget runs short).

    By kind (``EXECUTION_ORDER``: what is in flight first), except that the
    steps of a preemption this plan starts (its victims' signals or requeues)
    follow their StartPreemption at once, in the plan's order: journal,
    reserve, then signal, all in this cycle.
    """
    starting = {a.preemption_id: i for i, a in enumerate(actions)
                if isinstance(a, StartPreemption)}

    def key(item: tuple[int, Action]) -> tuple[int, int, int]:
        i, a = item
        pid = getattr(a, "preemption_id", None)
        if isinstance(a, (SignalCheckpoint, Requeue)) and pid in starting:
            return (EXECUTION_ORDER["StartPreemption"], starting[pid], i)
        if isinstance(a, StartPreemption):
            return (EXECUTION_ORDER["StartPreemption"], i, -1)
        return (EXECUTION_ORDER.get(a.kind, 10), -1, i)

    return [a for _, a in sorted(enumerate(actions), key=key)]
