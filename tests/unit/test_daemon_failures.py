"""Failures are one line and counted; the journal is private (issue 13, findings 4, 6, 9).

Real SQLite and real files: a journal created under any umask is 0600 in a
0700 directory; a corrupt or truncated journal is one line naming the file
and the fix (library and CLI, no traceback); a journal that turns read-only
(``PRAGMA query_only``) or full (``PRAGMA max_page_count``: SQLite's own
SQLITE_READONLY and SQLITE_FULL) mid-run fails the cycle with one log line
and a counted reason, and three such cycles stop the systemd watchdog; a
settings reload with a bad value keeps the last good settings and says why
in the log and the metrics. The Slurm client is an in-memory stand-in (the
loop's logic only).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from slurmpolicy.daemon.loop import UNHEALTHY_AFTER, Daemon
from slurmpolicy.errors import JournalError
from slurmpolicy.model import Snapshot
from slurmpolicy.policy.actions import Plan
from slurmpolicy.settings import Daemon as DaemonSettings
from slurmpolicy.settings import Metrics, Settings
from slurmpolicy.store import Journal


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o002])
def test_state_dir_0700_and_journal_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    from slurmpolicy.daemon.lock import StateLock

    state = tmp_path / "a" / "state"
    old = os.umask(umask)
    try:
        lock = StateLock(state)
        lock.acquire()
        journal = Journal(state)
        journal.audit("SetSiteFactor", "r", "ok", job_id=1)  # creates -wal and -shm
        assert _mode(state) == 0o700
        for name in ("journal.sqlite", "journal.sqlite-wal", "journal.sqlite-shm", "daemon.lock"):
            assert _mode(state / name) == 0o600, name
        journal.close()
        lock.release()
    finally:
        os.umask(old)


def test_a_journal_others_could_read_is_tightened(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    tmp_path.chmod(0o755)
    (tmp_path / "journal.sqlite").chmod(0o644)
    Journal(tmp_path).close()
    # Others lose everything; group bits a site granted on purpose stay.
    assert _mode(tmp_path) == 0o750 and _mode(tmp_path / "journal.sqlite") == 0o640


def _broken(tmp_path: Path, how: str) -> Path:
    journal = Journal(tmp_path)
    for i in range(300):
        journal.audit("SetSiteFactor", "x" * 200, "ok", job_id=i)
    journal.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    journal.close()
    path = tmp_path / "journal.sqlite"
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(b"this is not a database, it was overwritten" * 100)
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:  # a page in the middle overwritten
        path.write_bytes(data[:8192] + b"\xff" * 4096 + data[12288:])
    return path


@pytest.mark.parametrize("how", ["garbage", "truncated", "scribbled"])
def test_corrupt_or_truncated_journal_is_one_line_naming_file_and_fix(tmp_path: Path,
                                                                      how: str) -> None:
    path = _broken(tmp_path, how)
    cli = [sys.executable, "-m", "slurmpolicy.cli"]
    messages = []
    try:
        Journal(tmp_path, read_only=True).read_audit()
    except JournalError as exc:
        messages.append(str(exc))
    out = subprocess.run([*cli, "log", "--state-dir", str(tmp_path)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 7 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    messages.append(out.stderr)
    conf = tmp_path.parent / f"{tmp_path.name}.toml"
    conf.write_text("[metrics]\nenabled = false\n")
    run = subprocess.run([*cli, "-c", str(conf), "daemon", "run", "--once", "--state-dir",
                          str(tmp_path)], capture_output=True, text=True, check=False)
    assert "Traceback" not in run.stderr and run.returncode != 0, run.stderr
    messages.append(run.stderr)
    for message in messages:
        assert str(path) in message and "corrupt" in message and f"mv {path}" in message, \
            message


class Client:
    """An in-memory Slurm: always the same empty, fresh snapshot."""

    name = "memory"

    def __init__(self, now: float) -> None:
        self.now = now

    def snapshot(self) -> Snapshot:
        return Snapshot(taken_at=self.now, slurm_version="x", cluster_name="c")


def _daemon(tmp_path: Path, **kw: object) -> Daemon:
    # No lease (lease_ttl 0): these clusters have no node to hold it on.
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path / "st"), interval=5,
                                              lease_ttl=0),
                        metrics=Metrics(enabled=False))
    d = Daemon(settings, client=Client(1000.0), planner=lambda *a, **k: Plan(),  # type: ignore[arg-type]
               fabric_loader=lambda s, st: None, clock=lambda: 1000.0, **kw)  # type: ignore[arg-type]
    d.open()
    return d


def _drain(srv: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(srv.recv(100))
        except TimeoutError:
            return got


def _counted(d: Daemon, reason: str) -> float:
    return d.metrics.registry.get_sample_value("slurmpolicy_cycle_failures_total",
                                               {"reason": reason}) or 0.0


@pytest.mark.parametrize(("pragma", "reason", "words"), [
    ("PRAGMA query_only = 1", "journal_readonly", "must be writable by the daemon's user"),
    ("PRAGMA max_page_count = 1", "journal_full", "free space on"),
])
def test_unwritable_journal_fails_the_cycle_in_one_counted_line_and_starves_the_watchdog(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, pragma: str, reason: str,
        words: str) -> None:
    name = f"spolicy-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind("\0" + name)
        srv.settimeout(0.2)
        d = _daemon(tmp_path)
        from slurmpolicy.daemon.notify import Notifier

        d.notifier = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "60000000"})
        try:
            assert d.cycle().result == "ok" and _drain(srv).count(b"WATCHDOG=1") >= 1
            assert d.journal is not None
            if "max_page_count" in pragma:
                pages = d.journal.db.execute("PRAGMA page_count").fetchone()[0]
                pragma = f"PRAGMA max_page_count = {pages}"
            d.journal.db.execute(pragma)
            if "max_page_count" in pragma:  # fill the last pages: the disk is now full
                with pytest.raises(sqlite3.OperationalError, match="full"):
                    for i in range(100_000):
                        d.journal.record_metrics([("filler", {}, float(i))])
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="slurmpolicy.daemon"):
                results = [d.cycle() for _ in range(UNHEALTHY_AFTER)]
            assert all(r.result == "error" and r.reason == reason for r in results), results
            failed = [r for r in caplog.records if "cycle failed" in r.getMessage()]
            assert len(failed) == UNHEALTHY_AFTER
            line = failed[0].getMessage()
            assert "\n" not in line and str(d.journal.path) in line and words in line, line
            assert _counted(d, reason) == UNHEALTHY_AFTER
            # Fed while the failures were fewer than UNHEALTHY_AFTER, then no more.
            assert b"WATCHDOG=1" in _drain(srv)
            assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == \
                UNHEALTHY_AFTER + 1  # one line per failed cycle, one when the watchdog stops
            assert not d.healthy and "no longer feeding the systemd watchdog" in caplog.text
            assert d.metrics.registry.get_sample_value("slurmpolicy_healthy") == 0
            d._feed_watchdog()
            assert d.cycle().reason == reason
            assert _drain(srv) == []
            # Writable again: healthy again, the watchdog is fed.
            d.journal.db.execute("PRAGMA query_only = 0")
            d.journal.db.execute("PRAGMA max_page_count = 1073741823")
            assert d.cycle().result == "ok" and d.healthy
            assert srv.recv(100) == b"WATCHDOG=1"
        finally:
            d.close()


def test_slurm_away_is_counted_but_keeps_the_watchdog_fed(tmp_path: Path) -> None:
    from slurmpolicy.errors import SlurmUnavailable

    d = _daemon(tmp_path)

    def down() -> Snapshot:
        raise SlurmUnavailable("slurm_load_jobs: Unable to contact slurm controller")

    try:
        d.client.snapshot = down  # type: ignore[method-assign, union-attr]
        for _ in range(UNHEALTHY_AFTER + 1):
            assert d.cycle().reason == "slurm_unavailable"
        assert d.healthy and _counted(d, "slurm_unavailable") == UNHEALTHY_AFTER + 1
    finally:
        d.close()


def _reloadable(tmp_path: Path) -> tuple[Daemon, Path]:
    """An opened daemon that reads its settings from a file the test rewrites."""
    from slurmpolicy import settings as settings_mod

    path = tmp_path / "s.toml"
    path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "st"}"\ninterval = 5\nlease_ttl = 0\n'
                    '[metrics]\nenabled = false\n')
    d = Daemon(settings_mod.load(path), settings_path=str(path), client=Client(1000.0),  # type: ignore[arg-type]
               planner=lambda *a, **k: Plan(), fabric_loader=lambda s, st: None,
               clock=lambda: 1000.0)
    d.open()
    return d, path


def test_reload_with_bad_settings_keeps_the_last_good_ones_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d, path = _reloadable(tmp_path)
    try:
        path.write_text(path.read_text().replace("interval = 5", "interval = nan"))
        d._on_hup(signal.SIGHUP, None)
        with caplog.at_level(logging.ERROR, logger="slurmpolicy.daemon"):
            assert d.cycle().result == "ok"
        assert d.settings.daemon.interval == 5
        line = next(r.getMessage() for r in caplog.records if "not reloaded" in r.getMessage())
        assert "keeping the last good ones" in line and "$.daemon.interval" in line
        assert "\n" not in line
        registry = d.metrics.registry
        assert registry.get_sample_value("slurmpolicy_settings_reload_failures_total") == 1
        assert registry.get_sample_value("slurmpolicy_settings_stale") == 1
        assert d.journal is not None
        stale = d.journal.metric_history("slurmpolicy_settings_stale")
        assert stale and stale[-1][2] == 1.0
        path.write_text(path.read_text().replace("interval = nan", "interval = 7"))
        d._on_hup(signal.SIGHUP, None)
        d.cycle()
        assert d.settings.daemon.interval == 7
        assert registry.get_sample_value("slurmpolicy_settings_stale") == 0
    finally:
        d.close()


def test_a_reload_logs_what_the_settings_set_that_does_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A file written before reserve_after_wait existed, which sets
    # starvation_wait: the rule it meant is now off, and the log says so.
    d, path = _reloadable(tmp_path)
    try:
        path.write_text(path.read_text() + '[reservations]\nstarvation_wait = "2h"\n')
        d._on_hup(signal.SIGHUP, None)
        with caplog.at_level(logging.WARNING, logger="slurmpolicy.daemon"):
            assert d.cycle().result == "ok"
        notes = [r.getMessage() for r in caplog.records if "starvation_wait" in r.getMessage()]
        assert len(notes) == 1 and "reserve_after_wait = true" in notes[0]
        assert not d.settings.reservations.reserve_after_wait  # only said, not changed
        caplog.clear()
        path.write_text(path.read_text() + "reserve_after_wait = true\n")
        d._on_hup(signal.SIGHUP, None)
        with caplog.at_level(logging.WARNING, logger="slurmpolicy.daemon"):
            d.cycle()
        assert d.settings.reservations.reserve_after_wait
        assert not [r for r in caplog.records if "starvation_wait" in r.getMessage()]
    finally:
        d.close()
