"""Pools on a real Slurm: the rendered job_submit.lua routes ordinary sbatch
scripts by class, size, GPU type/vendor and memory need (a big job to the
large pool, an AMD job to the AMD nodes, a small one to the general pool or a
MIG slice when whole GPUs are taken), keeps a partition the job names, refuses
what no pool can ever run, and ``slurmpolicy why`` says where and why.

Cluster: gpu[01-02] (2 x h100, partitions hpc and gpu besides prod/research),
amd01 (2 x mi250, partition amd), mig01 (two fake MIG instances 1g.10gb and
two shards, partition mig). Jobs end by release, never scancel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from slurmpolicy import settings as settings_mod
from slurmpolicy.devcluster import NodeGroup
from slurmpolicy.plugin import render

from .slurmtools import LiveCluster, job_user

pytestmark = pytest.mark.slurm

POOLS_TOML = """
[pools.large]
partition = "hpc"
gpu_types = ["h100"]
gpus_per_node = 2
nodes = 2
gpu_memory_gb = 80
min_gpus = 3

[pools.general]
partition = "gpu"
gpu_types = ["h100"]
gpus_per_node = 2
nodes = 2
gpu_memory_gb = 80
max_gpus = 2

[pools.amd]
partition = "amd"
gpu_types = ["mi250"]
gpus_per_node = 2
nodes = 1
gpu_memory_gb = 64

[pools.mig]
partition = "mig"
gpu_types = ["1g.10gb", "shard"]
gpus_per_node = 2
nodes = 1
gpu_memory_gb = 10
slices = true
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, settings_mod.Settings]:
    d = tmp_path_factory.mktemp("pools")
    path = d / "slurmpolicy.toml"
    path.write_text(POOLS_TOML + f'\n[daemon]\nstate_dir = "{d / "state"}"\n'
                    '[slurm]\nadapter = "jsoncli"\n'
                    f'[plugin]\ndoorbell = "{d / "doorbell"}"\n')
    return path, settings_mod.load(path)


@pytest.fixture(scope="module")
def cluster(devcluster_factory: Callable[..., LiveCluster], site, tmp_path_factory) -> LiveCluster:
    lua = tmp_path_factory.mktemp("plugin") / "job_submit.lua"
    lua.write_text(render(site[1]))
    return devcluster_factory(
        nodes=2, gpus_per_node=2, racks=1, job_submit_lua=lua,
        groups=[NodeGroup("amd", gpus=2, gpu_type="mi250", partition="amd",
                          features="mi250,amd"),
                NodeGroup("mig", mig={"1g.10gb": 2}, shards=2, partition="mig",
                          features="a100mig")],
        partitions={"hpc": "gpu[01-02]", "gpu": "gpu[01-02]"})


def sbatch(cluster: LiveCluster, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    wd = cluster.workdir("pools")
    return cluster.slurm_cmd("sbatch", "--parsable", f"--chdir={wd}",
                             f"--output={wd}/slurm-%j.out", *args, user=job_user(),
                             input=script, check=False, timeout=60, cwd=wd)


def job_id(proc: subprocess.CompletedProcess[str]) -> int:
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().split(";")[0])


def why(cluster: LiveCluster, site_path: Path, job: int) -> dict[str, object]:
    env = {**cluster.env(), "PATH": cluster.env()["PATH"]}
    proc = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", "--config", str(site_path),
                           "why", str(job), "--json"], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def test_jobs_are_routed_by_size_vendor_and_slices(cluster: LiveCluster, site) -> None:
    site_path, _ = site
    wd = cluster.workdir("pools")
    hold = cluster.hold_script()
    started: list[int] = []
    try:
        big = sbatch(cluster, hold, "--nodes=2", "--gres=gpu:2", "--hold")
        assert "slurmpolicy: routed to pool large (partition hpc)" in big.stderr, big.stderr
        big_id = job_id(big)
        assert cluster.scontrol_show_job(big_id)["Partition"] == "hpc"
        data = why(cluster, site_path, big_id)
        assert any(str(n).startswith("pool: routed to pool large (partition hpc)")
                   for n in data["notes"]), data["notes"]  # type: ignore[union-attr]
        cluster.slurm_cmd("scontrol", "release", str(big_id))
        cluster.wait_state(big_id, "RUNNING")
        started.append(big_id)

        # The whole GPUs are all taken: a small job may take a MIG slice.
        small = sbatch(cluster, hold, "--gres=gpu:1")
        assert "or a GPU slice in pool mig (partition mig) when whole GPUs are scarce" \
            in small.stderr, small.stderr
        small_id = job_id(small)
        started.append(small_id)
        info = cluster.wait_state(small_id, "RUNNING")
        assert info["Partition"] == "mig" and info["NodeList"] == "mig01", info

        # The vendor a job asks for, in its gres or as #SPOLICY --gpu-type=amd.
        amd = sbatch(cluster, "#!/bin/bash\n#SPOLICY --gpu-type=amd\n" + hold.split("\n", 1)[1],
                     "--gres=gpu:1")
        amd_id = job_id(amd)
        started.append(amd_id)
        info = cluster.wait_state(amd_id, "RUNNING")
        assert info["Partition"] == "amd" and info["NodeList"] == "amd01", info
        typed = job_id(sbatch(cluster, hold, "--gres=gpu:mi250:1", "--hold"))
        assert cluster.scontrol_show_job(typed)["Partition"] == "amd"
        started.append(typed)
        cluster.slurm_cmd("scontrol", "release", str(typed))
    finally:
        for j in started:
            cluster.release(j, wd)
    for j in started:
        cluster.wait_state(j, "COMPLETED", timeout=60)


def test_named_partitions_are_kept_and_impossible_jobs_refused(cluster: LiveCluster) -> None:
    hold = cluster.hold_script()
    kept = job_id(sbatch(cluster, hold, "--partition=research", "--gres=gpu:1", "--hold"))
    assert cluster.scontrol_show_job(kept)["Partition"] == "research"
    never = sbatch(cluster, hold, "--nodes=3", "--gres=gpu:2")
    assert never.returncode != 0
    assert "slurmpolicy: no pool can ever run this job (large: the job asks 3 nodes; " \
           "the pool has 2" in never.stderr, never.stderr
    wrong = sbatch(cluster, hold, "--partition=amd", "--gres=gpu:h100:1")
    assert wrong.returncode != 0
    assert ("partition amd can never run this job: pool amd (partition amd): it has no h100 "
            "GPUs (only mi250); allowed: pool general (partition gpu)") in wrong.stderr
    cluster.slurm_cmd("scontrol", "release", str(kept))
    cluster.wait_state(kept, "RUNNING")
    cluster.release(kept, cluster.workdir("pools"))
    cluster.wait_state(kept, "COMPLETED", timeout=60)


def test_a_shard_job_goes_to_the_slices(cluster: LiveCluster) -> None:
    gres = cluster.node_table()["mig01"]["Gres"]
    assert "gpu:1g.10gb:2" in gres and "shard:" in gres, gres
    proc = sbatch(cluster, cluster.hold_script(), "--gres=shard:1")
    assert "slurmpolicy: routed to pool mig (partition mig)" in proc.stderr, proc.stderr
    job = job_id(proc)
    info = cluster.wait_state(job, "RUNNING")
    assert info["Partition"] == "mig" and info["NodeList"] == "mig01", info
    cluster.release(job, cluster.workdir("pools"))
    cluster.wait_state(job, "COMPLETED", timeout=60)
