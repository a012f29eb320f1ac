"""`rocm-smi --showtopo` outputs of real AMD hosts (tests/corpus/rocm-smi, see
its README), read into the same vendor-neutral fabric as nvidia-smi's: XGMI is
the GPU-to-GPU fabric, PCIe-only hosts are no fabric domain, and a cluster
mixing vendors places each job on the GPUs it asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.settings import Fabric as FabricSettings
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.rocmsmi import parse_showtopo, read_showtopo_files
from slurmpolicy.topology.types import Level, Placement, Shape

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "rocm-smi"


def read(name: str, host: str = "mi01"):
    return parse_showtopo((CORPUS / name).read_text(), host, name)


def test_every_corpus_file_is_read():
    files = sorted(p.name for p in CORPUS.glob("*.txt"))
    assert len(files) == 4
    for name in files:
        assert read(name).gpus in (2, 4, 8), name


def test_mi300x_all_xgmi_with_a_warning_banner_and_numa_nodes():
    host = read("mi300x-8gpu-ms-swift.txt")
    assert host.gpus == 8 and host.gpu_fabric == "xgmi"
    assert host.gpu_links[0].nvlinks == {k: 1 for k in range(1, 8)}
    assert [g.numa_affinity for g in host.gpu_links] == ["0"] * 4 + ["1"] * 4
    assert "nvlink_warning" not in host.origin


def test_mi210_older_numa_lines():
    host = read("mi210-4gpu-archer2.txt")
    assert host.gpus == 4 and [g.numa_affinity for g in host.gpu_links] == ["0", "1", "2", "3"]
    assert host.gpu_links[3].nvlinks == {0: 1, 1: 1, 2: 1}


@pytest.mark.parametrize("name", ["pcie-4gpu-rocm-smi-lib-108.txt", "mi100-2gpu-rocm-1503.txt"])
def test_pcie_only_hosts_are_not_one_fabric_domain(name):
    host = read(name)
    assert all(not g.nvlinks for g in host.gpu_links)
    assert "do not form one GPU-fabric domain" in host.origin["nvlink_warning"]


def test_xgmi_hosts_are_gpu_fabric_domains_and_pcie_hosts_are_not():
    from slurmpolicy.topology.spec import FabricSpec

    spec = FabricSpec(source="rocm-smi")
    spec.hosts["mi01"] = read("mi300x-8gpu-ms-swift.txt", "mi01")
    spec.hosts["pc01"] = read("pcie-4gpu-rocm-smi-lib-108.txt", "pc01")
    fab = Fabric(spec)
    hosts = {h["name"]: h for h in fab.to_dict()["hosts"]}
    assert (hosts["mi01"]["interconnect"], hosts["mi01"]["nvlink_gpus"]) == ("nvlink", 8)
    # Hops 3 (across CPU sockets) reads as nvidia-smi's SYS.
    assert (hosts["pc01"]["interconnect"], hosts["pc01"]["gpu_path"]) == ("pcie", "SYS")
    assert fab.graph.nodes[("nvlink", "mi01")]["fabric"] == "xgmi"
    assert "fabric" not in fab.graph.nodes[("nvlink", "pc01")]


def test_bad_outputs_name_the_line():
    good = (CORPUS / "mi210-4gpu-archer2.txt").read_text()
    with pytest.raises(TopologyError, match="no 'Link Type between two GPUs' section"):
        parse_showtopo("nothing here\n", "x", "x.txt")
    broken = good.replace("GPU1   XGMI         0            XGMI",
                          "GPU1   PCIE         0            XGMI")
    with pytest.raises(TopologyError, match=r"x.txt:\d+: GPU0/GPU1 is XGMI but GPU1/GPU0 is PCIE"):
        parse_showtopo(broken, "x", "x.txt")
    with pytest.raises(TopologyError, match="expected XGMI or PCIE"):
        parse_showtopo(good.replace("XGMI         XGMI         0", "XGMI         NV12         0"),
                       "x", "x.txt")


def test_mixed_vendor_fabric_places_each_job_on_its_vendor(tmp_path):
    # Slurm's view: two AMD hosts (gres gpu:mi300x:8), two NVIDIA hosts (gpu:h100:8).
    nodes = [Node(name=f"mi0{i}", state="IDLE", gpus_by_type={"mi300x": 8}) for i in (1, 2)]
    nodes += [Node(name=f"dgx0{i}", state="IDLE", gpus_by_type={"h100": 8}) for i in (1, 2)]
    for host in ("mi01", "mi02"):
        (tmp_path / f"{host}.txt").write_text((CORPUS / "mi300x-8gpu-ms-swift.txt").read_text())
    fab = Fabric.from_sources(nodes, FabricSettings(rocm_smi_topo=str(tmp_path / "*.txt")),
                              slurm_conf=tmp_path / "none.conf")
    assert fab.graph.nodes[("nvlink", "mi01")]["fabric"] == "xgmi"
    assert fab.graph.edges[("gpu", "mi01", 0), ("nvlink", "mi01")]["width"] == 1
    free = {h: 8 for h in fab.hosts}
    amd = fab.place(Shape(nodes=2, gpus_per_node=8, gpu_type="mi300x"), free)
    nv = fab.place(Shape(nodes=1, gpus_per_node=8, gpu_type="h100", level=Level.NVLINK), free)
    assert isinstance(amd, Placement) and set(amd.hosts) == {"mi01", "mi02"}
    assert isinstance(nv, Placement) and nv.hosts[0].startswith("dgx")
    assert fab.gpu_memory_gb_of("mi01") == 192.0
    spec = read_showtopo_files(sorted(tmp_path.glob("*.txt")))
    assert sorted(spec.hosts) == ["mi01", "mi02"]
