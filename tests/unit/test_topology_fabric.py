"""Fabric: domains, distances, cost, placement, health, fragmentation, devcluster sources."""

import re
from pathlib import Path

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.settings import Fabric as FabricSettings
from slurmpolicy.topology import Fabric, synthetic_fabric
from slurmpolicy.topology.spec import LinkSpec
from slurmpolicy.topology.types import Health, Level, NoPlacement, Placement, Shape

DATA = Path(__file__).parent / "data"


def all_free(fab: Fabric) -> dict[str, int]:
    return {h: fab.gpus_of(h) for h in fab.hosts}


def test_synthetic_names_and_domains():
    fab = synthetic_fabric(hosts=16, gpus_per_host=8, hosts_per_nvlink=1, hosts_per_leaf=4,
                           leaves_per_spine=4, gpu_type="h100", prefix="gpu")
    assert fab.hosts[0] == "gpu01" and fab.hosts[-1] == "gpu16" and len(fab.hosts) == 16
    assert fab.gpus_of("gpu03") == 8 and fab.gpu_type_of("gpu03") == "h100"
    assert fab.domain_of("gpu05", Level.LEAF) == "leaf2"
    assert fab.domain_of("gpu05", Level.SPINE) == "spine1"
    assert fab.domain_of("gpu05", Level.NVLINK) == "gpu05"  # HGX: the host is the domain
    assert fab.domains(Level.LEAF)["leaf1"] == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert len(fab.domains(Level.LEAF)) == 4 and list(fab.domains(Level.SPINE)) == ["spine1"]
    assert synthetic_fabric(4096, hosts_per_leaf=32).hosts[0] == "gpu0001"


def test_synthetic_graph_holds_gpus_links_and_kinds():
    fab = synthetic_fabric(8, gpus_per_host=4, hosts_per_nvlink=4)
    g = fab.graph
    kinds = {d["kind"] for _, d in g.nodes(data=True)}
    assert kinds == {"cluster", "spine", "leaf", "nvlink", "host", "gpu"}
    assert sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu") == 32
    edge_kinds = {d["kind"] for _, _, d in g.edges(data=True)}
    assert edge_kinds == {"nvlink", "pcie", "ib"}
    assert g.has_edge(("gpu", "gpu01", 0), ("nvlink", "nvl1"))


def test_bad_synthetic_arguments():
    with pytest.raises(ValueError, match="hosts_per_leaf"):
        synthetic_fabric(4, hosts_per_leaf=0)


def test_hop_distance_and_cost():
    fab = synthetic_fabric(32, hosts_per_nvlink=2, hosts_per_leaf=4, leaves_per_spine=2)
    assert fab.hop_distance("gpu01", "gpu01") == 0
    assert fab.hop_distance("gpu01", "gpu02") == 2  # same NVLink domain
    assert fab.hop_distance("gpu01", "gpu04") == 2  # same leaf
    assert fab.hop_distance("gpu01", "gpu05") == 4  # through the spine
    assert fab.hop_distance("gpu01", "gpu09") == 6  # across spines
    near = fab.cost(["gpu01", "gpu02"])
    leaf = fab.cost(["gpu01", "gpu03"])
    spine = fab.cost(["gpu01", "gpu05"])
    far = fab.cost(["gpu01", "gpu09"])
    assert 0 < near < leaf < spine < far
    # Linear-time cost equals the pairwise definition.
    hosts = ["gpu01", "gpu02", "gpu03", "gpu05", "gpu09", "gpu10"]
    pairwise = sum(fab.cost([a, b]) for i, a in enumerate(hosts) for b in hosts[i + 1:])
    assert fab.cost(hosts) == pytest.approx(pairwise)


def test_place_prefers_one_leaf_and_packs():
    fab = synthetic_fabric(16)
    free = all_free(fab)
    free["gpu01"] = 0
    p = fab.place(Shape(4, 8), free)
    assert isinstance(p, Placement)
    assert p.level == Level.LEAF and p.spans[Level.LEAF] == 1
    assert p.hosts == ("gpu05", "gpu06", "gpu07", "gpu08")
    # 6 hosts: one whole leaf plus two from the next, never three leaves.
    p6 = fab.place(Shape(6, 8), free)
    assert isinstance(p6, Placement) and p6.spans[Level.LEAF] == 2


def test_place_single_host_best_fit():
    fab = synthetic_fabric(8)
    free = all_free(fab)
    free["gpu06"] = 2
    p = fab.place(Shape(1, 2), free)
    assert isinstance(p, Placement) and p.hosts == ("gpu06",)


def test_strict_failure_sentence_has_numbers():
    fab = synthetic_fabric(16)
    free = {h: 0 for h in fab.hosts}
    for h in ("gpu01", "gpu05", "gpu09", "gpu13"):
        free[h] = 8
    r = fab.place(Shape(2, 8, level=Level.LEAF, strict=True), free)
    assert isinstance(r, NoPlacement)
    assert r.reason.startswith("32 GPUs free, at most 8 in any one leaf")
    assert "asked for 16 in one leaf" in r.reason
    assert r.free_gpus == 32 and r.best_hosts_in_one_domain == 1
    # Preferred mode spans leaves instead.
    p = fab.place(Shape(2, 8, level=Level.LEAF), free)
    assert isinstance(p, Placement) and p.spans[Level.LEAF] == 2


def test_too_few_hosts_reason():
    fab = synthetic_fabric(4)
    free = {"gpu01": 4, "gpu02": 4}
    r = fab.place(Shape(1, 8), free)
    assert isinstance(r, NoPlacement)
    assert "8 GPUs free, at most 4 on any one host" in r.reason
    r2 = fab.place(Shape(3, 4), free)
    assert isinstance(r2, NoPlacement) and "only 2 hosts with 4 free" in r2.reason


def test_gpu_type_memory_and_prefer():
    fab = synthetic_fabric(8, gpu_memory_gb=None, gpu_type="a100")
    free = all_free(fab)
    r = fab.place(Shape(1, 8, gpu_type="h100"), free)
    assert isinstance(r, NoPlacement) and "another type" in r.reason
    r = fab.place(Shape(1, 8, min_gpu_memory_gb=40), free)
    assert isinstance(r, NoPlacement) and "GPU memory" in r.reason
    big = synthetic_fabric(8, gpu_memory_gb=141, gpu_type="h200")
    assert isinstance(big.place(Shape(1, 8, min_gpu_memory_gb=100), all_free(big)), Placement)
    small = synthetic_fabric(8)  # h100, 80 GB
    assert isinstance(small.place(Shape(1, 8, min_gpu_memory_gb=100), all_free(small)),
                      NoPlacement)
    p = small.place(Shape(2, 8, prefer=frozenset({"gpu07", "gpu08"})), all_free(small))
    assert isinstance(p, Placement) and p.hosts == ("gpu07", "gpu08")


def test_down_uplink_never_used_degraded_avoided():
    fab = synthetic_fabric(8).with_links([LinkSpec("gpu01", "leaf1", Health.DOWN),
                                          LinkSpec("gpu02", "leaf1", Health.DEGRADED)])
    assert fab.host_health("gpu01") == Health.DOWN
    free = all_free(fab)
    p = fab.place(Shape(2, 8), free)
    assert isinstance(p, Placement) and p.hosts == ("gpu03", "gpu04") and not p.degraded
    p3 = fab.place(Shape(3, 8), free)
    assert isinstance(p3, Placement) and p3.hosts == ("gpu05", "gpu06", "gpu07")
    busy = dict(free, gpu05=0, gpu06=0)
    p3 = fab.place(Shape(3, 8), busy)
    assert isinstance(p3, Placement) and "gpu01" not in p3.hosts
    assert p3.hosts == ("gpu02", "gpu03", "gpu04") and p3.degraded
    # A one-host job does not touch the uplink.
    only = fab.place(Shape(1, 8), {"gpu01": 8})
    assert isinstance(only, Placement) and only.hosts == ("gpu01",)
    r = fab.place(Shape(4, 8, level=Level.LEAF, strict=True), busy)
    assert isinstance(r, NoPlacement) and "1 host left out for down links" in r.reason


def test_down_leaf_uplink_keeps_jobs_inside_the_leaf():
    fab = synthetic_fabric(8).with_links([LinkSpec("leaf1", "spine1", Health.DOWN)])
    free = all_free(fab)
    assert isinstance(fab.place(Shape(4, 8), free), Placement)
    r = fab.place(Shape(6, 8), free)
    assert isinstance(r, NoPlacement) and "reachable" in r.reason


def test_down_nvlink_gpu_not_usable():
    fab = synthetic_fabric(2).with_links([LinkSpec("gpu01:gpu3", "nvlink:gpu01", Health.DOWN),
                                          LinkSpec("gpu01:gpu5", "host:gpu01", Health.DOWN)])
    assert fab.usable_gpus_of("gpu01") == 6
    assert fab.link_health("gpu01:gpu3", "nvlink:gpu01") == Health.DOWN
    p = fab.place(Shape(1, 8), {"gpu01": 8, "gpu02": 8})
    assert isinstance(p, Placement) and p.hosts == ("gpu02",)


def test_unknown_link_end_is_an_error():
    with pytest.raises(TopologyError, match="nosuch"):
        synthetic_fabric(2).with_links([LinkSpec("nosuch", "leaf1", Health.DOWN, origin="f:3")])
    with pytest.raises(TopologyError, match="no link between"):
        synthetic_fabric(8).with_links([LinkSpec("gpu01", "leaf2", Health.DOWN)])


def test_place_is_deterministic_and_rejects_bad_shapes():
    fab = synthetic_fabric(64, hosts_per_leaf=8)
    free = {h: (8 if i % 3 else 4) for i, h in enumerate(fab.hosts)}
    a = fab.place(Shape(10, 8), free)
    b = fab.place(Shape(10, 8), dict(reversed(list(free.items()))))
    assert a == b
    with pytest.raises(ValueError):
        fab.place(Shape(0, 8), free)


def test_fragmentation_summary_and_stranding():
    fab = synthetic_fabric(16)
    free = {h: 0 for h in fab.hosts}
    for h in ("gpu01", "gpu05", "gpu09", "gpu13"):
        free[h] = 8
    fr = fab.fragmentation(free, [Shape(2, 8, level=Level.LEAF, strict=True)])
    assert fr.free_gpus == 32 and fr.stranded_gpus == 32
    assert fr.summary().startswith("32 GPUs free, but at most 8 in any one leaf")
    assert fr.index == 0.0  # all free capacity is on whole hosts
    assert {d.domain: d.free_gpus for d in fr.by_domain}["leaf2"] == 8
    fr2 = fab.fragmentation(free, [Shape(2, 8)])
    assert fr2.stranded_gpus == 0
    thin = {h: 2 for h in fab.hosts}
    ft = fab.fragmentation(thin, [Shape(1, 4)])
    assert ft.index == 1.0 and ft.stranded_gpus == 32
    assert fab.fragmentation({}).summary() == "no GPUs free"


# ------------------------------------------------------------------ sources
def devcluster_nodes() -> list[Node]:
    nodes = []
    for i in range(1, 9):
        rack = 1 if i <= 4 else 2
        nodes.append(Node(name=f"gpu{i:02d}", state="IDLE", gpus_by_type={"h100": 8},
                          features=("h100", f"nvl_rack{rack}", f"leaf{rack}")))
    return nodes


DEVCLUSTER_TOPOLOGY = """\
SwitchName=leaf1 Nodes=gpu[01-04]
SwitchName=leaf2 Nodes=gpu[05-08]
SwitchName=spine Switches=leaf[1-2]
"""


def test_devcluster_topology_conf_and_features(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    (tmp_path / "topology.conf").write_text(DEVCLUSTER_TOPOLOGY)
    fab = Fabric.from_sources(devcluster_nodes(), FabricSettings(), tmp_path / "slurm.conf")
    assert fab.hosts == tuple(f"gpu{i:02d}" for i in range(1, 9))
    assert fab.domains(Level.LEAF) == {"leaf1": fab.hosts[:4], "leaf2": fab.hosts[4:]}
    assert fab.domains(Level.NVLINK) == {"nvl_rack1": fab.hosts[:4], "nvl_rack2": fab.hosts[4:]}
    assert fab.domains(Level.SPINE) == {"spine": fab.hosts}
    assert fab.conflicts == () and fab.gpu_type_of("gpu01") == "h100"
    assert fab.total_gpus == 64


def test_devcluster_fixture_without_slurm_uses_slurm_conf(monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(DATA / "devcluster" / "slurm.conf"))
    fab = Fabric.from_sources([], None, None)
    assert fab.hosts == tuple(f"dgx{i:02d}" for i in range(1, 9))
    assert fab.domain_of("dgx06", Level.LEAF) == "leaf2"
    assert fab.domain_of("dgx06", Level.NVLINK) == "nvl_rack2"
    assert fab.domain_of("dgx06", Level.SPINE) == "spine"
    assert fab.gpus_of("dgx06") == 8 and fab.gpu_type_of("dgx06") == "h100"


def test_features_alone_when_no_topology_conf(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    fab = Fabric.from_sources(devcluster_nodes(), None, tmp_path / "slurm.conf")
    assert fab.domain_of("gpu07", Level.LEAF) == "leaf2"
    assert fab.domain_of("gpu07", Level.SPINE) == "leaf2"  # no parent known


def test_unknown_node_in_topology_conf_is_left_out_with_a_warning(tmp_path):
    # Slurm warns "Invalid hostnames in switch configuration" and runs; so do we.
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    (tmp_path / "topology.conf").write_text(DEVCLUSTER_TOPOLOGY + "SwitchName=leaf3 Nodes=gpu09\n")
    fab = Fabric.from_sources(devcluster_nodes(), None, tmp_path / "slurm.conf")
    assert "gpu09" not in fab.hosts and "gpu08" in fab.hosts
    assert any(re.search(r"topology.conf:4.*gpu09 not known to Slurm; left out", w)
               for w in fab.warnings)


def test_features_that_disagree_with_topology_conf_are_reported(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    (tmp_path / "topology.conf").write_text(
        "SwitchName=a Nodes=gpu[01-03]\nSwitchName=b Nodes=gpu[04-08]\n"
    )
    fab = Fabric.from_sources(devcluster_nodes(), None, tmp_path / "slurm.conf")
    assert fab.conflicts, "a disagreement must be reported"
    text = " ".join(c.message for c in fab.conflicts)
    assert "gpu04" in text and "leaf1" in text
    assert fab.domain_of("gpu04", Level.LEAF) == "b"  # topology.conf outranks features


def test_labels_may_differ_if_grouping_agrees(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    (tmp_path / "topology.conf").write_text(
        "SwitchName=ib-a Nodes=gpu[01-04]\nSwitchName=ib-b Nodes=gpu[05-08]\n"
    )
    fab = Fabric.from_sources(devcluster_nodes(), None, tmp_path / "slurm.conf")
    assert fab.conflicts == ()
    assert fab.domain_of("gpu01", Level.LEAF) == "ib-a"


def test_two_leaf_features_on_one_node_is_an_error(tmp_path):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n")
    nodes = [Node(name="gpu01", state="IDLE", features=("leaf1", "leaf2"))]
    with pytest.raises(TopologyError, match=r"gpu01.*leaf1, leaf2"):
        Fabric.from_sources(nodes, None, tmp_path / "slurm.conf")


def test_no_source_at_all_is_an_error(tmp_path):
    with pytest.raises(TopologyError, match="no fabric source"):
        Fabric.from_sources([], None, tmp_path / "missing.conf")


def test_devcluster_generated_files_give_the_expected_fabric(tmp_path):
    """The dev cluster's own slurm.conf + topology.conf, as DevCluster writes them."""
    from slurmpolicy.devcluster import DevCluster

    dc = DevCluster(tmp_path / "dc", nodes=8, gpus_per_node=8, racks=2)
    dc.write_config(46800, list(range(46811, 46819)))
    fab = Fabric.from_sources([], FabricSettings(), dc.slurm_conf)
    hosts = tuple(f"gpu{i:02d}" for i in range(1, 9))
    assert fab.hosts == hosts and fab.total_gpus == 64
    assert fab.domains(Level.LEAF) == {"leaf1": hosts[:4], "leaf2": hosts[4:]}
    assert fab.domains(Level.NVLINK) == {"nvl_rack1": hosts[:4], "nvl_rack2": hosts[4:]}
    assert fab.domains(Level.SPINE) == {"spine": hosts}
    assert fab.conflicts == () and fab.warnings == []
    assert fab.gpu_type_of("gpu05") == "h100"


def test_nvlink_domain_across_leaves_is_noted_and_cut_when_a_leaf_is_asked():
    fab = synthetic_fabric(8, hosts_per_nvlink=4, hosts_per_leaf=2, leaves_per_spine=4)
    assert any("nvl1 spans leaves leaf1, leaf2" in w for w in fab.warnings)
    free = all_free(fab)
    anywhere = fab.place(Shape(3, 8), free)
    assert isinstance(anywhere, Placement) and anywhere.level == Level.NVLINK
    one_leaf = fab.place(Shape(2, 8, level=Level.LEAF, strict=True), free)
    assert isinstance(one_leaf, Placement) and one_leaf.spans[Level.LEAF] == 1
    assert one_leaf.spans[Level.NVLINK] == 1


def test_degraded_flag_only_for_links_the_set_uses():
    fab = synthetic_fabric(16).with_links([LinkSpec("gpu01", "leaf1", Health.DEGRADED),
                                           LinkSpec("leaf2", "spine1", Health.DEGRADED)])
    one = fab.place(Shape(1, 8), {"gpu01": 8})
    assert isinstance(one, Placement) and not one.degraded  # no IB link in use
    free = {h: 8 for h in ("gpu05", "gpu06", "gpu07", "gpu08")}
    inside = fab.place(Shape(4, 8), free)
    assert isinstance(inside, Placement) and not inside.degraded  # stays under leaf2
    across = fab.place(Shape(5, 8), {**free, "gpu09": 8})
    assert isinstance(across, Placement) and across.degraded  # leaves leaf2 over its uplink


@pytest.mark.parametrize("plugin, words", [
    ("", "slurm.conf sets no TopologyPlugin (unset): Slurm ignores this tree topology.conf"),
    ("TopologyPlugin=topology/block\n", "is in tree form but slurm.conf has"
                                         " TopologyPlugin=topology/block"),
    ("TopologyPlugin=topology/tree\n", None),
])
def test_what_slurm_does_with_topology_conf_under_its_plugin(tmp_path, plugin, words):
    (tmp_path / "slurm.conf").write_text("ClusterName=dev\n" + plugin)
    (tmp_path / "topology.conf").write_text(DEVCLUSTER_TOPOLOGY)
    fab = Fabric.from_sources(devcluster_nodes(), None, tmp_path / "slurm.conf")
    notes = [w for w in fab.warnings if "TopologyPlugin" in w]
    assert (notes == []) if words is None else (words in notes[0])
