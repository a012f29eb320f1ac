"""Benchmark: a daemon cycle at scale on a real Slurm (issue 13, finding 11).

On a dev cluster (16 nodes x 8 fake GPUs by default) every node is taken by
a running job, then 2,000 new jobs are submitted (three accounts, four
shapes): all pend. The daemon (in this process, with the real jsoncli
adapter, its real journal) then runs cycle after cycle, and the script
prints per cycle: its time, the Slurm calls it made (reads and writes), the
site-factor writes and how many jobs they named. Then it changes fair share
(account ``a`` is charged a week of the whole cluster) and prints the same.

Targets (issue 13): every new job settled in one cycle (the second cycle
writes nothing), a steady cycle under 0.5 s, a fair-share change settled in
one cycle with no more than 50 Slurm calls. A benchmark, not a test: it
prints figures and asserts nothing about them. Run as root:

    .venv/bin/python tests/bench/bench_cycle.py [--nodes 16] [--jobs 2000]
    SLURMPOLICY_TEST_SLURM_PREFIX=/opt/slurm-25.11 .venv/bin/python tests/bench/bench_cycle.py \\
        [--adapter pyslurm]   # with pyslurm 25.11 importable (scripts/build-slurm's wheel)

"Slurm calls" counts the commands run (reads and writes); with pyslurm the
job, node and reservation reads are in-process calls, not counted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from slurmpolicy import settings as settings_mod  # noqa: E402
from slurmpolicy.daemon.loop import Daemon  # noqa: E402
from slurmpolicy.slurm.jsoncli import JsonCliClient  # noqa: E402
from tests.benchfigures import record  # noqa: E402
from tests.integration.slurmtools import LiveCluster  # noqa: E402

pytestmark = pytest.mark.bench

ACCOUNTS = ("a", "b", "c")
SHAPES = (("-N1", "--gres=gpu:8"), ("-N1", "--gres=gpu:4"), ("-N2", "--gres=gpu:8"),
          ("-N1", "--gres=gpu:1"))


class CountingClient(JsonCliClient):
    """The jsoncli adapter, counting every Slurm command it runs."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.commands = 0

    def run(self, argv: Sequence[str], **kw: Any) -> bytes:
        self.commands += 1
        return super().run(argv, **kw)


class Timed:
    """Any adapter, timing its reads and writes; Slurm commands counted by ``counter``."""

    def __init__(self, inner: Any, counter: CountingClient) -> None:
        self.inner, self.counter, self.seconds = inner, counter, 0.0
        self.name = inner.name

    @property
    def commands(self) -> int:
        return self.counter.commands

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, fn: Any, *args: Any) -> Any:
        started = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.seconds += time.monotonic() - started

    def snapshot(self) -> Any:
        return self._timed(self.inner.snapshot)

    def set_site_factors(self, job_ids: Sequence[int], value: int) -> Any:
        return self._timed(self.inner.set_site_factors, job_ids, value)

    def set_site_factor(self, job_id: int, value: int) -> Any:
        return self._timed(self.inner.set_site_factor, job_id, value)


def make_client(adapter: str, env: dict[str, str]) -> Timed:
    counter = CountingClient(env=env, timeout=60)
    if adapter == "jsoncli":
        return Timed(counter, counter)
    # pyslurm reads slurm.conf when imported: the cluster's, then.
    os.environ.update(env)
    from slurmpolicy.slurm import pyslurm_client

    reason = pyslurm_client.unavailable_reason(env=env)
    if reason is not None:
        raise SystemExit(f"bench_cycle: {reason}")
    client = pyslurm_client.PySlurmClient(env=env)
    client.cli = counter  # sprio and the version still go through commands
    return Timed(client, counter)


def submit_many(cluster: LiveCluster, count: int, work: Path) -> list[int]:
    script = "#!/bin/bash\nsleep 600\n"

    def one(i: int) -> int:
        shape = SHAPES[i % len(SHAPES)]
        return cluster.submit(script, extra_args=["-t", "60", f"--account={ACCOUNTS[i % 3]}",
                                                  "-J", f"bench{i}", *shape,
                                                  "-o", "/dev/null"], workdir=work)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, range(count)))


def cycle(d: Daemon, client: Timed) -> dict[str, Any]:
    before, waited = client.commands, client.seconds
    r = d.cycle()
    report = r.report
    writes = jobs = 0
    if report is not None:
        jobs = sum(n for (kind, _), n in report.outcomes.items() if kind == "SetSiteFactor")
        writes = report.calls  # calls that change something: here, site-factor batches
    return {"result": r.result, "seconds": r.seconds, "slurm_calls": client.commands - before,
            "in_slurm": client.seconds - waited,
            "writes": writes, "site_factor_jobs": jobs, "message": r.message}


def show(label: str, row: dict[str, Any]) -> None:
    print(f"{label:<26}{row['result']:>7}{row['seconds']:>9.2f}s{row['in_slurm']:>9.2f}s"
          f"{row['slurm_calls']:>7}{row['writes']:>8}{row['site_factor_jobs']:>8}"
          f"  {row['message'][:60]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--steady", type=int, default=5, help="steady cycles to time")
    parser.add_argument("--adapter", choices=("jsoncli", "pyslurm"), default="jsoncli",
                        help="pyslurm: in-process reads (needs pyslurm built for this Slurm)")
    args = parser.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="spbench-cycle-", dir="/tmp"))
    os.chmod(state, 0o755)
    prefix = os.environ.get("SLURMPOLICY_TEST_SLURM_PREFIX")
    cluster = LiveCluster(state, nodes=args.nodes, gpus_per_node=8, racks=max(1, args.nodes // 4),
                          cluster_name="bench_cycle",
                          slurm_prefix=Path(prefix) if prefix else None)
    cluster.up()
    d: Daemon | None = None
    try:
        work = cluster.workdir("bench")
        fillers = [cluster.submit("#!/bin/bash\nsleep 900\n",
                                  extra_args=["-N1", "--gres=gpu:8", "--account=fill", "-t", "60",
                                              "-o", "/dev/null"], workdir=work)
                   for _ in range(args.nodes)]
        for job in fillers:
            cluster.wait_state(job, "RUNNING", timeout=120)
        t0 = time.monotonic()
        submit_many(cluster, args.jobs, work)
        major, minor = JsonCliClient(env=cluster.env()).version()
        version = f"{major}.{minor:02d}"
        print(f"cluster: Slurm {version} ({args.adapter} adapter), "
              f"{args.nodes} nodes x 8 GPUs, all busy; {args.jobs} jobs submitted in "
              f"{time.monotonic() - t0:.0f}s")
        settings = settings_mod.from_mapping({
            "daemon": {"state_dir": str(state / "sp"), "max_snapshot_age": 600},
            "metrics": {"enabled": False},
            "slurm": {"adapter": "jsoncli"},
            "fairshare": {"shares": {"a": 0.4, "b": 0.3, "c": 0.2}},
            "preemption": {"enabled": False},
        })
        client = make_client(args.adapter, cluster.env())
        d = Daemon(settings, client=client, serve_metrics=False)
        d.open()
        print(f"{'cycle':<26}{'result':>7}{'time':>10}{'in Slurm':>10}{'calls':>7}"
              f"{'writes':>8}{'jobs':>8}")
        first = cycle(d, client)
        show("1 (2,000 new jobs)", first)
        settle = 1
        rows = [first]
        while rows[-1]["site_factor_jobs"] and settle < 20:
            rows.append(cycle(d, client))
            settle += 1
            show(f"{settle}", rows[-1])
        steady = [cycle(d, client) for _ in range(args.steady)]
        for i, row in enumerate(steady):
            show(f"steady {i + 1}", row)
        assert d.journal is not None
        usage, at = d.journal.usage()
        week = 7 * 86400.0 * 8 * args.nodes
        d.journal.set_usage({**usage, "a": week}, at or d.clock())
        change = cycle(d, client)
        show("fair-share change", change)
        after = cycle(d, client)
        show("after the change", after)
        print()
        print(f"new jobs settled after {settle - 1 if rows[-1]['site_factor_jobs'] == 0 else '>'}"
              f" cycle(s) (target 1); first cycle {first['seconds']:.2f}s, "
              f"{first['slurm_calls']} Slurm calls ({first['writes']} writes for "
              f"{first['site_factor_jobs']} jobs)")
        print(f"steady cycle: median {statistics.median(r['seconds'] for r in steady):.2f}s, "
              f"max {max(r['seconds'] for r in steady):.2f}s (target < 0.5 s), of which "
              f"{statistics.median(r['in_slurm'] for r in steady):.2f}s waiting for Slurm's "
              f"{steady[-1]['slurm_calls']} reads")
        print(f"fair-share change: {change['slurm_calls']} Slurm calls ({change['writes']} writes"
              f" for {change['site_factor_jobs']} jobs; target <= 50), settled in one cycle: "
              f"{'yes' if after['site_factor_jobs'] == 0 else 'no'}")
        record("cycle", adapter=args.adapter, slurm=version, nodes=args.nodes, jobs=args.jobs,
               settled=rows[-1]["site_factor_jobs"] == 0, settle_cycles=settle - 1,
               first_s=first["seconds"], first_calls=first["slurm_calls"],
               steady_median_s=statistics.median(r["seconds"] for r in steady),
               steady_max_s=max(r["seconds"] for r in steady),
               steady_reads=steady[-1]["slurm_calls"], change_calls=change["slurm_calls"],
               change_settled=after["site_factor_jobs"] == 0)
    finally:
        if d is not None:
            d.close()
        cluster.down()
        if not os.environ.get("SLURMPOLICY_KEEP_DEVCLUSTER"):
            shutil.rmtree(state, ignore_errors=True)
    return 0


def test_bench_cycle() -> None:  # pragma: no cover - run with -s to see the figures
    main([])


if __name__ == "__main__":
    sys.exit(main())
