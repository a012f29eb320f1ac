"""The event-driven simulated cluster: Slurm's scheduler, preemption and the
checkpoint model, replayed through simulated time.

Owns the simulated Slurm (multifactor priority with age and fair share,
partition priority tiers, the main scheduler on events, EASY backfill on time
limits every ``bf_interval``, topology/tree best-effort placement,
reservations, site factors, begin times, signals and requeue), the job-side
checkpoint model, and the three modes:

- ``slurm-requeue``: Slurm alone, preempt/partition_prio with
  PreemptMode=REQUEUE and no grace: victims die at once and lose the work
  since their last periodic checkpoint.
- ``slurm-grace``: the same with a partition GraceTime; victims get SIGTERM,
  save and exit; a save longer than the grace is cut off and loses the work
  since the last periodic checkpoint.
- ``slurmpolicy``: Slurm's own preemption off, one partition; the daemon's
  ``plan()`` is called every ``daemon.interval`` seconds (only when something
  changed), and while a signalled victim awaits its requeue, at the first of
  the daemon's looks at the victims (every ``daemon.ack_poll`` seconds; its
  cycles every ``daemon.preemption_poll`` when that is 0) that sees its ack,
  its end or its deadline (the driver decides which cycles plan in full and
  which only move open preemptions on: sim/driver.py); its actions
  are applied with Slurm's semantics and ``apply_to_intents`` keeps the
  intents, as the daemon's journal would.

The loop is a heap of events, O(log n) each; scheduling passes stop early
(no free GPU, a job shape that already failed this pass) so that a 50,000-job
replay stays in minutes. Everything is ordered by (time, sequence), so a seed
gives the same result every time.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from time import process_time
from typing import Any, Protocol

from slurmpolicy.errors import ReplayStalled
from slurmpolicy.settings import Settings
from slurmpolicy.sim.cluster import Hosts
from slurmpolicy.sim.trace import TraceJob


class Daemon(Protocol):
    """What the simulated Slurm asks of the daemon driving it (slurmpolicy mode);
    :class:`slurmpolicy.sim.driver.PolicyDriver` is the one implementation."""

    awaiting: dict[int, tuple[int, float, float]]
    #: CPU seconds in each step of plan() so far (RawResult.plan_steps).
    plan_steps: dict[str, float]

    def needs_cycle(self) -> bool: ...
    def cpu_parts(self) -> dict[str, float]: ...
    def should_plan(self) -> bool: ...
    def poll_due(self) -> bool: ...
    def may_call_off(self) -> bool: ...
    def cycle(self) -> None: ...
    def submitted(self, job: SimJob) -> None: ...
    def enqueued(self, job: SimJob) -> None: ...
    def job_ended(self, job: SimJob) -> None: ...


class Mode(StrEnum):
    SLURMPOLICY = "slurmpolicy"
    SLURM_REQUEUE = "slurm-requeue"
    SLURM_GRACE = "slurm-grace"


@dataclass(frozen=True, slots=True)
class SlurmModel:
    """Slurm's configuration as simulated; each field names the slurm.conf
    parameter it stands for (defaults: Slurm's own, src/plugins/sched/backfill/backfill.c
    and slurm.conf(5) of Slurm 25.11)."""

    #: SchedulerParameters=bf_interval: seconds between backfill passes (30).
    bf_interval: float = 30.0
    #: SchedulerParameters=bf_max_job_test: jobs one backfill pass tests (500);
    #: every tested job that cannot start now gets a reservation.
    bf_max_job_test: int = 500
    #: SchedulerParameters=bf_window: how far ahead backfill plans (1440 min);
    #: a job whose earliest start lies beyond it gets no reservation.
    bf_window: float = 86400.0
    #: SchedulerParameters=bf_resolution: time granularity of the plan (60 s);
    #: running jobs' ends are rounded up to it, as backfill.c does.
    bf_resolution: float = 60.0
    #: SchedulerParameters=default_queue_depth: jobs the event-triggered main
    #: scheduler looks at (100).
    queue_depth: int = 100
    #: PriorityCalcPeriod (5 min).
    priority_calc_period: float = 300.0
    #: PriorityWeightAge / PriorityMaxAge.
    weight_age: int = 1000
    max_age: float = 7 * 86400.0
    #: PriorityWeightFairshare / PriorityDecayHalfLife.
    weight_fairshare: int = 10_000
    fairshare_half_life: float = 7 * 86400.0
    #: GraceTime of the preemptable partitions (slurm-grace mode). 150 s covers
    #: the longest save of the trace rules (120 s): no victim is cut off.
    grace_time: float = 150.0
    #: Seconds from a victim's exit to its GPUs being scheduled again (epilog
    #: and requeue; measured 1 s on Slurm 22.05).
    requeue_latency: float = 1.0
    #: Partition PriorityTier of each class in the baselines.
    tiers: tuple[tuple[str, int], ...] = (("production", 3), ("research", 2), ("experimental", 1))

    def next_backfill(self, t: float) -> float:
        """The first backfill pass at or after ``t`` (passes at multiples of bf_interval).

        preempt/partition_prio preempts from the backfill pass: backfill.c tests
        each job with its preemptee candidates and starts it by preempting them.
        So Slurm's preemption latency is the wait for the next pass (0 to
        bf_interval): 0-1 s with bf_interval=1 on the dev cluster; the 53 s we
        measured on a default Slurm 22.05 is longer than this model gives, so
        the model favours Slurm."""
        k = math.ceil(t / self.bf_interval - 1e-9)
        return max(t, k * self.bf_interval)


# Event kinds, in the order they are handled at the same instant.
(_END, _EXIT, _SAVED, _ARRIVE, _PREEMPT, _RECALC, _DAEMON, _MAIN, _BACKFILL, _SAMPLE,
 _MARK, _POLL, _WAKE) = range(13)

PENDING, RUNNING, DONE = 0, 1, 2

#: Simulated seconds with every job arrived, nothing running and no start,
#: after which a replay ends as stalled (its periodic events never end).
STALL_AFTER = 7 * 86400.0


def _roundup(t: float, res: float) -> float:
    """``t`` rounded up to a multiple of ``res`` (backfill.c's ROUNDUP of end times)."""
    return math.ceil(t / res - 1e-9) * res if res > 0 else t


#: clear_from's cache key: host, time, limit, reservations the job may use, claims so far.
_ClearKey = tuple[int, float, float, frozenset[str], int]
#: A queue key's job id.
_last = itemgetter(-1)
#: No reservation names.
_NO_NAMES: frozenset[str] = frozenset()


def _merged(*lists: list[tuple[float, float]] | None) -> list[tuple[float, float]]:
    """Claims of several sorted lists, in one list sorted by start."""
    present = [c for c in lists if c]
    if len(present) <= 1:
        return present[0] if present else []
    return sorted(c for cl in present for c in cl)


class _FreeSteps:
    """Free GPUs of each host over time in one backfill pass, as running jobs
    end by their expected ends (rounded up to bf_resolution): per host a short
    list of (time, free GPUs from then on)."""

    def __init__(self, sim: Simulator, now: float, res: float) -> None:
        self.now = now
        self.res = res
        free = sim.hosts.free
        # (host, end, GPUs) of every running job's hosts, sorted once.
        ends: list[tuple[int, float, int]] = []
        expected_end = sim._expected_end
        for r in sim.running.values():
            end = _roundup(expected_end(r), res)
            if end < now:
                end = now
            ends.extend((h, end, g) for h, g in r.alloc)
        ends.sort()
        self.steps: list[list[tuple[float, int]]] = [[(now, f)] for f in free]
        steps = self.steps
        row: list[tuple[float, int]] = []
        last = -1
        for h, t, g in ends:
            if h != last:
                row, last = steps[h], h
            f = row[-1][1] + g
            if t == row[-1][0]:
                row[-1] = (t, f)
            else:
                row.append((t, f))
        self._ready: dict[int, list[float]] = {}
        self._order: dict[int, list[int]] = {}
        #: Hosts whose steps or planned claims changed in this pass, in order.
        self.changed: list[int] = []
        #: _earliest's one-node answers by shape: (heap, value by host, how
        #: much of ``changed`` they have seen).
        self.one_node: dict[tuple[int, float, frozenset[str]],
                            tuple[list[tuple[float, int, int]],
                                  dict[int, tuple[float, int, int]], int]] = {}

    def started(self, j: SimJob, end: float) -> None:
        """A job started in this pass: its GPUs are busy until ``end``."""
        for h, g in j.alloc:
            row = self.steps[h]
            new = [(t, f - g) if t < end else (t, f) for t, f in row]
            if all(t != end for t, _ in row):
                before = [f for t, f in row if t < end]
                new.append((end, before[-1] + 0 if before else 0))
                new.sort()
            self.steps[h] = new
            self.changed.append(h)
        self._ready.clear()
        self._order.clear()

    def free_at(self, h: int, t: float) -> int:
        f = 0
        for st, sf in self.steps[h]:
            if st > t:
                break
            f = sf
        return f

    def ready(self, gpn: int) -> list[float]:
        """Per host, the first time it has ``gpn`` GPUs free (inf: never)."""
        hit = self._ready.get(gpn)
        if hit is None:
            hit = []
            for row in self.steps:
                t = math.inf
                for st, sf in row:
                    if sf >= gpn:
                        t = st
                        break
                hit.append(t)
            self._ready[gpn] = hit
        return hit

    def order(self, gpn: int) -> list[int]:
        """Hosts in the order they first have ``gpn`` GPUs free (ties: by index)."""
        hit = self._order.get(gpn)
        if hit is None:
            ready = self.ready(gpn)
            hit = sorted(range(len(ready)), key=ready.__getitem__)
            self._order[gpn] = hit
        return hit


class SimJob:
    """A job's mutable state in the replay."""

    __slots__ = (
        "ack",
        "alloc",
        "base",
        "begin_time",
        "benefit_at",
        "cap",
        "ckpt",
        "eligible",
        "end",
        "first_start",
        "floor",
        "gpus_now",
        "grace_idle",
        "grace_idle_unused",
        "id",
        "key",
        "lost_after_ack",
        "lost_work",
        "marked",
        "origin",
        "overhead",
        "pend_since",
        "pending_total",
        "preempt_asked",
        "preempting",
        "preemptions",
        "prio",
        "rate",
        "restarts",
        "resv",
        "run_start",
        "runs",
        "saving",
        "shrinks",
        "signal_at",
        "site_factor",
        "smaller_starts",
        "spec",
        "state",
        "tier",
        "ver",
    )

    def __init__(self, spec: TraceJob, tier: int) -> None:
        self.spec = spec
        self.id = spec.job_id
        self.state = PENDING
        self.tier = tier
        #: Progress (seconds of work) safely in the latest checkpoint.
        self.ckpt = 0.0
        #: Progress at ``origin``; progress grows 1:1 with time after ``origin``
        #: (restores and saves push ``origin`` later: no progress meanwhile).
        self.base = 0.0
        self.origin = 0.0
        #: Progress being written by a save in flight, else None.
        self.saving: float | None = None
        self.alloc: list[tuple[int, int]] = []
        self.run_start = 0.0
        #: Bumped on start/stop so that stale events of an earlier run are ignored.
        self.ver = 0
        self.eligible = spec.submit
        self.pend_since = spec.submit
        self.pending_total = 0.0
        self.first_start: float | None = None
        self.end: float | None = None
        self.preemptions = 0
        self.lost_work = 0.0
        #: Of ``lost_work``, what it did between acknowledging its save and the
        #: requeue: checkpoint-first preemption's own loss (its victims train on
        #: until the daemon sees the ack), where Slurm's victims exit.
        self.lost_after_ack = 0.0
        #: Seconds of GPU time spent restoring and saving for preemptions.
        self.overhead = 0.0
        self.site_factor = 0
        self.begin_time: float | None = None
        self.resv: str | None = None
        #: Sim time of the last acknowledged checkpoint (the job's comment).
        self.ack: float | None = None
        self.restarts = 0
        self.prio = 0
        self.key: tuple[Any, ...] = ()
        #: True between a preemption signal/kill and the job's exit.
        self.preempting = False
        #: The daemon's mark in the job's admin_comment (its preemption's id)
        #: while that preemption is open: the job requeues itself after its save.
        self.marked: str | None = None
        self.signal_at: float | None = None
        self.preempt_asked = False
        self.runs = 0
        #: Seconds this job spent signalled and not working for itself: from a
        #: preemption signal to its save's end, or to its requeue (x GPUs: the
        #: GPU time idle while a victim is in grace).
        self.grace_idle = 0.0
        #: Of ``grace_idle``, the saves of signals that ended in no requeue (the
        #: preemption was called off, or the job ended): saves nobody needed.
        self.grace_idle_unused = 0.0
        #: When victims were first signalled for this job (it is a beneficiary).
        self.benefit_at: float | None = None
        # Elastic jobs (spec.min_nodes): the GPUs of this run, the most nodes the
        # next start may take (a shrink lowers it), and progress per second
        # (nodes now / nodes asked: work is counted at the full size).
        self.gpus_now = spec.gpus
        self.cap = spec.nodes
        self.floor = spec.min_nodes or spec.nodes
        self.rate = 1.0
        self.shrinks = 0
        self.smaller_starts = 0

    def progress(self, t: float) -> float:
        return (self.base + max(0.0, t - self.origin) * self.rate if self.state == RUNNING
                else self.ckpt)

    def durable(self, t: float) -> float:
        """Progress in the latest checkpoint at ``t`` (periodic ones included)."""
        p = self.progress(t)
        interval = self.spec.ckpt_interval
        periodic = math.floor(p / interval) * interval if interval > 0 else 0.0
        return max(self.ckpt, min(periodic, p))


@dataclass(frozen=True, slots=True)
class SimReservation:
    name: str
    hosts: tuple[int, ...]
    start: float
    end: float
    job_id: int
    #: Users= of the reservation whose other jobs may land in it. A starvation
    #: reservation is MAGNETIC with the beneficiary's user; a preemption's is
    #: bound to the beneficiary job alone (named on it, not MAGNETIC:
    #: daemon/executor.py PREEMPTION_FLAGS), so it opens to no one else.
    users: tuple[str, ...] = ()
    #: Named on its job (``scontrol update job ReservationName=``): Slurm
    #: starts that job inside it or not at all, until the name is taken off.
    bound: bool = False


@dataclass(slots=True)
class Trace:
    """Series sampled through the replay, for plots."""

    t: list[float] = field(default_factory=list)
    allocation: list[float] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RawResult:
    """What a replay leaves behind; metrics.summarize turns it into figures."""

    mode: str
    jobs: list[SimJob]
    hosts: Hosts
    busy_gpu_seconds: float
    busy_until_last_arrival: float
    last_arrival: float
    makespan: float
    series: Trace
    multi_node: int
    multi_in_leaf: int
    multi_in_nvlink: int
    plan_calls: int
    wall_seconds: float = 0.0
    #: slurmpolicy mode: of ``plan_calls``, those that only moved open
    #: preemptions on (``plan(open_only=True)``).
    open_only_plans: int = 0
    #: CPU seconds of the replay (the build machine is shared: wall time varies).
    cpu_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    #: CPU seconds by part (``backfill``; slurmpolicy mode: ``snapshot`` and
    #: ``plan``, the daemon's reading of Slurm and its ``plan()`` calls): where a
    #: replay's time goes, for the speed targets.
    cpu_parts: dict[str, float] = field(default_factory=dict)
    #: slurmpolicy mode: the ``plan`` part by step of plan() (``Plan.timings``
    #: summed: the Context's indexes, priorities, free GPUs, open and new
    #: preemptions, reservations, deferral, site factors).
    plan_steps: dict[str, float] = field(default_factory=dict)
    events: int = 0
    #: slurmpolicy mode: how many actions of each kind were applied.
    actions: dict[str, int] = field(default_factory=dict)
    #: Per beneficiary start: seconds from its victims' signal to its start.
    benefit_delays: list[float] = field(default_factory=list)
    #: Backfill passes run, jobs tested and reservations planned in them.
    backfill_passes: int = 0
    backfill_reservations: int = 0
    #: slurmpolicy mode: cycles whose plan needed more Slurm calls than
    #: ``daemon.max_slurm_calls_per_cycle``, and the actions left for later.
    over_budget_cycles: int = 0
    deferred_actions: int = 0
    #: Jobs of this many GPUs or more count as large (``reservations.large_job_gpus``).
    large_gpus: int = 16


class Simulator:
    """One replay of one trace in one mode."""

    def __init__(
        self, trace: Sequence[TraceJob], hosts: Hosts, mode: Mode | str,
        settings: Settings | None = None, slurm: SlurmModel | None = None,
        fabric: Any = None, sample_interval: float = 3600.0,
        progress: Callable[[float, float], None] | None = None,
        daemon: Callable[[Simulator], Daemon] | None = None,
    ) -> None:
        self.mode = Mode(mode)
        self.settings = settings or Settings()
        self.slurm = slurm or SlurmModel()
        self.hosts = hosts
        self.fabric = fabric
        tiers = dict(self.slurm.tiers)
        baseline = self.mode is not Mode.SLURMPOLICY
        self.jobs = [SimJob(spec, tiers.get(spec.job_class, 1) if baseline else 1)
                     for spec in trace]
        self.by_id = {j.id: j for j in self.jobs}
        if len(self.by_id) != len(self.jobs):
            raise ValueError("trace has duplicate job ids")
        big = max((j.spec.gpus for j in self.jobs), default=0)
        if big > hosts.total_gpus:
            raise ValueError(f"a job asks for {big} GPUs; the cluster has {hosts.total_gpus}")
        accounts = sorted({j.spec.account for j in self.jobs})
        self.usage = {a: 0.0 for a in accounts}
        self.share = 1.0 / max(1, len(accounts))
        self.run_gpus_by_acct = {a: 0 for a in accounts}
        self.fs_factor = {a: 1.0 for a in accounts}
        self.usage_at = 0.0
        self.now = 0.0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self.queue: list[tuple[Any, ...]] = []  # sorted keys; key[-1] is the job id
        self._main_at: float | None = None
        self._poll_at: float | None = None
        #: The daemon's doorbell wake (see :meth:`ring`), and when its last cycle began.
        self._wake_at: float | None = None
        self._cycle_at = 0.0
        #: A job gave GPUs back since the daemon's last cycle (ended or requeued).
        self.freed = False
        self._bf_changed = True
        self.running: dict[int, SimJob] = {}
        self.reservations: dict[str, SimReservation] = {}
        self.busy = 0
        self._busy_acc = 0.0
        self._busy_t = 0.0
        self.series = Trace()
        self.sample_interval = sample_interval
        self.multi = [0, 0, 0]
        #: When a job last started (the stall check, see STALL_AFTER).
        self._last_start = 0.0
        self.pending_count = 0
        self.finished = 0
        self.changed = True
        self.plan_calls = 0
        self.open_only_plans = 0
        #: CPU seconds spent in backfill passes (RawResult.cpu_parts).
        self.bf_cpu = 0.0
        self.events = 0
        self._progress = progress
        self.benefit_delays: list[float] = []
        self._resv_version = 0
        #: _reservation_claims' answers by the reservations that claim nothing
        #: against a job, and its index of those by user and by job.
        self._resv_claims: dict[tuple[frozenset[str], tuple[float, int]],
                                dict[int, list[tuple[float, float]]]] = {}
        self._resv_index: tuple[tuple[float, int], dict[str, frozenset[str]],
                                dict[int, frozenset[str]]] | None = None
        #: Jobs whose Slurm-visible record changed since the daemon's last
        #: snapshot (state, run, restarts, priority, site factor, ack, begin
        #: time, reservation): the driver rebuilds only these pending records.
        self.touched: set[int] = set()
        #: Waiting jobs given a new priority by PriorityCalcPeriod alone since
        #: that snapshot (every one of them each time): the driver sets the
        #: priority of those it did not rebuild. (Kept in slurmpolicy mode
        #: alone: at x3 the baselines' recalculations would add the whole
        #: queue to it for no reader.)
        self.repriced: set[int] = set()
        #: Jobs that ended since the daemon's last cycle (its journal forgets them).
        self.ended: list[int] = []
        #: clear_from results of the current backfill pass (see _earliest).
        self._clear_cache: dict[_ClearKey, float] = {}
        #: Shapes that found no start within bf_window in the current pass (see _earliest).
        self._hopeless: list[tuple[int, int, float, frozenset[str]]] = []
        #: Shapes that found no hosts to start on now in the current pass (see _fits_nowhere).
        self._no_fit: list[tuple[int, int, float, frozenset[str]]] = []
        self.bf_passes = 0
        self.bf_reservations = 0
        #: The shortest time limit of the trace: a host is of use to a backfill
        #: start only when it is free of reservations for at least this long.
        self.min_limit = min((j.spec.time_limit for j in self.jobs), default=0.0)
        self.driver: Daemon | None = None
        if self.mode is Mode.SLURMPOLICY:
            if daemon is None:
                raise ValueError("the slurmpolicy mode needs its daemon: "
                                 "use slurmpolicy.sim.replay() or pass daemon=PolicyDriver")
            self.driver = daemon(self)

    # --- events ---------------------------------------------------------------------
    def push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, a, b))

    def run(self) -> RawResult:
        for j in self.jobs:
            self.push(j.spec.submit, _ARRIVE, j.id)
        last_arrival = max((j.spec.submit for j in self.jobs), default=0.0)
        self.push(0.0, _RECALC)
        self.push(0.0, _SAMPLE)
        self.push(self.slurm.bf_interval, _BACKFILL)
        if self.driver is not None:
            self.push(0.0, _DAEMON)
        self.push(last_arrival, _MARK)
        busy_at_last_arrival = -1.0
        total = len(self.jobs)
        report_every = max(1, total // 200)
        handlers: dict[int, Callable[[int, int], None]] = {
            _ARRIVE: self._on_arrive, _END: self._on_end, _EXIT: self._on_exit,
            _SAVED: self._on_saved, _PREEMPT: self._on_preempt_check,
        }
        ev = self._events
        while ev and self.finished < total:
            t, kind, _, a, b = heapq.heappop(ev)
            self.events += 1
            self.now = t
            if (kind == _SAMPLE and not self.running and t > last_arrival
                    and t - self._last_start > STALL_AFTER):
                self._stalled()
            if kind == _MAIN:
                self._main_at = None
                self.schedule(backfill=False)
            elif kind == _BACKFILL:
                if self._bf_changed and self.pending_count:
                    t0 = process_time()
                    self.backfill()
                    self.bf_cpu += process_time() - t0
                self.push(t + self.slurm.bf_interval, _BACKFILL)
            elif kind == _RECALC:
                self._recalc()
                self.push(t + self.slurm.priority_calc_period, _RECALC)
            elif kind == _MARK:
                self._account(t)
                busy_at_last_arrival = self._busy_acc
            elif kind == _SAMPLE:
                self._sample()
                self.push(t + self.sample_interval, _SAMPLE)
            elif kind == _DAEMON:
                assert self.driver is not None
                self._cycle_at = t
                if self.changed or self.driver.needs_cycle():
                    self.changed = False
                    self.driver.cycle()
                self.push(t + self.settings.daemon.interval, _DAEMON)
                self._schedule_poll(t)
            elif kind == _POLL:
                # daemon.ack_poll (or preemption_poll): the daemon's looks at a
                # signalled victim awaiting its requeue. Planned here only when
                # one can move on (ack seen, deadline passed, victim gone), or
                # at its short cycle (every preemption_poll) after GPUs were
                # given back when a beneficiary may fit on them (it lets its
                # preemption go, and its victims' marks come off): the other
                # looks start no cycle, and its short cycles would plan nothing
                # new for it.
                self._poll_at = None
                assert self.driver is not None
                if self.driver.poll_due() or (
                        self.freed and t - self._cycle_at
                        >= self.settings.daemon.preemption_poll - 1e-9
                        and self.driver.may_call_off()):
                    self._cycle_at = t
                    self.changed = False
                    self.driver.cycle()
                self._schedule_poll(t)
            elif kind == _WAKE:
                # The doorbell rang: the daemon's next check saw it and began a
                # cycle, which plans when the ringing job still waits.
                self._wake_at = None
                self._cycle_at = t
                assert self.driver is not None
                if self.driver.should_plan():
                    self.changed = False
                    self.driver.cycle()
                    self._schedule_poll(t)
            else:
                handlers[kind](a, b)
                if (self._progress is not None and kind == _END
                        and self.finished % report_every == 0):
                    self._progress(self.finished, total)
        self._account(self.now)
        if busy_at_last_arrival < 0:
            busy_at_last_arrival = self._busy_acc
        return RawResult(
            mode=str(self.mode), jobs=self.jobs, hosts=self.hosts,
            busy_gpu_seconds=self._busy_acc, busy_until_last_arrival=busy_at_last_arrival,
            last_arrival=last_arrival, makespan=self.now, series=self.series,
            multi_node=self.multi[0], multi_in_leaf=self.multi[1], multi_in_nvlink=self.multi[2],
            plan_calls=self.plan_calls, open_only_plans=self.open_only_plans,
            events=self.events,
            benefit_delays=self.benefit_delays, backfill_passes=self.bf_passes,
            backfill_reservations=self.bf_reservations,
            cpu_parts={"backfill": self.bf_cpu, **(self.driver.cpu_parts()
                                                    if self.driver is not None else {})},
            plan_steps=dict(self.driver.plan_steps) if self.driver is not None else {},
            large_gpus=self.settings.reservations.large_job_gpus,
        )

    def _stalled(self) -> None:
        """Nothing runs, every job has arrived and none started for
        STALL_AFTER: the periodic events would go on for ever. End the replay
        with the jobs left and what they ask for."""
        left = [j for j in self.jobs if j.state == PENDING]
        if any(j.begin_time is not None and j.begin_time > self.now for j in left):
            return  # a begin time ahead: something is still due to change
        shown = ", ".join(f"{j.id} ({j.spec.job_class}, {j.spec.nodes}x{j.spec.gpus_per_node}"
                          f" GPUs{', in queue' if self._queued(j) else ', lost from the queue'})"
                          for j in left[:5])
        raise ReplayStalled(
            f"{self.mode} replay stalled at day {self.now / 86400:.1f}: {len(left)} job(s) "
            f"never started and nothing has run for {STALL_AFTER / 86400:.0f} days: {shown}"
            f"{' ...' if len(left) > 5 else ''}")

    def _queued(self, j: SimJob) -> bool:
        return any(key is j.key for key in self.ordered())

    def _schedule_poll(self, t: float) -> None:
        # The daemon looks at the signalled victims every ack_poll seconds and
        # cycles at once when one moved (daemon/loop.py); without the looks,
        # its short cycles every preemption_poll see it.
        d = self.settings.daemon
        poll = d.ack_poll or d.preemption_poll
        if (self._poll_at is None and self.driver is not None and self.driver.awaiting
                and poll < d.interval):
            self._poll_at = t + poll
            self.push(self._poll_at, _POLL)

    def ring(self) -> None:
        """job_submit.lua rang the daemon's doorbell (``plugin.doorbell``). The
        daemon looks at it every ``daemon.preemption_poll`` seconds after its
        last cycle began and starts a cycle at the first look after the ring
        (daemon/doorbell.py: never sooner than one poll after the last cycle)."""
        poll = self.settings.daemon.preemption_poll
        if self.driver is None or poll <= 0:
            return
        looks = max(1, math.ceil((self.now - self._cycle_at) / poll - 1e-9))
        t = self._cycle_at + looks * poll
        if self._wake_at is None or t < self._wake_at:
            self._wake_at = t
            self.push(t, _WAKE)

    def kick(self, delay: float = 0.0) -> None:
        """Ask for a main scheduler pass (coalesced), as Slurm does on job events."""
        t = self.now + delay
        self._bf_changed = True
        self.changed = True
        if self._main_at is None or t < self._main_at:
            self._main_at = t
            self.push(t, _MAIN)

    # --- accounting ---------------------------------------------------------------
    def _account(self, t: float) -> None:
        if t > self._busy_t:
            self._busy_acc += self.busy * (t - self._busy_t)
            self._busy_t = t

    def _sample(self) -> None:
        s = self.series
        s.t.append(self.now)
        s.allocation.append(self.busy / self.hosts.total_gpus)
        s.fragmentation.append(self.hosts.fragmentation_index())
        s.pending.append(self.pending_count)

    # --- priority -----------------------------------------------------------------
    def _recalc(self) -> None:
        """PriorityCalcPeriod: decay usage, recompute fair share and all pending priorities."""
        dt = self.now - self.usage_at
        if dt > 0:
            decay = 0.5 ** (dt / self.slurm.fairshare_half_life)
            for a in self.usage:
                self.usage[a] = self.usage[a] * decay + self.run_gpus_by_acct[a] * dt
            self.usage_at = self.now
        total = sum(self.usage.values())
        for a, u in self.usage.items():
            self.fs_factor[a] = 2.0 ** (-(u / total) / self.share) if total > 0 else 1.0
        # _set_key for every waiting job (each one's current key: set_site_factor
        # moves keys in place), unrolled: the same sums, with each account's
        # fair-share points once (the whole queue, every PriorityCalcPeriod).
        sm = self.slurm
        now, max_age, w_age = self.now, sm.max_age, sm.weight_age
        fs_points = {a: sm.weight_fairshare * f for a, f in self.fs_factor.items()}
        # A job that waited PriorityMaxAge or more has the whole age factor
        # (age 1.0): its first two terms are its account's, summed once.
        aged_out = {a: w_age * 1.0 + p for a, p in fs_points.items()}
        by_id = self.by_id
        keys = []
        for key in self.queue:
            j = by_id[key[-1]]
            if j.state == PENDING and j.key is key:
                waited = now - j.eligible
                if waited >= max_age:
                    prio = int(aged_out[j.spec.account] + j.site_factor)
                else:
                    prio = int(w_age * max(0.0, waited / max_age) + fs_points[j.spec.account]
                               + j.site_factor)
                j.prio = prio
                j.key = key = (key[0], -prio, key[2], key[3])
                keys.append(key)
        if self.driver is not None:  # only the daemon's snapshot reads it
            self.repriced.update(map(_last, keys))
        keys.sort()
        self.queue = keys

    def _set_key(self, j: SimJob) -> None:
        """``j``'s priority and queue key now (:meth:`_recalc` has its own copy)."""
        age = min(self.now - j.eligible, self.slurm.max_age) / self.slurm.max_age
        j.prio = int(self.slurm.weight_age * max(0.0, age)
                     + self.slurm.weight_fairshare * self.fs_factor[j.spec.account] + j.site_factor)
        j.key = (-j.tier, -j.prio, j.spec.submit, j.id)
        self.touched.add(j.id)

    def _enqueue(self, j: SimJob) -> None:
        j.state = PENDING
        j.pend_since = self.now
        self.pending_count += 1
        self._set_key(j)
        bisect.insort(self.queue, j.key)
        if self.driver is not None:
            self.driver.enqueued(j)

    def set_site_factor(self, j: SimJob, value: int) -> None:
        j.site_factor = value
        self.touched.add(j.id)
        if j.state == PENDING:
            # Move its key in place: a plan writes a few dozen site factors
            # into a queue of thousands, which a re-sort would walk whole.
            queue = self.queue
            old = j.key
            i = bisect.bisect_left(queue, old)
            while i < len(queue) and queue[i] is not old and queue[i] == old:
                i += 1  # a started job's stale key, equal to this one
            if i < len(queue) and queue[i] is old:
                del queue[i]
            self._set_key(j)
            bisect.insort(queue, j.key)
            self._bf_changed = True

    def ordered(self) -> list[tuple[Any, ...]]:
        """The queue's keys in Slurm's order: every pending job's current key
        (``key[-1]`` is its id), with stale keys of started jobs in between."""
        return self.queue

    # --- job life -----------------------------------------------------------------
    def _on_arrive(self, job_id: int, _: int) -> None:
        j = self.by_id[job_id]
        j.eligible = self.now
        if self.driver is not None:
            self.driver.submitted(j)
        self._enqueue(j)
        self.kick()

    def _start(self, j: SimJob, alloc: list[tuple[int, int]]) -> None:
        now = self.now
        self.hosts.take(alloc)
        self._account(now)
        j.gpus_now = sum(g for _, g in alloc)
        j.rate = min(1.0, j.gpus_now / j.spec.gpus) if j.spec.gpus else 1.0
        if j.rate < 1.0:
            j.smaller_starts += 1
        self.busy += j.gpus_now
        j.alloc = alloc
        j.state = RUNNING
        j.ver += 1
        self.touched.add(j.id)
        j.runs += 1
        self.pending_count -= 1
        j.pending_total += now - j.pend_since
        j.run_start = now
        self._last_start = now
        restore = j.spec.restore_time if j.ckpt > 0 else 0.0
        j.overhead += restore
        j.base = j.ckpt
        j.saving = None
        j.origin = now + restore
        j.preempting = False
        j.signal_at = None
        j.preempt_asked = False
        if j.benefit_at is not None:
            self.benefit_delays.append(now - j.benefit_at)
            j.benefit_at = None
        if j.first_start is None:
            j.first_start = now
            if j.spec.nodes > 1:
                leaf, nvl = self.hosts.within(alloc)
                self.multi[0] += 1
                self.multi[1] += leaf
                self.multi[2] += nvl
        self.running[j.id] = j
        self.run_gpus_by_acct[j.spec.account] += j.gpus_now
        self.changed = True
        self.push(j.origin + (j.spec.duration - j.base) / j.rate, _END, j.id, j.ver)

    def _stop(self, j: SimJob) -> None:
        self.hosts.give(j.alloc)
        self._account(self.now)
        self.busy -= j.gpus_now
        j.alloc = []
        j.ver += 1
        self.touched.add(j.id)
        del self.running[j.id]
        self.run_gpus_by_acct[j.spec.account] -= j.gpus_now
        self.changed = True
        self.freed = True

    def _on_end(self, job_id: int, ver: int) -> None:
        j = self.by_id[job_id]
        if j.ver != ver or j.state != RUNNING:
            return
        j.ckpt = j.spec.duration
        self._close_grace(j, requeued=False)
        self._stop(j)
        j.state = DONE
        j.end = self.now
        self.finished += 1
        if self.driver is not None:
            self.ended.append(j.id)
            if j.resv is not None:
                self.driver.job_ended(j)
        self.kick()

    def requeue(self, j: SimJob, keep: float, shrink_to: int | None = None) -> None:
        """Slurm requeue: the job stops now and restarts from progress ``keep``;
        an elastic job shrunk restarts on at most ``shrink_to`` nodes."""
        if j.state != RUNNING:
            return
        if j.spec.min_nodes is not None and shrink_to is not None:
            # NumNodes=MIN-LEFT after the requeue (policy/elastic.py). Without it
            # Slurm keeps the job's range (measured on 22.05) and restarts it with
            # what is free within it, after its requeue delay.
            j.cap = max(j.spec.min_nodes, shrink_to)
            j.shrinks += 1
        p = j.progress(self.now)
        lost = max(0.0, p - keep)
        j.lost_work += lost
        if j.signal_at is not None and j.ack is not None and j.ack >= j.signal_at:
            j.lost_after_ack += lost
        self._close_grace(j, requeued=True)
        j.marked = None
        j.ckpt = keep
        j.preemptions += 1
        j.restarts += 1
        self._stop(j)
        j.eligible = self.now
        self._enqueue(j)
        self.kick(self.slurm.requeue_latency)

    def signal_save(self, j: SimJob) -> float:
        """The job gets its checkpoint signal: it saves its progress, pausing meanwhile.

        Returns the sim time at which the save is written (the job's ack).
        """
        now = self.now
        self._close_grace(j, requeued=False)
        j.signal_at = now
        p = j.progress(now)
        # Training stops while the checkpoint is written; the clock restarts after.
        j.base = p
        j.origin = max(now, j.origin) + j.spec.save_time
        j.saving = p
        j.overhead += j.spec.save_time
        j.ver += 1
        self.touched.add(j.id)
        self.push(j.origin + (j.spec.duration - j.base) / j.rate, _END, j.id, j.ver)
        done = now + j.spec.save_time
        self.push(done, _SAVED, j.id, j.ver)
        return done

    def _close_grace(self, j: SimJob, requeued: bool) -> None:
        """Count the time since the job's signal as idle in grace: all of it when
        the signal ends in a requeue, else only the save (the job worked on)."""
        if j.signal_at is None:
            return
        spent = self.now - j.signal_at
        idle = spent if requeued else min(spent, j.spec.save_time)
        j.grace_idle += idle
        if not requeued:
            j.grace_idle_unused += idle
        j.signal_at = None

    def _on_saved(self, job_id: int, ver: int) -> None:
        j = self.by_id[job_id]
        if j.state != RUNNING or j.ver != ver:
            return
        if j.saving is not None:
            j.ckpt = max(j.ckpt, j.saving)
            j.saving = None
        j.ack = self.now
        self.touched.add(j.id)
        self.changed = True
        if self.mode is Mode.SLURM_GRACE and j.preempting:
            # The job exits after saving; Slurm requeues it (it cannot tell why it exited).
            self.requeue(j, j.ckpt)
        elif j.marked is not None and j.spec.requeues_itself:
            # Marked by the daemon, the job requeues itself right after its ack
            # (slurmpolicy ckpt ack --requeue): nothing trained after it is lost.
            self.requeue(j, j.ckpt)

    def _on_exit(self, job_id: int, ver: int) -> None:
        """GraceTime is over: Slurm kills the victim and requeues it."""
        j = self.by_id[job_id]
        if j.state != RUNNING or j.ver != ver:
            return
        # The save did not finish: back to the last periodic checkpoint.
        self.requeue(j, j.durable(self.now))

    # --- scheduling ---------------------------------------------------------------
    def _usable(self, j: SimJob) -> list[bool] | None:
        """Hosts ``j`` may use given the reservations (None: all).

        As slurmctld treats our reservations (``IGNORE_JOBS,MAGNETIC``, ``Users=``
        the beneficiary's user): a job of a user the reservation names may run
        in it; any other job may use its hosts only if its time limit ends
        before the reservation starts."""
        if not self.reservations:
            return None
        ok = [True] * len(self.hosts.names)
        end = self.now + j.spec.time_limit
        user = j.spec.user
        for r in self.reservations.values():
            if r.job_id == j.id or r.end <= self.now or end <= r.start or user in r.users:
                continue
            for h in r.hosts:
                ok[h] = False
        return ok

    def _try_place(self, j: SimJob, avoid: set[int] | None = None) -> list[tuple[int, int]] | None:
        spec = j.spec
        if spec.min_nodes is None:
            return self._place_n(j, spec.nodes, avoid)
        # An elastic job starts with what is free within its range, as Slurm
        # starts a --nodes=MIN-MAX job "without delaying its initiation".
        for n in range(min(j.cap, spec.nodes), j.floor - 1, -1):
            alloc = self._place_n(j, n, avoid)
            if alloc is not None:
                return alloc
        return None

    def _place_n(self, j: SimJob, n: int, avoid: set[int] | None) -> list[tuple[int, int]] | None:
        spec = j.spec
        if self.hosts.free_gpus < n * spec.gpus_per_node:
            return None
        if j.resv is not None:
            r = self.reservations.get(j.resv)
            if r is not None and r.start <= self.now < r.end:
                inside = self.hosts.place(n, spec.gpus_per_node, only=r.hosts)
                if inside is not None:
                    return inside
            if r is not None and r.bound and self.now < r.end:
                # A job that names a reservation runs in it or waits: other free
                # GPUs are no use to it until the daemon takes the name off
                # (its "fits on free nodes" abort deletes the reservation).
                return None
        usable = self._usable(j)
        if avoid:
            usable = list(usable) if usable is not None else [True] * len(self.hosts.names)
            for h in avoid:
                usable[h] = False
        return self.hosts.place(n, spec.gpus_per_node, usable=usable)

    def schedule(self, backfill: bool = False) -> None:
        """One pass of Slurm's main scheduler: jobs in priority order (partition
        PriorityTier first) up to ``default_queue_depth``, stopping at the first
        that does not fit, as job_scheduler.c does within a partition. With
        ``backfill`` it runs :meth:`backfill` instead."""
        if backfill:
            self.backfill()
            return
        now = self.now
        queue = self.ordered()
        seen = 0
        for key in queue:
            j = self.by_id[key[-1]]
            if j.state != PENDING or j.key is not key:
                continue
            seen += 1
            if seen > self.slurm.queue_depth:
                break
            if j.begin_time is not None and j.begin_time > now:
                continue
            alloc = self._try_place(j) if self.hosts.free_gpus > 0 else None
            if alloc is not None:
                self._start(j, alloc)
                self._bf_changed = True
                continue
            self._blocked(j)
            if j.resv is not None:
                continue  # a reserved job waits for its own nodes only
            break

    def backfill(self) -> None:
        """One pass of sched/backfill as backfill.c's ``_attempt_backfill`` does it.

        Up to ``bf_max_job_test`` pending jobs in priority order are tested.
        A job starts now if some hosts fit it and no reservation planned
        earlier in this pass (or one of ours) claims them before its time
        limit ends. Otherwise it gets its earliest start from the running
        jobs' time limits (rounded up to ``bf_resolution``) and, when that is
        within ``bf_window``, a reservation of whole hosts for its time limit:
        backfill.c's ``_add_reservation`` takes the nodes out of the node
        space map from start to end, so later jobs may not use them then.
        Reservations live for one pass, as Slurm rebuilds its map each pass.
        Once no host can start any job now (every host full or claimed within
        the trace's shortest limit) the rest of the pass can change nothing
        but preemption, which is all that is then done."""
        now = self.now
        self._bf_changed = False
        self.bf_passes += 1
        sm = self.slurm
        res = sm.bf_resolution
        hosts = self.hosts
        free = hosts.free
        queue = list(self.ordered())
        n_hosts = len(hosts.names)
        #: The node space map: per host, planned (start, end) claims of this pass.
        planned: dict[int, list[tuple[float, float]]] = {}
        self._clear_cache = {}
        self._hopeless = []
        self._no_fit = []
        steps = _FreeSteps(self, now, res)
        window_end = now + sm.bf_window
        soon = now + self.min_limit
        #: Hosts where some job could still start now.
        open_hosts = {h for h in range(n_hosts) if free[h] > 0}
        tested = 0
        started = False
        no_victims: set[tuple[int, int, int]] = set()

        def claims_before(stop: float) -> set[int]:
            """Hosts a higher job's planned start claims before ``stop``."""
            return {h for h, c in planned.items() if c[0][0] < stop}

        baseline = self.mode is not Mode.SLURMPOLICY
        for key in queue:
            j = self.by_id[key[-1]]
            if j.state != PENDING or j.key is not key:
                continue
            tested += 1
            if tested > sm.bf_max_job_test:
                break
            if j.begin_time is not None and j.begin_time > now:
                continue
            spec = j.spec
            if not open_hosts and (j.tier <= 1 or j.preempt_asked or baseline is False):
                continue  # nothing can start now and this job may not preempt
            limit = _roundup(spec.time_limit, res)
            stop = now + limit
            # Hosts a higher job's planned start claims before this one would end;
            # built only for a placement or a preemption that reads them.
            claimed: set[int] | None = None
            alloc = None
            if (open_hosts and max(free[h] for h in open_hosts) >= spec.gpus_per_node
                    and not self._fits_nowhere(j)):
                claimed = claims_before(stop)
                alloc = self._try_place(j, avoid=claimed)
                if alloc is None and j.resv is None and spec.min_nodes is None:
                    self._no_fit.append((spec.nodes, spec.gpus_per_node, spec.time_limit,
                                         self._reservation_claims(j, now)[0]))
            if alloc is not None:
                self._start(j, alloc)
                started = True
                steps.started(j, _roundup(now + spec.time_limit, res))
                for h, _ in alloc:
                    if free[h] <= 0:
                        open_hosts.discard(h)
                continue
            freed: list[int] = []
            if baseline and j.tier > 1 and not j.preempt_asked:  # else _preempt_for frees nothing
                if claimed is None:
                    claimed = claims_before(stop)
                freed = self._preempt_for(j, claimed, no_victims)
            if freed:
                # A requeued victim gives back GPUs, maybe on hosts beyond these:
                # what found no hosts before may now.
                self._no_fit.clear()
                # The freed hosts are the beneficiary's in this pass's plan.
                for h in freed:
                    bisect.insort(planned.setdefault(h, []), (now, now + limit))
                    steps.changed.append(h)
                    open_hosts.discard(h)
                continue
            if not open_hosts:
                continue  # nothing can start now: the rest of the plan changes nothing
            if self._bound(j):
                continue  # it may start only on its reservation's hosts, which are held
            start, chosen = self._earliest(j, planned, steps, window_end, limit)
            if not chosen:
                continue
            self.bf_reservations += 1
            for h in chosen:
                bisect.insort(planned.setdefault(h, []), (start, start + limit))
                steps.changed.append(h)
                if start < soon:
                    open_hosts.discard(h)
        if started:
            self._bf_changed = True

    def _bound(self, j: SimJob) -> bool:
        """``j`` names a live reservation (a preemption's beneficiary)."""
        r = self.reservations.get(j.resv) if j.resv is not None else None
        return r is not None and r.bound and self.now < r.end

    def _fits_nowhere(self, j: SimJob) -> bool:
        """In a backfill pass: ``j`` cannot start now, as a job tested earlier in
        the pass could not. Within a pass GPUs only get taken and claims only
        grow, and a longer time limit runs into more claims and reservations;
        so a job needing at least as many nodes, GPUs per node and time, that
        may use no reservation the earlier one could not, fits nowhere either.
        A preemption that requeues its victims gives GPUs back and empties
        the memo. (A job in its own reservation, or an elastic one, is always
        placed.)"""
        if j.resv is not None or j.spec.min_nodes is not None or not self._no_fit:
            return False
        spec = j.spec
        n, gpn, limit = spec.nodes, spec.gpus_per_node, spec.time_limit
        mine = self._reservation_claims(j, self.now)[0]
        return any(n0 <= n and g0 <= gpn and l0 <= limit and mine <= mine0
                   for n0, g0, l0, mine0 in self._no_fit)

    def _expected_end(self, r: SimJob) -> float:
        """When Slurm expects a running job to end: its time limit, or, for a
        victim of its own preemption, the end of its GraceTime (slurmctld sets
        the preempted job's end_time to now + GraceTime)."""
        end = r.run_start + r.spec.time_limit
        if r.preempting and r.signal_at is not None and self.mode is Mode.SLURM_GRACE:
            end = min(end, r.signal_at + self.slurm.grace_time)
        return end

    def _reservation_claims(self, j: SimJob, now: float,
                            ) -> tuple[frozenset[str], dict[int, list[tuple[float, float]]]]:
        """Our reservations as claims on their hosts, for a job they keep out:
        (the names of those that do not keep it out, its own or naming its
        user; the others' claims by host). The names decide the claims, so
        they key the answer (and the pass's searches, see :meth:`_earliest`)."""
        if not self.reservations:
            return _NO_NAMES, {}
        version = (now, self._resv_version)
        index = self._resv_index
        if index is None or index[0] != version:
            by_user: dict[str, set[str]] = {}
            by_job: dict[int, set[str]] = {}
            for r in self.reservations.values():
                if r.end > now:
                    by_job.setdefault(r.job_id, set()).add(r.name)
                    for user in r.users:
                        by_user.setdefault(user, set()).add(r.name)
            index = self._resv_index = (
                version, {u: frozenset(v) for u, v in by_user.items()},
                {i: frozenset(v) for i, v in by_job.items()})
        _, of_user, of_job = index
        mine = of_user.get(j.spec.user, _NO_NAMES)
        theirs = of_job.get(j.id)
        if theirs is not None and not theirs <= mine:
            mine = mine | theirs
        key = (mine, version)
        hit = self._resv_claims.get(key)
        if hit is not None:
            return mine, hit
        extra: dict[int, list[tuple[float, float]]] = {}
        for r in self.reservations.values():
            if r.name in mine or r.end <= now:
                continue
            for h in r.hosts:
                bisect.insort(extra.setdefault(h, []), (r.start, r.end))
        if len(self._resv_claims) > 256:
            self._resv_claims.clear()
        self._resv_claims[key] = extra
        return mine, extra

    def _earliest(self, j: SimJob, planned: dict[int, list[tuple[float, float]]],
                  steps: _FreeSteps, window_end: float,
                  limit: float) -> tuple[float, list[int]]:
        """When and on which hosts ``j`` could start as running jobs end by their
        limits, avoiding the pass's planned claims and reservations it may not
        use: (start, hosts), or (inf, []) beyond ``bf_window``.

        Per host: the first time it has the GPUs (``steps``), then pushed past
        every claim that overlaps the job's span; a multi-node job takes the
        first time at which enough hosts are clear together."""
        now = self.now
        spec = j.spec
        gpn, n = spec.gpus_per_node, spec.nodes
        mine, extra = self._reservation_claims(j, now)
        # Claims only grow within a pass and a started job only takes GPUs
        # away, so a job that needs at least as many nodes, GPUs per node and
        # time as one that found no start within bf_window in this pass, and
        # may use no reservation that one could not (so it meets every claim
        # that one met), finds none either: most tested jobs of a deep queue,
        # each a walk of every host.
        for n0, g0, l0, mine0 in self._hopeless:
            if n0 <= n and g0 <= gpn and l0 <= limit and mine <= mine0:
                return math.inf, []
        found = self._earliest_walk(j, planned, steps, window_end, limit, extra, mine)
        if not found[1]:
            self._hopeless.append((n, gpn, limit, mine))
        return found

    def _earliest_walk(self, j: SimJob, planned: dict[int, list[tuple[float, float]]],
                       steps: _FreeSteps, window_end: float, limit: float,
                       extra: dict[int, list[tuple[float, float]]],
                       mine: frozenset[str]) -> tuple[float, list[int]]:
        """:meth:`_earliest`'s search (``extra``: the reservations' claims on
        ``j``, ``mine``: the reservations that make none, which name them)."""
        now = self.now
        spec = j.spec
        gpn, n = spec.gpus_per_node, spec.nodes
        ready = steps.ready(gpn)  # per host: first time with gpn GPUs free (inf: never)
        # Claims only grow within a pass, so (host, time, limit, the
        # reservations the job may use, claims so far) names a result for the rest of it.
        cache = self._clear_cache

        def clear_from(h: int, t: float) -> float:
            p = planned.get(h)
            key = (h, t, limit, mine, len(p) if p else 0)
            hit = cache.get(key)
            if hit is not None:
                return hit
            # One pass over the claims sorted by start: a claim passed over
            # ends by the t it was checked against, so by every later t too.
            for s0, e0 in _merged(p, extra.get(h)):
                if s0 >= t + limit:
                    break
                if e0 > t:
                    t = e0
            cache[key] = t
            return t

        if n == 1:
            # The host whose (time clear of claims, free GPUs then, index) is
            # least, among those that have the GPUs within the window. Kept per
            # shape for the pass in a heap: a claim or a start in between
            # changes only its own hosts (steps.changed), which are worked out
            # again; an entry that no longer holds is dropped when it surfaces.
            shape = (gpn, limit, mine)
            kept = steps.one_node.get(shape)
            if kept is None:
                # The first search of a shape in a pass walks hosts by the time
                # they have the GPUs and stops at the first that cannot beat
                # the best; the heap pays off only for a shape searched again.
                steps.one_node[shape] = ([], {}, -1)
                best = (math.inf, 0, -1)
                for h in steps.order(gpn):
                    t = ready[h]
                    if t > best[0] or t > window_end:
                        break
                    if h in planned or h in extra:
                        t = clear_from(h, t)
                        if t > best[0]:
                            continue
                    cand = (t, steps.free_at(h, t), h)
                    if cand < best:
                        best = cand
                if best[2] < 0 or best[0] > window_end:
                    return math.inf, []
                return best[0], [best[2]]
            heap, value, seen = kept
            todo: Iterable[int] = range(len(ready)) if seen < 0 else set(steps.changed[seen:])
            for h in todo:
                t = ready[h]
                if t > window_end:
                    value.pop(h, None)  # ready only moves later in a pass
                    continue
                if h in planned or h in extra:
                    t = clear_from(h, t)
                cand = (t, steps.free_at(h, t), h)
                if value.get(h) != cand:
                    value[h] = cand
                    heapq.heappush(heap, cand)
            steps.one_node[shape] = (heap, value, len(steps.changed))
            while heap and value.get(heap[0][2]) != heap[0]:
                heapq.heappop(heap)
            if not heap or heap[0][0] > window_end:
                return math.inf, []
            return heap[0][0], [heap[0][2]]
        times = sorted({t for t in ready if t <= window_end}
                       | {e for c in (*planned.values(), *extra.values())
                          for _, e in c if now < e <= window_end})
        if not times:
            return math.inf, []
        # A sweep over the candidate times instead of testing every host at
        # every time: per host, the spans of start times at which it has the
        # GPUs and no claim overlaps [t, t + limit), as (first start, start of
        # the claim that ends the span); a host is usable at t when t is past
        # the first and t + limit still ends by the second.
        spans: list[list[tuple[float, float]]] = []
        starts: list[tuple[float, int]] = []
        for h, rt in enumerate(ready):
            row: list[tuple[float, float]] = []
            if rt <= window_end:
                cur = rt
                for s0, e0 in _merged(planned.get(h), extra.get(h)):
                    if e0 <= cur:
                        continue
                    if cur + limit <= s0:
                        row.append((cur, s0))
                    cur = e0
                row.append((cur, math.inf))
                row.reverse()  # popped from the end, earliest first
                a = row[-1][0]
                if a <= window_end:
                    starts.append((a, h))
            spans.append(row)
        heapq.heapify(starts)
        ok = [False] * len(ready)
        ends: list[tuple[float, int]] = []
        count = 0
        for t in times:
            moved = True
            while moved:
                moved = False
                while starts and starts[0][0] <= t:
                    _, h = heapq.heappop(starts)
                    ok[h] = True
                    count += 1
                    heapq.heappush(ends, (spans[h][-1][1], h))
                    moved = True
                while ends and ends[0][0] < t + limit:
                    _, h = heapq.heappop(ends)
                    ok[h] = False
                    count -= 1
                    spans[h].pop()
                    if spans[h]:
                        heapq.heappush(starts, (spans[h][-1][0], h))
                    moved = True
            if count < n:
                continue
            hosts = self.hosts
            saved = hosts.free
            hosts.free = [steps.free_at(h, t) for h in range(len(saved))]
            try:
                alloc = hosts.place(n, gpn, usable=ok)
            finally:
                hosts.free = saved
            if alloc:
                return t, [h for h, _ in alloc]
        return math.inf, []

    # --- Slurm's own preemption (baselines) --------------------------------------
    def _blocked(self, j: SimJob) -> None:
        """The main scheduler found a job blocked: a higher-tier job waits for
        the next backfill pass, which may preempt for it (the latency that
        bf_interval sets; see :meth:`SlurmModel.next_backfill`)."""
        if self.mode is not Mode.SLURMPOLICY and j.tier > 1:
            self._bf_changed = True

    def _preempt_for(self, j: SimJob, claimed: set[int],
                     no_victims: set[tuple[int, int, int]]) -> list[int]:
        """In a backfill pass: preempt/partition_prio frees hosts for ``j`` from
        lower-tier jobs, outside the hosts that higher-priority jobs claimed in
        this pass. Victims get SIGTERM (GraceTime) or are requeued at once
        (PREEMPT_MODE=REQUEUE). Returns the hosts freed for ``j`` (none when
        it cannot preempt, or its earlier victims are still in grace)."""
        if self.mode is Mode.SLURMPOLICY or j.tier <= 1 or j.preempt_asked:
            return []
        spec = j.spec
        shape = (spec.nodes, spec.gpus_per_node, j.tier)
        if shape in no_victims:
            return []
        victims, hosts = self._choose_victims(j, claimed)
        if not victims:
            no_victims.add(shape)
            return []
        # Victims in grace are not chosen again (preempt_in_progress in
        # backfill.c) until the grace is over.
        j.preempt_asked = True
        self.push(self.now + self.slurm.grace_time + 1.0, _PREEMPT, j.id, j.restarts)
        if j.benefit_at is None:
            j.benefit_at = self.now
        for v in victims:
            v.preempting = True
            if self.mode is Mode.SLURM_REQUEUE:
                self.requeue(v, v.durable(self.now))
            else:
                # SIGTERM; the job saves and exits, or GraceTime runs out first.
                self.signal_save(v)
                if v.spec.save_time > self.slurm.grace_time:
                    self.push(self.now + self.slurm.grace_time, _EXIT, v.id, v.ver)
        return hosts

    def _on_preempt_check(self, job_id: int, restarts: int) -> None:
        """The grace of a job's victims is over: it may preempt again if still blocked."""
        j = self.by_id[job_id]
        if j.state != PENDING or j.restarts != restarts:
            return
        j.preempt_asked = False
        self.kick()

    def _choose_victims(self, j: SimJob,
                        claimed: set[int]) -> tuple[list[SimJob], list[int]]:
        """preempt/partition_prio: lower-tier running jobs whose GPUs let ``j`` start.

        Lowest tier first, then youngest; the host (or hosts, preferring one
        leaf) needing the fewest preempted GPUs.
        """
        spec = j.spec
        settings_classes = self.settings.classes
        by_host: dict[int, list[SimJob]] = {}
        for r in self.running.values():
            if r.tier >= j.tier or r.preempting:
                continue
            cls = settings_classes.get(r.spec.job_class)
            if cls is not None and not cls.preemptible:
                continue
            for h, _ in r.alloc:
                by_host.setdefault(h, []).append(r)
        usable = self._usable(j)
        options: list[tuple[int, int, list[SimJob]]] = []  # (cost, host, victims)
        free = self.hosts.free
        for h, cands in by_host.items():
            if (usable is not None and not usable[h]) or h in claimed:
                continue
            have = free[h]
            if have + sum(g for c in cands for hh, g in c.alloc if hh == h) < spec.gpus_per_node:
                continue
            cands.sort(key=lambda c: (c.tier, -c.run_start, -c.id))
            chosen: list[SimJob] = []
            for c in cands:
                if have >= spec.gpus_per_node:
                    break
                chosen.append(c)
                have += sum(g for hh, g in c.alloc if hh == h)
            options.append((sum(c.spec.gpus for c in chosen), h, chosen))
        # Hosts already free enough count as zero-cost options.
        for h, f in enumerate(free):
            if (f >= spec.gpus_per_node and h not in by_host and h not in claimed
                    and (usable is None or usable[h])):
                options.append((0, h, []))
        if len(options) < spec.nodes:
            return [], []
        options.sort(key=lambda o: (o[0], o[1]))
        if spec.nodes > 1:
            by_leaf: dict[int, list[tuple[int, int, list[SimJob]]]] = {}
            for o in options:
                by_leaf.setdefault(self.hosts.leaf[o[1]], []).append(o)
            in_leaf = [(sum(o[0] for o in os_[: spec.nodes]), lf)
                       for lf, os_ in by_leaf.items() if len(os_) >= spec.nodes]
            picked = by_leaf[min(in_leaf)[1]][: spec.nodes] if in_leaf else options[: spec.nodes]
        else:
            picked = options[:1]
        victims: dict[int, SimJob] = {}
        for _, _, vs in picked:
            for v in vs:
                victims[v.id] = v
        return sorted(victims.values(), key=lambda v: v.id), [o[1] for o in picked]

    # --- reservations and begin times (slurmpolicy's levers) ------------------------
    def set_reservation(self, name: str, hosts: Sequence[str], start: float, end: float,
                        job_id: int, bound: bool = False) -> None:
        """A reservation for ``job_id``; ``bound``: usable by that job alone (preemption)."""
        idx = tuple(self.hosts.index[h] for h in hosts if h in self.hosts.index)
        j = self.by_id.get(job_id)
        users = (j.spec.user,) if j is not None and not bound else ()
        self.reservations[name] = SimReservation(name, idx, start, end, job_id, users, bound)
        self._resv_version += 1
        if j is not None and j.state == PENDING:
            j.resv = name
            self.touched.add(j.id)
        self.kick()
        if start > self.now:
            self.kick(start - self.now)

    def delete_reservation(self, name: str) -> None:
        r = self.reservations.pop(name, None)
        if r is None:
            return
        self._resv_version += 1
        j = self.by_id.get(r.job_id)
        if j is not None and j.resv == name:
            j.resv = None
            self.touched.add(j.id)
        self.kick()

    def set_begin_time(self, j: SimJob, begin: float | None) -> None:
        j.begin_time = begin
        self.touched.add(j.id)
        if begin is not None and begin > self.now:
            self.kick(begin - self.now)
        else:
            self.kick()
