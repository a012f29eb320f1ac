"""Preemption that cannot leak, stall or be fooled, on a real Slurm (issue 13).

Each test has a 2-node x 8-GPU cluster of its own and drives
`slurmpolicy daemon run`:

- freed nodes reach the beneficiary and no other job of its user;
- a job Slurm may not requeue is never a victim, and `why` says so;
- a beneficiary cancelled during the grace ends the preemption, and the next
  preemption of the same victim signals it afresh (no key is reused); a held
  beneficiary ends it too, and gets its reservation taken off; a victim made
  non-requeueable in flight ends it without a requeue retried every cycle;
- a reservation that carries our prefix but that the daemon did not make is
  never touched, and an empty prefix is refused;
- two daemons with different state directories: one acts, the other stands
  by and takes over when the first stops renewing the lease.
"""

from __future__ import annotations

import json
import signal
import time
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
    write_settings,
)
from .slurmtools import LiveCluster, job_user

pytestmark = pytest.mark.slurm

EXPERIMENTAL = "spolicy:v1 class=experimental"
PRODUCTION = "spolicy:v1 class=production"


def _preemptions(runner: DaemonRunner) -> list[dict[str, object]]:
    try:
        return journal_of(runner).preemptions()
    except Exception:  # the daemon may be creating it
        return []


def _why(runner: DaemonRunner, job_id: int) -> dict[str, object]:
    return json.loads(runner.cli("why", str(job_id), "--json").stdout)


def test_freed_nodes_reach_the_beneficiary_and_no_other_job_of_its_user(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=40)
    # The same user's smaller job fits the node a victim frees, and Slurm would
    # take it first (an admin gave it the highest priority).
    small = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:4",
                   admin_comment=EXPERIMENTAL, workdir=wd)
    cluster.slurm_cmd("scontrol", "update", f"jobid={small}", "priority=2000000000")
    beneficiary = submit_beneficiary(cluster, wd, seconds=15)
    daemon.start()

    pre = wait_for(lambda: _preemptions(daemon), 60, "a preemption")[0]
    name = str(pre["reservation"])
    # The reservation is named on the beneficiary alone, and is not MAGNETIC.
    wait_for(lambda: cluster.scontrol_show_job(beneficiary).get("Reservation") == name, 30,
             "the beneficiary naming its reservation")
    resv = cluster.slurm_cmd("scontrol", "show", "reservation", name).stdout
    assert "MAGNETIC" not in resv
    assert cluster.scontrol_show_job(small).get("Reservation") in (None, "", "(null)")
    # While it waits, `why` promises no more than the held nodes give.
    exp = _why(daemon, beneficiary)
    if exp["estimated_start"] is not None:
        assert exp["estimate_basis"] == "the victims' checkpoint deadlines"

    info = cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=120)
    assert info["NodeList"] in pre["nodes"]  # type: ignore[operator]
    # The freed node went to the beneficiary: the other job of its user still waits.
    assert cluster.job_state(small) == "PENDING"
    # Once the beneficiary is done, the reservation goes and the small job runs.
    cluster.wait_state(beneficiary, "COMPLETED", timeout=90)
    cluster.wait_state(small, "RUNNING", timeout=90)
    started = cluster.scontrol_show_job(small)["StartTime"]
    assert started >= info["StartTime"]
    wait_for(lambda: cluster.slurm_cmd("scontrol", "show", "reservation", name,
                                       check=False).returncode != 0, 60,
             "the preemption's reservation deleted")
    cluster.release(small, wd)
    victim = next(v for v in victims if restarts(cluster, v) == 1)
    release_requeued(cluster, victim)
    assert_no_job_lost(cluster, [*victims, small, beneficiary])


def test_a_job_slurm_may_not_requeue_is_never_a_victim(cluster: LiveCluster,
                                                        daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    requeueable = submit(cluster, train_script(wd, 40), "-p", "research", "-N1",
                         "--gres=gpu:8", "--requeue", admin_comment=victim_comment(20),
                         workdir=wd)
    norq = submit(cluster, train_script(wd, 40), "-p", "research", "-N1", "--gres=gpu:8",
                  "--no-requeue", admin_comment=victim_comment(20), workdir=wd)
    for job_id in (requeueable, norq):
        cluster.wait_state(job_id, "RUNNING")
    # It has just checkpointed: it would lose the least work, so the planner
    # would pick it first if it ignored Slurm's requeue flag.
    stamp = int(time.time())
    cluster.slurm_cmd("scontrol", "update", f"jobid={norq}", f"comment=ckpt:{stamp}")
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    daemon.start()
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=120)
    pre = _preemptions(daemon)[0]
    chosen = [v["job_id"] for v in journal_of(daemon).victims_of(str(pre["preemption_id"]))]
    assert chosen == [requeueable]
    assert journal_of(daemon).read_audit(job_id=norq) == []
    exp = _why(daemon, norq)
    assert exp["preemption_text"] == ("not a preemption candidate: Slurm may not requeue it "
                                      "(--no-requeue, Requeue=0 or JobRequeue=0)")
    records = assert_no_job_lost(cluster, [requeueable, norq, beneficiary])
    assert records[norq]["Restarts"] == "0"
    release_requeued(cluster, requeueable)


IGNORING = """#!/bin/bash
trap 'echo USR1 >> "$PWD/trap.$SLURM_JOB_ID"' USR1
echo "run ${SLURM_RESTART_COUNT:-0}" >> "$PWD/runs.$SLURM_JOB_ID"
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi
for i in $(seq 1 900); do sleep 0.2; done
"""


def test_beneficiary_cancelled_during_the_grace_ends_it_and_no_key_is_reused(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victim = submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                    admin_comment=victim_comment(grace=15), workdir=wd)
    keeper = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment=PRODUCTION, workdir=wd)
    for job_id in (victim, keeper):
        cluster.wait_state(job_id, "RUNNING")
    first = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    trap = wd / f"trap.{victim}"
    wait_for(lambda: trap.exists(), 60, "the first checkpoint signal")
    cluster.slurm_cmd("scancel", str(first), user=job_user())
    pre = wait_for(lambda: [p for p in _preemptions(daemon) if p["state"] == "aborted"], 30,
                   "the first preemption aborted")[0]
    assert str(pre["reason"]).endswith(f"beneficiary {first} left the queue")
    wait_for(lambda: cluster.slurm_cmd("scontrol", "show", "reservation", str(pre["reservation"]),
                                       check=False).returncode != 0, 30,
             "the aborted preemption's reservation deleted")
    assert restarts(cluster, victim) == 0

    second = submit_beneficiary(cluster, wd, seconds=2)
    wait_for(lambda: len(trap.read_text().split()) >= 2, 60, "the second checkpoint signal")
    cluster.wait_state(second, ("RUNNING", "COMPLETED"), timeout=90)
    signals = [r for r in journal_of(daemon).read_audit(job_id=victim)
               if r.kind == "SignalCheckpoint"]
    assert [r.outcome for r in signals] == ["ok", "ok"]
    assert len({r.detail.get("deadline") for r in signals}) == 2
    # The second preemption has its own reservation name: none is reused.
    names = {p["reservation"] for p in _preemptions(daemon)}
    assert len(names) == 2
    release_requeued(cluster, victim)
    cluster.wait_state(victim, "COMPLETED", timeout=120)
    cluster.release(keeper, wd)
    assert_no_job_lost(cluster, [victim, keeper, second])


def test_a_reservation_with_our_prefix_that_we_did_not_make_is_never_touched(
        cluster: LiveCluster, daemon: DaemonRunner, tmp_path: Path) -> None:
    # An admin's maintenance window that happens to carry our prefix.
    cluster.slurm_cmd("scontrol", "create", "reservation", "reservationname=spolicy_job_9",
                      "starttime=now+1day", "duration=60", "nodes=gpu02", "users=root",
                      "flags=MAINT")
    daemon.once()
    daemon.once()
    out = cluster.slurm_cmd("scontrol", "show", "reservation", "spolicy_job_9").stdout
    assert "ReservationName=spolicy_job_9" in out
    assert not [r for r in journal_of(daemon).read_audit() if "spolicy_job_9" in r.reason]
    # An empty prefix (every name would be "ours") does not pass `config check`.
    bad = write_settings(tmp_path / "bad.toml", tmp_path / "state",
                         reservations={"name_prefix": ""})
    proc = daemon.cli("config", "check", str(bad), check=False)
    assert proc.returncode != 0
    assert "$.reservations.name_prefix" in proc.stdout + proc.stderr


def test_two_daemons_on_one_cluster_one_acts_the_other_takes_over(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    home = Path(cluster.state_dir)
    write_settings(daemon.settings, daemon.settings.parent / "state",
                   daemon={"lease_ttl": 6})
    (home / "sp2").mkdir()
    other = DaemonRunner(cluster, write_settings(home / "sp2" / "slurmpolicy.toml",
                                                 home / "sp2" / "state",
                                                 daemon={"lease_ttl": 6}),
                         home / "sp2" / "daemon.log")
    busy = [submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                   admin_comment=PRODUCTION, workdir=wd) for _ in range(2)]
    for job_id in busy:
        cluster.wait_state(job_id, "RUNNING")
    waiting = submit(cluster, "#!/bin/bash\ntrue\n", "-p", "research", "-N1", "--gres=gpu:8",
                     workdir=wd)

    def acted_on(runner: DaemonRunner, job_id: int) -> bool:
        try:
            return any(r.kind == "SetSiteFactor"
                       for r in journal_of(runner).read_audit(job_id=job_id))
        except Exception:
            return False

    daemon.start()
    wait_for(lambda: acted_on(daemon, waiting), 60, "the first daemon acting")
    try:
        other.start()
        wait_for(lambda: "standing by: lease spolicy_lease held by daemon token" in other.logs(),
                 60, "the second daemon standing by")
        assert not acted_on(other, waiting)
        status = json.loads(other.cli("daemon", "status", "--json").stdout)
        assert status["lease"].startswith("standing by: lease spolicy_lease held by daemon")
        lease = cluster.slurm_cmd("scontrol", "show", "reservation", "spolicy_lease").stdout
        assert "ReservationName=spolicy_lease" in lease
        # The active daemon dies without a word; the standby takes over.
        daemon.kill(signal.SIGKILL)
        late = submit(cluster, "#!/bin/bash\ntrue\n", "-p", "research", "-N1", "--gres=gpu:8",
                      workdir=wd)
        wait_for(lambda: acted_on(other, late), 60, "the standby taking over")
        assert "taking over" in other.logs()
        status = json.loads(other.cli("daemon", "status", "--json").stdout)
        assert status["lease"].startswith("active: lease spolicy_lease held")
        # The first comes back: it stands by now.
        daemon.start()
        wait_for(lambda: "standing by: lease spolicy_lease" in daemon.logs(), 60,
                 "the restarted daemon standing by")
    finally:
        other.stop()
    for job_id in busy:
        cluster.release(job_id, wd)
    assert_no_job_lost(cluster, [*busy])


def test_a_held_beneficiary_ends_it_and_gets_its_reservation_taken_off(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victim = submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                    admin_comment=victim_comment(grace=30), workdir=wd)
    keeper = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment=PRODUCTION, workdir=wd)
    for job_id in (victim, keeper):
        cluster.wait_state(job_id, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    wait_for(lambda: (wd / f"trap.{victim}").exists(), 60, "the checkpoint signal")
    name = str(_preemptions(daemon)[0]["reservation"])
    assert cluster.scontrol_show_job(beneficiary).get("Reservation") == name
    cluster.slurm_cmd("scontrol", "hold", str(beneficiary))
    pre = wait_for(lambda: [p for p in _preemptions(daemon) if p["state"] == "aborted"], 30,
                   "the preemption aborted")[0]
    assert str(pre["reason"]).endswith(f"beneficiary {beneficiary} is held")
    # The reservation is taken off the waiting job first, then deleted.
    wait_for(lambda: cluster.slurm_cmd("scontrol", "show", "reservation", name,
                                       check=False).returncode != 0, 30,
             "the reservation deleted")
    assert cluster.scontrol_show_job(beneficiary).get("Reservation") in (None, "", "(null)")
    assert restarts(cluster, victim) == 0
    audit = [r.kind for r in journal_of(daemon).read_audit(job_id=beneficiary)]
    assert audit.count("FinishPreemption") == 1
    cluster.release(keeper, wd)
    assert_no_job_lost(cluster, [victim, keeper, beneficiary])


def test_a_victim_made_non_requeueable_in_flight_ends_the_preemption(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    victim = submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                    admin_comment=victim_comment(grace=8), workdir=wd)
    keeper = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment=PRODUCTION, workdir=wd)
    for job_id in (victim, keeper):
        cluster.wait_state(job_id, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    wait_for(lambda: (wd / f"trap.{victim}").exists(), 60, "the checkpoint signal")
    cluster.slurm_cmd("scontrol", "update", f"jobid={victim}", "requeue=0")
    pre = wait_for(lambda: [p for p in _preemptions(daemon) if p["state"] == "aborted"], 60,
                   "the preemption aborted")[0]
    assert str(pre["reason"]).endswith(f"victim {victim} may no longer be requeued (Requeue=0)")
    # It is not retried: no requeue was ever asked of Slurm, and the beneficiary
    # waits without a reservation (it is no longer a candidate's only hope).
    assert not [s for s in journal_of(daemon).steps() if s["kind"] == "requeue"]
    assert restarts(cluster, victim) == 0
    assert cluster.scontrol_show_job(beneficiary).get("Reservation") in (None, "", "(null)")
    cluster.release(keeper, wd)
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    assert_no_job_lost(cluster, [victim, keeper, beneficiary])


def test_fabric_and_settings_broken_mid_flight_keep_the_last_good_ones(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    fabric = daemon.settings.parent / "fabric.toml"
    fabric.write_text('[[rack]]\nname = "r1"\nhosts = "gpu[01-02]"\nnvlink = false\n'
                      'leaf = "leaf1"\n')
    write_settings(daemon.settings, daemon.settings.parent / "state",
                   fabric={"fabric_file": str(fabric)})
    victim = submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                    admin_comment=victim_comment(grace=10), workdir=wd)
    keeper = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment=PRODUCTION, workdir=wd)
    for job_id in (victim, keeper):
        cluster.wait_state(job_id, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    wait_for(lambda: (wd / f"trap.{victim}").exists(), 60, "the checkpoint signal")
    # A typo in the fabric file and in the settings while the victim's grace runs.
    fabric.write_text('[[rack]\nname = "r1"\n')
    daemon.settings.write_text("[daemon\n")
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)
    # The preemption goes on: the victim is requeued at its deadline, the
    # beneficiary starts on the held node.
    cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
    assert restarts(cluster, victim) == 1
    logs = daemon.logs()
    assert "were refused; keeping the last good fabric" in logs
    assert "settings not reloaded, keeping the last good ones" in logs
    cluster.release(keeper, wd)
    release_requeued(cluster, victim)
    assert_no_job_lost(cluster, [victim, keeper, beneficiary])


def test_a_beneficiary_grown_beyond_the_nodes_held_for_it(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    """Resizing the beneficiary beyond its held nodes. Slurm 22.05 refuses it
    while the job names its reservation ("Node count specification invalid"),
    and the preemption goes on; Slurm 25.11 accepts it, and the preemption
    ends, with the reason, before any victim is requeued."""
    wd = cluster.workdir()
    victim = submit(cluster, IGNORING, "-p", "research", "-N1", "--gres=gpu:8", "--requeue",
                    admin_comment=victim_comment(grace=8), workdir=wd)
    keeper = submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                    admin_comment=PRODUCTION, workdir=wd)
    for job_id in (victim, keeper):
        cluster.wait_state(job_id, "RUNNING")
    beneficiary = submit_beneficiary(cluster, wd, seconds=2)
    daemon.start()
    wait_for(lambda: (wd / f"trap.{victim}").exists(), 60, "the checkpoint signal")
    grow = cluster.slurm_cmd("scontrol", "update", f"jobid={beneficiary}", "numtasks=2",
                             "numnodes=2", check=False)
    if grow.returncode != 0:
        assert "Node count specification invalid" in grow.stderr + grow.stdout
        cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
        assert [p["state"] for p in _preemptions(daemon)] != ["aborted"]
        cluster.release(keeper, wd)
        release_requeued(cluster, victim)
    else:
        pre = wait_for(lambda: [p for p in _preemptions(daemon) if p["state"] == "aborted"],
                       30, "the preemption aborted")[0]
        assert str(pre["reason"]).endswith(f"beneficiary {beneficiary} was resized: it asks "
                                           "for 2 node(s), 1 are held for it")
        assert restarts(cluster, victim) == 0
        cluster.release(keeper, wd)
    assert_no_job_lost(cluster, [victim, keeper, beneficiary])


def test_a_reused_job_id_on_a_rebuilt_cluster_starts_a_clean_history(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    """Issue 13, finding 10: the journal outlives a cluster; job 1 of the rebuilt
    cluster is shown only its own decisions, not those of the old job 1."""
    wd = cluster.workdir()
    busy = [submit(cluster, cluster.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                   admin_comment=PRODUCTION, workdir=wd) for _ in range(2)]
    for job_id in busy:
        cluster.wait_state(job_id, "RUNNING")
    old = submit(cluster, "#!/bin/bash\ntrue\n", "-p", "research", "-N1", "--gres=gpu:8",
                 admin_comment=EXPERIMENTAL, workdir=wd)
    daemon.once()
    (before,) = journal_of(daemon).read_audit(job_id=old)
    assert before.kind == "SetSiteFactor" and "experimental" in before.reason
    for job_id in busy:
        cluster.release(job_id, wd)
    cluster.down()

    import shutil
    import tempfile

    state = Path(tempfile.mkdtemp(prefix="spdd-", dir="/tmp"))
    state.chmod(0o755)
    rebuilt = LiveCluster(state, nodes=2, gpus_per_node=8, racks=1)
    rebuilt.up()
    try:
        again = DaemonRunner(rebuilt, daemon.settings, daemon.log)
        wd2 = rebuilt.workdir()
        # Slurm keeps submit times in whole seconds: a job submitted in the very
        # second the old job's record was written cannot be told from it by
        # time. A rebuilt cluster takes far longer than that anywhere but here
        # (25.11 comes back in under a second), so start the new ids a second on.
        time.sleep(max(0.0, before.at + 1.0 - time.time()))
        ids = [submit(rebuilt, rebuilt.hold_script(), "-p", "research", "-N1", "--gres=gpu:8",
                      admin_comment=PRODUCTION, workdir=wd2) for _ in range(2)]
        while max(ids) < old:  # job ids start again from the beginning
            ids.append(submit(rebuilt, rebuilt.hold_script(), "-p", "research", "-N1",
                              "--gres=gpu:8", admin_comment=PRODUCTION, workdir=wd2))
        assert old in ids
        again.once()
        after = journal_of(again).read_audit(job_id=old)
        assert before.id not in {r.id for r in after}
        assert all("experimental" not in r.reason for r in after)
        shown = again.cli("log", "--job", str(old)).stdout
        assert "experimental" not in shown
        for job_id in ids:
            rebuilt.release(job_id, wd2)
    finally:
        rebuilt.down()
        shutil.rmtree(state, ignore_errors=True)
