"""Figures for the inspector on a 10,000-job queue: the per-read cost (order,
positions) and the per-redraw cost (one 80x24 screenful). Prints; never asserts
on time. Run: .venv/bin/python -m pytest tests/bench/test_inspector_bench.py -s"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

# Run as a script (python tests/bench/...): the repository root makes `tests` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from inspector_scenario import big_frame

from slurmpolicy.tui import views
from slurmpolicy.tui.frame import Filters, order_queue
from tests.paths import FIXTURES

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


def test_bench_bytes_written_by_top_in_a_terminal(tmp_path: Path) -> None:
    """What ``top`` writes to its terminal: the first screen, five idle reads
    (interval 1 s; saved outputs, so nothing changes), one cursor move. The idle
    wait is the measurement itself, hence the sleep."""
    import shutil
    import subprocess

    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed for this figure"
    fixtures = FIXTURES / "slurm-22.05"
    out = tmp_path / "pane.out"
    out.touch()
    sock = f"spolicy-bench-{id(out)}"

    def t(*args: str) -> str:
        return subprocess.run([tmux, "-L", sock, *args], capture_output=True, text=True,
                              check=True, timeout=10).stdout

    t("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", "env", "TERM=xterm-256color",
      sys.executable, "-m", "slurmpolicy.cli", "top", "--interval", "1", "--from-dir",
      str(fixtures), "--journal", str(tmp_path / "none"))
    try:
        t("pipe-pane", "-o", "-t", "top", f"cat >> {out}")
        deadline = time.monotonic() + 30
        while "Queue: 3 pending" not in t("capture-pane", "-p", "-t", "top"):
            assert time.monotonic() < deadline, "top did not draw"
            time.sleep(0.1)
        time.sleep(1.0)
        first = out.stat().st_size
        time.sleep(5.0)
        idle = out.stat().st_size - first
        t("send-keys", "-t", "top", "j")
        deadline = time.monotonic() + 10
        while out.stat().st_size == first + idle and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        move = out.stat().st_size - first - idle
    finally:
        subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True, check=False)
    print(f"\ntop at 80x24 in tmux: first screen {first} bytes (after 1 s), 5 idle reads "
          f"{idle} bytes, one cursor move {move} bytes")
