"""The live ``top`` app driven headless (textual's Pilot) on fixed frames.

The feed here hands out fixed Frames: the app's key handling, windowing and
redraw policy are the unit under test; reading Slurm is tested end to end in
tests/integration/test_top_tmux.py.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from inspector_scenario import big_frame, small_frame
from rich.console import Console
from textual.pilot import Pilot

from slurmpolicy.errors import SlurmUnavailable
from slurmpolicy.model import Snapshot
from slurmpolicy.policy.explanation import Explanation
from slurmpolicy.tui.app import JobList, TopApp
from slurmpolicy.tui.feed import slurm_view
from slurmpolicy.tui.frame import Frame


class FixedFeed:
    """Hands out the frames it was given, the last one forever."""

    def __init__(self, *frames: Frame) -> None:
        self.frames = list(frames)
        self.reads = 0

    def read(self) -> Frame:
        self.reads += 1
        frame = self.frames[0] if len(self.frames) == 1 else self.frames.pop(0)
        # A new read is a new object even when nothing changed.
        return replace(frame, snapshot=replace(frame.snapshot))

    def explain(self, frame: Frame, job_id: int) -> Explanation:
        job = frame.snapshot.job(job_id)
        assert job is not None
        return slurm_view(frame, job)


def drive(app: TopApp, size: tuple[int, int],
          script: Callable[[Pilot[None], TopApp], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.frame is not None)
            await pilot.pause()
            await script(pilot, app)

    asyncio.run(main())


async def wait_for(pilot: Pilot[None], cond: Callable[[], bool], timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


def text_of(renderable: Any, width: int = 100) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_keys_move_select_filter_sort_quit() -> None:
    app = TopApp(FixedFeed(small_frame()), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        queue = app.query_one("#queue", JobList)
        assert queue.rows_drawn == 3 and queue.selected == 0
        await pilot.press("down")
        assert queue.selected == 1 and queue.selected_id == 10
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.why_renderable is not None)
        assert app.why_job == 10
        why = text_of(app.why_renderable)
        assert "Job 10 (PENDING)" in why and "Dependency" in why
        await pilot.press("escape")
        assert app.why_job is None
        await pilot.press("u", *"carol", "enter")
        assert app.filters.user == "carol"
        await pilot.pause()
        assert [j.job_id for j in queue.jobs()] == [11]
        assert queue.rows_drawn == 1
        await pilot.press("c", "s")
        assert app.filters.user == "" and app.sort == "wait"
        await pilot.press("2")
        running = app.query_one("#running", JobList)
        assert app.pane == "running" and running.display and not queue.display
        await pilot.press("end")
        assert running.current() is not None and running.current().job_id == 12  # type: ignore[union-attr]
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)

    drive(app, (80, 24), script)


def test_ten_thousand_jobs_draw_one_screenful() -> None:
    app = TopApp(FixedFeed(big_frame(10_000)), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        queue = app.query_one("#queue", JobList)
        await pilot.pause()
        # 24 rows: header, key line, table title and column header leave 20.
        assert queue.rows_drawn == 20
        await pilot.press("pagedown", "pagedown")
        await pilot.pause()
        assert queue.selected == 38 and queue.rows_drawn == 20
        assert queue.first_row <= 38 < queue.first_row + 20
        await pilot.press("end")
        await pilot.pause()
        assert queue.selected == 9999 and queue.first_row == 10_000 - 20
        # Within the window a move repaints the two rows whose cursor mark changed.
        await pilot.press("up")
        await pilot.pause()
        assert queue.lines_changed == 2

    drive(app, (80, 24), script)


def test_idle_reads_draw_nothing() -> None:
    feed = FixedFeed(small_frame())
    app = TopApp(feed, interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        queue = app.query_one("#queue", JobList)
        await pilot.pause()
        before = queue.renders
        for _ in range(3):
            reads = app.reads
            app.poll()
            await wait_for(pilot, lambda reads=reads: app.reads > reads)  # type: ignore[misc]
        await pilot.pause()
        assert app.quiet_reads == 3
        assert queue.renders == before

    drive(app, (80, 24), script)


def test_cursor_follows_its_job_when_the_queue_reorders() -> None:
    first = small_frame()
    # Job 9 drops to the bottom in the second read.
    jobs = tuple(replace(j, priority=-1) if j.job_id == 9 else j for j in first.snapshot.jobs)
    second = replace(first, snapshot=Snapshot(
        taken_at=first.snapshot.taken_at + 5, slurm_version="22.05.8",
        cluster_name="devcluster", jobs=jobs, nodes=first.snapshot.nodes))
    app = TopApp(FixedFeed(first, second), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        queue = app.query_one("#queue", JobList)
        assert queue.selected_id == 9 and queue.selected == 0
        reads = app.reads
        app.poll()
        await wait_for(pilot, lambda: app.reads > reads)
        assert queue.selected_id == 9 and queue.selected == 2

    drive(app, (80, 24), script)


def test_why_shares_a_tall_screen_with_the_list() -> None:
    app = TopApp(FixedFeed(small_frame()), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.why_renderable is not None)
        assert app.query_one("#queue", JobList).display
        assert app.query_one("#why").display
        assert "Job 9 (PENDING)" in text_of(app.why_renderable)
        # The why pane follows the cursor.
        await pilot.press("down")
        await wait_for(pilot, lambda: "Job 10 (PENDING)" in text_of(app.why_renderable))
        assert app.why_job == 10

    drive(app, (120, 50), script)


class FailingFeed(FixedFeed):
    """Fails its second read the way an unreachable slurmctld does."""

    def read(self) -> Frame:
        if self.reads >= 1:
            self.reads += 1
            raise SlurmUnavailable("slurmctld does not answer (timeout after 30s)")
        return super().read()


def test_a_failed_read_keeps_the_last_screen_and_says_why() -> None:
    app = TopApp(FailingFeed(small_frame()), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        frame = app.frame
        app.poll()
        await wait_for(pilot, lambda: "read failed" in app.status)
        assert "slurmctld does not answer" in app.status
        assert app.frame is frame
        assert app.query_one("#status").display
        assert app.query_one("#queue", JobList).rows_drawn == 3

    drive(app, (80, 24), script)


def test_escape_cancels_a_filter_prompt() -> None:
    app = TopApp(FixedFeed(small_frame()), interval=60)

    async def script(pilot: Pilot[None], app: TopApp) -> None:
        box = app.query_one("#filter")
        await pilot.press("a")
        assert box.display and app.filter_field == "account"
        await pilot.press(*"nlp", "escape")
        await pilot.pause()
        assert not box.display and app.filters.account == ""
        assert app.query_one("#queue", JobList).has_focus
        await pilot.press("a", *"nlp", "enter")
        await pilot.pause()
        assert [j.job_id for j in app.query_one("#queue", JobList).jobs()] == [9]

    drive(app, (80, 24), script)
