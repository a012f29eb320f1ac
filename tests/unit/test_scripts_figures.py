"""scripts/figures writes every simulator figure that README and docs show.

The speed block is built from a real ``simulate --compare`` run (a short part
of the shipped trace), and each figure in it is read back against that run's
JSON; the docs carry the markers the script writes between.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("figures_script", ROOT / "scripts" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures() -> ModuleType:
    return _figures()


@pytest.fixture(scope="module")
def run(figures: ModuleType) -> tuple[dict[str, Any], float]:
    # The same subprocess the speed run uses, on the first 1,500 jobs.
    return figures.simulate(["--limit", "1500"], None, loads=figures.SPEED_LOAD)


def _modes(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["mode"]: s for s in data["loads"][0]["modes"]}


def test_the_speed_block_shows_the_runs_own_figures(figures, run):
    data, wall = run
    block = figures.speed_block(data, wall, "abc1234", "a test machine", ["--limit", "1500"])
    modes = _modes(data)
    policy, base = modes["slurmpolicy"], modes["slurm-grace"]
    assert "commit `abc1234` on a test machine" in block
    assert "--load-scale 2 --json --limit 1500`, a part of the trace (1,500 jobs" in block
    cpu, base_cpu = policy["cpu_seconds"], base["cpu_seconds"]
    ratio = cpu / base_cpu
    line = next(x for x in block.splitlines() if x.startswith("| CPU: slurmpolicy"))
    assert f"{cpu:.1f} s / {base_cpu:.1f} s = {ratio:.1f}x" in line
    assert line.endswith("met |" if ratio <= 3 else f"**missed** by {ratio - 3:.1f}x |")
    parts = next(x for x in block.splitlines() if x.startswith("| slurmpolicy's CPU by part"))
    assert f"`plan()` {policy['cpu_parts']['plan']:.1f} s ({policy['plan_calls']:,} calls" in parts
    assert f"{policy['open_only_plans']:,} of them open preemptions only" in parts
    steps = next(x for x in block.splitlines() if x.startswith("| `plan()` CPU by step"))
    named = re.findall(r"(\w+) [\d.]+ s", steps)
    assert sorted(named) == sorted(policy["plan_steps"])
    # Every policy target of the run, judged as simulate judged it.
    for target in data["loads"][0]["targets"]:
        row = next(x for x in block.splitlines() if x.startswith(f"| {target['target']} |"))
        assert row.endswith(": met |") == target["met"], row


def test_a_missed_cpu_target_says_what_it_would_leave_plan(figures):
    # 227.4 s against 32.7: 3x is 98.1 s, of which 89.9 go outside plan().
    budget = figures._plan_budget_row(227.4, 32.7, 137.5, 22_898)
    assert budget == ("| what 3x leaves `plan()` | 8.2 s (0.36 ms a plan) against 137.5 s "
                      "now: 16.8 times less | |")
    assert "nothing: the rest of the replay alone is over 3x" in figures._plan_budget_row(
        300.0, 30.0, 100.0, 10)


def test_the_wall_time_is_judged_against_five_minutes(figures, run):
    data, _ = run
    fast = figures.speed_block(data, 61.0, "abc1234", "here")
    slow = figures.speed_block(data, 312.0, "abc1234", "here")
    assert "| wall time, both modes | 1 min 1 s | < 5 min: met |" in fast
    assert "| wall time, both modes | 5 min 12 s | < 5 min: **missed** by 12 s |" in slow
    assert "the whole trace (1,500 jobs" in fast  # no --limit named: the speed run's own words


def test_the_done_block_shows_the_runs_wall_time_cpu_and_targets(figures, run):
    """The "Done when" run's block: its wall time against five minutes, each
    load's CPU in both modes, and every target judged as simulate judged it."""
    data, _ = run
    fast = figures.done_block(data, 299.0, "abc1234", "here", ["--limit", "1500"])
    slow = figures.done_block(data, 308.0, "abc1234", "here")
    assert "| wall time, the whole run | 4 min 59 s | < 5 min: met |" in fast
    assert "| wall time, the whole run | 5 min 8 s | < 5 min: **missed** by 8 s |" in slow
    assert "--load-scale 1,2,3 --json --limit 1500`, a part of the trace" in fast
    policy, base = _modes(data)["slurmpolicy"], _modes(data)["slurm-grace"]
    line = next(x for x in fast.splitlines() if x.startswith("| CPU at x2:"))
    assert (f"({policy['jobs']:,} jobs) | {policy['cpu_seconds']:.1f} s / "
            f"{base['cpu_seconds']:.1f} s = "
            f"{policy['cpu_seconds'] / base['cpu_seconds']:.1f}x |") in line
    for target in data["loads"][0]["targets"]:
        row = next(x for x in fast.splitlines() if x.startswith(f"| {target['target']} |"))
        assert row.endswith(": met |") == target["met"], row


def test_splice_replaces_only_between_its_markers(figures, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- figures:speed begin -->\nold\n<!-- figures:speed end -->\n"
                   "after <!-- figures:simulate begin -->keep<!-- figures:simulate end -->\n")
    figures.splice(doc, "speed", "new $1 \\g<0> text")  # no regex expansion of the text
    assert doc.read_text() == (
        "before\n<!-- figures:speed begin -->\nnew $1 \\g<0> text\n<!-- figures:speed end -->\n"
        "after <!-- figures:simulate begin -->keep<!-- figures:simulate end -->\n")
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="lacks the markers"):
        figures.splice(bare, "speed", "x")


def test_the_scale_block_judges_each_size_and_its_growth(figures):
    rows = [{"nodes": 2048, "pending": 20_000, "jobs": 21_000, "cpu_seconds": 0.2,
             "peak_mib": 18.0},
            {"nodes": 4096, "pending": 30_000, "jobs": 32_000, "cpu_seconds": 1.25,
             "peak_mib": 29.0},
            {"nodes": 16384, "pending": 50_000, "jobs": 58_000, "cpu_seconds": 2.0,
             "peak_mib": 57.0}]
    block = figures.scale_block(rows, "abc1234", "here")
    lines = {int(x.split("|")[1].replace(",", "")): x for x in block.splitlines()
             if re.match(r"\| [\d,]+ \|", x)}
    assert lines[2048].split("|")[5].strip() == ""  # no target at this size
    assert "< 1 s: **missed** by 0.25 s" in lines[4096]
    assert "< 3 s: met" in lines[16384]
    # 0.2 -> 1.25 s is x6.25 where n log n of the nodes gives x2.18, of the
    # jobs x1.59: above both. 1.25 -> 2 s (x1.60) is within the nodes' x4.67.
    assert "x6.25 (x2.18 / x1.59): **above**" in lines[4096]
    assert "x1.60 (x4.67 / x1.92): within" in lines[16384]


def test_the_scale_run_reads_the_benchmarks_own_json(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "tests/bench/bench_plan.py", "--json", "--sizes",
                          "64:300", "128:600"], cwd=ROOT, text=True, capture_output=True,
                         check=True)
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(r["nodes"], r["pending"]) for r in rows] == [(64, 300), (128, 600)]
    assert all(r["cpu_seconds"] > 0 and r["steady_cpu_seconds"] > 0
               and r["jobs"] > r["pending"] for r in rows)
    block = _figures().scale_block(rows, "abc1234", "here")
    assert (f"| 128 | 600 | {rows[1]['jobs']:,} | {rows[1]['cpu_seconds']:.2f} s / "
            f"{rows[1]['steady_cpu_seconds']:.2f} s |") in block


def test_the_scale_targets_are_judged_on_the_slower_cycle(figures):
    rows = [{"nodes": 2048, "pending": 20_000, "jobs": 21_000, "cpu_seconds": 0.2,
             "steady_cpu_seconds": 0.3, "peak_mib": 18.0},
            {"nodes": 4096, "pending": 30_000, "jobs": 32_000, "cpu_seconds": 0.4,
             "steady_cpu_seconds": 1.1, "peak_mib": 29.0}]
    block = figures.scale_block(rows, "abc1234", "here")
    line = next(x for x in block.splitlines() if x.startswith("| 4,096 |"))
    # The first cycle alone would meet 1 s; the steady one misses it.
    assert "| 0.40 s / 1.10 s | < 1 s: **missed** by 0.10 s |" in line
    assert "x3.67 (x2.18 / x1.59): **above**" in line  # 1.1 / 0.3, not 0.4 / 0.2
    assert "first cycle / steady" in block


@pytest.mark.parametrize(("doc", "name"), [
    (doc, name) for doc in ("README.md", "docs/simulate.md")
    for name in ("simulate", "speed", "plan-scale", "done")] + [("README.md", "bench"),
                                                        ("docs/simulate.md", "reserve-after-wait")])
def test_the_docs_hold_each_generated_block_once(doc, name):
    text = (ROOT / doc).read_text(encoding="utf-8")
    begin, end = f"<!-- figures:{name} begin -->", f"<!-- figures:{name} end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    inside = text.split(begin)[1].split(end)[0]
    # Written by scripts/figures, never by hand: it names itself and its commit.
    assert re.search(r"Generated by `scripts/figures`.* at commit `[0-9a-f]{7,}", inside), doc


def test_the_bench_table_is_built_from_the_benchmarks_own_records(figures, tmp_path):
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "figures.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-m", "bench", "-q", "-p",
                    "no:cacheprovider", "tests/bench/bench_journal.py",
                    "tests/bench/bench_pools.py"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "SLURMPOLICY_BENCH_FIGURES": str(out)})
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["bench"] for r in records} == {"journal", "lua_pools"}
    block = figures.bench_block(records, "abc1234", "here")
    journal = next(r for r in records if r["bench"] == "journal")
    assert f"| journal: one journalled action (of 500) | {journal['ms_per_action']:.2f} ms |" \
        in block
    pools = [r for r in records if r["bench"] == "lua_pools"]
    row = next(x for x in block.splitlines() if "pool routing" in x)
    for r in pools:
        assert r["interpreter"] in row
        assert " / ".join(f"{us:.1f} us" for us in r["us"].values()) in row


def test_the_bench_table_judges_each_figure_against_its_target(figures):
    records = [
        {"bench": "read_queue", "rows": [
            {"slurm": "22.05", "reader": "msgspec -> Snapshot", "jobs": 20000.0,
             "seconds": 0.3, "extra_mib": 35.0},
            {"slurm": "22.05", "reader": "stdlib json.loads (dicts only)", "jobs": 20000.0,
             "seconds": 0.4, "extra_mib": 150.0},
            {"slurm": "25.11", "reader": "msgspec -> Snapshot", "jobs": 20000.0,
             "seconds": 1.2, "extra_mib": 60.0}]},
        {"bench": "fabric", "hosts": 4096, "gpus": 8, "build_s": 0.2, "held_mib": 39.0,
         "place64_median_s": 0.06}]
    lines = figures.bench_block(records, "abc1234", "here").splitlines()
    read = next(x for x in lines if x.startswith("| read a 20,000-job queue"))
    # The slowest reader of the two Slurm outputs decides: 1.2 s is over 1 s.
    assert "0.30 s / 1.20 s, 35 / 60 MiB" in read and read.endswith("**missed** |")
    assert next(x for x in lines if x.startswith("| fabric")).endswith("< 2 s, < 1 GB: met |")
    assert next(x for x in lines if x.startswith("| `place()`")).endswith(
        "median 60.00 ms | < 50 ms: **missed** |")


def test_the_daemon_cycle_row_shows_each_adapter_or_why_it_was_not_run(figures):
    cycle = {"bench": "cycle", "nodes": 16, "jobs": 2000, "settled": True, "settle_cycles": 1,
             "first_s": 1.5, "first_calls": 2, "steady_reads": 1, "change_calls": 1,
             "change_settled": True}
    records = [{**cycle, "adapter": "jsoncli", "slurm": "22.05", "steady_median_s": 0.64},
               {**cycle, "adapter": "pyslurm", "slurm": "25.11", "steady_median_s": 0.10}]
    row = next(x for x in figures.bench_block(records, "abc1234", "here").splitlines()
               if x.startswith("| daemon cycle"))
    assert "jsoncli on Slurm 22.05: new jobs settled in 1 cycle(s)" in row
    assert "steady cycle 0.64 s (1 reads)" in row and "steady cycle 0.10 s" in row
    # 0.64 s on one adapter: the miss names it.
    assert row.endswith("1 cycle, steady < 0.5 s, <= 50 calls: **missed** on jsoncli on "
                        "Slurm 22.05, met on the rest |")
    fast = figures.bench_block(records[1:], "abc1234", "here")
    assert "<= 50 calls: met |" in fast
    slow = figures.bench_block(records[:1], "abc1234", "here")
    assert "<= 50 calls: **missed** |" in slow  # the only run: nothing else to name
    none = figures.bench_block([], "abc1234", "here", ("it starts Slurm's daemons",))
    assert "| daemon cycle (`bench_cycle.py`) | not measured here: it starts Slurm's daemons |" \
        in none


# --- the figures in README and docs are what their stored run renders to --------------
# scripts/figures keeps each run's JSON under docs/figures/ beside the block it
# wrote. Rendering that JSON again with today's code must give the very block
# the docs show, and judging its summaries again with today's target rules
# must give the targets it stored: a hand edit of a figure, or a change to how
# a figure or a target is worded or judged without a new `scripts/figures`,
# fails here ("Figures that cannot go stale", issue 16).

_STALE = "differs from what scripts/figures renders from docs/figures/{}.json: run scripts/figures"


def _stored(name: str) -> dict[str, Any]:
    import json

    return json.loads((ROOT / "docs" / "figures" / f"{name}.json").read_text(encoding="utf-8"))


def _block(doc: str, name: str) -> str:
    text = (ROOT / doc).read_text(encoding="utf-8")
    return text.split(f"<!-- figures:{name} begin -->\n")[1].split(
        f"\n<!-- figures:{name} end -->")[0]


def test_the_simulate_blocks_are_their_stored_run_rendered(figures):
    data = _stored("simulate")
    rev, wall = data.pop("commit"), data.pop("wall_seconds", None)
    shown = _block("docs/simulate.md", "simulate")
    head = shown.splitlines()[0]
    full, short = figures.tables(data, head)
    assert shown == full, "docs/simulate.md's figures " + _STALE.format("simulate")
    assert _block("README.md", "simulate") == short, "README's figures " + _STALE.format(
        "simulate")
    # The head line is the run's own: its commit, replays and CPU.
    replays = [s for case in data["loads"] for s in case["modes"]]
    assert f"at commit `{rev}`:" in head
    assert f"; {len(replays)} replays, {sum(s['cpu_seconds'] for s in replays):.0f} CPU s" in head
    if wall is not None:  # kept since 5 December 2026
        assert f"CPU s in all, {wall:.0f} s wall." in head


def test_the_waited_block_is_its_stored_run_rendered_beside_the_figures_run(figures):
    waited = _stored("waited")
    rev, wall, extra = waited.pop("commit"), waited.pop("wall_seconds"), waited.pop("extra")
    waited.pop("machine")
    base = _stored("simulate")
    shown = _block("docs/simulate.md", "reserve-after-wait")
    assert shown == figures.waited_block(waited, base, rev, wall, extra), (
        "docs/simulate.md's reserve_after_wait table " + _STALE.format("waited"))
    # The defaults' columns are the figures' run, named by its commit.
    assert f"(commit `{base['commit']}`)" in shown.splitlines()[0]
    header = shown.splitlines()[2]
    assert "| defaults x2 | reserve_after_wait x2 | slurm-grace x2 | defaults x3 |" in header


def test_the_waited_run_refuses_a_figures_run_of_other_jobs(figures):
    base = _stored("simulate")
    other = {**base, "loads": [{**case, "modes": [{**m, "jobs": m["jobs"] + 1}
                                                  for m in case["modes"]]}
                               for case in base["loads"]]}
    with pytest.raises(SystemExit, match="another number of jobs"):
        figures.waited_block(other, base, "abc1234", 1.0, [])


@pytest.mark.parametrize("doc", ["README.md", "docs/simulate.md"])
@pytest.mark.parametrize("name", ["speed", "done"])
def test_the_timed_runs_blocks_are_their_stored_runs_rendered(figures, doc, name):
    run = _stored(name)
    where, rev, wall = run.pop("machine"), run.pop("commit"), run.pop("wall_seconds")
    render = getattr(figures, f"{name}_block")
    assert _block(doc, name) == render(run, wall, rev, where), (
        f"{doc}'s {name} run " + _STALE.format(name))


@pytest.mark.parametrize("doc", ["README.md", "docs/simulate.md"])
def test_the_scale_block_is_its_stored_run_rendered(figures, doc):
    scale = _stored("scale")
    assert _block(doc, "plan-scale") == figures.scale_block(
        scale["rows"], scale["commit"], scale["machine"]), (
        f"{doc}'s plan() by size " + _STALE.format("scale"))


def test_the_bench_block_is_its_stored_run_rendered(figures):
    bench = _stored("bench")
    assert _block("README.md", "bench") == figures.bench_block(
        bench["records"], bench["commit"], bench["machine"],
        tuple(bench.get("skipped", ()))), (
        "README's benchmarks " + _STALE.format("bench"))


@pytest.mark.parametrize("name", ["simulate", "speed", "done"])
def test_the_stored_targets_are_what_todays_rules_judge(name):
    from slurmpolicy.sim import metrics

    data = _stored(name)
    for case in data["loads"]:
        ours, base = case["modes"][0], case["modes"][-1]
        assert (ours["mode"], base["mode"]) == ("slurmpolicy", "slurm-grace")
        assert metrics.targets(ours, base) == case["targets"], (
            f"x{case['load']:g} seed {case['seed']}: " + _STALE.format(name))
    for group in data.get("across_seeds", []):
        # Each mode's mean, lowest and highest are today's aggregate of its seeds.
        for mode in group["modes"]:
            runs = [s for case in data["loads"] if case["load"] == group["load"]
                    for s in case["modes"] if s["mode"] == mode["mode"]]
            assert len(runs) == len(mode["seeds"]) > 1
            assert metrics.aggregate(runs) == (mode["mean"], mode["min"], mode["max"])
        means = [m["mean"] for m in group["modes"]]
        assert metrics.targets(means[0], means[-1]) == group["targets"], (
            f"x{group['load']:g} across seeds: " + _STALE.format(name))


def test_the_large_jobs_row_names_the_runs_own_size(figures):
    """The large-jobs row says the size the run counted (reservations.large_job_gpus),
    not a number written into the script."""
    data = _stored("simulate")
    data.pop("commit"), data.pop("wall_seconds", None)
    gpus = data["loads"][0]["modes"][0]["large"]["gpus"]
    other = {**data, "loads": [{**case, "modes": [{**m, "large": {**m["large"], "gpus": 32}}
                                                  for m in case["modes"]]}
                               for case in data["loads"]],
             **({"across_seeds": [{**g, "modes": [
                 {**m, **{k: {**m[k], "large": {**m[k]["large"], "gpus": 32}}
                          for k in ("mean", "min", "max")}} for m in g["modes"]]}
                 for g in data["across_seeds"]]} if "across_seeds" in data else {})}
    shown, _ = figures.tables(data, "head")
    moved, _ = figures.tables(other, "head")
    assert f"| large jobs ({gpus}+ GPUs) wait mean / p95 / max |" in shown
    assert "| large jobs (32+ GPUs) wait mean / p95 / max |" in moved


def test_the_speed_block_shows_the_median_run_and_every_runs_ratio(figures, run):
    """The ratio of two runs of the same code moves by up to 1x on a shared
    machine: the block is the median run's, with every run's ratio beside."""
    runs = [{"cpu": 120.0, "baseline_cpu": 30.0, "wall_seconds": 130.0},   # 4.0x
            {"cpu": 100.0, "baseline_cpu": 31.25, "wall_seconds": 118.0},  # 3.2x
            {"cpu": 108.0, "baseline_cpu": 30.0, "wall_seconds": 125.0}]   # 3.6x
    assert figures.median_run(runs) == 2
    assert figures.median_run(runs[:2]) == 1  # even: the lower middle
    assert figures.median_run(runs[:1]) == 0
    data, wall = run
    block = figures.speed_block({**data, "runs": runs}, wall, "abc1234", "here")
    assert "run 3 times, the figures below are the median run by CPU ratio." in block
    row = next(x for x in block.splitlines() if x.startswith("| every run: CPU ratio"))
    assert "4.0x (2 min 10 s), 3.2x (1 min 58 s), 3.6x (2 min 5 s)" in row
    single = figures.speed_block(data, wall, "abc1234", "here")
    assert "every run" not in single and "median" not in single
