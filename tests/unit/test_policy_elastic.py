"""Elastic jobs (``--nodes=MIN-MAX`` and a checkpoint): chosen first among equal
victims, shrunk instead of evicted (the Requeue carries the smaller range), and
explained; the range comes from the admin_comment job_submit.lua writes."""

from __future__ import annotations

from dataclasses import replace

from slurmpolicy.jobpolicy import JobPolicy, parse_admin_comment, render_admin_comment
from slurmpolicy.policy import apply_to_intents, explain, plan
from slurmpolicy.policy.actions import Intents, Requeue, SignalCheckpoint, StartPreemption
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import Settings

PROD = d("production", "USR1")


def elastic(lo: int, hi: int, ckpt: str | None = "USR1") -> str:
    policy = parse_admin_comment(d("research", ckpt, grace=120))
    return render_admin_comment(replace(policy, node_range=(lo, hi)))


def test_the_range_round_trips_through_the_admin_comment():
    text = elastic(2, 4)
    assert text.endswith(" nodes=2-4")
    policy = parse_admin_comment(text)
    assert policy.node_range == (2, 4) and policy.elastic
    assert not parse_admin_comment(elastic(2, 4, "none")).elastic
    assert not parse_admin_comment("spolicy:v1 nodes=4-2").readable
    assert JobPolicy().node_range is None


def cluster(victim_admin: str, hosts: int = 3):
    b = ClusterBuilder(hosts=hosts, hosts_per_leaf=hosts)
    b.run(101, "r", hosts=list(range(1, hosts + 1)), admin_comment=victim_admin)
    b.pend(1, "p", admin_comment=PROD)
    return b


def drive_to_requeue(b):
    s = Settings()
    p1 = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    (start,) = [a for a in p1.actions if isinstance(a, StartPreemption)]
    assert [a.job_id for a in p1.actions if isinstance(a, SignalCheckpoint)] == [101]
    intents = apply_to_intents(Intents(), p1, b.now)
    b.replace_job(101, comment=f"ckpt:{b.now + 5:.0f}")
    p2 = plan(b.snapshot(), b.fabric(), s, intents, b.now + 10)
    (rq,) = [a for a in p2.actions if isinstance(a, Requeue)]
    return start, rq


def test_an_elastic_victim_is_shrunk_not_evicted():
    b = cluster(elastic(1, 3))
    start, rq = drive_to_requeue(b)
    assert len(start.nodes) == 1
    assert "shrink victim 101 from 3 to 2 node(s) (its range 1-3) instead of evicting it" \
        in start.reason
    assert (rq.shrink_min, rq.shrink_to) == (1, 2)
    assert rq.reason.endswith("; shrink victim 101 from 3 to 2 node(s) (its range 1-3) "
                              "instead of evicting it")


def test_a_victim_that_would_fall_below_its_minimum_or_cannot_checkpoint_is_evicted():
    b = cluster(elastic(3, 4))
    _, rq = drive_to_requeue(b)
    assert rq.shrink_to is None and "shrink" not in rq.reason
    rigid = cluster(d("research", "USR1", grace=120))
    _, rq = drive_to_requeue(rigid)
    assert rq.shrink_to is None


def test_among_equal_victims_the_elastic_one_goes_first():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    b.run(101, "r", hosts=[1, 2], admin_comment=d("research", "USR1", grace=120))
    b.run(102, "r", hosts=[3, 4], admin_comment=elastic(1, 2))
    b.pend(1, "p", admin_comment=PROD)
    (start,) = [a for a in plan(b.snapshot(), b.fabric(), Settings(), Intents(), b.now).actions
                if isinstance(a, StartPreemption)]
    assert start.victims == (102,)


def test_why_tells_a_pending_elastic_job_it_starts_with_what_is_free():
    b = ClusterBuilder(hosts=4, hosts_per_leaf=4)
    b.pend(5, "r", nodes=2, admin_comment=elastic(2, 4))
    exp = explain(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, 5)
    assert "elastic: it may start on as few as 2 of its 2-4 nodes, with what is free" in exp.notes


def test_why_tells_a_running_elastic_job_it_would_be_shrunk():
    b = cluster(elastic(1, 3))
    exp = explain(b.snapshot(), b.fabric(), Settings(), Intents(), b.now, 101)
    assert "elastic: runs on 3 of 1-3 nodes; a preemption would shrink it (down to 1) rather " \
           "than evict it" in exp.notes
