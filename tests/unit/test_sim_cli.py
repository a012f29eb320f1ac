"""``slurmpolicy simulate`` end to end on small synthetic and inline traces."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from click.testing import CliRunner

from slurmpolicy.cli import cli

SACCT_DEFAULT = ("JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode\n"
                 "1|a|gpu|x|8|COMPLETED|0:0\n")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["simulate", *args], catch_exceptions=True)
    if result.exception and not isinstance(result.exception, SystemExit):
        # Typed errors surface as exceptions under CliRunner; cli.main maps them.
        return 99, str(result.exception)
    return result.exit_code, result.output


def test_simulate_json_baseline_on_synthetic() -> None:
    code, out = invoke("--format", "synthetic", "--trace", "jobs=150,interarrival=60",
                       "--hosts", "8", "--hosts-per-leaf", "4", "--mode", "slurm-grace",
                       "--seed", "3", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["mode"] == "slurm-grace" and data["completed"] == 150
    assert set(data["by_class"]) <= {"production", "research", "experimental"}
    assert 0.0 < data["allocation"] <= 1.0


def test_simulate_compare_runs_the_fair_baseline_at_each_load_with_targets() -> None:
    args = ("--format", "synthetic", "--trace", "jobs=120,interarrival=90", "--hosts", "8",
            "--hosts-per-leaf", "4", "--compare", "--load-scale", "1,2")
    code, out = invoke(*args, "--json", "--workers", "2")
    assert code == 0, out
    data = json.loads(out)
    assert [x["load"] for x in data["loads"]] == [1.0, 2.0]
    for group in data["loads"]:
        assert [m["mode"] for m in group["modes"]] == ["slurmpolicy", "slurm-grace"]
        assert group["modes"][0]["plan_calls"] > 0
        assert [t["key"] for t in group["targets"]] == ["prod_p95", "jct", "lost", "idle",
                                                         "alloc", "queueing"]
        for t in group["targets"]:
            assert t["met"] or t["gap"], t  # a miss always says by how much
        base = group["modes"][1]
        assert base["backfill_passes"] > 0 and "idle_in_grace_gpu_hours" in base
    # The heavier load waits longer in the baseline.
    assert (data["loads"][1]["modes"][1]["wait"]["mean"]
            >= data["loads"][0]["modes"][1]["wait"]["mean"])
    code, out = invoke(*args, "--with-requeue", "--limit", "60")
    assert code == 0, out
    assert "slurm-requeue" in out and "targets at load x2" in out and "plan() calls" in out
    # Where the CPU went, and slurmpolicy's against the fair baseline's.
    flat = " ".join(out.split())
    assert "x2: slurmpolicy takes" in flat and "the CPU of slurm-grace (target 3x)" in flat
    assert "outside plan()" in flat and "(plan() " in flat


def test_simulate_refuses_a_bad_load() -> None:
    code, out = invoke("--format", "synthetic", "--trace", "jobs=10", "--load-scale", "2,x")
    assert code != 0 and "'x' is not a load" in out


def test_simulate_refuses_sacct_default_columns(tmp_path: Path) -> None:
    trace = tmp_path / "sacct.txt"
    trace.write_text(SACCT_DEFAULT)
    code, out = invoke("--trace", str(trace), "--mode", "slurm-grace")
    assert code != 0
    assert "--format=ALL" in out


def test_simulate_needs_a_trace_and_a_big_enough_cluster(tmp_path: Path) -> None:
    code, out = invoke("--mode", "slurm-grace")
    assert code != 0 and "--trace FILE is required" in out
    # ... and names the trace the repository ships, which exists.
    from slurmpolicy.commands.simulate import SHIPPED_TRACE
    assert f"--trace {SHIPPED_TRACE}" in " ".join(out.split())
    assert (Path(__file__).resolve().parents[2] / SHIPPED_TRACE).is_file()
    trace = tmp_path / "p.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                     "2017-09-04 10:30:41,100,64,6400,a\n")
    code, out = invoke("--trace", str(trace), "--hosts", "2", "--mode", "slurm-grace")
    assert code != 0 and "more GPUs than the cluster has" in out


def test_simulate_plots_or_says_why_not(tmp_path: Path) -> None:
    code, out = invoke("--format", "synthetic", "--trace", "jobs=80", "--hosts", "8",
                       "--mode", "slurm-requeue", "--plot", str(tmp_path / "plots"))
    assert code == 0, out
    if importlib.util.find_spec("matplotlib") is None:  # the optional 'plot' extra
        assert "plots skipped: matplotlib is not installed" in out
        assert "slurmpolicy[plot]" in out
    else:
        assert (tmp_path / "plots" / "allocation.png").stat().st_size > 1000
        for name in ("wait", "preemption_cost", "beneficiary_delay"):
            assert (tmp_path / "plots" / f"{name}.png").exists()


def test_simulate_on_a_fabric_file_counts_nvlink_domains() -> None:
    fabric = Path(__file__).resolve().parents[2] / "contrib" / "fabric.example.toml"
    code, out = invoke("--format", "synthetic", "--trace", "jobs=150,interarrival=30",
                       "--fabric", str(fabric), "--mode", "slurm-grace", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["gpus"] > 0 and data["completed"] == 150
    # NVL72 racks are NVLink domains of many hosts: some multi-node jobs fit in one.
    assert data["multi_node_jobs"] > 0
    assert data["multi_node_in_one_nvlink"] is not None
