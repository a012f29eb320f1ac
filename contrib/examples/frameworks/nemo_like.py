"""A training job that answers preemption as NeMo's PreemptionCallback does:
on SIGTERM it finishes the current step, saves a checkpoint and exits
cleanly (exit status 0); started again, it resumes from that checkpoint.
Standard library only (no torch, no NeMo), so that tests can run it as any
user.

NeMo (nemo/utils/callbacks/preemption.py) installs a SIGTERM handler that
sets a flag; at the end of each training step, if the flag is set, it saves
a checkpoint and stops the trainer. The batch script asks Slurm for the
signal (nothing slurmpolicy-specific)::

    #SBATCH --signal=TERM@120
    #SBATCH --requeue
    srun python3 nemo_like.py --root DIR --steps 40

The "model" sums the step numbers; the result is written to DIR/result.
Every step and checkpoint is logged to DIR/progress, for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    args = parser.parse_args()
    root: Path = args.root
    restart = os.environ.get("SLURM_RESTART_COUNT", "0") or "0"
    ckpt = root / "last.ckpt"

    def log(line: str) -> None:
        with open(root / "progress", "a") as out:
            out.write(f"{line} restart {restart}\n")

    preempted = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal preempted
        preempted = True  # PreemptionCallback: checked at the end of the step

    signal.signal(signal.SIGTERM, on_sigterm)
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
        if preempted:
            tmp = root / "last.tmp"
            tmp.write_text(json.dumps({"step": step, "total": total}))
            tmp.rename(ckpt)
            log(f"checkpoint at step {step}")
            print("Received SIGTERM, saved a checkpoint; exiting", flush=True)
            return
    (root / "result").write_text(f"{total}\n")
    log(f"finished at step {step}")


if __name__ == "__main__":
    main()
