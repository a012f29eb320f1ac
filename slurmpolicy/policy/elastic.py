"""Elastic jobs: a job that accepts a node range (``--nodes=MIN-MAX``) and
checkpoints is shrunk instead of evicted.

Owns the pure rules; preemption and the executor call them.

- *Starting*: Slurm itself starts a job with a node range on as many nodes
  as are free within it ("without delaying the initiation of the job", as
  sbatch's manual says); the planner sees a pending elastic job at its
  minimum (Slurm reports ``NumNodes=MIN``), so nothing of ours holds it back
  for its maximum.
- *Shrinking*: when a preemption takes some of an elastic victim's nodes and
  at least MIN of them are left, the victim is signalled and requeued as
  any victim is (its checkpoint is what it restarts from); once Slurm has
  completed its old run the executor sets its node count to ``MIN-LEFT``
  (``scontrol update NumNodes=``), LEFT being the nodes the beneficiary does
  not take, and lifts Slurm's requeue delay (about two minutes, ``StartTime=now``):
  it restarts at once on those, smaller but within its range. (Slurm keeps a
  requeued job's range and would restart it with what is free, but only
  after the delay.) Slurm does not report the range once a job has run (it
  reports the allocated count), so it comes from the ``nodes=MIN-MAX`` that
  job_submit.lua recorded in the admin_comment.
- *Choosing*: among victims that lose the same work, an elastic one that
  would only shrink is taken first.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurmpolicy.model import Job
from slurmpolicy.policy.context import Context


def node_range(ctx: Context, job: Job) -> tuple[int, int] | None:
    """The job's ``--nodes=MIN-MAX`` when it is elastic (a range and a checkpoint)."""
    policy = ctx.policy(job)
    return policy.node_range if policy.elastic else None


def shrink_target(ctx: Context, victim: Job, taken: Iterable[str]) -> int | None:
    """Nodes ``victim`` keeps when the hosts ``taken`` go to a beneficiary, when it
    can restart on them within its range; None when it must be evicted."""
    rng = node_range(ctx, victim)
    if rng is None or not victim.nodes or not ctx.settings.preemption.shrink_elastic:
        return None
    left = len(set(victim.nodes) - set(taken))
    if left < rng[0] or left >= len(victim.nodes):
        return None
    return left


def describe(ctx: Context, victim: Job, keep: int) -> str:
    rng = node_range(ctx, victim)
    low = rng[0] if rng else keep
    return (f"shrink victim {victim.job_id} from {len(victim.nodes)} to {keep} node(s) "
            f"(its range {low}-{rng[1] if rng else keep}) instead of evicting it")


def pending_note(ctx: Context, job: Job) -> str | None:
    """For ``why`` on a pending job with a node range."""
    policy = ctx.policy(job)
    if policy.node_range is None:
        return None
    lo, hi = policy.node_range
    return (f"elastic: it may start on as few as {lo} of its {lo}-{hi} nodes, with what is free"
            if job.node_count <= lo else
            f"elastic range {lo}-{hi}: requeued at {job.node_count} node(s), it waits for "
            "that many")


def running_note(ctx: Context, job: Job) -> str | None:
    """For ``why`` on a running job: whether it would be shrunk rather than evicted."""
    policy = ctx.policy(job)
    if policy.node_range is None:
        return None
    lo, hi = policy.node_range
    if not policy.can_checkpoint:
        return (f"elastic range {lo}-{hi} nodes, but it cannot checkpoint: a preemption "
                "evicts it")
    n = len(job.nodes)
    if n > lo:
        return (f"elastic: runs on {n} of {lo}-{hi} nodes; a preemption would shrink it "
                f"(down to {lo}) rather than evict it")
    return f"elastic: runs on {n} node(s), its minimum ({lo}-{hi}); it cannot shrink further"
