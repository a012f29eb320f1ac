"""Views of a job's life and of tables that people read anywhere: ``why
--history`` from a journal, ``queue`` piped (full values) and in a narrow
terminal (columns dropped before any value is cut), suspicion in ``nodes``."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from click.testing import CliRunner
from rich.text import Text

from slurmpolicy.cli import cli
from slurmpolicy.commands.views import print_table
from slurmpolicy.errors import JobGone
from slurmpolicy.lifestore import LifeStore
from slurmpolicy.policy.lifecycle import NodeFailure
from slurmpolicy.store import Journal
from tests.paths import FIXTURES

T0 = 1_800_000_000.0


def _journal(tmp_path):
    journal = Journal(tmp_path)
    store = LifeStore(journal)
    store.put_job(42, {"user": "alice", "account": "vision", "job_class": "research",
                       "state": "COMPLETED", "end_state": "COMPLETED", "runs": 2,
                       "retries": 1, "ended_at": T0 + 900})
    store.add_event(42, T0, "submit", "submitted")
    store.add_event(42, T0, "wait", "priority (jobs ahead of it)", until=T0 + 120)
    store.add_event(42, T0 + 120, "run", "run 1 on gpu01", until=T0 + 400)
    store.add_event(42, T0 + 300, "checkpoint", "checkpoint written (acknowledged)")
    store.add_event(42, T0 + 400, "requeue", "requeued by Slurm (its own requeue)")
    store.add_event(42, T0 + 400, "retry", "retry 1 of 2 from its checkpoint, away from gpu01")
    store.add_event(42, T0 + 400, "wait", "retrying after a failure", until=T0 + 460)
    store.add_event(42, T0 + 460, "run", "run 2 on gpu02", until=T0 + 900)
    store.add_event(42, T0 + 900, "end", "completed")
    journal.audit("Retry", "retry 1 of 2 from its checkpoint", "ok", job_id=42, at=T0 + 401)
    journal.close()


def test_why_history_reads_the_life_in_order_with_durations(tmp_path):
    _journal(tmp_path)
    res = CliRunner().invoke(cli, ["why", "42", "--history", "--journal", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "Job 42 (COMPLETED) of alice, account vision, class research: " \
                       "2 run(s), 1 retry"
    kinds = [line.split()[2] for line in lines[1:]]
    assert kinds == ["submit", "wait", "run", "checkpoint", "requeue", "retry", "wait",
                     "action", "run", "end"]
    assert "2m" in lines[2] or "00:02:00" in lines[2]  # the first wait lasted 120 s
    data = json.loads(CliRunner().invoke(
        cli, ["why", "42", "--history", "--json", "--journal", str(tmp_path)]).output)
    assert [e["at"] for e in data["events"]] == sorted(e["at"] for e in data["events"])
    assert data["job"]["retries"] == 1


def test_why_history_of_an_unknown_job_is_a_one_line_error(tmp_path):
    _journal(tmp_path)
    res = CliRunner().invoke(cli, ["why", "7", "--history", "--journal", str(tmp_path)])
    assert isinstance(res.exception, JobGone)
    assert "job 7 has no history in the journal" in str(res.exception)


def _rows():
    return [(Text("123"), Text("a-very-long-user-name-indeed"), Text("RUNNING"),
             Text("an-account-with-a-long-name"), Text("100000"))]


COLUMNS = ("job", "user", "state", "account", "priority")


def test_outside_a_terminal_every_value_is_printed_in_full():
    out = io.StringIO()
    with redirect_stdout(out):
        print_table("t", COLUMNS, _rows(), tty=False)
    text = out.getvalue()
    for value in ("a-very-long-user-name-indeed", "RUNNING", "an-account-with-a-long-name"):
        assert value in text
    assert "…" not in text


def test_a_narrow_terminal_drops_columns_before_cutting_names():
    out = io.StringIO()
    with redirect_stdout(out):
        print_table("t", COLUMNS, _rows(), tty=True, width=60,
                    drop_order=("priority", "account"))
    text = out.getvalue()
    assert "a-very-long-user-name-indeed" in text and "RUNNING" in text
    assert "account" not in text and "priority" not in text
    assert "…" not in text


def test_nodes_show_suspicion_from_the_journal(tmp_path):
    journal = Journal(tmp_path)
    LifeStore(journal).add_node_failures(
        NodeFailure("dgx05", 10 + i, user, 1e12, "hardware")
        for i, user in enumerate(("u1", "u2", "u1")))
    journal.close()
    conf = tmp_path / "sp.toml"
    conf.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n')
    res = CliRunner().invoke(cli, ["--config", str(conf), "nodes", "--json", "--from-dir",
                                   str(FIXTURES / "slurm-22.05")])
    assert res.exit_code == 0, res.output
    nodes = {n["name"]: n for n in json.loads(res.output)["nodes"]}
    assert nodes["dgx05"]["suspicion"]["jobs"] == [10, 11, 12]
    assert "draining is off" in nodes["dgx05"]["suspicion"]["held_back"]
    assert nodes["dgx01"]["suspicion"] is None
