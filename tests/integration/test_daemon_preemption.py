"""Checkpoint-first preemption on a real Slurm, driven by `slurmpolicy daemon run`.

Each test has a 2-node x 8-GPU cluster of its own; two experimental jobs
fill it, then a production job arrives. Slurm itself is asked, at the end,
that no job was lost: every job is pending, running or completed, with the
restart count the story implies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .daemon_support import (
    DaemonRunner,
    assert_no_job_lost,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    daemon_fixture,  # noqa: F401 - the `daemon` fixture
    fill_with_victims,
    journal_of,
    release_requeued,
    restarts,
    submit,
    submit_beneficiary,
    train_script,
    victim_comment,
    wait_for,
)
from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm


def _preemption(runner: DaemonRunner, timeout: float = 60) -> dict[str, object]:
    def probe() -> dict[str, object] | None:
        try:
            rows = journal_of(runner).preemptions()
        except Exception:
            return None
        return rows[0] if rows else None

    return wait_for(probe, timeout, "a preemption in the journal")


def test_checkpoint_first_preemption_end_to_end(cluster: LiveCluster,
                                                daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=25)
    beneficiary = submit_beneficiary(cluster, wd, seconds=4)
    daemon.start()

    info = cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    pre = _preemption(daemon)
    victim = next(v for v in victims if restarts(cluster, v) == 1)
    other = next(v for v in victims if v != victim)
    # The beneficiary started on exactly the nodes reserved for it.
    assert info["NodeList"] in pre["nodes"]  # type: ignore[operator]
    out = cluster.read_file(wd / f"slurm-{victim}.out", contains="acknowledging")
    assert "checkpoint at step" in out
    # The victim resumes from its checkpoint once the beneficiary is done, and ends.
    release_requeued(cluster, victim)
    cluster.wait_state(beneficiary, "COMPLETED", timeout=60)
    # 25 training steps after the resume: generous, as CI machines may be loaded.
    cluster.wait_state(victim, "COMPLETED", timeout=300)
    out = cluster.read_file(wd / f"slurm-{victim}.out", contains="finished")
    assert "resumed" in out
    saved = int(out.split("checkpoint at step ")[1].split(";")[0])
    assert f"at step {saved} (restart 1)" in out
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1"
    assert records[other]["Restarts"] == "0"

    journal = journal_of(daemon)
    kinds = [r.kind for r in journal.read_audit(job_id=victim)]
    assert kinds.count("SignalCheckpoint") == 1
    assert "CheckpointAck" in kinds
    requeues = [r for r in journal.read_audit(job_id=victim) if r.kind == "Requeue"]
    assert [r.outcome for r in requeues] == ["ok"]
    assert "acknowledged" in requeues[0].reason
    row = journal.victims_of(pre["preemption_id"])[0]
    assert row["state"] == "requeued" and row["acked_at"] is not None
    log = daemon.cli("log", "--job", str(victim)).stdout
    assert "SignalCheckpoint" in log and "Requeue" in log


def test_a_marked_victim_requeues_itself_at_its_ack(cluster: LiveCluster,
                                                     daemon: DaemonRunner) -> None:
    """contrib/examples/train.sh as shipped (``ckpt ack --requeue``): the daemon
    marks the victim's admin_comment before its signal; the job saves, acks
    and requeues itself in its trap, so no step is trained after its save; the
    daemon requeues nobody and finishes the preemption when the beneficiary
    runs. The other victim is neither signalled nor marked."""
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, script=train_script(wd, 25, requeue_on_ack=True))
    beneficiary = submit_beneficiary(cluster, wd, seconds=4)
    daemon.start()
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    pre = _preemption(daemon)
    victim = wait_for(lambda: next((v for v in victims if restarts(cluster, v) == 1), None),
                      30, "a requeued victim")
    other = next(v for v in victims if v != victim)
    out = cluster.read_file(wd / f"slurm-{victim}.out", contains="requeued for preemption")
    assert f"requeued for preemption {pre['preemption_id']}" in out
    saved = int(out.split("checkpoint at step ")[1].split(";")[0])
    # The daemon's next look sees it gone: requeued, by itself.
    row = wait_for(lambda: next((r for r in journal_of(daemon).victims_of(
        str(pre["preemption_id"])) if r["state"] == "requeued"), None), 30,
        "the daemon to see the victim requeued")
    assert row["job_id"] == victim
    journal = journal_of(daemon)
    audit = journal.read_audit(job_id=victim)
    assert [(r.kind, r.outcome) for r in audit if r.kind == "MarkVictim"] == [("MarkVictim", "ok")]
    assert not [r for r in audit if r.kind == "Requeue" and r.outcome == "ok"]
    ack = next(r for r in audit if r.kind == "CheckpointAck")
    assert ack.detail["how"] in ("ack", "self-requeue")
    assert not [r for r in journal.read_audit(job_id=other) if "Mark" in r.kind]
    # It resumes from its checkpoint and ends; nothing was lost in Slurm.
    release_requeued(cluster, victim)
    cluster.wait_state(beneficiary, "COMPLETED", timeout=60)
    cluster.wait_state(victim, "COMPLETED", timeout=300)
    out = cluster.read_file(wd / f"slurm-{victim}.out", contains="finished")
    assert f"at step {saved} (restart 1)" in out
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1" and records[other]["Restarts"] == "0"
    assert daemon.cli("log", "--job", str(victim)).stdout.count("MarkVictim") == 1


IGNORING = """#!/bin/bash
trap 'echo USR1 >> "$PWD/trap.$SLURM_JOB_ID"' USR1
echo "run ${SLURM_RESTART_COUNT:-0}" >> "$PWD/runs.$SLURM_JOB_ID"
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi
for i in $(seq 1 600); do sleep 0.2; done
"""


def test_victim_ignoring_the_signal_is_requeued_at_its_deadline(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = [submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                      admin_comment=victim_comment(grace=6), workdir=wd) for _ in range(2)]
    for v in victims:
        cluster.wait_state(v, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    victim = wait_for(lambda: next((v for v in victims if restarts(cluster, v) == 1), None),
                      30, "a requeued victim")
    assert cluster.read_file(wd / f"trap.{victim}").count("USR1") == 1
    row = journal_of(daemon).victims_of(_preemption(daemon)["preemption_id"])[0]
    assert row["acked_at"] is None
    assert row["requeued_at"] - row["signalled_at"] >= 6 - 1  # not before the deadline
    assert journal_of(daemon).load_intents().missed_acks == {victim: 1}
    # It is run again (restart 1) once there is room, and ends by itself.
    release_requeued(cluster, victim)
    cluster.wait_state(victim, "COMPLETED", timeout=90)
    assert cluster.read_file(wd / f"runs.{victim}").split() == ["run", "0", "run", "1"]
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "1"


FINISHING = """#!/bin/bash
trap 'echo "finishing on USR1"; done=1' USR1
done=0
while [ $done = 0 ]; do sleep 0.2; done
echo "finished by itself"
"""


def test_victim_finishing_during_grace_is_not_requeued(cluster: LiveCluster,
                                                       daemon: DaemonRunner) -> None:
    """A job whose declaration says an exit means done (``exit=done``) and that
    ends on the signal is finished: no requeue. (Without it, an exit after the
    signal is a save-and-exit, and the job is requeued to continue: see
    test_framework_preemption.py, the NeMo-style job.)"""
    wd = cluster.workdir()
    victims = [submit(cluster, FINISHING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                      admin_comment=victim_comment(grace=60) + ",exit=done", workdir=wd)
               for _ in range(2)]
    for v in victims:
        cluster.wait_state(v, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    pre = _preemption(daemon)
    row = journal_of(daemon).victims_of(pre["preemption_id"])[0]
    victim = row["job_id"]
    cluster.wait_state(victim, "COMPLETED")
    wait_for(lambda: journal_of(daemon).victims_of(pre["preemption_id"])[0]["state"] == "ended",
             30, "the victim marked ended")
    records = assert_no_job_lost(cluster, [*victims, beneficiary])
    assert records[victim]["Restarts"] == "0"
    assert "finished by itself" in cluster.read_file(wd / f"slurm-{victim}.out")
    assert not [r for r in journal_of(daemon).read_audit(job_id=victim) if r.kind == "Requeue"]
    assert not journal_of(daemon).steps(key=f"requeue:{pre['preemption_id']}:{victim}:0")
    # The other victim was never touched.
    other = next(v for v in victims if v != victim)
    assert records[other]["JobState"] == "RUNNING"
    assert records[other]["Restarts"] == "0"
    # End it without scancel: it finishes on its own checkpoint signal.
    cluster.slurm_cmd("scancel", "--signal=USR1", "--batch", str(other))
    cluster.wait_state(other, "COMPLETED")


def test_reservation_is_only_ours(cluster: LiveCluster, daemon: DaemonRunner) -> None:
    """A reservation slurmpolicy does not own stays as it is."""
    cluster.slurm_cmd("scontrol", "create", "reservation", "reservationname=maint",
                      "starttime=now+1day", "duration=60", "nodes=gpu02", "users=root",
                      "flags=MAINT")
    daemon.once()
    daemon.once()
    out = cluster.slurm_cmd("scontrol", "show", "reservation", "maint").stdout
    assert "ReservationName=maint" in out
    assert Path(daemon.settings.parent / "state" / "journal.sqlite").exists()
