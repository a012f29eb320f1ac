"""A job's whole life on a real Slurm, driven by `slurmpolicy daemon run`:
a node fails under a checkpointing job (its slurmd and the job's processes
are killed, as a crashed host would lose them) and the job resumes elsewhere
from its checkpoint, once; a job failing by itself is not retried; a node on
which jobs of different users fail is drained with the evidence, and a second
one over the share limit is not.

Each test has a 2-node x 8-GPU cluster of its own (the `cluster` fixture).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from slurmpolicy.devcluster import _children_map, _descendants, _proc_cmdline, _proc_environ

from .daemon_support import (
    DaemonRunner,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    journal_of,
    restarts,
    submit,
    train_script,
    wait_for,
    write_settings,
)
from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm

CKPT = "spolicy:v1 class=research ckpt=signal:USR1,grace=30 retry=1"


def _daemon(cluster: LiveCluster, **sections: dict[str, object]) -> DaemonRunner:
    home = Path(cluster.state_dir) / "sp"
    home.mkdir(exist_ok=True)
    settings = write_settings(home / "slurmpolicy.toml", home / "state",
                              lifecycle={"backoff": 1, "max_backoff": 2, **sections.pop(
                                  "lifecycle", {})}, **sections)
    return DaemonRunner(cluster, settings, home / "daemon.log")


def _crash_node(cluster: LiveCluster, node: str, job_id: int) -> None:
    """SIGKILL the node's slurmd and the job's step daemons with their processes:
    what the controller sees when a host dies (we started them all)."""
    pid = int(Path(cluster.slurmd_pid_file(node)).read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    children = _children_map()
    # The job's processes carry SLURM_JOB_ID; their parent is the job's slurmstepd
    # (its command line differs between Slurm releases).
    job_pids = [p for p in _all_pids() if _proc_environ(p).get("SLURM_JOB_ID") == str(job_id)]
    assert job_pids, f"no process of job {job_id} found"
    stepds = {_parent(p) for p in job_pids} - set(job_pids)
    stepds = {p for p in stepds if p and "slurmstepd" in _proc_cmdline(p)}
    for victim in [*stepds, *(d for s in stepds for d in _descendants(s, children)),
                   *job_pids]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def _drained(cluster: LiveCluster, name: str) -> dict[str, str]:
    """Node ``name``'s fields once Slurm shows it drained (60 s at most)."""
    return wait_for(lambda: "DRAIN" in (n := cluster.node_table()[name])["State"] and n,
                    60, f"{name} drained")


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def test_job_resumes_elsewhere_from_its_checkpoint_after_a_node_failure(
        cluster: LiveCluster) -> None:
    daemon = _daemon(cluster)
    wd = cluster.workdir()
    script = train_script(wd, steps=40, step_seconds=0.5).replace(
        "CKPT_EVERY=${CKPT_EVERY:-0}", "CKPT_EVERY=${CKPT_EVERY:-5}")
    job = submit(cluster, script, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                 admin_comment=CKPT, workdir=wd)
    first = cluster.wait_state(job, "RUNNING", timeout=60)["NodeList"]
    daemon.start()
    try:
        ckpt = wd / f"ckpt.{job}"
        wait_for(lambda: ckpt.exists() and int(ckpt.read_text() or 0) >= 10, 60,
                 "a checkpoint at step 10")
        _crash_node(cluster, first, job)
        saved = int(ckpt.read_text())
        # Slurm notices the dead node (SlurmdTimeout) and requeues the job by itself;
        # the daemon keeps it off that node and shortens the back-off.
        info = wait_for(lambda: (i := cluster.scontrol_show_job(job)).get("Restarts") == "1"
                        and i.get("JobState") in ("RUNNING", "COMPLETED") and i, 240,
                        "the job running again")
        assert info["NodeList"] != first
        assert info["ExcNodeList"] == first
        cluster.wait_state(job, "COMPLETED", timeout=120)
        out = cluster.read_file(wd / f"slurm-{job}.out", contains="finished")
        assert f"resumed {job} at step {saved} (restart 1)" in out
        assert restarts(cluster, job) == 1  # once: the daemon did not requeue it again
        wait_for(lambda: (journal_of(daemon).read_audit(job_id=job)), 30, "the audit")
        retries = [r for r in journal_of(daemon).read_audit(job_id=job) if r.kind == "Retry"]
        assert [r.outcome for r in retries] == ["ok"]
        assert first in retries[0].reason and "Slurm had requeued it" in retries[0].reason
        assert retries[0].detail["suspects"] == [first]
        history = wait_for(lambda: "completed" in (h := daemon.cli(
            "why", str(job), "--history").stdout) and h, 60, "the end in the timeline")
        kinds = [e["kind"] for e in json.loads(
            daemon.cli("why", str(job), "--history", "--json").stdout)["events"]]
        assert kinds.index("run") < kinds.index("checkpoint") < kinds.index("requeue") \
            < kinds.index("retry") < len(kinds) - 1 - kinds[::-1].index("run")
        assert "retry 1 of 1" in history
    finally:
        daemon.stop()


def test_job_failing_by_itself_is_not_retried(cluster: LiveCluster) -> None:
    daemon = _daemon(cluster)
    wd = cluster.workdir()
    # It also reports a figure Slurm does not know, as a training job would.
    body = "slurmpolicy ckpt report data_mbps=250"
    job = submit(cluster, cluster.hold_script(body) + "exit 3\n", "-N1", "--gres=gpu:1",
                 "--requeue", admin_comment=CKPT, workdir=wd)
    daemon.start()
    try:
        wait_for(lambda: "reported data_mbps=250" in daemon.cli(
            "why", str(job), "--history", check=False).stdout, 60, "the report in the timeline")
        cluster.release(job, wd)
        cluster.wait_state(job, "FAILED", timeout=60)
        history = wait_for(lambda: "its own exit code 3" in (h := daemon.cli(
            "why", str(job), "--history").stdout) and h, 60, "the end in the timeline")
        assert "not retried" in history
        assert restarts(cluster, job) == 0
        assert cluster.job_state(job) == "FAILED"
        assert not [r for r in journal_of(daemon).read_audit(job_id=job) if r.kind == "Retry"]
        report = json.loads(daemon.cli("report", "--json").stdout)["lifecycle"]
        assert report["research/(none)"]["reported_data_mbps_mean"] == 250
    finally:
        daemon.stop()


def test_flaky_node_is_drained_with_evidence_within_the_share_limit(
        cluster: LiveCluster) -> None:
    daemon = _daemon(cluster, lifecycle={"hardware_exit_codes": [75]},
                     node_health={"drain": True, "min_failures": 3, "min_users": 2,
                                  "max_drained_share": 0.5})
    wd = cluster.workdir()
    daemon.start()
    try:
        def fail_on(node: str) -> list[int]:
            jobs = []
            for user in ("spuser", "root", "spuser"):
                jobs.append(cluster.submit("#!/bin/bash\nexit 75\n", user=user,
                                           extra_args=["-w", node, "--gres=gpu:1"],
                                           workdir=wd))
            for j in jobs:
                cluster.wait_state(j, "FAILED", timeout=60)
            return jobs

        bad = fail_on("gpu01")
        node = _drained(cluster, "gpu01")
        assert node["Reason"].startswith("spolicy: 3 failed job(s) of 2 user(s)")
        assert ",".join(map(str, bad)) in node["Reason"] and "hardware" in node["Reason"]
        nodes_view = daemon.cli("nodes").stdout
        assert "gpu01" in nodes_view and "3 failed" in nodes_view
        # The second flaky node would take the drained share over half the cluster.
        second = fail_on("gpu02")
        # 120 s, not 60: on a machine whose cores are busy the daemon's cycles
        # (and slurmctld's job ends) come late; the drain must still be held back.
        held = wait_for(lambda: [r for r in journal_of(daemon).read_audit()
                                 if r.kind == "DrainNode" and r.outcome == "held back"],
                        120, "a drain held back")
        assert "share limit" in held[0].reason and str(second[0]) in held[0].reason
        assert "DRAIN" not in cluster.node_table()["gpu02"]["State"]
        suspect = daemon.cli("nodes").stdout
        assert "share limit" in suspect
    finally:
        daemon.stop()


def test_a_failure_behind_a_slow_epilog_counts_as_a_failure(cluster: LiveCluster) -> None:
    """Slurm 22.05 shows a job that failed as COMPLETING (one word, no base
    state) until its epilog ends; the daemon, cycling every second, sees that
    first. It must wait for the end Slurm then shows, not count a success."""
    cluster.set_epilog(4)
    daemon = _daemon(cluster, lifecycle={"hardware_exit_codes": [75]},
                     node_health={"drain": True, "min_failures": 1, "min_users": 1,
                                  "max_drained_share": 0.5})
    wd = cluster.workdir()
    daemon.start()
    try:
        job = cluster.submit("#!/bin/bash\nexit 75\n", extra_args=["-w", "gpu01", "--gres=gpu:1"],
                             workdir=wd)
        cluster.wait_state(job, "FAILED", timeout=60)
        retry = wait_for(lambda: [r for r in journal_of(daemon).read_audit(job_id=job)
                                  if r.kind == "Retry"], 60, "the failure judged")
        assert "classified as hardware" in retry[0].reason
        node = _drained(cluster, "gpu01")
        assert str(job) in node["Reason"] and "hardware" in node["Reason"]
        data = json.loads(daemon.cli("why", str(job), "--history", "--json").stdout)
        assert data["job"]["end_state"] == "FAILED", data["job"]
    finally:
        daemon.stop()


def test_timeline_of_a_job_that_waited_ran_was_preempted_and_finished(
        cluster: LiveCluster) -> None:
    from .daemon_support import release_requeued, submit_beneficiary

    daemon = _daemon(cluster)
    wd = cluster.workdir()
    daemon.start()
    try:
        # A job that waits behind a full cluster first: the daemon sees it pending.
        blocker = submit(cluster, cluster.hold_script(), "-N2", "--gres=gpu:8", workdir=wd)
        cluster.wait_state(blocker, "RUNNING")
        late = [submit(cluster, train_script(wd, 20), "-p", "research", "-N1", "--gres=gpu:8",
                       "--requeue", admin_comment="spolicy:v1 class=experimental "
                       "ckpt=signal:USR1,grace=30", workdir=wd) for _ in range(2)]
        wait_for(lambda: all("wait" in daemon.cli("why", str(j), "--history",
                                                  check=False).stdout for j in late),
                 60, "the waits in the timelines")
        cluster.release(blocker, wd)
        for j in late:
            cluster.wait_state(j, "RUNNING", timeout=60)
        beneficiary = submit_beneficiary(cluster, wd, seconds=3)
        victim = wait_for(lambda: next((v for v in late if restarts(cluster, v) == 1), None),
                          120, "a preempted victim")
        release_requeued(cluster, victim)

        def released() -> bool:
            # Slurm may still be completing the requeue when the first update comes.
            info = cluster.scontrol_show_job(victim)
            state, reason = info.get("JobState"), info.get("Reason")
            if state in ("RUNNING", "COMPLETED") or (state == "PENDING"
                                                     and reason != "BeginTime"):
                return True
            if state == "PENDING":
                cluster.slurm_cmd("scontrol", "update", f"jobid={victim}", "starttime=now",
                                  check=False)
            return False

        wait_for(released, 60, "the requeued victim eligible", interval=2)
        cluster.wait_state(beneficiary, "COMPLETED", timeout=120)
        cluster.wait_state(victim, "COMPLETED", timeout=120)
        data = wait_for(lambda: (d := json.loads(daemon.cli(
            "why", str(victim), "--history", "--json").stdout))["job"]["end_state"]
            == "COMPLETED" and d, 60, "the end in the timeline")
        life = [(e["kind"], e["text"]) for e in data["events"] if e["kind"] != "action"]
        # A wait may change its reason (resources, then the scheduler's next pass):
        # one entry per reason, read here as one stretch of waiting.
        kinds = [k for i, (k, _) in enumerate(life) if k != "checkpoint"
                 and not (k == "wait" and i and life[i - 1][0] == "wait")]
        assert kinds[:3] == ["submit", "wait", "run"], life
        assert kinds[3:5] == ["requeue", "wait"], [(e["at"], e["kind"], e["text"])
                                                   for e in data["events"]]
        assert "preemption" in life[[k for k, _ in life].index("requeue")][1]
        assert kinds[-2:] == ["run", "end"], life
        waits = [e for e in data["events"] if e["kind"] == "wait"]
        assert all(e["until"] is not None and e["until"] >= e["at"] for e in waits)
        assert "preempted" in waits[-1]["text"]
        actions = [e["text"] for e in data["events"] if e["kind"] == "action"]
        assert any(a.startswith("SignalCheckpoint") for a in actions)
        assert any(a.startswith("Requeue") for a in actions)
        times = [e["at"] for e in data["events"]]
        assert times == sorted(times)
        text = daemon.cli("why", str(victim), "--history").stdout
        assert f"Job {victim} (COMPLETED)" in text and "2 run(s)" in text
    finally:
        daemon.stop()
