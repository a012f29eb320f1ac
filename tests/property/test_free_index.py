"""Context's index of free hosts (assign_free's best fit) against a walk over
every host: the same pick for every shape, level and order of takes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmpolicy.policy.context import _FreeIndex, best_fit_walk
from slurmpolicy.topology.types import Level

HOSTS = [f"n{i:02d}" for i in range(24)]


def _domain(host: str, level: Level) -> str:
    # Leaves of 4 hosts, spines of 12: as a fabric's domains would be.
    i = int(host[1:])
    return {Level.LEAF: f"leaf{i // 4}", Level.SPINE: f"spine{i // 12}"}.get(level, "cluster")


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(HOSTS), st.integers(0, 8), min_size=1),
       st.dictionaries(st.sampled_from(HOSTS), st.integers(0, 4)),
       st.sampled_from([Level.LEAF, Level.SPINE, Level.CLUSTER]),
       st.lists(st.tuples(st.integers(1, 8), st.integers(1, 5)), min_size=1, max_size=30))
def test_each_pick_is_the_walks(base, taken, level, jobs):
    taken = dict(taken)  # GPUs already handed out when the index is built
    index = _FreeIndex(base, taken, level, _domain)
    for gpn, need in jobs:
        want = best_fit_walk(base, taken, gpn, need, level, _domain)
        assert index.pick(gpn, need) == want
        for h in want or ():
            taken[h] = taken.get(h, 0) + gpn
            index.took(h, gpn)
        # Takes on hosts outside the map (another GPU type's) change nothing here.
        index.took("elsewhere", gpn)
