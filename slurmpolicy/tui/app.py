"""``slurmpolicy top``: the live inspector, a textual application drawing the
rich views of :mod:`slurmpolicy.tui.views`.

textual supplies keys, focus, resize and an input line; it composes rich
renderables and writes only the regions of the screen that were refreshed.
We refresh a region only when its data changed (a new read that differs from
the last, or a key), and otherwise once a minute so that ages move on: over a
slow ssh link an idle ``top`` writes almost nothing. Reads run in a worker
thread so that keys stay responsive while squeue answers.

Lists draw only the rows that fit (see ``views``), so a 10,000-job queue
costs one sort per read and a screenful of formatting per redraw.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from slurmpolicy.errors import SlurmPolicyError
from slurmpolicy.inert import inert
from slurmpolicy.model import Job
from slurmpolicy.policy.explanation import Explanation
from slurmpolicy.tui import views
from slurmpolicy.tui.frame import (
    RUNNING_SORT_KEYS,
    SORT_KEYS,
    Filters,
    Frame,
    order_queue,
    order_running,
    window,
)

#: Views the number keys select.
PANES = ("queue", "running", "fabric", "activity")
#: Redraw at least this often (seconds) even without new data, so that ages advance.
AGE_REDRAW = 60.0
#: Rows at which the fabric/activity overview is shown under the job list.
TALL = 40
#: The key line at the bottom (kept under 80 columns).
KEYS_HELP = "q quit  ↑↓ move  ⏎ why  esc back  1-4 view  u/a/p filter  c clear  s sort"


class JobList(Widget, can_focus=True):
    """A windowed list of pending or running jobs with a cursor.

    It keeps the screen lines it last drew and, after a key or a new read,
    asks textual to repaint only the lines that changed: moving the cursor
    rewrites two lines, not the list.
    """

    DEFAULT_CSS = """
    JobList { height: 1fr; }
    """

    def __init__(self, kind: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind
        self.selected = 0
        self.first_row = 0
        #: The selected job id, kept across reads so that the cursor follows its job.
        self.selected_id: int | None = None
        #: Rows drawn by the last render, renders so far, and lines repainted by the
        #: last update (tests read them).
        self.rows_drawn = 0
        self.renders = 0
        self.lines_changed = 0
        self._lines: list[Strip] = []
        self._lines_size: tuple[int, int] = (0, 0)

    @property
    def inspector(self) -> TopApp:
        app = self.app
        assert isinstance(app, TopApp)
        return app

    def jobs(self) -> list[Job]:
        app = self.inspector
        if app.frame is None:
            return []
        if self.kind == "queue":
            return order_queue(app.frame, app.filters, app.sort, app.reverse)
        return order_running(app.frame, app.filters, app.running_sort, app.running_reverse)

    def visible_height(self) -> int:
        # Title line and column header line.
        return max(1, self.size.height - 2)

    def follow(self) -> None:
        """After a new read or reorder, put the cursor back on its job when it is still there."""
        jobs = self.jobs()
        if self.selected_id is not None:
            for i, job in enumerate(jobs):
                if job.job_id == self.selected_id:
                    self.selected = i
                    break
        self.selected = min(self.selected, max(0, len(jobs) - 1))
        self.selected_id = jobs[self.selected].job_id if jobs else None

    def move(self, delta: int) -> None:
        jobs = self.jobs()
        if not jobs:
            return
        self.selected = min(max(0, self.selected + delta), len(jobs) - 1)
        self.selected_id = jobs[self.selected].job_id
        self.update_lines()
        app = self.inspector
        # With the why pane beside the list, it follows the cursor.
        if app.why_job is not None and app.why_job != self.selected_id:
            app.show_why(self.selected_id)

    def current(self) -> Job | None:
        jobs = self.jobs()
        return jobs[self.selected] if 0 <= self.selected < len(jobs) else None

    def build(self) -> RenderableType:
        """The table for the current window (only its rows are formatted)."""
        app = self.inspector
        if app.frame is None:
            return Text(inert(app.status or "reading Slurm ..."))
        jobs = self.jobs()
        height = self.visible_height()
        self.first_row = window(len(jobs), height, self.selected, self.first_row)
        width = max(20, self.size.width)
        if self.kind == "queue":
            table = views.queue_view(app.frame, jobs, offset=self.first_row, height=height,
                                     selected=self.selected, width=width, filters=app.filters,
                                     sort=app.sort + (" desc" if app.reverse else ""))
        else:
            table = views.running_view(app.frame, jobs, offset=self.first_row, height=height,
                                       selected=self.selected, width=width,
                                       filters=app.filters,
                                       sort=app.running_sort + (" desc" if app.running_reverse
                                                                else ""))
        self.rows_drawn = table.row_count
        self.renders += 1
        return table

    def _draw(self) -> list[Strip]:
        width, height = self.size.width, self.size.height
        style = self.visual_style.rich_style
        console = self.app.console
        options = console.options.update(width=width, height=height)
        rendered = console.render_lines(self.build(), options, style=style, pad=True)
        lines = [Strip(line, width) for line in rendered[:height]]
        lines += [Strip.blank(width, style)] * (height - len(lines))
        self._lines_size = (width, height)
        return lines

    def update_lines(self) -> None:
        """Redraw into the line cache; repaint only the lines that differ."""
        if self.size.width <= 0 or self.size.height <= 0:
            self._lines = []
            return
        same_size = self._lines_size == (self.size.width, self.size.height)
        old = self._lines
        new = self._draw()
        self._lines = new
        if not same_size or len(old) != len(new):
            self.lines_changed = len(new)
            self.refresh()
            return
        changed = [y for y, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        self.lines_changed = len(changed)
        for y in changed:
            self.refresh(Region(0, y, self.size.width, 1))

    def render_line(self, y: int) -> Strip:
        if self._lines_size != (self.size.width, self.size.height) or not self._lines:
            self._lines = self._draw()
        if 0 <= y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)


class Panel(Widget):
    """A non-interactive view (fabric, or preemptions and decisions)."""

    DEFAULT_CSS = """
    Panel { height: 1fr; }
    """

    def __init__(self, kind: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind

    def render(self) -> RenderableType:
        app = self.app
        assert isinstance(app, TopApp)
        frame = app.frame
        if frame is None:
            return Text("")
        width = max(20, self.size.width)
        height = max(1, self.size.height)
        if self.kind == "fabric":
            return views.fabric_view(frame, width=width, height=max(1, height - 4))
        from rich.console import Group

        half = max(1, (height - 4) // 2)
        return Group(views.preemptions_view(frame, width=width, height=half),
                     views.decisions_view(frame, width=width, height=half))


class TopApp(App[None]):
    """The live view. ``feed`` is a :class:`slurmpolicy.tui.feed.Feed` (or anything
    with ``read() -> Frame`` and ``explain(frame, job_id) -> Explanation``)."""

    TITLE = "slurmpolicy top"
    CSS = """
    Screen { layout: vertical; }
    #header { height: 1; }
    #keys { height: 1; color: $text-muted; }
    #status { height: 1; color: $warning; }
    #body { height: 1fr; }
    #overview { height: 14; layout: horizontal; }
    #overview Panel { width: 1fr; }
    #why { height: 1fr; border-top: solid $accent; }
    #filter { dock: bottom; height: 3; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("pagedown,space", "page(1)", "page down", show=False),
        Binding("pageup,b", "page(-1)", "page up", show=False),
        Binding("home,g", "edge(0)", "first", show=False),
        Binding("end,G", "edge(1)", "last", show=False),
        Binding("enter", "why", "why"),
        Binding("escape", "close_why", "back", show=False),
        Binding("1", "pane('queue')", "queue", show=False),
        Binding("2", "pane('running')", "running", show=False),
        Binding("3", "pane('fabric')", "fabric", show=False),
        Binding("4", "pane('activity')", "activity", show=False),
        Binding("tab", "next_pane", "next view", show=False),
        Binding("u", "filter('user')", "filter user", show=False),
        Binding("a", "filter('account')", "filter account", show=False),
        Binding("p", "filter('partition')", "filter partition", show=False),
        Binding("c", "clear_filters", "clear filters", show=False),
        Binding("s", "sort", "sort", show=False),
        Binding("S", "reverse", "reverse sort", show=False),
        Binding("r", "reload", "reload", show=False),
    ]

    def __init__(self, feed: Any, *, interval: float = 5.0, filters: Filters | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        # No animations: nothing moves on screen unless the data did.
        self.animation_level = "none"
        self.feed = feed
        self.interval = max(0.5, interval)
        self.filters = filters or Filters()
        self.sort = SORT_KEYS[0]
        self.reverse = False
        self.running_sort = RUNNING_SORT_KEYS[0]
        self.running_reverse = False
        self.pane = "queue"
        self.frame: Frame | None = None
        self.status = ""
        self.why_job: int | None = None
        #: What the why pane shows (tests render it to text).
        self.why_renderable: RenderableType | None = None
        self.filter_field: str | None = None
        self._clock = clock
        self._drawn_at = 0.0
        #: Reads that changed nothing and so drew nothing (tests and docs read it).
        self.quiet_reads = 0
        self.reads = 0

    # --- layout -----------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(Text("slurmpolicy top  reading Slurm ..."), id="header")
        with Widget(id="body"):
            yield JobList("queue", id="queue")
            yield JobList("running", id="running")
            yield Panel("fabric", id="fabric")
            yield Panel("activity", id="activity")
        with Widget(id="overview"):
            yield Panel("fabric", id="ov-fabric")
            yield Panel("activity", id="ov-activity")
        with VerticalScroll(id="why"):
            yield Static("", id="why-text")
        yield Static("", id="status")
        yield Static(Text(KEYS_HELP, no_wrap=True, overflow="ellipsis"), id="keys")
        yield Input(id="filter")

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self._layout()
        self.set_interval(self.interval, self.poll)
        self.poll()

    def on_resize(self) -> None:
        self._layout()

    def _layout(self) -> None:
        """Show the pane asked for; add the overview on tall screens and the why pane."""
        for name in PANES:
            self.query_one(f"#{name}").display = name == self.pane
        why_open = self.why_job is not None
        tall = self.size.height >= TALL
        self.query_one("#why").display = why_open
        # On a short screen the why pane replaces the list; on a tall one it shares.
        self.query_one("#body").display = not why_open or tall
        self.query_one("#overview").display = tall and not why_open \
            and self.pane in ("queue", "running")
        self.query_one("#status").display = bool(self.status)
        if self.pane in ("queue", "running") and not self.query_one("#filter").display:
            self.query_one(f"#{self.pane}", JobList).focus()

    def current_list(self) -> JobList | None:
        if self.pane in ("queue", "running"):
            return self.query_one(f"#{self.pane}", JobList)
        return None

    # --- data -------------------------------------------------------------------
    def poll(self) -> None:
        self.read_frame()

    @work(thread=True, exclusive=True, group="read")
    def read_frame(self) -> None:
        try:
            frame = self.feed.read()
        except SlurmPolicyError as exc:
            self.call_from_thread(self.set_status, f"read failed: {exc}")
            return
        except Exception as exc:  # keep showing the last good read; say what broke
            self.call_from_thread(self.set_status, f"read failed: {exc!r}")
            return
        self.call_from_thread(self.apply_frame, frame)

    def set_status(self, text: str) -> None:
        self.status = text
        status = self.query_one("#status", Static)
        status.update(Text(inert(text), no_wrap=True, overflow="ellipsis"))
        status.display = bool(text)
        if self.frame is None:
            self.refresh_lists()

    def apply_frame(self, frame: Frame) -> None:
        """Take a new read; redraw only when it differs (or ages are a minute stale)."""
        self.reads += 1
        old = self.frame
        if self.status:
            self.set_status("")
        if (old is not None and _same(old, frame)
                and self._clock() - self._drawn_at < AGE_REDRAW):
            self.quiet_reads += 1
            return
        self.frame = frame
        for name in ("queue", "running"):
            self.query_one(f"#{name}", JobList).follow()
        self.redraw()
        if self.why_job is not None:
            self.show_why(self.why_job, quiet=True)

    def redraw(self) -> None:
        self._drawn_at = self._clock()
        if self.frame is not None:
            self.query_one("#header", Static).update(
                views.header_view(self.frame, filters=self.filters, width=self.size.width))
        self.refresh_lists()
        for panel in self.query(Panel):
            panel.refresh()

    def refresh_lists(self) -> None:
        for jl in self.query(JobList):
            jl.update_lines()

    # --- why ----------------------------------------------------------------------
    def show_why(self, job_id: int, *, quiet: bool = False) -> None:
        self.why_job = job_id
        if not quiet:
            self.query_one("#why-text", Static).update(Text(f"explaining job {job_id} ..."))
        self._layout()
        self.explain_job(job_id)

    @work(thread=True, exclusive=True, group="why")
    def explain_job(self, job_id: int) -> None:
        frame = self.frame
        if frame is None:
            return
        try:
            exp = self.feed.explain(frame, job_id)
        except SlurmPolicyError as exc:
            self.call_from_thread(self._why_text, job_id, Text(inert(exc), style="red"))
            return
        except Exception as exc:  # a policy bug must not take the whole view down
            self.call_from_thread(self._why_text, job_id,
                                  Text(inert(f"cannot explain job {job_id}: {exc!r}"), style="red"))
            return
        self.call_from_thread(self._why_done, job_id, exp, frame)

    def _why_done(self, job_id: int, exp: Explanation, frame: Frame) -> None:
        self._why_text(job_id, views.why_view(exp, frame.now, policy_note=frame.policy_note))

    def _why_text(self, job_id: int, renderable: RenderableType) -> None:
        if self.why_job == job_id:
            self.why_renderable = renderable
            self.query_one("#why-text", Static).update(renderable)

    # --- actions --------------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        if self.why_job is not None and self.size.height < TALL:
            self.query_one("#why", VerticalScroll).scroll_relative(y=delta, animate=False)
            return
        jl = self.current_list()
        if jl is not None:
            jl.move(delta)

    def action_page(self, direction: int) -> None:
        if self.why_job is not None and self.size.height < TALL:
            why = self.query_one("#why", VerticalScroll)
            why.scroll_relative(y=direction * max(1, why.size.height - 1), animate=False)
            return
        jl = self.current_list()
        if jl is not None:
            jl.move(direction * max(1, jl.visible_height() - 1))

    def action_edge(self, end: int) -> None:
        if self.why_job is not None and self.size.height < TALL:
            why = self.query_one("#why", VerticalScroll)
            if end:
                why.scroll_end(animate=False)
            else:
                why.scroll_home(animate=False)
            return
        jl = self.current_list()
        if jl is not None:
            jl.move(10**9 if end else -10**9)

    def action_why(self) -> None:
        jl = self.current_list()
        job = jl.current() if jl is not None else None
        if job is not None:
            self.show_why(job.job_id)

    def action_close_why(self) -> None:
        if self.why_job is not None:
            self.why_job = None
            self._layout()
            self.redraw()

    def action_pane(self, name: str) -> None:
        self.pane = name
        self.why_job = None
        self._layout()
        self.redraw()

    def action_next_pane(self) -> None:
        self.action_pane(PANES[(PANES.index(self.pane) + 1) % len(PANES)])

    def action_filter(self, field: str) -> None:
        self.filter_field = field
        box = self.query_one("#filter", Input)
        box.placeholder = f"{field} to show (empty: all), enter to apply, esc to cancel"
        box.border_title = f"filter by {field}"
        box.value = getattr(self.filters, field)
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.filter_field is not None:
            self.filters = self.filters.with_(**{self.filter_field: event.value.strip()})
        self._close_filter()
        self._reorder()

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if box.display and event.key == "escape":
            event.stop()
            self._close_filter()

    def _close_filter(self) -> None:
        self.filter_field = None
        box = self.query_one("#filter", Input)
        box.display = False
        self._layout()

    def action_clear_filters(self) -> None:
        self.filters = Filters()
        self._reorder()

    def action_sort(self) -> None:
        if self.pane == "running":
            keys = RUNNING_SORT_KEYS
            self.running_sort = keys[(keys.index(self.running_sort) + 1) % len(keys)]
        else:
            self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]
        self._reorder()

    def action_reverse(self) -> None:
        if self.pane == "running":
            self.running_reverse = not self.running_reverse
        else:
            self.reverse = not self.reverse
        self._reorder()

    def action_reload(self) -> None:
        self._drawn_at = 0.0
        self.poll()

    def _reorder(self) -> None:
        for jl in self.query(JobList):
            jl.follow()
        self.redraw()


def _same(a: Frame, b: Frame) -> bool:
    """True when two reads would draw the same (ignoring the read time itself)."""
    return (a.snapshot.jobs == b.snapshot.jobs and a.snapshot.nodes == b.snapshot.nodes
            and a.intents == b.intents and a.decisions == b.decisions
            and a.policy_note == b.policy_note and a.degraded_links == b.degraded_links)


def run_top(feed: Any = None, *, settings: Any = None, client: Any = None,
            from_dir: Any = None, journal: Any = None, interval: float = 5.0,
            user: str = "", account: str = "", partition: str = "") -> None:
    """Run ``top`` in this terminal until the user quits.

    Pass a ready ``feed``, or the parts of one: ``settings``, a ``client``
    (any SlurmClient), ``from_dir`` (saved outputs) and ``journal`` (the
    daemon's state directory or journal file).
    """
    if feed is None:
        from slurmpolicy.tui.feed import Feed

        feed = Feed(settings, client=client, from_dir=from_dir, journal=journal)
    TopApp(feed, interval=interval,
           filters=Filters(user=user, account=account, partition=partition)).run()
