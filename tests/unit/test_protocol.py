"""Which checkpoint protocol a job speaks (slurmpolicy.protocol), the wire forms
of the new checkpoint declarations, and how the planner and executor answer
each way a victim acknowledges: self-requeue, save-and-exit, periodic."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_executor import Recorder

from slurmpolicy.daemon.executor import Executor
from slurmpolicy.daemon.protocols import BatchSignals
from slurmpolicy.errors import SlurmError
from slurmpolicy.jobpolicy import Checkpoint, JobPolicy, parse_admin_comment, render_admin_comment
from slurmpolicy.model import Job, JobState, Snapshot
from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import Intents, Plan, Requeue, SignalCheckpoint, StartPreemption
from slurmpolicy.policy.scenario import ClusterBuilder
from slurmpolicy.policy.scenario import directives as d
from slurmpolicy.protocol import (
    describe,
    effective_policy,
    learned_checkpoint,
    parse_signal_option,
    script_signal,
    submit_line_signal,
)
from slurmpolicy.settings import Settings
from slurmpolicy.store import Journal


@pytest.mark.parametrize(("text", "want"), [
    ("B:USR1@90", ("USR1", "batch", 90.0)),
    ("USR2@90", ("USR2", "steps", 90.0)),
    ("SIGUSR1@90", ("USR1", "steps", 90.0)),
    ("R:TERM@30", ("TERM", "steps", 30.0)),
    ("RB:SIGTERM@5", ("TERM", "batch", 5.0)),
    ("10@120", ("USR1", "steps", 120.0)),
    ("USR1", ("USR1", "steps", 60.0)),  # Slurm's default lead time
])
def test_signal_options_as_sbatch_reads_them(text: str, want: tuple[str, str, float]) -> None:
    assert parse_signal_option(text) == want


@pytest.mark.parametrize("text", ["", "X:USR1@9", "NOPE@9", "USR1@soon", "USR1@70000", "B:"])
def test_bad_signal_options_are_not_a_protocol(text: str) -> None:
    assert parse_signal_option(text) is None


SUBMITIT_SCRIPT = """#!/bin/bash

# Parameters
#SBATCH --error=/shared/%j_0_log.err
#SBATCH --gres=gpu:8
#SBATCH --signal=USR2@90
#SBATCH --time=30
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output /shared/%j_%t_log.out /usr/bin/python3 -u -m submitit.core._submit
"""


def test_script_signal_reads_sbatch_lines_up_to_the_first_command() -> None:
    assert script_signal(SUBMITIT_SCRIPT) == "USR2@90"
    assert script_signal("#!/bin/bash\n#SBATCH --signal B:USR1@30 --requeue\n") == "B:USR1@30"
    # The last one wins, as in sbatch.
    assert script_signal("#!/bin/sh\n#SBATCH --signal=USR1@9\n#SBATCH --signal=TERM@8\n") \
        == "TERM@8"
    # After the first command sbatch reads no more directives.
    assert script_signal("#!/bin/bash\necho hi\n#SBATCH --signal=USR1@90\n") == ""
    assert script_signal("#!/bin/bash\n# SBATCH --signal=USR1@90\n") == ""


def test_submit_line_signal_stops_at_wrap() -> None:
    line = "sbatch --signal=B:USR2@90 --requeue --gres=gpu:1 --wrap sleep 300"
    assert submit_line_signal(line) == "B:USR2@90"
    assert submit_line_signal("sbatch --wrap 'x --signal=USR1@9'") == ""
    assert submit_line_signal("sbatch --signal TERM@30 job.sh") == "TERM@30"
    assert submit_line_signal("") == ""


def _job(**kw: object) -> Job:
    base = Job(job_id=1, name="t", user="u", account="a", partition="research",
               state=JobState.RUNNING, gpus_per_node=8, gpus=8, start_time=900.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_learned_needs_requeue_and_command_line_wins() -> None:
    assert learned_checkpoint(_job(batch_signal="USR1@90", requeue=False)) is None
    ck = learned_checkpoint(_job(requeue=True, batch_signal="USR2@90",
                                 submit_line="sbatch --signal=B:TERM@30 x.sh"))
    assert ck is not None and (ck.signal, ck.target, ck.grace) == ("TERM", "batch", 30.0)
    assert ck.learned.endswith("on its sbatch command line, with --requeue")
    ck = learned_checkpoint(_job(requeue=True, batch_signal="SIGUSR1@90"))
    assert ck is not None and ck.protocol == "slurm-signal" and ck.target == "steps"
    assert "recognised by --signal=SIGUSR1@90 in its batch script" in describe(ck)


def test_spolicy_checkpoint_line_wins_over_the_signal() -> None:
    job = _job(requeue=True, batch_signal="USR2@90")
    declared = parse_admin_comment("spolicy:v1 ckpt=signal:USR1,grace=120")
    assert effective_policy(declared, job).checkpoint == declared.checkpoint
    unable = parse_admin_comment("spolicy:v1 ckpt=none")
    assert not effective_policy(unable, job).can_checkpoint
    silent = parse_admin_comment("spolicy:v1 class=research")
    got = effective_policy(silent, job).checkpoint
    assert got is not None and got.signal == "USR2" and got.grace == 90.0


@pytest.mark.parametrize("text", [
    "spolicy:v1 ckpt=periodic,interval=1800",
    "spolicy:v1 ckpt=signal:TERM,grace=120,exit=done",
    "spolicy:v1 ckpt=signal:USR2,grace=90,interval=600,target=steps",
])
def test_new_checkpoint_wire_forms_round_trip(text: str) -> None:
    policy = parse_admin_comment(text)
    assert policy.readable and policy.can_checkpoint
    assert render_admin_comment(policy) == text


def test_periodic_needs_an_interval_and_bad_parts_are_unreadable() -> None:
    assert not parse_admin_comment("spolicy:v1 ckpt=periodic").readable
    assert not parse_admin_comment("spolicy:v1 ckpt=signal:USR1,exit=maybe").readable
    ck = parse_admin_comment("spolicy:v1 ckpt=periodic,interval=60").checkpoint
    assert ck == Checkpoint(signal=None, interval=60.0) and ck.protocol == "periodic"


class Scripts:
    name = "scripts"

    def __init__(self, texts: dict[int, str]) -> None:
        self.texts = texts
        self.reads: list[int] = []

    def batch_script(self, job_id: int) -> str:
        self.reads.append(job_id)
        if job_id not in self.texts:
            raise SlurmError("Invalid job id specified")
        return self.texts[job_id]


def test_batch_signals_read_each_script_once_and_only_where_useful() -> None:
    jobs = (
        _job(job_id=1, requeue=True),                       # read: has a --signal
        _job(job_id=2, requeue=True),                       # read: none in the script
        _job(job_id=3, requeue=False),                      # cannot be requeued
        _job(job_id=4, requeue=True, admin_comment="spolicy:v1 ckpt=none"),  # declared
        _job(job_id=5, requeue=True, submit_line="sbatch --signal=USR1@9 x"),  # on the line
        _job(job_id=6, requeue=True, state=JobState.PENDING, start_time=None),
        _job(job_id=7, requeue=True),                       # Slurm refuses: ""
    )
    client = Scripts({1: SUBMITIT_SCRIPT, 2: "#!/bin/bash\nsleep 1\n"})
    reader = BatchSignals(client, per_cycle=10)
    snapshot = Snapshot(taken_at=0.0, slurm_version="22.05", cluster_name="c", jobs=jobs)
    out = reader.enrich(snapshot)
    assert client.reads == [1, 2, 7]
    assert out.job(1).batch_signal == "USR2@90"  # type: ignore[union-attr]
    assert out.job(2).batch_signal == ""  # type: ignore[union-attr]
    reader.enrich(snapshot)
    assert client.reads == [1, 2, 7]  # once per job
    # A job Slurm forgot is forgotten too.
    reader.enrich(replace(snapshot, jobs=jobs[1:]))
    assert 1 not in reader.known


def test_batch_signals_read_at_most_per_cycle() -> None:
    jobs = tuple(_job(job_id=i, requeue=True) for i in range(1, 6))
    client = Scripts({i: SUBMITIT_SCRIPT for i in range(1, 6)})
    reader = BatchSignals(client, per_cycle=2)
    snapshot = Snapshot(taken_at=0.0, slurm_version="22.05", cluster_name="c", jobs=jobs)
    assert sum(1 for j in reader.enrich(snapshot).jobs if j.batch_signal) == 2
    assert sum(1 for j in reader.enrich(snapshot).jobs if j.batch_signal) == 4


# --- the executor: each way of answering counts once --------------------------------
PID = "p1"
RESV = "spolicy_p1"


def _victim(**kw: object) -> Job:
    return _job(requeue=True, batch_signal="USR2@90", **kw)


def _snap(*jobs: Job) -> Snapshot:
    return Snapshot(taken_at=1000.0, slurm_version="22.05", cluster_name="t", jobs=jobs)


def _run(ex: Executor, s: Snapshot, *actions: object, now: float) -> None:
    ex.reconcile(s, now)
    ex.execute(Plan(actions=tuple(actions)), s, now)  # type: ignore[arg-type]


def _started(tmp_path: Path) -> tuple[Executor, Recorder, Journal]:
    journal = Journal(tmp_path)
    rec = Recorder()
    ex = Executor(rec, journal, Settings(), clock=lambda: 1000.0)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    s0 = _snap(_victim(), pending)
    _run(ex, s0, StartPreemption(reason="r", preemption_id=PID, beneficiary=3, victims=(1,),
                                 nodes=("gpu01",), reservation=RESV),
         SignalCheckpoint(reason="r", preemption_id=PID, job_id=1, restart_count=0,
                          signal="USR2", target="steps", deadline=1090.0), now=1000.0)
    return ex, rec, journal


def test_self_requeue_is_the_ack_and_is_not_requeued_again(tmp_path: Path) -> None:
    ex, rec, journal = _started(tmp_path)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    s1 = _snap(_victim(state=JobState.PENDING, restart_count=1, start_time=None), pending)
    _run(ex, s1, Requeue(reason="r", preemption_id=PID, job_id=1, restart_count=0,
                         after="acknowledged"), now=1007.0)
    assert rec.calls.count(("requeue", 1)) == 0
    row = journal.victims_of(PID)[0]
    assert (row["state"], row["protocol"], row["ack_how"]) == ("requeued", "slurm-signal",
                                                               "self-requeue")
    assert row["acked_at"] == 1007.0
    assert journal.checkpoint_outcomes()["slurm-signal"]["by"] == {"self-requeue": 1}


def test_self_requeue_seen_completing_behind_an_epilog_is_still_the_ack(
        tmp_path: Path) -> None:
    """Behind an epilog, 22.05 (and pyslurm) show the job that requeued itself
    COMPLETING, read as COMPLETED, with its restart count already raised: a
    requeue, not an end."""
    ex, rec, journal = _started(tmp_path)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    completing = _victim(state=JobState.COMPLETED, state_flags=frozenset({"COMPLETING"}),
                         restart_count=1)
    _run(ex, _snap(completing, pending), now=1005.0)
    row = journal.victims_of(PID)[0]
    assert (row["state"], row["ack_how"]) == ("requeued", "self-requeue")
    assert not [r for r in journal.read_audit() if r.kind == "VictimEnded"]
    assert rec.calls.count(("requeue", 1)) == 0


def test_save_and_exit_is_the_ack_and_the_finished_job_is_requeued_once(
        tmp_path: Path) -> None:
    ex, rec, journal = _started(tmp_path)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    done = _snap(_victim(state=JobState.COMPLETED, end_time=1010.0), pending)
    exited = Requeue(reason="r", preemption_id=PID, job_id=1, restart_count=0, after="exited")
    _run(ex, done, exited, now=1012.0)
    assert rec.calls.count(("requeue", 1)) == 1
    _run(ex, done, exited, now=1013.0)
    assert rec.calls.count(("requeue", 1)) == 1
    row = journal.victims_of(PID)[0]
    assert (row["state"], row["ack_how"], row["acked_at"]) == ("requeued", "exit", 1010.0)
    out = journal.checkpoint_outcomes()["slurm-signal"]
    assert out["acknowledged"] == 1 and out["ack_seconds"] == [10.0]


def test_exit_means_done_is_not_requeued(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    rec = Recorder()
    ex = Executor(rec, journal, Settings(), clock=lambda: 1000.0)
    declared = "spolicy:v1 ckpt=signal:TERM,grace=60,exit=done"
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    victim = _job(requeue=True, admin_comment=declared)
    _run(ex, _snap(victim, pending),
         StartPreemption(reason="r", preemption_id=PID, beneficiary=3, victims=(1,),
                         nodes=("gpu01",), reservation=RESV),
         SignalCheckpoint(reason="r", preemption_id=PID, job_id=1, restart_count=0,
                          signal="TERM", deadline=1060.0), now=1000.0)
    done = _snap(replace(victim, state=JobState.COMPLETED, end_time=1010.0), pending)
    _run(ex, done, Requeue(reason="r", preemption_id=PID, job_id=1, restart_count=0,
                           after="exited"), now=1012.0)
    assert ("requeue", 1) not in rec.calls
    assert journal.victims_of(PID)[0]["state"] == "ended"


def test_cancelled_victim_is_never_requeued(tmp_path: Path) -> None:
    ex, rec, journal = _started(tmp_path)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    gone = _snap(_victim(state=JobState.CANCELLED, end_time=1010.0), pending)
    _run(ex, gone, Requeue(reason="r", preemption_id=PID, job_id=1, restart_count=0,
                           after="exited"), now=1012.0)
    assert ("requeue", 1) not in rec.calls
    assert journal.victims_of(PID)[0]["state"] == "ended"


def test_periodic_victim_is_requeued_without_a_signal(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    rec = Recorder()
    ex = Executor(rec, journal, Settings(), clock=lambda: 1000.0)
    pending = _job(job_id=3, state=JobState.PENDING, start_time=None)
    victim = _job(requeue=True, admin_comment="spolicy:v1 ckpt=periodic,interval=60")
    _run(ex, _snap(victim, pending),
         StartPreemption(reason="r", preemption_id=PID, beneficiary=3, victims=(1,),
                         nodes=("gpu01",), reservation=RESV),
         Requeue(reason="r", preemption_id=PID, job_id=1, restart_count=0, after="periodic"),
         now=1000.0)
    assert rec.calls.count(("requeue", 1)) == 1 and ("signal", 1) not in rec.calls
    row = journal.victims_of(PID)[0]
    assert (row["state"], row["protocol"]) == ("requeued", "periodic")
    # 100 s since its start at 900, checkpoints every 60 s: 40 s of work lost.
    assert journal.preemption(PID) is not None


def test_jobpolicy_default_is_unchanged() -> None:
    assert JobPolicy().checkpoint is None and not JobPolicy().can_checkpoint


# --- the planner: learned protocols choose and drive victims ----------------------
def _plan_one(b: ClusterBuilder, intents: Intents | None = None) -> Plan:
    return plan(b.snapshot(), b.fabric(), Settings(), intents or Intents(), b.now)


def _with(b: ClusterBuilder, job_id: int, **kw: object) -> None:
    b.jobs = [replace(j, **kw) if j.job_id == job_id else j  # type: ignore[arg-type]
              for j in b.jobs]


def test_a_job_with_its_own_signal_is_signalled_where_slurm_would() -> None:
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1])                       # cannot checkpoint
    b.run(102, "r", hosts=[2])
    _with(b, 102, batch_signal="USR2@90")            # submitit's own --signal
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    p = _plan_one(b)
    (start,) = [a for a in p.actions if isinstance(a, StartPreemption)]
    assert start.victims == (102,)  # the checkpointing job first
    assert "checkpoints" in start.reason
    (sig,) = [a for a in p.actions if isinstance(a, SignalCheckpoint)]
    assert (sig.signal, sig.target, sig.deadline - b.now) == ("USR2", "steps", 90.0)
    assert "protocol slurm-signal; recognised by --signal=USR2@90 in its batch script" \
        in sig.reason


def test_periodic_victims_chosen_by_checkpoint_age_and_requeued_at_once() -> None:
    b = ClusterBuilder(hosts=2)
    # Both ran an hour; one checkpoints every 25 min (last 10 min ago), one every
    # 20 min (last just now): the fresher checkpoint loses less.
    b.run(101, "r", hosts=[1], ran=3600.0,
          admin_comment="spolicy:v1 class=research ckpt=periodic,interval=1500")
    b.run(102, "r", hosts=[2], ran=3600.0,
          admin_comment="spolicy:v1 class=research ckpt=periodic,interval=1200")
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    p = _plan_one(b)
    (start,) = [a for a in p.actions if isinstance(a, StartPreemption)]
    assert start.victims == (102,)
    (req,) = [a for a in p.actions if isinstance(a, Requeue)]
    assert req.after == "periodic" and "protocol periodic" in req.reason
    assert not [a for a in p.actions if isinstance(a, SignalCheckpoint)]


def test_a_victim_that_saved_and_exited_is_requeued_once_by_the_plan() -> None:
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1])
    b.run(102, "r", hosts=[2])
    _with(b, 102, batch_signal="TERM@60")
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    first = _plan_one(b)
    intents = apply_to_intents(Intents(), first, b.now)
    _with(b, 102, state=JobState.COMPLETED, end_time=b.now + 5)
    b.now += 10
    p = _plan_one(b, intents)
    exits = [a for a in p.actions if isinstance(a, Requeue) and a.after == "exited"]
    assert [a.job_id for a in exits] == [102]
    # NeMo-style with exit=done declared: its exit is the end.
    _with(b, 102, admin_comment="spolicy:v1 class=research "
                                "ckpt=signal:TERM,grace=60,exit=done")
    p = _plan_one(b, intents)
    assert not [a for a in p.actions if isinstance(a, Requeue) and a.after == "exited"]


def test_report_and_figures_by_protocol(tmp_path: Path) -> None:
    import subprocess
    import sys

    from slurmpolicy.daemon.metrics import Metrics, checkpoint_figures

    journal = Journal(tmp_path)
    journal.open_preemption("p1", 3, ["gpu01"], "r", [(1, 0, 8), (2, 0, 8), (4, 0, 8)], "x")
    journal.update_victim("p1", 1, 0, state="requeued", protocol="slurm-signal",
                          signalled_at=1000.0, acked_at=1004.0, ack_how="self-requeue")
    journal.update_victim("p1", 2, 0, state="requeued", protocol="slurm-signal",
                          signalled_at=1000.0, acked_at=1010.0, ack_how="exit")
    journal.update_victim("p1", 4, 0, state="requeued", protocol="spolicy",
                          signalled_at=1000.0)  # missed its deadline
    outcomes = journal.checkpoint_outcomes()
    figures = {(name, labels.get("protocol")): value
               for name, labels, value in checkpoint_figures(outcomes)}
    assert figures[("slurmpolicy_checkpoint_success_ratio", "slurm-signal")] == 1.0
    assert figures[("slurmpolicy_checkpoint_success_ratio", "spolicy")] == 0.0
    assert figures[("slurmpolicy_checkpoint_ack_seconds_mean", "slurm-signal")] == 7.0
    metrics = Metrics()
    metrics.observe_cycle(result="ok", seconds=0.1, report=None, in_flight=0,
                          figures=checkpoint_figures(outcomes))
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    assert 'slurmpolicy_checkpoint_success_ratio{protocol="slurm-signal"} 1.0' in text

    out = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", "report", "--state-dir",
                          str(tmp_path), "--since", "1970-01-01T00:00"],
                         capture_output=True, text=True, check=False).stdout
    assert "ckpt slurm-signal    2/2 acknowledged (100%; exit 1, self-requeue 1); " \
           "signal to ack mean 7s, max 10s" in out
    assert "ckpt spolicy         0/1 acknowledged (0%)" in out


def test_batch_signals_of_a_finished_victim_are_read_after_a_restart() -> None:
    done = _job(job_id=1, requeue=True, state=JobState.COMPLETED)
    client = Scripts({1: SUBMITIT_SCRIPT})
    snapshot = Snapshot(taken_at=0.0, slurm_version="22.05", cluster_name="c", jobs=(done,))
    assert BatchSignals(client).enrich(snapshot).job(1).batch_signal == ""  # type: ignore[union-attr]
    out = BatchSignals(client).enrich(snapshot, victims={1})
    assert out.job(1).batch_signal == "USR2@90"  # type: ignore[union-attr]


def test_an_abort_waits_for_a_signalled_framework_victim_until_its_deadline() -> None:
    b = ClusterBuilder(hosts=2)
    b.run(101, "r", hosts=[1])
    b.run(102, "r", hosts=[2])
    _with(b, 102, batch_signal="TERM@60")
    b.pend(1, "p", admin_comment=d("production", "USR1"))
    intents = apply_to_intents(Intents(), _plan_one(b), b.now)
    b.jobs = [j for j in b.jobs if j.job_id != 1]  # the beneficiary left
    b.now += 10
    assert not [a for a in _plan_one(b, intents).actions if isinstance(a, Requeue)]
    assert not [a for a in _plan_one(b, intents).actions
                if getattr(a, "aborted", False)]  # it may still save and exit
    _with(b, 102, state=JobState.COMPLETED, end_time=b.now)
    p = _plan_one(b, intents)
    assert [a.after for a in p.actions if isinstance(a, Requeue)] == ["exited"]
    assert [a for a in p.actions if getattr(a, "aborted", False)]
    # Had it kept running, the abort comes at its deadline.
    _with(b, 102, state=JobState.RUNNING, end_time=None)
    b.now += 60
    assert [a for a in _plan_one(b, intents).actions if getattr(a, "aborted", False)]


class Lookup:
    name = "lookup"

    def __init__(self, jobs: dict[int, Job]) -> None:
        self.jobs = jobs
        self.asked: list[int] = []

    def job(self, job_id: int) -> Job | None:
        self.asked.append(job_id)
        if job_id == 99:
            raise SlurmError("boom")
        return self.jobs.get(job_id)


def test_with_victims_adds_finished_victims_the_listing_left_out() -> None:
    from slurmpolicy.daemon.protocols import with_victims

    listed = _job(job_id=1)
    done = _job(job_id=2, state=JobState.COMPLETED)
    client = Lookup({2: done})
    snapshot = Snapshot(taken_at=0.0, slurm_version="25.11", cluster_name="c", jobs=(listed,))
    out = with_victims(snapshot, client, {1, 2, 3, 99})
    assert client.asked == [2, 3, 99]  # only those not listed; forgotten and failing skipped
    assert [j.job_id for j in out.jobs] == [1, 2]
    assert out.job(2) is done
    assert with_victims(snapshot, object(), {2}) is snapshot  # a client without lookups
