"""`slurmpolicy devcluster up/status/env/down` as a person runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "slurmpolicy.cli", *args],
                          capture_output=True, text=True, timeout=180)
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
