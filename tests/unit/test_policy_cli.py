"""``slurmpolicy plan`` over saved Slurm outputs (--from-dir): a dry view of the plan."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmpolicy.cli import cli
from tests.paths import FIXTURES


@pytest.mark.parametrize("rel", ["slurm-22.05", "slurm-25.11"])
def test_plan_json_from_saved_outputs(rel):
    res = CliRunner().invoke(cli, ["plan", "--json", "--from-dir", str(FIXTURES / rel)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["intents"] == "saved outputs: no intents"
    by_job = {a["job_id"]: a for a in data["actions"] if a["kind"] == "SetSiteFactor"}
    # Pending jobs 9, 10, 11 get site factors; vision holds most GPUs, so its job ranks lowest.
    assert set(by_job) == {9, 10, 11}
    assert by_job[10]["site_factor"] < by_job[11]["site_factor"] < by_job[9]["site_factor"]
    assert "account vision" in by_job[10]["reason"] and "over its share" in by_job[10]["reason"]
    # Reservations not ours (maint) are never touched.
    assert not [a for a in data["actions"] if a.get("name") == "maint"]


def test_plan_table_and_settings(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[priority]\nchange_threshold = 1000000\n')
    res = CliRunner().invoke(cli, ["--config", str(cfg), "plan", "--no-notes", "--from-dir",
                                   str(FIXTURES / "slurm-25.11")])
    assert res.exit_code == 0, res.output
    assert "Nothing to do." in res.output


def test_plan_bad_dir(tmp_path):
    res = CliRunner().invoke(cli, ["plan", "--from-dir", str(tmp_path)])
    assert res.exit_code != 0
    assert "squeue.json" in str(res.exception) + res.output


def test_plan_says_what_the_call_budget_holds_back(tmp_path):
    """Three pending jobs with three values, a budget of one call: the dry run
    shows one site factor and says two wait (JSON and table alike)."""
    cfg = tmp_path / "s.toml"
    cfg.write_text("[daemon]\nmax_slurm_calls_per_cycle = 1\n")
    args = ["--config", str(cfg), "plan", "--from-dir", str(FIXTURES / "slurm-25.11")]
    res = CliRunner().invoke(cli, [*args[:3], "--json", *args[3:]])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [a["job_id"] for a in data["actions"] if a["kind"] == "SetSiteFactor"] == [9]
    assert data["site_factors_held_back"] == 2
    res = CliRunner().invoke(cli, [*args, "--no-notes"])
    assert res.exit_code == 0, res.output
    assert "2 more site factor(s) wait for a later cycle" in res.output
