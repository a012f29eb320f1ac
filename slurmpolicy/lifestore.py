"""The journal's record of every job's life: what the daemon saw of each job
from submission to end, kept in the journal's SQLite file beside the audit.

Owns three tables, created on first use (they need no schema version: a
journal without them is read as "nothing observed yet"):

- ``life_jobs``: one row per job, the last state seen and the running totals
  (runs, retries, waiting and running seconds, GPU-seconds allocated and
  lost since the last checkpoint), and how it ended;
- ``life_events``: the timeline: each wait with its reason and how long it
  lasted, each run, checkpoint, requeue, retry and end, bounded per job
  (``lifecycle.max_events_per_job``) and dropped ``lifecycle.keep_timelines``
  after the job ended;
- ``node_failures``: runs that ended for a reason not their own, by node,
  the evidence of node health.

The daemon writes it (``slurmpolicy.daemon.lifecycle``); ``why --history``,
``report`` and the metrics read it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmpolicy.policy.lifecycle import NodeFailure
from slurmpolicy.store import Journal

_JOB_COLUMNS: dict[str, type] = {
    "job_id": int, "user": str, "account": str, "job_class": str, "gpus": int,
    "submit_time": float, "first_seen": float, "last_seen": float, "state": str,
    "reason": str, "restart_count": int, "nodes": str, "start_time": float,
    "first_start": float, "runs": int, "failed_starts": int, "retries": int,
    "pending_seconds": float, "running_seconds": float, "gpu_seconds": float,
    "lost_gpu_seconds": float, "last_ckpt": float, "ckpts": int, "excluded": str,
    "ended_at": float, "end_state": str, "cause": str, "exit_code": int,
    "recoveries": int, "recovery_seconds": float, "interrupted_at": float,
    "progress_from": float, "progress_recovery_seconds": float, "reported": str,
}


@dataclass(frozen=True, slots=True)
class Event:
    at: float
    #: None while it lasts (a wait not over, a run going on).
    until: float | None
    #: wait, run, checkpoint, requeue, retry, end, action
    kind: str
    text: str
    detail: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "until": self.until, "kind": self.kind, "text": self.text,
                "detail": dict(self.detail)}


class LifeStore:
    """The life tables of one journal (read-only when the journal is)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.db = journal.db
        self._touched: dict[int, int] = {}
        self._tables: set[str] = set()
        if not journal.read_only:
            self._create()

    def _create(self) -> None:
        names = set(self.db.table_names())
        if {"life_jobs", "life_events", "node_failures"} <= names:
            return
        with self.journal.transaction():
            self.db.table("life_jobs").create(_JOB_COLUMNS, pk="job_id", if_not_exists=True)
            self.db.table("life_events").create(
                {"id": int, "job_id": int, "at": float, "until": float, "kind": str,
                 "text": str, "detail": str}, pk="id", if_not_exists=True)
            self.db.table("life_events").create_index(["job_id", "id"], if_not_exists=True)
            self.db.table("node_failures").create(
                {"node": str, "job_id": int, "user": str, "at": float, "cause": str},
                if_not_exists=True)
            self.db.table("node_failures").create_index(["at"], if_not_exists=True)

    def _has(self, table: str) -> bool:
        if table not in self._tables and table in self.db.table_names():
            self._tables.add(table)  # tables are never dropped
        return table in self._tables

    # ------------------------------------------------------------------ jobs
    def live_jobs(self) -> dict[int, dict[str, Any]]:
        """Jobs whose end the daemon has not seen yet."""
        if not self._has("life_jobs"):
            return {}
        return {int(r["job_id"]): dict(r)
                for r in self.db.query("select * from life_jobs where ended_at is null")}

    def ended_ids(self) -> set[int]:
        """Jobs whose end is recorded (Slurm may still show them for MinJobAge)."""
        if not self._has("life_jobs"):
            return set()
        return {int(r[0]) for r in self.db.conn.execute(
            "select job_id from life_jobs where ended_at is not null")}

    def job(self, job_id: int) -> dict[str, Any] | None:
        if not self._has("life_jobs"):
            return None
        rows = list(self.db.query("select * from life_jobs where job_id = ?", [job_id]))
        return dict(rows[0]) if rows else None

    def jobs(self, *, ended_since: float | None = None) -> list[dict[str, Any]]:
        if not self._has("life_jobs"):
            return []
        sql, args = "select * from life_jobs", []
        if ended_since is not None:
            sql += " where ended_at >= ?"
            args.append(ended_since)
        return [dict(r) for r in self.db.query(sql + " order by job_id", args)]

    def ended_with_checkpoints(self, since: float,
                               until: float | None = None) -> list[dict[str, Any]]:
        """Jobs that ended in [since, until), each with ``signals`` and ``acks``:
        the checkpoint signals slurmpolicy sent it and those it acknowledged."""
        if not self._has("life_jobs"):
            return []
        has_victims = self._has("victims")
        extra = (", (select count(*) from victims v where v.job_id = j.job_id and"
                 " v.signalled_at is not null) as signals, (select count(*) from victims v"
                 " where v.job_id = j.job_id and v.acked_at is not null) as acks"
                 if has_victims else ", 0 as signals, 0 as acks")
        sql = f"select j.*{extra} from life_jobs j where j.ended_at >= ?"
        args: list[Any] = [since]
        if until is not None:
            sql += " and j.ended_at < ?"
            args.append(until)
        return [dict(r) for r in self.db.query(sql, args)]

    def put_job(self, job_id: int, values: Mapping[str, Any]) -> None:
        """Insert or update the job's row; only the columns in ``values`` change.

        Plain SQL: sqlite-utils' upsert reads the table's schema on every call,
        which costs seconds per cycle on a queue of 20,000 jobs.
        """
        cols = [c for c in values if c in _JOB_COLUMNS and c != "job_id"]
        names = ", ".join(["job_id", *cols])
        marks = ", ".join("?" * (len(cols) + 1))
        sets = ", ".join(f"{c} = excluded.{c}" for c in cols) or "job_id = job_id"
        self.db.conn.execute(
            f"insert into life_jobs ({names}) values ({marks})"
            f" on conflict(job_id) do update set {sets}",
            [job_id, *(values[c] for c in cols)])

    # ---------------------------------------------------------------- events
    def add_event(self, job_id: int, at: float, kind: str, text: str, *,
                  until: float | None = None, detail: Mapping[str, Any] | None = None,
                  limit: int = 200) -> int:
        cur = self.db.conn.execute(
            "insert into life_events (job_id, at, until, kind, text, detail)"
            " values (?, ?, ?, ?, ?, ?)",
            [job_id, at, until, kind, text, json.dumps(dict(detail or {}), default=str)])
        event_id = int(cur.lastrowid or 0)
        self._touched[job_id] = limit
        return event_id

    def bound_events(self) -> None:
        """Keep at most ``limit`` events per job written to since the last call:
        beyond it the oldest go (the job's row keeps the totals)."""
        for job_id, limit in self._touched.items():
            self.db.conn.execute(
                "delete from life_events where job_id = ? and id <= ("
                " select id from life_events where job_id = ? order by id desc"
                " limit 1 offset ?)", [job_id, job_id, limit])
        self._touched.clear()

    def close_open(self, job_id: int, kind: str, until: float) -> None:
        self.db.conn.execute("update life_events set until = ? where job_id = ? and kind = ?"
                        " and until is null", [until, job_id, kind])

    def drop_open_wait(self, job_id: int, since: float) -> None:
        """Forget the open wait begun at ``since`` (it is about to be told anew)."""
        self.db.conn.execute("delete from life_events where job_id = ? and kind = 'wait'"
                             " and until is null and at >= ?", [job_id, since])

    def clamp_waits(self, job_id: int, at: float) -> None:
        """Waits noted after ``at`` end at ``at``: Slurm times are whole seconds and a
        snapshot may show a job pending a moment after the second it started in."""
        self.db.conn.execute("update life_events set at = ?, until = ? where job_id = ? and"
                        " kind = 'wait' and at > ?", [at, at, job_id, at])

    def events(self, job_id: int) -> list[Event]:
        if not self._has("life_events"):
            return []
        return [Event(at=float(r["at"]), until=None if r["until"] is None else float(r["until"]),
                      kind=r["kind"], text=r["text"] or "",
                      detail=json.loads(r["detail"] or "{}"))
                for r in self.db.query("select * from life_events where job_id = ?"
                                       " order by at, id", [job_id])]

    # ---------------------------------------------------------- node failures
    def add_node_failures(self, failures: Iterable[NodeFailure]) -> None:
        rows = [{"node": f.node, "job_id": f.job_id, "user": f.user, "at": f.at,
                 "cause": f.cause} for f in failures]
        if rows:
            self.db.table("node_failures").insert_all(rows)

    def node_failures(self, since: float) -> list[NodeFailure]:
        if not self._has("node_failures"):
            return []
        return [NodeFailure(node=r["node"], job_id=int(r["job_id"]), user=r["user"] or "",
                            at=float(r["at"]), cause=r["cause"] or "")
                for r in self.db.query("select * from node_failures where at >= ?"
                                       " order by at", [since])]

    # ----------------------------------------------------------------- prune
    def prune(self, now: float, keep_timelines: float, window: float) -> None:
        """Forget jobs that ended ``keep_timelines`` ago, and stale node failures."""
        if not self._has("life_jobs"):
            return
        with self.journal.transaction():
            cutoff = now - keep_timelines
            self.db.execute("delete from life_events where job_id in (select job_id from"
                            " life_jobs where ended_at < ?)", [cutoff])
            self.db.execute("delete from life_jobs where ended_at < ?", [cutoff])
            self.db.execute("delete from node_failures where at < ?",
                            [now - max(window, keep_timelines)])
