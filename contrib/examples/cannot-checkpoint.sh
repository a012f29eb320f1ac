#!/bin/bash
#SBATCH --job-name=legacy-sim
#SBATCH --nodes=2
#SBATCH --gres=gpu:4
#SBATCH --time=08:00:00
# This code cannot save its state: say so, and it is not chosen as a victim
# for a preemption that would only lose its work. A site may allow such jobs
# only in some partitions (settings: preemption.no_checkpoint_partitions).
#SPOLICY --class=experimental
#SPOLICY --checkpoint=none

srun ./simulate --steps 100000
