#!/bin/bash
#SBATCH --job-name=release-eval
#SBATCH --account=prod
#SBATCH --partition=prod
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --time=06:00:00
#SPOLICY --class=production
#SPOLICY --preemptible=no
#SPOLICY --topology=nvlink
#SPOLICY --expected-runtime=4h

srun python evaluate.py --suite release
