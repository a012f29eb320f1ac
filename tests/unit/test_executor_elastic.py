"""The executor's side of shrinking an elastic victim: after its requeue, the
node range is set at once (journalled, audited), and a failure is said."""

from __future__ import annotations

from pathlib import Path

from test_executor import PID, RESV, Recorder, job, run, signal, snap, start

from slurmpolicy.daemon.executor import Executor
from slurmpolicy.errors import SlurmError
from slurmpolicy.model import JobState, Reservation
from slurmpolicy.policy.actions import Requeue
from slurmpolicy.settings import Settings
from slurmpolicy.store import Journal


class Resizer(Recorder):
    def set_node_count(self, job_id: int, min_nodes: int, max_nodes: int) -> None:
        self._rec("set_node_count", (job_id, min_nodes, max_nodes))


def shrink_requeue() -> Requeue:
    return Requeue(reason="acknowledged; shrink victim 1 from 3 to 2 node(s)", preemption_id=PID,
                   job_id=1, restart_count=0, after="acknowledged", shrink_to=2, shrink_min=1)


def story(tmp_path: Path, fail: Exception | None = None) -> tuple[Journal, Resizer]:
    journal = Journal(tmp_path)
    rec = Resizer()
    if fail is not None:
        rec.fail[("set_node_count", (1, 1, 2))] = fail
    ex = Executor(rec, journal, Settings(), clock=lambda: 1000.0)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, signal())
    s1 = snap(job(1, comment="ckpt:1060"), job(3, JobState.PENDING),
              reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex, s1, shrink_requeue(), now=1061.0)
    assert ("requeue", 1) in rec.calls and not [c for c in rec.calls if c[0] == "set_node_count"]
    # Slurm still completes it (22.05: COMPLETING): wait; then pending: shrink, once.
    completing = snap(job(1, JobState.COMPLETED, state_flags=frozenset({"COMPLETING"}),
                          restart_count=1), job(3, JobState.PENDING))
    run(ex, completing, now=1062.0)
    assert not [c for c in rec.calls if c[0] == "set_node_count"]
    pending = snap(job(1, JobState.PENDING, restart_count=1), job(3, JobState.PENDING))
    run(ex, pending, now=1066.0)
    run(ex, pending, now=1071.0)
    return journal, rec


def test_the_range_is_set_once_the_requeued_job_is_pending(tmp_path: Path) -> None:
    journal, rec = story(tmp_path)
    assert rec.calls.count(("set_node_count", (1, 1, 2))) == 1
    at = rec.calls.index(("set_node_count", (1, 1, 2)))
    assert rec.calls[at + 1] == ("set_begin_time", 1)  # no requeue delay: its old run is over
    shrink = [r for r in journal.read_audit(job_id=1) if r.kind == "ShrinkElastic"]
    assert len(shrink) == 1 and shrink[0].outcome == "ok"
    assert "requeued at 1-2 node(s)" in shrink[0].reason


def test_a_failed_resize_is_audited(tmp_path: Path) -> None:
    journal, _ = story(tmp_path, SlurmError("Job is no longer pending execution"))
    (shrink,) = [r for r in journal.read_audit(job_id=1) if r.kind == "ShrinkElastic"]
    assert shrink.outcome != "ok" and "no longer pending" in shrink.outcome
