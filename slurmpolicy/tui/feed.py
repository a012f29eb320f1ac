"""Where the inspector's data comes from: one read of Slurm (or of saved
outputs), the daemon's journal when it is readable, and the fabric; and the
explanation of one job through the same ``policy.explain()`` the daemon uses.

Read-only by construction: it takes a snapshot through the Slurm port (which
runs squeue/sinfo/scontrol as the calling user, so Slurm's PrivateData
filtering decides what is seen), opens the journal with ``read_only=True``,
and cuts everything read from the journal down to jobs present in that
snapshot, so that the journal never reveals a job Slurm would not show.
Nothing here needs root.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurmpolicy.durations import format_duration
from slurmpolicy.errors import JobGone, SlurmError, SlurmPolicyError
from slurmpolicy.hostlist import compress
from slurmpolicy.jobpolicy import last_checkpoint, parse_admin_comment
from slurmpolicy.model import Job, Snapshot
from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.explanation import Explanation
from slurmpolicy.privacy import redact_jobs
from slurmpolicy.protocol import script_signal, submit_line_signal
from slurmpolicy.settings import Settings
from slurmpolicy.tui.frame import HIDDEN_JOB, Decision, Frame, leaves_from_features

#: How many audit rows ``top`` keeps.
DECISIONS_KEPT = 50

#: Slurm's pending reasons in words (the common ones; others are shown as Slurm says).
SLURM_REASONS: dict[str, str] = {
    "Priority": "jobs of higher priority are ahead of it",
    "Resources": "the resources it asks for are not free yet",
    "Dependency": "it waits for a job it depends on",
    "DependencyNeverSatisfied": "a job it depends on ended in a way that can never satisfy it",
    "JobHeldUser": "held by its owner (scontrol release to let it run)",
    "JobHeldAdmin": "held by an administrator",
    "BeginTime": "its start time (--begin) has not come yet",
    "ReqNodeNotAvail": "a node it needs is unavailable (down, drained or reserved)",
    "Reservation": "it waits for its reservation to start",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "its time limit exceeds the partition's",
    "AssocGrpGRES": "its account's GPU limit is reached",
    "AssocGrpGRESMinutes": "its account's GPU-minutes limit is reached",
    "AssocMaxJobsLimit": "its account's limit on running jobs is reached",
    "QOSMaxGRESPerUser": "its QOS limit of GPUs per user is reached",
    "QOSGrpGRES": "its QOS GPU limit is reached",
    "QOSMaxJobsPerUserLimit": "its QOS limit of running jobs per user is reached",
    "Licenses": "it waits for licenses",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "its constraints can never be satisfied",
    "None": "",
}


def policy_unavailable(why: str) -> str:
    return f"policy details unavailable: {why}"


def visible_intents(intents: Intents, snapshot: Snapshot) -> Intents:
    """Intents cut down to the jobs in ``snapshot`` (what Slurm shows the caller)."""
    seen = {j.job_id for j in snapshot.jobs}
    accounts = {j.account for j in snapshot.jobs}
    preemptions = []
    hidden = 0
    for p in intents.preemptions:
        victims = tuple(v for v in p.victims if v.job_id in seen)
        if p.beneficiary in seen:
            preemptions.append(replace(p, victims=victims))
        elif victims:
            # The caller's job is a victim for a job Slurm hides from them: they may
            # know their job is being preempted, not for whom (the daemon's ids and
            # reservation names carry the beneficiary's job id).
            hidden += 1
            preemptions.append(replace(p, victims=victims, beneficiary=HIDDEN_JOB,
                                       preemption_id=f"hidden-{hidden}", reservation=""))
    return Intents(
        preemptions=tuple(preemptions),
        reservations=tuple(r for r in intents.reservations if r.job_id in seen),
        usage={a: u for a, u in intents.usage.items() if a in accounts},
        usage_at=intents.usage_at,
        preempted_at={j: t for j, t in intents.preempted_at.items() if j in seen},
        missed_acks={j: n for j, n in intents.missed_acks.items() if j in seen},
        site_factors={j: f for j, f in intents.site_factors.items() if j in seen},
    )


def visible_decisions(rows: list[Decision], snapshot: Snapshot) -> tuple[Decision, ...]:
    """Audit rows about jobs the caller can see; rows about no visible job are left out."""
    seen = {j.job_id for j in snapshot.jobs}
    return tuple(d for d in rows if d.job_id is not None and d.job_id in seen)


def slurm_conf_path(from_dir: Path | None) -> Path | None:
    if from_dir is not None:
        saved = from_dir / "slurm.conf"
        return saved if saved.exists() else None
    for candidate in (os.environ.get("SLURM_CONF"), "/etc/slurm/slurm.conf"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def read_saved_snapshot(directory: Path) -> Snapshot:
    """A Snapshot from saved Slurm outputs (named like the recorded fixtures),
    by the jsoncli adapter's reader."""
    from slurmpolicy.slurm.parse import load_dir

    return load_dir(directory)


class Feed:
    """Reads Frames for ``top`` and ``why``.

    ``client`` is any object with ``snapshot()`` (a SlurmClient); without one,
    ``from_dir`` names saved outputs; without either, the adapter of the
    settings is connected on first use. ``journal`` overrides the journal
    location (default: the daemon's state_dir).
    """

    def __init__(self, settings: Settings | None = None, *, client: Any = None,
                 from_dir: str | Path | None = None, journal: str | Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings or Settings()
        self.client = client
        self.from_dir = Path(from_dir) if from_dir is not None else None
        self.journal_path = Path(journal) if journal is not None else Path(
            self.settings.daemon.state_dir)
        self.clock = clock
        self._fabric: Any = None
        self._fabric_nodes: tuple[str, ...] = ()
        self.fabric_note = ""

    # --- the parts --------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        if self.from_dir is not None:
            return read_saved_snapshot(self.from_dir)
        if self.client is None:
            from slurmpolicy.slurm.connect import connect

            options: dict[str, object] = {"timeout": self.settings.slurm.command_timeout}
            if self.settings.slurm.bin_dir:
                options["bin_dir"] = self.settings.slurm.bin_dir
            self.client = connect(self.settings.slurm.adapter, **options)
        snap: Snapshot = self.client.snapshot()
        return snap

    def source(self) -> str:
        if self.from_dir is not None:
            return f"dir {self.from_dir}"
        return str(getattr(self.client, "name", "slurm"))

    def journal(self, snapshot: Snapshot, now: float) -> tuple[Intents, tuple[Decision, ...], str]:
        """(intents, decisions, note): note is empty when the journal was read."""
        try:
            from slurmpolicy.store import Journal
        except ImportError as exc:
            return Intents(), (), policy_unavailable(f"no journal support in this build ({exc})")
        try:
            journal = Journal(self.journal_path, read_only=True)
        except (SlurmPolicyError, OSError, ValueError) as exc:
            return Intents(), (), policy_unavailable(str(exc))
        except Exception as exc:  # sqlite3 errors: unreadable, locked, not a database
            return Intents(), (), policy_unavailable(f"{self.journal_path}: {exc}")
        seen = {j.job_id for j in snapshot.jobs}
        try:
            intents = journal.load_intents(now=now)
            # A job's history is its own: rows from before the first submission
            # of the job that now holds the id are about another job. A decision that
            # concerns a job Slurm hides from the caller (a preemption's beneficiary
            # named in its victim's row) is left out whole, as `log` does.
            first = journal.jobs_since() if hasattr(journal, "jobs_since") else {}
            rows = [Decision(at=r.at, kind=r.kind, reason=redact_jobs(r.reason, seen),
                             job_id=r.job_id, outcome=redact_jobs(r.outcome, seen))
                    for r in journal.read_audit(limit=DECISIONS_KEPT * 4) if not r.dry_run
                    and (r.job_id is None or r.at >= first.get(r.job_id, r.at))
                    and set(getattr(r, "jobs", ())) <= seen]
        except Exception as exc:
            return Intents(), (), policy_unavailable(f"{self.journal_path}: {exc}")
        finally:
            close = getattr(journal, "close", None)
            if callable(close):
                close()
        decisions = visible_decisions(rows, snapshot)[-DECISIONS_KEPT:]
        return visible_intents(intents, snapshot), decisions, ""

    def fabric(self, snapshot: Snapshot) -> Any:
        """The Fabric of the snapshot's nodes (cached while the node set is unchanged);
        None with ``fabric_note`` set when it cannot be built."""
        names = tuple(sorted(n.name for n in snapshot.nodes))
        if self._fabric is not None and names == self._fabric_nodes:
            return self._fabric
        try:
            from slurmpolicy.topology import Fabric

            self._fabric = Fabric.from_sources(snapshot.nodes, self.settings.fabric,
                                               slurm_conf_path(self.from_dir))
            self._fabric_nodes = names
            self.fabric_note = ""
        except ImportError as exc:
            self._fabric, self.fabric_note = None, f"fabric unavailable: {exc}"
        except Exception as exc:  # a bad topology source must not stop the inspector
            self._fabric, self.fabric_note = None, f"fabric unavailable: {exc}"
        return self._fabric

    # --- a whole frame ------------------------------------------------------------
    def read(self) -> Frame:
        snapshot = self.snapshot()
        # Saved outputs are shown as of the moment they were taken.
        now = snapshot.taken_at if self.from_dir is not None else self.clock()
        intents, decisions, note = self.journal(snapshot, now)
        fab = self.fabric(snapshot)
        leaf_of, nvlink_of, degraded = domains_of(fab, snapshot, self.settings)
        return Frame(snapshot=snapshot, now=now, settings=self.settings, intents=intents,
                     decisions=decisions, leaf_of=leaf_of, nvlink_of=nvlink_of,
                     degraded_links=degraded, policy_note=note, source=self.source(),
                     effective=self.effective_priorities(snapshot, fab, intents, now),
                     suspects=self.node_health(snapshot, now) if not note else {})

    def node_health(self, snapshot: Snapshot, now: float) -> dict[str, str]:
        """Suspect nodes from the journal's failure record; counts only, no job ids
        (the jobs may be other users')."""
        try:
            from slurmpolicy.lifestore import LifeStore
            from slurmpolicy.policy.lifecycle import suspicion
            from slurmpolicy.store import Journal

            journal = Journal(self.journal_path, read_only=True)
        except Exception:  # the journal note already says why it is unreadable
            return {}
        try:
            failures = LifeStore(journal).node_failures(now - self.settings.node_health.window)
            found = suspicion(failures, snapshot.nodes, self.settings, now)
        except Exception:
            return {}
        finally:
            journal.close()
        out = {}
        for s in found:
            state = ("drain due" if s.drain else "out of service" if s.out_of_service
                     else "not drained: " + s.held_back if s.held_back else "suspect")
            out[s.node] = f"{len(s.jobs)} failed jobs, {s.users} users, {state}"
        return out

    def effective_priorities(self, snapshot: Snapshot, fab: Any, intents: Intents,
                             now: float) -> dict[int, int]:
        """Effective priorities from the same ``plan()`` the daemon runs (nothing is
        carried out); empty, so that Slurm's own priorities show, when it cannot run."""
        if fab is None:
            return {}
        try:
            from slurmpolicy.policy import plan

            return dict(plan(snapshot, fab, self.settings, intents, now).effective_priority)
        except Exception:  # the view must survive a planner bug; why shows the error
            return {}

    def explain(self, frame: Frame, job_id: int) -> Explanation:
        """The job's explanation by ``policy.explain()``; Slurm's view alone when
        the fabric cannot be built (explain needs it)."""
        job = frame.snapshot.job(job_id)
        if job is None:
            raise JobGone(f"job {job_id} is not in the queue Slurm shows you "
                          "(finished and purged, never existed, or not yours to see)")
        fab = self.fabric(frame.snapshot)
        from slurmpolicy.policy import explain

        if fab is None:
            return slurm_view(frame, job, note=self.fabric_note)
        snapshot = self._with_batch_signal(frame.snapshot, job)
        result: Explanation = explain(snapshot, fab, self.settings, frame.intents,
                                      frame.now, job_id)
        return result

    def _with_batch_signal(self, snapshot: Snapshot, job: Job) -> Snapshot:
        """The snapshot with the job's ``#SBATCH --signal`` read from its batch
        script (as the daemon does), so that ``why`` names the protocol the
        daemon recognises. Slurm shows a script only to its owner and admins;
        for anyone else nothing is read."""
        read = getattr(self.client, "batch_script", None)
        if read is None or not job.requeue or submit_line_signal(job.submit_line) or \
                parse_admin_comment(job.admin_comment).checkpoint is not None:
            return snapshot
        try:
            value = script_signal(read(job.job_id))
        except SlurmError:
            return snapshot
        if not value:
            return snapshot
        jobs = tuple(replace(j, batch_signal=value) if j.job_id == job.job_id else j
                     for j in snapshot.jobs)
        return replace(snapshot, jobs=jobs)


def domains_of(fab: Any, snapshot: Snapshot, settings: Settings
               ) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """(host -> leaf, host -> NVLink domain, degraded links in words)."""
    if fab is None:
        return leaves_from_features(snapshot.nodes, settings.fabric.leaf_feature_prefix), {}, ()
    from slurmpolicy.topology.types import Level

    leaf_of: dict[str, str] = {}
    nvlink_of: dict[str, str] = {}
    for node in snapshot.nodes:
        try:
            leaf_of[node.name] = fab.domain_of(node.name, Level.LEAF)
            nvlink_of[node.name] = fab.domain_of(node.name, Level.NVLINK)
        except Exception:  # a node Slurm knows but the fabric sources do not
            continue
    degraded: list[str] = []
    to_dict = getattr(fab, "to_dict", None)
    if callable(to_dict):
        try:
            for link in to_dict().get("links_not_ok", []):
                degraded.append(f"{link['a']} - {link['b']}: {link['health']}")
        except Exception:
            degraded = []
    return leaf_of, nvlink_of, tuple(degraded)


# --- Slurm's view alone --------------------------------------------------------------
def _request(job: Job) -> str:
    nodes = f"{job.node_count} node{'s' if job.node_count != 1 else ''}"
    if job.gpus_per_node:
        gpus = f"{job.gpus_per_node} GPU"
    elif job.gpus:
        gpus = f"{job.gpus} GPU in all"
    else:
        gpus = "no GPU"
    kind = f" ({job.gpu_type})" if job.gpu_type else ""
    policy = parse_admin_comment(job.admin_comment)
    topo = f", {policy.topology}{',strict' if policy.topology_strict else ''}" \
        if policy.topology != "any" else ""
    return f"{nodes} x {gpus}{kind}{topo}, {format_duration(job.time_limit)}"


def slurm_view(frame: Frame, job: Job, *, note: str = "") -> Explanation:
    """What Slurm itself says about a job, in the Explanation's words.

    The fallback when ``policy.explain()`` cannot run (no fabric, or a build
    without the policy engine): no slurmpolicy reasons, no alternatives.
    """
    notes = (note,) if note else ()
    klass = frame.job_class(job)
    reason_text = SLURM_REASONS.get(job.reason, "")
    if job.is_running:
        where = compress(job.nodes) if job.nodes else "unknown nodes"
        leaves = sorted({frame.leaf_of[h] for h in job.nodes if h in frame.leaf_of})
        placement = where + (f" ({', '.join(leaves)})" if leaves else "")
        state = frame.preemption_state(job)
        return Explanation(
            job_id=job.job_id, state=job.state.value, headline=f"Running on {placement}",
            job_class=klass, partition=job.partition, request=_request(job),
            effective_priority=job.priority, placement_text=placement,
            last_checkpoint=last_checkpoint(job.comment, frame.now),
            preemption_candidate=None if state == "-" else state not in ("protected",
                                                                         "no requeue"),
            preemption_text="" if state == "-" else state, notes=notes,
        )
    position = frame.positions().get(job.job_id)
    ahead: dict[str, int] = {}
    if job.is_pending and position is not None:
        for other in frame.pending():
            if other.job_id == job.job_id:
                break
            if other.partition == job.partition:
                name = frame.job_class(other)
                ahead[name] = ahead.get(name, 0) + 1
    eligible = [n for n in frame.snapshot.nodes
                if not n.partitions or job.partition in n.partitions]
    free = sum(n.gpus_free for n in eligible)
    hosts = sum(1 for n in eligible if n.gpus_free)
    most = max((n.gpus_free for n in eligible), default=0)
    estimate = frame.estimated_start(job)
    headline = (f"Waiting: {job.reason}" + (f" - {reason_text}" if reason_text else "")
                if job.is_pending else f"{job.state.value.capitalize()}")
    return Explanation(
        job_id=job.job_id, state=job.state.value, headline=headline, job_class=klass,
        partition=job.partition, request=_request(job),
        position=position[0] if position else None, ahead_by_class=ahead,
        effective_priority=job.priority, slurm_reason=job.reason if job.reason != "None" else "",
        slurm_reason_text=reason_text,
        free_text=(f"{free} GPUs free on {hosts} node{'s' if hosts != 1 else ''}"
                   f" of {job.partition}; at most {most} on one node") if job.is_pending else "",
        estimated_start=estimate,
        estimate_basis="Slurm's backfill estimate (squeue --start)" if estimate else "",
        notes=notes,
    )
