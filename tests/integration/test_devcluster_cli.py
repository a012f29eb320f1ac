"""`slurmpolicy devcluster up/status/env/down` as a person runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def cli(*args: str, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # `up` runs the Slurm under test (SLURMPOLICY_TEST_SLURM_PREFIX, e.g. 25.11);
    # status, env and down read it from the state dir.
    prefix = os.environ.get("SLURMPOLICY_TEST_SLURM_PREFIX")
    base = {k: v for k, v in os.environ.items() if k != "SLURMPOLICY_SLURM_PREFIX"}
    if prefix:
        base["SLURMPOLICY_SLURM_PREFIX"] = prefix
    proc = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", *args],
                          capture_output=True, text=True, timeout=180,
                          env={**base, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"slurmpolicy {' '.join(args)} -> {proc.returncode}\n"
                             f"{proc.stdout}{proc.stderr}")
    return proc


@pytest.fixture
def state_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="spdc-cli-", dir="/tmp"))
    yield d / "dc"
    cli("devcluster", "down", "--state-dir", str(d / "dc"), check=False)
    shutil.rmtree(d, ignore_errors=True)


def test_up_status_env_down(state_dir: Path) -> None:
    sd = str(state_dir)
    out = cli("devcluster", "up", "--state-dir", sd, "--nodes", "3", "--gpus-per-node", "2",
              "--gpu-type", "a100").stdout
    assert "is up: 3 nodes x 2 a100" in out
    status = cli("devcluster", "status", "--state-dir", sd)
    assert "running" in status.stdout
    assert "node gpu03" in status.stdout and "IDLE" in status.stdout
    exports = cli("devcluster", "env", "--state-dir", sd).stdout
    assert f"export SLURM_CONF={sd}/etc/slurm.conf" in exports
    # What a shell gets from eval works with Slurm's own commands.
    shell = subprocess.run(
        ["bash", "-c", 'eval "$1" && sinfo -h -N -o "%N %G"', "_", exports],
        capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split("\n")[0].split() == ["gpu01", "gpu:a100:2"]
    down = cli("devcluster", "down", "--state-dir", sd).stdout
    assert "stopped 4 processes" in down
    after = cli("devcluster", "status", "--state-dir", sd, check=False)
    assert after.returncode == 1 and "stopped" in after.stdout
    again = cli("devcluster", "down", "--state-dir", sd).stdout
    assert "nothing was running" in again


def test_errors_are_one_line_without_traceback(state_dir: Path) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / "notes.txt").write_text("mine")
    proc = cli("devcluster", "up", "--state-dir", str(state_dir), check=False)
    assert proc.returncode == 5
    assert proc.stderr.startswith("slurmpolicy: error: state dir")
    assert "Traceback" not in proc.stderr
    missing = cli("devcluster", "env", "--state-dir", str(state_dir / "nowhere"), check=False)
    assert missing.returncode == 5 and "devcluster up" in missing.stderr
    bad = cli("devcluster", "up", "--state-dir", str(state_dir / "x"), "--nodes", "0",
              check=False)
    assert bad.returncode == 2 and "--nodes" in bad.stderr


def test_a_single_slurmd_build_is_refused_in_one_line(state_dir: Path, tmp_path: Path) -> None:
    """A prefix whose libslurmfull.so carries read_config.c's one-slurmd-per-host
    check (what a build without --enable-multiple-slurmd holds): `up` refuses with
    one line saying what is wrong and how to fix it, and writes nothing."""
    prefix = tmp_path / "slurm-single"
    for d in ("sbin", "bin", "lib/slurm"):
        (prefix / d).mkdir(parents=True)
    for name in ("slurmctld", "slurmd"):
        (prefix / "sbin" / name).symlink_to(f"/usr/sbin/{name}")
    for name in ("scontrol", "sinfo", "squeue", "sbatch"):
        (prefix / "bin" / name).symlink_to(f"/usr/bin/{name}")
    real = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so").read_bytes()
    (prefix / "lib/slurm/libslurmfull.so").write_bytes(
        real + b"\0Duplicated NodeHostName %s in the config file\0")
    proc = cli("devcluster", "up", "--state-dir", str(state_dir), "--nodes", "2",
               "--slurm-prefix", str(prefix), check=False)
    assert proc.returncode == 5, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"slurmpolicy: error: the Slurm at {prefix} was built without "
                               "--enable-multiple-slurmd")
    assert "rebuild it with `./configure --enable-multiple-slurmd` (scripts/build-slurm does)" \
        in lines[0]
    assert not state_dir.exists()
