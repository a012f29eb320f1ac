"""The daemon's main loop: read, plan, execute, record; again.

Owns the cycle and the process's life: the state-directory lock, the
cluster-wide lease (:mod:`slurmpolicy.daemon.lease`: a daemon that does not
hold it stands by and changes nothing), signals
(SIGTERM/SIGINT: finish the current step and exit; SIGHUP: reload settings
and fabric), systemd notify and watchdog, back-off when Slurm does not
answer, the metrics endpoint, and the fair-share usage accounting that the
journal keeps between cycles.

One cycle::

    snapshot = client.snapshot()           # skipped if stale or Slurm is down
    lease.check(snapshot)                  # standing by: nothing more this cycle
    executor.reconcile(snapshot)           # journal <- what Slurm shows
    lifecycle.observe(snapshot)            # job ends, timelines, retries, node health
    fabric = (re)load when changed         # topology sources
    plan = policy.plan(snapshot, fabric, settings, journal.load_intents(), now)
    executor.execute(plan, snapshot)       # journal first, capped, idempotent

Cycles are ``daemon.interval`` apart, or ``daemon.preemption_poll`` while a
signalled victim awaits its requeue (so an ack is acted on within seconds).
Between two ok cycles the daemon also looks at the submit doorbell
(``plugin.doorbell``, :mod:`slurmpolicy.daemon.doorbell`) every
``daemon.preemption_poll`` seconds: job_submit.lua rings it when it accepts a
job of a class that preempts, and a ring starts the next cycle at once, but
never sooner than ``daemon.preemption_poll`` after the last one started.

A failed cycle is one log line naming what failed and the fix, and is
counted by reason (``slurmpolicy_cycle_failures{reason=...}``). Slurm being
away is waited out (back-off, watchdog still fed: a restart would not help).
A daemon that cannot do its own job (journal unwritable, corrupt or full,
fabric or internal errors) for ``UNHEALTHY_AFTER`` cycles in a row stops
feeding the systemd watchdog, so that systemd sees it fail rather than a
daemon that pretends; a settings reload that fails keeps the last good
settings and says why in the log and in ``slurmpolicy_settings_stale``.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from slurmpolicy import settings as settings_mod
from slurmpolicy.daemon.doorbell import Doorbell
from slurmpolicy.daemon.executor import CycleReport, Executor
from slurmpolicy.daemon.lease import Lease
from slurmpolicy.daemon.lifecycle import Lifecycle
from slurmpolicy.daemon.lock import StateLock
from slurmpolicy.daemon.metrics import (
    CHECKPOINT_WINDOW,
    Metrics,
    checkpoint_figures,
    snapshot_figures,
)
from slurmpolicy.daemon.notify import Notifier
from slurmpolicy.daemon.protocols import BatchSignals, with_victims
from slurmpolicy.daemon.stop import StopRequest
from slurmpolicy.errors import (
    ConfigError,
    JournalError,
    SlurmError,
    SlurmPolicyError,
    SlurmUnavailable,
    TopologyError,
)
from slurmpolicy.model import Snapshot
from slurmpolicy.policy.actions import Intents, VictimState
from slurmpolicy.policy.classes import class_of
from slurmpolicy.policy.fairshare import advance_usage
from slurmpolicy.policy.preemption import victim_moved
from slurmpolicy.settings import Settings, doorbell_classes
from slurmpolicy.slurm.client import SlurmClient
from slurmpolicy.store import Journal, journal_failure

log = logging.getLogger("slurmpolicy.daemon")

Planner = Callable[..., Any]
#: Own failures in a row after which the systemd watchdog is no longer fed.
UNHEALTHY_AFTER = 3
#: Failure reasons that are Slurm's, not the daemon's: waited out, watchdog fed.
EXTERNAL = frozenset({"slurm_unavailable", "snapshot_stale"})
#: Signalled victims read per look between cycles (daemon.ack_poll): a
#: preemption of many victims is looked at in turns, one jobs() call a look.
LOOK_AT = 16
FabricLoader = Callable[[Snapshot, Settings], Any]


@dataclass
class CycleResult:
    #: "ok", "stale" (snapshot too old), "unavailable" (Slurm did not answer), "error",
    #: "standby" (another daemon holds the cluster's lease)
    result: str
    seconds: float
    report: CycleReport | None = None
    actions: int = 0
    message: str = ""
    #: Why it failed, for the metrics: slurm_unavailable, snapshot_stale,
    #: journal_corrupt, journal_readonly, journal_full, journal, fabric,
    #: settings, slurm_error, internal; "" when it did not.
    reason: str = ""
    #: CPU seconds of each step of the cycle's plan (``Plan.timings``).
    plan_steps: Mapping[str, float] = field(default_factory=dict)
    #: The plan only moved open preemptions on (``plan(open_only=True)``).
    open_only: bool = False


def failure_reason(exc: BaseException) -> str:
    """The metrics label of what made a cycle fail."""
    if isinstance(exc, SlurmUnavailable):
        return "slurm_unavailable"
    if isinstance(exc, JournalError):
        return exc.reason
    if isinstance(exc, TopologyError):
        return "fabric"
    if isinstance(exc, ConfigError):
        return "settings"
    if isinstance(exc, SlurmError):
        return "slurm_error"
    return "internal"


def slurm_conf_path() -> Path | None:
    env = os.environ.get("SLURM_CONF")
    if env:
        return Path(env)
    default = Path("/etc/slurm/slurm.conf")
    return default if default.exists() else None


def fabric_sources(settings: Settings) -> list[Path]:
    """Files whose change means the fabric must be read again."""
    paths = []
    for text in (settings.fabric.topology_conf, settings.fabric.fabric_file):
        if text:
            paths.append(Path(text))
    conf = slurm_conf_path()
    if conf is not None:
        paths += [conf, conf.with_name("topology.conf")]
    return paths


def make_client(settings: Settings) -> SlurmClient:
    from slurmpolicy.slurm.connect import connect

    options = {"bin_dir": settings.slurm.bin_dir or None,
               "timeout": settings.slurm.command_timeout}
    try:
        return connect(settings.slurm.adapter, **options)
    except TypeError:  # an adapter that takes no such options
        return connect(settings.slurm.adapter)


def default_fabric_loader(snapshot: Snapshot, settings: Settings) -> Any:
    from slurmpolicy.topology import Fabric

    return Fabric.from_sources(snapshot.nodes, settings.fabric, slurm_conf_path())


def default_planner() -> Planner:
    from slurmpolicy.policy import plan

    return plan


class Daemon:
    """One daemon process. ``run()`` loops until SIGTERM; ``cycle()`` is one pass."""

    def __init__(self, settings: Settings, *, settings_path: str | None = None,
                 client: SlurmClient | None = None, dry_run: bool = False,
                 planner: Planner | None = None, fabric_loader: FabricLoader | None = None,
                 clock: Callable[[], float] = time.time, serve_metrics: bool = True,
                 notices: Sequence[str] = ()) -> None:
        self.settings = settings
        self.settings_path = settings_path
        #: What the settings file sets that its other keys make do nothing
        #: (settings.load_with_notices, of the reading that gave ``settings``):
        #: logged at start, and again for each reload's reading.
        self._notices = tuple(notices)
        self.dry_run = dry_run
        self.clock = clock
        self.client = client
        self.planner = planner
        self.fabric_loader = fabric_loader or default_fabric_loader
        self.serve_metrics = serve_metrics
        self.state_dir = Path(settings.daemon.state_dir)
        self.lock = StateLock(self.state_dir)
        self.notifier = Notifier()
        self.metrics = Metrics()
        self.journal: Journal | None = None
        self.executor: Executor | None = None
        self.lifecycle: Lifecycle | None = None
        self.fabric: Any = None
        self._fabric_key: tuple[Any, ...] | None = None
        #: Why the sources' latest change was refused while the last good fabric is kept
        #: ("" when the fabric in use is the sources' latest).
        self.fabric_refused = ""
        self._stop = StopRequest()
        #: The signal that asked the daemon to stop (0: none, or request_stop()).
        self._stop_signal = 0
        self._reload = False
        self._failures = 0
        #: Failed cycles in a row whose cause is the daemon's own (see EXTERNAL).
        self.own_failures = 0
        self.cycles = 0
        self._last_watchdog = 0.0
        self._last_prune = 0.0
        #: Why the fabric sources were last refused ("" when the fabric in use is current).
        self.fabric_error = ""
        self.lease: Lease | None = None
        self._last_snapshot: Snapshot | None = None
        self._standby_said = ""
        self._lease_said = ""
        self.batch_signals = BatchSignals(client)
        self.doorbell = Doorbell(settings.plugin.doorbell, settings.daemon.preemption_poll)
        #: Looks at the signalled victims so far (whose turn it is, see LOOK_AT),
        #: and what each already woke a cycle for: a victim the cycle left as it
        #: was (Slurm refused its requeue, say) wakes no second one, or the daemon
        #: would cycle every ack_poll instead of every preemption_poll.
        self._looks = 0
        self._woke: set[tuple[int, int, str]] = set()
        #: When the last full plan began (``_monotonic``; None: none yet, or the
        #: settings were reloaded since), and whether the doorbell woke this cycle.
        self._last_full: float | None = None
        self._bell_rang = False
        #: The jobs waiting at the last full plan: a job of a doorbell class
        #: waiting since then gets a full plan at the next cycle, doorbell or not.
        self._waiting_at_full: set[int] = set()
        #: The clock and the wait of ``_sleep`` (tests give fakes).
        self._monotonic: Callable[[], float] = time.monotonic
        self._wait: Callable[[float], bool] = self._stop.wait

    # -------------------------------------------------------------- signals
    # A handler only sets flags: it runs between two bytecodes of the main
    # thread, which may hold a lock at that moment (logging's, or a wait's);
    # taking it here would hang the daemon. The loop logs what it was asked.
    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum
        self._stop.set()

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        self._reload = True
        self._fabric_key = None

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Lock the state directory, open the journal, connect, serve metrics."""
        self.lock.acquire()
        try:
            self.journal = Journal(self.state_dir)
            if self.client is None:
                self.client = make_client(self.settings)
            if self.planner is None:
                self.planner = default_planner()
            self.executor = Executor(self.client, self.journal, self.settings,
                                     dry_run=self.dry_run, clock=self.clock)
            self.executor.should_stop = self._stop.is_set
            if not self.dry_run:
                self.lifecycle = Lifecycle(self.executor, self.settings)
            if not self.dry_run and self.settings.daemon.lease_ttl > 0:
                self.lease = Lease(self.client, self.settings.reservations.name_prefix,
                                   lease_ttl(self.settings), token=self._lease_token(),
                                   user=_user_name())
            if not self.dry_run:
                self.doorbell.prepare(slurm_conf_path())
            if self.serve_metrics and self.settings.metrics.enabled:
                try:
                    self.metrics.serve(self.settings.metrics.bind, self.settings.metrics.port)
                except OSError as exc:
                    raise ConfigError(
                        f"metrics endpoint {self.settings.metrics.bind}:"
                        f"{self.settings.metrics.port}: {exc.strerror}"
                        " - at `$.metrics.port`") from exc
        except BaseException:
            self.close()
            raise

    def _lease_token(self) -> int | None:
        """This state directory's lease token: a restarted daemon knows its lease."""
        assert self.journal is not None
        text = self.journal.get_meta("lease_token")
        if text and text.isdigit():
            return int(text)
        lease = Lease(self.client, "", 1.0)  # draws a token
        self.journal.set_meta("lease_token", str(lease.token))
        return lease.token

    def _release_lease(self) -> None:
        if self.lease is None:
            return
        try:
            self.lease.release(self._last_snapshot)
        except Exception as exc:  # it expires by itself; never block a stop
            log.warning("lease not released: %s", exc)

    def close(self) -> None:
        self.metrics.stop()
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        self.lock.release()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, self._on_hup)

    def run(self, *, once: bool = False) -> int:
        """Cycle until stopped (or once). Returns the exit status."""
        self.open()
        try:
            if threading.current_thread() is threading.main_thread():
                self.install_signal_handlers()
            mode = " (dry run)" if self.dry_run else ""
            self.notifier.ready(f"started{mode}; state {self.state_dir}")
            log.info("slurmpolicy daemon started%s, state %s", mode, self.state_dir)
            self._log_notices()
            status = 0
            while not self.stopping:
                try:
                    result = self.cycle()
                except Exception as exc:
                    # A bug in a planner or adapter must not stop the daemon: the
                    # journal is consistent after every step, so back off and retry.
                    log.exception("cycle %d failed unexpectedly", self.cycles)
                    result = self._finish(self._fail("error", f"internal error: {exc!r}",
                                                     time.monotonic(), "internal"))
                self._prune()
                self.notifier.status(self._status_line(result))
                if once:
                    status = 0 if result.result == "ok" else 1
                    break
                # The doorbell wakes only a daemon whose last cycle went through:
                # back-off and standby keep their own pace.
                self._sleep(self._delay(result), doorbell=result.result == "ok")
            if self._stop_signal:
                log.info("signal %d: the current step is done, stopping", self._stop_signal)
            self._release_lease()
            self.notifier.stopping("stopping; in-flight preemptions stay in the journal")
            log.info("slurmpolicy daemon stopped")
            return status
        finally:
            self.close()
            self.notifier.close()
            self._stop.close()

    def _prune(self) -> None:
        """Once an hour (and at the first cycle): drop old metrics and steps."""
        if self.journal is None or self.dry_run:
            return
        now = time.monotonic()
        if self._last_prune and now - self._last_prune < 3600:
            return
        self._last_prune = now
        try:
            self.journal.prune(self.clock() - self.settings.daemon.keep_history)
            if self.lifecycle is not None:
                self.lifecycle.prune(self.clock())
        except Exception as exc:  # pruning is housekeeping; never fatal
            log.warning("journal not pruned: %s", exc)

    def _status_line(self, r: CycleResult) -> str:
        mode = "dry run, " if self.dry_run else ""
        if r.result == "ok" and r.report is not None:
            scope = " (open preemptions only)" if r.open_only else ""
            return (f"{mode}cycle {self.cycles} ok{scope} in {r.seconds:.2f}s: "
                    f"{r.actions} action(s), "
                    f"{r.report.calls} Slurm call(s), {self._in_flight()} preemption(s) open")
        return f"{mode}cycle {self.cycles} {r.result}: {r.message}"

    def _delay(self, result: CycleResult) -> float:
        interval = self.settings.daemon.interval
        if result.result == "standby" and self.lease is not None:
            # Look often enough to take over within the lease's bound.
            return min(interval, max(1.0, self.lease.ttl / 3))
        if result.result in ("unavailable", "stale", "error"):
            # Bounded exponential back-off: interval, 2x, 4x ... up to max_backoff.
            return min(self.settings.daemon.max_backoff,
                       max(1.0, interval) * 2 ** min(self._failures - 1, 16))
        if self._awaiting_victims():
            # A signalled victim's requeue waits on its ack or deadline: look
            # again soon, so the beneficiary does not wait a whole interval.
            return min(interval, self.settings.daemon.preemption_poll)
        return interval

    def _awaiting_victims(self) -> bool:
        """A victim of an open preemption was signalled and is not requeued yet."""
        if self.journal is None or self.dry_run:
            return False
        awaited = (VictimState.SIGNALLED.value, VictimState.ACKNOWLEDGED.value,
                   VictimState.DEADLINE.value)
        try:
            return any(v["state"] in awaited for v in self.journal.open_victims())
        except Exception as exc:  # the delay is an optimisation; never fatal
            log.warning("open victims not read: %s", exc)
            return False

    def _sleep(self, seconds: float, *, doorbell: bool = False) -> bool:
        """Wait, but wake for SIGTERM and keep the watchdog fed. With ``doorbell``,
        also look at the submit doorbell every ``preemption_poll`` seconds (never
        sooner than that after the last cycle started) and return True, early,
        when it was rung since that cycle started."""
        now = self._monotonic()
        deadline = now + seconds
        bell = self.doorbell if doorbell and self.doorbell.enabled else None
        look = bell.first_look(now) if bell is not None else float("inf")
        # The signalled victims, looked at every ack_poll seconds (one jobs()
        # call a look): an ack seen now spares the victim seconds of training that its
        # requeue would throw away, and the beneficiary waits less.
        ack_poll = self.settings.daemon.ack_poll
        watched = self._signalled_victims() if doorbell and ack_poll > 0 else []
        ack_look = now + ack_poll if watched else float("inf")
        while not self._stop.is_set():
            now = self._monotonic()
            left = deadline - now
            if left <= 0:
                return False
            if bell is not None and now >= look:
                if bell.rung():
                    log.debug("doorbell %s rung: next cycle now, %.0fs early", bell.path, left)
                    self._bell_rang = True
                    self.metrics.doorbell_wakes.inc()
                    return True
                look = now + bell.poll
            if now >= ack_look:
                moved = self._victim_moved(watched)
                if moved:
                    log.debug("%s: next cycle now, %.0fs early", moved, left)
                    self.metrics.ack_wakes.inc()
                    return True
                ack_look = now + ack_poll
            step = min(left, look - now, ack_look - now)
            wd = self.notifier.watchdog_interval
            if wd:
                step = min(step, wd / 2)
                self._feed_watchdog()
            self._wait(step)
        return False

    def _signalled_victims(self) -> list[dict[str, Any]]:
        """The journal's victims signalled and not requeued yet (none in a dry run)."""
        if self.journal is None or self.dry_run or self.client is None:
            return []
        try:
            return [v for v in self.journal.open_victims()
                    if v["state"] == VictimState.SIGNALLED.value]
        except Exception as exc:  # the look is an optimisation; never fatal
            log.warning("open victims not read: %s", exc)
            return []

    def _victim_moved(self, victims: list[dict[str, Any]]) -> str:
        """Why one of ``victims`` lets its preemption move on now ("" when none):
        the test the next plan makes (policy.preemption.victim_moved) on each
        victim's record read from Slurm now, at most ``LOOK_AT`` victims a look
        (in turns), in one ``jobs()`` call; a passed deadline needs no read."""
        client = self.client
        if client is None or not victims:
            return ""
        now = self.clock()
        self._woke = {w for w in self._woke
                      if any(w[:2] == (int(v["job_id"]), int(v["restart_count"]))
                             for v in victims)}
        for v in victims:
            if (v.get("deadline") is not None and now >= float(v["deadline"])
                    and self._wake(v, "deadline")):
                return f"victim {v['job_id']} of {v['preemption_id']}: deadline"
        start = (self._looks * LOOK_AT) % len(victims)
        self._looks += 1
        turn = (victims[start:] + victims[:start])[:LOOK_AT]
        try:
            read = client.jobs([int(v["job_id"]) for v in turn])
        except Exception as exc:  # Slurm busy or away: the next cycle reads it
            log.debug("signalled victims not read: %s", exc)
            return ""
        for v in turn:
            why = victim_moved(read.get(int(v["job_id"])), int(v["restart_count"]),
                               v.get("signalled_at"), v.get("deadline"), now)
            if why and self._wake(v, why):
                return f"victim {v['job_id']} of {v['preemption_id']}: {why}"
        return ""

    def _wake(self, victim: dict[str, Any], why: str) -> bool:
        """Whether ``victim`` moving on (``why``) wakes a cycle: once per reason."""
        key = (int(victim["job_id"]), int(victim["restart_count"]), why)
        if key in self._woke:
            return False
        self._woke.add(key)
        return True

    @property
    def healthy(self) -> bool:
        """False once the daemon's own failures ran UNHEALTHY_AFTER cycles in a row."""
        return self.own_failures < UNHEALTHY_AFTER

    def _feed_watchdog(self) -> None:
        if not self.healthy:
            # Let systemd see a daemon that cannot do its job (WatchdogSec=).
            return
        self.notifier.watchdog()
        self._last_watchdog = time.monotonic()

    def _log_notices(self) -> None:
        """Log the settings file's keys that its other keys make do nothing."""
        for note in self._notices:
            log.warning("%s", note)

    # ---------------------------------------------------------------- cycle
    def _maybe_reload_settings(self) -> None:
        if not self._reload:
            return
        self._reload = False
        log.info("SIGHUP: settings and fabric are read again")
        self.notifier.reloading()
        try:
            fresh, notices = settings_mod.load_with_notices(self.settings_path)
        except ConfigError as exc:
            log.error("settings not reloaded, keeping the last good ones: %s", exc)
            self.metrics.settings_refused(str(exc))
        else:
            if fresh.daemon.state_dir != self.settings.daemon.state_dir:
                log.error("daemon.state_dir changed; it takes effect only on restart")
                # The journal and the lock stay where they are until then.
                fresh = msgspec.structs.replace(
                    fresh, daemon=msgspec.structs.replace(
                        fresh.daemon, state_dir=self.settings.daemon.state_dir))
            if fresh.metrics != self.settings.metrics:
                log.warning("metrics settings changed; they take effect only on restart")
            self.metrics.settings_accepted()
            if (fresh.plugin.doorbell, fresh.daemon.preemption_poll) != (
                    self.settings.plugin.doorbell, self.settings.daemon.preemption_poll):
                self.doorbell = Doorbell(fresh.plugin.doorbell, fresh.daemon.preemption_poll)
                if not self.dry_run:
                    self.doorbell.prepare(slurm_conf_path())
                self.doorbell.cycle_started(self._monotonic())
            self.settings = fresh
            self._notices = tuple(notices)
            self._last_full = None  # the next plan is a full one, under the new settings
            if self.executor is not None:
                self.executor.settings = fresh
            if self.lifecycle is not None:
                self.lifecycle.settings = fresh
            log.info("settings reloaded from %s", self.settings_path or "default path")
            self._log_notices()
        self.notifier.send("READY=1")

    def _fabric_for(self, snapshot: Snapshot) -> Any:
        paths = fabric_sources(self.settings)
        stamps = tuple((str(p), p.stat().st_mtime if p.exists() else None) for p in paths)
        nodes = tuple((n.name, n.gpus, n.features) for n in snapshot.nodes)
        key = (stamps, nodes)
        if self.fabric is None or key != self._fabric_key:
            try:
                fresh = self.fabric_loader(snapshot, self.settings)
            except SlurmPolicyError as exc:  # TopologyError, ConfigError: refused sources
                if self.fabric is None:
                    raise  # nothing to steer with: the cycle fails and says why
                # A source Slurm would refuse too (or a half-written file): keep steering
                # with the last fabric that was read, and say so once per change.
                self._fabric_key = key
                self.fabric_refused = str(exc)
                self.fabric_error = str(exc)
                kept = len(getattr(self.fabric, "hosts", ()))
                log.error("fabric sources changed but were refused; keeping the last good"
                          " fabric (%d hosts): %s", kept, exc)
                self._journal_fabric(f"sources changed but were refused: {exc}; keeping the"
                                     f" last good fabric ({kept} hosts)", "kept last good")
                return self.fabric
            self.fabric = fresh
            self._fabric_key = key
            if self.fabric_refused:
                log.info("fabric sources read again; the refusal is over")
            self.fabric_refused = ""
            self.fabric_error = ""
            log.info("fabric (re)loaded: %d hosts", len(snapshot.nodes))
            # What Slurm also accepts with a warning (a node under two leaves, names
            # slurm.conf lacks, ...): said once per load; counted every cycle.
            warnings = list(getattr(fresh, "warnings", ()))
            for warning in warnings:
                log.warning("fabric: %s", warning)
            self._journal_fabric(
                f"fabric read: {len(getattr(fresh, 'hosts', ()))} hosts, {len(warnings)}"
                " warning(s)" + (f"; first: {warnings[0]}" if warnings else ""), "loaded",
                {"warnings": warnings})
        return self.fabric

    def _journal_fabric(self, reason: str, outcome: str,
                        detail: dict[str, Any] | None = None) -> None:
        """Every (re)load and every refusal is a decision: journalled with its reason."""
        if self.journal is None:
            return
        try:
            self.journal.audit("fabric", reason, outcome, detail=detail, dry_run=self.dry_run)
        except Exception as exc:  # a full disk must not stop the policy
            log.error("fabric decision not journalled: %s", exc)

    def _in_flight(self) -> int:
        if self.journal is None:
            return 0
        try:
            return len(self.journal.preemptions(open_only=True))
        except sqlite3.Error:  # the cycle already said what is wrong with the journal
            return 0

    def cycle(self) -> CycleResult:
        """One pass; never raises for Slurm being away (it backs off instead)."""
        assert self.journal is not None and self.executor is not None
        assert self.client is not None and self.planner is not None
        started = time.monotonic()
        self.cycles += 1
        self.doorbell.cycle_started(self._monotonic())
        self._feed_watchdog()
        self._maybe_reload_settings()
        try:
            snapshot = self.client.snapshot()
        except SlurmUnavailable as exc:
            return self._finish(self._fail("unavailable", f"Slurm does not answer: {exc}",
                                           started, "slurm_unavailable"))
        now = self.clock()
        age = now - snapshot.taken_at
        if age > self.settings.daemon.max_snapshot_age:
            return self._finish(self._fail(
                "stale", f"snapshot is {age:.0f}s old (limit "
                f"{self.settings.daemon.max_snapshot_age:.0f}s); cycle skipped", started,
                "snapshot_stale"))
        self._last_snapshot = snapshot
        if self.lease is not None:
            try:
                active = self.lease.check(snapshot, now)
            except SlurmUnavailable as exc:
                return self._finish(self._fail("unavailable",
                                               f"Slurm does not answer: {exc}", started))
            self._say_lease()
            if not active:
                return self._finish(self._standby(started))
        try:
            # The client may have been made in open(): read scripts through it.
            self.batch_signals.client = self.client
            victims = {int(v["job_id"]) for v in self.journal.open_victims()}
            snapshot = self.batch_signals.enrich(
                with_victims(snapshot, self.client, victims), victims)
            report = self.executor.reconcile(snapshot, now)
            if self.lifecycle is not None:
                # Job ends, timelines, retries and node health (docs/lifecycle.md).
                self.lifecycle.observe(snapshot, now)
            self._account_usage(snapshot, now)
            fabric = self._fabric_for(snapshot)
            intents = self.journal.load_intents(now=now)
            open_only = self._open_only(intents, snapshot)
            looked = self._monotonic()
            plan = self.planner(snapshot, fabric, self.settings, intents, now,
                                clock=time.process_time,
                                **({"open_only": True} if open_only else {}))
            self._bell_rang = False
            if not open_only:
                self._last_full = looked
                self._waiting_at_full = {j.job_id for j in snapshot.jobs if j.is_pending}
            self._feed_watchdog()
            if not self.stopping:
                self.executor.carry_on(snapshot, now)
                self.executor.execute(plan, snapshot, now)
        except SlurmUnavailable as exc:
            return self._finish(self._fail("unavailable",
                                           f"Slurm stopped answering mid-cycle: {exc}", started))
        except sqlite3.Error as exc:
            failure = journal_failure(self.journal.path, exc)
            return self._finish(self._fail("error", f"cycle failed: {failure}", started,
                                           failure.reason))
        except OSError as exc:  # the state directory (fabric files are read as TopologyError)
            failure = journal_failure(self.journal.path, exc)
            return self._finish(self._fail("error", f"cycle failed: {failure}", started,
                                           failure.reason))
        except SlurmPolicyError as exc:
            return self._finish(self._fail("error", f"cycle failed: {exc}", started,
                                           failure_reason(exc)))
        self._failures = 0
        result = CycleResult("ok", time.monotonic() - started, report, len(plan.actions),
                             plan_steps=plan.timings, open_only=open_only)
        return self._finish(result, snapshot, fabric, now)

    def _open_only(self, intents: Intents, snapshot: Snapshot) -> bool:
        """This cycle only moves the open preemptions on: it comes sooner than
        ``daemon.interval`` after the last full plan (a look at awaited victims,
        every ``daemon.preemption_poll`` or at an ack), no doorbell rang, and no
        job of a doorbell class came to wait since that plan. Priorities, site
        factors, new preemptions and reservations wait for the next full plan,
        at most ``interval`` after the last: a full plan walks every waiting
        job, and these cycles come every few seconds."""
        if self._last_full is None or self._bell_rang or not intents.open_preemptions():
            return False
        if self._monotonic() - self._last_full >= self.settings.daemon.interval:
            return False
        urgent = doorbell_classes(self.settings)
        if urgent:
            seen = self._waiting_at_full
            for job in snapshot.jobs:
                if (job.is_pending and job.job_id not in seen
                        and class_of(self.settings, job).name in urgent):
                    return False
        return True

    def _say_lease(self) -> None:
        """Keep the lease's state in the journal for `daemon status` (on change only)."""
        assert self.lease is not None and self.journal is not None
        said = self.lease.status.split(",")[0]
        if said != self._lease_said:
            self._lease_said = said
            try:
                self.journal.set_meta("lease_status", said)
            except Exception as exc:  # for people only; never fatal
                log.warning("lease status not written: %s", exc)

    def _standby(self, started: float) -> CycleResult:
        """Another daemon holds the lease: change nothing; say so once."""
        assert self.lease is not None
        self._failures = 0
        status = self.lease.status
        said = status.split(",")[0]
        if said != self._standby_said:
            log.warning("%s", status)
            self._standby_said = said
        return CycleResult("standby", time.monotonic() - started, None, 0, status)

    def _fail(self, kind: str, message: str, started: float,
              reason: str = "slurm_unavailable") -> CycleResult:
        self._failures += 1
        if reason in EXTERNAL:
            log.warning("%s", message)
        else:
            log.error("%s", message)
        return CycleResult(kind, time.monotonic() - started, None, 0, message, reason)

    def _observe_failure(self, result: CycleResult) -> None:
        """Count the daemon's own failures in a row; say when the watchdog starves."""
        if not result.reason or result.reason in EXTERNAL:
            self.own_failures = 0 if not result.reason else self.own_failures
            return
        self.own_failures += 1
        if self.own_failures == UNHEALTHY_AFTER:
            log.error("%d cycles in a row failed (%s); no longer feeding the systemd"
                      " watchdog", UNHEALTHY_AFTER, result.reason)
        self.metrics.healthy.set(1 if self.healthy else 0)

    def _finish(self, result: CycleResult, snapshot: Snapshot | None = None,
                fabric: Any = None, now: float | None = None) -> CycleResult:
        assert self.journal is not None
        figures = []
        if snapshot is not None:
            figures = snapshot_figures(snapshot, self.settings, now or self.clock(), fabric)
            if self.lifecycle is not None:
                try:
                    figures += self.lifecycle.figures(now or self.clock())
                except Exception as exc:  # figures must never stop the policy
                    log.error("lifecycle figures not computed: %s", exc)
            try:
                figures += checkpoint_figures(self.journal.checkpoint_outcomes(
                    since=(now or self.clock()) - CHECKPOINT_WINDOW))
            except Exception as exc:  # figures must never stop the policy
                log.warning("checkpoint figures not computed: %s", exc)
        if self.fabric is not None:
            figures += [
                ("slurmpolicy_fabric_warnings", {},
                 float(len(getattr(self.fabric, "warnings", ())))),
                ("slurmpolicy_fabric_refused", {}, 1.0 if self.fabric_refused else 0.0)]
        # Where the plan's time went, step by step: on a large cluster the
        # step that grows is the one to look at.
        figures += [("slurmpolicy_plan_seconds", {"step": step}, seconds)
                    for step, seconds in result.plan_steps.items()]
        if result.reason:
            self._observe_failure(result)
        in_flight = self._in_flight()
        history = self.metrics.observe_cycle(result=result.result, seconds=result.seconds,
                                             report=result.report,
                                             in_flight=in_flight, figures=figures,
                                             failure=result.reason)
        try:
            self.journal.record_metrics(history, at=self.clock())
        except Exception as exc:  # a full disk must not stop the policy
            if not result.reason:
                # The journal cannot record what the daemon does: a failed cycle.
                failure = journal_failure(self.journal.path, exc)
                log.error("cycle failed: metrics history not written: %s", failure)
                result.result, result.reason, result.message = "error", failure.reason, str(
                    failure)
                self.metrics.failures.labels(reason=failure.reason).inc()
                self._observe_failure(result)
        if not result.reason and self.own_failures:
            self.own_failures = 0
            self.metrics.healthy.set(1)
            self._feed_watchdog()  # able again: let systemd know at once
        return result

    def _account_usage(self, snapshot: Snapshot, now: float) -> None:
        """Carry decayed GPU-second usage per account forward to ``now``."""
        assert self.journal is not None
        usage, usage_at = self.journal.usage()
        half_life = self.settings.fairshare.half_life
        # The policy's own arithmetic, so that planner and journal agree.
        fresh = advance_usage(usage, usage_at, list(snapshot.running()), now, half_life)
        self.journal.set_usage(fresh, now)
        self.journal.forget_jobs(j.job_id for j in snapshot.jobs)
        # Each job id's identity (cluster, first submit): a reused id starts clean.
        reused = self.journal.note_jobs(snapshot.cluster_name, snapshot.jobs, now)
        if reused:
            log.info("job id(s) %s now name other jobs; their earlier records stay with "
                     "the old ones", ", ".join(map(str, reused[:10])))


def _user_name() -> str:
    """The daemon's own user: the lease reservation names it (Slurm wants a user)."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return "root"


def lease_ttl(settings: Settings) -> float:
    """The lease's time to live: ``daemon.lease_ttl``, but at least three cycles.

    The holder renews once per cycle at most; a shorter lease would lapse
    between two of its cycles and be taken over while it is alive.
    """
    return max(settings.daemon.lease_ttl, 3 * settings.daemon.interval)
