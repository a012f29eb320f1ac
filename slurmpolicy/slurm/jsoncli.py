"""The JSON CLI adapter: Slurm's own commands, read as JSON, run as argument lists.

This module owns running ``squeue``/``sinfo``/``scontrol``/``scancel``/
``sprio`` and reading them into a Snapshot. Running commands and classifying Slurm's errors
live below it in :mod:`slurmpolicy.slurm.commands` (shared with the pyslurm
adapter); decoding lives in :mod:`slurmpolicy.slurm.parse`.

Reads (one snapshot = five short calls, whatever the queue's size):

===============  =================================  ================================
what             Slurm 23.02 .. 25.11+              Slurm 22.05 (no scontrol --json)
===============  =================================  ================================
jobs             ``squeue --all --json              ``squeue --all --json`` (it lists
                 --states=all`` (the ended ones     ended jobs too)
                 kept aside for the lifecycle)
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

import re
from collections.abc import Sequence

from slurmpolicy.errors import ReservationError, SlurmError, SlurmUnavailable
from slurmpolicy.model import Job, JobState, Snapshot
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.client import ReservationSpec, SignalTarget
from slurmpolicy.slurm.commands import (
    SlurmCommands,
    classify,
    job_id_arg,
    parse_signal,
    reservation_args,
    slurm_time,
)

__all__ = ["JsonCliClient", "classify", "parse_signal", "slurm_time"]


class JsonCliClient(SlurmCommands):
    """The :class:`~slurmpolicy.slurm.client.SlurmClient` over Slurm's commands."""

    name = "jsoncli"
    adapter_note = ""

    # ---------------------------------------------------------------- reads

    #: The ended jobs the last snapshot's listing held (see snapshot), for
    #: the one ended_jobs() call that follows it; None: ask squeue.
    _ended: list[Job] | None = None

    def raw_jobs(self) -> bytes:
        return self.run(["squeue", "--all", "--json"])

    def snapshot(self) -> Snapshot:
        modern = self.has_scontrol_json
        sites = self.site_factors()
        taken_at = self.clock()
        if modern:
            # 23.02+'s squeue lists live jobs only, and the lifecycle asks for
            # the ended ones every cycle: one listing of every state serves
            # both (a second whole-queue squeue a cycle otherwise). The
            # snapshot keeps what squeue lists by default.
            listed, release, cluster, _ = parse.decode_jobs(
                self.run(["squeue", "--all", "--json", "--states=all"]), sites, taken_at)
            jobs = [j for j in listed if _listed_by_default(j)]
            self._ended = [j for j in listed if j.state.is_finished
                           and not _listed_by_default(j)]
        else:
            # 22.05's squeue --json lists every job slurmctld keeps, ended ones
            # too: they answer the lifecycle's ended_jobs() as they are (it
            # used to run the same whole-queue squeue again, every cycle).
            jobs, release, cluster, _ = parse.decode_jobs(self.raw_jobs(), sites, taken_at)
            self._ended = [j for j in jobs if j.state.is_finished]
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
            cluster = self.cluster_name()
        return parse.assemble(taken_at=taken_at, slurm_version=release, cluster_name=cluster,
                              jobs=jobs, nodes=nodes, partitions=partitions,
                              reservations=reservations)

    def ended_jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        """The ended jobs Slurm still keeps (of ``job_ids``, or all): those the
        last snapshot's listing held, once; else through squeue."""
        ended, self._ended = self._ended, None
        if ended is None:
            return super().ended_jobs(job_ids)
        wanted = None if job_ids is None else {int(j) for j in job_ids}
        return [j for j in ended if wanted is None or j.job_id in wanted]

    # ---------------------------------------------------------------- writes

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        # sitefactor, never priority=: an explicit priority freezes the job's
        # priority and stops the multifactor plugin from updating it.
        self.update_job(job_id, "sitefactor", str(int(site_factor)))

    def set_site_factors(self, job_ids: Sequence[int], site_factor: int) -> dict[int, SlurmError]:
        """One ``scontrol update jobid=1,2,3 sitefactor=V`` for many jobs.

        scontrol updates each listed job in turn and names every job it could
        not update on stderr: ``<error> for job N`` (each job's own RPC) or
        ``N: <error>`` (a job array's answer), on 22.05 and 25.11 alike.
        """
        ids = [job_id_arg(j) for j in job_ids]
        if not ids:
            return {}
        try:
            self._update_job_list(ids, "sitefactor", str(int(site_factor)))
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            return per_job_errors(exc, [int(i) for i in ids])
        return {}

    def _update_job_list(self, ids: Sequence[str], key: str, value: str) -> None:
        self.run(["scontrol", "update", f"jobid={','.join(ids)}", f"{key}={value}"])

    def signal(self, job_id: int, signal: str, target: SignalTarget = "batch") -> None:
        if target not in ("batch", "all", "steps"):
            raise ValueError(f"invalid signal target {target!r}; allowed: batch, all, steps")
        name = parse_signal(signal)
        # No scope flag: the job steps only, as Slurm's own --signal without B: does.
        scope = {"batch": ["--batch"], "all": ["--full"], "steps": []}[target]
        # --signal makes scancel signal only; without it scancel would cancel.
        self.run(["scancel", f"--signal={name}", *scope, job_id_arg(job_id)])

    def batch_script(self, job_id: int) -> str:
        """The job's batch script (``scontrol write batch_script ID -``)."""
        return self.run(["scontrol", "write", "batch_script", job_id_arg(job_id), "-"]
                        ).decode("utf-8", "replace")

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self.run(["scontrol", "requeuehold" if hold else "requeue", job_id_arg(job_id)])

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self.update_job(job_id, "admincomment", text)

    def set_comment(self, job_id: int, text: str) -> None:
        self.update_job(job_id, "comment", text)

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self.update_job(job_id, "starttime", "now" if begin is None else slurm_time(begin))

    def set_job_reservation(self, job_id: int, name: str) -> None:
        if any(c in name for c in " \t\n=,"):
            raise ValueError(f"invalid reservation name {name!r}; allowed: no spaces, = or ,")
        # An empty value clears the job's reservation (scontrol's "ReservationName=").
        self.update_job(job_id, "reservationname", name)

    def create_reservation(self, spec: ReservationSpec) -> None:
        self.run(["scontrol", "create", "reservation", *reservation_args(spec, True)],
                 error=ReservationError)

    def update_reservation(self, spec: ReservationSpec) -> None:
        self.run(["scontrol", "update", *reservation_args(spec, False)],
                 error=ReservationError)

    def delete_reservation(self, name: str) -> None:
        self.run(["scontrol", "delete", f"reservationname={name}"], error=ReservationError)


_PER_JOB = re.compile(
    r"^(?:(?P<msg1>.+?) for job (?P<id1>\d+)|(?P<id2>\d+)(?:_\S+)?: (?P<msg2>.+))$")


def per_job_errors(exc: SlurmError, job_ids: Sequence[int]) -> dict[int, SlurmError]:
    """The jobs a failed multi-job ``scontrol update`` names, each with its typed error.

    A failure that names no job (a bad value, permission) is every job's.
    """
    wanted = set(job_ids)
    out: dict[int, SlurmError] = {}
    for line in (exc.slurm_message or str(exc)).splitlines():
        m = _PER_JOB.match(line.strip())
        if not m:
            continue
        job = int(m.group("id1") or m.group("id2"))
        if job in wanted:
            out[job] = classify(m.group("msg1") or m.group("msg2") or "", exc.command)
    if not out:
        return {job: exc for job in job_ids}
    return out


#: What squeue lists when no --states is given (squeue/print.c, _filter_job):
#: pending, running and suspended jobs, and any that is completing or staging out.
_DEFAULT_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED})
_DEFAULT_FLAGS = frozenset({"COMPLETING", "STAGE_OUT"})


def _listed_by_default(job: Job) -> bool:
    return job.state in _DEFAULT_STATES or bool(job.state_flags & _DEFAULT_FLAGS)
