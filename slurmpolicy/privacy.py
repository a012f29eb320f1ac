"""What an ordinary user may read of the daemon's audit: job ids they cannot see, hidden.

Owns :func:`redact_jobs`. Under Slurm's ``PrivateData=jobs`` a record about a
user's own job may still name another job in its reason (a victim's signal
names the beneficiary it makes room for; a preemption id or a reservation
name carries the beneficiary's id). ``slurmpolicy log``, ``report`` and the
inspector show such a record to that user with every job id Slurm does not
show them replaced by ``(hidden)``. Pure text work: no Slurm, no journal.
"""

from __future__ import annotations

import re
from collections.abc import Collection

HIDDEN = "(hidden)"

#: "job 12", "jobs 12, 14 and 16", "victim 12", "beneficiary 12", "victim(s) [12, 14]".
_WORDS = re.compile(
    r"\b(?P<word>jobs?|job\(s\)|victims?|victim\(s\)|beneficiary|beneficiaries)"
    r"(?P<sep>\s*\[?\s*)"
    r"(?P<ids>\d+(?:_\d+)?(?:\s*(?:,|and)\s*\d+(?:_\d+)?)*)")
#: Our own names that carry a job id: pre-12-1700000000, spolicy_pre_12, spolicy_job_12.
_NAMES = re.compile(r"(?P<head>\bpre-|_pre_|_job_)(?P<id>\d+)")
_ID = re.compile(r"\d+(?:_\d+)?")


def redact_jobs(text: str, visible: Collection[int]) -> str:
    """``text`` with every job id not in ``visible`` replaced by ``(hidden)``."""

    def one(m: re.Match[str]) -> str:
        value = m.group(0)
        return value if int(value.split("_")[0]) in visible else HIDDEN

    def words(m: re.Match[str]) -> str:
        return m.group("word") + m.group("sep") + _ID.sub(one, m.group("ids"))

    def names(m: re.Match[str]) -> str:
        return m.group("head") + (m.group("id") if int(m.group("id")) in visible else HIDDEN)

    return _NAMES.sub(names, _WORDS.sub(words, text))
