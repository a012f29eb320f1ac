"""Render Slurm's topology.conf (or topology.yaml) from the fabric, so that Slurm's own placement
agrees with ours.

Owns the forms: tree (one ``SwitchName=<leaf> Nodes=<hostlist>`` line per
leaf, then one ``SwitchName=<parent> Switches=<hostlist>`` line per switch
above, bottom-up; empty switches as they were read), block (one
``BlockName=<nvlink domain> Nodes=...`` line per NVLink domain in the order
the source gave them, padding blocks without ``Nodes=`` where they were, then
``BlockSizes`` when known), ring (``RingName=`` lines, Slurm 26.05) and
topology.yaml. Without a form asked for, the form the topology source was
written in comes back. Hosts under no leaf are left out of the tree, as they
were out of the source; a fabric with no leaf at all has no tree to render
(no invented ``SwitchName=flat``).
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
    # Hosts no source put under a leaf sit alone in a leaf named after themselves; with no
    # leaf at all, the one "flat" leaf is the fabric's, not the site's: neither is written.
    any_leaf = any(h.leaf for h in fab.spec.hosts.values())
    real = {name: hosts for name, hosts in leaves.items()
            if any_leaf and not (len(hosts) == 1 and hosts[0] == name and name not in parents)}
    if not real and not parents and not fab.spec.empty_switches:
        lines.append("# no leaf switch is known (no tree in the sources): nothing to write;"
                     " Slurm without topology.conf treats the network as flat")
    speed = fab.spec.link_speed

    def ls(name: str) -> str:
        return f" LinkSpeed={speed[name]}" if name in speed else ""

    for name in sorted(real, key=_order):
        lines.append(f"SwitchName={name} Nodes={compress(real[name])}{ls(name)}")
    for name in fab.spec.empty_switches:
        if name not in real:
            lines.append(f"SwitchName={name}{ls(name)}")
    children: dict[str, list[str]] = {}
    for child, parent in [*parents.items(), *fab.spec.more_parents]:
        children.setdefault(parent, []).append(child)
    emitted: set[str] = set(real) | set(fab.spec.empty_switches)
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
    order = [name for name, _nodes in fab.spec.block_order]
    # With blocks read from the source, a host in none of them is in no block (Slurm will
    # not give it to a block-sized job): it is not written as a block of its own.
    rest = {name for name, hosts in domains.items() if not order or len(hosts) > 1}
    padding = {name for name, nodes in fab.spec.block_order if not nodes}
    for name in order + sorted(rest - set(order), key=_order):
        if domains.get(name):
            lines.append(f"BlockName={_block_name(name)} Nodes={compress(domains[name])}")
        elif name in padding:
            lines.append(f"BlockName={_block_name(name)}")  # a padding block, as read
    if fab.block_sizes:
        lines.append("BlockSizes=" + ",".join(str(b) for b in fab.block_sizes))
    return "\n".join(lines) + "\n"


def render_ring(fab: Fabric) -> str:
    """Ring form (Slurm 26.05): one ``RingName=`` line per ring, in the order read."""
    lines = _header(fab, "ring")
    leaves = fab.domains(Level.LEAF)
    for name in fab.spec.rings or sorted(leaves, key=_order):
        if leaves.get(name):
            lines.append(f"RingName={_block_name(name)} Nodes={compress(leaves[name])}")
    return "\n".join(lines) + "\n"


def _block_name(name: str) -> str:
    # A block name is a plain word in topology.conf.
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _order(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1, name


def render_yaml(fab: Fabric) -> str:
    """topology.yaml (Slurm 25.05+): the tree and, when NVLink domains span hosts (or the
    source had blocks), a block topology of them. Names, the cluster default and flat
    topologies of a topology.yaml source come back as read."""
    read = fab.spec.topologies
    tree_name = next((n for n, k, _d in read if k == "tree"), "tree")
    block_name = next((n for n, k, _d in read if k == "block"), "nvlink")
    defaults = {n for n, _k, d in read if d} or {tree_name}
    lines = ["# topology.yaml rendered by `slurmpolicy fabric render --form yaml`",
             f"# from: {fab.source}"]

    def head(name: str) -> None:
        lines.extend([f"- topology: {name}",
                      f"  cluster_default: {'true' if name in defaults else 'false'}"])

    tree = [ln for ln in render_tree(fab).splitlines() if not ln.startswith("#")]
    if tree:
        head(tree_name)
        lines += ["  tree:", "    switches:"]
        for line in tree:
            # topology.yaml(5) has no link speed.
            fields = dict(part.split("=", 1) for part in line.split())
            lines.append(f"    - switch: {fields['SwitchName']}")
            if "Nodes" in fields:
                lines.append(f"      nodes: \"{fields['Nodes']}\"")
            if "Switches" in fields:
                lines.append(f"      children: \"{fields['Switches']}\"")
    domains = fab.domains(Level.NVLINK)
    if fab.spec.block_order or any(len(hosts) > 1 for hosts in domains.values()):
        head(block_name)
        lines.append("  block:")
        if fab.block_sizes:
            lines.append("    block_sizes: [" + ", ".join(map(str, fab.block_sizes)) + "]")
        lines.append("    blocks:")
        for line in render_block(fab).splitlines():
            if line.startswith("BlockName="):
                fields = dict(part.split("=", 1) for part in line.split())
                lines.append(f"    - block: {fields['BlockName']}")
                if "Nodes" in fields:
                    lines.append(f"      nodes: \"{fields['Nodes']}\"")
    for name, kind, _default in read:
        if kind == "flat":
            head(name)
            lines.append("  flat: true")
    return "\n".join(lines) + "\n"


def source_form(fab: Fabric) -> str:
    """The form the topology source was written in; else tree when leaves are known,
    block when NVLink domains span hosts, tree otherwise."""
    if fab.spec.form:
        return fab.spec.form
    if any(h.leaf for h in fab.spec.hosts.values()):
        return "tree"
    if any(len(hosts) > 1 for hosts in fab.domains(Level.NVLINK).values()):
        return "block"
    return "tree"


def render(fab: Fabric, form: str | None = None) -> str:
    """topology.conf (or yaml) in ``form``; None: the form the source was written in."""
    form = form or source_form(fab)
    if form == "ring":
        return render_ring(fab)
    if form == "tree":
        return render_tree(fab)
    if form == "block":
        return render_block(fab)
    if form == "yaml":
        return render_yaml(fab)
    raise ValueError(f"unknown topology form {form!r}; allowed: tree, block, ring, yaml")
