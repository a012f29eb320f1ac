"""A training job that only checkpoints periodically (torchtitan's
``checkpoint.interval``, most plain loops): every ``--every`` steps it writes
a checkpoint; it has no signal handler at all, so a requeue simply kills it,
and started again it resumes from its last checkpoint. Standard library
only, so that tests can run it as any user.

Its batch script tells slurmpolicy the interval (nothing in the code)::

    #SBATCH --requeue
    #SPOLICY --checkpoint=periodic,interval=30m
    srun python3 periodic.py --root DIR --steps 40 --every 4

The "model" sums the step numbers; the result is written to DIR/result.
Every step and checkpoint is logged to DIR/progress, for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    args = parser.parse_args()
    root: Path = args.root
    restart = os.environ.get("SLURM_RESTART_COUNT", "0") or "0"
    ckpt = root / "step.ckpt"

    def log(line: str) -> None:
        with open(root / "progress", "a") as out:
            out.write(f"{line} restart {restart}\n")

    step = total = 0
    if ckpt.exists():
        state = json.loads(ckpt.read_text())
        step, total = state["step"], state["total"]
        log(f"resumed at step {step}")
    while step < args.steps:
        time.sleep(args.step_seconds)
        step += 1
        total += step
        log(f"step {step}")
        if step % args.every == 0:
            tmp = root / "step.tmp"
            tmp.write_text(json.dumps({"step": step, "total": total}))
            tmp.rename(ckpt)
            log(f"checkpoint at step {step}")
    (root / "result").write_text(f"{total}\n")
    log(f"finished at step {step}")


if __name__ == "__main__":
    main()
