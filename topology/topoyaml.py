"""Slurm's topology.yaml (Slurm 25.05+), read into a FabricSpec.

Owns parsing of the format documented in topology.yaml(5): a list of
topologies, each ``topology: NAME`` with ``cluster_default`` and exactly one
of ``tree: {switches: [{switch, children, nodes}]}``, ``block: {block_sizes,
blocks: [{block, nodes}]}`` or ``flat: true``. Slurm reads topology.yaml
instead of topology.conf when both exist; so do we.

Several topologies (Slurm 25.05+ gives each partition its own, NVIDIA's
topograph writes one per partition, often with a ``flat`` cluster default):
every tree topology is read, the ``cluster_default`` one first, then in file
order, and a host takes its leaf from the first tree that names it (so a
partition's tree fills in hosts the default leaves out); a switch takes its
parent the same way. NVLink domains come from the block topologies likewise.
Trees that place one host under different leaves are a warning naming both.
Skeletons (switches and blocks without nodes, as topograph writes them before
nodes register) are accepted as Slurm accepts them. Needs PyYAML (the
``yaml`` extra); errors name the file, the line and what was expected.
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
    spec = FabricSpec(source=path, form="yaml",
                      topologies=[(str(item["topology"]), kind, bool(item.get("cluster_default")))
                                  for item, kind in _kinds(data)])
    for kind, items, lines in (("tree", trees, _tree_lines), ("block", blocks, _block_lines)):
        for _default, item in _ordered(items):
            part = parse_topology_conf(lines(item, path), path)
            _merge_into(spec, part, str(item["topology"]), kind)
    return spec


def _kinds(data: list[Any]) -> list[tuple[dict[str, Any], str]]:
    return [(item, next(k for k in ("tree", "block", "flat") if k in item)) for item in data]


def _ordered(items: list[tuple[bool, dict[str, Any]]]) -> list[tuple[bool, dict[str, Any]]]:
    """The cluster_default topology first, then the others in file order."""
    return sorted(items, key=lambda pair: not pair[0])


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
        if sw.get("nodes") not in (None, ""):
            parts.append(f"Nodes={sw['nodes']}")
        if sw.get("children") not in (None, ""):
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
        if not isinstance(b, dict) or "block" not in b:
            raise TopologyError(
                f"{path}:{item['__line__']}: each block needs block: NAME (and nodes: HOSTLIST)"
            )
        extra = sorted(set(b) - {"__line__", "block", "nodes"})
        if extra:
            raise TopologyError(
                f"{path}:{b['__line__']}: unknown key {extra[0]!r}; expected block, nodes"
            )
        # A block without nodes is a padding block (topograph's skeletons), as in the conf.
        nodes = b.get("nodes")
        lines[b["__line__"]] = (f"BlockName={b['block']}" if nodes in (None, "")
                                else f"BlockName={b['block']} Nodes={nodes}")
    sizes = block.get("block_sizes")
    if sizes:
        if not isinstance(sizes, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            raise TopologyError(
                f"{path}:{item['__line__']}: block_sizes must be a list of numbers"
            )
        lines[max(lines) + 1] = "BlockSizes=" + ",".join(str(s) for s in sizes)
    return _pad(lines)


def _merge_into(spec: FabricSpec, part: FabricSpec, name: str, kind: str) -> None:
    """Add one topology's hosts: the first topology (default first) that places a host wins.

    Block names are per topology (topograph calls every partition's first block
    ``block1``), so a block name an earlier topology used is qualified as
    ``TOPOLOGY.BLOCK``; switch names name physical switches and are shared."""
    if kind == "block":
        used = {b for b, _nodes in spec.block_order}
        rename = {b: (f"{name}.{b}" if b in used else b) for b, _nodes in part.block_order}
        for host in part.hosts.values():
            if host.nvlink is not None:
                host.nvlink = rename.get(host.nvlink, host.nvlink)
        spec.block_order.extend((rename[b], nodes) for b, nodes in part.block_order)
        spec.block_sizes = spec.block_sizes or part.block_sizes
    clashes: list[str] = []
    for host_name, host in part.hosts.items():
        mine = spec.host(host_name)
        for attr in ("leaf", "nvlink"):
            theirs = getattr(host, attr)
            if theirs is None:
                continue
            ours = getattr(mine, attr)
            if ours is None:
                setattr(mine, attr, theirs)
                mine.origin[attr] = host.origin.get(attr, spec.source)
            elif ours != theirs:
                clashes.append(f"{host_name} ({ours} in {mine.origin.get(attr, '?')}, {theirs}"
                               f" in topology {name})")
    if clashes:
        spec.warnings.append(
            f"{spec.source}: topology {name} places host(s) differently from an earlier"
            f" topology: {'; '.join(clashes[:4])}{' ...' if len(clashes) > 4 else ''};"
            " the cluster_default (else first) topology counts"
        )
    for child, parent in part.parents.items():
        spec.parents.setdefault(child, parent)
    spec.more_parents.extend(part.more_parents)
    for switch, speed in part.link_speed.items():
        spec.link_speed.setdefault(switch, speed)
    spec.warnings.extend(part.warnings)
    for switch in part.empty_switches:
        if switch not in spec.empty_switches:
            spec.empty_switches.append(switch)


def read_topology_yaml(path: Path | str) -> FabricSpec:
    p = Path(path)
    return parse_topology_yaml(read_source(p, "topology.yaml"), str(p))
