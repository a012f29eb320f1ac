"""A training job that answers preemption exactly as PyTorch Lightning's SLURM
signal connector does (``SLURMEnvironment(auto_requeue=True)``), with the
standard library only (no torch), so that tests can run it as any user.

Lightning (lightning/pytorch/trainer/connectors/signal_connector.py), when it
runs under Slurm (``SLURM_NTASKS`` set, job name not ``bash``/``interactive``):

- registers a handler for ``SLURMEnvironment.requeue_signal`` (SIGUSR1) that
  saves an "HPC checkpoint" (``hpc_ckpt_<n>.ckpt`` in the root dir), then,
  on global rank 0, runs ``scontrol requeue $SLURM_JOB_ID`` (array task:
  ``<array job>_<task>``) and keeps going; Slurm stops the job;
- registers a SIGTERM handler that only notes the signal;
- on start, resumes from the highest-numbered ``hpc_ckpt_<n>.ckpt``.

The batch script asks Slurm for the signal (nothing slurmpolicy-specific)::

    #SBATCH --signal=SIGUSR1@90
    #SBATCH --requeue
    srun python3 lightning_like.py --root DIR --steps 40

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
from subprocess import call


class Trainer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.step = 0
        self.total = 0
        self.received_sigterm = False
        self.restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

    # --- the HPC checkpoint, as Lightning names and finds it
    def hpc_save_path(self) -> Path:
        found = [int(p.stem.split("_")[-1]) for p in self.root.glob("hpc_ckpt_*.ckpt")]
        return self.root / f"hpc_ckpt_{max(found, default=0) + 1}.ckpt"

    def save_checkpoint(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"step": self.step, "total": self.total}))
        tmp.rename(path)
        self.log(f"checkpoint at step {self.step}")

    def restore(self) -> None:
        found = sorted(self.root.glob("hpc_ckpt_*.ckpt"), key=lambda p: int(p.stem.split("_")[-1]))
        if found:
            state = json.loads(found[-1].read_text())
            self.step, self.total = state["step"], state["total"]
            self.log(f"resumed at step {self.step}")

    def log(self, line: str) -> None:
        with open(self.root / "progress", "a") as out:
            out.write(f"{line} restart {self.restart}\n")

    # --- _SignalConnector
    def register_signal_handlers(self) -> None:
        on_slurm = "SLURM_NTASKS" in os.environ and \
            os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")
        if on_slurm:
            signal.signal(signal.SIGUSR1, self._slurm_sigusr_handler_fn)
        signal.signal(signal.SIGTERM, self._sigterm_notifier_fn)

    def _slurm_sigusr_handler_fn(self, signum: int, _: object) -> None:
        print(f"Handling auto-requeue signal: {signum}", flush=True)
        self.save_checkpoint(self.hpc_save_path())
        if int(os.environ.get("SLURM_PROCID", "0")) == 0:
            array_job_id = os.getenv("SLURM_ARRAY_JOB_ID")
            if array_job_id is not None:
                job_id = f"{array_job_id}_{os.getenv('SLURM_ARRAY_TASK_ID')}"
            else:
                job_id = os.environ["SLURM_JOB_ID"]
            print(f"requeing job {job_id}...", flush=True)
            result = call(["scontrol", "requeue", job_id])
            print("requeued exp" if result == 0 else f"requeue failed: {result}", flush=True)

    def _sigterm_notifier_fn(self, signum: int, _: object) -> None:
        print(f"Received SIGTERM: {signum}", flush=True)
        self.received_sigterm = True

    def fit(self, steps: int, step_seconds: float) -> None:
        self.register_signal_handlers()
        self.restore()
        while self.step < steps and not self.received_sigterm:
            time.sleep(step_seconds)
            self.step += 1
            self.total += self.step
            self.log(f"step {self.step}")
        if self.step >= steps:
            (self.root / "result").write_text(f"{self.total}\n")
            self.log(f"finished at step {self.step}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    args = parser.parse_args()
    Trainer(args.root).fit(args.steps, args.step_seconds)


if __name__ == "__main__":
    main()
