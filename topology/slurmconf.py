"""Just enough of slurm.conf for the fabric: NodeName lines and TopologyPlugin.

Owns reading the nodes a Slurm controller knows (name, ``Gres=gpu:TYPE:N``,
``Feature=``) straight from slurm.conf, so that ``slurmpolicy fabric`` works
when slurmctld does not answer (``--no-slurm``), and the path of the
topology.conf beside the active slurm.conf.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.hostlist import HostlistError, expand
from slurmpolicy.model import Node
from slurmpolicy.topology.slices import shards_in_gres
from slurmpolicy.topology.spec import read_source

DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
_GPU_GRES = re.compile(r"^gpu(?::([^:(]+))?(?::(\d+))?(?:\(.*\))?$", re.IGNORECASE)


def active_slurm_conf(path: Path | str | None = None) -> Path:
    """The given path, else $SLURM_CONF, else /etc/slurm/slurm.conf."""
    if path:
        return Path(path)
    env = os.environ.get("SLURM_CONF")
    return Path(env) if env else DEFAULT_SLURM_CONF


def parse_gres_gpus(gres: str) -> dict[str, int]:
    """``gpu:h100:8,nic:2`` -> {"h100": 8}; untyped ``gpu:4`` -> {"": 4}."""
    out: dict[str, int] = {}
    for item in gres.split(","):
        item = item.strip()
        if not item.lower().startswith("gpu"):
            continue
        m = _GPU_GRES.match(item)
        if not m:
            continue
        kind, count = m.group(1) or "", m.group(2)
        if count is None and kind.isdigit():
            kind, count = "", kind
        out[kind] = out.get(kind, 0) + int(count or 1)
    return out


def topology_plugin_note(plugin: str, form: str, path: str) -> str | None:
    """What Slurm does with a topology.conf of ``form`` under ``TopologyPlugin=plugin``,
    when that is not what slurmpolicy reads from it (None when they agree)."""
    wants = {"topology/tree": "tree", "topology/block": "block", "topology/ring": "ring"}
    if form not in ("tree", "block", "ring"):
        return None  # topology.yaml names its plugin per topology
    if plugin in ("", "topology/none", "topology/flat", "topology/default"):
        return (f"{path}: slurm.conf sets no TopologyPlugin ({plugin or 'unset'}): Slurm ignores"
                f" this {form} topology.conf and places jobs as on a flat network;"
                " slurmpolicy still reads it")
    if plugin in wants and wants[plugin] != form:
        return (f"{path}: is in {form} form but slurm.conf has TopologyPlugin={plugin}, whose"
                f" file is in {wants[plugin]} form: slurmctld refuses to start with it")
    return None


def read_slurm_conf_nodes(path: Path | str) -> tuple[list[Node], str]:
    """Nodes of slurm.conf and the TopologyPlugin value ("" when unset)."""
    p = Path(path)
    text = read_source(p, "slurm.conf")
    nodes: dict[str, Node] = {}
    plugin = ""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs: dict[str, str] = dict(
            (k.lower(), v) for k, _, v in (t.partition("=") for t in line.split())
        )
        if "topologyplugin" in pairs:
            plugin = pairs["topologyplugin"]
        name = pairs.get("nodename")
        if not name or name.upper() == "DEFAULT":
            continue
        try:
            names = expand(name)
        except HostlistError as exc:
            raise TopologyError(f"{p}:{lineno}: bad NodeName: {exc}") from exc
        gpus = parse_gres_gpus(pairs.get("gres", ""))
        features = tuple(f for f in pairs.get("feature", pairs.get("features", "")).split(",")
                         if f)
        shards = shards_in_gres(pairs.get("gres", ""))
        for n in names:
            nodes[n] = Node(name=n, state="IDLE", gpus_by_type=gpus, features=features,
                            shards_by_type=shards)
    return list(nodes.values()), plugin
