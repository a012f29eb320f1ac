"""Slurm's topology.conf: the tree form and the block form, read into a FabricSpec.

Owns parsing of the two forms Slurm documents (topology.conf(5)):

- tree (topology/tree): ``SwitchName=leaf1 Nodes=dgx[01-04]`` and
  ``SwitchName=spine Switches=leaf[1-2]``, with ``LinkSpeed`` tolerated. A
  switch with ``Nodes`` is a leaf; its parent (the switch that lists it in
  ``Switches``) is its spine; switches higher up only appear in the graph.
- block (topology/block): ``BlockName=b1 Nodes=gb[001-018]`` and one
  ``BlockSizes=18,36``. A block is a set of hosts on one high-bandwidth
  (NVLink) domain, so blocks become NVLink domains.

Node and switch names use Slurm's hostlist syntax in full. Errors name the
file, the line and what was expected; a switch cycle, a switch under two
parents, a node under two leaves and a reference to an undefined switch are
errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.hostlist import HostlistError, expand
from slurmpolicy.topology.spec import FabricSpec, read_source

TREE_KEYS = ("switchname", "switches", "nodes", "linkspeed")
BLOCK_KEYS = ("blockname", "nodes")
_PAIR = re.compile(r"(\S+?)=(\S*)")


@dataclass(slots=True)
class _Switch:
    name: str
    line: int
    nodes: list[str] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    link_speed: str = ""


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) with comments cut and backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _pairs(line: str, where: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for token in line.split():
        m = _PAIR.fullmatch(token)
        if not m:
            raise TopologyError(f"{where}: expected Key=Value, got {token!r}")
        pairs.append((m.group(1).lower(), m.group(2)))
    return pairs


def _expand(value: str, where: str, what: str) -> list[str]:
    try:
        names = expand(value)
    except HostlistError as exc:
        raise TopologyError(f"{where}: bad {what} list: {exc}") from exc
    if not names:
        raise TopologyError(f"{where}: {what} list is empty; expected a hostlist like dgx[01-04]")
    return names


def parse_topology_conf(text: str, path: str = "topology.conf") -> FabricSpec:
    """Parse either form; see the module docstring."""
    switches: dict[str, _Switch] = {}
    blocks: dict[str, tuple[int, list[str]]] = {}
    block_sizes: tuple[int, ...] = ()
    form = ""
    for lineno, line in _lines(text):
        where = f"{path}:{lineno}"
        pairs = _pairs(line, where)
        first = pairs[0][0]
        if first == "blocksizes":
            if len(pairs) > 1:
                raise TopologyError(f"{where}: BlockSizes stands on its own line")
            try:
                block_sizes = tuple(int(x) for x in pairs[0][1].split(","))
            except ValueError:
                raise TopologyError(
                    f"{where}: BlockSizes={pairs[0][1]!r}; expected comma-separated block"
                    " counts, e.g. BlockSizes=18,36"
                ) from None
            if any(b < 1 for b in block_sizes):
                raise TopologyError(f"{where}: BlockSizes must be positive numbers")
            form = form or "block"
            continue
        if first not in ("switchname", "blockname"):
            raise TopologyError(
                f"{where}: a line must start with SwitchName= (tree form) or BlockName= /"
                f" BlockSizes= (block form), got {pairs[0][0]}="
            )
        this = "tree" if first == "switchname" else "block"
        if form and form != this:
            raise TopologyError(
                f"{where}: {pairs[0][0]}= in a file that already uses the {form} form; one"
                " topology.conf holds either SwitchName lines or BlockName lines"
            )
        form = this
        allowed = TREE_KEYS if this == "tree" else BLOCK_KEYS
        seen: set[str] = set()
        for key, _value in pairs:
            if key not in allowed:
                names = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes",
                         "linkspeed": "LinkSpeed", "blockname": "BlockName"}
                raise TopologyError(
                    f"{where}: unknown key {key!r}; expected one of "
                    + ", ".join(names[k] for k in allowed)
                )
            if key in seen:
                raise TopologyError(f"{where}: {key} given twice")
            seen.add(key)
        values = dict(pairs)
        name = values[first]
        if not name or any(c in name for c in "[],"):
            raise TopologyError(f"{where}: {pairs[0][0]} needs one plain name, got {name!r}")
        if this == "tree":
            if name in switches:
                raise TopologyError(
                    f"{where}: switch {name} defined again (first on line {switches[name].line})"
                )
            sw = _Switch(name, lineno, link_speed=values.get("linkspeed", ""))
            if "nodes" in values:
                sw.nodes = _expand(values["nodes"], where, "Nodes")
            if "switches" in values:
                sw.switches = _expand(values["switches"], where, "Switches")
            if not sw.nodes and not sw.switches:
                raise TopologyError(f"{where}: switch {name} has neither Nodes= nor Switches=")
            switches[name] = sw
        else:
            if name in blocks:
                raise TopologyError(
                    f"{where}: block {name} defined again (first on line {blocks[name][0]})"
                )
            if "nodes" not in values:
                raise TopologyError(f"{where}: block {name} needs Nodes=")
            blocks[name] = (lineno, _expand(values["nodes"], where, "Nodes"))
    spec = FabricSpec(source=path, block_sizes=block_sizes)
    if form == "block":
        _fill_blocks(spec, blocks, path)
    else:
        _fill_tree(spec, switches, path)
    return spec


def _fill_blocks(spec: FabricSpec, blocks: dict[str, tuple[int, list[str]]], path: str) -> None:
    owner: dict[str, str] = {}
    for name, (lineno, nodes) in blocks.items():
        for node in nodes:
            if node in owner:
                raise TopologyError(
                    f"{path}:{lineno}: node {node} is already in block {owner[node]};"
                    " a node belongs to one block"
                )
            owner[node] = name
            host = spec.host(node)
            host.nvlink = name
            host.origin["nvlink"] = f"{path}:{lineno}"
    if blocks and spec.block_sizes:
        base = spec.block_sizes[0]
        for name, (lineno, nodes) in blocks.items():
            if len(nodes) < base:
                spec.warnings.append(
                    f"{path}:{lineno}: block {name} has {len(nodes)} nodes, fewer than the base"
                    f" block size {base}; Slurm will not use it for block-sized jobs"
                )


def _fill_tree(spec: FabricSpec, switches: dict[str, _Switch], path: str) -> None:
    parent_line: dict[str, tuple[str, int]] = {}
    for sw in switches.values():
        for child in sw.switches:
            if child not in switches:
                raise TopologyError(
                    f"{path}:{sw.line}: switch {sw.name} lists {child} in Switches= but no line"
                    f" defines SwitchName={child}"
                )
            if child == sw.name:
                raise TopologyError(f"{path}:{sw.line}: switch {sw.name} lists itself (a cycle)")
            if child in parent_line:
                other, other_line = parent_line[child]
                raise TopologyError(
                    f"{path}:{sw.line}: switch {child} is already under {other} (line"
                    f" {other_line}); expected a tree, where a switch has one parent"
                )
            parent_line[child] = (sw.name, sw.line)
            spec.parents[child] = sw.name
    # Cycle check: walk up from every switch.
    for start in switches:
        seen = [start]
        cur = start
        while cur in spec.parents:
            cur = spec.parents[cur]
            if cur in seen:
                loop = " -> ".join([*seen[seen.index(cur):], cur])
                lines = sorted({switches[s].line for s in seen[seen.index(cur):]})
                raise TopologyError(
                    f"{path}:{lines[0]}: switch cycle {loop} (lines"
                    f" {', '.join(map(str, lines))}); expected a tree"
                )
            seen.append(cur)
    for sw in switches.values():
        if sw.link_speed:
            spec.link_speed[sw.name] = sw.link_speed
    leaf_of: dict[str, tuple[str, int]] = {}
    for sw in switches.values():
        if sw.nodes and sw.switches:
            spec.warnings.append(
                f"{path}:{sw.line}: switch {sw.name} has both Nodes= and Switches=; its nodes"
                " are placed as a leaf of it"
            )
        for node in sw.nodes:
            if node in leaf_of:
                other, other_line = leaf_of[node]
                raise TopologyError(
                    f"{path}:{sw.line}: node {node} is already under switch {other} (line"
                    f" {other_line}); a node hangs off one leaf switch"
                )
            leaf_of[node] = (sw.name, sw.line)
            host = spec.host(node)
            host.leaf = sw.name
            host.origin["leaf"] = f"{path}:{sw.line}"


def read_topology_conf(path: Path | str) -> FabricSpec:
    p = Path(path)
    return parse_topology_conf(read_source(p, "topology.conf"), str(p))
