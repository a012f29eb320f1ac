"""Render Slurm's topology.conf (or topology.yaml) from the fabric, so that Slurm's own placement
agrees with ours.

Owns the two forms: tree (one ``SwitchName=<leaf> Nodes=<hostlist>`` line per
leaf, then one ``SwitchName=<parent> Switches=<hostlist>`` line per switch
above, bottom-up) and block (one ``BlockName=<nvlink domain> Nodes=...`` line
per NVLink domain, then ``BlockSizes`` when known). Hosts under no leaf are
left out of the tree, as they were out of the source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmpolicy.hostlist import compress
from slurmpolicy.topology.types import Level

if TYPE_CHECKING:
    from slurmpolicy.topology.fabric import Fabric


def _header(fab: Fabric, form: str) -> list[str]:
    return [f"# topology.conf ({form} form) rendered by `slurmpolicy fabric render`",
            f"# from: {fab.source}"]


def render_tree(fab: Fabric) -> str:
    lines = _header(fab, "tree")
    parents = fab.spec.parents
    leaves = fab.domains(Level.LEAF)
    # Hosts no source put under a leaf sit alone in a leaf named after themselves.
    real = {name: hosts for name, hosts in leaves.items()
            if not (len(hosts) == 1 and hosts[0] == name and name not in parents)}
    speed = fab.spec.link_speed

    def ls(name: str) -> str:
        return f" LinkSpeed={speed[name]}" if name in speed else ""

    for name in sorted(real, key=_order):
        lines.append(f"SwitchName={name} Nodes={compress(real[name])}{ls(name)}")
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    emitted: set[str] = set(real)
    # Bottom-up: a switch is written once all its children are.
    pending = sorted(children, key=_order)
    while pending:
        ready = [s for s in pending
                 if all(c in emitted or c not in children for c in children[s])]
        if not ready:  # cannot happen for a tree; parsing refused cycles
            ready = pending[:1]
        for s in ready:
            lines.append(f"SwitchName={s} Switches={compress(sorted(children[s], key=_order))}"
                         f"{ls(s)}")
            emitted.add(s)
            pending.remove(s)
    return "\n".join(lines) + "\n"


def render_block(fab: Fabric) -> str:
    lines = _header(fab, "block")
    domains = fab.domains(Level.NVLINK)
    if all(len(hosts) == 1 for hosts in domains.values()):
        lines.append("# note: every NVLink domain is one host (HGX boards); blocks of one"
                     " node give Slurm nothing to plan with - the tree form fits better")
    for name in sorted(domains, key=_order):
        lines.append(f"BlockName={_block_name(name)} Nodes={compress(domains[name])}")
    if fab.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(b) for b in fab.block_sizes))
    return "\n".join(lines) + "\n"


def _block_name(name: str) -> str:
    # A block name is a plain word in topology.conf.
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _order(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1, name


def render_yaml(fab: Fabric) -> str:
    """topology.yaml (Slurm 25.05+): the tree as the cluster default and, when
    NVLink domains span hosts, a block topology of them."""
    lines = ["# topology.yaml rendered by `slurmpolicy fabric render --form yaml`",
             f"# from: {fab.source}",
             "- topology: tree", "  cluster_default: true", "  tree:", "    switches:"]
    for line in render_tree(fab).splitlines():
        if line.startswith("#"):
            continue
        # topology.yaml(5) has no link speed.
        fields = dict(part.split("=", 1) for part in line.split())
        lines.append(f"    - switch: {fields['SwitchName']}")
        if "Nodes" in fields:
            lines.append(f"      nodes: \"{fields['Nodes']}\"")
        if "Switches" in fields:
            lines.append(f"      children: \"{fields['Switches']}\"")
    domains = fab.domains(Level.NVLINK)
    if any(len(hosts) > 1 for hosts in domains.values()):
        lines += ["- topology: nvlink", "  cluster_default: false", "  block:"]
        if fab.block_sizes:
            lines.append("    block_sizes: [" + ", ".join(map(str, fab.block_sizes)) + "]")
        lines.append("    blocks:")
        for name in sorted(domains, key=_order):
            lines.append(f"    - block: {_block_name(name)}")
            lines.append(f"      nodes: \"{compress(domains[name])}\"")
    return "\n".join(lines) + "\n"


def render(fab: Fabric, form: str = "tree") -> str:
    if form == "tree":
        return render_tree(fab)
    if form == "block":
        return render_block(fab)
    if form == "yaml":
        return render_yaml(fab)
    raise ValueError(f"unknown topology form {form!r}; allowed: tree, block, yaml")
