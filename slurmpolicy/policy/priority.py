"""Site factors: class weight + fair share + aging + fragmentation bonus.

Owns the number slurmpolicy hands Slurm for each pending job through its
site factor (Slurm's multifactor plugin keeps adding its own factors), the
effective priority the other rules and the inspector rank jobs by, and the
rule for which changes are worth a Slurm call: only those that moved by at
least ``priority.change_threshold`` against what was last set, at most
``priority.max_updates_per_cycle`` per cycle, largest change first.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmpolicy.model import Job
from slurmpolicy.policy.actions import SetSiteFactor
from slurmpolicy.policy.context import Context


@dataclass(frozen=True, slots=True)
class Factors:
    """The parts of one job's site factor, for explanations."""

    class_weight: int
    fairshare: int
    aging: int
    fragmentation: int
    penalty: int

    @property
    def total(self) -> int:
        return max(0, self.class_weight + self.fairshare + self.aging
                   + self.fragmentation - self.penalty)

    def describe(self) -> str:
        parts = [f"class {self.class_weight}", f"fair share {self.fairshare}",
                 f"aging {self.aging}"]
        if self.fragmentation:
            parts.append(f"fragmentation bonus {self.fragmentation}")
        if self.penalty:
            parts.append(f"no-checkpoint penalty -{self.penalty}")
        return " + ".join(parts)


def factors(ctx: Context, job: Job, fragmented: bool | None = None,
            fairshare_points: int | None = None) -> Factors:
    s = ctx.settings
    wait = ctx.wait_seconds(job)
    wait_hours = (wait if wait < s.aging.max_age else s.aging.max_age) / 3600.0
    if fragmented is None:
        fragmented = ctx.fragmentation_blocked(job)
    penalty = s.priority.no_checkpoint_penalty if not ctx.policy(job).can_checkpoint else 0
    return Factors(
        class_weight=ctx.job_class(job).weight,
        fairshare=(ctx.fairshare.points(job.account) if fairshare_points is None
                   else fairshare_points),
        aging=round(wait_hours * s.aging.points_per_hour),
        fragmentation=round(wait_hours * s.aging.fragmentation_bonus_per_hour) if fragmented else 0,
        penalty=penalty,
    )


@dataclass(slots=True)
class PriorityResult:
    site_factor: dict[int, int]
    effective: dict[int, int]
    fragmented: dict[int, bool]
    #: Pending jobs per partition, highest effective priority first.
    order: dict[str, list[Job]]
    #: Per partition, the highest job that is not held, dependent or deferred.
    heads: dict[str, int]


def compute(ctx: Context) -> PriorityResult:
    """Site factor and effective priority of every pending job."""
    site: dict[int, int] = {}
    effective: dict[int, int] = {}
    fragmented: dict[int, bool] = {}
    points = ctx.fairshare.points_by_account()
    # Thousands of pending jobs, a few dozen shapes: answer each shape once
    # (jobs with a reservation of their own are asked one by one).
    frag_by_shape: dict[tuple[object, ...], bool] = {}
    for job in ctx.pending:
        if ctx.blocked_by_slurm(job):
            frag = False
        elif ctx.has_own_active_reservation(job):
            frag = ctx.fragmentation_blocked(job)
        else:
            key = (job.admin_comment, job.partition, job.gpu_type, job.gpus,
                   job.gpus_per_node, job.node_count)
            hit = frag_by_shape.get(key)
            if hit is None:
                hit = frag_by_shape[key] = ctx.fragmentation_blocked(job)
            frag = hit
        value = factors(ctx, job, frag, points.get(job.account, 0)).total
        site[job.job_id] = value
        fragmented[job.job_id] = frag
        # Slurm's priority already contains the site factor it holds now.
        effective[job.job_id] = job.priority - job.site_factor + value
    order: dict[str, list[Job]] = {}
    heads: dict[str, int] = {}
    for part, jobs in ctx.pending_by_partition.items():
        order[part] = sorted(jobs, key=lambda j: (-effective[j.job_id],
                                                  j.submit_time or 0.0, j.job_id))
        head = next((j for j in order[part] if not ctx.blocked_by_slurm(j)), None)
        if head is not None:
            heads[part] = head.job_id
    return PriorityResult(site, effective, fragmented, order, heads)


def site_factor_actions(ctx: Context, result: PriorityResult) -> list[SetSiteFactor]:
    """Changes worth a Slurm call, largest first, capped per cycle."""
    threshold = ctx.settings.priority.change_threshold
    known = ctx.intents.site_factors
    changes: list[tuple[int, int, int, int]] = []
    for job in ctx.pending:
        new = result.site_factor[job.job_id]
        previous = known.get(job.job_id, job.site_factor)
        if abs(new - previous) >= max(1, threshold):
            changes.append((-abs(new - previous), job.job_id, new, previous))
    changes.sort()
    actions = []
    for _, job_id, new, previous in changes[:ctx.settings.priority.max_updates_per_cycle]:
        job = ctx.by_id[job_id]
        actions.append(SetSiteFactor(
            job_id=job_id, site_factor=new, previous=previous,
            reason=f"site factor {previous} -> {new}: "
                   f"{factors(ctx, job, result.fragmented[job_id]).describe()}"
                   f" ({ctx.job_class(job).name}, {ctx.fairshare.describe(job.account)})"))
    return actions
