"""What pool routing adds to job_submit.lua per submission (lua5.3 and liblua5.1,
the harness of the directive benchmark), with no pools and with the example
pools of contrib/examples/pools.toml. Prints figures; asserts nothing about time.

    pytest tests/bench/bench_pools.py -s
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from directives_support.lua import LIBLUA51, LUA53, Case, run

from slurmpolicy.plugin import render
from slurmpolicy.settings import Settings, load
from tests.benchfigures import record

pytestmark = pytest.mark.bench

EXAMPLE = Path(__file__).resolve().parents[2] / "contrib" / "examples" / "pools.toml"
BODY = (b"#!/bin/bash\n#SBATCH --gres=gpu:8\n#SPOLICY --class=research\n"
        b"#SPOLICY --checkpoint=signal:USR1,grace=2m\nsrun train\n")


@pytest.mark.parametrize("interpreter", [LUA53, LIBLUA51])
def test_routing_cost_per_submission(interpreter: str) -> None:
    figures = {}
    for name, settings in (("no pools", Settings()), ("5 example pools", load(EXAMPLE))):
        (out,) = run(render(settings), [Case("bench", BODY, extra="20000")], interpreter)
        figures[name] = float(out.rc) * 1e6
    print(f"\njob_submit.lua ({interpreter}), per submission: " + ", ".join(
        f"{name} {us:.1f} us" for name, us in figures.items()))
    record("lua_pools", interpreter=Path(interpreter).name, us=figures)
    assert all(us > 0 for us in figures.values())
