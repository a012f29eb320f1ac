"""The JSON CLI adapter: Slurm's own commands, read as JSON, run as argument lists.

This module owns running ``squeue``/``sinfo``/``scontrol``/``scancel``/
``sprio`` and turning their exit status and messages into the typed errors of
:mod:`slurmpolicy.errors`. Decoding lives in :mod:`slurmpolicy.slurm.parse`.

Reads (one snapshot = five short calls, whatever the queue's size):

===============  =================================  ================================
what             Slurm 23.02 .. 25.11+              Slurm 22.05 (no scontrol --json)
===============  =================================  ================================
jobs             ``squeue --all --json``            same
nodes            ``scontrol show nodes --json``     ``sinfo --all --json`` (flat nodes)
partitions       ``scontrol show partitions -o``    same
reservations     ``scontrol show reservations      ``scontrol show reservations -o``
                 --json``
site factors     ``sprio -h -o %i|%S``              same
===============  =================================  ================================

Partitions are read in the one-line text form on every release because
25.11's JSON leaves out ``PreemptMode`` and ``Default``, which policy needs;
partition definitions are written by admins, so the text form is safe.
Nothing a user writes (job names, comments) is ever read from a text form:
Slurm accepts ``|`` and newlines there.

Every command is an argument list (never a shell) with a timeout; user
strings travel as single argv items (``comment=<text>``). slurmpolicy never
cancels: the only ``scancel`` it runs carries ``--signal``.
"""

from __future__ import annotations

import os
import re
import signal as _signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmpolicy.errors import (
    JobAlreadyFinished,
    JobAlreadyPending,
    JobGone,
    PermissionDenied,
    ReservationError,
    SlurmError,
    SlurmUnavailable,
)
from slurmpolicy.hostlist import compress
from slurmpolicy.model import Snapshot
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.client import ReservationSpec, SignalTarget

# Slurm's words -> our errors. Checked in order; the first match wins.
_UNAVAILABLE = re.compile(
    r"unable to contact slurm controller|connection refused|socket timed out|"
    r"zero bytes were transmitted|munge|could not establish a configuration source|"
    r"unable to process configuration file|communication connection failure|"
    r"slurm_receive_msg|slurmctld.*(not responding|down)|unable to establish",
    re.IGNORECASE,
)
_JOB_GONE = re.compile(r"invalid job id|invalid jobid|job not found|no such job",
                       re.IGNORECASE)
_FINISHED = re.compile(r"already completing or completed|job has already finished|"
                       r"job is no longer pending execution and already completed|"
                       r"already finished", re.IGNORECASE)
_PENDING = re.compile(r"job is pending execution|already pending|is pending", re.IGNORECASE)
_DENIED = re.compile(r"access/permission denied|permission denied|not authorized|"
                     r"user not authorized|access denied", re.IGNORECASE)

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


def _job_id(job_id: int) -> str:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"invalid job id {job_id!r}; allowed: a positive integer")
    return str(job_id)


class JsonCliClient:
    """The :class:`~slurmpolicy.slurm.client.SlurmClient` over Slurm's commands."""

    name = "jsoncli"

    def __init__(self, bin_dir: str | None = None, timeout: float = 30,
                 env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.bin_dir = bin_dir or None
        self.timeout = float(timeout)
        # Extra variables (SLURM_CONF of a devcluster) over our own environment.
        self.env = {**os.environ, **env} if env else None
        self.clock = clock
        self._version: tuple[int, int] | None = None

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

    # ---------------------------------------------------------------- reads

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

    def raw_jobs(self) -> bytes:
        return self.run(["squeue", "--all", "--json"])

    def snapshot(self) -> Snapshot:
        modern = self.has_scontrol_json
        sites = self.site_factors()
        taken_at = self.clock()
        jobs, release, cluster, _ = parse.decode_jobs(self.raw_jobs(), sites, taken_at)
        if modern:
            nodes, _ = parse.decode_nodes(self.run(["scontrol", "show", "nodes", "--json"]))
            reservations = parse.decode_reservations(
                self.run(["scontrol", "show", "reservations", "--json"]))
        else:
            nodes, _ = parse.decode_nodes(self.run(["sinfo", "--all", "--json"]))
            reservations = parse.reservations_from_text(
                self.run(["scontrol", "show", "reservations", "-o"]).decode("utf-8", "replace"))
        partitions = parse.partitions_from_text(
            self.run(["scontrol", "show", "partitions", "-o"]).decode("utf-8", "replace"))
        if not cluster:
            cluster = self._cluster_name()
        return parse.assemble(taken_at=taken_at, slurm_version=release, cluster_name=cluster,
                              jobs=jobs, nodes=nodes, partitions=partitions,
                              reservations=reservations)

    def _cluster_name(self) -> str:
        # 22.05 names the cluster only inside job records; an empty queue
        # needs one more (small, cached by nobody) call.
        out = self.run(["scontrol", "show", "config"]).decode("utf-8", "replace")
        m = re.search(r"^ClusterName\s*=\s*(\S+)", out, re.MULTILINE)
        return m.group(1) if m else ""

    # ---------------------------------------------------------------- writes

    def _update_job(self, job_id: int, key: str, value: str) -> None:
        self.run(["scontrol", "update", f"jobid={_job_id(job_id)}", f"{key}={value}"])

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        # sitefactor, never priority=: an explicit priority freezes the job's
        # priority and stops the multifactor plugin from updating it.
        self._update_job(job_id, "sitefactor", str(int(site_factor)))

    def signal(self, job_id: int, signal: str, target: SignalTarget = "batch") -> None:
        if target not in ("batch", "all", "steps"):
            raise ValueError(f"invalid signal target {target!r}; allowed: batch, all, steps")
        name = parse_signal(signal)
        # No scope flag: the job steps only, as Slurm's own --signal without B: does.
        scope = {"batch": ["--batch"], "all": ["--full"], "steps": []}[target]
        # --signal makes scancel signal only; without it scancel would cancel.
        self.run(["scancel", f"--signal={name}", *scope, _job_id(job_id)])

    def batch_script(self, job_id: int) -> str:
        """The job's batch script (``scontrol write batch_script ID -``)."""
        return self.run(["scontrol", "write", "batch_script", _job_id(job_id), "-"]
                        ).decode("utf-8", "replace")

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self.run(["scontrol", "requeuehold" if hold else "requeue", _job_id(job_id)])

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self._update_job(job_id, "admincomment", text)

    def set_comment(self, job_id: int, text: str) -> None:
        self._update_job(job_id, "comment", text)

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self._update_job(job_id, "starttime", "now" if begin is None else slurm_time(begin))

    @staticmethod
    def _reservation_args(spec: ReservationSpec, create: bool) -> list[str]:
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

    def create_reservation(self, spec: ReservationSpec) -> None:
        self.run(["scontrol", "create", "reservation", *self._reservation_args(spec, True)],
                 error=ReservationError)

    def update_reservation(self, spec: ReservationSpec) -> None:
        self.run(["scontrol", "update", *self._reservation_args(spec, False)],
                 error=ReservationError)

    def delete_reservation(self, name: str) -> None:
        self.run(["scontrol", "delete", f"reservationname={name}"], error=ReservationError)


def classify(message: str, command: str, default: type[SlurmError] = SlurmError) -> SlurmError:
    """Slurm's error text -> the typed error, keeping Slurm's own words."""
    text = message or "(no message)"
    kind: type[SlurmError]
    if _UNAVAILABLE.search(text):
        kind = SlurmUnavailable
    elif _JOB_GONE.search(text):
        kind = JobGone
    elif _FINISHED.search(text):
        kind = JobAlreadyFinished
    elif _DENIED.search(text):
        kind = PermissionDenied
    elif _PENDING.search(text):
        kind = JobAlreadyPending
    else:
        kind = default
    first = text.splitlines()[-1] if text else text
    return kind(f"`{command}` failed: {first}", slurm_message=text, command=command)
