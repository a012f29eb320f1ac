"""``plan()``: one cycle's decisions, as data; and ``apply_to_intents()``.

Owns the order the rules run in and how their actions combine:

1. open preemptions move on (signal, requeue, finish, abort);
2. new preemptions for the highest waiting jobs that cannot start;
3. starvation reservations (created, moved, deleted);
4. deferral of ``--deferrable`` jobs;
5. site factors (only real changes, capped per cycle).

``plan`` is pure: the same inputs give the same Plan, and it reads no clock
but ``now``. A caller that wants to know where a plan's time goes passes a
``clock`` (the daemon and the simulator pass ``time.process_time``): each
step's time is then in ``Plan.timings``, which Plan equality ignores.
A cycle between full plans that only has open preemptions to move on
(``open_only``: the daemon's looks at awaited victims, every
``daemon.preemption_poll``) runs step 1 alone; the rest waits for the next
full plan, at most ``daemon.interval`` away.

``apply_to_intents`` advances Intents from a Plan the way the daemon's
executor does when every action succeeds, so that the simulator and
the tests can drive several cycles without a journal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from slurmpolicy import gcpause
from slurmpolicy.model import Job, Snapshot
from slurmpolicy.policy import deferral, preemption, priority, reservations
from slurmpolicy.policy.actions import (
    Action,
    DeleteReservation,
    FinishPreemption,
    Intents,
    Plan,
    PreemptionIntent,
    PreemptionState,
    Requeue,
    ReservationAction,
    ReservationIntent,
    SetBeginTime,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    VictimIntent,
    VictimState,
)
from slurmpolicy.policy.context import Context, PlanCache
from slurmpolicy.settings import Settings

if TYPE_CHECKING:
    from slurmpolicy.topology import Fabric

#: The steps of ``plan()`` in the order they run, as ``Plan.timings`` names them.
STEPS = ("context", "priorities", "free_gpus", "open_preemptions", "new_preemptions",
         "reservations", "deferral", "site_factors")
#: The steps of an ``open_only`` plan (``Plan.timings``).
OPEN_ONLY_STEPS = ("context", "free_gpus", "open_preemptions")


def plan(snapshot: Snapshot, fabric: Fabric, settings: Settings, intents: Intents,
         now: float, cache: PlanCache | None = None,
         clock: Callable[[], float] | None = None, open_only: bool = False) -> Plan:
    """What slurmpolicy would do now; every action carries its reason.

    ``open_only``: move the open preemptions on and nothing else (see
    :func:`_open_only`); the daemon asks for it between full plans while
    victims are awaited.

    ``cache`` (optional) carries what one plan derived from immutable records
    to the next (see :class:`PlanCache`); the Plan is the same without it.
    ``clock`` (optional): read at the end of each step (:data:`STEPS`), for
    ``Plan.timings``; it changes no decision.

    The cyclic garbage collector is paused while it runs (:mod:`slurmpolicy.gcpause`):
    a plan over a deep queue makes hundreds of thousands of short-lived
    containers, and at CPython's thresholds their count set off full passes
    over everything the caller holds: 15 to 23% of a daemon's plan at 4,096
    and 16,384 nodes (``tests/bench/bench_plan.py --daemon-cycles``).
    """
    with gcpause.paused():
        if open_only:
            return _open_only(snapshot, fabric, settings, intents, now, cache, clock)
        return _plan(snapshot, fabric, settings, intents, now, cache, clock)


def _open_only(snapshot: Snapshot, fabric: Fabric, settings: Settings, intents: Intents,
               now: float, cache: PlanCache | None, clock: Callable[[], float] | None) -> Plan:
    """Step 1 alone: signals, requeues, finishes and aborts of the open preemptions.

    Why a step alone: while a preemption waits on its victims' saves the daemon
    cycles every few seconds, and a full plan each time walked every waiting
    job (priorities, site factors, new preemptions) for decisions that can
    wait for the next full plan. What step 1 reads of the queue is who Slurm
    would start on the free GPUs now (a beneficiary that fits lets its
    preemption go): with no site factor written since the last plan, that is
    Slurm's own order, the priorities it holds now."""
    tick = clock if clock is not None else _untimed
    marks = [tick()]
    ctx = Context(snapshot, fabric, settings, intents, now, cache)
    marks.append(tick())
    # Jobs behind every waiting beneficiary in that order take nothing from it:
    # only those ahead are sorted (a few, ahead of a production job).
    waiting = [b for p in ctx.open_preemptions
               if (b := ctx.by_id.get(p.beneficiary)) is not None and b.is_pending]
    ahead: list[Job] = []
    if waiting:
        last = max(map(_slurm_key, waiting))
        floor = -last[0]
        ahead = sorted((j for j in ctx.pending if j.priority >= floor and _slurm_key(j) <= last),
                       key=_slurm_key)
    ctx.assign_free(ahead)
    marks.append(tick())
    actions = preemption.advance_all(ctx)
    marks.append(tick())
    return Plan(actions=tuple(actions),
                timings=({step: marks[i + 1] - marks[i] for i, step in enumerate(OPEN_ONLY_STEPS)}
                         if clock is not None else {}))


def _slurm_key(job: Job) -> tuple[int, float, int]:
    """Slurm's queue order: higher priority first, then the earlier submit, the lower id."""
    return (-job.priority, job.submit_time or 0.0, job.job_id)


def _plan(snapshot: Snapshot, fabric: Fabric, settings: Settings, intents: Intents,
          now: float, cache: PlanCache | None, clock: Callable[[], float] | None) -> Plan:
    tick = clock if clock is not None else _untimed
    marks = [tick()]
    ctx = Context(snapshot, fabric, settings, intents, now, cache)
    marks.append(tick())
    prio = priority.compute(ctx)
    marks.append(tick())
    # Who Slurm would start on the free GPUs now, in its order: a beneficiary
    # that fits lets its preemption go, a job that fits needs none, and the
    # GPUs they take are no one else's (the same answer in every rule).
    ctx.assign_free(prio.slurm_order())
    marks.append(tick())
    actions: list[Action] = []
    actions.extend(preemption.advance_all(ctx))
    marks.append(tick())
    started = preemption.start_preemptions(ctx, prio)
    actions.extend(started)
    if started:
        # Plan what follows as the next cycle will see it: with these
        # preemptions in flight (their victims leave by their deadlines).
        ctx.track_preemptions(
            apply_to_intents(intents, Plan(actions=tuple(started)), now).open_preemptions())
    marks.append(tick())
    beneficiaries = set(ctx.preemption_of_beneficiary)
    claimed = set(ctx.claimed_hosts)
    actions.extend(reservations.reservation_actions(ctx, prio, beneficiaries, claimed))
    marks.append(tick())
    actions.extend(deferral.deferral_actions(ctx))
    marks.append(tick())
    site_factors, held_back = priority.site_factor_actions(ctx, prio)
    actions.extend(site_factors)
    marks.append(tick())
    return Plan(actions=tuple(actions), effective_priority=prio.effective,
                fragmented_since=prio.fragmented_since, held_back=held_back,
                timings=({step: marks[i + 1] - marks[i] for i, step in enumerate(STEPS)}
                         if clock is not None else {}))


def _untimed() -> float:
    return 0.0


def apply_to_intents(intents: Intents, plan: Plan, now: float) -> Intents:
    """Intents after the executor carried out every action of ``plan`` at ``now``."""
    preemptions = {p.preemption_id: p for p in intents.preemptions}
    res = {r.name: r for r in intents.reservations}
    preempted_at = dict(intents.preempted_at)
    missed = dict(intents.missed_acks)
    site = dict(intents.site_factors)
    begin = dict(intents.begin_times)

    def set_victim(pid: str, job_id: int, **changes: object) -> None:
        p = preemptions.get(pid)
        if p is None:
            return
        victims = tuple(replace(v, **changes) if v.job_id == job_id else v  # type: ignore[arg-type]
                        for v in p.victims)
        states = {v.state for v in victims}
        state = p.state
        if states <= {VictimState.REQUEUED, VictimState.ENDED}:
            state = PreemptionState.REQUEUED
        elif VictimState.SIGNALLED in states:
            state = PreemptionState.SIGNALLED
        preemptions[pid] = replace(p, victims=victims, state=state)

    for action in plan.actions:
        if isinstance(action, SetSiteFactor):
            site[action.job_id] = action.site_factor
        elif isinstance(action, SetBeginTime):
            begin[action.job_id] = action.begin_time
        elif isinstance(action, ReservationAction):
            res[action.name] = ReservationIntent(action.name, action.job_id, action.nodes,
                                                 action.start_time, action.duration)
        elif isinstance(action, DeleteReservation):
            res.pop(action.name, None)
        elif isinstance(action, StartPreemption):
            counts = action.restart_counts or (0,) * len(action.victims)
            preemptions[action.preemption_id] = PreemptionIntent(
                preemption_id=action.preemption_id, beneficiary=action.beneficiary,
                nodes=action.nodes, reservation=action.reservation,
                state=PreemptionState.RESERVED,
                victims=tuple(VictimIntent(job_id=v, restart_count=c, state=VictimState.PLANNED)
                              for v, c in zip(action.victims, counts, strict=True)),
                started_at=now)
        elif isinstance(action, SignalCheckpoint):
            set_victim(action.preemption_id, action.job_id, state=VictimState.SIGNALLED,
                       signal=action.signal, signalled_at=now, deadline=action.deadline)
        elif isinstance(action, Requeue):
            set_victim(action.preemption_id, action.job_id, state=VictimState.REQUEUED)
            preempted_at[action.job_id] = (*preempted_at.get(action.job_id, ()), now)
            if action.after == "deadline":
                missed[action.job_id] = missed.get(action.job_id, 0) + 1
        elif isinstance(action, FinishPreemption):
            p = preemptions.get(action.preemption_id)
            if p is not None:
                preemptions[action.preemption_id] = replace(
                    p, state=PreemptionState.ABORTED if action.aborted else PreemptionState.DONE)
    return replace(intents, preemptions=tuple(preemptions.values()),
                   reservations=tuple(res.values()), preempted_at=preempted_at,
                   missed_acks=missed, site_factors=site, begin_times=begin,
                   fragmented_since=(intents.fragmented_since if plan.fragmented_since is None
                                     else plan.fragmented_since))
