"""One cluster, two adapters, equal answers.

A zoo of jobs is built on one live cluster (arrays, a heterogeneous job,
every way of asking for GPUs, held, requeued, requeued-held, dependent, in a
reservation, names and comments that are not UTF-8 or carry control
characters), then the JSON CLI adapter and the pyslurm adapter each read a
snapshot and the two are compared field by field: jobs, nodes, partitions,
reservations, the version and the cluster's name. A difference is a bug in
one of the adapters, to be fixed where it arises, never papered over here.

Needs pyslurm built for the running Slurm (25.11: ``scripts/build-slurm``);
marked ``pyslurm`` so that a run on another Slurm can deselect it.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpolicy.model import Snapshot
from slurmpolicy.slurm import pyslurm_client
from slurmpolicy.slurm.client import ReservationSpec
from slurmpolicy.slurm.jsoncli import JsonCliClient

from .slurmtools import TEST_USER, LiveCluster, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.pyslurm]

#: Fields Slurm itself recomputes between two reads a second apart.
MOVING = {"priority"}


@pytest.fixture
def clients(devcluster: LiveCluster) -> tuple[JsonCliClient, Any]:
    env = devcluster.env()
    reason = pyslurm_client.unavailable_reason(env=env)
    if reason is not None:
        pytest.skip(f"pyslurm adapter unusable here ({reason}); build Slurm 25.11 and "
                    "pyslurm with scripts/build-slurm and run with "
                    "SLURMPOLICY_TEST_SLURM_PREFIX=/opt/slurm-25.11")
    return JsonCliClient(env=env, timeout=60), pyslurm_client.PySlurmClient(env=env)


HOLD = """#!/bin/bash
while [ ! -e "$PWD/release.$SLURM_JOB_ID" ] && [ ! -e "$PWD/release.all" ]; do sleep 0.5; done
"""
HET = """#!/bin/bash
#SBATCH --gres=gpu:1
#SBATCH hetjob
#SBATCH --gres=gpu:2
while [ ! -e "$PWD/release.all" ]; do sleep 0.5; done
"""


@pytest.fixture
def zoo(devcluster: LiveCluster) -> Iterator[dict[str, int]]:
    wd = devcluster.workdir()
    resv = f"zoo-{uuid.uuid4().hex[:6]}"
    ids: dict[str, int] = {}

    def sub(key: str, *args: str, script: str = HOLD) -> int:
        ids[key] = devcluster.submit(script, workdir=wd, extra_args=["-t", "10", *args])
        return ids[key]

    devcluster.slurm_cmd("scontrol", "create", f"reservationname={resv}", "nodes=gpu08",
                         "starttime=now", "duration=60", f"users={TEST_USER}")
    try:
        sub("typed", "-N1", "--gres=gpu:h100:2", "--requeue", "-p", "prod")
        sub("untyped", "-N1", "--gres=gpu:1")
        sub("gpus", "--gpus=3")
        sub("gpus_per_node", "-N2", "--gpus-per-node=2")
        sub("array", "--array=0-2", "--gres=gpu:1")
        sub("array_held", "--array=0-3%1", "--hold", "--gres=gpu:1")
        sub("het", script=HET)
        sub("held", "--hold", "--gres=gpu:1", "--comment=ckpt:1796218000")
        sub("requeued", "--requeue", "--gres=gpu:1")
        sub("requeue_held", "--requeue", "--gres=gpu:1")
        sub("resv", f"--reservation={resv}", "--gres=gpu:4")
        for key in ("typed", "untyped", "gpus", "gpus_per_node", "requeued", "requeue_held",
                    "resv"):
            devcluster.wait_state(ids[key], "RUNNING")
        sub("dependent", f"--dependency=afterok:{ids['typed']}", "--gres=gpu:1")
        sub("not_utf8", "--hold", "-J", "bad-\udcff\udcfe-name", "--comment=c-\udcfe\udcff")
        sub("control", "--hold", "-J", "esc\x1b[31mred\x07", "--comment=line\nnext\ttab\x1b]8;;")
        devcluster.slurm_cmd("scontrol", "requeue", str(ids["requeued"]))
        devcluster.slurm_cmd("scontrol", "requeuehold", str(ids["requeue_held"]))
        for key in ("requeued", "requeue_held"):
            job = ids[key]
            wait_until(lambda job=job: devcluster.job_state(job) == "PENDING" or None,
                       timeout=120, what=f"job {job} pending after requeue")
        yield ids
    finally:
        (wd / "release.all").write_text("")
        for job in ids.values():
            devcluster.slurm_cmd("scontrol", "release", str(job), check=False)
        devcluster.slurm_cmd("scontrol", "delete", f"reservationname={resv}", check=False)
        # Leave the session cluster as we found it: every zoo job ends by itself
        # once released (array tasks one at a time, the dependent one after
        # its parent), which takes a while on a loaded machine.
        listed = {str(j) for j in ids.values()}

        def gone() -> bool | None:
            out = devcluster.slurm_cmd("squeue", "--noheader", "--format=%F %A",
                                       check=False).stdout.split()
            return not (listed & set(out)) or None

        wait_until(gone, timeout=300, what="the zoo's jobs to end")


def _fields(obj: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if hasattr(value, "items"):
            value = dict(value)
        out[f.name] = value
    return out


def _differences(a: Snapshot, b: Snapshot, a2: Snapshot) -> list[str]:
    """Fields where ``b`` equals neither ``a`` nor ``a2`` (read just before and after it)."""
    diffs: list[str] = []
    for what in ("slurm_version", "cluster_name"):
        if getattr(a, what) != getattr(b, what):
            diffs.append(f"snapshot.{what}: jsoncli {getattr(a, what)!r} != "
                         f"pyslurm {getattr(b, what)!r}")
    for kind, key in (("jobs", "job_id"), ("nodes", "name"), ("partitions", "name"),
                      ("reservations", "name")):
        left = {getattr(x, key): x for x in getattr(a, kind)}
        right = {getattr(x, key): x for x in getattr(b, kind)}
        after = {getattr(x, key): x for x in getattr(a2, kind)}
        if set(left) != set(right):
            diffs.append(f"{kind}: only jsoncli {sorted(set(left) - set(right))}, "
                         f"only pyslurm {sorted(set(right) - set(left))}")
        for k in sorted(set(left) & set(right)):
            fa, fb = _fields(left[k]), _fields(right[k])
            fa2 = _fields(after[k]) if k in after else fa
            for name, value in fb.items():
                if name in MOVING or name == "taken_at":
                    continue
                if value != fa[name] and value != fa2[name]:
                    diffs.append(f"{kind} {k}.{name}: jsoncli {fa[name]!r} != pyslurm {value!r}")
    return diffs


def test_both_adapters_read_the_same_snapshot(clients, zoo: dict[str, int]) -> None:
    jsoncli, pyslurm = clients
    time.sleep(1)  # let the controller settle the requeues' state words
    a = jsoncli.snapshot()
    b = pyslurm.snapshot()
    a2 = jsoncli.snapshot()
    diffs = _differences(a, b, a2)
    assert not diffs, "\n".join(diffs)
    # And the zoo reads as it was built, so that "equal" is not "equally empty".
    jobs = {j.job_id: j for j in b.jobs}
    assert jobs[zoo["gpus"]].gpus == 3
    assert jobs[zoo["gpus_per_node"]].gpus == 4 and jobs[zoo["gpus_per_node"]].node_count == 2
    assert jobs[zoo["typed"]].gpu_type == "h100" and jobs[zoo["typed"]].gpus == 2
    assert jobs[zoo["untyped"]].gpus == 1
    assert jobs[zoo["requeued"]].restart_count == 1 and jobs[zoo["requeued"]].is_pending
    assert jobs[zoo["requeue_held"]].is_held
    assert jobs[zoo["held"]].is_held and jobs[zoo["held"]].comment == "ckpt:1796218000"
    assert jobs[zoo["dependent"]].dependency.startswith("afterok:")
    assert "\ufffd" in jobs[zoo["not_utf8"]].name
    assert jobs[zoo["control"]].comment.startswith("line\nnext")
    het = [j for j in b.jobs if j.het_job_id == zoo["het"]]
    assert sorted(j.het_job_offset for j in het) == [0, 1]  # type: ignore[type-var]
    arrays = [j for j in b.jobs if j.array_job_id == zoo["array"]]
    assert len(arrays) == 3
    assert b.slurm_version.count(".") == 2  # the full release, e.g. 25.11.7


def test_finished_jobs_are_not_in_either_snapshot(clients, devcluster: LiveCluster,
                                                  tmp_path: Path) -> None:
    jsoncli, pyslurm = clients
    job = devcluster.submit("#!/bin/bash\ntrue\n", workdir=devcluster.workdir())
    devcluster.wait_state(job, "COMPLETED")
    assert jsoncli.snapshot().job(job) is None
    assert pyslurm.snapshot().job(job) is None


def test_ended_jobs_read_the_same(clients, devcluster: LiveCluster) -> None:
    """The lifecycle's ended_jobs(): pyslurm answers from the jobs its last
    snapshot loaded (no squeue of the whole queue a cycle), field by field
    what squeue --states=all says; once, then from Slurm again."""
    jsoncli, pyslurm = clients
    wd = devcluster.workdir()
    done = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd, extra_args=["--gres=gpu:2"])
    failed = devcluster.submit("#!/bin/bash\nexit 3\n", workdir=wd, extra_args=["-N2"])
    # A name pyslurm cannot decode: this one is read through the CLI, by its id.
    odd = devcluster.submit("#!/bin/bash\ntrue\n", workdir=wd,
                            extra_args=["-J", "bad-\udcff\udcfe-name"])
    for job, state in ((done, "COMPLETED"), (failed, "FAILED"), (odd, "COMPLETED")):
        devcluster.wait_state(job, state)
    pyslurm.snapshot()
    assert pyslurm._ended is not None, "the load's ended jobs were not kept"
    assert odd in pyslurm._ended[1]
    mine = {j.job_id: j for j in pyslurm.ended_jobs([done, failed, odd])}
    theirs = {j.job_id: j for j in jsoncli.ended_jobs([done, failed, odd])}
    assert set(mine) == set(theirs) == {done, failed, odd}
    for job_id, job in mine.items():
        fa, fb = _fields(theirs[job_id]), _fields(job)
        diffs = [f"{k}: jsoncli {fa[k]!r} != pyslurm {v!r}" for k, v in fb.items()
                 if k not in MOVING and v != fa[k]]
        assert not diffs, f"job {job_id}: {diffs}"
    assert mine[failed].exit_code == 3 and mine[done].state.value == "COMPLETED"
    # Where they ran (the lifecycle's node health reads a failed job's nodes).
    assert len(mine[failed].nodes) == 2 and sum(mine[done].gpus_on_node.values()) == 2
    # The JSON CLI's snapshot lists every state once (23.02+) and keeps the
    # ended jobs aside: the same answer as its own squeue --states=all.
    assert jsoncli.snapshot().job(done) is None
    kept = {j.job_id: j for j in jsoncli.ended_jobs([done, failed, odd])}
    assert {k: _fields(v) for k, v in kept.items()} == {k: _fields(v) for k, v in theirs.items()}
    # Asked again without a new snapshot: from Slurm, the same jobs.
    assert pyslurm._ended is None and jsoncli._ended is None
    assert {j.job_id for j in pyslurm.ended_jobs([done, failed])} == {done, failed}
    assert "\ufffd" in mine[odd].name


def test_reservation_made_by_either_reads_the_same(clients) -> None:
    jsoncli, pyslurm = clients
    name = f"eq-{uuid.uuid4().hex[:6]}"
    start = float(int(time.time()) + 86400)
    pyslurm.create_reservation(ReservationSpec(name=name, nodes=("gpu07",), start_time=start,
                                               duration_minutes=90, users=(TEST_USER,),
                                               flags=("MAINT",)))
    try:
        a, b = jsoncli.snapshot().reservation(name), pyslurm.snapshot().reservation(name)
        assert a is not None and a == b
    finally:
        jsoncli.delete_reservation(name)
