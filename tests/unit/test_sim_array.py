"""Sweeps: the grid, ``simulate --array`` (sweep.json, sweep.sbatch), one array
task run in process (``simulate-task``), and ``simulate-gather`` with missing,
failed and corrupt results, against the in-process replay of the same grid."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from slurmpolicy.cli import cli, main
from slurmpolicy.errors import SlurmError
from slurmpolicy.sim import array, grid, metrics, report

#: A small synthetic grid: 2 loads x 2 modes x 2 seeds = 8 replays of 40 jobs.
SYNTH = ("--format", "synthetic", "--trace", "jobs=40,interarrival=120", "--hosts", "8",
         "--hosts-per-leaf", "4", "--compare", "--load-scale", "1,2")
TIMING = ("cpu_seconds", "cpu_parts", "plan_steps", "wall_seconds", "peak_rss_mb")


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)


def figures(data: Any) -> Any:
    """JSON without the timings (the only figures that differ between two runs)."""
    if isinstance(data, dict):
        return {k: figures(v) for k, v in data.items() if k not in TIMING}
    if isinstance(data, list):
        return [figures(v) for v in data]
    return data


def write_sweep(tmp_path: Path, *extra: str) -> Path:
    d = tmp_path / "sweep"
    result = invoke("simulate", *SYNTH, "--seeds", "0,1", "--array", str(d), *extra)
    assert result.exit_code == 0, result.output
    return d


# --- the grid ---------------------------------------------------------------------

def test_grid_order_ids_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           ) -> None:
    monkeypatch.chdir(tmp_path)
    common = {"trace": "philly.csv", "format": "philly", "fabric": "f.toml"}
    tasks = grid.expand(common, [None, "b.toml"], [0, 1], [1.0, 2.0],
                        ["slurmpolicy", "slurm-grace"])
    assert [t.id for t in tasks] == list(range(16))
    assert [(t.settings is None, t.seed, t.load, t.mode) for t in tasks[:5]] == [
        (True, 0, 1.0, "slurmpolicy"), (True, 0, 1.0, "slurm-grace"),
        (True, 0, 2.0, "slurmpolicy"), (True, 0, 2.0, "slurm-grace"),
        (True, 1, 1.0, "slurmpolicy")]
    assert tasks[0].trace == str(tmp_path / "philly.csv")
    assert tasks[0].fabric == str(tmp_path / "f.toml")
    assert tasks[-1].settings == str(tmp_path / "b.toml")
    cases = list(grid.cases(tasks))
    assert len(cases) == 8 and all(len(c) == 2 for _, c in cases)
    # A synthetic spec is not a path.
    (synth,) = grid.expand({"trace": "jobs=5", "format": "synthetic"}, [None], [3], [1.0],
                           ["slurm-grace"])
    assert synth.trace == "jobs=5" and synth.seed == 3
    assert grid.settings_labels(tasks) == {None: "defaults", str(tmp_path / "b.toml"): "b.toml"}


def test_aggregate_mean_lowest_highest() -> None:
    a = {"mode": "m", "jobs": 10, "x": 1.0, "by_class": {"p": {"w": 2.0}}, "none": None}
    b = {"mode": "m", "jobs": 10, "x": 3.0, "by_class": {"p": {"w": 4.0}, "r": {"w": 1.0}},
         "none": None}
    mean, low, high = metrics.aggregate([a, b])
    assert mean["jobs"] == 10 and isinstance(mean["jobs"], int)  # the same in each: whole
    assert (mean["x"], low["x"], high["x"]) == (2.0, 1.0, 3.0)
    assert mean["by_class"] == {"p": {"w": 3.0}, "r": {"w": 1.0}}  # only the seed that has it
    assert mean["none"] is None and mean["mode"] == "m"


def test_id_ranges() -> None:
    assert array.id_ranges([5, 1, 2, 3, 9, 10]) == "1-3,5,9-10"
    assert array.id_ranges([0]) == "0"


# --- writing the array ------------------------------------------------------------

def test_array_writes_the_grid_and_the_script(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    result = invoke("simulate", *SYNTH, "--seeds", "0,1", "--array", str(d),
                    "--array-throttle", "3", "--sbatch-arg=--time=10:00", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out == {"dir": str(d), "tasks": 8, "script": str(d / "sweep.sbatch"), "kept": 0,
                   "job_id": None}
    sweep = json.loads((d / "sweep.json").read_text())
    assert len(sweep["tasks"]) == 8 and sweep["version"] == 1
    assert {(t["seed"], t["load"], t["mode"]) for t in sweep["tasks"]} == {
        (s, x, m) for s in (0, 1) for x in (1.0, 2.0) for m in ("slurmpolicy", "slurm-grace")}
    task = sweep["tasks"][0]
    assert task["trace"] == "jobs=40,interarrival=120" and task["hosts"] == 8
    assert task["settings"] is None and task["limit"] is None
    script = (d / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-7%3\n" in script
    assert f"#SBATCH --output={d}/logs/%A_%a.out\n" in script
    assert "#SBATCH --time=10:00\n" in script
    assert ' -m slurmpolicy.cli simulate-task ' in script and '"${SLURM_ARRAY_TASK_ID:-}"' in script
    assert script.splitlines()[-1].split()[1] == sweep["python"]
    # Every #SBATCH line comes before the first command (sbatch stops reading there).
    lines = script.splitlines()
    last_directive = max(i for i, x in enumerate(lines) if x.startswith("#SBATCH"))
    assert all(x.startswith("#") for x in lines[:last_directive + 1])
    assert (d / "logs").is_dir() and (d / "results").is_dir()


def test_array_refuses_another_grid_a_full_dir_and_bad_names(tmp_path: Path) -> None:
    d = write_sweep(tmp_path)
    (d / "results" / "0.json").write_text("{}")
    # The same grid again: kept, with its results.
    result = invoke("simulate", *SYNTH, "--seeds", "0,1", "--array", str(d))
    assert result.exit_code == 0 and "(kept the 1 result already there)" in result.output
    result = invoke("simulate", *SYNTH, "--seeds", "0,2", "--array", str(d))
    assert isinstance(result.exception, array.SweepError)
    assert "holds another grid" in str(result.exception)
    assert "task 4's seed is 1 there, 2 here" in str(result.exception)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    result = invoke("simulate", *SYNTH, "--array", str(full))
    assert "not empty and holds no sweep.json" in str(result.exception)
    result = invoke("simulate", *SYNTH, "--array", str(tmp_path / "a%j b"))
    assert "cannot hold ' ', '%'" in str(result.exception)
    result = invoke("simulate", *SYNTH, "--array", str(tmp_path / "s2"),
                    "--sbatch-arg", "--comment=two words")
    assert "give one sbatch option as one token" in str(result.exception)
    result = invoke("simulate", *SYNTH, "--submit")
    assert result.exit_code == 2 and "--submit goes with --array DIR" in result.output
    result = invoke("simulate", *SYNTH, "--seed", "1", "--seeds", "1,2")
    assert result.exit_code == 2 and "not both" in result.output
    result = invoke("simulate", *SYNTH, "--seeds", "1,1")
    assert result.exit_code == 2 and "seed 1 is given twice" in result.output


def test_submit_runs_sbatch_and_records_the_job(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "sbatch"
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\necho "4242;cluster"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    d = tmp_path / "sweep"
    result = invoke("simulate", *SYNTH, "--array", str(d), "--submit", env=env)
    assert result.exit_code == 0, result.output
    assert "submitted array job 4242 (4 tasks)" in result.output
    assert (bindir / "args").read_text().split() == ["--parsable", str(d / "sweep.sbatch")]
    assert (d / "jobs").read_text() == "4242\n"
    fake.write_text('#!/bin/sh\necho "sbatch: error: Batch job submission failed: '
                    'Invalid partition name specified" >&2\nexit 1\n')
    with pytest.raises(SlurmError) as info:
        array.submit(d, str(fake))
    assert "Invalid partition name" in info.value.slurm_message


# --- one task, and the gather -----------------------------------------------------

def test_tasks_in_process_then_gather_equals_the_local_replay(tmp_path: Path) -> None:
    d = write_sweep(tmp_path)
    for i in range(8):
        path, record = array.run_task(d, i)
        assert path == d / "results" / f"{i}.json" and record.status == "ok"
    assert not list((d / "results").glob(".*"))  # no temporary file left behind
    one = json.loads((d / "results" / "5.json").read_text())
    assert one["task"]["id"] == 5 and one["summary"]["mode"] == "slurm-grace"
    assert one["hosts"] == 8 and one["summary"]["jobs"] == 40
    gathered = invoke("simulate-gather", str(d), "--json")
    assert gathered.exit_code == 0, gathered.output
    local = invoke("simulate", *SYNTH, "--seeds", "0,1", "--json", "--workers", "1")
    assert local.exit_code == 0, local.output
    a, b = json.loads(gathered.stdout), json.loads(local.stdout)
    assert figures(a) == figures(b)
    assert [(g["load"], g["seed"]) for g in a["loads"]] == [(1.0, 0), (2.0, 0), (1.0, 1),
                                                            (2.0, 1)]
    assert [[m["mode"] for m in g["modes"]] for g in a["across_seeds"]] == [
        ["slurmpolicy", "slurm-grace"]] * 2
    assert all(g["targets"] for g in a["loads"] + a["across_seeds"])
    # The tables: mean and spread across seeds, or one per seed.
    text = invoke("simulate-gather", str(d)).output
    assert "load x2, mean (lowest-highest) of seeds 0, 1" in text
    assert "targets at load x1, mean of 2 seeds" in text
    text = invoke("simulate-gather", str(d), "--per-seed").output
    assert "load x2, seed 1" in text and "targets at load x2, seed 1" in text


def test_a_task_from_slurms_environment_and_out_of_range(tmp_path: Path) -> None:
    d = write_sweep(tmp_path)
    result = invoke("simulate-task", str(d), env={"SLURM_ARRAY_TASK_ID": "3",
                                                 "SLURM_ARRAY_JOB_ID": "77"})
    assert result.exit_code == 0, result.output
    assert "task 3: slurm-grace at load x2, seed 0: 40 jobs" in result.output
    assert json.loads((d / "results" / "3.json").read_text())["slurm_job"] == "77_3"
    for bad, said in (("8", "task 8 is out of range: "), ("-1", "task -1 is out of range"),
                      ("x", "task id 'x' is not a number")):
        result = invoke("simulate-task", str(d), "--", bad)
        assert isinstance(result.exception, array.SweepError), result.output
        assert said in str(result.exception) and "has 8 tasks (0-7)" in str(result.exception)
    result = invoke("simulate-task", str(d), env={"SLURM_ARRAY_TASK_ID": ""})
    assert "no task id" in str(result.exception)
    result = invoke("simulate-task", str(tmp_path / "nowhere"), "0")
    assert "no such sweep directory" in str(result.exception)


def test_gather_names_missing_failed_and_corrupt_tasks(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "p.csv"
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n"
                     "2017-09-04 10:30:41,100,8,800,a\n2017-09-04 10:31:41,50,4,200,b\n")
    d = tmp_path / "sweep"
    result = invoke("simulate", "--trace", str(trace), "--hosts", "4", "--compare",
                    "--load-scale", "1,2", "--array", str(d))
    assert result.exit_code == 0, result.output
    (d / "logs" / "900_1.out").write_text("the log of task 1\n")
    array.run_task(d, 0)
    array.run_task(d, 1)
    (d / "results" / "2.json").write_text('{"version": 1, "task": ')
    trace.unlink()  # task 3 cannot read its trace: it fails, and says so
    with pytest.raises(Exception, match="cannot read trace"):
        array.run_task(d, 3)
    assert json.loads((d / "results" / "3.json").read_text())["status"] == "failed"
    with pytest.raises(SystemExit) as exited:
        main(["simulate-gather", str(d)])
    assert exited.value.code == 6
    out, err = capsys.readouterr()
    assert not out
    assert f"slurmpolicy: error: {d}: tasks 2-3 have no result; gather what there is with " \
        "--partial" in err
    assert "2 of 4 tasks have no result" in err
    assert "task 2 (slurmpolicy x2 seed 0): " in err and "corrupt, not JSON" in err
    assert "task 3 (slurm-grace x2 seed 0): failed: TraceError: " in err
    assert f"log: {d}/logs/%A_3.out (not written yet)" in err
    assert f"rerun them with: sbatch --array=2-3 {d}/sweep.sbatch" in err
    # --partial: what there is, and what is not, in the JSON too.
    result = invoke("simulate-gather", str(d), "--partial", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [g["load"] for g in data["loads"]] == [1.0]
    assert data["incomplete"]["missing"] == []
    assert set(data["incomplete"]["failed"]) == {"2", "3"}
    # A missing task names the log Slurm wrote for it.
    (d / "results" / "1.json").unlink()
    result = invoke("simulate-gather", str(d), "--partial")
    assert "task 1 (slurm-grace x1 seed 0): missing" in result.stderr
    assert f"log: {d}/logs/900_1.out" in result.stderr
    # A load with slurmpolicy only: its table, no targets.
    assert "load x1, seed 0" in result.stdout and "targets at" not in result.stdout
    # A result of another task is refused as such.
    (d / "results" / "1.json").write_text((d / "results" / "0.json").read_text())
    got = array.gather(d)
    assert "the result of another grid's task" in got.failed[1]
    # JSON of the right shape whose figures the report cannot read.
    record = json.loads((d / "results" / "0.json").read_text())
    record["summary"] = {"mode": "slurmpolicy", "by_class": {}}
    (d / "results" / "0.json").write_text(json.dumps(record))
    assert "corrupt, its figures do not read (KeyError" in array.gather(d).failed[0]


def test_a_corrupt_or_foreign_sweep_json_is_named(tmp_path: Path) -> None:
    d = write_sweep(tmp_path)
    data = json.loads((d / "sweep.json").read_text())
    data["tasks"][2]["mode"] = "[bold]fast"
    (d / "sweep.json").write_text(json.dumps(data))
    result = invoke("simulate-gather", str(d))
    assert isinstance(result.exception, array.SweepError)
    assert "task 2: mode '[bold]fast' is not a mode; allowed: slurmpolicy" in str(
        result.exception)
    (d / "sweep.json").write_text("[1, 2")
    result = invoke("simulate-task", str(d), "0")
    assert "sweep.json: not JSON" in str(result.exception)
    result = invoke("simulate", *SYNTH, "--array", str(d))
    assert "give a new directory, or remove" in str(result.exception)


def test_strings_in_the_report_are_shown_inert(tmp_path: Path) -> None:
    """A settings file name, a class name from a result: no markup, no controls."""
    conf_a, conf_b = tmp_path / "[bold]a.toml", tmp_path / "b\x1b[31m.toml"
    conf_a.write_text("")
    conf_b.write_text("")
    tasks = grid.expand({"trace": "jobs=5", "format": "synthetic"},
                        [str(conf_a), str(conf_b)], [0], [1.0], ["slurm-grace"])
    summary = {"mode": "slurm-grace", "jobs": 5, "gpus": 8, "completed": 5,
               "by_class": {"[red]x\x1b[2J": {"wait": {"mean": 1, "p50": 1, "p95": 1, "p99": 1},
                                              "queue_share": 0.1}},
               "wait": {"mean": 1, "p95": 1}, "jct_mean": 1, "wait_to_run": 0.1,
               "allocation": 0.5, "allocation_while_waiting": 0.5, "fragmentation": 0.1,
               "preemptions": 0, "preemptions_per_preempted_job": 0,
               "max_preemptions_per_job": 0, "lost_gpu_hours": 0,
               "redone_minutes_per_preemption": 0, "idle_in_grace_gpu_hours": 0,
               "benefit_delay": {"mean": 0, "p50": 0, "p95": 0, "p99": 0},
               "overhead_gpu_hours": 0, "multi_node_in_one_leaf": None,
               "multi_node_in_one_nvlink": None, "plan_calls": 0, "cpu_seconds": 0.1}
    outcomes = [report.Outcome(t, summary, 1) for t in tasks]
    console = Console(file=io.StringIO(), record=True, width=200, force_terminal=True)
    report.render(console, tasks, outcomes)
    text = console.export_text()
    assert "[bold]a.toml" in text and "b\\x1b[31m.toml" in text
    assert "[red]x\\x1b[2J wait mean" in text
    assert "\x1b[2J" not in console.export_text(styles=True)


def test_settings_files_are_a_sweep_axis(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text("")
    b.write_text("[preemption]\nmin_runtime = 0\n")
    result = invoke("simulate", "--format", "synthetic", "--trace", "jobs=30", "--hosts", "8",
                    "--compare", "--sweep-config", str(a), "--sweep-config", str(b), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [g["settings"] for g in data["loads"]] == [str(a), str(b)]
    text = invoke("simulate", "--format", "synthetic", "--trace", "jobs=30", "--hosts", "8",
                  "--compare", "--sweep-config", str(a), "--sweep-config", str(b)).output
    assert "seed 0, settings a.toml" in text and "targets at load x1, settings b.toml" in text
