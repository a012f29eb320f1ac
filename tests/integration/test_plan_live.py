"""`slurmpolicy plan` against a real local Slurm (the dev cluster): the policy
reads the live queue, the directives in admin_comment and the nodes, and plans
checkpoint-first preemption of a lower class for a higher one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parents[2]
LOW = "spolicy:v1 class=experimental ckpt=signal:USR1,grace=60"
HIGH = "spolicy:v1 class=production ckpt=signal:USR1,grace=60"


def _plan(dc, config: Path) -> dict:
    env = {**os.environ, **dc.env()}
    env.pop("SLURMPOLICY_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", "--config", str(config),
                           "plan", "--json"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def test_live_plan_preempts_lower_class_for_higher(devcluster, tmp_path):
    dc = devcluster
    dc.wait_idle()
    wd = dc.workdir()
    config = tmp_path / "slurmpolicy.toml"
    config.write_text(f"[preemption]\nmin_runtime = 0\n[daemon]\nstate_dir = '{tmp_path}'\n"
                      f"[plugin]\ndoorbell = '{tmp_path}/doorbell'\n")
    victims: list[int] = []
    beneficiary = None
    try:
        # Four 2-node research-partition jobs fill the 8 nodes.
        for _ in range(4):
            victims.append(dc.submit(dc.hold_script(trap="USR1"), workdir=wd, extra_args=[
                "-p", "research", "-N2", "--gres=gpu:8", "--requeue"]))
        for job in victims:
            dc.wait_state(job, "RUNNING")
            dc.slurm_cmd("scontrol", "update", f"jobid={job}", f"AdminComment={LOW}")
        beneficiary = dc.submit(dc.hold_script(), workdir=wd,
                                extra_args=["-p", "research", "-N2", "--gres=gpu:8"])
        dc.slurm_cmd("scontrol", "update", f"jobid={beneficiary}", f"AdminComment={HIGH}")
        dc.wait_state(beneficiary, "PENDING")

        data = _plan(dc, config)
        starts = [a for a in data["actions"] if a["kind"] == "StartPreemption"]
        assert len(starts) == 1, data["actions"]
        start = starts[0]
        assert start["beneficiary"] == beneficiary
        assert len(start["victims"]) == 1 and start["victims"][0] in victims
        assert len(start["nodes"]) == 2
        assert start["reservation"].startswith(f"spolicy_pre_{beneficiary}_")  # one per preemption
        assert f"job {beneficiary} (production, 16 GPUs) cannot start" in start["reason"]
        # The higher class gets the larger site factor.
        factors = {a["job_id"]: a["site_factor"] for a in data["actions"]
                   if a["kind"] == "SetSiteFactor"}
        assert factors[beneficiary] >= 100_000
        # Slurm itself was not changed by a dry run.
        assert dc.job_state(start["victims"][0]) == "RUNNING"
    finally:
        for job in [*victims, *([beneficiary] if beneficiary else [])]:
            dc.release(job, wd)
        for job in victims:
            dc.wait_state(job, "COMPLETED", timeout=120)
        if beneficiary:
            dc.wait_state(beneficiary, "COMPLETED", timeout=120)
