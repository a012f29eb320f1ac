"""Every real file of tests/corpus through its reader, with what it must yield.

The files were published by others (topograph's tests, Slurm's man pages, issue
trackers, framework and site docs; provenance in each folder's README.md). Each
is read by the same code the daemon and the CLI use, and the test says what
Slurm (or sbatch, or nvidia-smi's reader) would make of it: the switches and
leaves, the blocks and NVLink domains, the jobs, the directives. Every file of a
folder must have an expectation here, so a file added without one fails.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from slurmpolicy.directives import check_script, sbatch_options
from slurmpolicy.errors import TopologyError
from slurmpolicy.hostlist import compress
from slurmpolicy.settings import Settings
from slurmpolicy.sim.trace import SacctReport, TraceError, TraceRules, read_sacct
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.nvsmi import interconnect, nvlink_clique, nvlink_width, parse_topo_matrix
from slurmpolicy.topology.render import render
from slurmpolicy.topology.topoconf import parse_topology_conf, read_topology_conf
from slurmpolicy.topology.topoyaml import parse_topology_yaml, read_topology_yaml
from slurmpolicy.topology.types import Level

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def files(kind: str) -> list[str]:
    return sorted(p.name for p in (CORPUS / kind).iterdir() if p.name != "README.md")


def leaves(spec_hosts: dict, attr: str = "leaf") -> dict[str, str]:
    groups: dict[str, list[str]] = {}
    for name, host in spec_hosts.items():
        if getattr(host, attr) is not None:
            groups.setdefault(getattr(host, attr), []).append(name)
    return {k: compress(v) for k, v in groups.items()}


# --- topology.conf ------------------------------------------------------------------

#: file -> (form, hosts, {leaf or block: hostlist} (a sample), {switch: parent} (a sample),
#:          BlockSizes, padding blocks, words every warning set must hold)
TOPOLOGY_CONF: dict[str, tuple[str, int, dict[str, str], dict[str, str], tuple[int, ...],
                               list[str], list[str]]] = {
    "slurm-man-tree.conf": ("tree", 18, {"s0": "dev[0-5]", "s2": "dev[12-17]"},
                            {"s0": "s3", "s2": "s3"}, (), [], []),
    "slurm-man-block.conf": ("block", 128, {"block4": "node[97-128]"}, {}, (30, 120), [], []),
    "topograph-aws-sim-tree.conf": ("tree", 6, {"tor1": "node[11-12]",
                                                "no-topology": "node[13,23]"},
                                    {"tor1": "spine", "spine": "core"}, (), [],
                                    ["no switch reaches all nodes (2 separate trees"]),
    "topograph-oci-sim-tree.conf": ("tree", 5, {"switch.1.2": "node[21-22]"},
                                    {"switch.1.1": "switch.2.1", "switch.2.1": "switch.3.1"},
                                    (), [], ["no switch reaches all nodes"]),
    "topograph-ci-oci-sim-tree.conf": ("tree", 96, {"switch.1.12": "srv[6201-6208]"},
                                       {"switch.1.12": "switch.2.6", "switch.2.6": "switch.3.1"},
                                       (), [], []),
    "topograph-http-tree.conf": ("tree", 9, {"sw11": "n-[1101-1102]", "no-topology": "n-CPU"},
                                 {"sw11": "sw21", "sw21": "sw3"}, (), [],
                                 ["no switch reaches all nodes (2 separate trees"]),
    "topograph-http-trimmed-tree.conf": ("tree", 9, {"sw13": "n-[1301-1302]"},
                                         {"sw13": "sw22"}, (), [],
                                         ["no switch reaches all nodes"]),
    "topograph-ib-superpod-guids.conf": (
        "tree", 31, {"S-2c5eab0300c26040": "b05-p1-dgx-05-c[01-18]",
                     "S-2c5eab0300b879c0": "a05-p1-dgx-01-c[03-04]"},
        {"S-2c5eab0300c26040": "S-2c5eab0300c25f00",
         "S-2c5eab0300c25f00": "S-2c5eab0300b87b40"}, (), [], []),
    "topograph-nebius-no-topology.conf": ("tree", 1, {"no-topology": "node11"}, {}, (), [], []),
    "topograph-shortname-tree.conf": ("tree", 2, {"switch.1.1": "node-1"},
                                      {"switch.1.1": "switch.2.1", "switch.2.1": "switch.3.1"},
                                      (), [], []),
    "topograph-block-4.conf": ("block", 12, {"block002": "Node[201-202,205]"}, {}, (3,), [], []),
    "topograph-block-dfs-size1.conf": ("block", 4, {"block001": "Node202"}, {}, (1,), [], []),
    "topograph-block-diff-sizes.conf": ("block", 7, {"block002": "Node[201-202,205-206]"}, {},
                                        (3, 6), [], []),
    "topograph-block-pad-base.conf": ("block", 9, {"block003": "Node[401-403]"}, {}, (4, 8, 16),
                                      ["block004"], ["fewer than the base block size 4"]),
    "topograph-block-pad-tail.conf": ("block", 96, {"block012": "D5-n[08-15]"}, {}, (8, 64),
                                      ["block013", "block014", "block015", "block016"], []),
    "topograph-block-pad-middle-gb200.conf": (
        "block", 255, {"block003": "node[0028-0030,0032,0034-0036]",
                       "block031": "node[0280-0288]"}, {}, (9, 144),
        ["block015", "block016", "block032"],
        ["block block003 has 7 nodes", "block block030 has 5 nodes"]),
    "topograph-ci-dra-block.conf": ("block", 96, {"rack62": "srv[6201-6208]"}, {}, (8, 16, 32),
                                    [], []),
    "topograph-http-block-nvl.conf": ("block", 96, {"block007": "srv[4101-4108]"}, {},
                                      (8, 16, 32), [], []),
    "topograph-oci-sim-block.conf": ("block", 4, {"block002": "node[21-22]"}, {}, (2, 4), [], []),
}


def test_every_topology_conf_has_an_expectation():
    assert files("topology_conf") == sorted(TOPOLOGY_CONF)
    assert len(TOPOLOGY_CONF) >= 10


@pytest.mark.parametrize("name", sorted(TOPOLOGY_CONF))
def test_topology_conf_corpus(name):
    form, hosts, groups, parents, sizes, padding, words = TOPOLOGY_CONF[name]
    spec = read_topology_conf(CORPUS / "topology_conf" / name)
    assert spec.form == form and len(spec.hosts) == hosts
    got = leaves(spec.hosts, "leaf" if form == "tree" else "nvlink")
    assert {k: got[k] for k in groups} == groups
    assert {k: spec.parents[k] for k in parents} == parents
    assert spec.block_sizes == sizes
    assert [b for b, nodes in spec.block_order if not nodes] == padding
    # Every warning is one expected, and every expected one is there.
    assert all(any(w in warning for warning in spec.warnings) for w in words), spec.warnings
    assert all(any(w in warning for w in words) for warning in spec.warnings), spec.warnings
    # Rendering gives back the form read, with the same domains and the padding in place.
    fab = Fabric(spec)
    again = parse_topology_conf(render(fab), "rendered")
    assert again.form == form and again.block_order == spec.block_order
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE):
        assert Fabric(again).domains(level) == fab.domains(level)
    assert "SwitchName=flat" not in render(fab, "tree")


# --- topology.yaml ------------------------------------------------------------------

#: file -> (topologies (name, kind, default), hosts, leaves sample, blocks sample,
#:          padding blocks, empty switches)
TOPOLOGY_YAML: dict[str, tuple[list[tuple[str, str, bool]], int, dict[str, str],
                               dict[str, str], list[str], list[str]]] = {
    "slurm-man-three.yaml": ([("topo1", "tree", True), ("topo2", "block", False),
                              ("topo3", "flat", False)], 16, {"s2": "node[03-04]"},
                             {"b4": "node[13-16]"}, [], []),
    "topograph-block-pad.yaml": ([("topo1", "block", False)], 8, {}, {"block5": "n[31-32]"},
                                 ["block4"], []),
    "topograph-block-two-topologies.yaml": (
        [("topo1", "block", True), ("topo2", "block", False)], 4, {},
        {"block1": "Node[104-105]", "topo2.block1": "Node[301,303]"}, [], []),
    "topograph-flat-default.yaml": ([("topo1", "tree", False), ("topo2", "flat", False),
                                     ("topo3", "block", False), ("topo4", "flat", False),
                                     ("topo5", "flat", True)], 4, {"S3": "Node[201,205]"},
                                    {"block1": "Node[104-105]"}, [], []),
    "topograph-mixed-five.yaml": ([("topo1", "tree", False), ("topo2", "tree", False),
                                   ("topo3", "block", False), ("topo4", "block", False),
                                   ("topo5", "flat", True)], 10,
                                  {"S2": "Node[104-105]", "S6": "Node[401-403]"},
                                  {"topo4.block1": "Node[301-302]", "block2": "Node303"}, [], []),
    "topograph-mixed-skeleton.yaml": ([("topo1", "tree", False), ("topo2", "flat", False),
                                       ("topo3", "block", False), ("topo4", "flat", False),
                                       ("topo5", "flat", True)], 0, {}, {}, ["block1"], ["S3"]),
    "topograph-slinky-tree-full.yaml": ([("topo-0", "tree", False)], 2, {"sw14": "1402"}, {},
                                        [], []),
    "topograph-slinky-tree-skeleton.yaml": ([("topo-0", "tree", False)], 0, {}, {}, [],
                                            ["sw11", "sw14"]),
    "topograph-slinky-block-full.yaml": ([("topo-0", "block", False)], 2, {},
                                         {"block2": "1301"}, [], []),
    "topograph-slinky-block-skeleton.yaml": ([("topo-0", "block", False)], 0, {}, {},
                                             ["block1", "block2"], []),
    "topograph-slinky-combined-full.yaml": ([("topo-0", "tree", False), ("topo-1", "block", False)],
                                            2, {"sw13": "1302"}, {"block2": "1302"}, [], []),
    "topograph-slinky-combined-skeleton.yaml": (
        [("topo-0", "tree", False), ("topo-1", "block", False)], 0, {}, {},
        ["block1", "block2"], ["sw11", "sw13"]),
    "topograph-tree-two-topologies.yaml": ([("topo1", "tree", False), ("topo2", "tree", True)],
                                           4, {"S2": "Node[201,205]", "S3": "Node[304-305]"}, {},
                                           [], []),
    "topograph-tree-two-skeleton.yaml": ([("topo1", "tree", False), ("topo2", "tree", True)], 0,
                                         {}, {}, [], ["S3", "S2"]),
}


def test_every_topology_yaml_has_an_expectation():
    assert files("topology_yaml") == sorted(TOPOLOGY_YAML)
    assert len(TOPOLOGY_YAML) >= 10


@pytest.mark.parametrize("name", sorted(TOPOLOGY_YAML))
def test_topology_yaml_corpus(name):
    topologies, hosts, leaf_sample, block_sample, padding, empty = TOPOLOGY_YAML[name]
    spec = read_topology_yaml(CORPUS / "topology_yaml" / name)
    assert spec.topologies == topologies and len(spec.hosts) == hosts
    got_leaves, got_blocks = leaves(spec.hosts), leaves(spec.hosts, "nvlink")
    assert {k: got_leaves[k] for k in leaf_sample} == leaf_sample
    assert {k: got_blocks[k] for k in block_sample} == block_sample
    assert [b for b, nodes in spec.block_order if not nodes] == padding
    assert spec.empty_switches == empty
    fab = Fabric(spec)
    again = parse_topology_yaml(render(fab), "rendered")
    assert again.block_order == spec.block_order and again.empty_switches == spec.empty_switches
    assert [(n, k) for n, k, _d in again.topologies if k == "flat"] == [
        (n, k) for n, k, _d in topologies if k == "flat"]
    for level in (Level.NVLINK, Level.LEAF, Level.SPINE):
        assert Fabric(again).domains(level) == fab.domains(level)


# --- nvidia-smi topo -m -------------------------------------------------------------

#: file -> (GPUs, kind, worst path, GPUs NVLinked all to all, NV width, NICs,
#:          GPU0's near NICs, GPU0's CPU affinity, words of the note)
NVSMI: dict[str, tuple[int, str, str, int, int | None, tuple[str, ...], tuple[str, ...], str,
                       str]] = {
    "mleng-a100-nv12.txt": (8, "nvlink", "NV12", 8, 12, (), (), "0-23", ""),
    "mleng-h100-nv18.txt": (8, "nvlink", "NV18", 8, 18, (), (), "0-51", ""),
    "mleng-h100-nv18-numa.txt": (8, "nvlink", "NV18", 8, 18, (), (), "0-51,104-155", ""),
    "nccl-1453-h100-nv18-nics-excerpt.txt": (
        8, "nvlink", "NV18", 8, 18, tuple(f"NIC{i}" for i in range(9)), ("NIC8",), "0-79", ""),
    "mleng-2gpu-nvlink-bridge.txt": (2, "nvlink", "NV2", 2, 2, (), (), "0-23", ""),
    "nccl-1617-4xh100-nv6-nics.txt": (4, "nvlink", "NV6", 4, 6, ("NIC0", "NIC1", "NIC2", "NIC3"),
                                      ("NIC0",), "6,14,22,30", ""),
    "k8s-test-infra-371-gb200-nv18.txt": (4, "nvlink", "NV18", 4, 18, (), (), "0-71", ""),
    "dlperf-dlrm-v100-cube-mesh-tabs.txt": (8, "partial", "SYS", 4, 2, ("mlx5_0", "mlx5_1"), (),
                                            "0-23,48-71", "12 GPU pairs on h1 are not NVLinked"),
    "dlperf-dle-v100-cube-mesh.txt": (8, "partial", "SYS", 4, 2, ("mlx5_0",), (), "0-11,24-35",
                                      "at most 4 GPUs are NVLinked all to all"),
    "mleng-2gpu-pcie-phb.txt": (2, "pcie", "PHB", 1, None, (), (), "0-11",
                                "it is a PCIe host, not an NVLink domain"),
    "club3090-1229-2x5090-phb.txt": (2, "pcie", "PHB", 1, None, (), (), "0-63", "PCIe host"),
    "club3090-104-2x3090-phb.txt": (2, "pcie", "PHB", 1, None, (), (), "0-15", "PCIe host"),
    "club3090-1125-2gpu-node-indented.txt": (2, "pcie", "NODE", 1, None, (), (), "0-15",
                                             "worst path NODE"),
    "club3090-46-5gpu-pcie.txt": (5, "pcie", "SYS", 1, None, (), (), "8-15,24-31",
                                  "its 5 GPUs talk over PCIe"),
    "missalignment-106-4xl40s-nics.txt": (4, "pcie", "SYS", 1, None, ("mlx5_0", "mlx5_1"), (),
                                          "0-95,192-287", "PCIe host"),
    "ompi-users-2015-4gpu-soc.txt": (4, "pcie", "SYS", 1, None, (), (), "0-23",
                                     "uses SOC (drivers before 2017); read as SYS"),
}


def test_every_nvsmi_output_has_an_expectation():
    assert files("nvsmi") == sorted(NVSMI)


@pytest.mark.parametrize("name", sorted(NVSMI))
def test_nvsmi_corpus(name):
    gpus, kind, worst, clique, width, nics, near, affinity, note = NVSMI[name]
    text = (CORPUS / "nvsmi" / name).read_text(encoding="utf-8")
    host = parse_topo_matrix(text, "h1", name)
    assert host.gpus == gpus and interconnect(host) == (kind, worst)
    assert nvlink_clique(host) == clique and nvlink_width(host) == width
    assert host.nics == nics and host.gpu_links[0].near_nics == near
    assert host.gpu_links[0].cpu_affinity == affinity
    assert note in host.origin.get("nvlink_warning", "") if note else (
        "nvlink_warning" not in host.origin)


def test_nvlink_strict_never_lands_on_a_pcie_host():
    """The issue's case: --topology=nvlink,strict on a PCIe-only box with free GPUs."""
    from slurmpolicy.topology.spec import FabricSpec
    from slurmpolicy.topology.types import NoPlacement, Placement, Shape

    spec = FabricSpec(source="corpus")
    for host, name in (("pcie1", "club3090-46-5gpu-pcie.txt"), ("dgx1", "mleng-h100-nv18.txt"),
                       ("v100", "dlperf-dle-v100-cube-mesh.txt")):
        text = (CORPUS / "nvsmi" / name).read_text(encoding="utf-8")
        spec.hosts[host] = parse_topo_matrix(text, host, name)
    fab = Fabric(spec)
    assert fab.graph.nodes[("nvlink", "pcie1")]["kind"] == "pcie"
    assert fab.graph.nodes[("nvlink", "dgx1")]["kind"] == "nvlink"
    shown = {h["name"]: h for h in fab.to_dict()["hosts"]}
    assert (shown["pcie1"]["interconnect"], shown["pcie1"]["gpu_path"]) == ("pcie", "SYS")
    assert (shown["v100"]["interconnect"], shown["v100"]["nvlink_gpus"]) == ("partial", 4)
    # NIC affinity, as the matrix gives it: mlx5_0 shares GPU2's PCIe switch.
    gpu2 = fab.graph.nodes[("gpu", "v100", 2)]
    assert gpu2["near_nics"] == ("mlx5_0",) and gpu2["nic_paths"] == {"mlx5_0": "PIX"}
    assert fab.graph.nodes[("gpu", "v100", 4)]["nic_paths"] == {"mlx5_0": "SYS"}
    only_pcie = {"pcie1": 5, "dgx1": 0, "v100": 0}
    strict = fab.place(Shape(1, 4, Level.NVLINK, strict=True), only_pcie)
    assert isinstance(strict, NoPlacement)
    assert "fewer than 4 NVLinked to each other" in strict.reason
    # As a preference it still runs there; on the V100 cube mesh 4 GPUs are NVLinked.
    assert fab.place(Shape(1, 4, Level.NVLINK), only_pcie) == Placement(
        hosts=("pcie1",), level=Level.HOST, spans={lv: 1 for lv in (
            Level.HOST, Level.NVLINK, Level.LEAF, Level.SPINE, Level.CLUSTER)})
    got = fab.place(Shape(1, 4, Level.NVLINK, strict=True), {"pcie1": 5, "v100": 8})
    assert isinstance(got, Placement) and got.hosts == ("v100",)
    assert isinstance(fab.place(Shape(1, 8, Level.NVLINK, strict=True),
                                {"pcie1": 5, "v100": 8}), NoPlacement)
    got = fab.place(Shape(1, 8, Level.NVLINK, strict=True), {"v100": 8, "dgx1": 8})
    assert isinstance(got, Placement) and got.hosts == ("dgx1",)


# --- sacct --------------------------------------------------------------------------

#: file -> (jobs read, error words when refused, {skip reason: count})
SACCT: dict[str, tuple[int, str, dict[str, int]]] = {
    "torchx-describe-completed-p.txt": (0, "sacct's default columns) lacks Submit and a run"
                                           " time", {}),
    "torchx-describe-running.txt": (0, "default columns", {}),
    "torchx-sacct-completed-hetjob.txt": (0, "default columns", {}),
    "torchx-sacct-single-replica-failed.txt": (0, "default columns", {}),
    "torchx-sacct-cancelled-by.txt": (0, "default columns", {}),
    "torchx-sacct-list.json": (0, "", {"without a submit time": 2, "not finished": 0}),
}


#: The columns hpc-cost-simulator's SlurmLogParser.py asks sacct for (its
#: SLURM_ACCT_FIELDS, `sacct --allusers --parsable2 --noheader --format ...`); newer
#: versions add Partition.
HPCCOST_COLUMNS = ("State|JobID|ReqCPUS|ReqMem|ReqNodes|Constraints|Submit|Eligible|Start|"
                   "Elapsed|Suspended|End|ExitCode|DerivedExitCode|AllocNodes|NCPUS|"
                   "MaxDiskRead|MaxDiskWrite|MaxPages|MaxRSS|MaxVMSize|CPUTime|UserCPU|"
                   "SystemCPU|TotalCPU")
NO_GPU = "without GPUs (no gres/gpu in AllocTRES or ReqTRES)"
#: file -> (with Partition, rows, job steps, {skip reason: count}) once the header is given
HPCCOST: dict[str, tuple[bool, int, int, dict[str, int]]] = {
    "hpccost-array.txt": (False, 16, 8, {NO_GPU: 8}),
    "hpccost-multi-node.txt": (False, 2, 1, {NO_GPU: 1}),
    "hpccost-gl20-oom.txt": (False, 21, 9, {NO_GPU: 10, "unreadable rows": 2}),
    "hpccost-issue17-reqmem-0n.txt": (False, 4, 2, {NO_GPU: 1, "never ran (no run time)": 1}),
    "hpccost-issue5-pending.txt": (False, 1, 0, {"not finished": 1}),
    "hpccost-issue59-node-fail.txt": (True, 2, 1, {NO_GPU: 1}),
    "hpccost-issue61-cancelled-by.txt": (True, 2, 0, {"never ran (no run time)": 2}),
    "hpccost-issue63-interactive-step.txt": (False, 1, 1, {}),
    "hpccost-v1-excerpt.txt": (False, 60, 30, {NO_GPU: 30}),
    # Rows of 25 and of 26 fields mixed: those that do not fit the header are skipped
    # with their line, never shifted.
    "hpccost-v2-partition-excerpt.txt": (True, 60, 15, {NO_GPU: 15, "unreadable rows": 30}),
}
for _name in HPCCOST:
    SACCT[_name] = (0, "a dump made with --noheader", {})


def test_every_sacct_dump_has_an_expectation():
    assert files("sacct") == sorted(SACCT)
    assert len(SACCT) >= 10


@pytest.mark.parametrize("name", sorted(HPCCOST))
def test_headerless_dumps_read_with_the_format_they_were_made_with(name):
    partition, rows, steps, skipped = HPCCOST[name]
    columns = HPCCOST_COLUMNS.replace("|", ",") + (",Partition" if partition else "")
    path = CORPUS / "sacct" / name
    text = path.read_text()
    # The tool's own notes ('#' lines, some between rows) are left out, as its parser does.
    lines = [line for line in text.split("\n") if not line.lstrip().startswith("#")]
    report = SacctReport()
    jobs = read_sacct(io.StringIO("\n".join(lines)), TraceRules(), report=report,
                      columns=columns)
    assert jobs == [] and (report.rows, report.steps) == (rows, steps)
    assert {k: count for k, (count, _examples) in report.skipped.items()} == skipped
    assert steps + sum(skipped.values()) == rows


def test_a_headerless_dump_given_its_format_is_read_verbatim():
    # No '#' notes between its rows: the file is read as it is, notes above included.
    report = SacctReport()
    jobs = read_sacct(CORPUS / "sacct" / "hpccost-array.txt", TraceRules(), report=report,
                      columns=HPCCOST_COLUMNS.replace("|", ","))
    assert jobs == [] and (report.rows, report.steps) == (16, 8)
    assert report.skipped[NO_GPU][1][0] == "line 5"


@pytest.mark.parametrize("name", sorted(SACCT))
def test_sacct_corpus(name):
    read, error, skipped = SACCT[name]
    report = SacctReport()
    path = CORPUS / "sacct" / name
    if error:
        with pytest.raises(TraceError, match="--format=ALL") as exc:
            read_sacct(path, TraceRules(), report=report)
        assert error in str(exc.value) and str(path) in str(exc.value)
        return
    jobs = read_sacct(path, TraceRules(), report=report)
    assert len(jobs) == read == report.read
    assert {k: report.skipped.get(k, (0, []))[0] for k in skipped} == skipped


# --- batch scripts ------------------------------------------------------------------

#: file -> (#SBATCH partition sbatch reads, the first command's line, late #SPOLICY lines)
BATCH: dict[str, tuple[str | None, int, int]] = {
    "mleng-accelerate-launcher.slurm": ("xyz-cluster", 16, 0),
    "mleng-all_reduce_bench_pyxis.sbatch": (None, 9, 0),
    "mleng-cron-daily.slurm": ("PARTITION", 14, 0),
    "mleng-cron-hourly.slurm": ("PARTITION", 14, 0),
    "mleng-example.slurm": ("xyz-cluster", 16, 0),
    "mleng-fs-watchdog.slurm": ("compil", 10, 0),
    "mleng-lightning-launcher.slurm": ("xyz-cluster", 16, 0),
    "mleng-slurm-status.slurm": ("compil", 11, 0),
    "mleng-srun-launcher.slurm": ("xyz-cluster", 17, 0),
    "mleng-torchrun-launcher.slurm": ("xyz-cluster", 16, 0),
    "torchtitan-multinode_trainer.slurm": ("train", 26, 0),
    "princeton-01_single_gpu-job.slurm": (None, 13, 0),
    "princeton-02_pytorch_ddp-job.slurm": (None, 12, 0),
    "princeton-02_pytorch_ddp-simple.slurm": (None, 12, 0),
    "princeton-03_pytorch_lightning-multi-job.slurm": (None, 12, 0),
    "princeton-03_pytorch_lightning-simple-job.slurm": (None, 12, 0),
    "princeton-04_model_parallel_with_fsdp-chess_finetune.sh": (None, 12, 0),
    "princeton-tensorflow-job.slurm": (None, 13, 0),
}


def test_every_batch_script_has_an_expectation():
    assert files("batch") == sorted(BATCH)
    assert len(BATCH) >= 10


@pytest.mark.parametrize("name", sorted(BATCH))
def test_batch_corpus(name):
    partition, command, late = BATCH[name]
    data = (CORPUS / "batch" / name).read_bytes()
    assert sbatch_options(data).get("partition") == partition
    result = check_script(data, Settings())
    # No #SPOLICY line: the job is left alone, as the plugin leaves it.
    assert result.ok and result.admin_comment is None and len(result.warnings) == late
    lines = data.decode("latin-1").split("\n")
    first = next(n for n, line in enumerate(lines, 1)
                 if n > 1 and line.strip() and not line.lstrip().startswith("#"))
    assert first == command
    # The same script with a directive after its first command: warned, not read.
    late_script = "\n".join([*lines[:command], "#SPOLICY --class=research", *lines[command:]])
    result = check_script(late_script.encode("latin-1"), Settings())
    assert result.ok and result.admin_comment is None
    assert result.warnings[0].startswith(f"line {command + 1}: #SPOLICY --class=research: after"
                                         f" the first command (line {command})")
    # With it in the header instead, it is read.
    early = "\n".join([lines[0], "#SPOLICY --class=research", *lines[1:]])
    assert check_script(early.encode("latin-1"), Settings()).admin_comment == (
        "spolicy:v1 class=research")


def test_a_corpus_script_with_dos_line_breaks_is_refused_as_sbatch_refuses_it():
    data = (CORPUS / "batch" / "mleng-example.slurm").read_bytes().replace(b"\n", b"\r\n")
    result = check_script(data, Settings())
    assert [p.message for p in result.problems] == [
        "script: Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line"
        " breaks (\\n), as sbatch says; allowed: UNIX line breaks (convert with dos2unix)"]


def test_refusals_name_the_file_and_line():
    with pytest.raises(TopologyError, match=r"^c.conf:2: switch s lists b in Switches="):
        parse_topology_conf("SwitchName=a Nodes=n1\nSwitchName=s Switches=b\n", "c.conf")
    with pytest.raises(TraceError, match=r"<trace>:1: not sacct --parsable2 output"):
        read_sacct(io.StringIO("hello\n"))
