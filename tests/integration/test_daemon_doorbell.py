"""The submit doorbell on a real Slurm (issue 16: production starts at once).

A 2-node x 8-GPU cluster runs the job_submit.lua rendered from the daemon's
own settings (so both use the same doorbell); the daemon cycles only every
120 s. Two research jobs fill the GPUs; a production job submitted by the
test user needs one of them preempted. The plugin rings the doorbell, and the
daemon starts the preemption within seconds, not at its next interval. No job
is lost on the way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpolicy import settings as settings_mod
from slurmpolicy.plugin import render

from .daemon_support import (
    DaemonRunner,
    assert_no_job_lost,
    journal_of,
    release_requeued,
    restarts,
    submit,
    train_script,
    victim_comment,
    wait_for,
    write_settings,
)
from .slurmtools import LiveCluster, job_user

pytestmark = pytest.mark.slurm

INTERVAL = 120
#: Well before the next cycle would have come (INTERVAL after the first).
WITHIN = 20


@pytest.fixture(name="setup")
def setup_fixture() -> Iterator[tuple[LiveCluster, DaemonRunner, Path]]:
    job_user()
    state = Path(tempfile.mkdtemp(prefix="spdb-", dir="/tmp"))
    os.chmod(state, 0o755)
    home = state / "sp"
    home.mkdir()
    path = write_settings(home / "slurmpolicy.toml", home / "state",
                          daemon={"interval": INTERVAL, "preemption_poll": 2})
    loaded = settings_mod.load(path)
    bell = Path(loaded.plugin.doorbell)
    assert bell.parent == home
    lua = home / "job_submit.lua"
    lua.write_text(render(loaded))
    cluster = LiveCluster(state / "c", nodes=2, gpus_per_node=8, racks=1, job_submit_lua=lua)
    runner = DaemonRunner(cluster, path, home / "daemon.log")
    cluster.up()
    try:
        yield cluster, runner, bell
    finally:
        runner.stop()
        cluster.down()
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(state, ignore_errors=True)


PRODUCTION = """#!/bin/bash
#SBATCH --job-name=urgent
#SPOLICY --class=production
echo "ran on $SLURM_JOB_NODELIST"
sleep 3
"""


def test_a_production_job_that_needs_a_preemption_wakes_the_daemon(setup) -> None:
    cluster, daemon, bell = setup
    wd = cluster.workdir()
    # Research jobs do not ring: the doorbell does not even exist yet.
    victims = [submit(cluster, train_script(wd, steps=40), "-p", "research", "-N1",
                      "--gres=gpu:8", "--requeue",
                      admin_comment=victim_comment(grace=30, klass="research"), workdir=wd)
               for _ in range(2)]
    for v in victims:
        cluster.wait_state(v, "RUNNING", timeout=60)
    assert not bell.exists()

    daemon.start()
    # The first cycle is over (its figures are in the journal): the next is 120 s away.
    wait_for(lambda: _cycles(daemon) >= 1, 60, "the daemon's first cycle")
    assert bell.is_file(), "the daemon makes the doorbell at start"
    time.sleep(1)
    cycles_before = _cycles(daemon)
    submitted_at = time.time()
    beneficiary = submit(cluster, PRODUCTION, "-p", "research", "-N1", "--gres=gpu:8",
                         workdir=wd)
    assert bell.read_text().split()[1] == "production"
    # The preemption starts within seconds: the doorbell woke the daemon.
    pre = wait_for(lambda: _preemptions(daemon), WITHIN,
                   f"a preemption within {WITHIN}s of the submission (daemon.interval is"
                   f" {INTERVAL}s: only the doorbell can wake it this soon)")
    # The journal row comes first, the audit line after the reservation calls
    # that follow it: wait for the line rather than read it at once.
    started = wait_for(lambda: [r for r in journal_of(daemon).read_audit(job_id=beneficiary)
                                if r.kind == "StartPreemption"], WITHIN,
                       "the StartPreemption audit line")
    assert started[0].at - submitted_at < WITHIN
    victim = wait_for(lambda: next((r.job_id for r in journal_of(daemon).read_audit()
                                    if r.kind == "SignalCheckpoint" and r.job_id in victims),
                                   None), WITHIN, "a victim signalled")
    assert time.time() - submitted_at < WITHIN + 5
    assert pre["beneficiary"] == beneficiary
    assert _cycles(daemon) <= cycles_before + 3  # woken, not spinning

    # The story ends as without the doorbell: the victim checkpoints, is requeued,
    # the production job runs, nothing is lost.
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    release_requeued(cluster, victim)
    cluster.wait_state(beneficiary, "COMPLETED", timeout=60)
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert restarts(cluster, victim) == 1
    other = next(v for v in victims if v != victim)
    assert records[other]["Restarts"] == "0"


def _cycles(daemon: DaemonRunner) -> int:
    try:
        return len(journal_of(daemon).metric_history("slurmpolicy_cycle_seconds"))
    except Exception:  # not written yet
        return 0


def _preemptions(daemon: DaemonRunner) -> dict[str, object] | None:
    try:
        rows = journal_of(daemon).preemptions()
    except Exception:
        return None
    return rows[0] if rows else None
