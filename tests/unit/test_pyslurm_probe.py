"""Deciding whether pyslurm is usable without risking the caller.

``import pyslurm`` with no readable slurm.conf ends the process (Slurm's
fatal(), exit status 1). These tests put a stand-in ``pyslurm`` package on the
path that does exactly that, and check that the probe runs the first import
in a child, reports Slurm's own last words, that ``connect("auto")`` falls
back to the JSON CLI with that reason, and that this process is still here.
The real pyslurm is probed on a real Slurm 25.11 in the integration tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurmpolicy.errors import SlurmUnavailable
from slurmpolicy.slurm import probe
from slurmpolicy.slurm.connect import connect

FATAL = '''import os, sys
sys.stderr.write("pyslurm: fatal: Could not establish a configuration source\\n")
sys.stderr.flush()
os._exit(1)
'''


@pytest.fixture
def fatal_pyslurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "pyslurm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(FATAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyslurm", raising=False)
    probe._cache.clear()
    yield tmp_path
    probe._cache.clear()


def test_a_fatal_import_is_a_reason_not_an_exit(fatal_pyslurm: Path) -> None:
    status = probe.pyslurm_status(env={"SLURM_CONF": "/nonexistent/slurm.conf"})
    assert not status.usable
    assert "importing pyslurm fails (SLURM_CONF=/nonexistent/slurm.conf)" in str(status.reason)
    assert "Could not establish a configuration source" in str(status.reason)
    assert "pyslurm" not in sys.modules  # never imported here


def test_auto_falls_back_with_a_one_line_reason(fatal_pyslurm: Path) -> None:
    client = connect("auto", env={"SLURM_CONF": "/nonexistent/slurm.conf"}, timeout=5)
    assert client.name == "jsoncli"
    assert client.adapter_note.startswith("jsoncli: pyslurm not used: importing pyslurm fails")
    assert "\n" not in client.adapter_note
    with pytest.raises(SlurmUnavailable, match="pyslurm adapter asked for, but importing"):
        connect("pyslurm", env={"SLURM_CONF": "/nonexistent/slurm.conf"})


def test_import_refuses_rather_than_dies(fatal_pyslurm: Path) -> None:
    from slurmpolicy.errors import SlurmError

    with pytest.raises(SlurmError, match="pyslurm adapter unavailable"):
        probe.import_pyslurm({"SLURM_CONF": "/nonexistent/slurm.conf"})


def test_missing_pyslurm_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyslurm" else object())
    probe._cache.clear()
    status = probe.pyslurm_status(env={"SLURM_CONF": "/x"}, refresh=True)
    probe._cache.clear()
    assert status.reason is not None and "not installed" in status.reason
    assert "scripts/build-slurm" in status.reason


def test_unknown_adapter_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="allowed: auto, jsoncli, pyslurm"):
        connect("slurmrestd")
