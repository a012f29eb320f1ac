"""Priority classes: which class a job belongs to, and what that class may do.

Owns the mapping from a job's ``--class`` directive (and its account) to a
configured :class:`~slurmpolicy.settings.PriorityClass`. A job that names an
unknown class, or a class its account may not use, gets the default class;
the planner says so in the job's explanation rather than failing.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmpolicy.jobpolicy import JobPolicy, parse_admin_comment
from slurmpolicy.model import Job
from slurmpolicy.settings import PriorityClass, Settings


@dataclass(frozen=True, slots=True)
class JobClass:
    name: str
    spec: PriorityClass
    #: Why the job did not get the class it asked for ("" when it did).
    note: str = ""

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def weight(self) -> int:
        return self.spec.weight


def resolve_class(settings: Settings, policy: JobPolicy, account: str) -> JobClass:
    """The class a job runs in, from its directive, its account and the settings."""
    asked = policy.job_class
    if asked and asked in settings.classes:
        spec = settings.classes[asked]
        if not spec.accounts or account in spec.accounts:
            return JobClass(asked, spec)
        note = (f"account {account!r} may not use class {asked!r} "
                f"(allowed: {', '.join(spec.accounts)}); using {settings.default_class!r}")
        return JobClass(settings.default_class, settings.classes[settings.default_class], note)
    default = JobClass(settings.default_class, settings.classes[settings.default_class])
    if asked:
        return JobClass(default.name, default.spec,
                        f"unknown class {asked!r}; using {settings.default_class!r}")
    return default


def class_of(settings: Settings, job: Job) -> JobClass:
    """The class the planner gives ``job`` (``Context.job_class``, which keeps the
    answer per record), for a reader without a Context: the daemon asking
    whether a newly waiting job is of a doorbell class between full plans.
    The class is read from the ``--class`` of its admin comment and its account
    alone; the checkpoint protocol the planner learns never changes it."""
    return resolve_class(settings, parse_admin_comment(job.admin_comment), job.account)


def lowest_preemptible_rank(settings: Settings) -> int | None:
    """Rank of the lowest preemptible class, None when no class is preemptible."""
    ranks = [c.rank for c in settings.classes.values() if c.preemptible]
    return min(ranks) if ranks else None
