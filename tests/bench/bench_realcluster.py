"""Benchmark on a real Slurm: the same small mixed workload, three ways.

On a dev cluster (4 nodes x 8 fake GPUs, 2 racks = 2 leaves) it runs, three
times, the same workload of training-like jobs that count steps (1 s each),
checkpoint every ``CKPT_EVERY`` steps, and record how far they got:

- a research job on 2 nodes (16 GPUs), two experimental 8-GPU jobs (one saves
  in 5 s, one in 45 s: longer than the 30 s grace), filling the cluster;
- then two production 8-GPU jobs that need the GPUs back.

1. ``slurm-requeue``: Slurm alone, preempt/partition_prio, PreemptMode=REQUEUE,
   production in the ``prod`` partition (PriorityTier=10); jobs only do
   periodic checkpoints.
2. ``slurm-grace``: the same with ``GraceTime=30`` on ``research``; jobs save
   on SIGTERM and exit.
3. ``slurmpolicy``: everything in ``research`` (no Slurm preemption), classes
   in the admin_comment, the slurmpolicy daemon running (interval 2 s); jobs
   save on USR1 and acknowledge with ``slurmpolicy ckpt ack``.

Prints, per mode: GPU-seconds of work lost to preemption (steps reached but
not in the checkpoint a job restarted from), wait of the production jobs,
GPU allocation while the workload ran, and whether each multi-node run stayed
within one leaf. A benchmark, not a test: it prints figures and asserts
nothing about them. Run as root (like the integration tests):

    .venv/bin/python tests/bench/bench_realcluster.py \
        [--modes slurm-requeue,slurm-grace,slurmpolicy] [--timeout S]

Requeued jobs get Slurm's ~2 minute BeginTime; the script makes them eligible
at once (``scontrol update starttime=now``) in every mode, as the tests do,
to keep the run to a few minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.integration.daemon_support import (  # noqa: E402
    DaemonRunner,
    after_header,
    job_side_cli,
    write_settings,
)
from tests.integration.slurmtools import LiveCluster, job_user  # noqa: E402

pytestmark = pytest.mark.bench

JOB = r"""#!/bin/bash
#SBATCH --requeue
#SBATCH --open-mode=append
D=${D:?}; STEPS=${STEPS:-60}; SAVE=${SAVE:-5}; CKPT_EVERY=${CKPT_EVERY:-20}
ON=${ON:-none}          # which signal makes the job save: USR1, TERM or none
ID=$SLURM_JOB_ID
step=0
[ -s "$D/ckpt.$ID" ] && step=$(cat "$D/ckpt.$ID")
if [ -s "$D/reached.$ID" ]; then
    echo "lost $(( $(cat "$D/reached.$ID") - step ))" >> "$D/lost.$ID"
fi
echo "run $(date +%s) $SLURM_JOB_NODELIST" >> "$D/runs.$ID"
save() {
    local at=$step; sleep "$SAVE"
    echo "$at" > "$D/ckpt.$ID.tmp"; mv "$D/ckpt.$ID.tmp" "$D/ckpt.$ID"
}
if [ "$ON" = USR1 ]; then
    trap 'save; slurmpolicy ckpt ack >/dev/null 2>&1 || true' USR1
elif [ "$ON" = TERM ]; then
    trap 'save; exit 0' TERM
fi
while [ "$step" -lt "$STEPS" ]; do
    sleep 1 & wait $!
    step=$((step + 1))
    echo "$step" > "$D/reached.$ID"
    if [ $((step % CKPT_EVERY)) -eq 0 ]; then
        echo "$step" > "$D/ckpt.$ID"
        [ "$ON" = USR1 ] && { slurmpolicy ckpt ack >/dev/null 2>&1 || true; }
    fi
done
echo "$step" > "$D/ckpt.$ID"
echo "done $(date +%s)" >> "$D/runs.$ID"
"""

#: (name, class, nodes, steps, save seconds, delay before submission)
WORKLOAD = [
    ("multi", "research", 2, 60, 5, 0.0),
    ("exp-fast-save", "experimental", 1, 70, 5, 1.0),
    ("exp-slow-save", "experimental", 1, 70, 45, 1.0),
    ("prod-a", "production", 1, 15, 5, 25.0),
    ("prod-b", "production", 1, 15, 5, 25.0),
]
ACCOUNT = {"production": "prodteam", "research": "lab", "experimental": "lab"}


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _epoch(stamp: str) -> float | None:
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def alloc_gpus(cluster: LiveCluster, gpus_of: dict[int, int]) -> int:
    """GPUs held by our running jobs (22.05's node records carry no GPU TRES
    without accounting, so count from the jobs)."""
    return sum(g for job_id, g in gpus_of.items()
               if cluster.scontrol_show_job(job_id).get("JobState") == "RUNNING")


def run_mode(mode: str, timeout: float) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="spbench-", dir="/tmp"))
    os.chmod(state, 0o755)
    cluster = LiveCluster(state, nodes=4, gpus_per_node=8, racks=2,
                          cluster_name=f"bench_{mode.replace('-', '_')}")
    cluster.up()
    daemon: DaemonRunner | None = None
    try:
        bindir = job_side_cli(cluster)
        work = cluster.workdir("bench")
        leaf = {n: i for i, rack in enumerate(cluster.rack_nodes) for n in rack}
        if mode == "slurm-grace":
            cluster.slurm_cmd("scontrol", "update", "PartitionName=research", "GraceTime=30")
        if mode == "slurmpolicy":
            home = state / "sp"
            home.mkdir()
            settings = write_settings(home / "slurmpolicy.toml", home / "state",
                                      daemon={"interval": 2},
                                      preemption={"min_runtime": 0, "default_grace": 20})
            daemon = DaemonRunner(cluster, settings, home / "daemon.log")
            daemon.start()
        on = {"slurm-requeue": "none", "slurm-grace": "TERM", "slurmpolicy": "USR1"}[mode]
        ids: dict[str, int] = {}
        gpus_of: dict[int, int] = {}
        started = time.monotonic()
        t0 = time.time()
        samples: list[int] = []
        for name, cls, nodes, steps, save, delay in WORKLOAD:
            while time.monotonic() - started < delay:
                samples.append(alloc_gpus(cluster, gpus_of))
                time.sleep(1)
            script = after_header(JOB, f"export PATH={bindir}:$PATH D={work} STEPS={steps} "
                                       f"SAVE={save} ON={on} CKPT_EVERY=20")
            partition = "prod" if cls == "production" and mode != "slurmpolicy" else "research"
            args = ["-p", partition, f"-N{nodes}", "--gres=gpu:8", "--time=30",
                    f"--account={ACCOUNT[cls]}", f"--job-name={name}"]
            job_id = cluster.submit(script, extra_args=args, workdir=work)
            ids[name] = job_id
            gpus_of[job_id] = nodes * 8
            if mode == "slurmpolicy":
                ckpt = "" if cls == "production" else \
                    f" ckpt=signal:USR1,grace={int(save * 1.25) + 5}"
                cluster.slurm_cmd("scontrol", "update", f"jobid={job_id}",
                                  f"admincomment=spolicy:v1 class={cls}{ckpt}")
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ids) and time.monotonic() < deadline:
            samples.append(alloc_gpus(cluster, gpus_of))
            for job_id in ids.values():
                if job_id in done:
                    continue
                info = cluster.scontrol_show_job(job_id)
                state_word = info.get("JobState", "")
                if state_word in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "") :
                    done.add(job_id)
                elif state_word == "PENDING" and "BeginTime" in info.get("Reason", ""):
                    cluster.slurm_cmd("scontrol", "update", f"jobid={job_id}",
                                      "starttime=now", check=False)
            time.sleep(1)
        elapsed = time.time() - t0
        result: dict[str, Any] = {"mode": mode, "elapsed_s": round(elapsed),
                                  "finished": len(done), "jobs": len(ids)}
        lost = 0.0
        preempted = 0
        for job_id in ids.values():
            lost_file = work / f"lost.{job_id}"
            if lost_file.exists():
                for line in lost_file.read_text().split("\n"):
                    if line.startswith("lost "):
                        preempted += 1
                        lost += max(0.0, _num(line.split()[1]) or 0.0) * gpus_of[job_id]
        result["preemptions"] = preempted
        # Work a job never did: it ended (e.g. exited after saving on SIGTERM and
        # Slurm took that for the end) before reaching its steps.
        unfinished = 0.0
        for name, _cls, _nodes, steps, _save, _delay in WORKLOAD:
            reached = work / f"reached.{ids[name]}"
            got = int(_num(reached.read_text().strip()) or 0) if reached.exists() else 0
            if got < steps:
                unfinished += (steps - got) * gpus_of[ids[name]]
        result["work_never_done_gpu_seconds"] = unfinished
        result["work_lost_gpu_seconds"] = lost
        waits = []
        for name, job_id in ids.items():
            if not name.startswith("prod"):
                continue
            info = cluster.scontrol_show_job(job_id)
            sub, st = _epoch(info.get("SubmitTime", "")), _epoch(info.get("StartTime", ""))
            if sub is not None and st is not None:
                waits.append(st - sub)
        result["production_wait_s"] = waits
        total = 32
        result["gpu_allocation"] = (sum(samples) / (len(samples) * total)) if samples else 0.0
        in_leaf = []
        for name, job_id in ids.items():
            runs = work / f"runs.{job_id}"
            if not name.startswith("multi") or not runs.exists():
                continue
            for line in runs.read_text().splitlines():
                parts = line.split()
                if parts and parts[0] == "run" and len(parts) > 2:
                    hosts = expand(parts[2])
                    in_leaf.append(len({leaf.get(h, -1) for h in hosts}) == 1)
        result["multi_node_runs_in_one_leaf"] = f"{sum(in_leaf)}/{len(in_leaf)}"
        return result
    finally:
        if daemon is not None:
            daemon.stop()
        cluster.down()
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(state, ignore_errors=True)


def expand(text: str) -> list[str]:
    from slurmpolicy.hostlist import expand as hl

    return list(hl(text))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="slurmpolicy vs Slurm alone on a dev cluster")
    ap.add_argument("--modes", default="slurm-requeue,slurm-grace,slurmpolicy")
    ap.add_argument("--timeout", type=float, default=240.0, help="per mode, seconds")
    args = ap.parse_args(argv)
    job_user()
    results = []
    for mode in args.modes.split(","):
        print(f"--- {mode}", flush=True)
        r = run_mode(mode, args.timeout)
        results.append(r)
        print(r, flush=True)
    print()
    print(f"{'mode':<15}{'lost GPU-s':>11}{'undone GPU-s':>13}{'preempt':>9}"
          f"{'prod wait s':>14}{'GPU alloc':>11}"
          f"{'multi in 1 leaf':>17}{'done':>7}{'elapsed':>9}")
    for r in results:
        waits = "/".join(f"{w:.0f}" for w in r["production_wait_s"]) or "-"
        print(f"{r['mode']:<15}{r['work_lost_gpu_seconds']:>11.0f}"
              f"{r['work_never_done_gpu_seconds']:>13.0f}{r['preemptions']:>9}"
              f"{waits:>14}{r['gpu_allocation']:>11.0%}{r['multi_node_runs_in_one_leaf']:>17}"
              f"{str(r['finished']) + '/' + str(r['jobs']):>7}{r['elapsed_s']:>8}s")
    return 0


def test_bench_realcluster() -> None:  # pragma: no cover - run with -s to see the figures
    main([])


if __name__ == "__main__":
    sys.exit(main())
