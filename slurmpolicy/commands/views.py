"""``slurmpolicy queue`` and ``slurmpolicy nodes``: the first views of a snapshot.

Thin commands: read one Snapshot (through the configured adapter, or from a
directory of saved Slurm outputs with ``--from-dir``) and print it as a rich
table or, with ``--json``, as plain data for scripts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import click

from slurmpolicy.durations import format_duration
from slurmpolicy.inert import inert
from slurmpolicy.model import Job, Node, Snapshot


def read_snapshot(ctx: click.Context, adapter: str | None, from_dir: str | None) -> Snapshot:
    """The snapshot a view shows: saved outputs, or one read through the adapter."""
    if from_dir:
        from slurmpolicy.slurm.parse import load_dir

        return load_dir(from_dir)
    from slurmpolicy import settings as settings_mod
    from slurmpolicy.slurm.connect import connect

    cfg = settings_mod.load((ctx.obj or {}).get("config_path"))
    options: dict[str, object] = {"timeout": cfg.slurm.command_timeout}
    if cfg.slurm.bin_dir:
        options["bin_dir"] = cfg.slurm.bin_dir
    return connect(adapter or cfg.slurm.adapter, **options).snapshot()


def _source_options(f: Any) -> Any:
    f = click.option("--from-dir", "from_dir", type=click.Path(exists=True, file_okay=False),
                     help="Read saved Slurm outputs (squeue.json, sinfo.json or "
                          "scontrol-show-nodes.json, ...) instead of asking Slurm.")(f)
    f = click.option("--adapter", type=click.Choice(["auto", "jsoncli", "pyslurm"]),
                     default=None, help="Slurm adapter (default: [slurm] adapter setting).")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(f)
    return f


def _gpus(mapping: Iterable[tuple[str, int]]) -> str:
    return ",".join(f"{t or 'gpu'}:{n}" for t, n in mapping) or "-"


def job_row(j: Job, now: float) -> dict[str, Any]:
    """A job as plain data: what the table shows, for --json."""
    if j.is_running and j.start_time:
        elapsed = max(0.0, now - j.start_time)
    elif j.is_pending and j.submit_time:
        elapsed = max(0.0, now - j.submit_time)
    else:
        elapsed = None
    return {
        "job": j.display_id, "job_id": j.job_id, "name": j.name, "user": j.user,
        "account": j.account, "partition": j.partition, "qos": j.qos,
        "state": j.state.value, "reason": j.reason, "nodes": j.node_count,
        "gpus_per_node": j.gpus_per_node, "gpus": j.gpus, "gpu_type": j.gpu_type,
        "wait_seconds" if j.is_pending else "run_seconds": elapsed,
        "time_limit": j.time_limit, "priority": j.priority, "site_factor": j.site_factor,
        "node_list": list(j.nodes), "restart_count": j.restart_count,
    }


def node_row(n: Node) -> dict[str, Any]:
    return {
        "name": n.name, "state": n.state, "flags": sorted(n.flags), "reason": n.reason,
        "schedulable": n.schedulable, "gpus": dict(n.gpus_by_type),
        "gpus_used": dict(n.gpus_alloc_by_type), "gpus_free": n.gpus_free,
        "cpus": n.cpus, "cpus_used": n.cpus_alloc, "memory_mb": n.memory_mb,
        "features": list(n.features), "partitions": list(n.partitions),
    }


def _header(snap: Snapshot) -> str:
    return (f"{snap.cluster_name or 'cluster'} · Slurm {snap.slurm_version or '?'} · "
            f"{len(snap.jobs)} jobs · {len(snap.nodes)} nodes")


@click.command("queue")
@_source_options
@click.option("--state", "states", multiple=True,
              type=click.Choice(["PENDING", "RUNNING", "SUSPENDED"], case_sensitive=False),
              help="Only jobs in this state (repeatable).")
@click.pass_context
def queue(ctx: click.Context, as_json: bool, adapter: str | None, from_dir: str | None,
          states: tuple[str, ...]) -> None:
    """The job queue: who waits for how many GPUs, and why."""
    snap = read_snapshot(ctx, adapter, from_dir)
    wanted = {s.upper() for s in states}
    jobs = [j for j in snap.jobs if not wanted or j.state.value in wanted]
    # Running first, then pending by priority: the order a person scans.
    jobs.sort(key=lambda j: (not j.is_running, -j.priority, j.job_id))
    if as_json:
        click.echo(json.dumps({"taken_at": snap.taken_at, "cluster": snap.cluster_name,
                               "slurm_version": snap.slurm_version,
                               "jobs": [job_row(j, snap.taken_at) for j in jobs]}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(inert(_header(snap))), title_justify="left")
    for col in ("job", "user", "account", "partition", "state", "reason"):
        table.add_column(col)
    for col in ("nodes×GPUs", "wait/run", "limit", "priority"):
        table.add_column(col, justify="right")
    for j in jobs:
        row = job_row(j, snap.taken_at)
        elapsed = row.get("wait_seconds", row.get("run_seconds"))
        style = "green" if j.is_running else ("yellow" if j.is_pending else "dim")
        gpus = f"{j.node_count}×{j.gpus_per_node}" + (f" {j.gpu_type}" if j.gpu_type else "")
        reason = "" if j.reason == "None" else j.reason
        # Text(), not markup strings: names are data, "[bold]" in one stays literal;
        # inert(): an escape sequence or newline in one is shown escaped, not sent.
        table.add_row(
            Text(inert(j.display_id)), Text(inert(j.user)), Text(inert(j.account)),
            Text(inert(j.partition)), Text(j.state.value, style=style), Text(inert(reason)),
            Text(inert(gpus)),
            format_duration(elapsed) if elapsed is not None else "-",
            format_duration(j.time_limit), str(j.priority),
        )
    Console().print(table)


@click.command("nodes")
@_source_options
@click.pass_context
def nodes(ctx: click.Context, as_json: bool, adapter: str | None, from_dir: str | None) -> None:
    """The nodes: state, drain reasons, GPUs used and free by type."""
    snap = read_snapshot(ctx, adapter, from_dir)
    if as_json:
        click.echo(json.dumps({"taken_at": snap.taken_at, "cluster": snap.cluster_name,
                               "slurm_version": snap.slurm_version,
                               "nodes": [node_row(n) for n in snap.nodes]}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    total = sum(n.gpus for n in snap.nodes)
    used = sum(n.gpus_alloc for n in snap.nodes)
    free = sum(n.gpus_free for n in snap.nodes)
    table = Table(title=Text(inert(f"{_header(snap)} · GPUs {used}/{total} used, {free} free")),
                  title_justify="left")
    for col in ("node", "state", "reason", "GPUs used", "GPUs free", "features", "partitions"):
        table.add_column(col)
    for n in snap.nodes:
        state = "+".join([n.state, *sorted(n.flags)])
        style = "green" if n.schedulable and n.gpus_free else ("red" if not n.schedulable else "")
        used_text = _gpus((t, n.gpus_alloc_by_type.get(t, 0)) for t in n.gpus_by_type)
        free_text = (_gpus((t, max(0, c - n.gpus_alloc_by_type.get(t, 0)))
                           for t, c in n.gpus_by_type.items()) if n.schedulable else "0")
        bar = _bar(n.gpus_alloc, n.gpus)
        table.add_row(Text(inert(n.name)), Text(inert(state), style=style),
                      Text(inert(n.reason)), Text(inert(f"{used_text} {bar}")),
                      Text(inert(free_text)), Text(inert(",".join(n.features))),
                      Text(inert(",".join(n.partitions))))
    Console().print(table)


def _bar(used: int, total: int, width: int = 8) -> str:
    if total <= 0:
        return ""
    filled = min(width, math.ceil(width * used / total)) if used else 0
    return "█" * filled + "░" * (width - filled)
