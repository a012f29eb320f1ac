"""``slurmpolicy simulate``: replay a trace through the simulated Slurm, alone or
with slurmpolicy's ``plan()``, and print the figures (table, JSON, plots).

A sweep (settings files x seeds x loads x modes) runs in processes here, or is
written as a Slurm job array (``--array DIR``) whose tasks run
``simulate-task`` and whose results ``simulate-gather`` reports; both reports
come out of :func:`emit`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from slurmpolicy.inert import inert
from slurmpolicy.sim.grid import MODES

#: The GPU-cluster trace the repository ships (contrib/traces/README.md), from its root.
SHIPPED_TRACE = "contrib/traces/philly-2017-09-10.csv"


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
              help="slurmpolicy mode: plan in full at least this often (seconds) when "
                   "something changed, and every daemon.interval while a preemption is "
                   "open; production arrivals are planned at their next cycle.")
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
@click.option("--seeds", "seeds_text", metavar="N[,N...]",
              help="Several seeds, comma-separated: each replayed at every load and mode "
                   "(generalises --seed); the report shows the mean and spread across seeds.")
@click.option("--per-seed", is_flag=True,
              help="With several seeds: a table per seed instead of the mean and spread.")
@click.option("--sweep-config", "sweep_configs", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="A settings file to sweep over (repeat the option): each is replayed at "
                   "every seed, load and mode; default: the one settings file (-c).")
@click.option("--array", "array_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Do not replay: write the grid (DIR/sweep.json) and a Slurm job array "
                   "script (DIR/sweep.sbatch), one replay per array task; report with "
                   "`slurmpolicy simulate-gather DIR`.")
@click.option("--array-throttle", type=click.IntRange(min=1), metavar="K",
              help="With --array: at most K array tasks run at once (--array=0-N%K).")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, metavar="OPTION",
              help="With --array: one more #SBATCH option in the script (repeat), e.g. "
                   "--sbatch-arg=--time=1:00:00 --sbatch-arg=--partition=cpu.")
@click.option("--submit", is_flag=True,
              help="With --array: submit the script with sbatch and print the array job id.")
@click.pass_context
def simulate(ctx: click.Context, trace_path: str, fmt: str, sacct_columns: str | None,
             fabric_file: str | None, hosts: int,
             gpus_per_host: int, hosts_per_leaf: int, hosts_per_nvlink: int,
             leaves_per_spine: int, mode: str, compare: bool, with_requeue: bool, seed: int,
             as_json: bool, plot_dir: str | None, limit: int | None, load_text: str,
             month: str, production_fraction: float, grace_time: float, bf_interval: float,
             bf_max_job_test: int, plan_refresh: float, workers: int | None,
             elastic_fraction: float, no_shrink: bool, seeds_text: str | None,
             per_seed: bool, sweep_configs: tuple[str, ...], array_dir: str | None,
             array_throttle: int | None, sbatch_args: tuple[str, ...], submit: bool) -> None:
    """Replay a workload trace and measure slurmpolicy against Slurm alone."""
    from rich.console import Console

    from slurmpolicy.sim import grid
    from slurmpolicy.sim.report import Outcome
    from slurmpolicy.sim.sweep import Run, run_all

    if fmt != "synthetic" and not trace_path:
        raise click.UsageError(
            "--trace FILE is required (or --format synthetic): a Philly CSV or a sacct dump;"
            f" the repository ships the Philly trace, --trace {SHIPPED_TRACE}")
    loads = _loads(load_text)
    if seeds_text is not None and ctx.get_parameter_source("seed") not in (
            click.core.ParameterSource.DEFAULT, None):
        raise click.UsageError("give --seed N or --seeds N,N,..., not both")
    seeds = _seeds(seeds_text) if seeds_text is not None else [seed]
    if month and not (len(month) == 7 and month[4] == "-" and month.replace("-", "").isdigit()):
        raise click.BadParameter(f"{month!r}: give a month as YYYY-MM (e.g. 2017-10)",
                                 param_hint="--month")
    if array_dir is None:
        for flag, given in (("--array-throttle", array_throttle), ("--sbatch-arg", sbatch_args),
                            ("--submit", submit)):
            if given:
                raise click.UsageError(f"{flag} goes with --array DIR")
    elif plot_dir:
        raise click.UsageError("--plot does not go with --array: array tasks keep the figures, "
                               "not the series the plots are drawn from")
    config_path = ctx.obj.get("config_path") if ctx.obj else None
    paths = [grid.settings_path(p) for p in sweep_configs] or [grid.settings_path(config_path)]
    if len(set(paths)) != len(paths):
        raise click.BadParameter("a settings file is given twice", param_hint="--sweep-config")
    modes = (["slurmpolicy"] + (["slurm-requeue"] if with_requeue else []) + ["slurm-grace"]
             if compare else [mode])
    common = {"trace": trace_path, "format": fmt, "sacct_columns": sacct_columns,
              "limit": limit, "month": month, "production_fraction": production_fraction,
              "elastic_fraction": elastic_fraction, "no_shrink": no_shrink,
              "fabric": fabric_file, "hosts": hosts, "gpus_per_host": gpus_per_host,
              "hosts_per_leaf": hosts_per_leaf, "hosts_per_nvlink": hosts_per_nvlink,
              "leaves_per_spine": leaves_per_spine, "grace_time": grace_time,
              "bf_interval": bf_interval, "bf_max_job_test": bf_max_job_test,
              "plan_refresh": plan_refresh}
    tasks = grid.expand(common, paths, seeds, loads, modes)
    settings_of = {p: grid.load_settings(p, no_shrink) for p in paths}
    table, fabric = grid.build_hosts(tasks[0])
    if array_dir is not None:
        # The first case is read here (the trace reads, its jobs fit the cluster),
        # so that a mistake shows now, not in every array task.
        _, report = grid.load_case(tasks[0], settings_of[tasks[0].settings], table)
        if report.rows:
            click.echo(report.summary(), err=True)
        _write_array(array_dir, tasks, array_throttle, sbatch_args, submit, as_json)
        return
    slurm = grid.slurm_model(tasks[0])
    runs = []
    for number, (_, case) in enumerate(grid.cases(tasks)):
        settings = settings_of[case[0].settings]
        trace, report = grid.load_case(case[0], settings, table)
        if report.rows and number == 0:
            # What the dump held and what was left out, and why (stderr: --json stays clean).
            click.echo(report.summary(), err=True)
        runs += [Run(trace, table, t.mode, t.load, settings, slurm, fabric, t.plan_refresh)
                 for t in case]
    err = Console(stderr=True)
    if sys.stderr.isatty() and len(runs) > 1:
        err.print(f"{len(runs)} replays of {len(runs[-1].trace):,} jobs ...", markup=False)
    if len(runs) == 1 and sys.stderr.isatty():
        r = runs[0]
        raw, summary = _run_one(r.trace, table, r.mode, r.settings, slurm, fabric, err,
                                plan_refresh)
        summary["load"] = r.load
        results = [(summary, raw.series)]
    else:
        results = [(x.summary, x.series) for x in run_all(runs, workers)]
    outcomes = [Outcome(t, summary, len(table.names), series)
                for t, (summary, series) in zip(tasks, results, strict=True)]
    pools = grid.pool_rows(settings_of[tasks[-1].settings], runs[-1].trace)
    emit(tasks, outcomes, pools, as_json, per_seed)
    if plot_dir:
        _plots(tasks, outcomes, Path(plot_dir), err)


def emit(tasks: Sequence[Any], outcomes: Sequence[Any], pools: Sequence[dict[str, Any]],
         as_json: bool, per_seed: bool, extra: dict[str, Any] | None = None) -> None:
    """The report of a grid, replayed here or gathered from an array: JSON, or the
    tables (per case, or across seeds) and the pools."""
    from rich.console import Console

    from slurmpolicy.sim import report

    if as_json:
        out = report.to_json(tasks, outcomes, pools)
        if extra:
            out = {**out, **extra}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        report.render(Console(), tasks, outcomes, pools, per_seed)


def _plots(tasks: Sequence[Any], outcomes: Sequence[Any], out: Path, err: Any) -> None:
    from slurmpolicy.sim import grid, metrics

    labels = grid.settings_labels(tasks)
    several_loads = len({t.load for t in tasks}) > 1
    several_seeds = len({t.seed for t in tasks}) > 1
    try:
        written = []
        for (path, seed, load), case in grid.cases(tasks):
            ids = {t.id for t in case}
            group = [o for o in outcomes if o.task.id in ids]
            suffix = ((f"_x{load:g}" if several_loads else "")
                      + (f"_s{seed}" if several_seeds else "")
                      + (f"_{_file_part(labels[path])}" if len(labels) > 1 else ""))
            written += metrics.plot([o.series for o in group], [o.summary for o in group],
                                    out, suffix)
    except ImportError:
        err.print("plots skipped: matplotlib is not installed "
                  "(pip install 'slurmpolicy[plot]' or pip install matplotlib)", markup=False)
    else:
        err.print(f"plots written: {', '.join(str(p) for p in written)}", markup=False)


def _file_part(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(label).stem)


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            value = -1
        if not 0 <= value < 2**32:
            raise click.BadParameter(
                f"{part.strip()!r} is not a seed: give whole numbers from 0 to 4294967295, "
                "comma-separated (e.g. 0,1,2)", param_hint="--seeds")
        if value in seeds:
            raise click.BadParameter(f"seed {value} is given twice", param_hint="--seeds")
        seeds.append(value)
    return seeds


def _write_array(array_dir: str, tasks: Sequence[Any], throttle: int | None,
                 sbatch_args: Sequence[str], submit: bool, as_json: bool) -> None:
    from slurmpolicy.sim import array

    written = array.write(array_dir, tasks, throttle, sbatch_args)
    job = array.submit(written.sweep_dir) if submit else None
    if as_json:
        click.echo(json.dumps({"dir": str(written.sweep_dir), "tasks": written.tasks,
                               "script": str(written.script), "kept": written.kept,
                               "job_id": job}, indent=2, sort_keys=True))
        return
    d = inert(written.sweep_dir)
    click.echo(f"{written.tasks} replays written to {d}/{array.SWEEP}"
               + (f" (kept the {written.kept} result{'s' if written.kept != 1 else ''} "
                  "already there)" if written.kept else ""))
    if job:
        click.echo(f"submitted array job {job} ({written.tasks} tasks); logs in {d}/logs")
    else:
        click.echo(f"submit it with: sbatch {inert(written.script)}")
    if written.tasks > 1001:
        click.echo("note: Slurm's default MaxArraySize is 1001 (task ids 0-1000); "
                   "ask for a larger one or split the grid", err=True)
    click.echo(f"then report with: slurmpolicy simulate-gather {d}")


@click.command("simulate-task")
@click.argument("sweep_dir", metavar="DIR")
@click.argument("task_id", metavar="[TASK]", required=False)
def simulate_task(sweep_dir: str, task_id: str | None) -> None:
    """Run one replay of a sweep written by `simulate --array DIR` (what each array
    task runs); TASK defaults to $SLURM_ARRAY_TASK_ID. Writes DIR/results/TASK.json."""
    from slurmpolicy.sim import array

    given = task_id if task_id is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
    path, record = array.run_task(sweep_dir, given)
    t, s = record.task, record.summary or {}
    click.echo(inert(f"task {t.id}: {t.mode} at load x{t.load:g}, seed {t.seed}: "
                     f"{s.get('jobs', 0):,} jobs replayed in {s.get('cpu_seconds', 0):.1f} "
                     f"CPU s; figures in {path}"))


@click.command("simulate-gather")
@click.argument("sweep_dir", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--per-seed", is_flag=True,
              help="With several seeds: a table per seed instead of the mean and spread.")
@click.option("--partial", is_flag=True,
              help="Report the tasks that have results even when some are missing or "
                   "failed (and exit 0).")
def simulate_gather(sweep_dir: str, as_json: bool, per_seed: bool, partial: bool) -> None:
    """Gather the results of a sweep's array tasks into the compare report that
    `simulate --compare` prints; name the tasks without a result, with their logs."""
    from slurmpolicy.sim import array
    from slurmpolicy.sim.report import Outcome

    got = array.gather(sweep_dir)
    tasks = got.sweep.tasks
    d = got.sweep_dir
    lacking = sorted([*got.missing, *got.failed])
    if lacking:
        have = "has" if len(lacking) == 1 else "have"
        click.echo(inert(f"{d}: {len(lacking)} of {len(tasks)} tasks {have} no result:"),
                   err=True)
        for i in lacking:
            t = tasks[i]
            why = got.failed.get(i, "missing (not run yet, still running, or killed)")
            click.echo(inert(f"  task {i} ({t.mode} x{t.load:g} seed {t.seed}): {why}; "
                             f"log: {got.log(i)}"), err=True)
        click.echo(inert(f"rerun them with: sbatch --array={array.id_ranges(lacking)} "
                         f"{d / array.SCRIPT}"), err=True)
        if not partial:
            which = (f"task {lacking[0]} has" if len(lacking) == 1
                     else f"tasks {array.id_ranges(lacking)} have")
            raise array.SweepIncomplete(
                f"{d}: {which} no result; gather what there is with --partial")
    if not got.results:
        raise array.SweepIncomplete(f"{d}: no task has a result yet")
    outcomes = [Outcome(r.task, r.summary or {}, r.hosts) for _, r in sorted(got.results.items())]
    last = max(got.results)
    extra = ({"incomplete": {"missing": got.missing,
                             "failed": {str(k): v for k, v in sorted(got.failed.items())}}}
             if lacking else None)
    emit(tasks, outcomes, got.results[last].pools, as_json, per_seed, extra)


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
