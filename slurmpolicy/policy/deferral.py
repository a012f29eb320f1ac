"""Deferral of ``--deferrable=WINDOW`` jobs to cheap or green hours.

Owns when a deferrable pending job may begin: the next hour of its named
window (``[deferral.windows.NAME] hours = [...]``, UTC), never past the
deadline the job gave (``--deferrable=WINDOW,deadline=D``, counted from
submission), and at once when the cluster is idle (fewer GPUs in use than
``deferral.idle_release_fraction``). The lever is Slurm's begin time.
"""

from __future__ import annotations

from slurmpolicy.model import Job
from slurmpolicy.policy.actions import Action, SetBeginTime
from slurmpolicy.policy.context import Context
from slurmpolicy.settings import Window

HOUR = 3600.0
#: Begin times closer than this to the target are left alone.
TOLERANCE = 60.0


def in_window(window: Window, when: float) -> bool:
    return int(when // HOUR) % 24 in window.hours


def next_window_start(window: Window, now: float) -> float | None:
    """Epoch seconds when ``window`` next opens (``now`` when it is open)."""
    if not window.hours:
        return None
    if in_window(window, now):
        return now
    hour_start = (now // HOUR) * HOUR
    for step in range(1, 25):
        candidate = hour_start + step * HOUR
        if in_window(window, candidate):
            return candidate
    return None


def cluster_idle(ctx: Context) -> bool:
    if ctx.total_gpus <= 0:
        return True
    return ctx.used_gpus / ctx.total_gpus < ctx.settings.deferral.idle_release_fraction


def target_begin(ctx: Context, job: Job) -> tuple[float | None, str]:
    """The begin time the job should have (None: free to start now) and why."""
    policy = ctx.policy(job)
    window = ctx.settings.deferral.windows.get(policy.defer_window or "")
    if window is None:
        return None, f"unknown deferral window {policy.defer_window!r}"
    deadline = None
    if policy.defer_deadline is not None and job.submit_time is not None:
        deadline = job.submit_time + policy.defer_deadline
    if deadline is not None and ctx.now >= deadline:
        return None, "its deferral deadline has passed"
    if cluster_idle(ctx):
        return None, (f"the cluster is idle ({ctx.used_gpus} of {ctx.total_gpus} GPUs in use)")
    start = next_window_start(window, ctx.now)
    if start is None or start <= ctx.now:
        return None, f"window {policy.defer_window!r} is open"
    if deadline is not None and start > deadline:
        return deadline, f"deferred until its deadline (window {policy.defer_window!r} opens later)"
    return start, f"deferred to window {policy.defer_window!r} (cost {window.cost:g})"


def deferral_actions(ctx: Context) -> list[Action]:
    actions: list[Action] = []
    known = ctx.intents.begin_times
    infos = ctx.infos
    # A few jobs of a deep queue ask for a window: priority.compute listed them.
    for job in ctx.pending if ctx.deferrable is None else ctx.deferrable:
        info = infos.get(job.job_id)
        policy = info.policy if info is not None and info.job is job else ctx.policy(job)
        if not policy.defer_window or job.is_held:
            continue
        target, why = target_begin(ctx, job)
        current = known.get(job.job_id, job.begin_time) if job.job_id in known else job.begin_time
        if current is not None and current <= ctx.now:
            current = None
        if target is None:
            if current is not None:
                actions.append(SetBeginTime(job_id=job.job_id, begin_time=None,
                                            reason=f"released: {why}"))
        elif current is None or abs(current - target) > TOLERANCE:
            actions.append(SetBeginTime(job_id=job.job_id, begin_time=target, reason=why))
    return actions
