"""Checkpoint-first preemption of jobs that speak their framework's own
protocol, on a real Slurm, driven by `slurmpolicy daemon run`; no
``#SPOLICY`` line (but the periodic one's interval) and no slurmpolicy call
inside any of them:

- a real submitit Checkpointable job (submitit's SlurmExecutor: its
  ``#SBATCH --signal=USR2@90``, USR2 to the srun step, pickles its state and
  runs ``scontrol requeue`` itself);
- a job doing what PyTorch Lightning's SLURM signal connector does
  (``#SBATCH --signal=SIGUSR1@90``: saves an HPC checkpoint, requeues itself);
- a NeMo-style job (``#SBATCH --signal=TERM@60``: saves on SIGTERM and exits;
  slurmpolicy requeues the finished batch job);
- a periodic checkpointer with no handler (``--checkpoint=periodic``: requeued
  without a signal).

Each test: a production job that is not preemptible holds one node, the
framework job runs on the other, a production job arrives. It asserts that
the framework job was requeued exactly once (Slurm's restart count), resumed
at its last checkpoint (no step lost beyond it, none skipped), finished with
the right result, and that the journal names the protocol it was recognised
by and how it answered.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from submitit.core.utils import pickle_load

from .daemon_support import (
    PRODUCTION,
    REPO,
    DaemonRunner,
    assert_no_job_lost,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    daemon_fixture,  # noqa: F401 - the `daemon` fixture
    journal_of,
    release_requeued,
    restarts,
    submit,
    submit_beneficiary,
    wait_for,
)
from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm

FRAMEWORKS = REPO / "contrib" / "examples" / "frameworks"
#: The ordinary user's Python: the system's (the project's may live in /root).
PYTHON = "/usr/bin/python3"
STEPS = 40
EXPECTED = STEPS * (STEPS + 1) // 2


def _job_pylib(cluster: LiveCluster) -> Path:
    """submitit and its two dependencies (pure Python), readable by the job user,
    as a site would install them for its users."""
    pylib = Path(cluster.shared_dir) / "fwlib"
    if not pylib.exists():
        pylib.mkdir()
        for name in ("submitit", "cloudpickle", "typing_extensions"):
            spec = importlib.util.find_spec(name)
            assert spec is not None and spec.origin, f"{name} is not installed (dev extra)"
            origin = Path(spec.origin)
            if origin.name == "__init__.py":
                shutil.copytree(origin.parent, pylib / name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(origin, pylib / origin.name)
        for path in (pylib, *pylib.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
    return pylib


def _hold_other_node(cluster: LiveCluster, wd: Path) -> int:
    """A production job (not preemptible) on one node: the victim must be the other."""
    job = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                 admin_comment=PRODUCTION, workdir=wd)
    cluster.wait_state(job, "RUNNING", timeout=60)
    return job


def _progress(root: Path) -> list[tuple[str, int, int]]:
    """(event, step, restart) from the job's progress log."""
    out = []
    for line in (root / "progress").read_text().splitlines():
        words = line.split()
        # "<event words> <step> restart <n>"
        out.append((" ".join(words[:-3]), int(words[-3]), int(words[-1])))
    return out


def _steps_seen(root: Path, at_least: int) -> bool:
    path = root / "progress"
    return path.exists() and sum(1 for e in _progress(root) if e[0] == "step") >= at_least


def _assert_resumed_at_last_checkpoint(root: Path) -> int:
    """No work lost beyond the last checkpoint, none skipped, the right result;
    returns the step it resumed at."""
    events = _progress(root)
    first = [e for e in events if e[2] == 0]
    second = [e for e in events if e[2] == 1]
    assert second, f"never ran again after its requeue: {events}"
    assert {e[2] for e in events} == {0, 1}, f"ran more than twice: {events}"
    checkpoints = [s for ev, s, _ in first if ev == "checkpoint at step"]
    assert checkpoints, f"no checkpoint before the preemption: {first}"
    resumed = [s for ev, s, _ in second if ev == "resumed at step"]
    assert resumed == [checkpoints[-1]], (resumed, checkpoints)
    steps_after = [s for ev, s, _ in second if ev == "step"]
    assert steps_after[0] == resumed[0] + 1 and steps_after == list(
        range(resumed[0] + 1, STEPS + 1)), steps_after
    assert ("finished at step", STEPS, 1) in second
    return resumed[0]


def _preempt(cluster: LiveCluster, daemon: DaemonRunner, wd: Path, victim: int,
             root: Path) -> int:
    """The production job arrives; the daemon preempts ``victim``; both finish."""
    wait_for(lambda: _steps_seen(root, 4), 60, "the victim's first steps")
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    daemon.start()
    wait_for(lambda: restarts(cluster, victim) >= 1, 120, f"victim {victim} requeued")
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    release_requeued(cluster, victim)
    cluster.wait_state(beneficiary, "COMPLETED", timeout=60)
    cluster.wait_state(victim, "COMPLETED", timeout=180)
    return beneficiary


def _victim_row(daemon: DaemonRunner, victim: int) -> dict[str, object]:
    journal = journal_of(daemon)
    rows = [v for p in journal.preemptions() for v in journal.victims_of(p["preemption_id"])
            if v["job_id"] == victim]
    assert len(rows) == 1, rows
    return rows[0]


def _our_requeues(daemon: DaemonRunner, victim: int) -> list[str]:
    """The `after` of each requeue slurmpolicy itself made of the victim."""
    return [r.detail.get("why", "") for r in journal_of(daemon).read_audit(job_id=victim)
            if r.kind == "Requeue" and r.outcome in ("ok", "reached")]


def _finish(cluster: LiveCluster, wd: Path, holder: int, victim: int,
            beneficiary: int) -> None:
    # The holder only kept the other node busy; it is let go (the cluster's
    # teardown ends it if it has not ended yet) and was never preempted.
    cluster.release(holder, wd)
    records = assert_no_job_lost(cluster, [holder, victim, beneficiary])
    assert records[victim]["Restarts"] == "1"  # exactly one requeue
    assert records[holder]["Restarts"] == "0"


@pytest.mark.parametrize("epilog", [0, 3], ids=["no-epilog", "3s-epilog"])
def test_submitit_checkpointable_requeues_itself(cluster: LiveCluster,
                                                 daemon: DaemonRunner, epilog: int) -> None:
    # Behind an epilog the job that requeued itself shows COMPLETING, its
    # restart count already raised: a requeue (its ack), not an end.
    if epilog:
        cluster.set_epilog(epilog)
    wd = cluster.workdir()
    holder = _hold_other_node(cluster, wd)
    pylib = _job_pylib(cluster)
    folder = wd / "submitit"
    # Submitted as the ordinary user with submitit's own executor, unchanged.
    argv = cluster.as_user(["env", f"PYTHONPATH={pylib}", "PYTHONDONTWRITEBYTECODE=1",
                            PYTHON, str(FRAMEWORKS / "submitit_job.py"), "submit",
                            "--folder", str(folder), "--steps", str(STEPS),
                            "--partition", "research", "--gres", "gpu:8",
                            "--python", PYTHON])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=wd,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    victim = int(proc.stdout.strip().splitlines()[-1])
    script = cluster.slurm_cmd("scontrol", "write", "batch_script", str(victim), "-").stdout
    assert "#SBATCH --signal=USR2@90" in script and "#SPOLICY" not in script
    cluster.wait_state(victim, "RUNNING", timeout=60)
    beneficiary = _preempt(cluster, daemon, wd, victim, folder)

    # submitit pickled the Trainer at the signal: it resumes exactly there.
    events = _progress(folder)
    first = [s for ev, s, r in events if ev == "step" and r == 0]
    resumed = [s for ev, s, r in events if ev == "resumed at step"]
    assert resumed == [first[-1]], (resumed, first[-1])
    again = [s for ev, s, r in events if ev == "step" and r == 1]
    assert again == list(range(first[-1] + 1, STEPS + 1))
    result = pickle_load(folder / f"{victim}_0_result.pkl")
    assert result == ("success", EXPECTED)

    row = _victim_row(daemon, victim)
    assert row["protocol"] == "slurm-signal" and row["ack_how"] == "self-requeue"
    assert _our_requeues(daemon, victim) == []  # it requeued itself; not a second time
    signals = [r for r in journal_of(daemon).read_audit(job_id=victim)
               if r.kind == "SignalCheckpoint"]
    assert [s.detail.get("target") for s in signals] == ["steps"]
    log = daemon.cli("log", "--job", str(victim)).stdout
    assert "--signal=USR2@90 in its batch script" in log
    _finish(cluster, wd, holder, victim, beneficiary)


LIGHTNING = f"""#!/bin/bash
#SBATCH --signal=SIGUSR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
srun {PYTHON} {FRAMEWORKS}/lightning_like.py --root "$PWD" --steps {STEPS}
"""


@pytest.mark.parametrize("epilog", [0, 3], ids=["no-epilog", "3s-epilog"])
def test_lightning_style_job_saves_and_requeues_itself(cluster: LiveCluster,
                                                       daemon: DaemonRunner, epilog: int) -> None:
    # Behind an epilog the job that requeued itself shows COMPLETING, its
    # restart count already raised: a requeue (its ack), not an end.
    if epilog:
        cluster.set_epilog(epilog)
    wd = cluster.workdir()
    holder = _hold_other_node(cluster, wd)
    victim = submit(cluster, LIGHTNING, "-p", "research", "-N1", "--gres=gpu:8", workdir=wd)
    cluster.wait_state(victim, "RUNNING", timeout=60)
    # `why` names the protocol it is recognised by, before anything happens.
    why = json.loads(daemon.cli("why", str(victim), "--json").stdout)
    assert any("protocol slurm-signal: recognised by --signal=SIGUSR1@90 in its batch "
               "script, with --requeue; signal USR1 to its job steps, grace 90s" in n
               for n in why["notes"]), why["notes"]
    beneficiary = _preempt(cluster, daemon, wd, victim, wd)
    _assert_resumed_at_last_checkpoint(wd)
    assert (wd / "result").read_text().strip() == str(EXPECTED)
    assert (wd / "hpc_ckpt_1.ckpt").exists() and not (wd / "hpc_ckpt_2.ckpt").exists()
    row = _victim_row(daemon, victim)
    assert row["protocol"] == "slurm-signal" and row["ack_how"] == "self-requeue"
    assert _our_requeues(daemon, victim) == []
    why = daemon.cli("log", "--job", str(victim)).stdout
    assert "--signal=SIGUSR1@90 in its batch script" in why
    report = json.loads(daemon.cli("report", "--json").stdout)["checkpoints_by_protocol"]
    assert report["slurm-signal"]["by"] == {"self-requeue": 1}
    _finish(cluster, wd, holder, victim, beneficiary)


NEMO = f"""#!/bin/bash
#SBATCH --signal=TERM@60
#SBATCH --requeue
#SBATCH --open-mode=append
srun {PYTHON} {FRAMEWORKS}/nemo_like.py --root "$PWD" --steps {STEPS}
"""


@pytest.mark.parametrize("epilog", [0, 4], ids=["no-epilog", "4s-epilog"])
def test_nemo_style_job_saves_and_exits_and_is_requeued_once(cluster: LiveCluster,
                                                              daemon: DaemonRunner,
                                                              epilog: int) -> None:
    # Behind an epilog (most sites run one) the job that exited stays
    # COMPLETING for its length; Slurm raises its restart count at our requeue
    # but resets its submit time only once it has completed: the same job.
    if epilog:
        cluster.set_epilog(epilog)
    wd = cluster.workdir()
    holder = _hold_other_node(cluster, wd)
    victim = submit(cluster, NEMO, "-p", "research", "-N1", "--gres=gpu:8", workdir=wd)
    cluster.wait_state(victim, "RUNNING", timeout=60)
    beneficiary = _preempt(cluster, daemon, wd, victim, wd)
    _assert_resumed_at_last_checkpoint(wd)
    assert (wd / "result").read_text().strip() == str(EXPECTED)
    row = _victim_row(daemon, victim)
    assert row["protocol"] == "slurm-signal" and row["ack_how"] == "exit"
    assert row["acked_at"] is not None and row["state"] == "requeued"
    # slurmpolicy requeued the finished batch job, once.
    assert _our_requeues(daemon, victim) == ["exited"]
    report = json.loads(daemon.cli("report", "--json").stdout)["checkpoints_by_protocol"]
    assert report["slurm-signal"]["by"] == {"exit": 1}
    assert report["slurm-signal"]["success_rate"] == 1.0
    _finish(cluster, wd, holder, victim, beneficiary)


PERIODIC = f"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
srun {PYTHON} {FRAMEWORKS}/periodic.py --root "$PWD" --steps {STEPS} --every 4
"""


def test_periodic_checkpointer_is_requeued_without_a_signal(cluster: LiveCluster,
                                                            daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    holder = _hold_other_node(cluster, wd)
    # What job_submit.lua writes for `#SPOLICY --checkpoint=periodic,interval=...`.
    victim = submit(cluster, PERIODIC, "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment="spolicy:v1 ckpt=periodic,interval=2", workdir=wd)
    cluster.wait_state(victim, "RUNNING", timeout=60)
    beneficiary = _preempt(cluster, daemon, wd, victim, wd)
    resumed = _assert_resumed_at_last_checkpoint(wd)
    assert resumed % 4 == 0
    assert (wd / "result").read_text().strip() == str(EXPECTED)
    row = _victim_row(daemon, victim)
    assert row["protocol"] == "periodic" and row["signalled_at"] is None
    assert _our_requeues(daemon, victim) == ["periodic"]
    assert "SignalCheckpoint" not in [r.kind for r in journal_of(daemon).read_audit(
        job_id=victim)]
    _finish(cluster, wd, holder, victim, beneficiary)
