"""The slurmpolicy mode: the daemon's cycle, driven through simulated time.

Owns the part of the simulator that stands in for the daemon: it builds a
:class:`~slurmpolicy.model.Snapshot` of the simulated Slurm exactly as the
adapters would (jobs with their ``admin_comment`` directives and ``comment``
acks, nodes with their GPU use, the one partition, our reservations), brings
fair-share usage forward with the policy's own ``advance_usage``, calls the
very same ``plan()``, keeps the intents with ``apply_to_intents`` (what the
daemon's journal does), and applies each action to the simulated Slurm with
Slurm's semantics:

- SetSiteFactor: the job's priority includes the value from now on;
- Create/UpdateReservation: a starvation reservation on the nodes for the
  beneficiary (MAGNETIC with its user: that user's jobs may land in it; others
  may use the nodes only if their time limit ends before it starts);
- StartPreemption: a reservation bound to the beneficiary alone (the daemon
  names it on that job and leaves it non-MAGNETIC), so no other job, not even
  one of the same user, takes the freed nodes;
- SignalCheckpoint: the victim is marked (unless elastic), saves (its own
  save time), then writes its ``ckpt:<epoch>`` ack into its comment and, if
  still marked, requeues itself (``slurmpolicy ckpt ack --requeue``: the
  simulated jobs use the helper as docs/checkpointing.md advises); the marks
  of preemptions no longer open are taken off in the executor's sweeps
  before and after each cycle's actions, a call each within the budget
  (its retries are not modelled);
- Requeue: the victim stops at once and restarts from its last checkpoint
  (acknowledged or periodic); the work since then is lost;
- DeleteReservation, SetBeginTime: as Slurm does; FinishPreemption and
  Annotate change nothing in Slurm.

At most ``daemon.max_slurm_calls_per_cycle`` calls a cycle, in the
executor's order (``within_budget``); the rest waits for a later plan.

The daemon calls ``plan()`` every ``daemon.interval`` seconds, and every
``daemon.preemption_poll`` seconds while a signalled victim awaits its
requeue, looking at those victims every ``daemon.ack_poll`` seconds between
(a look that sees one move starts the cycle at once); the simulated daemon
plans at the first look that can move a victim on (its ack, its end or its
deadline came) and skips the short cycles that cannot. To keep a
50,000-job replay in minutes the simulated daemon skips a cycle when nothing
that ``plan()`` acts on changed: it plans when a preemption is open, when a
job of a class that preempts and is never preempted (production) newly waits
near the head of the queue, or when jobs arrived or ended and ``refresh``
seconds (300) passed since the last plan. Site factors and preemptions for the
middle classes then lag by at most ``refresh``, as Slurm's own priorities lag
by PriorityCalcPeriod.
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import compress
from operator import attrgetter
from time import process_time
from typing import Any

from slurmpolicy.errors import ConfigError
from slurmpolicy.jobpolicy import Checkpoint, JobPolicy, render_admin_comment
from slurmpolicy.model import Job, JobState, Node, Partition, Reservation, Snapshot
from slurmpolicy.policy.actions import (
    SITE_FACTOR_BATCH,
    Action,
    Annotate,
    DeleteReservation,
    Intents,
    Plan,
    Requeue,
    ReservationAction,
    SetBeginTime,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    VictimState,
    in_execution_order,
    site_factor_batches,
)
from slurmpolicy.settings import doorbell_classes
from slurmpolicy.sim.engine import SimJob, SimReservation, Simulator, _last


class PolicyUnavailable(ConfigError):
    """The policy package has no plan() to drive."""


#: Simulated time 0 as epoch seconds (2026-01-01 UTC): Snapshots carry real-looking times.
EPOCH = 1_767_225_600.0
PARTITION = "gpu"


class PolicyDriver:
    """Stands in for the daemon: snapshot -> plan() -> intents + actions on the simulated Slurm."""

    def __init__(self, sim: Simulator, refresh: float = 300.0) -> None:
        try:
            from slurmpolicy.policy import plan
        except ImportError as exc:
            raise PolicyUnavailable(
                "the slurmpolicy mode needs slurmpolicy.policy.plan(), which this build lacks;"
                " use --mode slurm-grace or slurm-requeue") from exc
        from slurmpolicy.policy import apply_to_intents
        from slurmpolicy.policy.context import PlanCache
        self.sim = sim
        #: What one plan() hands the next (derived from unchanged records only).
        self.plan_cache = PlanCache()
        self.plan_fn = plan
        self.apply_fn = apply_to_intents
        self.refresh = refresh
        self.fabric = sim.fabric if sim.fabric is not None else _fabric_of(sim)
        self.intents = Intents()
        self.last_plan = -math.inf
        #: True while a preemption is open (the next cycle must move it on).
        self.open = False
        #: CPU seconds in snapshot() and in plan() (cpu_parts).
        self.snapshot_cpu = 0.0
        self.plan_cpu = 0.0
        #: CPU seconds in each step of plan() (``Plan.timings`` summed; RawResult.plan_steps).
        self.plan_steps: dict[str, float] = {}
        #: Each job's last record, with the stamp of what it was built from
        #: (:meth:`_job`; its priority, set in place, is the record's own).
        self._jobs: dict[int, tuple[tuple[Any, ...], Job]] = {}
        #: Victims marked by the last cycles, by id: their preemption's id.
        self._marked: dict[int, str] = {}
        #: The waiting jobs' records as the last snapshot showed them, by id.
        self._pending: dict[int, Job] = {}
        #: The last snapshot's running jobs, by id.
        self._running_records: list[Job] = []
        #: Per running job, the sim time before which its record stays as the
        #: last snapshot built it when the simulator does not touch the job:
        #: just before its next periodic checkpoint ack (:meth:`_ack_due_at`).
        self._ack_due: dict[int, float] = {}
        self._nodes: dict[int, tuple[int, Node]] = {}
        self._reservations: dict[str, tuple[SimReservation, Reservation]] = {}
        self._policy_text: dict[tuple[str, float, float, int | None, int], str] = {}
        self.partition = Partition(name=PARTITION, nodes=tuple(sim.hosts.names), default=True,
                                   priority_tier=1, preempt_mode="OFF")
        self.actions_applied: dict[str, int] = {}
        #: Cycles whose plan asked for more Slurm calls than the budget, and the
        #: actions the executor left for a later cycle (within_budget).
        self.over_budget = 0
        self.deferred = 0
        #: Classes that may preempt and are never preempted: their submission
        #: rings the daemon's doorbell (plugin.doorbell), and a newly blocked job
        #: of one of them is planned for at the next cycle; the rest at ``refresh``.
        self.urgent = set(doorbell_classes(sim.settings))
        self._new_urgent: set[int] = set()
        #: Signalled victims awaiting their requeue: job id -> (restart count,
        #: signalled at, deadline), epoch seconds as in the intents.
        self.awaiting: dict[int, tuple[int, float, float]] = {}

    def submitted(self, job: SimJob) -> None:
        """A job is submitted: job_submit.lua gives it its class weight as its
        site factor (``plugin.set_site_factor``), so it has its class standing
        before any plan; plan() later sets the full factor from there."""
        if job.spec.job_class in self.urgent and self.sim.settings.plugin.doorbell:
            self.sim.ring()
        if self.sim.settings.plugin.set_site_factor:
            cls = self.sim.settings.classes.get(job.spec.job_class)
            if cls is not None and cls.weight > 0:
                job.site_factor = cls.weight  # before it is queued: no re-sort

    def cpu_parts(self) -> dict[str, float]:
        """CPU seconds in building snapshots and in ``plan()`` (RawResult.cpu_parts)."""
        return {"snapshot": self.snapshot_cpu, "plan": self.plan_cpu}

    # --- when to plan ----------------------------------------------------------------
    def needs_cycle(self) -> bool:
        return self.open

    def should_plan(self) -> bool:
        return self.open or self._full_due()

    def _full_due(self) -> bool:
        """A full plan is due: ``refresh`` passed since the last one (while a
        preemption is open, ``daemon.interval``: the daemon's own pace then,
        as before open-only plans), or a job of an urgent class (its
        doorbell) waits for its first. Otherwise an open preemption's cycle
        (a look that saw a victim move on) moves it on alone
        (``plan(open_only=True)``), as the daemon's cycles between full plans do."""
        since = self.sim.now - self.last_plan
        if since >= self.refresh or (self.open and since >= self.sim.settings.daemon.interval):
            return True
        by_id = self.sim.by_id
        return any(by_id[i].state == 0 for i in self._new_urgent)

    def poll_due(self) -> bool:
        """A signalled victim can move on: its ack is visible, its deadline
        passed, or it is no longer running as signalled (what ``advance`` reads)."""
        now = EPOCH + self.sim.now
        by_id = self.sim.by_id
        for job_id, (restarts, signalled_at, deadline) in self.awaiting.items():
            j = by_id.get(job_id)
            if j is None or j.state != 1 or j.restarts != restarts or now >= deadline:
                return True
            ack = self._ack(j)
            # As the snapshot writes it (whole seconds) and the planner compares it.
            if ack is not None and math.floor(EPOCH + ack) >= signalled_at:
                return True
        return False

    def may_call_off(self) -> bool:
        """A short cycle now could call an open preemption off: its beneficiary
        no longer waits, or enough hosts have the GPUs it needs free (what
        ``advance`` checks first; reservations and the jobs ahead of it are
        left to the plan, so this errs on the side of planning)."""
        sim = self.sim
        free = sim.hosts.free
        for p in self.intents.preemptions:
            b = sim.by_id.get(p.beneficiary)
            if b is None or b.state != 0:
                return True
            spec = b.spec
            need = spec.min_nodes or spec.nodes
            gpn = spec.gpus_per_node
            for f in free:
                if f >= gpn:
                    need -= 1
                    if need <= 0:
                        return True
        return False

    def enqueued(self, job: SimJob) -> None:
        """A job became pending (arrival or requeue)."""
        if job.spec.job_class in self.urgent:
            self._new_urgent.add(job.id)

    def job_ended(self, job: SimJob) -> None:
        """A job that held one of our reservations ended: nothing to do but re-plan."""
        self.sim.changed = True

    # --- one cycle ---------------------------------------------------------------------
    def cycle(self) -> None:
        self.sim.freed = False  # this cycle's snapshot sees the GPUs given back
        full = self._full_due()
        budget = self.sim.settings.daemon.max_slurm_calls_per_cycle
        if not full and not self.open:
            self.sim.changed = True  # keep the change pending until we plan
            if self._marked:
                self._clear_stale_marks(budget)  # the executor's sweeps run all the same
            return
        from slurmpolicy.policy import fairshare

        sim = self.sim
        now = EPOCH + sim.now
        t0 = process_time()
        snapshot = self.snapshot(now)
        self.snapshot_cpu += process_time() - t0
        running = self._running_records  # the snapshot's running jobs, by id
        usage = fairshare.advance_usage(self.intents.usage, self.intents.usage_at, running, now,
                                        sim.settings.fairshare.half_life)
        intents = replace(self._observe_victims(self.intents, now), usage=usage, usage_at=now)
        t2 = process_time()
        plan = self.plan_fn(snapshot, self.fabric, sim.settings, intents, now,
                            cache=self.plan_cache, clock=process_time, open_only=not full)
        self.plan_cpu += process_time() - t2
        steps = self.plan_steps
        for step, seconds in plan.timings.items():
            steps[step] = steps.get(step, 0.0) + seconds
        sim.plan_calls += 1
        if full:
            self.last_plan = sim.now
            self._new_urgent.clear()
        else:
            sim.open_only_plans += 1
            sim.changed = True  # what else changed waits for the next full plan
        # The executor's first sweep, before the plan's actions: marks that the
        # last cycle's budget left on (each a call of this cycle's budget).
        spent = self._clear_stale_marks(budget) if self._marked else 0
        done, calls = self.within_budget(plan.actions, spent)
        if len(done) < len(plan.actions) or plan.held_back:
            # What the executor leaves for the next cycle never reaches the
            # journal; nor do the site factors the plan held back for it.
            self.deferred += plan.held_back + sum(
                1 for a in plan.actions if not isinstance(a, Annotate)) - sum(
                1 for a in done if not isinstance(a, Annotate))
            self.over_budget += 1
            plan = replace(plan, actions=done)
        intents = self.apply_fn(intents, plan, now)
        self.intents = self._prune(intents, now)
        self.open = bool(self.intents.preemptions)
        self.awaiting = {
            v.job_id: (v.restart_count, v.signalled_at or now, v.deadline or now)
            for p in self.intents.preemptions for v in p.victims
            if v.state is VictimState.SIGNALLED}
        for action in plan.actions:
            self.apply(action, now)
        if self._marked:
            # Its sweep after the actions, within what they left of the budget.
            self._clear_stale_marks(budget - calls)

    def _observe_victims(self, intents: Intents, now: float) -> Intents:
        """The executor's reconcile: a signalled victim whose restart count moved
        requeued itself (``ckpt ack --requeue``); the journal records it
        requeued, and preempted now (its per-day budget), as our requeue would."""
        if not self.awaiting:
            return intents
        by_id = self.sim.by_id
        gone = tuple(
            Requeue(reason="it requeued itself", preemption_id=p.preemption_id,
                    job_id=v.job_id, restart_count=v.restart_count, after="acknowledged")
            for p in intents.preemptions for v in p.victims
            if v.state is VictimState.SIGNALLED and by_id[v.job_id].restarts != v.restart_count)
        return self.apply_fn(intents, Plan(actions=gone), now) if gone else intents

    def _clear_stale_marks(self, allowance: int) -> int:
        """The executor's sweep: marks of preemptions no longer open come off a
        running job, one Slurm call each, at most ``allowance`` of them (the
        cycle's call budget left); the others stay on until a later sweep.
        Returns the calls made."""
        open_ids = {p.preemption_id for p in self.intents.preemptions}
        by_id = self.sim.by_id
        calls = 0
        for jid, pid in list(self._marked.items()):
            j = by_id[jid]
            if j.marked != pid or j.state != 1:
                del self._marked[jid]  # requeued, marked anew or ended: no call
            elif pid not in open_ids:
                if calls >= allowance:
                    continue  # CallBudgetExhausted: left on until a later sweep
                calls += 1
                j.marked = None
                del self._marked[jid]
        if calls:
            applied = self.actions_applied  # the daemon audits each as UnmarkVictim
            applied["UnmarkVictim"] = applied.get("UnmarkVictim", 0) + calls
        return calls

    def within_budget(self, actions: tuple[Action, ...], spent: int = 0,
                      ) -> tuple[tuple[Action, ...], int]:
        """The actions the daemon's executor carries out within
        ``daemon.max_slurm_calls_per_cycle``, in its order: one call each
        (a StartPreemption two: reserve, then name the reservation on the
        beneficiary; a FinishPreemption one, deleting its reservation; an
        Annotate none), site factors last, one call per batch of jobs that
        get the same value (``site_factor_batches``). Once a call would pass
        the budget, the executor stops and the rest waits for the next cycle.
        (Calls that retry earlier steps, ``carry_on``, are not modelled: the
        simulated Slurm never fails one.)
        ``spent``: calls this cycle already made (the first mark sweep).
        Returns the actions carried out (``actions`` itself when all fit) and
        the calls the cycle has made with them, ``spent`` included."""
        budget = self.sim.settings.daemon.max_slurm_calls_per_cycle - spent
        cost = 0
        jobs_of: dict[int, int] = {}  # site-factor value -> jobs that get it
        for a in actions:
            if isinstance(a, SetSiteFactor):
                jobs_of[a.site_factor] = jobs_of.get(a.site_factor, 0) + 1
            else:
                cost += _calls(a, self.sim)
        batches = sum(-(-n // SITE_FACTOR_BATCH) for n in jobs_of.values())
        if cost + batches <= budget:
            return actions, spent + cost + batches  # the common case: everything fits
        done: list[Action] = []
        calls = 0
        site: list[SetSiteFactor] = []
        for a in in_execution_order(actions):
            if isinstance(a, Annotate):
                continue  # after every call: the executor stopped before it, or not
            if isinstance(a, SetSiteFactor):
                site.append(a)  # last in the order but for notes: batched below
                continue
            if calls >= budget:
                break
            calls += _calls(a, self.sim)
            done.append(a)
        for batch in site_factor_batches(site, _site_factor)[:max(0, budget - calls)]:
            done.extend(batch)
            calls += 1
        kept = set(map(id, done))
        return tuple(a for a in actions if id(a) in kept), spent + calls

    def _prune(self, intents: Intents, now: float) -> Intents:
        """Forget what the journal would no longer hand back: closed preemptions,
        preemption times older than a day, site factors of jobs that left."""
        sim = self.sim
        # Only a job that ended leaves the site factors (every id in them is
        # one of the simulator's jobs): most cycles none of them did.
        ended = sim.ended
        factors = intents.site_factors
        if any(jid in factors for jid in ended):
            # A copy less the ended jobs (in the same order): a C-level copy of
            # thousands of entries, not a comprehension over them every cycle.
            factors = dict(factors)
            for jid in ended:
                factors.pop(jid, None)
        ended.clear()
        day = now - 86400.0
        preempted_at = intents.preempted_at
        # Each list is oldest first, so the least of them (tuples compare by
        # their first time; an empty one is least) says whether any is a day
        # old: a C-level walk, where most cycles nothing is.
        least = min(preempted_at.values(), default=None)
        if least is not None and (not least or least[0] <= day):
            preempted_at = {jid: kept for jid, ts in preempted_at.items()
                            if (kept := tuple(t for t in ts if t > day))}
        return replace(
            intents,
            preemptions=tuple(p for p in intents.preemptions if p.open),
            preempted_at=preempted_at,
            site_factors=factors,
            begin_times={jid: b for jid, b in intents.begin_times.items()
                         if (j := sim.by_id.get(jid)) is not None and j.state == 0},
        )

    def apply(self, action: Action, now: float) -> None:
        sim = self.sim
        kind = type(action).__name__
        self.actions_applied[kind] = self.actions_applied.get(kind, 0) + 1
        if isinstance(action, SetSiteFactor):
            j = sim.by_id.get(action.job_id)
            if j is not None:
                sim.set_site_factor(j, action.site_factor)
        elif isinstance(action, ReservationAction):
            sim.set_reservation(action.name, action.nodes, action.start_time - EPOCH,
                                action.start_time - EPOCH + action.duration, action.job_id)
        elif isinstance(action, StartPreemption):
            duration = action.duration or sim.by_id[action.beneficiary].spec.time_limit
            start = (action.start_time or now) - EPOCH
            # Bound to the beneficiary alone, as the daemon binds it.
            sim.set_reservation(action.reservation, action.nodes, start, start + duration,
                                action.beneficiary, bound=True)
            b = sim.by_id.get(action.beneficiary)
            if b is not None and b.benefit_at is None and b.state == 0:
                b.benefit_at = sim.now
        elif isinstance(action, DeleteReservation):
            sim.delete_reservation(action.name)
        elif isinstance(action, SignalCheckpoint):
            j = sim.by_id.get(action.job_id)
            if j is not None and j.state == 1 and j.restarts == action.restart_count:
                j.preempting = True
                if _markable(j):
                    j.marked = action.preemption_id
                    self._marked[j.id] = action.preemption_id
                sim.signal_save(j)
        elif isinstance(action, Requeue):
            j = sim.by_id.get(action.job_id)
            if j is not None and j.state == 1 and j.restarts == action.restart_count:
                sim.requeue(j, j.durable(sim.now), shrink_to=action.shrink_to)
        elif isinstance(action, SetBeginTime):
            j = sim.by_id.get(action.job_id)
            if j is not None:
                sim.set_begin_time(j, None if action.begin_time is None
                                   else action.begin_time - EPOCH)

    # --- the snapshot ------------------------------------------------------------------
    def _admin_comment(self, j: SimJob) -> str:
        spec = j.spec
        key = (spec.job_class, spec.save_time, spec.ckpt_interval, spec.min_nodes, spec.nodes)
        text = self._policy_text.get(key)
        if text is None:
            # The job declares a grace with a margin over its real save time.
            grace = float(math.ceil(spec.save_time * 1.25))
            text = render_admin_comment(JobPolicy(
                job_class=spec.job_class,
                checkpoint=Checkpoint(signal="USR1", grace=grace, interval=spec.ckpt_interval),
                node_range=(None if spec.min_nodes is None
                            else (spec.min_nodes, spec.nodes))))
            self._policy_text[key] = text
        return text

    def _ack(self, j: SimJob) -> float | None:
        """Sim time of the job's latest ``ckpt:`` ack: its signal saves, and (as the
        job-side helper asks) its periodic checkpoints in this run."""
        ack = j.ack
        interval = j.spec.ckpt_interval
        if j.state == 1 and interval > 0 and self.sim.now > j.origin:
            k = math.floor(j.progress(self.sim.now) / interval) * interval
            if k > j.base:
                at = j.origin + (k - j.base)
                ack = at if ack is None else max(ack, at)
        return ack

    def _ack_due_at(self, j: SimJob) -> float:
        """Sim time before which :meth:`_ack` of the running job ``j`` cannot
        change while the simulator leaves the job alone: a hundredth of a second
        before its progress reaches its next periodic checkpoint (the margin
        covers rounding in ``progress``; a look after it only asks again)."""
        interval = j.spec.ckpt_interval
        if interval <= 0 or j.rate <= 0:
            return math.inf
        now = self.sim.now
        if now <= j.origin:
            return j.origin  # periodic checkpoints count from its origin on
        k = math.floor(j.progress(now) / interval) + 1
        return j.origin + (k * interval - j.base) / j.rate - 0.01

    def _job(self, j: SimJob, ack: float | None) -> Job:
        """The Job record of ``j`` with its latest ack ``ack`` (:meth:`_ack`):
        the one built last time while what it depends on is unchanged."""
        stamp = (j.state, j.ver, j.restarts, j.site_factor, ack, j.begin_time, j.resv)
        hit = self._jobs.get(j.id)
        if hit is not None and hit[0] == stamp:
            job = hit[1]
            if job.priority != j.prio:
                # Only Slurm's priority moved (PriorityCalcPeriod, every waiting
                # job at once): set in the record, which no one reads again as
                # it was (the last snapshot is gone), not copied.
                self.plan_cache.set_priority(job, j.prio)
            return job
        return self._new_job(j, stamp, ack)

    def _new_job(self, j: SimJob, stamp: tuple[Any, ...], ack: float | None) -> Job:
        """The Job record of ``j`` as the adapters would read it (``stamp``: what
        it depends on, kept with it; ``ack``: its latest checkpoint ack)."""
        spec = j.spec
        running = j.state == 1
        hosts = self.sim.hosts
        job = Job(
            job_id=j.id, name=f"job{j.id}", user=spec.user, account=spec.account,
            partition=PARTITION,
            state=JobState.RUNNING if running else JobState.PENDING,
            reason="None" if running else "Priority",
            priority=j.prio, site_factor=j.site_factor,
            # Slurm shows a running job's allocation, a pending elastic job's minimum.
            node_count=len(j.alloc) if running else j.floor,
            gpus_per_node=spec.gpus_per_node,
            gpus=j.gpus_now if running else j.floor * spec.gpus_per_node, gpu_type=None,
            time_limit=spec.time_limit if math.isfinite(spec.time_limit) else None,
            submit_time=EPOCH + spec.submit, eligible_time=EPOCH + j.eligible,
            start_time=EPOCH + j.run_start if running else None,
            restart_count=j.restarts, requeue=True,
            reservation=j.resv or "",
            nodes=tuple(hosts.names[h] for h, _ in j.alloc) if running else (),
            gpus_on_node={hosts.names[h]: g for h, g in j.alloc} if running else {},
            # Whole seconds, cut as the job-side helper cuts them (int(time.time())):
            # rounded up, an ack a moment before a new signal would answer it.
            comment=f"ckpt:{math.floor(EPOCH + ack)}" if ack is not None else "",
            admin_comment=self._admin_comment(j),
            begin_time=(EPOCH + j.begin_time if j.begin_time is not None
                        and j.begin_time > self.sim.now else None),
        )
        self._jobs[j.id] = (stamp, job)
        return job

    def snapshot(self, now: float) -> Snapshot:
        sim = self.sim
        by_id = sim.by_id
        touched = sim.touched
        records = self._jobs
        # The waiting jobs' records move only when the simulator touches the
        # job (queued, re-prioritised, started, ended, its reservation or
        # begin time set): kept from one snapshot to the next, and only the
        # touched ones looked at. (A pending job's ack does not move while it
        # waits: no _ack().) Every job that arrived is touched when queued.
        pending = self._pending
        for job_id in touched:
            j = by_id[job_id]
            if j.state == 0:
                pending[job_id] = self._job(j, j.ack)
            else:
                pending.pop(job_id, None)
        # Jobs that PriorityCalcPeriod alone touched (most of a deep queue):
        # their records stand but for the priority. (Untouched, a job is still
        # waiting.)
        set_priority = self.plan_cache.set_priority
        for job_id in sim.repriced:
            record = pending.get(job_id)
            if record is None or job_id in touched:
                continue  # never shown yet, or rebuilt above
            prio = by_id[job_id].prio
            if record.priority != prio:
                set_priority(record, prio)
        if sim.repriced:
            # The waiting jobs listed in Slurm's order as PriorityCalcPeriod
            # just sorted it (new arrivals join at the end until the next),
            # which the planner's sort by priority then finds nearly sorted
            # (the sort of a shuffled deep queue was about an eighth of
            # priority.compute, session 28). No plan depends on the order
            # (tests/property: the jobs in any order, the same plan).
            # (C-level: a started job's stale key finds no record and is
            # left out; a job in twice keeps its first place, as a
            # comprehension would.)
            ids = list(map(_last, sim.ordered()))
            shown = list(map(pending.get, ids))
            in_order = dict(compress(zip(ids, shown, strict=True), shown))
            if len(in_order) == len(pending):
                pending = self._pending = in_order
        sim.repriced.clear()
        jobs: list[Job] = list(pending.values())
        due = self._ack_due
        at = sim.now
        for j in sim.running.values():
            job_id = j.id
            known = None if job_id in touched else records.get(job_id)
            # Untouched, a running job's record moves with its periodic ack alone,
            # which moves only at its next periodic checkpoint.
            if known is not None and at < due.get(job_id, -math.inf):
                jobs.append(known[1])
                continue
            ack = self._ack(j)
            jobs.append(known[1] if known is not None and known[0][4] == ack
                        else self._job(j, ack))
            due[job_id] = self._ack_due_at(j)
        touched.clear()
        # The running jobs' records by job id, for fair share's usage (which sums
        # them in this order: a float sum that must not move with the snapshot's).
        self._running_records = sorted(jobs[len(pending):], key=_job_id)
        # The waiting jobs by when they last came to wait, then the running ones:
        # not squeue's order (nor is squeue's by id), which no plan may depend
        # on; a sort of the whole queue per cycle was 2% of a deep replay.
        if len(self._jobs) > 2 * len(jobs) + 1000:
            alive = {x.job_id for x in jobs}
            self._jobs = {k: v for k, v in self._jobs.items() if k in alive}
            self._ack_due = {k: v for k, v in due.items() if k in alive}
        hosts = sim.hosts
        nodes = []
        for h, name in enumerate(hosts.names):
            free = hosts.free[h]
            hit = self._nodes.get(h)
            if hit is None or hit[0] != free:
                used = hosts.gpus[h] - free
                node = Node(
                    name=name, state="IDLE" if used == 0 else ("ALLOCATED" if free == 0
                                                               else "MIXED"),
                    cpus=64, memory_mb=512_000,
                    gpus_by_type={hosts.gpu_type: hosts.gpus[h]},
                    gpus_alloc_by_type={hosts.gpu_type: used}, partitions=(PARTITION,),
                )
                hit = self._nodes[h] = (free, node)
            nodes.append(hit[1])
        reservations = tuple(self._reservation(r) for r in sim.reservations.values())
        snapshot = Snapshot(taken_at=now, slurm_version="22.05.8 (simulated)",
                            cluster_name="sim", jobs=tuple(jobs), nodes=tuple(nodes),
                            partitions=(self.partition,), reservations=reservations)
        # The planner's tables of the jobs, from the waiting ones held by id
        # (a dict's copy), not from a walk of the whole queue.
        n = len(pending)
        running_now = jobs[n:]
        record_of = dict(pending)
        record_of.update(zip(map(_job_id, running_now), running_now, strict=True))
        snapshot.prime(record_of, jobs[:n], running_now)
        return snapshot


    def _reservation(self, r: SimReservation) -> Reservation:
        """The Reservation record of ``r`` as scontrol shows it (kept while ``r`` is)."""
        hit = self._reservations.get(r.name)
        if hit is not None and hit[0] is r:
            return hit[1]
        sim = self.sim
        record = Reservation(
            name=r.name, nodes=tuple(sim.hosts.names[h] for h in r.hosts),
            start_time=EPOCH + r.start, end_time=EPOCH + r.end,
            flags=frozenset({"MAGNETIC", "IGNORE_JOBS"} if r.users else {"IGNORE_JOBS"}),
            users=r.users or ((sim.by_id[r.job_id].spec.user,) if r.job_id in sim.by_id else ()))
        if len(self._reservations) > 2 * len(sim.reservations) + 100:
            self._reservations.clear()
        self._reservations[r.name] = (r, record)
        return record


_job_id = attrgetter("job_id")
_site_factor = attrgetter("site_factor")


def _calls(action: Action, sim: Simulator) -> int:
    """Slurm calls the executor makes for one action other than a site factor:
    a StartPreemption reserves, then names the reservation on the beneficiary;
    a SignalCheckpoint marks the victim (unless elastic), then signals it;
    an Annotate is journal only."""
    if isinstance(action, SignalCheckpoint):
        j = sim.by_id.get(action.job_id)
        return 2 if j is not None and _markable(j) else 1
    return 2 if isinstance(action, StartPreemption) else 0 if isinstance(action, Annotate) else 1


def _markable(j: SimJob) -> bool:
    """The executor marks a victim before its signal unless it is elastic."""
    return j.spec.min_nodes is None


def _fabric_of(sim: Simulator) -> Any:
    """A topology Fabric with the simulated hosts' names and domains."""
    from slurmpolicy.topology.fabric import Fabric
    from slurmpolicy.topology.spec import FabricSpec, HostSpec

    hosts = sim.hosts
    spec = FabricSpec(source="simulator")
    multi_nvl = len(set(hosts.nvlink)) < len(hosts.names)
    for h, name in enumerate(hosts.names):
        spec.hosts[name] = HostSpec(
            name=name, gpus=hosts.gpus[h], gpu_type=hosts.gpu_type,
            nvlink=hosts.nvlink_names[hosts.nvlink[h]] if multi_nvl else None,
            leaf=hosts.leaf_names[hosts.leaf[h]])
    for h in range(len(hosts.names)):
        spec.parents[hosts.leaf_names[hosts.leaf[h]]] = f"spine{hosts.spine[h] + 1}"
    return Fabric(spec)
