"""``slurmpolicy ckpt``: the job side of the checkpoint handshake, for shell jobs.

Thin on purpose: it runs inside training jobs, so it imports only
:mod:`slurmpolicy.job` (standard library).
"""

from __future__ import annotations

import click

from slurmpolicy import job as spjob
from slurmpolicy.errors import SlurmError


@click.group()
def ckpt() -> None:
    """Tell slurmpolicy, from inside a job, that a checkpoint is written."""


@ckpt.command("ack")
@click.option("--job", "job_id", type=int, default=None,
              help="Job id (default: $SLURM_JOB_ID).")
@click.option("--restart-count", type=int, default=None,
              help="Restart count to record (default: $SLURM_RESTART_COUNT).")
@click.option("--requeue", is_flag=True,
              help="Then requeue this job at once if slurmpolicy is preempting it "
                   "(its mark in the admin_comment), losing no work.")
def ack(job_id: int | None, restart_count: int | None, requeue: bool) -> None:
    """Acknowledge a checkpoint: write ckpt:<now> into this job's comment.

    Run it in the job's checkpoint-signal trap, after the checkpoint is on
    disk; the daemon then requeues the job (with --requeue, the job does, at
    once). Use it after periodic checkpoints too, so that a preemption knows
    how little work it loses.
    """
    rc = spjob.restart_count_from_env() if restart_count is None else restart_count
    try:
        if requeue:
            stamp, pid = spjob.acknowledge_and_requeue(job_id, restart_count=rc)
        else:
            stamp, pid = spjob.acknowledge(job_id, restart_count=rc), None
    except spjob.HandshakeError as exc:
        raise SlurmError(f"checkpoint not acknowledged, or not requeued: {exc}") from exc
    click.echo(f"ckpt:{stamp}")
    if pid is not None:
        click.echo(f"requeued for preemption {pid}")


@ckpt.command("report")
@click.argument("pairs", nargs=-1, required=True, metavar="NAME=VALUE...")
@click.option("--job", "job_id", type=int, default=None,
              help="Job id (default: $SLURM_JOB_ID).")
def report(pairs: tuple[str, ...], job_id: int | None) -> None:
    """Report figures Slurm does not know, e.g. data_mbps=250 (data loading
    throughput); the daemon keeps them in the job's timeline and averages them
    by class and account (docs/lifecycle.md)."""
    try:
        metrics = spjob.parse_metrics(list(pairs))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME=VALUE") from None
    try:
        spjob.report_metrics(metrics, job_id)
    except spjob.HandshakeError as exc:
        raise SlurmError(f"figures not reported: {exc}") from exc
    click.echo(" ".join(f"spm:{k}={v:g}" for k, v in metrics.items()))
