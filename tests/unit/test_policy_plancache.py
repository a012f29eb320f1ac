"""PlanCache: what one plan() hands the next changes no decision.

Plans over a sequence of snapshots that reuse some Job and Node records and
replace others (a job's directives, class, state; a node's use) must equal
the plans made without a cache; a cache kept across other Settings must not
answer for them."""

from dataclasses import replace

from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.context import PlanCache
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings, from_mapping


def cluster() -> ClusterBuilder:
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    for i in range(1, 7):
        b.run(100 + i, "team_b", hosts=[i], admin_comment=d("experimental", "USR1"),
              ran=7200.0)
    b.pend(1, "team_a", nodes=2, admin_comment=d("production"), waited=600.0)
    b.pend(2, "team_a", nodes=4, admin_comment=d("research"), waited=86400.0)
    b.pend(3, "team_c", admin_comment=d("experimental", "none"))
    b.pend(4, "team_c", reason="JobHeldUser")
    b.pend(5, "team_c", reason="Dependency")
    b.pend(6, "team_a", begin_time=b.now + 3600.0)
    return b


def test_plans_with_a_cache_equal_plans_without() -> None:
    b = cluster()
    settings = Settings()
    fabric = b.fabric()
    cache = PlanCache()
    with_cache = Intents()
    without = Intents()
    for step in range(6):
        now = b.now + 60.0 * step
        snapshot = b.snapshot(now)
        got = plan(snapshot, fabric, settings, with_cache, now, cache=cache)
        want = plan(snapshot, fabric, settings, without, now)
        assert got == want, f"step {step}"
        with_cache = apply_to_intents(with_cache, got, now)
        without = apply_to_intents(without, want, now)
        # Change some records between plans, keep the others (same objects).
        if step == 0:
            b.replace_job(3, admin_comment=d("production"))  # its class changes
        elif step == 1:
            b.replace_job(4, reason="Priority")  # released
        elif step == 2:
            b.replace_job(2, site_factor=12345, priority=99999)
        elif step == 3:
            b.jobs = [j for j in b.jobs if j.job_id != 101]  # a victim leaves
        elif step == 4:
            b.replace_job(5, reason="Resources", begin_time=None)
    assert cache.jobs  # it did keep something


def test_cache_follows_the_settings() -> None:
    b = cluster()
    fabric = b.fabric()
    snapshot = b.snapshot()
    cache = PlanCache()
    first = Settings()
    second = from_mapping({"classes": {
        "production": {"weight": 50, "rank": 3, "preemptible": False},
        "research": {"weight": 900_000, "rank": 2},
        "experimental": {"weight": 1, "rank": 1, "preemptible": True}}})
    plan(snapshot, fabric, first, Intents(), b.now, cache=cache)
    got = plan(snapshot, fabric, second, Intents(), b.now, cache=cache)
    assert got == plan(snapshot, fabric, second, Intents(), b.now)
    assert got != plan(snapshot, fabric, first, Intents(), b.now)


def test_set_priority_moves_the_record_and_what_was_derived_from_it() -> None:
    b = cluster()
    snapshot = b.snapshot()
    settings = Settings()
    cache = PlanCache()
    first = plan(snapshot, b.fabric(), settings, Intents(), b.now, cache=cache)
    job = next(j for j in snapshot.jobs if j.job_id == 2)
    before = replace(job)
    info = cache.jobs[2]
    assert info.job is job
    cache.set_priority(job, job.priority + 777)
    assert job.priority == before.priority + 777
    assert job == replace(before, priority=before.priority + 777)  # every other field kept
    assert cache.jobs[2] is info and info.job is job  # no second derivation
    assert info.slurm_base == job.priority - job.site_factor
    # Plans over the re-prioritised records equal plans made without a cache
    # (a fresh snapshot holding fresh records with that priority).
    got = plan(snapshot, b.fabric(), settings, Intents(), b.now, cache=cache)
    fresh = replace(snapshot, jobs=tuple(replace(j) for j in snapshot.jobs))
    assert got == plan(fresh, b.fabric(), settings, Intents(), b.now)
    assert got != first  # the priority moved what the plan does
