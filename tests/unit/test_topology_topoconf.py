"""topology.conf: tree and block forms, hostlists, errors with lines, render round trip."""

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology import Fabric, synthetic_fabric
from slurmpolicy.topology.render import render
from slurmpolicy.topology.topoconf import parse_topology_conf, read_topology_conf
from slurmpolicy.topology.types import Level


def test_tree_with_hostlists_comments_and_continuation():
    text = """\
# a comment line
SwitchName=s0 Nodes=dgx[01-04,07]   # trailing comment
switchname=s1 nodes=dgx[05-06,08],gb-a[1-2]b[3-4] LinkSpeed=400
SwitchName=s2 \\
    Nodes=node[008-010]
SwitchName=top Switches=s[0-2]
"""
    spec = parse_topology_conf(text, "t.conf")
    assert spec.hosts["dgx07"].leaf == "s0" and spec.hosts["dgx08"].leaf == "s1"
    assert spec.hosts["gb-a2b3"].leaf == "s1" and spec.hosts["node009"].leaf == "s2"
    assert {"gb-a1b3", "gb-a1b4", "gb-a2b3", "gb-a2b4"} <= set(spec.hosts)
    assert spec.parents == {"s0": "top", "s1": "top", "s2": "top"}
    assert spec.hosts["node010"].origin["leaf"] == "t.conf:4"


def test_three_tier_tree():
    text = ("SwitchName=l1 Nodes=n[1-2]\nSwitchName=l2 Nodes=n[3-4]\nSwitchName=l3 Nodes=n[5-6]\n"
            "SwitchName=sp1 Switches=l[1-2]\nSwitchName=sp2 Switches=l3\n"
            "SwitchName=core Switches=sp[1-2]\n")
    fab = Fabric(parse_topology_conf(text))
    assert fab.domain_of("n5", Level.SPINE) == "sp2"
    assert fab.hop_distance("n1", "n5") == 6
    assert fab.parent_of("sp1") == "core"


def test_block_form():
    text = "BlockName=b1 Nodes=gb[001-018]\nBlockName=b2 Nodes=gb[019-036]\nBlockSizes=18,36\n"
    spec = parse_topology_conf(text)
    assert spec.block_sizes == (18, 36)
    fab = Fabric(spec)
    assert fab.domains(Level.NVLINK)["b2"][0] == "gb019"
    assert len(fab.domains(Level.NVLINK)["b1"]) == 18


@pytest.mark.parametrize("text, line, words", [
    ("SwitchName=a Nodes=n1\nSwitchName=b Switches=c\n", 2, "no line defines SwitchName=c"),
    ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", 2, "defined again"),
    ("SwitchName=a Nodes=n1 Speed=4\n", 1, "unknown key 'speed'"),
    ("Nodes=n1\n", 1, "must start with SwitchName="),
    ("SwitchName=a Nodes=n1 LinkSpeed=fast\n", 1, "expected a whole number"),
    ("BlockName=b Nodes=n[1-2]\nBlockSizes=2,6\n", 2, "not the base size 2 times a power"),
    ("BlockName=b\nBlockName=c\n", 0, "no block lists any node"),
    ("RingName=r\n", 1, "ring r needs Nodes="),
    ("SwitchName=a Nodes=n[3-1]\n", 1, "runs backwards"),
    ("SwitchName=a Nodes=n[1-2\n", 1, "unclosed"),
    ("SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n", 2, "already uses the tree form"),
    ("BlockName=b Nodes=n1\nBlockSizes=x\n", 2, "expected comma-separated"),
    ("SwitchName=a Nodes=n1 junk\n", 1, "expected Key=Value"),
])
def test_errors_name_file_line_and_expectation(text, line, words):
    with pytest.raises(TopologyError) as exc:
        parse_topology_conf(text, "topo.conf")
    assert (f"topo.conf:{line}:" if line else "topo.conf: ") in str(exc.value)
    assert words in str(exc.value)


def test_switch_cycle_is_an_error():
    text = ("SwitchName=l Nodes=n1\nSwitchName=a Switches=b,l\nSwitchName=b Switches=c\n"
            "SwitchName=c Switches=a\n")
    with pytest.raises(TopologyError,
                       match=r"topo.conf:2: switch cycle a -> c -> b -> a \(lines 2, 3, 4\)"):
        parse_topology_conf(text, "topo.conf")
    with pytest.raises(TopologyError, match="lists itself"):
        parse_topology_conf("SwitchName=l Nodes=n1\nSwitchName=a Switches=a,l\n", "topo.conf")


def test_missing_file(tmp_path):
    with pytest.raises(TopologyError, match="not found"):
        read_topology_conf(tmp_path / "topology.conf")


def _same_domains(a: Fabric, b: Fabric, level: Level) -> None:
    assert a.domains(level) == b.domains(level)


def test_round_trip_tree():
    fab = synthetic_fabric(100, hosts_per_leaf=8, leaves_per_spine=3)
    text = render(fab, "tree")
    back = Fabric(parse_topology_conf(text))
    _same_domains(fab, back, Level.LEAF)
    _same_domains(fab, back, Level.SPINE)
    assert back.hosts == fab.hosts


def test_round_trip_block():
    fab = synthetic_fabric(72, hosts_per_nvlink=18, hosts_per_leaf=36)
    text = render(fab, "block")
    assert "BlockName=nvl1 Nodes=gpu[01-09" in text or "BlockName=nvl1" in text
    back = Fabric(parse_topology_conf(text))
    _same_domains(fab, back, Level.NVLINK)


def test_round_trip_of_a_deeper_tree_keeps_parents():
    text = ("SwitchName=l1 Nodes=n[1-2] LinkSpeed=400\nSwitchName=l2 Nodes=n[3-4]\n"
            "SwitchName=sp Switches=l[1-2]\nSwitchName=core Switches=sp\n")
    fab = Fabric(parse_topology_conf(text))
    back = Fabric(parse_topology_conf(render(fab)))
    assert back.spec.parents == fab.spec.parents
    assert back.spec.link_speed == {"l1": "400"}
    assert back.graph.nodes[("switch", "l1")]["link_speed"] == "400"
    _same_domains(fab, back, Level.LEAF)


def test_render_rejects_unknown_form():
    with pytest.raises(ValueError, match="tree, block, ring, yaml"):
        render(synthetic_fabric(2), "xml")


def test_what_slurm_accepts_with_a_warning_is_read_with_the_same_fact():
    # switch_record.c: "Multiple leaf switches contain nodes", "Ignoring children
    # switches", empty leaves; a fat tree written with every spine; block nodes twice.
    text = ("SwitchName=l1 Nodes=n[1-3] LinkSpeed=100\nSwitchName=l2 Nodes=n[3-4]\n"
            "SwitchName=odd Nodes=n5 Switches=l2\nSwitchName=empty\n"
            "SwitchName=sp1 Switches=l[1-2]\nSwitchName=sp2 Switches=l[1-2]\n"
            "SwitchName=core Switches=sp[1-2],odd,empty\n")
    spec = parse_topology_conf(text, "t.conf")
    assert spec.hosts["n3"].leaf == "l1"  # the first leaf in file order counts
    assert spec.parents["l2"] == "sp1" and spec.parents["odd"] == "core"
    assert spec.empty_switches == ["empty"]
    words = " | ".join(spec.warnings)
    assert "Multiple leaf switches contain nodes: n3 (l1 line 1, l2 line 2)" in words
    assert "l1 under sp1 and sp2" in words and "the first parent in file order" in words
    assert "switch odd has both Nodes= and Switches=" in words
    fab = Fabric(spec)
    again = parse_topology_conf(render(fab, "tree"))
    assert "SwitchName=l1 Nodes=n[1-3] LinkSpeed=100" in render(fab, "tree")
    assert "SwitchName=empty" in render(fab, "tree") and again.empty_switches == ["empty"]
    blocks = parse_topology_conf("BlockName=a Nodes=n[1-2]\nBlockName=b Nodes=n[2-3]\n")
    assert blocks.hosts["n2"].nvlink == "a"
    assert "n2 (blocks a and b, line 2); the first block counts" in blocks.warnings[0]


def test_ring_form_is_read_and_rendered_back():
    spec = parse_topology_conf("RingName=r1 Nodes=n[01-04]\nRingName=r2 Nodes=n[05-08]\n")
    fab = Fabric(spec)
    assert spec.form == "ring" and fab.domain_of("n06", Level.LEAF) == "r2"
    text = render(fab)
    assert "RingName=r1 Nodes=n[01-04]" in text and "SwitchName" not in text
    assert parse_topology_conf(text).rings == spec.rings


def test_a_block_only_file_renders_no_invented_flat_switch():
    fab = Fabric(parse_topology_conf("BlockName=b1 Nodes=g[1-4]\nBlockName=b2\nBlockSizes=4\n"))
    assert render(fab).splitlines()[2:] == ["BlockName=b1 Nodes=g[1-4]", "BlockName=b2",
                                            "BlockSizes=4"]
    assert "SwitchName=flat" not in render(fab, "tree")
