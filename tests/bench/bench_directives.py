"""How long the directive check takes per script, in the Lua plugin (as
slurmctld runs it, lua5.3 and liblua5.1) and in Python. Prints figures;
asserts nothing about time.

    pytest tests/bench/bench_directives.py -s
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from directives_support.cases import SITE, script
from directives_support.lua import LIBLUA51, LUA53, Case, run

from slurmpolicy.directives import check_script
from slurmpolicy.plugin import render
from tests.benchfigures import record

pytestmark = pytest.mark.bench

SCRIPTS = {
    "typical (6 directives)": script(
        "#SBATCH -N 4", "#SPOLICY --class=research",
        "#SPOLICY --checkpoint=signal:USR1,grace=5m,interval=30m",
        "#SPOLICY --preemptible=after=1h --topology=leaf,strict",
        "#SPOLICY --expected-runtime=1-12 --gpu-type=h100"),
    "no directives": script("#SBATCH -N 1"),
    "1 MB comment header": b"#!/bin/bash\n" + b"# padding\n" * 110_000 + b"true\n",
    "1 MB body": script("#SPOLICY --class=research", body="echo x\n" * 150_000),
    "10,000 directive lines": script(*["#SPOLICY --class=research"] * 10_000),
    "binary junk": b"#!/bin/bash\n" + bytes(range(256)) * 4000,
    "10 bad lines": script(*[f"#SPOLICY --topologie{i}=leaf" for i in range(10)]),
}


@pytest.mark.parametrize("interpreter", [LUA53, LIBLUA51])
def test_bench_lua_plugin_per_submission(interpreter):
    plugin = render(SITE)
    reps = 200
    outcomes = run(plugin, [Case("bench", body, extra=str(reps)) for body in SCRIPTS.values()],
                   interpreter)
    print(f"\njob_submit.lua under {interpreter}: CPU time per slurm_job_submit ({reps} reps)")
    per_script = {}
    for name, outcome in zip(SCRIPTS, outcomes, strict=True):
        seconds = float(outcome.rc)
        print(f"  {name:28s} {seconds * 1e6:10.1f} us")
        assert seconds >= 0
        per_script[name] = seconds
    record("lua_directives", interpreter=Path(interpreter).name, seconds=per_script)


def test_bench_python_validator():
    reps = 50
    print(f"\nPython check_script: wall time per script ({reps} reps)")
    for name, body in SCRIPTS.items():
        t0 = time.perf_counter()
        for _ in range(reps):
            result = check_script(body, SITE)
        per = (time.perf_counter() - t0) / reps
        print(f"  {name:28s} {per * 1e6:10.1f} us  ({len(result.problems)} problems)")
