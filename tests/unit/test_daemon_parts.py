"""The daemon's small parts with real OS objects: sd_notify over a real unix
datagram socket (path and abstract), the fcntl lock across processes, the
job-side comment merge, and the loop's cycle decisions (stale snapshot,
Slurm away and back-off) with an in-memory client (pure logic only)."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from slurmpolicy import job as spjob
from slurmpolicy.daemon import notify as notify_mod
from slurmpolicy.daemon.lock import AlreadyRunning, StateLock
from slurmpolicy.daemon.loop import Daemon
from slurmpolicy.daemon.notify import Notifier
from slurmpolicy.daemon.stop import StopRequest
from slurmpolicy.errors import SlurmUnavailable
from slurmpolicy.job import merge_ack
from slurmpolicy.jobpolicy import last_checkpoint, parse_admin_comment
from slurmpolicy.model import Snapshot
from slurmpolicy.policy.actions import Plan, SetSiteFactor, VictimState
from slurmpolicy.settings import Daemon as DaemonSettings
from slurmpolicy.settings import Metrics, Plugin, Settings
from slurmpolicy.store import Journal
from slurmpolicy.topology.types import Level


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
        assert _recv(srv) == "STATUS=cycle 3\\nok"  # one line; the newline shown escaped


def test_notify_to_a_full_queue_gives_up_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A receiver that never reads: its queue fills (10 datagrams by default),
    # and a blocking sendto() would then wait for good.
    monkeypatch.setattr(notify_mod, "SEND_TIMEOUT", 0.05)
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
        srv.bind(str(path))
        n = Notifier({"NOTIFY_SOCKET": str(path)})
        results: list[bool] = []

        def send_until_refused() -> None:
            while len(results) < 20_000 and (not results or results[-1]):
                results.append(n.watchdog())

        sender = threading.Thread(target=send_until_refused, daemon=True)
        sender.start()
        sender.join(120)
        assert not sender.is_alive(), "a notification blocked on a full queue"
        assert results[0] is True and results[-1] is False
        assert "sd_notify to" in caplog.text and "failed" in caplog.text
        n.close()


def test_stop_request_raised_just_before_the_wait_sleeps_ends_it() -> None:
    # The worst moment for a signal handler: after wait() looked at the flag,
    # before it sleeps. poll() must find the pipe readable, not time out.
    stop = StopRequest()
    stop._fds()
    real = stop._poller
    assert real is not None
    seen: list[list[tuple[int, int]]] = []

    class HandlerThenPoll:
        def poll(self, timeout: float) -> list[tuple[int, int]]:
            stop.set()
            ready = real.poll(timeout)
            seen.append(ready)
            return ready

    stop._poller = HandlerThenPoll()  # type: ignore[assignment]
    try:
        assert stop.wait(600) is True
    finally:
        stop.close()
    assert seen and seen[0], "poll() slept: the request did not wake it"


def test_stop_request_waits_on_a_descriptor_past_fd_setsize() -> None:
    # A long-lived daemon may hold many descriptors; select() refuses one
    # numbered 1024 or more (ValueError), poll() does not.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.fail(f"RLIMIT_NOFILE hard limit {hard} < 1100: cannot open the descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100) if hard == resource.RLIM_INFINITY
                                                else min(max(soft, 1100), hard), hard))
    held: list[int] = []
    stop = StopRequest()
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        r, _ = stop._fds()
        assert r >= 1024
        with pytest.raises(ValueError):
            select.select([r], [], [], 0)  # what the old wait() did
        assert stop.wait(0.01) is False
        threading.Timer(0.05, stop.set).start()
        assert stop.wait(600) is True
    finally:
        stop.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_stop_request_from_a_signal_handler_while_waiting() -> None:
    stop = StopRequest()
    old = signal.signal(signal.SIGALRM, lambda signum, frame: stop.set())
    try:
        assert stop.wait(0) is False and not stop.is_set()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert stop.wait(600) is True
        assert stop.wait(600) is True  # once set, it stays set
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        stop.close()


def test_stop_request_from_another_thread() -> None:
    stop = StopRequest()
    threading.Timer(0.05, stop.set).start()
    try:
        assert stop.wait(600) is True
    finally:
        stop.close()


def test_sigterm_handler_only_sets_flags_and_the_loop_says_why_it_stopped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    d = _daemon(tmp_path, FakeClient([fresh]), lambda *a, **k: Plan())
    d.close()
    original = d.cycle
    during: list[int] = []

    def cycle() -> object:
        # The handler may run while the main thread holds logging's lock (or
        # any other): it must not log, so nothing is recorded by the call.
        before = len(caplog.records)
        d._on_term(signal.SIGTERM, None)
        during.append(len(caplog.records) - before)
        return original()

    d.cycle = cycle  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="slurmpolicy.daemon"):
        assert d.run() == 0
    assert during == [0] and d.stopping
    assert f"signal {int(signal.SIGTERM)}: the current step is done, stopping" in caplog.text


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


DIRECTIVES = "spolicy:v1 class=research ckpt=signal:USR1,grace=60 nodes=2-4"


def test_the_preemption_mark_keeps_the_directives_and_reads_back() -> None:
    marked = spjob.with_mark(DIRECTIVES, "pre-42-1767225600", 2)
    assert marked == DIRECTIVES + " preempting=pre-42-1767225600:2"
    assert spjob.preemption_mark(marked) == ("pre-42-1767225600", 2)
    # The policy read from it is the same: the mark is not a directive.
    assert parse_admin_comment(marked) == parse_admin_comment(DIRECTIVES)
    again = spjob.with_mark(marked, "pre-43-1767229200", 3)  # replaces, never adds
    assert again.count("preempting=") == 1 and spjob.preemption_mark(again)[1] == 3
    assert spjob.without_mark(again) == DIRECTIVES
    for bad in ("", "preempting=", "preempting=p1", "preempting=:3", "preempting=p1:x"):
        assert spjob.preemption_mark(DIRECTIVES + " " + bad) is None, bad
    with pytest.raises(ValueError, match="no spaces"):
        spjob.with_mark(DIRECTIVES, "p 1", 0)


def _slurm_tools(tmp_path: Path, admin_comment: str) -> Path:
    """squeue answering the comment (``%k``) and the admin_comment padded as -O
    pads it; scontrol logging its arguments, one call a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    (bin_dir / "squeue").write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in
          *admin_comment*) printf '%-4096s\\n' '{admin_comment}' ;;
          *) echo 'owner-note ckpt:100:0' ;;
        esac
        """))
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return log


@pytest.mark.parametrize(("admin_comment", "restart_count", "requeued"), [
    (DIRECTIVES + " preempting=pre-42-100:1", 1, True),
    (DIRECTIVES + " preempting=pre-42-100:0", 1, False),  # an older run's mark
    (DIRECTIVES, 1, False),                                # called off: no mark
    ("(null)", 0, False),
])
def test_a_job_requeues_itself_only_when_marked_for_this_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admin_comment: str,
        restart_count: int, requeued: bool) -> None:
    log = _slurm_tools(tmp_path, admin_comment)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    stamp, pid = spjob.acknowledge_and_requeue(42, restart_count=restart_count, stamp=500)
    assert stamp == 500 and pid == ("pre-42-100" if requeued else None)
    calls = log.read_text().splitlines()
    # The ack first (saying so when the job requeues itself), then the requeue.
    ack = f"update jobid=42 comment=owner-note ckpt:500:{restart_count}"
    assert calls == ([f"{ack} requeuing:{restart_count}", "requeue 42"] if requeued
                     else [ack])
    assert spjob.requeuing(calls[0].partition("comment=")[2], restart_count) is requeued
    # A later plain ack drops the word.
    assert "requeuing" not in spjob.merge_ack(calls[0].partition("comment=")[2], 600, 1)


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
    # No lease: these fakes hold no nodes (the lease has its own tests).
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path), interval=5,
                                              max_backoff=40, max_snapshot_age=60,
                                              lease_ttl=0),
                        metrics=Metrics(enabled=False))
    d = Daemon(settings, client=client, planner=planner,
               fabric_loader=lambda s, st: None, clock=lambda: now, dry_run=dry_run)
    d.open()
    return d


def _plan(snapshot: Snapshot, fabric: object, settings: Settings, intents: object,
          now: float, clock: object = None) -> Plan:
    return Plan(actions=(SetSiteFactor(reason="aging", job_id=5, site_factor=10),))


def test_a_cycle_shows_where_its_plan_took_its_time(tmp_path: Path) -> None:
    """The plan's steps (Plan.timings) become slurmpolicy_plan_seconds{step},
    on the endpoint and in the journal's metric history."""
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    timed = Plan(timings={"context": 0.5, "priorities": 0.25})
    d = _daemon(tmp_path, FakeClient([fresh]), lambda *a, **k: timed)
    try:
        assert d.cycle().result == "ok"
        steps = {labels["step"]: value for name, labels, value in d.metrics.last_figures
                 if name == "slurmpolicy_plan_seconds"}
        assert steps == {"context": 0.5, "priorities": 0.25}
        assert d.journal is not None
        kept = d.journal.metric_history("slurmpolicy_plan_seconds")
        assert sorted((r[1]["step"], r[2]) for r in kept) == [("context", 0.5),
                                                               ("priorities", 0.25)]
    finally:
        d.close()


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


def test_next_cycle_sooner_while_a_signalled_victim_awaits_its_requeue(tmp_path: Path) -> None:
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path), interval=30, lease_ttl=0,
                                              preemption_poll=5, max_snapshot_age=60),
                        metrics=Metrics(enabled=False))
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    d = Daemon(settings, client=FakeClient([fresh]), planner=_plan,
               fabric_loader=lambda s, st: None, clock=lambda: 1000.0)
    d.open()
    try:
        r = d.cycle()
        assert r.result == "ok" and d._delay(r) == 30
        j = d.journal
        assert j is not None
        j.open_preemption("p1", 3, ("gpu01",), "spolicy_p1", [(1, 0, 8)], "test")
        assert d._delay(r) == 30  # planned, not signalled: nothing to poll for
        j.update_victim("p1", 1, 0, state=VictimState.SIGNALLED, signalled_at=1000.0,
                        deadline=1100.0)
        assert d._delay(r) == 5
        j.update_victim("p1", 1, 0, state=VictimState.REQUEUED)
        assert d._delay(r) == 30
    finally:
        d.close()


class VictimAnswers(FakeClient):
    """Answers ``job()`` as Slurm would at each look: the victim runs on, and
    writes its ack at ``acks_at`` (on the daemon's clock ``now``)."""

    def __init__(self, now: list[float], acks_at: float) -> None:
        super().__init__([])
        from dataclasses import replace

        from slurmpolicy.policy.scenario import ClusterBuilder

        self.now, self.acks_at = now, acks_at
        self.running = ClusterBuilder(hosts=1).run(1, hosts=[1])
        self.acked = replace(self.running, comment=f"ckpt:{acks_at:.0f}")
        self.looks: list[float] = []

    def jobs(self, job_ids: list[int]) -> dict[int, object]:
        self.looks.append(self.now[0])
        return {j: self.acked if self.now[0] >= self.acks_at else self.running
                for j in job_ids}


def _watching(tmp_path: Path, ack_poll: float, acks_at: float) -> tuple[Daemon, VictimAnswers]:
    now = [1000.0]
    client = VictimAnswers(now, acks_at)
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path), interval=30, lease_ttl=0,
                                              preemption_poll=5, ack_poll=ack_poll,
                                              max_snapshot_age=60),
                        metrics=Metrics(enabled=False),
                        # No doorbell: these are the ack looks alone. The default
                        # path is the host's, which a devcluster's plugin may have
                        # rung (and no cycle started here yet: any file reads as rung).
                        plugin=Plugin(doorbell=""))
    d = Daemon(settings, client=client, planner=_plan,  # type: ignore[arg-type]
               fabric_loader=lambda s, st: None, clock=lambda: now[0], serve_metrics=False)
    d.open()
    j = d.journal
    assert j is not None
    j.open_preemption("p1", 3, ("gpu01",), "spolicy_p1", [(1, 0, 8)], "test")
    j.update_victim("p1", 1, 0, state=VictimState.SIGNALLED, signalled_at=1000.0,
                    deadline=1100.0)
    mono = [0.0]

    def wait(seconds: float) -> bool:
        mono[0] += seconds
        now[0] += seconds
        return False

    d._monotonic = lambda: mono[0]
    d._wait = wait
    return d, client


def test_a_look_at_a_signalled_victim_that_acknowledged_starts_the_cycle(tmp_path: Path) -> None:
    """daemon.ack_poll: between the 5 s cycles the daemon reads the signalled
    victim every second; the look after its ack ends the wait (the cycle that
    requeues it starts then), not the 5 s cycle."""
    d, client = _watching(tmp_path, ack_poll=1, acks_at=1002.5)
    try:
        assert d._sleep(5, doorbell=True) is True
        assert client.looks == [1001.0, 1002.0, 1003.0]
        assert d.metrics.ack_wakes._value.get() == 1  # type: ignore[attr-defined]
        # A cycle that left the victim as it was (its requeue refused, say) is not
        # woken again for the same ack: the daemon does not spin every second.
        assert d._sleep(5, doorbell=True) is False
        assert d.metrics.ack_wakes._value.get() == 1  # type: ignore[attr-defined]
    finally:
        d.close()


def test_many_signalled_victims_are_read_in_turns_and_a_deadline_needs_no_read(
        tmp_path: Path) -> None:
    d, client = _watching(tmp_path, ack_poll=1, acks_at=2000.0)
    try:
        j = d.journal
        assert j is not None
        j.open_preemption("p2", 4, ("gpu02",), "spolicy_p2",
                          [(100 + i, 0, 1) for i in range(19)], "test")
        for i in range(19):
            j.update_victim("p2", 100 + i, 0, state=VictimState.SIGNALLED,
                            signalled_at=1000.0, deadline=1100.0)
        read: list[list[int]] = []
        answer = client.jobs
        client.jobs = lambda ids: (read.append(list(ids)), answer(ids))[1]  # type: ignore[method-assign]
        assert d._sleep(3, doorbell=True) is False
        assert [len(r) for r in read] == [16, 16]  # 20 victims, LOOK_AT a look
        assert read[1][0] != read[0][0] and set(read[0]) | set(read[1]) == {
            1, *range(100, 119)}
        # Past a deadline: the cycle starts without reading anyone.
        read.clear()
        client.now[0] = 1100.0
        assert d._sleep(3, doorbell=True) is True and read == []
    finally:
        d.close()


def test_no_ack_no_early_cycle_and_no_looks_when_ack_poll_is_0(tmp_path: Path) -> None:
    d, client = _watching(tmp_path / "a", ack_poll=1, acks_at=2000.0)
    try:
        assert d._sleep(5, doorbell=True) is False
        assert client.looks == [1001.0, 1002.0, 1003.0, 1004.0]
    finally:
        d.close()
    d, client = _watching(tmp_path / "b", ack_poll=0, acks_at=1002.5)
    try:
        assert d._sleep(5, doorbell=True) is False
        assert client.looks == []
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


def test_fabric_reloaded_on_sighup_and_on_file_change(tmp_path: Path) -> None:
    import signal as signal_mod

    fabric_file = tmp_path / "fabric.toml"
    fabric_file.write_text("# v1\n")
    settings_file = tmp_path / "s.toml"
    settings_file.write_text(f'[daemon]\nstate_dir = "{tmp_path / "st"}"\ninterval = 5\n'
                             'lease_ttl = 0\n'
                             f'[fabric]\nfabric_file = "{fabric_file}"\n'
                             '[metrics]\nenabled = false\n')
    from slurmpolicy import settings as settings_mod

    loads: list[int] = []

    def loader(snapshot: Snapshot, settings: Settings) -> object:
        loads.append(1)
        return object()

    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    client = FakeClient([fresh] * 5)
    d = Daemon(settings_mod.load(settings_file), settings_path=str(settings_file),
               client=client, planner=lambda *a, **k: Plan(), fabric_loader=loader,
               clock=lambda: 1000.0)
    d.open()
    try:
        d.cycle()
        d.cycle()
        assert len(loads) == 1  # unchanged sources: the fabric is kept
        os.utime(fabric_file, (2e9, 2e9))
        d.cycle()
        assert len(loads) == 2
        settings_file.write_text(settings_file.read_text().replace("interval = 5",
                                                                   "interval = 7"))
        d._on_hup(signal_mod.SIGHUP, None)
        d.cycle()
        assert len(loads) == 3 and d.settings.daemon.interval == 7
        settings_file.write_text("[daemon\n")  # a bad file on reload keeps the old settings
        d._on_hup(signal_mod.SIGHUP, None)
        assert d.cycle().result == "ok" and d.settings.daemon.interval == 7
    finally:
        d.close()


def test_a_fabric_broken_mid_flight_keeps_the_last_good_one(tmp_path: Path) -> None:
    """Issue 13, finding 2: a typo in the fabric file during a preemption must not
    stop it where it stands: the planner goes on with the last good fabric."""
    from slurmpolicy.errors import TopologyError

    fabric_file = tmp_path / "fabric.toml"
    fabric_file.write_text("# v1\n")
    good = object()
    seen: list[object] = []

    def loader(snapshot: Snapshot, settings: Settings) -> object:
        if "typo" in fabric_file.read_text():
            raise TopologyError(f"{fabric_file}: line 1: not valid TOML")
        return good

    def planner(snapshot: Snapshot, fabric: object, *rest: object, **kw: object) -> Plan:
        seen.append(fabric)
        return Plan()

    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path / "st"), lease_ttl=0),
                        fabric=settings_mod_fabric(str(fabric_file)),
                        metrics=Metrics(enabled=False))
    d = Daemon(settings, client=FakeClient([fresh] * 3), planner=planner,
               fabric_loader=loader, clock=lambda: 1000.0)
    d.open()
    try:
        assert d.cycle().result == "ok"
        fabric_file.write_text("typo [\n")
        os.utime(fabric_file, (2e9, 2e9))
        assert d.cycle().result == "ok"
        assert d.cycle().result == "ok"
        assert seen == [good, good, good]
        assert d.fabric_error.endswith("line 1: not valid TOML")
    finally:
        d.close()


def settings_mod_fabric(path: str) -> object:
    from slurmpolicy.settings import Fabric

    return Fabric(fabric_file=path)


def test_keep_history_setting_and_prune(tmp_path: Path) -> None:
    from slurmpolicy.settings import from_mapping

    assert from_mapping({"daemon": {"keep_history": "7d"}}).daemon.keep_history == 7 * 86400
    j = Journal(tmp_path)
    j.record_metrics([("slurmpolicy_gpus", {"state": "idle"}, 1.0)], at=100.0)
    j.record_metrics([("slurmpolicy_gpus", {"state": "idle"}, 2.0)], at=900.0)
    j.finish_step(j.begin_step("sitefactor:1:1", "sitefactor"), "ok")
    j.prune(older_than=500.0)
    assert [v for _, _, v in j.metric_history("slurmpolicy_gpus")] == [2.0]


def test_unexpected_planner_error_does_not_stop_the_daemon(tmp_path: Path) -> None:
    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")

    def broken(*args: object, **kw: object) -> Plan:
        raise KeyError("bug")

    d = _daemon(tmp_path, FakeClient([fresh]), broken)
    d.close()
    d.settings = Settings(daemon=DaemonSettings(state_dir=str(tmp_path), interval=0.01),
                          metrics=Metrics(enabled=False))
    calls = []
    original = d.cycle

    def cycle() -> object:
        calls.append(1)
        if len(calls) == 2:
            d.request_stop()
        return original()

    d.cycle = cycle
    assert d.run() == 0
    assert len(calls) == 2


def test_daemon_status_log_and_report_commands(tmp_path: Path) -> None:
    from slurmpolicy.cli import main

    journal = Journal(tmp_path)
    journal.open_preemption("p1", 3, ["gpu01"], "spolicy_pre_3", [(1, 0, 8)], "prod needs it")
    journal.audit("StartPreemption", "prod needs it", "ok", job_id=3, jobs=(1,), at=1000.0)
    journal.record_metrics([("slurmpolicy_cycle_seconds", {}, 0.5),
                            ("slurmpolicy_requeues", {}, 1.0)], at=1000.0)

    def cli(*args: str) -> tuple[int, str]:
        out = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", *args],
                             capture_output=True, text=True, check=False)
        return out.returncode, out.stdout + out.stderr

    code, out = cli("daemon", "status", "--state-dir", str(tmp_path))
    assert code == 1 and "not running" in out and "preemption p1 for job 3" in out
    with StateLock(tmp_path):
        code, out = cli("daemon", "status", "--state-dir", str(tmp_path), "--json")
        assert code == 0 and f'"running_pid": {os.getpid()}' in out
    code, out = cli("log", "--state-dir", str(tmp_path), "--job", "1", "--since", "1970-01-01")
    assert code == 0 and "StartPreemption" in out and "prod needs it" in out
    code, out = cli("report", "--state-dir", str(tmp_path), "--since", "1970-01-01T00:00", "--json")
    assert code == 0 and '"requeues": 1.0' in out
    code, out = cli("log", "--state-dir", str(tmp_path), "--since", "yesterday-ish")
    assert code == 2 and "use an ISO time" in out
    code, out = cli("log", "--state-dir", str(tmp_path / "none"))
    assert code == 2 and "no journal here" in out
    assert main is not None


def test_daemon_steers_through_warnings_and_keeps_the_last_good_fabric(tmp_path: Path) -> None:
    """A topology.conf Slurm accepts with warnings (a node under two leaves, a name
    slurm.conf lacks) is read, its warnings counted; one Slurm refuses (a cycle of
    switches) keeps the last good fabric, and the daemon says so."""
    from slurmpolicy.model import Node
    from slurmpolicy.topology import Fabric

    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=leaf1 Nodes=gpu[01-03]\nSwitchName=leaf2 Nodes=gpu[03-04,99]\n"
                    "SwitchName=spine Switches=leaf[1-2]\n")
    nodes = tuple(Node(name=f"gpu{i:02d}", state="IDLE", gpus_by_type={"h100": 8})
                  for i in range(1, 5))
    settings_file = tmp_path / "s.toml"
    settings_file.write_text(f'[daemon]\nstate_dir = "{tmp_path / "st"}"\nlease_ttl = 0\n'
                             f'[fabric]\ntopology_conf = "{topo}"\n[metrics]\nenabled = false\n')
    from slurmpolicy import settings as settings_mod

    def loader(snapshot: Snapshot, settings: Settings) -> Fabric:
        return Fabric.from_sources(snapshot.nodes, settings.fabric, tmp_path / "slurm.conf")

    snap = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c", nodes=nodes)
    seen: list[object] = []

    def planner(snapshot: Snapshot, fabric: object, *rest: object, **kw: object) -> Plan:
        seen.append(fabric)
        return Plan()

    d = Daemon(settings_mod.load(settings_file), client=FakeClient([snap] * 4),
               planner=planner, fabric_loader=loader, clock=lambda: 1000.0)
    d.open()
    try:
        assert d.cycle().result == "ok"
        first = seen[-1]
        assert isinstance(first, Fabric) and first.domain_of("gpu03", Level.LEAF) == "leaf1"
        figures = {name: value for name, _labels, value in d.metrics.last_figures}
        assert figures["slurmpolicy_fabric_warnings"] == 2.0  # two leaves; gpu99 unknown
        assert figures["slurmpolicy_fabric_refused"] == 0.0
        topo.write_text("SwitchName=leaf1 Nodes=gpu[01-04]\nSwitchName=a Switches=b,leaf1\n"
                        "SwitchName=b Switches=a\n")
        os.utime(topo, (2e9, 2e9))
        assert d.cycle().result == "ok"
        assert seen[-1] is first and "switch cycle" in d.fabric_refused
        figures = {name: value for name, _labels, value in d.metrics.last_figures}
        assert figures["slurmpolicy_fabric_refused"] == 1.0
        topo.write_text("SwitchName=leaf1 Nodes=gpu[01-04]\n")
        os.utime(topo, (2.1e9, 2.1e9))
        assert d.cycle().result == "ok"
        assert seen[-1] is not first and d.fabric_refused == ""
        assert seen[-1].domain_of("gpu04", Level.LEAF) == "leaf1"
        # Each load and the refusal are decisions in the journal, with their reasons.
        assert d.journal is not None
        decisions = [(a.outcome, a.reason) for a in d.journal.read_audit() if a.kind == "fabric"]
        assert [o for o, _r in decisions] == ["loaded", "kept last good", "loaded"]
        assert "4 hosts, 2 warning(s); first:" in decisions[0][1]
        assert "switch cycle" in decisions[1][1] and "last good fabric (4 hosts)" in decisions[1][1]
    finally:
        d.close()


def _open_preemption() -> tuple[object, object]:
    """Intents holding one open preemption (a production job waiting for its
    victim's save), from a plan of the scenario builder; and that builder."""
    from slurmpolicy.policy import apply_to_intents, plan
    from slurmpolicy.policy.actions import Intents
    from slurmpolicy.policy.scenario import ClusterBuilder
    from slurmpolicy.policy.scenario import directives as d

    b = ClusterBuilder(hosts=1)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1", grace=120))
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    intents = apply_to_intents(Intents(), p, b.now)
    assert intents.open_preemptions()
    return intents, b


def test_cycles_between_full_plans_only_move_open_preemptions(tmp_path: Path) -> None:
    """While a preemption waits on its victims, the daemon cycles every
    preemption_poll seconds: those cycles ask the planner for the open
    preemptions alone (open_only), and a full plan comes once daemon.interval
    has passed since the last, at once when the doorbell rang, or when a job
    of a doorbell class came to wait."""
    from slurmpolicy.policy.actions import Intents

    intents, _ = _open_preemption()
    calls: list[dict[str, object]] = []

    def planner(snapshot: Snapshot, fabric: object, *rest: object, **kw: object) -> Plan:
        calls.append(kw)
        return Plan()

    fresh = Snapshot(taken_at=999.0, slurm_version="x", cluster_name="c")
    d = _daemon(tmp_path, FakeClient([fresh] * 8), planner)
    held = [intents]
    d.journal.load_intents = lambda now=None: held[0]  # type: ignore[union-attr,method-assign]
    clock = [100.0]
    d._monotonic = lambda: clock[0]
    try:
        results = []
        for t in (100.0, 102.0, 104.9, 105.0, 107.0):  # interval=5
            clock[0] = t
            results.append(d.cycle())
        assert [bool(kw.get("open_only")) for kw in calls] == [False, True, True, False, True]
        assert [r.open_only for r in results] == [False, True, True, False, True]
        assert "ok (open preemptions only) in" in d._status_line(results[1])
        # The doorbell rang: the next cycle is a full plan.
        d._bell_rang = True
        assert not d.cycle().open_only
        assert d.cycle().open_only  # and the one after is not, within the interval
        # No open preemption: a full plan.
        held[0] = Intents()
        assert not d.cycle().open_only
    finally:
        d.close()


def test_a_new_job_of_a_doorbell_class_gets_a_full_plan(tmp_path: Path) -> None:
    """Without the doorbell (plugin.doorbell off, or a submit the plugin did not
    see), a production job that came to wait since the last full plan is
    planned for at the next cycle; a new research job waits for the interval."""
    from slurmpolicy.policy.scenario import directives as dirs

    intents, b = _open_preemption()
    d = _daemon(tmp_path, FakeClient([]), lambda *a, **k: Plan())
    d._monotonic = lambda: 101.0
    d._last_full = 100.0
    try:
        d._waiting_at_full = {1}
        assert d._open_only(intents, b.snapshot())  # type: ignore[arg-type]
        b.pend(7, "r", admin_comment=dirs("research", "USR1"))
        assert d._open_only(intents, b.snapshot())  # type: ignore[arg-type]
        b.pend(8, "p", admin_comment=dirs("production", "USR1"))
        assert not d._open_only(intents, b.snapshot())  # type: ignore[arg-type]
        d._waiting_at_full = {1, 7, 8}
        assert d._open_only(intents, b.snapshot())  # type: ignore[arg-type]
    finally:
        d.close()
