"""Pure logic of the journal and the executor, against a recorder of calls.

The real proof (a real Slurm) is in tests/integration/test_daemon_*.py; here
only the bookkeeping: intents before calls, one signal per (job, restart),
one requeue, idempotent answers, the call cap, reconcile after a crash.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurmpolicy.daemon.executor import Executor
from slurmpolicy.errors import JobAlreadyPending, JobGone, ReservationError, SlurmUnavailable
from slurmpolicy.model import Job, JobState, Reservation, Snapshot
from slurmpolicy.policy.actions import (
    FinishPreemption,
    Plan,
    PreemptionState,
    Requeue,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    VictimState,
)
from slurmpolicy.settings import Daemon, Settings
from slurmpolicy.store import STARTED, Journal


class Recorder:
    """Records calls; raises what it is told to for a given (method, job)."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail: dict[tuple[str, object], Exception] = {}
        self.admin_comments: dict[int, str] = {}

    def _rec(self, method: str, key: object) -> None:
        self.calls.append((method, key))
        exc = self.fail.get((method, key))
        if exc is not None:
            raise exc

    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        self._rec("set_site_factor", job_id)

    def signal(self, job_id: int, signal: str, target: str = "batch") -> None:
        self._rec("signal", job_id)

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self._rec("requeue", job_id)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self._rec("set_admin_comment", job_id)
        self.admin_comments[job_id] = text

    def set_comment(self, job_id: int, text: str) -> None:
        self._rec("set_comment", job_id)

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self._rec("set_begin_time", job_id)

    def set_job_reservation(self, job_id: int, name: str) -> None:
        self._rec("set_job_reservation", job_id)

    def create_reservation(self, spec: object) -> None:
        self._rec("create_reservation", getattr(spec, "name", None))

    def update_reservation(self, spec: object) -> None:
        self._rec("update_reservation", getattr(spec, "name", None))

    def delete_reservation(self, name: str) -> None:
        self._rec("delete_reservation", name)


def job(job_id: int, state: JobState = JobState.RUNNING, **kw: object) -> Job:
    base = Job(job_id=job_id, name=f"j{job_id}", user="alice", account="vision",
               partition="research", state=state, node_count=1, gpus_per_node=8, gpus=8,
               start_time=900.0 if state is JobState.RUNNING else None, time_limit=3600.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def snap(*jobs: Job, reservations: tuple[Reservation, ...] = ()) -> Snapshot:
    return Snapshot(taken_at=1000.0, slurm_version="22.05", cluster_name="t", jobs=jobs,
                    reservations=reservations)


PID = "p1"
RESV = "spolicy_p1"


def start(preemption_id: str = PID) -> StartPreemption:
    return StartPreemption(reason="prod job 3 needs gpu01", preemption_id=preemption_id,
                           beneficiary=3,
                           victims=(1,), nodes=("gpu01",), reservation=RESV)


def signal(rc: int = 0) -> SignalCheckpoint:
    return SignalCheckpoint(reason="checkpoint first", preemption_id=PID, job_id=1,
                            restart_count=rc, signal="USR1", deadline=1100.0)


def requeue(rc: int = 0) -> Requeue:
    return Requeue(reason="acknowledged", preemption_id=PID, job_id=1, restart_count=rc,
                   after="acknowledged")


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path)


def make(journal: Journal, cap: int = 100) -> tuple[Executor, Recorder]:
    rec = Recorder()
    settings = Settings(daemon=Daemon(max_slurm_calls_per_cycle=cap))
    return Executor(rec, journal, settings, clock=lambda: 1000.0), rec


def run(ex: Executor, s: Snapshot, *actions: object, now: float = 1000.0) -> None:
    ex.reconcile(s, now)
    ex.carry_on(s, now)
    ex.execute(Plan(actions=tuple(actions)), s, now)  # type: ignore[arg-type]


def test_journal_is_wal_and_versioned(journal: Journal) -> None:
    mode = next(iter(journal.db.query("PRAGMA journal_mode")))["journal_mode"]
    assert mode == "wal"
    assert journal.schema_version() == 1
    ro = Journal(journal.path, read_only=True)
    assert ro.load_intents().preemptions == ()


def test_signal_and_requeue_intents_are_fsynced(journal: Journal) -> None:
    def level() -> int:
        return int(next(iter(journal.db.query("PRAGMA synchronous")))["synchronous"])

    journal.begin_step("sitefactor:1:1", "sitefactor")
    assert level() == 1  # NORMAL: survives the daemon's death, cheap
    journal.begin_step("signal:1:0", "signal", durable=True)
    assert level() == 2  # FULL: on disk before the signal is sent


def test_full_preemption_story(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    assert rec.calls == [("create_reservation", RESV), ("set_job_reservation", 3)]
    p = journal.load_intents().preemptions[0]
    assert p.state is PreemptionState.RESERVED
    assert p.victims[0].state is VictimState.PLANNED

    # Requeue before the signal is refused.
    run(ex, s0, requeue())
    assert ("requeue", 1) not in rec.calls

    run(ex, s0, signal())
    run(ex, s0, signal())  # a second signal for the same (job, restart) is not sent
    assert rec.calls.count(("signal", 1)) == 1

    # Not yet acknowledged, deadline not passed: requeue refused.
    run(ex, s0, requeue(), now=1050.0)
    assert ("requeue", 1) not in rec.calls

    s1 = snap(job(1, comment="note ckpt:1060"), job(3, JobState.PENDING),
              reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex, s1, requeue(), now=1061.0)
    assert rec.calls.count(("requeue", 1)) == 1
    intents = journal.load_intents(now=1061.0)
    assert intents.preemptions[0].victims[0].state is VictimState.REQUEUED
    assert intents.preempted_at == {1: (1061.0,)}
    run(ex, s1, requeue(), now=1062.0)
    assert rec.calls.count(("requeue", 1)) == 1

    s2 = snap(job(1, JobState.PENDING, restart_count=1), job(3, start_time=1070.0,
              reservation=RESV), reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex, s2, FinishPreemption(reason="beneficiary started", preemption_id=PID), now=1070.0)
    assert journal.preemption(PID)["state"] == "done"  # type: ignore[index]
    audit = journal.read_audit(job_id=1)
    kinds = [r.kind for r in audit]
    assert "SignalCheckpoint" in kinds and "Requeue" in kinds and "CheckpointAck" in kinds


def test_an_ack_stamped_in_the_future_is_refused_and_journalled_once(
        journal: Journal) -> None:
    """Issue 13, finding 7: a forged ack (stamped an hour ahead) is no ack."""
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start(), signal())
    forged = snap(job(1, comment="ckpt:4600 ckpt:nan"), job(3, JobState.PENDING))
    for now in (1010.0, 1020.0):
        run(ex, forged, requeue(), now=now)
    assert ("requeue", 1) not in rec.calls
    refused = [r for r in journal.read_audit(job_id=1) if r.outcome == "refused"]
    assert sorted(r.reason.split(": ", 1)[1] for r in refused) == [
        "a checkpoint acknowledgement in its comment was refused: not a finite number",
        "a checkpoint acknowledgement in its comment was refused: stamped 3590s in the "
        "future (more than the allowed clock skew of 60s)"]
    assert journal.victim(PID, 1, 0)["acked_at"] is None  # type: ignore[index]


def test_deadline_then_requeue_counts_missed_ack(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, signal())
    run(ex, s0, Requeue(reason="deadline", preemption_id=PID, job_id=1, restart_count=0,
                        after="deadline"), now=1101.0)
    assert ("requeue", 1) in rec.calls
    assert journal.load_intents(now=1101.0).missed_acks == {1: 1}


def test_victim_that_ends_during_grace_is_not_requeued(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, signal())
    done = snap(job(1, JobState.COMPLETED), job(3, JobState.PENDING))
    run(ex, done, requeue(), now=1200.0)
    assert ("requeue", 1) not in rec.calls
    victim = journal.load_intents().preemptions[0].victims[0]
    assert victim.state is VictimState.ENDED


def test_already_pending_means_reached(journal: Journal) -> None:
    ex, rec = make(journal)
    rec.fail[("requeue", 1)] = JobAlreadyPending("already pending")
    s0 = snap(job(1, comment="ckpt:1001"), job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, signal())
    run(ex, s0, requeue(), now=1002.0)
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.REQUEUED


def test_gone_job_site_factor_is_reached(journal: Journal) -> None:
    ex, rec = make(journal)
    rec.fail[("set_site_factor", 7)] = JobGone("Invalid job id specified")
    run(ex, snap(), SetSiteFactor(reason="aging", job_id=7, site_factor=500))
    assert journal.read_audit()[-1].outcome.startswith("reached")


def test_call_cap_defers_and_orders_safety_first(journal: Journal) -> None:
    ex, rec = make(journal, cap=2)
    factors = [SetSiteFactor(reason="x", job_id=10 + i, site_factor=i) for i in range(5)]
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, *factors, start())
    assert rec.calls[0] == ("create_reservation", RESV)
    assert len(rec.calls) == 2


def test_crash_after_signal_is_not_signalled_again(journal: Journal) -> None:
    ex, _ = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    # Simulate a daemon that wrote the signal step, then died before its outcome.
    journal.begin_step("signal:1:0", "signal", job_id=1, restart_count=0, preemption_id=PID,
                       params={"signal": "USR1", "deadline": 1100.0})
    assert journal.unfinished_steps()
    ex2, rec2 = make(Journal(journal.path))
    run(ex2, s0, signal())
    assert rec2.calls == []
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.SIGNALLED
    assert not journal.steps(status=STARTED)


def test_crash_after_requeue_is_not_requeued_again(journal: Journal) -> None:
    ex, _ = make(journal)
    s0 = snap(job(1, comment="ckpt:1001"), job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, signal())
    journal.begin_step("requeue:1:0", "requeue", job_id=1, restart_count=0, preemption_id=PID)
    after = snap(job(1, JobState.PENDING, restart_count=1), job(3, JobState.PENDING))
    ex2, rec2 = make(Journal(journal.path))
    run(ex2, after, requeue(), now=1010.0)
    assert rec2.calls == []
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.REQUEUED


def test_unavailable_slurm_leaves_step_resumable(journal: Journal) -> None:
    ex, rec = make(journal)
    rec.fail[("set_site_factor", 5)] = SlurmUnavailable("`scontrol update` gave no answer")
    with pytest.raises(SlurmUnavailable):
        run(ex, snap(), SetSiteFactor(reason="x", job_id=5, site_factor=1))
    assert journal.unfinished_steps()[0]["key"] == "sitefactor:5:1"


def test_signal_that_never_left_is_sent_after_all(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    rec.fail[("signal", 1)] = SlurmUnavailable(
        "scancel: error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnavailable):
        run(ex, s0, signal())
    del rec.fail[("signal", 1)]
    run(ex, s0, signal())  # the first one provably never reached Slurm
    assert rec.calls.count(("signal", 1)) == 2
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.SIGNALLED


def test_dry_run_calls_nothing_and_keeps_intents(journal: Journal) -> None:
    rec = Recorder()
    ex = Executor(rec, journal, Settings(), dry_run=True, clock=lambda: 1000.0)
    run(ex, snap(job(1), job(3, JobState.PENDING)), start(), signal())
    assert rec.calls == []
    assert journal.load_intents().preemptions == ()
    assert all(r.dry_run for r in journal.read_audit())


def test_foreign_reservation_is_never_touched(journal: Journal) -> None:
    from slurmpolicy.policy.actions import DeleteReservation

    ex, rec = make(journal)
    run(ex, snap(reservations=(Reservation(name="maint"),)),
        DeleteReservation(reason="x", name="maint"))
    assert rec.calls == []


def test_usage_decays(journal: Journal) -> None:
    journal.add_usage({"vision": 1000.0}, now=0.0, half_life=100.0)
    journal.add_usage({"nlp": 10.0}, now=100.0, half_life=100.0)
    usage, at = journal.usage()
    assert usage["vision"] == pytest.approx(500.0)
    assert usage["nlp"] == pytest.approx(10.0)
    assert at == 100.0


def test_signal_waits_for_the_reservation(journal: Journal) -> None:
    ex, rec = make(journal)
    rec.fail[("create_reservation", RESV)] = ReservationError("Requested nodes are busy")
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start())
    assert journal.preemption(PID)["state"] == "planned"  # type: ignore[index]
    run(ex, s0, signal())
    assert ("signal", 1) not in rec.calls  # never before the nodes are reserved
    # carry_on retries the reservation; once Slurm refused three times, it gives up.
    run(ex, s0)
    run(ex, s0)
    assert rec.calls.count(("create_reservation", RESV)) == 3
    assert journal.preemption(PID)["state"] == "aborted"  # type: ignore[index]


def test_no_checkpoint_victim_requeued_without_signal(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1, admin_comment="spolicy:v1 class=experimental ckpt=none"),
              job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, Requeue(reason="nothing to wait for", preemption_id=PID, job_id=1,
                        restart_count=0, after="no-checkpoint"))
    assert rec.calls == [("create_reservation", RESV), ("set_job_reservation", 3), ("requeue", 1)]


def test_no_checkpoint_requeue_refused_for_a_job_that_can_checkpoint(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1, admin_comment="spolicy:v1 ckpt=signal:USR1,grace=60"),
              job(3, JobState.PENDING))
    run(ex, s0, start())
    run(ex, s0, Requeue(reason="x", preemption_id=PID, job_id=1, restart_count=0,
                        after="no-checkpoint"))
    assert ("requeue", 1) not in rec.calls


def test_busy_reservation_deleted_once_unused(journal: Journal) -> None:
    from slurmpolicy.policy.actions import DeleteReservation

    ex, rec = make(journal)
    resv = (Reservation(name=RESV, nodes=("gpu01",)),)
    busy = snap(job(3, reservation=RESV), reservations=resv)
    journal.record_reservation(RESV, 3, ("gpu01",), 0.0, 3600.0, state="preemption")
    delete = DeleteReservation(reason="beneficiary started", name=RESV, job_id=3)
    run(ex, busy, delete)
    run(ex, busy, delete)
    assert rec.calls == []
    assert [r.outcome for r in journal.read_audit()].count(
        "deferred: in use by job 3; deleted once it ends") == 1
    run(ex, snap(job(3, JobState.COMPLETED), reservations=resv))
    assert rec.calls == [("delete_reservation", RESV)]
    assert journal.reservation_state(RESV) == "deleted"


def test_repeated_annotation_audited_once(journal: Journal) -> None:
    from slurmpolicy.policy.actions import Annotate

    ex, _ = make(journal)
    for _ in range(3):
        run(ex, snap(), Annotate(reason="waits for gpu01", job_id=4))
    run(ex, snap(), Annotate(reason="waits for gpu02", job_id=4))
    assert [r.reason for r in journal.read_audit()] == ["waits for gpu01", "waits for gpu02"]



def test_an_unchanged_note_is_recorded_once_with_how_long_it_held(journal: Journal) -> None:
    """Issue 13, finding 10: the same note is not written again every cycle (its
    durations drift; a restarted daemon knows it too); when another note replaces
    it, the old one says how long it held."""
    from slurmpolicy.policy.actions import Annotate

    ex, _ = make(journal)
    for now, left in ((1000.0, "3m"), (1030.0, "2m30s"), (1060.0, "2m")):
        run(ex, snap(), Annotate(reason=f"no preemption for job 9: it should start within "
                                        f"{left} anyway", job_id=9), now=now)
    ex2, _ = make(journal)  # a restarted daemon
    run(ex2, snap(), Annotate(reason="no preemption for job 9: it should start within 1m "
                                     "anyway", job_id=9), now=1090.0)
    run(ex2, snap(), Annotate(reason="no preemption for job 9: no running job may be "
                                     "preempted for it", job_id=9), now=1200.0)
    records = journal.read_audit(job_id=9)
    assert [(r.reason, r.outcome) for r in records] == [
        ("no preemption for job 9: it should start within 3m anyway", "noted; held 3m"),
        ("no preemption for job 9: no running job may be preempted for it", "noted")]


def test_a_reused_job_id_starts_a_clean_history(journal: Journal) -> None:
    """Issue 13, finding 10: job 9 of a rebuilt cluster (or after ids wrapped) does
    not inherit the decisions and counters of the old job 9; a requeue (Slurm
    resets the submit time) keeps the job's own history."""
    old = job(9, submit_time=500.0)
    journal.note_jobs("t", [old], 600.0)
    journal.audit("Requeue", "requeue victim 9", "ok", job_id=9, at=700.0)
    journal.add_missed_ack(9)
    requeued = job(9, JobState.PENDING, submit_time=800.0, restart_count=1)
    assert journal.note_jobs("t", [requeued], 800.0) == []
    assert [r.reason for r in journal.read_audit(job_id=9)] == ["requeue victim 9"]
    assert journal.load_intents().missed_acks == {9: 1}
    new = job(9, JobState.PENDING, submit_time=9000.0)
    assert journal.note_jobs("t", [new], 9000.0) == [9]
    assert journal.read_audit(job_id=9) == []
    assert journal.load_intents().missed_acks == {}
    # The same id on another cluster is another job, too.
    assert journal.note_jobs("other", [new], 9001.0) == [9]


def test_a_requeue_seen_in_two_steps_keeps_the_jobs_history(journal: Journal) -> None:
    """Slurm raises a requeued job's restart count at once and resets its
    submit time only when the job has completed (batch_requeue_fini, after its
    epilog): a daemon cycling faster than the epilog sees the two apart. Still
    the same job; a later job with that id and a fresh count is not."""
    journal.note_jobs("t", [job(9, JobState.RUNNING, submit_time=500.0)], 600.0)
    journal.audit("Requeue", "requeue victim 9", "ok", job_id=9, at=700.0)
    journal.add_missed_ack(9)
    completing = job(9, JobState.PENDING, submit_time=500.0, restart_count=1,
                     state_flags=frozenset({"COMPLETING"}))
    assert journal.note_jobs("t", [completing], 701.0) == []
    assert journal.note_jobs("t", [completing], 702.0) == []  # its epilog still runs
    requeued = job(9, JobState.PENDING, submit_time=705.0, restart_count=1)
    assert journal.note_jobs("t", [requeued], 706.0) == []
    assert journal.note_jobs("t", [requeued], 736.0) == []
    assert [r.reason for r in journal.read_audit(job_id=9)] == ["requeue victim 9"]
    assert journal.load_intents().missed_acks == {9: 1}
    assert journal.job_since(9) == 500.0
    new = job(9, JobState.PENDING, submit_time=9000.0, restart_count=1)
    assert journal.note_jobs("t", [new], 9000.0) == [9]


def test_log_filters_by_job_and_time(journal: Journal) -> None:
    journal.audit("StartPreemption", "x", "ok", job_id=3, jobs=(1, 2), at=100.0)
    journal.audit("SetSiteFactor", "y", "ok", job_id=12, at=200.0)
    assert [r.kind for r in journal.read_audit(job_id=2)] == ["StartPreemption"]
    assert [r.kind for r in journal.read_audit(job_id=1)] == ["StartPreemption"]
    assert journal.read_audit(job_id=21) == []
    assert [r.kind for r in journal.read_audit(since=150.0)] == ["SetSiteFactor"]
    assert [r.kind for r in journal.read_audit(limit=1)] == ["SetSiteFactor"]


def test_leftover_reservation_of_ours_is_moved_a_foreign_one_is_refused(
        journal: Journal) -> None:
    ex, rec = make(journal)
    old = (Reservation(name=RESV, nodes=("gpu05",)),)
    # Carries our prefix, but the journal never made it: an admin's. Not touched.
    run(ex, snap(job(1), job(3, JobState.PENDING), reservations=old), start())
    assert rec.calls == []
    assert journal.read_audit()[-1].outcome == (
        f"refused: reservation {RESV} exists and was not made by slurmpolicy")
    # One the journal recorded as ours (an earlier daemon's) is moved.
    journal.record_reservation(RESV, 3, ("gpu05",), 0.0, 3600.0, state="preemption")
    run(ex, snap(job(1), job(3, JobState.PENDING), reservations=old),
        start(preemption_id="p2"))
    assert rec.calls == [("update_reservation", RESV), ("set_job_reservation", 3)]
    assert journal.preemption("p2")["state"] == "reserved"  # type: ignore[index]


def test_start_then_signal_in_one_cycle(journal: Journal) -> None:
    """The plan lists the signal after its StartPreemption; the executor runs
    the steps of a new preemption in order, journal -> reserve -> signal, in
    one cycle, although signals otherwise go before new preemptions."""
    ex, rec = make(journal)
    s0 = snap(job(1), job(3, JobState.PENDING))
    other = SetSiteFactor(reason="aging", job_id=3, site_factor=100)
    run(ex, s0, start(), signal(), other)
    assert rec.calls == [("create_reservation", RESV), ("set_job_reservation", 3), ("signal", 1),
                         ("set_site_factor", 3)]
    p = journal.load_intents().preemptions[0]
    assert p.victims[0].state is VictimState.SIGNALLED
    assert p.victims[0].signalled_at == 1000.0 and p.victims[0].deadline == 1100.0
    steps = [r["kind"] for r in journal.steps()]
    assert steps.index("reserve") < steps.index("signal")
    # The next cycle's plan (same intents) repeats nothing; a repeated signal is not sent.
    run(ex, s0, signal())
    assert rec.calls.count(("signal", 1)) == 1


OURS = "spolicy:v1 class=research ckpt=signal:USR1,grace=60"


def test_a_victim_is_marked_before_its_signal_and_unmarked_when_called_off(
        journal: Journal) -> None:
    """``ckpt ack --requeue`` reads the mark: it is written before the signal,
    with the directives kept, once; when the preemption is aborted, it comes
    off the still-running victim in the same cycle, once."""
    ex, rec = make(journal)
    s0 = snap(job(1, admin_comment=OURS), job(3, JobState.PENDING))
    run(ex, s0, start(), signal())
    assert rec.calls[2:] == [("set_admin_comment", 1), ("signal", 1)]
    assert rec.admin_comments[1] == OURS + " preempting=p1:0"
    marked = snap(job(1, admin_comment=rec.admin_comments[1]), job(3, JobState.PENDING),
                  reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex, marked, signal())  # nothing new: the mark stays while the preemption is open
    assert rec.calls.count(("set_admin_comment", 1)) == 1
    run(ex, marked, FinishPreemption(reason="beneficiary 3 fits on free nodes",
                                     preemption_id=PID, aborted=True))
    assert rec.calls.count(("set_admin_comment", 1)) == 2
    assert rec.admin_comments[1] == OURS
    run(ex, marked)  # Slurm not yet showing it: not taken off twice
    assert rec.calls.count(("set_admin_comment", 1)) == 2
    marks = [(a.kind, a.job_id, a.outcome) for a in journal.read_audit()
             if a.kind in ("MarkVictim", "UnmarkVictim")]
    assert marks == [("MarkVictim", 1, "ok"), ("UnmarkVictim", 1, "ok")]


def test_a_victim_requeuing_itself_is_left_to_it_for_a_bounded_while(
        journal: Journal) -> None:
    """An ack that says ``requeuing:<restart>`` (``ckpt ack --requeue``): our
    requeue waits, so as not to race the job's own; 10 s after the ack, a job
    still running is requeued by us after all. A plain ack is requeued at once."""
    ex, rec = make(journal)
    run(ex, snap(job(1, admin_comment=OURS), job(3, JobState.PENDING)), start(), signal())
    said = snap(job(1, admin_comment=OURS + " preempting=p1:0",
                    comment="ckpt:1001:0 requeuing:0"), job(3, JobState.PENDING),
                reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex, said, requeue(), now=1003.0)
    run(ex, said, requeue(), now=1006.0)
    assert ("requeue", 1) not in rec.calls
    waits = [a.outcome for a in journal.read_audit() if a.kind == "Requeue"]
    assert len(waits) == 1 and waits[0].startswith("deferred: the victim is requeuing itself")
    # It requeued itself: seen gone, it lost nothing after its ack.
    gone = snap(job(1, JobState.PENDING, admin_comment=OURS + " preempting=p1:0",
                    comment="ckpt:1001:0 requeuing:0", restart_count=1),
                job(3, JobState.PENDING))
    report = ex.reconcile(gone, 1008.0)
    assert report.requeued == [1] and report.lost_gpu_seconds == 0.0
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.REQUEUED
    assert ("requeue", 1) not in rec.calls
    # One whose own requeue failed is requeued by us once the wait is over.
    ex3, rec3 = make(Journal(journal.path.parent / "j3"))
    run(ex3, snap(job(1, admin_comment=OURS), job(3, JobState.PENDING)), start(), signal())
    run(ex3, said, requeue(), now=1006.0)
    assert ("requeue", 1) not in rec3.calls
    run(ex3, said, requeue(), now=1011.0)
    assert rec3.calls.count(("requeue", 1)) == 1
    # Its mark names the run we just ended: nothing to take off (one call, the mark).
    assert rec3.calls.count(("set_admin_comment", 1)) == 1
    # Without the word, at once.
    ex2, rec2 = make(Journal(journal.path.parent / "j2"))
    run(ex2, snap(job(1), job(3, JobState.PENDING)), start(), signal())
    plain = snap(job(1, comment="ckpt:1001:0"), job(3, JobState.PENDING),
                 reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    run(ex2, plain, requeue(), now=1003.0)
    assert rec2.calls.count(("requeue", 1)) == 1


def test_only_our_rigid_victims_are_marked_and_stale_marks_come_off(journal: Journal) -> None:
    """An admin_comment our plugin did not write is not ours to change; an
    elastic victim's requeue is ours (it shrinks it); a mark this journal does
    not know (a lost journal) comes off; one of an older restart is left."""
    ex, rec = make(journal)
    elastic = OURS + " nodes=1-2"
    run(ex, snap(job(1, admin_comment="site: billing=x"), job(3, JobState.PENDING)),
        start(), signal())
    assert ("set_admin_comment", 1) not in rec.calls and ("signal", 1) in rec.calls
    ex2, rec2 = make(Journal(journal.path.parent / "j2"))
    run(ex2, snap(job(1, admin_comment=elastic), job(3, JobState.PENDING)), start(), signal())
    assert ("set_admin_comment", 1) not in rec2.calls and ("signal", 1) in rec2.calls
    ex3, rec3 = make(Journal(journal.path.parent / "j3"))
    run(ex3, snap(job(5, admin_comment=OURS + " preempting=pre-9-1:0"),
                  job(6, admin_comment=OURS + " preempting=pre-9-1:0", restart_count=1)))
    assert rec3.calls == [("set_admin_comment", 5)]
    assert rec3.admin_comments[5] == OURS


def test_start_and_signal_in_one_cycle_sends_no_signal_without_the_reservation(
        journal: Journal) -> None:
    ex, rec = make(journal)
    rec.fail[("create_reservation", RESV)] = ReservationError("Requested nodes are busy")
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start(), signal())
    assert rec.calls == [("create_reservation", RESV)]
    assert journal.preemption(PID)["state"] == "planned"  # type: ignore[index]
    assert journal.load_intents().preemptions[0].victims[0].state is VictimState.PLANNED
    assert journal.read_audit()[-1].outcome.startswith("deferred: reservation not in place")
    # Resumable: carry_on retries the reservation; the next plan's signal then goes.
    del rec.fail[("create_reservation", RESV)]
    run(ex, s0, signal())
    assert rec.calls == [("create_reservation", RESV), ("create_reservation", RESV),
                         ("set_job_reservation", 3), ("signal", 1)]


def test_refused_start_sends_no_signal(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1), job(3))  # the beneficiary already runs
    run(ex, s0, start(), signal())
    assert rec.calls == []
    assert journal.preemption(PID) is None


def test_no_checkpoint_victim_requeued_in_the_cycle_that_starts(journal: Journal) -> None:
    ex, rec = make(journal)
    s0 = snap(job(1, admin_comment="spolicy:v1 class=experimental ckpt=none"),
              job(3, JobState.PENDING))
    run(ex, s0, Requeue(reason="nothing to wait for", preemption_id=PID, job_id=1,
                        restart_count=0, after="no-checkpoint"), start())
    assert rec.calls == [("create_reservation", RESV), ("set_job_reservation", 3), ("requeue", 1)]


def test_a_requeue_slurm_refuses_three_times_aborts_the_preemption(journal: Journal) -> None:
    """Issue 13, finding 2: a step that cannot succeed is not retried every cycle."""
    from slurmpolicy.errors import SlurmError

    ex, rec = make(journal)
    run(ex, snap(job(1), job(3, JobState.PENDING)), start(), signal())
    rec.fail[("requeue", 1)] = SlurmError("Requested operation is presently disabled")
    acked = snap(job(1, comment="ckpt:1001"), job(3, JobState.PENDING, reservation=RESV),
                 reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    for now in (1002.0, 1003.0, 1004.0, 1005.0):
        run(ex, acked, requeue(), now=now)
    assert rec.calls.count(("requeue", 1)) == 3
    p = journal.preemption(PID)
    assert p is not None and p["state"] == "aborted"
    assert p["reason"] == (f"preemption {PID} aborted: Slurm refused victim 1's requeue 3 times:"
                           " Requested operation is presently disabled")
    # The reservation is taken off the waiting beneficiary, then deleted.
    assert rec.calls[-2:] == [("set_job_reservation", 3), ("delete_reservation", RESV)]


def test_a_beneficiary_slurm_will_not_bind_ends_the_preemption_unsignalled(
        journal: Journal) -> None:
    from slurmpolicy.errors import SlurmError

    ex, rec = make(journal)
    rec.fail[("set_job_reservation", 3)] = SlurmError("Access denied to reservation")
    s0 = snap(job(1), job(3, JobState.PENDING))
    run(ex, s0, start(), signal())
    held = snap(job(1), job(3, JobState.PENDING),
                reservations=(Reservation(name=RESV, nodes=("gpu01",)),))
    for now in (1001.0, 1002.0, 1003.0):
        run(ex, held, signal(), now=now)
    assert rec.calls.count(("set_job_reservation", 3)) == 3
    assert ("signal", 1) not in rec.calls  # never signalled: the nodes were never its own
    p = journal.preemption(PID)
    assert p is not None and p["state"] == "aborted"
    assert "Slurm refused naming reservation spolicy_p1 on beneficiary 3 3 times" in p["reason"]
    assert rec.calls[-1] == ("delete_reservation", RESV)


class BatchRecorder(Recorder):
    """A Recorder with the port's batched site-factor call."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: dict[int, Exception] = {}

    def set_site_factors(self, job_ids: list[int], site_factor: int) -> dict[int, Exception]:
        self._rec("set_site_factors", (site_factor, tuple(job_ids)))
        return {j: self.refuse[j] for j in job_ids if j in self.refuse}


def test_site_factors_sharing_a_value_go_in_one_call(journal: Journal) -> None:
    rec = BatchRecorder()
    rec.refuse[12] = JobGone("Invalid job id specified for job 12")
    ex = Executor(rec, journal, Settings(daemon=Daemon(max_slurm_calls_per_cycle=2)),
                  clock=lambda: 1000.0)
    factors = [SetSiteFactor(reason=f"r{i}", job_id=10 + i, site_factor=500 if i % 2 else 700)
               for i in range(6)]
    run(ex, snap(), *factors, SetSiteFactor(reason="one", job_id=99, site_factor=1))
    # Two values, two calls (the budget); the third value is deferred, not lost.
    assert rec.calls == [("set_site_factors", (700, (10, 12, 14))),
                         ("set_site_factors", (500, (11, 13, 15)))]
    assert ex._report.deferred == 1
    outcomes = {r.job_id: r.outcome for r in journal.read_audit()}
    assert outcomes == {10: "ok", 12: "reached: JobGone", 14: "ok", 11: "ok", 13: "ok",
                        15: "ok"}
    intents = journal.load_intents(now=1000.0)
    assert intents.site_factors == {10: 700, 14: 700, 11: 500, 13: 500, 15: 500}
    steps = journal.steps()
    assert [s["params"]["jobs"] for s in steps] == [[10, 12, 14], [11, 13, 15]]


def test_fragmented_memory_is_journaled_as_the_plan_says(journal: Journal) -> None:
    """The fragmentation bonus's memory survives a restart: the executor keeps
    exactly the plan's ``fragmented_since``; a hand-made plan (None) keeps it."""
    ex, rec = make(journal)
    s = snap(job(1, JobState.PENDING), job(2, JobState.PENDING))
    ex.reconcile(s, 1000.0)
    ex.execute(Plan(fragmented_since={1: 900.0, 2: 950.0}), s, 1000.0)
    assert Journal(journal.path, read_only=True).load_intents().fragmented_since == {
        1: 900.0, 2: 950.0}
    ex.execute(Plan(), s, 1010.0)
    assert journal.load_intents().fragmented_since == {1: 900.0, 2: 950.0}
    ex.execute(Plan(fragmented_since={2: 950.0, 3: 1020.0}), s, 1020.0)  # job 1 started
    assert journal.load_intents().fragmented_since == {2: 950.0, 3: 1020.0}
    assert not rec.calls  # not a Slurm call


def test_the_simulator_writes_the_site_factors_the_executor_writes(tmp_path: Path) -> None:
    """The simulator's model of the call budget (``PolicyDriver.within_budget``)
    writes the same site factors as this executor, values interleaved and
    repeated, under budgets from none to all; and a plan's held-back site
    factors count as deferred."""
    import random
    from types import SimpleNamespace

    from slurmpolicy.sim.driver import PolicyDriver

    rng = random.Random(5)
    for case in range(40):
        budget = rng.randint(1, 8)
        factors = [SetSiteFactor(reason="r", job_id=10 + i, previous=0,
                                 site_factor=rng.choice([1, 2, 3, 4, 5]))
                   for i in range(rng.randint(1, 14))]
        rec = BatchRecorder()
        ex = Executor(rec, Journal(tmp_path / str(case)),
                      Settings(daemon=Daemon(max_slurm_calls_per_cycle=budget)),
                      clock=lambda: 1000.0)
        run(ex, snap(), *factors)
        written = [j for method, key in rec.calls
                   for j in (key[1] if method == "set_site_factors" else (key,))]
        sim = object.__new__(PolicyDriver)
        sim.sim = SimpleNamespace(  # type: ignore[assignment]
            settings=Settings(daemon=Daemon(max_slurm_calls_per_cycle=budget)))
        modelled = [a.job_id for a in sim.within_budget(tuple(factors))[0]]
        assert sorted(written) == sorted(modelled), (budget, factors)
        assert ex._report.deferred == len(factors) - len(written)
    ex = Executor(BatchRecorder(), Journal(tmp_path / "held"), Settings(), clock=lambda: 1000.0)
    ex.reconcile(snap(), 1000.0)
    ex.execute(Plan(held_back=4), snap(), 1000.0)
    assert ex._report.deferred == 4
    assert "4 site factor(s) left for the next cycle" in ex._report.notes[-1]
