"""Untrusted text is inert in every renderer (issue 13, finding 5).

Random text and random bytes (decoded as Slurm's output would be, with
surrogateescape) go into every string a job, node, audit row or Slurm
message can carry; each renderer's output must hold no control character
but its own line breaks, and its lines must keep their structure: a newline
in a job name cannot forge a line of ``slurmpolicy log`` or of the daemon's
log. Renderers: ``queue``, ``nodes``, ``why``, ``top --once`` (the views the
TUI draws), ``log``, ``report``, ``plan``'s table, and the daemon's log.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from slurmpolicy.cli import cli
from slurmpolicy.inert import InertFormatter, inert, is_inert
from slurmpolicy.model import JobState
from slurmpolicy.store import Journal
from slurmpolicy.tui.frame import Decision
from slurmpolicy.tui.views import why_view
from tests.unit import inspector_scenario as scenario

EVIL = ("\x1b]0;owned\x07", "\x1b[2J\x1b[H", "\n2026-12-03 06:00:00 INFO forged", "\r", "\x9b31m",
        "\u202egnp.exe", "\x00", "\x7f", "\u2028", "[bold red]markup[/]", "\ud800", "\t")
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     r"\ud800-\udfff]")

#: Any text: generated Unicode (controls included), undecodable bytes, known attacks.
untrusted = st.lists(
    st.one_of(
        st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
        st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")),
        st.sampled_from(EVIL),
    ),
    min_size=1, max_size=4,
).map("".join)

FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


def assert_inert(output: str) -> None:
    bad = CONTROL.search(output)
    assert bad is None, f"control character {bad.group()!r} reached the output: {output!r}"


@given(untrusted)
def test_inert_escapes_every_control_and_keeps_the_rest(text: str) -> None:
    shown = inert(text)
    assert is_inert(shown) and CONTROL.search(shown) is None
    assert "\n" not in shown
    if text.isprintable():
        assert shown == text


def _evil_snapshot(name: str, user: str, account: str, reason: str, text: str):  # type: ignore[no-untyped-def]
    snap = scenario.small_snapshot()
    jobs = []
    for job in snap.jobs:
        if job.job_id in (1, 9, 12):
            job = replace(job, name=name, user=user, account=account, comment=text,
                          reason=reason if job.state is JobState.PENDING else job.reason,
                          partition=text if job.job_id == 12 else job.partition)
        jobs.append(job)
    nodes = tuple(replace(n, reason=text) if n.name == "dgx08" else n for n in snap.nodes)
    return replace(snap, jobs=tuple(jobs), nodes=nodes, cluster_name=name)


@FAST
@given(untrusted, untrusted, untrusted, untrusted, untrusted)
def test_queue_and_nodes_show_names_inert(name: str, user: str, account: str, reason: str,
                                          text: str) -> None:
    snap = _evil_snapshot(name, user, account, reason, text)
    with mock.patch("slurmpolicy.commands.views.read_snapshot", return_value=snap):
        for command in (["queue"], ["nodes"]):
            out = CliRunner().invoke(cli, command, env={"COLUMNS": "100"})
            assert out.exit_code == 0, out.output
            assert_inert(out.output)
            # Every line but the title's is a row of the table: the data cannot add lines.
            body = out.output.splitlines()
            first = next(i for i, line in enumerate(body) if line.startswith("┏"))
            assert all(line[:1] in "┏┃┡│└" for line in body[first:] if line), out.output


@FAST
@given(untrusted, untrusted, untrusted, untrusted, untrusted)
def test_top_once_shows_every_view_inert(name: str, user: str, account: str, reason: str,
                                         text: str) -> None:
    from slurmpolicy.commands.inspect import print_once

    frame = scenario.small_frame(
        snapshot=_evil_snapshot(name, user, account, reason, text),
        decisions=(Decision(at=scenario.NOW - 5, kind=text, reason=reason, job_id=9,
                            outcome=name),),
        degraded_links=(text,), policy_note=reason)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_once(frame, width=120, user=user)
    assert_inert(out.getvalue())


@FAST
@given(untrusted, untrusted, untrusted)
def test_why_shows_an_explanation_inert(headline: str, note: str, text: str) -> None:
    exp = replace(scenario.pending_explanation(), headline=headline, notes=(note, text),
                  blocking_text=text, free_text=note, ahead_by_class={text: 2})
    out = io.StringIO()
    Console(file=out, width=100, highlight=False).print(why_view(exp, scenario.NOW,
                                                                 policy_note=note))
    assert_inert(out.getvalue())


@FAST
@given(untrusted, untrusted, untrusted)
def test_log_and_report_keep_one_record_per_line(tmp_path_factory, kind: str, reason: str,
                                                 outcome: str) -> None:
    state = tmp_path_factory.mktemp("journal")
    journal = Journal(state)
    journal.audit(kind, reason, outcome, job_id=9, at=scenario.NOW)
    journal.audit("SetSiteFactor", "plain", "ok", job_id=1, at=scenario.NOW + 1)
    journal.close()
    log = CliRunner().invoke(cli, ["log", "--state-dir", str(state)])
    assert log.exit_code == 0, log.output
    assert_inert(log.output)
    lines = log.output.splitlines()
    # Two records, two lines each: a dated head line and an indented reason.
    assert len(lines) == 4, lines
    assert all(re.match(r"\d{4}-\d\d-\d\d ", line) for line in lines[::2]), lines
    assert all(line.startswith(" " * 21) for line in lines[1::2]), lines
    report = CliRunner().invoke(cli, ["report", "--state-dir", str(state), "--since",
                                      str(scenario.NOW - 10), "--until", str(scenario.NOW + 10)])
    assert report.exit_code == 0, report.output
    assert_inert(report.output)


@FAST
@given(untrusted, untrusted)
def test_plan_table_shows_reasons_inert(name: str, reason: str) -> None:
    from slurmpolicy.policy.actions import Annotate, Plan

    snap = _evil_snapshot(name, name, name, reason, reason)
    plan = Plan(actions=(Annotate(job_id=9, reason=reason),))
    with mock.patch("slurmpolicy.commands.views.read_snapshot", return_value=snap), \
            mock.patch("slurmpolicy.policy.plan", return_value=plan):
        out = CliRunner().invoke(cli, ["plan", "--from-dir", str(Path(__file__).parent)])
    assert out.exit_code == 0, out.output
    assert_inert(out.output)


@given(untrusted, untrusted)
def test_daemon_log_record_is_one_line(job_name: str, slurm_said: str) -> None:
    formatter = InertFormatter("%(asctime)s %(levelname)s %(message)s")
    record = logging.LogRecord("slurmpolicy.daemon", logging.INFO, __file__, 1,
                               "%s job=%s %s: %s", ("SetSiteFactor", 9, slurm_said, job_name),
                               None)
    line = formatter.format(record)
    assert "\n" not in line and CONTROL.search(line) is None
    try:
        raise ValueError(job_name)
    except ValueError:
        record = logging.LogRecord("slurmpolicy.daemon", logging.ERROR, __file__, 1,
                                   "cycle failed: %s", (slurm_said,), sys.exc_info())
    head, *rest = formatter.format(record).split("\n")
    assert CONTROL.search(head) is None and head.count("cycle failed") == 1
    # The traceback's lines are marked as such: none can pass for a record.
    assert rest and all(line.startswith("    | ") for line in rest)
    assert all(CONTROL.search(line) is None for line in rest)


def test_error_lines_show_quoted_names_inert(tmp_path: Path) -> None:
    """An error quotes what was wrong (a file name, Slurm's words): escaped too."""
    import subprocess

    evil = tmp_path / "s\x1b]0;owned\x07\nforged: ok.toml"
    out = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", "config", "check", str(evil)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "\\x1b]0;owned\\x07\\nforged" in out.stderr
    assert_inert(out.stderr.rstrip("\n"))
