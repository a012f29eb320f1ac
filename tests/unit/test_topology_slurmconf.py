"""slurm.conf NodeName lines and gres strings, for running without Slurm."""

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.slurmconf import active_slurm_conf, parse_gres_gpus, read_slurm_conf_nodes


@pytest.mark.parametrize("gres, expected", [
    ("gpu:h100:8", {"h100": 8}),
    ("gpu:4", {"": 4}),
    ("gpu", {"": 1}),
    ("gpu:a100:4,gpu:a10:2,nic:1", {"a100": 4, "a10": 2}),
    ("gpu:h100:8(S:0-1)", {"h100": 8}),
    ("", {}),
])
def test_gres(gres, expected):
    assert parse_gres_gpus(gres) == expected


def test_nodes_of_slurm_conf(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "TopologyPlugin=topology/tree\n"
        "NodeName=DEFAULT CPUs=8\n"
        "NodeName=gpu[01-02,04] Gres=gpu:h100:8 Feature=h100,nvl_rack1,leaf1 # comment\n"
        "NodeName=cpu1 CPUs=4\n"
    )
    nodes, plugin = read_slurm_conf_nodes(conf)
    assert plugin == "topology/tree"
    assert [n.name for n in nodes] == ["gpu01", "gpu02", "gpu04", "cpu1"]
    assert nodes[0].gpus == 8 and nodes[0].features == ("h100", "nvl_rack1", "leaf1")
    assert nodes[3].gpus == 0


def test_bad_nodename_names_the_line(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nNodeName=gpu[01-\n")
    with pytest.raises(TopologyError, match=r"slurm.conf:2: bad NodeName"):
        read_slurm_conf_nodes(conf)


def test_active_slurm_conf(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "x.conf"))
    assert active_slurm_conf() == tmp_path / "x.conf"
    assert active_slurm_conf("/a/b.conf").as_posix() == "/a/b.conf"
    monkeypatch.delenv("SLURM_CONF")
    assert active_slurm_conf().as_posix() == "/etc/slurm/slurm.conf"
