"""Fixtures for integration tests on a real local Slurm (the dev cluster).

``devcluster`` (session scope) brings up a ``LiveCluster`` (a DevCluster with
test helpers, see slurmtools.py) in a fresh directory under /tmp with free
ports, so that several test sessions can run side by side on one machine, and
stops it at the end of the session. Default shape: 8 nodes gpu[01-08] x 8 h100,
two racks, partitions prod and research.

    def test_x(devcluster):
        job = devcluster.submit("#!/bin/bash\\necho hi\\n", extra_args=["--gres=gpu:1"])
        devcluster.wait_state(job, "COMPLETED")

Using another job_submit.lua (the real plugin):
- for a whole session: ``SLURMPOLICY_TEST_JOB_SUBMIT_LUA=/path/job_submit.lua pytest ...``;
- for the tests of one directory: override the ``devcluster_options`` fixture
  in that directory's conftest.py::

      @pytest.fixture(scope="session")
      def devcluster_options(devcluster_options):
          return {**devcluster_options, "job_submit_lua": rendered_plugin_path}

  (the session's ``devcluster`` then starts with it; since it is one cluster per
  session, tests that must run with the pass-through plugin should use
  ``devcluster_factory`` for a cluster of their own);
- on the running cluster: ``devcluster.install_job_submit_lua(path)`` copies it
  and runs ``scontrol reconfigure`` (``None`` restores the pass-through one).

``devcluster_factory(**options)`` starts further clusters (own dir and ports),
stopped at the end of the session.

Set ``SLURMPOLICY_KEEP_DEVCLUSTER=1`` to keep the state dirs (logs) after the
session. When Slurm or munge is missing these fixtures raise DevClusterError
with the install hint: the tests fail, they are never skipped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmpolicy.devcluster import DevCluster

from .slurmtools import LiveCluster, job_user, wait_until


def _new_state_dir() -> Path:
    # Not pytest's tmp_path: it is mode 0700 under /tmp/pytest-of-root, and job
    # users must reach the config and the shared dir.
    d = Path(tempfile.mkdtemp(prefix="spdc-", dir="/tmp"))
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="session")
def devcluster_options() -> dict[str, Any]:
    """Keyword arguments for the session's DevCluster; override to change them."""
    options: dict[str, Any] = {}
    lua = os.environ.get("SLURMPOLICY_TEST_JOB_SUBMIT_LUA")
    if lua:
        options["job_submit_lua"] = Path(lua)
    prefix = os.environ.get("SLURMPOLICY_TEST_SLURM_PREFIX")
    if prefix:
        options["slurm_prefix"] = Path(prefix)
    return options


@pytest.fixture(scope="session")
def devcluster_factory() -> Iterator[Callable[..., LiveCluster]]:
    """Start clusters on demand; every one is stopped (and its dir removed) at the end."""
    started: list[LiveCluster] = []

    def make(**options: Any) -> LiveCluster:
        job_user()  # fail early, with the hint, when the test user is missing
        state_dir = options.pop("state_dir", None) or _new_state_dir()
        cluster = LiveCluster(state_dir, **options)
        started.append(cluster)
        cluster.up()
        return cluster

    yield make
    errors = []
    for cluster in reversed(started):
        try:
            cluster.down()
        except Exception as exc:  # keep stopping the others
            errors.append(exc)
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(cluster.state_dir, ignore_errors=True)
    if errors:
        raise errors[0]


@pytest.fixture(scope="session")
def devcluster(
    devcluster_factory: Callable[..., LiveCluster], devcluster_options: dict[str, Any]
) -> LiveCluster:
    """The session's running dev cluster (8 x 8 GPUs unless options say otherwise)."""
    return devcluster_factory(**devcluster_options)


__all__ = ["DevCluster", "LiveCluster"]


@pytest.fixture(autouse=True)
def _quiet_session_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    """Give each test that uses the shared ``devcluster`` an empty cluster.

    Tests share one cluster per session; one that leaves a job or a reservation
    behind (a daemon's preemption reservation, a job still completing) would
    make the next test's jobs wait on someone else's state. Before such a test,
    wait for leftover jobs to end, then delete leftover reservations and cancel
    what still runs: this is the test harness tidying its own cluster, never
    slurmpolicy's doing. What was found is printed, so a leaking test shows up.
    """
    if "devcluster" not in request.fixturenames:
        yield
        return
    cluster: LiveCluster = request.getfixturevalue("devcluster")
    leftovers = cluster.slurm_cmd("squeue", "--noheader", "--format=%i %u %T %j",
                                  check=False).stdout
    reservations = [
        line.split()[0].split("=", 1)[1]
        for line in cluster.slurm_cmd("scontrol", "show", "reservations", "-o",
                                      check=False).stdout.splitlines()
        if line.startswith("ReservationName=")
    ]
    if leftovers.strip() or reservations:
        print(f"\n[devcluster] before {request.node.name}: left by earlier tests: "
              f"jobs {leftovers.split()!r}, reservations {reservations!r}")
        for name in reservations:
            cluster.slurm_cmd("scontrol", "delete", f"reservation={name}", check=False)
        if leftovers.strip():
            cluster.slurm_cmd("scancel", "--full", *[row.split()[0] for row in
                                                     leftovers.strip().splitlines()],
                              check=False)

        def drained() -> bool | None:
            return not cluster.slurm_cmd("squeue", "--noheader", check=False).stdout.strip() or None

        wait_until(drained, timeout=120, what="leftover jobs to leave the session cluster")
    yield
