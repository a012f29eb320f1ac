"""Benchmark: the daemon's lifecycle observer on a big queue.

Run: ``python tests/bench/bench_lifecycle.py`` (or ``pytest tests/bench -m bench -s``).
Prints figures; never asserts on time. 20,000 jobs (16,000 pending, 4,000
running): the first cycle journals every job and opens its timeline; a quiet
cycle (nothing changed) should cost little; a busy one (1,000 jobs start,
1,000 end) writes only what changed. No Slurm call is made: no job here
failed for a reason that is not its own.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import pytest

from slurmpolicy.daemon.executor import Executor
from slurmpolicy.daemon.lifecycle import Lifecycle
from slurmpolicy.model import Job, JobState, Node, Snapshot
from slurmpolicy.settings import Settings
from slurmpolicy.store import Journal

PENDING, RUNNING = 16_000, 4_000


class NullClient:
    name = "null"


def _snapshot(now: float, jobs: list[Job]) -> Snapshot:
    nodes = tuple(Node(f"n{i:04d}", "MIXED", gpus_by_type={"h100": 8}) for i in range(500))
    return Snapshot(taken_at=now, slurm_version="x", cluster_name="c", jobs=tuple(jobs),
                    nodes=nodes)


def run() -> dict[str, float]:
    t0 = 1_800_000_000.0
    jobs = [Job(job_id=i, name="j", user=f"u{i % 50}", account=f"a{i % 10}", partition="p",
                state=JobState.PENDING, reason="Priority", submit_time=t0 - 600, gpus=8)
            for i in range(PENDING)]
    jobs += [Job(job_id=PENDING + i, name="j", user=f"u{i % 50}", account="a", partition="p",
                 state=JobState.RUNNING, start_time=t0 - 300, submit_time=t0 - 900, gpus=8,
                 nodes=(f"n{i % 500:04d}",)) for i in range(RUNNING)]
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp))
        life = Lifecycle(Executor(NullClient(), journal, Settings()), Settings())  # type: ignore[arg-type]
        start = time.perf_counter()
        life.observe(_snapshot(t0, jobs), t0)
        first = time.perf_counter() - start
        start = time.perf_counter()
        life.observe(_snapshot(t0 + 30, jobs), t0 + 30)
        quiet = time.perf_counter() - start
        busy = list(jobs)
        for i in range(1000):  # 1,000 start, 1,000 complete
            busy[i] = dataclasses.replace(busy[i], state=JobState.RUNNING, start_time=t0 + 40,
                                          nodes=("n0001",))
            k = PENDING + i
            busy[k] = dataclasses.replace(busy[k], state=JobState.COMPLETED, end_time=t0 + 50)
        start = time.perf_counter()
        life.observe(_snapshot(t0 + 60, busy), t0 + 60)
        changed = time.perf_counter() - start
        size = journal.path.stat().st_size / 1e6
    return {"first_s": first, "quiet_s": quiet, "busy_s": changed, "journal_mb": size}


@pytest.mark.bench
def test_lifecycle_bench() -> None:
    f = run()
    print(f"\nlifecycle observer, {PENDING + RUNNING} jobs: first cycle {f['first_s']:.2f}s, "
          f"quiet cycle {f['quiet_s']:.2f}s, busy cycle (2,000 changes) {f['busy_s']:.2f}s, "
          f"journal {f['journal_mb']:.1f} MB")


if __name__ == "__main__":
    test_lifecycle_bench()
