"""The JSON CLI adapter's decoding on recorded outputs of Slurm 22.05 and 25.11.

The scenario is described in tests/fixtures/slurm/README.md; both folders hold
the same cluster state, so every assertion runs on both shapes.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from slurmpolicy.errors import SlurmError, SlurmParseError
from slurmpolicy.model import JobState
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.jsoncli import classify, parse_signal
from tests.paths import FIXTURES

RELEASES = ["slurm-22.05", "slurm-25.11"]


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    # 22.05's text times are local to the recording host, which ran in UTC.
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(params=RELEASES)
def snap(request):
    return parse.load_dir(FIXTURES / request.param)


def test_versions_and_cluster():
    a = parse.load_dir(FIXTURES / "slurm-22.05")
    b = parse.load_dir(FIXTURES / "slurm-25.11")
    assert a.slurm_version == "22.05.8"
    assert b.slurm_version == "25.11.7"
    assert a.cluster_name == b.cluster_name == "fixture"


def test_drained_node_with_reason(snap):
    dgx08 = snap.node("dgx08")
    assert dgx08.state == "IDLE"
    assert "DRAIN" in dgx08.flags
    assert dgx08.reason == "ib link flapping"
    assert not dgx08.schedulable
    assert dgx08.gpus == 8 and dgx08.gpus_free == 0


def test_per_node_gpu_use(snap):
    used = {n.name: n.gpus_alloc for n in snap.nodes}
    assert used == {"dgx01": 8, "dgx02": 8, "dgx03": 8, "dgx04": 0, "dgx05": 8,
                    "dgx06": 8, "dgx07": 8, "dgx08": 0}
    free = {n.name: n.gpus_free for n in snap.nodes if n.gpus_free}
    assert free == {"dgx04": 8}  # fragmentation: one whole node free
    n = snap.node("dgx01")
    assert dict(n.gpus_by_type) == {"h100": 8}
    assert n.features == ("h100", "nvl_rack1", "leaf1")
    assert n.partitions == ("prod", "research")
    assert n.cpus == 8 and n.memory_mb == 64000


def test_gpu_use_derived_from_jobs_when_gres_used_missing(snap):
    # As with pyslurm (allocated_gres empty): the jobs' allocations decide.
    from dataclasses import replace
    bare = [replace(n, gpus_alloc_by_type=parse._UNKNOWN_ALLOC) for n in snap.nodes]
    derived = {n.name: dict(n.gpus_alloc_by_type) for n in parse.derive_gpu_use(bare, snap.jobs)}
    assert derived["dgx07"] == {"h100": 8}  # job 2 (4) + array tasks 0,1 (2+2)
    assert derived["dgx01"] == {"h100": 8}
    assert derived["dgx04"] == {"h100": 0}  # idle: listed at 0, as gres_used prints it
    assert sum(sum(v.values()) for v in derived.values()) == 48


def test_job_9_pending_resources(snap):
    j = snap.job(9)
    assert j.state is JobState.PENDING and j.reason == "Resources"
    assert (j.node_count, j.gpus_per_node, j.gpus) == (6, 8, 48)
    assert j.user == "bob" and j.account == "nlp" and j.partition == "research"
    assert j.time_limit == 2 * 86400
    assert j.nodes == ()
    assert j.priority == 42


def test_dependency_and_held(snap):
    j10, j11 = snap.job(10), snap.job(11)
    assert j10.reason == "Dependency" and j10.dependency.startswith("afterok:1")
    assert j10.gpus == 1
    assert j11.reason == "JobHeldUser" and j11.is_held


def test_array_tasks(snap):
    tasks = sorted((j for j in snap.jobs if j.array_job_id == 3), key=lambda j: j.array_task_id)
    assert [j.array_task_id for j in tasks] == [0, 1, 2, 3, 4, 5]
    assert [j.display_id for j in tasks][:2] == ["3_0", "3_1"]
    assert all(j.gpus_per_node == 2 and j.state is JobState.RUNNING for j in tasks)
    assert snap.job(1).array_job_id is None and snap.job(1).array_task_id is None


def test_job_1_running_with_comments(snap):
    j = snap.job(1)
    assert j.state is JobState.RUNNING and j.reason == "None"
    assert j.user == "alice" and j.user_id == 1001 and j.account == "vision"
    assert j.admin_comment == "spolicy:v1 class=research ckpt=signal:USR1,grace=120"
    assert j.comment == "ckpt:1796218000"
    assert j.requeue is True and j.restart_count == 0
    assert j.nodes == ("dgx05", "dgx06")
    assert dict(j.gpus_on_node) == {"dgx05": 8, "dgx06": 8}
    assert (j.gpus_per_node, j.gpus, j.gpu_type) == (8, 16, "h100")
    assert j.submit_time and j.start_time and j.end_time
    assert j.end_time - j.start_time == 2 * 86400
    assert j.memory_mb == 16384 and j.cpus == 2


def test_job_12_in_prod(snap):
    j = snap.job(12)
    assert j.partition == "prod" and j.state is JobState.RUNNING
    assert j.nodes == ("dgx02", "dgx03") and j.gpus == 16 and j.requeue
    assert j.time_limit == 7 * 86400


def test_reservation_maint(snap):
    r = snap.reservation("maint")
    assert r.nodes == ("dgx07",)
    assert "MAINT" in r.flags
    assert r.end_time - r.start_time == 4 * 3600
    assert r.users == ("root",) and r.accounts == ()
    assert not r.is_active(snap.taken_at)  # starts in one day


def test_partitions(snap):
    prod, research = snap.partition("prod"), snap.partition("research")
    assert prod.priority_tier == 10 and research.priority_tier == 1
    assert prod.max_time == 7 * 86400 and research.max_time == 2 * 86400
    assert len(prod.nodes) == 8


def test_partitions_text_has_mode_and_default():
    # The text form (read live on every release) carries what 25.11's JSON lacks.
    text = (FIXTURES / "slurm-22.05" / "scontrol-show-partitions.txt").read_text()
    parts = {p.name: p for p in parse.partitions_from_text(text)}
    assert parts["research"].default and not parts["prod"].default
    assert parts["prod"].preempt_mode == "REQUEUE"


def test_site_factors_from_sprio_long():
    for rel in RELEASES:
        text = (FIXTURES / rel / "sprio.txt").read_text()
        assert parse.site_factors_from_sprio(text) == {9: 0}
    assert parse.site_factors_from_sprio("9|1000\n  10|-5\n") == {9: 1000, 10: -5}


# ----------------------------------------------------------------- text form

def test_oneliner_values_with_spaces():
    line = (FIXTURES / "slurm-22.05" / "scontrol-show-jobs.txt").read_text().splitlines()[0]
    f = parse.parse_oneliner(line)
    assert f["AdminComment"] == "spolicy:v1 class=research ckpt=signal:USR1,grace=120"
    assert f["Comment"] == "ckpt:1796218000"
    assert f["TresPerNode"] == "gres:gpu:8"
    nodes = (FIXTURES / "slurm-22.05" / "scontrol-show-nodes.txt").read_text().splitlines()
    f8 = parse.parse_oneliner(nodes[-1], parse.NODE_KEYS)
    assert f8["Reason"].startswith("ib link flapping [root@")
    assert f8["OS"].startswith("Linux 6.18.44-fc-v1045 #1 SMP")
    assert f8["State"] == "IDLE+DRAIN"
    assert parse.node_state(f8["State"]) == ("IDLE", frozenset({"DRAIN"}))


def test_text_form_tolerates_keys_of_newer_releases():
    line = ("PartitionName=gpu AllowGroups=ALL Default=YES Nodes=dgx[01-02] "
            "TopologyName=default PowerDownOnIdle=NO PriorityTier=5 PreemptMode=REQUEUE "
            "MaxTime=UNLIMITED State=UP")
    (p,) = parse.partitions_from_text(line + "\n")
    assert p.nodes == ("dgx01", "dgx02") and p.priority_tier == 5 and p.max_time is None


def test_reservation_text_times_are_local():
    text = (FIXTURES / "slurm-22.05" / "scontrol-show-reservations.txt").read_text()
    (r,) = parse.reservations_from_text(text)
    assert time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(r.start_time)) == "2026-12-03T13:53:16"


# ----------------------------------------------------------------- shapes

def _squeue(rel: str) -> dict:
    return json.loads((FIXTURES / rel / "squeue.json").read_bytes())


@pytest.mark.parametrize("rel", RELEASES)
@pytest.mark.parametrize("field", ["job_id", "job_state", "user_name", "partition"])
def test_missing_required_field_is_named(rel, field):
    doc = _squeue(rel)
    del doc["jobs"][3][field]
    with pytest.raises(SlurmParseError) as err:
        parse.decode_jobs(json.dumps(doc).encode())
    assert f"`{field}`" in str(err.value)


@pytest.mark.parametrize("rel", RELEASES)
def test_missing_node_name_is_named(rel):
    name = "sinfo.json" if rel == "slurm-22.05" else "scontrol-show-nodes.json"
    doc = json.loads((FIXTURES / rel / name).read_bytes())
    del doc["nodes"][0]["name"]
    with pytest.raises(SlurmParseError, match="`name`"):
        parse.decode_nodes(json.dumps(doc).encode())


def test_missing_jobs_list_is_named():
    with pytest.raises(SlurmParseError, match="`jobs`"):
        parse.decode_jobs(b'{"meta": {}, "errors": []}')


@pytest.mark.parametrize("rel", RELEASES)
def test_unknown_fields_ignored(rel):
    doc = _squeue(rel)
    for j in doc["jobs"]:
        j["field_from_the_future"] = {"nested": [1, 2, {"x": None}]}
        j["gpu_affinity"] = "whatever"
    doc["new_top_level"] = 5
    jobs, release, _, _ = parse.decode_jobs(json.dumps(doc).encode())
    assert len(jobs) == 12 and release


def test_slurm_errors_in_document_raise():
    with pytest.raises(SlurmError, match="Invalid user"):
        parse.decode_jobs(b'{"jobs": [], "errors": [{"description": "Invalid user"}]}')


def test_unknown_job_state_is_a_parse_error():
    doc = _squeue("slurm-25.11")
    doc["jobs"][0]["job_state"] = ["WIBBLING"]
    with pytest.raises(SlurmParseError, match="job_state"):
        parse.decode_jobs(json.dumps(doc).encode())


def test_non_utf8_bytes_replaced_deterministically():
    raw = (FIXTURES / "slurm-22.05" / "squeue.json").read_bytes()
    raw = raw.replace(b'"name": "bert-ft"', b'"name": "bert-\xff\xfe-ft"')
    jobs, *_ = parse.decode_jobs(raw)
    assert {j.job_id: j.name for j in jobs}[2] == "bert-\ufffd\ufffd-ft"


def test_job_state_flags_and_node_suffixes():
    assert parse.job_state(["PENDING", "REQUEUED"]) == (JobState.PENDING, frozenset({"REQUEUED"}))
    assert parse.job_state("COMPLETING")[0] is JobState.COMPLETED
    assert parse.node_state("idle*") == ("IDLE", frozenset({"NOT_RESPONDING"}))
    assert parse.node_state(["MIXED", "DRAIN", "RESERVED"]) == (
        "MIXED", frozenset({"DRAIN", "RESERVED"}))
    assert parse.node_state("mixed", ["DRAIN"]) == ("MIXED", frozenset({"DRAIN"}))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:h100:8(S:0-1)", {"h100": 8}),
        ("gpu:h100:4(IDX:0-3)", {"h100": 4}),
        ("gpu:h100:2(IDX:0,3),nic:1", {"h100": 2}),
        ("gpu:h100:0(IDX:N/A)", {"h100": 0}),
        ("gpu:8", {"": 8}),
        ("gpu", {"": 1}),
        ("gres:gpu:8", {"": 8}),
        ("gres/gpu:8", {"": 8}),
        ("gres/gpu:a100:2,gres/gpu:h100:4", {"a100": 2, "h100": 4}),
        ("cpu=2,mem=32G,node=2,billing=2,gres/gpu=16", {"": 16}),
        ("gres/gpu:h100=16", {"h100": 16}),
        ("gres/shard:4", {}),
        ("", {}),
        ("(null)", {}),
    ],
)
def test_gres_strings(text, expected):
    assert dict(parse.gpus_by_type(text)) == expected


def test_numbers_of_both_shapes():
    assert parse.num(parse.Num(set=True, infinite=False, number=5)) == 5
    assert parse.num(parse.Num(set=False, number=5)) is None
    assert parse.num(parse.Num(infinite=True)) is None
    assert parse.num(4294967295) is None and parse.num(4294967294) is None
    assert parse.minutes(60) == 3600 and parse.epoch(0) is None


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("scontrol: error: Slurm job queue empty or Invalid job id specified", "JobGone"),
        ("scancel: error: Kill job error on job id 5: Invalid job id specified", "JobGone"),
        ("squeue: error: Unable to contact slurm controller (connect failure)", "SlurmUnavailable"),
        ("error: Munge decode failed: Expired credential", "SlurmUnavailable"),
        ("Requeue of JobId=5 returned an error: Job is pending execution", "JobAlreadyPending"),
        ("scancel: error: Kill job error on job id 5: Job/step already completing or completed",
         "JobAlreadyFinished"),
        ("slurm_update error: Access/permission denied", "PermissionDenied"),
        ("Error creating the reservation: Requested nodes are busy", "ReservationError"),
    ],
)
def test_error_classification(message, kind):
    from slurmpolicy.errors import ReservationError
    err = classify(message, "scontrol x", ReservationError)
    assert type(err).__name__ == kind
    assert err.slurm_message == message


def test_parse_signal():
    assert parse_signal("USR1") == parse_signal("SIGUSR1") == parse_signal("usr1") == "USR1"
    assert parse_signal("15") == "TERM"
    with pytest.raises(ValueError, match="allowed"):
        parse_signal("KILLALL")


def test_fixture_folder_exists():
    # A missing fixtures folder would otherwise make the parametrized tests error out obscurely.
    assert FIXTURES.is_dir(), f"fixtures expected at {FIXTURES} (tests/fixtures/slurm)"
    assert os.listdir(FIXTURES / "slurm-25.11")


def test_submit_line_recorded_by_25_11_only():
    """23.02+ record the sbatch command line (a command-line --signal is there);
    22.05 does not; no version lists a job's warning signal itself."""
    old = parse.load_dir(FIXTURES / "slurm-22.05").job(1)
    new = parse.load_dir(FIXTURES / "slurm-25.11").job(1)
    assert old is not None and old.submit_line == ""
    assert new is not None and new.submit_line.startswith("sbatch -p research -N2 --gres=gpu:8")
    assert new.batch_signal == "" and old.batch_signal == ""


def test_the_default_listing_rule_keeps_what_squeue_listed():
    """jsoncli lists every state once on 23.02+ and keeps, for the snapshot,
    what squeue lists by default (squeue/print.c): every job of 25.11's
    recorded default listing; not an ended job, unless it is completing."""
    from dataclasses import replace

    from slurmpolicy.slurm.jsoncli import _listed_by_default

    modern, _, _, _ = parse.decode_jobs(
        (FIXTURES / "slurm-25.11" / "squeue.json").read_bytes(), {}, time.time())
    assert modern and all(_listed_by_default(j) for j in modern)
    job = modern[0]
    for state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                  JobState.PREEMPTED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY):
        assert not _listed_by_default(replace(job, state=state, state_flags=frozenset()))
        assert _listed_by_default(replace(job, state=state,
                                          state_flags=frozenset({"COMPLETING"})))
    assert _listed_by_default(replace(job, state=JobState.SUSPENDED))
