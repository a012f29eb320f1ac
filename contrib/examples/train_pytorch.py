#!/usr/bin/env python3
"""A PyTorch-style training script that takes part in slurmpolicy's
checkpoint handshake. It runs without torch too (it imports it only if
present), so that it can be tried anywhere.

    #!/bin/bash
    #SBATCH --gres=gpu:8 --requeue
    #SPOLICY --class=research
    #SPOLICY --checkpoint=signal:USR1,grace=120s,interval=30m
    srun python3 contrib/examples/train_pytorch.py --ckpt /shared/ckpt/run1.pt

On USR1, :func:`slurmpolicy.job.install` calls ``save()`` and then
acknowledges; slurmpolicy requeues the job and Slurm starts it again later,
when it resumes from the checkpoint. Periodic checkpoints are reported with
:func:`slurmpolicy.job.checkpointed`, so a preemption knows how little work it
would lose.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import slurmpolicy.job as spjob

try:  # Optional: the example also runs on a machine without torch.
    import torch
except ImportError:
    torch = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_ckpt = Path(f"ckpt.{os.environ.get('SLURM_JOB_ID', 'local')}")
    parser.add_argument("--ckpt", type=Path, default=default_ckpt)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument("--ckpt-every", type=int, default=0,
                        help="periodic checkpoint interval (steps)")
    args = parser.parse_args()

    state = {"step": 0, "weights": [0.0] * 4}
    model = torch.nn.Linear(4, 1) if torch is not None else None
    if args.ckpt.exists():
        if torch is not None:
            loaded = torch.load(args.ckpt)
            model.load_state_dict(loaded["model"])
            state["step"] = loaded["step"]
        else:
            state = json.loads(args.ckpt.read_text())
        restart = spjob.restart_count_from_env()
        print(f"resumed at step {state['step']} (restart {restart})", flush=True)

    lock = threading.Lock()  # the save runs in a thread; keep the state consistent

    def save() -> None:
        with lock:
            tmp = args.ckpt.with_suffix(".tmp")
            if torch is not None:
                torch.save({"model": model.state_dict(), "step": state["step"]}, tmp)
            else:
                tmp.write_text(json.dumps(state))
            tmp.replace(args.ckpt)  # atomic: never half a checkpoint
        print(f"checkpoint at step {state['step']}", flush=True)

    # Signal from $SPOLICY_CKPT_SIGNAL (default USR1): save, ack, and requeue
    # itself at once if slurmpolicy is preempting it (else it trains on).
    spjob.install(save, requeue=True)

    while state["step"] < args.steps:
        time.sleep(args.step_seconds)  # one "training step"
        with lock:
            state["step"] += 1
            state["weights"] = [w + 0.001 for w in state["weights"]]
        if args.ckpt_every and state["step"] % args.ckpt_every == 0:
            save()
            spjob.checkpointed()
    save()
    print(f"finished at step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
