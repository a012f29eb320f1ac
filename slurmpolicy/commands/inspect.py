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
                  "(finished and purged, never existed, or not yours to see)")


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


@click.command()
@click.argument("job_id", metavar="JOBID")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@_source_options
@click.pass_context
def why(ctx: click.Context, job_id: str, as_json: bool, from_dir: str | None,
        journal: str | None) -> None:
    """Why JOBID waits (or what is happening to it while it runs), in plain words."""
    check_job_id(job_id)
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
