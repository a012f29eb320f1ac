"""Figures of a replay: what the simulator reports, as data, a table, JSON and plots.

Owns the definitions (also in docs/simulate.md):

- wait: seconds a job spent pending, summed over all its pending periods
  (requeues included), by class: mean, p50, p95, p99;
- JCT: end - submit; wait-to-run: wait / the job's useful run time;
- GPU allocation: GPU-seconds allocated / (GPUs x time) from the first
  submission to the last one (the steady part; the drain after it is left out);
- fragmentation: mean over samples of 1 - free GPUs on wholly free hosts / free GPUs;
- preemptions; GPU-hours lost (work since the last checkpoint thrown away x
  GPUs) and GPU-hours of overhead (saving and restoring for preemptions);
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
        }
    waits_all = [j.pending_total for j in done]
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
        "jct_mean": sum(_jct(j) for j in done) / len(done) if done else 0.0,
        "wait_to_run": (sum(waits_all) / sum(j.spec.duration for j in done)) if done else 0.0,
        "allocation": raw.busy_until_last_arrival / (total_gpus * span),
        "allocation_while_waiting": _busy_allocation(raw),
        "allocation_to_end": raw.busy_gpu_seconds / (total_gpus * max(raw.makespan, 1.0)),
        "fragmentation": sum(frag) / len(frag) if frag else 0.0,
        "preemptions": sum(j.preemptions for j in raw.jobs),
        "preempted_jobs": sum(1 for j in raw.jobs if j.preemptions),
        "lost_gpu_hours": sum(j.lost_work * j.spec.gpus for j in raw.jobs) / 3600.0,
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
        "actions": dict(raw.actions),
        "events": raw.events,
        "wall_seconds": raw.wall_seconds,
        "cpu_seconds": raw.cpu_seconds,
        "peak_rss_mb": raw.peak_rss_mb,
    }


def highest_class(summary: dict[str, Any]) -> str | None:
    for c in CLASS_ORDER:
        if c in summary["by_class"]:
            return c
    return next(iter(summary["by_class"]), None)


def targets(ours: dict[str, Any], grace: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """The issue's targets vs slurm-grace: (target, ours, reference, met) rows."""
    top = highest_class(ours)
    rows: list[tuple[str, str, str, bool]] = []
    lost_o, lost_g = ours["lost_gpu_hours"], grace["lost_gpu_hours"]
    cut = 1.0 - lost_o / lost_g if lost_g > 0 else (1.0 if lost_o == 0 else 0.0)
    rows.append(("GPU-hours lost >= 90% lower", f"{lost_o:,.1f} ({cut:.0%} lower)",
                 f"{lost_g:,.1f}", cut >= 0.9))
    if top is not None:
        p_o = ours["by_class"][top]["wait"]["p95"]
        p_g = grace["by_class"].get(top, {}).get("wait", {}).get("p95", 0.0)
        rows.append((f"p95 wait of {top} <= half", _dur(p_o), _dur(p_g),
                     p_o <= 0.5 * p_g or p_o == 0.0))
    rows.append(("mean JCT no worse", _dur(ours["jct_mean"]), _dur(grace["jct_mean"]),
                 ours["jct_mean"] <= grace["jct_mean"] * 1.0001))
    rows.append(("GPU allocation >= 70%", f"{ours['allocation']:.1%}",
                 f"{grace['allocation']:.1%}", ours["allocation"] >= 0.7))
    if top is not None:
        w = ours["by_class"][top]
        ratio = w["wait"]["mean"] / w["run_mean"] if w["run_mean"] else 0.0
        g = grace["by_class"].get(top)
        gr = g["wait"]["mean"] / g["run_mean"] if g and g["run_mean"] else 0.0
        rows.append((f"{top} mean wait < 10% of its run time", f"{ratio:.1%}", f"{gr:.1%}",
                     ratio < 0.1))
    return rows


def _dur(seconds: float) -> str:
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
                "wait", {}).get(q), _dur)
    add("all jobs wait mean", lambda s: s["wait"]["mean"], _dur)
    add("all jobs wait p95", lambda s: s["wait"]["p95"], _dur)
    add("job completion time mean", lambda s: s["jct_mean"], _dur)
    add("wait-to-run ratio", lambda s: s["wait_to_run"], "{:.3f}".format)
    add("GPU allocation", lambda s: s["allocation"], pct)
    add("GPU allocation while jobs wait", lambda s: s["allocation_while_waiting"], pct)
    add("fragmentation index", lambda s: s["fragmentation"], "{:.3f}".format)
    add("preemptions", lambda s: s["preemptions"], "{:,}".format)
    add("GPU-hours lost to preemption", lambda s: s["lost_gpu_hours"], num)
    add("GPU-hours save/restore overhead", lambda s: s["overhead_gpu_hours"], num)
    add("multi-node jobs within one leaf", lambda s: s["multi_node_in_one_leaf"], pct)
    add("multi-node jobs within one NVLink domain", lambda s: s["multi_node_in_one_nvlink"], pct)
    if summaries[0].get("elastic_jobs"):
        count = "{:,}".format
        add("elastic jobs", lambda s: s["elastic_jobs"], count)
        add("elastic starts below their maximum", lambda s: s["elastic_started_smaller"], count)
        add("elastic jobs shrunk instead of evicted", lambda s: s["elastic_shrinks"], count)
        add("elastic jobs evicted", lambda s: s["elastic_evictions"], count)
        add("elastic jobs wait mean", lambda s: s["elastic_wait_mean"], _dur)
        add("elastic jobs completion time mean", lambda s: s["elastic_jct_mean"], _dur)
    return out


def render_table(summaries: Sequence[dict[str, Any]], title: str = "") -> Any:
    """A rich Table of the modes side by side, with ratios to the last mode."""
    from rich.table import Table

    table = Table(title=title or None)
    table.add_column("metric")
    for s in summaries:
        table.add_column(s["mode"], justify="right")
    compare = len(summaries) > 1
    if compare:
        for s in summaries[:-1]:
            table.add_column(f"{s['mode']} / {summaries[-1]['mode']}", justify="right")
    for name, vals, ratios in rows(summaries):
        table.add_row(name, *vals, *(ratios[:-1] if compare else []))
    return table


def render_targets(ours: dict[str, Any], grace: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="targets: slurmpolicy vs slurm-grace (reported, not asserted)")
    for col in ("target", "slurmpolicy", "slurm-grace", "met"):
        table.add_column(col)
    for name, a, b, met in targets(ours, grace):
        table.add_row(name, a, b, "yes" if met else "NO")
    return table


def plot(results: Sequence[RawResult], summaries: Sequence[dict[str, Any]],
         out: Path) -> list[Path]:
    """PNG plots into ``out``; raises ImportError when matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        ax.plot([t / 3600 for t in r.series.t], r.series.allocation, label=r.mode, lw=0.8)
    ax.set_xlabel("hours"), ax.set_ylabel("GPU allocation"), ax.set_ylim(0, 1.05)
    ax.legend(), ax.set_title("GPU allocation over time")
    written.append(out / "allocation.png")
    fig.tight_layout(), fig.savefig(written[-1], dpi=120), plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        ax.plot([t / 3600 for t in r.series.t], r.series.fragmentation, label=r.mode, lw=0.8)
    ax.set_xlabel("hours"), ax.set_ylabel("fragmentation index"), ax.legend()
    ax.set_title("fragmentation of free GPUs")
    written.append(out / "fragmentation.png")
    fig.tight_layout(), fig.savefig(written[-1], dpi=120), plt.close(fig)

    classes = list(summaries[0]["by_class"])
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(summaries))
    for i, s in enumerate(summaries):
        xs = [k + i * width for k in range(len(classes))]
        ax.bar(xs, [s["by_class"].get(c, {}).get("wait", {}).get("p95", 0) / 3600 for c in classes],
               width, label=s["mode"])
    ax.set_xticks([k + width * (len(summaries) - 1) / 2 for k in range(len(classes))], classes)
    ax.set_ylabel("p95 wait (hours)"), ax.legend(), ax.set_title("p95 wait by class")
    written.append(out / "wait_p95.png")
    fig.tight_layout(), fig.savefig(written[-1], dpi=120), plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([s["mode"] for s in summaries], [s["lost_gpu_hours"] for s in summaries])
    ax.set_ylabel("GPU-hours"), ax.set_title("GPU-hours lost to preemption")
    written.append(out / "lost_gpu_hours.png")
    fig.tight_layout(), fig.savefig(written[-1], dpi=120), plt.close(fig)
    return written
