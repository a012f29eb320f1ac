"""Running Slurm's commands, below both adapters.

This module owns what the JSON CLI adapter and the pyslurm adapter share:
running ``scontrol``/``sprio``/``squeue`` as argument lists with a timeout,
turning Slurm's exit status and words into the typed errors of
:mod:`slurmpolicy.errors` (:func:`classify`), the Slurm version that answers,
and the validation of values both adapters pass to Slurm (signals, job ids,
reservation fields). Neither adapter imports the other; both import this.
"""

from __future__ import annotations

import os
import re
import signal as _signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmpolicy.errors import JobGone, SlurmError, SlurmUnavailable
from slurmpolicy.hostlist import compress
from slurmpolicy.model import Job
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.classify import classify
from slurmpolicy.slurm.client import ReservationSpec

__all__ = ["SlurmCommands", "classify", "job_id_arg", "parse_signal", "reservation_args",
           "slurm_time"]

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_signal(value: str | int) -> str:
    """A signal name Slurm accepts ("USR1") from "USR1", "SIGUSR1", "usr1" or "10".

    Raises ValueError naming the value and the allowed forms.
    """
    text = str(value).strip().upper()
    try:
        if text.isdigit():
            return _signal.Signals(int(text)).name.removeprefix("SIG")
        name = text if text.startswith("SIG") else "SIG" + text
        return _signal.Signals[name].name.removeprefix("SIG")
    except (KeyError, ValueError):
        raise ValueError(
            f"invalid signal {value!r}; allowed: a signal name (USR1, SIGTERM) or number (10)"
        ) from None


def slurm_time(epoch: float) -> str:
    """Seconds since the epoch -> scontrol's local ``YYYY-MM-DDTHH:MM:SS``.

    scontrol reads times in the local time zone of the host it runs on, which
    for slurmpolicy is the controller's own.
    """
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def job_id_arg(job_id: int) -> str:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"invalid job id {job_id!r}; allowed: a positive integer")
    return str(job_id)




class SlurmCommands:
    """Slurm's client commands, run as argument lists with a timeout."""

    def __init__(self, bin_dir: str | None = None, timeout: float = 30,
                 env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.bin_dir = bin_dir or None
        self.timeout = float(timeout)
        # Extra variables (SLURM_CONF of a devcluster) over our own environment.
        self.env = {**os.environ, **env} if env else None
        self.clock = clock
        self._version: tuple[int, int] | None = None
        self._release: str | None = None

    # ---------------------------------------------------------------- running

    def _argv(self, argv: Sequence[str]) -> list[str]:
        if self.bin_dir:
            return [str(Path(self.bin_dir) / argv[0]), *argv[1:]]
        return list(argv)

    def run(self, argv: Sequence[str], *, error: type[SlurmError] = SlurmError) -> bytes:
        """Run one Slurm command; stdout on success, a typed error otherwise.

        ``error`` is the class for failures no pattern recognises (e.g.
        ReservationError for reservation commands).
        """
        cmd = self._argv(argv)
        shown = " ".join(argv[:4])
        try:
            proc = subprocess.run(
                cmd, capture_output=True, timeout=self.timeout, env=self.env,
                stdin=subprocess.DEVNULL, check=False,
            )
        except FileNotFoundError as exc:
            where = self.bin_dir or "$PATH"
            raise SlurmUnavailable(
                f"{argv[0]} not found in {where}; install Slurm's client commands "
                "(Debian: apt-get install slurm-client) or set [slurm] bin_dir",
                command=shown,
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmUnavailable(
                f"`{shown}` gave no answer within {self.timeout:g} s", command=shown
            ) from exc
        if proc.returncode == 0:
            return proc.stdout
        message = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
        raise classify(message, shown, error)

    def version(self) -> tuple[int, int]:
        """(major, minor) of the Slurm commands, from ``scontrol --version``; cached."""
        if self._version is None:
            out = self.run(["scontrol", "--version"]).decode("utf-8", "replace")
            m = _VERSION.search(out)
            if not m:
                raise SlurmError(f"cannot read Slurm's version from {out.strip()!r}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    @property
    def has_scontrol_json(self) -> bool:
        return self.version() >= (23, 2)

    def version_string(self) -> str:
        """The full release that answers ("25.11.7"), from ``scontrol --version``; cached."""
        if self._release is None:
            out = self.run(["scontrol", "--version"]).decode("utf-8", "replace")
            m = _VERSION.search(out)
            if not m:
                raise SlurmError(f"cannot read Slurm's version from {out.strip()!r}")
            self._release = m.group(0)
        return self._release

    def site_factors(self) -> dict[int, int]:
        """Site factors of pending jobs from sprio; {} where sprio has nothing to say.

        sprio refuses when the priority plugin is not multifactor; a missing
        site factor is not worth failing a snapshot for.
        """
        try:
            out = self.run(["sprio", "-h", "-o", "%i|%S"])
        except SlurmUnavailable:
            raise
        except SlurmError:
            return {}
        return parse.site_factors_from_sprio(out.decode("utf-8", "replace"))

    def cluster_name(self) -> str:
        # 22.05 names the cluster only inside job records; an empty queue
        # needs one more (small, cached by nobody) call.
        out = self.run(["scontrol", "show", "config"]).decode("utf-8", "replace")
        m = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.MULTILINE)
        return m.group(1) if m else ""

    def private_data(self) -> frozenset[str]:
        """Slurm's ``PrivateData`` (``jobs``, ``usage`` ...), lower case; empty when none.

        ``scontrol show config`` answers every user; the audit commands use it
        to show an ordinary user only what squeue would show them.
        """
        out = self.run(["scontrol", "show", "config"]).decode("utf-8", "replace")
        m = re.search(r"^PrivateData\s*=\s*(.*)$", out, re.MULTILINE)
        words = (w.strip().lower() for w in (m.group(1) if m else "").split(","))
        return frozenset(w for w in words if w and w != "none")

    def update_job(self, job_id: int, key: str, value: str) -> None:
        self.run(["scontrol", "update", f"jobid={job_id_arg(job_id)}", f"{key}={value}"])

    # --- a job's whole life (docs/lifecycle.md) ------------------------------------
    def set_excluded_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        self.update_job(job_id, "excnodelist", compress(node_names(nodes)) if nodes else "")

    def drain_node(self, node: str, reason: str) -> None:
        (name,) = node_names([node])
        text = " ".join(reason.split())
        if not text:
            raise ValueError("a drain needs a reason; allowed: any non-blank text")
        self.run(["scontrol", "update", f"nodename={name}", "state=DRAIN", f"reason={text}"])

    def ended_jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        """The ended jobs Slurm still keeps (``MinJobAge``): those of ``job_ids``,
        or all of them when it is None.

        ``squeue`` lists only live jobs on 23.02+ (22.05's ``--json`` lists all):
        ``--states=all`` adds those that ended. Jobs Slurm has forgotten are
        simply absent.
        """
        wanted = None if job_ids is None else {int(j) for j in job_ids}
        if wanted is not None and not wanted:
            return []
        # Not --jobs: squeue fails the whole call when one of them is forgotten.
        raw = self.run(["squeue", "--all", "--json", "--states=all"])
        jobs, _, _, _ = parse.decode_jobs(raw, {}, time.time())
        return [j for j in jobs if j.state.is_finished and (wanted is None or j.job_id in wanted)]

    def job(self, job_id: int) -> Job | None:
        """One job in whatever state Slurm still remembers it; None once it forgot it.

        Finished jobs too (within MinJobAge), which 23.02+'s ``squeue --json``
        no longer lists (22.05's lists them, and ignores ``--jobs``): through
        ``scontrol --json show job`` where there is one.
        """
        if self.has_scontrol_json:
            argv = ["scontrol", "--json", "show", "job", job_id_arg(job_id)]
        else:
            argv = ["squeue", "--json", "--jobs", job_id_arg(job_id)]
        try:
            raw = self.run(argv)
        except JobGone:
            return None
        jobs, _, _, _ = parse.decode_jobs(raw, {}, self.clock())
        return next((j for j in jobs if j.job_id == job_id), None)

    def jobs(self, job_ids: Sequence[int]) -> dict[int, Job | None]:
        """:meth:`job` of each: one ``scontrol --json show job`` per job where there
        is one; else one ``squeue --json`` for them all (22.05's lists every job
        whatever ``--jobs`` says, so one call per job would read the queue N times)."""
        wanted = [int(j) for j in job_ids]
        if self.has_scontrol_json or len(wanted) <= 1:
            return {j: self.job(j) for j in wanted}
        raw = self.run(["squeue", "--all", "--json", "--states=all"])
        listed, _, _, _ = parse.decode_jobs(raw, {}, self.clock())
        by_id: dict[int, Job] = {j.job_id: j for j in listed}
        return {j: by_id.get(j) for j in wanted}

    def set_node_count(self, job_id: int, min_nodes: int, max_nodes: int) -> None:
        """``scontrol update jobid=N numnodes=MIN-MAX`` (an elastic job shrunk)."""
        if not 1 <= int(min_nodes) <= int(max_nodes):
            raise ValueError(f"invalid node range {min_nodes}-{max_nodes}; allowed: "
                             "1 <= min <= max")
        self.update_job(job_id, "numnodes", f"{int(min_nodes)}-{int(max_nodes)}")


_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def node_names(nodes: Sequence[str]) -> list[str]:
    """Node names as Slurm prints them; anything else is refused before any call."""
    names = list(nodes)
    for name in names:
        if not _NODE_NAME.fullmatch(name):
            raise ValueError(f"invalid node name {name!r}; allowed: letters, digits, _ . -")
    return names


def reservation_args(spec: ReservationSpec, create: bool) -> list[str]:
    """``scontrol create/update reservation`` arguments; ValueError naming a bad field."""
    if not spec.name or any(c in spec.name for c in " \t\n=,"):
        raise ValueError(f"invalid reservation name {spec.name!r}; allowed: no spaces, = or ,")
    if create and not (spec.users or spec.accounts):
        raise ValueError(f"reservation {spec.name!r} needs users or accounts (Slurm's rule)")
    if spec.duration_minutes <= 0:
        raise ValueError(f"reservation {spec.name!r}: duration must be > 0 minutes")
    args = [f"reservationname={spec.name}",
            f"starttime={slurm_time(spec.start_time)}",
            f"duration={int(spec.duration_minutes)}"]
    if spec.nodes:
        args.append(f"nodes={compress(spec.nodes)}")
    if spec.users:
        args.append(f"users={','.join(spec.users)}")
    if spec.accounts:
        args.append(f"accounts={','.join(spec.accounts)}")
    if spec.partition:
        args.append(f"partitionname={spec.partition}")
    if spec.flags and create:
        args.append(f"flags={','.join(spec.flags)}")
    return args
