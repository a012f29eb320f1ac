"""Dev cluster node groups and extra partitions (pools): AMD-typed GPUs, fake
MIG instances and shards, rendered without starting anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmpolicy.devcluster import DevCluster, NodeGroup, SlurmInstall, parse_node_group
from slurmpolicy.errors import DevClusterError

SYSTEM = SlurmInstall(sbin=Path("/usr/sbin"), bin=Path("/usr/bin"), plugin_dir=None)


def make(tmp: Path) -> DevCluster:
    dc = DevCluster(tmp / "dc", nodes=2, gpus_per_node=2, racks=1, groups=[
        parse_node_group("prefix=amd,nodes=2,gpus=4,type=mi250,partition=amd,features=amd,mi250"),
        parse_node_group("prefix=mig,gpus=1,type=a100,mig=1g.10gb:2,mig=3g.40gb:1,shards=4,"
                         "partition=mig"),
    ], partitions={"hpc": "gpu[01-02]"})
    dc._slurm = SYSTEM
    return dc


def test_groups_render_nodes_gres_partitions_and_topology(tmp_path: Path) -> None:
    dc = make(tmp_path)
    assert dc.node_names == ["gpu01", "gpu02", "amd01", "amd02", "mig01"]
    conf = dc.render_slurm_conf(30000, list(range(30001, 30006)))
    gres = dict(re.findall(r"^NodeName=(\S+) .*Gres=(\S+) ", conf, re.M))
    assert gres == {"gpu01": "gpu:h100:2", "gpu02": "gpu:h100:2", "amd01": "gpu:mi250:4",
                    "amd02": "gpu:mi250:4",
                    "mig01": "gpu:a100:1,gpu:1g.10gb:2,gpu:3g.40gb:1,shard:4"}
    assert "GresTypes=gpu,shard" in conf.splitlines()
    assert "Feature=amd,mi250,leaf_amd" in conf
    assert re.search(r"^PartitionName=hpc Nodes=gpu\[01-02\] ", conf, re.M)
    assert re.search(r"^PartitionName=amd Nodes=amd\[01-02\] ", conf, re.M)
    assert re.search(r"^PartitionName=research Nodes=gpu\[01-02\] Default=YES", conf, re.M)
    text = dc.render_gres_conf()
    d = dc.dev_dir
    assert f"NodeName=mig01 Name=gpu Type=a100 File={d}/nvidia0" in text
    assert f"NodeName=mig01 Name=gpu Type=1g.10gb File={d}/nvidia[1-2]" in text
    assert f"NodeName=mig01 Name=gpu Type=3g.40gb File={d}/nvidia3" in text
    assert "NodeName=mig01 Name=shard Count=4" in text
    assert dc.render_topology_conf().splitlines()[-1] == \
        "SwitchName=spine Switches=leaf1,leaf_amd,leaf_mig"


@pytest.mark.parametrize("spec, message", [
    ("nodes=1", "prefix= is missing"),
    ("prefix=x,colour=red", "unknown key 'colour'"),
    ("prefix=x,gpus=two", "gpus='two' is not a whole number"),
    ("prefix=gpu", "other than the cluster's own"),
])
def test_bad_group_specs_are_named(tmp_path: Path, spec: str, message: str) -> None:
    with pytest.raises(DevClusterError, match=message):
        DevCluster(tmp_path / "dc", groups=[parse_node_group(spec)])


def test_group_gres_text() -> None:
    assert NodeGroup("x", mig={"1g.10gb": 7}).gres() == "gpu:1g.10gb:7"
