"""The job side of the checkpoint handshake on a real Slurm, as the ordinary
test user: ``slurmpolicy ckpt ack`` from a shell job keeps the rest of the
comment; the Python helper (contrib/examples/train_pytorch.py, no torch)
saves on the signal, acknowledges and, not being preempted (no mark), keeps
running (it asks to requeue itself when preempted); acknowledging someone
else's job is refused by Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from slurmpolicy.jobpolicy import last_checkpoint

from .daemon_support import (
    REPO,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    job_side_cli,
    submit,
    wait_for,
)
from .slurmtools import LiveCluster, adapter_client

pytestmark = pytest.mark.slurm


def _comment(cluster: LiveCluster, job_id: int) -> str:
    job = adapter_client(cluster).job(job_id)  # finished jobs too
    assert job is not None
    return job.comment


def test_shell_ack_keeps_other_comment_text(cluster: LiveCluster) -> None:
    wd = cluster.workdir()
    script = cluster.hold_script(body="slurmpolicy ckpt ack > \"$PWD/ack.$SLURM_JOB_ID\"")
    job = submit(cluster, script, "--comment=owner-note epoch=3", workdir=wd)
    text = cluster.read_file(wd / f"ack.{job}", contains="ckpt:")
    stamp = int(text.strip().split(":")[1])
    comment = _comment(cluster, job)
    assert comment.startswith("owner-note epoch=3 ckpt:")
    assert last_checkpoint(comment) == stamp
    cluster.release(job, wd)
    cluster.wait_state(job, "COMPLETED")


def test_python_helper_saves_acks_and_keeps_running(cluster: LiveCluster) -> None:
    wd = cluster.workdir()
    python = "/usr/bin/python3"
    script = (f"#!/bin/bash\nexport PYTHONPATH={REPO} PYTHONDONTWRITEBYTECODE=1\n"
              f"exec {python} {REPO}/contrib/examples/train_pytorch.py --steps 12 "
              f"--step-seconds 0.5 --ckpt $PWD/model.$SLURM_JOB_ID\n")
    job = submit(cluster, script, workdir=wd)
    cluster.wait_state(job, "RUNNING")
    time.sleep(1.5)  # let Python install its handler (the script starts in ~0.1 s)
    cluster.slurm_cmd("scancel", "--signal=USR1", "--batch", str(job))
    wait_for(lambda: last_checkpoint(_comment(cluster, job)), 30, "the ack in the comment")
    assert (wd / f"model.{job}").exists()
    cluster.wait_state(job, "COMPLETED", timeout=60)
    out = cluster.read_file(wd / f"slurm-{job}.out", contains="finished at step 12")
    assert "checkpoint at step" in out.split("finished")[0]


INSTALLED = REPO / ".venv" / "bin"


def test_installed_command_runs_in_an_ordinary_users_job(cluster: LiveCluster) -> None:
    """The commands scripts/setup installed, run from an ordinary user's job as a
    new user would (no wrapper, nothing added to PATH but the .venv): their
    interpreter must be one every user may run, not a Python in root's home
    ("bad interpreter: Permission denied")."""
    wd = cluster.workdir()
    script = ("#!/bin/bash\n"
              f"{INSTALLED}/slurmpolicy ckpt ack > \"$PWD/ack.$SLURM_JOB_ID\" "
              "2> \"$PWD/err.$SLURM_JOB_ID\"\n"
              f"{INSTALLED}/slurmpolicy-ckpt ack >> \"$PWD/ack.$SLURM_JOB_ID\" "
              "2>> \"$PWD/err.$SLURM_JOB_ID\"\n")
    job = cluster.submit(script, workdir=wd)  # plain sbatch as the test user
    cluster.wait_state(job, "COMPLETED", timeout=60)
    err = cluster.read_file(wd / f"err.{job}")
    assert "bad interpreter" not in err and "Permission denied" not in err, err
    acks = cluster.read_file(wd / f"ack.{job}").split()
    assert len(acks) == 2 and all(a.startswith("ckpt:") for a in acks), (acks, err)
    assert last_checkpoint(_comment(cluster, job)) == int(acks[-1].split(":")[1])


def test_ack_of_another_users_job_is_refused(cluster: LiveCluster) -> None:
    wd = cluster.workdir()
    job = submit(cluster, cluster.hold_script(), workdir=wd)  # the test user's job
    cluster.wait_state(job, "RUNNING")
    bindir = job_side_cli(cluster)
    # As nobody: Slurm refuses to change the comment of a job that is not theirs.
    argv = cluster.as_user([str(bindir / "slurmpolicy"), "ckpt", "ack", "--job", str(job)],
                           user="nobody")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0
    assert "checkpoint not acknowledged" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert last_checkpoint(_comment(cluster, job)) is None
    cluster.release(job, wd)
    cluster.wait_state(job, "COMPLETED")


def test_ack_outside_a_job_says_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_JOB")}
    proc = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", "ckpt", "ack"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3
    assert "$SLURM_JOB_ID is not set" in proc.stderr

