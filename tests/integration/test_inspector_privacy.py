"""The inspector as an ordinary user, on a real Slurm with ``PrivateData=jobs``:
it needs no root, shows only the jobs Slurm shows that user, and keeps the
daemon's journal from revealing the others.

A cluster of its own (2 nodes) is started for this, since PrivateData changes
what every other test would see. The project's Python lives under /root
(mode 0700 here), so the test user runs the system's python3 on this
checkout, with copies of the pure-Python and compiled dependencies the
inspector imports (the real commands, not stand-ins).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import slurmpolicy
from slurmpolicy.store import Journal

pytestmark = pytest.mark.slurm

REPO = Path(slurmpolicy.__file__).resolve().parent.parent
#: Top-level modules `why` and `top --once` import from site-packages.
DEPENDENCIES = ("click", "rich", "pygments", "markdown_it", "mdurl", "msgspec", "networkx",
                "sqlite_utils", "sqlite_fts4", "tabulate", "click_default_group", "dateutil",
                "six", "pluggy", "typing_extensions", "tenacity", "prometheus_client")


def user_python_path(shared: Path) -> str:
    """A PYTHONPATH the test user can read: the dependencies, and ``slurmpolicy``
    laid out as installed (topology/ and daemon/ inside it, as setup.cfg maps them)."""
    lib = shared / "inspector-pylib"
    if not lib.exists():
        lib.mkdir()
        for name in DEPENDENCIES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            source = Path(module.__file__ or "")
            if source.name == "__init__.py":
                shutil.copytree(source.parent, lib / name,
                                ignore=shutil.ignore_patterns("__pycache__", "tests"))
            else:
                shutil.copy2(source, lib / source.name)
        package = lib / "slurmpolicy"
        package.mkdir()
        for entry in (REPO / "slurmpolicy").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        (package / "topology").symlink_to(REPO / "topology")
        (package / "daemon").symlink_to(REPO / "daemon")
        for path in (lib, *lib.rglob("*")):
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
    return str(lib)


@pytest.fixture(scope="module")
def private_cluster(devcluster_factory: Any) -> Iterator[Any]:
    cluster = devcluster_factory(nodes=2, racks=1)
    conf = Path(cluster.slurm_conf)
    conf.write_text(conf.read_text() + "\nPrivateData=jobs\n")
    cluster.slurm_cmd("scontrol", "reconfigure")
    deadline = time.monotonic() + 30
    while "jobs" not in cluster.slurm_cmd("scontrol", "show", "config").stdout.split(
            "PrivateData", 1)[1].splitlines()[0]:
        assert time.monotonic() < deadline, "PrivateData=jobs did not take effect"
        time.sleep(0.2)
    yield cluster


def as_user(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """``slurmpolicy ARGS`` as the ordinary test user, with the system's python3."""
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    env = {"PYTHONPATH": user_python_path(Path(cluster.shared_dir)),
           "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(cluster.shared_dir), "COLUMNS": "120"}
    argv = cluster.as_user(["env", *(f"{k}={v}" for k, v in env.items()), python, "-m",
                            "slurmpolicy.cli", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          cwd=cluster.shared_dir, check=False)


def test_ordinary_user_sees_only_what_slurm_shows(private_cluster: Any) -> None:
    c = private_cluster
    assert os.geteuid() == 0, "the test submits a job as root to hide it from the test user"
    wd = c.workdir()
    mine = c.submit(c.hold_script(), extra_args=["--nodes=2", "--gres=gpu:8"], workdir=wd)
    c.wait_state(mine, "RUNNING")
    hidden = c.submit("#!/bin/bash\ntrue\n", user="root",
                      extra_args=["--hold", "--gres=gpu:1", "--job-name=hidden"], workdir=wd)
    # A journal everyone may read, with a decision about each job and a preemption
    # whose beneficiary is the hidden job.
    state = c.workdir("journal")
    journal = Journal(state)
    journal.audit("SetSiteFactor", "about my job", "ok", job_id=mine)
    journal.audit("SetSiteFactor", "about the hidden job", "ok", job_id=hidden)
    journal.audit("Requeue", "mine, for the hidden one", "ok", job_id=mine, jobs=(hidden,))
    journal.open_preemption("p-hidden", hidden, ["gpu01", "gpu02"], "spolicy_ph",
                            [(mine, 0, 16)], reason="hidden job starving")
    journal.close()
    # The journal is private by default (0700/0600); this site lets users read it.
    state.chmod(0o755)
    for path in state.iterdir():
        path.chmod(0o644)
    try:
        # Slurm itself hides the root job from the test user...
        squeue = c.slurm_cmd("squeue", "-h", "-o", "%i", user=None).stdout.split()
        assert str(hidden) in squeue
        assert str(hidden) not in c.slurm_cmd("squeue", "-h", "-o", "%i",
                                              user="spuser").stdout.split()

        # ...and so does the inspector, run without root.
        top = as_user(c, "top", "--once", "--journal", str(state))
        assert top.returncode == 0, top.stderr
        rows = [ln.split() for ln in top.stdout.splitlines()]
        assert [str(mine), "spuser"] in [r[:2] for r in rows], top.stdout
        assert not any(r[:1] == [str(hidden)] for r in rows), top.stdout
        assert "0 pending  1 running" in top.stdout
        assert "about my job" in top.stdout
        assert "about the hidden job" not in top.stdout
        assert "for the hidden one" not in top.stdout  # it names a job the user cannot see
        # The preemption for the hidden job shows, since its victim is the user's own
        # job, but not for whom: the beneficiary is hidden.
        assert "Preemptions in flight: 1" in top.stdout
        preemption = next(r for r in rows if r[:1] == ["hidden"])
        assert str(mine) in preemption and str(hidden) not in preemption

        why_hidden = as_user(c, "why", str(hidden), "--journal", str(state))
        assert why_hidden.returncode == 3, why_hidden.stdout + why_hidden.stderr
        assert "not in the queue Slurm shows you" in why_hidden.stderr

        why_mine = as_user(c, "why", str(mine), "--json", "--journal", str(state))
        assert why_mine.returncode == 0, why_mine.stderr
        data = json.loads(why_mine.stdout)
        assert data["job_id"] == mine and data["state"] == "RUNNING"
        assert data["policy_details_unavailable"] is None

        # A journal the user may not read: policy details unavailable, still an answer.
        (state / "journal.sqlite").chmod(0o600)
        why_locked = as_user(c, "why", str(mine), "--journal", str(state))
        assert why_locked.returncode == 0, why_locked.stderr
        assert "policy details unavailable" in why_locked.stdout
        assert f"Job {mine} (RUNNING)" in why_locked.stdout
    finally:
        c.release(mine, wd)
        c.slurm_cmd("scontrol", "release", str(hidden), check=False)
        for job in (mine, hidden):
            c.wait_state(job, "COMPLETED", timeout=90)


def test_audit_commands_show_only_what_slurm_shows(private_cluster: Any) -> None:
    """``log`` and ``report`` (issue 13, finding 6): the journal is private by default,
    and where a site lets users read it they see only the jobs squeue shows them."""
    c = private_cluster
    wd = c.workdir()
    mine = c.submit(c.hold_script(), extra_args=["--gres=gpu:1"], workdir=wd)
    c.wait_state(mine, "RUNNING")
    hidden = c.submit("#!/bin/bash\ntrue\n", user="root",
                      extra_args=["--hold", "--gres=gpu:1", "--job-name=hidden"], workdir=wd)
    state = c.workdir("audit") / "state"
    old = os.umask(0o022)  # what a daemon run by hand has
    try:
        journal = Journal(state)
    finally:
        os.umask(old)
    journal.audit("SetSiteFactor", "about my job", "ok", job_id=mine)
    journal.audit("SetSiteFactor", "about the hidden job", "ok", job_id=hidden)
    journal.audit("StartPreemption", "hidden job takes my nodes", "ok", job_id=hidden,
                  jobs=(mine,))
    journal.audit("SignalCheckpoint", f"checkpoint signal USR1 to victim {mine} for job"
                  f" {hidden} (spolicy_pre_{hidden})", "ok", job_id=mine)
    journal.open_preemption("p-hidden", hidden, ["gpu01"], "spolicy_ph", [(mine, 0, 1)],
                            reason="hidden job starving")
    journal.close()
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / "journal.sqlite").stat().st_mode) == 0o600
        # Private by default: one line saying so, no traceback.
        denied = as_user(c, "log", "--state-dir", str(state))
        assert denied.returncode == 7 and "Traceback" not in denied.stderr, denied.stderr
        assert "permission denied" in denied.stderr and "private" in denied.stderr
        assert len(denied.stderr.strip().splitlines()) == 1

        # A site that lets users read it: each sees what squeue shows them.
        for path in (state, *state.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        everything = subprocess.run(
            [sys.executable, "-m", "slurmpolicy.cli", "log", "--state-dir", str(state)],
            capture_output=True, text=True, check=True, env={**os.environ, **c.env()}).stdout
        assert "about the hidden job" in everything and "about my job" in everything
        log = as_user(c, "log", "--state-dir", str(state))
        assert log.returncode == 0, log.stderr
        assert "about my job" in log.stdout
        assert "hidden job" not in log.stdout and f"job {hidden} " not in log.stdout, log.stdout
        # The user's own two records; the signal's reason names the hidden beneficiary:
        # its id is hidden too.
        assert len(log.stdout.splitlines()) == 4, log.stdout
        assert f"victim {mine} for job (hidden) (spolicy_pre_(hidden))" in log.stdout
        assert f"_{hidden}" not in log.stdout
        other = as_user(c, "log", "--job", str(hidden), "--state-dir", str(state))
        assert other.returncode == 0 and f"no actions recorded for job {hidden}" in other.stdout
        report = as_user(c, "report", "--json", "--state-dir", str(state))
        assert report.returncode == 0, report.stderr
        data = json.loads(report.stdout)
        assert data["only_jobs_you_can_see"] is True
        assert data["actions"] == {"SetSiteFactor": 1, "SignalCheckpoint": 1}, data
        assert data["preemptions"] == 1  # its victim is the user's own job

        # A state directory the daemon's user cannot write: one line naming it.
        locked = c.workdir("locked")
        locked.chmod(0o755)
        run = as_user(c, "daemon", "run", "--once", "--no-metrics", "--state-dir",
                      str(locked / "state"))
        assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
        assert str(locked / "state") in run.stderr and "Permission denied" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    finally:
        c.release(mine, wd)
        c.slurm_cmd("scontrol", "release", str(hidden), check=False)
        for job in (mine, hidden):
            c.wait_state(job, "COMPLETED", timeout=90)
