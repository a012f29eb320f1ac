"""Checkpoint-first preemption: whom to preempt for whom, and the steps after.

Owns two things.

*Choosing.* A pending job whose class outranks a preemptible class and that
cannot start now may take GPUs from running jobs of strictly lower rank. A
victim must be preemptible (class and ``--preemptible``), past its ``after=``
window and ``preemption.min_runtime``, within its per-day budget, not already
being preempted, and taking it must not push its account below its
guaranteed share (so only borrowed capacity is ever reclaimed). Candidates
come in tiers, tried in order until the fabric finds a compact node set:
checkpoint-capable victims; then jobs that cannot checkpoint outside the
partitions where that is allowed (no free shield); then the sheltered
``--checkpoint=none`` jobs. On the chosen hosts, victims are picked by least
lost work: GPUs x time since the last acknowledged checkpoint (or start),
plus the restart cost.

*Driving.* A new preemption's plan carries its victims' first steps right
after the StartPreemption (signal each victim, deadline = now + grace; or
requeue one that has no signal). Each open :class:`PreemptionIntent` then
moves on from what the snapshot shows: a victim still planned (its signal
was not sent) gets it again, a signalled victim is requeued only
after it acknowledged (a ``ckpt:`` stamp at or after the signal) or its
deadline passed, finish when the victims are gone and the beneficiary runs,
and abort the rest when the beneficiary started elsewhere, left, or fits
without them. A victim that requeued itself after the signal is gone (its
restart count moved); one that exited after it (saved and exited) is
requeued so that it continues, unless its declaration says ``exit=done``;
any other victim that ended by itself is not requeued. A periodic
checkpointer has no signal: it is requeued at once. Which protocol a job
speaks is :mod:`slurmpolicy.protocol`'s (``Context.policy``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, itemgetter

from slurmpolicy.durations import humanize
from slurmpolicy.jobpolicy import Checkpoint, last_checkpoint
from slurmpolicy.model import Job, JobState
from slurmpolicy.policy import elastic
from slurmpolicy.policy.actions import (
    Action,
    Annotate,
    DeleteReservation,
    FinishPreemption,
    PreemptionIntent,
    Requeue,
    SignalCheckpoint,
    StartPreemption,
    VictimIntent,
    VictimState,
)
from slurmpolicy.policy.classes import lowest_preemptible_rank
from slurmpolicy.policy.context import (
    Context,
    JobInfo,
    job_gpus,
    job_gpus_per_node,
    preemption_reservation_name,
)
from slurmpolicy.policy.priority import PriorityResult
from slurmpolicy.policy.reservations import forecast
from slurmpolicy.topology.types import Level, NoPlacement, Shape

DAY = 86400.0


def gpu_hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600:.1f} GPU-h"


def checkpoint_age_basis(job: Job, interval: float | None, now: float) -> float:
    """When the job's last checkpoint was written, as far as slurmpolicy knows:
    its last reported one in this run (``ckpt:`` in its comment), else the last
    multiple of its declared interval since it started, else its start."""
    start = job.start_time if job.start_time is not None else now
    ckpt = last_checkpoint(job.comment, now)
    if ckpt is not None and ckpt >= start:
        return ckpt
    if interval:
        return start + (max(0.0, now - start) // interval) * interval
    return start


#: Slurm states of a victim that ended by itself after the signal and is
#: requeued so that it continues (it saved and exited); a cancelled or
#: timed-out job is not.
EXIT_STATES = frozenset({JobState.COMPLETED, JobState.FAILED})


def exited_to_continue(job: Job, checkpoint: Checkpoint | None) -> bool:
    """A signalled victim that exited by itself, and whose protocol says an
    exit after the signal means "saved, continue me" (not ``exit=done``)."""
    return (job.state in EXIT_STATES and checkpoint is not None
            and checkpoint.signal is not None and checkpoint.on_exit == "requeue")


def lost_work(ctx: Context, job: Job) -> float:
    """GPU-seconds lost if ``job`` stopped now, plus the cost of restarting it."""
    ck = ctx.policy(job).checkpoint
    since = checkpoint_age_basis(job, ck.interval if ck is not None else None, ctx.now)
    gpus = job_gpus(job)
    return gpus * max(0.0, ctx.now - since) + gpus * ctx.settings.preemption.restart_cost


def preemption_cost(ctx: Context, job: Job) -> float:
    """GPU-seconds that preempting ``job`` now costs, which victims are chosen by.

    A job that saves on a signal loses no work: its cost is its GPUs held
    while it saves (its declared grace, the time the beneficiary waits for it
    too) and the restart. Any other job loses the work since its last
    checkpoint (:func:`lost_work`)."""
    ck = ctx.policy(job).checkpoint
    if ck is None or not ck.signal:
        return lost_work(ctx, job)
    return job_gpus(job) * (_grace(ctx, job) + ctx.settings.preemption.restart_cost)


def preemptions_last_day(ctx: Context, job_id: int) -> int:
    return sum(1 for t in ctx.intents.preempted_at.get(job_id, ()) if t > ctx.now - DAY)


def why_not_victim(ctx: Context, victim: Job, beneficiary_rank: int | None) -> str | None:
    """None when ``victim`` may be preempted by a job of ``beneficiary_rank``, else why not.

    ``beneficiary_rank`` None checks everything but the class order.
    The account-share rule needs the other victims: :func:`_keeps_guarantee`,
    on selection.
    """
    key = (victim.job_id, beneficiary_rank)
    if key in ctx.victim_answers:
        return ctx.victim_answers[key]
    why = _why_not_victim(ctx, victim, beneficiary_rank)
    ctx.victim_answers[key] = why
    return why


def _why_not_victim(ctx: Context, victim: Job, beneficiary_rank: int | None) -> str | None:
    cls = ctx.job_class(victim)
    if not cls.spec.preemptible:
        return f"class {cls.name} is not preemptible"
    if beneficiary_rank is not None and cls.rank >= beneficiary_rank:
        return f"class {cls.name} is not below the waiting job's class"
    policy = ctx.policy(victim)
    if not policy.preemptible:
        return "it asked --preemptible=no"
    if not victim.requeue:
        # Preemption ends in a requeue; Slurm refuses it for such a job, so it
        # would hold its nodes forever (--no-requeue, Requeue=0, JobRequeue=0).
        return "Slurm may not requeue it (--no-requeue, Requeue=0 or JobRequeue=0)"
    ran = ctx.now - (victim.start_time if victim.start_time is not None else ctx.now)
    if ran < policy.preemptible_after:
        return (f"it is inside its --preemptible=after window ({humanize(ran)} run of "
                f"{humanize(policy.preemptible_after)})")
    if ran < ctx.settings.preemption.min_runtime:
        return (f"it has run {humanize(ran)}, less than the minimum runtime "
                f"{humanize(ctx.settings.preemption.min_runtime)}")
    if victim.job_id in ctx.victims_in_flight:
        return "it is already being preempted"
    used = preemptions_last_day(ctx, victim.job_id)
    budget = ctx.settings.preemption.max_per_job_per_day
    if used >= budget:
        return f"it was preempted {used} times in the last day (budget {budget})"
    if job_gpus(victim) <= 0:
        return "it holds no GPUs"
    return None


def _gpus_on(job: Job, host: str) -> int:
    return job.gpus_on_node.get(host, job_gpus_per_node(job)) if job.gpus_on_node else \
        job_gpus_per_node(job)


@dataclass(slots=True)
class _Round:
    """Bookkeeping across the beneficiaries of one cycle."""

    allocated: dict[str, float]
    taken: set[int]
    claimed: set[str]
    #: Searches that found nothing, by what they depend on (see ``_search_key``);
    #: valid until a preemption starts (that changes the three sets above).
    failed: dict[tuple[object, ...], str] = field(default_factory=dict)
    #: _eligible_victims answers by rank and hosts, valid as long as ``failed``.
    eligible: dict[tuple[int, tuple[str, ...]], dict[int, Job]] = field(default_factory=dict)
    #: Why no job is eligible, for the walks of ``eligible`` that found none.
    none_eligible: dict[tuple[int, tuple[str, ...]], str] = field(default_factory=dict)


def _sort_key(ctx: Context, job: Job) -> tuple[bool, bool, float, float, bool, int]:
    # Cheapest to preempt first; on equal cost the one with less to lose if its
    # save fails. An elastic victim (policy/elastic.py) only shrinks: taken
    # first on equal cost.
    # The same all plan long (it reads the job, the time and the missed acks): kept.
    key = ctx.victim_keys.get(job.job_id)
    if key is None or ctx.by_id.get(job.job_id) is not job:
        key = _victim_key(ctx, job)
        if ctx.by_id.get(job.job_id) is job:
            ctx.victim_keys[job.job_id] = key
    return key


def _victim_key(ctx: Context, job: Job) -> tuple[bool, bool, float, float, bool, int]:
    """``_sort_key``'s tuple: (``shielded_by_no_checkpoint``, not
    ``can_checkpoint``, ``preemption_cost``, ``lost_work``, not elastic, job
    id), each as those functions give it, with the job's directives read once
    and its lost work worked out once (a production job's search keys every
    running job below it: a few hundred a plan)."""
    policy = ctx.policy(job)
    can = ctx.can_checkpoint(job)
    # Asked again only of the jobs that cannot checkpoint (its first question).
    shielded = not can and ctx.shielded_by_no_checkpoint(job)
    lost = lost_work(ctx, job)
    ck = policy.checkpoint
    if ck is None or not ck.signal:
        cost = lost  # preemption_cost's own answer for such a job
    else:
        cost = job_gpus(job) * (_grace(ctx, job) + ctx.settings.preemption.restart_cost)
    return (shielded, not can, cost, lost, not policy.elastic or policy.node_range is None,
            job.job_id)


def _search_key(ctx: Context, beneficiary: Job, rank: int) -> tuple[object, ...]:
    """All that ``_choose`` reads of the beneficiary: its shape, partitions, rank
    and which active reservations are its own. Jobs with the same key get the
    same answer within a round, so a failed search is not repeated for them."""
    own = ctx.own_reservations(beneficiary) & ctx.active_reservation_names
    return (ctx.shape_of(beneficiary), beneficiary.partition, rank, frozenset(own),
            ctx.reserved_later_for(beneficiary))


def _choose(ctx: Context, beneficiary: Job, rank: int, state: _Round,
            ) -> tuple[tuple[str, ...], list[Job]] | str:
    """A node set and victims for ``beneficiary``, or why there is none."""
    key = _search_key(ctx, beneficiary, rank)
    failed = state.failed.get(key)
    if failed is not None:
        return failed
    result = _search(ctx, beneficiary, rank, state)
    if isinstance(result, str):
        state.failed[key] = result
    return result


#: victim_answers' "not asked yet" (None there means "may be preempted").
_UNASKED = "(not asked)"


def _eligible_victims(ctx: Context, hosts: list[str], rank: int, state: _Round,
                      refusals: dict[str, list[str]] | None) -> dict[int, Job]:
    """Running jobs on ``hosts`` that a job of ``rank`` may preempt, by id, in host
    order; with ``refusals``, why each other one may not (once per host it is on)."""
    eligible: dict[int, Job] = {}
    taken = state.taken
    allocated = state.allocated
    if refusals is None:
        # Most running jobs may never be a victim of this rank (their class,
        # --preemptible=no, their min runtime): the plan's walk of them is
        # done once per rank (_victims_by_host), and each search walks only
        # the hosts' candidates, in the same order.
        index = ctx.victims_by_rank.get(rank)
        if index is None:
            index = ctx.victims_by_rank[rank] = _victims_by_host(ctx, rank)
        if not index:
            return eligible
        guaranteed_gpus = ctx.fairshare.guaranteed_gpus
        for h in hosts:
            for victim in index.get(h, ()):
                job_id = victim.job_id
                if job_id in eligible or job_id in taken:
                    continue
                if _keeps_guarantee(allocated, guaranteed_gpus, victim):
                    eligible[job_id] = victim
        return eligible
    guaranteed = ctx.fairshare.guaranteed_gpus
    answers = ctx.victim_answers
    running_by_host = ctx.running_by_host
    for h in hosts:
        for victim in running_by_host.get(h, ()):
            job_id = victim.job_id
            if job_id in eligible or job_id in taken:
                continue
            key = (job_id, rank)
            why = answers.get(key, _UNASKED)
            if why is _UNASKED:
                why = why_not_victim(ctx, victim, rank)
            if why is None and not _keeps_guarantee(allocated, guaranteed, victim):
                why = (f"its account {victim.account} would fall below its guaranteed share "
                       f"({guaranteed(victim.account):.0f} GPUs)")
            if why is None:
                eligible[job_id] = victim
            else:
                refusals.setdefault(why.split(" (")[0], []).append(why)
    return eligible


def _keeps_guarantee(allocated: dict[str, float], guaranteed_gpus: Callable[[str], float],
                    victim: Job) -> bool:
    """Taking ``victim`` leaves its account at or above its guaranteed share
    (``allocated``: the GPUs each account holds, the victims taken so far
    already off): only borrowed capacity is ever reclaimed."""
    return (allocated.get(victim.account, 0) - job_gpus(victim)
            >= guaranteed_gpus(victim.account) - 1e-9)


def _victims_by_host(ctx: Context, rank: int) -> dict[str, list[Job]]:
    """The running jobs a job of ``rank`` may preempt (``why_not_victim``; the
    account shares are the search's), by host, in ``running_by_host`` order."""
    index: dict[str, list[Job]] = {}
    for victim in ctx.running:
        if why_not_victim(ctx, victim, rank) is None:
            for h in victim.nodes:
                index.setdefault(h, []).append(victim)
    return index


def _search(ctx: Context, beneficiary: Job, rank: int, state: _Round,
            ) -> tuple[tuple[str, ...], list[Job]] | str:
    shape = ctx.shape_of(beneficiary)
    gpn = shape.gpus_per_node
    gpu_type = shape.gpu_type
    own = ctx.own_reservations(beneficiary)
    # Hosts reserved later, before its time limit would end, are not Slurm's
    # to give it (nor ours to reserve: reservations may not overlap).
    later = ctx.hosts_reserved_later_for(beneficiary)
    hosts = []
    reserved_now = ctx.reserved_now
    for h in ctx.eligible_map(beneficiary):
        if h in state.claimed or h in later:
            continue
        held = reserved_now.get(h)
        if held and any(r.name not in own for r in held):
            continue
        hosts.append(h)
    # Beneficiaries of one rank mostly see the same hosts: one walk for them all.
    walked = (rank, tuple(hosts))
    known = state.eligible.get(walked)
    eligible = (known if known is not None else
                state.eligible.setdefault(walked, _eligible_victims(ctx, hosts, rank, state, None)))
    if not eligible:
        # The refusals are worded only when they are the answer (the same walk
        # again), once per walk: jobs of other shapes see the same hosts.
        why_none = state.none_eligible.get(walked)
        if why_none is None:
            refusals: dict[str, list[str]] = {}
            _eligible_victims(ctx, hosts, rank, state, refusals)
            detail = "; ".join(f"{len(w)} job(s): {w[0]}"
                               for _, w in sorted(refusals.items())[:3])
            why_none = state.none_eligible[walked] = (
                "no running job may be preempted for it" + (f" ({detail})" if detail else ""))
        return why_none
    counts = ctx.gpu_counts(gpu_type)
    # Free GPUs that higher jobs of this plan will take are not this job's.
    taken = ctx.free_taken
    free = {h: max(0, counts[h][1] - taken.get(h, 0)) for h in hosts}
    level = shape.level if shape.strict else Level.CLUSTER
    # Every tier's hosts are within what all the eligible jobs free, so when
    # that is too little each tier fails alike, and the answer is the widest
    # tier's (the last tried): asked once, not per tier.
    every: dict[str, int] = dict(free)
    for v in eligible.values():
        for h in v.nodes:
            if h in every:
                every[h] += _gpus_on(v, h)
    most = ctx.most_hosts_in_one_domain(every, gpn, level)
    if most < shape.nodes:
        where = f" in one {level.name.lower()}" if level < Level.CLUSTER else ""
        return (f"even preempting every allowed job frees at most {most} "
                f"host(s) with {gpn} GPUs{where}; it needs {shape.nodes}")
    tiers = [
        [v for v in eligible.values() if ctx.can_checkpoint(v)],
        [v for v in eligible.values() if not ctx.shielded_by_no_checkpoint(v)],
        list(eligible.values()),
    ]
    seen: set[int] = set()
    last_reason = "no node set can be freed for it"
    for tier in tiers:
        if not tier or len(tier) == len(seen):
            continue
        seen = {v.job_id for v in tier}
        by_host: dict[str, list[Job]] = {}
        for v in tier:
            for h in v.nodes:
                if h in free:
                    by_host.setdefault(h, []).append(v)
        excluded: set[str] = set()
        for _attempt in range(3):
            avail = {h: free[h] + sum(_gpus_on(v, h) for v in by_host.get(h, ()))
                     for h in hosts if h not in excluded}
            avail = {h: f for h, f in avail.items() if f > 0}
            most = ctx.most_hosts_in_one_domain(avail, gpn, level)
            if most < shape.nodes:
                where = f" in one {level.name.lower()}" if level < Level.CLUSTER else ""
                last_reason = (f"even preempting every allowed job frees at most {most} "
                               f"host(s) with {gpn} GPUs{where}; it needs {shape.nodes}")
                break
            # Hosts cheapest to free (least lost work; data hosts on ties) are
            # preferred by place() among equally compact sets.
            placement = ctx.fabric.place(
                replace(shape, prefer=_cheapest_hosts(ctx, avail, free, by_host, shape)), avail)
            if isinstance(placement, NoPlacement):
                last_reason = placement.reason
                break
            picked = _pick_victims(ctx, placement.hosts, free, by_host, gpn, state)
            if isinstance(picked, str):
                excluded.add(picked)
                last_reason = (f"freeing {picked} would push an account below its "
                               f"guaranteed share")
                continue
            if not picked:
                return "it fits without preemption"
            return tuple(sorted(placement.hosts)), picked
    return last_reason


def _cheapest_hosts(ctx: Context, avail: dict[str, int], free: dict[str, int],
                    by_host: dict[str, list[Job]], shape: Shape) -> frozenset[str]:
    gpn = shape.gpus_per_node
    wait_weight = ctx.settings.preemption.wait_weight
    costs = []
    for h, f in avail.items():
        if f < gpn:
            continue
        cost = lost = 0.0
        rigid = 0  # victims that would be evicted rather than shrunk (policy/elastic.py)
        got = free.get(h, 0)
        wait = 0.0
        for key, v in sorted(((_sort_key(ctx, v), v) for v in by_host.get(h, ())),
                             key=_first):
            if got >= gpn:
                break
            got += _gpus_on(v, h)
            # The sort key holds preemption_cost, lost_work and "rigid" already.
            cost += key[2]
            lost += key[3]
            rigid += key[4]
            wait = max(wait, _grace(ctx, v))
        # The beneficiary's GPUs on this host sit idle until its slowest victim
        # there has saved: GPU-seconds as real as the victims' own, and its
        # start waits as long (preemption.wait_weight: how much that wait counts
        # against the victims' restarts).
        cost += wait_weight * gpn * wait
        costs.append((cost, lost, rigid, h not in shape.prefer, h))
    costs.sort()
    return frozenset(h for *_, h in costs[:shape.nodes])


_first = itemgetter(0)


def _pick_victims(ctx: Context, hosts: Iterable[str], free: dict[str, int],
                  by_host: dict[str, list[Job]], gpn: int, state: _Round) -> list[Job] | str:
    """Least-lost-work victims that free ``gpn`` GPUs on every host; else the host that fails."""
    fs = ctx.fairshare
    left = dict(state.allocated)
    freed: dict[str, int] = {}
    chosen: list[Job] = []
    chosen_ids: set[int] = set()
    order = sorted(hosts, key=lambda h: (-(gpn - free.get(h, 0)), h))
    for h in order:
        while free.get(h, 0) + freed.get(h, 0) < gpn:
            options = sorted((v for v in by_host.get(h, ()) if v.job_id not in chosen_ids),
                             key=lambda v: _sort_key(ctx, v))
            pick = None
            for v in options:
                if _keeps_guarantee(left, fs.guaranteed_gpus, v):
                    pick = v
                    break
            if pick is None:
                return h
            chosen.append(pick)
            chosen_ids.add(pick.job_id)
            left[pick.account] = left.get(pick.account, 0) - job_gpus(pick)
            for x in pick.nodes:
                freed[x] = freed.get(x, 0) + _gpus_on(pick, x)
    return chosen


def _candidates(ctx: Context, prio: PriorityResult, low: int) -> Iterator[Job]:
    """The waiting jobs that may get a preemption, highest first: by class rank
    (above ``low``), then Slurm's order under the new priorities (effective
    priority, submit time, job id). Lazily: the caller reads the first few of
    thousands (it stops after ``preemption.max_searches_per_cycle`` searches).

    With one partition that order is ``prio``'s, already sorted: each rank's
    jobs are picked out of it at C speed, and only those read are checked
    (a walk of the whole queue a plan was 6% of a deep replay). Jobs in
    several partitions are ranked by a heap of every candidate."""
    beneficiaries = ctx.preemption_of_beneficiary
    now = ctx.now
    infos = ctx.infos
    info = ctx.info

    def eligible(job: Job, job_info: JobInfo) -> bool:
        if job_info.gpus <= 0 or job.job_id in beneficiaries or ctx.blocked_by_slurm(job):
            return False
        if job.reservation:
            return False  # it runs only inside the reservation it asked for
        return not (job_info.policy.defer_window and job.begin_time
                    and job.begin_time > now)

    if len(prio.order) == 1:
        (order,) = prio.order.values()
        # priority.compute made each waiting job's JobInfo for its record.
        ranks = list(map(_rank, map(infos.__getitem__, map(_job_id, order))))
        for rank in sorted({r for r in set(ranks) if r > low}, reverse=True):
            for job in compress(order, map(rank.__eq__, ranks)):
                if eligible(job, infos[job.job_id]):
                    yield job
        return
    heap: list[tuple[int, int, float, int, Job]] = []
    effective = prio.effective
    for job in ctx.pending:
        job_info = info(job)
        if job_info.rank > low and eligible(job, job_info):
            heap.append((-job_info.rank, -effective[job.job_id], job_info.submit, job.job_id,
                         job))
    heapq.heapify(heap)
    while heap:
        yield heapq.heappop(heap)[-1]


_rank = attrgetter("rank")
_job_id = attrgetter("job_id")


def start_preemptions(ctx: Context, prio: PriorityResult) -> list[Action]:
    """Open new preemptions for the highest waiting jobs that need them."""
    s = ctx.settings.preemption
    low = lowest_preemptible_rank(ctx.settings)
    if not s.enabled or low is None:
        return []
    # Only classes above some running preemptible job can ever find a victim.
    info = ctx.info
    infos = ctx.infos
    lowest_running: int | None = None
    for j in ctx.running:
        job_info = infos.get(j.job_id)
        if job_info is None or job_info.job is not j:
            job_info = info(j)
        c = job_info.job_class
        if c.spec.preemptible and (lowest_running is None or c.rank < lowest_running):
            lowest_running = c.rank
    if lowest_running is None:
        return []
    low = max(low, lowest_running)
    candidates = _candidates(ctx, prio, low)
    allocated: dict[str, float] = dict(ctx.fairshare.allocated)
    for victim_id in ctx.victims_in_flight:
        victim = ctx.by_id.get(victim_id)
        if victim is not None and victim.is_running:
            allocated[victim.account] = allocated.get(victim.account, 0) - job_gpus(victim)
    state = _Round(allocated=allocated, taken=set(ctx.victims_in_flight),
                   claimed=set(ctx.claimed_hosts))
    actions: list[Action] = []
    started = 0
    tried = 0
    for job in candidates:
        if started >= s.max_per_cycle or tried >= s.max_searches_per_cycle:
            break
        if ctx.gets_free_gpus(job):
            continue  # Slurm starts it on free GPUs (which a lower job cannot have)
        tried += 1
        cls = ctx.job_class(job)
        result = _choose(ctx, job, cls.rank, state)
        if isinstance(result, str):
            actions.append(Annotate(job_id=job.job_id,
                                    reason=f"no preemption for job {job.job_id}: {result}"))
            continue
        hosts, victims = result
        if len(victims) > s.max_victims_per_job:
            actions.append(Annotate(job_id=job.job_id, reason=(
                f"no preemption for job {job.job_id}: it would need {len(victims)} victims, "
                f"more than preemption.max_victims_per_job={s.max_victims_per_job}")))
            continue
        # Preempting takes the victims' grace (or a cycle): not worth it when the
        # job would start by then anyway on nodes that free up by themselves.
        soon = ctx.now + max([ctx.settings.daemon.interval]
                             + [_grace(ctx, v) for v in victims])
        # Hosts whose free GPUs higher jobs take now are left out of the
        # forecast (their later releases too: the forecast errs late).
        natural = forecast(ctx, job, set(state.claimed) | ctx.hosts_reserved_later_for(job)
                           | ctx.free_taken.keys())
        if not isinstance(natural, NoPlacement) and natural.start <= soon:
            actions.append(Annotate(job_id=job.job_id, reason=(
                f"no preemption for job {job.job_id}: it should start within "
                f"{humanize(natural.start - ctx.now)} anyway, after "
                f"{natural.basis_text(ctx.now)}")))
            continue
        started += 1
        victims.sort(key=lambda v: v.job_id)
        lost = sum(lost_work(ctx, v) for v in victims)
        for v in victims:
            state.taken.add(v.job_id)
            state.allocated[v.account] = state.allocated.get(v.account, 0) - job_gpus(v)
        state.claimed.update(hosts)
        state.failed.clear()
        state.eligible.clear()
        state.none_eligible.clear()
        victim_words = ", ".join(
            f"{v.job_id} ({ctx.job_class(v).name}, {v.account + ', ' if v.account else ''}"
            f"{'checkpoints' if ctx.can_checkpoint(v) else 'cannot checkpoint'}, "
            f"loses {gpu_hours(lost_work(ctx, v))}"
            + (f"; {elastic.describe(ctx, v, keep)}"
               if (keep := elastic.shrink_target(ctx, v, hosts)) is not None else "")
            + ")" for v in victims)
        duration = job.time_limit or ctx.settings.reservations.default_duration
        pid = f"pre-{job.job_id}-{int(ctx.now)}"
        actions.append(StartPreemption(
            preemption_id=pid,
            beneficiary=job.job_id,
            victims=tuple(v.job_id for v in victims),
            restart_counts=tuple(v.restart_count for v in victims),
            nodes=hosts,
            reservation=preemption_reservation_name(ctx.prefix, job.job_id, ctx.now),
            expected_lost_gpu_seconds=lost,
            start_time=ctx.now, duration=duration,
            user=job.user, account=job.account, partition=ctx.partitions_of(job)[0],
            reason=(f"job {job.job_id} ({cls.name}, {job_gpus(job)} GPUs) cannot start; "
                    f"preempting lower-class job(s) {victim_words} to free "
                    f"{len(hosts)} node(s); lost work {gpu_hours(lost)}"),
        ))
        # The victims' first steps go in the same plan, after StartPreemption:
        # the executor reserves the nodes, then signals, in one cycle (a cycle
        # less of waiting for the beneficiary). It sends no signal when the
        # reservation could not be made.
        actions.extend(first_step(ctx, pid, job.job_id, v, v.restart_count) for v in victims)
    return actions


def _grace(ctx: Context, job: Job) -> float:
    ck = ctx.policy(job).checkpoint
    if ck is None or not ck.signal:
        return 0.0
    return ck.grace or ctx.settings.preemption.default_grace


def preview(ctx: Context, job: Job) -> str:
    """What a preemption for ``job`` would take now, in words ("" when none applies)."""
    s = ctx.settings.preemption
    low = lowest_preemptible_rank(ctx.settings)
    rank = ctx.job_class(job).rank
    if (not s.enabled or low is None or rank <= low or job_gpus(job) <= 0
            or ctx.fits_now(job) or job.job_id in ctx.preemption_of_beneficiary):
        return ""
    allocated: dict[str, float] = dict(ctx.fairshare.allocated)
    state = _Round(allocated=allocated, taken=set(ctx.victims_in_flight),
                   claimed=set(ctx.claimed_hosts))
    result = _choose(ctx, job, rank, state)
    if isinstance(result, str):
        return f"no preemption possible: {result}"
    hosts, victims = result
    lost = sum(lost_work(ctx, v) for v in victims)
    return (f"a preemption could free {len(hosts)} node(s) from job(s) "
            f"{', '.join(str(v.job_id) for v in sorted(victims, key=lambda v: v.job_id))} "
            f"(lost work {gpu_hours(lost)})")


def _victim_gone(ctx: Context, job_id: int, restart_count: int) -> bool:
    return _gone(ctx.by_id.get(job_id), restart_count)


def _gone(job: Job | None, restart_count: int) -> bool:
    """The victim is no longer running as it was signalled (ended, requeued, forgotten)."""
    return job is None or not job.is_running or job.restart_count != restart_count


def victim_moved(job: Job | None, restart_count: int, signalled_at: float | None,
                 deadline: float | None, now: float) -> str:
    """What lets a signalled victim's preemption move on now, as :func:`advance`
    reads it: "gone" (no longer running as signalled), "acknowledged" (a
    checkpoint ack since the signal), "deadline" (passed); "" when nothing.
    ``job``: the victim's record as Slurm shows it now (None: not found)."""
    if _gone(job, restart_count):
        return "gone"
    assert job is not None
    ack = last_checkpoint(job.comment, now)
    if ack is not None and signalled_at is not None and ack >= signalled_at:
        return "acknowledged"
    if deadline is not None and now >= deadline:
        return "deadline"
    return ""


def _abort(p: PreemptionIntent, why: str) -> list[Action]:
    return [FinishPreemption(preemption_id=p.preemption_id, aborted=True,
                             reason=f"preemption {p.preemption_id} aborted: {why}"),
            DeleteReservation(name=p.reservation, job_id=p.beneficiary,
                              reason=f"preemption {p.preemption_id} aborted: {why}")]


def first_step(ctx: Context, preemption_id: str, beneficiary: int, job: Job,
               restart_count: int) -> Action:
    """A planned victim's first step: its checkpoint signal, or (when it has no
    signal to send) its requeue, since there is nothing to wait for."""
    policy = ctx.policy(job)
    ck = policy.checkpoint
    if ck is not None and ck.signal:
        grace = _grace(ctx, job)
        where = "" if ck.target == "batch" else " (to its job steps)"
        learned = f"; recognised by {ck.learned}" if ck.learned else ""
        return SignalCheckpoint(
            preemption_id=preemption_id, job_id=job.job_id,
            restart_count=restart_count, signal=ck.signal, target=ck.target,
            deadline=ctx.now + grace,
            reason=(f"checkpoint signal {ck.signal}{where} to victim {job.job_id}"
                    f" for job {beneficiary} (protocol {ck.protocol}{learned}); requeue "
                    f"after its ack or in {humanize(grace)}"))
    if ck is not None and ck.interval is not None:
        return Requeue(
            preemption_id=preemption_id, job_id=job.job_id,
            restart_count=restart_count, after="periodic",
            reason=(f"requeue victim {job.job_id} for job {beneficiary}: protocol periodic "
                    f"(it checkpoints every {humanize(ck.interval)} by itself, no signal); "
                    f"its last checkpoint is about "
                    f"{humanize(ctx.now - checkpoint_age_basis(job, ck.interval, ctx.now))} "
                    "old"))
    return Requeue(
        preemption_id=preemption_id, job_id=job.job_id,
        restart_count=restart_count, after="no-checkpoint",
        reason=(f"requeue victim {job.job_id} for job {beneficiary}: it has no "
                f"checkpoint signal, so nothing to wait for"))


def _requeue(ctx: Context, p: PreemptionIntent, job: Job, restart_count: int, after: str,
             reason: str) -> Requeue:
    """A victim's Requeue; an elastic victim's also shrinks it (policy/elastic.py)."""
    keep = elastic.shrink_target(ctx, job, p.nodes)
    rng = elastic.node_range(ctx, job)
    if keep is None or rng is None:
        return Requeue(preemption_id=p.preemption_id, job_id=job.job_id,
                       restart_count=restart_count, after=after, reason=reason)
    return Requeue(preemption_id=p.preemption_id, job_id=job.job_id,
                   restart_count=restart_count, after=after, shrink_to=keep, shrink_min=rng[0],
                   reason=f"{reason}; {elastic.describe(ctx, job, keep)}")


def advance(ctx: Context, p: PreemptionIntent) -> list[Action]:
    """The next steps of one open preemption, from what the snapshot shows."""
    beneficiary = ctx.by_id.get(p.beneficiary)
    # Victims that saved and exited after the signal (NeMo-style) are requeued
    # whatever happens to the preemption: they stopped for it and must continue.
    exits: list[Action] = []
    for v in p.victims:
        job = ctx.by_id.get(v.job_id)
        if (v.state in (VictimState.SIGNALLED, VictimState.ACKNOWLEDGED, VictimState.DEADLINE)
                and job is not None and job.restart_count == v.restart_count
                and exited_to_continue(job, ctx.policy(job).checkpoint)):
            exits.append(Requeue(
                preemption_id=p.preemption_id, job_id=v.job_id,
                restart_count=v.restart_count, after="exited",
                reason=(f"requeue victim {v.job_id}: it saved and exited "
                        f"({job.state.value}) after its checkpoint signal, so that it "
                        "continues from its checkpoint")))
    rest = _advance(ctx, p, beneficiary)
    if any(isinstance(a, FinishPreemption) and a.aborted for a in rest) and \
            any(_may_still_exit(ctx, v) for v in p.victims):
        # A victim that got its framework's signal may still save and exit
        # (NeMo-style): the preemption stays open, bounded by that victim's
        # deadline, so that the exit is seen and the job requeued to continue.
        return exits
    return exits + rest


def _may_still_exit(ctx: Context, v: VictimIntent) -> bool:
    job = ctx.by_id.get(v.job_id)
    if v.state is not VictimState.SIGNALLED or job is None or not job.is_running or \
            job.restart_count != v.restart_count:
        return False
    # Jobs recognised by their own --signal only: their framework may answer by
    # exiting; a #SPOLICY job answers with an ack and keeps running, so an abort
    # leaves it running at once (as before).
    ck = ctx.policy(job).checkpoint
    return (ck is not None and bool(ck.learned) and ck.on_exit == "requeue"
            and v.deadline is not None and ctx.now < v.deadline)


def _advance(ctx: Context, p: PreemptionIntent, beneficiary: Job | None) -> list[Action]:
    s = ctx.settings.preemption
    settled = [v.state in (VictimState.REQUEUED, VictimState.ENDED)
               or _victim_gone(ctx, v.job_id, v.restart_count) for v in p.victims]
    if beneficiary is None or not (beneficiary.is_pending or beneficiary.is_running):
        return _abort(p, f"beneficiary {p.beneficiary} left the queue")
    if beneficiary.is_running:
        if all(settled):
            return [FinishPreemption(preemption_id=p.preemption_id,
                                     reason=f"beneficiary {p.beneficiary} started"),
                    DeleteReservation(name=p.reservation, job_id=p.beneficiary,
                                      reason=f"beneficiary {p.beneficiary} started")]
        return _abort(p, f"beneficiary {p.beneficiary} started; the remaining victims keep running")
    if beneficiary.is_held:
        return _abort(p, f"beneficiary {p.beneficiary} is held")
    if max(1, beneficiary.node_count) > len(p.nodes):
        return _abort(p, f"beneficiary {p.beneficiary} was resized: it asks for "
                         f"{beneficiary.node_count} node(s), {len(p.nodes)} are held for it")
    if beneficiary.reservation and beneficiary.reservation != p.reservation:
        # Someone moved it to another reservation: the held nodes are no use to it.
        return _abort(p, f"beneficiary {p.beneficiary} now asks for reservation "
                         f"{beneficiary.reservation}, not {p.reservation}")
    intruder = next((j for j in ctx.running if j.reservation == p.reservation
                     and j.job_id != p.beneficiary), None)
    if intruder is not None:
        return _abort(p, f"job {intruder.job_id}, not the beneficiary, runs in reservation "
                         f"{p.reservation}")
    if not all(settled) and ctx.gets_free_gpus(beneficiary):
        # Free nodes (its reservation's freed ones among them) hold it now, but
        # Slurm keeps a job that names a reservation to that reservation's
        # nodes: waiting for the last victims would leave the GPUs it could use
        # idle. The abort takes the name off, so it starts at the next pass,
        # and the victims not yet requeued keep running.
        return _abort(p, f"beneficiary {p.beneficiary} no longer needs it: it fits on free nodes")
    if all(settled):
        if ctx.now - p.started_at > s.beneficiary_start_timeout:
            return _abort(p, f"beneficiary {p.beneficiary} did not start within "
                             f"{humanize(s.beneficiary_start_timeout)} of the victims leaving")
        return []
    actions: list[Action] = []
    for v, done in zip(p.victims, settled, strict=True):
        if done:
            continue
        job = ctx.by_id[v.job_id]
        if v.state is VictimState.PLANNED:
            actions.append(first_step(ctx, p.preemption_id, p.beneficiary, job, v.restart_count))
            continue
        if not job.requeue:
            # Changed after it was chosen (scontrol update requeue=0): Slurm
            # would refuse the requeue every cycle.
            return _abort(p, f"victim {v.job_id} may no longer be requeued (Requeue=0)")
        if v.state is VictimState.SIGNALLED:
            # Not gone (settled above): the same test as the daemon's look between cycles.
            moved = victim_moved(job, v.restart_count, v.signalled_at, v.deadline, ctx.now)
            if moved == "acknowledged":
                actions.append(_requeue(
                    ctx, p, job, v.restart_count, "acknowledged",
                    f"requeue victim {v.job_id}: checkpoint acknowledged"))
            elif moved == "deadline":
                actions.append(_requeue(
                    ctx, p, job, v.restart_count, "deadline",
                    (f"requeue victim {v.job_id}: no checkpoint ack by its deadline "
                     f"({humanize(ctx.now - (v.signalled_at or ctx.now))} after the "
                     "signal)")))
            continue
        if v.state in (VictimState.ACKNOWLEDGED, VictimState.DEADLINE):
            # The requeue was decided but Slurm still shows the job running: ask again
            # (Slurm answers "already pending" when it was done).
            actions.append(_requeue(ctx, p, job, v.restart_count, v.state.value,
                                    f"requeue victim {v.job_id} again: still running"))
    return actions


def advance_all(ctx: Context) -> list[Action]:
    actions: list[Action] = []
    for p in sorted(ctx.open_preemptions, key=lambda p: p.preemption_id):
        actions.extend(advance(ctx, p))
    return actions
