"""The daemon's site factors on a real Slurm (issue 13, finding 11): every new job gets
its standing in one cycle, jobs that share a value go in one ``scontrol update
jobid=1,2,3 sitefactor=V``, a cycle whose order holds writes nothing, and a
fair-share change rewrites only the jobs whose order it changed, in one cycle.

A cluster of its own (2 nodes, both taken), twelve pending jobs of three
accounts, ``slurmpolicy daemon run --once`` twice; what Slurm holds is read
back with sprio (through the adapter's snapshot).
"""

from __future__ import annotations

import pytest

from slurmpolicy.slurm.jsoncli import JsonCliClient

from .daemon_support import (
    DaemonRunner,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    daemon_fixture,  # noqa: F401 - the `daemon` fixture
    journal_of,
)
from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm


def test_new_jobs_get_their_site_factors_in_one_cycle_in_batches(
        cluster: LiveCluster, daemon: DaemonRunner) -> None:
    wd = cluster.workdir()
    hold = cluster.hold_script()
    fillers = [cluster.submit(hold, extra_args=["-N1", "--gres=gpu:8", "--account=fill"],
                              workdir=wd) for _ in range(2)]
    for job in fillers:
        cluster.wait_state(job, "RUNNING")
    pending = [cluster.submit(hold, extra_args=["-N1", "--gres=gpu:4", f"--account={acct}"],
                              workdir=wd)
               for acct in ("a", "b", "c") * 4]
    try:
        daemon.once()
        journal = journal_of(daemon)
        steps = [s for s in journal.steps() if s["kind"] == "sitefactor"]
        set_by_audit = {r.job_id: r.detail["site_factor"] for r in journal.read_audit()
                        if r.kind == "SetSiteFactor" and r.outcome == "ok"}
        journal.close()
        assert set(set_by_audit) == set(pending), set_by_audit
        values = set(set_by_audit.values())
        # One call per distinct value, each naming every job that got it.
        assert len(steps) == len(values) < len(pending), steps
        assert sorted(j for s in steps for j in s["params"]["jobs"]) == sorted(pending)
        snap = JsonCliClient(env=cluster.env()).snapshot()
        for job in pending:
            assert snap.job(job).site_factor == set_by_audit[job]  # type: ignore[union-attr]
        # Settled: the next cycle has nothing to write.
        daemon.once()
        journal = journal_of(daemon)
        assert len([s for s in journal.steps() if s["kind"] == "sitefactor"]) == len(steps)
        journal.close()
        # Account a used the cluster for a week: only its jobs move, in one call, and the
        # cycle after writes nothing.
        from slurmpolicy.store import Journal

        state = Journal(daemon.settings.parent / "state")
        usage, at = state.usage()
        state.set_usage({**usage, "a": 7 * 86400.0 * 16}, at or 0.0)
        state.close()
        daemon.once()
        journal = journal_of(daemon)
        after = [s for s in journal.steps() if s["kind"] == "sitefactor"][len(steps):]
        journal.close()
        accounts = {j.job_id: j.account for j in snap.jobs}
        assert len(after) == 1 and {accounts[j] for j in after[0]["params"]["jobs"]} == {"a"}
        assert len(after[0]["params"]["jobs"]) == 4
        daemon.once()
        journal = journal_of(daemon)
        assert len([s for s in journal.steps() if s["kind"] == "sitefactor"]) == len(steps) + 1
        journal.close()
    finally:
        for job in [*fillers, *pending]:
            cluster.release(job, wd)

