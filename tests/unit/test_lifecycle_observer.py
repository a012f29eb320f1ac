"""The daemon's lifecycle observer over a sequence of snapshots, with a real
journal and a client that records the Slurm calls it is asked for: the
bookkeeping of a job's life (timeline, totals), and which failures lead to
which calls. The same paths run on a real Slurm in
tests/integration/test_lifecycle_live.py."""

from __future__ import annotations

import dataclasses

from slurmpolicy import settings as settings_mod
from slurmpolicy.daemon.executor import Executor
from slurmpolicy.daemon.lifecycle import Lifecycle
from slurmpolicy.model import Job, JobState, Node, Snapshot
from slurmpolicy.store import Journal

CKPT = "spolicy:v1 class=research ckpt=signal:USR1,grace=30 retry=1"
SITE = settings_mod.from_mapping({"lifecycle": {"backoff": 10, "hardware_exit_codes": [75]}})


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, object]] = []

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self.calls.append(("requeue", job_id, None))

    def set_excluded_nodes(self, job_id: int, nodes: tuple[str, ...]) -> None:
        self.calls.append(("exclude", job_id, tuple(nodes)))

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self.calls.append(("begin", job_id, begin))

    def drain_node(self, node: str, reason: str) -> None:
        self.calls.append(("drain", 0, node))


def _life(tmp_path):
    client = Recorder()
    journal = Journal(tmp_path)
    return Lifecycle(Executor(client, journal, SITE), SITE), client, journal  # type: ignore[arg-type]


NODES = (Node("g1", "IDLE", gpus_by_type={"h100": 8}), Node("g2", "IDLE", gpus_by_type={"h100": 8}))


def snap(now: float, *jobs: Job, nodes: tuple[Node, ...] = NODES) -> Snapshot:
    return Snapshot(taken_at=now, slurm_version="x", cluster_name="c", jobs=jobs, nodes=nodes)


PENDING = Job(job_id=5, name="n", user="u", account="a", partition="p", state=JobState.PENDING,
              reason="Resources", submit_time=990.0, gpus=8, admin_comment=CKPT)
RUNNING = dataclasses.replace(PENDING, state=JobState.RUNNING, reason="None",
                              start_time=1001.0, nodes=("g1",))


def test_a_plain_life_reads_back_in_order_with_its_totals(tmp_path):
    life, client, _ = _life(tmp_path)
    life.observe(snap(1000.0, PENDING), 1000.0)
    life.observe(snap(1001.5, PENDING), 1001.5)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    done = dataclasses.replace(RUNNING, state=JobState.COMPLETED, end_time=1010.0)
    life.observe(snap(1020.0, done), 1020.0)
    life.observe(snap(1030.0), 1030.0)  # gone from Slurm: nothing new
    assert [(e.kind, e.at, e.until) for e in life.store.events(5)] == [
        ("submit", 990.0, None), ("wait", 990.0, 1001.0), ("run", 1001.0, 1010.0),
        ("end", 1010.0, None)]
    row = life.store.job(5)
    assert row is not None
    assert (row["pending_seconds"], row["running_seconds"], row["gpu_seconds"]) == (11, 9, 72)
    assert row["cause"] == "completed" and row["ended_at"] == 1010.0
    assert client.calls == []


def test_own_failure_is_not_retried(tmp_path):
    life, client, journal = _life(tmp_path)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    failed = dataclasses.replace(RUNNING, state=JobState.FAILED, end_time=1005.0, exit_code=3)
    life.observe(snap(1006.0, failed), 1006.0)
    assert client.calls == []
    assert life.store.job(5)["cause"] == "exit"  # type: ignore[index]
    assert "its own exit code 3" in life.store.events(5)[-1].text
    assert not journal.read_audit(job_id=5)


def test_hardware_failure_is_requeued_away_from_the_node_once(tmp_path):
    life, client, journal = _life(tmp_path)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    failed = dataclasses.replace(RUNNING, state=JobState.FAILED, end_time=1005.0, exit_code=75)
    life.observe(snap(1006.0, failed), 1006.0)
    assert client.calls == [("requeue", 5, None), ("exclude", 5, ("g1",)),
                            ("begin", 5, 1016.0)]
    (audit,) = journal.read_audit(job_id=5)
    assert audit.kind == "Retry" and audit.outcome == "ok"
    assert "retry 1 of 1" in audit.reason and "classified as hardware" in audit.reason
    # Slurm shows it pending again, restarted: no second requeue; then it fails again
    # on the other node and its one retry is spent.
    again = dataclasses.replace(PENDING, restart_count=1, excluded_nodes=("g1",))
    life.observe(snap(1007.0, again), 1007.0)
    rerun = dataclasses.replace(RUNNING, restart_count=1, start_time=1020.0, nodes=("g2",),
                                excluded_nodes=("g1",))
    life.observe(snap(1021.0, rerun), 1021.0)
    second = dataclasses.replace(rerun, state=JobState.FAILED, end_time=1030.0, exit_code=75)
    life.observe(snap(1031.0, second), 1031.0)
    assert [c[0] for c in client.calls] == ["requeue", "exclude", "begin"]
    refused = journal.read_audit(job_id=5)[-1]
    assert refused.outcome == "refused" and "all 1 retry used" in refused.reason
    row = life.store.job(5)
    assert row is not None and row["retries"] == 1 and row["recoveries"] == 1
    assert row["recovery_seconds"] == 1020.0 - 1005.0
    # No checkpoint acknowledged in the first run: all of it (from 1001) is redone.
    assert row["progress_recovery_seconds"] == 1020.0 - 1001.0
    # Work lost to the interruption it resumed from; the last run is not resumed.
    assert row["lost_gpu_seconds"] == 8 * (1005.0 - 1001.0)


def test_slurms_own_requeue_is_not_doubled(tmp_path):
    life, client, journal = _life(tmp_path)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    down = (Node("g1", "DOWN", frozenset({"NOT_RESPONDING"}), "Not responding",
                 gpus_by_type={"h100": 8}), NODES[1])
    requeued = dataclasses.replace(PENDING, restart_count=1, reason="BeginTime")
    life.observe(snap(1100.0, requeued, nodes=down), 1100.0)
    assert client.calls == [("exclude", 5, ("g1",)), ("begin", 5, 1110.0)]
    (audit,) = journal.read_audit(job_id=5)
    assert "Slurm had requeued it" in audit.reason and "g1 DOWN+NOT_RESPONDING" in audit.reason
    kinds = [e.kind for e in life.store.events(5)]
    assert kinds[-3:] == ["requeue", "retry", "wait"]
    assert life.store.events(5)[-1].text.startswith("retrying after a failure")


def test_figures_by_class_and_account_reach_metrics_and_report(tmp_path):
    import json

    from click.testing import CliRunner

    from slurmpolicy.cli import cli

    life, _, journal = _life(tmp_path)
    life.observe(snap(1000.0, PENDING), 1000.0)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    done = dataclasses.replace(RUNNING, state=JobState.COMPLETED, end_time=1100.0)
    life.observe(snap(1101.0, done), 1101.0)
    figures = {name: (labels, value) for name, labels, value in life.figures(1200.0)}
    labels, ended = figures["slurmpolicy_job_jobs_ended"]
    assert labels == {"class": "research", "account": "a"} and ended == 1
    assert figures["slurmpolicy_job_queueing_share_mean"][1] == (1001 - 990) / (1100 - 990)
    assert figures["slurmpolicy_job_gpu_hours_finished"][1] == 8 * 99 / 3600
    journal.close()
    res = CliRunner().invoke(cli, ["report", "--since", "1970-01-01", "--json", "--state-dir",
                                   str(tmp_path)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)["lifecycle"]["research/a"]
    assert report["jobs_ended"] == 1 and report["abnormal_exit_ratio"] == 0
    text = CliRunner().invoke(cli, ["report", "--since", "1970-01-01", "--state-dir",
                                    str(tmp_path)])
    assert "research/a: 1 job(s), start-up success 100%, abnormal exits 0%" in text.output


def test_flaky_node_is_drained_once_on_its_evidence(tmp_path):
    site = settings_mod.from_mapping({
        "lifecycle": {"hardware_exit_codes": [75]},
        "node_health": {"drain": True, "min_failures": 3, "min_users": 2,
                        "max_drained_share": 0.5}})
    client = Recorder()
    journal = Journal(tmp_path)
    life = Lifecycle(Executor(client, journal, site), site)  # type: ignore[arg-type]
    nodes = (*NODES, Node("g3", "IDLE", gpus_by_type={"h100": 8}))
    jobs = [dataclasses.replace(RUNNING, job_id=10 + i, user=u, admin_comment="")
            for i, u in enumerate(("ann", "bob", "ann"))]
    life.observe(snap(1002.0, *jobs, nodes=nodes), 1002.0)
    failed = [dataclasses.replace(j, state=JobState.FAILED, end_time=1005.0, exit_code=75)
              for j in jobs]
    life.observe(snap(1006.0, *failed, nodes=nodes), 1006.0)
    life.observe(snap(1007.0, *failed, nodes=nodes), 1007.0)
    assert client.calls == [("drain", 0, "g1")]
    (audit,) = [r for r in journal.read_audit() if r.kind == "DrainNode"]
    assert audit.outcome == "ok"
    assert audit.reason == ("spolicy: 3 failed job(s) of 2 user(s) in 1h: jobs 10,11,12 "
                            "(hardware)")


def test_an_end_gone_from_the_snapshot_is_asked_for(tmp_path):
    class Ends(Recorder):
        def __init__(self, ended: list[Job]) -> None:
            super().__init__()
            self.ended = ended

        def ended_jobs(self, job_ids: list[int] | None = None) -> list[Job]:
            self.calls.append(("ended_jobs", 0, job_ids))
            return [j for j in self.ended if job_ids is None or j.job_id in job_ids]

    failed = dataclasses.replace(RUNNING, state=JobState.FAILED, end_time=1005.0, exit_code=3)
    client = Ends([failed])
    journal = Journal(tmp_path)
    life = Lifecycle(Executor(client, journal, SITE), SITE)  # type: ignore[arg-type]
    life.observe(snap(1002.0, RUNNING), 1002.0)
    life.observe(snap(1006.0), 1006.0)  # 23.02+: squeue no longer lists it
    # No ended job in the snapshot: the adapter lists live jobs only, so every
    # cycle asks for the ended ones (a job may start and end between two cycles).
    assert client.calls == [("ended_jobs", 0, None), ("ended_jobs", 0, None)]
    row = life.store.job(5)
    assert row is not None and row["cause"] == "exit" and row["ended_at"] == 1005.0
    # Forgotten by Slurm too: recorded as unseen.
    client.ended = []
    other = dataclasses.replace(RUNNING, job_id=6)
    life.observe(snap(1010.0, other), 1010.0)
    life.observe(snap(1020.0), 1020.0)
    assert life.store.job(6)["cause"] == "unknown"  # type: ignore[index]
    # A job that lived and ended between two cycles is still seen.
    flash = dataclasses.replace(failed, job_id=7, start_time=1021.0, end_time=1022.0)
    client.ended = [flash]
    life.observe(snap(1025.0), 1025.0)
    assert life.store.job(7)["cause"] == "exit"  # type: ignore[index]
    assert "left Slurm's memory unseen" in life.store.events(6)[-1].text


def test_slurms_requeue_of_a_job_that_cannot_resume_is_left_as_it_is(tmp_path):
    life, client, journal = _life(tmp_path)
    plain = dataclasses.replace(RUNNING, admin_comment="")
    life.observe(snap(1002.0, plain), 1002.0)
    down = (Node("g1", "DOWN", frozenset({"NOT_RESPONDING"}), gpus_by_type={"h100": 8}),
            NODES[1])
    requeued = dataclasses.replace(PENDING, admin_comment="", restart_count=1,
                                   reason="BeginTime")
    life.observe(snap(1100.0, requeued, nodes=down), 1100.0)
    assert client.calls == []
    (audit,) = journal.read_audit(job_id=5)
    assert audit.outcome == "refused"
    assert audit.reason.startswith("Slurm requeued it by itself; no exclusion or back-off")
    assert "cannot resume from a checkpoint" in audit.reason


def test_figures_the_job_reports_itself(tmp_path):
    import pytest

    from slurmpolicy.job import merge_metrics, parse_metrics

    assert parse_metrics(["data_mbps=250", "first_step_s=42.5"]) == {
        "data_mbps": 250.0, "first_step_s": 42.5}
    for bad in ("Data=1", "x", "x=abc", "x=nan"):
        with pytest.raises(ValueError, match=r"NAME=NUMBER|not a"):
            parse_metrics([bad])
    comment = merge_metrics("ckpt:1000:0 spm:data_mbps=100", {"data_mbps": 250.0})
    assert comment == "ckpt:1000:0 spm:data_mbps=250"
    life, _, _ = _life(tmp_path)
    reporting = dataclasses.replace(RUNNING, comment=comment)
    life.observe(snap(1002.0, reporting), 1002.0)
    life.observe(snap(1003.0, reporting), 1003.0)  # unchanged: no second entry
    reports = [e.text for e in life.store.events(5) if e.kind == "report"]
    assert reports == ["reported data_mbps=250"]
    done = dataclasses.replace(reporting, state=JobState.COMPLETED, end_time=1010.0)
    life.observe(snap(1011.0, done), 1011.0)
    figures = {n: v for n, _, v in life.figures(1020.0)}
    assert figures["slurmpolicy_job_reported_data_mbps_mean"] == 250.0


def test_a_job_seen_again_unchanged_is_not_written_and_a_changed_one_is(tmp_path):
    """A waiting job seen cycle after cycle costs no write (its row's last_seen
    stays at the first); any other change to its row is written, last_seen with it."""
    life, _, _ = _life(tmp_path)
    life.observe(snap(1000.0, PENDING), 1000.0)
    life.observe(snap(1030.0, PENDING), 1030.0)
    row = life.store.job(5)
    assert row is not None and row["last_seen"] == 1000.0
    moved = dataclasses.replace(PENDING, excluded_nodes=("g2",))
    life.observe(snap(1060.0, moved), 1060.0)
    row = life.store.job(5)
    assert row is not None and row["last_seen"] == 1060.0 and row["excluded"] == '["g2"]'
    life.observe(snap(1090.0, moved), 1090.0)
    row = life.store.job(5)
    assert row is not None and row["last_seen"] == 1060.0


# Slurm 22.05's squeue --json prints the one word COMPLETING for a job that is
# completing, whatever its end (its base state is not printed): the adapter
# reads it as COMPLETED with the flag. Seen so (a busy node's epilog makes it
# last), the job has not told how it ended yet.
COMPLETING_2205 = dict(state=JobState.COMPLETED, state_flags=frozenset({"COMPLETING"}),
                       exit_code=None)


def test_a_failure_first_seen_completing_is_judged_by_how_it_ended(tmp_path):
    life, client, _ = _life(tmp_path)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    completing = dataclasses.replace(RUNNING, end_time=1005.0, **COMPLETING_2205)
    life.observe(snap(1006.0, completing), 1006.0)
    assert life.store.job(5)["ended_at"] is None  # type: ignore[index]
    failed = dataclasses.replace(RUNNING, state=JobState.FAILED, end_time=1005.0, exit_code=75)
    life.observe(snap(1008.0, failed), 1008.0)
    row = life.store.job(5)
    assert row is not None and row["cause"] == "hardware"
    assert [f.node for f in life.store.node_failures(0.0)] == ["g1"]
    # Retried away from its node, as a failure seen FAILED at once is.
    assert client.calls == [("requeue", 5, None), ("exclude", 5, ("g1",)),
                            ("begin", 5, 1018.0)]
    assert [e.kind for e in life.store.events(5)] == ["run", "retry"]


def test_a_job_never_seen_before_completing_is_judged_when_it_has_ended(tmp_path):
    life, _, _ = _life(tmp_path)
    completing = dataclasses.replace(RUNNING, admin_comment="", end_time=1005.0,
                                     **COMPLETING_2205)
    life.observe(snap(1006.0, completing), 1006.0)
    assert life.store.job(5) is None
    failed = dataclasses.replace(completing, state=JobState.FAILED, state_flags=frozenset(),
                                 exit_code=75)
    life.observe(snap(1008.0, failed), 1008.0)
    assert life.store.job(5)["cause"] == "hardware"  # type: ignore[index]
    assert [f.node for f in life.store.node_failures(0.0)] == ["g1"]


def test_a_requeue_seen_completing_in_between_is_a_requeue_not_an_end(tmp_path):
    life, _, _ = _life(tmp_path)
    life.observe(snap(1002.0, RUNNING), 1002.0)
    life.observe(snap(1010.0, dataclasses.replace(RUNNING, **COMPLETING_2205)), 1010.0)
    again = dataclasses.replace(PENDING, restart_count=1, reason="BeginTime")
    life.observe(snap(1020.0, again), 1020.0)
    kinds = [e.kind for e in life.store.events(5)]
    assert "end" not in kinds and kinds[:2] == ["run", "requeue"], kinds
    assert life.store.job(5)["ended_at"] is None  # type: ignore[index]
