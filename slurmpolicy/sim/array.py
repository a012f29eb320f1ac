"""A sweep as a Slurm job array: one replay per array task, results gathered.

Owns the sweep directory and what is in it::

    DIR/sweep.json       the grid: one entry per replay (a :class:`~slurmpolicy.sim.grid.Task`)
    DIR/sweep.sbatch     #SBATCH --array=0-(N-1)[%K]; each task runs
                         ``python -m slurmpolicy.cli simulate-task DIR $SLURM_ARRAY_TASK_ID``
    DIR/results/<i>.json task i's figures (or its error), written whole (tmp, then rename)
    DIR/logs/%A_%a.out   the tasks' output (Slurm writes it)
    DIR/jobs             the array job ids ``--submit`` got, one a line

Writing a grid into a directory that holds another grid is refused (its
results would be mixed with the new ones); writing the same grid again keeps
the results there (to resubmit what is missing). :func:`gather` reads every
result and says which tasks have none or failed, with their logs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from slurmpolicy.errors import ConfigError, SlurmError, SlurmPolicyError
from slurmpolicy.sim.grid import Task

SWEEP = "sweep.json"
SCRIPT = "sweep.sbatch"
RESULTS = "results"
LOGS = "logs"
JOBS = "jobs"
VERSION = 1
#: Characters a sweep directory may not hold: Slurm reads it in #SBATCH lines
#: (split at whitespace) and expands % in --output.
_UNSAFE = set("%'\"\\`$") | {chr(c) for c in range(0x20)} | {"\x7f"}


class SweepError(ConfigError):
    """A sweep directory, its grid, a task id or a result is not what it must be."""


class SweepIncomplete(SlurmPolicyError):
    """Some tasks of a sweep have no result (not run yet, still running, failed)."""

    exit_code = 6


class Sweep(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """DIR/sweep.json: the grid and the interpreter its tasks run."""

    version: int
    python: str
    #: Put in front of PYTHONPATH in the tasks (a checkout run in place); None when
    #: the interpreter finds slurmpolicy by itself.
    pythonpath: str | None
    tasks: list[Task]


class TaskResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """DIR/results/<i>.json."""

    version: int
    task: Task
    status: str  # "ok" or "failed"
    summary: dict[str, Any] | None = None
    hosts: int = 0
    pools: list[dict[str, Any]] = []
    error: str = ""
    slurm_job: str = ""
    node: str = ""


def _check_dir_name(path: Path) -> None:
    bad = sorted({c for c in str(path) if c in _UNSAFE or c.isspace()})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise SweepError(f"{path}: a sweep directory cannot hold {shown}: Slurm reads it in "
                         "#SBATCH lines and expands % in --output; give a path of letters, "
                         "digits and . _ - / + , : @ =")


def import_root() -> str | None:
    """The directory to put on the tasks' PYTHONPATH so that they run this very
    slurmpolicy: None when it is installed where the interpreter looks anyway."""
    import slurmpolicy

    root = Path(slurmpolicy.__file__).resolve().parent.parent
    installed = {Path(p).resolve() for p in (*site.getsitepackages(),
                                            site.getusersitepackages())}
    return None if root in installed else str(root)


def _write_atomic(path: Path, text: str) -> None:
    """``path`` holds the old text or the new, never a part: tmp beside it, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _grid_difference(old: Sequence[Task], new: Sequence[Task]) -> str:
    if len(old) != len(new):
        return f"{len(old)} tasks there, {len(new)} here"
    for a, b in zip(old, new, strict=True):
        if a != b:
            keys = [k for k in Task.__struct_fields__ if getattr(a, k) != getattr(b, k)]
            k = keys[0]
            return f"task {a.id}'s {k} is {getattr(a, k)!r} there, {getattr(b, k)!r} here"
    return "the same tasks"


def read_sweep(sweep_dir: Path) -> Sweep:
    path = sweep_dir / SWEEP
    if not sweep_dir.is_dir():
        raise SweepError(f"{sweep_dir}: no such sweep directory (write one with "
                         "`slurmpolicy simulate ... --array DIR`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"{sweep_dir}: holds no {SWEEP} (write one with "
                         "`slurmpolicy simulate ... --array DIR`)") from None
    except OSError as exc:
        raise SweepError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise SweepError(f"{path}: not JSON ({exc}); write the sweep again with "
                         "`slurmpolicy simulate ... --array DIR`") from exc
    if isinstance(data, dict) and data.get("version", VERSION) != VERSION:
        raise SweepError(f"{path}: sweep version {data['version']!r}; this slurmpolicy reads "
                         f"version {VERSION}")
    try:
        sweep = msgspec.convert(data, Sweep)
    except msgspec.ValidationError as exc:
        raise SweepError(f"{path}: not a sweep: {exc}") from exc
    if [t.id for t in sweep.tasks] != list(range(len(sweep.tasks))) or not sweep.tasks:
        raise SweepError(f"{path}: tasks must be numbered 0 to N-1 in order, N at least 1")
    from slurmpolicy.sim.grid import check

    for task in sweep.tasks:
        try:
            check(task)
        except ConfigError as exc:
            raise SweepError(f"{path}: {exc}") from exc
    return sweep


def script_text(sweep_dir: Path, sweep: Sweep, throttle: int | None = None,
                sbatch_args: Sequence[str] = (), job_name: str = "slurmpolicy-sweep") -> str:
    n = len(sweep.tasks)
    array = f"0-{n - 1}" + (f"%{throttle}" if throttle else "")
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --array={array}",
        f"#SBATCH --output={sweep_dir / LOGS}/%A_%a.out",
        "#SBATCH --ntasks=1",
        "#SBATCH --cpus-per-task=1",
        *(f"#SBATCH {arg}" for arg in sbatch_args),
        f"# A slurmpolicy sweep of {n} replays, one per array task, written by",
        "# `slurmpolicy simulate --array`. Task i writes results/<i>.json here; gather with",
        f"#   slurmpolicy simulate-gather {sweep_dir}",
        "# and rerun what is missing with `sbatch --array=IDS` on this script.",
        "set -eu",
    ]
    if sweep.pythonpath:
        lines.append(f"export PYTHONPATH={shlex.quote(sweep.pythonpath)}"
                     '"${PYTHONPATH:+:$PYTHONPATH}"')
    lines.append(f"exec {shlex.quote(sweep.python)} -m slurmpolicy.cli simulate-task "
                 f'{shlex.quote(str(sweep_dir))} "${{SLURM_ARRAY_TASK_ID:-}}"')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Written:
    sweep_dir: Path
    script: Path
    tasks: int
    #: Results already there (the same grid written again).
    kept: int


def write(sweep_dir: Path | str, tasks: Sequence[Task], throttle: int | None = None,
          sbatch_args: Sequence[str] = ()) -> Written:
    """Write DIR/sweep.json and DIR/sweep.sbatch for ``tasks`` (see the module)."""
    d = Path(os.path.abspath(sweep_dir))
    _check_dir_name(d)
    for arg in sbatch_args:
        if not arg.startswith("-") or any(c.isspace() or c in _UNSAFE - {"%", "$"}
                                          for c in arg):
            raise SweepError(f"--sbatch-arg {arg!r}: give one sbatch option as one token "
                             "without spaces, quotes or backslashes (e.g. "
                             "--sbatch-arg=--time=2:00:00)")
    if throttle is not None and throttle < 1:
        raise SweepError(f"--array-throttle {throttle}: give at least 1")
    if not tasks:
        raise SweepError("an empty grid: nothing to write")
    sweep = Sweep(version=VERSION, python=sys.executable, pythonpath=import_root(),
                  tasks=list(tasks))
    kept = 0
    if d.exists() and not d.is_dir():
        raise SweepError(f"{d}: exists and is not a directory")
    if (d / SWEEP).exists():
        try:
            old = read_sweep(d)
        except SweepError as exc:
            raise SweepError(f"{exc}; give a new directory, or remove {d} to start over") \
                from exc
        if old.tasks != sweep.tasks:
            raise SweepError(f"{d} holds another grid ({_grid_difference(old.tasks, sweep.tasks)}"
                             f"); give a new directory, or remove {d} to start over")
        kept = sum(1 for t in sweep.tasks if (d / RESULTS / f"{t.id}.json").exists())
    elif d.exists() and any(d.iterdir()):
        raise SweepError(f"{d}: not empty and holds no {SWEEP}; give a new or empty directory")
    for sub in (d, d / RESULTS, d / LOGS):
        sub.mkdir(parents=True, exist_ok=True)
    _write_atomic(d / SWEEP, json.dumps(msgspec.to_builtins(sweep), indent=1) + "\n")
    _write_atomic(d / SCRIPT, script_text(d, sweep, throttle, sbatch_args))
    return Written(d, d / SCRIPT, len(tasks), kept)


def submit(sweep_dir: Path, sbatch: str | None = None) -> str:
    """sbatch DIR/sweep.sbatch (argument list, no shell); the array job id."""
    exe = sbatch or shutil.which("sbatch")
    if not exe:
        raise SlurmError("sbatch is not on PATH: submit the script where Slurm's commands "
                         f"are: sbatch {sweep_dir / SCRIPT}")
    argv = [exe, "--parsable", str(sweep_dir / SCRIPT)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              cwd=sweep_dir, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"sbatch {sweep_dir / SCRIPT} did not run: {exc}") from exc
    job = proc.stdout.strip().split(";")[0]
    if proc.returncode != 0 or not job.isdigit():
        raise SlurmError(f"sbatch refused {sweep_dir / SCRIPT} (exit {proc.returncode})",
                         slurm_message=(proc.stderr or proc.stdout).strip(), command="sbatch")
    with open(sweep_dir / JOBS, "a", encoding="utf-8") as handle:
        handle.write(job + "\n")
    return job


def parse_task_id(text: str | None, n: int, sweep_dir: Path) -> int:
    allowed = f"{sweep_dir / SWEEP} has {n} task{'s' if n != 1 else ''} (0-{n - 1})"
    if text is None or not str(text).strip():
        raise SweepError(f"no task id: give one, or run inside a Slurm array task "
                         f"(SLURM_ARRAY_TASK_ID); {allowed}")
    try:
        value = int(str(text).strip())
    except ValueError:
        raise SweepError(f"task id {text!r} is not a number; {allowed}") from None
    if not 0 <= value < n:
        raise SweepError(f"task {value} is out of range: {allowed}")
    return value


def run_task(sweep_dir: Path | str, task_id: str | int | None) -> tuple[Path, TaskResult]:
    """Replay one task of the sweep; write its result (or its error) atomically."""
    from slurmpolicy.sim import grid
    from slurmpolicy.sim.sweep import Run, run_all

    d = Path(os.path.abspath(sweep_dir))
    sweep = read_sweep(d)
    i = parse_task_id(None if task_id is None else str(task_id), len(sweep.tasks), d)
    task = sweep.tasks[i]
    out = d / RESULTS / f"{i}.json"
    job = os.environ.get("SLURM_ARRAY_JOB_ID", "")
    slurm_job = f"{job}_{i}" if job else ""
    node = os.environ.get("SLURMD_NODENAME", "")
    out.parent.mkdir(exist_ok=True)
    try:
        grid.check(task)
        settings = grid.load_settings(task.settings, task.no_shrink)
        table, fabric = grid.build_hosts(task)
        trace, _ = grid.load_case(task, settings, table)
        (result,) = run_all([Run(trace, table, task.mode, task.load, settings,
                                 grid.slurm_model(task), fabric, task.plan_refresh)], 1)
        record = TaskResult(version=VERSION, task=task, status="ok", summary=result.summary,
                            hosts=len(table.names), pools=grid.pool_rows(settings, trace),
                            slurm_job=slurm_job, node=node)
    except BaseException as exc:
        record = TaskResult(version=VERSION, task=task, status="failed",
                            error=f"{type(exc).__name__}: {exc}", slurm_job=slurm_job,
                            node=node)
        _write_atomic(out, json.dumps(msgspec.to_builtins(record)) + "\n")
        raise
    # json, not msgspec.json: the float text --json prints (NaN kept, not null).
    _write_atomic(out, json.dumps(msgspec.to_builtins(record)) + "\n")
    return out, record


@dataclass
class Gathered:
    sweep_dir: Path
    sweep: Sweep
    results: dict[int, TaskResult] = field(default_factory=dict)
    #: Task ids with no result file.
    missing: list[int] = field(default_factory=list)
    #: Task id -> why its result is not one (the task's error, or a corrupt file).
    failed: dict[int, str] = field(default_factory=dict)

    def log(self, task_id: int) -> str:
        """Where the task's output is, or will be."""
        logs = self.sweep_dir / LOGS
        found = sorted(logs.glob(f"*_{task_id}.out"), key=lambda p: p.stat().st_mtime)
        if found:
            return str(found[-1])
        jobs = (self.sweep_dir / JOBS).read_text().split() if (self.sweep_dir / JOBS).exists() \
            else []
        return str(logs / f"{jobs[-1] if jobs else '%A'}_{task_id}.out") + " (not written yet)"


def _read_result(path: Path, task: Task) -> TaskResult | str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror}"
    except ValueError as exc:
        return f"{path}: corrupt, not JSON ({exc})"
    try:
        record = msgspec.convert(data, TaskResult)
    except msgspec.ValidationError as exc:
        return f"{path}: corrupt, not a task result ({exc})"
    if record.version != VERSION:
        return f"{path}: result version {record.version}; this slurmpolicy reads {VERSION}"
    if record.task != task:
        differs = _grid_difference([record.task], [task])
        return f"{path}: the result of another grid's task ({differs})"
    if record.status == "failed":
        return f"failed: {record.error or 'no error recorded'}"
    if record.status != "ok" or not isinstance(record.summary, dict):
        return f"{path}: corrupt, status {record.status!r} without figures"
    if record.summary.get("mode") != task.mode:
        return f"{path}: corrupt, figures of mode {record.summary.get('mode')!r}, not {task.mode}"
    try:  # the figures the report reads, read as the report reads them
        from slurmpolicy.sim import metrics

        metrics.rows([record.summary])
        metrics.targets(record.summary, record.summary)
        for key, spec in (("jobs", ","), ("gpus", ","), ("plan_calls", ","),
                          ("cpu_seconds", ".1f")):
            format(record.summary[key], spec)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return f"{path}: corrupt, its figures do not read ({type(exc).__name__}: {exc})"
    return record


def gather(sweep_dir: Path | str) -> Gathered:
    """Every task's result, and which tasks have none or a failed one."""
    d = Path(os.path.abspath(sweep_dir))
    out = Gathered(d, read_sweep(d))
    for task in out.sweep.tasks:
        path = d / RESULTS / f"{task.id}.json"
        if not path.exists():
            out.missing.append(task.id)
            continue
        got = _read_result(path, task)
        if isinstance(got, str):
            out.failed[task.id] = got
        else:
            out.results[task.id] = got
    return out


def id_ranges(ids: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``1-3,5`` (as sbatch --array takes them)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
