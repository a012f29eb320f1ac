"""The pure lifecycle decisions: why a run ended, whether it is retried, which
nodes are suspect and which may be drained."""

from __future__ import annotations

import pytest

from slurmpolicy import settings as settings_mod
from slurmpolicy.model import Node
from slurmpolicy.policy.lifecycle import (
    Cause,
    NodeFailure,
    RunEnd,
    backoff,
    classify,
    decide_retry,
    suspicion,
)

SITE = settings_mod.from_mapping({
    "lifecycle": {"hardware_exit_codes": [75], "startup_exit_codes": [42],
                  "startup_window": "5:00", "backoff": 60, "max_backoff": 300,
                  "default_retries": 2},
    "node_health": {"drain": True, "min_failures": 3, "min_users": 2,
                    "max_drained_share": 0.5},
})
NOW = 1_800_000_000.0


def node(name: str, state: str = "IDLE", flags: frozenset[str] = frozenset(),
         reason: str = "", gpus: int = 8, gpu_type: str = "h100") -> Node:
    return Node(name, state, flags, reason, gpus_by_type={gpu_type: gpus})


HEALTHY = {n: node(n) for n in ("a", "b", "c")}


def end(state: str, code: int | None = 0, *, ran: float = 3600.0, nodes=("a",),
        **kw) -> RunEnd:
    return RunEnd(7, "alice", state, nodes, code, None, NOW - ran, NOW, 0, **kw)


@pytest.mark.parametrize(("run", "nodes", "cause", "own"), [
    (end("NODE_FAIL"), HEALTHY, Cause.NODE_FAIL, False),
    (end("BOOT_FAIL"), HEALTHY, Cause.NODE_FAIL, False),
    (end("FAILED", 1), {**HEALTHY, "a": node("a", "DOWN", frozenset({"NOT_RESPONDING"}))},
     Cause.NODE_LOST, False),
    (end("FAILED", 1), {**HEALTHY, "a": node("a", "MIXED", frozenset({"DRAIN"}), "bad gpu")},
     Cause.NODE_LOST, False),
    (end("FAILED", 75), HEALTHY, Cause.HARDWARE, False),
    (end("FAILED", 42, ran=60), HEALTHY, Cause.STARTUP, False),
    (end("FAILED", 42, ran=3600), HEALTHY, Cause.EXIT, True),
    (end("FAILED", 1), HEALTHY, Cause.EXIT, True),
    (end("OUT_OF_MEMORY", 0), HEALTHY, Cause.OOM, True),
    (end("TIMEOUT", 0), HEALTHY, Cause.TIMEOUT, True),
    (end("CANCELLED", 0), HEALTHY, Cause.CANCELLED, True),
    (end("COMPLETED", 0), HEALTHY, Cause.COMPLETED, True),
    (end("PENDING", None, requeued_by_slurm=True),
     {**HEALTHY, "a": node("a", "DOWN", frozenset({"NOT_RESPONDING"}))},
     Cause.REQUEUED_BY_SLURM, False),
    (end("PENDING", None, preempted_by_us=True), HEALTHY, Cause.PREEMPTED, True),
])
def test_classify(run, nodes, cause, own):
    verdict = classify(run, nodes, SITE)
    assert verdict.cause is cause
    assert verdict.not_own_fault is (not own)
    assert bool(verdict.suspects) is (not own)


def test_node_lost_names_the_node_and_its_reason():
    nodes = {**HEALTHY, "a": node("a", "MIXED", frozenset({"DRAIN"}), "Xid 79")}
    verdict = classify(end("FAILED", 1), nodes, SITE)
    assert verdict.suspects == ("a",)
    assert "node a DRAIN (Xid 79)" in verdict.evidence


def _decide(verdict, *, done=0, ckpt=True, asked=None, excluded=()):
    return decide_retry(verdict, can_checkpoint=ckpt, job_class=None, asked=asked,
                        retries_done=done, already_excluded=excluded, settings=SITE, now=NOW)


def test_retry_away_from_the_suspect_with_doubling_backoff():
    verdict = classify(end("NODE_FAIL"), HEALTHY, SITE)
    first = _decide(verdict, excluded=("z",))
    assert first.retry and first.attempt == 1 and first.allowed == 2
    assert first.exclude == ("a", "z")
    assert first.begin_at == NOW + 60
    assert "retry 1 of 2" in first.reason and "away from a" in first.reason
    second = _decide(verdict, done=1)
    assert second.retry and second.begin_at == NOW + 120
    assert backoff(5, SITE) == 300  # capped at max_backoff


def test_no_retry_when_own_fault_spent_or_unable_to_checkpoint():
    own = classify(end("FAILED", 1), HEALTHY, SITE)
    assert not _decide(own).retry and "its own" in _decide(own).reason
    node_fail = classify(end("NODE_FAIL"), HEALTHY, SITE)
    spent = _decide(node_fail, done=2)
    assert not spent.retry and "all 2 retries used" in spent.reason
    assert not _decide(node_fail, ckpt=False).retry
    assert not _decide(node_fail, asked=0).retry
    assert _decide(node_fail, asked=5, done=4).retry


def fails(name: str, users: list[str], at: float = NOW - 60) -> list[NodeFailure]:
    return [NodeFailure(name, 100 + i, u, at, "hardware") for i, u in enumerate(users)]


def test_drain_needs_enough_failures_of_enough_users_in_the_window():
    nodes = [node(n) for n in ("a", "b", "c", "d")]
    one_user = suspicion(fails("a", ["u1", "u1", "u1"]), nodes, SITE, NOW)
    assert one_user and not one_user[0].drain and not one_user[0].held_back
    two = suspicion(fails("a", ["u1", "u2"]), nodes, SITE, NOW)
    assert not two[0].drain
    old = suspicion(fails("a", ["u1", "u2", "u3"], at=NOW - 7200), nodes, SITE, NOW)
    assert old == []
    due = suspicion(fails("a", ["u1", "u2", "u1"]), nodes, SITE, NOW)
    assert due[0].drain
    assert due[0].evidence == ("spolicy: 3 failed job(s) of 2 user(s) in 1h: "
                               "jobs 100,101,102 (hardware)")


def test_drain_respects_the_share_and_the_last_node_of_a_kind():
    nodes = [node("a"), node("b"), node("c", gpu_type="a100"), node("d", gpu_type="a100")]
    many = fails("a", ["u1", "u2", "u3"]) + fails("b", ["u1", "u2", "u3"])
    got = {s.node: s for s in suspicion(many, nodes, SITE, NOW)}
    # Share 0.5 of 4 nodes: two may be drained, but b would be the last h100 node.
    assert got["a"].drain
    assert not got["b"].drain and "last schedulable node of its kind" in got["b"].held_back
    drained = [node("a", "IDLE", frozenset({"DRAIN"}), "spolicy: earlier"), *nodes[1:]]
    more = fails("c", ["u1", "u2", "u3"]) + fails("d", ["u4", "u5", "u6"])
    got = {s.node: s for s in suspicion(more, drained, SITE, NOW)}
    drains = [n for n, s in got.items() if s.drain]
    assert len(drains) == 1  # 1 already drained by us + 1 = 2 of 4
    held = [s for s in got.values() if not s.drain]
    assert "share limit: 2 of 4" in held[0].held_back


def test_drain_off_only_shows_suspicion():
    quiet = settings_mod.from_mapping({"node_health": {"min_failures": 2, "min_users": 2}})
    got = suspicion(fails("a", ["u1", "u2"]), [node("a"), node("b")], quiet, NOW)
    assert not got[0].drain and "draining is off" in got[0].held_back


def test_life_figures_by_class_and_account():
    from slurmpolicy.policy.lifecycle import life_figures

    base = {"job_class": "research", "account": "vision", "submit_time": 0.0,
            "ended_at": 1000.0, "gpus": 8}
    rows = [
        # Waited 100 s, ran twice (one recovery of 50 s after a node failure), finished.
        {**base, "runs": 2, "failed_starts": 0, "retries": 1, "pending_seconds": 100.0,
         "gpu_seconds": 7200.0, "lost_gpu_seconds": 720.0, "cause": "completed",
         "recoveries": 1, "recovery_seconds": 50.0, "signals": 1, "acks": 1},
        # Failed at start-up by its own exit code, after waiting 300 s of its 1000.
        {**base, "runs": 1, "failed_starts": 1, "retries": 0, "pending_seconds": 300.0,
         "gpu_seconds": 3600.0, "lost_gpu_seconds": 0.0, "cause": "exit",
         "recoveries": 0, "recovery_seconds": 0.0, "signals": 1, "acks": 0},
        {**base, "account": "nlp", "runs": 1, "cause": "completed", "gpu_seconds": 360.0,
         "pending_seconds": 0.0},
    ]
    got = life_figures(rows)
    vision = got[("research", "vision")]
    assert vision["jobs_ended"] == 2
    assert vision["startup_success_ratio"] == pytest.approx(1 - 1 / 3)
    assert vision["abnormal_exit_ratio"] == 0.5
    assert vision["checkpoint_success_ratio"] == 0.5
    assert vision["recovery_seconds_mean"] == 50.0
    assert vision["retries_per_job"] == 0.5
    assert vision["queueing_share_mean"] == pytest.approx((0.1 + 0.3) / 2)
    assert vision["gpu_hours_finished"] == pytest.approx((7200 - 720) / 3600)
    assert vision["gpu_hours_allocated"] == pytest.approx(3.0)
    nlp = got[("research", "nlp")]
    assert "checkpoint_success_ratio" not in nlp and "recovery_seconds_mean" not in nlp
