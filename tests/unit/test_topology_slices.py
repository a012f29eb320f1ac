"""GPU slices (MIG instances, shards) as Slurm reports them (tests/corpus/slurm-gres,
real outputs): read from the gres strings, put in the fabric graph under their
GPU, kept out of whole-GPU capacity, and counted by fragmentation."""

from __future__ import annotations

from pathlib import Path

from slurmpolicy.model import Node
from slurmpolicy.slurm.parse import decode_nodes, gpus_by_type, shards_by_type
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.features import spec_from_nodes
from slurmpolicy.topology.slices import layout, node_free, slice_profile
from slurmpolicy.topology.spec import merge
from slurmpolicy.topology.types import Placement, Shape

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "slurm-gres"
LINES = [ln for ln in (CORPUS / "gres-strings.txt").read_text().splitlines()
         if ln and not ln.startswith("#")]


def test_mig_profiles_in_slurm_type_names():
    p = slice_profile("nvidia_h100_80gb_hbm3_4g.40gb")
    assert p is not None and (p.parent, p.compute, p.memory_gb) == ("nvidia_h100_80gb_hbm3", 4, 40)
    assert slice_profile("1g.10gb") is not None and slice_profile("a100l.2g.20gb") is not None
    assert slice_profile("nvidia_h100_80gb_hbm3") is None and slice_profile("mi250") is None


def test_site_node_with_whole_gpus_and_mig_instances():
    by_type = gpus_by_type(LINES[0])
    whole, slices = layout(by_type)
    assert whole == 2
    # Two 4g instances cannot share one GPU (7 compute slices): two GPUs after the whole ones.
    assert [(s.gpu, s.kind, s.memory_gb) for s in slices] == [(2, "mig", 40.0), (3, "mig", 40.0)]


def test_devcluster_sinfo_gres_with_mig_and_shards():
    nodes, release = decode_nodes((CORPUS / "sinfo-22.05-mig-shard-amd.json").read_bytes())
    assert release.startswith("22.05")
    mig = next(n for n in nodes if n.name == "mig01")
    assert dict(mig.gpus_by_type) == {"a100": 1, "1g.10gb": 2}
    assert dict(mig.shards_by_type) == {"a100": 1, "1g.10gb": 3}
    assert dict(shards_by_type(LINES[1])) == {"a100": 1, "1g.10gb": 3}
    whole, slices = layout(mig.gpus_by_type, mig.shards_by_type, {"a100": 40.0})
    assert whole == 1
    kinds = sorted((s.kind, s.gpu, s.gpu_type) for s in slices)
    assert kinds == [("mig", 1, "1g.10gb"), ("mig", 1, "1g.10gb"), ("shard", 0, "a100"),
                     ("shard", 1, "1g.10gb"), ("shard", 1, "1g.10gb"), ("shard", 1, "1g.10gb")]
    # Whole-GPU capacity leaves the slices out; they are free slices of their own.
    assert node_free(mig) == (1, 2 + 4)
    amd = next(n for n in nodes if n.name == "amd01")
    assert amd.gpu_types == ("mi250",) and node_free(amd) == (2, 0)


def test_slices_sit_under_their_gpu_in_the_graph_and_fragmentation_counts_them():
    nodes, _ = decode_nodes((CORPUS / "sinfo-22.05-mig-shard-amd.json").read_bytes())
    fab = Fabric(merge([spec_from_nodes(nodes)]))
    g = fab.graph
    assert fab.gpus_of("mig01") == 1 and fab.gpu_type_of("mig01") == "a100"
    mig_gpu = ("gpu", "mig01", 1)
    assert g.nodes[mig_gpu]["mig"] is True
    under = [n for n in g.neighbors(mig_gpu) if n[0] == "slice"]
    assert len(under) == 5  # two MIG instances and three shards on them
    assert all(g.edges[n, mig_gpu]["kind"] == "slice" for n in under)
    assert not g.has_edge(mig_gpu, ("nvlink", "mig01"))  # MIG turns off peer-to-peer
    assert fab.total_slices == 6 and len(fab.slices_of("mig01")) == 6
    free = {n.name: node_free(n)[0] for n in nodes}
    loose = {n.name: node_free(n)[1] for n in nodes}
    frag = fab.fragmentation(free, free_slices=loose)
    assert frag.free_gpus == 2 + 2 + 2 + 1  # slices are not whole GPUs
    assert (frag.slices, frag.free_slices) == (6, 6)
    assert frag.summary().endswith("6 of 6 GPU slices free")
    # A whole-GPU job never lands on a node whose only free capacity is slices.
    busy = {**free, "mig01": 0}
    nowhere = fab.place(Shape(nodes=1, gpus_per_node=1, gpu_type="a100"), busy)
    assert not isinstance(nowhere, Placement)


def test_slices_are_not_whole_gpus_for_the_planner():
    from slurmpolicy.policy.actions import Intents
    from slurmpolicy.policy.context import Context
    from slurmpolicy.settings import Settings

    nodes, _ = decode_nodes((CORPUS / "sinfo-22.05-mig-shard-amd.json").read_bytes())
    from slurmpolicy.model import Snapshot

    snap = Snapshot(taken_at=0.0, slurm_version="22.05.8", cluster_name="t", nodes=tuple(nodes))
    fab = Fabric(merge([spec_from_nodes(nodes)]))
    ctx = Context(snap, fab, Settings(), Intents(), 0.0)
    assert ctx.free["mig01"] == 1 and ctx.free["gpu01"] == 2
    assert Node(name="x", state="IDLE").shards_by_type == {}


def test_daemon_metrics_count_slices_apart():
    from slurmpolicy.daemon.metrics import snapshot_figures
    from slurmpolicy.model import Snapshot
    from slurmpolicy.settings import Settings

    nodes, _ = decode_nodes((CORPUS / "sinfo-22.05-mig-shard-amd.json").read_bytes())
    snap = Snapshot(taken_at=0.0, slurm_version="22.05.8", cluster_name="t", nodes=tuple(nodes))
    figures = {(name, tuple(sorted(labels.items()))): value
               for name, labels, value in snapshot_figures(
                   snap, Settings(), 0.0, Fabric(merge([spec_from_nodes(nodes)])))}
    assert figures[("slurmpolicy_gpu_slices", (("state", "all"),))] == 6.0
    assert figures[("slurmpolicy_gpu_slices", (("state", "free"),))] == 6.0


def test_fabric_show_draws_slices_apart(tmp_path):
    import json

    from click.testing import CliRunner

    from slurmpolicy.cli import cli

    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=t\n"
        f"NodeName=mig01 Gres={LINES[1]} Feature=leaf1\n"
        "NodeName=gpu01 Gres=gpu:h100:2 Feature=leaf1\n")
    settings = tmp_path / "s.toml"
    settings.write_text("")
    args = ["--config", str(settings), "fabric", "show", "--no-slurm", "--slurm-conf", str(conf)]
    out = CliRunner().invoke(cli, args, catch_exceptions=False).output
    assert "mig01" in out and "1/1 a100 free + 6/6 GPU slices free" in out, out
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False).output)
    assert (data["free_gpus"], data["slices"], data["free_slices"]) == (3, 6, 6)
    mig = next(h for h in data["hosts"] if h["name"] == "mig01")
    assert {s["kind"] for s in mig["slices"]} == {"mig", "shard"}
