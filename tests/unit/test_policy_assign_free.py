"""Who Slurm would start on the free GPUs now (Context.assign_free): a shape
that found no room is not asked again further down the queue, except where
a job's own reservations give it hosts the others do not have."""

from __future__ import annotations

from slurmpolicy.model import Reservation
from slurmpolicy.policy import priority
from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.context import Context
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.settings import Settings


def _starts(b: ClusterBuilder) -> set[int]:
    ctx = Context(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    ctx.assign_free(priority.compute(ctx).slurm_order())
    return set(ctx.starts_on_free or ())


def _starts_and_fit_tests(b: ClusterBuilder) -> tuple[set[int], list[int]]:
    """The jobs assign_free starts, and those it asked a fit test of, in order."""
    asked: list[int] = []
    ctx = Context(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    take = ctx._take_free

    def counted(job):  # type: ignore[no-untyped-def]
        asked.append(job.job_id)
        return take(job)

    ctx._take_free = counted  # type: ignore[method-assign]
    ctx.assign_free(priority.compute(ctx).slurm_order())
    return set(ctx.starts_on_free or ()), asked


def test_the_owner_of_a_reservation_ahead_starts_where_its_twin_may_not() -> None:
    # gpu01 busy, gpu02 free but ours for job 11 in ten minutes. Jobs 10 and
    # 11 are one shape, one user, one limit: 10 (higher) may not start there
    # (its hour would run into the reservation); 11 may, it is its own.
    b = ClusterBuilder(hosts=2, gpus=8)
    b.run(1, hosts=[1])
    b.pend(10, user="u", priority=2000)
    b.pend(11, user="u", priority=1000)
    b.reservations = [Reservation(name="spolicy_job_11", nodes=(b.host(2),),
                                  start_time=b.now + 600, end_time=b.now + 7800)]
    assert _starts(b) == {11}


def test_a_user_let_into_a_reservation_ahead_starts_where_another_may_not() -> None:
    # gpu02 is free but MAGNETIC for user "in" from ten minutes on: job 10 of
    # "out" (higher) may not start there, job 11 of "in", of one shape and
    # limit with it, may.
    b = ClusterBuilder(hosts=2, gpus=8)
    b.run(1, hosts=[1])
    b.pend(10, user="out", priority=2000)
    b.pend(11, user="in", priority=1000)
    b.reservations = [Reservation(name="team", nodes=(b.host(2),), start_time=b.now + 600,
                                  end_time=b.now + 7800, flags=frozenset({"MAGNETIC"}),
                                  users=("in",))]
    assert _starts(b) == {11}


def test_a_shape_that_found_no_room_is_not_asked_again() -> None:
    # Three free GPUs on each host: the 4-GPU jobs fit nowhere (six free in
    # all, so the count does not skip them), the 2-GPU one does.
    b = ClusterBuilder(hosts=2, gpus=8)
    b.run(1, hosts=[1], gpus_per_node=5)
    b.run(2, hosts=[2], gpus_per_node=5)
    for job_id, prio in ((10, 5000), (11, 4000), (12, 3000)):
        b.pend(job_id, gpus_per_node=4, priority=prio)
    b.pend(13, gpus_per_node=2, priority=1000)
    starts, asked = _starts_and_fit_tests(b)
    assert starts == {13}
    assert asked == [10, 13]  # 11 and 12 are 10's shape: not asked again


def test_jobs_slurm_holds_back_take_no_free_gpus() -> None:
    # One host free. The four highest jobs may not start whatever is free:
    # held, waiting on a dependency, over a QOS limit, or with a begin time
    # ahead; the free GPUs are the fifth's.
    b = ClusterBuilder(hosts=2, gpus=8)
    b.run(1, hosts=[1])
    b.pend(10, priority=5000, reason="JobHeldUser")
    b.pend(11, priority=4000, reason="Dependency", dependency="afterok:1")
    b.pend(12, priority=3000, reason="QOSMaxGRESPerUser")
    b.pend(13, priority=2000, begin_time=b.now + 3600)
    b.pend(14, priority=1000)
    assert _starts(b) == {14}


def test_once_the_gpus_anyone_may_take_are_gone_only_jobs_with_hosts_of_their_own_are_asked(
) -> None:
    # gpu01 busy; gpu03 has two free GPUs, which job 10 (highest) takes;
    # gpu02 is free but inside our starvation reservation for job 12. After
    # job 10, no GPU anyone may take is left: the 1-GPU job 11 is passed over
    # without a fit test, and job 12, far down, still starts on its own host.
    b = ClusterBuilder(hosts=3, gpus=8)
    b.run(1, hosts=[1])
    b.run(2, hosts=[3], gpus_per_node=6)
    b.pend(10, gpus_per_node=2, priority=5000)
    b.pend(11, gpus_per_node=1, priority=4000)
    b.pend(12, gpus_per_node=8, priority=1000)
    b.reservations = [Reservation(name="spolicy_job_12", nodes=(b.host(2),),
                                  start_time=b.now - 60, end_time=b.now + 7200,
                                  flags=frozenset({"MAGNETIC"}), users=("u",))]
    starts, asked = _starts_and_fit_tests(b)
    assert starts == {10, 12}
    assert asked == [10, 12]
