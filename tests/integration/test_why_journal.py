"""``slurmpolicy why`` and ``top --once`` with the daemon's real journal, on a
real Slurm: one daemon cycle opens a preemption for a waiting production job;
the inspector then reads that journal (read-only) and says so.

The jobs end by release (never scancel); the preemption's reservation is
closed by further daemon cycles, or deleted here if one is left behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .daemon_support import DaemonRunner, submit, wait_for, write_settings

pytestmark = pytest.mark.slurm


def test_why_reads_the_daemons_journal(devcluster: Any, tmp_path: Path) -> None:
    state = tmp_path / "state"
    settings = write_settings(tmp_path / "slurmpolicy.toml", state)
    runner = DaemonRunner(devcluster, settings, tmp_path / "daemon.log")
    wd = devcluster.workdir()
    nodes = len(devcluster.node_names)
    victim = submit(devcluster, devcluster.hold_script(trap="USR1"), "--partition=research",
                    f"--nodes={nodes}", "--gres=gpu:8", "--requeue", "--job-name=victim",
                    admin_comment="spolicy:v1 class=experimental ckpt=signal:USR1,grace=20",
                    workdir=wd)
    devcluster.wait_state(victim, "RUNNING")
    urgent = submit(devcluster, devcluster.hold_script(), "--partition=research", "--nodes=2",
                    "--gres=gpu:8", "--job-name=urgent",
                    admin_comment="spolicy:v1 class=production", workdir=wd)
    try:
        # Before the daemon ever ran: no journal, and why says so.
        before = runner.cli("why", str(urgent))
        assert "policy details unavailable" in before.stdout, before.stdout

        runner.once()
        (state / "journal.sqlite").chmod(0o444)
        out = runner.cli("why", str(urgent), "--json")
        data = json.loads(out.stdout)
        assert data["policy_details_unavailable"] is None, data
        assert data["job_class"] == "production"
        assert data["blocking"] == "preemption", data
        # The victims are counted, not named: under PrivateData they may be
        # jobs the asking user cannot see.
        assert "1 of 1 victim(s) still to leave" in data["blocking_text"], data

        victim_why = runner.cli("why", str(victim)).stdout
        assert f"Job {victim} (RUNNING)" in victim_why
        assert "policy details unavailable" not in victim_why

        screen = runner.cli("top", "--once").stdout
        assert "Preemptions in flight: 1" in screen, screen
        preemption = next(ln for ln in screen.splitlines() if ln.startswith(str(urgent)))
        assert f"{victim} signalled" in preemption or f"{victim} planned" in preemption
        assert "Latest decisions" in screen and "(no policy details)" not in screen
    finally:
        if (state / "journal.sqlite").exists():
            (state / "journal.sqlite").chmod(0o644)
        devcluster.release(victim, wd)
        devcluster.wait_state(victim, ("COMPLETED", "PENDING"), timeout=90)
        if devcluster.job_state(victim) == "PENDING":  # requeued meanwhile: let it run out
            devcluster.wait_state(victim, "COMPLETED", timeout=90)
        devcluster.wait_state(urgent, ("RUNNING", "COMPLETED"), timeout=90)
        devcluster.release(urgent, wd)
        devcluster.wait_state(urgent, "COMPLETED", timeout=90)
        # Let the daemon close what it opened (its reservation), then check nothing is left.
        for _ in range(3):
            runner.once()
        reservations = devcluster.slurm_cmd("scontrol", "show", "reservations", "-o",
                                            check=False).stdout
        for line in reservations.splitlines():
            if "ReservationName=spolicy_" in line:
                name = line.split()[0].split("=", 1)[1]
                devcluster.slurm_cmd("scontrol", "delete", f"reservation={name}", check=False)
        wait_for(lambda: "spolicy_" not in devcluster.slurm_cmd(
            "scontrol", "show", "reservations", check=False).stdout, 30,
            "slurmpolicy's reservations to be gone")
