"""A real submitit Checkpointable job, submitted with submitit's own
SlurmExecutor (which writes ``#SBATCH --signal=USR2@90`` and runs the
function under ``srun``). On USR2 submitit pickles the Trainer (its state
included) and runs ``scontrol requeue`` itself; started again, it calls the
unpickled Trainer, which carries on from where it was.

    python3 submitit_job.py submit --folder DIR [--partition P --gres gpu:8]
    python3 submitit_job.py result --folder DIR --job ID

The "model" sums the step numbers; every step is logged to DIR/progress.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import submitit


class Trainer(submitit.helpers.Checkpointable):
    """Checkpointable: submitit's default checkpoint() resubmits this very
    object, pickled with its state (step, total)."""

    def __init__(self) -> None:
        self.step = 0
        self.total = 0

    def __call__(self, root: str, steps: int, step_seconds: float) -> int:
        restart = os.environ.get("SLURM_RESTART_COUNT", "0") or "0"
        progress = Path(root) / "progress"

        def log(line: str) -> None:
            with open(progress, "a") as out:
                out.write(f"{line} restart {restart}\n")

        if self.step:
            log(f"resumed at step {self.step}")
        while self.step < steps:
            time.sleep(step_seconds)
            self.step += 1
            self.total += self.step
            log(f"step {self.step}")
        log(f"finished at step {self.step}")
        return self.total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("submit", "result"))
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--job", default="")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--partition", default="")
    parser.add_argument("--gres", default="")
    parser.add_argument("--python", default="")
    args = parser.parse_args()
    if args.command == "result":
        # The job's own result file, as submitit wrote it: ("success", value).
        # (SlurmJob.result() would ask sacct, which needs Slurm's accounting.)
        outcome, value = submitit.core.utils.pickle_load(
            submitit.SlurmJob(args.folder, args.job).paths.result_pickle)
        print(f"{outcome} {value}")
        return
    executor = submitit.SlurmExecutor(folder=args.folder, python=args.python or None)
    params: dict[str, object] = {"time": 30, "nodes": 1, "ntasks_per_node": 1}
    if args.partition:
        params["partition"] = args.partition
    if args.gres:
        params["gres"] = args.gres
    executor.update_parameters(**params)
    job = executor.submit(Trainer(), str(args.folder), args.steps, args.step_seconds)
    print(job.job_id)


if __name__ == "__main__":
    main()
