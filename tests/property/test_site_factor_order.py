"""After one cycle's site-factor writes, Slurm's order is the policy's (issue 13, finding 11).

Random queues (random Slurm priorities, classes, waits, accounts, and random
site factors already set by an earlier daemon or left at Slurm's value):
the plan's SetSiteFactor actions, applied, leave every pair of competing
jobs whose effective priorities differ by at least ``change_threshold`` in
the policy's order in Slurm's (priority with the site factor it then holds);
a second plan on the result writes nothing; and no job is written with the
value it already has.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpolicy.policy import plan
from slurmpolicy.policy.actions import Intents, SetSiteFactor
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Priority, Settings

CLASSES = ("production", "research", "experimental", None)

job_strategy = st.tuples(
    st.sampled_from(CLASSES), st.sampled_from("abc"), st.integers(0, 20_000),
    st.integers(0, 30).map(lambda h: h * 600), st.one_of(st.none(), st.integers(0, 150_000)),
    st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(job_strategy, min_size=2, max_size=25), st.sampled_from([0, 50, 2000]))
def test_one_cycle_puts_slurms_order_in_line(jobs, threshold) -> None:  # type: ignore[no-untyped-def]
    s = msgspec.structs.replace(Settings(), priority=Priority(change_threshold=threshold))
    b = ClusterBuilder(hosts=4, partitions={"p1": [1, 2], "p2": [2, 3], "p3": [4]})
    known: dict[int, int] = {}
    for i, (cls, account, prio, waited, old, in_p3) in enumerate(jobs, start=1):
        b.pend(i, account, admin_comment=d(cls) if cls else "", priority=prio + (old or 0),
               site_factor=old or 0, waited=waited,
               partition="p3" if in_p3 else ("p1" if i % 2 else "p2"))
        if old is not None:
            known[i] = old
    snap, fabric = b.snapshot(), b.fabric()
    intents = Intents(site_factors=known)
    result = plan(snap, fabric, s, intents, b.now)
    written = {a.job_id: a for a in result.actions if isinstance(a, SetSiteFactor)}
    holds = {j.job_id: known.get(j.job_id, j.site_factor) for j in snap.jobs}
    for job_id, action in written.items():
        assert action.site_factor != holds[job_id]
        holds[job_id] = action.site_factor
    effective = result.effective_priority
    by_id = {j.job_id: j for j in snap.jobs}
    # Slurm's priority once the writes are made: its own factors plus what it holds.
    prio = {j.job_id: j.priority - j.site_factor + holds[j.job_id] for j in snap.jobs}
    group = {j.job_id: "p3" if j.partition == "p3" else "p12" for j in snap.jobs}
    ids = list(prio)
    for i in ids:
        for k in ids:
            if i == k or group[i] != group[k]:
                continue
            if effective[i] >= effective[k] + max(1, threshold):
                ji, jk = by_id[i], by_id[k]
                ahead = ((prio[i], -(ji.submit_time or 0), -i)
                         > (prio[k], -(jk.submit_time or 0), -k))
                assert ahead, (i, k, effective[i], effective[k], prio[i], prio[k])
    # Settled: the next cycle, with what was written, writes nothing more.
    again = plan(snap, fabric, s, Intents(site_factors={**known, **{
        j: a.site_factor for j, a in written.items()}}), b.now)
    assert not [a for a in again.actions if isinstance(a, SetSiteFactor)]


def _reorder_every_pass_from_the_top(order, new, cur, effective, threshold, chosen):  # type: ignore[no-untyped-def]
    """The order check as first written: walks of the whole queue, each mending
    an out-of-order job by its own write (stale) or else by raising its weakest
    leader, until one changes nothing (each walk that changes something writes
    a job more, so they end). ``priority._reorder`` works the same out in two
    walks and must choose exactly the same jobs."""
    inf = (float("inf"),) * 3
    n = len(order)
    ids, eff, stale, taken, new_key, skey = [], [], [], [], [], []
    for j in order:
        i = j.job_id
        e, v, c, t = effective[i], new[i], cur[i], -(j.submit_time or 0.0)
        ids.append(i)
        eff.append(e)
        stale.append(v != c)
        taken.append(i in chosen)
        key = (e, t, -i)
        new_key.append(key)
        skey.append(key if v == c or i in chosen else (e - v + c, t, -i))
    while True:
        added = False
        lowest, weakest, ahead = inf, -1, 0
        for x in range(n):
            bar = eff[x] + threshold
            while ahead < n and ahead != x and eff[ahead] >= bar:
                if skey[ahead] < lowest:
                    lowest, weakest = skey[ahead], ahead
                ahead += 1
            if lowest > skey[x]:
                continue
            target = x if stale[x] and not taken[x] else weakest
            if not taken[target] and stale[target]:
                taken[target] = True
                skey[target] = new_key[target]
                chosen.add(ids[target])
                added = True
        if not added:
            return


queue_strategy = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.integers(0, 5),
              st.booleans()),
    min_size=1, max_size=80)


@settings(max_examples=400, deadline=None)
@given(queue_strategy, st.sampled_from([1, 5, 20]))
def test_order_check_chooses_what_a_check_of_every_pass_from_the_top_chooses(
        rows, threshold) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from slurmpolicy.policy.priority import _reorder

    jobs = [SimpleNamespace(job_id=i, submit_time=float(submit))
            for i, (_, _, _, submit, _) in enumerate(rows, start=1)]
    effective = {j.job_id: r[0] for j, r in zip(jobs, rows, strict=True)}
    new = {j.job_id: r[1] for j, r in zip(jobs, rows, strict=True)}
    # Small values: many ties and many jobs whose site factor is not stale.
    cur = {j.job_id: (r[1] if r[2] % 3 == 0 else r[2]) for j, r in zip(jobs, rows, strict=True)}
    pre = {j.job_id for j, r in zip(jobs, rows, strict=True) if r[4]}
    order = sorted(jobs, key=lambda j: (-effective[j.job_id], j.submit_time, j.job_id))
    want, got = set(pre), set(pre)
    _reorder_every_pass_from_the_top(order, new, cur, effective, threshold, want)
    _reorder(jobs, new, cur, effective, threshold, got)  # type: ignore[arg-type]
    assert got == want


@pytest.mark.parametrize(("chains", "behind"), [
    ([62], 30), ([64], 30), ([100], 30),
    # Many jobs behind, chains side by side.
    ([64], 300), ([40, 40], 300), ([63, 2], 300), ([200], 300)])
def test_chains_of_drifted_leaders_are_raised_one_walk_each(
        chains: list[int], behind: int) -> None:
    """Each leader's stale site factor puts it just below the job it leads once
    that one is written: mending the last job of a chain raises the one before
    it, which then needs the one before it raised, and so on, a walk each
    (chains side by side are raised in the same walks). However many walks
    that takes, only the chains are written: the jobs behind them are in
    order already, stale or not."""
    from types import SimpleNamespace

    from slurmpolicy.policy.priority import _reorder

    cur: dict[int, int] = {}
    raised: set[int] = set()
    for length in chains:
        start = len(cur)
        # Slurm's key is effective - new + cur: leader k holds the key of job k+1, less one.
        cur.update({k: 1_000 - 11 for k in range(start, start + length)})
        raised.update(range(start, start + length))
        cur[start + length] = 1_000  # the last of the chain: at its policy key, out of order
    first_behind = len(cur)
    cur.update({k: 0 for k in range(first_behind, first_behind + behind)})  # in order
    jobs = [SimpleNamespace(job_id=i, submit_time=0.0) for i in range(len(cur))]
    effective = {j.job_id: 10_000 - 10 * j.job_id for j in jobs}
    new = dict.fromkeys(effective, 1_000)
    chosen: set[int] = set()
    _reorder(jobs, new, cur, effective, 1, chosen)  # type: ignore[arg-type]
    want: set[int] = set()
    _reorder_every_pass_from_the_top(jobs, new, cur, effective, 1, want)
    assert chosen == want
    assert chosen == raised
    assert len(raised) < len({k for k in effective if new[k] != cur[k]})


@pytest.mark.parametrize("held", ["each just ahead of the one before",
                                  "each just behind the one before"])
@pytest.mark.parametrize("length", [2, 62, 64, 100])
def test_leaders_within_the_threshold_come_up_one_walk_each(length: int, held: str) -> None:
    """Leaders within the threshold of one another (none leads another) all
    lead one job at its policy key, which Slurm holds ahead of them all: each
    must be raised. Held each just ahead of the one before, only the weakest
    is the first walk's to raise, and each walk after finds the next once the
    one before it is gone (the staircase forms again where a job went up);
    held each just behind the one before, every one is a step of the
    staircase, and only the last leads a job at its policy key within its
    span, which reaches further as each step after it goes up. Either way,
    ``length`` walks, and only the leaders are written: the stale jobs behind
    are in order."""
    from types import SimpleNamespace

    from slurmpolicy.policy.priority import _reorder

    threshold, new_value = 200, 200_000
    sign = 1 if held.startswith("each just ahead") else -1
    effective = {k: 100_000 - k for k in range(length)}
    # Slurm's priority is effective - new + cur: leader k at 1,000 + k (or - k).
    cur = {k: 1_000 + sign * k - effective[k] + new_value for k in range(length)}
    anchor = length
    effective[anchor] = 100_000 - length - threshold  # led by every leader
    cur[anchor] = new_value
    for k in range(anchor + 1, anchor + 31):  # behind them all in Slurm, in order, stale
        effective[k] = effective[anchor] - 10 * (k - anchor)
        cur[k] = 500 - k - effective[k] + new_value
    jobs = [SimpleNamespace(job_id=k, submit_time=0.0) for k in effective]
    new = dict.fromkeys(effective, new_value)
    chosen: set[int] = set()
    _reorder(jobs, new, cur, effective, threshold, chosen)  # type: ignore[arg-type]
    want: set[int] = set()
    _reorder_every_pass_from_the_top(jobs, new, cur, effective, threshold, want)
    assert chosen == want
    assert chosen == set(range(length))


@pytest.mark.parametrize("seed", range(4))
def test_deep_queues_of_drifted_chains_match_the_walks(seed: int) -> None:
    """Queues of a few hundred jobs made of chains of drifted leaders (some
    held just behind the job they lead, some anywhere below it), each ending
    at a job at its policy key, with jobs behind: many take more than 63
    walks. Each must equal the walks themselves (seeded, so that a failure is
    replayed as it was)."""
    import random
    from types import SimpleNamespace

    from slurmpolicy.policy.priority import _reorder

    rng = random.Random(seed)
    for _ in range(40):
        threshold = rng.choice([1, 1, 3])
        value, cur, effective = 50_000, {}, {}
        e, k = 1_000_000, 0
        for _chain in range(rng.randint(1, 6)):
            length = rng.choice([rng.randint(1, 20), rng.randint(40, 80), rng.randint(55, 130)])
            gap = rng.randint(2, 12)
            tight = rng.choice([1.0, 0.9, 0.7, 0.5])
            for _ in range(length):
                effective[k], e = e, e - gap
                # Just below the next one's key once it is written, or anywhere below.
                cur[k] = value - (gap + rng.randint(1, 3) if rng.random() < tight
                                  else rng.randint(1, 4 * gap))
                k += 1
            effective[k], cur[k], e, k = e, value, e - gap, k + 1  # at its policy key
            for _ in range(rng.randint(0, 40)):  # behind: some in order, some not
                effective[k] = e
                cur[k] = value - rng.choice([0, rng.randint(0, 3 * gap), rng.randint(0, 3_000)])
                e, k = e - rng.randint(0, 2 * gap), k + 1
        jobs = [SimpleNamespace(job_id=j, submit_time=float(rng.randint(0, 2))) for j in range(k)]
        new = dict.fromkeys(effective, value)
        pre = {j for j in effective if rng.random() < 0.01}
        order = sorted(jobs, key=lambda j: (-effective[j.job_id], j.submit_time, j.job_id))
        want, got = set(pre), set(pre)
        _reorder_every_pass_from_the_top(order, new, cur, effective, threshold, want)
        _reorder(jobs, new, cur, effective, threshold, got)  # type: ignore[arg-type]
        assert got == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(job_strategy, min_size=2, max_size=30), st.sampled_from([0, 50, 2000]),
       st.integers(1, 5))
def test_a_deep_queue_puts_the_policys_head_first(jobs, threshold, depth) -> None:  # type: ignore[no-untyped-def]
    """With ``priority.order_depth``, a queue deeper than twice it: once
    written, every job of the policy's first ``depth`` is ahead of every job
    it leads by the threshold, wherever Slurm held either; no job is written
    with the value it has; and cycles on the result write each job at most
    once, until one writes nothing."""
    s = msgspec.structs.replace(Settings(), priority=Priority(change_threshold=threshold,
                                                              order_depth=depth))
    b = ClusterBuilder(hosts=4, partitions={"p1": [1, 2, 3, 4]})
    known: dict[int, int] = {}
    for i, (cls, account, prio, waited, old, _) in enumerate(jobs, start=1):
        b.pend(i, account, admin_comment=d(cls) if cls else "", priority=prio + (old or 0),
               site_factor=old or 0, waited=waited, partition="p1")
        if old is not None:
            known[i] = old
    snap, fabric = b.snapshot(), b.fabric()
    by_id = {j.job_id: j for j in snap.jobs}
    holds = {j.job_id: known.get(j.job_id, j.site_factor) for j in snap.jobs}
    written_before: set[int] = set()
    for cycle in range(len(jobs) + 1):
        result = plan(snap, fabric, s, Intents(site_factors=dict(known)), b.now)
        written = {a.job_id: a.site_factor for a in result.actions
                   if isinstance(a, SetSiteFactor)}
        if not written:
            break
        assert not written.keys() & written_before, cycle
        written_before |= written.keys()
        for job_id, value in written.items():
            assert value != holds[job_id]
            holds[job_id] = known[job_id] = value
        if cycle:
            continue
        effective = result.effective_priority
        prio = {j.job_id: j.priority - j.site_factor + holds[j.job_id] for j in snap.jobs}

        order = sorted(prio, key=lambda i: (-effective[i], by_id[i].submit_time or 0, i))
        # A shallow queue is checked whole: every job counts as the head.
        head = order[:depth] if len(order) > 2 * depth else order
        for i in head:
            for k in order:
                if i != k and effective[i] >= effective[k] + max(1, threshold):
                    ahead = ((prio[i], -(by_id[i].submit_time or 0), -i)
                             > (prio[k], -(by_id[k].submit_time or 0), -k))
                    assert ahead, (i, k, effective[i], effective[k], prio[i], prio[k])
    else:
        raise AssertionError("the cycles did not settle")
