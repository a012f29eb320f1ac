"""Benchmark: replay the Philly trace on 1,024 GPUs in all three modes.

Prints the time and peak memory of each replay and the metric table of
slurmpolicy vs slurm-grace vs slurm-requeue, then the issue's targets
(reported, never asserted). Run:

    python tests/bench/bench_simulate.py [--limit N] [--load-scale X] [--seed S] [--json FILE]
    scripts/bench tests/bench/bench_simulate.py     # the same, through pytest

Targets (issue 8): both modes under 5 minutes together and under 2 GB on the
2-core build machine; versus slurm-grace, GPU-hours lost to preemption >= 90%
lower, p95 wait of the highest class at most half, mean JCT no worse, GPU
allocation >= 70%, highest-class wait < 10% of its run time.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import pytest

# Run as a script (python tests/bench/...): the repository root makes `tests` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rich.console import Console

from slurmpolicy.settings import Settings
from slurmpolicy.sim import TraceRules, metrics, replay
from slurmpolicy.sim.cluster import Hosts
from slurmpolicy.sim.trace import read_philly
from tests.paths import PHILLY_TRACE as TRACE

pytestmark = pytest.mark.bench



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--load-scale", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hosts", type=int, default=128)
    ap.add_argument("--modes", default="slurmpolicy,slurm-grace")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument("--plan-refresh", type=float, default=300.0)
    args = ap.parse_args(argv)
    console = Console(width=max(Console().width, 150))
    path = Path(args.trace)
    if not path.exists():
        console.print(f"trace not found: {path} (pass --trace)")
        return 2
    try:
        from slurmpolicy.topology import synthetic_fabric
        fabric = synthetic_fabric(hosts=args.hosts, gpus_per_host=8, hosts_per_leaf=16,
                                  leaves_per_spine=4)
        hosts = Hosts.from_fabric(fabric)
    except ImportError:
        fabric, hosts = None, Hosts.layout(args.hosts, 8, 16)
    settings = Settings()
    t0 = time.perf_counter()
    rules = TraceRules(seed=args.seed, load_scale=args.load_scale)
    trace = read_philly(path, rules, args.limit)
    console.print(f"read {len(trace):,} jobs in {time.perf_counter() - t0:.1f}s; "
                  f"{hosts.total_gpus:,} GPUs on {len(hosts.names)} hosts; "
                  f"load x{args.load_scale:g}")
    summaries = []
    total = 0.0
    cpu = 0.0
    for mode in args.modes.split(","):
        _, s = replay(trace, hosts, mode, settings=settings, fabric=fabric,
                      plan_refresh=args.plan_refresh)
        total += s["wall_seconds"]
        cpu += s["cpu_seconds"]
        per_day = s["cpu_seconds"] / max(s["makespan_hours"] / 24.0, 1e-9)
        console.print(f"{mode:>14}: {s['wall_seconds']:7.1f} s wall, "
                      f"{s['cpu_seconds']:7.1f} s CPU ({per_day:.2f} CPU s per simulated day), "
                      f"peak RSS "
                      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB, "
                      f"{s['events']:,} events, {s['plan_calls']:,} plan() calls")
        summaries.append(s)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"total replay time {total:.1f} s wall, {cpu:.1f} s CPU (target < 300 s);"
                  f" peak RSS {rss:,.0f} MB "
                  "(target < 2048 MB)")
    console.print(metrics.render_table(summaries, f"{len(trace):,} Philly jobs, "
                                       f"load x{args.load_scale:g}, seed {args.seed}"))
    by_mode = {s["mode"]: s for s in summaries}
    if "slurmpolicy" in by_mode and "slurm-grace" in by_mode:
        console.print(metrics.render_targets(by_mode["slurmpolicy"], by_mode["slurm-grace"]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summaries, indent=2, sort_keys=True))
    return 0


def test_bench_simulate() -> None:  # pragma: no cover - run with -s to see the figures
    main([])


if __name__ == "__main__":
    sys.exit(main())
