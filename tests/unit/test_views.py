"""``slurmpolicy queue`` and ``nodes`` over saved outputs (--from-dir)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmpolicy.cli import cli
from tests.paths import FIXTURES


@pytest.mark.parametrize("rel", ["slurm-22.05", "slurm-25.11"])
def test_queue_json(rel):
    res = CliRunner().invoke(cli, ["queue", "--json", "--from-dir", str(FIXTURES / rel)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    rows = {r["job"]: r for r in data["jobs"]}
    assert rows["9"]["reason"] == "Resources" and rows["9"]["gpus"] == 48
    assert rows["3_4"]["state"] == "RUNNING"
    assert rows["1"]["run_seconds"] >= 0 and "wait_seconds" in rows["10"]


@pytest.mark.parametrize("rel", ["slurm-22.05", "slurm-25.11"])
def test_nodes_json(rel):
    res = CliRunner().invoke(cli, ["nodes", "--json", "--from-dir", str(FIXTURES / rel)])
    assert res.exit_code == 0, res.output
    nodes = {n["name"]: n for n in json.loads(res.output)["nodes"]}
    assert nodes["dgx08"]["flags"] == ["DRAIN"] and nodes["dgx08"]["reason"] == "ib link flapping"
    assert nodes["dgx04"]["gpus_free"] == 8 and nodes["dgx07"]["gpus_used"] == {"h100": 8}


def test_tables_render():
    runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that no cell is cut
    q = runner.invoke(cli, ["queue", "--from-dir", str(FIXTURES / "slurm-25.11"),
                            "--state", "pending"])
    assert q.exit_code == 0 and "Resources" in q.output and "RUNNING" not in q.output
    n = runner.invoke(cli, ["nodes", "--from-dir", str(FIXTURES / "slurm-22.05")])
    assert n.exit_code == 0 and "dgx08" in n.output and "48/64" in n.output


def test_from_dir_without_outputs_is_a_clear_error(tmp_path):
    from slurmpolicy.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["queue", "--from-dir", str(tmp_path)])
    assert exit_.value.code == 3
