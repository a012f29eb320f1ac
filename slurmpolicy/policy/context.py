"""The planner's working view of one cycle, built once and shared by every rule.

Owns the indexes that make a plan over 20,000 jobs cheap: each job's parsed
directives (cached by admin_comment text, since most jobs share a handful),
its class, jobs by partition / host / account, free GPUs per host, hosts per
partition and GPU type, and a per-level "most hosts with >= g free GPUs in
one domain" table that answers "could this shape start now?" without walking
the fabric per job. ``plan()`` and ``explain()`` both build one.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from slurmpolicy.jobpolicy import JobPolicy, parse_admin_comment
from slurmpolicy.model import Job, Node, Reservation, Snapshot
from slurmpolicy.policy import fairshare
from slurmpolicy.policy.actions import Intents, PreemptionIntent, VictimState
from slurmpolicy.policy.classes import JobClass, resolve_class
from slurmpolicy.policy.fairshare import FairShareState
from slurmpolicy.protocol import effective_policy
from slurmpolicy.settings import Settings
from slurmpolicy.topology.slices import is_slice_type, node_free
from slurmpolicy.topology.types import Level, Shape

if TYPE_CHECKING:
    from slurmpolicy.topology import Fabric

#: Slurm reasons that mean "waiting on a limit", reported as quota.
QUOTA_PREFIXES = ("QOS", "Assoc", "MaxCpu", "MaxGRES", "MaxJob", "MaxNode", "MaxMem",
                  "Partition", "AccountNotAllowed", "InvalidAccount", "InvalidQOS")
DEPENDENCY_REASONS = ("Dependency", "DependencyNeverSatisfied")
#: Levels a job's --topology word names.
TOPOLOGY_LEVELS = {"nvlink": Level.NVLINK, "leaf": Level.LEAF, "spine": Level.SPINE,
                   "any": Level.CLUSTER}

#: A running job whose expected end has passed is assumed to end this soon.
OVERDUE_GRACE = 60.0


def reservation_names(prefix: str, job_id: int) -> tuple[str, str]:
    """Names of our starvation reservation for a job, and the stem of its
    preemption reservations (see :func:`preemption_reservation_name`)."""
    return f"{prefix}job_{job_id}", f"{prefix}pre_{job_id}"


def preemption_reservation_name(prefix: str, job_id: int, now: float) -> str:
    """The reservation of one preemption: unique per preemption (a name is never
    reused after an abort), and named on the beneficiary itself, which is the
    only job that uses it (it is not MAGNETIC)."""
    return f"{reservation_names(prefix, job_id)[1]}_{int(now)}"


def job_gpus_per_node(job: Job) -> int:
    if job.gpus_per_node > 0:
        return job.gpus_per_node
    if job.gpus > 0:
        return -(-job.gpus // max(1, job.node_count))
    return 0


_start_time = attrgetter("start_time")
_job_id = attrgetter("job_id")
_partition = attrgetter("partition")
_account = attrgetter("account")
#: The priority slot of the frozen Job record (PlanCache.set_priority).
_set_priority = Job.__dict__["priority"].__set__


def job_gpus(job: Job) -> int:
    return job.gpus if job.gpus > 0 else job.gpus_per_node * job.node_count


class JobInfo:
    """What one Job record and the Settings determine, whatever the time: kept
    across plans in a :class:`PlanCache` for as long as the record is unchanged."""

    __slots__ = ("blocked", "can_checkpoint", "deferrable", "end", "frag_key", "gpu_type",
                 "gpus", "job", "job_class", "plain", "policy", "quota", "rank", "since",
                 "site_base", "slurm_base", "submit", "take_key", "takes_uncounted")

    def __init__(self, job: Job, policy: JobPolicy, job_class: JobClass,
                 settings: Settings) -> None:
        self.job = job
        self.policy = policy
        self.job_class = job_class
        self.rank = job_class.rank
        self.can_checkpoint = policy.can_checkpoint
        #: It asked for a deferral window (policy/deferral.py reads only these).
        self.deferrable = bool(policy.defer_window)
        #: Class weight less the no-checkpoint penalty: the part of the site
        #: factor that does not move with time or fair share.
        self.site_base = job_class.weight - (
            settings.priority.no_checkpoint_penalty if not self.can_checkpoint else 0)
        # blocked_by_slurm's answer where it does not depend on the time ("" when it
        # does: then a future begin time says "deferred", else ``quota`` answers).
        reason = job.reason or ""
        self.blocked = ("held" if job.is_held else
                        "dependency" if reason in DEPENDENCY_REASONS else
                        "deferred" if reason == "BeginTime" else "")
        self.quota = "quota" if reason.startswith(QUOTA_PREFIXES) else ""
        #: expected_end() before preemption deadlines and the overdue grace, for a
        #: job with a start time (None without one: then it counts from now).
        self.end = (None if job.start_time is None
                    else _planned_end(job.start_time, policy.expected_runtime, job.time_limit))
        #: Where its wait counts from (aging), and what its shape's "fragmented
        #: now?" answer depends on (priority.compute asks once per shape).
        self.since = job.eligible_time or job.submit_time
        #: Slurm's priority less the site factor it holds (what the site factor adds
        #: to), its submit time as Slurm's order reads it (ties), and its GPUs.
        self.slurm_base = job.priority - job.site_factor
        self.submit = job.submit_time or 0.0
        self.gpus = job_gpus(job)
        self.frag_key = (job.admin_comment, job.partition, job.gpu_type, job.gpus,
                         job.gpus_per_node, job.node_count)
        #: The GPU type it asks for (its directive's, else Slurm's), None: any.
        self.gpu_type = policy.gpu_type or job.gpu_type or None
        #: All that Context._take_free reads of the record but for its time
        #: limit, user and reservations (Context.assign_free's failed shapes).
        self.take_key = (job.partition, self.gpu_type, job_gpus_per_node(job),
                         max(1, job.node_count), policy.topology, policy.topology_strict)
        #: It may take free GPUs that Context.assign_free's count of whole GPUs
        #: free to anyone leaves out: it asks for a GPU type, for no GPUs, or
        #: for a reservation (whose hosts are its own).
        self.takes_uncounted = (self.gpu_type is not None or self.take_key[2] <= 0
                                or bool(job.reservation))
        #: Nothing in priority.compute's walk but its value applies to it: not
        #: blocked (whatever the time: no begin time), no deferral window,
        #: counted in the free GPUs, below ``reservations.large_job_gpus`` (no
        #: fragmentation answer is asked for it while the bonus is off).
        self.plain = not (self.blocked or self.quota or job.begin_time is not None
                          or self.deferrable or self.takes_uncounted
                          or self.gpus >= settings.reservations.large_job_gpus)

    def blocked_at(self, now: float) -> str:
        """:meth:`Context.blocked_by_slurm`'s answer for the record at ``now``.

        ``priority.compute`` has an inlined copy for its walk of the whole
        queue (a call a job there): the two must change together."""
        if self.blocked:
            return self.blocked
        begin = self.job.begin_time
        return "deferred" if begin is not None and begin > now else self.quota


def _planned_end(start: float, runtime: float | None, limit: float | None) -> float:
    """The end of a job started at ``start``: its expected runtime, else its limit."""
    if runtime is not None and (limit is None or runtime < limit):
        return start + runtime
    if limit is not None:
        return start + limit
    return math.inf


class PlanCache:
    """What one ``plan()`` may hand the next: values derived from immutable
    records alone, so that a caller planning again and again over mostly the
    same records (the simulator) does not derive them anew. The daemon passes
    none: it reads every record afresh each cycle, so no identity holds, and
    deriving 32,000 jobs' JobInfo anew is a few percent of its plan (carrying
    them over by value was tried, and saved no more).

    Every entry is keyed by what it derives from: a job's directives and class
    by the Job record itself (held, compared by identity: a changed job is a
    new record), a node's GPU counts by its Node record, parsed directives by
    their text; all of it for one Settings object (another empties it). So a
    cache can never answer for inputs it did not see, whoever passes it.
    Nothing time- or intents-dependent is kept. The one record that changes
    in place is a waiting job's priority, through :meth:`set_priority`,
    which moves what was derived from it.
    """

    __slots__ = (
        "class_by_key",
        "jobs",
        "learned",
        "nodes",
        "partitions",
        "policy_by_text",
        "settings",
    )

    def __init__(self) -> None:
        self.settings: Settings | None = None
        #: job id -> what its current Job record determines
        self.jobs: dict[int, JobInfo] = {}
        #: node name -> (the Node record, GPUs, GPUs allocated, whole GPUs free)
        self.nodes: dict[str, tuple[Node, int, int, int]] = {}
        self.policy_by_text: dict[str, JobPolicy] = {}
        self.learned: dict[tuple[str, str, str], JobPolicy] = {}
        self.class_by_key: dict[tuple[str | None, str], JobClass] = {}
        self.partitions: dict[str, list[str]] = {}

    def set_priority(self, job: Job, priority: int) -> None:
        """Give ``job`` Slurm's new ``priority`` in place, and what the cache
        derived from it (its ``slurm_base``) with it.

        For a reader that keeps its records from one snapshot to the next (the
        simulator: Slurm changes every waiting job's priority each
        PriorityCalcPeriod, and a copy of each record was half of a deep
        queue's snapshot). The record stays the one the cache holds, so nothing
        derived from it may read its priority but ``slurm_base``, which is
        set here; no earlier snapshot may be read again after the call."""
        _set_priority(job, priority)
        info = self.jobs.get(job.job_id)
        if info is not None and info.job is job:
            info.slurm_base = priority - job.site_factor

    def bind(self, settings: Settings, jobs: int, nodes: int) -> None:
        """Use the cache for a plan under ``settings`` over so many jobs and nodes:
        everything goes when the settings changed, stale entries when it grew."""
        if settings is not self.settings:
            self.settings = settings
            self.jobs.clear()
            self.class_by_key.clear()
            self.nodes.clear()
        if len(self.jobs) > 2 * jobs + 1000:
            self.jobs.clear()
        if len(self.nodes) > 2 * nodes + 1000:
            self.nodes.clear()
        for text_cache in (self.policy_by_text, self.learned, self.partitions):
            if len(text_cache) > 10_000:
                text_cache.clear()


def best_fit_walk(free: Mapping[str, int], taken: Mapping[str, int], gpn: int, need: int,
                  level: Level, domain_of: Callable[[str, Level], str]) -> list[str] | None:
    """The ``need`` hosts of ``free`` (less ``taken``) with ``gpn`` GPUs or more
    that a job takes, by a walk over every host: in each domain of ``level``
    the first by (GPUs left, name), and of the domains, the pick whose (GPUs
    left, name) list comes first. The plain definition :class:`_FreeIndex`
    answers from its index."""
    by_domain: dict[str, list[tuple[int, str]]] = {}
    for h, f in free.items():
        f -= taken.get(h, 0)
        if f >= gpn:
            by_domain.setdefault(domain_of(h, level), []).append((f, h))
    best: list[tuple[int, str]] | None = None
    for hosts in by_domain.values():
        if len(hosts) < need:
            continue
        hosts.sort()
        pick = hosts[:need]
        if best is None or pick < best:
            best = pick
    return None if best is None else [h for _, h in best]


class _FreeIndex:
    """The hosts of one free map by the GPUs each has left while
    :meth:`Context.assign_free` hands them out: the hosts with ``v`` GPUs left,
    by name, for every ``v``, over the cluster and per domain of one level. A
    job's best fit is read off the smallest ``v`` it fits in; a job that takes
    GPUs moves its hosts down (:meth:`took`)."""

    __slots__ = ("all", "buckets", "domain", "left")

    def __init__(self, base: Mapping[str, int], taken: Mapping[str, int], level: Level,
                 domain_of: Callable[[str, Level], str]) -> None:
        #: GPUs left per host of the map (hosts with none left are dropped).
        self.left: dict[str, int] = {}
        #: Domain of each host (one for the whole cluster at Level.CLUSTER).
        self.domain: dict[str, str] = {}
        #: domain -> GPUs left -> hosts, sorted by name.
        self.buckets: dict[str, dict[int, list[str]]] = {}
        #: GPUs left -> hosts of every domain, sorted by name.
        self.all: dict[int, list[str]] = {}
        for h, f in base.items():
            f -= taken.get(h, 0)
            if f <= 0:
                continue
            d = domain_of(h, level)
            self.left[h] = f
            self.domain[h] = d
            self.buckets.setdefault(d, {}).setdefault(f, []).append(h)
            self.all.setdefault(f, []).append(h)
        for per in (*self.buckets.values(), self.all):
            for hosts in per.values():
                hosts.sort()

    def pick(self, gpn: int, need: int) -> list[str] | None:
        """The ``need`` hosts a job of ``gpn`` GPUs per host takes: in each domain
        the first by (GPUs left, name) among those with ``gpn`` or more, and of
        the domains, the pick whose (GPUs left, name) list comes first.

        Picks of different domains share no host, so the first of them is the
        one whose first host comes first: the domain of the first host, in
        (GPUs left, name) order over the cluster, whose domain has ``need``
        hosts with ``gpn`` or more. No walk over every domain per job.
        """
        if len(self.buckets) == 1:
            (per,) = self.buckets.values()
            return self._first(per, gpn, need)
        counts: dict[str, int] = {}
        for v in sorted(self.all):
            if v < gpn:
                continue
            for h in self.all[v]:
                d = self.domain[h]
                count = counts.get(d)
                if count is None:
                    per = self.buckets[d]
                    count = counts[d] = sum(len(per[u]) for u in per if u >= gpn)
                if count >= need:
                    return self._first(self.buckets[d], gpn, need)
        return None

    @staticmethod
    def _first(per: dict[int, list[str]], gpn: int, need: int) -> list[str] | None:
        """The first ``need`` hosts of one domain by (GPUs left, name) with ``gpn`` or more."""
        pick: list[str] = []
        for v in sorted(per):
            if v < gpn:
                continue
            for h in per[v]:
                pick.append(h)
                if len(pick) == need:
                    return pick
        return None

    def took(self, host: str, gpus: int) -> None:
        f = self.left.get(host)
        if f is None:
            return
        for per in (self.buckets[self.domain[host]], self.all):
            hosts = per[f]
            del hosts[bisect_left(hosts, host)]
            if not hosts:
                del per[f]
            if f - gpus > 0:
                insort(per.setdefault(f - gpus, []), host)
        if f - gpus > 0:
            self.left[host] = f - gpus
        else:
            del self.left[host]


class Context:
    """Indexes over one snapshot; every method is pure and cached."""

    def __init__(self, snapshot: Snapshot, fabric: Fabric, settings: Settings,
                 intents: Intents, now: float, cache: PlanCache | None = None) -> None:
        self.snapshot = snapshot
        self.fabric = fabric
        self.settings = settings
        self.intents = intents
        self.now = now
        self.prefix = settings.reservations.name_prefix
        if cache is None:
            cache = PlanCache()
        cache.bind(settings, len(snapshot.jobs), len(snapshot.nodes))
        #: JobInfo by job id (PlanCache.jobs): read ``info()`` unless the record's
        #: identity is checked (``infos[id].job is job``).
        self.infos = cache.jobs
        self._policy_by_text = cache.policy_by_text
        self._learned = cache.learned
        self._class_cache = cache.class_by_key
        #: why_not_victim answers, by (victim, beneficiary rank): the same for
        #: every beneficiary of one plan.
        self.victim_answers: dict[tuple[int, int | None], str | None] = {}
        #: preemption's victim order keys, by job id (they read the job, now, the intents).
        self.victim_keys: dict[int, tuple[bool, bool, float, float, bool, int]] = {}
        #: preemption's running jobs that may be preempted, by beneficiary rank and host.
        self.victims_by_rank: dict[int, dict[str, list[Job]]] = {}
        #: The waiting jobs and the running ones, in the snapshot's order, and
        #: every job by id: the snapshot's own tables (Snapshot.by_state,
        #: jobs_by_id), shared, so never changed here.
        self.pending: list[Job]
        #: The pending jobs with a deferral window, in ``pending``'s order, once
        #: priority.compute walked the queue (None before: deferral walks it).
        self.deferrable: list[Job] | None = None
        #: The ids of the pending jobs whose JobInfo ``takes_uncounted``, once
        #: priority.compute walked the queue (None before: then assign_free
        #: asks every job of its order).
        self.takes_uncounted: set[int] | None = None
        self.running: list[Job]
        self.pending, self.running = snapshot.by_state()
        self.by_id: dict[int, Job] = snapshot.jobs_by_id()
        self.running_by_host: dict[str, list[Job]] = {}
        running = self.running
        running_by_host = self.running_by_host
        self._partitions_cache = cache.partitions
        for job in running:
            for host in job.nodes:
                hit = running_by_host.get(host)
                if hit is None:
                    running_by_host[host] = [job]
                else:
                    hit.append(job)
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        # Per node: (GPUs, allocated, whole GPUs free), kept across plans per Node record.
        counts: dict[str, tuple[int, int, int]] = {}
        known = cache.nodes
        fabric_hosts = set(fabric.hosts)
        gpu_hosts = []
        for n in snapshot.nodes:
            entry = known.get(n.name)
            if entry is None or entry[0] is not n:
                free = n.gpus_free
                # GPU slices (MIG instances) are not whole GPUs: whole-GPU shapes
                # never count them.
                if n.gpus_by_type and any(is_slice_type(t) for t in n.gpus_by_type):
                    free = node_free(n)[0]
                entry = known[n.name] = (n, n.gpus, n.gpus_alloc, free)
            counts[n.name] = entry[1:]
            if entry[1] > 0 and n.name in fabric_hosts:
                gpu_hosts.append(n.name)
        self._counts = counts
        gpu_hosts.sort()
        self.gpu_hosts: list[str] = gpu_hosts
        self.total_gpus = sum(counts[h][0] for h in self.gpu_hosts)
        self.used_gpus = sum(min(counts[h][1], counts[h][0]) for h in self.gpu_hosts)
        self.free: dict[str, int] = {h: counts[h][2] for h in self.gpu_hosts}
        self._partition_hosts: dict[str, tuple[str, ...]] = {}
        for partition in snapshot.partitions:
            self._partition_hosts[partition.name] = tuple(partition.nodes)
        if not any(self._partition_hosts.values()):
            by_part: dict[str, list[str]] = {}
            for node in snapshot.nodes:
                for name in node.partitions:
                    by_part.setdefault(name, []).append(node.name)
            self._partition_hosts.update({k: tuple(v) for k, v in by_part.items()})
        # Hosts held by a reservation active now, by host.
        self.reserved_now: dict[str, list[Reservation]] = {}
        self.active_reservation_names: set[str] = set()
        #: Reservations that start later: Slurm starts no job on their nodes
        #: whose time limit would run into them (unless it is theirs).
        self.reserved_later: list[Reservation] = []
        for res in snapshot.reservations:
            if res.is_active(now):
                self.active_reservation_names.add(res.name)
                for host in res.nodes:
                    self.reserved_now.setdefault(host, []).append(res)
            elif res.start_time is not None and res.start_time > now and (
                    res.end_time is None or res.end_time > now):
                self.reserved_later.append(res)
        # reserved_later by start, for reserved_later_for (its answers by key).
        self._later_by_start = sorted(self.reserved_later, key=_start_time)
        self._later_starts: list[float] = [r.start_time or 0.0  # never None there
                                           for r in self._later_by_start]
        self._later_names = {r.name for r in self.reserved_later}
        self._later_owners = {int(tail) for r in self.reserved_later
                              if r.name.startswith(f"{self.prefix}job_")
                              and (tail := r.name[len(self.prefix) + 4:]).isdigit()}
        self._later_for: dict[tuple[int, str, int, str], frozenset[str]] = {}
        self.track_preemptions(intents.open_preemptions())
        self._domain_of: dict[Level, dict[str, str]] = {}
        self._free_maps: dict[tuple[Any, ...], dict[str, int]] = {}
        self._fit_tables: dict[tuple[Any, ...], dict[int, int]] = {}
        self._data_hosts: dict[str, frozenset[str]] | None = None
        self._gpus_of_type: dict[tuple[str, str | None], tuple[int, int]] = {}
        self._gpu_counts: dict[str | None, dict[str, tuple[int, int]]] = {}
        self._free_totals: dict[tuple[Any, ...], int] = {}
        self._fits: dict[tuple[Any, ...], bool] = {}
        #: Free GPUs by host that the jobs Slurm would start on them now take
        #: (:meth:`assign_free`), and those jobs; None until assigned.
        self.free_taken: dict[str, int] = {}
        self.starts_on_free: set[int] | None = None
        #: _take_free's indexes of free hosts, by free map key and level (assign_free's).
        self._free_indexes: dict[tuple[Any, Level], _FreeIndex] = {}
        self._events: dict[tuple[Any, ...], list[tuple[float, int, str, int]]] = {}
        #: reservations.forecast answers, by shape, partition, own reservations, blocked hosts.
        self.forecasts: dict[tuple[Any, ...], Any] = {}
        #: Jobs that have one of our (MAGNETIC) starvation reservations active now.
        #: A preemption's reservation is the beneficiary's through its own
        #: ``reservation`` field (the executor names it there).
        self.jobs_with_our_active_res: set[int] = set()
        starvation = f"{self.prefix}job_"
        for res in snapshot.reservations:
            if self.prefix and res.name.startswith(starvation) and res.is_active(now):
                tail = res.name[len(starvation):]
                if tail.isdigit():
                    self.jobs_with_our_active_res.add(int(tail))

    # --- directives and classes ------------------------------------------------
    def policy(self, job: Job) -> JobPolicy:
        """The job's directives, with the checkpoint protocol learned from its own
        ``--signal`` and ``--requeue`` where it declared none (slurmpolicy.protocol)."""
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            info = self.info(job)
        return info.policy

    @cached_property
    def pending_by_partition(self) -> dict[str, list[Job]]:
        """The pending jobs of each partition they asked for, in ``pending``'s
        order; worked out when a rule first reads it (plans that only move open
        preemptions on never do)."""
        pending = self.pending
        parts_of = self._partitions_cache
        by_partition: dict[str, list[Job]] = {}
        texts = set(map(_partition, pending))
        if len(texts) == 1:
            # Every waiting job asks for the same partitions (most clusters'
            # GPU queues): each of them lists them all, in the snapshot's order.
            (text,) = texts
            parts = parts_of.get(text)
            if parts is None:
                parts = parts_of[text] = self.partitions_of(pending[0])
            for part in parts:
                by_partition.setdefault(part, []).extend(pending)
            return by_partition
        for job in pending:
            parts = parts_of.get(job.partition)
            if parts is None:
                parts = parts_of[job.partition] = self.partitions_of(job)
            for part in parts:
                hit = by_partition.get(part)
                if hit is None:
                    by_partition[part] = [job]
                else:
                    hit.append(job)
        return by_partition

    @cached_property
    def fairshare(self) -> FairShareState:
        """Fair share for this plan, worked out when a rule first reads it: the
        plans that only move open preemptions on never do (it walks every
        waiting job's account)."""
        return fairshare.compute(
            self.settings, map(_account, self.pending), self.running, self.total_gpus,
            self.intents.usage, self.intents.usage_at, self.now)

    def info(self, job: Job) -> JobInfo:
        """What the job's record determines (its directives, class, ...), cached."""
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            policy = self._policy(job)
            info = self.infos[job.job_id] = JobInfo(
                job, policy, self._job_class(job, policy), self.settings)
        return info

    def _policy(self, job: Job) -> JobPolicy:
        text = job.admin_comment
        hit = self._policy_by_text.get(text)
        if hit is None:
            hit = self._policy_by_text[text] = parse_admin_comment(text)
        if hit.checkpoint is None and job.requeue and (
                job.batch_signal or "--signal" in job.submit_line):
            key = (text, job.submit_line, job.batch_signal)
            learned = self._learned.get(key)
            if learned is None:
                learned = self._learned[key] = effective_policy(hit, job)
            return learned
        return hit

    def job_class(self, job: Job) -> JobClass:
        # Kept per Job record (see PlanCache): called for every job many times a plan.
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            info = self.info(job)
        return info.job_class

    def _job_class(self, job: Job, policy: JobPolicy) -> JobClass:
        ckey = (policy.job_class, job.account)
        hit = self._class_cache.get(ckey)
        if hit is None:
            hit = self._class_cache[ckey] = resolve_class(self.settings, policy, job.account)
        return hit

    def can_checkpoint(self, job: Job) -> bool:
        """True when the job promised a checkpoint and has not missed acks too often."""
        return (self.policy(job).can_checkpoint
                and self.intents.missed_acks.get(job.job_id, 0)
                < self.settings.preemption.missed_ack_limit)

    def shielded_by_no_checkpoint(self, job: Job) -> bool:
        """Unable to checkpoint *and* in a partition where that is allowed.

        Such jobs are chosen last as victims. A job that cannot checkpoint in a
        partition not listed in ``preemption.no_checkpoint_partitions`` gets no
        such shelter: it is ordered by lost work like everyone else.
        """
        if self.can_checkpoint(job):
            return False
        allowed = self.settings.preemption.no_checkpoint_partitions
        return not allowed or job.partition in allowed

    # --- partitions, hosts, free GPUs -------------------------------------------
    @staticmethod
    def partitions_of(job: Job) -> list[str]:
        return [p for p in job.partition.split(",") if p] or [""]

    def hosts_of_partitions(self, partition: str) -> tuple[str, ...]:
        hit = self._partition_hosts.get(partition)
        if hit is not None:
            return hit
        names: set[str] = set()
        for part in self.partitions_of_text(partition):
            names.update(self._partition_hosts.get(part, ()))
        if not names and partition in ("", None):
            names.update(self.gpu_hosts)
        result = tuple(sorted(names))
        self._partition_hosts[partition] = result
        return result

    @staticmethod
    def partitions_of_text(text: str) -> list[str]:
        return [p for p in text.split(",") if p]

    def gpu_type(self, job: Job) -> str | None:
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            info = self.info(job)
        return info.gpu_type

    def gpus_of_type(self, host: str, gpu_type: str | None) -> tuple[int, int]:
        """(configured, free) GPUs of ``gpu_type`` on host (any type when None)."""
        key = (host, gpu_type)
        hit = self._gpus_of_type.get(key)
        if hit is None:
            node = self.nodes[host]
            if gpu_type is None:
                free = self.free.get(host)
                # (node.gpus, ...) of this node, cached; gpus_free only off the GPU hosts.
                hit = (self._counts[host][0], node.gpus_free if free is None else free)
            else:
                total = node.gpus_by_type.get(gpu_type, 0)
                free = (max(0, total - node.gpus_alloc_by_type.get(gpu_type, 0))
                        if node.schedulable else 0)
                hit = (total, free)
            self._gpus_of_type[key] = hit
        return hit

    def gpu_counts(self, gpu_type: str | None) -> dict[str, tuple[int, int]]:
        """gpus_of_type() of every GPU host, by host."""
        table = self._gpu_counts.get(gpu_type)
        if table is None:
            of = self.gpus_of_type
            table = self._gpu_counts[gpu_type] = {h: of(h, gpu_type) for h in self.free
                                                  if h in self.nodes}
        return table

    def eligible_hosts(self, job: Job) -> list[str]:
        """GPU hosts of the job's partitions whose GPUs match its type."""
        return list(self.eligible_map(job))

    def eligible_map(self, job: Job) -> dict[str, int]:
        """eligible_hosts() with each host's GPUs of the job's type, in that order."""
        gpu_type = self.gpu_type(job)
        key = ("eligible", job.partition, gpu_type)
        hit = self._free_maps.get(key)
        if hit is None:
            counts = self.gpu_counts(gpu_type)  # the hosts in nodes and in free
            hit = {}
            for h in self.hosts_of_partitions(job.partition):
                count = counts.get(h)
                if count is not None and count[0] > 0:
                    hit[h] = count[0]
            self._free_maps[key] = hit
        return hit

    def own_reservations(self, job: Job) -> set[str]:
        """Reservations whose hosts the job may use: our starvation reservation
        for it, and the one it names (a preemption's, or one it asked for)."""
        names = {reservation_names(self.prefix, job.job_id)[0]}
        if job.reservation:
            names.add(job.reservation)
        return names

    def reserved_later_for(self, job: Job) -> frozenset[str]:
        """Names of reservations that start later but before ``job``'s time
        limit would end, and are not its own: their nodes are not free for it
        now (Slurm would not start it there)."""
        if not self.reserved_later:
            return frozenset()
        end = self.now + job.time_limit if job.time_limit else math.inf
        # Those starting before ``end`` are a prefix of the list by start; most
        # jobs share the answer with others of the same prefix and user, unless
        # one of the prefix is their own.
        k = bisect_left(self._later_starts, end)
        if k == 0:
            return frozenset()
        names = self._later_names
        key = (k, job.user, job.job_id if job.job_id in self._later_owners else -1,
               job.reservation if job.reservation in names else "")
        hit = self._later_for.get(key)
        if hit is None:
            own = self.own_reservations(job)
            # A MAGNETIC reservation of the job's own user takes the job in.
            hit = self._later_for[key] = frozenset(
                r.name for r in self._later_by_start[:k]
                if r.name not in own and not ("MAGNETIC" in r.flags and job.user in r.users))
        return hit

    def hosts_reserved_later_for(self, job: Job) -> frozenset[str]:
        """Hosts of :meth:`reserved_later_for`'s reservations."""
        return self._hosts_reserved_later(self.reserved_later_for(job))

    def _hosts_reserved_later(self, names: frozenset[str]) -> frozenset[str]:
        if not names:
            return frozenset()
        return frozenset(h for r in self.reserved_later if r.name in names for h in r.nodes)

    def _base_free(self, job: Job) -> tuple[tuple[Any, ...], dict[str, int]]:
        gpu_type = self.gpu_type(job)
        later = self.reserved_later_for(job)
        key = ("free", job.partition, gpu_type, later)
        base = self._free_maps.get(key)
        if base is None:
            base = {}
            counts = self.gpu_counts(gpu_type)
            reserved_now = self.reserved_now
            blocked = self._hosts_reserved_later(later)
            for h in self.eligible_map(job):
                if h in reserved_now or h in blocked:
                    continue
                free = counts[h][1]
                if free > 0:
                    base[h] = free
            self._free_maps[key] = base
            self._free_totals[key] = sum(base.values())
        return key, base

    def has_own_active_reservation(self, job: Job) -> bool:
        return bool(job.reservation) or job.job_id in self.jobs_with_our_active_res

    def free_map(self, job: Job) -> dict[str, int]:
        """Free GPUs (of the job's type) on hosts the job could start on now.

        Hosts inside a reservation active now are excluded unless the
        reservation is the job's own (ours for it, or one it asked for).
        """
        _, base = self._base_free(job)
        if not self.has_own_active_reservation(job):
            return base
        gpu_type = self.gpu_type(job)
        eligible = self.eligible_map(job)
        extra = {h: self.gpus_of_type(h, gpu_type)[1]
                 for res_name in self.own_reservations(job)
                 if (res := self.snapshot.reservation(res_name)) and res.is_active(self.now)
                 for h in res.nodes if h in eligible}
        if not extra:
            return base
        merged = dict(base)
        merged.update({h: f for h, f in extra.items() if f > 0})
        return merged

    # --- the fabric, per level, without graph walks -----------------------------
    def domain_of(self, host: str, level: Level) -> str:
        table = self._domain_of.get(level)
        if table is None:
            table = self._domain_of[level] = {}
        hit = table.get(host)
        if hit is None:
            if level >= Level.CLUSTER:
                hit = "cluster"
            elif level <= Level.HOST:
                hit = host
            else:
                hit = self.fabric.domain_of(host, level)
            table[host] = hit
        return hit

    def level_of(self, job: Job) -> tuple[Level, bool]:
        policy = self.policy(job)
        return TOPOLOGY_LEVELS.get(policy.topology, Level.CLUSTER), policy.topology_strict

    def shape_of(self, job: Job, prefer: frozenset[str] = frozenset()) -> Shape:
        level, strict = self.level_of(job)
        policy = self.policy(job)
        if not prefer and policy.data:
            prefer = self.data_hosts(policy.data)
        return Shape(nodes=max(1, job.node_count), gpus_per_node=job_gpus_per_node(job),
                     level=level, strict=strict, gpu_type=self.gpu_type(job),
                     min_gpu_memory_gb=policy.min_gpu_memory_gb, prefer=prefer)

    def _fit_table(self, free: Mapping[str, int], level: Level, key: Any) -> dict[int, int]:
        """g -> most hosts with >= g free GPUs inside one domain of ``level``."""
        table = self._fit_tables.get((key, level)) if key is not None else None
        if table is not None:
            return table
        counts: dict[str, dict[int, int]] = {}
        for host, f in free.items():
            if f <= 0:
                continue
            per = counts.setdefault(self.domain_of(host, level), {})
            per[f] = per.get(f, 0) + 1
        table = {}
        for per in counts.values():
            running = 0
            for g in sorted(per, reverse=True):
                running += per[g]
                if running > table.get(g, 0):
                    table[g] = running
        # Make it monotone: hosts with >= g also have >= any smaller g.
        best = 0
        for g in sorted(table, reverse=True):
            best = max(best, table[g])
            table[g] = best
        if key is not None:
            self._fit_tables[(key, level)] = table
        return table

    def most_hosts_in_one_domain(self, free: Mapping[str, int], gpus_per_node: int,
                                 level: Level, key: Any = None) -> int:
        table = self._fit_table(free, level, key)
        eligible = [c for g, c in table.items() if g >= gpus_per_node]
        return max(eligible) if eligible else 0

    def fits_now(self, job: Job) -> bool:
        """Could the job's shape start on what is free now (by counting, no search)?"""
        gpn = job_gpus_per_node(job)
        if gpn <= 0:
            return True
        level, strict = self.level_of(job)
        if not strict:
            level = Level.CLUSTER
        need = max(1, job.node_count)
        key, free = self._base_free(job)
        if self.has_own_active_reservation(job):
            own = self.free_map(job)
            if own is not free:  # its own reservation adds hosts: no shared answer
                return self.most_hosts_in_one_domain(own, gpn, level) >= need
        # Most jobs share a few shapes: answer each shape once.
        shape_key = (key, gpn, level, need)
        hit = self._fits.get(shape_key)
        if hit is None:
            hit = self._fits[shape_key] = (
                self.most_hosts_in_one_domain(free, gpn, level, key) >= need)
        return hit

    def assign_free(self, order: Iterable[Job]) -> None:
        """Hand what is free now to the pending jobs in Slurm's ``order`` (highest
        priority first), each taking its GPUs if it fits on what the jobs
        before it left (:meth:`_take_free`). Slurm gives a free GPU to one job:
        forty pending one-GPU jobs do not all fit on three free GPUs. Held,
        dependent, deferred and over-quota jobs take nothing."""
        taken: dict[str, int] = {}
        starts: set[int] = set()
        self.free_taken, self.starts_on_free = taken, starts
        self._free_indexes = {}
        free, reserved_now = self.free, self.reserved_now
        # Whole GPUs free on hosts no reservation holds now, less what jobs took:
        # the most a job without a GPU type or a reservation of its own could get.
        # On a full cluster it is soon 0, and the rest of the queue is answered
        # by one comparison each instead of a fit test each (or, after
        # priority.compute, by a set lookup each: below).
        left = sum(f for h, f in free.items() if f > 0 and h not in reserved_now)
        # Jobs take GPUs and never give any back during the walk, so a shape
        # that found no room finds none further down the queue either: its
        # later jobs are not asked again (most of a full cluster's queue is a
        # few shapes that do not fit). A job with a reservation of its own, or
        # one that owns a reservation ahead, has hosts no other job has: asked
        # one by one.
        failed: set[tuple[Any, ...]] = set()
        later = bool(self.reserved_later)
        owners = self._later_owners
        own_res = self.jobs_with_our_active_res
        infos_get = self.infos.get
        now = self.now
        # Once ``left`` is 0 only the jobs that take GPUs it does not count can
        # start (JobInfo.takes_uncounted, or a reservation of ours): with the
        # queue's set of those (``takes_uncounted``, which priority.compute
        # fills), the rest of the order is passed over by C-level set lookups.
        # In a replay of 20,000 jobs at x3 that rest was 96% of the jobs
        # this walk met, at every plan.
        uncounted = self.takes_uncounted
        jobs: Iterator[Job] = iter(order)
        cut = uncounted is not None
        while True:
            if cut and left <= 0:
                cut = False
                keep = uncounted | own_res if uncounted else own_res
                if not keep:
                    return
                rest = list(jobs)
                jobs = compress(rest, map(keep.__contains__, map(_job_id, rest)))
            for job in jobs:
                info = infos_get(job.job_id)
                if info is None or info.job is not job:
                    info = self.info(job)
                take_key = info.take_key
                gpn = take_key[2]  # job_gpus_per_node
                own = bool(job.reservation) or job.job_id in own_res  # has_own_active_reservation
                if gpn > 0 and gpn * take_key[3] > left and info.gpu_type is None and not own:
                    continue
                if info.blocked_at(now):  # blocked_by_slurm
                    continue
                shape: tuple[Any, ...] | None = None
                if not (own or job.job_id in owners):
                    # Reservations ahead take hosts by the job's time limit and user.
                    shape = (take_key, job.time_limit, job.user) if later else take_key
                    if shape in failed:
                        continue
                took = self._take_free(job)
                if took is None:
                    if shape is not None:
                        failed.add(shape)
                    continue
                starts.add(job.job_id)
                for h, g in took:
                    if h in free and h not in reserved_now:
                        after = taken[h]
                        left -= max(0, free[h] - (after - g)) - max(0, free[h] - after)
                if cut and left <= 0:
                    break
            else:
                return

    def gets_free_gpus(self, job: Job) -> bool:
        """Slurm would start the job now on free GPUs (:meth:`assign_free`; before
        the plan assigned them, whether it fits at all)."""
        if self.starts_on_free is None:
            return self.fits_now(job)
        return job.job_id in self.starts_on_free

    def _take_free(self, job: Job) -> list[tuple[str, int]] | None:
        """The (host, GPUs) the job takes if it fits on what is free now once
        ``free_taken`` is gone (added to it), None if it does not fit: best fit,
        the hosts with the fewest free GPUs that hold it (ties: by name), in one
        domain of its level when strict (the domain whose pick comes first).

        The answer of :meth:`_take_free_walk` (every host looked at, per job),
        from an index of the free hosts by GPUs left that the jobs of one free
        map share: assign_free asks for every job of the queue that fits, and a
        walk per job over thousands of free hosts grew with their product.
        """
        gpn = job_gpus_per_node(job)
        if gpn <= 0:
            return []
        if not self.fits_now(job):
            return None  # the common answer, from the shared per-shape table
        level, strict = self.level_of(job)
        need = max(1, job.node_count)
        if not strict or need == 1:
            # One host's best fit is the best of every domain's: the level
            # only matters when several hosts must share a domain.
            level = Level.CLUSTER
        key, base = self._base_free(job)
        if self.has_own_active_reservation(job) and self.free_map(job) is not base:
            return self._take_free_walk(job)  # its own hosts too: a map of its own
        index = self._free_indexes.get((key, level))
        if index is None:
            index = self._free_indexes[key, level] = _FreeIndex(
                base, self.free_taken, level, self.domain_of)
        best = index.pick(gpn, need)
        if best is None:
            return None
        for h in best:
            self._take(h, gpn)
        return [(h, gpn) for h in best]

    def _take(self, host: str, gpus: int) -> None:
        """``gpus`` of ``host`` go to a job: in ``free_taken`` and every index."""
        self.free_taken[host] = self.free_taken.get(host, 0) + gpus
        for index in self._free_indexes.values():
            index.took(host, gpus)

    def _take_free_walk(self, job: Job) -> list[tuple[str, int]] | None:
        """:meth:`_take_free` by a walk over the job's free map: every host,
        grouped by domain of its level when strict, the fullest that hold it."""
        gpn = job_gpus_per_node(job)
        if gpn <= 0:
            return []
        if not self.fits_now(job):
            return None
        level, strict = self.level_of(job)
        if not strict:
            level = Level.CLUSTER
        best = best_fit_walk(self.free_map(job), self.free_taken, gpn, max(1, job.node_count),
                             level, self.domain_of)
        if best is None:
            return None
        for h in best:
            self._take(h, gpn)
        return [(h, gpn) for h in best]

    def free_gpus_for(self, job: Job) -> int:
        key, base = self._base_free(job)
        if self.has_own_active_reservation(job):
            own = self.free_map(job)
            if own is not base:
                return sum(own.values())
        return self._free_totals[key]

    def fragmentation_blocked(self, job: Job) -> bool:
        """Enough GPUs are free in total, but not in the shape the job needs."""
        gpus = job_gpus(job)
        return gpus > 0 and self.free_gpus_for(job) >= gpus and not self.fits_now(job)

    def release_events(self, job: Job) -> list[tuple[float, int, str, int]]:
        """(expected end, job id, host, GPUs freed) of running jobs on the job's hosts,
        soonest first; jobs without a known end are left out."""
        gpu_type = self.gpu_type(job)
        key = (job.partition, gpu_type)
        hit = self._events.get(key)
        if hit is not None:
            return hit
        events: list[tuple[float, int, str, int]] = []
        for h in self.eligible_map(job):
            if not self.nodes[h].schedulable:
                continue
            for running in self.running_by_host.get(h, ()):
                end = self.expected_end(running)
                if math.isinf(end):
                    continue
                gpus = running.gpus_on_node.get(h) if running.gpus_on_node else None
                if gpus is None:
                    gpus = running.gpus_per_node or (
                        job_gpus(running) // max(1, len(running.nodes)))
                events.append((end, running.job_id, h, gpus))
        events.sort()
        self._events[key] = events
        return events

    def track_preemptions(self, open_preemptions: list[PreemptionIntent]) -> None:
        """Take these open preemptions as in flight: their beneficiaries, claimed
        hosts and victims (who leave by their checkpoint deadline).

        plan() calls it again with the preemptions it has just started, so that
        the reservations it plans next count those victims' ends as the next
        cycle will (answers cached so far are dropped).
        """
        self.open_preemptions: list[PreemptionIntent] = open_preemptions
        self.preemption_of_beneficiary: dict[int, PreemptionIntent] = {
            p.beneficiary: p for p in open_preemptions}
        #: Victims of open preemptions not yet requeued, and their deadlines.
        self.victims_in_flight: dict[int, float | None] = {}
        self.claimed_hosts: set[str] = set()
        for p in open_preemptions:
            self.claimed_hosts.update(p.nodes)
            for v in p.victims:
                victim = self.by_id.get(v.job_id)
                still_there = (victim is not None and victim.is_running
                               and victim.restart_count == v.restart_count)
                # A requeued victim that Slurm still shows running (a snapshot
                # taken before the requeue landed) is still taken.
                if still_there or v.state not in (VictimState.REQUEUED, VictimState.ENDED):
                    self.victims_in_flight[v.job_id] = v.deadline
        for cache in ("_free_maps", "_fit_tables", "_free_totals", "_fits", "_events",
                      "forecasts"):
            if hasattr(self, cache):
                getattr(self, cache).clear()

    # --- time -------------------------------------------------------------------
    def expected_end(self, job: Job) -> float:
        """When a running job is expected to end: its expected runtime, else its limit."""
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            info = self.info(job)
        end = info.end
        if end is None:
            end = _planned_end(self.now, info.policy.expected_runtime, job.time_limit)
        deadline = self.victims_in_flight.get(job.job_id)
        if job.job_id in self.victims_in_flight:
            # Being preempted: it goes at its checkpoint deadline at the latest.
            end = min(end, deadline if deadline is not None
                      else self.now + self.settings.preemption.default_grace)
        return max(end, self.now + OVERDUE_GRACE) if end < self.now + OVERDUE_GRACE else end

    def wait_seconds(self, job: Job) -> float:
        since = job.eligible_time or job.submit_time
        return max(0.0, self.now - since) if since is not None else 0.0

    def blocked_by_slurm(self, job: Job) -> str:
        """The category of a reason that is not about resources ("" when none):
        held, dependency, deferred (BeginTime, or a begin time still ahead), quota."""
        info = self.infos.get(job.job_id)
        if info is None or info.job is not job:
            info = self.info(job)
        return info.blocked_at(self.now)

    # --- data locality ----------------------------------------------------------
    def data_hosts(self, name: str) -> frozenset[str]:
        """Hosts holding data set ``name`` (node feature ``data_NAME``)."""
        if self._data_hosts is None:
            index: dict[str, set[str]] = {}
            for node in self.snapshot.nodes:
                for feature in node.features:
                    if feature.startswith("data_"):
                        index.setdefault(feature[5:], set()).add(node.name)
            self._data_hosts = {k: frozenset(v) for k, v in index.items()}
        return self._data_hosts.get(name, frozenset())
