"""The Fabric: hosts, GPUs, NVLink domains, InfiniBand leaves and spines.

Owns the graph (a networkx Graph whose nodes are the cluster, spines, leaves,
NVLink domains, hosts and GPUs, and whose edges carry ``kind`` nvlink / pcie /
ib, a ``bandwidth_gbps`` or NVLink ``width`` where known, and a ``health``),
and the per-level indexes that placement and the policy query on every cycle.

Levels: every host has exactly one domain at each level.

- HOST (and GPU): the host itself.
- NVLINK: the NVLink/NVSwitch domain; for an HGX 8-GPU board that is the host
  itself, for an NVL72-style rack it spans hosts. A host whose GPUs
  nvidia-smi shows talking over PCIe alone is a domain of its own whose graph
  node has kind ``pcie``; placement asked for NVLink strictly never gives a
  host more GPUs than it has NVLinked all to all (see nvsmi.interconnect).
- LEAF: the InfiniBand switch the host hangs off (a host no source places
  under a leaf is alone in a leaf named after itself; if no host has a leaf,
  all share one leaf called ``flat``: Slurm without a topology plugin treats
  the network as flat).
- SPINE: the leaf's parent switch (a leaf without one is its own spine).
- CLUSTER: ``cluster``; switches above the spines only appear in the graph.

The graph is built once; queries use plain lists and dicts of integers
precomputed from it, so a ``place()`` on 4,096 hosts costs milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.nvsmi import interconnect, nvlink_clique
from slurmpolicy.topology.slices import SliceSpec
from slurmpolicy.topology.spec import KNOWN_GPU_MEMORY_GB, Conflict, FabricSpec, LinkSpec
from slurmpolicy.topology.types import Fragmentation, Health, Level, NoPlacement, Placement, Shape

if TYPE_CHECKING:
    from slurmpolicy.model import Node
    from slurmpolicy.settings import Fabric as FabricSettings

#: Levels a host has a domain at, innermost first (GPU shares HOST's domain).
HOST_LEVELS: tuple[Level, ...] = (Level.HOST, Level.NVLINK, Level.LEAF, Level.SPINE,
                                  Level.CLUSTER)

#: Cost of one pair of hosts whose lowest common domain is at this level.
#: Roughly the inverse of per-GPU bandwidth between them: NVLink (~450 GB/s a
#: GPU) is the unit; an IB leaf (~50 GB/s a GPU) is 8 times as dear; every
#: switch tier above adds hops and the oversubscription of uplinks.
PAIR_COST: Mapping[Level, float] = {
    Level.HOST: 0.0, Level.NVLINK: 1.0, Level.LEAF: 8.0, Level.SPINE: 12.0,
    Level.CLUSTER: 16.0,
}
#: Hop count between two hosts whose lowest common domain is at this level.
HOPS: Mapping[Level, int] = {
    Level.HOST: 0, Level.NVLINK: 2, Level.LEAF: 2, Level.SPINE: 4, Level.CLUSTER: 6,
}
#: A pair whose path crosses a degraded link costs this much more per link.
DEGRADED_FACTOR = 1.0

CLUSTER_NAME = "cluster"
FLAT_LEAF = "flat"


class Fabric:
    """The cluster's fabric: build with :meth:`from_spec`, :meth:`from_sources`
    or :func:`~slurmpolicy.topology.synthetic.synthetic_fabric`."""

    graph: nx.Graph

    def __init__(self, spec: FabricSpec, *, known_nodes: Iterable[str] | None = None) -> None:
        self.spec = spec
        self.source = spec.source
        self.conflicts: tuple[Conflict, ...] = tuple(spec.conflicts)
        self.warnings: list[str] = list(spec.warnings)
        self.block_sizes = spec.block_sizes
        if known_nodes is not None:
            known = set(known_nodes)
            unknown = sorted(set(spec.hosts) - known)
            if unknown:
                # As Slurm does ("Invalid hostnames in switch configuration"): warn and
                # leave them out; a file naming a retired node must not stop the daemon.
                from slurmpolicy.hostlist import compress

                where = sorted({o for h in unknown for o in spec.hosts[h].origin.values()
                                if o.rsplit(":", 1)[-1].isdigit()})[:3]
                self.warnings.append(
                    f"{', '.join(where) or spec.source}: node(s) {compress(unknown)} not known"
                    " to Slurm; left out of the fabric, as Slurm leaves them out"
                )
                from dataclasses import replace

                gone = set(unknown)
                spec = replace(spec, hosts={h: hs for h, hs in spec.hosts.items()
                                            if h in known},
                               links=[lk for lk in spec.links
                                      if lk.a.split(":")[0] not in gone
                                      and lk.b.split(":")[0] not in gone])
                self.spec = spec
        self.hosts: tuple[str, ...] = tuple(sorted(spec.hosts))
        self._index = {h: i for i, h in enumerate(self.hosts)}
        self._build_levels()
        self._build_graph()
        self._build_health()

    # ------------------------------------------------------------------ build
    def _build_levels(self) -> None:
        spec = self.spec
        any_leaf = any(h.leaf for h in spec.hosts.values())
        self._gpus: list[int] = []
        self._gpu_type: list[str | None] = []
        self._gpu_mem: list[float | None] = []
        #: Per host: how its GPUs talk ("nvlink", "partial", "pcie", "" unknown), the
        #: worst GPU pair's path (NV18 ... PIX ... SYS), and the most GPUs NVLinked all
        #: to all (only NV# cells of nvidia-smi make NVLink).
        self._intra: list[tuple[str, str]] = []
        self._nv_clique: list[int] = []
        names: dict[Level, list[str]] = {lv: [] for lv in HOST_LEVELS}
        no_leaf: list[str] = []
        for h in self.hosts:
            hs = spec.hosts[h]
            self._gpus.append(hs.gpus or 0)
            self._gpu_type.append(hs.gpu_type)
            mem = hs.gpu_memory_gb
            if mem is None and hs.gpu_type:
                mem = KNOWN_GPU_MEMORY_GB.get(hs.gpu_type.lower())
            self._gpu_mem.append(mem)
            kind, rank = interconnect(hs)
            self._intra.append((kind, rank))
            self._nv_clique.append(nvlink_clique(hs) if hs.gpu_links else (hs.gpus or 0))
            leaf = hs.leaf or (h if any_leaf else FLAT_LEAF)
            if any_leaf and not hs.leaf:
                no_leaf.append(h)
            names[Level.HOST].append(h)
            names[Level.NVLINK].append(hs.nvlink or h)
            names[Level.LEAF].append(leaf)
            names[Level.SPINE].append(spec.parents.get(leaf, leaf) if hs.leaf or not any_leaf
                                      else h)
            names[Level.CLUSTER].append(CLUSTER_NAME)
        if no_leaf:
            from slurmpolicy.hostlist import compress

            self.warnings.append(
                f"{compress(no_leaf)}: under no leaf switch in {spec.source}; each is treated as"
                " alone in its own leaf (Slurm will not place a job across them either)"
            )
        # Integer ids per level: _dom[level][host index] -> domain id.
        self._dom: dict[Level, list[int]] = {}
        self._dom_names: dict[Level, list[str]] = {}
        self._members: dict[Level, list[list[int]]] = {}
        for lv in HOST_LEVELS:
            ids: dict[str, int] = {}
            col: list[int] = []
            for name in names[lv]:
                col.append(ids.setdefault(name, len(ids)))
            members: list[list[int]] = [[] for _ in ids]
            for i, d in enumerate(col):
                members[d].append(i)
            self._dom[lv] = col
            self._dom_names[lv] = list(ids)
            self._members[lv] = members
        self._dom[Level.GPU] = self._dom[Level.HOST]
        self._dom_names[Level.GPU] = self._dom_names[Level.HOST]
        self._members[Level.GPU] = self._members[Level.HOST]
        # NVLink fragments inside one leaf: the child of a leaf in the nested
        # tree placement descends, even when an NVLink domain spans leaves.
        frag_ids: dict[tuple[int, int], int] = {}
        self._frag = [frag_ids.setdefault((n, lf), len(frag_ids))
                      for n, lf in zip(self._dom[Level.NVLINK], self._dom[Level.LEAF],
                                       strict=True)]
        self._split_nvlink = sorted({
            self._dom_names[Level.NVLINK][d] for d, members in enumerate(
                self._members[Level.NVLINK])
            if len({self._dom[Level.LEAF][i] for i in members}) > 1
        })
        self._multi_host_nvlink = any(len(m) > 1 for m in self._members[Level.NVLINK])
        for name in self._split_nvlink:
            d = self._dom_names[Level.NVLINK].index(name)
            leaves = sorted({self._dom_names[Level.LEAF][self._dom[Level.LEAF][i]]
                             for i in self._members[Level.NVLINK][d]})
            self.warnings.append(
                f"NVLink domain {name} spans leaves {', '.join(leaves)}; a job asking for one"
                " leaf uses only the part of it inside that leaf"
            )

    def _build_graph(self) -> None:
        g = nx.Graph()
        spec = self.spec
        g.add_node(("cluster", CLUSTER_NAME), kind="cluster")
        switches: set[str] = set()
        for lf in self._dom_names[Level.LEAF]:
            switches.add(lf)
        # Every switch of the tree, with its parents up to the top.
        for child, parent in spec.parents.items():
            switches.add(child)
            switches.add(parent)
        leaves = set(self._dom_names[Level.LEAF])
        spines = set(self._dom_names[Level.SPINE])
        for sw in sorted(switches):
            kind = "leaf" if sw in leaves else "spine" if sw in spines else "switch"
            g.add_node(("switch", sw), kind=kind, name=sw,
                       link_speed=spec.link_speed.get(sw))
        for child, parent in spec.parents.items():
            g.add_edge(("switch", child), ("switch", parent), kind="ib", health=Health.OK,
                       bandwidth_gbps=None)
        for sw in sorted(switches):
            if sw not in spec.parents:
                g.add_edge(("switch", sw), ("cluster", CLUSTER_NAME), kind="ib",
                           health=Health.OK, bandwidth_gbps=None)
        pcie_only = {self._dom_names[Level.NVLINK][self._dom[Level.NVLINK][i]]
                     for i in range(len(self.hosts)) if self._intra[i][0] == "pcie"}
        for name in self._dom_names[Level.NVLINK]:
            # A PCIe-only host is a domain of its own kind: no NVLink in it.
            g.add_node(("nvlink", name), kind="pcie" if name in pcie_only else "nvlink",
                       name=name)
        nv_col, leaf_col = self._dom[Level.NVLINK], self._dom[Level.LEAF]
        nv_names, leaf_names = self._dom_names[Level.NVLINK], self._dom_names[Level.LEAF]
        hosts: list[tuple[Any, dict[str, Any]]] = []
        uplinks: list[tuple[Any, Any]] = []
        gpus: list[Any] = []
        pcie: list[tuple[Any, Any]] = []
        nvlinks: list[tuple[Any, Any]] = []
        for i, h in enumerate(self.hosts):
            hid = ("host", h)
            hosts.append((hid, {"kind": "host", "name": h, "gpus": self._gpus[i],
                                "gpu_type": self._gpu_type[i]}))
            uplinks.append((hid, ("switch", leaf_names[leaf_col[i]])))
            nv = ("nvlink", nv_names[nv_col[i]])
            for k in range(self._gpus[i]):
                gid = ("gpu", h, k)
                gpus.append(gid)
                pcie.append((gid, hid))
                nvlinks.append((gid, nv))
        # Shared keyword attributes: networkx copies them into each element's
        # own dict (health is set per edge later), without a dict built per GPU here.
        g.add_nodes_from(hosts)
        g.add_nodes_from(gpus, kind="gpu", near_nics=())
        g.add_edges_from(uplinks, kind="ib", health=Health.OK, bandwidth_gbps=None)
        g.add_edges_from(pcie, kind="pcie", health=Health.OK)
        g.add_edges_from(nvlinks, kind="nvlink", width=None, health=Health.OK)
        self._add_slices(g)
        # Which GPU fabric each NVLink-level domain is (NVLink, XGMI), where a source said.
        for i, h in enumerate(self.hosts):
            kind = self.spec.hosts[h].gpu_fabric
            if kind:
                g.nodes[("nvlink", nv_names[nv_col[i]])]["fabric"] = kind
        # What nvidia-smi told about single GPUs: NVLink width and nearby NICs.
        for i, h in enumerate(self.hosts):
            nv = ("nvlink", nv_names[nv_col[i]])
            for gl in spec.hosts[h].gpu_links:
                gid = ("gpu", h, gl.index)
                if gid not in g:
                    continue
                g.nodes[gid]["near_nics"] = gl.near_nics
                g.nodes[gid]["nic_paths"] = dict(gl.nic_paths)
                if gl.nvlinks:
                    g.edges[gid, nv]["width"] = max(gl.nvlinks.values())
        self.graph = g

    def _add_slices(self, g: nx.Graph) -> None:
        """GPU slices under the GPU they live on: ("slice", host, gpu, n) --slice-- ("gpu",
        host, gpu). GPUs cut into MIG instances are GPU nodes too (``mig=True``), with a
        PCIe edge to the host but none into the NVLink domain (MIG turns off peer-to-peer)
        and not counted as whole GPUs."""
        self._slices: dict[str, tuple[SliceSpec, ...]] = {}
        for h in self.hosts:
            hs = self.spec.hosts[h]
            if not hs.slices:
                continue
            self._slices[h] = hs.slices
            whole = hs.gpus or 0
            for k in range(whole, whole + hs.mig_gpus):
                g.add_node(("gpu", h, k), kind="gpu", near_nics=(), mig=True)
                g.add_edge(("gpu", h, k), ("host", h), kind="pcie", health=Health.OK)
            for n, sl in enumerate(hs.slices):
                sid = ("slice", h, sl.gpu, n)
                g.add_node(sid, kind="slice", slice_kind=sl.kind, gpu_type=sl.gpu_type,
                           memory_gb=sl.memory_gb, compute=sl.compute)
                g.add_edge(sid, ("gpu", h, sl.gpu), kind="slice", health=Health.OK)

    def slices_of(self, host: str) -> tuple[SliceSpec, ...]:
        """The host's GPU slices (MIG instances, shards), each with the GPU it lives on."""
        self._i(host)
        return self._slices.get(host, ())

    @property
    def total_slices(self) -> int:
        return sum(len(s) for s in self._slices.values())

    def _resolve(self, name: str) -> Any:
        """A graph node from a name a person writes: host, switch, NVLink domain,
        host:gpuN; ``switch:NAME``, ``nvlink:NAME`` and ``host:NAME`` when a name is
        ambiguous (an HGX host's NVLink domain carries the host's name)."""
        kind, sep, rest = name.partition(":")
        if sep and kind in ("switch", "nvlink", "host"):
            node = (kind, rest)
            return node if node in self.graph else None
        if name in self._index:
            return ("host", name)
        if ("switch", name) in self.graph:
            return ("switch", name)
        if ("nvlink", name) in self.graph:
            return ("nvlink", name)
        if name == CLUSTER_NAME:
            return ("cluster", name)
        host, sep, gpu = name.partition(":")
        if sep and host in self._index and gpu.startswith("gpu") and gpu[3:].isdigit():
            gid = ("gpu", host, int(gpu[3:]))
            if gid in self.graph:
                return gid
        return None

    def _build_health(self) -> None:
        """Apply link health and compute what placement needs from it."""
        n = len(self.hosts)
        gpu_ends: list[tuple[Any, Any]] = []
        for link in self.spec.links:
            a, b = self._resolve(link.a), self._resolve(link.b)
            if a is None or b is None:
                bad = link.a if a is None else link.b
                raise TopologyError(
                    f"{link.origin or self.source}: link {link.a} -- {link.b}: {bad!r} is not a"
                    " host, switch, NVLink domain or host:gpuN of this fabric"
                )
            if not self.graph.has_edge(a, b):
                raise TopologyError(
                    f"{link.origin or self.source}: there is no link between {link.a} and"
                    f" {link.b} in the fabric; expected two ends that are connected"
                    " (host--leaf, leaf--spine, host:gpuN--NVLink domain)"
                )
            data = self.graph.edges[a, b]
            data["health"] = max(data["health"], link.health)
            gpu_ends.append((a, b))
            if link.bandwidth_gbps is not None:
                data["bandwidth_gbps"] = link.bandwidth_gbps
        g = self.graph
        # Worst health of each host's uplink, each leaf's uplink, each spine's uplink.
        leaf_names = self._dom_names[Level.LEAF]
        leaf_col = self._dom[Level.LEAF]
        self._host_up = [
            Health(g.edges[("host", h), ("switch", leaf_names[leaf_col[i]])]["health"])
            for i, h in enumerate(self.hosts)
        ]
        self._leaf_up: list[Health] = []
        for lf in leaf_names:
            hs = [Health(d["health"]) for _, other, d in g.edges(("switch", lf), data=True)
                  if other[0] != "host" and self._is_up(("switch", lf), other)]
            self._leaf_up.append(max(hs, default=Health.OK))
        self._spine_up: list[Health] = []
        for sp in self._dom_names[Level.SPINE]:
            node = ("switch", sp)
            hs = [Health(d["health"]) for _, other, d in g.edges(node, data=True)
                  if self._is_up(node, other)] if node in g else []
            self._spine_up.append(max(hs, default=Health.OK))
        # GPUs whose NVLink is down are not usable; degraded ones mark the host.
        self._usable = list(self._gpus)
        self._gpu_degraded = [False] * n
        # Only hosts whose GPUs a link names can have a GPU link that is not ok.
        touched = sorted({self._index[end[1]] for a, b in gpu_ends for end in (a, b)
                          if end[0] == "gpu"})
        for i in touched:
            h = self.hosts[i]
            nv = ("nvlink", self._dom_names[Level.NVLINK][self._dom[Level.NVLINK][i]])
            for k in range(self._gpus[i]):
                gid = ("gpu", h, k)
                health = max(g.edges[gid, nv]["health"], g.edges[gid, ("host", h)]["health"])
                if health == Health.DOWN:
                    self._usable[i] -= 1
                elif health == Health.DEGRADED:
                    self._gpu_degraded[i] = True

        self._degraded_host = [
            1 if (up == Health.DEGRADED or gd) else 0
            for up, gd in zip(self._host_up, self._gpu_degraded, strict=True)
        ]
        self._any_down = (
            Health.DOWN in self._host_up or Health.DOWN in self._leaf_up
            or Health.DOWN in self._spine_up
        )
        self._any_degraded = (
            Health.DEGRADED in self._host_up or Health.DEGRADED in self._leaf_up
            or Health.DEGRADED in self._spine_up or any(self._gpu_degraded)
        )

    def _is_up(self, node: Any, other: Any) -> bool:
        """True when ``other`` is above ``node`` in the switch tree."""
        if other[0] == "cluster":
            return True
        return other[0] == "switch" and self.spec.parents.get(node[1]) == other[1]

    # ---------------------------------------------------------------- queries
    def __repr__(self) -> str:
        return (f"Fabric({len(self.hosts)} hosts, {sum(self._gpus)} GPUs, "
                f"{len(self._dom_names[Level.LEAF])} leaves, "
                f"{len(self._dom_names[Level.SPINE])} spines, source={self.source!r})")

    def _i(self, host: str) -> int:
        try:
            return self._index[host]
        except KeyError:
            raise KeyError(f"{host!r} is not a host of this fabric") from None

    def gpus_of(self, host: str) -> int:
        return self._gpus[self._i(host)]

    def usable_gpus_of(self, host: str) -> int:
        """GPUs of the host whose NVLink is not down."""
        return self._usable[self._i(host)]

    def interconnect_of(self, host: str) -> tuple[str, str]:
        """How the host's GPUs talk: ("nvlink" | "partial" | "pcie" | "", worst path)."""
        return self._intra[self._i(host)]

    def nvlink_gpus_of(self, host: str) -> int:
        """The most GPUs of the host NVLinked all to all (its GPU count when unknown)."""
        return self._nv_clique[self._i(host)]

    def gpu_type_of(self, host: str) -> str | None:
        return self._gpu_type[self._i(host)]

    def gpu_memory_gb_of(self, host: str) -> float | None:
        return self._gpu_mem[self._i(host)]

    @property
    def total_gpus(self) -> int:
        return sum(self._gpus)

    def domain_of(self, host: str, level: Level) -> str:
        i = self._i(host)
        return self._dom_names[level][self._dom[level][i]]

    def domains(self, level: Level) -> dict[str, tuple[str, ...]]:
        """Domain name -> its hosts (sorted), for every domain of ``level``."""
        hosts = self.hosts
        return {name: tuple(hosts[i] for i in members)
                for name, members in zip(self._dom_names[level], self._members[level],
                                         strict=True)}

    def parent_of(self, switch: str) -> str | None:
        return self.spec.parents.get(switch)

    def host_health(self, host: str) -> Health:
        """Worst health of the host's IB uplink and its GPUs' NVLinks."""
        i = self._i(host)
        worst = self._host_up[i]
        if self._gpu_degraded[i] or self._usable[i] < self._gpus[i]:
            worst = max(worst, Health.DEGRADED)
        return worst

    def link_health(self, a: str, b: str) -> Health:
        na, nb = self._resolve(a), self._resolve(b)
        if na is None or nb is None or not self.graph.has_edge(na, nb):
            raise KeyError(f"no link {a} -- {b}")
        return Health(self.graph.edges[na, nb]["health"])

    def common_level(self, a: str, b: str) -> Level:
        """The innermost level at which ``a`` and ``b`` share a domain."""
        ia, ib = self._i(a), self._i(b)
        for lv in HOST_LEVELS:
            if self._dom[lv][ia] == self._dom[lv][ib]:
                return lv
        return Level.CLUSTER

    def hop_distance(self, a: str, b: str) -> int:
        """Switch hops between two hosts: 0 same host, 2 same leaf or NVLink
        domain, 4 through a spine, 6 across spines."""
        return HOPS[self.common_level(a, b)]

    def cost(self, hosts: Sequence[str]) -> float:
        """Bandwidth-aware cost of a host set: the sum over its pairs of
        :data:`PAIR_COST` at their lowest common level, plus a penalty for each
        pair whose path crosses a degraded link. Linear time in the set size."""
        return self._cost([self._i(h) for h in hosts])

    def _cost(self, idx: Sequence[int]) -> float:
        n = len(idx)
        if n < 2:
            return 0.0
        nv = self._dom[Level.NVLINK]
        pairs_nv = _pairs(nv[i] for i in idx)
        total = PAIR_COST[Level.NVLINK] * pairs_nv
        prev = 0  # pairs sharing a domain at the level below but not an NVLink domain
        for lv in (Level.LEAF, Level.SPINE, Level.CLUSTER):
            col = self._dom[lv]
            same = _pairs(col[i] for i in idx) - _pairs((col[i], nv[i]) for i in idx)
            total += PAIR_COST[lv] * (same - prev)
            prev = same
        total += DEGRADED_FACTOR * self._degraded_pairs(idx)
        return total

    def _degraded_pairs(self, idx: Sequence[int]) -> float:
        n = len(idx)
        nv, leaf, spine = self._dom[Level.NVLINK], self._dom[Level.LEAF], self._dom[Level.SPINE]
        penalty = 0.0
        per_nv: dict[int, int] = {}
        per_leaf: dict[int, int] = {}
        per_spine: dict[int, int] = {}
        for i in idx:
            per_nv[nv[i]] = per_nv.get(nv[i], 0) + 1
            per_leaf[leaf[i]] = per_leaf.get(leaf[i], 0) + 1
            per_spine[spine[i]] = per_spine.get(spine[i], 0) + 1
        for i in idx:
            if self._host_up[i] == Health.DEGRADED:
                penalty += PAIR_COST[Level.LEAF] * (n - per_nv[nv[i]])
            if self._gpu_degraded[i]:
                penalty += PAIR_COST[Level.NVLINK] * (per_nv[nv[i]] - 1)
        for d, k in per_leaf.items():
            if self._leaf_up[d] == Health.DEGRADED:
                penalty += PAIR_COST[Level.SPINE] * k * (n - k)
        for d, k in per_spine.items():
            if self._spine_up[d] == Health.DEGRADED:
                penalty += PAIR_COST[Level.CLUSTER] * k * (n - k)
        return penalty

    def spans(self, hosts: Sequence[str]) -> dict[Level, int]:
        idx = [self._i(h) for h in hosts]
        return self._spans(idx)

    def _spans(self, idx: Sequence[int]) -> dict[Level, int]:
        return {lv: len({self._dom[lv][i] for i in idx}) for lv in HOST_LEVELS}

    # -------------------------------------------------------------- placement
    def place(self, shape: Shape, free: Mapping[str, int]) -> Placement | NoPlacement:
        """The most compact node set for ``shape`` given free GPUs per host."""
        from slurmpolicy.topology.placement import place

        return place(self, shape, free)

    def fragmentation(self, free: Mapping[str, int], shapes: Sequence[Shape] = (),
                      level: Level = Level.LEAF,
                      free_slices: Mapping[str, int] | None = None) -> Fragmentation:
        from slurmpolicy.topology.fragmentation import fragmentation

        return fragmentation(self, free, shapes, level, free_slices)

    # ---------------------------------------------------------------- sources
    @classmethod
    def from_spec(cls, spec: FabricSpec, *, known_nodes: Iterable[str] | None = None) -> Fabric:
        return cls(spec, known_nodes=known_nodes)

    @classmethod
    def from_sources(cls, nodes: Sequence[Node], fabric_settings: FabricSettings | None = None,
                     slurm_conf: Path | str | None = None, **overrides: Any) -> Fabric:
        """The fabric from every configured source, merged; see
        :func:`slurmpolicy.topology.sources.load_fabric`."""
        from slurmpolicy.topology.sources import load_fabric

        return load_fabric(nodes, fabric_settings, slurm_conf, **overrides)

    def with_links(self, links: Iterable[LinkSpec]) -> Fabric:
        """A copy of this fabric with more link health applied (for tests, what-ifs)."""
        spec = FabricSpec(source=self.spec.source, hosts=self.spec.hosts,
                          parents=self.spec.parents, links=[*self.spec.links, *links],
                          link_speed=self.spec.link_speed,
                          block_sizes=self.spec.block_sizes, conflicts=self.spec.conflicts,
                          warnings=self.spec.warnings, sources=self.spec.sources)
        return Fabric(spec)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``: hosts with their domains, switches, links."""
        down = [{"a": _label(a), "b": _label(b), "kind": d["kind"],
                 "health": Health(d["health"]).name.lower()}
                for a, b, d in self.graph.edges(data=True) if d["health"] != Health.OK]
        return {
            "source": self.source,
            "hosts": [{
                "name": h, "gpus": self._gpus[i], "gpu_type": self._gpu_type[i],
                "gpu_memory_gb": self._gpu_mem[i],
                "nvlink": self._dom_names[Level.NVLINK][self._dom[Level.NVLINK][i]],
                "leaf": self._dom_names[Level.LEAF][self._dom[Level.LEAF][i]],
                "spine": self._dom_names[Level.SPINE][self._dom[Level.SPINE][i]],
                "health": self.host_health(h).name.lower(),
                "slices": [{"gpu": s.gpu, "kind": s.kind, "gpu_type": s.gpu_type,
                            "memory_gb": s.memory_gb} for s in self._slices.get(h, ())],
                # From nvidia-smi: nvlink | partial | pcie ("" unknown), the worst GPU
                # pair's path, and how many GPUs are NVLinked all to all.
                "interconnect": self._intra[i][0], "gpu_path": self._intra[i][1],
                "nvlink_gpus": self._nv_clique[i],
            } for i, h in enumerate(self.hosts)],
            "switches": {sw: parent for sw, parent in sorted(self.spec.parents.items())},
            "links_not_ok": sorted(down, key=lambda d: (d["a"], d["b"])),
            "conflicts": [c.message for c in self.conflicts],
            "warnings": list(self.warnings),
        }


def _label(node: Any) -> str:
    if node[0] == "gpu":
        return f"{node[1]}:gpu{node[2]}"
    return str(node[1])


def _pairs(keys: Iterable[Any]) -> int:
    counts: dict[Any, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return sum(c * (c - 1) // 2 for c in counts.values())
