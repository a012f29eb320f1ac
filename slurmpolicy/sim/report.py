"""The compare report of a grid of replays, whichever way the grid ran: in
processes on this machine (``slurmpolicy simulate``) or as a Slurm job array
(``slurmpolicy simulate-gather``): both hand their :class:`Outcome` list here.

Owns grouping the outcomes into cases (the modes of one settings file, seed and
load side by side, each with the targets when slurmpolicy meets the fair
baseline) or, with several seeds, into the mean and spread (lowest-highest)
across seeds per load, as JSON and as rich tables built with
:mod:`slurmpolicy.sim.metrics`. Tasks without an outcome (a partial gather) are
left out of their group, and what a group lacks is said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmpolicy.sim import metrics
from slurmpolicy.sim.grid import Task, settings_labels


@dataclass(frozen=True)
class Outcome:
    """One replay's figures; ``hosts``: hosts in its layout; ``series``: the sampled
    series for plots (local replays only)."""

    task: Task
    summary: dict[str, Any]
    hosts: int
    series: Any = None


@dataclass
class Group:
    """The modes of one table: one case, or one (settings, load) across seeds."""

    settings: str | None
    load: float
    seeds: list[int]
    outcomes: list[Outcome]
    #: Across seeds: mode -> the seeds it has figures of.
    mode_seeds: dict[str, list[int]] = field(default_factory=dict)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    spread: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None


def modes_of(grid: Sequence[Task]) -> list[str]:
    return list(dict.fromkeys(t.mode for t in grid))


def seeds_of(grid: Sequence[Task]) -> list[int]:
    return list(dict.fromkeys(t.seed for t in grid))


def _compare(grid: Sequence[Task]) -> bool:
    modes = modes_of(grid)
    return len(modes) > 1 and modes[0] == "slurmpolicy" and modes[-1] == "slurm-grace"


def _targets(grid: Sequence[Task], summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets, when the group has slurmpolicy and the fair baseline."""
    modes = modes_of(grid)
    if not (_compare(grid) and summaries and summaries[0]["mode"] == modes[0]
            and summaries[-1]["mode"] == modes[-1] and len(summaries) > 1):
        return []
    return metrics.targets(summaries[0], summaries[-1])


def by_case(grid: Sequence[Task], outcomes: Sequence[Outcome]) -> list[Group]:
    """One group per (settings, seed, load) that has outcomes, in the grid's order."""
    have = {o.task.id: o for o in outcomes}
    groups: dict[tuple[str | None, int, float], Group] = {}
    for task in grid:
        if task.id in have:
            g = groups.setdefault(task.case, Group(task.settings, task.load, [task.seed], []))
            g.outcomes.append(have[task.id])
            g.summaries.append(have[task.id].summary)
    return list(groups.values())


def across_seeds(grid: Sequence[Task], outcomes: Sequence[Outcome]) -> list[Group]:
    """One group per (settings, load): each mode's mean, lowest and highest figures
    over the seeds it has."""
    have = {o.task.id: o for o in outcomes}
    groups: dict[tuple[str | None, float], Group] = {}
    per_mode: dict[tuple[str | None, float], dict[str, list[Outcome]]] = {}
    for task in grid:
        if task.id not in have:
            continue
        key = (task.settings, task.load)
        g = groups.setdefault(key, Group(task.settings, task.load, [], []))
        if task.seed not in g.seeds:
            g.seeds.append(task.seed)
        g.outcomes.append(have[task.id])
        per_mode.setdefault(key, {}).setdefault(task.mode, []).append(have[task.id])
    for key, g in groups.items():
        mins: list[dict[str, Any]] = []
        maxs: list[dict[str, Any]] = []
        for mode in modes_of(grid):
            got = per_mode[key].get(mode)
            if not got:
                continue
            mean, low, high = metrics.aggregate([o.summary for o in got])
            g.summaries.append(mean)
            mins.append(low)
            maxs.append(high)
            g.mode_seeds[mode] = [o.task.seed for o in got]
        g.spread = (mins, maxs)
    return list(groups.values())


def to_json(grid: Sequence[Task], outcomes: Sequence[Outcome],
            pools: Sequence[dict[str, Any]] = ()) -> Any:
    """What ``--json`` prints: one replay's figures, or ``{"loads": [...]}`` with one
    entry per case (and ``"across_seeds"`` with several seeds)."""
    out: Any
    if len(grid) == 1 and outcomes:
        out = outcomes[0].summary
    else:
        several = len(settings_labels(grid)) > 1
        out = {"loads": []}
        for g in by_case(grid, outcomes):
            entry = {"load": g.load, "seed": g.seeds[0], "modes": g.summaries,
                     "targets": _targets(grid, g.summaries)}
            if several:
                entry["settings"] = g.settings
            out["loads"].append(entry)
        if len(seeds_of(grid)) > 1:
            out["across_seeds"] = []
            for g in across_seeds(grid, outcomes):
                low, high = g.spread or ([], [])
                entry = {"load": g.load, "seeds": g.seeds, "targets": _targets(grid, g.summaries),
                         "modes": [{"mode": s["mode"], "seeds": g.mode_seeds[s["mode"]],
                                    "mean": s, "min": lo, "max": hi}
                                   for s, lo, hi in zip(g.summaries, low, high, strict=True)]}
                if several:
                    entry["settings"] = g.settings
                out["across_seeds"].append(entry)
    if pools:
        out = {**out, "pools": list(pools)}
    return out


def _seed_list(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def render(console: Any, grid: Sequence[Task], outcomes: Sequence[Outcome],
           pools: Sequence[dict[str, Any]] = (), per_seed: bool = False) -> None:
    """The tables: per case, or (several seeds, not ``per_seed``) across seeds."""
    labels = settings_labels(grid)
    several_settings = len(labels) > 1
    all_seeds = seeds_of(grid)
    aggregated = len(all_seeds) > 1 and not per_seed
    groups = across_seeds(grid, outcomes) if aggregated else by_case(grid, outcomes)
    for g in groups:
        first = g.summaries[0]
        where = f", settings {labels[g.settings]}" if several_settings else ""
        jobs = round(first["jobs"])
        head = (f"{jobs:,} jobs on {first['gpus']:,} GPUs ({g.outcomes[0].hosts} hosts), "
                f"load x{g.load:g}")
        if aggregated:
            title = f"{head}{where}, mean (lowest-highest) of seeds {_seed_list(g.seeds)}"
            tag = f", mean of {len(g.seeds)} seeds{where}"
        else:
            title = f"{head}, seed {g.seeds[0]}{where}"
            tag = (f", seed {g.seeds[0]}" if len(all_seeds) > 1 else "") + where
        console.print(metrics.render_table(g.summaries, title, g.spread))
        if _targets(grid, g.summaries):
            console.print(metrics.render_targets(g.summaries[0], g.summaries[-1],
                                                 f"targets at load x{g.load:g}{tag}"))
        for s in g.summaries:
            plan = f", {s['plan_calls']:,.0f} plan() calls" if s["plan_calls"] else ""
            if s.get("open_only_plans"):
                plan += f" ({s['open_only_plans']:,.0f} of them open preemptions only)"
            if s.get("over_budget_cycles"):
                plan += (f", {s['over_budget_cycles']:,.0f} of them over the Slurm call budget"
                         f" ({s['deferred_actions']:,.0f} actions left for a later cycle)")
            have = g.mode_seeds.get(s["mode"], [])
            mean = ("" if not aggregated else f" (mean of {len(have)} seeds)" if len(have) > 1
                    else f" (seed {have[0]} only)")
            console.print(f"{s['mode']} x{g.load:g}: replayed in {s['cpu_seconds']:.1f} CPU s"
                          f"{cpu_split(s)}{plan}{mean}", markup=False, highlight=False)
            steps = plan_steps_line(s)
            if steps:
                console.print(f"{s['mode']} x{g.load:g}: {steps}", markup=False,
                              highlight=False)
        if len(g.summaries) > 1:
            line = cpu_ratio_line(g.summaries[0], g.summaries[-1])
            if line:
                console.print(f"x{g.load:g}: {line}", markup=False, highlight=False)
        if aggregated:
            for mode, seeds in g.mode_seeds.items():
                if len(seeds) < len(g.seeds):
                    console.print(f"{mode} x{g.load:g}: only seeds {_seed_list(seeds)} of "
                                  f"{_seed_list(g.seeds)}", markup=False, highlight=False)
    if pools:
        console.print(pool_table(pools))


def cpu_split(summary: dict[str, Any]) -> str:
    """Where a replay's CPU went, as ' (plan() A, snapshots B, backfill C)';
    empty for figures made before the parts were counted."""
    parts = summary.get("cpu_parts") or {}
    named = [f"{name} {parts[key]:.1f}" for key, name in
             (("plan", "plan()"), ("snapshot", "snapshots"), ("backfill", "backfill"))
             if isinstance(parts.get(key), (int, float))]
    return f" ({', '.join(named)})" if named else ""


def plan_steps_line(summary: dict[str, Any]) -> str:
    """``plan()``'s CPU by step, in the order the steps run (as ``Plan.timings``
    lists them): 'plan() CPU s by step: context 2.4, priorities 5.9, ...';
    empty without them (the baselines, figures made before they were timed)."""
    steps = summary.get("plan_steps") or {}
    named = [f"{step} {seconds:.1f}" for step, seconds in steps.items()
             if isinstance(seconds, (int, float))]
    return f"plan() CPU s by step: {', '.join(named)}" if named else ""


def cpu_ratio_line(policy: dict[str, Any], baseline: dict[str, Any]) -> str:
    """slurmpolicy mode's CPU against the baseline's, and what it would be if
    ``plan()`` cost nothing: the part of the gap the planner alone can close."""
    base = baseline.get("cpu_seconds") or 0.0
    plan = (policy.get("cpu_parts") or {}).get("plan")
    if base <= 0 or not isinstance(plan, (int, float)) or policy.get("mode") != "slurmpolicy":
        return ""
    cpu = policy["cpu_seconds"]
    return (f"{policy['mode']} takes {cpu / base:.1f}x the CPU of {baseline['mode']} "
            f"(target 3x); {(cpu - plan) / base:.1f}x of it is outside plan() "
            f"(the simulated Slurm, the snapshots, applying the plans)")


def pool_table(pools: Sequence[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="pools: where job_submit.lua would route the trace's jobs")
    for col in ("pool", "partition", "jobs", "GPU-hours", "with a slice overflow"):
        table.add_column(col, justify="left" if col in ("pool", "partition") else "right")
    for r in pools:
        table.add_row(*map(metrics.cell, (r["pool"], r["partition"], f"{r['jobs']:,}",
                                           f"{r['gpu_hours']:,.1f}",
                                           f"{r['with_slice_overflow']:,}")))
    return table
