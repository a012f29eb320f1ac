"""The fabric file (TOML): racks, NVLink domains spanning hosts, switches, link health."""

from pathlib import Path

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.fabricfile import parse_fabric_file, read_fabric_file
from slurmpolicy.topology.spec import merge
from slurmpolicy.topology.topoconf import parse_topology_conf
from slurmpolicy.topology.types import Health, Level, Placement, Shape

EXAMPLE = Path(__file__).parents[2] / "contrib" / "fabric.example.toml"


def test_contrib_example_builds_the_fabric_it_describes():
    fab = Fabric(read_fabric_file(EXAMPLE))
    assert len(fab.hosts) == 44
    nv = fab.domains(Level.NVLINK)
    assert len(nv["nvl72-r01"]) == 18 and nv["nvl72-r02"][0] == "gb019"
    assert fab.domain_of("dgx03", Level.NVLINK) == "dgx03"
    assert fab.domain_of("gb001", Level.LEAF) == "ib-leaf-01"
    assert fab.domain_of("dgx01", Level.SPINE) == "ib-spine-1"
    assert fab.gpus_of("gb001") == 4 and fab.gpu_type_of("gb001") == "gb200"
    assert fab.gpus_of("dgx01") == 8 and fab.gpu_memory_gb_of("dgx01") == 80
    assert fab.host_health("dgx08") == Health.DOWN
    assert fab.host_health("gb019") == Health.DEGRADED
    free = {h: fab.gpus_of(h) for h in fab.hosts}
    # 18 trays x 4 GPUs fit one NVL72 rack: the clean one is chosen.
    p = fab.place(Shape(18, 4), free)
    assert isinstance(p, Placement) and p.level == Level.NVLINK
    assert fab.domain_of(p.hosts[0], Level.NVLINK) == "nvl72-r01"
    # dgx08's uplink is down: an 8-host H100 job has nowhere to go as one leaf.
    r = fab.place(Shape(8, 8, gpu_type="h100", level=Level.LEAF, strict=True), free)
    assert not isinstance(r, Placement)


def test_errors_name_the_table_line():
    text = '[[rack]]\nname = "r1"\nhosts = "a[1-2]"\n\n[[rack]]\nname = "r2"\nhost = "b1"\n'
    with pytest.raises(TopologyError) as exc:
        parse_fabric_file(text, "f.toml")
    assert "f.toml:5:" in str(exc.value) and "unknown field `host`" in str(exc.value)
    assert "[[rack]] takes name, hosts, nvlink" in str(exc.value)


def test_bad_health_word():
    text = '[[link]]\na = "x"\nb = "y"\nhealth = "flaky"\n'
    with pytest.raises(TopologyError, match=r'f.toml:1: .*health = "ok", "degraded" or "down"'):
        parse_fabric_file(text, "f.toml")


def test_toml_syntax_error_keeps_line():
    with pytest.raises(TopologyError, match=r"f.toml: not valid TOML.*line 2"):
        parse_fabric_file('[[rack]]\nname = \n', "f.toml")


def test_host_in_two_racks_is_an_error():
    text = ('[[rack]]\nname = "r1"\nhosts = "a[1-2]"\n'
            '[[rack]]\nname = "r2"\nhosts = "a[2-3]"\n')
    with pytest.raises(TopologyError, match=r"f.toml:4: a2 nvlink = 'r2'.*f.toml:1"):
        parse_fabric_file(text, "f.toml")


def test_switch_cycle_in_fabric_file():
    text = ('[[leaf]]\nname = "l1"\nspine = "s1"\n[[spine]]\nname = "s1"\nparent = "s2"\n'
            '[[spine]]\nname = "s2"\nparent = "s1"\n')
    with pytest.raises(TopologyError, match="switch cycle"):
        parse_fabric_file(text, "f.toml")


def test_fabric_file_and_topology_conf_conflict_is_reported():
    ff = parse_fabric_file('[[leaf]]\nname = "x"\nhosts = "n[1-4]"\n', "fabric.toml")
    tc = parse_topology_conf("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[3-4]\n",
                             "topology.conf")
    merged = merge([ff, tc])
    assert len(merged.conflicts) == 1
    msg = merged.conflicts[0].message
    assert "fabric.toml puts n[1-4] in one leaf (x)" in msg and "using fabric.toml" in msg
    assert Fabric(merged).domain_of("n3", Level.LEAF) == "x"


def test_gpu_count_disagreement_with_slurm_is_reported(tmp_path):
    ff = tmp_path / "fabric.toml"
    ff.write_text('[[host]]\nnames = "n1"\ngpus = 4\n')
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    nodes = [Node(name="n1", state="IDLE", gpus_by_type={"h100": 8})]
    fab = Fabric.from_sources(nodes, None, tmp_path / "slurm.conf", fabric_file=ff)
    assert fab.gpus_of("n1") == 8  # Slurm is the truth about what a node has
    assert any("gpus is 8" in c.message and "but 4" in c.message for c in fab.conflicts)


def test_unknown_link_end_names_the_file_line():
    text = '[[leaf]]\nname = "l1"\nhosts = "n[1-2]"\n[[link]]\na = "n9"\nb = "l1"\n'
    with pytest.raises(TopologyError, match=r"f.toml:4: link n9 -- l1: 'n9' is not a host"):
        Fabric(parse_fabric_file(text, "f.toml"))
