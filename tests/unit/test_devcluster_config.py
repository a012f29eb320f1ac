"""The dev cluster's configuration files, rendered without starting anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmpolicy import devcluster as dcmod
from slurmpolicy.devcluster import DevCluster, SlurmInstall
from slurmpolicy.errors import DevClusterError

SYSTEM = SlurmInstall(sbin=Path("/usr/sbin"), bin=Path("/usr/bin"), plugin_dir=None)


def make(tmp: Path, **kw: object) -> DevCluster:
    dc = DevCluster(tmp / "dc", **kw)  # type: ignore[arg-type]
    dc._slurm = SYSTEM  # rendering needs no Slurm installed
    return dc


def test_default_shape_mirrors_the_fixture_cluster(tmp_path: Path) -> None:
    dc = make(tmp_path)
    ports = list(range(30001, 30009))
    conf = dc.render_slurm_conf(30000, ports)
    nodes = re.findall(r"^NodeName=(\S+) .*Port=(\d+) .*Gres=(\S+) Feature=(\S+)", conf, re.M)
    assert [n[0] for n in nodes] == [f"gpu0{i}" for i in range(1, 9)]
    assert [int(n[1]) for n in nodes] == ports
    assert {n[2] for n in nodes} == {"gpu:h100:8"}
    assert [n[3] for n in nodes] == ["h100,nvl_rack1,leaf1"] * 4 + ["h100,nvl_rack2,leaf2"] * 4
    for line in ("SlurmctldPort=30000", "TopologyPlugin=topology/tree", "JobSubmitPlugins=lua",
                 "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE", "JobRequeue=1",
                 "PriorityType=priority/multifactor", "SlurmdParameters=config_overrides",
                 "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"):
        assert line in conf.splitlines()
    assert "PluginDir" not in conf
    assert re.search(r"^PartitionName=prod Nodes=gpu\[01-08\] PriorityTier=10 ", conf, re.M)
    assert re.search(r"^PartitionName=research Nodes=gpu\[01-08\] Default=YES PriorityTier=1 ",
                     conf, re.M)
    assert "cgroup" not in conf
    assert all(str(dc.state_dir) in v for k, v in
               (line.split("=", 1) for line in conf.splitlines() if "=" in line)
               if k.endswith(("Dir", "File", "Location")))
    assert dc.render_topology_conf() == (
        "SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes=gpu[05-08]\n"
        "SwitchName=spine Switches=leaf[1-2]\n")
    assert dc.render_gres_conf() == (
        f"AutoDetect=off\nNodeName=gpu[01-08] Name=gpu Type=h100 File={dc.dev_dir}/nvidia[0-7]\n")


def test_uneven_racks_and_other_sizes(tmp_path: Path) -> None:
    dc = make(tmp_path, nodes=7, racks=3, gpus_per_node=1, gpu_type="a100")
    assert dc.rack_nodes == [["gpu01", "gpu02", "gpu03"], ["gpu04", "gpu05"], ["gpu06", "gpu07"]]
    assert dc.render_topology_conf().splitlines() == [
        "SwitchName=leaf1 Nodes=gpu[01-03]", "SwitchName=leaf2 Nodes=gpu[04-05]",
        "SwitchName=leaf3 Nodes=gpu[06-07]", "SwitchName=spine Switches=leaf[1-3]"]
    assert dc.render_gres_conf().endswith(f"File={dc.dev_dir}/nvidia0\n")
    assert "Feature=a100,nvl_rack3,leaf3" in dc.render_slurm_conf(1, list(range(2, 9)))
    big = make(tmp_path, nodes=120, racks=1)
    assert big.node_names[0] == "gpu001" and big.node_names[-1] == "gpu120"


def test_prefix_sets_plugin_dir(tmp_path: Path) -> None:
    dc = make(tmp_path)
    dc._slurm = SlurmInstall(sbin=Path("/opt/s/sbin"), bin=Path("/opt/s/bin"),
                             plugin_dir=Path("/opt/s/lib/slurm"))
    assert "PluginDir=/opt/s/lib/slurm" in dc.render_slurm_conf(1, list(range(2, 10))).splitlines()
    assert dc.env()["PATH"].startswith("/opt/s/bin:/opt/s/sbin:")


@pytest.mark.parametrize(("kw", "message"), [
    ({"nodes": 0}, "nodes must be at least 1"),
    ({"gpus_per_node": 0}, "gpus_per_node must be 1..64"),
    ({"nodes": 2, "racks": 3}, r"racks must be 1..nodes \(2\)"),
    ({"cluster_name": "Dev Cluster"}, "cluster name 'Dev Cluster' is not allowed"),
    ({"gpu_type": "h100;rm"}, "gpu type"),
    ({"ctld_port": 80}, "ctld_port must be in 1024"),
])
def test_bad_options_are_named(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    with pytest.raises(DevClusterError, match=message):
        DevCluster(tmp_path / "dc", **kw)  # type: ignore[arg-type]


def test_missing_prefix_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match=r"apt-get install slurm-wlm .*scripts/setup"):
        dcmod.find_slurm(tmp_path / "nothing")


def test_default_state_dir_honours_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("SLURMPOLICY_DEVCLUSTER_DIR", str(tmp_path / "x"))
    assert dcmod.default_state_dir() == tmp_path / "x"
    monkeypatch.delenv("SLURMPOLICY_DEVCLUSTER_DIR")
    assert dcmod.default_state_dir() == Path.home() / ".local/state/slurmpolicy/devcluster"


def test_free_ports_are_free_and_distinct() -> None:
    ports = dcmod.find_free_ports(20)
    assert len(set(ports)) == 20
    assert all(dcmod.PORT_RANGE[0] <= p <= dcmod.PORT_RANGE[1] for p in ports)
    assert all(dcmod.port_is_free(p) for p in ports)


# ---------------------------------------------------------------- multiple slurmd
# A build without --enable-multiple-slurmd compiles read_config.c's
#   error("Duplicated NodeHostName %s in the config file", hostname);
# (inside `#if !defined(MULTIPLE_SLURMD)`); every build holds node_conf.c's
#   fatal("Duplicated NodeHostName %s in config file", alias);
# which Debian's 22.05 libslurmfull.so (built with the flag) also carries. The
# files below are crafted around those two sentences; the real libraries are
# checked in tests/integration/test_devcluster.py.

NODE_CONF_FATAL = b"Duplicated NodeHostName %s in config file\0"
READ_CONFIG_ERROR = b"Duplicated NodeHostName %s in the config file\0"


def _lib(path: Path, *strings: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF" + b"\0" * 64 + b"".join(strings) + b"\0" * 64)
    return path


def test_the_single_slurmd_sentence_is_told_from_node_confs(tmp_path: Path) -> None:
    assert not dcmod.holds_single_slurmd_check(_lib(tmp_path / "multi.so", NODE_CONF_FATAL))
    assert dcmod.holds_single_slurmd_check(
        _lib(tmp_path / "single.so", NODE_CONF_FATAL, READ_CONFIG_ERROR))
    # Older releases spelled it NodeHostname.
    assert dcmod.holds_single_slurmd_check(
        _lib(tmp_path / "old.so", b"Duplicated NodeHostname %s in the config file\0"))
    (tmp_path / "empty.so").write_bytes(b"")
    assert not dcmod.holds_single_slurmd_check(tmp_path / "empty.so")


def _prefix(root: Path, *strings: bytes) -> SlurmInstall:
    for d in ("sbin", "bin"):
        (root / d).mkdir(parents=True)
    _lib(root / "lib" / "slurm" / "libslurmfull.so", *strings)
    return SlurmInstall(sbin=root / "sbin", bin=root / "bin", plugin_dir=root / "lib" / "slurm")


def test_a_prefix_built_without_multiple_slurmd_is_refused_in_one_line(tmp_path: Path) -> None:
    single = _prefix(tmp_path / "single", NODE_CONF_FATAL, READ_CONFIG_ERROR)
    ok, lib = dcmod.multiple_slurmd_support(single)
    assert ok is False and lib == single.plugin_dir / "libslurmfull.so"  # type: ignore[operator]
    with pytest.raises(DevClusterError) as err:
        dcmod.check_multiple_slurmd(single)
    message = str(err.value)
    assert "\n" not in message
    assert f"the Slurm at {tmp_path / 'single'} was built without --enable-multiple-slurmd" \
        in message
    assert "./configure --enable-multiple-slurmd" in message and "scripts/build-slurm" in message

    multi = _prefix(tmp_path / "multi", NODE_CONF_FATAL)
    assert dcmod.multiple_slurmd_support(multi) == (True, multi.plugin_dir / "libslurmfull.so")  # type: ignore[operator]
    dcmod.check_multiple_slurmd(multi)  # no error


def test_no_library_to_read_is_unknown_not_refused(tmp_path: Path) -> None:
    (tmp_path / "sbin").mkdir()
    bare = SlurmInstall(sbin=tmp_path / "sbin", bin=tmp_path / "bin",
                        plugin_dir=tmp_path / "lib" / "slurm")
    assert dcmod.multiple_slurmd_support(bare) == (None, None)
    dcmod.check_multiple_slurmd(bare)
    # A static slurmd carries read_config.c itself.
    _lib(tmp_path / "sbin" / "slurmd", READ_CONFIG_ERROR)
    assert dcmod.multiple_slurmd_support(bare) == (False, tmp_path / "sbin" / "slurmd")


def test_slurmctlds_log_line_of_a_single_slurmd_build_is_refused(tmp_path: Path) -> None:
    dc = make(tmp_path)
    dc.log_dir.mkdir(parents=True)
    dc.ctld_log.write_text("[2026-12-03T06:00:00.000] slurmctld version 25.11.7 started\n")
    dc._check_single_slurmd_log()  # nothing to say
    with dc.ctld_log.open("a") as f:
        f.write("[2026-12-03T06:00:00.100] error: Duplicated NodeHostName localhost in the "
                "config file\n")
    with pytest.raises(DevClusterError, match=r"built without --enable-multiple-slurmd "
                       r"\(slurmctld logged \"Duplicated NodeHostName localhost in the config "
                       r"file\""):
        dc._check_single_slurmd_log()


def test_no_age_weight_that_slurm_would_ignore(tmp_path: Path) -> None:
    conf = make(tmp_path).render_slurm_conf(30000, list(range(30001, 30009)))
    assert not any(line.startswith("PriorityWeightAge") for line in conf.splitlines())
    assert "PriorityWeightPartition=1000" in conf.splitlines()


def test_shape_differences_name_what_was_asked(tmp_path: Path) -> None:
    dc = make(tmp_path, nodes=3, gpus_per_node=2)
    marker = {"nodes": 2, "gpus_per_node": 2, "gpu_type": "h100", "racks": 2,
              "cpus_per_node": 8, "memory_mb": 64000, "node_prefix": "gpu",
              "slurm_prefix": None, "ctld_port": 30000, "slurmd_ports": [30001, 30002]}
    assert dc._shape_differences(marker) == ["nodes 2 (asked 3)"]
    same = make(tmp_path, nodes=2, gpus_per_node=2)
    assert same._shape_differences(marker) == []
    other = make(tmp_path, nodes=2, gpus_per_node=2, slurm_prefix="/opt/slurm-25.11")
    assert other._shape_differences(marker) == [
        "Slurm the system's Slurm (asked /opt/slurm-25.11)"]
