"""Whether pyslurm can be used here, decided without risking the caller.

``import pyslurm`` calls Slurm's ``slurm_init()``, and when no readable
slurm.conf is found Slurm's ``fatal()`` ends the whole process with status 1:
no ImportError, nothing a ``try`` can catch. So the first import is tried in a
child process, with the environment the adapter will use (``SLURM_CONF`` of a
dev cluster, say); only when the child imports pyslurm and pyslurm's
major.minor equals the Slurm that answers does this process import it, with
``SLURM_CONF`` put in its own environment first (pyslurm reads it once, at
import). The answer, usable or not and why, is one line that ``connect()``
logs and ``slurmpolicy doctor`` shows.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slurmpolicy.errors import SlurmError
from slurmpolicy.slurm.commands import SlurmCommands

#: How long the child may take to import pyslurm (it loads libslurmfull).
PROBE_TIMEOUT = 30.0

_CHILD = (
    "import pyslurm, sys\n"
    "sys.stdout.write(str(getattr(pyslurm, '__version__', '')))\n"
)


@dataclass(frozen=True, slots=True)
class PyslurmStatus:
    """The outcome of the probe: ``reason`` is None when pyslurm is usable."""

    reason: str | None
    #: pyslurm's own version, when it imported in the child.
    pyslurm_version: str = ""
    #: The Slurm release that answers, when it could be asked.
    slurm_version: str = ""
    slurm_conf: str = ""

    @property
    def usable(self) -> bool:
        return self.reason is None


_cache: dict[tuple[str, str], PyslurmStatus] = {}


def _major_minor(version: str) -> tuple[int, int] | None:
    m = re.search(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def pyslurm_status(bin_dir: str | None = None, env: Mapping[str, str] | None = None,
                   *, refresh: bool = False) -> PyslurmStatus:
    """Probe pyslurm once per (bin_dir, SLURM_CONF); see the module's docstring."""
    conf = (env or {}).get("SLURM_CONF") or os.environ.get("SLURM_CONF", "")
    key = (bin_dir or "", conf)
    if not refresh and key in _cache:
        return _cache[key]
    status = _probe(bin_dir, env, conf)
    _cache[key] = status
    return status


def _probe(bin_dir: str | None, env: Mapping[str, str] | None, conf: str) -> PyslurmStatus:
    if importlib.util.find_spec("pyslurm") is None:
        return PyslurmStatus(
            reason="pyslurm is not installed (install pyslurm built against this Slurm: "
                   "scripts/build-slurm, or pip install 'slurmpolicy[pyslurm]')",
            slurm_conf=conf)
    already = sys.modules.get("pyslurm")
    if already is not None:
        # Imported before (by us, after a good probe): it did not kill us.
        version = str(getattr(already, "__version__", ""))
    else:
        child_env = {**os.environ, **(env or {})}
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True,
                                  env=child_env, timeout=PROBE_TIMEOUT,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return PyslurmStatus(reason=f"importing pyslurm did not finish within "
                                        f"{PROBE_TIMEOUT:g} s (probed in a child process)",
                                 slurm_conf=conf)
        if proc.returncode != 0:
            why = _last_line(proc.stderr.decode("utf-8", "replace"))
            where = f"SLURM_CONF={conf}" if conf else "no SLURM_CONF set"
            return PyslurmStatus(
                reason=f"importing pyslurm fails ({where}): {why}", slurm_conf=conf)
        version = proc.stdout.decode("utf-8", "replace").strip()
    try:
        release = SlurmCommands(bin_dir=bin_dir, env=env, timeout=10).version_string()
    except SlurmError as exc:
        return PyslurmStatus(reason=f"cannot tell which Slurm answers: {exc}",
                             pyslurm_version=version, slurm_conf=conf)
    built_for, answering = _major_minor(version), _major_minor(release)
    if built_for is None or built_for != answering:
        return PyslurmStatus(
            reason=f"pyslurm {version or '?'} is built for another Slurm than the "
                   f"{release} that answers (pyslurm must match Slurm's major.minor)",
            pyslurm_version=version, slurm_version=release, slurm_conf=conf)
    return PyslurmStatus(reason=None, pyslurm_version=version, slurm_version=release,
                         slurm_conf=conf)


#: The slurm.conf pyslurm's Slurm API is initialised with in this process.
_active_conf: str | None = None
_lock = threading.Lock()


def import_pyslurm(env: Mapping[str, str] | None = None) -> Any:
    """pyslurm, initialised for the cluster of ``env``'s SLURM_CONF; after a good probe.

    Raises SlurmError (never lets Slurm's fatal() end the process) when the
    probe says pyslurm cannot be used. Slurm's API holds one configuration
    per process: pyslurm is imported with its automatic ``slurm_init()``
    turned off and initialised here, and re-initialised (``slurm_fini`` then
    ``slurm_init``) when a client of another cluster asks for it, so that two
    clusters (a test session's, an HA pair's) can be read from one process.
    """
    global _active_conf
    status = pyslurm_status(env=env)
    if status.reason is not None:
        raise SlurmError(f"pyslurm adapter unavailable: {status.reason}")
    with _lock:
        first = "pyslurm" not in sys.modules
        if first:
            os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"
        import pyslurm

        if first or _active_conf is None:
            if not first:
                # Imported before we managed it (auto-initialised from this
                # process's SLURM_CONF at the time).
                _active_conf = os.environ.get("SLURM_CONF", "")
            else:
                pyslurm.slurm_init(status.slurm_conf or None)
                _active_conf = status.slurm_conf
        if _active_conf != status.slurm_conf:
            pyslurm.slurm_fini()
            pyslurm.slurm_init(status.slurm_conf or None)
            _active_conf = status.slurm_conf
    return pyslurm
