#!/bin/bash
#SBATCH --nodes=1
# Every #SPOLICY line below is wrong; sbatch refuses the job and says why:
#   slurmpolicy directives check contrib/examples/invalid.sh
#SPOLICY --class=reserch
#SPOLICY --checkpoint=signal:KILL,grace=2m
#SPOLICY --topologie=leaf
#SPOLICY --expected-runtime=1h30m

srun hostname
