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
  changed), and after ``daemon.preemption_poll`` seconds while a signalled
  victim awaits its requeue (only when its ack or deadline came); its actions
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from slurmpolicy.settings import Settings
from slurmpolicy.sim.cluster import Hosts
from slurmpolicy.sim.trace import TraceJob


class Mode(StrEnum):
    SLURMPOLICY = "slurmpolicy"
    SLURM_REQUEUE = "slurm-requeue"
    SLURM_GRACE = "slurm-grace"


@dataclass(frozen=True, slots=True)
class SlurmModel:
    """Slurm's configuration and latencies as simulated (slurm.conf names in comments)."""

    #: bf_interval: seconds between backfill passes.
    bf_interval: float = 30.0
    #: bf_max_job_test: jobs the backfill pass looks at.
    bf_max_job_test: int = 500
    #: default_queue_depth: jobs the main (event) scheduler looks at.
    queue_depth: int = 100
    #: PriorityCalcPeriod.
    priority_calc_period: float = 300.0
    #: PriorityWeightAge / PriorityMaxAge.
    weight_age: int = 1000
    max_age: float = 7 * 86400.0
    #: PriorityWeightFairshare / PriorityDecayHalfLife.
    weight_fairshare: int = 10_000
    fairshare_half_life: float = 7 * 86400.0
    #: Seconds from a higher-tier job being blocked to its victims' signal
    #: (measured on Slurm 22.05: SIGTERM 53 s after submission).
    preempt_latency: float = 53.0
    #: GraceTime of the preemptable partitions (slurm-grace mode).
    grace_time: float = 30.0
    #: Seconds from a victim's exit to its GPUs being scheduled again (57 - 53 - 3).
    requeue_latency: float = 1.0
    #: Partition PriorityTier of each class in the baselines.
    tiers: tuple[tuple[str, int], ...] = (("production", 3), ("research", 2), ("experimental", 1))


# Event kinds, in the order they are handled at the same instant.
(_END, _EXIT, _SAVED, _ARRIVE, _PREEMPT, _RECALC, _DAEMON, _MAIN, _BACKFILL, _SAMPLE,
 _MARK, _POLL) = range(12)

PENDING, RUNNING, DONE = 0, 1, 2


class SimJob:
    """A job's mutable state in the replay."""

    __slots__ = (
        "ack",
        "alloc",
        "base",
        "begin_time",
        "cap",
        "ckpt",
        "eligible",
        "end",
        "first_start",
        "floor",
        "gpus_now",
        "id",
        "key",
        "lost_work",
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
        self.signal_at: float | None = None
        self.preempt_asked = False
        self.runs = 0
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


@dataclass(slots=True)
class SimReservation:
    name: str
    hosts: tuple[int, ...]
    start: float
    end: float
    job_id: int


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
    #: CPU seconds of the replay (the build machine is shared: wall time varies).
    cpu_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    events: int = 0
    #: slurmpolicy mode: how many actions of each kind were applied.
    actions: dict[str, int] = field(default_factory=dict)


class Simulator:
    """One replay of one trace in one mode."""

    def __init__(
        self, trace: Sequence[TraceJob], hosts: Hosts, mode: Mode | str,
        settings: Settings | None = None, slurm: SlurmModel | None = None,
        fabric: Any = None, sample_interval: float = 3600.0,
        progress: Callable[[float, float], None] | None = None,
        plan_refresh: float = 300.0,
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
        self._resort = False
        self._main_at: float | None = None
        self._poll_at: float | None = None
        self._bf_changed = True
        self.running: dict[int, SimJob] = {}
        self.reservations: dict[str, SimReservation] = {}
        self.busy = 0
        self._busy_acc = 0.0
        self._busy_t = 0.0
        self.series = Trace()
        self.sample_interval = sample_interval
        self.multi = [0, 0, 0]
        self.pending_count = 0
        self.finished = 0
        self.changed = True
        self.plan_calls = 0
        self.events = 0
        self._progress = progress
        self.driver: Any = None
        if self.mode is Mode.SLURMPOLICY:
            from slurmpolicy.sim.driver import PolicyDriver

            self.driver = PolicyDriver(self, refresh=plan_refresh)

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
            if kind == _MAIN:
                self._main_at = None
                self.schedule(backfill=False)
            elif kind == _BACKFILL:
                if self._bf_changed and self.pending_count:
                    self.schedule(backfill=True)
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
                if self.changed or self.driver.needs_cycle():
                    self.changed = False
                    self.driver.cycle()
                self.push(t + self.settings.daemon.interval, _DAEMON)
                self._schedule_poll(t)
            elif kind == _POLL:
                # daemon.preemption_poll: the daemon's short cycles while a
                # signalled victim awaits its requeue. Planned here only when
                # one can move on (ack seen, deadline passed, victim gone): the
                # other short cycles would plan nothing new for it.
                self._poll_at = None
                if self.driver.poll_due():
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
            plan_calls=self.plan_calls, events=self.events,
        )

    def _schedule_poll(self, t: float) -> None:
        poll = self.settings.daemon.preemption_poll
        if (self._poll_at is None and self.driver.awaiting
                and poll < self.settings.daemon.interval):
            self._poll_at = t + poll
            self.push(self._poll_at, _POLL)

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
        keys = []
        for key in self.queue:
            j = self.by_id[key[-1]]
            if j.state == PENDING and j.key is key:
                self._set_key(j)
                keys.append(j.key)
        keys.sort()
        self.queue = keys
        self._resort = False

    def _set_key(self, j: SimJob) -> None:
        age = min(self.now - j.eligible, self.slurm.max_age) / self.slurm.max_age
        j.prio = int(self.slurm.weight_age * max(0.0, age)
                     + self.slurm.weight_fairshare * self.fs_factor[j.spec.account] + j.site_factor)
        j.key = (-j.tier, -j.prio, j.spec.submit, j.id)

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
        if j.state == PENDING:
            self._set_key(j)
            self._resort = True
            self._bf_changed = True

    def _ordered(self) -> list[tuple[Any, ...]]:
        if self._resort:
            # Re-keyed jobs left their old keys behind: rebuild from the jobs.
            ids = {k[-1] for k in self.queue}
            keys = sorted(self.by_id[i].key for i in ids if self.by_id[i].state == PENDING)
            self.queue = keys
            self._resort = False
        return self.queue

    # --- job life -----------------------------------------------------------------
    def _on_arrive(self, job_id: int, _: int) -> None:
        j = self.by_id[job_id]
        j.eligible = self.now
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
        j.runs += 1
        self.pending_count -= 1
        j.pending_total += now - j.pend_since
        j.run_start = now
        restore = j.spec.restore_time if j.ckpt > 0 else 0.0
        j.overhead += restore
        j.base = j.ckpt
        j.saving = None
        j.origin = now + restore
        j.preempting = False
        j.signal_at = None
        j.preempt_asked = False
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
        del self.running[j.id]
        self.run_gpus_by_acct[j.spec.account] -= j.gpus_now
        self.changed = True

    def _on_end(self, job_id: int, ver: int) -> None:
        j = self.by_id[job_id]
        if j.ver != ver or j.state != RUNNING:
            return
        j.ckpt = j.spec.duration
        self._stop(j)
        j.state = DONE
        j.end = self.now
        self.finished += 1
        if j.resv is not None and self.driver is not None:
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
        j.lost_work += max(0.0, p - keep)
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
        j.signal_at = now
        p = j.progress(now)
        # Training stops while the checkpoint is written; the clock restarts after.
        j.base = p
        j.origin = max(now, j.origin) + j.spec.save_time
        j.saving = p
        j.overhead += j.spec.save_time
        j.ver += 1
        self.push(j.origin + (j.spec.duration - j.base) / j.rate, _END, j.id, j.ver)
        done = now + j.spec.save_time
        self.push(done, _SAVED, j.id, j.ver)
        return done

    def _on_saved(self, job_id: int, ver: int) -> None:
        j = self.by_id[job_id]
        if j.state != RUNNING or j.ver != ver:
            return
        if j.saving is not None:
            j.ckpt = max(j.ckpt, j.saving)
            j.saving = None
        j.ack = self.now
        self.changed = True
        if self.mode is Mode.SLURM_GRACE and j.preempting:
            # The job exits after saving; Slurm requeues it (it cannot tell why it exited).
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
        """Hosts ``j`` may use given the reservations (None: all)."""
        if not self.reservations:
            return None
        ok = [True] * len(self.hosts.names)
        end = self.now + j.spec.time_limit
        for r in self.reservations.values():
            if r.job_id == j.id or r.end <= self.now or end <= r.start:
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
        usable = self._usable(j)
        if avoid:
            usable = list(usable) if usable is not None else [True] * len(self.hosts.names)
            for h in avoid:
                usable[h] = False
        return self.hosts.place(n, spec.gpus_per_node, usable=usable)

    def schedule(self, backfill: bool) -> None:
        """One pass of Slurm's main scheduler (strict order) or of EASY backfill."""
        now = self.now
        if backfill:
            self._bf_changed = False
        queue = self._ordered()
        depth = self.slurm.bf_max_job_test if backfill else self.slurm.queue_depth
        head: SimJob | None = None
        shadow = math.inf
        head_hosts: set[int] = set()
        failed: set[tuple[int, int, bool, bool]] = set()
        started = False
        seen = 0
        min_resv = min((r.start for r in self.reservations.values()), default=math.inf)
        for key in queue:
            j = self.by_id[key[-1]]
            if j.state != PENDING or j.key is not key:
                continue
            seen += 1
            if seen > depth:
                break
            if self.hosts.free_gpus <= 0:
                # Nothing can start; Slurm still weighs preemption for the waiting jobs.
                if self.mode is Mode.SLURMPOLICY:
                    break
                self._blocked(j)
                if not backfill:
                    break
                continue
            if j.begin_time is not None and j.begin_time > now:
                continue
            spec = j.spec
            shape = (spec.nodes, spec.gpus_per_node, now + spec.time_limit <= min_resv,
                     now + spec.time_limit <= shadow)
            if j.resv is None and shape in failed and head is not None:
                self._blocked(j)
                continue
            if head is None:
                alloc = self._try_place(j)
                if alloc is not None:
                    self._start(j, alloc)
                    started = True
                    continue
                failed.add(shape)
                self._blocked(j)
                if j.resv is not None:
                    continue  # a reserved job waits for its own nodes only
                if not backfill:
                    break
                head = j
                shadow, head_hosts = self._shadow(j)
                continue
            # Backfill: start only what does not delay the head job.
            if now + spec.time_limit <= shadow:
                alloc = self._try_place(j, avoid=None)
            else:
                alloc = self._try_place(j, avoid=head_hosts)
            if alloc is None:
                failed.add(shape)
                self._blocked(j)
                continue
            self._start(j, alloc)
            started = True
        if started:
            self._bf_changed = True

    def _shadow(self, head: SimJob) -> tuple[float, set[int]]:
        """When and where the head job could start as running jobs end by their limits."""
        spec = head.spec
        free = list(self.hosts.free)
        usable = self._usable(head)
        if usable is not None:
            for h, ok in enumerate(usable):
                if not ok:
                    free[h] = -10**9
        gpn, n = spec.gpus_per_node, spec.nodes
        fits = sum(1 for f in free if f >= gpn)
        ends = sorted((j.run_start + j.spec.time_limit, j.id) for j in self.running.values())
        for end, jid in ends:
            for h, g in self.by_id[jid].alloc:
                before = free[h] >= gpn
                free[h] += g
                if not before and free[h] >= gpn:
                    fits += 1
                    if n == 1:
                        return max(end, self.now), {h}
            if fits >= n:
                cand = [h for h, f in enumerate(free) if f >= gpn]
                saved = self.hosts.free
                self.hosts.free = free
                try:
                    alloc = self.hosts.place(n, gpn)
                finally:
                    self.hosts.free = saved
                return max(end, self.now), {h for h, _ in alloc} if alloc else set(cand)
        return math.inf, set()

    # --- Slurm's own preemption (baselines) --------------------------------------
    def _blocked(self, j: SimJob) -> None:
        if (self.mode is Mode.SLURMPOLICY or j.preempt_asked or j.tier <= 1):
            return
        j.preempt_asked = True
        self.push(self.now + self.slurm.preempt_latency, _PREEMPT, j.id, j.restarts)

    def _on_preempt_check(self, job_id: int, restarts: int) -> None:
        j = self.by_id[job_id]
        if j.state != PENDING or j.restarts != restarts:
            return
        j.preempt_asked = False
        if self._try_place(j) is not None:
            self.kick()
            return
        victims = self._choose_victims(j)
        if not victims:
            return
        j.preempt_asked = True  # wait for these victims before choosing more
        for v in victims:
            v.preempting = True
            if self.mode is Mode.SLURM_REQUEUE:
                self.requeue(v, v.durable(self.now))
            else:
                # SIGTERM; the job saves and exits, or GraceTime runs out first.
                self.signal_save(v)
                if v.spec.save_time > self.slurm.grace_time:
                    self.push(self.now + self.slurm.grace_time, _EXIT, v.id, v.ver)
        self.push(self.now + self.slurm.grace_time + self.slurm.preempt_latency, _PREEMPT,
                  j.id, j.restarts)

    def _choose_victims(self, j: SimJob) -> list[SimJob]:
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
            if usable is not None and not usable[h]:
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
            if f >= spec.gpus_per_node and h not in by_host and (usable is None or usable[h]):
                options.append((0, h, []))
        if len(options) < spec.nodes:
            return []
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
        return sorted(victims.values(), key=lambda v: v.id)

    # --- reservations and begin times (slurmpolicy's levers) ------------------------
    def set_reservation(self, name: str, hosts: Sequence[str], start: float, end: float,
                        job_id: int) -> None:
        idx = tuple(self.hosts.index[h] for h in hosts if h in self.hosts.index)
        self.reservations[name] = SimReservation(name, idx, start, end, job_id)
        j = self.by_id.get(job_id)
        if j is not None and j.state == PENDING:
            j.resv = name
        self.kick()
        if start > self.now:
            self.kick(start - self.now)

    def delete_reservation(self, name: str) -> None:
        r = self.reservations.pop(name, None)
        if r is None:
            return
        j = self.by_id.get(r.job_id)
        if j is not None and j.resv == name:
            j.resv = None
        self.kick()

    def set_begin_time(self, j: SimJob, begin: float | None) -> None:
        j.begin_time = begin
        if begin is not None and begin > self.now:
            self.kick(begin - self.now)
        else:
            self.kick()
