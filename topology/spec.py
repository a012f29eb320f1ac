"""What the fabric sources say, before it becomes a Fabric.

Owns the plain records every source parser produces (topology.conf, the
fabric file, ``nvidia-smi topo -m``, node features, the synthetic generator)
and the merge of several of them into one :class:`FabricSpec`. A merge that
finds two sources grouping hosts differently records a :class:`Conflict`; it
does not pick a winner silently (the precedence used is written in the
conflict, and ``slurmpolicy fabric check`` fails on any conflict).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.slices import SliceSpec
from slurmpolicy.topology.types import Health, Level


def read_source(path: Path, what: str, errors: str = "strict") -> str:
    """The text of a fabric source file; a TopologyError naming the file and
    what it was meant to be when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors=errors)
    except FileNotFoundError:
        raise TopologyError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read {what}: {exc.strerror}") from exc

#: Per-GPU memory of common data-centre GPUs, in GB, used when a source names
#: the type but not the memory. Types with several memory sizes (a100: 40 or
#: 80) are left out on purpose: guessing would be wrong half the time.
KNOWN_GPU_MEMORY_GB: Mapping[str, float] = {
    "h100": 80.0,
    "h800": 80.0,
    "h200": 141.0,
    "gh200": 96.0,
    "b200": 180.0,
    "gb200": 186.0,
    "b300": 288.0,
    "l40s": 48.0,
    "l40": 48.0,
    "l4": 24.0,
    "a10": 24.0,
    "a30": 24.0,
    "v100": 32.0,
    "mi300x": 192.0,
}


@dataclass(slots=True)
class GpuLink:
    """One GPU of a host as ``nvidia-smi topo -m`` describes it."""

    index: int
    #: GPU-to-GPU fabric links to each peer GPU index: NVLinks (the # of NV#)
    #: from nvidia-smi, 1 per XGMI peer from rocm-smi.
    nvlinks: dict[int, int] = field(default_factory=dict)
    #: NIC names whose affinity to this GPU is PIX or PXB (same PCIe switch).
    near_nics: tuple[str, ...] = ()
    cpu_affinity: str = ""
    numa_affinity: str = ""
    #: The PCIe path code (PIX, PXB, PHB, NODE, SYS) to each peer GPU index that is not
    #: NVLinked to this one.
    pcie: dict[int, str] = field(default_factory=dict)
    #: Every NIC column with its path code to this GPU (NIC name -> PIX ... SYS).
    nic_paths: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class HostSpec:
    """Everything known about one host; None = this source does not say."""

    name: str
    gpus: int | None = None
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    nvlink: str | None = None
    leaf: str | None = None
    #: Per-GPU detail from nvidia-smi, when known.
    gpu_links: tuple[GpuLink, ...] = ()
    #: GPU slices (MIG instances, shards) and the GPU each lives on (topology.slices).
    slices: tuple[SliceSpec, ...] = ()
    #: GPUs cut into MIG instances (after the ``gpus`` whole ones), not whole-GPU capacity.
    mig_gpus: int = 0
    #: The GPU-to-GPU fabric ``gpu_links`` describe: "nvlink" or "xgmi" (None: unknown).
    gpu_fabric: str | None = None
    nics: tuple[str, ...] = ()
    #: Where each field came from, for conflict messages: field -> "file:line".
    origin: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """Health (and bandwidth) of one link, named by its two ends.

    An end is a host, a switch, an NVLink domain, or ``host:gpuN``.
    """

    a: str
    b: str
    health: Health = Health.OK
    bandwidth_gbps: float | None = None
    origin: str = ""


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two sources disagree; ``message`` says who said what and who won."""

    level: Level
    message: str
    sources: tuple[str, ...] = ()


@dataclass(slots=True)
class FabricSpec:
    """One source's (or the merged) description of the fabric."""

    source: str = ""
    hosts: dict[str, HostSpec] = field(default_factory=dict)
    #: Switch -> its parent switch (leaf -> spine -> core ...).
    parents: dict[str, str] = field(default_factory=dict)
    links: list[LinkSpec] = field(default_factory=list)
    #: topology.conf tree form: a switch's LinkSpeed (Slurm's arbitrary units), if given.
    link_speed: dict[str, str] = field(default_factory=dict)
    #: topology.conf block form: the BlockSizes line, if any.
    block_sizes: tuple[int, ...] = ()
    conflicts: list[Conflict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Names of the sources merged into this spec, highest precedence first.
    sources: tuple[str, ...] = ()
    #: The topology.conf form read ("tree", "block" or "ring"; "" for other sources), so
    #: that rendering gives back the form a site wrote.
    form: str = ""
    #: Block form: every BlockName in file order with its nodes; padding blocks (no
    #: Nodes=, as NVIDIA's topograph writes them) have none.
    block_order: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    #: Tree form: switches with neither Nodes= nor Switches= (Slurm's empty leaves).
    empty_switches: list[str] = field(default_factory=list)
    #: Tree form: (switch, parent) links beyond the first parent of a switch (a fat tree
    #: written with every spine); the fabric uses the first, rendering writes them all.
    more_parents: list[tuple[str, str]] = field(default_factory=list)
    #: Ring form (RingName=): each ring's nodes in file order.
    rings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: topology.yaml: (name, kind, cluster_default) of every topology, in file order.
    topologies: list[tuple[str, str, bool]] = field(default_factory=list)

    def host(self, name: str) -> HostSpec:
        spec = self.hosts.get(name)
        if spec is None:
            spec = self.hosts[name] = HostSpec(name)
        return spec


_HOST_FIELDS = ("gpus", "gpu_type", "gpu_memory_gb")
_GROUP_FIELDS: tuple[tuple[str, Level], ...] = (("nvlink", Level.NVLINK), ("leaf", Level.LEAF))


def _grouping_conflicts(
    winner: FabricSpec, loser: FabricSpec, attr: str, level: Level
) -> list[Conflict]:
    """Label-agnostic comparison: do the two sources group hosts the same way?

    Sources may name a leaf differently (feature ``leaf1`` vs switch ``ibsw-07``);
    what matters is whether they put the same hosts together.
    """
    common = sorted(
        h for h in winner.hosts.keys() & loser.hosts.keys()
        if getattr(winner.hosts[h], attr) is not None and getattr(loser.hosts[h], attr) is not None
    )
    w_to_l: dict[str, dict[str, list[str]]] = {}
    l_to_w: dict[str, dict[str, list[str]]] = {}
    for h in common:
        w, lo = getattr(winner.hosts[h], attr), getattr(loser.hosts[h], attr)
        w_to_l.setdefault(w, {}).setdefault(lo, []).append(h)
        l_to_w.setdefault(lo, {}).setdefault(w, []).append(h)
    out: list[Conflict] = []
    name = level.name.lower()
    for w, parts in sorted(w_to_l.items()):
        if len(parts) > 1:
            said = "; ".join(f"{_hl(hs)} in {lo}" for lo, hs in sorted(parts.items()))
            out.append(Conflict(level, (
                f"{winner.source} puts {_hl([h for hs in parts.values() for h in hs])} in one "
                f"{name} ({w}) but {loser.source} splits them: {said}; using {winner.source}"
            ), (winner.source, loser.source)))
    for lo, parts in sorted(l_to_w.items()):
        if len(parts) > 1:
            said = "; ".join(f"{_hl(hs)} in {w}" for w, hs in sorted(parts.items()))
            out.append(Conflict(level, (
                f"{loser.source} puts {_hl([h for hs in parts.values() for h in hs])} in one "
                f"{name} ({lo}) but {winner.source} splits them: {said}; using {winner.source}"
            ), (winner.source, loser.source)))
    return out


def _hl(hosts: Iterable[str]) -> str:
    from slurmpolicy.hostlist import compress

    return compress(hosts)


def merge(specs: Iterable[FabricSpec]) -> FabricSpec:
    """Merge sources, highest precedence first. Disagreements become Conflicts.

    Fields a higher source leaves unset are filled from lower ones; a field
    both set differently is taken from the higher source and reported.
    """
    ordered = [s for s in specs if s is not None]
    out = FabricSpec(source="+".join(s.source for s in ordered) or "empty",
                     sources=tuple(s.source for s in ordered))
    for i, spec in enumerate(ordered):
        out.warnings.extend(spec.warnings)
        out.conflicts.extend(spec.conflicts)
        if spec.block_sizes and not out.block_sizes:
            out.block_sizes = spec.block_sizes
        if spec.form and not out.form:
            out.form = spec.form
            out.block_order = list(spec.block_order)
            out.empty_switches = list(spec.empty_switches)
            out.more_parents = list(spec.more_parents)
            out.rings = dict(spec.rings)
        out.topologies.extend(spec.topologies)
        for higher in ordered[:i]:
            for attr, level in _GROUP_FIELDS:
                out.conflicts.extend(_grouping_conflicts(higher, spec, attr, level))
        for name, host in spec.hosts.items():
            merged = out.host(name)
            for attr in ("gpus", "gpu_type", "gpu_memory_gb", "nvlink", "leaf"):
                theirs = getattr(host, attr)
                if theirs is None:
                    continue
                ours = getattr(merged, attr)
                if ours is None:
                    setattr(merged, attr, theirs)
                    if attr in host.origin:
                        merged.origin[attr] = host.origin[attr]
                elif attr in _HOST_FIELDS and ours != theirs:
                    out.conflicts.append(Conflict(Level.HOST, (
                        f"{name}: {attr} is {ours!r} in"
                        f" {merged.origin.get(attr, 'a higher source')}"
                        f" but {theirs!r} in {host.origin.get(attr, spec.source)};"
                        f" using {ours!r}"
                    ), (out.sources[0], spec.source)))
            if host.slices and not merged.slices:
                merged.slices, merged.mig_gpus = host.slices, host.mig_gpus
            if host.gpu_links and not merged.gpu_links:
                merged.gpu_links = host.gpu_links
                merged.gpu_fabric = host.gpu_fabric
                merged.nics = host.nics
        for switch, speed in spec.link_speed.items():
            out.link_speed.setdefault(switch, speed)
        for child, parent in spec.parents.items():
            known = out.parents.get(child)
            if known is None:
                out.parents[child] = parent
            elif known != parent:
                out.conflicts.append(Conflict(Level.SPINE, (
                    f"switch {child} is under {known} in a higher source but under {parent}"
                    f" in {spec.source}; using {known}"
                ), (spec.source,)))
        out.links.extend(spec.links)
    return out
