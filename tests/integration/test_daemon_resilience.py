"""The daemon under trouble, on a real Slurm: killed by SIGKILL at the worst
moments, slurmctld restarted or away, a second instance, a bad settings
file, dry-run, and SIGTERM under a systemd-like notify socket.

Every test ends by asking Slurm that no job was lost.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from pathlib import Path

import pytest

from .daemon_support import (
    DaemonRunner,
    assert_no_job_lost,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    daemon_fixture,  # noqa: F401 - the `daemon` fixture
    fill_with_victims,
    journal_of,
    restarts,
    start_slurmctld,
    stop_slurmctld,
    submit,
    submit_beneficiary,
    victim_comment,
    wait_for,
)
from .slurmtools import LiveCluster, adapter_client

pytestmark = pytest.mark.slurm

IGNORING = """#!/bin/bash
trap 'echo USR1 >> "$PWD/trap.$SLURM_JOB_ID"' USR1
for i in $(seq 1 900); do sleep 0.2; done
"""


def _victim_of(runner: DaemonRunner, timeout: float = 60) -> int:
    def probe() -> int | None:
        try:
            journal = journal_of(runner)
            rows = journal.preemptions()
            return journal.victims_of(rows[0]["preemption_id"])[0]["job_id"] if rows else None
        except Exception:
            return None

    return wait_for(probe, timeout, "a victim in the journal")


def _key(runner: DaemonRunner, kind: str, victim: int, restart_count: int) -> str:
    """A victim's step key: it names its preemption (none is reused after an abort)."""
    pid = journal_of(runner).preemptions()[0]["preemption_id"]
    return f"{kind}:{pid}:{victim}:{restart_count}"


def _stays(probe: object, seconds: float) -> None:
    """``probe()`` holds for ``seconds`` (polled): for "nothing more happens"."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert probe(), "condition stopped holding"  # type: ignore[operator]
        time.sleep(0.5)


def test_sigkill_right_after_signalling_then_restart(cluster: LiveCluster,
                                                     daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=600)
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    daemon.start(env={"SLURMPOLICY_FAULT": "kill-after:signal"})
    assert daemon.proc is not None
    assert daemon.proc.wait(90) == -signal.SIGKILL
    victim = _victim_of(daemon)
    journal = journal_of(daemon)
    assert [s["status"] for s in journal.steps(key=_key(daemon, "signal", victim, 0))] == \
        ["started"]
    # The signal did reach the job: it checkpoints and acknowledges.
    cluster.read_file(wd / f"slurm-{victim}.out", contains="acknowledging")

    daemon.start()
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    wait_for(lambda: restarts(cluster, victim) == 1, 30, "the victim requeued")
    _stays(lambda: restarts(cluster, victim) == 1, 5)
    out = (wd / f"slurm-{victim}.out").read_text()
    assert out.count("acknowledging") == 1  # one signal for (job, restart 0)
    journal = journal_of(daemon)
    assert journal.steps(key=_key(daemon, "signal", victim, 0))[0]["status"] == "unknown"
    assert len(journal.steps(key=_key(daemon, "signal", victim, 0))) == 1
    assert any(r.kind == "Reconcile" for r in journal.read_audit(job_id=victim))
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1"


def test_sigkill_right_after_requeueing_then_restart(cluster: LiveCluster,
                                                     daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=600)
    beneficiary = submit_beneficiary(cluster, wd, seconds=30)
    daemon.start(env={"SLURMPOLICY_FAULT": "kill-after:requeue"})
    assert daemon.proc is not None
    assert daemon.proc.wait(120) == -signal.SIGKILL
    victim = _victim_of(daemon)
    assert restarts(cluster, victim) == 1
    requeue_key = _key(daemon, "requeue", victim, 0)
    assert [s["status"] for s in journal_of(daemon).steps(key=requeue_key)] == ["started"]

    daemon.start()
    cluster.wait_state(beneficiary, "RUNNING", timeout=90)
    wait_for(lambda: journal_of(daemon).steps(key=requeue_key)[0]["status"]
             == "reached", 30, "the requeue reconciled")
    _stays(lambda: restarts(cluster, victim) == 1, 6)  # exactly one requeue
    journal = journal_of(daemon)
    assert len(journal.steps(key=_key(daemon, "requeue", victim, 0))) == 1
    assert not journal.steps(key=_key(daemon, "requeue", victim, 1))
    row = journal.victims_of(journal.preemptions()[0]["preemption_id"])[0]
    assert row["state"] == "requeued"
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1"


def test_slurmctld_restarted_during_the_grace_period(cluster: LiveCluster,
                                                     daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = [submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                      admin_comment=victim_comment(grace=12), workdir=wd) for _ in range(2)]
    for v in victims:
        cluster.wait_state(v, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    daemon.start()
    victim = _victim_of(daemon)
    cluster.read_file(wd / f"trap.{victim}", contains="USR1", timeout=60)
    stop_slurmctld(cluster)
    wait_for(lambda: "Slurm does not answer" in daemon.logs(), 30, "the daemon noticing")
    time.sleep(3)  # the controller stays away for a few cycles
    start_slurmctld(cluster)
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=120)
    wait_for(lambda: restarts(cluster, victim) == 1, 30, "the victim requeued")
    _stays(lambda: restarts(cluster, victim) == 1, 4)
    assert (wd / f"trap.{victim}").read_text().count("USR1") == 1
    row = journal_of(daemon).victims_of(journal_of(daemon).preemptions()[0]["preemption_id"])[0]
    assert row["requeued_at"] >= row["deadline"] - 1
    assert daemon.proc is not None and daemon.proc.poll() is None  # it kept running
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1"


def test_slurmctld_down_for_a_while(cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=600)
    daemon.start()
    wait_for(lambda: "cycle" in daemon.logs() or "fabric" in daemon.logs(), 30, "a first cycle")
    stop_slurmctld(cluster)
    wait_for(lambda: daemon.logs().count("Slurm does not answer") >= 3, 90,
             "three failed cycles")
    assert daemon.proc is not None and daemon.proc.poll() is None
    start_slurmctld(cluster)
    # Back in business: the next preemption goes through.
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=120)
    victim = _victim_of(daemon)
    wait_for(lambda: restarts(cluster, victim) == 1, 30, "the victim requeued")
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert sorted(r["Restarts"] for r in records.values()) == ["0", "0", "1"]
    history = journal_of(daemon).metric_history("slurmpolicy_cycle_seconds")
    assert len(history) >= 4


def test_second_instance_refused(cluster: LiveCluster, daemon: DaemonRunner) -> None:
    daemon.start()
    lock = daemon.settings.parent / "state" / "daemon.lock"
    assert daemon.proc is not None
    wait_for(lambda: lock.exists() and lock.read_text().strip() == str(daemon.proc.pid), 30,
             "the lock held")
    second = daemon.cli("daemon", "run", "--once", "--no-metrics", check=False)
    assert second.returncode == 6
    assert f"another slurmpolicy daemon (pid {daemon.proc.pid}) already runs" in second.stderr
    assert "Traceback" not in second.stderr
    assert daemon.proc.poll() is None


def test_bad_settings_file(cluster: LiveCluster, daemon: DaemonRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\ninterval = "soon"\n')
    runner = DaemonRunner(cluster, bad, tmp_path / "log")
    out = runner.cli("daemon", "run", "--once", "--no-metrics", check=False)
    assert out.returncode == 2
    assert str(bad) in out.stderr and "$.daemon.interval" in out.stderr
    assert "Traceback" not in out.stderr
    bad.write_text("[daemon]\nintervall = 5\n")
    out = runner.cli("daemon", "run", "--once", "--no-metrics", check=False)
    assert out.returncode == 2 and "intervall" in out.stderr
    bad.write_text("[daemon\n")
    out = runner.cli("daemon", "run", "--once", "--no-metrics", check=False)
    assert out.returncode == 2 and "not valid TOML" in out.stderr


def test_dry_run_changes_nothing(cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = [submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                      admin_comment=victim_comment(grace=5), workdir=wd) for _ in range(2)]
    for v in victims:
        cluster.wait_state(v, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    client = adapter_client(cluster)
    for _ in range(3):
        daemon.once("--dry-run")
    snap = client.snapshot()
    assert not [r for r in snap.reservations if r.name.startswith("spolicy_")]
    assert snap.job(beneficiary).site_factor == 0  # type: ignore[union-attr]
    assert snap.job(beneficiary).is_pending  # type: ignore[union-attr]
    for v in victims:
        assert not (wd / f"trap.{v}").exists()
        assert restarts(cluster, v) == 0
    records = journal_of(daemon).read_audit()
    # Reading the fabric is no action: journalled as read, in a dry run too.
    assert [r.outcome for r in records if r.kind == "fabric"][:1] == ["loaded"]
    audit = [r for r in records if r.kind != "fabric"]
    assert audit and all(r.dry_run and r.outcome == "dry-run" for r in audit)
    assert {"StartPreemption", "SetSiteFactor"} <= {r.kind for r in audit}
    assert journal_of(daemon).load_intents().preemptions == ()
    assert_no_job_lost(cluster, [*victims, beneficiary])


def test_sigterm_and_systemd_notify(cluster: LiveCluster, daemon: DaemonRunner,
                                    tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(path))
        srv.settimeout(60)
        proc = daemon.start(env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "2000000"})
        seen: list[str] = []
        while not any("STATUS=cycle 2" in m for m in seen):
            seen.append(srv.recv(4096).decode())
        assert seen[0].startswith("READY=1")
        assert "WATCHDOG=1" in seen
        proc.send_signal(signal.SIGTERM)
        # Read on while it stops, as systemd does: the queue holds only 10
        # datagrams (net.unix.max_dgram_qlen), and a full one drops the rest.
        rest = []
        srv.settimeout(1)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                rest.append(srv.recv(4096).decode())
        assert proc.wait(1) == 0
        with contextlib.suppress(TimeoutError):
            while True:
                rest.append(srv.recv(4096).decode())
        assert any(m.startswith("STOPPING=1") for m in rest)
    assert "slurmpolicy daemon stopped" in daemon.logs()
