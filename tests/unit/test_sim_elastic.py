"""Elastic jobs in the simulator: one starts with what is free within its range
(and runs slower for it), and under slurmpolicy a preemption shrinks it (it
restarts at once on the nodes left) where Slurm alone would requeue it at the
size it ran at (and it waits for that)."""

from __future__ import annotations

from dataclasses import replace

import msgspec

from slurmpolicy.settings import Settings
from slurmpolicy.sim import Hosts
from slurmpolicy.sim.engine import DONE, Simulator
from slurmpolicy.sim.metrics import rows, summarize
from slurmpolicy.sim.trace import TraceJob, TraceRules


def job(job_id: int, submit: float, nodes: int, duration: float, cls: str = "research",
        min_nodes: int | None = None) -> TraceJob:
    return TraceJob(job_id=job_id, submit=submit, duration=duration, nodes=nodes,
                    gpus_per_node=8, account="acct", job_class=cls, time_limit=4 * duration,
                    ckpt_interval=1800.0, save_time=5.0, restore_time=60.0, min_nodes=min_nodes)


def run(trace: list[TraceJob], settings: Settings | None = None) -> Simulator:
    sim = Simulator(trace, Hosts.layout(4, 8, hosts_per_leaf=4), "slurmpolicy",
                    settings=settings, plan_refresh=0.0)
    RAW[id(sim)] = sim.run()
    assert all(j.state == DONE for j in sim.jobs)
    return sim


RAW: dict[int, object] = {}


def test_an_elastic_job_starts_with_what_is_free_and_runs_slower() -> None:
    trace = [job(1, 0, 1, 10_000), job(2, 10, 4, 3_600, min_nodes=2)]
    sim = run(trace)
    e = sim.by_id[2]
    # 3 of 4 hosts free: it starts at once on 3, at 3/4 of its speed.
    assert e.first_start is not None and e.first_start < 60
    assert e.smaller_starts == 1
    assert e.end is not None and e.end >= e.first_start + 3_600 / 0.75 - 1


def test_a_preempted_elastic_job_restarts_at_once_smaller_where_a_rigid_one_waits() -> None:
    elastic = [job(1, 0, 4, 20_000, cls="experimental", min_nodes=2),
               job(2, 4_000, 1, 30_000, cls="production")]
    rigid = [replace(elastic[0], min_nodes=None), elastic[1]]
    shrunk, evicted = run(elastic), run(rigid)
    a, b = shrunk.by_id[1], evicted.by_id[1]
    assert a.preemptions == b.preemptions == 1 and a.runs == b.runs == 2
    assert a.shrinks == 1 and a.cap == 3  # NumNodes=2-3 after the requeue
    # Shrunk: back at once on the 3 hosts left; rigid: it waits for 4 hosts,
    # until the production job is done.
    assert a.end is not None and b.end is not None and a.end < b.end
    fig = summarize(RAW[id(shrunk)])  # type: ignore[arg-type]
    assert fig["elastic_jobs"] == 1 and fig["elastic_shrinks"] == 1
    assert "elastic jobs shrunk instead of evicted" in [r[0] for r in rows([fig])]


def test_without_the_shrink_slurm_still_restarts_it_within_its_range() -> None:
    trace = [job(1, 0, 4, 20_000, cls="experimental", min_nodes=2),
             job(2, 4_000, 1, 30_000, cls="production")]
    off = run(trace, msgspec.structs.replace(Settings(), preemption=msgspec.structs.replace(
        Settings().preemption, shrink_elastic=False)))
    j = off.by_id[1]
    assert j.preemptions == 1 and j.shrinks == 0 and j.cap == 4 and j.smaller_starts == 1


def test_shrinking_costs_speed_for_the_rest_of_the_run() -> None:
    # The job does not grow back: behind a short beneficiary, waiting for the
    # full size (a rigid job) would have finished sooner. The report shows both.
    elastic = [job(1, 0, 4, 20_000, cls="experimental", min_nodes=2),
               job(2, 4_000, 1, 600, cls="production")]
    rigid = [replace(elastic[0], min_nodes=None), elastic[1]]
    a, b = run(elastic).by_id[1], run(rigid).by_id[1]
    assert a.end is not None and b.end is not None and a.end > b.end


def test_trace_rules_make_elastic_jobs_without_changing_the_others() -> None:
    import random

    plain, elastic = TraceRules(seed=3), TraceRules(seed=3, elastic_fraction=1.0)
    a = [plain.complete(random.Random(i), job_id=i, submit=0, duration=100, gpus=g,
                        account="x") for i, g in enumerate((8, 16, 32, 4))]
    b = [elastic.complete(random.Random(i), job_id=i, submit=0, duration=100, gpus=g,
                          account="x") for i, g in enumerate((8, 16, 32, 4))]
    assert [j.min_nodes for j in b] == [None, 1, 2, None]
    assert [replace(j, min_nodes=None) for j in b] == a
