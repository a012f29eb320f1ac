"""An elastic job on a real Slurm, driven by `slurmpolicy daemon run`: submitted
from an ordinary sbatch script with ``--nodes=1-3`` and a checkpoint signal, it
is shrunk instead of evicted when a production job needs one of its nodes: it
checkpoints, is requeued at 1-2 nodes, restarts beside the production job and
resumes from its checkpoint. Its own cluster (3 nodes x 2 GPUs) with the
rendered job_submit.lua; jobs end by themselves, never by scancel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpolicy.hostlist import expand
from slurmpolicy.plugin import render
from slurmpolicy.settings import Settings

from .daemon_support import (
    TRAIN_SH,
    DaemonRunner,
    after_header,
    assert_no_job_lost,
    journal_of,
    release_requeued,
    restarts,
    submit,
    wait_for,
    write_settings,
)
from .slurmtools import LiveCluster, job_user

pytestmark = pytest.mark.slurm


@pytest.fixture(name="cluster")
def cluster_fixture() -> Iterator[LiveCluster]:
    job_user()
    state = Path(tempfile.mkdtemp(prefix="spde-", dir="/tmp"))
    os.chmod(state, 0o755)
    lua = Path(tempfile.mkdtemp(prefix="spde-lua-")) / "job_submit.lua"
    lua.write_text(render(Settings()))
    c = LiveCluster(state, nodes=3, gpus_per_node=2, racks=1, job_submit_lua=lua,
                    slurm_prefix=os.environ.get("SLURMPOLICY_TEST_SLURM_PREFIX") or None)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(lua.parent, ignore_errors=True)
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(state, ignore_errors=True)


def elastic_script(workdir: Path, steps: int) -> str:
    text = (TRAIN_SH.replace("#SBATCH --requeue\n",
                             "#SBATCH --requeue\n#SBATCH --nodes=1-3\n#SBATCH --gres=gpu:2\n")
            .replace("#SPOLICY --class=research", "#SPOLICY --class=experimental")
            .replace("grace=60", "grace=30s"))
    return after_header(text, f"export CKPT_DIR={workdir} STEPS={steps} STEP_SECONDS=1")


PRODUCTION = """#!/bin/bash
#SPOLICY --class=production
echo "ran on $SLURM_JOB_NODELIST"
sleep 3
"""


def test_an_elastic_job_is_shrunk_instead_of_evicted(cluster: LiveCluster,
                                                    tmp_path: Path) -> None:
    wd = cluster.workdir()
    settings = write_settings(tmp_path / "slurmpolicy.toml", tmp_path / "state")
    daemon = DaemonRunner(cluster, settings, tmp_path / "daemon.log")
    job = submit(cluster, elastic_script(wd, steps=40), "-p", "research", workdir=wd)
    info = cluster.wait_state(job, "RUNNING", timeout=60)
    # Started with all that was free, within its range; the plugin kept the range.
    assert len(expand(info["NodeList"])) == 3
    comment = cluster.slurm_cmd("scontrol", "show", "job", str(job)).stdout
    assert "nodes=1-3" in comment and "ckpt=signal:USR1,grace=30" in comment
    cluster.read_file(wd / f"slurm-{job}.out", contains="started")
    urgent = submit(cluster, PRODUCTION, "-p", "research", "-N1", "--gres=gpu:2", workdir=wd)
    daemon.start()
    try:
        ran = cluster.wait_state(urgent, ("RUNNING", "COMPLETED"), timeout=90)
        release_requeued(cluster, job)
        again = wait_for(lambda: (lambda r: r if r.get("JobState") == "RUNNING"
                                  and r.get("Restarts") == "1" else None)(
            cluster.scontrol_show_job(job)), 90, "the elastic job running again")
        hosts = expand(again["NodeList"])
        # Shrunk within its range, not evicted: it runs again at once, smaller,
        # beside the production job (which got the node taken from it).
        assert 1 <= len(hosts) <= 2, again
        assert ran["NodeList"] not in hosts
        out = cluster.read_file(wd / f"slurm-{job}.out", contains="resumed")
        saved = int(out.split("checkpoint at step ")[1].split(";")[0])
        assert f"resumed {job} at step {saved} (restart 1)" in out
    finally:
        daemon.stop()
    journal = journal_of(daemon)
    audit = journal.read_audit(job_id=job)
    requeue = next(r for r in audit if r.kind == "Requeue")
    assert "shrink victim" in requeue.reason and "(its range 1-3)" in requeue.reason
    shrink = next(r for r in audit if r.kind == "ShrinkElastic")
    assert shrink.outcome == "ok", shrink
    cluster.wait_state(job, "COMPLETED", timeout=120)
    cluster.wait_state(urgent, "COMPLETED", timeout=60)
    records = assert_no_job_lost(cluster, [job, urgent])
    assert records[job]["Restarts"] == "1" and restarts(cluster, urgent) == 0
    log = daemon.cli("log", "--job", str(job)).stdout
    assert "ShrinkElastic" in log
