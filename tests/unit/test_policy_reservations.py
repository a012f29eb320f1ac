"""Scenario tests: starvation reservations (create, place, update, delete, never others')."""

from slurmpolicy.model import Reservation
from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import (
    Annotate,
    CreateReservation,
    DeleteReservation,
    Intents,
    ReservationIntent,
    UpdateReservation,
)
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings, from_mapping
from slurmpolicy.topology.types import Level

# research everywhere: no preemption in these scenarios.
RES = d("research", "USR1")
#: Most scenarios here are of the rule for jobs that waited, which is off by
#: default (reservations.reserve_after_wait).
WAITED = {"reserve_after_wait": True}


def settings(**reservations: object) -> Settings:
    return from_mapping({"reservations": {**WAITED, **reservations}})


def of(p, kind):
    return [a for a in p.actions if isinstance(a, kind)]


def staggered(b, ends):
    """One whole-host job per host; host i ends after ends[i-1] seconds."""
    for i, left in enumerate(ends, start=1):
        b.run(100 + i, "r", hosts=[i], ran=3600, time_limit=3600 + left, admin_comment=RES)


def test_starving_large_job_gets_the_set_that_frees_earliest():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    staggered(b, [7200, 600, 7200, 1200, 7200, 7200, 7200, 7200])
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now), CreateReservation)
    assert create.name == "spolicy_job_1" and create.job_id == 1
    assert create.nodes == ("gpu02", "gpu04")
    assert create.start_time == b.now + 1200
    assert create.duration == 4 * 3600
    assert create.reason == (
        "reserve for job 1 (16 GPUs) is starving: it has waited 2h00m (threshold 1h00m); "
        "2 node(s) free earliest at +20m after the end of job(s) 102, 104 (time limit) in 20m")


def test_expected_runtime_directive_counts_before_time_limit():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    staggered(b, [7200, 7200, 7200, 7200])
    b.replace_job(103, admin_comment=d("research", "USR1", runtime=3600 + 900))
    b.replace_job(101, admin_comment=d("research", "USR1", runtime=3600 + 300))
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now), CreateReservation)
    assert create.nodes == ("gpu01", "gpu03") and create.start_time == b.now + 900
    assert "(expected runtime)" in create.reason


def test_topology_strict_keeps_the_set_in_one_leaf():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    # The two earliest hosts are in different leaves; leaf2 frees two at 30m.
    staggered(b, [600, 7200, 7200, 7200, 1200, 1800, 7200, 7200])
    b.pend(1, "big", nodes=2, waited=2 * 3600,
           admin_comment=d("research", "USR1", topology="leaf", strict=True))
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now), CreateReservation)
    assert create.nodes == ("gpu05", "gpu06") and create.start_time == b.now + 1800
    fab = b.fabric()
    assert len({fab.domain_of(h, Level.LEAF) for h in create.nodes}) == 1


def test_gpu_type_and_data_locality():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    b.gpu_types = {"gpu01": "a100"}
    b.features = {"gpu04": ("data_imagenet",)}
    staggered(b, [60, 600, 600, 600])
    b.pend(1, "big", nodes=1, gpus_per_node=8, waited=3 * 3600,
           admin_comment=d("research", "USR1", gpu_type="h100", data="imagenet"))
    s = settings(large_job_gpus=8)
    (create,) = of(plan(b.snapshot(), b.fabric(), s, Intents(), b.now), CreateReservation)
    # gpu01 (a100) frees first but is the wrong type; gpu02-04 tie: the data host wins.
    assert create.nodes == ("gpu04",)


def test_heads_partition_and_fragmented_gets_reservation_without_waiting():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    for i in range(1, 5):
        b.run(100 + i, "r", hosts=[i], gpus_per_node=4, time_limit=3600 + 600 * i,
              admin_comment=RES)
    b.pend(1, "big", nodes=2, waited=60, admin_comment=RES)  # 16 free in 4s: fragmented
    # The default settings: this rule does not need reserve_after_wait.
    (create,) = of(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now), CreateReservation)
    assert "it heads its partition but free GPUs are fragmented" in create.reason
    assert create.nodes == ("gpu01", "gpu02")


def test_by_default_a_wait_alone_earns_no_reservation():
    # Slurm's backfill already plans a start for every job it tests; a
    # reservation for a large job that only waited long would put it ahead of
    # smaller jobs of higher priority. reservations.reserve_after_wait turns
    # the rule on (the scenario of the first test).
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    staggered(b, [7200, 600, 7200, 1200, 7200, 7200, 7200, 7200])
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    assert not of(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now),
                  CreateReservation)
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now),
                   CreateReservation)
    assert create.job_id == 1 and "it has waited 2h00m" in create.reason


def test_turning_the_rule_off_still_deletes_what_it_made():
    # A reservation the journal holds from when the rule was on is still
    # deleted by the usual rules (here: its job left the queue).
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    staggered(b, [7200, 600, 7200, 1200, 7200, 7200, 7200, 7200])
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    intents = apply_to_intents(Intents(), plan(b.snapshot(), b.fabric(), settings(), Intents(),
                                               b.now), b.now)
    assert [r.job_id for r in intents.reservations] == [1]
    b.jobs = [j for j in b.jobs if j.job_id != 1]
    (delete,) = of(plan(b.snapshot(), b.fabric(), Settings(), intents, b.now), DeleteReservation)
    assert delete.job_id == 1 and "left the queue" in delete.reason


def test_small_or_fresh_jobs_get_none():
    b = ClusterBuilder(hosts=4)
    staggered(b, [600] * 4)
    b.pend(1, "a", nodes=1, waited=5 * 3600, admin_comment=RES)    # small
    b.pend(2, "a", nodes=2, waited=60, admin_comment=RES)          # fresh, not fragmented
    assert not of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now),
                  CreateReservation)


def test_update_only_when_the_start_moves_beyond_threshold_and_idempotent():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    staggered(b, [600, 1200, 7200, 7200])
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    p1 = plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now)
    intents = apply_to_intents(Intents(), p1, b.now)
    b.reservations = [Reservation(name="spolicy_job_1", nodes=("gpu01", "gpu02"),
                                  start_time=b.now + 1200, end_time=b.now + 1200 + 4 * 3600)]
    again = plan(b.snapshot(), b.fabric(), settings(), intents, b.now)
    assert not of(again, CreateReservation) and not of(again, UpdateReservation)
    # Job 102 now expected to run 2 more hours: the start moves by far more than 5m.
    b.replace_job(102, time_limit=3600 + 7200 + 600)
    b.replace_job(103, time_limit=3600 + 1500)
    moved = plan(b.snapshot(), b.fabric(), settings(), intents, b.now)
    (upd,) = of(moved, UpdateReservation)
    assert upd.nodes == ("gpu01", "gpu03") and upd.start_time == b.now + 1500
    assert upd.reason.startswith("move reservation (start 20m -> 25m)")


def test_delete_when_started_or_left_and_never_touch_others():
    b = ClusterBuilder(hosts=4)
    staggered(b, [600, 1200, 7200, 7200])
    b.reservations = [
        Reservation(name="maint", nodes=("gpu03",), start_time=b.now + 86400),
        Reservation(name="spolicy_job_7", nodes=("gpu01",), start_time=b.now + 600),
    ]
    intents = Intents(reservations=(
        ReservationIntent("spolicy_job_7", 7, ("gpu01",), b.now + 600, 3600),))
    p = plan(b.snapshot(), b.fabric(), settings(), intents, b.now)
    (dele,) = of(p, DeleteReservation)
    assert dele.name == "spolicy_job_7"
    assert dele.reason == "reservation spolicy_job_7 deleted: job 7 left the queue"
    b.run(7, "big", hosts=[4], ran=10, admin_comment=RES)
    p = plan(b.snapshot(), b.fabric(), settings(), intents, b.now)
    assert [a.reason for a in of(p, DeleteReservation)] == [
        "reservation spolicy_job_7 deleted: job 7 started"]


def test_a_reservation_no_intent_knows_is_never_deleted_even_with_our_prefix():
    """The prefix alone does not make a reservation ours (issue 13, finding 3):
    an admin's ``spolicy_job_9`` is left alone; ours end by their duration."""
    b = ClusterBuilder(hosts=2)
    b.reservations = [Reservation(name="spolicy_job_9", nodes=("gpu01",)),
                      Reservation(name="maint", nodes=("gpu02",)),
                      Reservation(name="other_spolicy_job_1", nodes=("gpu02",))]
    p = plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now)
    assert of(p, DeleteReservation) == []


def test_foreign_reservation_hosts_are_avoided():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    staggered(b, [600, 1200, 1800, 7200])
    b.reservations = [Reservation(name="maint", nodes=("gpu01",), start_time=b.now + 3600,
                                  end_time=b.now + 7200)]
    b.pend(1, "big", nodes=2, waited=2 * 3600, admin_comment=RES)
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now), CreateReservation)
    assert "gpu01" not in create.nodes and create.nodes == ("gpu02", "gpu03")


def test_no_placement_at_all_is_annotated():
    b = ClusterBuilder(hosts=2)
    staggered(b, [600, 600])
    b.pend(1, "big", nodes=4, waited=2 * 3600, admin_comment=RES)
    p = plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now)
    assert not of(p, CreateReservation)
    (note,) = [a for a in of(p, Annotate) if a.reason.startswith("no reservation")]
    assert note.reason.startswith("no reservation for job 1 (it has waited 2h00m")


def test_searches_capped_per_cycle():
    s = settings(max_per_cycle=2)
    b = ClusterBuilder(hosts=16, hosts_per_leaf=4)
    staggered(b, [600 * i for i in range(1, 17)])
    for j in range(1, 6):
        b.pend(j, "big", nodes=2, waited=2 * 3600 + j, admin_comment=RES)
    p = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    assert len(of(p, CreateReservation)) == 2
    # The two reservations never share a host.
    a, c = of(p, CreateReservation)
    assert not set(a.nodes) & set(c.nodes)


def test_held_jobs_do_not_take_the_head_of_the_partition():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    for i in range(1, 5):
        b.run(100 + i, "r", hosts=[i], gpus_per_node=4, time_limit=3600 + 600 * i,
              admin_comment=RES)
    b.pend(5, "big", nodes=1, waited=9000, reason="JobHeldUser", admin_comment=RES)
    b.pend(1, "big", nodes=2, waited=60, admin_comment=RES)
    (create,) = of(plan(b.snapshot(), b.fabric(), settings(), Intents(), b.now), CreateReservation)
    assert create.job_id == 1


def test_forecasts_are_shared_by_shape_but_not_across_own_reservations():
    """plan() asks forecast() once per shape and hosts; a job's own active
    reservation opens hosts to it alone, so it is never answered from another
    job's forecast."""
    from slurmpolicy.policy.context import Context
    from slurmpolicy.policy.reservations import forecast

    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    staggered(b, [600, 1200, 7200, 7200])
    b.pend(1, "big", nodes=1, admin_comment=RES)
    b.pend(2, "big", nodes=1, admin_comment=RES)
    b.reservations.append(Reservation(name="spolicy_job_2", nodes=("gpu01",),
                                      start_time=b.now - 60, end_time=b.now + 3600))
    ctx = Context(b.snapshot(), b.fabric(), settings(), Intents(), b.now)
    one, again = forecast(ctx, ctx.by_id[1]), forecast(ctx, ctx.by_id[1])
    assert again is one and one.hosts == ("gpu02",) and one.start == b.now + 1200
    two = forecast(ctx, ctx.by_id[2])
    assert two.hosts == ("gpu01",) and two.start == b.now + 600
    assert forecast(ctx, ctx.by_id[1], {"gpu02"}).hosts == ("gpu03",)


def test_competing_starving_jobs_keep_their_reservations_on_the_next_plan():
    # Hosts gpu03, gpu04 and gpu05 all free in 10 minutes. The older starving
    # job chooses first, the younger one takes another host. Planned again with
    # both reservations in the intents, neither moves: the older job must not
    # see the younger job's reservation as blocking, which would change its
    # choice among equally early hosts (found by the property test).
    b = ClusterBuilder(hosts=5, gpus=4, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=600, time_limit=600 + 7200, admin_comment=RES)
    b.run(102, "r", hosts=[2], ran=600, time_limit=600 + 7200, admin_comment=RES)
    b.run(103, "r", hosts=[3], ran=600, time_limit=600 + 600, admin_comment=RES)
    b.run(106, "r", hosts=[4, 5], ran=600, time_limit=600 + 600, admin_comment=RES)
    b.pend(1, "older", nodes=1, waited=3 * 3600, admin_comment=RES)
    b.pend(2, "younger", nodes=1, waited=2 * 3600, admin_comment=RES)
    s = settings(large_job_gpus=4)
    snap, fab = b.snapshot(), b.fabric()
    first = plan(snap, fab, s, Intents(), b.now)
    creates = {a.job_id: a for a in of(first, CreateReservation)}
    assert set(creates) == {1, 2}
    assert not set(creates[1].nodes) & set(creates[2].nodes)
    second = plan(snap, fab, s, apply_to_intents(Intents(), first, b.now), b.now)
    assert not of(second, CreateReservation) and not of(second, UpdateReservation), second
