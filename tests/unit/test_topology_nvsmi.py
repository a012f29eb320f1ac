"""`nvidia-smi topo -m` matrices of DGX A100 (NV12, mlx5 columns) and DGX H100
(NV18, NIC columns with a NIC Legend, GPU NUMA ID), written in NVIDIA's format."""

from pathlib import Path

import pytest

from slurmpolicy.errors import TopologyError
from slurmpolicy.model import Node
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.nvsmi import nvlink_width, parse_topo_matrix, read_topo_files

DATA = Path(__file__).parent / "data" / "nvsmi"


def test_dgx_a100():
    host = parse_topo_matrix((DATA / "dgx-a100.txt").read_text(), "dgx01", "dgx-a100.txt")
    assert host.gpus == 8
    assert nvlink_width(host) == 12
    g0 = host.gpu_links[0]
    assert g0.nvlinks == {k: 12 for k in range(1, 8)}
    assert g0.near_nics == ("mlx5_0", "mlx5_1")
    assert host.gpu_links[7].near_nics == ("mlx5_8", "mlx5_9")
    assert g0.cpu_affinity == "48-63,176-191" and g0.numa_affinity == "3"
    assert len(host.nics) == 10 and host.nics[0] == "mlx5_0"


def test_dgx_h100_with_nic_legend_and_tabs():
    host = parse_topo_matrix((DATA / "dgx-h100.txt").read_text(), "h01", "dgx-h100.txt")
    assert host.gpus == 8 and nvlink_width(host) == 18
    assert host.gpu_links[0].near_nics == ("mlx5_0",)
    assert host.gpu_links[1].near_nics == ("mlx5_3",)
    assert host.gpu_links[5].near_nics == ("mlx5_9",)
    assert host.gpu_links[4].cpu_affinity == "56-111,168-223"
    assert host.gpu_links[4].numa_affinity == "1"
    assert host.nics[11] == "mlx5_11"


def test_ansi_underlined_header_and_pcie_only_box():
    text = ("\x1b[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
            "GPU0\t X \tPHB\t0-63\t0\t\tN/A\n"
            "GPU1\tPHB\t X \t0-63\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
            "  NV#  = Connection traversing a bonded set of # NVLinks\n")
    host = parse_topo_matrix(text, "ws1", "ws1.txt")
    assert host.gpus == 2 and nvlink_width(host) is None
    assert "it is a PCIe host, not an NVLink domain" in host.origin["nvlink_warning"]


@pytest.mark.parametrize("mutate, line, words", [
    (lambda t: t.replace("GPU3    NV12    NV12    NV12     X ",
                         "GPU3    NV12    NV12    NV8      X ", 1), 4,
     "is NV12 but GPU3/GPU2 is NV8 (line 5); expected a symmetric"),
    (lambda t: t.replace("GPU1    NV12     X ", "GPU1    NV12    NV12", 1), 3,
     "expected X exactly on the diagonal"),
    (lambda t: t.replace("GPU2    NV12    NV12     X      NV12",
                         "GPU2    NV12    NV12     X      QPI", 1), 4, "expected X, NV#"),
    (lambda t: t.replace("\nGPU5 ", "\nGPU9 ", 1), 7, "not a column of the header"),
])
def test_bad_matrices_name_line_and_expectation(mutate, line, words):
    text = mutate((DATA / "dgx-a100.txt").read_text())
    with pytest.raises(TopologyError) as exc:
        parse_topo_matrix(text, "dgx01", "a100.txt")
    assert f"a100.txt:{line}:" in str(exc.value) and words in str(exc.value)


def test_not_a_matrix():
    with pytest.raises(TopologyError, match="no matrix header"):
        parse_topo_matrix("NVIDIA-SMI has failed\n", "x", "x.txt")


def test_short_row():
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\n"
    with pytest.raises(TopologyError, match=r"x.txt:3: row GPU1 has 1 cells; expected 2"):
        parse_topo_matrix(text, "x", "x.txt")


def test_files_feed_the_fabric_and_gpu_counts_are_checked(tmp_path):
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "dgx01.txt").write_text((DATA / "dgx-a100.txt").read_text())
    (topo / "dgx02.txt").write_text((DATA / "dgx-a100.txt").read_text())
    spec = read_topo_files(sorted(topo.iterdir()))
    assert set(spec.hosts) == {"dgx01", "dgx02"}
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    nodes = [Node(name="dgx01", state="IDLE", gpus_by_type={"a100": 8}),
             Node(name="dgx02", state="IDLE", gpus_by_type={"a100": 4})]
    fab = Fabric.from_sources(nodes, None, tmp_path / "slurm.conf",
                              nvidia_smi_topo=str(topo / "*.txt"))
    g = fab.graph
    assert g.edges[("gpu", "dgx01", 0), ("nvlink", "dgx01")]["width"] == 12
    assert g.nodes[("gpu", "dgx01", 2)]["near_nics"] == ("mlx5_2", "mlx5_3")
    assert any("dgx02: gpus is 4" in c.message for c in fab.conflicts)
    with pytest.raises(TopologyError, match="matches no file"):
        Fabric.from_sources(nodes, None, tmp_path / "slurm.conf",
                            nvidia_smi_topo=str(tmp_path / "none*.txt"))


def test_header_variants_at_column_zero_glued_and_with_a_separator():
    rows = ("GPU0\t X \tNV4\t0-15\t0\nGPU1\tNV4\t X \t0-15\t0\n")
    for header in ("GPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n",          # at column 0
                   "GPU0GPU1CPU AffinityNUMA Affinity\n",                # separators lost
                   "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
                   "-------------------------------------------\n"):     # a dashed rule
        host = parse_topo_matrix("$ nvidia-smi topo -m\n" + header + rows + "```\n", "w", "w")
        assert host.gpus == 2 and nvlink_width(host) == 4
        assert host.gpu_links[1].cpu_affinity == "0-15" and host.gpu_links[1].numa_affinity == "0"


def test_soc_is_read_as_sys_with_a_note():
    text = ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-11\nGPU1\tSOC\t X \t12-23\n\n"
            "Legend:\n\n  X   = Self\n  SOC = Path traverses a socket-level link (e.g. QPI)\n")
    host = parse_topo_matrix(text, "k80", "k80.txt")
    assert host.gpu_links[0].pcie == {1: "SYS"}
    assert "uses SOC (drivers before 2017); read as SYS" in host.origin["nvlink_warning"]
    assert "it is a PCIe host, not an NVLink domain" in host.origin["nvlink_warning"]
