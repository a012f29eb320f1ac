"""Figures for the inspector on a 10,000-job queue: the per-read cost (order,
positions) and the per-redraw cost (one 80x24 screenful). Prints; never asserts
on time. Run: .venv/bin/python -m pytest tests/bench/test_inspector_bench.py -s"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from inspector_scenario import big_frame

from slurmpolicy.tui import views
from slurmpolicy.tui.frame import Filters, order_queue

pytestmark = pytest.mark.bench


def test_bench_ten_thousand_job_queue() -> None:
    frame = big_frame(10_000)
    t0 = time.perf_counter()
    jobs = order_queue(frame, Filters())
    positions = frame.positions()
    t1 = time.perf_counter()
    console = Console(width=80, file=io.StringIO(), color_system=None)
    redraws = 50
    for i in range(redraws):
        console.print(views.queue_view(frame, jobs, offset=i * 20, height=20, selected=i * 20,
                                       width=80))
    t2 = time.perf_counter()
    filtered = order_queue(frame, Filters(user="alice"), "wait")
    t3 = time.perf_counter()
    print(f"\ninspector, 10,000 pending jobs: order + positions {1000 * (t1 - t0):.1f} ms per read;"
          f" one 80x24 queue screen {1000 * (t2 - t1) / redraws:.2f} ms per redraw;"
          f" filter by user + sort by wait {1000 * (t3 - t2):.1f} ms ({len(filtered)} jobs)")
    assert len(jobs) == 10_000 and len(positions) == 10_000
