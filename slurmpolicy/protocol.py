"""Which checkpoint protocol a job speaks, learned from the job itself.

Owns reading a job's own Slurm options as a checkpoint promise: a job that
asked Slurm for a warning signal (``--signal=[B:|R:]SIG[@TIME]``) and may be
requeued (``--requeue``, or the cluster's ``JobRequeue=1``) saves when it
gets that signal, within TIME seconds: PyTorch Lightning
(``--signal=SIGUSR1@90``), submitit (``--signal=USR2@90``), NeMo-style
jobs (``--signal=TERM@120``). Such a job takes part in checkpoint-first
preemption with no ``#SPOLICY`` line: the signal goes where Slurm would send
it (the batch shell with ``B:``, the job steps without), and the grace is
TIME. A ``#SPOLICY --checkpoint`` line, when given, wins.

Where the option is read, by Slurm version: Slurm keeps the warning signal
in the job but shows it in no job listing (``squeue --json``,
``scontrol show job`` and pyslurm's Job lack it, 22.05 to 25.11). 23.02+
record the sbatch command line (``submit_line``), which holds a command-line
``--signal``; the ``#SBATCH --signal`` lines are in the batch script, which
the daemon reads once per job (``scontrol write batch_script``) and puts in
``Job.batch_signal``. The command line wins over the script, as in sbatch.

Pure: text in, records out. The daemon does the reading.
"""

from __future__ import annotations

import shlex
import signal as signal_mod
from dataclasses import replace

from slurmpolicy.jobpolicy import Checkpoint, JobPolicy
from slurmpolicy.model import Job

#: Slurm's default lead time of ``--signal=SIG`` without ``@TIME``.
DEFAULT_LEAD = 60.0
#: The longest lead time Slurm accepts (0xffff seconds).
MAX_LEAD = 65535.0


def parse_signal_option(text: str) -> tuple[str, str, float] | None:
    """``[B:|R:|RB:]SIG[@TIME]`` -> (signal name without SIG, target, lead seconds).

    target is "batch" with ``B``, else "steps". None when the text is not a
    signal option Slurm would accept.
    """
    value = text.strip()
    flags = ""
    if ":" in value:
        flags, _, value = value.partition(":")
        if not flags or any(c not in "RBrb" for c in flags):
            return None
    sig, _, lead_text = value.partition("@")
    name = _signal_name(sig)
    if name is None:
        return None
    if lead_text:
        if not lead_text.isdigit():
            return None
        lead = float(lead_text)
        if lead > MAX_LEAD:
            return None
    else:
        lead = DEFAULT_LEAD
    return name, ("batch" if "b" in flags.lower() else "steps"), lead


def _signal_name(text: str) -> str | None:
    word = text.strip().upper()
    if word.isdigit():
        try:
            return signal_mod.Signals(int(word)).name[3:]
        except ValueError:
            return None
    if word.startswith("SIG"):
        word = word[3:]
    if not word or not hasattr(signal_mod, "SIG" + word) or word.startswith("_"):
        return None
    if not isinstance(getattr(signal_mod, "SIG" + word), signal_mod.Signals):
        return None
    return word


def _signal_in(tokens: list[str]) -> str:
    """The value of the last ``--signal`` among sbatch options (sbatch: last wins)."""
    found = ""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--wrap":
            break
        if tok.startswith("--signal="):
            found = tok[len("--signal="):]
        elif tok == "--signal" and i + 1 < len(tokens):
            found = tokens[i + 1]
            i += 1
        i += 1
    return found


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def script_signal(script: str) -> str:
    """The ``--signal`` value of a batch script's ``#SBATCH`` lines ("" when none).

    sbatch reads ``#SBATCH`` lines up to the first command, as here.
    """
    found = ""
    for number, line in enumerate(script.splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        value = _signal_in(_split(stripped[len("#SBATCH"):].split("#", 1)[0]))
        if value:
            found = value
    return found


def submit_line_signal(line: str) -> str:
    """The ``--signal`` value of an sbatch command line ("" when none)."""
    if "--signal" not in line:
        return ""
    return _signal_in(_split(line)[1:])


def learned_checkpoint(job: Job) -> Checkpoint | None:
    """The checkpoint promise of the job's own ``--signal`` and ``--requeue``, if any."""
    if not job.requeue:
        return None
    option = submit_line_signal(job.submit_line)
    where = "on its sbatch command line"
    if not option:
        option, where = job.batch_signal, "in its batch script"
    if not option:
        return None
    parsed = parse_signal_option(option)
    if parsed is None:
        return None
    name, target, lead = parsed
    return Checkpoint(signal=name, grace=lead, target=target,
                      learned=f"--signal={option} {where}, with --requeue")


def effective_policy(policy: JobPolicy, job: Job) -> JobPolicy:
    """``policy`` with the checkpoint promise learned from the job where its
    directives said nothing about checkpoints (``#SPOLICY --checkpoint`` wins)."""
    if policy.checkpoint is not None or not job.requeue:
        return policy
    learned = learned_checkpoint(job)
    return policy if learned is None else replace(policy, checkpoint=learned)


def describe(ck: Checkpoint | None) -> str:
    """How a job takes part in checkpoint-first preemption, in words."""
    if ck is None:
        return "cannot checkpoint (no #SPOLICY --checkpoint, no --signal with --requeue)"
    where = "its batch shell" if ck.target == "batch" else "its job steps"
    if ck.learned:
        return (f"protocol slurm-signal: recognised by {ck.learned}; signal {ck.signal} "
                f"to {where}, grace {ck.grace:.0f}s")
    if ck.signal is not None:
        done = "; an exit after the signal means done" if ck.on_exit == "done" else ""
        return (f"protocol spolicy: #SPOLICY --checkpoint, signal {ck.signal} to {where}, "
                f"grace {ck.grace:.0f}s{done}")
    if ck.interval is not None:
        return (f"protocol periodic: checkpoints every {ck.interval:.0f}s by itself; "
                "requeued without a signal")
    return "cannot checkpoint (#SPOLICY --checkpoint=none)"
