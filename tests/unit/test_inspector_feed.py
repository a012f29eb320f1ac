"""The inspector's reads: the daemon's journal (a real one, written by
slurmpolicy.store), cut down to the jobs Slurm shows the caller; explanations
through policy.explain(); ``why``'s JSON and job-id parsing."""

from __future__ import annotations

import json

import click
import pytest
from inspector_scenario import NOW, small_frame, small_snapshot

from slurmpolicy.commands.inspect import resolve_job, why_json
from slurmpolicy.errors import JobGone
from slurmpolicy.model import Snapshot
from slurmpolicy.store import Journal
from slurmpolicy.tui.feed import Feed, slurm_view
from slurmpolicy.tui.frame import HIDDEN_JOB


def visible_only(*job_ids: int) -> Snapshot:
    snap = small_snapshot()
    return Snapshot(taken_at=snap.taken_at, slurm_version=snap.slurm_version,
                    cluster_name=snap.cluster_name,
                    jobs=tuple(j for j in snap.jobs if j.job_id in job_ids), nodes=snap.nodes)


def test_missing_journal_says_policy_details_unavailable(tmp_path):
    feed = Feed(journal=tmp_path / "nowhere")
    intents, decisions, note = feed.journal(small_snapshot(), NOW)
    assert note.startswith("policy details unavailable: ")
    assert "nowhere" in note
    assert intents.preemptions == () and decisions == ()


def test_unreadable_journal_says_why(tmp_path):
    bad = tmp_path / "journal.sqlite"
    bad.write_text("not a database")
    _, _, note = Feed(journal=tmp_path).journal(small_snapshot(), NOW)
    assert note.startswith("policy details unavailable: ")


def write_journal(tmp_path):
    journal = Journal(tmp_path, clock=lambda: NOW - 100)
    journal.open_preemption("p-9-0", 9, ["dgx05", "dgx06", "dgx07"], "spolicy_p9",
                            [(1, 0, 16), (999, 0, 8)], reason="job 9 starving")
    journal.audit("SetSiteFactor", "class research", "ok", job_id=9, at=NOW - 50)
    journal.audit("SignalCheckpoint", "USR1 to a hidden job", "ok", job_id=999, at=NOW - 40)
    journal.audit("DeleteReservation", "spolicy_p42 no longer needed", "ok", at=NOW - 30)
    journal.close()


def test_journal_is_read_and_cut_to_what_slurm_shows(tmp_path):
    write_journal(tmp_path)
    feed = Feed(journal=tmp_path)
    intents, decisions, note = feed.journal(small_snapshot(), NOW)
    assert note == ""
    (p,) = intents.preemptions
    # Job 999 is not in what Slurm showed: neither its victim entry nor its audit row.
    assert p.beneficiary == 9 and [v.job_id for v in p.victims] == [1]
    assert [(d.kind, d.job_id) for d in decisions] == [("SetSiteFactor", 9)]


def test_journal_of_a_hidden_preemption_shows_nothing(tmp_path):
    write_journal(tmp_path)
    intents, decisions, _ = Feed(journal=tmp_path).journal(visible_only(10, 11), NOW)
    assert intents.preemptions == () and decisions == ()


def test_a_hidden_beneficiary_is_not_named_to_its_victims_owner(tmp_path):
    write_journal(tmp_path)
    intents, decisions, _ = Feed(journal=tmp_path).journal(visible_only(1, 10), NOW)
    (p,) = intents.preemptions
    assert p.beneficiary == HIDDEN_JOB and [v.job_id for v in p.victims] == [1]
    assert "9" not in p.preemption_id and "9" not in p.reservation
    assert decisions == ()


def test_journal_is_opened_read_only(tmp_path):
    write_journal(tmp_path)
    path = tmp_path / "journal.sqlite"
    before = path.read_bytes()
    path.chmod(0o444)
    try:
        _, _, note = Feed(journal=tmp_path).journal(small_snapshot(), NOW)
    finally:
        path.chmod(0o644)
    assert note == ""
    assert path.read_bytes() == before


def test_explain_uses_policy_with_journal_intents():
    frame = small_frame()
    exp = Feed().explain(frame, 9)
    assert exp.job_id == 9 and exp.state == "PENDING"
    assert exp.blocking == "preemption" and "p-9-0" in exp.blocking_text
    running = Feed().explain(frame, 12)
    assert running.preemption_candidate is False


def test_explain_unknown_job_is_job_gone():
    with pytest.raises(JobGone, match="not in the queue Slurm shows you"):
        Feed().explain(small_frame(), 4242)


def test_slurm_view_alone_still_explains():
    frame = small_frame()
    job = frame.snapshot.job(10)
    assert job is not None
    exp = slurm_view(frame, job, note="policy engine unavailable: test")
    assert exp.slurm_reason == "Dependency" and "depends" in exp.slurm_reason_text
    assert exp.position == 2 and exp.ahead_by_class == {"research": 1}
    assert exp.notes == ("policy engine unavailable: test",)


def test_effective_priorities_come_from_plan():
    frame = small_frame()
    feed = Feed()
    eff = feed.effective_priorities(frame.snapshot, feed.fabric(frame.snapshot),
                                    frame.intents, NOW)
    assert set(eff) >= {9, 10, 11}
    assert eff[9] != frame.snapshot.job(9).priority  # type: ignore[union-attr]


def test_why_json_shape():
    frame = small_frame(policy_note="policy details unavailable: no journal here")
    data = json.loads(json.dumps(why_json(frame, Feed().explain(frame, 9)), default=str))
    expected = {"job_id", "state", "headline", "job_class", "partition", "request", "position",
                "ahead_by_class", "effective_priority", "slurm_reason", "slurm_reason_text",
                "blocking", "blocking_text", "free_text", "estimated_start", "estimate_basis",
                "alternatives", "placement_text", "last_checkpoint", "preemption_candidate",
                "preemption_text", "notes", "policy_details_unavailable", "snapshot_time",
                "source"}
    assert set(data) == expected
    assert data["job_id"] == 9 and data["position"] == 1
    assert data["policy_details_unavailable"] == "no journal here"
    assert all(set(a) == {"change", "estimated_start", "detail"} for a in data["alternatives"])


def test_resolve_job_ids():
    frame = small_frame()
    assert resolve_job(frame, "9") == 9
    assert resolve_job(frame, "3_2") == 5
    with pytest.raises(click.BadParameter, match=r"allowed: 123, 123_4"):
        resolve_job(frame, "nine")
    with pytest.raises(JobGone):
        resolve_job(frame, "4242")


def test_fabric_domains_and_degraded_links_from_a_real_fabric():
    from slurmpolicy.topology.spec import LinkSpec
    from slurmpolicy.topology.types import Health
    from slurmpolicy.tui.feed import domains_of

    snap = small_snapshot()
    feed = Feed()
    fab = feed.fabric(snap)
    assert fab is not None, feed.fabric_note
    leaf_of, nvlink_of, degraded = domains_of(fab, snap, feed.settings)
    assert leaf_of["dgx01"] == "leaf1" and leaf_of["dgx08"] == "leaf2"
    assert nvlink_of["dgx05"] == nvlink_of["dgx06"] != nvlink_of["dgx01"]
    assert degraded == ()
    worse = fab.with_links([LinkSpec(a="dgx08", b=leaf_of["dgx08"], health=Health.DEGRADED)])
    _, _, degraded = domains_of(worse, snap, feed.settings)
    assert len(degraded) == 1 and "dgx08" in degraded[0] and "degraded" in degraded[0]
