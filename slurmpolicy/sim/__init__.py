"""Trace-driven simulator around the same ``plan()`` the daemon runs.

Public API::

    from slurmpolicy.sim import replay, Mode, SlurmModel, Hosts, TraceRules
    from slurmpolicy.sim.trace import read_philly, read_sacct, generate, load_trace
    raw, summary = replay(trace, hosts, "slurm-grace")

Read it top down: ``trace`` (readers, generator, completion rules),
``cluster`` (hosts and Slurm-like placement), ``engine`` (the simulated Slurm
and the baselines; it knows the daemon only as the ``Daemon`` protocol),
``driver`` (the slurmpolicy mode: the daemon's cycle in simulated time, built
on the engine), ``metrics`` (figures, table, JSON, plots) and ``sweep``
(several replays in parallel processes).
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from slurmpolicy.settings import Settings
from slurmpolicy.sim.cluster import Hosts
from slurmpolicy.sim.engine import Mode, RawResult, Simulator, SlurmModel
from slurmpolicy.sim.trace import TraceJob, TraceRules

__all__ = ["Hosts", "Mode", "RawResult", "SlurmModel", "TraceRules", "replay"]


def replay(
    trace: Sequence[TraceJob], hosts: Hosts, mode: Mode | str, settings: Settings | None = None,
    slurm: SlurmModel | None = None, fabric: Any = None,
    progress: Callable[[float, float], None] | None = None, plan_refresh: float = 300.0,
) -> tuple[RawResult, dict[str, Any]]:
    """Replay ``trace`` in ``mode`` on a fresh copy of ``hosts``; the raw result and its figures."""
    from slurmpolicy.sim.metrics import summarize

    fresh = Hosts(names=list(hosts.names), gpus=list(hosts.gpus), leaf=list(hosts.leaf),
                  nvlink=list(hosts.nvlink), spine=list(hosts.spine),
                  leaf_names=list(hosts.leaf_names), nvlink_names=list(hosts.nvlink_names),
                  gpu_type=hosts.gpu_type)
    started = time.perf_counter()
    cpu = time.process_time()
    daemon = None
    if Mode(mode) is Mode.SLURMPOLICY:
        from functools import partial

        from slurmpolicy.sim.driver import PolicyDriver

        daemon = partial(PolicyDriver, refresh=plan_refresh)
    sim = Simulator(trace, fresh, mode, settings=settings, slurm=slurm, fabric=fabric,
                    progress=progress, daemon=daemon)
    with _few_collections():
        raw = sim.run()
    raw.wall_seconds = time.perf_counter() - started
    raw.cpu_seconds = time.process_time() - cpu
    raw.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    applied = getattr(sim.driver, "actions_applied", None)
    if applied is not None:
        raw.actions = dict(applied)
        raw.over_budget_cycles = sim.driver.over_budget  # type: ignore[union-attr]
        raw.deferred_actions = sim.driver.deferred  # type: ignore[union-attr]
    return raw, summarize(raw)


#: Allocations between collections of the youngest generation during a replay
#: (CPython's default is 700), and the older generations' multipliers.
REPLAY_GC_THRESHOLD = (20_000, 20, 20)


@contextmanager
def _few_collections() -> Iterator[None]:
    """Run the cyclic garbage collector seldom while a replay runs.

    A replay makes millions of short-lived tuples and records, few of them in
    cycles, while it holds every job of the trace: at CPython's default
    threshold the collector ran some 3,800 times over a 15,000-job replay at
    x2 and took 4% of its CPU (2.2 of 59 s, timed with ``gc.callbacks``), at
    this threshold 7 times and 0.04 s. Reference counting frees all but the
    cycles either way; the thresholds are restored afterwards.
    """
    old = gc.get_threshold()
    gc.set_threshold(*REPLAY_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)
