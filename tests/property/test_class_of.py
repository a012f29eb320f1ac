"""``classes.class_of`` (the daemon's reading of a job's class between full plans)
gives the class the planner's Context gives the same record."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.classes import class_of
from slurmpolicy.policy.context import Context
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import PriorityClass, Settings

#: Classes the jobs ask for: configured ones, one kept to an account, unknown ones, none.
ASKED = ("production", "research", "experimental", "vip", "nonesuch", None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ASKED), st.sampled_from(["a", "b", "c"]),
                          st.sampled_from([None, "none", "USR1"])), min_size=1, max_size=12))
def test_the_daemon_reads_the_class_the_planner_gives(jobs) -> None:  # type: ignore[no-untyped-def]
    base = Settings()
    s = msgspec.structs.replace(base, classes={
        **base.classes, "vip": PriorityClass(weight=90_000, rank=9, accounts=("a",))})
    b = ClusterBuilder(hosts=2)
    for i, (cls, account, ckpt) in enumerate(jobs, start=1):
        b.pend(i, account, admin_comment=d(cls, ckpt) if cls or ckpt else "")
    snap = b.snapshot()
    ctx = Context(snap, b.fabric(), s, Intents(), b.now)
    for job in snap.jobs:
        assert class_of(s, job) == ctx.job_class(job), job.admin_comment
