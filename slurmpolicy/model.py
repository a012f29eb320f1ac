"""The cluster as slurmpolicy sees it: frozen records of Slurm's jobs, nodes,
partitions and reservations, and the Snapshot that holds one consistent read.

This module owns the vocabulary shared by every layer. The Slurm adapters
build these records; policy, topology, the daemon, the inspector and the
simulator only read them. Times are seconds since the Unix epoch (UTC) as
floats, so that the planner can do arithmetic on 20,000 jobs without
converting; ``None`` means "not set" (Slurm's 0 / Unknown), and a time limit
of ``None`` means UNLIMITED.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

EMPTY_GRES: Mapping[str, int] = MappingProxyType({})


class JobState(StrEnum):
    """Slurm's base job states (``JOB_STATE_BASE``), in Slurm's words."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @classmethod
    def parse(cls, value: str) -> JobState:
        """Map a Slurm state string (any case; first of a list) to a state.

        Slurm reports ``COMPLETING`` and ``REQUEUED`` etc. as *flags* next to
        a base state; an unknown word falls back to PENDING only if Slurm
        says so, otherwise it is an error the adapter reports.
        """
        word = value.strip().upper()
        try:
            return cls(word)
        except ValueError as exc:
            raise ValueError(f"unknown Slurm job state {value!r}") from exc

    @property
    def is_finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED)


#: Node base states that can never run a job until an admin acts.
UNUSABLE_NODE_STATES = frozenset({"DOWN", "FUTURE", "UNKNOWN"})
#: Node flags that keep new jobs off a node.
UNSCHEDULABLE_NODE_FLAGS = frozenset(
    {"DRAIN", "DRAINING", "DRAINED", "MAINTENANCE", "NOT_RESPONDING", "POWERED_DOWN",
     "POWERING_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED", "FAIL", "INVALID_REG"}
)


@dataclass(frozen=True, slots=True)
class Job:
    """One Slurm job (one array task, one het component) as policy needs it."""

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: JobState
    # Slurm's state_reason: "None", "Priority", "Resources", "Dependency", ...
    reason: str = "None"
    #: Slurm state flags next to the base state, e.g. {"COMPLETING", "REQUEUED"}.
    state_flags: frozenset[str] = frozenset()
    array_job_id: int | None = None
    array_task_id: int | None = None
    het_job_id: int | None = None
    het_job_offset: int | None = None
    user_id: int | None = None
    qos: str = ""
    priority: int = 0
    site_factor: int = 0
    node_count: int = 1
    #: GPUs requested on each node (from --gres=gpu[:type]:N or --gpus-per-node).
    gpus_per_node: int = 0
    #: GPUs of the whole job (node_count x gpus_per_node unless asked as --gpus).
    gpus: int = 0
    gpu_type: str | None = None
    cpus: int = 1
    memory_mb: int = 0
    #: Seconds; None is UNLIMITED.
    time_limit: float | None = None
    submit_time: float | None = None
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    restart_count: int = 0
    #: Slurm may requeue the job (``--requeue``, or ``JobRequeue=1`` in slurm.conf,
    #: Slurm's own default); the adapters always read it from Slurm.
    requeue: bool = True
    features: str = ""
    reservation: str = ""
    #: Allocated nodes, expanded from Slurm's hostlist, for running jobs.
    nodes: tuple[str, ...] = ()
    #: GPUs held on each allocated node; empty when unknown.
    gpus_on_node: Mapping[str, int] = field(default_factory=lambda: EMPTY_GRES)
    dependency: str = ""
    comment: str = ""
    admin_comment: str = ""
    #: Slurm's --begin, when it lies in the future.
    begin_time: float | None = None
    #: How a finished job exited: its return code and the signal that ended it.
    exit_code: int | None = None
    exit_signal: int | None = None
    #: Nodes the job must not run on (``--exclude``, ``ExcNodeList``).
    excluded_nodes: tuple[str, ...] = ()
    #: The sbatch command line as Slurm recorded it (23.02+; "" on 22.05).
    submit_line: str = ""
    #: The ``--signal`` value of the job's ``#SBATCH`` lines ("B:USR1@90"), when
    #: the daemon read its batch script; "" when it has none or it was not read.
    batch_signal: str = ""

    @property
    def is_pending(self) -> bool:
        return self.state is JobState.PENDING

    @property
    def is_running(self) -> bool:
        return self.state is JobState.RUNNING

    @property
    def ends_unknown(self) -> bool:
        """Completing, and the record does not say how it ended.

        Slurm 22.05's ``squeue --json``, and pyslurm (``job_state_string()``),
        print the one word ``COMPLETING`` for a completing job, whatever its
        end, and the adapters read it as COMPLETED with the flag: a job that
        failed, or that was requeued, looks completed until its nodes are done
        with it (a site's epilog makes that seconds). 23.02 and later's
        ``squeue --json`` print the base state beside the flag."""
        return self.state is JobState.COMPLETED and "COMPLETING" in self.state_flags

    @property
    def is_held(self) -> bool:
        return self.is_pending and self.reason.startswith("JobHeld")

    @property
    def display_id(self) -> str:
        """The id a user types: ``123_4`` for array tasks, ``123+1`` for het parts."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.het_job_id is not None and self.het_job_offset is not None:
            return f"{self.het_job_id}+{self.het_job_offset}"
        return str(self.job_id)


@dataclass(frozen=True, slots=True)
class Node:
    """One Slurm node: what it has, what is in use, whether it can take work."""

    name: str
    #: Slurm's base state: IDLE, MIXED, ALLOCATED, DOWN, ...
    state: str
    #: Slurm's state flags: DRAIN, MAINTENANCE, NOT_RESPONDING, ...
    flags: frozenset[str] = frozenset()
    reason: str = ""
    cpus: int = 0
    cpus_alloc: int = 0
    memory_mb: int = 0
    memory_alloc_mb: int = 0
    #: Configured GPUs by type ("" for untyped gres), from Gres=gpu:h100:8.
    gpus_by_type: Mapping[str, int] = field(default_factory=lambda: EMPTY_GRES)
    #: Allocated GPUs by type, from GresUsed or derived from the jobs.
    gpus_alloc_by_type: Mapping[str, int] = field(default_factory=lambda: EMPTY_GRES)
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    #: Configured GPU shards (gres ``shard``) by the GPU type they share, from
    #: Gres=shard:a100:4; MIG instances are GPU types of their own in ``gpus_by_type``.
    shards_by_type: Mapping[str, int] = field(default_factory=lambda: EMPTY_GRES)

    @property
    def gpus(self) -> int:
        return sum(self.gpus_by_type.values())

    @property
    def gpus_alloc(self) -> int:
        return sum(self.gpus_alloc_by_type.values())

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus - self.gpus_alloc) if self.schedulable else 0

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted(t for t in self.gpus_by_type if t))

    @property
    def schedulable(self) -> bool:
        """True when Slurm may start new work on the node."""
        return self.state not in UNUSABLE_NODE_STATES and not (
            self.flags & UNSCHEDULABLE_NODE_FLAGS
        )


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    nodes: tuple[str, ...] = ()
    priority_tier: int = 1
    preempt_mode: str = "OFF"
    default: bool = False
    state: str = "UP"
    #: Seconds; None is UNLIMITED.
    max_time: float | None = None
    #: Seconds; None when unset.
    default_time: float | None = None
    grace_time: float = 0.0


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    nodes: tuple[str, ...] = ()
    start_time: float | None = None
    end_time: float | None = None
    flags: frozenset[str] = frozenset()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partition: str = ""
    #: Free-form note; slurmpolicy marks its own reservations in the name.
    comment: str = ""

    def is_active(self, now: float) -> bool:
        return (self.start_time is None or self.start_time <= now) and (
            self.end_time is None or now < self.end_time
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One consistent read of the cluster; the planner's only view of Slurm."""

    taken_at: float
    slurm_version: str
    cluster_name: str
    jobs: tuple[Job, ...] = ()
    nodes: tuple[Node, ...] = ()
    partitions: tuple[Partition, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    # Lookup tables built on first use; not an init field, so dataclasses.replace()
    # gives the copy a fresh, empty cache instead of the original's stale one.
    _index: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def _cached(self, key: str, build: Any) -> Any:
        hit = self._index.get(key)
        if hit is None:
            hit = self._index[key] = build()
        return hit

    def job(self, job_id: int) -> Job | None:
        return self.jobs_by_id().get(job_id)

    def jobs_by_id(self) -> dict[int, Job]:
        """Every job by id, in ``jobs``' order (built once, shared: not to be changed)."""
        by_id: dict[int, Job] = self._cached("jobs", lambda: {j.job_id: j for j in self.jobs})
        return by_id

    def by_state(self) -> tuple[list[Job], list[Job]]:
        """The pending jobs and the running ones, each in ``jobs``' order (built
        once, shared: not to be changed)."""
        split: tuple[list[Job], list[Job]] = self._cached("by_state", lambda: (
            [j for j in self.jobs if j.state is JobState.PENDING],
            [j for j in self.jobs if j.state is JobState.RUNNING]))
        return split

    def prime(self, by_id: dict[int, Job], pending: list[Job], running: list[Job]) -> None:
        """Hand over :meth:`jobs_by_id` and :meth:`by_state`, already built.

        For a reader that keeps its records from one read to the next (the
        simulator's daemon, sim/driver.py): it holds the waiting jobs by id
        already, and building the tables again is a walk of the whole queue
        per plan. They must be exactly what the methods would build
        (tests/unit/test_sim_engine.py checks the simulator's)."""
        self._index["jobs"] = by_id
        self._index["by_state"] = (pending, running)

    def node(self, name: str) -> Node | None:
        by_name: dict[str, Node] = self._cached("nodes", lambda: {n.name: n for n in self.nodes})
        return by_name.get(name)

    def partition(self, name: str) -> Partition | None:
        by_name: dict[str, Partition] = self._cached(
            "partitions", lambda: {p.name: p for p in self.partitions}
        )
        return by_name.get(name)

    def reservation(self, name: str) -> Reservation | None:
        by_name: dict[str, Reservation] = self._cached(
            "reservations", lambda: {r.name: r for r in self.reservations}
        )
        return by_name.get(name)

    def pending(self) -> Iterator[Job]:
        return (j for j in self.jobs if j.state is JobState.PENDING)

    def running(self) -> Iterator[Job]:
        return (j for j in self.jobs if j.state is JobState.RUNNING)
