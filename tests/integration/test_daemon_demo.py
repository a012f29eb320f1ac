"""`slurmpolicy demo` end to end (the README's main command), then the running
daemon's Prometheus endpoint, `slurmpolicy report` and `slurmpolicy log` on
what it did, and `slurmpolicy demo --down`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from pathlib import Path

import pytest

from .slurmtools import job_user

pytestmark = pytest.mark.slurm


def _cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpolicy.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_demo_shows_preemption_and_reservation_then_cleans_up() -> None:
    job_user()
    root = Path(tempfile.mkdtemp(prefix="spdemo-", dir="/tmp")) / "demo"
    try:
        run = _cli("demo", "--dir", str(root), "--timeout", "240")
        assert run.returncode == 0, run.stdout + run.stderr
        out = run.stdout
        print(out)
        assert "StartPreemption" in out and "CheckpointAck" in out
        assert "Requeue            ok         requeue victim" in out
        assert "compact reservation for large job" in out and "in place" in out
        assert "jobs lost: none" in out

        settings = root / "slurmpolicy.toml"
        port = tomllib.loads(settings.read_text())["metrics"]["port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
        for name in ("slurmpolicy_cycle_seconds", "slurmpolicy_slurm_calls_total",
                     "slurmpolicy_actions_total", "slurmpolicy_preemptions_in_flight",
                     "slurmpolicy_checkpoint_acks_total 1.0",
                     "slurmpolicy_checkpoint_deadline_misses_total 0.0",
                     "slurmpolicy_preemption_lost_gpu_hours_total",
                     "slurmpolicy_requeues_total 1.0",
                     'slurmpolicy_wait_seconds{class="research",stat="mean"}',
                     'slurmpolicy_gpus{state="allocated"}', "slurmpolicy_fragmentation_index"):
            assert name in metrics, name

        report = _cli("-c", str(settings), "report", "--json")
        assert report.returncode == 0, report.stderr
        data = json.loads(report.stdout)
        assert data["requeues"] == 1 and data["checkpoint_acks"] == 1
        assert data["preemptions"] == 1 and data["actions"]["CreateReservation"] >= 1
        assert data["lost_gpu_hours"] < 0.1
        log = _cli("-c", str(settings), "log", "--json")
        kinds = [json.loads(line)["kind"] for line in log.stdout.splitlines()]
        assert kinds.index("SignalCheckpoint") < kinds.index("CheckpointAck") < \
            kinds.index("Requeue")
    finally:
        down = _cli("demo", "--dir", str(root), "--down", timeout=120)
    assert down.returncode == 0, down.stderr
    assert not root.exists()
    if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
        root.parent.rmdir()
