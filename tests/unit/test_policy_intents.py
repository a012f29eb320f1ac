"""apply_to_intents: Intents advance from a Plan as the executor records them."""

from slurmpolicy.policy import apply_to_intents
from slurmpolicy.policy.actions import (
    CreateReservation,
    DeleteReservation,
    FinishPreemption,
    Intents,
    Plan,
    PreemptionState,
    Requeue,
    SetBeginTime,
    SetSiteFactor,
    SignalCheckpoint,
    StartPreemption,
    UpdateReservation,
    VictimState,
)

T = 1_800_000_000.0


def test_every_action_kind_lands_in_intents():
    start = StartPreemption(reason="r", preemption_id="pre-1", beneficiary=1, victims=(7, 8),
                            restart_counts=(0, 2), nodes=("a", "b"), reservation="spolicy_pre_1")
    i = apply_to_intents(Intents(), Plan(actions=(
        start,
        SetSiteFactor(reason="r", job_id=3, site_factor=500),
        SetBeginTime(reason="r", job_id=4, begin_time=T + 60),
        CreateReservation(reason="r", name="spolicy_job_5", job_id=5, nodes=("c",),
                          start_time=T + 600, duration=3600, user="u"),
    )), T)
    (p,) = i.preemptions
    assert p.state is PreemptionState.RESERVED and p.started_at == T
    assert [(v.job_id, v.restart_count, v.state) for v in p.victims] == [
        (7, 0, VictimState.PLANNED), (8, 2, VictimState.PLANNED)]
    assert i.site_factors == {3: 500} and i.begin_times == {4: T + 60}
    assert [r.name for r in i.reservations] == ["spolicy_job_5"]

    i = apply_to_intents(i, Plan(actions=(
        SignalCheckpoint(reason="r", preemption_id="pre-1", job_id=7, restart_count=0,
                         signal="USR1", deadline=T + 130),
        UpdateReservation(reason="r", name="spolicy_job_5", job_id=5, nodes=("d",),
                          start_time=T + 900, duration=3600, user="u"),
    )), T + 10)
    v7 = i.preemptions[0].victims[0]
    assert v7.state is VictimState.SIGNALLED and v7.signalled_at == T + 10
    assert v7.deadline == T + 130 and i.preemptions[0].state is PreemptionState.SIGNALLED
    assert i.reservations[0].nodes == ("d",) and i.reservations[0].start_time == T + 900

    i = apply_to_intents(i, Plan(actions=(
        Requeue(reason="r", preemption_id="pre-1", job_id=7, restart_count=0, after="deadline"),
        Requeue(reason="r", preemption_id="pre-1", job_id=8, restart_count=2,
                after="acknowledged"),
        DeleteReservation(reason="r", name="spolicy_job_5", job_id=5),
    )), T + 140)
    assert i.preemptions[0].state is PreemptionState.REQUEUED
    assert i.preempted_at == {7: (T + 140,), 8: (T + 140,)}
    assert i.missed_acks == {7: 1}
    assert not i.reservations

    i = apply_to_intents(i, Plan(actions=(
        FinishPreemption(reason="r", preemption_id="pre-1"),)), T + 200)
    assert i.preemptions[0].state is PreemptionState.DONE and not i.open_preemptions()


def test_aborted_and_unknown_ids_are_harmless():
    i = apply_to_intents(Intents(), Plan(actions=(
        FinishPreemption(reason="r", preemption_id="nope", aborted=True),
        SignalCheckpoint(reason="r", preemption_id="nope", job_id=1, restart_count=0,
                         signal="USR1", deadline=T),
        DeleteReservation(reason="r", name="spolicy_job_9"),
    )), T)
    assert i == Intents()
