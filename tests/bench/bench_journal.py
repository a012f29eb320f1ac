"""Benchmark: the journal's cost per action, and load_intents() on a busy journal.

Run: ``python tests/bench/bench_journal.py`` (or ``pytest tests/bench -s``).
Prints figures; never asserts on time. Every action that changes Slurm costs
two durable commits (intent before, outcome after, ``synchronous=FULL``) plus
its audit row; this measures that overhead with a client that does nothing,
so the figure is what the journal adds to each Slurm call.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytest

# Run as a script (python tests/bench/...): the repository root makes `tests` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from slurmpolicy.daemon.executor import Executor
from slurmpolicy.model import Job, JobState, Snapshot
from slurmpolicy.policy.actions import Plan, SetSiteFactor
from slurmpolicy.settings import Daemon, Settings
from slurmpolicy.store import Journal
from tests.benchfigures import record

ACTIONS = 500
HISTORY_CYCLES = 2000
IDENTITIES = 20_000


class NullClient:
    name = "null"

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        pass


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp))
        settings = Settings(daemon=Daemon(max_slurm_calls_per_cycle=ACTIONS))
        ex = Executor(NullClient(), journal, settings)  # type: ignore[arg-type]
        snap = Snapshot(taken_at=0.0, slurm_version="x", cluster_name="c", jobs=tuple(
            Job(job_id=i, name="j", user="u", account="a", partition="p",
                state=JobState.PENDING) for i in range(ACTIONS)))
        plan = Plan(actions=tuple(SetSiteFactor(reason="aging", job_id=i, site_factor=i)
                                  for i in range(ACTIONS)))
        start = time.perf_counter()
        ex.reconcile(snap, 0.0)
        ex.execute(plan, snap, 0.0)
        per_action = (time.perf_counter() - start) / ACTIONS
        figures = [("slurmpolicy_gpus", {"state": "idle"}, 1.0)] * 30
        start = time.perf_counter()
        for cycle in range(HISTORY_CYCLES):
            journal.record_metrics(figures, at=float(cycle))
        per_history = (time.perf_counter() - start) / HISTORY_CYCLES
        start = time.perf_counter()
        intents = journal.load_intents(now=0.0)
        load = time.perf_counter() - start
        size = journal.path.stat().st_size / 1e6
        assert len(intents.site_factors) == ACTIONS
        # Job identities (a reused id starts clean): first sight of a big queue,
        # then a steady cycle where nothing changed.
        queue = [Job(job_id=i, name="j", user="u", account="a", partition="p",
                     state=JobState.PENDING, submit_time=float(i)) for i in range(IDENTITIES)]
        start = time.perf_counter()
        journal.note_jobs("c", queue, 0.0)
        first = time.perf_counter() - start
        start = time.perf_counter()
        journal.note_jobs("c", queue, 1.0)
        steady = time.perf_counter() - start
    return {"ms_per_action": per_action * 1000, "ms_per_cycle_history": per_history * 1000,
            "ms_load_intents": load * 1000, "journal_mb": size,
            "ms_identities_first": first * 1000, "ms_identities_steady": steady * 1000}


@pytest.mark.bench
def test_journal_bench() -> None:
    figures = run()
    record("journal", actions=ACTIONS, **figures)
    print(f"\njournal: {figures['ms_per_action']:.2f} ms per Slurm action journalled "
          f"({ACTIONS} actions), {figures['ms_per_cycle_history']:.2f} ms per cycle of metrics "
          f"history (30 figures), load_intents {figures['ms_load_intents']:.1f} ms, "
          f"journal {figures['journal_mb']:.1f} MB; job identities of {IDENTITIES} jobs: "
          f"{figures['ms_identities_first']:.0f} ms first seen, "
          f"{figures['ms_identities_steady']:.1f} ms per steady cycle")


if __name__ == "__main__":
    test_journal_bench()
