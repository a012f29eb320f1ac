"""``slurmpolicy daemon run``, ``slurmpolicy log`` and ``slurmpolicy report``.

Thin commands over :mod:`slurmpolicy.daemon.loop` and the journal
(:mod:`slurmpolicy.store`); the journal is opened read-only by log and report.

``log`` and ``report`` show a user only what squeue would show them: root
and the journal's owner (the daemon's user) read every record; anyone else,
on a cluster whose ``PrivateData`` includes ``jobs``, reads only the records
whose jobs Slurm shows them now (asked as that user). The journal itself is
0600 by default, so this matters where a site lets others read it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import click

from slurmpolicy import settings as settings_mod
from slurmpolicy.durations import parse_duration
from slurmpolicy.errors import SlurmPolicyError
from slurmpolicy.inert import inert


def _config_path(ctx: click.Context) -> str | None:
    """The settings file named with -c (or None: $SLURMPOLICY_CONFIG, else the default)."""
    return ctx.obj.get("config_path") if ctx.obj else None


def _settings(ctx: click.Context) -> tuple[settings_mod.Settings, str | None]:
    path = _config_path(ctx)
    return settings_mod.load(path), path


def _journal(ctx: click.Context, state_dir: str | None) -> Any:
    from slurmpolicy.store import Journal

    if state_dir is None:
        state_dir = _settings(ctx)[0].daemon.state_dir
    return Journal(state_dir, read_only=True)


def audience(ctx: click.Context, journal: Any) -> set[int] | None:
    """None when every record may be shown; else the jobs the caller may see.

    Fails closed: when Slurm cannot say what it shows the caller, nothing is shown.
    """
    from slurmpolicy.errors import SlurmUnavailable

    euid = os.geteuid()
    try:
        owner = journal.path.stat().st_uid
    except OSError:
        owner = -1
    if euid in (0, owner):
        return None
    from slurmpolicy.slurm.connect import connect

    cfg = _settings(ctx)[0]
    options: dict[str, object] = {"timeout": cfg.slurm.command_timeout}
    if cfg.slurm.bin_dir:
        options["bin_dir"] = cfg.slurm.bin_dir
    try:
        client = connect(cfg.slurm.adapter, **options)
        private = getattr(client, "private_data", None)
        if callable(private) and "jobs" not in private():
            return None
        return {j.job_id for j in client.snapshot().jobs}
    except SlurmUnavailable as exc:
        raise SlurmUnavailable(
            f"cannot ask Slurm which jobs it shows you (PrivateData), so no record is shown:"
            f" {exc}") from exc


def shown_to(record: Any, visible: set[int] | None) -> bool:
    """Whether an audit record may be shown to a caller who sees ``visible`` jobs."""
    if visible is None:
        return True
    jobs = set(record.jobs) | ({record.job_id} if record.job_id is not None else set())
    return bool(jobs) and jobs <= visible


def private_view(record: Any, visible: set[int]) -> Any:
    """A record as a user who sees only ``visible`` jobs may read it: other job ids in
    its words hidden, its detail (ids, names, nodes of other jobs) left out."""
    from dataclasses import replace

    from slurmpolicy.privacy import redact_jobs

    return replace(record, reason=redact_jobs(record.reason, visible),
                   outcome=redact_jobs(record.outcome, visible), detail={})


def parse_when(text: str | None, now: float | None = None) -> float | None:
    """An epoch from ``2026-12-02T15:00``, ``2026-12-02``, an epoch, or an age (``2h``)."""
    if text is None:
        return None
    now = time.time() if now is None else now
    value = text.strip()
    try:
        return float(value) if value.replace(".", "", 1).isdigit() and len(value) >= 9 else (
            now - parse_duration(value))
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use an ISO time (2026-12-02T15:00, UTC unless it says), an epoch, "
            "or an age such as 30m, 2h, 1d") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _fmt(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


@click.group()
def daemon() -> None:
    """Run the policy daemon (what systemd starts)."""


@daemon.command("run")
@click.option("--once", is_flag=True, help="Run one cycle and exit (status 1 if it failed).")
@click.option("--dry-run", is_flag=True,
              help="Plan and record in the audit, but change nothing in Slurm.")
@click.option("--state-dir", default=None, help="Override daemon.state_dir.")
@click.option("--no-metrics", is_flag=True, help="Do not serve the Prometheus endpoint.")
@click.option("-v", "--verbose", is_flag=True, help="Log every action.")
@click.pass_context
def run(ctx: click.Context, once: bool, dry_run: bool, state_dir: str | None,
        no_metrics: bool, verbose: bool) -> int:
    """Read, plan and act every daemon.interval seconds until SIGTERM."""
    import msgspec

    from slurmpolicy.daemon.loop import Daemon

    path = _config_path(ctx)
    loaded, notices = settings_mod.load_with_notices(path)
    if state_dir is not None:
        loaded = msgspec.structs.replace(
            loaded, daemon=msgspec.structs.replace(loaded.daemon, state_dir=state_dir))
    from slurmpolicy.inert import InertFormatter

    # One record, one line: job names and Slurm's words in a message are escaped.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InertFormatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(handlers=[handler],
                        level=logging.INFO if verbose or not once else logging.WARNING)
    runner = Daemon(loaded, settings_path=path, dry_run=dry_run,
                    serve_metrics=not no_metrics, notices=notices)
    return runner.run(once=once)


@daemon.command("status")
@click.option("--state-dir", default=None, help="Journal directory (default daemon.state_dir).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, state_dir: str | None, as_json: bool) -> int:
    """Whether a daemon runs on the state directory, its last cycle, open preemptions.

    Exit status 0 when a daemon holds the state directory, 1 otherwise.
    """
    from pathlib import Path

    from slurmpolicy.daemon.lock import LOCK_NAME, StateLock

    directory = Path(state_dir or _settings(ctx)[0].daemon.state_dir)
    running: int | None = None
    probe = StateLock(directory)
    if (directory / LOCK_NAME).exists():
        try:
            probe.acquire()
        except SlurmPolicyError:
            text = (directory / LOCK_NAME).read_text().strip()
            running = int(text) if text.isdigit() else -1
        else:
            probe.release()
    journal = _journal(ctx, str(directory))
    cycles = journal.metric_history("slurmpolicy_cycle_seconds")
    last = cycles[-1][0] if cycles else None
    open_ = journal.preemptions(open_only=True)
    in_flight: list[dict[str, Any]] = [
            {"preemption_id": p["preemption_id"], "beneficiary": p["beneficiary"],
             "state": p["state"],
             "victims": [{"job_id": v["job_id"], "restart_count": v["restart_count"],
                          "state": v["state"]} for v in journal.victims_of(p["preemption_id"])]}
        for p in open_]
    lease = journal.get_meta("lease_status") or ""
    data = {"state_dir": str(directory), "running_pid": running, "last_cycle_at": last,
            "lease": lease, "open_preemptions": in_flight}
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        who = f"running (pid {running})" if running else "not running"
        click.echo(f"daemon    {who} on {directory}")
        click.echo(f"last cycle {_fmt(last) + ' UTC' if last else 'never'}")
        if lease:
            click.echo(f"lease     {lease}")
        if not open_:
            click.echo("preemptions in flight: none")
        for p in in_flight:
            victims = ", ".join(f"{v['job_id']} ({v['state']})" for v in p["victims"])
            click.echo(inert(f"preemption {p['preemption_id']} for job {p['beneficiary']}: "
                             f"{p['state']}; victims {victims}"))
    return 0 if running else 1


@click.command("log")
@click.option("--job", "job_id", type=int, default=None, help="Only actions concerning job N.")
@click.option("--since", default=None, help="From: ISO time, epoch, or age (30m, 2h, 1d).")
@click.option("--until", default=None, help="Until: ISO time, epoch, or age.")
@click.option("--limit", type=int, default=None, help="Only the last N records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--state-dir", default=None, help="Journal directory (default daemon.state_dir).")
@click.pass_context
def log(ctx: click.Context, job_id: int | None, since: str | None, until: str | None,
        limit: int | None, as_json: bool, state_dir: str | None) -> None:
    """The audit: every action the daemon took or planned, with its reason."""
    journal = _journal(ctx, state_dir)
    visible = audience(ctx, journal)
    records = journal.read_audit(job_id=job_id, since=parse_when(since),
                                 until=parse_when(until),
                                 limit=limit if visible is None else None)
    records = [r for r in records if shown_to(r, visible)]
    if limit is not None:
        records = records[-limit:] if limit > 0 else []
    if visible is not None:
        records = [private_view(r, visible) for r in records]
    if as_json:
        for r in records:
            click.echo(json.dumps(r.to_dict(), sort_keys=True))
        return
    if not records:
        click.echo("no actions recorded" + (f" for job {job_id}" if job_id else ""))
        return
    for r in records:
        job = f"job {r.job_id}" if r.job_id is not None else "-"
        dry = " [dry-run]" if r.dry_run else ""
        # Reasons and outcomes quote job names and Slurm's words: one line each.
        click.echo(f"{_fmt(r.at)}  {inert(r.kind):<18} {job:<10} {inert(r.outcome)}{dry}\n"
                   f"{'':21}{inert(r.reason)}")


def summarize(journal: Any, since: float | None, until: float | None,
              visible: set[int] | None = None) -> dict[str, Any]:
    """Figures of a period from the audit and the metrics history.

    ``visible``: the jobs the caller may see (None: all); actions and
    preemptions are then counted for those jobs only.
    """
    records = [r for r in journal.read_audit(since=since, until=until)
               if shown_to(r, visible)]
    kinds: Counter[str] = Counter()
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        if r.dry_run:
            continue
        kinds[r.kind] += 1
        outcomes[r.kind][r.outcome.split(":", 1)[0]] += 1

    def total(name: str) -> float:
        return sum(v for _, _, v in journal.metric_history(name, since=since, until=until))

    cycles = journal.metric_history("slurmpolicy_cycle_seconds", since=since, until=until)
    gpu_rows = journal.metric_history("slurmpolicy_gpus", since=since, until=until)
    alloc = [v for _, labels, v in gpu_rows if labels.get("state") == "allocated"]
    idle = [v for _, labels, v in gpu_rows if labels.get("state") == "idle"]
    waits: dict[str, list[float]] = defaultdict(list)
    for _, labels, v in journal.metric_history("slurmpolicy_wait_seconds", since=since,
                                               until=until):
        if labels.get("stat") == "mean":
            waits[labels.get("class", "?")].append(v)
    preemptions = [p for p in journal.preemptions()
                   if (since is None or p["started_at"] >= since)
                   and (until is None or p["started_at"] < until)
                   and (visible is None or p["beneficiary"] in visible
                        or any(v["job_id"] in visible
                               for v in journal.victims_of(p["preemption_id"])))]
    return {
        "since": since, "until": until, "only_jobs_you_can_see": visible is not None,
        "cycles": len(cycles),
        "mean_cycle_seconds": sum(v for _, _, v in cycles) / len(cycles) if cycles else 0.0,
        "slurm_calls": total("slurmpolicy_slurm_calls"),
        "actions": dict(kinds),
        "outcomes": {k: dict(v) for k, v in outcomes.items()},
        "preemptions": len(preemptions),
        "preemptions_by_state": dict(Counter(p["state"] for p in preemptions)),
        "requeues": total("slurmpolicy_requeues"),
        "checkpoint_acks": total("slurmpolicy_checkpoint_acks"),
        "checkpoint_deadline_misses": total("slurmpolicy_checkpoint_deadline_misses"),
        "lost_gpu_hours": total("slurmpolicy_preemption_lost_gpu_hours"),
        "mean_gpus_allocated": sum(alloc) / len(alloc) if alloc else 0.0,
        "mean_gpus_idle": sum(idle) / len(idle) if idle else 0.0,
        "mean_wait_seconds_by_class": {k: sum(v) / len(v) for k, v in sorted(waits.items())},
        "lifecycle": _lifecycle(journal, since, until),
        "checkpoints_by_protocol": _by_protocol(journal.checkpoint_outcomes(since, until)),
    }


def _lifecycle(journal: Any, since: float | None, until: float | None) -> dict[str, Any]:
    """Lifecycle figures of the jobs that ended in the period, by "class/account"."""
    from slurmpolicy.lifestore import LifeStore
    from slurmpolicy.policy.lifecycle import life_figures

    rows = LifeStore(journal).ended_with_checkpoints(since or 0.0, until)
    return {f"{klass}/{account}": values
            for (klass, account), values in life_figures(rows).items()}


def _by_protocol(outcomes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Success rate and signal-to-ack times of signalled victims, by protocol."""
    out = {}
    for protocol, o in sorted(outcomes.items()):
        times = o["ack_seconds"]
        out[protocol] = {
            "signalled": o["signalled"], "acknowledged": o["acknowledged"],
            "success_rate": o["acknowledged"] / o["signalled"] if o["signalled"] else None,
            "by": dict(sorted(o["by"].items())),
            "ack_seconds_mean": sum(times) / len(times) if times else None,
            "ack_seconds_max": max(times) if times else None,
        }
    return out


@click.command("report")
@click.option("--since", default=None, help="From: ISO time, epoch, or age (default 1d).")
@click.option("--until", default=None, help="Until: ISO time, epoch, or age (default now).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--state-dir", default=None, help="Journal directory (default daemon.state_dir).")
@click.pass_context
def report(ctx: click.Context, since: str | None, until: str | None, as_json: bool,
           state_dir: str | None) -> None:
    """Summarize a period: actions, preemptions, acks, lost GPU-hours, waits."""
    journal = _journal(ctx, state_dir)
    start = parse_when(since or "1d")
    end = parse_when(until)
    data = summarize(journal, start, end, audience(ctx, journal))
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    period = f"{_fmt(start) if start else 'beginning'} .. {_fmt(end) if end else 'now'} UTC"
    click.echo(f"slurmpolicy report, {period}")
    if data["only_jobs_you_can_see"]:
        click.echo("  (actions and preemptions of the jobs Slurm shows you: PrivateData=jobs)")
    click.echo(f"  cycles               {data['cycles']} (mean {data['mean_cycle_seconds']:.2f}s)")
    click.echo(f"  Slurm calls          {data['slurm_calls']:.0f}")
    for kind, count in sorted(data["actions"].items()):
        detail = ", ".join(f"{k} {v}" for k, v in sorted(data["outcomes"][kind].items()))
        click.echo(inert(f"  {kind:<20} {count} ({detail})"))
    states = ", ".join(f"{k} {v}" for k, v in sorted(data["preemptions_by_state"].items()))
    click.echo(f"  preemptions          {data['preemptions']}" + (f" ({states})" if states else ""))
    click.echo(f"  requeues             {data['requeues']:.0f}")
    click.echo(f"  checkpoint acks      {data['checkpoint_acks']:.0f}, deadline misses "
               f"{data['checkpoint_deadline_misses']:.0f}")
    for protocol, o in data["checkpoints_by_protocol"].items():
        if not o["signalled"]:
            continue
        how = ", ".join(f"{k} {v}" for k, v in o["by"].items())
        times = (f"; signal to ack mean {o['ack_seconds_mean']:.0f}s, max "
                 f"{o['ack_seconds_max']:.0f}s") if o["ack_seconds_mean"] is not None else ""
        click.echo(f"  ckpt {protocol}".ljust(23)
                   + f"{o['acknowledged']}/{o['signalled']} acknowledged "
                   f"({100 * o['success_rate']:.0f}%{'; ' + how if how else ''}){times}")
    click.echo(f"  GPU-hours lost       {data['lost_gpu_hours']:.2f}")
    click.echo(f"  GPUs allocated/idle  {data['mean_gpus_allocated']:.1f} / "
               f"{data['mean_gpus_idle']:.1f} (mean)")
    for name, value in data["mean_wait_seconds_by_class"].items():
        click.echo(inert(f"  wait ({name})".ljust(23) + f"{value:.0f}s mean"))
    if data["lifecycle"]:
        click.echo("  lifecycle of ended jobs, by class/account:")
    for group, f in data["lifecycle"].items():
        click.echo(inert(f"    {group}: {f['jobs_ended']:.0f} job(s), " + ", ".join(
            text for key, text in _LIFE_WORDS if key in f for text in [text.format(f[key])])))


_LIFE_WORDS = (
    ("startup_success_ratio", "start-up success {:.0%}"),
    ("abnormal_exit_ratio", "abnormal exits {:.0%}"),
    ("checkpoint_success_ratio", "checkpoints acknowledged {:.0%}"),
    ("recovery_seconds_mean", "recovery {:.0f}s mean"),
    ("progress_recovery_seconds_mean", "back to its progress {:.0f}s mean"),
    ("retries_per_job", "{:.2f} retries/job"),
    ("queueing_share_mean", "queueing {:.0%} of life"),
    ("gpu_hours_finished", "{:.2f} GPU-h of finished work"),
    ("gpu_hours_allocated", "of {:.2f} GPU-h allocated"),
)


__all__ = ["daemon", "log", "report"]
