"""The inspector's view model: one Frame (what ``top`` and ``why`` show at one
moment) and the ordered, filtered, windowed lists of jobs drawn from it.

Pure data, no rich and no I/O, so that the views and the live app can be
tested on fixed snapshots. Everything that costs per job (ordering, queue
positions) is computed once per Frame and cached; formatting a row is left to
the views, which only format the rows that fit on screen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slurmpolicy.jobpolicy import last_checkpoint, parse_admin_comment
from slurmpolicy.model import Job, Node, Snapshot
from slurmpolicy.policy.actions import Intents, PreemptionIntent, VictimIntent
from slurmpolicy.settings import Settings

#: Stands for a job Slurm does not show the caller (e.g. the beneficiary of a
#: preemption whose victim is the caller's job); Slurm's job ids start at 1.
HIDDEN_JOB = 0

#: Orders the queue can be shown in, cycled by the ``s`` key in ``top``.
SORT_KEYS: tuple[str, ...] = ("priority", "wait", "gpus", "user", "job")
#: The same for running jobs.
RUNNING_SORT_KEYS: tuple[str, ...] = ("job", "runtime", "gpus", "user", "checkpoint")


@dataclass(frozen=True, slots=True)
class Decision:
    """One row of the daemon's audit: an action it took (or refused) and why."""

    at: float
    kind: str
    reason: str
    job_id: int | None = None
    outcome: str = ""


@dataclass(frozen=True, slots=True)
class Filters:
    """Exact-match filters on user, account and partition (empty: any)."""

    user: str = ""
    account: str = ""
    partition: str = ""

    def match(self, job: Job) -> bool:
        if self.user and job.user != self.user:
            return False
        if self.account and job.account != self.account:
            return False
        # A job pending in several partitions ("prod,research") matches each.
        return not (self.partition and self.partition not in job.partition.split(","))

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in
                 (("user", self.user), ("account", self.account), ("partition", self.partition))
                 if v]
        return " ".join(parts)

    def with_(self, **changes: str) -> Filters:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything the inspector shows, read once.

    ``snapshot`` is what Slurm returned to the calling user (so Slurm's own
    PrivateData filtering applies); ``intents`` and ``decisions`` come from the
    daemon's journal and have already been cut down to jobs in the snapshot.
    """

    snapshot: Snapshot
    now: float
    settings: Settings = field(default_factory=Settings)
    intents: Intents = field(default_factory=Intents)
    decisions: tuple[Decision, ...] = ()
    #: host -> leaf switch (or rack) name; hosts absent are shown under "-".
    leaf_of: Mapping[str, str] = field(default_factory=dict)
    #: host -> NVLink domain name, when known.
    nvlink_of: Mapping[str, str] = field(default_factory=dict)
    #: Degraded links in words ("dgx08 - leaf2: degraded").
    degraded_links: tuple[str, ...] = ()
    #: Empty when the daemon's journal was read; else "policy details unavailable: <why>".
    policy_note: str = ""
    #: Where the data came from, for the header ("slurm via jsoncli", "dir ...").
    source: str = ""
    #: Effective priority per job as ``policy.plan()`` computes it (the site
    #: factor it wants plus Slurm's other factors); jobs absent use Slurm's priority.
    effective: Mapping[int, int] = field(default_factory=dict)
    #: Per-frame indexes; not an init field, so that dataclasses.replace() starts afresh.
    _cache: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    # --- per-frame indexes, built once ----------------------------------------
    def _cached(self, key: str, build: Any) -> Any:
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = build()
        return hit

    def priority_of(self, job: Job) -> int:
        """The job's effective priority: the planner's when known, else Slurm's."""
        return self.effective.get(job.job_id, job.priority)

    def pending(self) -> list[Job]:
        """Pending jobs by effective priority: highest first, then oldest, then lowest id."""
        result: list[Job] = self._cached("pending", lambda: sorted(
            self.snapshot.pending(),
            key=lambda j: (-self.priority_of(j), j.submit_time or 0.0, j.job_id)))
        return result

    def running(self) -> list[Job]:
        result: list[Job] = self._cached(
            "running", lambda: sorted(self.snapshot.running(), key=display_order))
        return result

    def positions(self) -> dict[int, tuple[int, int]]:
        """job id -> (1-based position, pending jobs) in its partition by effective priority."""

        def build() -> dict[int, tuple[int, int]]:
            seen: dict[str, int] = {}
            pos: dict[int, int] = {}
            for job in self.pending():
                seen[job.partition] = seen.get(job.partition, 0) + 1
                pos[job.job_id] = seen[job.partition]
            return {jid: (p, seen[self._partition_of(jid)]) for jid, p in pos.items()}

        result: dict[int, tuple[int, int]] = self._cached("positions", build)
        return result

    def _partition_of(self, job_id: int) -> str:
        job = self.snapshot.job(job_id)
        return job.partition if job is not None else ""

    def victim_intent(self, job_id: int) -> tuple[PreemptionIntent, VictimIntent] | None:
        """The open preemption that has this job as a victim, if any."""

        def build() -> dict[int, tuple[PreemptionIntent, VictimIntent]]:
            out: dict[int, tuple[PreemptionIntent, VictimIntent]] = {}
            for p in self.intents.open_preemptions():
                for v in p.victims:
                    out[v.job_id] = (p, v)
            return out

        table: dict[int, tuple[PreemptionIntent, VictimIntent]] = self._cached("victims", build)
        return table.get(job_id)

    def beneficiary_intent(self, job_id: int) -> PreemptionIntent | None:
        for p in self.intents.open_preemptions():
            if p.beneficiary == job_id:
                return p
        return None

    # --- per-job facts the views need (called for visible rows only) ---------
    def job_class(self, job: Job) -> str:
        return parse_admin_comment(job.admin_comment).job_class or self.settings.default_class

    def wait(self, job: Job) -> float | None:
        since = job.eligible_time or job.submit_time
        return None if since is None else max(0.0, self.now - since)

    def runtime(self, job: Job) -> float | None:
        return None if job.start_time is None else max(0.0, self.now - job.start_time)

    def checkpoint_age(self, job: Job) -> float | None:
        stamp = last_checkpoint(job.comment, self.now)
        return None if stamp is None else max(0.0, self.now - stamp)

    def estimated_start(self, job: Job) -> float | None:
        """Slurm's own estimate (squeue --start) for a pending job; None when it has none."""
        if not job.is_pending or not job.start_time:
            return None
        return job.start_time

    def preemption_state(self, job: Job) -> str:
        """Short words for the running table: victim state and deadline, or protection."""
        hit = self.victim_intent(job.job_id)
        if hit is not None:
            _, victim = hit
            text = victim.state.value
            if victim.deadline is not None and victim.state.value in ("planned", "signalled"):
                left = victim.deadline - self.now
                text += f" {_short(left)} left" if left >= 0 else " deadline passed"
            return text
        policy = parse_admin_comment(job.admin_comment)
        klass = self.settings.classes.get(policy.job_class or self.settings.default_class)
        if not policy.preemptible or (klass is not None and not klass.preemptible):
            return "protected"
        if not job.requeue:
            return "no requeue"
        return "-"

    def visible(self, job_id: int) -> bool:
        return self.snapshot.job(job_id) is not None

    def gpu_totals(self) -> tuple[int, int, int]:
        """(GPUs in the cluster, GPUs in use, GPUs on nodes that cannot take work)."""
        total = used = down = 0
        for node in self.snapshot.nodes:
            total += node.gpus
            used += node.gpus_alloc
            if not node.schedulable:
                down += max(0, node.gpus - node.gpus_alloc)
        return total, used, down


def display_order(job: Job) -> tuple[int, int, int]:
    """Jobs by the id a user types: array tasks (123_0, 123_1 ...) together, in task order."""
    if job.array_job_id is not None and job.array_task_id is not None:
        return (job.array_job_id, job.array_task_id, job.job_id)
    if job.het_job_id is not None and job.het_job_offset is not None:
        return (job.het_job_id, job.het_job_offset, job.job_id)
    return (job.job_id, -1, job.job_id)


def _short(seconds: float) -> str:
    from slurmpolicy.durations import humanize

    return humanize(seconds)


# --- ordered, filtered lists ---------------------------------------------------
def order_queue(frame: Frame, filters: Filters, sort: str = "priority",
                reverse: bool = False) -> list[Job]:
    """Pending jobs matching ``filters`` in the asked order (cached per frame)."""
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}; allowed: {', '.join(SORT_KEYS)}")
    key = f"queue:{filters!r}:{sort}:{reverse}"

    def build() -> list[Job]:
        jobs = [j for j in frame.pending() if filters.match(j)]
        if sort == "wait":
            # Longest wait first: earliest eligible time.
            jobs.sort(key=lambda j: (j.eligible_time or j.submit_time or 0.0, j.job_id))
        elif sort == "gpus":
            jobs.sort(key=lambda j: (-(j.gpus or j.gpus_per_node * j.node_count), j.job_id))
        elif sort == "user":
            jobs.sort(key=lambda j: (j.user, -frame.priority_of(j), j.job_id))
        elif sort == "job":
            jobs.sort(key=display_order)
        if reverse:
            jobs.reverse()
        return jobs

    result: list[Job] = frame._cached(key, build)
    return result


def order_running(frame: Frame, filters: Filters, sort: str = "job",
                  reverse: bool = False) -> list[Job]:
    if sort not in RUNNING_SORT_KEYS:
        raise ValueError(f"unknown sort {sort!r}; allowed: {', '.join(RUNNING_SORT_KEYS)}")
    key = f"running:{filters!r}:{sort}:{reverse}"

    def build() -> list[Job]:
        jobs = [j for j in frame.running() if filters.match(j)]
        if sort == "runtime":
            jobs.sort(key=lambda j: (j.start_time or 0.0, j.job_id))
        elif sort == "gpus":
            jobs.sort(key=lambda j: (-(j.gpus or j.gpus_per_node * j.node_count), j.job_id))
        elif sort == "user":
            jobs.sort(key=lambda j: (j.user, j.job_id))
        elif sort == "checkpoint":
            # Oldest checkpoint first (the most work at risk); none at all leads.
            jobs.sort(key=lambda j: (last_checkpoint(j.comment, frame.now) or 0.0, j.job_id))
        if reverse:
            jobs.reverse()
        return jobs

    result: list[Job] = frame._cached(key, build)
    return result


def window(total: int, height: int, selected: int, offset: int) -> int:
    """The first visible row so that ``selected`` is on screen, moving as little as possible."""
    if height <= 0 or total <= 0:
        return 0
    selected = min(max(selected, 0), total - 1)
    if selected < offset:
        offset = selected
    elif selected >= offset + height:
        offset = selected - height + 1
    return max(0, min(offset, max(0, total - height)))


# --- the fabric, grouped -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeafSummary:
    leaf: str
    nodes: tuple[Node, ...]
    gpus: int
    used: int
    free: int
    drained: tuple[Node, ...]


def fabric_summary(frame: Frame) -> list[LeafSummary]:
    """Nodes grouped by leaf (in leaf then host order), with GPU counts and drained nodes."""

    def build() -> list[LeafSummary]:
        groups: dict[str, list[Node]] = {}
        for node in sorted(frame.snapshot.nodes, key=lambda n: n.name):
            groups.setdefault(frame.leaf_of.get(node.name, "-"), []).append(node)
        out = []
        for leaf in sorted(groups, key=lambda name: (name == "-", name)):
            nodes = groups[leaf]
            out.append(LeafSummary(
                leaf=leaf, nodes=tuple(nodes),
                gpus=sum(n.gpus for n in nodes),
                used=sum(n.gpus_alloc for n in nodes),
                free=sum(n.gpus_free for n in nodes),
                drained=tuple(n for n in nodes if not n.schedulable),
            ))
        return out

    result: list[LeafSummary] = frame._cached("fabric", build)
    return result


def leaves_from_features(nodes: Sequence[Node], prefix: str) -> dict[str, str]:
    """host -> leaf read from node features (``leaf1``), the fallback when no Fabric is given."""
    out: dict[str, str] = {}
    if not prefix:
        return out
    for node in nodes:
        for feature in node.features:
            if feature.startswith(prefix):
                out[node.name] = feature
                break
    return out
