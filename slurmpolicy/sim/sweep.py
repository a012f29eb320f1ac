"""Several replays at once: one process per replay, on the cores of one machine.

Owns running a list of :class:`Run` (a trace, a layout, a mode, settings,
Slurm's model, a load) in parallel processes and handing back, per run, its
figures and the sampled series the plots need (not the jobs: a replay's job
list is large and stays in its process). Each replay's CPU seconds are its
own process's (``time.process_time``), so they do not depend on how many run
side by side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from slurmpolicy.settings import Settings
from slurmpolicy.sim.cluster import Hosts
from slurmpolicy.sim.engine import SlurmModel, Trace
from slurmpolicy.sim.trace import TraceJob


@dataclass(frozen=True)
class Run:
    """One replay to do: ``load`` is a label (the trace already carries it)."""

    trace: Sequence[TraceJob]
    hosts: Hosts
    mode: str
    load: float
    settings: Settings | None = None
    slurm: SlurmModel | None = None
    fabric: Any = None
    plan_refresh: float = 300.0


@dataclass(frozen=True)
class Result:
    mode: str
    load: float
    summary: dict[str, Any]
    series: Trace


def _one(run: Run) -> Result:
    from slurmpolicy.sim import replay

    raw, summary = replay(run.trace, run.hosts, run.mode, settings=run.settings,
                          slurm=run.slurm, fabric=run.fabric, plan_refresh=run.plan_refresh)
    summary["load"] = run.load
    return Result(run.mode, run.load, summary, raw.series)


def default_workers(runs: int) -> int:
    """As many processes as runs, at most the cores this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(runs, cores))


def run_all(runs: Sequence[Run], workers: int | None = None) -> list[Result]:
    """Every run, in the order given; in ``workers`` processes (1: in this one)."""
    workers = default_workers(len(runs)) if workers is None else max(1, workers)
    if workers == 1 or len(runs) <= 1:
        return [_one(r) for r in runs]
    # The longest replays first, so that the pool does not end on a long one.
    order = sorted(range(len(runs)), key=lambda i: (runs[i].mode != "slurmpolicy",
                                                     -runs[i].load))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(_one, [runs[i] for i in order]), strict=True))
    return [done[i] for i in range(len(runs))]
