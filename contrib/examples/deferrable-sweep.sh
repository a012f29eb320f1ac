#!/bin/bash
#SBATCH --job-name=hparam-sweep
#SBATCH --array=0-31
#SBATCH --gres=gpu:1
#SBATCH --time=04:00:00
# May wait for the cheaper "night" window (settings: deferral.windows), but
# must be released at the latest one day after submission.
#SPOLICY --class=experimental
#SPOLICY --deferrable=night,deadline=1d
#SPOLICY --checkpoint=signal:TERM,grace=60s

srun python sweep.py --trial "$SLURM_ARRAY_TASK_ID"
