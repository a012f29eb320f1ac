"""Fixed snapshots for the inspector's render tests, built from model objects.

The small one mirrors the recorded scenario of tests/fixtures/slurm (8 nodes
dgx[01-08], dgx08 drained, jobs 1-12), plus an open preemption and some audit
rows; ``big_frame`` has 10,000 pending jobs.
"""

from __future__ import annotations

from types import MappingProxyType

from slurmpolicy.model import Job, JobState, Node, Partition, Reservation, Snapshot
from slurmpolicy.policy.actions import (
    Intents,
    PreemptionIntent,
    PreemptionState,
    VictimIntent,
    VictimState,
)
from slurmpolicy.policy.explanation import Alternative, Explanation
from slurmpolicy.tui.frame import Decision, Frame

NOW = 1796220000.0
T0 = 1796219593.0


def _gpus(n: int) -> MappingProxyType[str, int]:
    return MappingProxyType({"h100": n})


def nodes(used: dict[str, int]) -> tuple[Node, ...]:
    out = []
    for i in range(1, 9):
        name = f"dgx{i:02d}"
        leaf = "leaf1" if i <= 4 else "leaf2"
        rack = "nvl_rack1" if i <= 4 else "nvl_rack2"
        n_used = used.get(name, 0)
        drained = name == "dgx08"
        out.append(Node(
            name=name,
            state="IDLE" if n_used == 0 else ("ALLOCATED" if n_used == 8 else "MIXED"),
            flags=frozenset({"DRAIN"}) if drained else frozenset(),
            reason="ib link flapping" if drained else "",
            cpus=8, memory_mb=64000, gpus_by_type=_gpus(8), gpus_alloc_by_type=_gpus(n_used),
            features=("h100", rack, leaf), partitions=("prod", "research"),
        ))
    return tuple(out)


def _job(job_id: int, user: str, account: str, partition: str, state: JobState,
         **kw: object) -> Job:
    return Job(job_id=job_id, name=f"job{job_id}", user=user, account=account,
               partition=partition, state=state, **kw)  # type: ignore[arg-type]


def small_snapshot() -> Snapshot:
    R, P = JobState.RUNNING, JobState.PENDING
    jobs = [
        _job(1, "alice", "vision", "research", R, priority=14, node_count=2, gpus_per_node=8,
             gpus=16, requeue=True, submit_time=T0, start_time=T0, time_limit=172800.0,
             nodes=("dgx05", "dgx06"), comment="ckpt:1796219900",
             admin_comment="spolicy:v1 class=research ckpt=signal:USR1,grace=120"),
        _job(2, "bob", "nlp", "research", R, priority=7, gpus_per_node=4, gpus=4,
             submit_time=T0, start_time=T0, time_limit=14400.0, nodes=("dgx01",), requeue=True),
    ]
    for task in range(6):
        jobs.append(_job(3 + task, "carol", "speech", "research", R, priority=7,
                         gpus_per_node=2, gpus=2, array_job_id=3, array_task_id=task,
                         submit_time=T0, start_time=T0, time_limit=3600.0,
                         nodes=(("dgx01",) if task < 2 else ("dgx02",)), requeue=True))
    jobs += [
        _job(9, "bob", "nlp", "research", P, reason="Resources", priority=42, node_count=6,
             gpus_per_node=8, gpus=48, submit_time=T0 + 3, eligible_time=T0 + 3,
             start_time=T0 + 604806, time_limit=172800.0),
        _job(10, "alice", "vision", "research", P, reason="Dependency", priority=7,
             gpus_per_node=1, gpus=1, submit_time=T0 + 3, dependency="afterok:1"),
        _job(11, "carol", "speech", "research", P, reason="JobHeldUser", priority=0,
             gpus_per_node=1, gpus=1, submit_time=T0 + 3),
        _job(12, "alice", "vision", "prod", R, priority=14, node_count=2, gpus_per_node=8,
             gpus=16, requeue=True, submit_time=T0 + 6, start_time=T0 + 6,
             nodes=("dgx03", "dgx04"),
             admin_comment="spolicy:v1 class=production ckpt=signal:USR1,grace=120 preempt=no"),
    ]
    used = {"dgx01": 8, "dgx02": 8, "dgx03": 8, "dgx04": 8, "dgx05": 8, "dgx06": 8}
    return Snapshot(
        taken_at=NOW, slurm_version="22.05.8", cluster_name="devcluster",
        jobs=tuple(jobs), nodes=nodes(used),
        partitions=(Partition("prod", priority_tier=10), Partition("research", default=True)),
        reservations=(Reservation("maint", nodes=("dgx07",), start_time=NOW + 86400,
                                  end_time=NOW + 86400 + 14400, flags=frozenset({"MAINT"})),),
    )


def small_intents() -> Intents:
    return Intents(preemptions=(
        PreemptionIntent(
            preemption_id="p-9-0", beneficiary=9, nodes=("dgx05", "dgx06"),
            reservation="spolicy_p9", state=PreemptionState.SIGNALLED, started_at=NOW - 240,
            victims=(VictimIntent(job_id=1, restart_count=0, state=VictimState.SIGNALLED,
                                  signalled_at=NOW - 30, deadline=NOW + 90),),
        ),
    ))


def small_decisions() -> tuple[Decision, ...]:
    return (
        Decision(at=NOW - 600, kind="SetSiteFactor", job_id=9,
                 reason="research class 10000 + aging 200 + fragmentation bonus 400"),
        Decision(at=NOW - 240, kind="StartPreemption", job_id=9,
                 reason="job 9 (research, 48 GPUs) waited 1h; victims lose 12 GPU-minutes"),
        Decision(at=NOW - 30, kind="SignalCheckpoint", job_id=1,
                 reason="USR1 to job 1 for preemption p-9-0; grace 120s", outcome="ok"),
    )


def small_frame(**kw: object) -> Frame:
    snap = small_snapshot()
    leaf_of = {n.name: ("leaf1" if n.name <= "dgx04" else "leaf2") for n in snap.nodes}
    # Two NVLink racks of two nodes per leaf.
    nvlink_of = {n.name: f"nvl{(int(n.name[3:]) + 1) // 2}" for n in snap.nodes}
    fields: dict[str, object] = dict(
        snapshot=snap, now=NOW, intents=small_intents(), decisions=small_decisions(),
        leaf_of=leaf_of, nvlink_of=nvlink_of, degraded_links=("dgx08 - leaf2: ib link flapping",),
        source="test")
    fields.update(kw)
    return Frame(**fields)  # type: ignore[arg-type]


def big_frame(count: int = 10_000) -> Frame:
    users = ("alice", "bob", "carol", "dave", "erin")
    jobs = tuple(
        _job(1000 + i, users[i % 5], f"acct{i % 7}", "research" if i % 3 else "prod",
             JobState.PENDING, reason="Priority" if i % 4 else "Resources",
             priority=100_000 - i * 7 % 99_991, node_count=1 + i % 4, gpus_per_node=8,
             gpus=8 * (1 + i % 4), submit_time=NOW - 60 * (i % 500))
        for i in range(count)
    )
    snap = Snapshot(taken_at=NOW, slurm_version="25.11.7", cluster_name="big", jobs=jobs,
                    nodes=nodes({}))
    return Frame(snapshot=snap, now=NOW)


def pending_explanation() -> Explanation:
    return Explanation(
        job_id=9, state="PENDING",
        headline="Waiting: fragmentation - 8 GPUs are free, at most 8 in any one leaf; "
                 "you asked for 48 in one leaf",
        job_class="research", partition="research",
        request="6 nodes x 8 GPU (h100), leaf, 2-00:00:00",
        position=1, ahead_by_class={"production": 2, "research": 1}, effective_priority=10642,
        slurm_reason="Resources", slurm_reason_text="the resources it asks for are not free",
        blocking="fragmentation",
        blocking_text="8 GPUs are free, at most 8 in any one leaf; you asked for 48 in one leaf",
        free_text="8 GPUs free on 1 node (dgx07); dgx08 drained",
        estimated_start=NOW + 5400, estimate_basis="the end of jobs 1, 2 (time limits)",
        alternatives=(
            Alternative(change="--nodes=4 (32 GPUs)", estimated_start=NOW + 1800,
                        detail="fits leaf2 when job 1 ends"),
            Alternative(change="--topology=spine", estimated_start=None,
                        detail="no estimate: needs 6 free nodes"),
        ),
        notes=("preemption p-9-0 in progress for this job: 1 victim signalled",),
    )


def running_explanation() -> Explanation:
    return Explanation(
        job_id=1, state="RUNNING", headline="Running on dgx[05-06] (leaf2)",
        job_class="research", partition="research", request="2 nodes x 8 GPU (h100), 2-00:00:00",
        placement_text="dgx[05-06]: one leaf (leaf2), NVLink domain nvl_rack2",
        last_checkpoint=NOW - 100, preemption_candidate=True,
        preemption_text="victim of preemption p-9-0 for job 9; checkpoint deadline in 1m30s",
    )
