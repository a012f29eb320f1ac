"""Scenario tests: explain() for pending and running jobs, with the reason text."""

import json

import pytest

from slurmpolicy.errors import JobGone
from slurmpolicy.policy import apply_to_intents, explain, plan
from slurmpolicy.policy.actions import Intents
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings, from_mapping

RES = d("research", "USR1")


#: With the reservation rule for large jobs that waited (off by default).
WAITED = from_mapping({"reservations": {"reserve_after_wait": True}})


def why(b, job_id, intents=None, settings=None):
    return explain(b.snapshot(), b.fabric(), settings or Settings(), intents or Intents(), b.now,
                   job_id)


def one_free_host_per_leaf(b):
    """16 hosts in 4 leaves; the first host of each leaf is free, the rest are busy."""
    for i in range(1, b.hosts + 1):
        if (i - 1) % b.hosts_per_leaf:
            b.run(100 + i, "r", hosts=[i], time_limit=3600 + 600 * i, admin_comment=RES)


def test_fragmentation_in_numbers():
    b = ClusterBuilder(hosts=16, hosts_per_leaf=4)
    one_free_host_per_leaf(b)
    b.pend(1, "a", nodes=2, admin_comment=d("research", "USR1", topology="leaf", strict=True))
    e = why(b, 1)
    assert e.blocking == "fragmentation"
    assert e.blocking_text.startswith(
        "fragmentation: 32 GPUs free, at most 8 in any one leaf (1 host with 8 free); "
        "asked for 16 in one leaf")
    assert e.free_text == ("32 GPUs free on 4 nodes of partition batch; at most 8 on one host, "
                           "at most 8 in one leaf")
    assert e.request == "2 nodes x 8 GPU, topology leaf,strict, 4h00m, checkpoints"
    assert e.estimated_start == b.now + 600 * 2
    assert e.estimate_basis == "the end of job(s) 102 (time limit) in 20m"
    changes = {a.change: a for a in e.alternatives}
    assert changes["drop strict from --topology=leaf"].estimated_start == b.now
    assert changes["ask for 1 node instead of 2"].estimated_start == b.now
    assert e.headline.startswith("Waiting (fragmentation): fragmentation: 32 GPUs free")
    json.dumps(e.to_dict())


def test_topology_that_can_never_be_met():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    b.pend(1, "a", nodes=6, admin_comment=d("research", "USR1", topology="leaf", strict=True))
    e = why(b, 1)
    assert e.blocking == "topology"
    assert "no leaf has 6 hosts with 8 GPUs where it may run (the largest has 4)" in \
        e.blocking_text


def test_resources_position_and_jobs_ahead_by_class():
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1, 2], time_limit=3600 + 900, admin_comment=RES)
    b.pend(1, "a", admin_comment=d("production", "USR1"))
    b.pend(2, "a", admin_comment=d("production", "USR1"))
    b.pend(3, "a", waited=30, admin_comment=d("experimental", "USR1"))
    b.pend(4, "a", waited=10, admin_comment=RES)
    e = why(b, 4)
    assert e.position == 3 and e.ahead_by_class == {"production": 2}
    assert e.blocking == "resources"
    assert e.blocking_text == "0 GPUs free where it may run; it needs 8"
    assert e.estimated_start == b.now + 900


def test_held_dependency_and_priority():
    b = ClusterBuilder(hosts=2)
    b.pend(1, "a", reason="JobHeldUser")
    b.pend(2, "a", reason="Dependency", dependency="afterok:1")
    b.pend(3, "a", waited=9999, reason="Priority")
    b.pend(4, "a", waited=5, reason="Priority")
    assert why(b, 1).blocking_text == \
        "the job is held (JobHeldUser); `scontrol release 1` lets it go"
    assert why(b, 1).estimated_start is None
    assert why(b, 2).blocking_text == "it waits for its dependency afterok:1"
    e = why(b, 4)
    assert e.blocking == "priority"
    assert e.blocking_text == ("it fits now, but 1 job(s) with higher priority are ahead of it in "
                               "its partition")


def test_waiting_for_its_reservation_and_for_preemption():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    for i in range(1, 5):
        b.run(100 + i, "r", hosts=[i], time_limit=3600 + 600 * i, admin_comment=RES)
    b.pend(1, "big", nodes=2, waited=7200, admin_comment=RES)
    intents = apply_to_intents(Intents(), plan(b.snapshot(), b.fabric(), WAITED, Intents(),
                                               b.now), b.now)
    e = why(b, 1, intents, WAITED)
    assert e.blocking == "reservation"
    assert e.blocking_text == ("waiting for its reservation spolicy_job_1 on gpu[01-02], which "
                               "starts in 20m")
    b2 = ClusterBuilder(hosts=1)
    b2.run(101, "r", hosts=[1], admin_comment=RES)
    b2.pend(1, "p", admin_comment=d("production", "USR1"))
    intents = apply_to_intents(Intents(), plan(b2.snapshot(), b2.fabric(), Settings(), Intents(),
                                               b2.now), b2.now)
    e = why(b2, 1, intents)
    assert e.blocking == "preemption"
    assert e.blocking_text.startswith("waiting for preemption pre-1-")
    assert e.blocking_text.endswith("to finish: 1 of 1 victim(s) still to leave gpu01")


def test_why_never_promises_a_start_the_held_nodes_cannot_give():
    """Issue 13, finding 1: the beneficiary's estimate rests on nodes held for it
    alone; before its reservation is named on it, or while another job sits on
    the held nodes, no start is promised."""
    from dataclasses import replace

    from slurmpolicy.model import Reservation

    b = ClusterBuilder(hosts=1)
    b.run(101, "r", hosts=[1], admin_comment=RES)
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    intents = apply_to_intents(Intents(), plan(b.snapshot(), b.fabric(), Settings(), Intents(),
                                               b.now), b.now)
    (p,) = intents.preemptions
    e = why(b, 1, intents)
    assert e.estimated_start is None
    assert e.estimate_basis == (f"no start promised: reservation {p.reservation} is not (yet) "
                                "in place for it alone")
    # Held for it alone: the victims' deadline is the promise.
    b.reservations = [Reservation(name=p.reservation, nodes=("gpu01",), start_time=b.now)]
    b.jobs = [replace(j, reservation=p.reservation) if j.job_id == 1 else j for j in b.jobs]
    intents = replace(intents, preemptions=(replace(p, victims=tuple(
        replace(v, deadline=b.now + 300) for v in p.victims)),))
    e = why(b, 1, intents)
    assert e.estimated_start == b.now + 300
    assert e.estimate_basis == "the victims' checkpoint deadlines"
    # Another job took the held node: nothing is promised.
    b.run(102, "r", hosts=[1], admin_comment=RES)
    e = why(b, 1, intents)
    assert e.estimated_start is None
    assert e.estimate_basis == "no start promised: job(s) 102 run on the held nodes gpu01"


def test_deferred_job():
    from slurmpolicy.settings import from_mapping

    s = from_mapping({"deferral": {"windows": {"night": {"hours": [0, 1]}}}})
    b = ClusterBuilder(hosts=1)
    b.run(101, "r", hosts=[1], admin_comment=RES)
    b.pend(1, "a", reason="BeginTime", begin_time=b.now + 3600,
           admin_comment=d("research", "USR1", defer="night"))
    e = explain(b.snapshot(), b.fabric(), s, Intents(), b.now, 1)
    assert e.blocking == "deferred"
    assert "deferred until 1h00m from now" in e.blocking_text


def test_another_partition_as_alternative():
    b = ClusterBuilder(hosts=4, partitions={"batch": [1, 2], "spare": [3, 4]})
    b.run(101, "r", hosts=[1, 2], time_limit=3600 + 7200, admin_comment=RES)
    b.pend(1, "a", admin_comment=RES)
    e = why(b, 1)
    (alt,) = [a for a in e.alternatives if a.change == "submit to partition spare"]
    assert alt.estimated_start == b.now


def test_running_job_placement_checkpoint_and_candidacy():
    b = ClusterBuilder(hosts=8, hosts_per_leaf=4)
    b.run(101, "r", hosts=[4, 5], ran=7200, admin_comment=RES, comment=f"ckpt:{b.now - 600:.0f}")
    b.run(102, "p", hosts=[1], admin_comment=d("production", "USR1"))
    b.run(103, "r", hosts=[2], ran=60, admin_comment=RES)
    e = why(b, 101)
    assert e.state == "RUNNING"
    assert e.placement_text.startswith("on gpu[04-05] spanning 2 NVLink domains, 2 leaves, 1 spine")
    assert e.last_checkpoint == b.now - 600
    assert e.preemption_candidate is True
    assert e.preemption_text == "may be preempted by a higher class; it would lose 4.0 GPU-h"
    assert why(b, 102).preemption_text == \
        "not a preemption candidate: class production is not preemptible"
    assert "less than the minimum runtime" in why(b, 103).preemption_text


def test_unknown_job():
    b = ClusterBuilder(hosts=1)
    with pytest.raises(JobGone, match="job 42 is not in the queue"):
        why(b, 42)


def test_pending_notes_say_what_preemption_and_reservations_could_do():
    b = ClusterBuilder(hosts=2, hosts_per_leaf=2)
    b.run(101, "r", hosts=[1], ran=7200, admin_comment=RES)
    b.run(102, "r", hosts=[2], ran=7200, admin_comment=RES, comment=f"ckpt:{b.now - 600:.0f}")
    b.pend(1, "p", nodes=2, waited=7200, admin_comment=d("production", "USR1"))
    e = why(b, 1, settings=WAITED)
    assert "a preemption could free 2 node(s) from job(s) 101, 102 (lost work 18.7 GPU-h)" \
        in e.notes
    assert "qualifies for a starvation reservation: it has waited 2h00m (threshold 1h00m)" \
        in e.notes
    # By default a wait alone earns no reservation (Slurm's backfill plans the job).
    assert not any("starvation reservation" in note for note in why(b, 1).notes)


def test_to_start_sooner_lists_only_changes_that_start_the_job_sooner():
    from slurmpolicy.policy.explain import sooner
    from slurmpolicy.policy.explanation import Alternative

    alts = (Alternative("ask for 1 node instead of 2", 100.0),
            Alternative("use --topology=any", 500.0),
            Alternative("submit to partition prod", None, "no placement"),
            Alternative("drop strict", 300.0))
    assert [a.change for a in sooner(alts, 300.0)] == ["ask for 1 node instead of 2"]
    assert [a.change for a in sooner(alts, None)] == [
        "ask for 1 node instead of 2", "use --topology=any", "drop strict"]


def test_a_job_still_completing_is_not_called_completed():
    """22.05's squeue --json and pyslurm print COMPLETING in place of how the job
    ended; the adapters read COMPLETED with the flag. It may have failed."""
    from slurmpolicy.model import JobState

    b = ClusterBuilder(hosts=2)
    b.run(1, hosts=[1])
    b.replace_job(1, state=JobState.COMPLETED, state_flags=frozenset({"COMPLETING"}))
    e = why(b, 1)
    assert e.state == "COMPLETING" and "COMPLETED" not in e.headline
    assert "once its epilog is done" in e.headline
    b.replace_job(1, state=JobState.FAILED, state_flags=frozenset())
    assert why(b, 1).headline == "Job 1 is FAILED"
