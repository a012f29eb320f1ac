"""The daemon's small parts with real OS objects: sd_notify over a real unix
datagram socket (path and abstract), the fcntl lock across processes, the
job-side comment merge, and the loop's cycle decisions (stale snapshot,
Slurm away and back-off) with an in-memory client (pure logic only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from slurmpolicy.daemon.lock import AlreadyRunning, StateLock
from slurmpolicy.daemon.loop import Daemon
from slurmpolicy.daemon.notify import Notifier

from slurmpolicy.errors import SlurmUnavailable
from slurmpolicy.job import merge_ack
from slurmpolicy.jobpolicy import last_checkpoint
from slurmpolicy.model import Snapshot
from slurmpolicy.policy.actions import Plan, SetSiteFactor
from slurmpolicy.settings import Daemon as DaemonSettings
from slurmpolicy.settings import Metrics, Settings
from slurmpolicy.store import Journal


def _recv(sock: socket.socket) -> str:
    sock.settimeout(2)
    return sock.recv(4096).decode()


def test_notify_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(path))
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "4000000"})
        assert n.enabled and n.watchdog_interval == 4.0
        assert n.ready("up")
        assert _recv(srv) == "READY=1\nSTATUS=up"
        n.watchdog()
        assert _recv(srv) == "WATCHDOG=1"
        n.stopping()
        assert _recv(srv) == "STOPPING=1"
        n.close()


def test_notify_abstract_socket() -> None:
    name = f"spolicy-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        n.status("cycle 3\nok")
        assert _recv(srv) == "STATUS=cycle 3 ok"


def test_notify_without_systemd_is_a_no_op() -> None:
    n = Notifier({})
    assert not n.enabled and not n.ready() and n.watchdog_interval is None


def test_watchdog_for_another_pid_is_ignored() -> None:
    n = Notifier({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"})
    assert n.watchdog_interval is None


def test_second_lock_in_another_process_refused(tmp_path: Path) -> None:
    with StateLock(tmp_path):
        code = textwrap.dedent(f"""
            from slurmpolicy.daemon.lock import StateLock, AlreadyRunning
            try:
                StateLock({str(tmp_path)!r}).acquire()
            except AlreadyRunning as exc:
                print("refused:", exc)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        assert f"refused: another slurmpolicy daemon (pid {os.getpid()})" in out
    # Released: a new holder gets it.
    lock = StateLock(tmp_path)
    lock.acquire()
    lock.release()


def test_lock_in_same_process_refused(tmp_path: Path) -> None:
    first = StateLock(tmp_path)
    first.acquire()
    with pytest.raises(AlreadyRunning):
        StateLock(tmp_path).acquire()
    first.release()


def test_merge_ack_keeps_other_text() -> None:
    merged = merge_ack("epoch=3 ckpt:100 note", 250, 1)
    assert merged == "epoch=3 note ckpt:250:1"
    assert last_checkpoint(merged) == 250.0
    assert merge_ack("", 7) == "ckpt:7"


class FakeClient:
    """Answers snapshots from a list; anything that changes Slurm is recorded."""

    name = "fake"

    def __init__(self, answers: list[Snapshot | Exception]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int]] = []

    def snapshot(self) -> Snapshot:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        self.calls.append(("set_site_factor", job_id))


def _daemon(tmp_path: Path, client: FakeClient, planner: object, dry_run: bool = False,
            now: float = 1000.0) -> Daemon:
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path), interval=5,
                                              max_backoff=40, max_snapshot_age=60),
                        metrics=Metrics(enabled=False))
    d = Daemon(settings, client=client, planner=planner,  # type: ignore[arg-type]
               fabric_loader=lambda s, st: None, clock=lambda: now, dry_run=dry_run)
    d.open()
    return d


def _plan(snapshot: Snapshot, fabric: object, settings: Settings, intents: object,
          now: float) -> Plan:
    return Plan(actions=(SetSiteFactor(reason="aging", job_id=5, site_factor=10),))


def test_cycle_skips_stale_snapshot_and_backs_off(tmp_path: Path) -> None:
    stale = Snapshot(taken_at=800.0, slurm_version="x", cluster_name="c")
    client = FakeClient([stale, SlurmUnavailable("down"), SlurmUnavailable("down")])
    d = _daemon(tmp_path, client, _plan)
    try:
        r1 = d.cycle()
        assert r1.result == "stale" and client.calls == []
        assert d._delay(r1) == 5
        r2 = d.cycle()
        assert r2.result == "unavailable" and d._delay(r2) == 10
        r3 = d.cycle()
        assert d._delay(r3) == 20
    finally:
        d.close()


def test_cycle_runs_plan_and_records_history(tmp_path: Path) -> None:
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    client = FakeClient([fresh])
    d = _daemon(tmp_path, client, _plan)
    try:
        r = d.cycle()
        assert r.result == "ok" and client.calls == [("set_site_factor", 5)]
    finally:
        d.close()
    j = Journal(tmp_path, read_only=True)
    assert j.metric_history("slurmpolicy_slurm_calls")[-1][2] == 1.0
    assert j.read_audit()[-1].kind == "SetSiteFactor"


def test_dry_run_cycle_changes_nothing(tmp_path: Path) -> None:
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    client = FakeClient([fresh])
    d = _daemon(tmp_path, client, _plan, dry_run=True)
    try:
        assert d.cycle().result == "ok"
    finally:
        d.close()
    assert client.calls == []
    assert Journal(tmp_path, read_only=True).read_audit()[-1].outcome == "dry-run"
