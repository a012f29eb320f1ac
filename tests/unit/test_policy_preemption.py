"""Scenario tests: checkpoint-first preemption, choosing victims and driving the steps."""

import pytest

from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import (
    Annotate,
    DeleteReservation,
    FinishPreemption,
    Intents,
    Plan,
    PreemptionState,
    Requeue,
    SignalCheckpoint,
    StartPreemption,
    VictimState,
)
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings, from_mapping

PROD = d("production", "USR1")


def starts(p):
    return [a for a in p.actions if isinstance(a, StartPreemption)]


def notes(p):
    return [a.reason for a in p.actions if isinstance(a, Annotate)]


def full(b, admin=None, account="r", ran=3600.0, start_id=100):
    """Fill every host with one whole-host research job."""
    for i in range(1, b.hosts + 1):
        b.run(start_id + i, account, hosts=[i], ran=ran,
              admin_comment=admin if admin is not None else d("research", "USR1"))


def test_production_job_preempts_lower_class_in_one_leaf():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    full(b)
    b.pend(1, "p", nodes=2, admin_comment=d("production", "USR1", topology="leaf",
                                              strict=True))
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.beneficiary == 1 and len(start.victims) == 2
    fab = b.fabric()
    leaves = {fab.domain_of(h, __import__("slurmpolicy.topology.types", fromlist=["Level"])
                            .Level.LEAF) for h in start.nodes}
    assert len(leaves) == 1
    assert start.reservation == f"spolicy_pre_1_{int(b.now)}"  # unique per preemption
    assert start.reason.startswith("job 1 (production, 16 GPUs) cannot start; preempting")
    assert "(research, r, checkpoints, loses 8.7 GPU-h)" in start.reason


@pytest.mark.parametrize("per_cycle, want", [(1, [2]), (2, [2, 1]), (3, [2, 1, 3])])
def test_the_highest_class_then_the_highest_priority_preempts_first(per_cycle, want):
    """preemption.max_per_cycle: the candidates go by class, then effective
    priority (whatever Slurm's own priority says of a lower class)."""
    b = ClusterBuilder(hosts=4)
    full(b, admin=d("experimental", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    b.pend(2, "p", admin_comment=PROD, waited=7200.0)  # aged: above job 1
    b.pend(3, "q", admin_comment=d("research", "USR1"), priority=10**6)
    b.pend(4, "q", admin_comment=d("experimental", "USR1"))  # the victims' class
    s = from_mapping({"preemption": {"max_per_cycle": per_cycle}})
    got = [a.beneficiary for a in starts(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))]
    assert got == want


def test_same_class_is_never_a_victim():
    b = ClusterBuilder(hosts=4)
    full(b)
    b.pend(1, "p", admin_comment=d("research", "USR1"))
    assert not starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))


def test_higher_or_non_preemptible_class_never_a_victim():
    b = ClusterBuilder(hosts=2)
    full(b, admin=d("production", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not starts(p)
    # Nothing preemptible runs at all: no victim search, no note.
    assert not notes(p)
    b.run(103, "r", hosts=[1], gpus_per_node=0, admin_comment=d("research", "USR1"))
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not starts(p)
    assert "no preemption for job 1: no running job may be preempted for it " \
           "(2 job(s): class production is not preemptible; 1 job(s): it holds no GPUs)" \
        in notes(p)


def test_preemptible_no_min_runtime_and_after_window_protect():
    b = ClusterBuilder(hosts=3)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1", preemptible=False))
    b.run(102, "r", hosts=[2], ran=300, admin_comment=d("research", "USR1"))
    b.run(103, "r", hosts=[3], ran=3600, admin_comment=d("research", "USR1", after=7200))
    b.pend(1, "p", admin_comment=PROD)
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not starts(p)
    (text,) = notes(p)
    assert "it asked --preemptible=no" in text
    assert "it has run 5m, less than the minimum runtime 10m" in text
    assert "it is inside its --preemptible=after window" in text


def test_least_lost_work_wins():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=d("research", "USR1"))
    # Same age, but checkpointed 10 minutes ago: far less to lose.
    b.run(102, "r", hosts=[2], ran=7200, admin_comment=d("research", "USR1"),
          comment=f"ckpt:{b.now - 600:.0f}")
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.victims == (102,)
    assert start.expected_lost_gpu_seconds == 8 * 600 + 8 * 300


def test_checkpoint_capable_victims_preferred_over_cheaper_unable_ones():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], ran=700, admin_comment=d("research", "none"))
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.victims == (101,)


def test_no_checkpoint_jobs_chosen_last_but_are_chosen():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    full(b, admin=d("research", "none"))
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert len(start.victims) == 1
    assert "cannot checkpoint" in start.reason


def test_no_checkpoint_shelter_only_in_allowed_partitions():
    s = from_mapping({"preemption": {"no_checkpoint_partitions": ["scavenge"]}})
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], ran=700, admin_comment=d("research", "none"))
    b.pend(1, "p", admin_comment=PROD)
    # 102 cannot checkpoint outside "scavenge": no free shield, and it loses least.
    sheltered = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert sheltered[0].victims == (101,)
    # With tier 1 (capable) feasible it is still taken first; make 101 unavailable:
    b.replace_job(101, admin_comment=d("research", "USR1", preemptible=False))
    (start,) = starts(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    assert start.victims == (102,)


def test_missed_acks_count_as_unable_to_checkpoint():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=600 + 60, admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], ran=7200, admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    (first,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert first.victims == (101,)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(),
                           Intents(missed_acks={101: 1}), b.now))
    assert start.victims == (102,)


def test_account_never_pushed_below_its_guaranteed_share():
    # 4 hosts x 8 = 32 GPUs; vision is guaranteed half (16) and holds exactly 16.
    s = from_mapping({"fairshare": {"shares": {"vision": 0.5}}})
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    b.run(101, "vision", hosts=[1], admin_comment=d("research", "USR1"))
    b.run(102, "vision", hosts=[2], admin_comment=d("research", "USR1"))
    b.run(103, "nlp", hosts=[3], ran=9000, admin_comment=d("research", "USR1"))
    b.run(104, "nlp", hosts=[4], ran=9000, admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    assert set(start.victims) <= {103, 104}
    b.pend(2, "p", nodes=3, admin_comment=PROD)
    p = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    assert all(not {101, 102} & set(a.victims) for a in starts(p))


def test_per_day_budget():
    b = ClusterBuilder(hosts=1)
    full(b)
    b.pend(1, "p", admin_comment=PROD)
    spent = Intents(preempted_at={101: (b.now - 3600, b.now - 7200, b.now - 9000)})
    p = plan(b.snapshot(), b.fabric(), Settings(), spent, b.now)
    assert not starts(p)
    assert "it was preempted 3 times in the last day (budget 3)" in notes(p)[0]
    old = Intents(preempted_at={101: (b.now - 2 * 86400,)})
    assert starts(plan(b.snapshot(), b.fabric(), Settings(), old, b.now))


def test_gpu_type_restricts_victims():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.gpu_types = {"gpu02": "a100"}
    full(b)
    b.pend(1, "p", admin_comment=d("production", "USR1", gpu_type="a100"))
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.nodes == ("gpu02",) and start.victims == (102,)


def test_disabled_preemption():
    s = from_mapping({"preemption": {"enabled": False}})
    b = ClusterBuilder(hosts=1)
    full(b)
    b.pend(1, "p", admin_comment=PROD)
    assert not starts(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))


# --- the state machine -------------------------------------------------------------
def started(b, s=None):
    s = s or Settings()
    p = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    (start,) = starts(p)
    return apply_to_intents(Intents(), p, b.now), start


def one_victim_cluster(victim_admin=None):
    b = ClusterBuilder(hosts=1)
    b.run(101, "r", hosts=[1], admin_comment=victim_admin or d("research", "USR1", grace=120))
    b.pend(1, "p", admin_comment=PROD)
    return b


def test_signal_in_the_same_plan_then_wait_then_requeue_after_ack():
    b = one_victim_cluster()
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    kinds = [type(a).__name__ for a in p1.actions if isinstance(a, (StartPreemption,
                                                                       SignalCheckpoint))]
    # The signal follows its StartPreemption in the same plan (one cycle, not two).
    assert kinds == ["StartPreemption", "SignalCheckpoint"]
    (sig,) = [a for a in p1.actions if isinstance(a, SignalCheckpoint)]
    (start,) = starts(p1)
    assert sig.preemption_id == start.preemption_id and sig.job_id == 101
    assert sig.signal == "USR1" and sig.deadline == b.now + 120
    assert sig.restart_count == start.restart_counts[0]
    intents = apply_to_intents(Intents(), p1, b.now)
    (pre,) = intents.preemptions
    assert pre.state is PreemptionState.SIGNALLED
    assert pre.victims[0].state is VictimState.SIGNALLED
    assert pre.victims[0].signalled_at == b.now and pre.victims[0].deadline == b.now + 120
    # No ack yet, deadline not reached: nothing, and no second signal.
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    assert not [a for a in p3.actions if isinstance(a, (Requeue, SignalCheckpoint))]
    assert not starts(p3)
    # An old ack (before the signal) does not count.
    b.replace_job(101, comment=f"ckpt:{b.now - 10:.0f}")
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    assert not [a for a in p3.actions if isinstance(a, Requeue)]
    # The ack is acted on in the first plan that sees it.
    b.replace_job(101, comment=f"ckpt:{b.now + 20:.0f}")
    p4 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 25)
    (rq,) = [a for a in p4.actions if isinstance(a, Requeue)]
    assert rq.after == "acknowledged" and rq.reason == \
        "requeue victim 101: checkpoint acknowledged"
    intents = apply_to_intents(intents, p4, b.now + 25)
    assert intents.preempted_at[101] == (b.now + 25,)
    assert not intents.missed_acks


def test_a_victim_left_planned_gets_its_signal_in_the_next_plan():
    """The executor sends no signal while the reservation is not in place: the
    victim stays planned in the journal, and the next plan asks again, once."""
    b = one_victim_cluster()
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    only_start = Plan(actions=tuple(starts(p1)))
    intents = apply_to_intents(Intents(), only_start, b.now)
    assert intents.preemptions[0].victims[0].state is VictimState.PLANNED
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    (sig,) = [a for a in p2.actions if isinstance(a, SignalCheckpoint)]
    assert sig.deadline == b.now + 30 + 120 and not starts(p2)


def test_requeue_after_deadline_counts_a_missed_ack():
    b = one_victim_cluster()
    intents, _ = started(b)
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    intents = apply_to_intents(intents, p2, b.now + 30)
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30 + 121)
    (rq,) = [a for a in p3.actions if isinstance(a, Requeue)]
    assert rq.after == "deadline"
    assert rq.reason.startswith("requeue victim 101: no checkpoint ack by its deadline")
    intents = apply_to_intents(intents, p3, b.now + 151)
    assert intents.missed_acks == {101: 1}


def test_victim_without_checkpoint_is_requeued_without_signal():
    b = one_victim_cluster(d("research", "none"))
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not [a for a in p1.actions if isinstance(a, SignalCheckpoint)]
    # Nothing to wait for: its requeue follows the StartPreemption in the same plan.
    (rq,) = [a for a in p1.actions if isinstance(a, Requeue)]
    assert rq.after == "no-checkpoint"
    assert p1.actions.index(rq) > p1.actions.index(starts(p1)[0])
    intents = apply_to_intents(Intents(), p1, b.now)
    assert intents.preemptions[0].victims[0].state is VictimState.REQUEUED
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    assert not [a for a in p2.actions if isinstance(a, (Requeue, SignalCheckpoint))]


def test_victim_that_ended_by_itself_is_not_requeued_and_preemption_finishes():
    b = one_victim_cluster()
    intents, _ = started(b)
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    intents = apply_to_intents(intents, p2, b.now + 30)
    b.jobs = [j for j in b.jobs if j.job_id != 101]  # it finished
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 60)
    assert not [a for a in p3.actions if isinstance(a, Requeue)]
    # The beneficiary starts on the freed node: done, reservation deleted.
    b.jobs = []
    b.run(1, "p", hosts=[1], ran=10, admin_comment=PROD)
    p4 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 90)
    (fin,) = [a for a in p4.actions if isinstance(a, FinishPreemption)]
    assert not fin.aborted and fin.reason == "beneficiary 1 started"
    assert [a.name for a in p4.actions if isinstance(a, DeleteReservation)] == [
        f"spolicy_pre_1_{int(b.now)}"]
    intents = apply_to_intents(intents, p4, b.now + 90)
    assert intents.preemptions[0].state is PreemptionState.DONE
    assert not intents.open_preemptions()


def test_beneficiary_leaving_aborts_the_rest():
    b = one_victim_cluster()
    intents, _ = started(b)
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    intents = apply_to_intents(intents, p2, b.now + 30)
    b.jobs = [j for j in b.jobs if j.job_id != 1]
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 60)
    assert not [a for a in p3.actions if isinstance(a, Requeue)]
    (fin,) = [a for a in p3.actions if isinstance(a, FinishPreemption)]
    assert fin.aborted and "beneficiary 1 left the queue" in fin.reason
    assert [a.name for a in p3.actions if isinstance(a, DeleteReservation)] == [
        f"spolicy_pre_1_{int(b.now)}"]


def test_beneficiary_that_no_longer_needs_it_aborts():
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    intents, _ = started(b)
    b.jobs = [j for j in b.jobs if j.job_id != 102]  # another node became free
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    (fin,) = [a for a in p2.actions if isinstance(a, FinishPreemption)]
    assert fin.aborted and "no longer needs it: it fits on free nodes" in fin.reason
    assert not [a for a in p2.actions if isinstance(a, SignalCheckpoint)]


def test_beneficiary_that_fits_after_a_victim_left_aborts_the_rest():
    """One victim gone, another still saving, and a node frees elsewhere: the
    beneficiary fits on its freed node and that one. Slurm keeps it to its
    reservation while it names it, so the abort takes the name off rather
    than leave the free GPUs idle until the last victim has saved."""
    b = ClusterBuilder(hosts=3)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1", grace=120))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1", grace=120))
    b.run(103, "r", hosts=[3], admin_comment=PROD)  # not preemptible
    b.pend(1, "p", nodes=2, admin_comment=PROD)
    intents, start = started(b)
    assert sorted(start.victims) == [101, 102]
    b.jobs = [j for j in b.jobs if j.job_id != 101]  # it ended by itself
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    assert not [a for a in p2.actions if isinstance(a, FinishPreemption)]  # host 2 still busy
    intents = apply_to_intents(intents, p2, b.now + 30)
    b.jobs = [j for j in b.jobs if j.job_id != 103]  # host 3 frees
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 35)
    (fin,) = [a for a in p3.actions if isinstance(a, FinishPreemption)]
    assert fin.aborted and "no longer needs it: it fits on free nodes" in fin.reason
    assert not [a for a in p3.actions if isinstance(a, Requeue)]  # 102 keeps running
    assert [a.name for a in p3.actions if isinstance(a, DeleteReservation)] == [start.reservation]


def test_the_beneficiarys_wait_for_a_slow_saver_counts_in_the_host_cost():
    """Host 1 frees 8 GPUs by preempting a 4-GPU job that saves in 150 s; host 2
    by preempting an 8-GPU job that saves in 6 s. Counted in GPU-seconds, the
    beneficiary's 8 GPUs idle for 150 s outweigh 4 more victim GPUs."""
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], gpus_per_node=4, admin_comment=d("research", "USR1", grace=150))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1", grace=6))
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.victims == (102,)


@pytest.mark.parametrize(("wait_weight", "victim"), [(None, 102), (1, 101)])
def test_the_wait_weight_trades_a_victims_restart_for_a_sooner_start(wait_weight, victim):
    """A one-GPU production job can take the GPU of a 1-GPU job that saves in
    120 s (host 1) or the two of a 2-GPU job that saves in 5 s (host 2). By
    default (preemption.wait_weight 16) its 115 s less waiting outweigh one
    more GPU to restart (300 GPU-seconds); counting its idle GPU alone
    (weight 1), the slow saver is cheaper (540 against 615 GPU-seconds)."""
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], gpus_per_node=1, admin_comment=d("research", "USR1", grace=120))
    b.run(103, "p", hosts=[1], gpus_per_node=7, admin_comment=PROD)  # not preemptible
    b.run(102, "r", hosts=[2], gpus_per_node=2, admin_comment=d("research", "USR1", grace=5))
    b.run(104, "p", hosts=[2], gpus_per_node=6, admin_comment=PROD)
    b.pend(1, "p", gpus_per_node=1, admin_comment=PROD)
    s = (Settings() if wait_weight is None
         else from_mapping({"preemption": {"wait_weight": wait_weight}}))
    (start,) = starts(plan(b.snapshot(), b.fabric(), s, Intents(), b.now))
    assert start.victims == (victim,)


def test_one_free_gpu_is_one_jobs_start_not_everyones():
    """Slurm gives a free GPU to one job: of three one-GPU production jobs and
    one free GPU, the highest takes it and the other two get preemptions
    (each "fits now" on its own, which left all three waiting)."""
    b = ClusterBuilder(hosts=3)
    b.run(101, "r", hosts=[1], gpus_per_node=7, admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1"))
    b.run(103, "r", hosts=[3], admin_comment=d("research", "USR1"))
    for i, prio in ((1, 3000), (2, 2000), (3, 1000)):
        b.pend(i, "p", gpus_per_node=1, priority=prio, admin_comment=PROD)
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert sorted(a.beneficiary for a in starts(p)) == [2, 3]


def test_free_gpus_abort_only_the_preemptions_they_can_serve():
    """Open preemptions for three one-GPU jobs, then one GPU frees elsewhere:
    only the highest beneficiary is let go to it; the other two go on."""
    b = ClusterBuilder(hosts=4)
    for i in (1, 2, 3, 4):
        b.run(100 + i, "r", hosts=[i], admin_comment=d("research", "USR1", grace=120))
    for i, prio in ((1, 3000), (2, 2000), (3, 1000)):
        b.pend(i, "p", gpus_per_node=1, priority=prio, admin_comment=PROD)
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert sorted(a.beneficiary for a in starts(p1)) == [1, 2, 3]
    intents = apply_to_intents(Intents(), p1, b.now)
    held = {h for a in starts(p1) for h in a.nodes}
    (spare,) = [i for i in (1, 2, 3, 4) if b.host(i) not in held]
    b.jobs = [j for j in b.jobs if j.job_id != 100 + spare]
    b.run(200, "r", hosts=[spare], gpus_per_node=7, admin_comment=d("research", "USR1"))
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 5)
    aborted = [a for a in p2.actions if isinstance(a, FinishPreemption) and a.aborted]
    assert len(aborted) == 1 and "beneficiary 1 no longer needs it" in aborted[0].reason


def test_beneficiary_started_elsewhere_aborts_before_requeue():
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=PROD)
    intents, start = started(b)
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    intents = apply_to_intents(intents, p2, b.now + 30)
    other = 102 if start.victims == (101,) else 101
    b.jobs = [j for j in b.jobs if j.job_id not in (1, other)]
    b.run(1, "p", hosts=[2 if other == 102 else 1], ran=5, admin_comment=PROD)
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 60)
    assert not [a for a in p3.actions if isinstance(a, Requeue)]
    (fin,) = [a for a in p3.actions if isinstance(a, FinishPreemption)]
    assert fin.aborted and "the remaining victims keep running" in fin.reason


def test_second_plan_starts_nothing_new():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    full(b)
    b.pend(1, "p", nodes=2, admin_comment=PROD)
    b.pend(2, "p", nodes=1, admin_comment=PROD)
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert len(starts(p1)) == 2
    victims = [v for a in starts(p1) for v in a.victims]
    assert len(victims) == len(set(victims)) == 3
    # Each victim's signal is in the first plan, once; the second repeats none.
    signals = [a.job_id for a in p1.actions if isinstance(a, SignalCheckpoint)]
    assert sorted(signals) == sorted(victims)
    intents = apply_to_intents(Intents(), p1, b.now)
    p2 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now)
    assert not starts(p2)
    assert not [a for a in p2.actions if isinstance(a, (SignalCheckpoint, Requeue))]


@pytest.mark.parametrize("state", [VictimState.ACKNOWLEDGED, VictimState.DEADLINE])
def test_decided_requeue_is_asked_again_while_still_running(state):
    from dataclasses import replace

    b = one_victim_cluster()
    intents, _ = started(b)
    p = intents.preemptions[0]
    p = replace(p, victims=(replace(p.victims[0], state=state, signalled_at=b.now,
                                    deadline=b.now + 120),))
    out = plan(b.snapshot(), b.fabric(), Settings(), replace(intents, preemptions=(p,)),
               b.now + 200)
    (rq,) = [a for a in out.actions if isinstance(a, Requeue)]
    assert rq.after == state.value


def test_no_preemption_when_the_job_starts_soon_anyway():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    # 102 ends in 20 s, well within the victims' 2-minute grace.
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1", grace=120))
    b.run(102, "r", hosts=[2], ran=3600, time_limit=3620,
          admin_comment=d("research", "USR1", grace=120))
    b.pend(1, "p", admin_comment=PROD)
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not starts(p)
    assert "no preemption for job 1: it should start within 1m anyway, after the end of " \
           "job(s) 102 (time limit)" in notes(p)[0]


def test_victim_ending_by_itself_keeps_the_preemption_until_the_beneficiary_starts():
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1"))
    b.pend(1, "p", nodes=2, admin_comment=PROD)
    intents, _ = started(b)  # both signalled, deadline in a minute
    b.jobs = [j for j in b.jobs if j.job_id != 101]  # ended by itself
    p3 = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
    assert not [a for a in p3.actions if isinstance(a, FinishPreemption)]
    assert not [a for a in p3.actions if isinstance(a, Requeue)]


def test_min_gpu_memory_restricts_victims():
    b = ClusterBuilder(hosts=3, hosts_per_leaf=4)
    b.gpu_types = {"gpu03": "h200"}  # 141 GB per GPU; h100 has 80
    b.run(101, "r", hosts=[1], ran=9000, admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], ran=9000, admin_comment=d("research", "USR1"))
    b.run(103, "r", hosts=[3], ran=99000, time_limit=200000,
          admin_comment=d("research", "USR1"))
    b.pend(1, "p", admin_comment=d("production", "USR1", gpu_mem=100))
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.nodes == ("gpu03",) and start.victims == (103,)


def test_not_enough_preemptible_hosts_is_explained():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], admin_comment=d("research", "USR1"))
    b.run(102, "r", hosts=[2], admin_comment=d("research", "USR1", preemptible=False))
    b.run(103, "r", hosts=[3], admin_comment=d("research", "USR1"))
    b.run(104, "r", hosts=[4], admin_comment=d("production", "USR1"))
    b.pend(1, "p", nodes=2, admin_comment=d("production", "USR1", topology="leaf",
                                              strict=True))
    p = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not starts(p)
    assert notes(p) == ["no preemption for job 1: even preempting every allowed job frees at "
                        "most 1 host(s) with 8 GPUs in one leaf; it needs 2"]


def test_a_resized_beneficiary_or_one_naming_another_reservation_aborts():
    """Issue 13, finding 2: every way a preemption can no longer help ends it."""
    from dataclasses import replace

    for change, words in (({"node_count": 2}, "was resized: it asks for 2 node(s), 1 are "
                                              "held for it"),
                          ({"reservation": "maint"}, "now asks for reservation maint")):
        b = one_victim_cluster()
        intents, _ = started(b)
        b.jobs = [replace(j, **change) if j.job_id == 1 else j for j in b.jobs]
        out = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 30)
        (fin,) = [a for a in out.actions if isinstance(a, FinishPreemption)]
        assert fin.aborted and words in fin.reason
        assert not [a for a in out.actions if isinstance(a, Requeue)]


def test_a_job_slurm_may_not_requeue_is_never_a_victim_and_a_victim_made_so_aborts():
    from dataclasses import replace

    b = one_victim_cluster()
    b.jobs = [replace(j, requeue=False) if j.job_id != 1 else j for j in b.jobs]
    out = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    assert not [a for a in out.actions if isinstance(a, StartPreemption)]
    b = one_victim_cluster()
    intents, _ = started(b)
    b.jobs = [replace(j, requeue=False) if j.job_id != 1 else j for j in b.jobs]
    out = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 600)
    (fin,) = [a for a in out.actions if isinstance(a, FinishPreemption)]
    assert fin.aborted and "may no longer be requeued (Requeue=0)" in fin.reason


def test_the_victim_that_saves_fastest_wins_over_the_one_with_less_to_lose():
    # Both save on USR1, so neither loses work; the one that needs 20 s to save
    # frees its GPUs (and lets the beneficiary start) long before the 300 s one,
    # even though the slow saver checkpointed more recently.
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=d("research", "USR1", grace=20))
    b.run(102, "r", hosts=[2], ran=7200, admin_comment=d("research", "USR1", grace=300),
          comment=f"ckpt:{b.now - 60:.0f}")
    b.pend(1, "p", admin_comment=PROD)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.victims == (101,)
    # What it reports is still the work lost if the save failed.
    assert start.expected_lost_gpu_seconds == 8 * 7200 + 8 * 300


def test_a_free_host_reserved_later_is_not_free_for_a_job_that_would_run_into_it():
    # Host 2 is free, but a reservation (someone else's) starts on it in an
    # hour: Slurm will not start a 4-hour job there, so the production job
    # needs a preemption on host 1 and must not be told it "fits".
    from slurmpolicy.model import Reservation

    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=d("research", "USR1"))
    b.reservations.append(Reservation(
        name="maint", nodes=(b.host(2),), start_time=b.now + 3600,
        end_time=b.now + 7200, flags=frozenset({"MAINT"})))
    b.pend(1, "p", admin_comment=PROD, time_limit=4 * 3600.0)
    (start,) = starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))
    assert start.victims == (101,) and start.nodes == (b.host(1),)
    # A job short enough to end before the reservation starts fits on host 2.
    b.replace_job(1, time_limit=1800.0)
    assert not starts(plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now))


def test_what_moves_a_signalled_victim_on_as_the_daemons_look_reads_it():
    """victim_moved: the daemon's look between cycles (daemon.ack_poll) tests a
    victim's record as the next plan will: gone, acknowledged since the signal,
    past its deadline, else nothing."""
    from dataclasses import replace

    from slurmpolicy.model import JobState
    from slurmpolicy.policy.preemption import victim_moved

    b = ClusterBuilder(hosts=1)
    job = b.run(1, hosts=[1])
    now = b.now
    args = (0, now - 30, now + 60, now)
    assert victim_moved(job, *args) == ""
    assert victim_moved(replace(job, comment=f"ckpt:{now - 40:.0f}"), *args) == ""  # before
    assert victim_moved(replace(job, comment=f"ckpt:{now - 10:.0f}"), *args) == "acknowledged"
    assert victim_moved(None, *args) == "gone"
    assert victim_moved(replace(job, state=JobState.PENDING), *args) == "gone"
    assert victim_moved(replace(job, restart_count=1), *args) == "gone"
    assert victim_moved(job, 0, now - 30, now - 1, now) == "deadline"


# --- open_only: the cycles between full plans ----------------------------------------
def test_open_only_moves_the_open_preemptions_on_and_nothing_else():
    """The same steps for the open preemption as a full plan's, and none of
    the rest: a new waiting job gets its site factor only from a full plan."""
    from slurmpolicy.policy.plan import OPEN_ONLY_STEPS

    b = one_victim_cluster()
    intents, _ = started(b)
    b.pend(3, "r", admin_comment=d("research", "USR1"))
    b.replace_job(101, comment=f"ckpt:{b.now + 20:.0f}")
    whole = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 25)
    light = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 25, open_only=True,
                 clock=lambda: 0.0)
    (rq,) = [a for a in whole.actions if isinstance(a, Requeue)]
    assert [a for a in whole.actions if getattr(a, "job_id", None) == 3]  # its site factor
    assert light.actions == (rq,)
    assert tuple(light.timings) == OPEN_ONLY_STEPS
    assert light.fragmented_since is None  # the journal keeps what it has


def test_open_only_free_gpus_go_by_slurms_own_order():
    """Between full plans no site factor was written: who takes a GPU that
    frees is who Slurm ranks first now. A research job Slurm ranks above the
    production beneficiary takes it, and the preemption goes on; the next full
    plan ranks them by class (its site factors) and lets the beneficiary go."""
    b = ClusterBuilder(hosts=4)
    for i in (1, 2, 3, 4):
        b.run(100 + i, "r", hosts=[i], admin_comment=d("research", "USR1", grace=120))
    b.pend(1, "p", gpus_per_node=1, priority=3000, admin_comment=PROD)
    p1 = plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now)
    (start,) = starts(p1)
    intents = apply_to_intents(Intents(), p1, b.now)
    spare = next(i for i in (1, 2, 3, 4) if b.host(i) not in start.nodes)
    b.jobs = [j for j in b.jobs if j.job_id != 100 + spare]
    b.run(200, "r", hosts=[spare], gpus_per_node=7, admin_comment=d("research", "USR1"))
    b.pend(9, "r", gpus_per_node=1, priority=5000, admin_comment=d("research", "USR1"))

    def aborted(p):
        return [a for a in p.actions if isinstance(a, FinishPreemption) and a.aborted]

    light = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 5, open_only=True)
    assert not aborted(light)
    whole = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 5)
    assert len(aborted(whole)) == 1 and "beneficiary 1 no longer needs it" in \
        aborted(whole)[0].reason
    # With the research job gone, Slurm's order gives the GPU to the beneficiary.
    b.jobs = [j for j in b.jobs if j.job_id != 9]
    light = plan(b.snapshot(), b.fabric(), Settings(), intents, b.now + 5, open_only=True)
    assert len(aborted(light)) == 1


@pytest.mark.parametrize("partitions", [None, {"a": [1, 2], "b": [3, 4]}])
def test_candidates_come_by_class_rank_then_slurms_order(partitions):
    """The jobs a preemption is searched for, in the order they are read: the
    higher class first, then the new effective priority, the earlier submit,
    the lower id; jobs that cannot have one (no GPUs, held, of a class no
    higher than the lowest running preemptible one) are never read. One
    partition reads prio's sorted order; several read a heap: the same order."""
    from slurmpolicy.policy import priority
    from slurmpolicy.policy.context import Context
    from slurmpolicy.policy.preemption import _candidates

    b = ClusterBuilder(hosts=4, partitions=partitions or {})
    part = (lambda i: "a" if i % 2 else "b") if partitions else (lambda i: None)
    b.run(101, "r", hosts=[1], admin_comment=d("experimental", "USR1"))
    classes = ("production", "research", "experimental")
    for i in range(1, 25):
        b.pend(i, "ab"[i % 2], admin_comment=d(classes[i % 3], "USR1"),
               priority=1000 + (i * 37) % 11 * 100, waited=60.0 + (i * 13) % 5,
               partition=part(i), gpus_per_node=0 if i == 7 else None,
               reason="JobHeldUser" if i == 10 else "Resources")
    s = Settings()
    ctx = Context(b.snapshot(), b.fabric(), s, Intents(), b.now)
    prio = priority.compute(ctx)
    assert len(prio.order) == (2 if partitions else 1)
    low = s.classes["experimental"].rank
    got = [j.job_id for j in _candidates(ctx, prio, low)]
    want = sorted((j for j in ctx.pending
                   if ctx.info(j).rank > low and j.job_id not in (7, 10)),
                  key=lambda j: (-ctx.info(j).rank, -prio.effective[j.job_id],
                                 j.submit_time, j.job_id))
    assert got == [j.job_id for j in want]
    assert 7 not in got and 10 not in got and len(got) == 14
