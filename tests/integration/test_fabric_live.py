"""`slurmpolicy fabric` against a real local Slurm (the dev cluster): free GPUs
come from a live snapshot, and placement steers around busy nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpolicy.devcluster import DevCluster

from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    state = Path(tempfile.mkdtemp(prefix="spdc-fabric-", dir="/tmp"))
    os.chmod(state, 0o755)
    dc = LiveCluster(state, nodes=8, gpus_per_node=8, racks=2)
    dc.up(timeout=120)
    try:
        yield dc
    finally:
        dc.down()
        shutil.rmtree(state, ignore_errors=True)


def _run(dc: DevCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **dc.env()}
    env.pop("SLURMPOLICY_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "slurmpolicy.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def _wait_running(dc: DevCluster, job: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = dc.run_tool("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} did not start (state {state!r})")


def test_live_fabric_sees_busy_gpus_and_places_around_them(cluster: DevCluster) -> None:
    idle = json.loads(_run(cluster, "fabric", "show", "--json").stdout)
    assert idle["live"] is True and idle["free_gpus"] == 64
    assert {h["name"]: h["leaf"] for h in idle["hosts"]}["gpu05"] == "leaf2"

    out = cluster.run_tool("sbatch", "--parsable", "-N2", "-w", "gpu[01-02]", "--gres=gpu:8",
                           "-o", "/dev/null", "--wrap", "sleep 300")
    # Never scancel (project rule): the job ends when the module's cluster goes down.
    job = out.stdout.strip().split(";")[0]
    _wait_running(cluster, job)
    busy = json.loads(_run(cluster, "fabric", "show", "--json").stdout)
    free = {h["name"]: h["gpus_free"] for h in busy["hosts"]}
    assert free["gpu01"] == 0 and free["gpu02"] == 0 and busy["free_gpus"] == 48
    # Four whole hosts now exist only in leaf2.
    placed = json.loads(_run(cluster, "fabric", "place", "-N", "4", "-G", "8",
                             "--level", "leaf", "--strict", "--json").stdout)
    assert placed["placed"] and placed["hostlist"] == "gpu[05-08]"
    refused = _run(cluster, "fabric", "place", "-N", "5", "-G", "8", "--level", "leaf",
                   "--strict")
    assert refused.returncode == 1
    assert "48 GPUs free, at most 32 in any one leaf" in refused.stdout


def test_a_topology_conf_slurm_accepts_with_warnings_is_read_with_the_same_warnings(
        cluster: DevCluster) -> None:
    """A node under two leaves and a node slurm.conf lacks: slurmctld warns and runs on
    reconfigure; `fabric check` says the same (the first leaf counts, which agrees
    with the nodes' leaf features), `plan` plans (it used to exit 2)."""
    topo = cluster.conf_dir / "topology.conf"
    original = topo.read_text()
    try:
        topo.write_text("SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=leaf2 Nodes=gpu[04-08,99]\n"
                        "SwitchName=spine Switches=leaf[1-2]\n")
        mark = cluster.ctld_log.stat().st_size
        cluster.run_tool("scontrol", "reconfigure")
        deadline = time.monotonic() + 30
        log = ""
        while time.monotonic() < deadline and "Multiple leaf switches" not in log:
            time.sleep(0.5)
            log = cluster.ctld_log.read_bytes()[mark:].decode(errors="replace")
        # What Slurm itself says of this file (src/plugins/topology/tree/switch_record.c).
        assert "Multiple leaf switches contain nodes: gpu04" in log, log[-2000:]
        assert "Invalid hostnames in switch configuration: gpu99" in log, log[-2000:]
        assert cluster.run_tool("scontrol", "ping").returncode == 0
        check = _run(cluster, "fabric", "check", "--json")
        data = json.loads(check.stdout)
        assert check.returncode == 0, check.stderr
        words = " | ".join(data["warnings"])
        assert "Multiple leaf switches contain nodes: gpu04 (leaf1 line 1, leaf2 line 2)" in words
        assert "gpu99 not known to Slurm; left out" in words
        shown = json.loads(_run(cluster, "fabric", "show", "--json").stdout)
        assert {h["name"]: h["leaf"] for h in shown["hosts"]}["gpu04"] == "leaf1"
        plan = _run(cluster, "plan", "--json")
        assert plan.returncode == 0, plan.stderr + plan.stdout
        json.loads(plan.stdout)
    finally:
        topo.write_text(original)
        cluster.run_tool("scontrol", "reconfigure")
