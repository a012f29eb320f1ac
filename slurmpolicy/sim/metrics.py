"""Figures of a replay: what the simulator reports, as data, a table, JSON and plots.

Owns the definitions (also in docs/simulate.md):

- wait: seconds a job spent pending, summed over all its pending periods
  (requeues included), by class: mean, p50, p95, p99;
- JCT: end - submit; wait-to-run: wait / the job's useful run time;
- GPU allocation: GPU-seconds allocated / (GPUs x time) from the first
  submission to the last one (the steady part; the drain after it is left out);
- fragmentation: mean over samples of 1 - free GPUs on wholly free hosts / free GPUs;
- preemptions, per preempted job (mean, max); GPU-hours lost (work since the
  last checkpoint thrown away x GPUs: the work redone after a requeue) and
  GPU-hours of overhead (saving and restoring for preemptions);
- GPU-hours idle in grace: GPUs of signalled victims from the signal to the
  save's end, or to the requeue when the preemption went through;
- beneficiary start delay: seconds from a job's victims being signalled to
  its start (mean, p50, p95, p99);
- queueing share: a class's summed wait / its summed JCT (its jobs' life);
- large jobs (``reservations.large_job_gpus`` GPUs or more): wait (mean,
  p50, p95, p99, max) and JCT, what reservations for them trade against the
  rest of the queue;
- multi-node jobs whose first placement sat within one leaf / one NVLink domain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurmpolicy.sim.engine import DONE, RawResult, SimJob

CLASS_ORDER = ("production", "research", "experimental")


def _pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (0 when empty)."""
    if not values:
        return 0.0
    k = max(0, min(len(values) - 1, math.ceil(q / 100.0 * len(values)) - 1))
    return values[k]


def _stats(values: list[float]) -> dict[str, float]:
    values.sort()
    n = len(values)
    return {
        "jobs": n,
        "mean": sum(values) / n if n else 0.0,
        "p50": _pct(values, 50), "p95": _pct(values, 95), "p99": _pct(values, 99),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _jct(job: SimJob) -> float:
    return (job.end if job.end is not None else job.spec.submit) - job.spec.submit


def _queueing_share_mean(jobs: Sequence[SimJob]) -> float | None:
    """The share of a job's life (submission to end) spent pending, averaged over
    the jobs: the daemon's ``queueing_share_mean`` (policy/lifecycle.py), the
    figure the seeds ask to keep at most 10%. Unlike ``queue_share`` (all waits
    over all lives) a short job that waited long weighs as much as a long one."""
    shares = [j.pending_total / life for j in jobs if (life := _jct(j)) > 0]
    return sum(shares) / len(shares) if shares else None


def _busy_allocation(raw: RawResult) -> float | None:
    """Mean allocation over the samples at which some job was waiting."""
    s = raw.series
    vals = [a for a, p in zip(s.allocation, s.pending, strict=True) if p > 0]
    return sum(vals) / len(vals) if vals else None


def summarize(raw: RawResult) -> dict[str, Any]:
    """Plain-data figures of one replay (what --json prints)."""
    done = [j for j in raw.jobs if j.state == DONE and j.end is not None]
    classes = sorted({j.spec.job_class for j in raw.jobs},
                     key=lambda c: (CLASS_ORDER.index(c) if c in CLASS_ORDER else 99, c))
    by_class: dict[str, Any] = {}
    for c in classes:
        js = [j for j in done if j.spec.job_class == c]
        waits = [j.pending_total for j in js]
        runs = [j.spec.duration for j in js]
        by_class[c] = {
            "wait": _stats(list(waits)),
            "jct_mean": sum(_jct(j) for j in js) / len(js) if js else 0.0,
            "run_mean": sum(runs) / len(runs) if runs else 0.0,
            "wait_to_run": (sum(waits) / sum(runs)) if runs and sum(runs) else 0.0,
            "preemptions": sum(j.preemptions for j in js),
            "lost_gpu_hours": sum(j.lost_work * j.spec.gpus for j in js) / 3600.0,
            "queue_share": (sum(waits) / total_jct) if (total_jct := sum(_jct(j) for j in js))
            else 0.0,
            "queueing_share_mean": _queueing_share_mean(js),
        }
    waits_all = [j.pending_total for j in done]
    large = [j for j in done if j.spec.gpus >= raw.large_gpus]
    span = max(raw.last_arrival, 1.0)
    total_gpus = raw.hosts.total_gpus
    frag = raw.series.fragmentation
    return {
        "mode": raw.mode,
        "jobs": len(raw.jobs),
        "completed": len(done),
        "gpus": total_gpus,
        "wait": _stats(list(waits_all)),
        "by_class": by_class,
        "large": {"gpus": raw.large_gpus, "wait": _stats([j.pending_total for j in large]),
                  "wait_max": max((j.pending_total for j in large), default=0.0),
                  "jct_mean": _mean([_jct(j) for j in large])},
        "jct_mean": sum(_jct(j) for j in done) / len(done) if done else 0.0,
        "wait_to_run": (sum(waits_all) / sum(j.spec.duration for j in done)) if done else 0.0,
        "allocation": raw.busy_until_last_arrival / (total_gpus * span),
        "allocation_while_waiting": _busy_allocation(raw),
        "allocation_to_end": raw.busy_gpu_seconds / (total_gpus * max(raw.makespan, 1.0)),
        "fragmentation": sum(frag) / len(frag) if frag else 0.0,
        "preemptions": (preemptions := sum(j.preemptions for j in raw.jobs)),
        "preempted_jobs": (preempted := sum(1 for j in raw.jobs if j.preemptions)),
        "preemptions_per_preempted_job": preemptions / preempted if preempted else 0.0,
        "max_preemptions_per_job": max((j.preemptions for j in raw.jobs), default=0),
        "redone_minutes_per_preemption": (sum(j.lost_work for j in raw.jobs) / preemptions / 60.0
                                          if preemptions else 0.0),
        "idle_in_grace_gpu_hours": sum(j.grace_idle * j.spec.gpus for j in raw.jobs) / 3600.0,
        "idle_in_grace_unused_gpu_hours": sum(j.grace_idle_unused * j.spec.gpus
                                              for j in raw.jobs) / 3600.0,
        "benefit_delay": _stats(list(raw.benefit_delays)),
        "queue_share": (sum(waits_all) / total) if (total := sum(_jct(j) for j in done)) else 0.0,
        "queueing_share_mean": _queueing_share_mean(done),
        "backfill_passes": raw.backfill_passes,
        "backfill_reservations": raw.backfill_reservations,
        "lost_gpu_hours": sum(j.lost_work * j.spec.gpus for j in raw.jobs) / 3600.0,
        "lost_after_ack_gpu_hours": sum(j.lost_after_ack * j.spec.gpus
                                        for j in raw.jobs) / 3600.0,
        "overhead_gpu_hours": sum(j.overhead * j.spec.gpus for j in raw.jobs) / 3600.0,
        # Elastic jobs (--nodes=MIN-MAX): started below their maximum, shrunk
        # instead of evicted, and evicted all the same.
        "elastic_jobs": sum(1 for j in raw.jobs if j.spec.min_nodes is not None),
        "elastic_started_smaller": sum(j.smaller_starts for j in raw.jobs),
        "elastic_shrinks": sum(j.shrinks for j in raw.jobs),
        "elastic_evictions": sum(j.preemptions - j.shrinks for j in raw.jobs
                                 if j.spec.min_nodes is not None),
        "elastic_jct_mean": _mean([_jct(j) for j in done if j.spec.min_nodes is not None]),
        "elastic_wait_mean": _mean([j.pending_total for j in done
                                    if j.spec.min_nodes is not None]),
        "multi_node_jobs": raw.multi_node,
        "multi_node_in_one_leaf": raw.multi_in_leaf / raw.multi_node if raw.multi_node else None,
        "multi_node_in_one_nvlink": (raw.multi_in_nvlink / raw.multi_node
                                     if raw.multi_node else None),
        "makespan_hours": raw.makespan / 3600.0,
        "plan_calls": raw.plan_calls,
        "open_only_plans": raw.open_only_plans,
        "actions": dict(raw.actions),
        "over_budget_cycles": raw.over_budget_cycles,
        "deferred_actions": raw.deferred_actions,
        "events": raw.events,
        "wall_seconds": raw.wall_seconds,
        "cpu_seconds": raw.cpu_seconds,
        "cpu_parts": dict(raw.cpu_parts),
        "plan_steps": dict(raw.plan_steps),
        "peak_rss_mb": raw.peak_rss_mb,
    }


def highest_class(summary: dict[str, Any]) -> str | None:
    for c in CLASS_ORDER:
        if c in summary["by_class"]:
            return c
    return next(iter(summary["by_class"]), None)


#: The issue's targets: (key, name, bound, kind). "max" and "min": slurmpolicy's
#: figure over the fair baseline's at most or at least ``bound``; "share":
#: slurmpolicy's own figure at most ``bound``, whatever the baseline's (the
#: seeds' "a job spends at most 10% of its life queueing" is not a comparison).
TARGETS = (
    ("prod_p95", "production p95 wait", 0.5, "max"),
    ("jct", "mean JCT", 0.9, "max"),
    ("lost", "GPU-hours lost", 0.5, "max"),
    ("idle", "GPU-hours idle in grace", 0.5, "max"),
    ("alloc", "GPU allocation", 1.0, "min"),
    ("queueing", "share of a job's life queueing (mean over jobs)", 0.1, "share"),
)


#: What a missed target's gap says its figure is made of: (the summary's figure
#: of the part, what the part is). Lost work: what victims trained between
#: acknowledging their save and the requeue, the price of victims that keep
#: training so that a preemption called off costs no restart (bounded by
#: ``daemon.ack_poll``). Idle in grace: the saves of victims not requeued
#: after all (the beneficiary started on GPUs that freed up while they saved,
#: or the victim ended); Slurm never signals a job it does not then requeue.
_GAP_PARTS = {
    "lost": ("lost_after_ack_gpu_hours",
             "trained between a victim's ack and its requeue (daemon.ack_poll)"),
    "idle": ("idle_in_grace_unused_gpu_hours", "saves of victims not requeued after all"),
}


def _target_values(summary: dict[str, Any], top: str | None) -> dict[str, float | None]:
    p95 = summary["by_class"].get(top, {}).get("wait", {}).get("p95", 0.0) if top else 0.0
    return {"prod_p95": p95, "jct": summary["jct_mean"], "lost": summary["lost_gpu_hours"],
            "idle": summary["idle_in_grace_gpu_hours"], "alloc": summary["allocation"],
            "queueing": summary.get("queueing_share_mean")}


def _gpu_hours(v: float) -> str:
    """GPU-hours to a tenth, and a small amount to its first digit: a miss of
    0.004 GPU-hours where the baseline has none must not read "0.0"."""
    return f"{v:,.1f}" if v == 0 or abs(v) >= 0.05 else f"{v:.1g}"


def targets(ours: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue against the baseline: values, ratio, met, and the
    gap when missed (how far the ratio is from the target)."""
    top = highest_class(ours)
    mine, theirs = _target_values(ours, top), _target_values(base, top)
    rows: list[dict[str, Any]] = []
    for key, name, bound, kind in TARGETS:
        a, b = mine[key], theirs[key]
        if kind == "share":
            if a is not None:  # a summary from before the figure existed has none
                rows.append(_share_row(key, name, bound, a, b))
            continue
        assert a is not None and b is not None
        # b == 0: nothing to compare when a == 0 too (None), else some vs none (inf).
        ratio = (None if a == 0 else math.inf) if b == 0 else a / b
        met = ratio is None or (ratio <= bound if kind == "max" else ratio >= bound)
        fmt = (lambda v: f"{v:.1%}") if key == "alloc" else (
            wait_text if key in ("prod_p95", "jct") else _gpu_hours)
        want = f"<= {bound:g}x" if kind == "max" else f">= {bound:g}x"
        if met or ratio is None:
            gap = ""
        elif math.isinf(ratio):
            gap = f"{fmt(a)} where the baseline has none"
        elif key == "alloc":
            # A ratio of two shares rounds to 1.00x for a real gap: say it in points.
            gap = f"{(b - a) * 100:.1f} percentage points under the baseline"
        else:
            # A miss that rounds to 0.00x (0.903x against 0.9x) is shown with
            # the digits it needs, not as "0.90x, 0.00x from 0.9x".
            miss = abs(ratio - bound)
            digits = 2
            while round(miss, digits) == 0 and digits < 6:
                digits += 1
            gap = f"{ratio:.{digits}f}x, {miss:.{digits}f}x from {bound:g}x"
        if gap and key in _GAP_PARTS:
            part, words = _GAP_PARTS[key]
            share = ours.get(part)
            if a and share is not None:
                gap += f"; {share / a:.0%} of it {words}"
        row = {"key": key, "target": f"{name} {want}", "slurmpolicy": fmt(a),
               "baseline": fmt(b), "ratio": None if ratio is None or math.isinf(ratio) else ratio,
               "met": met, "gap": gap}
        floor = jct_floor(base) if key == "jct" else None
        if floor is not None:
            # An order of the queue shortens a job's life by its wait at most:
            # where the baseline's jobs hardly wait (x1), no policy reaches 0.9x,
            # and the gap should say so rather than read as a shortfall.
            row["floor"] = floor
            if gap:
                row["gap"] = f"{gap}; with no wait at all {floor:.2f}x"
        rows.append(row)
    return rows


def _share_row(key: str, name: str, bound: float, a: float, b: float | None,
               ) -> dict[str, Any]:
    """A target on slurmpolicy's own share (at most ``bound``); the baseline's
    beside it says whether any queue order could have met it."""
    met = a <= bound
    gap = "" if met else f"{(a - bound) * 100:.1f} percentage points over {bound:.0%}"
    if gap and b is not None and b > bound:
        gap += f" (the baseline's {b:.1%}, over it too)"
    return {"key": key, "target": f"{name} <= {bound:.0%}", "slurmpolicy": f"{a:.1%}",
            "baseline": "-" if b is None else f"{b:.1%}", "ratio": None, "met": met,
            "gap": gap}


def jct_floor(base: dict[str, Any]) -> float | None:
    """The lowest mean JCT an order of the queue can reach against ``base``, as a
    ratio: its mean JCT less its mean wait (every job starting at submission,
    running as long), over its mean JCT. None without the figures."""
    jct = base.get("jct_mean")
    wait = (base.get("wait") or {}).get("mean")
    if not jct or wait is None:
        return None
    return max(0.0, jct - wait) / jct


def wait_text(seconds: float) -> str:
    """Waits are compared at the seconds scale: ``45s``, ``2m05s``, then ``3h05m``."""
    from slurmpolicy.durations import humanize

    s = round(seconds)
    if 60 <= s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return humanize(seconds)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}x"


def rows(summaries: Sequence[dict[str, Any]]) -> list[tuple[str, list[str], list[str]]]:
    """Metric rows: (name, values per mode, ratios of each mode to the first)."""
    out: list[tuple[str, list[str], list[str]]] = []

    def add(name: str, get: Any, fmt: Any) -> None:
        vals = [get(s) for s in summaries]
        out.append((name, [fmt(v) if v is not None else "-" for v in vals],
                    [_ratio(v, vals[-1]) if isinstance(v, (int, float)) else "-" for v in vals]))

    pct = "{:.1%}".format
    num = "{:,.1f}".format
    add("jobs completed", lambda s: s["completed"], "{:,}".format)
    for c in summaries[0]["by_class"]:
        for q in ("mean", "p50", "p95", "p99"):
            add(f"{c} wait {q}", lambda s, c=c, q=q: s["by_class"].get(c, {}).get(
                "wait", {}).get(q), wait_text)
    large = summaries[0].get("large", {})
    if large.get("wait", {}).get("jobs"):
        for q in ("mean", "p95"):
            add(f"large jobs ({large['gpus']}+ GPUs) wait {q}",
                lambda s, q=q: s.get("large", {}).get("wait", {}).get(q), wait_text)
        add(f"large jobs ({large['gpus']}+ GPUs) wait max",
            lambda s: s.get("large", {}).get("wait_max"), wait_text)
    add("all jobs wait mean", lambda s: s["wait"]["mean"], wait_text)
    add("all jobs wait p95", lambda s: s["wait"]["p95"], wait_text)
    add("job completion time mean", lambda s: s["jct_mean"], wait_text)
    add("wait-to-run ratio", lambda s: s["wait_to_run"], "{:.3f}".format)
    add("GPU allocation", lambda s: s["allocation"], pct)
    add("GPU allocation while jobs wait", lambda s: s["allocation_while_waiting"], pct)
    add("fragmentation index", lambda s: s["fragmentation"], "{:.3f}".format)
    for c in summaries[0]["by_class"]:
        add(f"{c} share of job time queueing (all waits / all lives)",
            lambda s, c=c: s["by_class"].get(c, {}).get("queue_share"), pct)
    for c in summaries[0]["by_class"]:
        add(f"{c} share of a job's life queueing (mean over jobs)",
            lambda s, c=c: s["by_class"].get(c, {}).get("queueing_share_mean"), pct)
    add("all jobs share of a job's life queueing (mean over jobs)",
        lambda s: s.get("queueing_share_mean"), pct)
    add("preemptions", lambda s: s["preemptions"], "{:,}".format)
    add("preemptions per preempted job (mean)", lambda s: s["preemptions_per_preempted_job"],
        "{:.2f}".format)
    add("preemptions of one job (max)", lambda s: s["max_preemptions_per_job"], "{:,}".format)
    add("GPU-hours lost (work redone after requeue)", lambda s: s["lost_gpu_hours"], num)
    add("of it, trained between a victim's ack and its requeue",
        lambda s: s.get("lost_after_ack_gpu_hours"), num)
    add("work redone per preemption (min)", lambda s: s["redone_minutes_per_preemption"],
        "{:.2f}".format)
    add("GPU-hours idle while a victim is in grace", lambda s: s["idle_in_grace_gpu_hours"],
        num)
    add("of it, saves of victims not requeued after all",
        lambda s: s.get("idle_in_grace_unused_gpu_hours"), num)
    for q in ("mean", "p50", "p95", "p99"):
        add(f"beneficiary start delay {q}", lambda s, q=q: s["benefit_delay"][q], wait_text)
    add("GPU-hours save/restore overhead", lambda s: s["overhead_gpu_hours"], num)
    add("multi-node jobs within one leaf", lambda s: s["multi_node_in_one_leaf"], pct)
    add("multi-node jobs within one NVLink domain", lambda s: s["multi_node_in_one_nvlink"], pct)
    if summaries[0].get("elastic_jobs"):
        count = "{:,}".format
        add("elastic jobs", lambda s: s["elastic_jobs"], count)
        add("elastic starts below their maximum", lambda s: s["elastic_started_smaller"], count)
        add("elastic jobs shrunk instead of evicted", lambda s: s["elastic_shrinks"], count)
        add("elastic jobs evicted", lambda s: s["elastic_evictions"], count)
        add("elastic jobs wait mean", lambda s: s["elastic_wait_mean"], wait_text)
        add("elastic jobs completion time mean", lambda s: s["elastic_jct_mean"], wait_text)
    return out


def cell(text: object) -> Any:
    """A table cell or title shown as it is: no rich markup, controls escaped
    (class and mode names come from settings and from result files)."""
    from rich.text import Text

    from slurmpolicy.inert import inert

    return Text(inert(text))


def render_table(summaries: Sequence[dict[str, Any]], title: str = "",
                 spread: tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]] | None = None,
                 ) -> Any:
    """A rich Table of the modes side by side, with ratios to the last mode.

    ``spread``: the lowest and highest figures of each mode (across seeds) when
    ``summaries`` are means; each cell then reads ``mean (low-high)``."""
    from rich.table import Table

    table = Table(title=cell(title) if title else None)
    table.add_column("metric")
    for s in summaries:
        table.add_column(cell(s["mode"]), justify="right")
    compare = len(summaries) > 1
    if compare:
        for s in summaries[:-1]:
            table.add_column(cell(f"{s['mode']} / {summaries[-1]['mode']}"), justify="right")
    lows = {name: vals for name, vals, _ in rows(spread[0])} if spread else {}
    highs = {name: vals for name, vals, _ in rows(spread[1])} if spread else {}
    for name, vals, ratios in rows(summaries):
        if name in lows and name in highs:
            vals = [v if lo == hi else f"{v} ({lo}-{hi})"
                    for v, lo, hi in zip(vals, lows[name], highs[name], strict=True)]
        table.add_row(cell(name), *map(cell, vals), *map(cell, ratios[:-1] if compare else []))
    return table


def render_targets(ours: dict[str, Any], base: dict[str, Any], title: str = "") -> Any:
    from rich.table import Table

    table = Table(title=cell(title or f"targets: slurmpolicy vs {base['mode']}"))
    for col in ("target", "slurmpolicy", base["mode"], "ratio", "met", "gap"):
        table.add_column(cell(col))
    for row in targets(ours, base):
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        table.add_row(*map(cell, (row["target"], row["slurmpolicy"], row["baseline"], ratio,
                                   "yes" if row["met"] else "NO", row["gap"])))
    return table


def aggregate(summaries: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any],
                                                            dict[str, Any]]:
    """The mean, lowest and highest of several replays' figures (one mode, several
    seeds), each shaped as one summary: every number is averaged over the
    summaries that have it (a class one seed never drew is left out of that
    seed's share, not counted as zero); anything else is the first one's."""
    def fold(values: list[Any], how: str) -> Any:
        present = [v for v in values if v is not None]
        if not present:
            return None
        first = present[0]
        if isinstance(first, dict):
            keys = list(dict.fromkeys(k for v in present if isinstance(v, dict) for k in v))
            return {k: fold([v.get(k) for v in present if isinstance(v, dict)], how)
                    for k in keys}
        nums = [v for v in present if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(nums) != len(present) or all(v == first for v in nums):
            return first  # the same in every seed: kept as it is (a count stays whole)
        if how == "min":
            return min(nums)
        if how == "max":
            return max(nums)
        return sum(nums) / len(nums)

    items = list(summaries)
    return fold(items, "mean"), fold(items, "min"), fold(items, "max")


def plot(series: Sequence[Any], summaries: Sequence[dict[str, Any]], out: Path,
         suffix: str = "") -> list[Path]:
    """PNG plots into ``out`` (each mode on the same axes); ``series`` are the
    replays' sampled series (``RawResult.series``). Raises ImportError when
    matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    modes = [s["mode"] for s in summaries]

    def save(fig: Any, name: str) -> None:
        written.append(out / f"{name}{suffix}.png")
        fig.tight_layout()
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    for mode, sr in zip(modes, series, strict=True):
        ax.plot([t / 3600 for t in sr.t], sr.allocation, label=mode, lw=0.8)
    ax.set_xlabel("hours"), ax.set_ylabel("GPU allocation"), ax.set_ylim(0, 1.05)
    ax.legend(), ax.set_title("GPU allocation over time")
    save(fig, "allocation")

    fig, ax = plt.subplots(figsize=(9, 4))
    for mode, sr in zip(modes, series, strict=True):
        ax.plot([t / 3600 for t in sr.t], sr.fragmentation, label=mode, lw=0.8)
    ax.set_xlabel("hours"), ax.set_ylabel("fragmentation index"), ax.legend()
    ax.set_title("fragmentation of free GPUs")
    save(fig, "fragmentation")

    classes = list(summaries[0]["by_class"])
    width = 0.8 / max(1, len(summaries))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for panel, (q, scale, unit) in zip(axes, (("p95", 3600, "hours"), ("p50", 60, "minutes")),
                                       strict=True):
        for i, s in enumerate(summaries):
            xs = [k + i * width for k in range(len(classes))]
            panel.bar(xs, [s["by_class"].get(c, {}).get("wait", {}).get(q, 0) / scale
                           for c in classes], width, label=s["mode"])
        panel.set_xticks([k + width * (len(summaries) - 1) / 2 for k in range(len(classes))],
                         classes)
        panel.set_ylabel(f"{q} wait ({unit})"), panel.set_title(f"{q} wait by class")
    axes[0].legend()
    save(fig, "wait")

    measures = (("lost_gpu_hours", "GPU-hours lost"),
                ("idle_in_grace_gpu_hours", "GPU-hours idle in grace"),
                ("overhead_gpu_hours", "GPU-hours save/restore"))
    fig, ax = plt.subplots(figsize=(9, 4))
    for i, s in enumerate(summaries):
        xs = [k + i * width for k in range(len(measures))]
        ax.bar(xs, [s[key] for key, _ in measures], width, label=s["mode"])
    ax.set_xticks([k + width * (len(summaries) - 1) / 2 for k in range(len(measures))],
                  [name for _, name in measures])
    ax.set_ylabel("GPU-hours"), ax.legend(), ax.set_title("what preemption costs")
    save(fig, "preemption_cost")

    fig, ax = plt.subplots(figsize=(7, 4))
    qs = ("mean", "p50", "p95", "p99")
    for i, s in enumerate(summaries):
        xs = [k + i * width for k in range(len(qs))]
        ax.bar(xs, [s["benefit_delay"][q] for q in qs], width, label=s["mode"])
    ax.set_xticks([k + width * (len(summaries) - 1) / 2 for k in range(len(qs))], qs)
    ax.set_ylabel("seconds"), ax.legend()
    ax.set_title("beneficiary start delay (victims signalled -> start)")
    save(fig, "beneficiary_delay")
    return written
