"""Render tests of the inspector's views on fixed snapshots.

Each view is rendered with a plain rich Console (no colour) at 80 and 120
columns and compared with a text file under tests/unit/snapshots/. After an
intended change of a view, regenerate the files and review the diff:

    SLURMPOLICY_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/unit/test_inspector_views.py
    git diff tests/unit/snapshots/
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from inspector_scenario import (
    NOW,
    big_frame,
    pending_explanation,
    running_explanation,
    small_frame,
)
from rich.console import Console, RenderableType

from slurmpolicy.tui import views
from slurmpolicy.tui.frame import Filters, Frame, order_queue, order_running, window

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("SLURMPOLICY_UPDATE_SNAPSHOTS") == "1"


def render(renderable: RenderableType, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False,
                      file=io.StringIO())
    console.print(renderable)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def check(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"{path} is missing; run with SLURMPOLICY_UPDATE_SNAPSHOTS=1 to create it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from {path}"


VIEWS: dict[str, Callable[[Frame, int], RenderableType]] = {
    "header": lambda f, w: views.header_view(f, width=w),
    "queue": lambda f, w: views.queue_view(f, order_queue(f, Filters()), selected=0, width=w),
    "queue_user_bob": lambda f, w: views.queue_view(
        f, order_queue(f, Filters(user="bob")), width=w, filters=Filters(user="bob")),
    "running": lambda f, w: views.running_view(f, order_running(f, Filters()), selected=1,
                                               width=w),
    "fabric": lambda f, w: views.fabric_view(f, width=w),
    "preemptions": lambda f, w: views.preemptions_view(f, width=w),
    "decisions": lambda f, w: views.decisions_view(f, width=w),
    "why_pending": lambda f, w: views.why_view(pending_explanation(), NOW, width=w),
    "why_running": lambda f, w: views.why_view(
        running_explanation(), NOW, width=w,
        policy_note="policy details unavailable: /var/lib/slurmpolicy: no journal here"),
}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_matches_snapshot(name: str, width: int) -> None:
    text = render(VIEWS[name](small_frame(), width), width)
    assert all(len(line) <= width for line in text.splitlines())
    check(f"{name}_{width}", text)


def test_queue_shows_job_reason_and_position() -> None:
    text = render(VIEWS["queue"](small_frame(), 120), 120)
    line = next(ln for ln in text.splitlines() if ln.startswith("> 9 "))
    assert "bob" in line and "Resources" in line and "1/3" in line and "8x6" in line


def test_running_shows_checkpoint_age_and_victim_deadline() -> None:
    text = render(VIEWS["running"](small_frame(), 120), 120)
    job1 = next(ln for ln in text.splitlines() if ln.split()[:1] == ["1"])
    assert "1m ago" in job1 and "signalled 1m left" in job1
    job12 = next(ln for ln in text.splitlines() if ln.split()[:1] == ["12"])
    assert "protected" in job12 and "never" in job12


def test_fabric_marks_drained_node_and_degraded_link() -> None:
    text = render(views.fabric_view(small_frame(), width=80), 80)
    leaf2 = next(ln for ln in text.splitlines() if ln.startswith("leaf2"))
    assert "16/32" in leaf2 and "## .x" in leaf2 and "nvl3,nvl4" in leaf2
    assert "dgx08 (ib link flapping)" in text
    assert "degraded links: dgx08 - leaf2" in text


def test_why_renders_every_field() -> None:
    exp = pending_explanation()
    text = render(views.why_view(exp, NOW, width=200), 200)
    for needle in (exp.headline, exp.request, "1st in research", "10642", "2 production",
                   exp.slurm_reason_text, exp.blocking_text, exp.free_text, "in 1h30m",
                   exp.estimate_basis, "--nodes=4 (32 GPUs)", "in 30m", "--topology=spine",
                   "no estimate: needs 6 free nodes", exp.notes[0]):
        assert needle in text, needle
    run = running_explanation()
    text = render(views.why_view(run, NOW, width=200, policy_note="policy details unavailable: x"),
                  200)
    for needle in (run.placement_text, "last acknowledged 1m ago", "yes - victim",
                   "policy details unavailable: x"):
        assert needle in text, needle


def test_narrow_queue_drops_columns_not_reason() -> None:
    text = render(VIEWS["queue"](small_frame(), 80), 80)
    header = next(ln for ln in text.splitlines() if "JOBID" in ln)
    assert "REASON" in header and "ACCOUNT" not in header


# --- 10,000 jobs: only what fits is drawn ------------------------------------------
def test_ten_thousand_jobs_draw_only_visible_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    frame = big_frame(10_000)
    jobs = order_queue(frame, Filters())
    assert len(jobs) == 10_000
    formatted: list[int] = []
    real = views.gpus_by_nodes

    def counting(job):  # type: ignore[no-untyped-def]
        formatted.append(job.job_id)
        return real(job)

    monkeypatch.setattr(views, "gpus_by_nodes", counting)
    height = 24 - 4  # 80x24 less header, title, column header and key line
    offset = window(len(jobs), height, selected=5000, offset=0)
    table = views.queue_view(frame, jobs, offset=offset, height=height, selected=5000, width=80)
    assert table.row_count == height
    assert len(formatted) == height
    text = render(table, 80)
    drawn = [ln for ln in text.splitlines()[2:] if ln.strip()]
    assert len(drawn) == height
    assert drawn[-1].startswith(f"> {jobs[5000].display_id}")
    assert f"{offset + 1}-{offset + height} of 10000" in text


def test_window_keeps_selection_on_screen() -> None:
    assert window(100, 10, 0, 0) == 0
    assert window(100, 10, 15, 0) == 6
    assert window(100, 10, 12, 6) == 6
    assert window(100, 10, 3, 6) == 3
    assert window(100, 10, 99, 0) == 90
    assert window(5, 10, 4, 3) == 0


def test_filters_and_sorts() -> None:
    frame = small_frame()
    assert [j.job_id for j in order_queue(frame, Filters())] == [9, 10, 11]
    assert [j.job_id for j in order_queue(frame, Filters(user="alice"))] == [10]
    assert [j.job_id for j in order_queue(frame, Filters(account="speech"))] == [11]
    assert order_queue(frame, Filters(partition="prod")) == []
    assert [j.job_id for j in order_queue(frame, Filters(), "job", reverse=True)] == [11, 10, 9]
    assert [j.job_id for j in order_running(frame, Filters(partition="prod"))] == [12]
    with pytest.raises(ValueError, match="allowed: priority, wait"):
        order_queue(frame, Filters(), "colour")


def test_data_is_never_read_as_markup() -> None:
    frame = small_frame()
    jobs = tuple(replace(j, reason="[red]Boom[/red]", user="[b]eve")
                 if j.job_id == 9 else j for j in frame.snapshot.jobs)
    # Snapshot._index is an init field: start it afresh with the new jobs.
    frame = replace(frame, snapshot=replace(frame.snapshot, jobs=jobs))
    text = render(views.queue_view(frame, order_queue(frame, Filters()), width=120), 120)
    assert "[red]Boom[/red]" in text and "[b]eve" in text
