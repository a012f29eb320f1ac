"""Workload traces for the simulator: readers, the synthetic generator, and the
documented rules that give a trace what it lacks.

Owns :class:`TraceJob` (one job as the simulator replays it), the readers of
the Philly CSV form and of Slurm's ``sacct --parsable2`` output (default
columns and ``--format=ALL``), the seeded synthetic generator, and
:class:`TraceRules`, the one place that decides, for a trace without them,
a job's account, class, time limit and checkpoint behaviour.

The rules (also in docs/simulate.md):

- account: the Philly virtual cluster; sacct's ``Account``; else ``default``.
- class: sacct ``AdminComment`` carrying ``spolicy:v1 class=...`` wins, then a
  partition or QOS whose name is a class; otherwise a seeded draw per job:
  ``production_fraction`` production, ``experimental_fraction`` experimental,
  the rest the default class (research).
- time limit: sacct's ``Timelimit`` when set; otherwise the run time times a
  seeded overestimate factor in [1.5, 4], rounded up to whole hours (users ask
  for more than they use, which is what EASY backfill works with).
- checkpoints: every job saves periodically every ``ckpt_interval`` seconds of
  progress; on a signal it needs a seeded save time drawn from
  ``save_times`` (some longer than a 30 s grace) and spread by up to
  ``save_spread`` either way from a generator of its own (real saves do not
  take whole multiples of the daemon's 5 s poll); a restart spends
  ``restore_time`` before it makes progress again.
- GPUs: jobs of up to ``gpus_per_host`` GPUs run on one host; bigger ones ask
  ``ceil(gpus / gpus_per_host)`` hosts with an even share each (12 GPUs: 2 x 6).
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from slurmpolicy.durations import parse_duration
from slurmpolicy.errors import ConfigError
from slurmpolicy.jobpolicy import parse_admin_comment


class TraceError(ConfigError):
    """A trace file cannot be replayed: names the file, the line and what was expected."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job as the simulator replays it. Times are seconds from trace start."""

    job_id: int
    submit: float
    #: Seconds of useful work the job needs (its run time in the trace).
    duration: float
    nodes: int
    gpus_per_node: int
    account: str
    job_class: str
    user: str = ""
    #: Seconds; what EASY backfill plans with.
    time_limit: float = math.inf
    #: Seconds of progress between the job's own periodic checkpoints.
    ckpt_interval: float = 1800.0
    #: Seconds the job needs to save after a signal.
    save_time: float = 30.0
    #: Seconds a restarted job spends reading its checkpoint before progressing.
    restore_time: float = 60.0
    #: An elastic job (``--nodes=MIN-MAX``): the least nodes it runs on; ``nodes``
    #: is its maximum. None: rigid.
    min_nodes: int | None = None
    #: It acknowledges with ``slurmpolicy ckpt ack --requeue`` (docs/checkpointing.md):
    #: marked by the daemon, it requeues itself right after its ack. False: it
    #: trains on until the daemon sees the ack and requeues it.
    requeues_itself: bool = True

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, slots=True)
class TraceRules:
    """The seeded, documented rules that complete a trace (see the module docstring)."""

    seed: int = 0
    production_fraction: float = 0.15
    experimental_fraction: float = 0.25
    default_class: str = "research"
    classes: tuple[str, ...] = ("production", "research", "experimental")
    gpus_per_host: int = 8
    ckpt_interval: float = 1800.0
    save_times: tuple[float, ...] = (5.0, 15.0, 25.0, 60.0, 120.0)
    #: Each job's save time is its draw from ``save_times`` times a factor in
    #: [1 - spread, 1 + spread], drawn from a generator of the job's own so that
    #: the other draws, and so every other job, stay as they were. With whole
    #: multiples of the daemon's 5 s poll, every ack would land on a poll.
    save_spread: float = 0.2
    restore_time: float = 60.0
    overestimate: tuple[float, float] = (1.5, 4.0)
    #: Arrival times are divided by this (2.0: twice as many jobs per hour).
    load_scale: float = 1.0
    #: Philly: keep only jobs submitted in this month (``YYYY-MM``; "" keeps all),
    #: to check a change on a month it was not tuned on.
    month: str = ""
    #: Fraction of multi-node jobs that are elastic (``--nodes=MIN-MAX`` with MIN
    #: half their size, rounded up); drawn from a generator of their own, so
    #: that the other draws, and so every other job, stay the same.
    elastic_fraction: float = 0.0

    def shape(self, gpus: int) -> tuple[int, int]:
        """(nodes, gpus per node) for a job of ``gpus`` GPUs."""
        if gpus <= self.gpus_per_host:
            return 1, max(1, gpus)
        nodes = math.ceil(gpus / self.gpus_per_host)
        return nodes, math.ceil(gpus / nodes)

    def complete(
        self, rng: random.Random, *, job_id: int, submit: float, duration: float, gpus: int,
        account: str, user: str = "", job_class: str | None = None,
        time_limit: float | None = None,
    ) -> TraceJob:
        """A TraceJob with the rules applied to whatever the trace did not say.

        The rng is drawn the same number of times whatever the trace said, so
        that a seed gives the same classes with or without e.g. time limits.
        """
        u_class = rng.random()
        u_limit = rng.uniform(*self.overestimate)
        save = rng.choice(self.save_times)
        if job_class is None:
            if u_class < self.production_fraction:
                job_class = "production"
            elif u_class < self.production_fraction + self.experimental_fraction:
                job_class = "experimental"
            else:
                job_class = self.default_class
        if time_limit is None or math.isinf(time_limit):
            time_limit = max(3600.0, math.ceil(duration * u_limit / 3600.0) * 3600.0)
        nodes, gpn = self.shape(gpus)
        min_nodes = None
        if self.elastic_fraction > 0 and nodes > 1 and \
                random.Random(self.seed * 1_000_003 + job_id).random() < self.elastic_fraction:
            min_nodes = math.ceil(nodes / 2)
        if self.save_spread > 0:
            spread = random.Random(f"save:{self.seed}:{job_id}").uniform(
                -self.save_spread, self.save_spread)
            save = round(save * (1.0 + spread), 3)
        return TraceJob(
            job_id=job_id, submit=submit / self.load_scale, duration=max(1.0, duration),
            nodes=nodes, gpus_per_node=gpn, account=account or "default", job_class=job_class,
            user=user or account or "user", time_limit=time_limit,
            ckpt_interval=self.ckpt_interval, save_time=save, restore_time=self.restore_time,
            min_nodes=min_nodes,
        )


# --- Philly ---------------------------------------------------------------------

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.strip()).replace(tzinfo=UTC).timestamp()


def read_philly(
    source: str | Path | io.TextIOBase, rules: TraceRules = TraceRules(), limit: int | None = None
) -> list[TraceJob]:
    """Jobs of a Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster).

    The virtual cluster is the account; submission times are made relative to
    the first job.
    """
    name, handle = _open(source)
    with handle:
        reader = csv.DictReader(handle)
        have = reader.fieldnames or ()
        missing = [c for c in PHILLY_COLUMNS if c != "gpu_time" and c not in have]
        if missing:
            raise TraceError(
                f"{name}: not a Philly trace: missing column(s) {', '.join(missing)};"
                f" expected header {','.join(PHILLY_COLUMNS)}"
            )
        rng = random.Random(rules.seed)
        raw: list[tuple[float, float, int, str]] = []
        for lineno, row in enumerate(reader, start=2):
            if limit is not None and len(raw) >= limit:
                break
            if rules.month and not (row.get("timestamp") or "").startswith(rules.month):
                continue
            try:
                submit = _epoch(row["timestamp"])
                duration = float(row["duration"])
                gpus = int(float(row["num_gpus"]))
            except (ValueError, TypeError) as exc:
                raise TraceError(
                    f"{name}:{lineno}: bad row {row!r}: {exc}; expected"
                    " timestamp 'YYYY-MM-DD HH:MM:SS', duration seconds, num_gpus integer"
                ) from exc
            if gpus < 1 or duration < 0:
                raise TraceError(f"{name}:{lineno}: num_gpus must be >= 1 and duration >= 0")
            raw.append((submit, duration, gpus, row["cluster"].strip()))
    return _finish(raw_jobs=raw, rules=rules, rng=rng)


def _finish(
    raw_jobs: Sequence[tuple[float, float, int, str]], rules: TraceRules, rng: random.Random
) -> list[TraceJob]:
    if not raw_jobs:
        return []
    t0 = min(r[0] for r in raw_jobs)
    jobs = [
        rules.complete(rng, job_id=i + 1, submit=s - t0, duration=d, gpus=g, account=acct)
        for i, (s, d, g, acct) in enumerate(raw_jobs)
    ]
    return sorted(jobs, key=lambda j: (j.submit, j.job_id))


def _open(source: str | Path | io.TextIOBase) -> tuple[str, io.TextIOBase]:
    if isinstance(source, io.TextIOBase):
        return "<trace>", source
    path = Path(source)
    try:
        # Undecodable bytes (a job name in Latin-1) must not end the read.
        return str(path), open(path, encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror}") from exc


# --- sacct --parsable2 / --json ---------------------------------------------------

#: What ``sacct`` prints without --format (sacct(1)).
SACCT_DEFAULT_COLUMNS = ("JobID", "JobName", "Partition", "Account", "AllocCPUS", "State",
                         "ExitCode")
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_NODE_TRES = re.compile(r"(?:^|,)node=(\d+)")
_HEADER = re.compile(r"([A-Za-z]+)([^A-Za-z\n]+)[A-Za-z]")
#: States of a job that has not ended: its run time is not known yet.
_UNFINISHED = ("RUNNING", "PENDING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD",
               "REQUEUE_FED", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING")
_FORMAT_HINT = (" use `sacct --parsable2 --allusers --format=ALL` or --format=JobID,Submit,"
                "Start,End,Elapsed,Timelimit,AllocTRES,NNodes,Account,User,Partition,QOS,"
                "AdminComment")


@dataclass(slots=True)
class SacctReport:
    """What a sacct dump held: jobs read, and every job or row left out with why.

    A row that cannot be read (a field holding the delimiter, a multi-line field
    that does not close) is skipped and counted with its line number and reason,
    never shifted into the next column."""

    source: str = ""
    rows: int = 0
    steps: int = 0
    read: int = 0
    #: reason -> (count, up to five "line N: detail" examples)
    skipped: dict[str, tuple[int, list[str]]] = field(default_factory=dict)

    def skip(self, reason: str, line: int | str, detail: str = "") -> None:
        count, examples = self.skipped.get(reason, (0, []))
        if len(examples) < 5:
            where = f"line {line}" if str(line).isdigit() else str(line)
            examples.append(where + (f": {detail}" if detail else ""))
        self.skipped[reason] = (count + 1, examples)

    def summary(self) -> str:
        """One paragraph: how many jobs were read, how many skipped and why."""
        text = (f"{self.source}: {self.read} job(s) read of {self.rows} row(s)"
                f" ({self.steps} job step(s) are not jobs)")
        if self.skipped:
            parts = [f"{count} {reason} (e.g. {examples[0]})"
                     for reason, (count, examples) in sorted(self.skipped.items(),
                                                             key=lambda kv: -kv[1][0])]
            text += f"; skipped {sum(c for c, _ in self.skipped.values())}: " + "; ".join(parts)
        return text


def _sacct_time(text: str) -> float | None:
    value = text.strip()
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return _epoch(value)
    except (ValueError, OverflowError, OSError):
        return None


def _tres_gpus(tres: str) -> int:
    """GPUs in a TRES string; typed and untyped entries count once (max, not sum)."""
    found = [int(n) for n in _GPU_TRES.findall(tres)]
    return max(found) if found else 0


def _delimiter(header: str, name: str, lineno: int) -> str:
    """The --delimiter a --parsable2 dump was made with: what separates its column names."""
    m = _HEADER.match(header.strip("\r"))
    looks_like_row = any(c.isdigit() for c in header) and any(d in header for d in "|;,\t")
    if "JobID" not in header and looks_like_row:
        raise TraceError(
            f"{name}:{lineno}: the first line is a row, not sacct's header of column names"
            " (a dump made with --noheader?): which column is which cannot be known; give"
            " the --format it was made with (simulate --sacct-columns State,JobID,...), or"
            " make the dump with its header:" + _FORMAT_HINT
        )
    if not m or "JobID" not in header:
        raise TraceError(
            f"{name}:{lineno}: not sacct --parsable2 output: the first line must be the header"
            f" of column names with JobID, separated by the --delimiter (got {header[:80]!r})"
        )
    return m.group(2)


def _row_delimiter(row: str, fields: int, name: str, lineno: int) -> str:
    """The delimiter of a --noheader dump: the one that splits its first row into as many
    fields as columns were named (sacct's default '|' first)."""
    # Not ':' nor ' ': times and states ("CANCELLED by 0") hold them.
    for delim in ("|", ";", "\t", ",", "~", "^", "#"):
        count = len(row.split(delim))
        if count == fields or (count == fields + 1 and row.endswith(delim)):
            return delim
    raise TraceError(
        f"{name}:{lineno}: no delimiter splits this row into the {fields} columns named;"
        " expected a dump made with exactly that --format"
    )


def _split(line: str, delim: str, trailing: bool) -> list[str]:
    cells = line.split(delim)
    if trailing and cells and cells[-1] == "":
        cells.pop()  # --parsable (-p) ends every line with the delimiter
    return cells


def read_sacct(
    source: str | Path | io.TextIOBase, rules: TraceRules = TraceRules(), limit: int | None = None,
    report: SacctReport | None = None, columns: str | None = None,
) -> list[TraceJob]:
    """Jobs of ``sacct --parsable2`` (or ``--parsable``) output with any ``--delimiter``,
    a header line first; or of ``sacct --json`` (found by its leading ``{``).

    Job steps (``123.batch``, ``123.0``) are not jobs; a requeued job appears
    once. A replay needs Submit and a run time (ElapsedRaw, Elapsed, or Start and
    End); sacct's default columns have none of them, which is an error saying
    which ``--format`` to use. Jobs that never ran or have not finished, and jobs
    without GPUs, are skipped and counted in ``report`` (the simulator replays
    finished GPU work); so are rows that cannot be read, with their line.

    ``columns`` reads a dump made with ``--noheader``: the ``--format`` it was made
    with (``State,JobID,...``), with the dump's ``--delimiter`` between them or commas.
    """
    name, handle = _open(source)
    with handle:
        text = handle.read()
    report = report if report is not None else SacctReport()
    report.source = name
    if text.lstrip().startswith("{"):
        return _read_sacct_json(text, name, rules, limit, report)
    lines = text.split("\n")
    # Blank lines and '#' notes a person added above the header are passed over.
    first = next((k for k, ln in enumerate(lines)
                  if ln.strip() and not ln.lstrip().startswith("#")), None)
    if first is None:
        raise TraceError(f"{name}: empty sacct output")
    header_line = lines[first].rstrip("\r")
    if columns:
        # A --noheader dump: the header is the --format it was made with; the first
        # line is a row, and says which delimiter separates its fields.
        names = [c for c in re.split(r"[^A-Za-z]+", columns) if c]
        if "JobID" not in names and "JobIDRaw" not in names:
            raise TraceError(f"--sacct-columns {columns!r}: expected the --format the dump was"
                             " made with, with JobID (e.g. State,JobID,Submit,Elapsed,AllocTRES)")
        delim = _row_delimiter(header_line, len(names), name, first + 1)
        trailing = len(header_line.split(delim)) == len(names) + 1
        header = names
        first -= 1  # the first line is a row: read it
    else:
        delim = _delimiter(header_line, name, first + 1)
        trailing = header_line.endswith(delim)
        header = _split(header_line, delim, trailing)
    have = set(header)
    run_time = {"Elapsed", "ElapsedRaw"} & have or {"Start", "End"} <= have
    if "Submit" not in have or not run_time:
        missing = (["Submit"] if "Submit" not in have else []) + (
            [] if run_time else ["a run time (Elapsed or ElapsedRaw, or Start and End)"])
        default = " (sacct's default columns)" if tuple(header) == SACCT_DEFAULT_COLUMNS else ""
        raise TraceError(
            f"{name}: sacct output{default} lacks {' and '.join(missing)}; a replay needs"
            " submission and run times:" + _FORMAT_HINT
        )
    rows: list[dict[str, str]] = []
    n = first + 1
    while n < len(lines):
        line = lines[n].rstrip("\r")
        lineno = n + 1
        n += 1
        if not line.strip():
            continue
        cells = _split(line, delim, trailing)
        if len(cells) < len(header):
            # A field with a newline in it (a multi-line SubmitLine or Comment): the row
            # goes on in the next lines; it is read only if they close it exactly.
            joined, k = line, n
            while k < len(lines) and len(_split(joined, delim, trailing)) < len(header):
                joined += "\n" + lines[k].rstrip("\r")
                k += 1
            if len(_split(joined, delim, trailing)) == len(header):
                cells, n = _split(joined, delim, trailing), k
            else:
                report.rows += 1
                report.skip("unreadable rows", lineno,
                            f"{len(cells)} fields, the header has {len(header)}")
                continue
        report.rows += 1
        if len(cells) > len(header):
            report.skip("unreadable rows", lineno,
                        f"{len(cells)} fields, the header has {len(header)}: a field holds the"
                        f" delimiter {delim!r} (use --delimiter with a string no field has)")
            continue
        row = dict(zip(header, cells, strict=True))
        raw_id = row.get("JobIDRaw") or row.get("JobID", "")
        if "." in raw_id:
            report.steps += 1
            continue
        row["_line"] = str(lineno)
        rows.append(row)
    return _sacct_jobs(rows, name, rules, limit, report)


def _sacct_jobs(rows: list[dict[str, str]], name: str, rules: TraceRules, limit: int | None,
                report: SacctReport) -> list[TraceJob]:
    rng = random.Random(rules.seed)
    jobs: list[TraceJob] = []
    t0: float | None = None
    for row in rows:
        if limit is not None and len(jobs) >= limit:
            break
        line = row["_line"]
        state = row.get("State", "").split()[0] if row.get("State", "").strip() else ""
        submit = _sacct_time(row.get("Submit", ""))
        elapsed: float | None = None
        if row.get("ElapsedRaw", "").strip().isdigit():
            elapsed = float(row["ElapsedRaw"])
        elif row.get("Elapsed", "").strip():
            try:
                elapsed = parse_duration(row["Elapsed"])
            except ValueError as exc:
                report.skip("unreadable rows", line, f"Elapsed {row['Elapsed']!r}: {exc}")
                continue
        else:
            start, end = _sacct_time(row.get("Start", "")), _sacct_time(row.get("End", ""))
            if start is not None and end is not None:
                elapsed = end - start
        if state in _UNFINISHED:
            report.skip("not finished", line, state)
            continue
        if submit is None:
            report.skip("without a submit time", line, repr(row.get("Submit", ""))[:40])
            continue
        if not elapsed:
            report.skip("never ran (no run time)", line, state or "no State")
            continue
        gpus = _tres_gpus(row.get("AllocTRES", "")) or _tres_gpus(row.get("ReqTRES", ""))
        if not gpus:
            report.skip("without GPUs (no gres/gpu in AllocTRES or ReqTRES)", line)
            continue
        limit_s: float | None = None
        if row.get("TimelimitRaw", "").strip().isdigit():
            limit_s = float(row["TimelimitRaw"]) * 60.0
        elif row.get("Timelimit", "").strip() and row["Timelimit"].strip() != "Partition_Limit":
            try:
                limit_s = parse_duration(row["Timelimit"])
            except ValueError:
                limit_s = None
        job_class = _sacct_class(row, rules)
        job_id_text = (row.get("JobIDRaw") or row.get("JobID", "")).split("_")[0].split("+")[0]
        try:
            job_id = int(job_id_text)
        except ValueError:
            job_id = len(jobs) + 1
        t0 = submit if t0 is None else min(t0, submit)
        job = rules.complete(
            rng, job_id=job_id, submit=submit, duration=elapsed, gpus=gpus,
            account=row.get("Account", "").strip(), user=row.get("User", "").strip(),
            job_class=job_class, time_limit=limit_s,
        )
        nnodes = row.get("NNodes", "").strip()
        if nnodes.isdigit() and int(nnodes) > 1 and gpus % int(nnodes) == 0:
            job = replace(job, nodes=int(nnodes), gpus_per_node=gpus // int(nnodes))
        jobs.append(job)
    report.read = len(jobs)
    if not jobs:
        return []
    assert t0 is not None
    base = t0 / rules.load_scale
    # Unique ids: array tasks share a JobIDRaw prefix only when JobID was used.
    seen: set[int] = set()
    out = []
    for j in jobs:
        jid = j.job_id
        while jid in seen:
            jid += 1_000_000
        seen.add(jid)
        out.append(replace(j, job_id=jid, submit=j.submit - base))
    return sorted(out, key=lambda j: (j.submit, j.job_id))


def _number(value: object) -> float | None:
    """A number of sacct --json: plain, or Slurm 23.02+'s {"set", "infinite", "number"}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _iso(epoch: float | None) -> str:
    if not epoch:
        return ""
    try:
        return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None).isoformat()
    except (OverflowError, OSError, ValueError):
        return ""  # a time no calendar holds: the job is skipped as without a submit time


def _json_tres(entries: object) -> int:
    if not isinstance(entries, list):
        return 0
    found = [e["count"] for e in entries if isinstance(e, dict)
             and e.get("type") == "gres" and str(e.get("name", "")).split(":")[0] == "gpu"
             and isinstance(e.get("count"), int)]
    return max(found, default=0)


def _read_sacct_json(text: str, name: str, rules: TraceRules, limit: int | None,
                     report: SacctReport) -> list[TraceJob]:
    """``sacct --json`` (Slurm 21.08 to 25.11: data_parser v0.0.37 .. v0.0.44 shapes)."""
    import json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{name}:{exc.lineno}: not valid JSON: {exc.msg}; expected the output"
                         " of `sacct --json`") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise TraceError(f"{name}: no \"jobs\" list; expected the output of `sacct --json`")
    rows: list[dict[str, str]] = []
    for k, job in enumerate(jobs, start=1):
        report.rows += 1
        where = f"jobs[{k - 1}]"
        if not isinstance(job, dict) or not isinstance(job.get("job_id"), int):
            report.skip("unreadable rows", where, "no job_id")
            continue
        times = _dict(job.get("time"))
        state = job.get("state")
        current = state.get("current") if isinstance(state, dict) else state
        if isinstance(current, list):
            current = current[0] if current else ""
        tres = _dict(job.get("tres"))
        gpus = _json_tres(tres.get("allocated")) or _json_tres(tres.get("requested"))
        submit = _number(times.get("submission"))
        elapsed = _number(times.get("elapsed"))
        limit_min = _number(times.get("limit"))
        comment = _dict(job.get("comment"))
        rows.append({
            "_line": where, "JobID": str(job["job_id"]), "State": str(current or ""),
            "Submit": _iso(submit), "ElapsedRaw": str(int(elapsed)) if elapsed else "",
            "TimelimitRaw": str(int(limit_min)) if limit_min is not None else "",
            "AllocTRES": f"gres/gpu={gpus}" if gpus else "",
            "NNodes": str(job.get("allocation_nodes", "")),
            "Account": str(job.get("account") or ""), "User": str(job.get("user") or ""),
            "Partition": str(job.get("partition") or ""),
            "QOS": str(job.get("qos") or ""),
            "AdminComment": str(comment.get("administrator") or ""),
        })
    return _sacct_jobs(rows, name, rules, limit, report)


def _sacct_class(row: dict[str, str], rules: TraceRules) -> str | None:
    policy = parse_admin_comment(row.get("AdminComment", ""))
    if policy.job_class in rules.classes:
        return policy.job_class
    for key in ("Partition", "QOS"):
        value = row.get(key, "").strip()
        if value in rules.classes:
            return value
    return None


# --- synthetic --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """A seeded synthetic workload: Poisson arrivals, log-uniform run times."""

    jobs: int = 2000
    seed: int = 0
    #: Mean seconds between submissions.
    mean_interarrival: float = 120.0
    accounts: tuple[str, ...] = ("vision", "nlp", "speech", "rl")
    #: (GPUs, weight): the job-size mix.
    sizes: tuple[tuple[int, float], ...] = (
        (1, 0.45), (2, 0.15), (4, 0.15), (8, 0.15), (16, 0.06), (32, 0.03), (64, 0.01)
    )
    min_duration: float = 300.0
    max_duration: float = 2 * 86400.0


def generate(spec: SyntheticSpec = SyntheticSpec(),
             rules: TraceRules = TraceRules()) -> list[TraceJob]:
    """A synthetic trace; the same spec and rules always give the same jobs."""
    rng = random.Random(spec.seed)
    rule_rng = random.Random(rules.seed ^ 0x5EED)
    sizes = [s for s, _ in spec.sizes]
    weights = [w for _, w in spec.sizes]
    t = 0.0
    jobs = []
    lo, hi = math.log(spec.min_duration), math.log(spec.max_duration)
    for i in range(spec.jobs):
        t += rng.expovariate(1.0 / spec.mean_interarrival)
        gpus = rng.choices(sizes, weights)[0]
        duration = math.exp(rng.uniform(lo, hi))
        account = rng.choice(spec.accounts)
        jobs.append(rules.complete(rule_rng, job_id=i + 1, submit=t, duration=round(duration),
                                   gpus=gpus, account=account))
    return jobs


def parse_synthetic(text: str, seed: int) -> SyntheticSpec:
    """A spec from ``key=value,...`` (jobs, interarrival, accounts a:b:c), for --trace."""
    fields: dict[str, object] = {"seed": seed}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        try:
            if key == "jobs":
                fields["jobs"] = int(value)
            elif key in ("interarrival", "mean_interarrival"):
                fields["mean_interarrival"] = parse_duration(value) if not value.replace(
                    ".", "", 1).isdigit() else float(value)
            elif key == "accounts":
                fields["accounts"] = tuple(value.split(":"))
            elif key == "max_duration":
                fields["max_duration"] = parse_duration(value)
            else:
                raise TraceError(
                    f"synthetic spec: unknown key {key!r}; allowed: jobs, interarrival,"
                    " accounts, max_duration (e.g. jobs=2000,interarrival=120)"
                )
        except ValueError as exc:
            raise TraceError(f"synthetic spec: bad value for {key!r}: {value!r}") from exc
    return SyntheticSpec(**fields)  # type: ignore[arg-type]


def load_trace(
    path: str, fmt: str, rules: TraceRules, limit: int | None = None,
    report: SacctReport | None = None, columns: str | None = None,
) -> list[TraceJob]:
    """Read ``path`` in ``fmt`` (philly, sacct, synthetic; auto by content when None);
    a sacct trace fills ``report`` with what was read and skipped."""
    if fmt == "synthetic":
        spec = parse_synthetic("" if path in ("", "-") else path, rules.seed)
        if limit is not None:
            spec = replace(spec, jobs=min(spec.jobs, limit))
        return generate(spec, rules)
    if fmt == "philly":
        return read_philly(path, rules, limit)
    if fmt == "sacct":
        return read_sacct(path, rules, limit, report, columns)
    if fmt == "auto":
        _, handle = _open(path)
        with handle:
            first = handle.readline()
        if first.startswith("timestamp,"):
            return read_philly(path, rules, limit)
        if first.lstrip().startswith("{") or "JobID" in first or columns:
            return read_sacct(path, rules, limit, report, columns)
        raise TraceError(f"{path}: cannot tell the trace format; use --format philly|sacct")
    raise TraceError(f"unknown trace format {fmt!r}; allowed: philly, sacct, synthetic")


def summarize(jobs: Iterable[TraceJob]) -> dict[str, float]:
    jl = list(jobs)
    return {
        "jobs": len(jl),
        "gpu_hours": sum(j.duration * j.gpus for j in jl) / 3600.0,
        "span_hours": (max(j.submit for j in jl) - min(j.submit for j in jl)) / 3600.0 if jl else 0,
    }

