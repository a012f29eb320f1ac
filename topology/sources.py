"""Where a Fabric comes from: the configured sources, read and merged.

Owns :func:`load_fabric` (what ``Fabric.from_sources`` does). Sources, in
order of precedence (a higher one wins a disagreement, which is recorded as a
conflict, never dropped):

1. Slurm's nodes (GPU count and type from their gres) - Slurm is the truth
   about what a node has;
2. the fabric file (settings.fabric.fabric_file);
3. topology.conf or topology.yaml (settings.fabric.topology_conf, else the
   one beside the active slurm.conf - the given path, $SLURM_CONF,
   /etc/slurm/slurm.conf - where topology.yaml wins, as in Slurm 25.05+);
4. ``nvidia-smi topo -m`` outputs (settings.fabric.nvidia_smi_topo, a glob of
   files named after their host), then ``rocm-smi --showtopo`` outputs of AMD
   hosts (settings.fabric.rocm_smi_topo, the same way);
5. node features (settings.fabric.nvlink_feature_prefix / leaf_feature_prefix).

With no nodes given (Slurm not answering), the nodes of slurm.conf are used.
A host named by a source but unknown to Slurm is left out with a warning, as
Slurm leaves it out ("Invalid hostnames in switch configuration").
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.topology.fabric import Fabric
from slurmpolicy.topology.fabricfile import read_fabric_file
from slurmpolicy.topology.features import spec_from_features, spec_from_nodes
from slurmpolicy.topology.nvsmi import read_topo_files
from slurmpolicy.topology.slurmconf import (
    active_slurm_conf,
    read_slurm_conf_nodes,
    topology_plugin_note,
)
from slurmpolicy.topology.spec import FabricSpec, merge
from slurmpolicy.topology.topoconf import read_topology_conf

if TYPE_CHECKING:
    from slurmpolicy.settings import Fabric as FabricSettings


def _read_topology(path: Path) -> FabricSpec:
    if path.suffix in (".yaml", ".yml"):
        from slurmpolicy.topology.topoyaml import read_topology_yaml

        return read_topology_yaml(path)
    return read_topology_conf(path)


def load_fabric(
    nodes: Sequence[Node],
    fabric_settings: FabricSettings | None = None,
    slurm_conf: Path | str | None = None,
    *,
    topology_conf: Path | str | None = None,
    fabric_file: Path | str | None = None,
    nvidia_smi_topo: str | None = None,
    rocm_smi_topo: str | None = None,
) -> Fabric:
    """Build the fabric from every source that is configured or present."""
    from slurmpolicy.settings import Fabric as FabricSettings

    cfg = fabric_settings or FabricSettings()
    conf = active_slurm_conf(slurm_conf)
    node_list = list(nodes)
    node_source = "slurm"
    plugin: str | None = None
    if not node_list and conf.exists():
        node_list, plugin = read_slurm_conf_nodes(conf)
        node_source = str(conf)
    elif conf.exists():
        try:  # only for what Slurm does with topology.conf; Slurm gave the nodes
            plugin = read_slurm_conf_nodes(conf)[1]
        except TopologyError:
            plugin = None
    specs: list[FabricSpec] = []
    if node_list:
        specs.append(spec_from_nodes(node_list, source=node_source))
    ff = fabric_file or cfg.fabric_file
    if ff:
        specs.append(read_fabric_file(ff))
    tc = topology_conf or cfg.topology_conf
    topo: FabricSpec | None = None
    if tc:
        topo = _read_topology(Path(tc))
    else:
        # As Slurm does: topology.yaml, when present, replaces topology.conf.
        for name in ("topology.yaml", "topology.conf"):
            beside = conf.parent / name
            if beside.exists():
                topo = _read_topology(beside)
                break
    if topo is not None:
        if plugin is not None:
            note = topology_plugin_note(plugin, topo.form, topo.source)
            if note:
                topo.warnings.append(note)
        specs.append(topo)
    pattern = nvidia_smi_topo if nvidia_smi_topo is not None else cfg.nvidia_smi_topo
    if pattern:
        paths = [Path(p) for p in sorted(glob.glob(pattern))]
        if not paths:
            raise TopologyError(
                f"nvidia_smi_topo = {pattern!r} matches no file; expected a glob of"
                " `nvidia-smi topo -m` outputs named after their host (dgx01.txt)"
            )
        specs.append(read_topo_files(paths))
    rocm_glob = rocm_smi_topo if rocm_smi_topo is not None else cfg.rocm_smi_topo
    if rocm_glob:
        from slurmpolicy.topology.rocmsmi import read_showtopo_files

        rocm = [Path(p) for p in sorted(glob.glob(rocm_glob))]
        if not rocm:
            raise TopologyError(
                f"rocm_smi_topo = {rocm_glob!r} matches no file; expected a glob of"
                " `rocm-smi --showtopo` outputs named after their host (mi01.txt)"
            )
        specs.append(read_showtopo_files(rocm))
    if node_list:
        specs.append(spec_from_features(node_list, cfg.nvlink_feature_prefix,
                                        cfg.leaf_feature_prefix,
                                        source=f"node features ({node_source})"))
    if not specs:
        raise TopologyError(
            f"no fabric source: Slurm gave no nodes, {conf} does not exist, and no"
            " topology.conf or fabric file is configured (settings [fabric])"
        )
    merged = merge(specs)
    known = [n.name for n in node_list] if node_list else None
    return Fabric(merged, known_nodes=known)
