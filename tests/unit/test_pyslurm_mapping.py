"""The pyslurm adapter's translation of pyslurm objects into model records.

pyslurm needs a matching Slurm to build, so it is not installed here; these
tests feed the translation plain objects carrying the attribute names and
value conventions of pyslurm 25.11.2 (read from its sources: times as epoch
ints, time limits in minutes, None for unset, task 0 reported as None). The
adapter against a real pyslurm is covered by the contract tests.
"""

from __future__ import annotations

from types import SimpleNamespace

from slurmpolicy.model import JobState
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.pyslurm_client import PySlurmClient, _dependency_text


def _job(**kw):
    base = dict(
        id=4, name="sweep", user_name="carol", user_id=1003, account="speech",
        partition="research", qos="normal", state="RUNNING", state_reason="None",
        array_id=3, array_task_id=None, array_tasks_waiting=None, heterogeneous_id=None,
        heterogeneous_offset=None, priority=7, num_nodes=1, cpus=1, memory_per_node=4096,
        memory_per_cpu=None, time_limit=60, submit_time=1796219550, eligible_time=1796219550,
        start_time=1796219550, end_time=1796223150, requeue_count=2, is_requeueable=True,
        constraints=["h100"], reservation=None, allocated_nodes="dgx07",
        gres_per_node={"gres/gpu:h100": 2}, dependencies={}, comment="c", admin_comment="a",
        cluster="fixture",
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_job_translation():
    j = PySlurmClient._job(_job(), {4: 500}, now=1796219600)
    assert j.state is JobState.RUNNING and j.array_job_id == 3
    assert j.array_task_id == 0  # pyslurm's None for task 0, restored
    assert (j.gpus_per_node, j.gpus, j.gpu_type) == (2, 2, "h100")
    assert j.nodes == ("dgx07",) and dict(j.gpus_on_node) == {"dgx07": 2}
    assert j.time_limit == 3600 and j.restart_count == 2 and j.requeue
    assert j.site_factor == 500 and j.features == "h100"


def test_pending_array_record_keeps_no_task():
    j = PySlurmClient._job(_job(state="PENDING", array_tasks_waiting="0-5",
                                allocated_nodes=None, start_time=0), {}, now=1796219600)
    assert j.array_task_id is None and j.nodes == () and j.start_time is None


def test_node_gpu_use_derived_when_pyslurm_reports_none():
    node = PySlurmClient._node(SimpleNamespace(
        name="dgx07", state="MIXED+DRAIN", reason="x", total_cpus=8, allocated_cpus=2,
        real_memory=64000, allocated_memory=8192, configured_gres={"gpu:h100": 8},
        allocated_gres={}, available_features=["h100"], partitions=["research"]))
    assert node.flags == frozenset({"DRAIN"})
    jobs = [PySlurmClient._job(_job(), {}, now=0),
            PySlurmClient._job(_job(id=2, array_id=None, gres_per_node={"gpu": 4}), {}, now=0)]
    (derived,) = parse.derive_gpu_use([node], jobs)
    assert dict(derived.gpus_alloc_by_type) == {"h100": 6}


def test_dependency_text():
    assert _dependency_text({"afterok": [1, 2], "singleton": True}) == "afterok:1:2,singleton"
    assert _dependency_text({}) == ""
    assert _dependency_text({"afterok": ["1"], "afterany": ["2"], "satisfy": "any"}) == \
        "afterok:1?afterany:2"
