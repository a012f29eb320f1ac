"""The daemon's eye on every job's life, and its hand for failed runs.

Owns, once per cycle (after the executor's reconcile, before the plan):

- **seeing every end.** Finished jobs stay in ``squeue --json`` only for
  ``MinJobAge`` (300 s by default): the cycle diffs the snapshot against the
  last state journalled for each job (``life_jobs``). A job seen FAILED,
  NODE_FAIL, ... ended; a running job seen pending again with a higher
  restart count was requeued (by our preemption, by our retry, or by Slurm
  after a node failure); a job gone from the snapshot is asked for with
  ``squeue --states=all`` (23.02+ lists only live jobs by default) and its
  end read from there; one Slurm no longer keeps left its memory unseen
  (the daemon was down longer than MinJobAge) and is recorded with cause
  ``unknown``: without slurmdbd that end cannot be recovered (see
  docs/lifecycle.md);
- **the timeline** of each job (waits with their reason, runs, checkpoints,
  requeues, retries, its end);
- **retries**: a checkpointing job whose run ended for a reason not its own
  is requeued (``scontrol requeue`` works on a finished batch job while Slurm
  keeps it), kept off the suspect nodes (``ExcNodeList``) and held back by a
  doubling back-off (its begin time). A run that Slurm requeued itself is
  never requeued again: only the exclusion and back-off are added, and the
  retry is counted. Every retry and refusal is audited with its evidence;
- **node health**: failures by node; suspect nodes are drained when the site
  opted in (``node_health.drain``) within the policy's limits.

Decisions are the pure functions of :mod:`slurmpolicy.policy.lifecycle`;
Slurm calls go through the executor's journalled ``_call`` (intent first,
call budget, idempotent keys).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slurmpolicy.daemon.executor import CallBudgetExhausted, Executor
from slurmpolicy.errors import JobAlreadyPending, JobGone, SlurmError, SlurmUnavailable
from slurmpolicy.jobpolicy import last_checkpoint, parse_admin_comment, reported_metrics
from slurmpolicy.lifestore import LifeStore
from slurmpolicy.model import Job, JobState, Snapshot
from slurmpolicy.policy.lifecycle import (
    Cause,
    NodeFailure,
    RunEnd,
    classify,
    decide_retry,
    life_figures,
    suspicion,
)
from slurmpolicy.settings import Settings
from slurmpolicy.store import FAILED, OK, REACHED, STARTED, UNKNOWN

log = logging.getLogger("slurmpolicy.daemon")

#: Slurm's pending reasons -> the timeline's words.
_WAIT_WORDS = {
    "Priority": "priority (jobs ahead of it)",
    "Resources": "resources (not enough free GPUs)",
    "BeginTime": "its begin time",
    "Dependency": "a dependency",
    "Reservation": "a reservation",
    "None": "the scheduler's next pass",
}


def wait_words(job: Job, retrying: bool, preempted: bool) -> str:
    """The reason of a wait in the timeline's words; after a retry or a preemption
    the wait says so, then what it waits for now."""
    reason = job.reason or "None"
    if job.is_held:
        words = f"held ({reason})"
    elif reason.startswith("ReqNodeNotAvail") or "Reserved" in reason:
        words = f"nodes reserved for another job or unavailable ({reason})"
    elif reason == "BeginTime" and (retrying or preempted):
        words = "back-off"
    else:
        words = _WAIT_WORDS.get(reason, reason)
    if retrying:
        return f"retrying after a failure: {words}"
    if preempted:
        return f"preempted, waiting to resume: {words}"
    return words


class Lifecycle:
    """Per-cycle observer and retry/health actor; one per daemon."""

    def __init__(self, executor: Executor, settings: Settings) -> None:
        self.executor = executor
        self.settings = settings
        self.store = LifeStore(executor.journal)
        #: job id -> kind of its last timeline entry other than wait/checkpoint (a cache
        #: of the journal, so that 20,000 pending jobs cost no query per cycle).
        self._last: dict[int, str] = {}
        self._ended: set[int] = set()

    @property
    def journal(self) -> Any:
        return self.executor.journal

    def _limit(self) -> int:
        return self.settings.lifecycle.max_events_per_job

    def _event(self, job_id: int, at: float, kind: str, text: str, *,
               until: float | None = None, detail: dict[str, Any] | None = None) -> None:
        self.store.add_event(job_id, at, kind, text, until=until, detail=detail,
                             limit=self._limit())
        if kind not in ("wait", "checkpoint"):
            self._last[job_id] = _story(kind, text)

    # ------------------------------------------------------------------ cycle
    def observe(self, snapshot: Snapshot, now: float) -> None:
        """Journal what changed since the last cycle; retry and drain as the policy says."""
        self.executor.settings = self.settings
        live = self.store.live_jobs()
        self._ended = self.store.ended_ids()
        nodes = {n.name: n for n in snapshot.nodes}
        retries: list[tuple[Job, dict[str, Any], RunEnd]] = []
        present = {j.job_id for j in snapshot.jobs}
        if any(j.state.is_finished for j in snapshot.jobs):
            # The adapter lists ended jobs (22.05's squeue --json): ask only for
            # the jobs that vanished, if any.
            asked: list[int] | None = [i for i in live if i not in present]
        else:
            # 23.02+: squeue lists only live jobs; a job that started and ended
            # between two cycles would never be seen. Ask for every ended one.
            asked = None
        ended = [j for j in self._ended_jobs(asked)
                 if j.job_id not in present and j.job_id not in self._ended]
        with self.journal.transaction():
            for job in (*snapshot.jobs, *ended):
                row = live.pop(job.job_id, None)
                if job.ends_unknown:
                    # Judged then, a failure would count as a success (no retry,
                    # no evidence against its node) and a requeue as an end: it
                    # is judged once Slurm shows how it ended (next cycles).
                    continue
                end = self._observe_job(job, row, now)
                if end is not None:
                    retries.append((job, self.store.job(job.job_id) or {}, end))
            for job_id, row in live.items():
                self._left_unseen(job_id, row, now)
            self.store.bound_events()
        for job, row, end in retries:
            self._after_run(job, row, end, nodes, now)
        self._node_health(snapshot, now)

    def _ended_jobs(self, job_ids: list[int] | None) -> list[Job]:
        """Ended jobs Slurm still keeps, of ``job_ids`` or all (23.02+ squeue lists
        only live jobs); none when the adapter cannot say or Slurm refuses."""
        ask = getattr(self.executor.client, "ended_jobs", None)
        if job_ids == [] or ask is None:
            return []
        try:
            return list(ask(job_ids))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            log.warning("ended jobs not read: %s", exc)
            return []

    # -------------------------------------------------------------- observing
    def _new_row(self, job: Job, now: float) -> dict[str, Any]:
        policy = parse_admin_comment(job.admin_comment)
        return {
            "user": job.user, "account": job.account,
            "job_class": policy.job_class or self.settings.default_class, "gpus": job.gpus,
            "submit_time": job.submit_time, "first_seen": now, "last_seen": now,
            "state": "", "reason": "", "restart_count": job.restart_count, "nodes": "[]",
            "start_time": None, "first_start": None, "runs": 0, "failed_starts": 0,
            "retries": 0, "pending_seconds": 0.0, "running_seconds": 0.0, "gpu_seconds": 0.0,
            "lost_gpu_seconds": 0.0, "last_ckpt": None, "ckpts": 0,
            "excluded": json.dumps(list(job.excluded_nodes)), "ended_at": None,
            "end_state": None, "cause": None, "exit_code": None, "recoveries": 0,
            "recovery_seconds": 0.0, "interrupted_at": None, "progress_from": None,
            "progress_recovery_seconds": 0.0, "reported": "{}",
        }

    def _observe_job(self, job: Job, row: dict[str, Any] | None,
                     now: float) -> RunEnd | None:
        """Update the job's row and timeline; a RunEnd when a run ended this cycle."""
        before: dict[str, Any] = {}  # empty: the row must be written
        if row is not None:
            before = dict(row)
        elif job.job_id in self._ended:
            if job.state.is_finished:
                return None  # already ended in our record; Slurm still shows it
            # Ended in our record, alive again (an admin requeued it): its life goes on.
            row = self.store.job(job.job_id)
            if row is not None:
                row.update(ended_at=None, end_state=None, interrupted_at=row["ended_at"])
        if row is None:
            row = self._new_row(job, now)
            self._last.setdefault(job.job_id, "")
            if job.is_pending:
                self._event(job.job_id, job.submit_time or now, "submit", "submitted")
        prev_state = row["state"]
        row["last_seen"] = now
        end: RunEnd | None = None
        prev_nodes = tuple(json.loads(row["nodes"] or "[]"))
        requeued = (prev_state == "RUNNING" and
                    (job.restart_count > int(row["restart_count"] or 0) or job.is_pending))
        if requeued:
            end = self._run_requeued(job, row, prev_nodes, now)
        elif job.state.is_finished and prev_state not in ("", *_FINISHED):
            end = RunEnd(job.job_id, job.user, job.state.value, job.nodes or prev_nodes,
                         job.exit_code, job.exit_signal, job.start_time,
                         job.end_time or now, job.restart_count)
            if prev_state == "RUNNING":
                self._run_time(row, job.end_time or now)
            self.store.close_open(job.job_id, "run", job.end_time or now)
            self.store.close_open(job.job_id, "wait", job.end_time or now)
        elif job.state.is_finished and prev_state == "":
            # First seen already finished (the daemon just started): record its end.
            end = RunEnd(job.job_id, job.user, job.state.value, job.nodes, job.exit_code,
                         job.exit_signal, job.start_time, job.end_time or now,
                         job.restart_count)
        if job.is_running and prev_state != "RUNNING":
            started = job.start_time or now
            waited_from = row["interrupted_at"] or job.submit_time or row["first_seen"]
            row["pending_seconds"] = (float(row["pending_seconds"] or 0)
                                      + max(0.0, started - float(waited_from or started)))
            self.store.close_open(job.job_id, "wait", started)
            self.store.clamp_waits(job.job_id, started)
            row["runs"] = int(row["runs"] or 0) + 1
            row["start_time"] = started
            if row["first_start"] is None:
                row["first_start"] = started
            if row["interrupted_at"] is not None:
                row["recoveries"] = int(row["recoveries"] or 0) + 1
                row["recovery_seconds"] = (float(row["recovery_seconds"] or 0)
                                           + max(0.0, started - float(row["interrupted_at"])))
                # Back where it was: the restart delay plus the work redone since the
                # checkpoint it resumes from (at full speed, the time it took first).
                saved = row.get("progress_from") or row["interrupted_at"]
                row["progress_recovery_seconds"] = (
                    float(row.get("progress_recovery_seconds") or 0)
                    + max(0.0, started - float(saved)))
                row["interrupted_at"] = None
            run = int(row["runs"])
            self._event(job.job_id, started, "run",
                        f"run {run} on {','.join(job.nodes) or '?'}"
                        + (f" (restart {job.restart_count})" if job.restart_count else ""),
                        detail={"nodes": list(job.nodes), "restart": job.restart_count})
        if job.is_pending:
            words = wait_words(job, retrying=bool(row.get("_retrying")) or
                               self._last_kind(job.job_id) == "retry",
                               preempted=self._last_kind(job.job_id) == "preempted")
            if prev_state != "PENDING" or words != row["reason"]:
                self.store.close_open(job.job_id, "wait", now)
                self._event(job.job_id, now if prev_state else (job.submit_time or now),
                            "wait", words, detail={"slurm_reason": job.reason})
            row["reason"] = words
        ack = last_checkpoint(job.comment)
        if ack is not None and (row["last_ckpt"] is None or ack > float(row["last_ckpt"])):
            row["last_ckpt"] = ack
            row["ckpts"] = int(row["ckpts"] or 0) + 1
            self._event(job.job_id, ack, "checkpoint", "checkpoint written (acknowledged)")
        if "spm:" in job.comment:
            figures = reported_metrics(job.comment)
            known = json.loads(row.get("reported") or "{}")
            if figures != known:
                changed = {k: v for k, v in figures.items() if known.get(k) != v}
                self._event(job.job_id, now, "report", "reported " + " ".join(
                    f"{k}={v:g}" for k, v in sorted(changed.items())), detail=changed)
                row["reported"] = json.dumps({**known, **figures}, sort_keys=True)
        row["state"] = job.state.value
        row["restart_count"] = job.restart_count
        if job.nodes and tuple(job.nodes) != prev_nodes:
            row["nodes"] = json.dumps(list(job.nodes))
        if job.excluded_nodes or row["excluded"] != "[]":
            row["excluded"] = json.dumps(list(job.excluded_nodes))
        row.pop("_retrying", None)
        if end is not None and job.state.is_finished:
            row["ended_at"] = end.end_time or now
            row["end_state"] = job.state.value
            row["exit_code"] = job.exit_code
        # last_seen alone changed: not worth a write per job per cycle on a big queue.
        # Most rows are unchanged: one comparison of the dicts (in C) answers those,
        # the look key by key the rest (on a deep queue it was the costliest part
        # of this walk when it looked at every row).
        if before:
            before["last_seen"] = row["last_seen"]  # a copy; not read after this
        if not before or (
                row != before
                and any(row.get(k) != before.get(k) for k in row if k != "last_seen")):
            self.store.put_job(job.job_id, {k: v for k, v in row.items() if k != "job_id"})
        return end

    def _last_kind(self, job_id: int) -> str:
        hit = self._last.get(job_id)
        if hit is not None:
            return hit
        rows = list(self.journal.db.conn.execute(
            "select kind, text from life_events where job_id = ? and kind not in"
            " ('wait', 'checkpoint') order by at desc, id desc limit 1", [job_id]))
        self._last[job_id] = _story(rows[0][0], rows[0][1]) if rows else ""
        return self._last[job_id]

    def _run_requeued(self, job: Job, row: dict[str, Any], nodes: tuple[str, ...],
                      now: float) -> RunEnd:
        rc = int(row["restart_count"] or 0)
        ours = self.journal.has_step(f"requeue:{job.job_id}:{rc}", (OK, REACHED))
        preempted = ours or bool(list(self.journal.db.query(
            "select 1 from victims where job_id = ? and restart_count = ? and state = 'requeued'",
            [job.job_id, rc])))
        self.store.close_open(job.job_id, "run", now)
        self._run_time(row, now)
        row["interrupted_at"] = now
        since = _saved_progress(row, now)
        row["progress_from"] = since
        row["lost_gpu_seconds"] = (float(row["lost_gpu_seconds"] or 0)
                                   + max(0.0, now - since) * (row["gpus"] or 0))
        text = ("requeued by slurmpolicy's preemption" if preempted
                else "requeued by Slurm (its own requeue)")
        self._event(job.job_id, now, "requeue", text,
                    detail={"nodes": list(nodes), "restart": job.restart_count})
        return RunEnd(job.job_id, job.user, "PENDING", nodes, None, None,
                      row["start_time"], now, rc, requeued_by_slurm=not preempted,
                      preempted_by_us=preempted)

    @staticmethod
    def _run_time(row: dict[str, Any], ended: float) -> None:
        """Add the run that just ended to the job's running time and GPU-seconds."""
        if row["start_time"] is None:
            return
        ran = max(0.0, ended - float(row["start_time"]))
        row["running_seconds"] = float(row["running_seconds"] or 0) + ran
        row["gpu_seconds"] = float(row["gpu_seconds"] or 0) + ran * (row["gpus"] or 0)

    def _left_unseen(self, job_id: int, row: dict[str, Any], now: float) -> None:
        """The job is gone from Slurm's memory and the daemon did not see it end."""
        ended = (row["last_seen"] or now) if row["state"] in _FINISHED else now
        self.store.close_open(job_id, "wait", ended)
        self.store.close_open(job_id, "run", ended)
        cause = row["cause"] or (Cause.UNKNOWN.value if row["state"] not in _FINISHED else None)
        if row["state"] not in _FINISHED:
            self._event(job_id, now, "end", "left Slurm's memory unseen (the daemon missed "
                        "its end; without slurmdbd its final state is unknown)")
        self.store.put_job(job_id, {"ended_at": ended, "cause": cause,
                                    "end_state": row["end_state"] or row["state"] or None})

    # ---------------------------------------------------------------- retries
    def _after_run(self, job: Job, row: dict[str, Any], end: RunEnd,
                   nodes: dict[str, Any], now: float) -> None:
        verdict = classify(end, nodes, self.settings)
        ran = ((end.end_time - end.start_time)
               if end.end_time is not None and end.start_time is not None else None)
        failed_start = (verdict.cause.abnormal and ran is not None
                        and ran <= self.settings.lifecycle.startup_window)
        updates: dict[str, Any] = {"cause": verdict.cause.value}
        if failed_start:
            updates["failed_starts"] = int(row.get("failed_starts") or 0) + 1
        if verdict.not_own_fault and verdict.suspects:
            self.store.add_node_failures(
                NodeFailure(n, job.job_id, job.user, end.end_time or now, verdict.cause.value)
                for n in verdict.suspects)
        policy = parse_admin_comment(job.admin_comment)
        if verdict.cause in (Cause.COMPLETED, Cause.PREEMPTED):
            if job.state.is_finished:
                self._event(job.job_id, end.end_time or now, "end", verdict.evidence)
            self.store.put_job(job.job_id, updates)
            return
        decision = decide_retry(
            verdict, can_checkpoint=policy.can_checkpoint, job_class=policy.job_class,
            asked=policy.retries, retries_done=int(row.get("retries") or 0),
            already_excluded=job.excluded_nodes, settings=self.settings, now=now)
        slurm_requeued = end.requeued_by_slurm
        if not decision.retry:
            if job.state.is_finished:
                self._event(job.job_id, end.end_time or now, "end",
                            f"ended {job.state.value}: {decision.reason}")
            self.store.put_job(job.job_id, updates)
            if verdict.not_own_fault:
                reason = decision.reason
                if slurm_requeued:
                    # Slurm's own requeue stands; slurmpolicy adds nothing to it.
                    reason = ("Slurm requeued it by itself; no exclusion or back-off added: "
                              + reason.removeprefix("not retried: "))
                self.executor._audit(None, "Retry", reason, "refused",
                                     job_id=job.job_id, jobs=(job.job_id,),
                                     detail={"cause": verdict.cause.value,
                                             "suspects": list(verdict.suspects),
                                             "slurm_requeued": slurm_requeued})
            return
        if self.executor.dry_run:
            return
        updates["retries"] = decision.attempt
        if job.state.is_finished:
            # Reopen the life: the job runs again.
            ended = end.end_time or now
            since = _saved_progress(row, ended)
            updates.update({"ended_at": None, "end_state": None, "state": "PENDING",
                            "interrupted_at": ended, "progress_from": since,
                            "lost_gpu_seconds": float(row.get("lost_gpu_seconds") or 0)
                            + max(0.0, ended - since) * (row.get("gpus") or 0)})
        self.store.put_job(job.job_id, updates)
        detail = {"cause": verdict.cause.value, "suspects": list(verdict.suspects),
                  "exclude": list(decision.exclude), "begin_at": decision.begin_at,
                  "attempt": decision.attempt, "allowed": decision.allowed,
                  "slurm_requeued": slurm_requeued, "exit_code": end.exit_code}
        self._event(job.job_id, now, "retry", decision.reason, detail=detail)
        if job.is_pending:
            # Requeued by Slurm: the wait it began this cycle is a retry's, after it.
            self.store.drop_open_wait(job.job_id, now)
            words = wait_words(job, retrying=True, preempted=False)
            self._event(job.job_id, now, "wait", words, detail={"slurm_reason": job.reason})
            self.store.put_job(job.job_id, {"reason": words})
        outcome = self._carry_out(job, end, decision.exclude, decision.begin_at, slurm_requeued)
        reason = decision.reason + ("; Slurm had requeued it, so only the exclusion and "
                                    "back-off were added" if slurm_requeued else "")
        self.executor._audit(None, "Retry", reason, outcome, job_id=job.job_id,
                             jobs=(job.job_id,), detail=detail)

    def _carry_out(self, job: Job, end: RunEnd, exclude: tuple[str, ...],
                   begin_at: float | None, slurm_requeued: bool) -> str:
        client = self.executor.client
        assert client is not None
        try:
            return self._calls(client, job, end, exclude, begin_at, slurm_requeued)
        except CallBudgetExhausted:
            return "deferred: the cycle's Slurm call budget is spent; retried next cycle"

    def _calls(self, client: Any, job: Job, end: RunEnd, exclude: tuple[str, ...],
               begin_at: float | None, slurm_requeued: bool) -> str:
        job_id, rc = job.job_id, end.restart_count
        outcome = "ok"
        if not slurm_requeued:
            status, message = self.executor._call(
                f"retry:{job_id}:{rc}", "requeue", lambda: client.requeue(job_id),
                job_id=job_id, restart_count=rc, params={"cause": "retry"},
                reached=(JobAlreadyPending,))
            if status not in (OK, REACHED):
                return f"failed: requeue refused: {message}"
        key_rc = rc if slurm_requeued else rc + 1
        if exclude:
            status, message = self.executor._call(
                f"exclude:{job_id}:{key_rc}", "exclude",
                lambda: client.set_excluded_nodes(job_id, exclude), job_id=job_id,
                restart_count=key_rc, params={"nodes": list(exclude)}, reached=(JobGone,))
            if status not in (OK, REACHED):
                outcome = f"partial: ExcNodeList refused: {message}"
        if begin_at is not None:
            status, message = self.executor._call(
                f"backoff:{job_id}:{key_rc}", "begin_time",
                lambda: client.set_begin_time(job_id, begin_at), job_id=job_id,
                restart_count=key_rc, params={"begin": begin_at}, reached=(JobGone,))
            if status not in (OK, REACHED):
                outcome = f"partial: back-off refused: {message}"
        return outcome

    # ------------------------------------------------------------ node health
    def suspicions(self, snapshot: Snapshot, now: float) -> list[Any]:
        failures = self.store.node_failures(now - self.settings.node_health.window)
        return suspicion(failures, snapshot.nodes, self.settings, now)

    def _node_health(self, snapshot: Snapshot, now: float) -> None:
        if self.executor.dry_run:
            return
        client = self.executor.client
        assert client is not None
        for s in self.suspicions(snapshot, now):
            if not s.drain:
                if s.held_back and not self.journal.has_step(
                        f"drain-held:{s.node}:{len(s.jobs)}", (OK,)):
                    # Audit once per count of failures, not every cycle.
                    step = self.journal.begin_step(f"drain-held:{s.node}:{len(s.jobs)}",
                                                   "note", params={"why": s.held_back})
                    self.journal.finish_step(step, OK)
                    self.executor._audit(None, "DrainNode", f"{s.evidence}; not drained: "
                                         f"{s.held_back}", "held back", jobs=s.jobs,
                                         detail={"node": s.node, "users": s.users})
                continue
            key = f"drain:{s.node}:{','.join(map(str, s.jobs))}"
            if self.journal.has_step(key, (OK, REACHED, FAILED, STARTED, UNKNOWN)):
                continue  # tried on this very evidence (refused, or Slurm shows it later)
            try:
                status, message = self.executor._call(
                    key, "drain",
                    lambda name=s.node, why=s.evidence: client.drain_node(name, why),
                    params={"node": s.node, "reason": s.evidence})
            except CallBudgetExhausted:
                return
            self.executor._audit(None, "DrainNode", s.evidence,
                                 "ok" if status in (OK, REACHED) else f"failed: {message}",
                                 jobs=s.jobs, detail={"node": s.node, "users": s.users})

    def figures(self, now: float, window: float = 86400.0) -> list[tuple[str, dict[str, str],
                                                                         float]]:
        """Lifecycle figures of the jobs that ended in the last ``window``, by class
        and account (``slurmpolicy_job_*``; docs/lifecycle.md)."""
        rows = self.store.ended_with_checkpoints(now - window)
        out: list[tuple[str, dict[str, str], float]] = []
        for (klass, account), values in life_figures(rows).items():
            for name, value in sorted(values.items()):
                out.append((f"slurmpolicy_job_{name}", {"class": klass, "account": account},
                            value))
        return out

    def prune(self, now: float) -> None:
        self.store.prune(now, self.settings.lifecycle.keep_timelines,
                         self.settings.node_health.window)


_FINISHED = frozenset(s.value for s in JobState if s.is_finished)


def _saved_progress(row: dict[str, Any], at: float) -> float:
    """When the progress the job resumes from was made: its last checkpoint in this
    run, else the run's start (all of the run is redone)."""
    start = row.get("start_time")
    ckpt = row.get("last_ckpt")
    if start is None:
        return at
    return max(float(ckpt), float(start)) if ckpt is not None else float(start)


def _story(kind: str, text: str) -> str:
    """What the last entry means for the wait that follows it."""
    if kind == "requeue":
        return "preempted" if "preemption" in text else "requeued"
    return kind
