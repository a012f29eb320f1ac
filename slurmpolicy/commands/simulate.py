"""``slurmpolicy simulate``: replay a trace through the simulated Slurm, alone or
with slurmpolicy's ``plan()``, and print the figures (table, JSON, plots)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from slurmpolicy import settings as settings_mod
from slurmpolicy.errors import ConfigError

MODES = ("slurmpolicy", "slurm-requeue", "slurm-grace")


def _hosts_and_fabric(fabric_file: str | None, hosts: int, gpus_per_host: int,
                      hosts_per_leaf: int, hosts_per_nvlink: int,
                      leaves_per_spine: int) -> tuple[Any, Any]:
    from slurmpolicy.sim.cluster import Hosts

    try:
        from slurmpolicy.topology import synthetic_fabric
        from slurmpolicy.topology.fabric import Fabric
        from slurmpolicy.topology.fabricfile import read_fabric_file
    except ImportError as exc:  # topology not installed: numbers only
        if fabric_file:
            raise ConfigError(
                "--fabric needs slurmpolicy.topology, which is not available") from exc
        return Hosts.layout(hosts, gpus_per_host, hosts_per_leaf, hosts_per_nvlink,
                            leaves_per_spine), None
    if fabric_file:
        fabric = Fabric.from_spec(read_fabric_file(fabric_file))
    else:
        for name, value in (("--hosts", hosts), ("--gpus-per-host", gpus_per_host),
                            ("--hosts-per-leaf", hosts_per_leaf),
                            ("--hosts-per-nvlink", hosts_per_nvlink),
                            ("--leaves-per-spine", leaves_per_spine)):
            if value < 1:
                raise click.BadParameter(f"{name} must be at least 1, got {value}")
        fabric = synthetic_fabric(hosts=hosts, gpus_per_host=gpus_per_host,
                                  hosts_per_nvlink=hosts_per_nvlink,
                                  hosts_per_leaf=hosts_per_leaf,
                                  leaves_per_spine=leaves_per_spine)
    table = Hosts.from_fabric(fabric)
    if not table.names or table.total_gpus <= 0:
        raise ConfigError(f"{fabric_file or 'the fabric'}: no hosts with GPUs to simulate")
    return table, fabric


@click.command()
@click.option("--trace", "trace_path", default="", metavar="FILE",
              help="Trace file (Philly CSV or sacct --parsable2); for --format synthetic a "
                   "spec like 'jobs=2000,interarrival=120' (optional).")
@click.option("--format", "fmt", type=click.Choice(["auto", "philly", "sacct", "synthetic"]),
              default="auto", show_default=True, help="Trace format.")
@click.option("--sacct-columns", "sacct_columns", metavar="FORMAT",
              help="For a sacct dump made with --noheader: the --format it was made with "
                   "(e.g. State,JobID,Submit,Elapsed,AllocTRES).")
@click.option("--fabric", "fabric_file", type=click.Path(exists=True, dir_okay=False),
              help="Fabric file (TOML); else a generated tree from the numbers below.")
@click.option("--hosts", type=int, default=128, show_default=True)
@click.option("--gpus-per-host", type=int, default=8, show_default=True)
@click.option("--hosts-per-leaf", type=int, default=16, show_default=True)
@click.option("--hosts-per-nvlink", type=int, default=1, show_default=True)
@click.option("--leaves-per-spine", type=int, default=4, show_default=True)
@click.option("--mode", type=click.Choice(MODES), default="slurmpolicy", show_default=True)
@click.option("--compare", is_flag=True,
              help="Run all three modes; print them side by side with ratios to slurm-grace.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the trace rules (classes, save times, limits) and the generator.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False),
              help="Write PNG plots here (needs matplotlib: pip install 'slurmpolicy[plot]').")
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N jobs.")
@click.option("--load-scale", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Divide arrival times by X (2: twice the load).")
@click.option("--production-fraction", type=click.FloatRange(0, 1), default=0.15,
              show_default=True, help="Share of jobs made production when the trace has no class.")
@click.option("--grace-time", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Slurm's partition GraceTime in slurm-grace mode (seconds).")
@click.option("--plan-refresh", type=click.FloatRange(min=0), default=300.0,
              show_default=True,
              help="slurmpolicy mode: plan at least this often (seconds) when something "
                   "changed; production arrivals and open preemptions are planned every cycle.")
@click.option("--elastic-fraction", type=click.FloatRange(0, 1), default=0.0,
              show_default=True,
              help="Fraction of multi-node jobs that are elastic (--nodes=MIN-MAX, MIN half "
                   "their size): they start with what is free and are shrunk, not evicted.")
@click.option("--no-shrink", is_flag=True,
              help="Evict elastic victims instead of shrinking them (preemption.shrink_elastic"
                   " = false), to measure what shrinking changes.")
@click.pass_context
def simulate(ctx: click.Context, trace_path: str, fmt: str, sacct_columns: str | None,
             fabric_file: str | None, hosts: int,
             gpus_per_host: int, hosts_per_leaf: int, hosts_per_nvlink: int,
             leaves_per_spine: int, mode: str, compare: bool, seed: int, as_json: bool,
             plot_dir: str | None, limit: int | None, load_scale: float,
             production_fraction: float, grace_time: float, plan_refresh: float,
             elastic_fraction: float, no_shrink: bool) -> None:
    """Replay a workload trace and measure slurmpolicy against Slurm alone."""
    from rich.console import Console

    from slurmpolicy.sim import SlurmModel, TraceRules, metrics
    from slurmpolicy.sim.trace import SacctReport, load_trace

    settings = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    if no_shrink:
        settings = msgspec.structs.replace(settings, preemption=msgspec.structs.replace(
            settings.preemption, shrink_elastic=False))
    if fmt != "synthetic" and not trace_path:
        raise click.UsageError("--trace FILE is required (or --format synthetic)")
    table, fabric = _hosts_and_fabric(fabric_file, hosts, gpus_per_host, hosts_per_leaf,
                                      hosts_per_nvlink, leaves_per_spine)
    rules = TraceRules(seed=seed, load_scale=load_scale, gpus_per_host=max(table.gpus),
                       production_fraction=production_fraction,
                       classes=tuple(settings.classes), default_class=settings.default_class,
                       elastic_fraction=elastic_fraction)
    report = SacctReport()
    trace = load_trace(trace_path, fmt, rules, limit, report, sacct_columns)
    if report.rows:
        # What the dump held and what was left out, and why (stderr: --json stays clean).
        click.echo(report.summary(), err=True)
    if not trace:
        why = f" ({report.summary()})" if report.rows else ""
        raise ConfigError(f"{trace_path or 'the synthetic spec'}: no jobs to replay{why}")
    too_big = [j for j in trace if j.gpus > table.total_gpus]
    if too_big:
        raise ConfigError(f"{len(too_big)} job(s) ask for more GPUs than the cluster has "
                          f"({max(j.gpus for j in too_big)} > {table.total_gpus}); "
                          "use a bigger --hosts")
    slurm = SlurmModel(grace_time=grace_time)
    modes = ["slurmpolicy", "slurm-requeue", "slurm-grace"] if compare else [mode]
    err = Console(stderr=True)
    results = []
    summaries = []
    for m in modes:
        raw, summary = _run_one(trace, table, m, settings, slurm, fabric, err, plan_refresh)
        results.append(raw)
        summaries.append(summary)
    pools = _pool_rows(settings, trace)
    if as_json:
        out: Any = summaries[0] if len(summaries) == 1 else {
            "modes": summaries,
            "targets_vs_slurm_grace": [
                {"target": t, "slurmpolicy": a, "slurm-grace": b, "met": met}
                for t, a, b, met in metrics.targets(summaries[0], summaries[-1])]}
        if pools:
            out = {**out, "pools": pools}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        console = Console()
        title = (f"{len(trace):,} jobs on {table.total_gpus:,} GPUs ({len(table.names)} hosts), "
                 f"load x{load_scale:g}, seed {seed}")
        console.print(metrics.render_table(summaries, title))
        if compare:
            console.print(metrics.render_targets(summaries[0], summaries[-1]))
        if pools:
            console.print(_pool_table(pools))
        for s in summaries:
            console.print(f"{s['mode']}: replayed in {s['wall_seconds']:.1f}s"
                          + (f", {s['plan_calls']:,} plan() calls" if s["plan_calls"] else ""))
    if plot_dir:
        try:
            written = metrics.plot(results, summaries, Path(plot_dir))
        except ImportError:
            err.print("plots skipped: matplotlib is not installed "
                      "(pip install 'slurmpolicy[plot]' or pip install matplotlib)", markup=False)
        else:
            err.print(f"plots written: {', '.join(str(p) for p in written)}", markup=False)


def _pool_rows(settings: Any, trace: Any) -> list[dict[str, Any]]:
    """Where job_submit.lua would route each trace job (settings [pools]), in jobs and
    GPU-hours per pool; empty without pools. The replay itself runs one partition."""
    if not settings.pools:
        return []
    from slurmpolicy.pools import Request, pool_report

    return pool_report(settings, ((Request(
        job_class=j.job_class, gpus=j.gpus, nodes=j.min_nodes or j.nodes,
        gpus_per_node=j.gpus_per_node), j.gpus * j.duration / 3600.0) for j in trace))


def _pool_table(pools: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="pools: where job_submit.lua would route the trace's jobs")
    for col in ("pool", "partition", "jobs", "GPU-hours", "with a slice overflow"):
        table.add_column(col, justify="left" if col in ("pool", "partition") else "right")
    for r in pools:
        table.add_row(r["pool"], r["partition"], f"{r['jobs']:,}", f"{r['gpu_hours']:,.1f}",
                      f"{r['with_slice_overflow']:,}")
    return table


def _run_one(trace: Any, table: Any, mode: str, settings: Any, slurm: Any, fabric: Any,
             err: Any, plan_refresh: float) -> tuple[Any, dict[str, Any]]:
    from slurmpolicy.sim import replay

    if not sys.stderr.isatty():
        return replay(trace, table, mode, settings=settings, slurm=slurm, fabric=fabric,
                      plan_refresh=plan_refresh)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(f"{mode:>14}"), BarColumn(), TextColumn("{task.completed:,}/"
                  "{task.total:,} jobs done"), TimeElapsedColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task(mode, total=len(trace))

        def tick(done: float, total: float) -> None:
            bar.update(task, completed=done)

        return replay(trace, table, mode, settings=settings, slurm=slurm, fabric=fabric,
                      progress=tick, plan_refresh=plan_refresh)
