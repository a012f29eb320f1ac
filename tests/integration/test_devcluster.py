"""The dev cluster is a real Slurm: nodes with GPUs, jobs of an ordinary user
scheduled on --gres, topology and features, site factor, signals to the batch
shell, requeue, and a down that leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmpolicy.devcluster import (
    SINGLE_SLURMD_LOG,
    DevCluster,
    _pid_alive,
    _proc_cmdline,
    multiple_slurmd_support,
)
from slurmpolicy.errors import DevClusterError

from .slurmtools import TEST_USER, LiveCluster, parse_scontrol_line, wait_until

pytestmark = pytest.mark.slurm

Factory = Callable[..., LiveCluster]


def test_up_gives_eight_idle_nodes_with_eight_gpus(devcluster: LiveCluster) -> None:
    out = devcluster.slurm_cmd("sinfo", "-h", "-N", "-p", "research", "-o", "%N %T %G %f").stdout
    rows = [line.split() for line in out.splitlines()]
    assert [r[0] for r in rows] == [f"gpu0{i}" for i in range(1, 9)]
    assert all(r[2] == "gpu:h100:8" for r in rows), rows
    assert {r[0]: r[3] for r in rows}["gpu01"] == "h100,nvl_rack1,leaf1"
    assert {r[0]: r[3] for r in rows}["gpu08"] == "h100,nvl_rack2,leaf2"
    # Idle or busy with other tests' jobs, but every node answers.
    assert all(r[1] in {"idle", "mixed", "allocated"} for r in rows), rows
    status = devcluster.status()
    assert status.running and status.controller_responds
    assert len(status.slurmds) == 8


def test_partitions_and_priority_tiers(devcluster: LiveCluster) -> None:
    out = devcluster.slurm_cmd("scontrol", "show", "partitions", "-o").stdout
    parts = {re.search(r"PartitionName=(\S+)", line).group(1): line  # type: ignore[union-attr]
             for line in out.splitlines()}
    assert set(parts) == {"prod", "research"}
    assert "PriorityTier=10" in parts["prod"]
    assert "PriorityTier=1 " in parts["research"] and "Default=YES" in parts["research"]
    config = devcluster.slurm_cmd("scontrol", "show", "config").stdout
    assert re.search(r"PreemptType\s+=\s+preempt/partition_prio", config)
    assert re.search(r"PreemptMode\s+=\s+REQUEUE", config)
    assert re.search(r"JobSubmitPlugins\s+=\s+lua", config)
    assert re.search(r"PriorityType\s+=\s+priority/multifactor", config)


def test_topology_is_two_leaves_under_a_spine(devcluster: LiveCluster) -> None:
    out = devcluster.slurm_cmd("scontrol", "show", "topology").stdout
    assert re.search(r"SwitchName=leaf1 Level=0 .*Nodes=gpu\[01-04\]", out), out
    assert re.search(r"SwitchName=leaf2 Level=0 .*Nodes=gpu\[05-08\]", out), out
    assert re.search(r"SwitchName=spine Level=1 .*Switches=leaf\[1-2\]", out), out


def test_two_node_gpu_job_runs_as_the_user_and_sees_its_gpus(devcluster: LiveCluster) -> None:
    wd = devcluster.workdir()
    script = (
        "#!/bin/bash\n"
        'echo "user=$(id -un) nodes=$SLURM_JOB_NODELIST"\n'
        "srun bash -c 'echo \"step $SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES\"'\n"
    )
    job = devcluster.submit(script, extra_args=["-N2", "--gres=gpu:8", "-t", "5"], workdir=wd)
    info = devcluster.wait_state(job, "COMPLETED", timeout=60)
    text = devcluster.read_file(wd / f"slurm-{job}.out")
    expected_user = TEST_USER if os.geteuid() == 0 else None
    if expected_user:
        assert f"user={expected_user}" in text
        assert info["UserId"].startswith(f"{expected_user}(")
    steps = re.findall(r"step (gpu\d+) cvd=(\S+)", text)
    assert len({host for host, _ in steps}) == 2, text
    assert all(cvd == "0,1,2,3,4,5,6,7" for _, cvd in steps), text
    assert info["TresPerNode"] in {"gres:gpu:8", "gres/gpu:8"}, info
    assert info["NumNodes"] == "2", info


def test_gres_is_really_scheduled(devcluster: LiveCluster) -> None:
    """Nine 8-GPU single-node jobs on eight nodes: eight run, one per node; one waits."""
    wd = devcluster.workdir()
    jobs = [devcluster.submit(devcluster.hold_script(), extra_args=["--gres=gpu:8", "-t", "5"],
                              workdir=wd) for _ in range(9)]
    try:
        def all_placed() -> dict[int, dict[str, str]] | None:
            infos = {j: devcluster.scontrol_show_job(j) for j in jobs}
            running = [i for i in infos.values() if i.get("JobState") == "RUNNING"]
            waiting = [i for i in infos.values()
                       if i.get("JobState") == "PENDING" and i.get("Reason") != "None"]
            return infos if len(running) == 8 and waiting else None

        infos = wait_until(all_placed, timeout=60,
                           what="eight of nine 8-GPU jobs running, the ninth waiting")
        running = [i for i in infos.values() if i["JobState"] == "RUNNING"]
        pending = [i for i in infos.values() if i["JobState"] == "PENDING"]
        assert len({i["NodeList"] for i in running}) == 8
        assert len(pending) == 1 and pending[0]["Reason"] in {"Resources", "Priority"}, pending
    finally:
        for job in jobs:
            devcluster.release(job, wd)
    for job in jobs:
        devcluster.wait_state(job, "COMPLETED", timeout=60)


def test_site_factor_changes_priority(devcluster: LiveCluster) -> None:
    """The multifactor plugin adds the site factor and keeps computing the rest."""
    wd = devcluster.workdir()
    # Pending (BeginTime) but not held: a held job's priority is 0.
    job = devcluster.submit("#!/bin/bash\ntrue\n", extra_args=["--begin=now+1hour", "-t", "5"],
                            workdir=wd)
    try:
        before = int(devcluster.wait_state(job, "PENDING")["Priority"])
        assert before > 0
        devcluster.slurm_cmd("scontrol", "update", f"jobid={job}", "sitefactor=5000")
        after = int(devcluster.scontrol_show_job(job)["Priority"])
        assert 4990 <= after - before <= 5010, (before, after)
        devcluster.slurm_cmd("scontrol", "update", f"jobid={job}", "sitefactor=0")
        back = int(devcluster.scontrol_show_job(job)["Priority"])
        assert abs(back - before) <= 10, (before, back)
    finally:
        devcluster.slurm_cmd("scontrol", "update", f"jobid={job}", "starttime=now", check=False)
    devcluster.wait_state(job, "COMPLETED", timeout=60)


def test_signal_reaches_the_batch_shell_trap(devcluster: LiveCluster) -> None:
    wd = devcluster.workdir()
    job = devcluster.submit(devcluster.hold_script(trap="USR1"), extra_args=["-t", "5"],
                            workdir=wd)
    try:
        devcluster.wait_state(job, "RUNNING")
        devcluster.read_file(wd / f"started.{job}")
        devcluster.slurm_cmd("scancel", "--signal=USR1", "--batch", str(job))
        text = devcluster.read_file(wd / f"trap.{job}", contains="USR1")
        assert text.startswith("USR1 ")
        assert devcluster.job_state(job) == "RUNNING"  # a trapped signal does not end it
    finally:
        devcluster.release(job, wd)
    devcluster.wait_state(job, "COMPLETED")


def test_requeue_puts_a_running_job_back_in_the_queue(devcluster: LiveCluster) -> None:
    wd = devcluster.workdir()
    job = devcluster.submit(devcluster.hold_script(), extra_args=["--requeue", "-t", "5"],
                            workdir=wd)
    try:
        devcluster.wait_state(job, "RUNNING")
        devcluster.slurm_cmd("scontrol", "requeue", str(job))
        info = devcluster.wait_state(job, {"PENDING", "REQUEUED"}, timeout=30)
        assert int(devcluster.scontrol_show_job(job)["Restarts"]) == 1, info
        # Slurm holds a requeued job back for about two minutes (Reason=BeginTime).
        # Make it eligible sooner, but not within the second of the requeue: slurmd
        # refuses a credential issued in the second its job's old one was revoked.
        devcluster.slurm_cmd("scontrol", "update", f"jobid={job}", "starttime=now+3")
        devcluster.wait_state(job, "RUNNING", timeout=60)
        assert int(devcluster.scontrol_show_job(job)["Restarts"]) == 1
    finally:
        devcluster.release(job, wd)
    devcluster.wait_state(job, "COMPLETED", timeout=60)


def test_reservation_can_be_created_and_deleted(devcluster: LiveCluster) -> None:
    name = "sp_test_maint"
    devcluster.slurm_cmd("scontrol", "create", "reservation", f"ReservationName={name}",
                         "StartTime=now+1day", "Duration=240", "Nodes=gpu07", "Flags=MAINT",
                         "Users=root")
    try:
        shown = devcluster.slurm_cmd("scontrol", "show", "reservation", name, "-o").stdout
        rec = parse_scontrol_line(shown.strip())
        assert rec["ReservationName"] == name and rec["Nodes"] == "gpu07", rec
        assert "MAINT" in rec["Flags"] and rec["Duration"] == "04:00:00", rec
    finally:
        devcluster.slurm_cmd("scontrol", "delete", f"ReservationName={name}")
    gone = devcluster.slurm_cmd("scontrol", "show", "reservation", name, check=False)
    assert "not found" in (gone.stdout + gone.stderr)


# ---------------------------------------------------------------- own clusters


def test_prod_job_preempts_a_research_job_by_requeue(devcluster_factory: Factory) -> None:
    cluster: LiveCluster = devcluster_factory(nodes=1, gpus_per_node=2, racks=1)
    wd = cluster.workdir()
    research = cluster.submit(cluster.hold_script(), workdir=wd,
                              extra_args=["-p", "research", "--gres=gpu:2", "--requeue", "-t", "5"])
    cluster.wait_state(research, "RUNNING")
    prod = cluster.submit(cluster.hold_script(), workdir=wd,
                          extra_args=["-p", "prod", "--gres=gpu:2", "-t", "5"])
    try:
        cluster.wait_state(prod, "RUNNING", timeout=60)
        info = cluster.wait_state(research, {"PENDING", "REQUEUED", "PREEMPTED"}, timeout=30)
        again = wait_until(lambda: cluster.scontrol_show_job(research).get("Restarts") == "1"
                           or None, timeout=30, what="research job requeued")
        assert again and info["JobState"] != "RUNNING"
    finally:
        cluster.release(prod, wd)
        cluster.release(research, wd)
    cluster.wait_state(prod, "COMPLETED", timeout=60)


REJECTING_LUA = """\
function slurm_job_submit(job_desc, part_list, submit_uid)
    if job_desc.name == "forbidden" then
        slurm.log_user("devcluster test plugin: the name 'forbidden' is refused")
        return slurm.ERROR
    end
    return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
return slurm.SUCCESS
"""


def test_job_submit_lua_is_installed_and_replaceable(devcluster_factory: Factory,
                                                     tmp_path: Path) -> None:
    lua = tmp_path / "job_submit.lua"
    lua.write_text(REJECTING_LUA)
    cluster: LiveCluster = devcluster_factory(nodes=1, gpus_per_node=1, racks=1,
                                              job_submit_lua=lua)
    assert (cluster.conf_dir / "job_submit.lua").read_text() == REJECTING_LUA
    with pytest.raises(AssertionError, match="the name 'forbidden' is refused"):
        cluster.submit("#!/bin/bash\ntrue\n", extra_args=["-J", "forbidden"])
    ok = cluster.submit("#!/bin/bash\ntrue\n", extra_args=["-J", "allowed"])
    cluster.wait_state(ok, "COMPLETED")
    cluster.install_job_submit_lua(None)  # back to the pass-through plugin
    job = wait_until(lambda: _try_submit(cluster, "forbidden"), timeout=30,
                     what="the pass-through plugin to accept the job")
    cluster.wait_state(job, "COMPLETED")


def _try_submit(cluster: LiveCluster, name: str) -> int | None:
    try:
        return cluster.submit("#!/bin/bash\ntrue\n", extra_args=["-J", name])
    except AssertionError:
        return None


def _processes_referring_to(state_dir: Path) -> dict[int, str]:
    """An independent scan for what down() must leave dead: every live process whose
    command line, working directory, environment or open files mention the state dir
    (a 25.11 slurmstepd blanks its environment but keeps its cwd, STATE/log)."""
    needle = str(state_dir)
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if not _pid_alive(pid):
            continue
        base = Path("/proc") / entry
        try:
            cmd = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(base / "cwd")
            env = (base / "environ").read_bytes().decode(errors="replace")
            fds = [os.readlink(fd) for fd in (base / "fd").iterdir()]
        except OSError:
            continue  # gone meanwhile
        if needle in cmd or cwd.startswith(needle) or needle in env \
                or any(f.startswith(needle) for f in fds):
            found[pid] = cmd.strip()
    return found


def _job_pids(cluster: LiveCluster, job: int) -> dict[int, str]:
    """Live processes of one job, found by its job id in their environment."""
    out = {}
    for pid, _ in _processes_referring_to(cluster.state_dir).items():
        with contextlib.suppress(OSError):
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"SLURM_JOB_ID={job}".encode() in env:
                out[pid] = _proc_cmdline(pid)
    return out


def test_down_leaves_no_process_behind(devcluster_factory: Factory) -> None:
    """With jobs of the ordinary user running (a batch job, an srun step, and a job
    whose slurmstepd died under it), down leaves no process of the cluster alive."""
    cluster: LiveCluster = devcluster_factory(nodes=2, gpus_per_node=2, racks=1)
    wd = cluster.workdir()
    batch = cluster.submit(cluster.hold_script(), extra_args=["-t", "5", "-w", "gpu01"],
                           workdir=wd)
    stepped = cluster.submit(cluster.hold_script(body="srun --overlap -n1 sleep 600 &"),
                             extra_args=["-t", "5", "-w", "gpu02"], workdir=wd)
    orphaned = cluster.submit(cluster.hold_script(), extra_args=["-t", "5", "-w", "gpu02"],
                              workdir=wd)
    for job in (batch, stepped, orphaned):
        cluster.wait_state(job, "RUNNING")
        cluster.read_file(wd / f"started.{job}")
    wait_until(lambda: any("sleep 600" in c for c in _job_pids(cluster, stepped).values())
               or None, timeout=30, what="the srun step's task")
    # A crashed step daemon: its job's processes live on without it.
    orphan_stepd = [p for p in cluster._stepd_pids()
                    if f"[{orphaned}.batch]" in _proc_cmdline(p)]
    assert len(orphan_stepd) == 1, cluster.cluster_processes()
    os.kill(orphan_stepd[0], signal.SIGKILL)
    wait_until(lambda: not _pid_alive(orphan_stepd[0]) or None, timeout=10,
               what="the killed slurmstepd to go")
    job_pids = {job: _job_pids(cluster, job) for job in (batch, stepped, orphaned)}
    assert all(job_pids.values()), job_pids
    users = {Path(f"/proc/{p}").stat().st_uid for pids in job_pids.values()
             for p, cmd in pids.items() if "slurm_script" in cmd}
    if os.geteuid() == 0:
        assert users == {pwd.getpwnam(TEST_USER).pw_uid}, users
    status = cluster.status()
    daemons = [d.pid for d in (status.slurmctld, *status.slurmds) if d is not None]
    assert all(p and _pid_alive(p) for p in daemons)
    steps = cluster._stepd_pids()
    assert len(steps) >= 3, "batch x2 and the srun step have a slurmstepd"
    before = _processes_referring_to(cluster.state_dir)
    assert set(steps) <= set(before), (steps, before)
    assert cluster.status().other_processes >= len(steps) + 3  # + the three batch shells

    stopped = cluster.down()

    assert set(daemons) <= set(stopped) and set(steps) <= set(stopped)
    for job, pids in job_pids.items():
        assert not [p for p in pids if _pid_alive(p)], (job, pids)
    assert not any(_pid_alive(p) for p in before), {p: c for p, c in before.items()
                                                     if _pid_alive(p)}
    assert _processes_referring_to(cluster.state_dir) == {}
    assert cluster.status().stopped and cluster.status().other_processes == 0
    assert cluster.cluster_processes() == {}
    # down is idempotent
    assert cluster.down() == []


def _slurmd_pid(cluster: LiveCluster, node: str) -> int:
    pid = cluster._owned_pid(cluster.slurmd_pid_file(node))
    assert pid is not None, f"slurmd of {node} is not running"
    return pid


def _crash(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _pid_alive(pid) or None, timeout=10, what=f"pid {pid} to die")


def test_up_on_a_half_up_cluster_completes_it_and_keeps_its_jobs(
        devcluster_factory: Factory) -> None:
    cluster: LiveCluster = devcluster_factory(nodes=2, gpus_per_node=1, racks=1)
    wd = cluster.workdir()
    jobs = {node: cluster.submit(cluster.hold_script(),
                                 extra_args=["-t", "10", "-w", node, "--gres=gpu:1"], workdir=wd)
            for node in ("gpu01", "gpu02")}
    for job in jobs.values():
        cluster.wait_state(job, "RUNNING")
        cluster.read_file(wd / f"started.{job}")
    # The batch shells (their `sleep 0.2` children come and go).
    procs = {job: {p for p, cmd in _job_pids(cluster, job).items() if "slurm_script" in cmd}
             for job in jobs.values()}
    assert all(len(pids) == 1 for pids in procs.values()), procs

    def jobs_intact() -> None:
        for job, pids in procs.items():
            assert all(_pid_alive(p) for p in pids), (job, pids)
            assert cluster.job_state(job) == "RUNNING", cluster.scontrol_show_job(job)

    # 1. slurmctld up, the slurmd of gpu02 dead: up starts that slurmd only.
    ctld = cluster.status().slurmctld
    assert ctld is not None and ctld.pid is not None
    old_slurmd1 = _slurmd_pid(cluster, "gpu01")
    _crash(_slurmd_pid(cluster, "gpu02"))
    half = cluster.status()
    assert not half.running and not half.stopped
    again = cluster.up()
    assert again.running
    assert again.slurmctld == ctld and _slurmd_pid(cluster, "gpu01") == old_slurmd1
    jobs_intact()

    # 2. The reverse: slurmctld stopped, both slurmd up: up starts slurmctld, which
    # recovers the running jobs from its saved state. (SIGTERM: a slurmctld killed
    # within a second of a job's start has not saved that start, and on restart
    # Slurm itself ends such a job as an orphan; no dev cluster can prevent that.)
    os.kill(ctld.pid, signal.SIGTERM)
    wait_until(lambda: not _pid_alive(ctld.pid) or None, timeout=30,  # type: ignore[arg-type]
               what="slurmctld to stop")
    assert not cluster.status().running
    again = cluster.up()
    assert again.running and again.slurmctld is not None and again.slurmctld.pid != ctld.pid
    jobs_intact()

    # 3. Half up and another shape asked: refused with the reason; nothing is touched.
    _crash(_slurmd_pid(cluster, "gpu01"))
    other = LiveCluster(cluster.state_dir, nodes=3, gpus_per_node=1, racks=1,
                        slurm_prefix=cluster.slurm_prefix)
    with pytest.raises(DevClusterError,
                       match=r"partly running: .*slurmd\.gpu01 not.*nodes 2 \(asked 3\)"):
        other.up()
    for job, pids in procs.items():
        assert all(_pid_alive(p) for p in pids), (job, pids)
    assert cluster.up().running
    jobs_intact()

    # The jobs were never disturbed: they finish normally once released.
    for job in jobs.values():
        cluster.release(job, wd)
    for job in jobs.values():
        info = cluster.wait_state(job, "COMPLETED", timeout=60)
        assert info["Restarts"] == "0", info


def test_up_refuses_a_slurm_built_for_one_slurmd_per_host(short_tmp: Path) -> None:
    """The real binaries, with a libslurmfull.so that holds the single-slurmd check
    (as a build without --enable-multiple-slurmd does): refused before anything starts."""
    prefix = _fake_prefix(short_tmp / "prefix", single_slurmd=True)
    cluster = DevCluster(short_tmp / "dc", nodes=2, racks=1, slurm_prefix=prefix)
    with pytest.raises(DevClusterError) as err:
        cluster.up()
    message = str(err.value)
    assert "\n" not in message
    assert "built without --enable-multiple-slurmd" in message
    assert "scripts/build-slurm" in message and "libslurmfull.so" in message
    assert not cluster.slurm_conf.exists()  # refused before writing or starting anything
    assert cluster.cluster_processes() == {}


def test_this_slurm_supports_several_slurmd(devcluster: LiveCluster) -> None:
    """The Slurm under test (22.05 from Debian, or a prefix build) passes the check,
    and its controller agrees: `scontrol show config` reports MULTIPLE_SLURMD."""
    ok, lib = multiple_slurmd_support(devcluster.slurm)
    assert ok is True and lib is not None and lib.name.startswith("libslurmfull"), (ok, lib)
    config = devcluster.slurm_cmd("scontrol", "show", "config").stdout
    assert re.search(r"^MULTIPLE_SLURMD\s+=\s+yes$", config, re.M | re.I), config  # Yes in 22.05
    assert not SINGLE_SLURMD_LOG.search(devcluster.ctld_log.read_text(errors="replace"))


def test_slurm_conf_sets_no_age_weight_slurm_would_ignore(devcluster: LiveCluster) -> None:
    """Without slurmdbd Slurm drops PriorityWeightAge (and logs so): the dev cluster
    sets none, so its configuration says what Slurm does."""
    config = devcluster.slurm_cmd("scontrol", "show", "config").stdout
    assert re.search(r"^PriorityWeightAge\s+=\s+0$", config, re.M), config
    assert "can only be used with SlurmDBD" not in devcluster.ctld_log.read_text(
        errors="replace")


def test_up_again_after_down_and_up_is_idempotent(devcluster_factory: Factory) -> None:
    cluster: LiveCluster = devcluster_factory(nodes=2, gpus_per_node=1, racks=2)
    first = cluster.status()
    assert cluster.up().slurmctld == first.slurmctld  # already up: nothing restarted
    cluster.down()
    again = cluster.up()
    assert again.running and again.slurmctld != first.slurmctld
    assert set(again.node_states) == {"gpu01", "gpu02"}
    # The same state dir takes another shape after a down.
    cluster.down()
    bigger = LiveCluster(cluster.state_dir, nodes=3, gpus_per_node=1, racks=1,
                         slurm_prefix=cluster.slurm_prefix)
    reshaped = bigger.up()
    assert set(reshaped.node_states) == {"gpu01", "gpu02", "gpu03"}
    assert len(cluster.status().slurmds) == 3  # status follows the state dir's record
    # Another Slurm cannot take over the saved state: refused, nothing started.
    cluster.down()
    other_prefix = None if cluster.slurm_prefix else Path("/opt/slurm-25.11")
    # A DevCluster: a LiveCluster would take the Slurm under test for None.
    other = DevCluster(cluster.state_dir, nodes=3, gpus_per_node=1, racks=1,
                       slurm_prefix=other_prefix)
    with pytest.raises(DevClusterError, match=r"keeps the saved state of .* cannot take over: "
                                              r"run `up` with (--slurm-prefix \S+|no --slurm)"):
        other.up()
    assert cluster.status().stopped and cluster.cluster_processes() == {}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temp dir (pytest's tmp_path can be too long for slurmd's socket paths)."""
    d = Path(tempfile.mkdtemp(prefix="spdc-t-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_port_in_use_is_a_clear_error(short_tmp: Path) -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        cluster = DevCluster(short_tmp / "dc", nodes=1, racks=1, ctld_port=port)
        with pytest.raises(DevClusterError, match=rf"port.* {port} already in use"):
            cluster.up()


def test_state_dir_of_another_cluster_is_refused(devcluster: LiveCluster) -> None:
    other = DevCluster(devcluster.state_dir, cluster_name="other")
    with pytest.raises(DevClusterError, match="belongs to another cluster"):
        other.up()


def test_foreign_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("not a cluster")
    with pytest.raises(DevClusterError, match="not a dev cluster"):
        DevCluster(tmp_path).up()
    assert (tmp_path / "precious.txt").read_text() == "not a cluster"


def test_missing_slurm_names_the_install_command(short_tmp: Path) -> None:
    with pytest.raises(DevClusterError, match="apt-get install slurm-wlm"):
        DevCluster(short_tmp / "dc", slurm_prefix=short_tmp / "no-slurm-here").up()


def test_too_long_state_dir_is_refused() -> None:
    with pytest.raises(DevClusterError, match="too long"):
        DevCluster("/tmp/" + "x" * 90).up()


def _fake_prefix(root: Path, slurmctld: str | None = None, single_slurmd: bool = False) -> Path:
    """A Slurm 'installed at another prefix': links to Debian's binaries and plugins.

    ``single_slurmd``: lib/slurm is a directory of links whose libslurmfull.so is a
    copy with the read_config.c sentence a build without --enable-multiple-slurmd
    carries appended (the daemons never load it: up refuses before starting them)."""
    (root / "sbin").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "lib").mkdir()
    for name in ("slurmctld", "slurmd", "slurmstepd"):
        (root / "sbin" / name).symlink_to(f"/usr/sbin/{name}")
    for name in ("scontrol", "sinfo", "squeue", "sbatch", "srun", "scancel", "sprio"):
        (root / "bin" / name).symlink_to(f"/usr/bin/{name}")
    plugins = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
    if single_slurmd:
        (root / "lib" / "slurm").mkdir()
        for item in plugins.iterdir():
            if item.name != "libslurmfull.so":
                (root / "lib" / "slurm" / item.name).symlink_to(item)
        lib = root / "lib" / "slurm" / "libslurmfull.so"
        lib.write_bytes((plugins / "libslurmfull.so").read_bytes()
                        + b"\0Duplicated NodeHostName %s in the config file\0")
    else:
        (root / "lib" / "slurm").symlink_to(plugins)
    if slurmctld is not None:
        target = root / "sbin" / "slurmctld"
        target.unlink()
        target.write_text(slurmctld)
        target.chmod(0o755)
    return root


def test_slurm_prefix_is_used(devcluster_factory: Factory, tmp_path: Path) -> None:
    prefix = _fake_prefix(tmp_path / "prefix")
    cluster: LiveCluster = devcluster_factory(nodes=1, gpus_per_node=1, racks=1,
                                              slurm_prefix=prefix)
    conf = cluster.slurm_conf.read_text()
    assert f"PluginDir={prefix.resolve()}/lib/slurm" in conf
    assert cluster.env()["PATH"].startswith(f"{prefix.resolve()}/bin:{prefix.resolve()}/sbin:")
    assert cluster.status().running


def test_daemon_that_fails_to_start_shows_its_output(short_tmp: Path) -> None:
    prefix = _fake_prefix(short_tmp / "prefix",
                          slurmctld="#!/bin/sh\necho 'fatal: deliberately broken' >&2\nexit 1\n")
    cluster = DevCluster(short_tmp / "dc", nodes=1, racks=1, slurm_prefix=prefix)
    try:
        with pytest.raises(DevClusterError, match=r"(?s)slurmctld failed to start.*deliberately"):
            cluster.up()
    finally:
        assert cluster.down() == []
