"""The simulated Slurm on tiny hand-made traces: backfill, preemption, checkpoints."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import pytest

from slurmpolicy.sim import Hosts, replay
from slurmpolicy.sim.driver import PolicyDriver
from slurmpolicy.sim.engine import DONE, RawResult, Simulator, SlurmModel
from slurmpolicy.sim.trace import SyntheticSpec, TraceJob, TraceRules, generate


def job(job_id: int, submit: float, gpus: int, duration: float, limit: float,
        cls: str = "research", save: float = 5.0, nodes: int = 1,
        requeues_itself: bool = True) -> TraceJob:
    return TraceJob(job_id=job_id, submit=submit, duration=duration, nodes=nodes,
                    gpus_per_node=gpus, account="acct", job_class=cls, time_limit=limit,
                    ckpt_interval=1800.0, save_time=save, restore_time=60.0,
                    requeues_itself=requeues_itself)


def run(trace: list[TraceJob], mode: str, hosts: int = 1, **slurm: float) -> Simulator:
    sim = Simulator(trace, Hosts.layout(hosts, 8, hosts_per_leaf=2), mode,
                    slurm=SlurmModel(**slurm))  # type: ignore[arg-type]
    sim.run()
    assert all(j.state == DONE for j in sim.jobs)
    return sim


def test_backfill_never_delays_the_head_job() -> None:
    trace = [
        job(1, 0, 4, 1000, 1000),      # runs 0..1000
        job(2, 10, 8, 500, 1000),      # head: needs the whole host at 1000
        job(3, 20, 4, 100, 2000),      # fits now but its limit passes 1000: must wait
        job(4, 30, 4, 400, 500),       # fits now and ends before 1000: backfilled
    ]
    sim = run(trace, "slurm-grace")
    j = sim.by_id
    assert j[2].first_start == 1000.0
    assert j[4].first_start is not None and j[4].first_start < 1000.0
    assert j[4].end is not None and j[4].end <= 1000.0
    assert j[3].first_start is not None and j[3].first_start >= 1500.0


def test_slurm_requeue_loses_the_work_since_the_last_periodic_checkpoint() -> None:
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental"),
             job(2, 4000, 8, 100, 3600, cls="production")]
    sim = run(trace, "slurm-requeue")
    victim, high = sim.by_id[1], sim.by_id[2]
    # Preempted at the next backfill pass after the production job arrived
    # (bf_interval 30: 4020); last checkpoint at 3600 s.
    assert victim.preemptions == 1
    assert victim.lost_work == pytest.approx(4020 - 3600)
    # Started by that pass or the main scheduler 1 s later (requeue_latency).
    assert high.first_start == pytest.approx(4020.5, abs=0.5)
    # Restarts after the production job: restore 60 s, then the rest.
    assert victim.end == pytest.approx(high.first_start + 100 + 60 + 10_000 - 3600)


def test_preemption_latency_follows_bf_interval() -> None:
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental"),
             job(2, 4001, 8, 100, 3600, cls="production")]
    slow = run(trace, "slurm-requeue", bf_interval=300.0).by_id[2]
    fast = run(trace, "slurm-requeue", bf_interval=1.0).by_id[2]
    assert slow.first_start == pytest.approx(4200.5, abs=0.5)
    assert fast.first_start == pytest.approx(4001.5, abs=0.5)


def test_slurm_grace_save_within_grace_loses_nothing() -> None:
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=5.0),
             job(2, 4000, 8, 100, 3600, cls="production")]
    sim = run(trace, "slurm-grace")
    victim, high = sim.by_id[1], sim.by_id[2]
    assert victim.preemptions == 1
    assert victim.lost_work == 0.0
    assert high.first_start == pytest.approx(4020 + 5 + 0.5, abs=0.5)
    # The victim's GPUs sat in grace for its save; the beneficiary waited
    # save + requeue after its victim was signalled.
    assert victim.grace_idle == pytest.approx(5.0)
    assert sim.benefit_delays == [pytest.approx(5 + 0.5, abs=0.5)]


def test_slurm_grace_save_longer_than_grace_loses_work() -> None:
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=60.0),
             job(2, 4000, 8, 100, 3600, cls="production")]
    sim = run(trace, "slurm-grace", grace_time=30.0)
    victim, high = sim.by_id[1], sim.by_id[2]
    assert victim.lost_work == pytest.approx(4020 - 3600)
    assert high.first_start == pytest.approx(4020 + 30 + 0.5, abs=0.5)


def test_production_is_never_a_victim_and_equal_tiers_do_not_preempt() -> None:
    trace = [job(1, 0, 8, 5000, 6000, cls="production"),
             job(2, 100, 8, 100, 3600, cls="production"),
             job(3, 200, 8, 100, 3600, cls="research")]
    sim = run(trace, "slurm-requeue")
    assert sum(j.preemptions for j in sim.jobs) == 0
    assert sim.by_id[2].first_start == 5000.0


def test_multi_node_jobs_are_placed_within_one_leaf_when_possible() -> None:
    # 4 hosts, 2 per leaf; a 1-GPU job on the first host leaves leaf2 whole.
    trace = [job(1, 0, 1, 1000, 3600), job(2, 10, 8, 100, 3600, nodes=2)]
    sim = run(trace, "slurm-grace", hosts=4)
    assert sim.multi == [1, 1, 0]


def test_replay_is_deterministic_for_a_seed() -> None:
    trace = generate(SyntheticSpec(jobs=400, seed=5, mean_interarrival=60),
                     TraceRules(seed=5))
    hosts = Hosts.layout(8, 8, hosts_per_leaf=4)
    a = replay(trace, hosts, "slurm-grace")[1]
    b = replay(trace, hosts, "slurm-grace")[1]
    for volatile in ("wall_seconds", "cpu_seconds", "cpu_parts", "plan_steps", "peak_rss_mb"):
        a.pop(volatile), b.pop(volatile)
    assert a == b
    assert a["completed"] == 400
    assert a["preemptions"] > 0


def test_slurmpolicy_checkpoint_first_preemption_loses_no_work_beyond_the_save() -> None:
    """A victim that does not requeue itself (no ``ckpt ack --requeue``)."""
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=60.0,
                 requeues_itself=False),
             job(2, 4000, 8, 100, 3600, cls="production")]
    sim = Simulator(trace, Hosts.layout(1, 8, hosts_per_leaf=2), "slurmpolicy",
                    daemon=PolicyDriver)
    seen: list[str] = []
    apply = sim.driver.apply

    def record(action: object, now: float) -> None:
        seen.append(type(action).__name__ + ":" + str(getattr(action, "after", "")))
        apply(action, now)  # type: ignore[arg-type]

    sim.driver.apply = record  # type: ignore[method-assign]
    sim.run()
    victim, high = sim.by_id[1], sim.by_id[2]
    assert victim.preemptions == 1 and high.preemptions == 0
    assert "Requeue:acknowledged" in seen
    # The save (60 s, longer than Slurm's 30 s grace) is kept; only the work done
    # between the ack and the requeue (under one daemon interval) is lost, where
    # slurm-grace loses everything since the last periodic checkpoint.
    assert victim.lost_work < sim.settings.daemon.interval
    grace = run([job(1, 0, 8, 10_000, 20_000, cls="experimental", save=60.0),
                 job(2, 4000, 8, 100, 3600, cls="production")], "slurm-grace",
                grace_time=30.0)
    assert grace.by_id[1].lost_work > 10 * victim.lost_work
    assert victim.lost_after_ack == victim.lost_work
    # A victim whose save did not finish in its grace acked nothing.
    assert grace.by_id[1].lost_after_ack == 0
    assert high.first_start is not None and high.first_start - 4000 < 4 * 30 + 60
    assert sim.plan_calls > 0


def test_multi_node_job_spans_leaves_when_no_leaf_has_room() -> None:
    # Four whole-host jobs fill hosts 1-4; the first of each leaf ends early.
    trace = [job(1, 0, 8, 100, 3600), job(2, 0, 8, 5000, 9000),
             job(3, 0, 8, 100, 3600), job(4, 0, 8, 5000, 9000),
             job(5, 200, 8, 100, 3600, nodes=2)]
    sim = run(trace, "slurm-grace", hosts=4)
    assert sim.by_id[5].first_start == 200.0
    assert sim.multi == [1, 0, 0]


def test_slurmpolicy_replay_is_deterministic() -> None:
    trace = generate(SyntheticSpec(jobs=150, seed=9, mean_interarrival=40), TraceRules(seed=9))
    hosts = Hosts.layout(6, 8, hosts_per_leaf=3)
    a = replay(trace, hosts, "slurmpolicy")[1]
    b = replay(trace, hosts, "slurmpolicy")[1]
    for volatile in ("wall_seconds", "cpu_seconds", "cpu_parts", "plan_steps", "peak_rss_mb"):
        a.pop(volatile), b.pop(volatile)
    assert a == b
    assert a["completed"] == 150 and a["plan_calls"] > 0
    assert a["actions"].get("SetSiteFactor", 0) > 0


def _one_preemption(poll: float, ack_poll: float = 0.0, save: float = 50.0,
                    requeues_itself: bool = False) -> Simulator:
    from slurmpolicy.settings import Daemon, Settings

    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=save,
                 requeues_itself=requeues_itself),
             job(2, 4000, 8, 100, 3600, cls="production")]
    settings = Settings(daemon=Daemon(interval=30.0, preemption_poll=poll, ack_poll=ack_poll))
    sim = Simulator(trace, Hosts.layout(1, 8, hosts_per_leaf=2), "slurmpolicy",
                    settings=settings, daemon=PolicyDriver)
    sim.run()
    return sim


def test_slurmpolicy_signals_in_the_cycle_that_starts_and_polls_for_the_ack() -> None:
    """Like the daemon: the victim is signalled in the cycle that opens the
    preemption, and cycles every daemon.preemption_poll seconds see its ack."""
    fast = _one_preemption(poll=5.0)
    victim, high = fast.by_id[1], fast.by_id[2]
    assert victim.preemptions == 1 and high.first_start is not None
    # Blocked at 4000; the next cycle (4020) opens the preemption and signals;
    # the save takes 50 s, its ack is seen within 5 s, and the freed GPUs are
    # handed out 1 s after the requeue. (Two cycles, as before, would signal
    # at 4050 at the earliest.)
    assert high.first_start - 4000 <= 20 + 50 + 5 + 1
    assert victim.lost_work <= 5.0
    slow = _one_preemption(poll=30.0)  # no shorter cycle: the ack waits for the interval
    assert slow.by_id[2].first_start is not None
    assert slow.by_id[2].first_start > high.first_start
    assert slow.by_id[1].lost_work > victim.lost_work


def test_looks_at_the_victim_every_ack_poll_act_on_its_ack_within_that() -> None:
    """daemon.ack_poll: the daemon looks at a signalled victim every second
    between its 5 s cycles, so the victim trains on for at most a second after
    its save (work its requeue throws away) and the beneficiary starts sooner.
    A save of 52.5 s after a signal on the 5 s grid: the 5 s cycles see the ack
    2.5 s late, a look every second 0.5 s late."""
    cycles = _one_preemption(poll=5.0, ack_poll=0.0, save=52.5)
    looks = _one_preemption(poll=5.0, ack_poll=1.0, save=52.5)
    for sim in (cycles, looks):
        assert sim.by_id[1].preemptions == 1 and sim.by_id[2].first_start is not None
    assert cycles.by_id[1].lost_work == pytest.approx(2.5)
    assert looks.by_id[1].lost_work == pytest.approx(0.5)
    # All of it is work done after the ack: what the targets' gap names.
    assert looks.by_id[1].lost_after_ack == pytest.approx(0.5)
    assert looks.by_id[2].first_start == pytest.approx(cycles.by_id[2].first_start - 2.0)


def test_a_marked_victim_requeues_itself_at_its_ack_and_loses_nothing() -> None:
    """``slurmpolicy ckpt ack --requeue``: the daemon marked the victim before
    its signal, so it requeues itself the moment its save is written. Nothing
    is trained for nothing, the daemon requeues nobody, and the beneficiary
    starts as soon as the save is done, not at the daemon's next look."""
    own = _one_preemption(poll=5.0, ack_poll=1.0, save=52.5, requeues_itself=True)
    daemons = _one_preemption(poll=5.0, ack_poll=1.0, save=52.5)
    for sim in (own, daemons):
        assert sim.by_id[1].preemptions == 1 and sim.by_id[2].first_start is not None
    assert own.by_id[1].lost_work == 0.0 and own.by_id[1].lost_after_ack == 0.0
    assert daemons.by_id[1].lost_work == pytest.approx(0.5)
    assert own.driver is not None and daemons.driver is not None
    assert own.driver.actions_applied.get("Requeue", 0) == 0
    assert daemons.driver.actions_applied.get("Requeue", 0) == 1
    assert own.by_id[2].first_start == pytest.approx(daemons.by_id[2].first_start - 0.5)
    assert not own.driver._marked
    # The daemon's next look saw it gone, once, and recorded it preempted (its
    # per-day budget) as its own requeue would have: no look after that plans.
    assert list(own.driver.intents.preempted_at) == [1]
    assert own.plan_calls <= daemons.plan_calls


def test_a_victim_of_a_preemption_called_off_keeps_running_after_its_ack() -> None:
    """The beneficiary fits elsewhere during the victim's save: the preemption
    is aborted and the victim's mark taken off, so its ack requeues nothing."""
    from slurmpolicy.settings import Daemon, Settings

    # Host 0: the victim (experimental). Host 1: a production job that ends at
    # 4030, during the victim's 50 s save after the 4020 signal.
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=50.0),
             job(3, 0, 8, 4030, 20_000, cls="production"),
             job(2, 4000, 8, 100, 3600, cls="production")]
    settings = Settings(daemon=Daemon(interval=30.0, preemption_poll=5.0, ack_poll=1.0))
    sim = Simulator(trace, Hosts.layout(2, 8, hosts_per_leaf=2), "slurmpolicy",
                    settings=settings, daemon=PolicyDriver)
    sim.run()
    victim, high = sim.by_id[1], sim.by_id[2]
    assert sim.driver is not None
    assert sim.driver.actions_applied.get("SignalCheckpoint", 0) == 1
    assert sim.driver.actions_applied.get("FinishPreemption", 0) == 1
    assert victim.ack is not None  # it saved and acknowledged...
    assert victim.preemptions == 0 and victim.restarts == 0  # ...and went on
    assert high.first_start is not None and 4030 <= high.first_start < 4050
    assert not sim.driver._marked


def test_backfill_reserves_for_every_tested_job_not_only_the_first() -> None:
    """Slurm's backfill plans each tested job; EASY would plan the first only.

    Host 0 runs job 1 until 1000 (limit); host 1 is free. Job 2 (two hosts)
    waits for 1000. Job 3 (one host, limit 2000) is planned on host 1 after job 2.
    Job 4 (one host, limit 1500) fits host 1 now but its limit passes 1000, when
    job 2 claims host 1 too: it waits. EASY, planning for job 2 alone, started it."""
    trace = [job(1, 0, 8, 900, 1000), job(2, 10, 8, 500, 1000, nodes=2),
             job(3, 20, 8, 100, 2000), job(4, 30, 8, 100, 1500)]
    sim = run(trace, "slurm-grace", hosts=2)
    j = sim.by_id
    assert j[2].first_start == pytest.approx(900.0)  # job 1 ended early
    assert j[4].first_start is not None and j[4].first_start >= 900.0
    assert sim.bf_reservations > 0


def test_a_magnetic_reservation_takes_jobs_of_the_users_it_names() -> None:
    """The daemon's reservations name the beneficiary's user (Users=, MAGNETIC):
    that user's other jobs may run in them; anyone else's only if they end first."""
    from dataclasses import replace

    own, other = job(2, 0, 8, 100, 3600), replace(job(3, 0, 8, 100, 3600), user="someone")
    sim = Simulator([job(1, 0, 8, 100, 3600), own, other],
                    Hosts.layout(1, 8, hosts_per_leaf=1), "slurm-grace")
    sim.set_reservation("r", [sim.hosts.names[0]], 1000.0, 9000.0, 1)
    assert sim.reservations["r"].users == (own.user,)
    assert sim._usable(sim.by_id[2]) == [True]
    assert sim._usable(sim.by_id[3]) == [False]


def test_a_preemption_reservation_is_bound_to_its_beneficiary_alone() -> None:
    """As the daemon binds it (named on the job, not MAGNETIC): the same user's
    other job does not take the freed nodes."""
    from dataclasses import replace

    own, other = job(2, 0, 8, 100, 3600), replace(job(3, 0, 8, 100, 3600), user="someone")
    sim = Simulator([job(1, 0, 8, 100, 3600), own, other],
                    Hosts.layout(1, 8, hosts_per_leaf=1), "slurm-grace")
    sim.set_reservation("p", [sim.hosts.names[0]], 1000.0, 9000.0, 1, bound=True)
    assert sim.reservations["p"].users == ()
    assert sim._usable(sim.by_id[2]) == [False]
    assert sim._usable(sim.by_id[3]) == [False]


def test_a_bound_beneficiary_starts_in_its_reservation_or_waits() -> None:
    """A job named on a reservation (scontrol update job ReservationName=) runs
    there or nowhere: free GPUs elsewhere are no use to it until the name is
    taken off (the daemon deletes the reservation). A MAGNETIC reservation of
    its user holds no job back."""
    hosts = Hosts.layout(2, 8, hosts_per_leaf=2)
    sim = Simulator([job(1, 0, 8, 100, 3600)], hosts, "slurm-grace")
    bene = sim.by_id[1]
    sim.set_reservation("p", [hosts.names[0]], 1000.0, 9000.0, 1, bound=True)
    assert bene.resv == "p"
    assert sim._try_place(bene) is None  # host 1 is free, but the job is bound
    sim.now = 1000.0
    assert sim._try_place(bene) == [(0, 8)]
    sim.now = 0.0
    sim.delete_reservation("p")
    assert bene.resv is None and sim._try_place(bene) is not None
    sim.set_reservation("m", [hosts.names[0]], 1000.0, 9000.0, 1)  # magnetic: not bound
    assert sim._try_place(bene) is not None


def test_production_has_its_class_weight_from_submission_in_slurmpolicy_mode() -> None:
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental"),
             job(2, 100, 1, 100, 3600, cls="research"),
             job(3, 110, 1, 100, 3600, cls="production")]
    sim = Simulator(trace, Hosts.layout(1, 8, hosts_per_leaf=1), "slurmpolicy",
                    daemon=PolicyDriver)
    seen: dict[int, int] = {}
    enqueue = sim._enqueue

    def spy(j):  # type: ignore[no-untyped-def]
        enqueue(j)
        seen.setdefault(j.id, j.site_factor)

    sim._enqueue = spy  # type: ignore[method-assign]
    sim.run()
    weights = sim.settings.classes
    assert seen[3] == weights["production"].weight
    assert seen[2] == weights["research"].weight


def test_a_job_re_keyed_just_before_a_priority_recalc_stays_in_the_queue() -> None:
    # A new site factor re-keys a pending job and leaves its old key in the
    # sorted queue; PriorityCalcPeriod's recalc used to keep only current keys
    # found in the queue, so such a job vanished from it and never started.
    trace = [job(1, 0, 8, 1000, 2000), job(2, 10, 8, 100, 1000)]
    sim = Simulator(trace, Hosts.layout(1, 8, hosts_per_leaf=2), "slurm-grace")
    sim._on_arrive(1, 0)
    sim.schedule()
    sim.now = 10.0
    sim._on_arrive(2, 0)
    sim.schedule()
    waiting = sim.by_id[2]
    assert waiting.state == 0
    sim.set_site_factor(waiting, 500)
    sim.now = 300.0
    sim._recalc()
    assert [k[-1] for k in sim.ordered() if sim.by_id[k[-1]].state == 0] == [2]
    assert any(k is waiting.key for k in sim.ordered())


def test_a_replay_whose_jobs_can_no_longer_start_ends_with_a_reason() -> None:
    from slurmpolicy.errors import ReplayStalled

    trace = [job(1, 0, 8, 100, 1000), job(2, 10, 8, 100, 1000)]
    sim = Simulator(trace, Hosts.layout(1, 8, hosts_per_leaf=2), "slurm-grace")
    original = sim._enqueue

    def lose_job_2(j):  # type: ignore[no-untyped-def]
        original(j)
        if j.id == 2:
            sim.queue.remove(j.key)  # as the recalc bug above did
    sim._enqueue = lose_job_2  # type: ignore[method-assign]
    with pytest.raises(ReplayStalled, match=r"1 job\(s\) never started.*2 \(research, 1x8 GPUs, "
                                            r"lost from the queue\)"):
        sim.run()


def test_backfill_answers_a_hopeless_shape_once_for_every_user_it_binds() -> None:
    """A job that found no start in a backfill pass answers for every later job
    at least as large that may use no reservation it could not: another user's
    job is not searched again, the reservation's own user's job is."""
    from dataclasses import replace

    from slurmpolicy.sim.engine import _FreeSteps

    trace = [job(1, 0, 8, 100, 200_000), replace(job(2, 0, 8, 100, 3600), user="a"),
             replace(job(3, 0, 8, 100, 3600), user="b"),
             replace(job(4, 0, 8, 100, 3600), user="owner")]
    sim = Simulator(trace, Hosts.layout(2, 8, hosts_per_leaf=2), "slurm-grace")
    sim._on_arrive(1, 0)
    sim.schedule()  # job 1 holds host 0 beyond bf_window
    for i in (2, 3, 4):
        sim._on_arrive(i, 0)
    # Host 1 is reserved for job 4 (MAGNETIC, its user) from now on.
    sim.set_reservation("r", [sim.hosts.names[1]], 0.0, 10 * 86400.0, 4)
    walked: list[int] = []
    walk = sim._earliest_walk

    def spy(j, *args):  # type: ignore[no-untyped-def]
        walked.append(j.id)
        return walk(j, *args)

    sim._earliest_walk = spy  # type: ignore[method-assign]
    steps = _FreeSteps(sim, 0.0, sim.slurm.bf_resolution)
    window = sim.slurm.bf_window
    found = {i: sim._earliest(sim.by_id[i], {}, steps, window, 3600.0) for i in (2, 3, 4)}
    assert found[2] == (math.inf, []) and found[3] == (math.inf, [])
    assert found[4] == (0.0, [1])
    assert walked == [2, 4]


def test_backfill_tries_a_shape_that_fits_nowhere_once_for_every_user_it_binds() -> None:
    """Within a pass, a job that found no hosts to start on answers for later
    jobs at least as large that may use no reservation it could not; a job of
    the user a reservation names is still placed (in it)."""
    from dataclasses import replace

    trace = [replace(job(1, 0, 8, 100, 200_000), user="owner"),
             replace(job(2, 0, 8, 100, 3600), user="a"),
             replace(job(3, 0, 8, 100, 3600), user="b"),
             replace(job(5, 0, 8, 100, 3600), user="owner")]
    sim = Simulator(trace, Hosts.layout(2, 8, hosts_per_leaf=2), "slurm-grace")
    sim._on_arrive(1, 0)
    sim.schedule()  # job 1 holds host 0
    # Host 1 is reserved for user "owner" (job 1's MAGNETIC reservation) from now on.
    sim.set_reservation("r", [sim.hosts.names[1]], 0.0, 10 * 86400.0, 1)
    for i in (2, 3, 5):
        sim._on_arrive(i, 0)
    tried: list[int] = []
    try_place = sim._try_place

    def spy(j, avoid=None):  # type: ignore[no-untyped-def]
        tried.append(j.id)
        return try_place(j, avoid)

    sim._try_place = spy  # type: ignore[method-assign]
    sim.backfill()
    assert tried == [2, 5]
    assert sim.by_id[5].state == 1 and sim.by_id[2].state == 0 and sim.by_id[3].state == 0


def test_one_node_backfill_answers_match_a_full_search_as_claims_accumulate() -> None:
    """_earliest keeps one-node answers per shape across a pass and works out
    only the hosts that changed; every answer equals a search of every host."""
    from dataclasses import replace

    from slurmpolicy.sim.engine import _FreeSteps

    running = [job(i, 0, g, 10_000, limit) for i, (g, limit) in
               enumerate([(8, 4000), (4, 9000), (6, 2000), (2, 30_000), (8, 7000)], start=1)]
    waiting = [replace(job(10 + k, 0, gpus, 100, limit), user=f"u{k % 3}")
               for k, (gpus, limit) in enumerate(
                   [(4, 3600), (4, 3600), (8, 7200), (2, 3600), (4, 3600), (8, 7200),
                    (6, 3600), (4, 3600), (2, 14_400), (8, 3600)])]
    sim = Simulator(running + waiting, Hosts.layout(6, 8, hosts_per_leaf=2), "slurm-grace")
    for r in running:
        sim._on_arrive(r.job_id, 0)
    sim.schedule()
    sim.now = 100.0
    sim.set_reservation("r", [sim.hosts.names[5]], 5000.0, 50_000.0, 1)
    res = sim.slurm.bf_resolution
    steps = _FreeSteps(sim, sim.now, res)
    planned: dict[int, list[tuple[float, float]]] = {}
    window = sim.now + sim.slurm.bf_window

    def full_search(j, limit):  # type: ignore[no-untyped-def]
        _, extra = sim._reservation_claims(j, sim.now)
        ready = steps.ready(j.spec.gpus_per_node)
        best = None
        for h, t in enumerate(ready):
            if t > window:
                continue
            for s0, e0 in sorted((planned.get(h) or []) + (extra.get(h) or [])):
                if s0 >= t + limit:
                    break
                t = max(t, e0)
            cand = (t, steps.free_at(h, t), h)
            best = cand if best is None or cand < best else best
        return (math.inf, []) if best is None or best[0] > window else (best[0], [best[2]])

    answers = []
    for w in waiting:
        j = sim.by_id[w.job_id]
        limit = math.ceil(w.time_limit / res) * res
        expected = full_search(j, limit)
        got = sim._earliest(j, planned, steps, window, limit)
        assert got == expected, (w.job_id, got, expected)
        answers.append(got)
        for h in got[1]:  # as backfill() plans it
            planned.setdefault(h, []).append((got[0], got[0] + limit))
            planned[h].sort()
            steps.changed.append(h)
    assert sum(1 for a in answers if a[1]) >= 5  # most found a start, some after claims


def test_the_simulated_executor_keeps_to_the_slurm_call_budget() -> None:
    """As the daemon's executor: in-flight steps first, a StartPreemption and
    its signal together, site factors one call per value, and nothing once a
    call would pass ``daemon.max_slurm_calls_per_cycle``."""
    from types import SimpleNamespace

    from slurmpolicy.policy.actions import (
        Annotate,
        Requeue,
        SetSiteFactor,
        SignalCheckpoint,
        StartPreemption,
    )
    from slurmpolicy.settings import Daemon, Settings

    def sf(job_id: int, value: int) -> SetSiteFactor:
        return SetSiteFactor(reason="r", job_id=job_id, site_factor=value, previous=0)

    start = StartPreemption(reason="r", preemption_id="p2", beneficiary=9, victims=(3,),
                            nodes=("h1",), reservation="spolicy_p2")
    signal = SignalCheckpoint(reason="r", preemption_id="p2", job_id=3, restart_count=0,
                              signal="USR1", deadline=100.0)
    requeue = Requeue(reason="r", preemption_id="p1", job_id=4, restart_count=0,
                      after="acknowledged")
    note = Annotate(reason="r", job_id=9)
    actions = (sf(1, 500), sf(2, 500), sf(5, 700), start, signal, note, requeue, sf(6, 900))

    def driver(budget: int, min_nodes: int | None = None) -> PolicyDriver:
        d = object.__new__(PolicyDriver)
        victim = SimpleNamespace(spec=SimpleNamespace(min_nodes=min_nodes))
        d.sim = SimpleNamespace(  # type: ignore[assignment]
            settings=Settings(daemon=Daemon(max_slurm_calls_per_cycle=budget)),
            by_id={3: victim})
        return d

    # requeue 1 + start 2 + signal 2 (the victim's mark, then the signal) + one
    # call per value (3): 8 calls.
    done, calls = driver(8).within_budget(actions)
    assert done is actions and calls == 8
    # 7: the last value's batch (job 6) waits.
    assert driver(7).within_budget(actions) == ((sf(1, 500), sf(2, 500), sf(5, 700), start,
                                                 signal, requeue), 7)
    # An elastic victim is not marked: its signal is one call.
    done, calls = driver(7, min_nodes=1).within_budget(actions)
    assert done is actions and calls == 7
    # 6: requeue, start and its signal, then the batch of value 500 (jobs 1, 2).
    assert driver(6).within_budget(actions) == ((sf(1, 500), sf(2, 500), start, signal,
                                                 requeue), 6)
    # 3: the executor stops at the signal's calls, before any site factor.
    assert driver(3).within_budget(actions) == ((start, requeue), 3)


def test_the_simulated_executor_takes_marks_off_within_the_call_budget() -> None:
    """The executor's mark sweeps are Slurm calls of the cycle's budget
    (daemon/executor.py: ``_call`` counts them): a mark the budget leaves on
    stays until a later sweep, whose calls come out of that cycle's budget
    before the plan's actions. An ended job's mark needs no call."""
    from types import SimpleNamespace

    from slurmpolicy.policy.actions import SetSiteFactor
    from slurmpolicy.settings import Daemon, Settings

    def marked(pid: str, state: int = 1) -> SimpleNamespace:
        return SimpleNamespace(marked=pid, state=state,
                               spec=SimpleNamespace(min_nodes=None))

    d = object.__new__(PolicyDriver)
    jobs = {3: marked("p1"), 4: marked("p1"), 5: marked("p2"), 6: marked("p1", state=2)}
    d.sim = SimpleNamespace(  # type: ignore[assignment]
        settings=Settings(daemon=Daemon(max_slurm_calls_per_cycle=3)), by_id=jobs)
    d.intents = SimpleNamespace(  # type: ignore[assignment]
        preemptions=(SimpleNamespace(preemption_id="p2"),))  # p2 still open, p1 not
    d._marked = {3: "p1", 4: "p1", 5: "p2", 6: "p1"}
    d.actions_applied = {}
    # One call left after the actions: job 3's mark comes off, job 4's stays.
    assert d._clear_stale_marks(1) == 1
    assert jobs[3].marked is None and jobs[4].marked == "p1" and jobs[5].marked == "p2"
    assert d._marked == {4: "p1", 5: "p2"}  # the ended job 6 dropped, no call
    # Next cycle: its first sweep takes job 4's off (a call), so of a budget of
    # 3 two are left for three site-factor values: the third waits.
    factors = tuple(SetSiteFactor(reason="r", job_id=10 + v, site_factor=v, previous=0)
                    for v in (100, 200, 300))
    spent = d._clear_stale_marks(3)
    assert spent == 1 and jobs[4].marked is None and d._marked == {5: "p2"}
    done, calls = d.within_budget(factors)
    assert done is factors and calls == 3
    done, calls = d.within_budget(factors, spent)
    assert len(done) == 2 and calls == 3
    assert d.actions_applied == {"UnmarkVictim": 2}


def test_a_replay_over_the_call_budget_defers_and_loses_no_job() -> None:
    from slurmpolicy.settings import Daemon, Settings

    trace = generate(SyntheticSpec(jobs=150, seed=9, mean_interarrival=40), TraceRules(seed=9))
    hosts = Hosts.layout(6, 8, hosts_per_leaf=3)
    free = replay(trace, hosts, "slurmpolicy")[1]
    tight = replay(trace, hosts, "slurmpolicy",
                   settings=Settings(daemon=Daemon(max_slurm_calls_per_cycle=2)))[1]
    assert free["over_budget_cycles"] == 0 and free["deferred_actions"] == 0
    assert tight["over_budget_cycles"] > 0 and tight["deferred_actions"] > 0
    assert tight["completed"] == free["completed"] == 150
    # The rest waited: fewer writes per cycle, the same jobs in the end.
    assert tight["actions"]["SetSiteFactor"] != free["actions"]["SetSiteFactor"]


def test_a_replay_collects_garbage_seldom_and_restores_the_thresholds() -> None:
    """The replay raises the collector's thresholds while it runs (its
    progress callback sees them) and puts the caller's back, also when the
    replay fails."""
    import gc

    from slurmpolicy.sim import REPLAY_GC_THRESHOLD

    trace = generate(SyntheticSpec(jobs=50, seed=1, mean_interarrival=60), TraceRules(seed=1))
    hosts = Hosts.layout(8, 8, hosts_per_leaf=4)
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    replay(trace, hosts, "slurm-grace", progress=lambda *_: seen.append(gc.get_threshold()))
    assert seen and set(seen) == {REPLAY_GC_THRESHOLD}
    assert gc.get_threshold() == before != REPLAY_GC_THRESHOLD

    def fail(*_: float) -> None:
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        replay(trace, hosts, "slurm-grace", progress=fail)
    assert gc.get_threshold() == before


def _policy_replay() -> tuple[Simulator, PolicyDriver]:
    """A 150-job slurmpolicy replay (periodic checkpoints, preemptions), not run
    yet, and its daemon stand-in."""
    trace = generate(SyntheticSpec(jobs=150, seed=9, mean_interarrival=40), TraceRules(seed=9))
    sim = Simulator(trace, Hosts.layout(6, 8, hosts_per_leaf=3), "slurmpolicy",
                    daemon=PolicyDriver)
    driver = sim.driver
    assert isinstance(driver, PolicyDriver)
    return sim, driver


def _replay_checking_snapshots(check: Callable[[Simulator, PolicyDriver, Any], None],
                               ) -> RawResult:
    """The replay of :func:`_policy_replay`, handing every snapshot the driver
    takes to ``check`` before plan() reads it."""
    sim, driver = _policy_replay()
    plain = driver.snapshot

    def snapshot(now: float) -> Any:
        snap = plain(now)
        check(sim, driver, snap)
        return snap

    driver.snapshot = snapshot  # type: ignore[method-assign]
    return sim.run()


def _queued_ids(sim: Simulator) -> list[int]:
    """The waiting jobs in the simulated Slurm's queue, in its order: the ids of
    the keys that are their job's current key (not a started job's stale one)."""
    return [key[-1] for key in sim.ordered()
            if sim.by_id[key[-1]].state == 0 and sim.by_id[key[-1]].key is key]


def test_the_snapshot_shows_each_running_job_its_latest_periodic_ack() -> None:
    """snapshot() keeps a running job's record while the simulator touches
    nothing of it, but its periodic checkpoints move its ack: the comment it
    shows is the one ``_ack`` gives, at every plan of a replay with periodic
    checkpoints and preemptions."""
    from slurmpolicy.sim.driver import EPOCH

    checked: list[int] = []

    def check(sim: Simulator, driver: PolicyDriver, snap: Any) -> None:
        for record in snap.jobs:
            j = sim.by_id[record.job_id]
            if j.state == 1:
                ack = driver._ack(j)
                assert record.comment == (f"ckpt:{math.floor(EPOCH + ack)}" if ack is not None
                                          else "")
                checked.append(int(ack is not None))

    _replay_checking_snapshots(check)
    assert sum(checked) > 100 and len(checked) > sum(checked)


def test_the_snapshot_hands_the_planner_the_tables_it_would_build() -> None:
    """snapshot() primes the Snapshot's job tables (by id, pending, running)
    from the records it keeps, instead of a walk of the queue per plan: at
    every plan of a replay they are exactly what a plain Snapshot of the same
    jobs builds, in the same order."""
    from dataclasses import replace

    from slurmpolicy.model import JobState

    counts: list[tuple[int, int]] = []

    def check(sim: Simulator, driver: PolicyDriver, snap: Any) -> None:
        plain = replace(snap)  # the same jobs, with no tables handed over
        assert list(snap.jobs_by_id().items()) == list(plain.jobs_by_id().items())
        primed, built = snap.by_state(), plain.by_state()
        assert primed is not built
        for have, want in zip(primed, built, strict=True):
            assert len(have) == len(want)
            assert all(map(operator.is_, have, want))
        assert all(j.state is JobState.PENDING for j in primed[0])
        counts.append((len(primed[0]), len(primed[1])))

    _replay_checking_snapshots(check)
    assert len(counts) > 10
    assert max(p for p, _ in counts) > 5 and max(r for _, r in counts) > 5


def test_a_replay_says_where_its_cpu_went() -> None:
    """slurmpolicy mode counts its backfill passes, snapshots and plan() calls
    apart (within the replay's CPU); the baseline has backfill passes only.
    The report puts slurmpolicy's CPU against the baseline's, with the share
    no planner can save."""
    from slurmpolicy.sim.report import cpu_ratio_line, cpu_split

    trace = generate(SyntheticSpec(jobs=150, seed=9, mean_interarrival=40), TraceRules(seed=9))
    hosts = Hosts.layout(6, 8, hosts_per_leaf=3)
    policy = replay(trace, hosts, "slurmpolicy")[1]
    base = replay(trace, hosts, "slurm-grace")[1]
    parts = policy["cpu_parts"]
    assert set(parts) == {"backfill", "snapshot", "plan"}
    assert parts["plan"] > 0 and parts["snapshot"] > 0 and parts["backfill"] >= 0
    assert sum(parts.values()) <= policy["cpu_seconds"]
    assert set(base["cpu_parts"]) == {"backfill"}
    assert base["cpu_parts"]["backfill"] <= base["cpu_seconds"]
    # plan()'s part by step, in the order plan() runs them, within that part.
    from slurmpolicy.policy.plan import STEPS
    from slurmpolicy.sim.report import plan_steps_line

    steps = policy["plan_steps"]
    assert tuple(steps) == STEPS and all(v >= 0 for v in steps.values())
    assert 0 < sum(steps.values()) <= parts["plan"] + 1e-6
    assert base["plan_steps"] == {} and plan_steps_line(base) == ""
    assert plan_steps_line({"plan_steps": {"context": 1.25, "priorities": 3.0}}) == \
        "plan() CPU s by step: context 1.2, priorities 3.0"
    assert cpu_split(base) == f" (backfill {base['cpu_parts']['backfill']:.1f})"
    # The ratio and the part outside plan(), from the figures given.
    fake_policy = {"mode": "slurmpolicy", "cpu_seconds": 70.0,
                   "cpu_parts": {"plan": 40.0, "snapshot": 10.0, "backfill": 12.0}}
    fake_base = {"mode": "slurm-grace", "cpu_seconds": 10.0, "cpu_parts": {"backfill": 8.0}}
    line = cpu_ratio_line(fake_policy, fake_base)
    assert "7.0x the CPU of slurm-grace" in line and "3.0x of it is outside plan()" in line
    assert cpu_split(fake_policy) == " (plan() 40.0, snapshots 10.0, backfill 12.0)"
    # Figures made before the parts were counted: nothing to say.
    assert cpu_ratio_line({"mode": "slurmpolicy", "cpu_seconds": 5.0}, fake_base) == ""
    assert cpu_split({"cpu_seconds": 5.0}) == ""


def test_the_snapshot_shows_every_waiting_job_as_it_is_now() -> None:
    """snapshot() keeps the waiting jobs' records from one plan to the next and
    looks only at the jobs the simulator touched: at every plan of a replay
    with preemptions, requeues and site factors, it still shows exactly the
    jobs in Slurm's queue, each with the priority, site factor and
    reservation the simulated Slurm holds now."""
    from slurmpolicy.model import JobState

    seen: list[int] = []
    #: Per job: its last record and the priority that record showed then.
    shown: dict[int, tuple[Any, int]] = {}
    repriced: list[int] = []

    def check(sim: Simulator, driver: PolicyDriver, snap: Any) -> None:
        queued = set(_queued_ids(sim))
        waiting = {r.job_id: r for r in snap.jobs if r.state is JobState.PENDING}
        assert set(waiting) == queued
        for job_id, record in waiting.items():
            j = sim.by_id[job_id]
            assert (record.priority, record.site_factor, record.reservation) == (
                j.prio, j.site_factor, j.resv or "")
            # A record kept across PriorityCalcPeriod takes the new priority in
            # place, and what the plan cache derived from it moves with it.
            info = driver.plan_cache.jobs.get(job_id)
            if info is not None and info.job is record:
                assert info.slurm_base == record.priority - record.site_factor
            before = shown.get(job_id)
            if before is not None and before[0] is record and before[1] != record.priority:
                repriced.append(job_id)
            shown[job_id] = (record, record.priority)
        # Every job once, in no promised order (as squeue's).
        ids = [r.job_id for r in snap.jobs]
        assert len(ids) == len(set(ids))
        assert set(ids) - set(waiting) == set(sim.running)
        seen.append(len(waiting))

    raw = _replay_checking_snapshots(check)
    assert len(seen) > 10 and max(seen) > 5
    assert repriced  # the in-place path ran
    assert sum(j.preemptions for j in raw.jobs) > 0  # requeues went back to the queue


def test_a_new_site_factor_moves_the_job_within_slurms_queue() -> None:
    """The daemon's site factors re-key jobs in the simulated Slurm's queue in
    place (no re-sort): at every plan of a replay that writes them, the queue
    is in Slurm's order (tier, priority, submit, id), stale keys of started jobs
    included, and lists each waiting job once under its current key."""
    written: list[int] = []

    def check(sim: Simulator, driver: PolicyDriver, snap: Any) -> None:
        queue = sim.ordered()
        assert queue == sorted(queue)
        live = _queued_ids(sim)
        assert len(live) == len(set(live)) == sim.pending_count
        written.append(driver.actions_applied.get("SetSiteFactor", 0))

    _replay_checking_snapshots(check)
    assert len(written) > 10 and written[-1] > 20


def test_a_save_for_a_preemption_called_off_counts_as_idle_nobody_needed() -> None:
    """A victim signalled for a production job saves; before it is done another
    host frees up, the production job starts there and the preemption is
    called off: the victim trains on, and its save was GPU time idle in grace
    that no requeue used (what the idle target's gap names)."""
    trace = [job(1, 0, 8, 10_000, 20_000, cls="experimental", save=60.0),
             job(3, 0, 8, 4030, 8000, cls="production"),
             job(2, 4000, 8, 100, 3600, cls="production")]
    sim = Simulator(trace, Hosts.layout(2, 8, hosts_per_leaf=2), "slurmpolicy",
                    daemon=PolicyDriver)
    sim.run()
    victim, high = sim.by_id[1], sim.by_id[2]
    assert victim.preemptions == 0 and victim.signal_at is None
    assert high.first_start is not None and 4030 <= high.first_start < 4060
    assert victim.grace_idle == pytest.approx(60.0)
    assert victim.grace_idle_unused == victim.grace_idle
    # One that goes through is idle in grace, but not unused.
    done = _one_preemption(poll=5.0, ack_poll=1.0)
    assert done.by_id[1].preemptions == 1
    assert done.by_id[1].grace_idle >= 50 and done.by_id[1].grace_idle_unused == 0


def test_cycles_of_an_open_preemption_only_move_it_on_between_full_plans() -> None:
    """The daemon stand-in plans in full every plan_refresh, every
    daemon.interval while a preemption is open, and for a new production
    job; the cycles of an open preemption in between (looks that saw a
    victim move on) ask plan() for the open preemptions alone, as the
    daemon's cycles between full plans do, and those plans hold only the
    preemptions' own steps."""
    from slurmpolicy.policy.actions import (
        DeleteReservation,
        FinishPreemption,
        Requeue,
        SignalCheckpoint,
    )

    sim, driver = _policy_replay()
    plain = driver.plan_fn
    seen: list[tuple[bool, float, bool, set[type]]] = []

    def plan_fn(*args: Any, **kw: Any) -> Any:
        p = plain(*args, **kw)
        since = sim.now - driver.last_plan
        seen.append((kw["open_only"], since, driver.open, {type(a) for a in p.actions}))
        return p

    driver.plan_fn = plan_fn
    raw = sim.run()
    light = [s for s in seen if s[0]]
    assert light and raw.open_only_plans == len(light) < raw.plan_calls == len(seen)
    steps = {SignalCheckpoint, Requeue, FinishPreemption, DeleteReservation}
    for _, since, was_open, kinds in light:
        assert was_open and since < sim.settings.daemon.interval and kinds <= steps
    assert all(j.end is not None for j in raw.jobs)  # no job lost
