"""One contract, every adapter: the SlurmClient port on a real local Slurm.

Each test runs over ``jsoncli`` and ``pyslurm``. Jobs are submitted as the
ordinary test user with real sbatch; the adapter acts as the daemon does
(root, the Slurm admin). The pyslurm runs are marked ``pyslurm``: CI
deselects them on Slurm 22.05 (no pyslurm exists for it) and runs them on
25.11; elsewhere they skip, saying how to build pyslurm, only where
``pyslurm_client.unavailable_reason()`` says pyslurm cannot be used.
Jobs end by being released (they wait for a file), never by scancel.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurmpolicy.errors import (
    JobAlreadyFinished,
    JobAlreadyPending,
    JobGone,
    PermissionDenied,
    ReservationError,
)
from slurmpolicy.model import Job, JobState, Snapshot
from slurmpolicy.slurm import pyslurm_client
from slurmpolicy.slurm.client import ReservationSpec, SlurmClient
from slurmpolicy.slurm.jsoncli import JsonCliClient

from .slurmtools import TEST_USER, LiveCluster, wait_until

pytestmark = pytest.mark.slurm

BOGUS = 987654


@pytest.fixture(params=["jsoncli", pytest.param("pyslurm", marks=pytest.mark.pyslurm)])
def client(request: pytest.FixtureRequest, devcluster: LiveCluster) -> SlurmClient:
    env = devcluster.env()
    if request.param == "pyslurm":
        reason = pyslurm_client.unavailable_reason(env=env)
        if reason is not None:
            pytest.skip(f"pyslurm adapter unusable here ({reason}); build Slurm 25.11 and "
                        "pyslurm with scripts/build-slurm and run with "
                        "SLURMPOLICY_TEST_SLURM_PREFIX=/opt/slurm-25.11")
        return pyslurm_client.PySlurmClient(env=env)
    return JsonCliClient(env=env, timeout=30)


@pytest.fixture
def wd(devcluster: LiveCluster) -> Path:
    return devcluster.workdir()


class Holder:
    """Jobs that wait for a file; released at the end of the test."""

    def __init__(self, cluster: LiveCluster, wd: Path) -> None:
        self.cluster, self.wd, self.ids = cluster, wd, []  # type: list[int]

    def submit(self, *args: str, trap: str | None = None, body: str = "") -> int:
        job = self.cluster.submit(self.cluster.hold_script(body=body, trap=trap),
                                  extra_args=["-t", "10", *args], workdir=self.wd)
        self.ids.append(job)
        return job

    def release_all(self) -> None:
        for job in self.ids:
            self.cluster.release(job, self.wd)


@pytest.fixture
def holder(devcluster: LiveCluster, wd: Path) -> Iterator[Holder]:
    h = Holder(devcluster, wd)
    yield h
    h.release_all()


def job_in(client: SlurmClient, job_id: int) -> tuple[Job, Snapshot]:
    snap = client.snapshot()
    job = snap.job(job_id)
    assert job is not None, f"job {job_id} missing from the {client.name} snapshot"
    return job, snap


def wait_job(client: SlurmClient, job_id: int, pred, what: str, timeout: float = 60) -> Job:
    def probe() -> Job | None:
        j = client.snapshot().job(job_id)
        return j if j is not None and pred(j) else None
    return wait_until(probe, timeout=timeout, what=f"job {job_id}: {what}")


# ------------------------------------------------------------------ reads

def test_running_job_read_back(client: SlurmClient, devcluster: LiveCluster,
                               holder: Holder) -> None:
    before = time.time()
    job_id = holder.submit("-p", "research", "-N2", "--gres=gpu:4", "--requeue",
                           "-J", "contract-read", "--comment=hello there")
    devcluster.wait_state(job_id, "RUNNING")
    j, snap = job_in(client, job_id)
    assert j.state is JobState.RUNNING and j.reason == "None"
    assert j.user == TEST_USER and j.partition == "research" and j.name == "contract-read"
    assert (j.node_count, j.gpus_per_node, j.gpus) == (2, 4, 8)
    assert len(j.nodes) == 2 and all(n.startswith("gpu") for n in j.nodes)
    assert dict(j.gpus_on_node) == {n: 4 for n in j.nodes}
    assert j.time_limit == 600 and j.requeue and j.restart_count == 0
    assert j.comment == "hello there"
    assert j.submit_time is not None and before - 5 <= j.submit_time <= time.time() + 5
    assert j.start_time is not None and j.start_time >= j.submit_time
    assert j.end_time is not None and j.end_time - j.start_time == pytest.approx(600, abs=2)
    for host in j.nodes:
        node = snap.node(host)
        assert node is not None and node.gpus == 8 and node.gpus_alloc >= 4
        assert node.gpu_types == ("h100",) and node.features[0] == "h100"
    assert snap.slurm_version and snap.cluster_name
    assert {p.name for p in snap.partitions} >= {"prod", "research"}
    research = snap.partition("research")
    assert research is not None and research.default and research.preempt_mode == "REQUEUE"
    assert snap.partition("prod").priority_tier == 10  # type: ignore[union-attr]


def test_pending_job_read_back(client: SlurmClient, devcluster: LiveCluster,
                               holder: Holder) -> None:
    blocker = holder.submit("-N1", "--gres=gpu:8")
    info = devcluster.wait_state(blocker, "RUNNING")
    node = info["NodeList"]
    # Same partition as the blocker: a prod job would preempt it (PriorityTier 10).
    waiting = holder.submit("-N1", "--gres=gpu:8", f"--nodelist={node}")
    j = wait_job(client, waiting, lambda j: j.reason in ("Resources", "Priority"),
                 "pending on Resources")
    assert j.state is JobState.PENDING and j.nodes == () and j.partition == "research"
    assert (j.node_count, j.gpus_per_node, j.gpus) == (1, 8, 8)


# ------------------------------------------------------------------ writes

def test_site_factor_moves_priority(client: SlurmClient, devcluster: LiveCluster,
                                    holder: Holder) -> None:
    blocker = holder.submit("-N1", "--gres=gpu:8")
    node = devcluster.wait_state(blocker, "RUNNING")["NodeList"]
    waiting = holder.submit("-N1", "--gres=gpu:8", f"--nodelist={node}")
    before = wait_job(client, waiting, lambda j: j.reason in ("Resources", "Priority"),
                      "pending")
    client.set_site_factor(waiting, 50000)
    after = wait_job(client, waiting, lambda j: j.priority >= before.priority + 49000,
                     "priority raised by the site factor")
    assert after.site_factor == 50000
    # multifactor still runs: the other factors keep contributing (not frozen at 50000)
    assert after.priority != 50000 or before.priority == 0
    client.set_site_factor(waiting, 0)
    back = wait_job(client, waiting, lambda j: j.priority < before.priority + 1000, "lowered")
    assert back.site_factor == 0


def test_site_factors_batch_names_many_jobs_and_each_refusal(
        client: SlurmClient, devcluster: LiveCluster, holder: Holder, wd: Path) -> None:
    """One call for many jobs (``scontrol update jobid=1,2,3 sitefactor=V`` through
    jsoncli); a job that left and a bogus id are named with their own error, and
    the others are set all the same (issue 13, finding 11)."""
    blocker = holder.submit("-N1", "--gres=gpu:8")
    node = devcluster.wait_state(blocker, "RUNNING")["NodeList"]
    waiting = [holder.submit("-N1", "--gres=gpu:8", f"--nodelist={node}") for _ in range(3)]
    done = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd)
    devcluster.wait_state(done, "COMPLETED")
    for job in waiting:
        wait_job(client, job, lambda j: j.is_pending, "pending")
    refused = client.set_site_factors([waiting[0], done, waiting[1], BOGUS, waiting[2]], 42000)
    assert set(refused) == {done, BOGUS}, refused
    assert all(isinstance(e, (JobGone, JobAlreadyFinished)) for e in refused.values()), refused
    for job in waiting:
        assert wait_job(client, job, lambda j: j.site_factor == 42000, "site factor set")
    assert client.set_site_factors(waiting, 0) == {}
    for job in waiting:
        assert wait_job(client, job, lambda j: j.site_factor == 0, "site factor back to 0")


def test_signal_reaches_the_batch_trap(client: SlurmClient, devcluster: LiveCluster,
                                       holder: Holder, wd: Path) -> None:
    job_id = holder.submit(trap="USR1")
    devcluster.wait_state(job_id, "RUNNING")
    devcluster.read_file(wd / f"started.{job_id}")
    client.signal(job_id, "USR1")
    assert "USR1" in devcluster.read_file(wd / f"trap.{job_id}", contains="USR1")
    client.signal(job_id, "SIGUSR1", target="all")
    wait_until(lambda: (wd / f"trap.{job_id}").read_text().count("USR1") >= 2 or None,
               timeout=30, what="second USR1 (all steps)")
    assert devcluster.job_state(job_id) == "RUNNING"  # signalled, not cancelled
    with pytest.raises(ValueError, match="allowed"):
        client.signal(job_id, "NOT_A_SIGNAL")


def test_signal_to_the_steps_only_as_slurm_sends_its_own(
        client: SlurmClient, devcluster: LiveCluster, holder: Holder, wd: Path) -> None:
    """target "steps": the srun tasks get it, the batch shell does not (Slurm's own
    --signal without B:); the batch script and its #SBATCH --signal read back."""
    step = ('srun bash -c \'trap "echo STEP >> $PWD/step.$SLURM_JOB_ID" USR2; '
            'while true; do sleep 0.2; done\' &\n'
            'sleep 1; echo "srun up" > "$PWD/srun.$SLURM_JOB_ID"')
    job_id = holder.submit(trap="USR2", body=step)
    devcluster.wait_state(job_id, "RUNNING")
    devcluster.read_file(wd / f"srun.{job_id}")
    devcluster.read_file(wd / f"started.{job_id}")
    client.signal(job_id, "USR2", target="steps")
    devcluster.read_file(wd / f"step.{job_id}", contains="STEP")
    assert not (wd / f"trap.{job_id}").exists()  # the batch shell was left alone
    script = client.batch_script(job_id)
    assert script.startswith("#!/bin/bash") and "srun bash -c" in script
    signalled = devcluster.submit("#!/bin/bash\n#SBATCH --signal=B:USR1@45\ntrue\n",
                                  extra_args=["--signal=R:TERM@30"], workdir=wd)
    assert "#SBATCH --signal=B:USR1@45" in client.batch_script(signalled)
    j, _ = job_in(client, signalled)
    # 23.02+ record the command line (it wins over the script); 22.05 does not.
    assert j.submit_line == "" or "--signal=R:TERM@30" in j.submit_line
    if not devcluster.slurm_cmd("scontrol", "--version").stdout.split()[1].startswith("22."):
        assert "--signal=R:TERM@30" in j.submit_line


def test_a_finished_batch_job_can_be_requeued(client: SlurmClient, devcluster: LiveCluster,
                                              wd: Path) -> None:
    """What slurmpolicy does with a victim that saved and exited (NeMo-style)."""
    job_id = devcluster.submit("#!/bin/bash\ntrue\n", extra_args=["--requeue"], workdir=wd)
    devcluster.wait_state(job_id, "COMPLETED")
    # Looked up by id, a finished job is there (23.02+'s squeue --json and
    # pyslurm's listing leave it out of the snapshot).
    done = client.job(job_id)
    assert done is not None and done.state is JobState.COMPLETED and done.requeue
    assert client.job(BOGUS) is None
    # The daemon's look at its signalled victims reads several in one call.
    some = client.jobs([job_id, BOGUS])
    assert some[BOGUS] is None
    assert some[job_id] is not None and some[job_id].state is JobState.COMPLETED
    client.requeue(job_id)
    j = wait_job(client, job_id, lambda j: j.restart_count == 1, "requeued after it ended")
    assert j.state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED)
    # Slurm holds a requeued batch job back a while; let it run again now.
    devcluster.slurm_cmd("scontrol", "update", f"jobid={job_id}", "starttime=now", check=False)
    devcluster.wait_state(job_id, "COMPLETED", timeout=120)


def test_requeue_counts_restarts(client: SlurmClient, devcluster: LiveCluster,
                                 holder: Holder) -> None:
    job_id = holder.submit("--requeue")
    held_id = holder.submit("--requeue")
    devcluster.wait_state(job_id, "RUNNING")
    devcluster.wait_state(held_id, "RUNNING")
    client.requeue(job_id)
    # 22.05 first shows the requeued job as COMPLETING (one state word, no
    # base); 25.11 as PENDING with the flags COMPLETING and REQUEUED, its
    # nodes still listed until the epilog ends. Done means pending, restart
    # count 1, and no longer completing anywhere.
    j = wait_job(client, job_id, lambda j: j.restart_count == 1 and j.is_pending
                 and "COMPLETING" not in j.state_flags,
                 "pending with restart count 1, no longer completing")
    assert j.nodes == ()
    with pytest.raises(JobAlreadyPending) as err:
        client.requeue(job_id)
    assert err.value.slurm_message  # Slurm's own words are kept
    client.requeue(held_id, hold=True)
    held = wait_job(client, held_id, lambda j: j.restart_count == 1 and j.is_pending
                    and "COMPLETING" not in j.state_flags,
                    "pending with restart count 1, no longer completing")
    # 22.05 says JobHeldAdmin, 25.11 JobHeldUser (with the description "job
    # requeued in held state"): both are held.
    assert held.is_held, held.reason
    assert held.reason in ("JobHeldAdmin", "JobHeldUser"), held.reason
    devcluster.slurm_cmd("scontrol", "release", str(held_id))


def test_comments_and_begin_time(client: SlurmClient, devcluster: LiveCluster,
                                 holder: Holder) -> None:
    job_id = holder.submit("--begin=now+2hours")
    text = "spolicy:v1 class=research ckpt=signal:USR1,grace=120"
    client.set_admin_comment(job_id, text)
    client.set_comment(job_id, "ckpt:1796218000 and more")
    j, _ = job_in(client, job_id)
    assert j.admin_comment == text and j.comment == "ckpt:1796218000 and more"
    assert j.begin_time is not None and j.begin_time > time.time() + 3600
    target = time.time() + 3 * 3600
    client.set_begin_time(job_id, target)
    j, _ = job_in(client, job_id)
    assert j.begin_time == pytest.approx(target, abs=2)
    client.set_begin_time(job_id, None)
    j = wait_job(client, job_id, lambda j: j.begin_time is None, "begin time cleared")


def test_reservation_lifecycle(client: SlurmClient) -> None:
    name = f"contract-{client.name}-{uuid.uuid4().hex[:6]}"
    start = float(int(time.time()) + 86400)
    spec = ReservationSpec(name=name, nodes=("gpu07", "gpu08"), start_time=start,
                           duration_minutes=60, users=(TEST_USER,), flags=("MAINT",))
    client.create_reservation(spec)
    try:
        r = client.snapshot().reservation(name)
        assert r is not None and r.nodes == ("gpu07", "gpu08")
        assert r.start_time == start and r.end_time == start + 3600
        assert "MAINT" in r.flags and r.users == (TEST_USER,)
        client.update_reservation(replace(spec, duration_minutes=120, nodes=("gpu08",)))
        r = client.snapshot().reservation(name)
        assert r is not None and r.end_time == start + 7200 and r.nodes == ("gpu08",)
        with pytest.raises(ReservationError) as err:
            client.create_reservation(spec)  # same name again
        assert err.value.slurm_message
    finally:
        client.delete_reservation(name)
    assert client.snapshot().reservation(name) is None
    with pytest.raises(ReservationError):
        client.delete_reservation(name)
    with pytest.raises(ValueError, match="users or accounts"):
        client.create_reservation(replace(spec, users=()))


def test_a_pending_job_is_named_on_a_reservation_and_let_go(client: SlurmClient,
                                                              holder: Holder) -> None:
    """How a preemption binds its held nodes to the beneficiary alone: the job
    names the reservation (``scontrol update jobid=N reservationname=R``), and
    is let go (an empty name) before the reservation is deleted."""
    name = f"contract-bind-{client.name}-{uuid.uuid4().hex[:6]}"
    start = float(int(time.time()) + 3600)
    client.create_reservation(ReservationSpec(name=name, nodes=("gpu08",), start_time=start,
                                              duration_minutes=60, users=(TEST_USER,),
                                              flags=("IGNORE_JOBS",)))
    try:
        job_id = holder.submit("--begin=now+2hours")
        client.set_job_reservation(job_id, name)
        j, snap = job_in(client, job_id)
        assert j.reservation == name
        resv = snap.reservation(name)
        assert resv is not None and "MAGNETIC" not in resv.flags
        client.set_job_reservation(job_id, "")
        wait_job(client, job_id, lambda j: not j.reservation, "reservation let go")
    finally:
        client.delete_reservation(name)
    with pytest.raises(ValueError, match="invalid reservation name"):
        client.set_job_reservation(job_id, "a b")


# ------------------------------------------------------------------ errors

def test_typed_errors_on_a_bogus_job(client: SlurmClient) -> None:
    for call in (lambda: client.set_site_factor(BOGUS, 1),
                 lambda: client.signal(BOGUS, "USR1"),
                 lambda: client.requeue(BOGUS),
                 lambda: client.set_comment(BOGUS, "x"),
                 lambda: client.set_admin_comment(BOGUS, "x")):
        with pytest.raises(JobGone) as err:
            call()
        assert "nvalid job id" in err.value.slurm_message


def test_ended_jobs_come_from_the_snapshots_listing_once(client: SlurmClient,
                                                          devcluster: LiveCluster,
                                                          wd: Path) -> None:
    """The lifecycle asks for the ended jobs after every snapshot: the adapter
    answers from what the snapshot's own listing held (22.05's squeue lists
    ended jobs; 23.02+ is asked for every state; pyslurm's load has them), the
    same jobs, field by field, as asking Slurm anew, and no whole-queue read."""
    done = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd)
    failed = devcluster.submit("#!/bin/bash\nexit 3\n", workdir=wd)
    for job, state in ((done, "COMPLETED"), (failed, "FAILED")):
        devcluster.wait_state(job, state)
    client.snapshot()
    calls: list[str] = []
    run = getattr(client, "run", None)
    if run is not None:  # the JSON CLI: count the Slurm commands it runs
        def counted(argv: Sequence[str], *a: Any, **kw: Any) -> bytes:
            calls.append(" ".join(argv))
            return run(argv, *a, **kw)
        client.run = counted  # type: ignore[attr-defined]
    try:
        kept = {j.job_id: j for j in client.ended_jobs([done, failed])}
    finally:
        if run is not None:
            del client.run  # type: ignore[attr-defined]
    assert not [c for c in calls if c.startswith("squeue")], calls
    asked = {j.job_id: j for j in client.ended_jobs([done, failed])}  # no snapshot: Slurm
    assert set(kept) == set(asked) == {done, failed}
    for job_id, job in kept.items():
        # Slurm's priority may move between two reads; nothing else may.
        assert replace(job, priority=0) == replace(asked[job_id], priority=0), job_id
    assert kept[failed].exit_code == 3 and kept[done].state.value == "COMPLETED"


def test_finished_job(client: SlurmClient, devcluster: LiveCluster, wd: Path) -> None:
    job_id = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd)
    devcluster.wait_state(job_id, "COMPLETED")
    if client.name == "jsoncli":
        # scancel answers "already completing or completed" or, once the job
        # left the active list, "Invalid job id": either way the goal is reached.
        with pytest.raises((JobAlreadyFinished, JobGone)) as err:
            client.signal(job_id, "USR1")
        assert err.value.slurm_message
    else:
        # pyslurm's send_signal swallows ESLURM_ALREADY_DONE: the goal counts as reached.
        client.signal(job_id, "USR1")


def test_ordinary_user_may_not_set_admin_comment(devcluster: LiveCluster,
                                                 holder: Holder) -> None:
    """Run the JSON adapter as the test user: Slurm's refusal is PermissionDenied."""
    job_id = holder.submit()

    class AsUser(JsonCliClient):
        def _argv(self, argv):  # type: ignore[no-untyped-def]
            return devcluster.as_user(super()._argv(argv), TEST_USER)

    user_client = AsUser(env=devcluster.env())
    user_client.set_comment(job_id, "ckpt:1")  # their own job's comment: allowed
    with pytest.raises(PermissionDenied) as err:
        user_client.set_admin_comment(job_id, "spolicy:v1 class=production")
    assert "ermission denied" in err.value.slurm_message
    with pytest.raises(PermissionDenied):
        user_client.set_site_factor(job_id, 100)


def test_unreachable_controller_is_unavailable(devcluster: LiveCluster, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    text = devcluster.slurm_conf.read_text()
    import re
    conf.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=1", text))
    for extra in ("gres.conf", "topology.conf", "cgroup.conf"):
        src = devcluster.slurm_conf.parent / extra
        if src.exists():
            (tmp_path / extra).write_text(src.read_text())
    from slurmpolicy.errors import SlurmUnavailable
    c = JsonCliClient(env={**devcluster.env(), "SLURM_CONF": str(conf)}, timeout=60)
    with pytest.raises(SlurmUnavailable) as err:
        c.snapshot()
    assert "controller" in err.value.slurm_message.lower()
    with pytest.raises(SlurmUnavailable, match="not found"):
        JsonCliClient(bin_dir=str(tmp_path)).snapshot()


# ------------------------------------------------------------------ hostile strings

HOSTILE = [
    "quote'single\"double",
    "semi;colon && echo owned",
    "$(touch {marker})",
    "`touch {marker}`",
    "new\nline",
    "pipe|bar|baz",
    "bytes-\udcff\udcfe-end",  # not UTF-8: 0xff 0xfe on the wire
]


def expected_readback(text: str) -> str:
    # Bytes that are not UTF-8 come back as U+FFFD, one per byte (errors="replace").
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def test_hostile_names_and_comments_are_data(client: SlurmClient, devcluster: LiveCluster,
                                             wd: Path) -> None:
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    ids: dict[int, str] = {}
    for template in HOSTILE:
        text = template.format(marker=marker)
        job_id = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd,
                                   extra_args=["--hold", "-J", text, f"--comment={text}"])
        ids[job_id] = text
    snap = client.snapshot()
    for job_id, text in ids.items():
        j = snap.job(job_id)
        assert j is not None
        assert j.name == expected_readback(text), (j.name, text)
        assert j.comment == expected_readback(text)
    # Writes take them as single argv items, too.
    some = next(iter(ids))
    for text in ids.values():
        if "\udcff" in text:
            continue  # Slurm stores bytes; we write str
        client.set_comment(some, text)
        assert client.snapshot().job(some).comment == text  # type: ignore[union-attr]
    for job_id in ids:
        devcluster.slurm_cmd("scontrol", "release", str(job_id))
    for job_id in ids:
        devcluster.wait_state(job_id, "COMPLETED", timeout=120)
    assert not marker.exists(), "a job name or comment was executed"


def test_queue_and_nodes_views_on_the_live_cluster(devcluster: LiveCluster,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from slurmpolicy.cli import cli

    for key, value in devcluster.env().items():
        monkeypatch.setenv(key, value)
    runner = CliRunner()
    res = runner.invoke(cli, ["nodes", "--json", "--adapter", "jsoncli"])
    assert res.exit_code == 0, res.output
    nodes = {n["name"]: n for n in json.loads(res.output)["nodes"]}
    assert set(nodes) == {f"gpu0{i}" for i in range(1, 9)}
    assert all(sum(n["gpus"].values()) == 8 for n in nodes.values())
    res = runner.invoke(cli, ["queue", "--adapter", "jsoncli"])
    assert res.exit_code == 0, res.output
