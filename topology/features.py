"""Fallback fabric source: Slurm node features and gres.

Owns reading domains from node features (``nvl_rack1`` -> NVLink domain
``nvl_rack1``, ``leaf1`` -> leaf ``leaf1``; prefixes from settings.fabric) and
the GPU count and type of each node from its ``Gres=gpu:TYPE:N``. The feature
names are the domain names, so ``fabric show`` speaks the site's words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.topology.slices import layout, whole_gpus
from slurmpolicy.topology.spec import KNOWN_GPU_MEMORY_GB, FabricSpec


def _one(node: str, features: Iterable[str], prefix: str, what: str, source: str) -> str | None:
    found = sorted(f for f in features if prefix and f.startswith(prefix) and f != prefix)
    if len(found) > 1:
        raise TopologyError(
            f"{source}: node {node} has features {', '.join(found)}; expected at most one"
            f" {what} feature (prefix {prefix!r})"
        )
    return found[0] if found else None


def spec_from_features(nodes: Sequence[Node], nvlink_prefix: str = "nvl_",
                       leaf_prefix: str = "leaf", source: str = "node features") -> FabricSpec:
    """Domains from features; nodes without such features are left unplaced."""
    spec = FabricSpec(source=source)
    for node in nodes:
        nv = _one(node.name, node.features, nvlink_prefix, "NVLink", source)
        leaf = _one(node.name, node.features, leaf_prefix, "leaf", source)
        if nv is None and leaf is None:
            continue
        host = spec.host(node.name)
        if nv is not None:
            host.nvlink = nv
            host.origin["nvlink"] = f"{source} of {node.name}"
        if leaf is not None:
            host.leaf = leaf
            host.origin["leaf"] = f"{source} of {node.name}"
    return spec


def spec_from_nodes(nodes: Sequence[Node], source: str = "slurm") -> FabricSpec:
    """GPU count and type of every node, as Slurm configures them (Gres=gpu:h100:8)."""
    spec = FabricSpec(source=source)
    for node in nodes:
        host = spec.host(node.name)
        # MIG instances are gpu gres of their own type; they are slices of
        # GPUs, not whole GPUs (topology.slices).
        whole, slices = layout(node.gpus_by_type, node.shards_by_type, KNOWN_GPU_MEMORY_GB)
        host.gpus = whole
        host.slices = slices
        host.mig_gpus = len({s.gpu for s in slices if s.kind == "mig"})
        types = sorted(t for t in whole_gpus(node.gpus_by_type) if t)
        host.gpu_type = types[0] if len(types) == 1 else None
        host.origin["gpus"] = host.origin["gpu_type"] = f"{source} node {node.name}"
    return spec
