"""The look at signalled victims between cycles on a real Slurm (daemon.ack_poll).

Cycles here are 30 s apart even while a victim is signalled
(``daemon.interval`` = ``daemon.preemption_poll`` = 30); the daemon reads the
signalled victim every second between them (``daemon.ack_poll`` = 1). The
victim (contrib/examples/train.sh) acknowledges within a second or two of its
signal, and the requeue follows within seconds, not at the next cycle: the
victim does not train on for half a minute on work its requeue throws away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .daemon_support import (
    DaemonRunner,
    assert_no_job_lost,
    cluster_fixture,  # noqa: F401 - the `cluster` fixture
    fill_with_victims,
    journal_of,
    release_requeued,
    restarts,
    submit_beneficiary,
    wait_for,
    write_settings,
)
from .slurmtools import LiveCluster

pytestmark = pytest.mark.slurm

CYCLE = 30


def test_an_ack_is_acted_on_at_the_next_look_not_the_next_cycle(cluster: LiveCluster) -> None:
    home = Path(cluster.state_dir) / "sp"
    home.mkdir(exist_ok=True)
    settings = write_settings(home / "slurmpolicy.toml", home / "state",
                              daemon={"interval": CYCLE, "preemption_poll": CYCLE,
                                      "ack_poll": 1})
    daemon = DaemonRunner(cluster, settings, home / "daemon.log")
    wd = cluster.workdir()
    victims = fill_with_victims(cluster, wd, steps=120)
    beneficiary = submit_beneficiary(cluster, wd, seconds=3)
    try:
        daemon.start()
        # The first cycle opens the preemption and signals a victim.

        def requeued() -> list[Any]:
            try:
                return [r for r in journal_of(daemon).read_audit()
                        if r.kind == "Requeue" and r.job_id in victims]
            except Exception:  # the journal is not written yet
                return []

        (requeue,) = wait_for(requeued, 2 * CYCLE + 30, "the victim's requeue")
        journal = journal_of(daemon)
        (signal,) = [r for r in journal.read_audit(job_id=requeue.job_id)
                     if r.kind == "SignalCheckpoint"]
        assert "acknowledged" in requeue.reason
        # Signal, a second's step and `slurmpolicy ckpt ack`, a look every second:
        # well inside the 30 s to the next cycle, which alone would have seen it.
        assert requeue.at - signal.at < CYCLE / 2, (signal.at, requeue.at)
        cluster.wait_state(beneficiary, ("RUNNING", "COMPLETED"), timeout=90)
        release_requeued(cluster, requeue.job_id)
        cluster.wait_state(beneficiary, "COMPLETED", timeout=60)
        wait_for(lambda: restarts(cluster, requeue.job_id) == 1, 30, "one restart")
        assert_no_job_lost(cluster, [*victims, beneficiary])
    finally:
        daemon.stop()
