"""Slurm's error words -> slurmpolicy's typed errors.

The lowest piece of the Slurm layer: the commands runner, the decoders and the
pyslurm adapter all classify Slurm's messages here, so that the same words
give the same error whichever way they reached us.
"""

from __future__ import annotations

import re

from slurmpolicy.errors import (
    JobAlreadyFinished,
    JobAlreadyPending,
    JobGone,
    PermissionDenied,
    SlurmError,
    SlurmUnavailable,
)

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
