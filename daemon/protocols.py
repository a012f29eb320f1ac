"""The job's own ``--signal``, read from its batch script for the planner.

Owns the one read that Slurm's job listings cannot give: the warning signal
of a job's ``#SBATCH --signal`` line (Slurm keeps it, but no ``squeue``,
``scontrol show job`` or pyslurm field shows it, 22.05 to 25.11). Each running
job that may take part in preemption (GPUs, requeue-able, no
``#SPOLICY --checkpoint``, no ``--signal`` on its recorded command line) has
its script read once (``scontrol write batch_script``), at most
``per_cycle`` scripts a cycle; the answer is kept while Slurm knows the job
(a requeue keeps the script). :mod:`slurmpolicy.protocol` turns it into the
checkpoint protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from slurmpolicy.errors import SlurmError, SlurmUnavailable
from slurmpolicy.jobpolicy import parse_admin_comment
from slurmpolicy.model import Job, Snapshot
from slurmpolicy.protocol import script_signal, submit_line_signal

log = logging.getLogger("slurmpolicy.daemon")

#: Scripts read per cycle at most: a daemon starting on a full cluster reads
#: them over a few cycles instead of stalling one.
PER_CYCLE = 25


def wants_script(job: Job, victim: bool = False) -> bool:
    """Whether the job's batch script could tell its checkpoint protocol: a running
    GPU job, or a victim in any state (one that exited after its signal must be
    known for what it is after a daemon restart too)."""
    if not job.requeue:
        return False
    if not victim and not (job.is_running and (job.gpus > 0 or job.gpus_per_node > 0)):
        return False
    if submit_line_signal(job.submit_line):
        return False
    return parse_admin_comment(job.admin_comment).checkpoint is None


#: Victims looked up one by one per cycle at most (see with_victims).
VICTIM_LOOKUPS = 20


def with_victims(snapshot: Snapshot, client: Any, victims: Collection[int],
                 limit: int = VICTIM_LOOKUPS) -> Snapshot:
    """``snapshot`` plus the open victims it does not list, as Slurm still knows them.

    A victim that saved and exited (NeMo-style) is COMPLETED: 23.02+'s
    ``squeue --json`` and pyslurm's listing leave it out, yet it must be seen
    finished (and requeued) rather than taken for gone. Slurm keeps it for
    MinJobAge (300 s by default); each is looked up (``client.job``).
    """
    lookup = getattr(client, "job", None)
    if lookup is None:
        return snapshot
    listed = {j.job_id for j in snapshot.jobs}
    found: list[Job] = []
    for job_id in sorted(set(victims) - listed)[:limit]:
        try:
            job = lookup(job_id)
        except SlurmUnavailable:
            break
        except SlurmError as exc:
            log.debug("victim %d not looked up: %s", job_id, exc)
            continue
        if job is not None:
            found.append(job)
    return replace(snapshot, jobs=(*snapshot.jobs, *found)) if found else snapshot


class BatchSignals:
    """Reads and remembers the ``#SBATCH --signal`` of jobs' batch scripts."""

    def __init__(self, client: Any, per_cycle: int = PER_CYCLE) -> None:
        self.client = client
        self.per_cycle = per_cycle
        #: job id -> its script's --signal value ("" none or unreadable).
        self.known: dict[int, str] = {}

    def enrich(self, snapshot: Snapshot, victims: Collection[int] = ()) -> Snapshot:
        """``snapshot`` with ``batch_signal`` set on the jobs whose script has one;
        ``victims``: ids of open preemptions' victims, read whatever their state."""
        read = getattr(self.client, "batch_script", None)
        budget = self.per_cycle
        jobs: list[Job] = []
        changed = False
        for job in snapshot.jobs:
            value = self.known.get(job.job_id)
            if value is None and read is not None and budget > 0 and \
                    wants_script(job, job.job_id in victims):
                budget -= 1
                try:
                    value = script_signal(read(job.job_id))
                except SlurmUnavailable:
                    read = None  # Slurm went away: the cycle goes on without it
                    value = None
                except SlurmError as exc:
                    log.debug("batch script of job %d not read: %s", job.job_id, exc)
                    value = ""
                if value is not None:
                    self.known[job.job_id] = value
            if value and job.batch_signal != value:
                job = replace(job, batch_signal=value)
                changed = True
            jobs.append(job)
        present = {j.job_id for j in snapshot.jobs}
        for job_id in [k for k in self.known if k not in present]:
            del self.known[job_id]
        return replace(snapshot, jobs=tuple(jobs)) if changed else snapshot
