"""Property tests of the policy over generated clusters and queues (hypothesis).

Invariants: never a victim of the same or a higher class, never a
non-preemptible victim (class, --preemptible=no, after= window, minimum
runtime, budget), never a requeue before a signal plus an acknowledgement or
the deadline, never an account pushed below its guaranteed share, plans are
deterministic, and a second plan on the same inputs plus the first plan's
intents starts nothing new.
"""

from __future__ import annotations

from dataclasses import replace

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpolicy.jobpolicy import last_checkpoint, parse_admin_comment
from slurmpolicy.model import Reservation
from slurmpolicy.policy import apply_to_intents, plan, priority
from slurmpolicy.policy.actions import (
    CreateReservation,
    Intents,
    Requeue,
    SetBeginTime,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    UpdateReservation,
    VictimState,
)
from slurmpolicy.policy.context import Context
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.settings import from_mapping

CLASSES = ["production", "research", "experimental"]
ACCOUNTS = ["vision", "nlp", "speech"]
RANK = {"production": 3, "research": 2, "experimental": 1}


@st.composite
def clusters(draw):
    hosts = draw(st.integers(2, 12))
    per_leaf = draw(st.sampled_from([1, 2, 4]))
    gpus = draw(st.sampled_from([4, 8]))
    b = ClusterBuilder(hosts=hosts, gpus=gpus, hosts_per_leaf=per_leaf)
    share = draw(st.sampled_from([{}, {"vision": 0.5}, {"vision": 0.3, "nlp": 0.3}]))
    s = from_mapping({
        "fairshare": {"shares": share},
        "reservations": {"large_job_gpus": gpus, "starvation_wait": 600,
                         "reserve_after_wait": draw(st.booleans())},
        "preemption": {"min_runtime": 300,
                       "no_checkpoint_partitions": draw(st.sampled_from([[], ["batch"],
                                                                         ["other"]]))},
        "deferral": {"windows": {"night": {"hours": [0, 1, 2]}}},
    })
    free_gpus = {i: gpus for i in range(1, hosts + 1)}
    job_id = 100
    for _ in range(draw(st.integers(0, 2 * hosts))):
        host = draw(st.integers(1, hosts))
        if free_gpus[host] <= 0:
            continue
        n = draw(st.integers(1, free_gpus[host]))
        width = draw(st.integers(1, 2))
        hosts_of = [host] + [h for h in range(host + 1, host + width)
                             if h <= hosts and free_gpus[h] >= n]
        for h in hosts_of:
            free_gpus[h] -= n
        job_id += 1
        ran = draw(st.sampled_from([60.0, 400.0, 3600.0, 20000.0, 20000.0]))
        ck = draw(st.sampled_from([None, "none", "USR1"]))
        admin = d(draw(st.sampled_from(["research", "experimental", "experimental",
                                         "production"])), ck,
                  preemptible=draw(st.booleans()) or draw(st.booleans()),
                  after=draw(st.sampled_from([0.0, 0.0, 1000.0])), grace=60)
        comment = draw(st.sampled_from(["", f"ckpt:{b.now - 100:.0f}"]))
        b.run(job_id, draw(st.sampled_from(ACCOUNTS)), hosts=hosts_of, gpus_per_node=n,
              ran=ran, time_limit=ran + draw(st.sampled_from([600.0, 7200.0])),
              admin_comment=admin, comment=comment)
    for _ in range(draw(st.integers(0, 8))):
        job_id += 1
        topo = draw(st.sampled_from(["any", "leaf"]))
        b.pend(job_id, draw(st.sampled_from(ACCOUNTS)), nodes=draw(st.integers(1, 3)),
               gpus_per_node=draw(st.sampled_from([1, gpus // 2, gpus])),
               waited=draw(st.sampled_from([10.0, 1000.0, 9000.0])),
               admin_comment=d(draw(st.sampled_from(["production", "production", "research",
                                                     "experimental"])), "USR1", topology=topo,
                               strict=draw(st.booleans()),
                               defer=draw(st.sampled_from([None, None, "night"]))))
    if draw(st.booleans()):
        # Odd corners: a down host, a foreign reservation, an unlimited or GPU-less job.
        b.down = {b.host(draw(st.integers(1, hosts)))}
        b.reservations = [Reservation(name="maint", nodes=(b.host(1),),
                                      start_time=b.now + draw(st.sampled_from([-60, 600])),
                                      end_time=b.now + 7200)]
        job_id += 1
        b.pend(job_id, "nlp", gpus_per_node=0, time_limit=None)
        job_id += 1
        b.pend(job_id, "vision", nodes=1, time_limit=None, waited=5000,
               admin_comment=d("production", None))
    budget = {j.job_id: (b.now - 1000,) * draw(st.sampled_from([0, 0, 0, 1, 3]))
              for j in b.jobs if j.is_running}
    intents = Intents(preempted_at=budget,
                      missed_acks={j: 1 for j in budget if draw(st.booleans())})
    return b, s, intents


def check_victims(b, s, intents, p):
    snap = b.snapshot()
    by_id = {j.job_id: j for j in snap.jobs}
    seen: set[int] = set()
    total = sum(n.gpus for n in snap.nodes)
    held: dict[str, int] = {}
    for j in snap.jobs:
        if j.is_running:
            held[j.account] = held.get(j.account, 0) + j.gpus
    in_flight = {v.job_id for pr in intents.open_preemptions() for v in pr.victims
                 if v.state not in (VictimState.REQUEUED, VictimState.ENDED)}
    for pr in intents.open_preemptions():
        for v in pr.victims:
            if v.job_id in in_flight and v.job_id in by_id:
                held[by_id[v.job_id].account] -= by_id[v.job_id].gpus
    for start in p.actions:
        if not isinstance(start, StartPreemption):
            continue
        ben = by_id[start.beneficiary]
        ben_rank = RANK[parse_admin_comment(ben.admin_comment).job_class]
        # The victims free what the beneficiary needs on the chosen nodes.
        assert len(start.nodes) == ben.node_count
        nodes = {n.name: n for n in snap.nodes}
        for host in start.nodes:
            freed = sum(by_id[v].gpus_on_node.get(host, 0) for v in start.victims)
            assert nodes[host].gpus_free + freed >= ben.gpus_per_node, host
        for vid in start.victims:
            v = by_id[vid]
            pol = parse_admin_comment(v.admin_comment)
            assert RANK[pol.job_class] < ben_rank, "victim of the same or a higher class"
            assert s.classes[pol.job_class].preemptible
            assert pol.preemptible, "--preemptible=no victim"
            ran = b.now - v.start_time
            assert ran >= pol.preemptible_after and ran >= s.preemption.min_runtime
            recent = [t for t in intents.preempted_at.get(vid, ()) if t > b.now - 86400]
            assert len(recent) < s.preemption.max_per_job_per_day
            assert vid not in seen and vid not in in_flight, "victim taken twice"
            seen.add(vid)
            held[v.account] -= v.gpus
    for account, gpus in held.items():
        guaranteed = s.fairshare.shares.get(account, 0.0) * total
        took = any(by_id[v].account == account for a in p.actions
                   if isinstance(a, StartPreemption) for v in a.victims)
        if took:
            assert gpus >= guaranteed - 1e-6, f"{account} pushed below its share"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_victims_are_always_allowed_and_shares_kept(case):
    b, s, intents = case
    p = plan(b.snapshot(), b.fabric(), s, intents, b.now)
    check_victims(b, s, intents, p)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_plans_are_deterministic_and_second_plan_starts_nothing_new(case):
    b, s, intents = case
    snap, fab = b.snapshot(), b.fabric()
    first = plan(snap, fab, s, intents, b.now)
    assert first == plan(b.snapshot(), b.fabric(), s, intents, b.now)
    after = apply_to_intents(intents, first, b.now)
    second = plan(snap, fab, s, after, b.now)
    new = [a for a in second.actions
           if isinstance(a, (StartPreemption, CreateReservation, UpdateReservation,
                             SetSiteFactor, SetBeginTime))]
    assert not new, new
    # Continuing steps of what the first plan started are allowed, once per victim;
    # a signal the first plan sent (with its StartPreemption) is never repeated.
    signals = [a.job_id for a in second.actions if isinstance(a, SignalCheckpoint)]
    assert len(signals) == len(set(signals))
    sent = {a.job_id for a in first.actions if isinstance(a, SignalCheckpoint)}
    assert not sent & set(signals)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.randoms(use_true_random=False))
def test_a_plan_does_not_depend_on_the_order_slurm_lists_jobs_in(case, rnd):
    """squeue and pyslurm list jobs in no promised order (nor does the
    simulator's snapshot): the same jobs in another order give the same
    actions and the same effective priorities."""
    b, s, intents = case
    snap, fab = b.snapshot(), b.fabric()
    jobs = list(snap.jobs)
    rnd.shuffle(jobs)
    first = plan(snap, fab, s, intents, b.now)
    again = plan(replace(snap, jobs=tuple(jobs)), fab, s, intents, b.now)
    assert sorted(map(repr, first.actions)) == sorted(map(repr, again.actions))
    assert first.effective_priority == again.effective_priority
    assert first.held_back == again.held_back


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(st.tuples(st.sampled_from([10.0, 30.0, 90.0]),
                                              st.sampled_from([False, False, True])),
                            min_size=3, max_size=10))
def test_never_a_requeue_before_signal_and_ack_or_deadline(case, steps):
    b, s, intents = case
    now = b.now
    for dt, ack in steps:
        snap = b.snapshot(now)
        p = plan(snap, b.fabric(), s, intents, now)
        check_victims_requeue(snap, intents, p, now)
        intents = apply_to_intents(intents, p, now)
        # The executor's effects that Slurm would show: requeued victims pend again.
        for a in p.actions:
            if isinstance(a, Requeue):
                b.replace_job(a.job_id, state=__import__("slurmpolicy.model", fromlist=["x"])
                              .JobState.PENDING, nodes=(), restart_count=a.restart_count + 1)
        now += dt
        if ack:
            for pr in intents.open_preemptions():
                for v in pr.victims:
                    if v.state is VictimState.SIGNALLED:
                        b.replace_job(v.job_id, comment=f"ckpt:{now:.0f}")
        b.now = now


def check_victims_requeue(snap, intents, p, now):
    by_id = {j.job_id: j for j in snap.jobs}
    victims = {(pr.preemption_id, v.job_id): v for pr in intents.preemptions for v in pr.victims}
    starting = {(a.preemption_id, v) for a in p.actions if isinstance(a, StartPreemption)
                for v in a.victims}
    for a in p.actions:
        if not isinstance(a, Requeue):
            continue
        if (a.preemption_id, a.job_id) in starting:
            # A victim of a preemption this plan starts: only one without a signal.
            assert a.after == "no-checkpoint", "requeue in the plan that starts the preemption"
            pol = parse_admin_comment(by_id[a.job_id].admin_comment)
            assert pol.checkpoint is None or pol.checkpoint.signal is None
            continue
        v = victims[(a.preemption_id, a.job_id)]
        job = by_id[a.job_id]
        pol = parse_admin_comment(job.admin_comment)
        if a.after == "no-checkpoint":
            assert pol.checkpoint is None or pol.checkpoint.signal is None
            continue
        assert v.state in (VictimState.SIGNALLED, VictimState.ACKNOWLEDGED,
                           VictimState.DEADLINE), "requeue before any signal"
        assert v.signalled_at is not None
        ack = last_checkpoint(job.comment)
        acked = ack is not None and ack >= v.signalled_at
        assert acked or (v.deadline is not None and now >= v.deadline), \
            "requeue before ack or deadline"


def test_property_generator_makes_preemptions_happen():
    """Guard against a vacuous generator: a fixed full cluster does preempt."""
    b = ClusterBuilder(hosts=2)
    b.run(101, "nlp", hosts=[1, 2], admin_comment=d("experimental", "USR1"))
    b.pend(1, "vision", admin_comment=d("production", "USR1"))
    s = from_mapping({})
    p = plan(b.snapshot(), b.fabric(), s, Intents(), b.now)
    assert [a for a in p.actions if isinstance(a, StartPreemption)]
    check_victims(b, s, Intents(), p)
    replace(Intents())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_job_can_be_explained(case):
    import json

    from slurmpolicy.policy import explain

    b, s, intents = case
    snap, fab = b.snapshot(), b.fabric()
    first = plan(snap, fab, s, intents, b.now)
    after = apply_to_intents(intents, first, b.now)
    for job in snap.jobs:
        e = explain(snap, fab, s, after, b.now, job.job_id)
        assert e.headline and e.state == job.state.value
        if job.is_pending:
            assert e.blocking in {"held", "dependency", "quota", "deferred", "preemption",
                                  "reservation", "topology", "fragmentation", "resources",
                                  "priority", "none"}
            assert e.position is not None
        json.dumps(e.to_dict())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_free_gpus_go_to_the_same_jobs_as_one_fit_test_per_job(case, magnetic):
    """assign_free skips most of a full cluster's queue by a GPU count and finds
    each job's best fit in an index of the free hosts: the jobs it starts and
    the GPUs they take are those of a fit test for every job, each a walk over
    every free host."""
    b, s, intents = case
    if magnetic and b.jobs:
        # A job with a reservation of its own active now: the count never skips it.
        job = next(j for j in b.jobs if j.is_pending) if any(
            j.is_pending for j in b.jobs) else None
        if job is not None:
            b.reservations = [*b.reservations, Reservation(
                name=f"{s.reservations.name_prefix}job_{job.job_id}", nodes=(b.host(1),),
                start_time=b.now - 60, end_time=b.now + 7200,
                flags=frozenset({"MAGNETIC"}), users=(job.user,))]
    check_free_gpus_against_the_walk(b, s, intents)


def check_free_gpus_against_the_walk(b, s, intents):
    """assign_free's starts and taken GPUs are those of a fit test per job in
    Slurm's order, each a walk over every free host."""
    snap, fab = b.snapshot(), b.fabric()
    ctx = Context(snap, fab, s, intents, b.now)
    order = priority.compute(ctx).slurm_order()
    ctx.assign_free(order)
    fast = (set(ctx.starts_on_free or ()), dict(ctx.free_taken))
    ref = Context(snap, fab, s, intents, b.now)
    ref.free_taken = {}
    starts = {j.job_id for j in order
              if not ref.blocked_by_slurm(j) and ref._take_free_walk(j) is not None}
    assert fast == (starts, ref.free_taken)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(st.tuples(st.sampled_from([300, 600, 3000, 9000]),
                                      st.integers(1, 3),
                                      st.sampled_from(["plain", "magnetic", "own"])),
                            min_size=1, max_size=4),
       st.lists(st.sampled_from([None, 200.0, 700.0, 4000.0]), min_size=1),
       st.lists(st.sampled_from(ACCOUNTS), min_size=1))
def test_free_gpus_with_reservations_ahead_go_to_the_same_jobs(case, ahead, limits, users):
    """assign_free stops asking a shape that found no room (jobs only take GPUs
    during the walk); a reservation ahead bars hosts by a job's time limit and
    user, but not for the job it is for, so jobs of one shape but other limits,
    users or reservations are asked again: the jobs it starts are those of a
    fit test for every job."""
    b, s, intents = case
    b.jobs = [replace(j, time_limit=limits[i % len(limits)], user=users[i % len(users)])
              if j.is_pending else j for i, j in enumerate(b.jobs)]
    pending = [j.job_id for j in b.jobs if j.is_pending] or [0]
    hosts = len(b.fabric().hosts)
    b.reservations = [*b.reservations, *(
        Reservation(name=(f"{s.reservations.name_prefix}job_{pending[i % len(pending)]}"
                          if kind == "own" else f"ahead{i}"),
                    nodes=(b.host(1 + (h + i) % hosts),),
                    start_time=b.now + start, end_time=b.now + start + 7200,
                    flags=frozenset({"MAGNETIC"} if kind == "magnetic" else ()),
                    users=(users[i % len(users)],) if kind == "magnetic" else ())
        for i, (start, h, kind) in enumerate(ahead))]
    check_free_gpus_against_the_walk(b, s, intents)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(st.tuples(st.sampled_from([-60, 300, 600, 3000, 9000]),
                                      st.sampled_from(["maint", "own", "named", "magnetic"])),
                            max_size=6),
       st.lists(st.sampled_from([None, 200.0, 600.0, 700.0, 4000.0, 86400.0]), min_size=1))
def test_reservations_ahead_of_a_job_are_those_its_limit_runs_into(case, ahead, limits):
    """reserved_later_for answers from a prefix by start time, shared by key:
    the same names as testing every reservation against the job."""
    b, s, intents = case
    b.jobs = [replace(j, time_limit=limits[i % len(limits)]) if j.is_pending else j
              for i, j in enumerate(b.jobs)]
    pending = [j for j in b.jobs if j.is_pending]
    if not pending:
        return
    res = []
    for i, (start, kind) in enumerate(ahead):
        owner = pending[i % len(pending)]
        name = {"own": f"{s.reservations.name_prefix}job_{owner.job_id}",
                "named": owner.reservation or f"{kind}{i}"}.get(kind, f"{kind}{i}")
        res.append(Reservation(name=name, nodes=(b.host(1 + i % 2),),
                               start_time=b.now + start, end_time=b.now + start + 7200,
                               flags=frozenset({"MAGNETIC"} if kind == "magnetic" else ()),
                               users=(owner.user,) if kind == "magnetic" else ()))
    b.reservations = res
    ctx = Context(b.snapshot(), b.fabric(), s, intents, b.now)
    for job in pending:
        end = b.now + job.time_limit if job.time_limit else float("inf")
        own = ctx.own_reservations(job)
        want = frozenset(r.name for r in ctx.reserved_later
                         if r.start_time is not None and r.start_time < end
                         and r.name not in own
                         and not ("MAGNETIC" in r.flags and job.user in r.users))
        assert ctx.reserved_later_for(job) == want


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([0.0, 0.0, 50.0]), st.booleans())
def test_every_site_factor_is_the_sum_of_its_parts(case, bonus_per_hour, seen_fragmented):
    """priority.compute's walk of the queue (which takes a short path for the
    plain jobs of a deep queue) gives each waiting job what ``factors()``
    adds up, fragmentation bonus included, and Slurm's priority moved by
    the change of its site factor."""
    b, s, intents = case
    s = msgspec.structs.replace(s, aging=msgspec.structs.replace(
        s.aging, fragmentation_bonus_per_hour=bonus_per_hour))
    snap = b.snapshot()
    pending = [j for j in snap.jobs if j.is_pending]
    if seen_fragmented and pending:
        intents = replace(intents, fragmented_since={pending[0].job_id: b.now - 7200})
    ctx = Context(snap, b.fabric(), s, intents, b.now)
    result = priority.compute(ctx)
    assert set(result.site_factor) == {j.job_id for j in pending}
    for job in pending:
        value = result.site_factor[job.job_id]
        parts = priority.factors(ctx, job, job.job_id in result.bonus)
        assert value == parts.total, (job.job_id, parts)
        assert result.effective[job.job_id] == job.priority - job.site_factor + value


def _advance_usage_reference(usage, usage_at, running, now, half_life):
    """advance_usage as first written: a weight per job, every job alike."""
    from slurmpolicy.policy.fairshare import decay
    result = decay(usage, usage_at, now, half_life)
    for job in running:
        if job.gpus <= 0:
            continue
        begin = job.start_time if job.start_time is not None else now
        if usage_at is not None:
            begin = max(begin, usage_at)
        span = max(0.0, now - begin)
        if span <= 0:
            continue
        weight = 0.5 ** ((span / 2) / half_life) if half_life > 0 else 1.0
        result[job.account] = result.get(job.account, 0.0) + job.gpus * span * weight
    return result


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 16),
                          st.one_of(st.none(), st.floats(0.0, 2000.0))), max_size=30),
       st.one_of(st.none(), st.floats(0.0, 2000.0)), st.floats(0.0, 3000.0),
       st.sampled_from([0.0, 3600.0, 7 * 86400.0]))
def test_advance_usage_is_the_per_job_sum_bit_for_bit(rows, usage_at, now, half_life):
    """The usage the fair share reads from cycle to cycle: the shortcut for the
    jobs running since ``usage_at`` (one weight for all) sums the same floats
    in the same order as a weight worked out per job."""
    from slurmpolicy.model import Job, JobState
    from slurmpolicy.policy.fairshare import advance_usage
    jobs = [Job(job_id=i, name="j", user="u", account=acct, partition="p",
                state=JobState.RUNNING, gpus=gpus, start_time=start)
            for i, (acct, gpus, start) in enumerate(rows)]
    usage = {"a": 1000.0, "b": 5.5}
    assert (advance_usage(usage, usage_at, jobs, now, half_life)
            == _advance_usage_reference(usage, usage_at, jobs, now, half_life))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_victim_order_key_is_the_rules_it_names(case):
    """preemption's victim key, worked out in one pass, is the tuple of the
    functions it names for every running job (shelter, checkpoint, cost,
    lost work, elastic), whatever its directives, acks and missed acks."""
    from slurmpolicy.policy import elastic
    from slurmpolicy.policy import preemption as pre

    b, s, intents = case
    ctx = Context(b.snapshot(), b.fabric(), s, intents, b.now)
    for job in ctx.running:
        assert pre._sort_key(ctx, job) == (
            ctx.shielded_by_no_checkpoint(job), not ctx.can_checkpoint(job),
            pre.preemption_cost(ctx, job), pre.lost_work(ctx, job),
            elastic.node_range(ctx, job) is None, job.job_id)
