"""plan() times its steps with the caller's clock (Plan.timings), outside the decision."""

from time import process_time

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
