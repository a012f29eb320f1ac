"""Trace readers, completion rules and the synthetic generator."""

from __future__ import annotations

import io
import json

import pytest

from slurmpolicy.sim.trace import (
    SacctReport,
    SyntheticSpec,
    TraceError,
    TraceRules,
    generate,
    load_trace,
    parse_synthetic,
    read_philly,
    read_sacct,
)

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-09-04 10:30:41,2240.0,8,17920.0,7f04ca
2017-09-04 10:31:41,100.0,1,100.0,6214e9
2017-09-04 10:35:00,50.0,12,600.0,6214e9
2017-09-04 10:40:00,500.0,32,16000.0,11cb48
"""


def test_philly_reader_relative_times_accounts_and_shapes() -> None:
    jobs = read_philly(io.StringIO(PHILLY), TraceRules(seed=1))
    assert [j.submit for j in jobs] == [0.0, 60.0, 259.0, 559.0]
    assert [j.account for j in jobs] == ["7f04ca", "6214e9", "6214e9", "11cb48"]
    assert [(j.nodes, j.gpus_per_node) for j in jobs] == [(1, 8), (1, 1), (2, 6), (4, 8)]
    assert jobs[0].duration == 2240.0
    # Time limits: at least the run time, whole hours.
    assert all(j.time_limit >= j.duration and j.time_limit % 3600 == 0 for j in jobs)
    assert {j.job_class for j in jobs} <= {"production", "research", "experimental"}


def test_philly_load_scale_and_limit() -> None:
    jobs = read_philly(io.StringIO(PHILLY), TraceRules(load_scale=2.0), limit=2)
    assert [j.submit for j in jobs] == [0.0, 30.0]


def test_philly_bad_header_and_row_are_named() -> None:
    with pytest.raises(TraceError, match="missing column"):
        read_philly(io.StringIO("a,b\n1,2\n"))
    with pytest.raises(TraceError, match=r"<trace>:2: bad row"):
        read_philly(io.StringIO("timestamp,duration,num_gpus,gpu_time,cluster\nnope,1,1,1,x\n"))


def test_class_rule_is_seeded_and_follows_fractions() -> None:
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
        f"2017-09-04 10:{i // 60:02d}:{i % 60:02d},100,1,100,c\n" for i in range(2000))
    a = read_philly(io.StringIO(text), TraceRules(seed=3))
    b = read_philly(io.StringIO(text), TraceRules(seed=3))
    c = read_philly(io.StringIO(text), TraceRules(seed=4))
    assert [j.job_class for j in a] == [j.job_class for j in b]
    assert [j.job_class for j in a] != [j.job_class for j in c]
    share = sum(j.job_class == "production" for j in a) / len(a)
    assert 0.12 < share < 0.18



def test_save_times_spread_off_the_poll_grid_and_leave_other_draws_alone() -> None:
    """Each job's save time is its draw times a factor of its own generator:
    not a whole multiple of the daemon's 5 s poll, within the spread, and the
    classes and time limits are those drawn without the spread."""
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n" + "".join(
        f"2017-09-04 10:{i // 60:02d}:{i % 60:02d},100,1,100,c\n" for i in range(500))
    spread = read_philly(io.StringIO(text), TraceRules(seed=3))
    grid = read_philly(io.StringIO(text), TraceRules(seed=3, save_spread=0.0))
    assert all(s.save_time % 5 == 0 for s in grid)
    assert sum(s.save_time % 5 != 0 for s in spread) > 450
    for a, b in zip(spread, grid, strict=True):
        assert (a.job_class, a.time_limit) == (b.job_class, b.time_limit)
        assert 0.8 * b.save_time <= a.save_time <= 1.2 * b.save_time
    assert max(s.save_time for s in spread) <= 150.0  # the baseline's GraceTime

SACCT_DEFAULT = """JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode
1|train|gpu|vision|8|COMPLETED|0:0
"""

SACCT_ALL = (
    "JobID|JobIDRaw|JobName|Partition|Account|User|QOS|Submit|Start|End|Elapsed|ElapsedRaw|"
    "Timelimit|TimelimitRaw|AllocTRES|ReqTRES|NNodes|State|AdminComment\n"
    "101|101|train|research|vision|alice|normal|2025-01-01T10:00:00|2025-01-01T10:05:00|"
    "2025-01-01T12:05:00|02:00:00|7200|04:00:00|240|billing=16,cpu=16,gres/gpu=16,"
    "gres/gpu:h100=16,mem=64G,node=2|cpu=16,gres/gpu=16,node=2|2|COMPLETED|"
    "spolicy:v1 class=production ckpt=signal:USR1,grace=60\n"
    "101.batch|101.batch|batch||vision|||2025-01-01T10:05:00|2025-01-01T10:05:00|"
    "2025-01-01T12:05:00|02:00:00|7200|||cpu=8,gres/gpu=8,node=1||1|COMPLETED|\n"
    "102|102|eval|prod|nlp|bob|normal|2025-01-01T10:10:00|2025-01-01T10:10:00|"
    "2025-01-01T10:20:00|00:10:00|600|UNLIMITED|UNLIMITED|cpu=1,gres/gpu=1,node=1||1|"
    "COMPLETED|\n"
    "103|103|cpuonly|research|nlp|bob|normal|2025-01-01T10:11:00|2025-01-01T10:11:00|"
    "2025-01-01T10:12:00|00:01:00|60|01:00:00|60|cpu=1,mem=1G,node=1||1|COMPLETED|\n"
    "104|104|never|research|nlp|bob|normal|2025-01-01T10:12:00|Unknown|Unknown|00:00:00|0|"
    "01:00:00|60||cpu=1,gres/gpu=2,node=1|1|CANCELLED by 0|\n"
)


def test_sacct_default_columns_are_refused_with_the_format_to_use() -> None:
    with pytest.raises(TraceError, match=r"default columns.*--format=ALL"):
        read_sacct(io.StringIO(SACCT_DEFAULT))


def test_sacct_format_all_reader() -> None:
    jobs = read_sacct(io.StringIO(SACCT_ALL), TraceRules(seed=0))
    assert [j.job_id for j in jobs] == [101, 102]  # steps, CPU-only, never-ran skipped
    first, second = jobs
    assert first.submit == 0.0 and second.submit == 600.0
    assert (first.nodes, first.gpus_per_node, first.gpus) == (2, 8, 16)
    assert first.duration == 7200.0 and first.time_limit == 4 * 3600.0
    assert first.job_class == "production"  # from the admin_comment
    assert (first.account, first.user) == ("vision", "alice")
    assert second.gpus == 1 and second.time_limit >= 3600  # UNLIMITED: the rule applies


def test_sacct_bad_input() -> None:
    with pytest.raises(TraceError, match="header"):
        read_sacct(io.StringIO("hello world\n"))
    report = SacctReport()
    assert read_sacct(io.StringIO(SACCT_ALL.splitlines()[0] + "\n1|2\n"), report=report) == []
    assert report.skipped["unreadable rows"] == (1, ["line 2: 2 fields, the header has 19"])


def test_sacct_row_with_the_delimiter_in_a_field_is_skipped_never_shifted() -> None:
    header, first, *rest = SACCT_ALL.splitlines()
    bad = first.replace("|train|", "|train|a|b|", 1)  # a JobName "train|a|b"
    report = SacctReport()
    jobs = read_sacct(io.StringIO("\n".join([header, bad, *rest]) + "\n"), report=report)
    assert [j.job_id for j in jobs] == [102]
    count, examples = report.skipped["unreadable rows"]
    assert count == 1 and examples[0].startswith("line 2: 21 fields, the header has 19: a field")
    assert "1 job(s) read of 5 row(s) (1 job step(s) are not jobs)" in report.summary()
    assert "1 without GPUs" in report.summary() and "1 never ran" in report.summary()


def test_sacct_multi_line_field_is_read_when_it_closes() -> None:
    header = "JobID|Submit|ElapsedRaw|AllocTRES|SubmitLine|State"
    text = (f"{header}\n7|2025-01-01T10:00:00|60|gres/gpu=8|sbatch \\\n  --wrap 'x'|COMPLETED\n"
            "8|2025-01-01T10:01:00|60|gres/gpu=1|sbatch y.sh|COMPLETED\n"
            "9|2025-01-01T10:02:00|60|gres/gpu=1|unclosed\n")
    report = SacctReport()
    jobs = read_sacct(io.StringIO(text), report=report)
    assert [j.job_id for j in jobs] == [7, 8]
    assert report.skipped["unreadable rows"][1] == ["line 5: 5 fields, the header has 6"]


@pytest.mark.parametrize("delim", [";", ",", "\t", "::", "~"])
def test_sacct_any_delimiter_and_parsable_trailing(delim: str) -> None:
    text = SACCT_ALL.replace("|", delim) if delim != "," else SACCT_ALL.replace(
        ",", "+").replace("|", ",")
    jobs = read_sacct(io.StringIO(text))
    assert [j.job_id for j in jobs] == [101, 102]
    trailing = "".join(line + delim + "\n" for line in text.splitlines())
    assert [j.job_id for j in read_sacct(io.StringIO(trailing))] == [101, 102]


def test_sacct_missing_run_time_names_what_is_missing() -> None:
    with pytest.raises(TraceError, match=r"lacks a run time \(Elapsed or ElapsedRaw, or Start"
                                         r" and End\)"):
        read_sacct(io.StringIO("JobID|Submit|AllocTRES\n1|2025-01-01T00:00:00|gres/gpu=1\n"))
    with pytest.raises(TraceError, match=r"lacks Submit;"):
        read_sacct(io.StringIO("JobID|ElapsedRaw|AllocTRES\n1|60|gres/gpu=1\n"))


def test_sacct_json_v0_0_41_shapes() -> None:
    doc = {"jobs": [
        {"job_id": 5, "account": "a", "user": "u", "allocation_nodes": 2,
         "state": {"current": ["COMPLETED"], "reason": "None"},
         "time": {"submission": 1735725600, "elapsed": 3600,
                  "limit": {"set": True, "infinite": False, "number": 120}},
         "tres": {"allocated": [{"type": "cpu", "count": 32},
                                {"type": "gres", "name": "gpu", "count": 16}]},
         "comment": {"administrator": "spolicy:v1 class=production"}},
        {"job_id": 6, "state": {"current": "RUNNING"}, "time": {"submission": 1735725660}},
        {"job_id": 7, "state": {"current": ["COMPLETED"]},
         "time": {"submission": 1735725700, "elapsed": 10}, "tres": {"allocated": []}},
        "junk",
    ]}
    report = SacctReport()
    jobs = read_sacct(io.StringIO(json.dumps(doc)), TraceRules(), report=report)
    assert [(j.job_id, j.nodes, j.gpus_per_node, j.time_limit, j.job_class) for j in jobs] == [
        (5, 2, 8, 7200.0, "production")]
    assert report.skipped["not finished"][0] == 1
    assert report.skipped["without GPUs (no gres/gpu in AllocTRES or ReqTRES)"][0] == 1
    assert report.skipped["unreadable rows"][1] == ["jobs[3]: no job_id"]


def test_generator_is_deterministic_for_a_seed() -> None:
    spec = SyntheticSpec(jobs=300, seed=7)
    a, b = generate(spec), generate(spec)
    assert a == b
    c = generate(SyntheticSpec(jobs=300, seed=8))
    assert a != c
    assert {j.account for j in a} <= set(spec.accounts)
    assert {j.gpus for j in a} <= {1, 2, 4, 8, 16, 32, 64}
    assert all(a[i].submit <= a[i + 1].submit for i in range(len(a) - 1))


def test_synthetic_spec_parsing() -> None:
    spec = parse_synthetic("jobs=10,interarrival=60,accounts=a:b", seed=2)
    got = (spec.jobs, spec.mean_interarrival, spec.accounts, spec.seed)
    assert got == (10, 60.0, ("a", "b"), 2)
    with pytest.raises(TraceError, match="unknown key 'bogus'"):
        parse_synthetic("bogus=1", seed=0)
    assert len(load_trace("jobs=5", "synthetic", TraceRules())) == 5
    with pytest.raises(TraceError, match="allowed: philly, sacct, synthetic"):
        load_trace("x", "parquet", TraceRules())


def test_sacct_noheader_dump_read_with_the_format_it_was_made_with() -> None:
    rows = "7;2025-01-01T10:00:00;600;gres/gpu=4;COMPLETED\n8;2025-01-01T10:05:00;60;;FAILED\n"
    with pytest.raises(TraceError, match=r"<trace>:1: the first line is a row.*--sacct-columns"):
        read_sacct(io.StringIO(rows))
    report = SacctReport()
    jobs = read_sacct(io.StringIO(rows), report=report,
                      columns="JobID,Submit,ElapsedRaw,AllocTRES,State")
    assert [(j.job_id, j.gpus, j.duration) for j in jobs] == [(7, 4, 600.0)]
    assert report.skipped["without GPUs (no gres/gpu in AllocTRES or ReqTRES)"][1] == ["line 2"]
    trailing = "".join(line + ";\n" for line in rows.splitlines())  # --parsable
    assert len(read_sacct(io.StringIO(trailing), columns="JobID,Submit,ElapsedRaw,AllocTRES,"
                                                          "State")) == 1
    with pytest.raises(TraceError, match="no delimiter splits this row into the 3 columns"):
        read_sacct(io.StringIO(rows), columns="JobID,Submit,State")
    with pytest.raises(TraceError, match="with JobID"):
        read_sacct(io.StringIO(rows), columns="Submit,State")
