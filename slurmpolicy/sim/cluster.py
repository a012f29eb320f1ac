"""The simulated cluster's hosts and Slurm's node selection over them.

Owns the host table the simulator mutates (free GPUs per host, the leaf,
NVLink domain and spine of each host) and the placement rule of Slurm's
select/cons_tres with topology/tree, as a best effort: a single-node job goes
to the host with the fewest free GPUs that still fit it (best fit, so whole
hosts stay whole); a multi-node job goes to the single leaf whose free hosts
fit it most tightly, else the spine, else the whole cluster, taking the
leaves with the most free hosts first. It is deliberately cheap: it runs
hundreds of thousands of times in a replay of 50,000 jobs.

The host table comes from a topology :class:`~slurmpolicy.topology.Fabric`
when one is given (``from_fabric``), or from numbers (``layout``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Hosts:
    """Hosts by index: names, GPUs, domains, and the free GPUs the simulator keeps."""

    names: list[str]
    gpus: list[int]
    leaf: list[int]
    nvlink: list[int]
    spine: list[int]
    leaf_names: list[str]
    nvlink_names: list[str]
    gpu_type: str = "gpu"

    def __post_init__(self) -> None:
        self.free: list[int] = list(self.gpus)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.total_gpus = sum(self.gpus)
        self.free_gpus = self.total_gpus
        n_leaf = max(self.leaf) + 1 if self.leaf else 0
        self.leaf_hosts: list[list[int]] = [[] for _ in range(n_leaf)]
        for i, lf in enumerate(self.leaf):
            self.leaf_hosts[lf].append(i)

    @classmethod
    def layout(
        cls, hosts: int, gpus_per_host: int = 8, hosts_per_leaf: int = 16,
        hosts_per_nvlink: int = 1, leaves_per_spine: int = 8, prefix: str = "gpu",
        gpu_type: str = "h100",
    ) -> Hosts:
        if hosts < 1 or gpus_per_host < 1 or hosts_per_leaf < 1 or hosts_per_nvlink < 1:
            raise ValueError(
                "hosts, gpus per host, hosts per leaf and per NVLink domain must be >= 1")
        width = max(2, len(str(hosts)))
        names = [f"{prefix}{i + 1:0{width}d}" for i in range(hosts)]
        leaf = [i // hosts_per_leaf for i in range(hosts)]
        nvl = [i // hosts_per_nvlink for i in range(hosts)]
        spine = [lf // max(1, leaves_per_spine) for lf in leaf]
        return cls(
            names=names, gpus=[gpus_per_host] * hosts, leaf=leaf, nvlink=nvl, spine=spine,
            leaf_names=[f"leaf{j + 1}" for j in range(max(leaf) + 1)],
            nvlink_names=[f"nvl{j + 1}" for j in range(max(nvl) + 1)], gpu_type=gpu_type,
        )

    @classmethod
    def from_fabric(cls, fabric: Any) -> Hosts:
        """Hosts of a topology Fabric (its leaf, NVLink and spine domains)."""
        from slurmpolicy.topology.types import Level

        names = list(fabric.hosts)
        levels = (Level.LEAF, Level.NVLINK, Level.SPINE)
        ids: dict[Level, dict[str, int]] = {lv: {} for lv in levels}
        cols: dict[Level, list[int]] = {lv: [] for lv in ids}
        for h in names:
            for lv in ids:
                try:
                    dom = fabric.domain_of(h, lv) or f"{h}-{lv.name}"
                except Exception:  # a fabric without that level: each host alone
                    dom = f"{h}-{lv.name}"
                cols[lv].append(ids[lv].setdefault(dom, len(ids[lv])))
        gpu_type = next((t for h in names if (t := fabric.gpu_type_of(h))), "gpu")
        return cls(
            names=names, gpus=[int(fabric.gpus_of(h)) for h in names], leaf=cols[Level.LEAF],
            nvlink=cols[Level.NVLINK], spine=cols[Level.SPINE],
            leaf_names=list(ids[Level.LEAF]), nvlink_names=list(ids[Level.NVLINK]),
            gpu_type=gpu_type,
        )

    # --- the simulator's bookkeeping ---------------------------------------------
    def take(self, alloc: Iterable[tuple[int, int]]) -> None:
        for h, g in alloc:
            self.free[h] -= g
            self.free_gpus -= g

    def give(self, alloc: Iterable[tuple[int, int]]) -> None:
        for h, g in alloc:
            self.free[h] += g
            self.free_gpus += g

    # --- placement ----------------------------------------------------------------
    def place(
        self, nodes: int, gpus_per_node: int, usable: Sequence[bool] | None = None,
        only: Sequence[int] | None = None,
    ) -> list[tuple[int, int]] | None:
        """Slurm-like node selection, or None when the job does not fit now.

        ``usable[h]`` False keeps host ``h`` out (reserved for someone else);
        ``only`` restricts the choice to those hosts (a job in a reservation).
        """
        free = self.free
        cand = range(len(free)) if only is None else only
        if nodes == 1:
            best = -1
            best_free = 1 << 30
            for h in cand:
                f = free[h]
                if gpus_per_node <= f < best_free and (usable is None or usable[h]):
                    best, best_free = h, f
                    if f == gpus_per_node:
                        break
            return None if best < 0 else [(best, gpus_per_node)]
        fit = [h for h in cand if free[h] >= gpus_per_node and (usable is None or usable[h])]
        if len(fit) < nodes:
            return None
        by_leaf: dict[int, list[int]] = {}
        for h in fit:
            by_leaf.setdefault(self.leaf[h], []).append(h)
        # One leaf, the tightest that fits (topology/tree's best fit).
        tight = [(len(hs), lf) for lf, hs in by_leaf.items() if len(hs) >= nodes]
        if tight:
            _, lf = min(tight)
            return [(h, gpus_per_node) for h in self._tightest(by_leaf[lf], nodes)]
        # Else one spine, else anywhere: fullest leaves first to span few.
        by_spine: dict[int, list[int]] = {}
        for h in fit:
            by_spine.setdefault(self.spine[h], []).append(h)
        spines = sorted(((len(hs), sp) for sp, hs in by_spine.items() if len(hs) >= nodes))
        pool = by_spine[spines[0][1]] if spines else fit
        leaves: dict[int, list[int]] = {}
        for h in pool:
            leaves.setdefault(self.leaf[h], []).append(h)
        chosen: list[int] = []
        for hs in sorted(leaves.values(), key=lambda v: (-len(v), v[0])):
            chosen.extend(self._tightest(hs, nodes - len(chosen)))
            if len(chosen) >= nodes:
                break
        return [(h, gpus_per_node) for h in chosen[:nodes]]

    def _tightest(self, hosts: list[int], n: int) -> list[int]:
        """The ``n`` hosts with the fewest free GPUs (keep whole hosts whole)."""
        if len(hosts) <= n:
            return hosts
        return sorted(hosts, key=lambda h: (self.free[h], h))[:n]

    def fragmentation_index(self) -> float:
        """1 - free GPUs on wholly free hosts / free GPUs (0: no scatter)."""
        free = self.free_gpus
        if free <= 0:
            return 0.0
        whole = sum(f for f, g in zip(self.free, self.gpus, strict=True) if f == g)
        return 1.0 - whole / free

    def within(self, alloc: Sequence[tuple[int, int]]) -> tuple[bool, bool]:
        """(one leaf, one NVLink domain) for an allocation."""
        return (len({self.leaf[h] for h, _ in alloc}) == 1,
                len({self.nvlink[h] for h, _ in alloc}) == 1)
