"""An elastic job on a real Slurm, driven by `slurmpolicy daemon run`: submitted
from an ordinary sbatch script with ``--nodes=1-3`` and a checkpoint signal, it
starts on the 2 nodes that are free, and is shrunk instead of evicted when a
production job needs one of them: it checkpoints, is requeued at 1 node,
restarts beside the production job and resumes from its checkpoint. Its own
cluster (3 nodes x 2 GPUs) with the rendered job_submit.lua; jobs end by
themselves, never by scancel.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpolicy.hostlist import expand
from slurmpolicy.plugin import render
from slurmpolicy.settings import Plugin, Settings

from .daemon_support import (
    TRAIN_SH,
    DaemonRunner,
    after_header,
    assert_no_job_lost,
    journal_of,
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
    # The doorbell beside it: not the host's /run/slurmpolicy/doorbell.
    lua.write_text(render(Settings(plugin=Plugin(doorbell=str(lua.parent / "doorbell")))))
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
            .replace("#SPOLICY --class=research", "#SPOLICY --class=experimental"))
    text = re.sub(r"grace=[0-9a-z]+", "grace=30s", text)
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
    # A production job (never a victim) holds one node: the elastic job starts
    # with the two that are free rather than waiting for its maximum of three.
    holder = submit(cluster, "#!/bin/bash\n#SPOLICY --class=production\n"
                    + cluster.hold_script().split("\n", 1)[1], "-p", "research", "-N1",
                    "--gres=gpu:2", workdir=wd)
    held = cluster.wait_state(holder, "RUNNING", timeout=60)
    job = submit(cluster, elastic_script(wd, steps=40), "-p", "research", workdir=wd)
    info = cluster.wait_state(job, "RUNNING", timeout=60)
    assert len(expand(info["NodeList"])) == 2 and held["NodeList"] not in info["NodeList"]
    comment = cluster.slurm_cmd("scontrol", "show", "job", str(job)).stdout
    assert "nodes=1-3" in comment and "ckpt=signal:USR1,grace=30" in comment
    cluster.read_file(wd / f"slurm-{job}.out", contains="started")
    urgent = submit(cluster, PRODUCTION, "-p", "research", "-N1", "--gres=gpu:2", workdir=wd)
    daemon.start()
    try:
        ran = cluster.wait_state(urgent, ("RUNNING", "COMPLETED"), timeout=90)
        # No help from the test: Slurm holds a requeued job ~2 minutes (BeginTime);
        # the daemon's shrink (NumNodes=1-1 once the old run has completed) lets
        # it restart at once.
        try:
            again = wait_for(lambda: (lambda r: r if r.get("JobState") == "RUNNING"
                                      and r.get("Restarts") == "1" else None)(
                cluster.scontrol_show_job(job)), 90, "the elastic job running again")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {cluster.scontrol_show_job(job)}; daemon log:\n"
                                 f"{daemon.logs()[-12000:]}") from None
        hosts = expand(again["NodeList"])
        # Shrunk within its range (1 of its 2 nodes left), not evicted: it runs
        # again at once, smaller, beside the production jobs.
        assert len(hosts) == 1, again
        assert ran["NodeList"] not in hosts and held["NodeList"] not in hosts
        out = cluster.read_file(wd / f"slurm-{job}.out", contains="resumed")
        saved = int(out.split("checkpoint at step ")[1].split(";")[0])
        assert f"resumed {job} at step {saved} (restart 1)" in out
    finally:
        daemon.stop()
        cluster.release(holder, wd)
    journal = journal_of(daemon)
    audit = journal.read_audit(job_id=job)
    requeue = next(r for r in audit if r.kind == "Requeue")
    assert "shrink victim" in requeue.reason and "from 2 to 1 node(s) (its range 1-3)" \
        in requeue.reason
    shrink = next(r for r in audit if r.kind == "ShrinkElastic")
    assert shrink.outcome == "ok", shrink
    cluster.wait_state(job, "COMPLETED", timeout=120)
    cluster.wait_state(urgent, "COMPLETED", timeout=60)
    records = assert_no_job_lost(cluster, [job, urgent, holder])
    assert records[job]["Restarts"] == "1" and restarts(cluster, urgent) == 0
    log = daemon.cli("log", "--job", str(job)).stdout
    assert "ShrinkElastic" in log
