"""The Slurm port: the one interface the rest of slurmpolicy uses to read and
steer Slurm. Adapters (``jsoncli``, ``pyslurm_client``) implement it; the port knows
none of them: :func:`slurmpolicy.slurm.connect.connect` chooses one.

Every method either succeeds or raises one of the typed errors of
:mod:`slurmpolicy.errors`, carrying Slurm's own message. Idempotent goals are
the caller's business: a requeue answered with :class:`JobAlreadyPending`
means the goal is reached, and the executor treats it so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from slurmpolicy.errors import SlurmError
from slurmpolicy.model import Job, Snapshot

#: "batch": the batch shell only; "steps": the job steps only (Slurm's own
#: ``--signal`` without ``B:``); "all": both.
SignalTarget = Literal["batch", "all", "steps"]


@dataclass(frozen=True, slots=True)
class ReservationSpec:
    """What slurmpolicy asks of ``scontrol create/update reservation``."""

    name: str
    nodes: tuple[str, ...]
    #: Seconds since the epoch (UTC).
    start_time: float
    #: Minutes, as Slurm counts a reservation's duration.
    duration_minutes: int
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partition: str = ""
    #: Slurm reservation flags, e.g. ("IGNORE_JOBS",). Slurm needs either users
    #: or accounts on a reservation.
    flags: tuple[str, ...] = ()


@runtime_checkable
class SlurmClient(Protocol):
    """Read the cluster and pull Slurm's levers. Implemented by each adapter."""

    #: "jsoncli" or "pyslurm", for logs and the inspector.
    name: str
    #: One line: which adapter and why (set by ``connect``; "" otherwise).
    adapter_note: str

    def snapshot(self) -> Snapshot:
        """One consistent read: jobs, nodes, partitions, reservations."""
        ...

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        """Set the job's site factor (never its frozen ``priority``)."""
        ...

    def set_site_factors(self, job_ids: Sequence[int], site_factor: int) -> dict[int, SlurmError]:
        """Set one site factor on many jobs, in as few Slurm calls as the adapter can
        (``scontrol update jobid=1,2,3 sitefactor=V`` is one). Returns the jobs Slurm
        refused, each with its error (JobGone for a job that left); raises
        SlurmUnavailable when Slurm did not answer at all."""
        ...

    def signal(self, job_id: int, signal: str, target: SignalTarget = "batch") -> None:
        """Send a signal ("USR1", "SIGTERM", "15"...) to the batch shell or all steps."""
        ...

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        """Requeue a running job, or a finished batch job (``scontrol requeue`` /
        ``requeuehold``)."""
        ...

    def batch_script(self, job_id: int) -> str:
        """The job's batch script, as submitted (read only)."""
        ...

    def job(self, job_id: int) -> Job | None:
        """One job in whatever state Slurm still remembers it, finished ones
        included (``snapshot()`` lists what ``squeue`` lists); None once forgotten."""
        ...

    def jobs(self, job_ids: Sequence[int]) -> dict[int, Job | None]:
        """:meth:`job` of each of a few jobs, in as few Slurm calls as the adapter
        can (the daemon's look at its signalled victims between cycles)."""
        ...

    def set_admin_comment(self, job_id: int, text: str) -> None:
        ...

    def set_comment(self, job_id: int, text: str) -> None:
        ...

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        """Hold a pending job back until ``begin`` (None: release at once)."""
        ...

    def set_excluded_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        """Keep a pending job off ``nodes`` (``ExcNodeList``; empty clears it)."""
        ...

    def drain_node(self, node: str, reason: str) -> None:
        """``scontrol update nodename=N state=DRAIN reason=...``: no new jobs on it."""
        ...

    def ended_jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        """The ended jobs Slurm still keeps (MinJobAge): of ``job_ids``, or all."""
        ...

    def set_node_count(self, job_id: int, min_nodes: int, max_nodes: int) -> None:
        """Set a pending (just requeued) job's node range: an elastic job shrunk."""
        ...

    def set_job_reservation(self, job_id: int, name: str) -> None:
        """Make a pending job use reservation ``name`` ("" clears it):
        ``scontrol update jobid=N reservationname=NAME``."""
        ...

    def create_reservation(self, spec: ReservationSpec) -> None:
        ...

    def update_reservation(self, spec: ReservationSpec) -> None:
        ...

    def delete_reservation(self, name: str) -> None:
        ...
