"""Reservations against starvation of large jobs.

Owns when a large pending job (``reservations.large_job_gpus`` GPUs or more)
gets a reservation, which nodes, from when, and when the reservation is
updated or deleted.

A job qualifies when it heads its partition but is blocked by fragmentation
(enough GPUs free, not in its shape); and, with
``reservations.reserve_after_wait``, when it waited longer than
``reservations.starvation_wait`` and cannot start now. That second rule is
off by default: Slurm's backfill already plans a start for every job it
tests, and a reservation for a large job further down the queue puts it
ahead of smaller jobs of higher priority. In replays of the Philly trace the
smaller jobs' extra wait outweighed what the large ones gained, and the mean
job completion time rose (docs/simulate.md).

For the most important ``reservations.max_per_cycle`` such jobs, the running
jobs' expected ends (``--expected-runtime``, else the time limit) form a
timeline of freed GPUs; a binary search over it finds the earliest moment a
compact node set (the fabric's ``place`` with the job's ``--topology``, GPU
type, memory and data preference) is free, and the reservation covers those
nodes from then for the job's time limit. Slurm's backfill still lets short
jobs use the nodes until it starts.

Names start with ``reservations.name_prefix`` (never empty); only the
reservations the daemon's journal records as its own are moved or deleted,
whatever else carries the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmpolicy.durations import humanize
from slurmpolicy.model import Job
from slurmpolicy.policy.actions import (
    Action,
    Annotate,
    CreateReservation,
    DeleteReservation,
    ReservationIntent,
    UpdateReservation,
)
from slurmpolicy.policy.context import Context, job_gpus, reservation_names
from slurmpolicy.policy.priority import PriorityResult
from slurmpolicy.topology.types import Level, NoPlacement, Shape

#: Slurm plans a job without a time limit one year ahead; a reservation that
#: starts later than this blocks nothing now.
FAR_AHEAD = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class Forecast:
    """Where and when a job could start, and what that rests on."""

    hosts: tuple[str, ...]
    start: float
    #: Running jobs whose ends free the hosts, and how their end is known.
    basis: tuple[tuple[int, str], ...] = ()

    def basis_text(self, now: float) -> str:
        if not self.basis:
            return "free now"
        ids = ", ".join(str(j) for j, _ in self.basis[:6])
        more = f" and {len(self.basis) - 6} more" if len(self.basis) > 6 else ""
        kinds = sorted({k for _, k in self.basis})
        return f"the end of job(s) {ids}{more} ({', '.join(kinds)}) in {humanize(self.start - now)}"


def _end_kind(ctx: Context, job: Job) -> str:
    if job.job_id in ctx.victims_in_flight:
        return "checkpoint deadline"
    runtime = ctx.policy(job).expected_runtime
    if runtime is not None and (job.time_limit is None or runtime < job.time_limit):
        return "expected runtime"
    return "time limit"


def forecast(ctx: Context, job: Job, blocked: set[str] | None = None,
             nodes: int | None = None, level: Level | None = None,
             strict: bool | None = None, partition: str | None = None) -> Forecast | NoPlacement:
    """Earliest compact node set for ``job`` from running jobs' expected ends.

    ``blocked`` hosts are never used (other reservations). ``nodes``,
    ``level``, ``strict`` and ``partition`` override the job's own request,
    for the inspector's "what if" alternatives.
    """
    shape = ctx.shape_of(job)
    if nodes is not None or level is not None or strict is not None:
        shape = type(shape)(
            nodes=nodes if nodes is not None else shape.nodes,
            gpus_per_node=shape.gpus_per_node,
            level=level if level is not None else shape.level,
            strict=strict if strict is not None else shape.strict,
            gpu_type=shape.gpu_type, min_gpu_memory_gb=shape.min_gpu_memory_gb,
            prefer=shape.prefer)
    if partition is not None:
        job = _with_partition(job, partition)
    own = ctx.own_reservations(job)
    blocked = blocked or set()
    # Jobs of one shape on the same hosts get the same answer: a plan asks for
    # many such (starving jobs, preemption candidates, the inspector's
    # alternatives), and the walk below is the costly part of planning.
    key = (shape, job.partition, frozenset(own & ctx.active_reservation_names),
           frozenset(blocked))
    hit = ctx.forecasts.get(key)
    if hit is None:
        hit = ctx.forecasts[key] = _forecast(ctx, job, shape, own, blocked)
    return hit


def _forecast(ctx: Context, job: Job, shape: Shape, own: set[str],
              blocked: set[str]) -> Forecast | NoPlacement:
    gpu_type = shape.gpu_type
    free: dict[str, int] = {}
    total_of: dict[str, int] = {}
    counts = ctx.gpu_counts(gpu_type)
    reserved_now = ctx.reserved_now
    for h in ctx.eligible_map(job):
        if h in blocked:
            continue
        held = reserved_now.get(h)
        if held and any(r.name not in own for r in held):
            continue
        total_of[h], free[h] = counts[h]
    # The whole timeline of the job's hosts, not a copy filtered to ``free``:
    # most walks stop at their first moments, and a copy costs the whole list.
    events = ctx.release_events(job)
    gpn = max(1, shape.gpus_per_node)
    level = shape.level if shape.strict else Level.CLUSTER
    # Walk the timeline once, counting per domain the hosts with >= gpn free:
    # O(events), no search per step. place() then confirms (it also knows
    # GPU memory and link health) at the first moment the count says yes.
    per_domain: dict[str, int] = {}
    for h, f in free.items():
        if f >= gpn:
            d = ctx.domain_of(h, level)
            per_domain[d] = per_domain.get(d, 0) + 1
    ready = max(per_domain.values(), default=0) >= shape.nodes
    i = 0
    n_events = len(events)
    nodes = shape.nodes
    domain_of = ctx.domain_of
    tries = 0
    last: NoPlacement | None = None
    moment = ctx.now
    while True:
        if ready:
            placement = ctx.fabric.place(shape, {h: f for h, f in free.items() if f > 0})
            if not isinstance(placement, NoPlacement):
                hosts = set(placement.hosts)
                basis = sorted({(e[1], _end_kind(ctx, ctx.by_id[e[1]]))
                                for e in events[:i] if e[2] in hosts})
                return Forecast(tuple(sorted(placement.hosts)), max(moment, ctx.now),
                                tuple(basis))
            last = placement
            tries += 1
            if tries >= 8:
                break
        while i < n_events and events[i][2] not in free:
            i += 1  # a host this job may not use (blocked, held, other type)
        if i >= n_events:
            break
        moment = events[i][0]
        while i < n_events:
            _, _, h, g = event = events[i]
            if event[0] != moment:
                break
            i += 1
            if h not in free:
                continue
            before = free[h]
            after = before + g
            total = total_of[h]
            free[h] = after = after if after < total else total  # min(total, after)
            if before < gpn <= after:
                d = domain_of(h, level)
                per_domain[d] = per_domain.get(d, 0) + 1
                if per_domain[d] >= nodes:
                    ready = True
    if last is not None:
        return NoPlacement(f"even after every running job ends: {last.reason}",
                           free_gpus=last.free_gpus,
                           best_hosts_in_one_domain=last.best_hosts_in_one_domain)
    final = ctx.fabric.place(shape, {h: f for h, f in free.items() if f > 0})
    if isinstance(final, NoPlacement):
        return NoPlacement(f"even after every running job ends: {final.reason}",
                           free_gpus=final.free_gpus,
                           best_hosts_in_one_domain=final.best_hosts_in_one_domain)
    return NoPlacement("no placement along the running jobs' expected ends")


def _with_partition(job: Job, partition: str) -> Job:
    from dataclasses import replace

    return replace(job, partition=partition)


def _duration(ctx: Context, job: Job) -> float:
    if job.time_limit is not None:
        return job.time_limit
    for part in ctx.partitions_of(job):
        p = ctx.snapshot.partition(part)
        if p is not None and p.max_time is not None:
            return p.max_time
    return ctx.settings.reservations.default_duration


def starving(ctx: Context, prio: PriorityResult, job: Job) -> str:
    """Why a large job needs a reservation ("" when it does not)."""
    s = ctx.settings.reservations
    gpus = job_gpus(job)
    if gpus < s.large_job_gpus or ctx.blocked_by_slurm(job):
        return ""
    waited = ctx.wait_seconds(job)
    if prio.fragmented.get(job.job_id):
        heads = any(prio.heads.get(p) == job.job_id for p in ctx.partitions_of(job))
        if heads:
            return "it heads its partition but free GPUs are fragmented"
    if s.reserve_after_wait and waited >= s.starvation_wait and not ctx.fits_now(job):
        return f"it has waited {humanize(waited)} (threshold {humanize(s.starvation_wait)})"
    return ""


def reservation_actions(ctx: Context, prio: PriorityResult, beneficiaries: set[int],
                        claimed: set[str]) -> list[Action]:
    """Create, update and delete our starvation reservations."""
    s = ctx.settings.reservations
    actions: list[Action] = []
    ours: dict[int, ReservationIntent] = {}
    for intent in ctx.intents.reservations:
        ours[intent.job_id] = intent
    # Deletions first: they free hosts for the searches below.
    for job_id, intent in sorted(ours.items()):
        job = ctx.by_id.get(job_id)
        why = ""
        if job is None or job.state.is_finished:
            why = f"job {job_id} left the queue"
        elif job.is_running:
            why = f"job {job_id} started"
        elif job_id in beneficiaries:
            why = f"job {job_id} gets its nodes through preemption instead"
        elif ctx.blocked_by_slurm(job) in ("held", "dependency"):
            why = f"job {job_id} is {ctx.blocked_by_slurm(job)}"
        elif intent.start_time > ctx.now and ctx.fits_now(job):
            why = f"job {job_id} no longer needs it: it fits on free nodes now"
        if why:
            actions.append(DeleteReservation(name=intent.name, job_id=job_id,
                                             reason=f"reservation {intent.name} deleted: {why}"))
            del ours[job_id]
    # A reservation that carries our prefix but that no intent knows is left
    # alone: the name alone does not make it ours (an admin may use the same
    # prefix), and ours all end by themselves (their duration is bounded).
    # Hosts held by other reservations (ours for other jobs, and foreign ones).
    held_by: dict[str, set[str]] = {}
    for res in ctx.snapshot.reservations:
        if res.end_time is not None and res.end_time <= ctx.now:
            continue
        if res.start_time is not None and res.start_time > ctx.now + FAR_AHEAD:
            continue  # e.g. the daemons' lease: it blocks nothing Slurm plans now
        for h in res.nodes:
            held_by.setdefault(h, set()).add(res.name)
    for intent in ours.values():
        for h in intent.nodes:
            held_by.setdefault(h, set()).add(intent.name)
    for h in claimed:
        held_by.setdefault(h, set()).add("(preemption)")
    candidates: list[tuple[Job, str]] = []
    large = s.large_job_gpus
    # Without reserve_after_wait only a partition's head can qualify
    # (starving()): a job or two to ask, not the queue.
    pool = (ctx.pending if s.reserve_after_wait else
            [ctx.by_id[job_id] for job_id in dict.fromkeys(prio.heads.values())])
    for job in pool:
        if job.job_id in beneficiaries:
            continue
        if job_gpus(job) < large:
            continue  # starving() says "" at once
        why = starving(ctx, prio, job)
        if why:
            candidates.append((job, why))
    candidates.sort(key=lambda c: (-prio.effective[c[0].job_id], c[0].submit_time or 0.0,
                                   c[0].job_id))
    chosen = candidates[:s.max_per_cycle]
    # Higher-priority candidates choose first, as in the cycle that created their
    # reservations: a candidate is not blocked by the (older) reservations of
    # candidates still to choose after it, or the choice would depend on what
    # earlier cycles decided and a second plan would move what the first made.
    undecided = {reservation_names(ctx.prefix, job.job_id)[0] for job, _ in chosen}
    for job, why in chosen:
        name = reservation_names(ctx.prefix, job.job_id)[0]
        blocked = {h for h, names in held_by.items() if names - undecided}
        undecided.discard(name)
        result = forecast(ctx, job, blocked)
        if isinstance(result, NoPlacement):
            actions.append(Annotate(job_id=job.job_id, reason=(
                f"no reservation for job {job.job_id} ({why}): {result.reason}")))
            continue
        if result.start <= ctx.now and job.job_id not in ours:
            continue  # it can start now; nothing to reserve
        duration = _duration(ctx, job)
        fields = dict(name=name, job_id=job.job_id, nodes=result.hosts,
                      start_time=result.start, duration=duration, user=job.user,
                      account=job.account, partition=ctx.partitions_of(job)[0])
        existing = ours.get(job.job_id)
        text = (f"job {job.job_id} ({job_gpus(job)} GPUs) is starving: {why}; "
                f"{len(result.hosts)} node(s) free earliest at "
                f"+{humanize(result.start - ctx.now)} after {result.basis_text(ctx.now)}")
        if existing is None:
            actions.append(CreateReservation(reason=f"reserve for {text}", **fields))  # type: ignore[arg-type]
        elif existing.start_time <= ctx.now and result.start <= ctx.now:
            pass  # active and still usable: leave it
        elif (tuple(existing.nodes) != result.hosts
              or abs(existing.start_time - result.start) > s.update_threshold):
            actions.append(UpdateReservation(
                reason=(f"move reservation (start {humanize(existing.start_time - ctx.now)} -> "
                        f"{humanize(result.start - ctx.now)}) for {text}"), **fields))  # type: ignore[arg-type]
        if existing is not None and existing.start_time <= ctx.now and result.start <= ctx.now:
            continue  # kept as it is, on its own nodes
        # From here on the reservation sits on result.hosts, not where it was.
        for names in held_by.values():
            names.discard(name)
        for h in result.hosts:
            held_by.setdefault(h, set()).add(name)
    return actions
