"""The daemon's journal: a crash-safe record of what slurmpolicy set out to do
in Slurm and what came of it, in SQLite (sqlite-utils, WAL mode).

Owns:

- **side-effect intents** (table ``steps``): one row written *before* each
  call that changes Slurm and completed *after* it with the outcome. A row
  left ``started`` tells a restarted daemon that the call may or may not have
  reached Slurm; the executor reconciles it against a fresh snapshot;
- the **preemption state machine** (tables ``preemptions`` and ``victims``):
  planned -> reserved -> signalled -> requeued -> done, or aborted with a
  reason; each victim keyed by (job id, restart count): planned -> signalled
  -> acknowledged | deadline -> requeued, or ended;
- reservations slurmpolicy created, site factors it set, decayed GPU-second
  usage per account (fair share), preemption times per job, missed acks;
- the **audit** of every action with its reason, job, time and outcome;
- a **metrics history** (one row per figure per cycle);
- its own privacy: the state directory is created 0700 and the journal 0600
  whatever the umask (SQLite gives its -wal and -shm files the journal's
  mode); a journal or directory that others may read is tightened when the
  daemon opens it (group bits a site granted on purpose are kept);
- each job's **identity** (table ``job_identity``): the cluster and the
  time it was first submitted, carried across its requeues (Slurm resets a
  requeued job's submit time, once the job has completed: a cycle may see
  the higher restart count first, and the new submit time is then taken at
  the next). A job id seen again with another submit time and no further
  restart is another job: its per-job rows are dropped and its history
  (``read_audit(job_id=...)``) starts afresh.

:meth:`Journal.load_intents` turns it into the planner's
:class:`~slurmpolicy.policy.actions.Intents`. The inspector opens it with
``read_only=True``. The schema is versioned in table ``meta``.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import sqlite_utils

from slurmpolicy.errors import ConfigError, JournalError
from slurmpolicy.policy.actions import (
    Intents,
    PreemptionIntent,
    PreemptionState,
    ReservationIntent,
    VictimIntent,
    VictimState,
)

SCHEMA_VERSION = 1
FILE_NAME = "journal.sqlite"

#: Step statuses: written before the call, then one of the three outcomes.
STARTED = "started"
OK = "ok"  # Slurm did it
REACHED = "reached"  # Slurm said the goal was already reached (already pending, gone, ...)
FAILED = "failed"  # Slurm refused; the reason is in ``error``
UNKNOWN = "unknown"  # the daemon died between intent and outcome; reconciled later


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: float
    kind: str
    job_id: int | None
    reason: str
    outcome: str
    detail: Mapping[str, Any]
    dry_run: bool
    #: Every job the record concerns (job_id, a preemption's beneficiary and victims).
    jobs: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "at": self.at, "kind": self.kind, "job_id": self.job_id,
            "reason": self.reason, "outcome": self.outcome, "detail": dict(self.detail),
            "dry_run": self.dry_run,
        }


def journal_failure(path: Path, exc: BaseException) -> JournalError:
    """A SQLite or OS error on the journal at ``path`` as one line naming the fix."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    directory = path.parent
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return JournalError(
            f"{path}: the journal is corrupt ({text}); stop the daemon, move the file aside"
            f" (mv {path} {path}.corrupt) and start it again: it rebuilds its state from"
            " Slurm (preemptions in flight are then forgotten)", reason="journal_corrupt")
    if "disk is full" in low or "no space" in low or "quota" in low:
        return JournalError(
            f"{path}: the disk holding the journal is full ({text}); free space on"
            f" {directory} (or lower daemon.keep_history)", reason="journal_full")
    if "readonly" in low or "read-only" in low or "permission" in low or \
            "unable to open" in low or "access" in low:
        return JournalError(
            f"{path}: cannot write the journal ({text}); {directory} and the files in it"
            " must be writable by the daemon's user (permissions, read-only mount)"
            " - at `$.daemon.state_dir`", reason="journal_readonly")
    return JournalError(f"{path}: journal error: {text}", reason="journal")


def make_private(journal: Path) -> None:
    """Create the state directory (0700) and the journal file (0600), whatever the
    umask; take away what others may do with existing ones."""
    directory = journal.parent
    if not directory.exists():
        directory.mkdir(mode=0o700, parents=True)
        os.chmod(directory, 0o700)  # mkdir's mode passes through the umask
    if not journal.exists():
        os.close(os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.chmod(journal, 0o600)
    for path in (directory, journal, *(journal.with_name(journal.name + s)
                                       for s in ("-wal", "-shm"))):
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        if info.st_uid == os.geteuid() and info.st_mode & 0o007:
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o007)


def storable(text: str) -> str:
    """``text`` as SQLite can store it: a lone surrogate (an undecodable byte of a
    job name, decoded with surrogateescape) is kept as ``\\udcxx``, not a crash."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def journal_path(state_dir: str | Path) -> Path:
    return Path(state_dir) / FILE_NAME


class Journal:
    """The journal in ``path`` (a state directory, or the database file itself)."""

    def __init__(self, path: str | Path, *, read_only: bool = False,
                 clock: Any = time.time) -> None:
        target = Path(path)
        if target.is_dir() or (not target.suffix and not target.exists()):
            target = target / FILE_NAME
        self.path = target
        self.read_only = read_only
        self._clock = clock
        self._full = False
        try:
            self._open(target, read_only)
        except sqlite3.Error as exc:
            raise journal_failure(target, exc) from None

    def _open(self, target: Path, read_only: bool) -> None:
        if read_only:
            if not os.access(target.parent, os.X_OK) and target.parent.exists():
                raise JournalError(
                    f"{target.parent}: permission denied; the state directory is private to"
                    " the daemon's user (mode 0700): run this as that user or root, or ask"
                    " an admin", reason="journal_readonly")
            if not target.exists():
                raise ConfigError(f"{target}: no journal here (has the daemon run?)")
            if not os.access(target, os.R_OK):
                raise JournalError(
                    f"{target}: permission denied; the journal is private to the daemon's"
                    " user (mode 0600): run this as that user or root, or ask an admin",
                    reason="journal_readonly")
            conn = sqlite3.connect(f"file:{target}?mode=ro", uri=True, timeout=10)
            try:
                conn.execute("select 1 from sqlite_master limit 1").fetchall()
            except sqlite3.OperationalError as exc:
                if "readonly" not in str(exc):
                    raise
                # A WAL journal whose directory the reader may not write (no -shm
                # can be made there): read the file as it stands, without locks.
                conn.close()
                conn = sqlite3.connect(f"file:{target}?mode=ro&immutable=1", uri=True,
                                       timeout=10)
        else:
            try:
                make_private(target)
            except OSError as exc:
                raise JournalError(
                    f"{target}: cannot create the journal or its directory: {exc.strerror};"
                    " the state directory must be writable by the daemon's user"
                    " - at `$.daemon.state_dir`", reason="journal_readonly"
                ) from exc
            conn = sqlite3.connect(str(target), timeout=30, isolation_level=None)
        self.db = sqlite_utils.Database(conn)
        if not read_only:
            self.db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: every commit survives a crash of the daemon
            # (SIGKILL included); only an OS crash may lose the last ones. Steps
            # whose repetition would matter (signal, requeue) are written FULL:
            # on disk before the call, whatever happens.
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
            self._ensure_identity()
            self._add_columns()
        else:
            version = self.schema_version()
            if version > SCHEMA_VERSION:
                raise ConfigError(
                    f"{target}: journal schema {version} is newer than this slurmpolicy"
                    f" ({SCHEMA_VERSION}); upgrade slurmpolicy"
                )

    # ----------------------------------------------------------------- schema
    def schema_version(self) -> int:
        if "meta" not in self.db.table_names():
            return 0
        rows = list(self.db.query("select value from meta where key = 'schema_version'"))
        return int(rows[0]["value"]) if rows else 0

    def _migrate(self) -> None:
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.path}: journal schema {version} is newer than this slurmpolicy"
                f" ({SCHEMA_VERSION}); upgrade slurmpolicy"
            )
        if version == SCHEMA_VERSION:
            return
        db = self.db
        with self.transaction():
            db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
            db.table("steps").create(
                {"id": int, "key": str, "kind": str, "job_id": int, "restart_count": int,
                 "preemption_id": str, "params": str, "status": str, "error": str,
                 "started_at": float, "finished_at": float},
                pk="id", if_not_exists=True,
            )
            db.table("steps").create_index(["key"], if_not_exists=True)
            db.table("steps").create_index(["status"], if_not_exists=True)
            db.table("preemptions").create(
                {"preemption_id": str, "beneficiary": int, "nodes": str, "reservation": str,
                 "state": str, "reason": str, "started_at": float, "updated_at": float,
                 "expected_lost_gpu_seconds": float},
                pk="preemption_id", if_not_exists=True,
            )
            db.table("victims").create(
                {"preemption_id": str, "job_id": int, "restart_count": int, "state": str,
                 "signal": str, "gpus": int, "signalled_at": float, "deadline": float,
                 "acked_at": float, "requeued_at": float, "deadline_noted": int,
                 "updated_at": float},
                pk=("preemption_id", "job_id", "restart_count"), if_not_exists=True,
            )
            db.table("reservations").create(
                {"name": str, "job_id": int, "nodes": str, "start_time": float,
                 "duration": float, "state": str, "updated_at": float},
                pk="name", if_not_exists=True,
            )
            db.table("site_factors").create(
                {"job_id": int, "site_factor": int, "set_at": float}, pk="job_id",
                if_not_exists=True,
            )
            db.table("begin_times").create(
                {"job_id": int, "begin_time": float, "set_at": float}, pk="job_id",
                if_not_exists=True,
            )
            db.table("usage").create({"account": str, "gpu_seconds": float, "as_of": float},
                               pk="account", if_not_exists=True)
            db.table("preemption_times").create({"job_id": int, "at": float}, if_not_exists=True)
            db.table("preemption_times").create_index(["job_id"], if_not_exists=True)
            db.table("missed_acks").create({"job_id": int, "count": int}, pk="job_id",
                                     if_not_exists=True)
            db.table("audit").create(
                {"id": int, "at": float, "kind": str, "job_id": int, "jobs": str,
                 "reason": str, "outcome": str, "detail": str, "dry_run": int},
                pk="id", if_not_exists=True,
            )
            db.table("audit").create_index(["job_id"], if_not_exists=True)
            db.table("audit").create_index(["at"], if_not_exists=True)
            db.table("metrics").create(
                {"at": float, "name": str, "labels": str, "value": float}, if_not_exists=True,
            )
            db.table("metrics").create_index(["name", "at"], if_not_exists=True)
            db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)},
                              pk="key")

    def _ensure_identity(self) -> None:
        """Tables added after schema 1 (created when missing; nothing else changes)."""
        self.db.table("job_identity").create(
            {"job_id": int, "cluster": str, "since": float, "submit": float, "restarts": int},
            pk="job_id", if_not_exists=True)
        # Pending jobs seen blocked by fragmentation alone (Intents.fragmented_since).
        self.db.table("fragmented").create({"job_id": int, "since": float}, pk="job_id",
                                           if_not_exists=True)
        self._identities: dict[int, tuple[str, float, float | None, int]] | None = None

    # ------------------------------------------------------------ identities
    def note_jobs(self, cluster: str, jobs: Iterable[Any], now: float) -> list[int]:
        """Record who each job id is now; returns the ids that name another job than
        before (a rebuilt cluster, ids that wrapped), whose old per-job rows go."""
        if self._identities is None:
            self._identities = {
                int(r["job_id"]): (r["cluster"] or "", float(r["since"]), r["submit"],
                                   int(r["restarts"] or 0))
                for r in self.db.query("select * from job_identity")}
        known = self._identities
        changed: list[dict[str, Any]] = []
        reused: list[int] = []
        for job in jobs:
            submit = job.submit_time
            old = known.get(job.job_id)
            # The same job: the same submit time, or a requeue (a higher restart
            # count; Slurm resets the submit time too). Slurm raises the count
            # at the requeue but sets the new submit time only once the job has
            # completed (batch_requeue_fini, after its epilog), so a cycle may
            # see the count alone: a higher count is recorded only with the
            # submit time that comes with it, and until then it still vouches
            # for the job.
            if old is not None and old[0] == cluster and (
                    submit is None or old[2] is None or submit == old[2]
                    or job.restart_count > old[3]):
                if submit is not None and submit != old[2]:
                    known[job.job_id] = (cluster, old[1], submit, job.restart_count)
                    changed.append({"job_id": job.job_id, "cluster": cluster, "since": old[1],
                                    "submit": submit, "restarts": job.restart_count})
                continue
            if old is not None:
                reused.append(job.job_id)
            since = submit if submit is not None else now
            known[job.job_id] = (cluster, since, submit, job.restart_count)
            changed.append({"job_id": job.job_id, "cluster": cluster, "since": since,
                            "submit": submit, "restarts": job.restart_count})
        if changed or reused:
            with self.transaction():
                if changed:
                    self.db.table("job_identity").upsert_all(changed, pk="job_id")
                for job_id in reused:
                    for table in ("missed_acks", "preemption_times", "site_factors",
                                  "begin_times", "fragmented"):
                        self.db.execute(f"delete from {table} where job_id = ?", [job_id])
        return reused

    def job_since(self, job_id: int) -> float | None:
        """When the job now known by this id was first submitted (None if never seen)."""
        if "job_identity" not in self.db.table_names():
            return None
        rows = list(self.db.query("select since from job_identity where job_id = ?",
                                  [int(job_id)]))
        return float(rows[0]["since"]) if rows else None

    def jobs_since(self) -> dict[int, float]:
        """job id -> first submit time of the job now known by that id."""
        if "job_identity" not in self.db.table_names():
            return {}
        return {int(r["job_id"]): float(r["since"])
                for r in self.db.query("select job_id, since from job_identity")}

    #: Columns added after schema 1, each with the type it holds. Added in
    #: place (ALTER TABLE ADD COLUMN) so that any schema-1 journal takes them.
    _ADDED_COLUMNS: ClassVar[dict[str, dict[str, type]]] = {
        # Which checkpoint protocol the victim was recognised by (spolicy,
        # slurm-signal, periodic, none) and how it answered (ack,
        # self-requeue, exit), for logs, metrics and `report`.
        "victims": {"protocol": str, "ack_how": str},
    }

    def _add_columns(self) -> None:
        for table, columns in self._ADDED_COLUMNS.items():
            have = set(self.db.table(table).columns_dict)
            for name, kind in columns.items():
                if name not in have:
                    self.db.table(table).add_column(name, kind)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT: all or nothing, on disk when it returns."""
        conn = self.db.conn
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self.db.conn.close()

    def now(self) -> float:
        return float(self._clock())

    # ------------------------------------------------------------ side effects
    def _synchronous(self, full: bool) -> None:
        if full != self._full:
            self.db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
            self._full = full

    def begin_step(self, key: str, kind: str, *, job_id: int | None = None,
                   restart_count: int | None = None, preemption_id: str | None = None,
                   params: Mapping[str, Any] | None = None, durable: bool = False) -> int:
        """Write the intent of one Slurm call; returns its id. Call BEFORE the call.

        ``durable``: fsync'd before returning, so that even a power loss
        cannot hide that the call may have been made.
        """
        table = self.db.table("steps")
        self._synchronous(durable)
        table.insert({
            "key": key, "kind": kind, "job_id": job_id, "restart_count": restart_count,
            "preemption_id": preemption_id, "params": json.dumps(dict(params or {})),
            "status": STARTED, "error": None, "started_at": self.now(), "finished_at": None,
        })
        return int(table.last_pk)  # type: ignore[arg-type]

    def finish_step(self, step_id: int, status: str, error: str = "") -> None:
        self._synchronous(False)
        self.db.table("steps").update(step_id, {"status": status, "error": error or None,
                                          "finished_at": self.now()})

    def steps(self, *, key: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        where: list[str] = []
        args: list[Any] = []
        if key is not None:
            where.append("key = ?")
            args.append(key)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        sql = "select * from steps" + (" where " + " and ".join(where) if where else "")
        rows = [dict(r) for r in self.db.query(sql + " order by id", args)]
        for row in rows:
            row["params"] = json.loads(row["params"] or "{}")
        return rows

    def has_step(self, key: str, statuses: Iterable[str] = (STARTED, OK, REACHED, UNKNOWN)) -> bool:
        """True when a call with this key was attempted (or may have been)."""
        wanted = tuple(statuses)
        marks = ",".join("?" * len(wanted))
        rows = list(self.db.query(
            f"select 1 from steps where key = ? and status in ({marks}) limit 1",
            [key, *wanted],
        ))
        return bool(rows)

    def unfinished_steps(self) -> list[dict[str, Any]]:
        return self.steps(status=STARTED)

    # ------------------------------------------------------------ preemptions
    def open_preemption(self, preemption_id: str, beneficiary: int, nodes: Iterable[str],
                        reservation: str, victims: Iterable[tuple[int, int, int]],
                        reason: str, expected_lost_gpu_seconds: float = 0.0) -> None:
        """Journal a new preemption in state planned; ``victims``: (job, restart, gpus)."""
        now = self.now()
        with self.transaction():
            self.db.table("preemptions").insert({
                "preemption_id": preemption_id, "beneficiary": beneficiary,
                "nodes": json.dumps(list(nodes)), "reservation": reservation,
                "state": PreemptionState.PLANNED.value, "reason": reason,
                "started_at": now, "updated_at": now,
                "expected_lost_gpu_seconds": expected_lost_gpu_seconds,
            }, replace=False, ignore=True)
            for job_id, restart_count, gpus in victims:
                self.db.table("victims").insert({
                    "preemption_id": preemption_id, "job_id": job_id,
                    "restart_count": restart_count, "state": VictimState.PLANNED.value,
                    "signal": None, "gpus": gpus, "signalled_at": None, "deadline": None,
                    "acked_at": None, "requeued_at": None, "deadline_noted": 0,
                    "updated_at": now,
                }, ignore=True)

    def preemption(self, preemption_id: str) -> dict[str, Any] | None:
        rows = list(self.db.query("select * from preemptions where preemption_id = ?",
                                  [preemption_id]))
        return dict(rows[0]) if rows else None

    def set_preemption_state(self, preemption_id: str, state: PreemptionState,
                             reason: str | None = None) -> None:
        values: dict[str, Any] = {"state": state.value, "updated_at": self.now()}
        if reason is not None:
            values["reason"] = reason
        self.db.table("preemptions").update(preemption_id, values)

    def victim(self, preemption_id: str, job_id: int,
               restart_count: int | None = None) -> dict[str, Any] | None:
        sql = "select * from victims where preemption_id = ? and job_id = ?"
        args: list[Any] = [preemption_id, job_id]
        if restart_count is not None:
            sql += " and restart_count = ?"
            args.append(restart_count)
        rows = list(self.db.query(sql + " order by restart_count desc limit 1", args))
        return dict(rows[0]) if rows else None

    def update_victim(self, preemption_id: str, job_id: int, restart_count: int,
                      **values: Any) -> None:
        if isinstance(values.get("state"), VictimState):
            values["state"] = values["state"].value
        values["updated_at"] = self.now()
        self.db.table("victims").update((preemption_id, job_id, restart_count), values)

    def open_victims(self) -> list[dict[str, Any]]:
        """Victims of open preemptions whose story is not over."""
        return [dict(r) for r in self.db.query(
            "select v.* from victims v join preemptions p using (preemption_id)"
            " where p.state not in ('done', 'aborted')"
            " and v.state not in ('requeued', 'ended') order by v.preemption_id, v.job_id"
        )]

    def preemptions(self, *, open_only: bool = False) -> list[dict[str, Any]]:
        sql = "select * from preemptions"
        if open_only:
            sql += " where state not in ('done', 'aborted')"
        return [dict(r) for r in self.db.query(sql + " order by started_at")]

    def victims_of(self, preemption_id: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.query(
            "select * from victims where preemption_id = ? order by job_id", [preemption_id])]

    def checkpoint_outcomes(self, since: float | None = None,
                            until: float | None = None) -> dict[str, dict[str, Any]]:
        """Signalled victims by protocol: how many, how many acknowledged (and
        how), and the signal-to-acknowledgement times, for ``report``."""
        have = set(self.db.table("victims").columns_dict) if "victims" in \
            self.db.table_names() else set()
        if "protocol" not in have:
            return {}
        sql = "select * from victims where signalled_at is not null"
        args: list[Any] = []
        if since is not None:
            sql += " and signalled_at >= ?"
            args.append(since)
        if until is not None:
            sql += " and signalled_at < ?"
            args.append(until)
        out: dict[str, dict[str, Any]] = {}
        for row in self.db.query(sql, args):
            entry = out.setdefault(row["protocol"] or "spolicy", {
                "signalled": 0, "acknowledged": 0, "by": {}, "ack_seconds": []})
            if row["state"] in ("signalled", "planned"):
                continue  # still in flight: neither a success nor a failure yet
            entry["signalled"] += 1
            if row["acked_at"] is not None:
                entry["acknowledged"] += 1
                how = row["ack_how"] or "ack"
                entry["by"][how] = entry["by"].get(how, 0) + 1
                entry["ack_seconds"].append(max(0.0, row["acked_at"] - row["signalled_at"]))
        return out

    # ----------------------------------------------------- other policy state
    def record_reservation(self, name: str, job_id: int | None, nodes: Iterable[str],
                           start_time: float, duration: float, state: str = "active") -> None:
        self.db.table("reservations").upsert({
            "name": name, "job_id": job_id, "nodes": json.dumps(list(nodes)),
            "start_time": start_time, "duration": duration, "state": state,
            "updated_at": self.now(),
        }, pk="name")

    def set_reservation_state(self, name: str, state: str) -> None:
        if list(self.db.query("select 1 from reservations where name = ?", [name])):
            self.db.table("reservations").update(name, {"state": state, "updated_at": self.now()})

    def reservation_state(self, name: str) -> str | None:
        rows = list(self.db.query("select state from reservations where name = ?", [name]))
        return str(rows[0]["state"]) if rows else None

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self.db.table("begin_times").upsert(
            {"job_id": job_id, "begin_time": begin, "set_at": self.now()}, pk="job_id")

    def reservations(self, state: str | None = "active") -> list[dict[str, Any]]:
        sql = "select * from reservations"
        args: list[Any] = []
        if state is not None:
            sql += " where state = ?"
            args.append(state)
        rows = [dict(r) for r in self.db.query(sql + " order by name", args)]
        for row in rows:
            row["nodes"] = tuple(json.loads(row["nodes"] or "[]"))
        return rows

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        self.db.table("site_factors").upsert(
            {"job_id": job_id, "site_factor": site_factor, "set_at": self.now()}, pk="job_id")

    def set_site_factors(self, values: Mapping[int, int]) -> None:
        """Record many site factors at once (one batched Slurm call's outcome)."""
        now = self.now()
        self.db.table("site_factors").upsert_all(
            [{"job_id": j, "site_factor": v, "set_at": now} for j, v in values.items()],
            pk="job_id")

    def set_fragmented(self, since: Mapping[int, float]) -> None:
        """Keep exactly ``since`` (job id -> when first seen blocked by fragmentation
        alone): the plan's pending jobs with the bonus; the rest stopped waiting."""
        known = {int(r["job_id"]): float(r["since"])
                 for r in self.db.query("select job_id, since from fragmented")}
        new = [{"job_id": j, "since": t} for j, t in since.items() if known.get(j) != t]
        gone = [(j,) for j in known if j not in since]
        if not new and not gone:
            return
        with self.transaction():
            if new:
                self.db.table("fragmented").upsert_all(new, pk="job_id")
            if gone:
                self.db.conn.executemany("delete from fragmented where job_id = ?", gone)

    def forget_jobs(self, keep: Iterable[int]) -> None:
        """Drop site factors of jobs Slurm no longer knows (keeps the table small)."""
        alive = set(keep)
        for table in ("site_factors", "begin_times"):
            gone = [r["job_id"] for r in self.db.query(f"select job_id from {table}")
                    if r["job_id"] not in alive]
            for job_id in gone:
                self.db.table(table).delete(job_id)

    def add_usage(self, used: Mapping[str, float], now: float, half_life: float) -> None:
        """Decay every account's usage to ``now`` and add ``used`` GPU-seconds."""
        with self.transaction():
            rows = {r["account"]: r for r in self.db.query("select * from usage")}
            for account in set(rows) | set(used):
                old = rows.get(account)
                value = 0.0
                if old is not None:
                    age = max(0.0, now - float(old["as_of"]))
                    value = float(old["gpu_seconds"]) * (
                        math.pow(0.5, age / half_life) if half_life > 0 else 0.0)
                value += float(used.get(account, 0.0))
                self.db.table("usage").upsert(
                    {"account": account, "gpu_seconds": value, "as_of": now}, pk="account")

    def set_usage(self, usage: Mapping[str, float], at: float) -> None:
        """Replace the usage table with ``usage`` as of ``at`` (one transaction)."""
        with self.transaction():
            self.db.execute("delete from usage")
            self.db.table("usage").insert_all(
                [{"account": k, "gpu_seconds": float(v), "as_of": at} for k, v in usage.items()])

    def usage(self) -> tuple[dict[str, float], float | None]:
        rows = list(self.db.query("select * from usage"))
        if not rows:
            return {}, None
        return ({r["account"]: float(r["gpu_seconds"]) for r in rows},
                max(float(r["as_of"]) for r in rows))

    def record_preempted(self, job_id: int, at: float) -> None:
        self.db.table("preemption_times").insert({"job_id": job_id, "at": at})

    def add_missed_ack(self, job_id: int) -> None:
        self.db.execute(
            "insert into missed_acks (job_id, count) values (?, 1)"
            " on conflict(job_id) do update set count = count + 1", [job_id])

    def get_meta(self, key: str) -> str | None:
        if "meta" not in self.db.table_names():
            return None
        rows = list(self.db.query("select value from meta where key = ?", [key]))
        return str(rows[0]["value"]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.table("meta").upsert({"key": key, "value": value}, pk="key")

    # ---------------------------------------------------------------- intents
    def load_intents(self, *, preempted_window: float = 86400.0,
                     now: float | None = None) -> Intents:
        """What the daemon has started, for the planner."""
        now = self.now() if now is None else now
        preemptions = []
        for p in self.db.query("select * from preemptions order by started_at"):
            victims = tuple(
                VictimIntent(
                    job_id=int(v["job_id"]), restart_count=int(v["restart_count"]),
                    state=VictimState(v["state"]), signal=v["signal"] or "USR1",
                    signalled_at=v["signalled_at"], deadline=v["deadline"],
                )
                for v in self.db.query(
                    "select * from victims where preemption_id = ? order by job_id",
                    [p["preemption_id"]])
            )
            preemptions.append(PreemptionIntent(
                preemption_id=p["preemption_id"], beneficiary=int(p["beneficiary"]),
                nodes=tuple(json.loads(p["nodes"] or "[]")), reservation=p["reservation"],
                state=PreemptionState(p["state"]), victims=victims,
                started_at=float(p["started_at"]),
            ))
        # Closed preemptions older than a day matter to nobody; keep the list short.
        preemptions = [p for p in preemptions
                       if p.open or now - p.started_at < preempted_window]
        reservations = tuple(
            ReservationIntent(name=r["name"], job_id=int(r["job_id"] or 0), nodes=r["nodes"],
                              start_time=float(r["start_time"]), duration=float(r["duration"]))
            for r in self.reservations("active")
        )
        usage, usage_at = self.usage()
        times: dict[int, list[float]] = {}
        for row in self.db.query("select job_id, at from preemption_times where at >= ?"
                                 " order by at", [now - preempted_window]):
            times.setdefault(int(row["job_id"]), []).append(float(row["at"]))
        missed = {int(r["job_id"]): int(r["count"])
                  for r in self.db.query("select * from missed_acks")}
        factors = {int(r["job_id"]): int(r["site_factor"])
                   for r in self.db.query("select job_id, site_factor from site_factors")}
        begins = {int(r["job_id"]): r["begin_time"]
                  for r in self.db.query("select job_id, begin_time from begin_times")}
        fragmented = ({int(r["job_id"]): float(r["since"])
                       for r in self.db.query("select job_id, since from fragmented")}
                      if "fragmented" in self.db.table_names() else {})
        return Intents(
            preemptions=tuple(preemptions), reservations=reservations, usage=usage,
            usage_at=usage_at, preempted_at={k: tuple(v) for k, v in times.items()},
            missed_acks=missed, site_factors=factors, begin_times=begins,
            fragmented_since=fragmented,
        )

    # ------------------------------------------------------------------ audit
    def audit(self, kind: str, reason: str, outcome: str, *, job_id: int | None = None,
              detail: Mapping[str, Any] | None = None, dry_run: bool = False,
              at: float | None = None, jobs: Iterable[int] = ()) -> int:
        """Record one action (or observation) with its reason and outcome.

        ``jobs`` are further jobs it concerns (a preemption's beneficiary and
        victims), so that ``slurmpolicy log --job N`` finds it.
        """
        concerned = sorted({*(int(j) for j in jobs), *([job_id] if job_id is not None else [])})
        table = self.db.table("audit")
        table.insert({
            "at": self.now() if at is None else at, "kind": storable(kind), "job_id": job_id,
            "jobs": "," + ",".join(map(str, concerned)) + "," if concerned else "",
            "reason": storable(reason), "outcome": storable(outcome),
            "detail": json.dumps(dict(detail or {}), default=str),
            "dry_run": int(dry_run),
        })
        return int(table.last_pk)  # type: ignore[arg-type]

    def set_audit_outcome(self, record_id: int, outcome: str) -> None:
        self.db.table("audit").update(record_id, {"outcome": outcome})

    def last_audit(self, kind: str, job_id: int) -> AuditRecord | None:
        """The newest record of ``kind`` about ``job_id`` (as its main job)."""
        rows = self._records("select * from audit where kind = ? and job_id = ?"
                             " order by id desc limit 1", [kind, int(job_id)])
        return rows[0] if rows else None

    def audit_many(self, kind: str, rows: Iterable[tuple[int, str, str, Mapping[str, Any]]],
                   *, dry_run: bool = False) -> None:
        """Many records of one kind at once: (job id, reason, outcome, detail) each.

        One statement for a batch of thousands (a batched site-factor call), where
        :meth:`audit` one by one would cost a millisecond each.
        """
        at = self.now()
        self.db.conn.executemany(
            "insert into audit (at, kind, job_id, jobs, reason, outcome, detail, dry_run)"
            " values (?, ?, ?, ?, ?, ?, ?, ?)",
            [(at, storable(kind), int(job), f",{int(job)},", storable(reason),
              storable(outcome), json.dumps(dict(detail), default=str), int(dry_run))
             for job, reason, outcome, detail in rows])

    def read_audit(self, *, job_id: int | None = None, since: float | None = None,
                   until: float | None = None, limit: int | None = None) -> list[AuditRecord]:
        if "audit" not in self.db.table_names():
            return []
        where: list[str] = []
        args: list[Any] = []
        if job_id is not None:
            where.append("jobs like ?")
            args.append(f"%,{int(job_id)},%")
            # Only the history of the job that holds this id now: records from
            # before its first submission are about another job of that id
            # (Slurm's submit time is whole seconds, never after the true one).
            first = self.job_since(job_id)
            if first is not None:
                where.append("at >= ?")
                args.append(first)
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        if until is not None:
            where.append("at < ?")
            args.append(until)
        sql = "select * from audit" + (" where " + " and ".join(where) if where else "")
        if limit is not None:
            sql = f"select * from ({sql} order by id desc limit {int(limit)})"
        return self._records(sql + " order by id", args)

    def _records(self, sql: str, args: list[Any]) -> list[AuditRecord]:
        records = []
        for r in self.db.query(sql, args):
            detail = json.loads(r["detail"] or "{}")
            records.append(AuditRecord(
                id=int(r["id"]), at=float(r["at"]), kind=r["kind"], job_id=r["job_id"],
                reason=r["reason"] or "", outcome=r["outcome"] or "", detail=detail,
                dry_run=bool(r["dry_run"]),
                jobs=tuple(int(j) for j in (r["jobs"] or "").split(",") if j),
            ))
        return records

    # ---------------------------------------------------------------- metrics
    def record_metrics(self, figures: Iterable[tuple[str, Mapping[str, str], float]],
                       at: float | None = None) -> None:
        stamp = self.now() if at is None else at
        rows = [{"at": stamp, "name": name, "labels": json.dumps(dict(labels), sort_keys=True),
                 "value": float(value)} for name, labels, value in figures]
        if rows:
            self.db.table("metrics").insert_all(rows)

    def metric_history(self, name: str, *, since: float | None = None,
                       until: float | None = None) -> list[tuple[float, dict[str, str], float]]:
        if "metrics" not in self.db.table_names():
            return []
        sql = "select at, labels, value from metrics where name = ?"
        args: list[Any] = [name]
        if since is not None:
            sql += " and at >= ?"
            args.append(since)
        if until is not None:
            sql += " and at < ?"
            args.append(until)
        return [(float(r["at"]), json.loads(r["labels"]), float(r["value"]))
                for r in self.db.query(sql + " order by at", args)]

    def prune(self, older_than: float) -> None:
        """Drop metrics history and finished steps older than ``older_than`` (epoch)."""
        with self.transaction():
            self.db.execute("delete from metrics where at < ?", [older_than])
            self.db.execute("delete from steps where status != 'started' and started_at < ?",
                            [older_than])
            if "job_identity" in self.db.table_names():
                self.db.execute("delete from job_identity where coalesce(submit, since) < ?",
                                [older_than])
                self._identities = None
