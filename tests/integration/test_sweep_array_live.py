"""A sweep as a Slurm job array on the dev cluster: the ordinary test user writes
the grid with ``simulate --array DIR --submit``, Slurm runs one replay per array
task (as that user, with this checkout's slurmpolicy), and ``simulate-gather``
reports figures equal to replaying the same grid in this process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import slurmpolicy
from slurmpolicy.cli import cli
from slurmpolicy.sim import metrics

from .slurmtools import TEST_USER, LiveCluster, parse_scontrol_line, wait_until

pytestmark = pytest.mark.slurm
ROOT = Path(slurmpolicy.__file__).resolve().parent.parent
TRACE = ROOT / "contrib" / "traces" / "philly-2017-09-10.csv"
#: 2 loads x 2 modes on the first 300 jobs of the shipped trace: 4 array tasks.
GRID = ("--trace", str(TRACE), "--limit", "300", "--hosts", "16", "--compare",
        "--load-scale", "1,2", "--seed", "5")
TIMING = ("cpu_seconds", "cpu_parts", "plan_steps", "wall_seconds", "peak_rss_mb")


def _figures(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _figures(v) for k, v in data.items() if k not in TIMING}
    if isinstance(data, list):
        return [_figures(v) for v in data]
    return data


def _cli_as_user(cluster: LiveCluster, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``slurmpolicy ARGS`` as the ordinary test user, with this checkout importable."""
    argv = cluster.as_user(["env", f"PYTHONPATH={ROOT}", "PYTHONDONTWRITEBYTECODE=1",
                            sys.executable, "-m", "slurmpolicy.cli", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=cwd,
                          check=False)


def _array_records(cluster: LiveCluster, job: str) -> list[dict[str, str]]:
    out = cluster.slurm_cmd("scontrol", "show", "job", "-o", job, check=False).stdout
    return [parse_scontrol_line(line) for line in out.splitlines() if line.strip()]


def test_sweep_runs_as_a_job_array_and_gathers_into_the_compare_report(
        devcluster: LiveCluster) -> None:
    cluster = devcluster
    wd = cluster.workdir()
    sweep = wd / "sweep"
    wrote = _cli_as_user(cluster, "simulate", *GRID, "--array", str(sweep),
                         "--array-throttle", "2", "--submit", "--json", cwd=wd)
    assert wrote.returncode == 0, wrote.stderr + wrote.stdout
    written = json.loads(wrote.stdout)
    assert written["tasks"] == 4 and written["dir"] == str(sweep)
    job = written["job_id"]
    assert job and job.isdigit(), written
    assert "#SBATCH --array=0-3%2" in (sweep / "sweep.sbatch").read_text()

    # Bounded: four replays of 300 jobs take seconds each, two at a time.
    def ended() -> list[dict[str, str]] | None:
        pending = cluster.slurm_cmd("squeue", "--noheader", "-j", job, check=False).stdout
        records = _array_records(cluster, job)
        done = [r for r in records if r.get("JobState") in
                ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")]
        return records if not pending.strip() and len(done) == 4 else None

    records = wait_until(ended, timeout=300, interval=1,
                         what=f"the 4 tasks of array job {job} to end")
    # Slurm ran four tasks of one array, as the test user, and each completed.
    assert sorted(int(r["ArrayTaskId"]) for r in records) == [0, 1, 2, 3], records
    assert {r["ArrayJobId"] for r in records} == {job}
    assert all(r["JobState"] == "COMPLETED" for r in records), [
        (r["ArrayTaskId"], r["JobState"], r.get("Reason")) for r in records]
    assert {r["UserId"].split("(")[0] for r in records} == {TEST_USER}
    for i in range(4):
        log = (sweep / "logs" / f"{job}_{i}.out").read_text()
        assert f"task {i}: " in log and f"results/{i}.json" in log, log
        result = json.loads((sweep / "results" / f"{i}.json").read_text())
        assert result["slurm_job"] == f"{job}_{i}" and result["node"], result

    gathered = _cli_as_user(cluster, "simulate-gather", str(sweep), "--json", cwd=wd)
    assert gathered.returncode == 0, gathered.stderr
    report = json.loads(gathered.stdout)
    assert [(g["load"], g["seed"], [m["mode"] for m in g["modes"]]) for g in report["loads"]] \
        == [(1.0, 5, ["slurmpolicy", "slurm-grace"]), (2.0, 5, ["slurmpolicy", "slurm-grace"])]
    assert all([t["key"] for t in g["targets"]] == [k for k, *_ in metrics.TARGETS]
               for g in report["loads"])

    # The same grid replayed here: the same figures (a seed gives the same replay).
    local = CliRunner().invoke(cli, ["simulate", *GRID, "--json", "--workers", "1"])
    assert local.exit_code == 0, local.output
    assert _figures(report) == _figures(json.loads(local.stdout))

    # The tables, as --compare prints them.
    text = _cli_as_user(cluster, "simulate-gather", str(sweep), cwd=wd)
    assert text.returncode == 0, text.stderr
    assert "300 jobs on 128 GPUs (16 hosts), load x2, seed 5" in text.stdout
    assert "targets at load x2" in text.stdout

    # A task whose result went missing is named, with the log Slurm wrote for it.
    (sweep / "results" / "2.json").unlink()
    missing = _cli_as_user(cluster, "simulate-gather", str(sweep), cwd=wd)
    assert missing.returncode == 6, missing.stderr
    assert "task 2 (slurmpolicy x2 seed 5): missing" in missing.stderr
    assert f"log: {sweep}/logs/{job}_2.out" in missing.stderr
    assert f"sbatch --array=2 {sweep}/sweep.sbatch" in missing.stderr
