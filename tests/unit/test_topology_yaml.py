"""topology.yaml (Slurm 25.05+, topology.yaml(5)): tree and block topologies, errors, round trip."""

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.topology import Fabric, synthetic_fabric
from slurmpolicy.topology.render import render
from slurmpolicy.topology.topoyaml import parse_topology_yaml
from slurmpolicy.topology.types import Level

# The example of topology.yaml(5), with a spine above the tree's leaves.
MAN_EXAMPLE = """\
- topology: topo1
  cluster_default: True
  tree:
    switches:
    - switch: sw_root
      children: sw[1-2]
    - switch: sw1
      nodes: node[01-08]
    - switch: sw2
      nodes: node[09-16]
- topology: topo2
  cluster_default: False
  block:
    block_sizes:
      - 4
      - 16
    blocks:
    - block: b1
      nodes: node[01-04]
    - block: b2
      nodes: node[05-08]
    - block: b3
      nodes: node[09-12]
    - block: b4
      nodes: node[13-16]
- topology: topo3
  cluster_default: False
  flat: True
"""


def test_man_page_example():
    spec = parse_topology_yaml(MAN_EXAMPLE, "topology.yaml")
    fab = Fabric(spec)
    assert fab.domains(Level.LEAF) == {
        "sw1": tuple(f"node{i:02d}" for i in range(1, 9)),
        "sw2": tuple(f"node{i:02d}" for i in range(9, 17)),
    }
    assert fab.domain_of("node12", Level.SPINE) == "sw_root"
    assert fab.domain_of("node06", Level.NVLINK) == "b2"
    assert fab.block_sizes == (4, 16)
    assert spec.hosts["node10"].origin["leaf"] == "topology.yaml:9"


@pytest.mark.parametrize("text, where, words", [
    ("- topology: t\n  tree:\n    switches:\n    - switch: a\n      nodez: n1\n",
     "topology.yaml:4:", "unknown key 'nodez'"),
    ("- topology: t\n  tree:\n    switches:\n    - switch: a\n      children: b\n",
     "topology.yaml:4:", "no line defines SwitchName=b"),
    ("- topology: t\n  flat: true\n  tree: {}\n", "topology.yaml:1:", "exactly one of"),
    ("- topology: t\n  cluster_default: true\n  mesh: {}\n", "topology.yaml:1:",
     "unknown key 'mesh'"),
    ("topology: t\n", "topology.yaml:1:", "expected a list of topologies"),
    ("- topology: t\n  tree: [\n", "topology.yaml:", "not valid YAML"),
])
def test_errors_name_file_and_line(text, where, words):
    with pytest.raises(TopologyError) as exc:
        parse_topology_yaml(text, "topology.yaml")
    assert where in str(exc.value) and words in str(exc.value)


def test_yaml_beside_slurm_conf_wins_over_topology_conf(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    (tmp_path / "topology.conf").write_text("SwitchName=old Nodes=node[01-16]\n")
    (tmp_path / "topology.yaml").write_text(MAN_EXAMPLE)
    nodes = [Node(name=f"node{i:02d}", state="IDLE", gpus_by_type={"h100": 8})
             for i in range(1, 17)]
    fab = Fabric.from_sources(nodes, None, tmp_path / "slurm.conf")
    assert set(fab.domains(Level.LEAF)) == {"sw1", "sw2"}


def test_round_trip_yaml():
    fab = synthetic_fabric(64, hosts_per_nvlink=8, hosts_per_leaf=16, leaves_per_spine=2)
    back = Fabric(parse_topology_yaml(render(fab, "yaml")))
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE):
        assert back.domains(level) == fab.domains(level)
