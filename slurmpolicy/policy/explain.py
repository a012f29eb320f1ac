"""``explain()``: why a job waits, when it may start, what would help.

Owns the plain-words account of one job, built from the same Context and
rules ``plan()`` uses, so that the inspector never disagrees with the daemon.
For a pending job: its position by effective priority, the jobs ahead by
class, its request in words, what is free where it may run, the blocking
reason with numbers, an estimated start and its basis, and alternatives
(fewer nodes, a looser ``--topology``, another partition) each with its own
estimate. For a running job: its placement on the fabric, its last
checkpoint, and whether and why it is a preemption candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmpolicy.durations import humanize
from slurmpolicy.errors import JobGone
from slurmpolicy.hostlist import compress
from slurmpolicy.jobpolicy import JobPolicy, last_checkpoint
from slurmpolicy.model import Job, Snapshot
from slurmpolicy.policy import deferral, elastic, preemption, priority, reservations
from slurmpolicy.policy.actions import Intents, VictimState
from slurmpolicy.policy.context import Context, job_gpus, job_gpus_per_node
from slurmpolicy.policy.explanation import Alternative, Explanation
from slurmpolicy.protocol import describe
from slurmpolicy.settings import Settings
from slurmpolicy.topology.types import Level, NoPlacement

if TYPE_CHECKING:
    from slurmpolicy.topology import Fabric

#: Slurm's pending reasons in words.
SLURM_REASONS = {
    "None": "no reason given yet (the scheduler has not looked at it)",
    "Priority": "jobs of higher priority are ahead of it",
    "Resources": "the resources it asks for are in use",
    "Dependency": "it waits for another job (its dependency)",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "JobHeldUser": "held by its user",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "its begin time is in the future",
    "Reservation": "it waits for its reservation to start",
    "ReqNodeNotAvail": "nodes it needs are unavailable (down, drained or reserved)",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "QOSMaxGRESPerUser": "its QOS limits GPUs per user",
    "AssocGrpGRES": "its account's GPU limit is reached",
}

LEVEL_WORD = {Level.NVLINK: "NVLink domain", Level.LEAF: "leaf", Level.SPINE: "spine",
              Level.CLUSTER: "cluster", Level.HOST: "host", Level.GPU: "host"}


def _plural(word: str, n: int) -> str:
    if n == 1:
        return word
    return "leaves" if word == "leaf" else word + "s"


def request_text(ctx: Context, job: Job) -> str:
    policy = ctx.policy(job)
    gpn = job_gpus_per_node(job)
    gpu_type = ctx.gpu_type(job)
    parts = [f"{job.node_count} node{'s' if job.node_count != 1 else ''} x {gpn} GPU"
             + (f" ({gpu_type})" if gpu_type else "")]
    if policy.topology != "any" or policy.topology_strict:
        parts.append(f"topology {policy.topology}" + (",strict" if policy.topology_strict else ""))
    parts.append(humanize(job.time_limit) if job.time_limit is not None else "no time limit")
    if policy.expected_runtime is not None:
        parts.append(f"expects {humanize(policy.expected_runtime)}")
    if policy.min_gpu_memory_gb is not None:
        parts.append(f">= {policy.min_gpu_memory_gb:g} GB per GPU")
    if policy.data:
        parts.append(f"data {policy.data}")
    if policy.defer_window:
        parts.append(f"deferrable to {policy.defer_window}")
    parts.append("checkpoints" if ctx.can_checkpoint(job) else "cannot checkpoint")
    return ", ".join(parts)


def free_text(ctx: Context, job: Job) -> str:
    free = ctx.free_map(job)
    total = sum(free.values())
    if not free:
        return f"no GPUs free in partition {job.partition}"
    most_host = max(free.values())
    text = (f"{total} GPUs free on {len(free)} node{'s' if len(free) != 1 else ''} of "
            f"partition {job.partition}; at most {most_host} on one host")
    level, _ = ctx.level_of(job)
    if Level.NVLINK <= level < Level.CLUSTER:
        per: dict[str, int] = {}
        for h, f in free.items():
            d = ctx.domain_of(h, level)
            per[d] = per.get(d, 0) + f
        text += f", at most {max(per.values())} in one {LEVEL_WORD[level]}"
    return text


def _blocking(ctx: Context, job: Job, prio: priority.PriorityResult,
              position: int | None) -> tuple[str, str]:
    kind = ctx.blocked_by_slurm(job)
    policy = ctx.policy(job)
    if kind == "held":
        return "held", (f"the job is held ({job.reason}); `scontrol release {job.job_id}` "
                        "lets it go")
    if kind == "dependency":
        return "dependency", f"it waits for its dependency {job.dependency or job.reason}"
    if kind == "deferred":
        if policy.defer_window:
            _, why = deferral.target_begin(ctx, job)
            return "deferred", (f"deferred until {humanize((job.begin_time or ctx.now) - ctx.now)}"
                                f" from now: {why}")
        away = humanize((job.begin_time or ctx.now) - ctx.now)
        return "deferred", f"its begin time is {away} away"
    if kind == "quota":
        return "quota", f"a limit holds it: {SLURM_REASONS.get(job.reason, job.reason)}"
    p = ctx.preemption_of_beneficiary.get(job.job_id)
    if p is not None:
        waiting = [v for v in p.victims
                   if v.state not in (VictimState.REQUEUED, VictimState.ENDED)]
        return "preemption", (f"waiting for preemption {p.preemption_id} to finish: "
                              f"{len(waiting)} of {len(p.victims)} victim(s) still to leave "
                              f"{compress(p.nodes)}")
    for intent in ctx.intents.reservations:
        if intent.job_id == job.job_id:
            when = ("now" if intent.start_time <= ctx.now
                    else f"in {humanize(intent.start_time - ctx.now)}")
            return "reservation", (f"waiting for its reservation {intent.name} on "
                                   f"{compress(intent.nodes)}, which starts {when}")
    gpus = job_gpus(job)
    if gpus <= 0 or ctx.fits_now(job):
        if position and position > 1:
            return "priority", (f"it fits now, but {position - 1} job(s) with higher priority "
                                "are ahead of it in its partition")
        return "none", "it fits now; Slurm should start it at its next scheduling pass"
    free_total = ctx.free_gpus_for(job)
    shape = ctx.shape_of(job)
    if shape.strict and shape.level < Level.CLUSTER:
        sizes: dict[str, int] = {}
        for h in ctx.eligible_hosts(job):
            if ctx.gpus_of_type(h, shape.gpu_type)[0] >= shape.gpus_per_node:
                d = ctx.domain_of(h, shape.level)
                sizes[d] = sizes.get(d, 0) + 1
        largest = max(sizes.values(), default=0)
        if largest < shape.nodes:
            word = LEVEL_WORD[shape.level]
            return "topology", (f"topology: no {word} has {shape.nodes} hosts with "
                                f"{shape.gpus_per_node} GPUs where it may run (the largest has "
                                f"{largest}); --topology={ctx.policy(job).topology},strict can "
                                "never be met")
    if free_total < gpus:
        return "resources", (f"{free_total} GPUs free where it may run; it needs {gpus}")
    result = ctx.fabric.place(shape, ctx.free_map(job))
    reason = result.reason if isinstance(result, NoPlacement) else "placement found"
    return "fragmentation", f"fragmentation: {reason}"


def _estimate(ctx: Context, job: Job, kind: str) -> tuple[float | None, str]:
    if kind in ("held", "dependency", "quota"):
        return None, f"unknown while it is {kind}"
    if kind == "deferred":
        return job.begin_time, "its begin time"
    if kind == "none" or kind == "priority":
        return ctx.now, "resources are free now"
    p = ctx.preemption_of_beneficiary.get(job.job_id)
    if p is not None:
        # Promise only what the held nodes can give: they must be held for
        # this job alone (the reservation named on it), and hold nothing but
        # the victims, who leave by their deadlines.
        if job.reservation != p.reservation or \
                ctx.snapshot.reservation(p.reservation) is None:
            return None, (f"no start promised: reservation {p.reservation} is not (yet) "
                          "in place for it alone")
        victims = {v.job_id for v in p.victims}
        held = set(p.nodes)
        other = sorted({j.job_id for j in ctx.running
                        if j.job_id not in victims and held & set(j.nodes)})
        if other:
            return None, (f"no start promised: job(s) {', '.join(map(str, other[:6]))} "
                          f"run on the held nodes {compress(p.nodes)}")
        deadlines = [v.deadline for v in p.victims if v.deadline is not None]
        grace = ctx.settings.preemption.default_grace
        end = max(deadlines) if deadlines else ctx.now + grace
        return max(end, ctx.now), "the victims' checkpoint deadlines"
    for intent in ctx.intents.reservations:
        if intent.job_id == job.job_id:
            return max(intent.start_time, ctx.now), f"the start of reservation {intent.name}"
    result = reservations.forecast(ctx, job)
    if isinstance(result, NoPlacement):
        return None, f"no start in sight: {result.reason}"
    return result.start, result.basis_text(ctx.now)


def _alternatives(ctx: Context, job: Job) -> tuple[Alternative, ...]:
    out: list[Alternative] = []
    if job_gpus(job) <= 0:
        return ()

    def add(change: str, **kw: object) -> None:
        result = reservations.forecast(ctx, job, **kw)  # type: ignore[arg-type]
        if isinstance(result, NoPlacement):
            out.append(Alternative(change, None, result.reason))
        else:
            out.append(Alternative(change, result.start, result.basis_text(ctx.now)))

    if job.node_count > 1:
        half = job.node_count // 2
        add(f"ask for {half} node{'s' if half != 1 else ''} instead of {job.node_count}",
            nodes=job.node_count // 2)
    level, strict = ctx.level_of(job)
    if strict:
        add(f"drop strict from --topology={ctx.policy(job).topology}", strict=False)
    elif level < Level.CLUSTER:
        add("use --topology=any", level=Level.CLUSTER, strict=False)
    for part in sorted(ctx._partition_hosts):
        if part in ctx.partitions_of(job) or "," in part or not part:
            continue
        p = ctx.snapshot.partition(part)
        if p is None or p.state != "UP":
            continue
        if not any(ctx.nodes[h].gpus for h in ctx._partition_hosts[part] if h in ctx.nodes):
            continue
        add(f"submit to partition {part}", partition=part)
    return tuple(out)


def pool_line(settings: Settings, job: Job, policy: JobPolicy, job_class: str) -> str | None:
    """Which pool the job is in and why (slurmpolicy.pools), None without pools."""
    if not settings.pools:
        return None
    from slurmpolicy.pools import describe_job

    return describe_job(settings, job_class, job.partition, job.gpus, job.node_count,
                        job.gpus_per_node, job.gpu_type or policy.gpu_type,
                        policy.min_gpu_memory_gb)


def explain(snapshot: Snapshot, fabric: Fabric, settings: Settings, intents: Intents,
            now: float, job_id: int) -> Explanation:
    """Why job ``job_id`` waits (or what is happening to it while it runs)."""
    ctx = Context(snapshot, fabric, settings, intents, now)
    job = ctx.by_id.get(job_id)
    if job is None:
        raise JobGone(f"job {job_id} is not in the queue")
    cls = ctx.job_class(job)
    notes = [cls.note] if cls.note else []
    if not ctx.policy(job).readable:
        notes.append("its #SPOLICY record could not be read; defaults apply")
    pool_note = pool_line(settings, job, ctx.policy(job), cls.name)
    if pool_note:
        notes.append(pool_note)
    elastic_note = (elastic.running_note(ctx, job) if job.is_running else
                    elastic.pending_note(ctx, job) if job.is_pending else None)
    if elastic_note:
        notes.append(elastic_note)
    base = dict(job_id=job.job_id, job_class=cls.name, partition=job.partition,
                request=request_text(ctx, job), slurm_reason=job.reason,
                slurm_reason_text=SLURM_REASONS.get(job.reason, job.reason))
    if job.is_running:
        # Which checkpoint protocol it was recognised by: what a preemption does to it.
        notes.append(f"checkpoint {describe(ctx.policy(job).checkpoint)}")
        return _explain_running(ctx, job, base, notes)
    if not job.is_pending:
        if job.ends_unknown:  # it may have failed: not "COMPLETED"
            return Explanation(
                state="COMPLETING", headline=f"Job {job.job_id} is COMPLETING: it has ended, "
                "and how (completed, failed, requeued) shows once its epilog is done",
                notes=tuple(notes), **base)  # type: ignore[arg-type]
        return Explanation(state=job.state.value, headline=f"Job {job.job_id} is {job.state.value}",
                           notes=tuple(notes), **base)  # type: ignore[arg-type]
    prio = priority.compute(ctx)
    part = ctx.partitions_of(job)[0]
    order = prio.order.get(part, [])
    # Held, dependent and deferred jobs are not really ahead: they cannot start.
    position = None
    ahead: dict[str, int] = {}
    count = 0
    for other in order:
        if other.job_id == job.job_id:
            position = count + 1
            break
        if ctx.blocked_by_slurm(other) in ("held", "dependency", "deferred"):
            continue
        count += 1
        name = ctx.job_class(other).name
        ahead[name] = ahead.get(name, 0) + 1
    kind, text = _blocking(ctx, job, prio, position)
    start, basis = _estimate(ctx, job, kind)
    factors = priority.factors(ctx, job, job.job_id in prio.bonus)
    notes.append(f"site factor {factors.total}: {factors.describe()}")
    if kind in ("fragmentation", "resources"):
        starving = reservations.starving(ctx, prio, job)
        if starving and not any(i.job_id == job.job_id for i in ctx.intents.reservations):
            notes.append(f"qualifies for a starvation reservation: {starving}")
        preview = preemption.preview(ctx, job)
        if preview:
            notes.append(preview)
    notes.append(ctx.fairshare.describe(job.account))
    when = f"; estimated start in {humanize(start - now)}" if start is not None else ""
    headline = f"Waiting ({kind}): {text}{when}" if kind != "none" else f"Ready: {text}"
    return Explanation(
        state=job.state.value, headline=headline, position=position,
        ahead_by_class=ahead, effective_priority=prio.effective[job.job_id],
        blocking=kind, blocking_text=text, free_text=free_text(ctx, job),
        estimated_start=start, estimate_basis=basis,
        alternatives=(sooner(_alternatives(ctx, job), start)
                      if kind not in ("held", "dependency") else ()),
        notes=tuple(notes), **base)  # type: ignore[arg-type]


def sooner(alternatives: tuple[Alternative, ...],
           start: float | None) -> tuple[Alternative, ...]:
    """Only the changes that would start the job sooner than it starts now: a known
    start earlier than the current estimate (any known start when it has none)."""
    return tuple(a for a in alternatives if a.estimated_start is not None
                 and (start is None or a.estimated_start < start))


def _explain_running(ctx: Context, job: Job, base: dict[str, object],
                     notes: list[str]) -> Explanation:
    hosts = [h for h in job.nodes if h in ctx.free]
    placement = f"on {compress(job.nodes)}" if job.nodes else "on unknown nodes"
    if len(hosts) > 1:
        spans = ctx.fabric.spans(hosts) if hasattr(ctx.fabric, "spans") else {}
        words = [f"{n} {_plural(LEVEL_WORD[lv], n)}"
                 for lv, n in sorted(spans.items()) if lv in (Level.NVLINK, Level.LEAF,
                                                              Level.SPINE)]
        if words:
            placement += f" spanning {', '.join(words)}"
        placement += f"; communication cost {ctx.fabric.cost(hosts):.1f}"
    elif hosts:
        placement += f" (leaf {ctx.domain_of(hosts[0], Level.LEAF)})"
    ckpt = last_checkpoint(job.comment, ctx.now)
    why = preemption.why_not_victim(ctx, job, None)
    in_flight = next((p for p in ctx.open_preemptions
                      if any(v.job_id == job.job_id for v in p.victims)), None)
    if in_flight is not None:
        candidate = True
        text = (f"being preempted for job {in_flight.beneficiary} "
                f"({in_flight.preemption_id}); it should checkpoint now")
    elif why is None:
        candidate = True
        lost = preemption.lost_work(ctx, job)
        shelter = " (sheltered: cannot checkpoint, chosen last)" if \
            ctx.shielded_by_no_checkpoint(job) else ""
        text = (f"may be preempted by a higher class; it would lose "
                f"{preemption.gpu_hours(lost)}{shelter}")
    else:
        candidate = False
        text = f"not a preemption candidate: {why}"
    end = ctx.expected_end(job)
    when = "" if end == float("inf") else f"; expected to end in {humanize(end - ctx.now)}"
    ck = f"last checkpoint {humanize(ctx.now - ckpt)} ago" if ckpt else "no checkpoint yet"
    return Explanation(
        state=job.state.value, headline=f"Running {placement}; {ck}{when}",
        placement_text=placement, last_checkpoint=ckpt, preemption_candidate=candidate,
        preemption_text=text, notes=tuple(notes), **base)  # type: ignore[arg-type]
