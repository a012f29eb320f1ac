"""Scenario tests: classes, fair share, aging, fragmentation bonus, site-factor output,
deferral. Small hand-made clusters; each checks the decision and its reason text."""

import itertools

import msgspec

from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import Intents, SetBeginTime, SetSiteFactor
from slurmpolicy.policy.fairshare import advance_usage, decay
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings, from_mapping


def site_factors(p):
    return {a.job_id: a for a in p.actions if isinstance(a, SetSiteFactor)}


def settings(**sections):
    return from_mapping(sections) if sections else Settings()


def test_class_weights_order_site_factors():
    b = ClusterBuilder(hosts=4)
    b.pend(1, "a", admin_comment=d("production"))
    b.pend(2, "a", admin_comment=d("research"))
    b.pend(3, "a", admin_comment=d("experimental"))
    b.pend(4, "a")  # no directive: default class research
    sf = site_factors(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert sf[1].site_factor > sf[2].site_factor > sf[3].site_factor
    assert sf[4].site_factor == sf[2].site_factor
    assert "class 100000" in sf[1].reason and "(production," in sf[1].reason


def test_unknown_class_falls_back_to_default_with_note():
    from slurmpolicy.policy import explain

    b = ClusterBuilder(hosts=2)
    b.pend(1, "a", admin_comment=d("gold"))
    e = explain(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, 1)
    assert e.job_class == "research"
    assert any("unknown class 'gold'" in n for n in e.notes)


def test_class_restricted_to_accounts():
    s = settings(classes={
        "production": {"weight": 100000, "rank": 3, "preemptible": False, "accounts": ["ops"]},
        "research": {"weight": 10000, "rank": 2}})
    b = ClusterBuilder(hosts=2)
    b.pend(1, "ops", admin_comment=d("production"))
    b.pend(2, "phd", admin_comment=d("production"))
    sf = site_factors(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    assert sf[1].site_factor >= 100000 > sf[2].site_factor


def test_fair_share_under_share_rises_over_share_falls():
    s = settings(fairshare={"shares": {"vision": 0.5, "nlp": 0.5}})
    b = ClusterBuilder(hosts=4)
    b.pend(1, "vision")
    b.pend(2, "nlp")
    intents = Intents(usage={"vision": 9e6, "nlp": 1e6}, usage_at=b.now)
    sf = site_factors(plan(b.snapshot(), b.fabric(), s, intents, b.now))
    assert sf[2].site_factor > sf[1].site_factor
    assert "account nlp: share 50%, usage 10% (under its share)" in sf[2].reason
    assert "account vision: share 50%, usage 90% (over its share)" in sf[1].reason


def test_fair_share_uses_current_allocation_without_history():
    b = ClusterBuilder(hosts=4)
    b.run(10, "big", hosts=[1, 2, 3])
    b.pend(1, "big")
    b.pend(2, "small")
    sf = site_factors(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert sf[2].site_factor > sf[1].site_factor


def test_usage_decays_with_half_life_and_grows_with_running_jobs():
    assert decay({"a": 100.0}, 0.0, 3600.0, 3600.0) == {"a": 50.0}
    b = ClusterBuilder(hosts=2)
    job = b.run(1, "a", hosts=[1], ran=7200)
    usage = advance_usage({}, b.now - 600, [job], b.now, 7 * 86400)
    # 8 GPUs x 600 s, barely decayed over 10 minutes.
    assert 4790 < usage["a"] <= 4800


def test_aging_raises_older_jobs():
    b = ClusterBuilder(hosts=2)
    b.pend(1, "a", waited=60)
    b.pend(2, "a", waited=10 * 3600)
    sf = site_factors(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert sf[2].site_factor - sf[1].site_factor >= 990
    assert "aging 1000" in sf[2].reason


#: The fragmentation bonus is off by default; these tests turn it on.
BONUS = {"aging": {"fragmentation_bonus_per_hour": 200.0}}


def test_fragmentation_bonus_for_jobs_blocked_only_by_fragmentation():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=2)
    # 4 GPUs free on each of the 4 hosts: 16 free, but no whole host.
    for i in range(1, 5):
        b.run(10 + i, "x", hosts=[i], gpus_per_node=4)
    b.pend(1, "a", nodes=1, gpus_per_node=8, waited=3600)   # blocked by fragmentation
    b.pend(2, "a", nodes=1, gpus_per_node=4, waited=3600)   # fits
    first = plan(b.snapshot(), b.fabric(), settings(**BONUS), Intents(), b.now)
    # The bonus counts from the cycle that first sees it blocked: 0 points yet.
    assert first.fragmented_since == {1: b.now}
    assert site_factors(first)[1].site_factor == site_factors(first)[2].site_factor
    later = b.now + 3600
    p = plan(b.snapshot(later), b.fabric(), settings(**BONUS),
             apply_to_intents(Intents(), first, b.now), later)
    assert p.effective_priority[1] - p.effective_priority[2] == 200
    from slurmpolicy.policy.explain import explain
    notes = explain(b.snapshot(later), b.fabric(), settings(**BONUS),
                    apply_to_intents(Intents(), first, b.now), later, 1).notes
    assert any("fragmentation bonus 200" in n for n in notes)


def test_fragmentation_bonus_is_kept_while_the_job_waits():
    """Once seen blocked by fragmentation alone, a job keeps its bonus when the
    free GPUs move (a full cluster, not a fragmented one): no Slurm call takes
    it back, and the journal's memory (Intents.fragmented_since) carries it."""
    b = ClusterBuilder(hosts=4, hosts_per_leaf=2)
    for i in range(1, 5):
        b.run(10 + i, "x", hosts=[i], gpus_per_node=4)
    b.pend(1, "a", nodes=1, gpus_per_node=8, waited=3600)
    b.pend(2, "a", nodes=1, gpus_per_node=4, waited=2.5 * 3600)  # fits: no bonus
    first = plan(b.snapshot(), b.fabric(), settings(**BONUS), Intents(), b.now)
    assert first.fragmented_since == {1: b.now}
    intents = apply_to_intents(Intents(), first, b.now)
    assert intents.fragmented_since == {1: b.now}
    # The free GPUs are taken: job 1 now waits for resources, not fragmentation.
    for i in range(1, 5):
        b.run(20 + i, "x", hosts=[i], gpus_per_node=4)
    later = b.now + 3600
    again = plan(b.snapshot(later), b.fabric(), settings(**BONUS), intents, later)
    assert again.fragmented_since == {1: b.now}
    # 2 h of aging and 1 h of bonus (400) stay ahead of job 2's 3.5 h of aging.
    assert again.effective_priority[1] - again.effective_priority[2] == 50
    # Without the memory the bonus would go (the flag that followed free GPUs),
    # and job 2 would overtake job 1.
    forgot = plan(b.snapshot(later), b.fabric(), settings(**BONUS),
                  Intents(site_factors=intents.site_factors), later)
    assert not forgot.fragmented_since
    assert forgot.effective_priority[2] - forgot.effective_priority[1] == 150
    # A hand-made plan leaves the memory as it is; a job that left drops from it.
    from slurmpolicy.policy.actions import Plan
    assert apply_to_intents(intents, Plan(), later).fragmented_since == {1: b.now}
    b.jobs = [j for j in b.jobs if j.job_id != 1]
    gone = plan(b.snapshot(later), b.fabric(), settings(**BONUS), intents, later)
    assert not gone.fragmented_since


def test_only_changes_above_threshold_are_emitted():
    b = ClusterBuilder(hosts=2)
    b.pend(1, "a")
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    value = site_factors(p)[1].site_factor
    assert "(new job)" in site_factors(p)[1].reason
    # A new job whose value Slurm already holds within the threshold: no call.
    b.replace_job(1, site_factor=value - 10)
    assert not site_factors(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    # A job the daemon set, alone in its partition: however far its value drifted,
    # no order changes, so no call (issue 13, finding 11).
    far = Intents(site_factors={1: value - 500})
    assert not site_factors(plan(b.snapshot(), b.fabric(), Settings(), far, b.now))


def test_drifts_that_change_no_order_cost_no_call_and_an_inversion_is_fixed():
    b = ClusterBuilder(hosts=2)
    b.pend(1, "a", admin_comment=d("production"))
    b.pend(2, "a", admin_comment=d("research"))
    b.pend(3, "b", admin_comment=d("experimental"))
    first = site_factors(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert set(first) == {1, 2, 3}
    set_ = {j: a.site_factor for j, a in first.items()}
    # Everyone drifted by a few hundred points (aging, usage): the order holds.
    drifted = Intents(site_factors={1: set_[1] - 300, 2: set_[2] + 400, 3: set_[3] - 200})
    assert not site_factors(plan(b.snapshot(), b.fabric(), Settings(), drifted, b.now))
    # Job 3's old value puts it ahead of job 2, which the policy ranks higher: only
    # the stale one is written, and it is the one that moved.
    inverted = Intents(site_factors={1: set_[1], 2: set_[2], 3: set_[2] + 5000})
    fix = site_factors(plan(b.snapshot(), b.fabric(), Settings(), inverted, b.now))
    assert set(fix) == {3} and fix[3].site_factor == set_[3]
    assert "its order against competing jobs changed" in fix[3].reason


def test_jobs_of_disjoint_partitions_do_not_compete():
    b = ClusterBuilder(hosts=4, partitions={"p1": [1, 2], "p2": [3, 4]})
    b.pend(1, "a", admin_comment=d("production"), partition="p1")
    b.pend(2, "a", admin_comment=d("experimental"), partition="p2")
    first = {j: a.site_factor for j, a in site_factors(
        plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)).items()}
    # Job 2 holds a far higher value than job 1, but they never meet: no call.
    apart = Intents(site_factors={1: first[1], 2: first[1] + 99_999})
    assert not site_factors(plan(b.snapshot(), b.fabric(), Settings(), apart, b.now))


def test_each_partition_is_ordered_by_its_own_jobs_priorities():
    """Several partitions: each list, its head and the order check's Slurm keys
    are its own jobs' (the one-partition case reads the whole queue's keys)."""
    from slurmpolicy.policy import priority
    from slurmpolicy.policy.context import Context

    b = ClusterBuilder(hosts=4, partitions={"p1": [1, 2], "p2": [3, 4]})
    b.pend(1, "a", admin_comment=d("production"), partition="p1")
    b.pend(2, "a", admin_comment=d("research"), partition="p1")
    b.pend(3, "a", admin_comment=d("experimental"), partition="p2")
    b.pend(4, "a", admin_comment=d("research"), partition="p2")
    b.pend(5, "a", admin_comment=d("production"), partition="p2")
    ctx = Context(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    result = priority.compute(ctx)
    assert [j.job_id for j in result.order["p1"]] == [1, 2]
    assert [j.job_id for j in result.order["p2"]] == [5, 4, 3]
    assert result.heads == {"p1": 1, "p2": 5}
    for part, jobs in result.order.items():
        assert result.order_keys[part] == [
            (-result.effective[j.job_id], j.submit_time or 0.0, j.job_id) for j in jobs]


def test_updates_capped_per_cycle_largest_first_deterministic():
    s = settings(priority={"max_updates_per_cycle": 3})
    b = ClusterBuilder(hosts=2)
    for i in range(1, 11):
        b.pend(i, "a", waited=i * 3600)
    p1 = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    p2 = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    got = [a.job_id for a in p1.actions if isinstance(a, SetSiteFactor)]
    assert got == [10, 9, 8]
    assert p1 == p2


def test_no_checkpoint_penalty():
    s = settings(priority={"no_checkpoint_penalty": 5000})
    b = ClusterBuilder(hosts=2)
    b.pend(1, "a", admin_comment=d("research", "USR1"))
    b.pend(2, "a", admin_comment=d("research", "none"))
    sf = site_factors(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    assert sf[1].site_factor - sf[2].site_factor == 5000
    assert "no-checkpoint penalty -5000" in sf[2].reason


# --- deferral ---------------------------------------------------------------------
NIGHT = {"deferral": {"windows": {"night": {"hours": [0, 1, 2, 3, 4, 5], "cost": 0.4}},
                      "idle_release_fraction": 0.25}}


def busy(b):
    b.run(50, "x", hosts=[1])
    b.run(51, "x", hosts=[2])


def test_deferrable_job_held_until_its_window():
    s = from_mapping(NIGHT)
    b = ClusterBuilder(hosts=2, now=1_800_000_000.0)  # 08:00 UTC
    busy(b)
    b.pend(1, "a", admin_comment=d("research", defer="night"))
    acts = [a for a in plan(b.snapshot(), b.fabric(), s, Intents(), b.now).actions
            if isinstance(a, SetBeginTime)]
    assert len(acts) == 1
    assert acts[0].begin_time == 1_800_057_600.0  # next 00:00 UTC
    assert "deferred to window 'night' (cost 0.4)" in acts[0].reason


def test_deferral_reads_the_jobs_priorities_listed_as_deferrable():
    """priority.compute lists the waiting jobs with a window as it walks the
    queue; deferral walks those alone, with the answer a walk of every
    waiting job gives."""
    from slurmpolicy.policy import deferral, priority
    from slurmpolicy.policy.context import Context

    s = from_mapping(NIGHT)
    b = ClusterBuilder(hosts=2, now=1_800_000_000.0)  # 08:00 UTC
    busy(b)
    for i in range(1, 9):
        b.pend(i, "a", admin_comment=d("research", defer="night") if i % 3 == 0
               else d("research"))
    ctx = Context(b.snapshot(), b.fabric(), s, Intents(), b.now)
    assert ctx.deferrable is None
    every = deferral.deferral_actions(ctx)
    priority.compute(ctx)
    assert [j.job_id for j in ctx.deferrable or ()] == [3, 6]
    assert deferral.deferral_actions(ctx) == every and [a.job_id for a in every] == [3, 6]


def test_deferral_never_past_deadline():
    s = from_mapping(NIGHT)
    b = ClusterBuilder(hosts=2, now=1_800_000_000.0)
    busy(b)
    b.pend(1, "a", waited=600, admin_comment=d("research", defer="night", deadline=3600))
    (act,) = [a for a in plan(b.snapshot(), b.fabric(), s, Intents(), b.now).actions
              if isinstance(a, SetBeginTime)]
    assert act.begin_time == b.now - 600 + 3600
    assert "until its deadline" in act.reason


def test_deferred_job_released_when_cluster_idle():
    s = from_mapping(NIGHT)
    b = ClusterBuilder(hosts=8, now=1_800_000_000.0)
    b.pend(1, "a", admin_comment=d("research", defer="night"), begin_time=1_800_057_600.0,
           reason="BeginTime")
    (act,) = [a for a in plan(b.snapshot(), b.fabric(), s, Intents(), b.now).actions
              if isinstance(a, SetBeginTime)]
    assert act.begin_time is None
    assert act.reason == "released: the cluster is idle (0 of 64 GPUs in use)"


def test_deferral_inside_window_needs_nothing_and_is_idempotent():
    s = from_mapping(NIGHT)
    b = ClusterBuilder(hosts=2, now=1_800_057_600.0 + 3600)  # 01:00 UTC
    busy(b)
    b.pend(1, "a", admin_comment=d("research", defer="night"))
    p = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    assert not [a for a in p.actions if isinstance(a, SetBeginTime)]
    b2 = ClusterBuilder(hosts=2, now=1_800_000_000.0)
    busy(b2)
    b2.pend(1, "a", admin_comment=d("research", defer="night"))
    first = plan(b2.snapshot(), b2.fabric(), s, Intents(), b2.now)
    again = plan(b2.snapshot(), b2.fabric(), s, apply_to_intents(Intents(), first, b2.now), b2.now)
    assert not [a for a in again.actions if isinstance(a, SetBeginTime)]


def test_settings_defaults_round_trip():
    s = Settings()
    assert msgspec.convert(msgspec.to_builtins(s), Settings) == s


def test_no_fragmentation_memory_while_the_bonus_is_off():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=2)
    for i in range(1, 5):
        b.run(10 + i, "x", hosts=[i], gpus_per_node=4)
    b.pend(1, "a", nodes=1, gpus_per_node=8, waited=3600)  # blocked by fragmentation
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert Settings().aging.fragmentation_bonus_per_hour == 0
    assert p.fragmented_since == {}
    assert "fragmentation" not in site_factors(p)[1].reason


def test_site_factors_past_the_call_budget_are_held_back_not_built() -> None:
    """The plan leaves out the site factors whose call lies past
    ``daemon.max_slurm_calls_per_cycle`` (each job here gets its own value: one
    call each), counts them, and keeps the very ones the executor would write
    from the uncut plan: the largest changes."""
    from slurmpolicy.settings import Daemon

    b = ClusterBuilder(hosts=2)
    for i in range(1, 11):
        b.pend(i, "a", waited=i * 3600)
    free = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    tight = plan(b.snapshot(), b.fabric(), Settings(daemon=Daemon(max_slurm_calls_per_cycle=3)),
                 Intents(), b.now)
    every = [a for a in free.actions if isinstance(a, SetSiteFactor)]
    assert len({a.site_factor for a in every}) == 10 and free.held_back == 0
    assert [a for a in tight.actions if isinstance(a, SetSiteFactor)] == every[:3]
    assert tight.held_back == 7


def test_site_factors_within_follows_the_executors_batches() -> None:
    """Values in the order they first come, a call per batch of at most
    SITE_FACTOR_BATCH jobs of one value: a later job of a value already
    written rides in its call."""
    from slurmpolicy.policy.actions import SITE_FACTOR_BATCH, site_factors_within

    value = {1: 500, 2: 700, 3: 500, 4: 900, 5: 700, 6: 11}
    ids = [1, 2, 3, 4, 5, 6]
    assert site_factors_within(ids, value, 4) == ids
    assert site_factors_within(ids, value, 2) == [1, 2, 3, 5]
    assert site_factors_within(ids, value, 1) == [1, 3]
    assert site_factors_within(ids, value, 0) == []
    # One value over a batch: its second batch is the second call, before the next value.
    many = [*range(100, 101 + SITE_FACTOR_BATCH), 7]
    value = dict.fromkeys(many, 5) | {7: 6}
    assert site_factors_within(many, value, 1) == many[:SITE_FACTOR_BATCH]
    assert site_factors_within(many, value, 2) == many[:-1]
    assert site_factors_within(many, value, 3) == many


def test_fragmented_is_judged_per_time_limit_where_a_reservation_lies_ahead():
    """Two jobs of one shape, one short enough to finish before a reservation
    that starts on the free host later, one not: the short one fits now (not
    fragmented), the long one sees 4 + 4 free GPUs and no host with 6
    (fragmented). The shape alone does not decide it. Asked where a rule
    reads it: with the fragmentation bonus on, and for a job of
    ``large_job_gpus`` or more (starvation reservations) without it."""
    from slurmpolicy.model import Reservation
    from slurmpolicy.policy import priority
    from slurmpolicy.policy.context import Context

    readers = (settings(aging={"fragmentation_bonus_per_hour": 100.0}),
               settings(reservations={"large_job_gpus": 6}))
    for (first, second), rules in itertools.product(((1, 2), (2, 1)), readers):
        b = ClusterBuilder(hosts=3, gpus=8)
        b.run(101, hosts=[2], gpus_per_node=4)
        b.run(102, hosts=[3], gpus_per_node=4)
        limits = {1: 300.0, 2: 7200.0}
        for job_id in (first, second):
            b.pend(job_id, gpus_per_node=6, time_limit=limits[job_id])
        b.reservations = [Reservation(name="maint", nodes=(b.host(1),),
                                      start_time=b.now + 600, end_time=b.now + 7200)]
        ctx = Context(b.snapshot(), b.fabric(), rules, Intents(), b.now)
        frag = priority.compute(ctx).fragmented
        assert not frag.get(1) and frag.get(2), (first, second, rules)


def _job_1_low_job_10_up(held: dict[int, int]) -> None:
    """Job 1 held far below them all, job 10 a little above job 9."""
    held[1] -= 2000
    held[10] = held[9] + 50


def _replan(depth: int, threshold: int = 50, drift=_job_1_low_job_10_up):  # type: ignore[no-untyped-def]
    """Twelve jobs of one partition, an hour of aging (100 points) apart (job
    1 the policy's first), each holding the site factor the daemon wrote
    (the first cycle's), then moved by ``drift``: the first cycle's writes
    and the plan of the cycle after, with ``priority.order_depth`` =
    ``depth`` and ``priority.change_threshold`` = ``threshold``."""
    s = settings(priority={"order_depth": depth, "change_threshold": threshold})
    b = ClusterBuilder(hosts=2)
    for i in range(1, 13):
        b.pend(i, "a", waited=(20 - i) * 3600, priority=1000)
    first = site_factors(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    held = {i: a.site_factor for i, a in first.items()}
    assert sorted(held) == list(range(1, 13))
    drift(held)
    b = ClusterBuilder(hosts=2)
    for i in range(1, 13):
        b.pend(i, "a", waited=(20 - i) * 3600, priority=1000 + held[i], site_factor=held[i])
    return first, site_factors(plan(b.snapshot(), b.fabric(), s,
                                    Intents(site_factors=held), b.now))


def _drifted_queue(depth: int, threshold: int = 50):  # type: ignore[no-untyped-def]
    """:func:`_replan`'s second plan, job 1 held low and job 10 a little up."""
    return _replan(depth, threshold)[1]


def test_a_queue_deeper_than_twice_the_order_depth_is_checked_at_its_head():
    whole = _drifted_queue(0)
    assert sorted(whole) == [1, 10]
    assert "its order against competing jobs changed" in whole[1].reason
    head = _drifted_queue(2)
    # Job 10 is out of order against job 9 only, deeper than either order's
    # first two (and than the jobs Slurm holds at or above them): left alone.
    assert sorted(head) == [1]
    assert "among the first 2 of the policy's order, held below" in head[1].reason
    # Six jobs or fewer deep is checked whole: depth 6 sees job 10 again.
    assert sorted(_drifted_queue(6)) == [1, 10]


def test_a_job_of_the_head_held_below_every_job_checked_is_lifted():
    """Jobs 1 to 3 are checked (the head of two, and job 3, which Slurm ranks
    second), within the threshold of one another: no order among them to
    mend. But Slurm holds job 1 behind jobs 4 to 12, which it leads by the
    threshold from job 6 on: lifted to its policy value."""
    head = _drifted_queue(2, threshold=500)
    assert sorted(head) == [1]
    assert "among the first 2 of the policy's order, held below" in head[1].reason
    # The whole check writes job 10 as well: stale, and ahead of job 1, which
    # leads it (the check's first walk does not know yet that job 1 goes up).
    assert sorted(_drifted_queue(0, threshold=500)) == [1, 10]


def test_the_floor_is_no_higher_than_the_heads_last_policy_priority():
    """Jobs 11 and 12, last in the policy's order, are held highest of all,
    so Slurm's second priority is far above the head's (jobs 1 and 2). Job
    5 is held above the head too, though the policy ranks it third from
    the head's end. Were the floor Slurm's second priority alone, job 5
    would be left out of the check and stay ahead of the head; at the
    lower of the two, it is checked and written down."""
    def drift(held: dict[int, int]) -> None:
        held[11] += 2000
        held[12] += 1900
        held[5] += 600  # above jobs 1 and 2 at their policy values, below 11 and 12

    first, written = _replan(2, drift=drift)
    assert {5, 11, 12} <= set(written)
    assert all(written[i].site_factor == first[i].site_factor for i in (5, 11, 12))
