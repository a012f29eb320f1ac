"""Typed errors of slurmpolicy. The CLI maps them to messages and exit codes
in one place (``slurmpolicy.cli``); nothing else prints or exits."""

from __future__ import annotations


class SlurmPolicyError(Exception):
    """Base of every error slurmpolicy reports to a person."""

    exit_code = 1


class ConfigError(SlurmPolicyError):
    """A settings or fabric file is wrong: names the file, the key and the expectation."""

    exit_code = 2


class InvalidDirective(SlurmPolicyError):
    """A ``#SPOLICY`` line is wrong: names the line, the value and what is allowed."""

    exit_code = 2


class TopologyError(SlurmPolicyError):
    """A fabric source is inconsistent (unknown node, switch cycle, bad line)."""

    exit_code = 2


class SlurmError(SlurmPolicyError):
    """Slurm answered with an error; ``slurm_message`` is Slurm's own words."""

    exit_code = 3

    def __init__(self, message: str, *, slurm_message: str = "", command: str = "") -> None:
        super().__init__(message)
        self.slurm_message = slurm_message
        self.command = command


class SlurmUnavailable(SlurmError):
    """slurmctld does not answer (down, timeout, munge failure): try again later."""

    exit_code = 4


class SlurmParseError(SlurmError):
    """Slurm's output lacks a field we need, or has a shape we do not know."""


class JobGone(SlurmError):
    """The job id is unknown to Slurm (finished and purged, or never existed)."""


class JobAlreadyPending(SlurmError):
    """Requeue of a job that is already pending: the goal is reached."""


class JobAlreadyFinished(SlurmError):
    """Signal or requeue of a job that already completed: the goal is reached."""


class PermissionDenied(SlurmError):
    """Slurm refused: the caller may not do this to that job or object."""


class ReservationError(SlurmError):
    """Slurm refused to create, update or delete a reservation."""


class JournalError(SlurmPolicyError):
    """The journal cannot be read or written (corrupt, read-only, disk full, not
    ours to read): names the file and the fix."""

    exit_code = 7

    def __init__(self, message: str, *, reason: str = "journal") -> None:
        super().__init__(message)
        #: For the metrics: journal_corrupt, journal_readonly, journal_full, journal.
        self.reason = reason


class DevClusterError(SlurmPolicyError):
    """The local development cluster cannot be brought up or down."""

    exit_code = 5


class ReplayStalled(SlurmPolicyError):
    """A replay's remaining jobs can no longer start: nothing runs and nothing
    is due to change (a simulator bug or a job no layout can hold)."""
