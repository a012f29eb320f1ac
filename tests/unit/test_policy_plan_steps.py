"""plan() times its steps with the caller's clock (Plan.timings), outside the decision,
and runs with the cyclic garbage collector paused."""

import gc
from time import process_time

import pytest

from slurmpolicy.policy import plan
from slurmpolicy.policy.actions import Intents, Plan
from slurmpolicy.policy.plan import STEPS
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings


def test_a_plan_times_each_of_its_steps_in_the_order_they_run() -> None:
    b = ClusterBuilder(hosts=4)
    for i in range(1, 5):
        b.run(100 + i, "r", hosts=[i], ran=7200.0, admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    b.pend(2, "r", nodes=2, waited=3 * 3600.0, admin_comment=d("research", "USR1"))
    before = process_time()
    got = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, clock=process_time)
    whole = process_time() - before
    assert tuple(got.timings) == STEPS
    assert all(seconds >= 0 for seconds in got.timings.values())
    assert sum(got.timings.values()) <= whole + 1e-6  # parts of the call, not more
    # The timings describe the run, not the decision: plans that differ only
    # there are equal (the simulator and the tests compare plans).
    # Without a clock, nothing is timed (policy/ reads none of its own).
    again = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert again.timings == {}
    assert again == got
    assert Plan(timings={"context": 1.0}) == Plan()


def _cluster() -> ClusterBuilder:
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], ran=600.0, admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    return b


def test_a_plan_runs_with_the_cyclic_collector_paused_and_restores_it() -> None:
    b = _cluster()
    seen: list[bool] = []

    def clock() -> float:
        seen.append(gc.isenabled())
        return 0.0

    assert gc.isenabled()
    plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, clock=clock)
    assert len(seen) == len(STEPS) + 1 and not any(seen)
    assert gc.isenabled()
    # A caller that paused it already finds it paused after.
    gc.disable()
    try:
        plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_plan_that_fails_leaves_the_collector_on() -> None:
    b = _cluster()

    def clock() -> float:
        raise RuntimeError("clock broke")

    with pytest.raises(RuntimeError, match="clock broke"):
        plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, clock=clock)
    assert gc.isenabled()
