"""``slurmpolicy why`` and ``slurmpolicy top --once`` on the recorded Slurm
outputs (tests/fixtures/slurm), through the jsoncli adapter's saved-output reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpolicy.cli import cli
from slurmpolicy.errors import JobGone
from tests.paths import FIXTURES

RELEASES = ["slurm-22.05", "slurm-25.11"]


def run(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(cli, list(args), terminal_width=100)
    return result.exit_code, result.output, result.exception


@pytest.mark.parametrize("release", RELEASES)
def test_why_json_of_a_pending_job(release: str, tmp_path: Path) -> None:
    code, out, exc = run("why", "9", "--json", "--from-dir", str(FIXTURES / release),
                         "--journal", str(tmp_path / "none"))
    assert code == 0, (out, exc)
    data = json.loads(out)
    assert data["job_id"] == 9 and data["state"] == "PENDING"
    assert data["slurm_reason"] == "Resources"
    assert data["position"] == 1 and data["partition"] == "research"
    assert data["blocking"] and data["blocking_text"]
    assert isinstance(data["alternatives"], list) and data["alternatives"]
    assert "no journal" in data["policy_details_unavailable"]
    assert data["source"] == f"dir {FIXTURES / release}"


@pytest.mark.parametrize("release", RELEASES)
def test_why_text_of_running_and_held_jobs(release: str, tmp_path: Path) -> None:
    src = ["--from-dir", str(FIXTURES / release), "--journal", str(tmp_path / "none")]
    code, out, exc = run("why", "1", *src)
    assert code == 0, (out, exc)
    assert "Job 1 (RUNNING)" in out and "dgx[05-06]" in out
    assert "last acknowledged" in out
    assert "policy details unavailable" in out
    code, out, _ = run("why", "11", *src)
    assert code == 0 and "JobHeldUser" in out and "held" in out


def test_why_array_task_and_unknown_job(tmp_path: Path) -> None:
    src = ["--from-dir", str(FIXTURES / "slurm-22.05"), "--journal", str(tmp_path)]
    code, out, exc = run("why", "3_2", "--json", *src)
    assert code == 0, (out, exc)
    assert json.loads(out)["state"] == "RUNNING"
    code, out, exc = run("why", "4242", *src)
    assert isinstance(exc, JobGone) and "not in the queue Slurm shows you" in str(exc)


def test_why_rejects_a_bad_job_id() -> None:
    code, out, _ = run("why", "nine")
    assert code == 2 and "allowed: 123, 123_4" in out


def test_top_once_prints_every_view(tmp_path: Path) -> None:
    code, out, exc = run("top", "--once", "--from-dir", str(FIXTURES / "slurm-22.05"),
                         "--journal", str(tmp_path))
    assert code == 0, (out, exc)
    for needle in ("3 pending", "Queue: 3 pending", "Running: 9 jobs", "Fabric: 8 nodes",
                   "dgx08 (ib link flapping)", "Preemptions in flight: 0", "Latest decisions",
                   "policy details unavailable"):
        assert needle in out, needle
    code, out, _ = run("top", "--once", "--user", "alice", "--from-dir",
                       str(FIXTURES / "slurm-22.05"), "--journal", str(tmp_path))
    assert "Queue [user=alice]: 1 pending" in out and "Running [user=alice]: 2 jobs" in out


def test_top_interval_must_be_positive() -> None:
    code, out, _ = run("top", "--interval", "0")
    assert code == 2 and "--interval" in out


def test_inspector_imports_stay_lazy() -> None:
    """Loading the commands (e.g. for `slurmpolicy --help`) pulls in neither rich nor textual."""
    import subprocess
    import sys

    code = ("import sys, slurmpolicy.cli, slurmpolicy.commands.inspect, slurmpolicy.tui;"
            "print(sorted(m for m in ('rich', 'textual', 'networkx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
