"""Helpers for the daemon's integration tests on a real dev cluster.

- ``job_side_cli(cluster)``: a ``slurmpolicy`` command that the ordinary test
  user can run inside jobs. The project's Python lives under /root (mode
  0700 here), so the wrapper runs the system's python3 on this checkout with
  a copy of click (pure Python) in the cluster's shared directory: it is the
  real ``slurmpolicy ckpt ack`` command, not a stand-in.
- ``DaemonRunner``: starts ``slurmpolicy daemon run`` as a subprocess (we
  started it, so we may SIGKILL it by its pid), or runs single cycles.
- ``stop_slurmctld`` / ``start_slurmctld``: stop and restart the cluster's
  controller by its pid file (state is kept in StateSaveLocation).
- ``assert_no_job_lost``: every submitted job is still pending, running or
  completed, per Slurm.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import slurmpolicy

from .slurmtools import TEST_ADAPTER, LiveCluster, job_user

REPO = Path(slurmpolicy.__file__).resolve().parent.parent
ALIVE = {"PENDING", "RUNNING", "COMPLETED", "COMPLETING", "REQUEUED", "CONFIGURING"}


_JOB_SIDE_OK: set[str] = set()


def job_side_cli(cluster: Any) -> Path:
    """The directory of the ``slurmpolicy`` that scripts/setup installed (this
    .venv's bin/), which the ordinary test user's jobs run as it is: setup builds
    the .venv on a Python every user may run. Checked once, as that user."""
    bindir = Path(sys.prefix) / "bin"
    if str(bindir) not in _JOB_SIDE_OK:
        argv = cluster.as_user([str(bindir / "slurmpolicy"), "ckpt", "--help"])
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            raise AssertionError(
                f"the test user cannot run {bindir / 'slurmpolicy'} (rerun scripts/setup, "
                f"which builds .venv on a Python every user may run): {proc.stderr.strip()}")
        _JOB_SIDE_OK.add(str(bindir))
    return bindir


def job_env(cluster: Any) -> dict[str, str]:
    """Environment for sbatch so that jobs find Slurm and the job-side slurmpolicy."""
    env = dict(cluster.env())
    env["PATH"] = f"{job_side_cli(cluster)}:{env['PATH']}"
    return env


def submit(cluster: Any, script: str, *args: str, admin_comment: str = "",
           workdir: Path | None = None) -> int:
    """sbatch as the test user (environment with the job-side CLI); then, as the
    admin, set the admin_comment the job_submit plugin would have written."""
    bindir = job_side_cli(cluster)
    full = after_header(script, f"export PATH={bindir}:$PATH")
    job_id = int(cluster.submit(full, extra_args=list(args), workdir=workdir))
    if admin_comment:
        cluster.slurm_cmd("scontrol", "update", f"jobid={job_id}", f"admincomment={admin_comment}")
    return job_id


def after_header(script: str, line: str) -> str:
    """``script`` with ``line`` after its header (shebang, #SBATCH/#SPOLICY lines):
    sbatch stops reading directives at the first command."""
    lines = script.splitlines(keepends=True)
    at = 0
    while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
        at += 1
    return "".join([*lines[:at], line + "\n", *lines[at:]])


def write_settings(path: Path, state_dir: Path, **sections: Mapping[str, Any]) -> Path:
    """A settings file for a test daemon: fast cycles, short grace, no metrics port."""
    base: dict[str, dict[str, Any]] = {
        "daemon": {"state_dir": str(state_dir), "interval": 1, "max_snapshot_age": 30,
                   "max_backoff": 4},
        "metrics": {"enabled": False},
        "preemption": {"min_runtime": 0, "default_grace": 20},
        "slurm": {"adapter": TEST_ADAPTER},
        # Beside the state directory, not the system's /run/slurmpolicy.
        "plugin": {"doorbell": str(state_dir.parent / "doorbell")},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    lines = []
    for name, values in base.items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, str):
                text = f'"{value}"'
            elif isinstance(value, (list, tuple)):
                text = "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v)
                                       for v in value) + "]"
            else:
                text = str(value)
            lines.append(f"{key} = {text}")
    path.write_text("\n".join(lines) + "\n")
    return path


class DaemonRunner:
    """``slurmpolicy daemon run`` against a cluster, as a child process."""

    def __init__(self, cluster: Any, settings: Path, log: Path) -> None:
        self.cluster = cluster
        self.settings = settings
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def _argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "slurmpolicy.cli", "--config", str(self.settings), *args]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        env.update(self.cluster.env())
        return env

    def cli(self, *args: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self._argv(*args), capture_output=True, text=True,
                              env=self.env(), timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"slurmpolicy {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stderr}{proc.stdout}")
        return proc

    def once(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.cli("daemon", "run", "--once", "--no-metrics", *extra)

    def start(self, *extra: str, env: Mapping[str, str] | None = None,
              metrics: bool = False) -> subprocess.Popen[bytes]:
        assert self.proc is None or self.proc.poll() is not None
        out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        flags = () if metrics else ("--no-metrics",)
        self.proc = subprocess.Popen(self._argv("daemon", "run", *flags, "-v", *extra),
                                     stdout=out, stderr=out, env={**self.env(), **(env or {})})
        out.close()
        return self.proc

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill(signal.SIGTERM)
        self.proc = None

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def ctld_pid(cluster: Any) -> int | None:
    try:
        return int(Path(cluster.ctld_pid_file).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_slurmctld(cluster: Any, timeout: float = 30) -> None:
    """SIGTERM the cluster's slurmctld (our child's pid, from its pid file); wait."""
    pid = ctld_pid(cluster)
    assert pid is not None, "slurmctld pid file missing"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError(f"slurmctld {pid} still alive {timeout}s after SIGTERM")


def start_slurmctld(cluster: Any, timeout: float = 60) -> None:
    """Start slurmctld again on the same state (it recovers its jobs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(cluster.env())
    env["SLURMPOLICY_DEVCLUSTER"] = str(cluster.state_dir)
    subprocess.run([str(cluster.slurm.sbin / "slurmctld"), "-f", str(cluster.slurm_conf)],
                   env=env, check=True, timeout=timeout, stdin=subprocess.DEVNULL,
                   capture_output=True, start_new_session=True, cwd=cluster.state_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ping = cluster.slurm_cmd("scontrol", "ping", check=False)
        if "UP" in ping.stdout:
            return
        time.sleep(0.3)
    raise AssertionError("slurmctld did not come back")


def job_record(cluster: Any, job_id: int) -> dict[str, str]:
    return dict(cluster.scontrol_show_job(job_id))


def assert_no_job_lost(cluster: Any, job_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """Every job is known to Slurm and pending, running or completed."""
    records = {}
    for job_id in job_ids:
        info = job_record(cluster, job_id)
        assert info, f"job {job_id} is unknown to Slurm (lost)"
        assert info.get("JobState") in ALIVE, f"job {job_id} is {info.get('JobState')}: {info}"
        records[job_id] = info
    return records


def restarts(cluster: Any, job_id: int) -> int:
    return int(job_record(cluster, job_id).get("Restarts", "0"))


def wait_for(probe: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------- fixtures
#: A victim: the example training script, short, with a checkpoint dir.
TRAIN_SH = (REPO / "contrib" / "examples" / "train.sh").read_text()


def victim_comment(grace: int = 30, klass: str = "experimental") -> str:
    return f"spolicy:v1 class={klass} ckpt=signal:USR1,grace={grace}"


PRODUCTION = "spolicy:v1 class=production"


def train_script(workdir: Path, steps: int, step_seconds: float = 1.0,
                 requeue_on_ack: bool = False) -> str:
    """contrib/examples/train.sh; by default acknowledging only (the daemon's
    requeue, what most tests follow), with ``requeue_on_ack`` as shipped."""
    return after_header(TRAIN_SH,
                        f"export CKPT_DIR={workdir} STEPS={steps} STEP_SECONDS={step_seconds}"
                        f" REQUEUE_ON_ACK={int(requeue_on_ack)}")


@pytest.fixture(name="cluster")
def cluster_fixture() -> Iterator[LiveCluster]:
    """A small cluster of its own per test (2 nodes x 8 GPUs): the daemon acts on
    every job it sees, so it must not share a cluster with other tests."""
    job_user()
    state = Path(tempfile.mkdtemp(prefix="spdd-", dir="/tmp"))
    os.chmod(state, 0o755)
    c = LiveCluster(state, nodes=2, gpus_per_node=8, racks=1)
    c.up()
    try:
        yield c
    finally:
        _print_daemon_record(state)
        c.down()
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(state, ignore_errors=True)


def _print_daemon_record(state: Path) -> None:
    """Print the end of the daemon's log and its audit: pytest shows a test's
    teardown output only when the test failed, so a flaky failure in CI leaves
    the daemon's side of the story in the report (the state dir is removed)."""
    log = state / "sp" / "daemon.log"
    if log.exists():
        print("--- daemon.log (last 200 lines) ---")
        print("\n".join(log.read_text(errors="replace").splitlines()[-200:]))
    if (state / "sp" / "state").exists():
        from slurmpolicy.store import Journal
        print("--- audit (last 100 records) ---")
        with contextlib.suppress(Exception):
            for r in Journal(state / "sp" / "state", read_only=True).read_audit(limit=100):
                print(f"{r.at:.1f} {r.kind} {r.outcome!r} jobs={r.jobs} {r.reason}")


@pytest.fixture(name="daemon")
def daemon_fixture(cluster: LiveCluster) -> Iterator[DaemonRunner]:
    """A daemon runner for the cluster (settings in <state>/sp), stopped at the end."""
    home = Path(cluster.state_dir) / "sp"
    home.mkdir(exist_ok=True)
    settings = write_settings(home / "slurmpolicy.toml", home / "state")
    runner = DaemonRunner(cluster, settings, home / "daemon.log")
    try:
        yield runner
    finally:
        runner.stop()


def journal_of(runner: DaemonRunner) -> Any:
    from slurmpolicy.store import Journal

    return Journal(runner.settings.parent / "state", read_only=True)


def fill_with_victims(cluster: LiveCluster, workdir: Path, *, steps: int = 40,
                      grace: int = 30, script: str | None = None) -> list[int]:
    """Two experimental 8-GPU jobs filling both nodes; returns their ids once running."""
    text = script if script is not None else train_script(workdir, steps)
    ids = [submit(cluster, text, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                  admin_comment=victim_comment(grace), workdir=workdir) for _ in range(2)]
    for job_id in ids:
        cluster.wait_state(job_id, "RUNNING", timeout=60)
    return ids


def submit_beneficiary(cluster: LiveCluster, workdir: Path, seconds: int = 5) -> int:
    return submit(cluster, f"#!/bin/bash\necho \"ran on $SLURM_JOB_NODELIST\"\nsleep {seconds}\n",
                  "-p", "research", "-N1", "--gres=gpu:8", admin_comment=PRODUCTION,
                  workdir=workdir)


def release_requeued(cluster: LiveCluster, job_id: int) -> None:
    """Slurm holds a requeued batch job back ~2 minutes (its BeginTime); tests
    make it eligible at once, as an admin could, to keep them short."""
    wait_for(lambda: restarts(cluster, job_id) >= 1, 60, f"job {job_id} requeued")
    cluster.slurm_cmd("scontrol", "update", f"jobid={job_id}", "starttime=now", check=False)
