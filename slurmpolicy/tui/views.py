"""rich renderables of the inspector: the queue, running jobs, the fabric,
in-flight preemptions, the latest decisions, a header line, and a job's
``why`` (an :class:`~slurmpolicy.policy.explanation.Explanation`).

Every list view takes the rows it may show (``offset`` and ``height``) and
formats only those, so that a 10,000-job queue costs the same to draw as a
20-job one. Columns that do not fit the width are dropped in a fixed order
(least useful first) rather than squeezed, so that 80 columns stay readable.
Times are shown relative ("in 2h05m", "3m ago") and, where absolute, in UTC.

Every string from Slurm or a user reaches the screen through :func:`plain`
(or :func:`slurmpolicy.inert.inert`): control characters are shown escaped,
so an escape sequence or a newline in a job name stays text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from slurmpolicy.durations import humanize
from slurmpolicy.hostlist import compress
from slurmpolicy.inert import inert, inert_fields
from slurmpolicy.model import Job
from slurmpolicy.policy.explanation import Explanation
from slurmpolicy.tui.frame import HIDDEN_JOB, Filters, Frame, LeafSummary, fabric_summary

#: The marker in the first column of the selected row (visible without colour).
CURSOR = ">"


def plain(value: str | Text) -> Text:
    """Text taken literally: job names, users, reasons and filters are data, and a
    ``[user=alice]`` must not be read as rich markup, nor an escape sequence or a
    newline be sent to the terminal (they are shown escaped)."""
    return value if isinstance(value, Text) else Text(inert(value))


def clock(epoch: float | None) -> str:
    """Absolute time in UTC, minutes precision: ``2026-12-09 13:53 UTC``."""
    if epoch is None:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def relative(epoch: float | None, now: float) -> str:
    """``in 2h05m`` / ``3m ago`` / ``now``; ``N/A`` when unset."""
    if epoch is None:
        return "N/A"
    delta = epoch - now
    if abs(delta) < 30:
        return "now"
    return f"in {humanize(delta)}" if delta > 0 else f"{humanize(-delta)} ago"


def gpus_by_nodes(job: Job) -> str:
    """``8x2`` (8 GPUs on each of 2 nodes); ``4g/2n`` when asked as a job-wide count."""
    if job.gpus_per_node:
        return f"{job.gpus_per_node}x{job.node_count}"
    if job.gpus:
        return f"{job.gpus}g/{job.node_count}n"
    return f"0x{job.node_count}"


# --- columns that drop out when the width is short ------------------------------
@dataclass(frozen=True, slots=True)
class Column:
    header: str
    width: int
    cell: Callable[[Frame, Job], str | Text]
    #: 0: always shown; higher numbers are dropped first when space runs out.
    drop: int = 0
    justify: str = "left"
    #: The one flexible column takes what is left (at least ``width``).
    flex: bool = False


def _fit(columns: Sequence[Column], width: int) -> list[Column]:
    """The columns that fit ``width``, dropping the highest ``drop`` first."""
    chosen = list(columns)
    # Each column is followed by one space of padding; the cursor column is 1 wide.
    def need(cols: Sequence[Column]) -> int:
        return 2 + sum(c.width + 1 for c in cols)

    while need(chosen) > width:
        droppable = [c for c in chosen if c.drop]
        if not droppable:
            break
        chosen.remove(max(droppable, key=lambda c: c.drop))
    return chosen


def _table(columns: Sequence[Column], width: int, title: str | Text | None) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, expand=True,
                  show_edge=False, title=plain(title) if title is not None else None,
                  title_justify="left",
                  title_style="bold", header_style="bold", width=width)
    table.add_column("", width=1, no_wrap=True)
    for col in columns:
        if col.flex:
            table.add_column(col.header, min_width=col.width, ratio=1, no_wrap=True,
                             overflow="ellipsis", justify=col.justify)  # type: ignore[arg-type]
        else:
            table.add_column(col.header, width=col.width, no_wrap=True, overflow="ellipsis",
                             justify=col.justify)  # type: ignore[arg-type]
    return table


def _rows_caption(offset: int, shown: int, total: int) -> str:
    if total == 0:
        return "none"
    return f"{offset + 1}-{offset + shown} of {total}"


def _position(frame: Frame, job: Job) -> str:
    pos = frame.positions().get(job.job_id)
    return f"{pos[0]}/{pos[1]}" if pos else "-"


def _reason(frame: Frame, job: Job) -> Text:
    text = Text(inert(job.reason) if job.reason and job.reason != "None" else "-")
    if frame.beneficiary_intent(job.job_id) is not None:
        text.append(" +preempting", style="magenta")
    return text


QUEUE_COLUMNS: tuple[Column, ...] = (
    Column("JOBID", 9, lambda f, j: j.display_id),
    Column("USER", 8, lambda f, j: j.user),
    Column("ACCOUNT", 8, lambda f, j: j.account, drop=5),
    Column("CLASS", 8, lambda f, j: f.job_class(j), drop=4),
    Column("PARTITION", 9, lambda f, j: j.partition, drop=2),
    Column("GPUxN", 6, lambda f, j: gpus_by_nodes(j), justify="right"),
    Column("WAIT", 6, lambda f, j: humanize(f.wait(j)) if f.wait(j) is not None else "-",
           justify="right"),
    Column("PRIO", 7, lambda f, j: str(f.priority_of(j)), justify="right"),
    Column("POS", 7, _position, justify="right", drop=3),
    Column("START", 9, lambda f, j: relative(f.estimated_start(j), f.now), drop=1),
    Column("REASON", 10, _reason, flex=True),
)


def queue_view(frame: Frame, jobs: Sequence[Job], *, offset: int = 0, height: int = 20,
               selected: int | None = None, width: int = 80, filters: Filters | None = None,
               sort: str = "priority") -> Table:
    """Pending jobs ``jobs[offset:offset+height]`` as a table; only those rows are formatted."""
    visible = jobs[offset:offset + max(0, height)]
    where = f" [{filters.describe()}]" if filters and filters.describe() else ""
    title = (f"Queue{where}: {len(jobs)} pending, by {sort}, "
             f"{_rows_caption(offset, len(visible), len(jobs))}")
    columns = _fit(QUEUE_COLUMNS, width)
    table = _table(columns, width, title)
    for i, job in enumerate(visible, start=offset):
        mark = CURSOR if i == selected else ""
        table.add_row(mark, *(plain(c.cell(frame, job)) for c in columns),
                      style="reverse" if i == selected else None)
    return table


def _ckpt(frame: Frame, job: Job) -> str:
    age = frame.checkpoint_age(job)
    return "never" if age is None else f"{humanize(age)} ago"


def _left(frame: Frame, job: Job) -> str:
    if job.time_limit is None or job.start_time is None:
        return "unlim"
    return humanize(max(0.0, job.start_time + job.time_limit - frame.now))


def _preemption(frame: Frame, job: Job) -> Text:
    state = frame.preemption_state(job)
    style = ("bold red" if "left" in state or "deadline" in state
             else "yellow" if frame.victim_intent(job.job_id) else "")
    return Text(inert(state), style=style)


RUNNING_COLUMNS: tuple[Column, ...] = (
    Column("JOBID", 9, lambda f, j: j.display_id),
    Column("USER", 8, lambda f, j: j.user),
    Column("ACCOUNT", 8, lambda f, j: j.account, drop=5),
    Column("CLASS", 8, lambda f, j: f.job_class(j), drop=4),
    Column("PARTITION", 9, lambda f, j: j.partition, drop=3),
    Column("GPUxN", 6, lambda f, j: gpus_by_nodes(j), justify="right"),
    Column("RUN", 6, lambda f, j: humanize(f.runtime(j)) if f.runtime(j) is not None else "-",
           justify="right"),
    Column("LEFT", 6, _left, justify="right", drop=2),
    Column("CKPT", 9, _ckpt, justify="right"),
    Column("PREEMPTION", 17, _preemption),
    Column("NODES", 8, lambda f, j: compress(j.nodes) if j.nodes else "-", flex=True, drop=1),
)


def running_view(frame: Frame, jobs: Sequence[Job], *, offset: int = 0, height: int = 20,
                 selected: int | None = None, width: int = 80, filters: Filters | None = None,
                 sort: str = "job") -> Table:
    """Running jobs with checkpoint age and preemption state; only visible rows formatted."""
    visible = jobs[offset:offset + max(0, height)]
    where = f" [{filters.describe()}]" if filters and filters.describe() else ""
    title = (f"Running{where}: {len(jobs)} jobs, by {sort}, "
             f"{_rows_caption(offset, len(visible), len(jobs))}")
    columns = _fit(RUNNING_COLUMNS, width)
    table = _table(columns, width, title)
    for i, job in enumerate(visible, start=offset):
        table.add_row(CURSOR if i == selected else "",
                      *(plain(c.cell(frame, job)) for c in columns),
                      style="reverse" if i == selected else None)
    return table


# --- the fabric -------------------------------------------------------------------
def _node_mark(node_gpus: int, used: int, schedulable: bool) -> tuple[str, str]:
    if not schedulable:
        return "x", "red"
    if node_gpus == 0 or used == 0:
        return ".", "green"
    if used >= node_gpus:
        return "#", "blue"
    return "+", "cyan"


def _strip(frame: Frame, leaf: LeafSummary, room: int) -> Text:
    """One character per node; a space between NVLink domains (racks) of several nodes."""
    text = Text()
    sizes: dict[str, int] = {}
    for node in leaf.nodes:
        rack = frame.nvlink_of.get(node.name, "")
        sizes[rack] = sizes.get(rack, 0) + 1
    previous: str | None = None
    for node in leaf.nodes:
        if len(text) >= room:
            text.append("…")
            break
        rack = frame.nvlink_of.get(node.name, "")
        if previous is not None and rack != previous and (sizes[rack] > 1 or
                                                          sizes.get(previous, 0) > 1):
            text.append(" ")
        previous = rack
        mark, style = _node_mark(node.gpus, node.gpus_alloc, node.schedulable)
        text.append(mark, style=style)
    return text


def _racks(frame: Frame, leaf: LeafSummary) -> str:
    racks = sorted({frame.nvlink_of[n.name] for n in leaf.nodes if n.name in frame.nvlink_of})
    if not racks or len(racks) == len(leaf.nodes):
        # One NVLink domain per host (or unknown): nothing more to say than the nodes.
        return f"{len(racks)}" if racks else "-"
    return ",".join(racks) if len(racks) <= 2 else f"{len(racks)}"


def fabric_view(frame: Frame, *, width: int = 80, height: int = 12, offset: int = 0) -> Group:
    """Leaves with their nodes, GPUs used/free, NVLink domains (racks), a
    one-character-per-node map (racks split by a space), and below: drained
    nodes with Slurm's reason and degraded links."""
    leaves = fabric_summary(frame)
    visible = leaves[offset:offset + max(1, height)]
    total, used, down = frame.gpu_totals()
    title = (f"Fabric: {len(frame.snapshot.nodes)} nodes, {total} GPUs, {used} used, "
             f"{max(0, total - used - down)} free, {down} unusable")
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, expand=True, width=width,
                  title=title, title_justify="left", title_style="bold", header_style="bold")
    table.add_column("LEAF", width=8, no_wrap=True, overflow="ellipsis")
    table.add_column("NODES", width=16, no_wrap=True, overflow="ellipsis")
    table.add_column("USED", width=9, justify="right", no_wrap=True)
    table.add_column("FREE", width=5, justify="right", no_wrap=True)
    table.add_column("DRAIN", width=5, justify="right", no_wrap=True)
    table.add_column("RACKS", width=10, no_wrap=True, overflow="ellipsis")
    map_room = max(4, width - (8 + 16 + 9 + 5 + 5 + 10 + 6) - 1)
    table.add_column("MAP", ratio=1, min_width=4,
                     no_wrap=True, overflow="ellipsis")
    for leaf in visible:
        table.add_row(plain(leaf.leaf), plain(compress(n.name for n in leaf.nodes)),
                      f"{leaf.used}/{leaf.gpus}", str(leaf.free),
                      Text(str(len(leaf.drained)), style="red" if leaf.drained else ""),
                      plain(_racks(frame, leaf)), _strip(frame, leaf, map_room))
    legend = Text("map: # full  + partly used  . idle  x drained/down; racks apart",
                  style="dim", no_wrap=True, overflow="ellipsis")
    parts: list[RenderableType] = [table, legend]
    drained = [n for leaf in leaves for n in leaf.drained]
    if drained:
        lines = Text("drained/down: ", style="bold red")
        lines.append("; ".join(
            inert(f"{n.name} ({n.reason or n.state})") for n in drained[:8]))
        if len(drained) > 8:
            lines.append(f"; +{len(drained) - 8} more")
        parts.append(lines)
    if frame.degraded_links:
        degraded = Text("degraded links: ", style="bold yellow")
        degraded.append(inert("; ".join(frame.degraded_links[:8])))
        if len(frame.degraded_links) > 8:
            degraded.append(f"; +{len(frame.degraded_links) - 8} more")
        parts.append(degraded)
    return Group(*parts)


# --- in-flight preemptions and decisions -----------------------------------------
def preemptions_view(frame: Frame, *, width: int = 80, height: int = 6) -> Table:
    """Open preemptions: beneficiary, state, nodes, each victim's state and deadline."""
    opened = frame.intents.open_preemptions()
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, expand=True, width=width,
                  title=f"Preemptions in flight: {len(opened)}", title_justify="left",
                  title_style="bold", header_style="bold")
    table.add_column("FOR", width=8, no_wrap=True)
    table.add_column("STATE", width=9, no_wrap=True)
    table.add_column("SINCE", width=6, no_wrap=True, justify="right")
    table.add_column("NODES", width=14, no_wrap=True, overflow="ellipsis")
    table.add_column("VICTIMS (state, deadline)", ratio=1, no_wrap=True, overflow="ellipsis")
    for intent in opened[:max(0, height)]:
        victims = Text()
        for i, v in enumerate(intent.victims):
            if i:
                victims.append("; ")
            victims.append(f"{v.job_id} {v.state.value}")
            if v.deadline is not None and v.state.value in ("planned", "signalled"):
                left = v.deadline - frame.now
                victims.append(f" {humanize(left)} left" if left >= 0 else " deadline passed",
                               style="bold red" if left < 60 else "yellow")
        table.add_row(str(intent.beneficiary) if intent.beneficiary != HIDDEN_JOB else "hidden",
                      plain(intent.state.value),
                      humanize(frame.now - intent.started_at),
                      plain(compress(intent.nodes) if intent.nodes else "-"),
                      victims if intent.victims else Text("-"))
    return table


def decisions_view(frame: Frame, *, width: int = 80, height: int = 6) -> RenderableType:
    """The latest audit rows of the daemon, newest first; or why there are none."""
    latest = sorted(frame.decisions, key=lambda d: -d.at)[:max(0, height)]
    title = "Latest decisions"
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, expand=True, width=width,
                  title=title, title_justify="left", title_style="bold", header_style="bold")
    table.add_column("WHEN", width=6, no_wrap=True, justify="right")
    table.add_column("ACTION", width=16, no_wrap=True, overflow="ellipsis")
    table.add_column("JOB", width=8, no_wrap=True)
    table.add_column("REASON", ratio=1, no_wrap=True, overflow="ellipsis")
    for d in latest:
        kind = d.kind if not d.outcome or d.outcome == "ok" else f"{d.kind}:{d.outcome}"
        table.add_row(humanize(frame.now - d.at), plain(kind),
                      str(d.job_id) if d.job_id is not None else "-", plain(d.reason))
    if frame.policy_note:
        return Group(table, Text(inert(frame.policy_note), style="yellow"))
    return table


def header_view(frame: Frame, *, filters: Filters | None = None, width: int = 80) -> Text:
    """One line: cluster, time of the read, counts and GPU use (most useful first)."""
    snap = frame.snapshot
    total, used, _ = frame.gpu_totals()
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(inert(snap.cluster_name or "cluster"), style="bold")
    text.append(f" {time.strftime('%H:%M:%S', time.gmtime(snap.taken_at))}Z")
    text.append(f"  {len(frame.pending())} pending  {len(frame.running())} running"
                f"  GPUs {used}/{total} used")
    if filters and filters.describe():
        text.append(inert(f"  [{filters.describe()}]"), style="yellow")
    if frame.policy_note:
        text.append("  (no policy details)", style="yellow")
    tail = f"  Slurm {snap.slurm_version}" if snap.slurm_version else ""
    if frame.source:
        tail += f" via {frame.source}"
    if len(text) + len(tail) <= width:
        text.append(inert(tail), style="dim")
    text.truncate(width, overflow="ellipsis")
    return text


# --- why -------------------------------------------------------------------------
def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def why_view(exp: Explanation, now: float, *, policy_note: str = "",
             width: int | None = None) -> Group:
    """Every field of an Explanation, in plain words; empty fields are left out."""
    exp = inert_fields(exp)  # its words quote job names, accounts and Slurm's reasons
    parts: list[RenderableType] = [
        Text(f"Job {exp.job_id} ({exp.state}): ", style="bold").append(
            exp.headline, style="bold cyan"),
    ]
    grid = Table.grid(padding=(0, 1), expand=False)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1, overflow="fold")

    def row(label: str, value: str | Text) -> None:
        if value:
            grid.add_row(label, plain(value))

    row("class", exp.job_class)
    row("partition", exp.partition)
    row("asks for", exp.request)
    if exp.position is not None:
        where = exp.partition or "its partition"
        text = f"{_ordinal(exp.position)} in {where} by effective priority"
        if exp.effective_priority is not None:
            text += f" ({exp.effective_priority})"
        row("position", text)
    elif exp.effective_priority is not None:
        row("priority", str(exp.effective_priority))
    if exp.ahead_by_class:
        total = sum(exp.ahead_by_class.values())
        by = ", ".join(f"{n} {cls}" for cls, n in
                       sorted(exp.ahead_by_class.items(), key=lambda kv: (-kv[1], kv[0])))
        row("ahead", f"{total} job{'s' if total != 1 else ''}: {by}")
    # "None" is Slurm's normal reason for a running job: nothing to say.
    if exp.slurm_reason and not (exp.slurm_reason == "None" and exp.state == "RUNNING"):
        text = exp.slurm_reason
        if exp.slurm_reason_text:
            text += f" - {exp.slurm_reason_text}"
        row("Slurm says", text)
    if exp.blocking:
        text = exp.blocking
        if exp.blocking_text:
            text += f" - {exp.blocking_text}"
        row("blocked by", text)
    row("free", exp.free_text)
    if exp.estimated_start is not None or exp.estimate_basis:
        text = (f"{relative(exp.estimated_start, now)} ({clock(exp.estimated_start)})"
                if exp.estimated_start is not None else "unknown")
        if exp.estimate_basis:
            text += f", based on {exp.estimate_basis}"
        row("est. start", text)
    row("runs on", exp.placement_text)
    if exp.last_checkpoint is not None:
        row("checkpoint", f"last acknowledged {relative(exp.last_checkpoint, now)} "
                          f"({clock(exp.last_checkpoint)})")
    elif exp.state.upper() == "RUNNING":
        row("checkpoint", "none acknowledged yet")
    if exp.preemption_candidate is not None or exp.preemption_text:
        verdict = ("" if exp.preemption_candidate is None
                   else "yes" if exp.preemption_candidate else "no")
        text = " - ".join(p for p in (verdict, exp.preemption_text) if p)
        row("preemptible", text)
    if grid.row_count:
        parts.append(grid)
    if exp.alternatives:
        alts = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1), pad_edge=False,
                     expand=False,
                     title="To start sooner", title_justify="left", title_style="bold",
                     header_style="bold")
        alts.add_column("change", overflow="fold")
        alts.add_column("est. start", no_wrap=True)
        alts.add_column("detail", overflow="fold")
        for alt in exp.alternatives:
            when = (relative(alt.estimated_start, now) if alt.estimated_start is not None
                    else "unknown")
            alts.add_row(plain(alt.change), when, plain(alt.detail))
        parts.append(alts)
    if exp.notes:
        notes = Text()
        for i, note in enumerate(exp.notes):
            if i:
                notes.append("\n")
            notes.append(f"- {note}")
        parts.append(notes)
    if policy_note:
        parts.append(Text(inert(policy_note), style="yellow"))
    return Group(*parts)
