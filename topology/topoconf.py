"""Slurm's topology.conf: the tree, block and ring forms, read into a FabricSpec.

Owns parsing of the forms Slurm documents (topology.conf(5), 22.05 to 26.05):

- tree (topology/tree): ``SwitchName=leaf1 Nodes=dgx[01-04] LinkSpeed=100`` and
  ``SwitchName=spine Switches=leaf[1-2]``. A switch with ``Nodes`` is a leaf;
  its parent (the switch that lists it in ``Switches``) is its spine; switches
  higher up only appear in the graph.
- block (topology/block, 23.11+): ``BlockName=b1 Nodes=gb[001-018]``, padding
  blocks without ``Nodes=`` (NVIDIA's topograph writes them to round a block
  tree up to the next ``BlockSizes`` boundary) and one ``BlockSizes=18,36``. A
  block is a set of hosts on one high-bandwidth (NVLink) domain, so blocks
  become NVLink domains.
- ring (topology/ring, 26.05): ``RingName=r1 Nodes=n[01-16]``. No published
  ring file was found to check against (see tests/corpus/topology_conf/README.md);
  a ring is read as one leaf-level group of its nodes, and rendered back as a ring.

Node and switch names use Slurm's hostlist syntax in full.

Leniency follows Slurm's own (src/plugins/topology/{tree,block}): what Slurm
refuses (a fatal() in slurmctld) is a TopologyError naming the file, the line
and what was expected - an unknown key, a switch defined twice, a child switch
no line defines, a cycle, a bad BlockSizes, blocks without any node and no
BlockSizes. What Slurm accepts with a warning is accepted here with the same
fact in ``spec.warnings`` (shown by ``fabric check``, logged and counted by the
daemon), and a documented choice (docs/fabric.md, "What Slurm accepts"):

- a node under several leaf switches ("Multiple leaf switches contain nodes"):
  the first leaf in file order counts - Slurm keeps the node in every leaf's
  bitmap, but a host has one leaf in the fabric;
- a switch under several parents (a fat tree written with every spine): the
  first parent counts;
- a switch with both ``Nodes=`` and ``Switches=``: its children are ignored, as
  Slurm up to 25.05 does ("Ignoring children switches"; 25.11 refuses the line);
- a switch with neither: an empty leaf, kept for rendering;
- a node in several blocks: the first block counts.
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
RING_KEYS = ("ringname", "nodes")
_KEY_NAMES = {"switchname": "SwitchName", "switches": "Switches", "nodes": "Nodes",
              "linkspeed": "LinkSpeed", "blockname": "BlockName", "ringname": "RingName"}
_PAIR = re.compile(r"(\S+?)=(\S*)")
#: Slurm's block levels: a block size is the base size times 2**k, k <= 15.
_MAX_BLOCK_LEVEL = 15


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


def _block_sizes(value: str, where: str) -> tuple[int, ...]:
    """BlockSizes as Slurm checks it (block_record.c): positive numbers, each the
    first (the base block size) times a power of two up to 2**15."""
    try:
        sizes = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise TopologyError(
            f"{where}: BlockSizes={value!r}; expected comma-separated node counts, e.g."
            " BlockSizes=18,36"
        ) from None
    if not sizes or any(b < 1 for b in sizes):
        raise TopologyError(f"{where}: BlockSizes={value!r}; expected positive node counts")
    base = sizes[0]
    for size in sizes:
        ratio = size // base
        if size % base or ratio & (ratio - 1) or ratio.bit_length() - 1 > _MAX_BLOCK_LEVEL:
            raise TopologyError(
                f"{where}: BlockSizes={value!r}: {size} is not the base size {base} times a"
                " power of two (Slurm refuses it: \"Invalid BlockSizes value\")"
            )
    return sizes


def parse_topology_conf(text: str, path: str = "topology.conf") -> FabricSpec:
    """Parse any of the forms; see the module docstring."""
    switches: dict[str, _Switch] = {}
    blocks: dict[str, tuple[int, list[str]]] = {}
    rings: dict[str, tuple[int, list[str]]] = {}
    block_sizes: tuple[int, ...] = ()
    form = ""
    form_line = 0
    for lineno, line in _lines(text):
        where = f"{path}:{lineno}"
        pairs = _pairs(line, where)
        first = pairs[0][0]
        if first == "blocksizes":
            if len(pairs) > 1:
                raise TopologyError(f"{where}: BlockSizes stands on its own line")
            block_sizes = _block_sizes(pairs[0][1], where)
            this = "block"
        elif first in ("switchname", "blockname", "ringname"):
            this = {"switchname": "tree", "blockname": "block", "ringname": "ring"}[first]
        else:
            raise TopologyError(
                f"{where}: a line must start with SwitchName= (tree form), BlockName= /"
                f" BlockSizes= (block form) or RingName= (ring form), got {pairs[0][0]}="
            )
        if form and form != this:
            raise TopologyError(
                f"{where}: {pairs[0][0]}= in a file that already uses the {form} form (line"
                f" {form_line}); one topology.conf holds one form, as Slurm's topology plugin"
                " reads one"
            )
        if not form:
            form, form_line = this, lineno
        if first == "blocksizes":
            continue
        allowed = {"tree": TREE_KEYS, "block": BLOCK_KEYS, "ring": RING_KEYS}[this]
        seen: set[str] = set()
        for key, _value in pairs:
            if key not in allowed:
                raise TopologyError(
                    f"{where}: unknown key {key!r}; expected one of "
                    + ", ".join(_KEY_NAMES[k] for k in allowed)
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
            speed = values.get("linkspeed", "")
            if speed and not speed.isdigit():
                raise TopologyError(
                    f"{where}: LinkSpeed={speed!r}; expected a whole number (Slurm's relative"
                    " link speed)"
                )
            sw = _Switch(name, lineno, link_speed=speed)
            if "nodes" in values:
                sw.nodes = _expand(values["nodes"], where, "Nodes")
            if "switches" in values:
                sw.switches = _expand(values["switches"], where, "Switches")
            switches[name] = sw
        else:
            table = blocks if this == "block" else rings
            if name in table:
                raise TopologyError(
                    f"{where}: {'block' if this == 'block' else 'ring'} {name} defined again"
                    f" (first on line {table[name][0]})"
                )
            nodes = _expand(values["nodes"], where, "Nodes") if "nodes" in values else []
            if this == "ring" and not nodes:
                raise TopologyError(f"{where}: ring {name} needs Nodes=")
            table[name] = (lineno, nodes)
    spec = FabricSpec(source=path, block_sizes=block_sizes, form=form)
    if form == "block":
        _fill_blocks(spec, blocks, path)
    elif form == "ring":
        _fill_rings(spec, rings, path)
    else:
        _fill_tree(spec, switches, path)
    return spec


def _fill_blocks(spec: FabricSpec, blocks: dict[str, tuple[int, list[str]]], path: str) -> None:
    if not any(nodes for _line, nodes in blocks.values()) and not spec.block_sizes:
        raise TopologyError(
            f"{path}: no block lists any node and there is no BlockSizes; Slurm refuses this"
            " (\"Blocks do not contain any nodes and the BlockSizes are not set\")"
        )
    owner: dict[str, tuple[str, int]] = {}
    twice: list[str] = []
    for name, (lineno, nodes) in blocks.items():
        spec.block_order.append((name, tuple(nodes)))
        for node in nodes:
            if node in owner:
                twice.append(f"{node} (blocks {owner[node][0]} and {name}, line {lineno})")
                continue
            owner[node] = (name, lineno)
            host = spec.host(node)
            host.nvlink = name
            host.origin["nvlink"] = f"{path}:{lineno}"
    if twice:
        spec.warnings.append(
            f"{path}: node(s) in more than one block: {'; '.join(twice[:5])}"
            f"{' ...' if len(twice) > 5 else ''}; the first block counts"
        )
    # Slurm's base block size: the first BlockSizes value, else the first block's node count.
    base = spec.block_sizes[0] if spec.block_sizes else next(
        len(nodes) for _line, nodes in blocks.values() if nodes)
    for name, (lineno, nodes) in blocks.items():
        if nodes and len(nodes) < base:
            spec.warnings.append(
                f"{path}:{lineno}: block {name} has {len(nodes)} nodes, fewer than the base"
                f" block size {base}; Slurm will not use it for block-sized jobs"
            )


def _fill_rings(spec: FabricSpec, rings: dict[str, tuple[int, list[str]]], path: str) -> None:
    owner: dict[str, str] = {}
    for name, (lineno, nodes) in rings.items():
        spec.rings[name] = tuple(nodes)
        for node in nodes:
            if node in owner:
                spec.warnings.append(
                    f"{path}:{lineno}: node {node} is already in ring {owner[node]}; the first"
                    " ring counts"
                )
                continue
            owner[node] = name
            host = spec.host(node)
            host.leaf = name
            host.origin["leaf"] = f"{path}:{lineno}"


def _fill_tree(spec: FabricSpec, switches: dict[str, _Switch], path: str) -> None:
    for sw in switches.values():
        if sw.nodes and sw.switches:
            spec.warnings.append(
                f"{path}:{sw.line}: switch {sw.name} has both Nodes= and Switches=; its"
                " Switches= are ignored, as Slurm up to 25.05 does (Slurm 25.11 refuses this"
                " line)"
            )
            sw.switches = []
        elif not sw.nodes and not sw.switches:
            spec.empty_switches.append(sw.name)
    parent_line: dict[str, tuple[str, int]] = {}
    extra_parents: list[str] = []
    for sw in switches.values():
        for child in sw.switches:
            if child not in switches:
                raise TopologyError(
                    f"{path}:{sw.line}: switch {sw.name} lists {child} in Switches= but no line"
                    f" defines SwitchName={child} (Slurm refuses this: \"invalid child\")"
                )
            if child == sw.name:
                raise TopologyError(f"{path}:{sw.line}: switch {sw.name} lists itself (a cycle)")
            if child in parent_line:
                extra_parents.append(f"{child} under {parent_line[child][0]} and {sw.name}")
                spec.more_parents.append((child, sw.name))
                continue
            parent_line[child] = (sw.name, sw.line)
            spec.parents[child] = sw.name
    if extra_parents:
        spec.warnings.append(
            f"{path}: switch(es) under more than one parent: {'; '.join(extra_parents[:4])}"
            f"{' ...' if len(extra_parents) > 4 else ''}; the first parent in file order is"
            " taken as the spine"
        )
    # Cycle check: walk up from every switch (Slurm: "Switch configuration is not a tree").
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
    multi: list[str] = []
    for sw in switches.values():
        for node in sw.nodes:
            if node in leaf_of:
                multi.append(f"{node} ({leaf_of[node][0]} line {leaf_of[node][1]}, {sw.name}"
                             f" line {sw.line})")
                continue
            leaf_of[node] = (sw.name, sw.line)
            host = spec.host(node)
            host.leaf = sw.name
            host.origin["leaf"] = f"{path}:{sw.line}"
    if multi:
        spec.warnings.append(
            f"{path}: Multiple leaf switches contain nodes: {'; '.join(multi[:5])}"
            f"{' ...' if len(multi) > 5 else ''}; the first leaf in file order counts"
        )
    roots: dict[str, None] = {}
    for leaf, _line in leaf_of.values():
        top = leaf
        while top in spec.parents:
            top = spec.parents[top]
        roots[top] = None
    if len(roots) > 1:
        names = list(roots)
        spec.warnings.append(
            f"{path}: no switch reaches all nodes ({len(names)} separate trees, topped by"
            f" {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}); as Slurm warns, no"
            " job can span them"
        )


def read_topology_conf(path: Path | str) -> FabricSpec:
    p = Path(path)
    return parse_topology_conf(read_source(p, "topology.conf"), str(p))
