"""The fabric's vocabulary, shared by placement, policy, inspector and simulator.

Owns the domain levels and the value types that cross the topology package's
boundary (a job's shape, a placement, why no placement exists, fragmentation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum


class Level(IntEnum):
    """Domain levels, innermost first: placement can ask "within one LEAF"."""

    GPU = 0
    HOST = 1
    NVLINK = 2
    LEAF = 3
    SPINE = 4
    CLUSTER = 5

    @classmethod
    def parse(cls, word: str) -> Level:
        """Level from its word: gpu, host, nvlink, leaf, spine, cluster (or 'any')."""
        key = word.strip().lower()
        if key == "any":
            return cls.CLUSTER
        try:
            return cls[key.upper()]
        except KeyError as exc:
            allowed = ", ".join(level.name.lower() for level in cls)
            raise ValueError(f"unknown domain level {word!r}; allowed: {allowed}, any") from exc


class Health(IntEnum):
    OK = 0
    DEGRADED = 1
    DOWN = 2


@dataclass(frozen=True, slots=True)
class Shape:
    """What a job asks of the fabric: ``nodes`` hosts with ``gpus_per_node`` free GPUs.

    ``level`` is the domain it wants to fit in; with ``strict`` it must fit in
    one domain of that level, else the level is a preference.
    """

    nodes: int
    gpus_per_node: int
    level: Level = Level.CLUSTER
    strict: bool = False
    #: Only hosts whose GPUs are of this type (None: any).
    gpu_type: str | None = None
    #: Only hosts with at least this much memory per GPU, in GB (None: any).
    min_gpu_memory_gb: float | None = None
    #: Hosts to prefer, all else being equal (e.g. those holding the job's data).
    prefer: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Placement:
    """A feasible node set for a shape, with how compact it is."""

    hosts: tuple[str, ...]
    #: The innermost level whose single domain holds all hosts.
    level: Level
    #: Number of distinct domains spanned at each level.
    spans: Mapping[Level, int] = field(default_factory=dict)
    #: Bandwidth-aware communication cost of the set (lower is better).
    cost: float = 0.0
    #: True when the set uses a degraded link.
    degraded: bool = False


@dataclass(frozen=True, slots=True)
class NoPlacement:
    """Why no node set fits: one sentence with numbers a user can act on."""

    reason: str
    #: Free GPUs on eligible hosts in the whole cluster.
    free_gpus: int = 0
    #: Most hosts with enough free GPUs inside one domain of the asked level.
    best_hosts_in_one_domain: int = 0


@dataclass(frozen=True, slots=True)
class DomainFragmentation:
    domain: str
    level: Level
    free_gpus: int
    #: Free GPUs that no waiting shape can use.
    stranded_gpus: int
    #: Largest free GPU count on any one host of the domain.
    largest_free_host: int


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """How badly free GPUs are scattered.

    ``index`` is shape-independent: 1 - (free GPUs on fully free hosts / free
    GPUs), 0 when all free capacity sits on whole hosts, towards 1 when it is
    spread thinly. ``stranded_gpus`` counts free GPUs that none of the waiting
    shapes could use.
    """

    free_gpus: int
    stranded_gpus: int
    index: float
    by_domain: tuple[DomainFragmentation, ...] = ()
    #: The level ``by_domain`` is broken down by.
    level: Level = Level.LEAF
    #: Most free GPUs inside any one domain of ``level``.
    largest_domain_free: int = 0
    #: Free GPUs on hosts that are entirely free.
    whole_host_free: int = 0
    #: GPU slices (MIG instances, shards) in all and free; not counted in the GPUs above.
    slices: int = 0
    free_slices: int = 0

    def summary(self) -> str:
        """One sentence for people: "32 GPUs free, but at most 8 in any one leaf"."""
        word = {Level.NVLINK: "NVLink domain"}.get(self.level, self.level.name.lower())
        if self.free_gpus == 0:
            return "no GPUs free"
        text = f"{self.free_gpus} GPUs free"
        busy = [d for d in self.by_domain if d.free_gpus]
        if len(busy) == 1:
            text += f", all in {word} {busy[0].domain}"
        elif self.largest_domain_free < self.free_gpus:
            text += f", but at most {self.largest_domain_free} in any one {word}"
        if self.stranded_gpus:
            text += f"; {self.stranded_gpus} of them cannot serve any waiting job shape"
        if self.slices:
            text += f"; {self.free_slices} of {self.slices} GPU slices free"
        return text
