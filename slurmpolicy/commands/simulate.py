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


def _loads(text: str) -> list[float]:
    loads = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = -1.0
        if not 0.01 <= value <= 1000:
            raise click.BadParameter(
                f"{part.strip()!r} is not a load: give numbers from 0.01 to 1000, "
                "comma-separated (e.g. 1,2,3)", param_hint="--load-scale")
        loads.append(value)
    return loads


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
              help="Run slurmpolicy and the fair baseline (slurm-grace) side by side, "
                   "with ratios and the targets, at each load.")
@click.option("--with-requeue", is_flag=True,
              help="With --compare: also run slurm-requeue (no grace).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the trace rules (classes, save times, limits) and the generator.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False),
              help="Write PNG plots here (needs matplotlib: pip install 'slurmpolicy[plot]').")
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N jobs.")
@click.option("--load-scale", "load_text", default="1", show_default=True, metavar="X[,X...]",
              help="Divide arrival times by X (2: twice the load); several, comma-separated, "
                   "run each.")
@click.option("--month", default="", metavar="YYYY-MM",
              help="Philly traces: replay only the jobs submitted in this month.")
@click.option("--production-fraction", type=click.FloatRange(0, 1), default=0.15,
              show_default=True, help="Share of jobs made production when the trace has no class.")
@click.option("--grace-time", type=click.FloatRange(min=0), default=150.0, show_default=True,
              help="Slurm's partition GraceTime in slurm-grace mode (seconds); the default "
                   "covers every save of the trace rules.")
@click.option("--bf-interval", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="Slurm's SchedulerParameters=bf_interval in the baselines (seconds).")
@click.option("--bf-max-job-test", type=click.IntRange(min=1), default=500, show_default=True,
              help="Slurm's SchedulerParameters=bf_max_job_test.")
@click.option("--plan-refresh", type=click.FloatRange(min=0), default=300.0,
              show_default=True,
              help="slurmpolicy mode: plan at least this often (seconds) when something "
                   "changed; production arrivals and open preemptions are planned every cycle.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Replays run side by side in this many processes (default: one per "
                   "replay, at most one per core).")
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
             leaves_per_spine: int, mode: str, compare: bool, with_requeue: bool, seed: int,
             as_json: bool, plot_dir: str | None, limit: int | None, load_text: str,
             month: str, production_fraction: float, grace_time: float, bf_interval: float,
             bf_max_job_test: int, plan_refresh: float, workers: int | None,
             elastic_fraction: float, no_shrink: bool) -> None:
    """Replay a workload trace and measure slurmpolicy against Slurm alone."""
    from rich.console import Console

    from slurmpolicy.sim import SlurmModel, TraceRules, metrics
    from slurmpolicy.sim.sweep import Run, run_all
    from slurmpolicy.sim.trace import SacctReport, load_trace

    settings = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    if no_shrink:
        settings = msgspec.structs.replace(settings, preemption=msgspec.structs.replace(
            settings.preemption, shrink_elastic=False))
    if fmt != "synthetic" and not trace_path:
        raise click.UsageError("--trace FILE is required (or --format synthetic)")
    loads = _loads(load_text)
    if month and not (len(month) == 7 and month[4] == "-" and month.replace("-", "").isdigit()):
        raise click.BadParameter(f"{month!r}: give a month as YYYY-MM (e.g. 2017-10)",
                                 param_hint="--month")
    table, fabric = _hosts_and_fabric(fabric_file, hosts, gpus_per_host, hosts_per_leaf,
                                      hosts_per_nvlink, leaves_per_spine)
    slurm = SlurmModel(grace_time=grace_time, bf_interval=bf_interval,
                       bf_max_job_test=bf_max_job_test)
    modes = (["slurmpolicy"] + (["slurm-requeue"] if with_requeue else []) + ["slurm-grace"]
             if compare else [mode])
    runs = []
    size = 0
    for load in loads:
        rules = TraceRules(seed=seed, load_scale=load, gpus_per_host=max(table.gpus),
                           production_fraction=production_fraction, month=month,
                           classes=tuple(settings.classes), default_class=settings.default_class,
                           elastic_fraction=elastic_fraction)
        report = SacctReport()
        trace = load_trace(trace_path, fmt, rules, limit, report, sacct_columns)
        if report.rows and load == loads[0]:
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
        size = len(trace)
        runs += [Run(trace, table, m, load, settings, slurm, fabric, plan_refresh) for m in modes]
    err = Console(stderr=True)
    if sys.stderr.isatty() and len(runs) > 1:
        err.print(f"{len(runs)} replays of {size:,} jobs ...", markup=False)
    if len(runs) == 1 and sys.stderr.isatty():
        r = runs[0]
        raw, summary = _run_one(r.trace, table, r.mode, settings, slurm, fabric, err,
                                plan_refresh)
        summary["load"] = r.load
        results = [(summary, raw.series)]
    else:
        results = [(x.summary, x.series) for x in run_all(runs, workers)]
    by_load = [[results[i * len(modes) + k] for k in range(len(modes))]
               for i in range(len(loads))]
    pools = _pool_rows(settings, runs[-1].trace)
    if as_json:
        out: Any
        if len(results) == 1:
            out = results[0][0]
        else:
            out = {"loads": [
                {"load": load, "modes": [s for s, _ in group],
                 "targets": (metrics.targets(group[0][0], group[-1][0]) if compare else [])}
                for load, group in zip(loads, by_load, strict=True)]}
        if pools:
            out = {**out, "pools": pools}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        console = Console()
        for load, group in zip(loads, by_load, strict=True):
            summaries = [s for s, _ in group]
            title = (f"{size:,} jobs on {table.total_gpus:,} GPUs ({len(table.names)} hosts), "
                     f"load x{load:g}, seed {seed}")
            console.print(metrics.render_table(summaries, title))
            if compare:
                console.print(metrics.render_targets(summaries[0], summaries[-1],
                                                     f"targets at load x{load:g}"))
            for s in summaries:
                console.print(f"{s['mode']} x{load:g}: replayed in {s['cpu_seconds']:.1f} CPU s"
                              + (f", {s['plan_calls']:,} plan() calls" if s["plan_calls"]
                                 else ""))
        if pools:
            console.print(_pool_table(pools))
    if plot_dir:
        try:
            written = []
            for load, group in zip(loads, by_load, strict=True):
                suffix = f"_x{load:g}" if len(loads) > 1 else ""
                written += metrics.plot([x for _, x in group], [s for s, _ in group],
                                        Path(plot_dir), suffix)
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
