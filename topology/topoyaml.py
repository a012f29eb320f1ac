"""Slurm's topology.yaml (Slurm 25.05+), read into a FabricSpec.

Owns parsing of the format documented in topology.yaml(5): a list of
topologies, each ``topology: NAME`` with ``cluster_default`` and exactly one
of ``tree: {switches: [{switch, children, nodes}]}``, ``block: {block_sizes,
blocks: [{block, nodes}]}`` or ``flat: true``. Slurm reads topology.yaml
instead of topology.conf when both exist; so do we.

Of several topologies, the fabric takes its leaves and spines from the tree
marked ``cluster_default`` (else the first tree) and its NVLink domains from
the block topology marked ``cluster_default`` (else the first block one).
Needs PyYAML (the ``yaml`` extra); errors name the file, the line and what was
expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.spec import FabricSpec, read_source
from slurmpolicy.topology.topoconf import parse_topology_conf


def _load(text: str, path: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise TopologyError(
            f"{path}: reading topology.yaml needs PyYAML; install it"
            " (pip install 'slurmpolicy[yaml]') or point [fabric] topology_conf at a"
            " topology.conf"
        ) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: not valid YAML: {exc}") from exc
    return root


def _plain(node: Any) -> Any:
    """YAML node -> Python value, keeping each mapping's line as ``__line__``."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {"__line__": node.start_mark.line + 1}
        for key, value in node.value:
            out[str(key.value).lower()] = _plain(value)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v) for v in node.value]
    value = node.value
    if node.tag.endswith(":bool"):
        return str(value).lower() == "true"
    if node.tag.endswith(":int"):
        return int(value)
    return value


def parse_topology_yaml(text: str, path: str = "topology.yaml") -> FabricSpec:
    root = _load(text, path)
    if root is None:
        raise TopologyError(f"{path}: empty; expected a list of topologies (- topology: NAME)")
    data = _plain(root)
    if not isinstance(data, list):
        raise TopologyError(f"{path}:1: expected a list of topologies (- topology: NAME)")
    trees: list[tuple[bool, dict[str, Any]]] = []
    blocks: list[tuple[bool, dict[str, Any]]] = []
    names: set[str] = set()
    for item in data:
        if not isinstance(item, dict) or "topology" not in item:
            line = item.get("__line__", "?") if isinstance(item, dict) else "?"
            raise TopologyError(f"{path}:{line}: expected a mapping starting with topology: NAME")
        line = item["__line__"]
        name = str(item["topology"])
        if name in names:
            raise TopologyError(f"{path}:{line}: topology {name} defined again")
        names.add(name)
        kinds = [k for k in ("tree", "block", "flat") if k in item]
        unknown = sorted(set(item) - {"__line__", "topology", "cluster_default", "tree",
                                      "block", "flat"})
        if unknown:
            raise TopologyError(
                f"{path}:{line}: topology {name}: unknown key {unknown[0]!r}; expected"
                " topology, cluster_default and one of tree, block, flat"
            )
        if len(kinds) != 1:
            raise TopologyError(
                f"{path}:{line}: topology {name} must define exactly one of tree, block, flat"
                f" (found {', '.join(kinds) or 'none'})"
            )
        default = bool(item.get("cluster_default", False))
        if kinds[0] == "tree":
            trees.append((default, item))
        elif kinds[0] == "block":
            blocks.append((default, item))
    spec = FabricSpec(source=path)
    tree = _pick(trees)
    if tree is not None:
        _merge_into(spec, parse_topology_conf(_tree_lines(tree, path), path))
    block = _pick(blocks)
    if block is not None:
        _merge_into(spec, parse_topology_conf(_block_lines(block, path), path))
    return spec


def _pick(items: list[tuple[bool, dict[str, Any]]]) -> dict[str, Any] | None:
    for default, item in items:
        if default:
            return item
    return items[0][1] if items else None


def _pad(lines: dict[int, str]) -> str:
    """topology.conf text whose line N is the YAML's line N, so errors point right."""
    if not lines:
        return ""
    out = [""] * max(lines)
    for n, text in lines.items():
        out[n - 1] = text
    return "\n".join(out) + "\n"


def _tree_lines(item: dict[str, Any], path: str) -> str:
    tree = item["tree"]
    switches = tree.get("switches") if isinstance(tree, dict) else None
    if not isinstance(switches, list) or not switches:
        raise TopologyError(f"{path}:{item['__line__']}: tree needs a list of switches")
    lines: dict[int, str] = {}
    for sw in switches:
        if not isinstance(sw, dict) or "switch" not in sw:
            raise TopologyError(f"{path}:{item['__line__']}: each switch needs switch: NAME")
        line = sw["__line__"]
        extra = sorted(set(sw) - {"__line__", "switch", "children", "nodes"})
        if extra:
            raise TopologyError(
                f"{path}:{line}: unknown key {extra[0]!r}; expected switch, children, nodes"
            )
        parts = [f"SwitchName={sw['switch']}"]
        if sw.get("nodes"):
            parts.append(f"Nodes={sw['nodes']}")
        if sw.get("children"):
            parts.append(f"Switches={sw['children']}")
        lines[line] = " ".join(parts)
    return _pad(lines)


def _block_lines(item: dict[str, Any], path: str) -> str:
    block = item["block"]
    entries = block.get("blocks") if isinstance(block, dict) else None
    if not isinstance(entries, list) or not entries:
        raise TopologyError(f"{path}:{item['__line__']}: block needs a list of blocks")
    lines: dict[int, str] = {}
    for b in entries:
        if not isinstance(b, dict) or "block" not in b or "nodes" not in b:
            raise TopologyError(
                f"{path}:{item['__line__']}: each block needs block: NAME and nodes: HOSTLIST"
            )
        lines[b["__line__"]] = f"BlockName={b['block']} Nodes={b['nodes']}"
    sizes = block.get("block_sizes")
    if sizes:
        if not isinstance(sizes, list) or not all(isinstance(s, int) for s in sizes):
            raise TopologyError(
                f"{path}:{item['__line__']}: block_sizes must be a list of numbers"
            )
        lines[max(lines) + 1] = "BlockSizes=" + ",".join(str(s) for s in sizes)
    return _pad(lines)


def _merge_into(spec: FabricSpec, part: FabricSpec) -> None:
    for name, host in part.hosts.items():
        mine = spec.host(name)
        if host.leaf is not None:
            mine.leaf = host.leaf
            mine.origin["leaf"] = host.origin.get("leaf", spec.source)
        if host.nvlink is not None:
            mine.nvlink = host.nvlink
            mine.origin["nvlink"] = host.origin.get("nvlink", spec.source)
    spec.parents.update(part.parents)
    spec.warnings.extend(part.warnings)
    if part.block_sizes:
        spec.block_sizes = part.block_sizes


def read_topology_yaml(path: Path | str) -> FabricSpec:
    p = Path(path)
    return parse_topology_yaml(read_source(p, "topology.yaml"), str(p))
