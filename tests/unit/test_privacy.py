"""Job ids a user may not see are hidden in the audit's words (issue 13, finding 6)."""

import pytest

from slurmpolicy.privacy import redact_jobs


@pytest.mark.parametrize(("text", "shown"), [
    ("checkpoint signal USR1 to victim 101 for job 1; requeue after its ack or in 2m",
     "checkpoint signal USR1 to victim 101 for job (hidden); requeue after its ack or in 2m"),
    ("preemption pre-1-1796220000 aborted: beneficiary 1 left the queue",
     "preemption pre-(hidden)-1796220000 aborted: beneficiary (hidden) left the queue"),
    ("reservation spolicy_pre_1 and spolicy_job_101 on gpu[01-02]",
     "reservation spolicy_pre_(hidden) and spolicy_job_101 on gpu[01-02]"),
    ("victim(s) [101, 5] already in another preemption; jobs 7, 8 and 101",
     "victim(s) [101, (hidden)] already in another preemption; jobs (hidden), (hidden) and 101"),
    ("8 GPUs free on 2 nodes; waited 3600s; job 101_3 held", "8 GPUs free on 2 nodes; waited"
     " 3600s; job 101_3 held"),
])
def test_only_the_job_ids_of_others_are_hidden(text: str, shown: str) -> None:
    assert redact_jobs(text, {101}) == shown
