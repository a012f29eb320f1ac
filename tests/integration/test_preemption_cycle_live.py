"""The policy's preemption state machine against a real local Slurm.

A minimal executor (the daemon's job, reduced to the Slurm calls) carries out
each cycle's Plan through the JSON CLI adapter and advances the intents with
``apply_to_intents``: the reservation is made, the victim gets its checkpoint
signal, acknowledges through its own comment, is requeued (never cancelled),
and the higher-class job starts on the reserved nodes.
"""

from __future__ import annotations

import contextlib
import math
import time

import pytest

from slurmpolicy.errors import ReservationError, SlurmError
from slurmpolicy.policy import apply_to_intents, plan
from slurmpolicy.policy.actions import (
    DeleteReservation,
    FinishPreemption,
    Intents,
    Requeue,
    SignalCheckpoint,
    StartPreemption,
)
from slurmpolicy.settings import from_mapping
from slurmpolicy.slurm.client import ReservationSpec, SlurmClient
from slurmpolicy.topology import Fabric

from .slurmtools import adapter_client

pytestmark = pytest.mark.slurm
LOW = "spolicy:v1 class=experimental ckpt=signal:USR1,grace=60"
HIGH = "spolicy:v1 class=production ckpt=signal:USR1,grace=60"

#: A job that acknowledges a checkpoint through Slurm when it gets USR1.
VICTIM = """#!/bin/bash
trap 'scontrol update jobid=$SLURM_JOB_ID comment=ckpt:$(date +%s.%N); \
echo "USR1 $(date +%s.%N)" >> "$PWD/trap.$SLURM_JOB_ID"' USR1
echo "started $SLURM_JOB_ID" >> "$PWD/started.$SLURM_JOB_ID"
while [ ! -e "$PWD/release.$SLURM_JOB_ID" ]; do sleep 0.2; done
"""


def execute(client: SlurmClient, p, now: float, done: list[str]) -> None:
    for a in p.actions:
        if isinstance(a, StartPreemption):
            # An hour beyond the job's limit, as the daemon's executor does: Slurm
            # 25.11 lets a job into a MAGNETIC reservation only if its limit ends
            # within it, and the reservation starts at the snapshot's time, a
            # moment before the job can start (22.05 let it in regardless).
            client.create_reservation(ReservationSpec(
                name=a.reservation, nodes=a.nodes, start_time=now,
                duration_minutes=max(1, math.ceil((a.duration + 3600) / 60)),
                users=(a.user,),
                flags=("IGNORE_JOBS", "MAGNETIC")))
        elif isinstance(a, SignalCheckpoint):
            client.signal(a.job_id, a.signal, "batch")
        elif isinstance(a, Requeue):
            client.requeue(a.job_id)
        elif isinstance(a, DeleteReservation):
            with contextlib.suppress(ReservationError):
                client.delete_reservation(a.name)
        else:
            continue
        done.append(a.kind)
        print(f"{time.monotonic():.1f} {a.kind}: {a.reason}")


def test_checkpoint_first_preemption_cycle(devcluster, tmp_path):
    dc = devcluster
    dc.wait_idle()
    wd = dc.workdir()
    client = adapter_client(dc)
    settings = from_mapping({"preemption": {"min_runtime": 0}})
    victims: list[int] = []
    beneficiary = None
    reservation = ""
    try:
        for _ in range(4):
            victims.append(dc.submit(VICTIM, workdir=wd, extra_args=[
                "-p", "research", "-N2", "--gres=gpu:8", "--requeue"]))
        for job in victims:
            dc.wait_state(job, "RUNNING")
            dc.slurm_cmd("scontrol", "update", f"jobid={job}", f"AdminComment={LOW}")
        beneficiary = dc.submit(dc.hold_script(), workdir=wd,
                                extra_args=["-p", "research", "-N2", "--gres=gpu:8"])
        dc.slurm_cmd("scontrol", "update", f"jobid={beneficiary}", f"AdminComment={HIGH}")
        dc.wait_state(beneficiary, "PENDING")

        intents = Intents()
        done: list[str] = []
        start = None
        finished = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and finished is None:
            snap = client.snapshot()
            fabric = Fabric.from_sources(snap.nodes, settings.fabric, None)
            p = plan(snap, fabric, settings, intents, snap.taken_at)
            for a in p.actions:
                if isinstance(a, StartPreemption):
                    assert start is None, "a second preemption was started"
                    start = a
                    reservation = a.reservation
                if isinstance(a, Requeue):
                    # Only after the victim acknowledged the signal.
                    assert a.after == "acknowledged", a.reason
                if isinstance(a, FinishPreemption):
                    finished = a
            try:
                execute(client, p, snap.taken_at, done)
            except SlurmError as exc:  # a transient refusal: try again next cycle
                print(f"cycle error: {exc}")
                continue
            intents = apply_to_intents(intents, p, snap.taken_at)
            time.sleep(1)

        assert start is not None and start.beneficiary == beneficiary
        assert finished is not None and not finished.aborted, (done, finished)
        assert done[:2] == ["StartPreemption", "SignalCheckpoint"]
        assert "Requeue" in done and done[-1] == "DeleteReservation"
        (victim,) = start.victims
        # The victim saw the signal, acknowledged it, and was requeued, not cancelled.
        assert (wd / f"trap.{victim}").exists()
        info = dc.scontrol_show_job(victim)
        assert int(info.get("Restarts", "0")) >= 1
        assert info.get("JobState") in {"PENDING", "RUNNING", "REQUEUED"}
        # The beneficiary runs on the nodes the plan chose.
        ben = dc.wait_state(beneficiary, "RUNNING")
        from slurmpolicy.hostlist import expand

        assert tuple(expand(ben["NodeList"])) == start.nodes
    finally:
        print(f"{time.monotonic():.1f} cleanup")
        if reservation:
            with contextlib.suppress(SlurmError):
                client.delete_reservation(reservation)
        for job in [*victims, *([beneficiary] if beneficiary else [])]:
            dc.release(job, wd)
        for job in victims:
            # A requeued job waits out Slurm's requeue delay; let it go now (never scancel).
            if dc.job_state(job) == "PENDING":
                dc.slurm_cmd("scontrol", "update", f"jobid={job}", "StartTime=now", check=False)
        for job in [*victims, *([beneficiary] if beneficiary else [])]:
            dc.wait_state(job, "COMPLETED", timeout=120)
