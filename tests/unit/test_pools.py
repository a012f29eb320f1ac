"""Pools: the routing rule in Python (slurmpolicy.pools) and in the rendered
job_submit.lua (lua5.3 and liblua5.1), on the same requests: same partition,
same messages, same refusals."""

from __future__ import annotations

import pytest
from directives_support.lua import interpreters
from pools_support.lua import RouteCase, run_routes

from slurmpolicy import settings
from slurmpolicy.directives import Context, check_script
from slurmpolicy.errors import ConfigError
from slurmpolicy.plugin import render
from slurmpolicy.pools import (
    Request,
    gpu_request,
    node_range,
    request_from_options,
    route,
    sbatch_request,
    vendor_of_type,
)

POOLS = settings.from_mapping({
    "pools": {
        "large": {"partition": "hpc", "gpu_types": ["h100"], "gpus_per_node": 8, "nodes": 4,
                  "gpu_memory_gb": 80, "min_gpus": 16, "classes": ["production", "research"]},
        "general": {"partition": "gpu", "gpu_types": ["h100"], "gpus_per_node": 8, "nodes": 4,
                    "gpu_memory_gb": 80, "max_gpus": 15},
        "amd": {"partition": "amd", "gpu_types": ["mi250"], "gpus_per_node": 4, "nodes": 2,
                "gpu_memory_gb": 64, "typed_only": True},
        "mig": {"partition": "mig", "gpu_types": ["1g.10gb", "shard"], "gpus_per_node": 7,
                "nodes": 1, "gpu_memory_gb": 10, "slices": True},
        "shared": {"partition": "shared", "classes": ["experimental"], "gpu_types": ["a100"],
                   "gpus_per_node": 4, "nodes": 2, "gpu_memory_gb": 40},
    },
}, "<pools>")


def req(**kw: object) -> Request:
    base: dict[str, object] = {"job_class": "research"}
    base.update(kw)
    return Request(**base)  # type: ignore[arg-type]


def test_a_big_job_goes_to_the_large_pool_and_a_small_one_to_general_or_a_slice():
    big = route(POOLS.pools, req(gpus=32, nodes=4, gpus_per_node=8))
    assert big.partitions == ("hpc",) and big.pool == "large"
    mid = route(POOLS.pools, req(gpus=8, nodes=1, gpus_per_node=8))
    assert mid.partitions == ("gpu",)
    assert "not large: the job asks 8 GPUs; the pool takes at least 16" in mid.text
    small = route(POOLS.pools, req(gpus=1, nodes=1, gpus_per_node=1))
    assert small.partitions == ("gpu", "mig")
    assert "or a GPU slice in pool mig (partition mig) when whole GPUs are scarce" in small.text


def test_type_vendor_memory_and_class_decide():
    assert route(POOLS.pools, req(gpus=2, gpus_per_node=2, gpu_type="mi250")).partitions == ("amd",)
    assert route(POOLS.pools, req(gpus=2, gpus_per_node=2, gpu_type="amd")).partitions == ("amd",)
    # A slice cannot hold 40 GB: a small job that needs it gets no slice.
    assert route(POOLS.pools, req(gpus=1, gpus_per_node=1,
                                  min_gpu_memory_gb=40)).partitions == ("gpu",)
    # A typed whole-GPU request never overflows to slices of another type.
    assert route(POOLS.pools, req(gpus=1, gpus_per_node=1, gpu_type="h100")).partitions == ("gpu",)
    # A job that asks for shards only goes where shards are.
    assert route(POOLS.pools, req(gpus=1, gpus_per_node=1, gpu_type="shard")).partitions == \
        ("mig",)
    exp = route(POOLS.pools, req(job_class="experimental", gpus=32, nodes=4, gpus_per_node=8))
    assert exp.refused and "class experimental is not one of its classes" in exp.refused


def test_a_job_no_pool_can_ever_run_is_refused_with_each_reason():
    r = route(POOLS.pools, req(gpus=64, nodes=8, gpus_per_node=8))
    assert r.refused is not None and r.partitions == ()
    assert "large: the job asks 8 nodes; the pool has 4" in r.refused
    assert "mig: the job asks 64 GPUs on 8 node(s)" in r.refused


def test_a_named_partition_is_kept_unless_that_pool_can_never_run_the_job():
    kept = route(POOLS.pools, req(gpus=8, gpus_per_node=8, partition="hpc,gpu"))
    assert kept.kept and kept.partitions == () and kept.pool == "general"
    other = route(POOLS.pools, req(gpus=8, gpus_per_node=8, partition="debug"))
    assert other.kept and other.refused is None and "not a pool" in other.text
    never = route(POOLS.pools, req(gpus=8, gpus_per_node=8, gpu_type="h100", partition="amd"))
    assert never.refused == ("partition amd can never run this job: pool amd (partition amd): it "
                             "has no h100 GPUs (only mi250); allowed: pool general (partition gpu)")


def test_requests_are_read_as_sbatch_and_slurmctld_write_them():
    assert gpu_request("gres:gpu:h100:8") == (8, "h100")
    assert gpu_request("gres/gpu:2") == (2, None)
    assert gpu_request("gpu:1g.10gb:1,shard:2") == (1, "1g.10gb")
    assert gpu_request("gpu") == (1, None)
    assert gpu_request("gres/shard:2") == (1, "shard") and gpu_request("shard") == (1, "shard")
    assert gpu_request("gpu:1,shard:2") == (1, None)
    assert node_range("2-8") == (2, 8) and node_range("4") == (4, 4)
    assert node_range("x") == (1, None)
    opts = sbatch_request(b"#!/bin/bash\n#SBATCH -N 2 --gres=gpu:h100:8\n#SBATCH -p gpu\necho\n"
                          b"#SBATCH --nodes=9\n")
    assert opts == {"nodes": "2", "gres": "gpu:h100:8", "partition": "gpu"}
    r = request_from_options({"gpus": "12", "nodes": "2-4"}, "research", None, 80.0)
    assert (r.gpus, r.nodes, r.gpus_per_node, r.min_gpu_memory_gb) == (12, 2, 6, 80)
    assert vendor_of_type("mi300x") == "amd" and vendor_of_type("h100") == "nvidia"
    assert vendor_of_type("3g.40gb") == "nvidia" and vendor_of_type("zz9") == ""


def test_settings_check_the_pools():
    with pytest.raises(ConfigError, match=r"unknown class\(es\) gold.*\$\.pools\.x\.classes"):
        settings.from_mapping({"pools": {"x": {"classes": ["gold"]}}})
    with pytest.raises(ConfigError, match=r"\$\.pools\.x\.nodes"):
        settings.from_mapping({"pools": {"x": {"nodes": -1}}})


SH = b"#!/bin/bash\n"
LUA_CASES: list[tuple[RouteCase, Request | None]] = []


def _case(script: bytes, tpn: str | None = None, tpj: str | None = None,
          nodes: int | None = None, partition: str | None = None) -> None:
    LUA_CASES.append((RouteCase(script, tpn, tpj, nodes, partition), None))


_case(SH + b"#SPOLICY --class=research\n", "gres:gpu:h100:8", nodes=4)
_case(SH + b"echo\n", "gres/gpu:8")
_case(SH + b"echo\n", "gres/gpu:1")
_case(SH + b"#SPOLICY --min-gpu-memory=40\n", "gres/gpu:1")
_case(SH + b"#SPOLICY --gpu-type=amd\n", "gres/gpu:2")
_case(SH + b"echo\n", "gres:gpu:mi250:4", nodes=2)
_case(SH + b"echo\n", None, "gres:gpu:12", nodes=2)
_case(SH + b"#SPOLICY --class=experimental\n", "gres/gpu:a100:4")
_case(SH + b"#SPOLICY --class=experimental\n", "gres/gpu:8", nodes=4)
_case(SH + b"echo\n", "gres/gpu:8", nodes=8)
_case(SH + b"echo\n", "gres/gpu:h100:8", partition="amd")
_case(SH + b"echo\n", "gres/gpu:h100:8", partition="debug")
_case(SH + b"echo\n", "gres/gpu:8", partition="hpc,gpu")
_case(SH + b"echo\n")
_case(SH + b"echo\n", "gres/gpu:1g.10gb:1")
_case(SH + b"#SPOLICY --gpu-type=nvidia\n", "gres/gpu:1")
_case(SH + b"#SPOLICY --class=experimental\n", "gres/gpu:2", nodes=2)
_case(SH + b"echo\n", "gres:shard:2")
_case(SH + b"echo\n", "gres/gpu:1,gres/shard:1")


def test_a_typed_only_pool_takes_only_jobs_that_ask_for_it():
    untyped = route(POOLS.pools, req(gpus=2, nodes=2, gpus_per_node=1, partition="amd"))
    assert untyped.refused is not None and "it takes only jobs that ask for its GPU type or " \
        "vendor" in untyped.refused
    assert route(POOLS.pools, req(gpus=2, nodes=2, gpus_per_node=1)).partitions == ("gpu",)
    asked = route(POOLS.pools, req(job_class="experimental", gpus=8, nodes=2, gpus_per_node=4,
                                   gpu_type="mi250"))
    assert asked.partitions == ("amd",)


def test_the_example_pools_load_and_render():
    from pathlib import Path

    from slurmpolicy.settings import load

    example = load(Path(__file__).resolve().parents[2] / "contrib" / "examples" / "pools.toml")
    assert list(example.pools) == ["large", "general", "amd", "shared", "slices"]
    assert '["partition"] = "mig"' in render(example)


def _python(case: RouteCase) -> tuple[str, str | None, list[str]]:
    result = check_script(case.script, POOLS, Context(account="vision"))
    opts: dict[str, str] = {}
    if case.min_nodes:
        opts["nodes"] = str(case.min_nodes)
    if case.tres_per_node:
        opts["gres"] = case.tres_per_node
    elif case.tres_per_job:
        opts["gpus"] = str(gpu_request(case.tres_per_job)[0])
    pol = result.policy
    r = request_from_options(opts, pol.job_class or POOLS.default_class, pol.gpu_type,
                             pol.min_gpu_memory_gb, case.partition)
    routed = route(POOLS.pools, r)
    if routed.refused:
        return "-1", case.partition, ["slurmpolicy: " + routed.refused]
    if routed.partitions:
        return "0", routed.partition, ["slurmpolicy: " + routed.text]
    return "0", case.partition, []


@pytest.mark.parametrize("interpreter", interpreters())
def test_lua_routes_as_python_does(interpreter):
    plugin = render(POOLS)
    cases = [c for c, _ in LUA_CASES]
    outcomes = run_routes(plugin, cases, interpreter)
    for case, got in zip(cases, outcomes, strict=True):
        rc, partition, messages = _python(case)
        assert (got.rc, got.partition, got.messages) == (rc, partition, messages), case
    assert {o.rc for o in outcomes} == {"0", "-1"}
    assert outcomes[2].partition == "gpu,mig" and outcomes[0].partition == "hpc"


def test_no_pools_no_routing():
    from slurmpolicy.settings import Settings

    (out,) = run_routes(render(Settings()), [RouteCase(SH + b"echo\n", "gres/gpu:1")], "lua5.3")
    assert out.rc == "0" and out.partition is None and out.messages == []


@pytest.mark.parametrize("interpreter", interpreters())
def test_lua_records_a_node_range_as_python_does(interpreter):
    from slurmpolicy.jobpolicy import with_node_range
    from slurmpolicy.settings import Settings

    cases = [
        RouteCase(SH + b"#SPOLICY --checkpoint=signal:USR1,grace=60s\n", "gres/gpu:8",
                  min_nodes=2, max_nodes=4),
        RouteCase(SH + b"echo\n", "gres/gpu:8", min_nodes=1, max_nodes=3),
        RouteCase(SH + b"#SPOLICY --class=research\n", "gres/gpu:8", min_nodes=2, max_nodes=2),
        RouteCase(SH + b"echo\n", "gres/gpu:8", min_nodes=2),
    ]
    outcomes = run_routes(render(Settings()), cases, interpreter)
    for case, got in zip(cases, outcomes, strict=True):
        result = check_script(case.script, Settings(), Context(account="vision"))
        assert case.min_nodes is not None
        hi = case.max_nodes if case.max_nodes is not None else None
        assert got.admin == with_node_range(result.admin_comment, case.min_nodes, hi), case
    assert outcomes[0].admin == "spolicy:v1 ckpt=signal:USR1,grace=60 nodes=2-4"
    assert outcomes[1].admin == "spolicy:v1 nodes=1-3"
    assert outcomes[2].admin == "spolicy:v1 class=research" and outcomes[3].admin is None


def test_why_says_where_a_job_is_and_why():
    from slurmpolicy.pools import describe_job

    routed = describe_job(POOLS, "research", "gpu,mig", 1, 1, 1, None, None)
    assert routed is not None and routed.startswith("pool: routed to pool general (partition gpu)")
    kept = describe_job(POOLS, "research", "debug", 8, 1, 8, None, None)
    assert kept == ("pool: kept its partition debug (not a pool); a job without a partition "
                    "would be routed to pool general (partition gpu); not large: the job asks "
                    "8 GPUs; the pool takes at least 16")
    never = describe_job(POOLS, "research", "amd", 8, 1, 8, "h100", None)
    assert never is not None and never.startswith("pool: partition amd can never run this job")
    from slurmpolicy.settings import Settings

    assert describe_job(Settings(), "research", "gpu", 1, 1, 1, None, None) is None


def test_explain_carries_the_pool_line():
    from slurmpolicy.policy import explain
    from slurmpolicy.policy.actions import Intents
    from slurmpolicy.policy.scenario import ClusterBuilder

    b = ClusterBuilder(hosts=4, partitions={"hpc": [1, 2, 3, 4], "gpu": [1, 2, 3, 4]})
    b.pend(7, "a", nodes=4, partition="hpc")
    exp = explain(b.snapshot(), b.fabric(), POOLS, Intents(), b.now, 7)
    assert "pool: routed to pool large (partition hpc)" in exp.notes
