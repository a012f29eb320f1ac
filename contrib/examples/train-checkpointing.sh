#!/bin/bash
#SBATCH --job-name=llm-pretrain
#SBATCH --nodes=4
#SBATCH --gres=gpu:h100:8
#SBATCH --time=2-00:00:00
#SBATCH --signal=B:USR1@300
#SPOLICY --class=research
#SPOLICY --checkpoint=signal:USR1,grace=5m,interval=30m
#SPOLICY --preemptible=after=1h
#SPOLICY --topology=leaf,strict
#SPOLICY --expected-runtime=1-12:00:00
#SPOLICY --gpu-type=h100 --min-gpu-memory=80G
#SPOLICY --data=c4-en

# The batch shell receives USR1 (from slurmpolicy before a preemption, and
# from Slurm 300 s before the time limit); pass it on to the trainer, which
# writes a checkpoint and exits. The job is requeued and resumes from it.
trap 'kill -USR1 "$child"; wait "$child"' USR1
srun python train.py --resume-from latest &
child=$!
wait "$child"
