"""Benchmark: build a 4,096-host fabric and time place() on a half-full cluster.

Run: ``python tests/bench/bench_fabric.py`` (or ``pytest tests/bench -s``).
Prints figures; never asserts on time. Targets on the 2-core dev machine:
build under 2 s, a 64-node place under 50 ms, memory under 1 GB.
"""

from __future__ import annotations

import gc
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

# Run as a script (python tests/bench/...): the repository root makes `tests` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from slurmpolicy.topology import Fabric, synthetic_fabric
from slurmpolicy.topology.types import Level, Placement, Shape
from tests.benchfigures import record

HOSTS, GPUS, HOSTS_PER_LEAF, LEAVES_PER_SPINE = 4096, 8, 32, 16  # 128 leaves, 8 spines
CALLS = 1000


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def run() -> dict[str, float]:
    def build_fabric() -> Fabric:
        return synthetic_fabric(HOSTS, gpus_per_host=GPUS, hosts_per_leaf=HOSTS_PER_LEAF,
                                leaves_per_spine=LEAVES_PER_SPINE)

    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    builds = []
    for _ in range(3):
        t0 = time.perf_counter()
        fab = build_fabric()
        builds.append(time.perf_counter() - t0)
    build = min(builds)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Memory of one fabric, measured apart: tracemalloc slows the build itself.
    del fab
    gc.collect()
    tracemalloc.start()
    fab = build_fabric()
    _, peak = tracemalloc.get_traced_memory()
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"fabric: {fab!r}")
    print(f"  {fab.graph.number_of_nodes()} graph nodes, {fab.graph.number_of_edges()} edges")
    print(f"build: best of 3 {build:.3f} s (all: {', '.join(f'{b:.2f}' for b in builds)});"
          f" fabric holds {current / 2**20:.0f} MiB (peak {peak / 2**20:.0f} MiB while building);"
          f" process max RSS {rss_after / 1024:.0f} MiB (+{(rss_after - rss_before) / 1024:.0f})")
    assert len(fab.domains(Level.LEAF)) == 128 and len(fab.domains(Level.SPINE)) == 8

    rnd = random.Random(42)
    # Half full: half the GPUs in use, mixing whole busy hosts and partly used ones.
    free = {}
    for h in fab.hosts:
        r = rnd.random()
        free[h] = 0 if r < 0.4 else rnd.choice([2, 4, 6]) if r < 0.6 else GPUS
    used = sum(GPUS - f for f in free.values())
    print(f"cluster: {used}/{HOSTS * GPUS} GPUs in use ({used / (HOSTS * GPUS):.0%})")

    times: list[float] = []
    by_size: dict[int, list[float]] = {}
    placed = 0
    for k in range(CALLS):
        n = 1 + k % 64
        shape = Shape(nodes=n, gpus_per_node=GPUS if k % 4 else 4)
        t = time.perf_counter()
        result = fab.place(shape, free)
        dt = time.perf_counter() - t
        times.append(dt)
        by_size.setdefault(n, []).append(dt)
        placed += isinstance(result, Placement)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[int(len(times) * 0.99) - 1]
    big = sorted(by_size[64])
    print(f"place: {CALLS} calls, 1..64 nodes, {placed} placed;"
          f" p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(times[-1])}")
    print(f"place 64 nodes: median {_ms(statistics.median(big))}, max {_ms(big[-1])}")
    strict = [fab.place(Shape(n, GPUS, level=Level.LEAF, strict=True), free) for n in (4, 16, 40)]
    print("strict leaf 4/16/40:", ["placed" if isinstance(s, Placement) else s.reason
                                   for s in strict])
    t = time.perf_counter()
    frag = fab.fragmentation(free, [Shape(16, 8, level=Level.LEAF, strict=True), Shape(1, 4)])
    print(f"fragmentation: {_ms(time.perf_counter() - t)}; {frag.summary()}; index {frag.index}")
    nvl = run_nvl72()
    return {"build_s": build, "p50_s": p50, "p99_s": p99, "rss_mib": rss_after / 1024,
            "held_mib": current / 2**20, "place64_median_s": statistics.median(big), **nvl}


def run_nvl72() -> dict[str, float]:
    """The same on NVL72-style racks: 224 racks x 18 hosts x 4 GPUs, 2 racks a leaf."""
    t0 = time.perf_counter()
    fab = synthetic_fabric(224 * 18, gpus_per_host=4, hosts_per_nvlink=18, hosts_per_leaf=36,
                           leaves_per_spine=14, gpu_type="gb200", gpu_memory_gb=186)
    build = time.perf_counter() - t0
    rnd = random.Random(7)
    free = {h: (0 if rnd.random() < 0.5 else 4) for h in fab.hosts}
    times = []
    for k in range(CALLS // 2):
        t = time.perf_counter()
        fab.place(Shape(nodes=1 + k % 64, gpus_per_node=4, level=Level.NVLINK), free)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"NVL72 fabric: {fab!r}; build {build:.3f} s; place {len(times)} calls 1..64 nodes:"
          f" p50 {_ms(statistics.median(times))}, p99 {_ms(times[int(len(times) * 0.99) - 1])}")
    return {"nvl72_build_s": build, "nvl72_p50_s": statistics.median(times)}


@pytest.mark.bench
def test_bench_fabric() -> None:
    figures = run()
    record("fabric", hosts=HOSTS, gpus=GPUS, **figures)
    assert figures["build_s"] > 0  # figures were measured; never a time limit


if __name__ == "__main__":
    run()
