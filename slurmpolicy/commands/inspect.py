"""``slurmpolicy why JOBID`` and ``slurmpolicy top``: the queue inspector.

Both are read-only and need no privilege: they read Slurm as the calling
user (so Slurm's PrivateData decides what is shown), the daemon's journal
when it is readable, and the fabric. ``why`` explains one job through the
same ``policy.explain()`` the daemon uses; ``top`` is the live view. rich and
textual are imported only when something is drawn.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click

from slurmpolicy import settings as settings_mod
from slurmpolicy.errors import JobGone

_JOB_ID = re.compile(r"^\d+([_+]\d+)?$")


def _feed(ctx: click.Context, from_dir: str | None, journal: str | None) -> Any:
    from slurmpolicy.tui.feed import Feed

    loaded = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    return Feed(loaded, from_dir=from_dir, journal=journal)


def _source_options(fn: Any) -> Any:
    fn = click.option("--journal", type=click.Path(),
                      help="The daemon's state directory or journal file "
                           "(default: daemon.state_dir of the settings).")(fn)
    fn = click.option("--from-dir", type=click.Path(file_okay=False, exists=True),
                      help="Read saved Slurm outputs (squeue.json, sinfo.json, scontrol ...)"
                           " from DIR instead of asking Slurm.")(fn)
    return fn


def check_job_id(text: str) -> str:
    value = text.strip()
    if not _JOB_ID.match(value):
        raise click.BadParameter(
            f"{text!r} is not a job id; allowed: 123, 123_4 (array task), 123+1 (het part)",
            param_hint="JOBID")
    return value


def resolve_job(frame: Any, text: str) -> int:
    """The job id of ``text`` (``123``, ``123_4`` array task, ``123+1`` het part)."""
    value = check_job_id(text)
    if "_" not in value and "+" not in value:
        job = frame.snapshot.job(int(value))
        if job is not None:
            return int(job.job_id)
    for job in frame.snapshot.jobs:
        if job.display_id == value:
            return int(job.job_id)
    raise JobGone(f"job {value} is not in the queue Slurm shows you "
                  "(finished and purged, never existed, or not yours to see); "
                  f"its past: slurmpolicy why {value} --history")


def why_json(frame: Any, exp: Any) -> dict[str, Any]:
    """``Explanation.to_dict()`` plus where it came from and whether policy details were read.

    ``policy_details_unavailable`` is null when the daemon's journal was read,
    else the reason it could not be.
    """
    data: dict[str, Any] = exp.to_dict()
    data["policy_details_unavailable"] = frame.policy_note.partition(": ")[2] or None
    data["snapshot_time"] = frame.snapshot.taken_at
    data["source"] = frame.source
    return data


def _may_see(ctx: click.Context, job_id: int, row: dict[str, Any] | None,
             from_dir: str | None) -> bool:
    """The journal never reveals a job Slurm would not show: root sees every
    history, a user their own jobs' (finished ones too), and others' only while
    Slurm shows them to the caller (PrivateData decides)."""
    import os
    import pwd

    if os.geteuid() == 0:
        return True
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = ""
    if row is not None and me and row.get("user") == me:
        return True
    frame = _feed(ctx, from_dir, None).read()
    return frame.snapshot.job(job_id) is not None


def history_data(ctx: click.Context, job_id: str, journal: str | None,
                 from_dir: str | None = None) -> dict[str, Any]:
    """The job's life as the daemon journalled it: its row, its timeline and actions."""
    from slurmpolicy.lifestore import LifeStore
    from slurmpolicy.store import Journal

    loaded = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    value = check_job_id(job_id)
    if not value.isdigit():
        raise click.BadParameter(f"{job_id!r}: --history takes the plain job id (123) of an "
                                 "array task or het part; allowed: 123", param_hint="JOBID")
    target = int(value)
    opened = Journal(journal or loaded.daemon.state_dir, read_only=True)
    try:
        store = LifeStore(opened)
        row = store.job(target)
        events = [e.to_dict() for e in store.events(target)]
        for record in opened.read_audit(job_id=target):
            if record.dry_run:
                continue
            events.append({"at": record.at, "until": None, "kind": "action",
                           "text": f"{record.kind} {record.outcome}: {record.reason}",
                           "detail": {"action": record.kind, "outcome": record.outcome}})
    finally:
        opened.close()
    if row is None and not events:
        raise JobGone(f"job {target} has no history in the journal (the daemon never saw it, "
                      "or its timeline expired: lifecycle.keep_timelines)")
    if not _may_see(ctx, target, row, from_dir):
        raise JobGone(f"job {target} is not yours and not in the queue Slurm shows you")
    events.sort(key=lambda e: (e["at"], e["kind"] == "action"))
    return {"job_id": target, "job": row, "events": events}


def print_history(data: dict[str, Any], now: float) -> None:
    from rich.console import Console
    from rich.markup import escape

    from slurmpolicy.durations import format_duration
    from slurmpolicy.inert import inert

    console = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
    row = data["job"] or {}
    head = f"Job {data['job_id']}"
    if row:
        state = row.get("end_state") or row.get("state") or "?"
        head += (f" ({state}) of {row.get('user')}, account {row.get('account')}, "
                 f"class {row.get('job_class')}: {row.get('runs') or 0} run(s), "
                 f"{row.get('retries') or 0} retr{'y' if row.get('retries') == 1 else 'ies'}")
    console.print(escape(inert(head)))
    for e in data["events"]:
        at = _clock(e["at"])
        if e["kind"] in ("wait", "run"):
            until = e["until"] if e["until"] is not None else now
            dur = format_duration(max(0.0, until - e["at"]))
            span = f"{dur}{'' if e['until'] is not None else ' so far'}"
        else:
            span = ""
        # Reasons and node names come from Slurm: shown inert, never interpreted.
        console.print(escape(inert(f"  {at}  {e['kind']:<10} {span:<18} {e['text']}")))


def _clock(epoch: float) -> str:
    import time as _time

    return _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(epoch)) + "Z"


@click.command()
@click.argument("job_id", metavar="JOBID")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.option("--history", is_flag=True,
              help="The job's whole life as the daemon saw it: each wait with its reason and "
                   "duration, each run, checkpoint, action and why (finished jobs too).")
@_source_options
@click.pass_context
def why(ctx: click.Context, job_id: str, as_json: bool, history: bool, from_dir: str | None,
        journal: str | None) -> None:
    """Why JOBID waits (or what is happening to it while it runs), in plain words."""
    check_job_id(job_id)
    if history:
        import time as _time

        data = history_data(ctx, job_id, journal, from_dir)
        if as_json:
            click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
        else:
            print_history(data, _time.time())
        return
    feed = _feed(ctx, from_dir, journal)
    frame = feed.read()
    target = resolve_job(frame, job_id)
    exp = feed.explain(frame, target)
    if as_json:
        click.echo(json.dumps(why_json(frame, exp), indent=2, sort_keys=True, default=str))
        return
    from rich.console import Console

    from slurmpolicy.tui.views import why_view

    Console(highlight=False).print(why_view(exp, frame.now, policy_note=frame.policy_note))


@click.command()
@click.option("--user", default="", help="Show only this user's jobs.")
@click.option("--account", default="", help="Show only this account's jobs.")
@click.option("--partition", default="", help="Show only jobs of this partition.")
@click.option("--interval", type=click.FloatRange(min=1.0), default=5.0, show_default=True,
              help="Seconds between reads of Slurm.")
@click.option("--once", is_flag=True,
              help="Print one screen and exit (the default when stdout is not a terminal).")
@_source_options
@click.pass_context
def top(ctx: click.Context, user: str, account: str, partition: str, interval: float,
        once: bool, from_dir: str | None, journal: str | None) -> None:
    """Live view of the queue, running jobs, fabric, preemptions and decisions.

    Keys: arrows or j/k move, enter shows why the selected job waits, esc goes
    back, 1-4 switch view (queue, running, fabric, activity), u/a/p filter by
    user/account/partition, c clears filters, s/S sort and reverse, r reloads,
    q quits.
    """
    feed = _feed(ctx, from_dir, journal)
    if once or not sys.stdout.isatty():
        print_once(feed.read(), user=user, account=account, partition=partition)
        return
    from slurmpolicy.tui.app import run_top

    run_top(feed, interval=interval, user=user, account=account, partition=partition)


def print_once(frame: Any, *, user: str = "", account: str = "", partition: str = "",
               width: int | None = None, rows: int = 50) -> None:
    """Every view of ``top`` once, one under the other, for pipes and scripts."""
    from rich.console import Console

    from slurmpolicy.tui import views
    from slurmpolicy.tui.frame import Filters, order_queue, order_running

    console = Console(highlight=False, width=width)
    w = console.width
    filters = Filters(user=user, account=account, partition=partition)
    console.print(views.header_view(frame, filters=filters, width=w))
    console.print(views.queue_view(frame, order_queue(frame, filters), height=rows, width=w,
                                   filters=filters))
    console.print(views.running_view(frame, order_running(frame, filters), height=rows,
                                     width=w, filters=filters))
    console.print(views.fabric_view(frame, width=w, height=rows))
    console.print(views.preemptions_view(frame, width=w, height=rows))
    console.print(views.decisions_view(frame, width=w, height=10))
