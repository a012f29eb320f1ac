"""Small hand-made clusters for tests, the simulator and demos.

Owns :class:`ClusterBuilder`, which lays out a regular fabric (via
``synthetic_fabric``), places running jobs on named hosts, queues pending
jobs with their directives, and returns a consistent Snapshot (node GPU use
derived from the running jobs) and its Fabric. Pure: no Slurm, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from slurmpolicy.jobpolicy import Checkpoint, JobPolicy, render_admin_comment
from slurmpolicy.model import Job, JobState, Node, Partition, Reservation, Snapshot

if TYPE_CHECKING:
    from slurmpolicy.topology import Fabric


def directives(job_class: str | None = None, ckpt: str | None = None, *,
               preemptible: bool = True, after: float = 0.0, topology: str = "any",
               strict: bool = False, runtime: float | None = None,
               gpu_type: str | None = None, data: str | None = None,
               defer: str | None = None, deadline: float | None = None,
               grace: float = 60.0, gpu_mem: float | None = None) -> str:
    """An admin_comment as job_submit.lua writes it.

    ``ckpt``: None (said nothing), "none", or a signal name such as "USR1".
    """
    checkpoint = None
    if ckpt == "none":
        checkpoint = Checkpoint(signal=None)
    elif ckpt:
        checkpoint = Checkpoint(signal=ckpt, grace=grace)
    return render_admin_comment(JobPolicy(
        job_class=job_class, checkpoint=checkpoint, preemptible=preemptible,
        preemptible_after=after, topology=topology, topology_strict=strict,
        expected_runtime=runtime, gpu_type=gpu_type, min_gpu_memory_gb=gpu_mem, data=data,
        defer_window=defer,
        defer_deadline=deadline))


@dataclass
class ClusterBuilder:
    """A regular GPU cluster: ``hosts`` hosts named gpu01.., ``gpus`` GPUs each."""

    hosts: int = 16
    gpus: int = 8
    hosts_per_leaf: int = 4
    leaves_per_spine: int = 4
    hosts_per_nvlink: int = 1
    gpu_type: str = "h100"
    now: float = 1_800_000_000.0
    #: Partition name -> host indexes (1-based); default: one partition "batch" of all.
    partitions: dict[str, list[int]] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    features: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gpu_types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        width = max(2, len(str(self.hosts)))
        self.names = [f"gpu{i:0{width}d}" for i in range(1, self.hosts + 1)]
        if not self.partitions:
            self.partitions = {"batch": list(range(1, self.hosts + 1))}

    def host(self, i: int) -> str:
        return self.names[i - 1]

    def _part(self, partition: str | None) -> str:
        return partition or next(iter(self.partitions))

    def run(self, job_id: int, account: str = "a", *, hosts: list[int],
            gpus_per_node: int | None = None, ran: float = 3600.0,
            time_limit: float | None = 4 * 3600.0, admin_comment: str = "",
            comment: str = "", user: str | None = None, partition: str | None = None,
            restart_count: int = 0) -> Job:
        gpn = self.gpus if gpus_per_node is None else gpus_per_node
        names = tuple(self.host(i) for i in hosts)
        job = Job(job_id=job_id, name=f"j{job_id}", user=user or f"u_{account}",
                  account=account, partition=self._part(partition), state=JobState.RUNNING,
                  reason="None", node_count=len(names), gpus_per_node=gpn,
                  gpus=gpn * len(names), time_limit=time_limit,
                  submit_time=self.now - ran - 60, eligible_time=self.now - ran - 60,
                  start_time=self.now - ran, nodes=names,
                  gpus_on_node=MappingProxyType({h: gpn for h in names}),
                  comment=comment, admin_comment=admin_comment, requeue=True,
                  restart_count=restart_count)
        self.jobs.append(job)
        return job

    def pend(self, job_id: int, account: str = "a", *, nodes: int = 1,
             gpus_per_node: int | None = None, waited: float = 60.0,
             time_limit: float | None = 4 * 3600.0, admin_comment: str = "",
             reason: str = "Resources", user: str | None = None,
             partition: str | None = None, priority: int = 1000, site_factor: int = 0,
             begin_time: float | None = None, dependency: str = "") -> Job:
        gpn = self.gpus if gpus_per_node is None else gpus_per_node
        job = Job(job_id=job_id, name=f"j{job_id}", user=user or f"u_{account}",
                  account=account, partition=self._part(partition), state=JobState.PENDING,
                  reason=reason, node_count=nodes, gpus_per_node=gpn, gpus=gpn * nodes,
                  time_limit=time_limit, submit_time=self.now - waited,
                  eligible_time=self.now - waited, admin_comment=admin_comment,
                  priority=priority, site_factor=site_factor, begin_time=begin_time,
                  dependency=dependency)
        self.jobs.append(job)
        return job

    def replace_job(self, job_id: int, **changes: Any) -> None:
        from dataclasses import replace

        self.jobs = [replace(j, **changes) if j.job_id == job_id else j for j in self.jobs]

    def nodes(self) -> list[Node]:
        alloc: dict[str, int] = {}
        for job in self.jobs:
            if job.state is JobState.RUNNING:
                for h in job.nodes:
                    alloc[h] = alloc.get(h, 0) + job.gpus_on_node.get(h, job.gpus_per_node)
        parts: dict[str, list[str]] = {}
        for name, idx in self.partitions.items():
            for i in idx:
                parts.setdefault(self.host(i), []).append(name)
        out = []
        for i, name in enumerate(self.names, start=1):
            gtype = self.gpu_types.get(name, self.gpu_type)
            used = min(alloc.get(name, 0), self.gpus)
            state = "DOWN" if name in self.down else (
                "IDLE" if used == 0 else ("ALLOCATED" if used >= self.gpus else "MIXED"))
            leaf = (i - 1) // self.hosts_per_leaf + 1
            out.append(Node(
                name=name, state=state, cpus=64, memory_mb=512_000,
                gpus_by_type=MappingProxyType({gtype: self.gpus}),
                gpus_alloc_by_type=MappingProxyType({gtype: used} if used else {}),
                features=(gtype, f"leaf{leaf}", *self.features.get(name, ())),
                partitions=tuple(parts.get(name, ()))))
        return out

    def snapshot(self, now: float | None = None) -> Snapshot:
        return Snapshot(
            taken_at=self.now if now is None else now, slurm_version="25.11.0",
            cluster_name="test", jobs=tuple(self.jobs), nodes=tuple(self.nodes()),
            partitions=tuple(Partition(name=name, nodes=tuple(self.host(i) for i in idx))
                             for name, idx in self.partitions.items()),
            reservations=tuple(self.reservations))

    def fabric(self) -> Fabric:
        from slurmpolicy.topology import Fabric, synthetic_fabric

        if self.gpu_types:
            # Mixed GPU types: let the fabric read them from the nodes (leaves from features).
            return Fabric.from_sources(self.nodes(), None, None)
        fab = synthetic_fabric(hosts=self.hosts, gpus_per_host=self.gpus,
                               hosts_per_nvlink=self.hosts_per_nvlink,
                               hosts_per_leaf=self.hosts_per_leaf,
                               leaves_per_spine=self.leaves_per_spine, gpu_type=self.gpu_type,
                               prefix="gpu")
        return fab
