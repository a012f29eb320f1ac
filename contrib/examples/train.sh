#!/bin/bash
# A shell training job that takes part in slurmpolicy's checkpoint handshake.
#
#   sbatch --gres=gpu:8 --requeue contrib/examples/train.sh
#
# On the checkpoint signal (USR1 here) it saves its state and acknowledges
# with `slurmpolicy ckpt ack --requeue`: when slurmpolicy is preempting it,
# the job requeues itself right there, having lost nothing; when it is not
# (the preemption was called off, or the signal was Slurm's own before the
# time limit), it keeps going. When Slurm starts it again
# ($SLURM_RESTART_COUNT > 0) it resumes from the checkpoint. REQUEUE_ON_ACK=0
# acknowledges only: it trains on until slurmpolicy requeues it, and the work
# since the save (up to daemon.ack_poll) is lost.
#
#SBATCH --job-name=train-example
#SBATCH --requeue
#SBATCH --open-mode=append
#SPOLICY --class=research
#SPOLICY --checkpoint=signal:USR1,grace=60s

# Knobs (environment): where to keep the checkpoint, how long to "train".
CKPT_DIR=${CKPT_DIR:-$PWD}
STEPS=${STEPS:-600}
STEP_SECONDS=${STEP_SECONDS:-1}
CKPT_EVERY=${CKPT_EVERY:-0}          # periodic checkpoints every N steps (0: none)
REQUEUE_ON_ACK=${REQUEUE_ON_ACK:-1}  # 1: requeue itself on its ack when being preempted
SLURMPOLICY=${SLURMPOLICY:-slurmpolicy}
CKPT="$CKPT_DIR/ckpt.$SLURM_JOB_ID"

step=0
if [ -s "$CKPT" ]; then
    step=$(cat "$CKPT")
    echo "resumed $SLURM_JOB_ID at step $step (restart ${SLURM_RESTART_COUNT:-0})"
else
    echo "started $SLURM_JOB_ID at step 0"
fi

save() {
    # Write then rename, so that a kill mid-write never leaves half a checkpoint.
    echo "$step" > "$CKPT.tmp" && mv "$CKPT.tmp" "$CKPT"
}

on_checkpoint_signal() {
    save
    echo "checkpoint at step $step; acknowledging"
    if [ "$REQUEUE_ON_ACK" = 1 ]; then
        "$SLURMPOLICY" ckpt ack --requeue || echo "acknowledgement failed" >&2
    else
        "$SLURMPOLICY" ckpt ack || echo "acknowledgement failed" >&2
    fi
    # Keep training until Slurm stops the job (our requeue, or slurmpolicy's).
}
trap on_checkpoint_signal USR1

while [ "$step" -lt "$STEPS" ]; do
    # `sleep & wait` so that the trap runs as soon as the signal arrives.
    sleep "$STEP_SECONDS" & wait $!
    step=$((step + 1))
    if [ "$CKPT_EVERY" -gt 0 ] && [ $((step % CKPT_EVERY)) -eq 0 ]; then
        save && "$SLURMPOLICY" ckpt ack > /dev/null
    fi
done
save
echo "finished $SLURM_JOB_ID at step $step"
