"""A sweep as a grid of replays: settings files x seeds x loads x modes.

Owns the description of one replay that a process can carry out alone, here
or in a Slurm array task on another machine (:class:`Task`: every path in it
absolute, every number the replay reads), the order of the grid (settings
file, then seed, then load, then mode innermost, so that the modes of one case
sit side by side), and turning a task into what :func:`slurmpolicy.sim.replay`
takes: settings, hosts and fabric, Slurm's model, and the trace of its case
(:func:`load_case`; a *case* is a (settings, seed, load): its modes replay the
same trace).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import msgspec

from slurmpolicy.errors import ConfigError
from slurmpolicy.settings import Settings

MODES = ("slurmpolicy", "slurm-requeue", "slurm-grace")
FORMATS = ("auto", "philly", "sacct", "synthetic")


class Task(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One replay of the grid, with everything it needs (paths absolute)."""

    id: int
    mode: str
    load: float
    seed: int
    #: Settings file (absolute); None: the shipped defaults (never a node's own file).
    settings: str | None
    #: Trace file (absolute); for ``format = "synthetic"`` the generator's spec.
    trace: str
    format: str = "auto"
    sacct_columns: str | None = None
    limit: int | None = None
    month: str = ""
    production_fraction: float = 0.15
    elastic_fraction: float = 0.0
    no_shrink: bool = False
    #: Fabric file (absolute); else a tree from the five numbers below.
    fabric: str | None = None
    hosts: int = 128
    gpus_per_host: int = 8
    hosts_per_leaf: int = 16
    hosts_per_nvlink: int = 1
    leaves_per_spine: int = 4
    grace_time: float = 150.0
    bf_interval: float = 30.0
    bf_max_job_test: int = 500
    plan_refresh: float = 300.0

    @property
    def case(self) -> tuple[str | None, int, float]:
        """What its trace depends on besides the common options: (settings, seed, load)."""
        return (self.settings, self.seed, self.load)


#: The fields of a Task that are the same for the whole grid.
COMMON = tuple(f for f in Task.__struct_fields__
               if f not in ("id", "mode", "load", "seed", "settings"))


def absolute(path: str | None) -> str | None:
    """``path`` made absolute (not resolved: a link stays what the user named)."""
    return None if path is None else os.path.abspath(path)


def settings_path(config_path: str | None) -> str | None:
    """The settings file a replay reads, made absolute: ``-c``/$SLURMPOLICY_CONFIG,
    else the default path when it exists, else None (the shipped defaults)."""
    from slurmpolicy import settings as settings_mod

    if config_path:
        return absolute(config_path)
    env = os.environ.get(settings_mod.ENV_PATH)
    if env:
        return absolute(env)
    return str(settings_mod.DEFAULT_PATH) if settings_mod.DEFAULT_PATH.exists() else None


def expand(common: dict[str, Any], settings: Sequence[str | None], seeds: Sequence[int],
           loads: Sequence[float], modes: Sequence[str]) -> list[Task]:
    """The grid in its order: settings, seed, load, then mode (innermost)."""
    trace = common.get("trace", "")
    if common.get("format") != "synthetic":
        common = {**common, "trace": absolute(trace) if trace not in ("", "-") else trace}
    if common.get("fabric"):
        common = {**common, "fabric": absolute(common["fabric"])}
    tasks: list[Task] = []
    for s in settings:
        for seed in seeds:
            for load in loads:
                for mode in modes:
                    tasks.append(Task(id=len(tasks), mode=mode, load=float(load), seed=seed,
                                      settings=absolute(s), **common))
    return tasks


def cases(tasks: Iterable[Task]) -> Iterator[tuple[tuple[str | None, int, float], list[Task]]]:
    """Consecutive tasks of one case (the grid's order keeps them together)."""
    for key, group in groupby(tasks, key=lambda t: t.case):
        yield key, list(group)


def check(task: Task) -> None:
    """Refuse a task whose values no replay takes (a hand-edited grid, say)."""
    if task.mode not in MODES:
        raise ConfigError(f"task {task.id}: mode {task.mode!r} is not a mode; allowed: "
                          f"{', '.join(MODES)}")
    if task.format not in FORMATS:
        raise ConfigError(f"task {task.id}: format {task.format!r} is not a trace format; "
                          f"allowed: {', '.join(FORMATS)}")
    if not 0.01 <= task.load <= 1000:
        raise ConfigError(f"task {task.id}: load {task.load:g} is not a load: give numbers "
                          "from 0.01 to 1000")


def load_settings(path: str | None, no_shrink: bool = False) -> Settings:
    """The settings a task replays with: its file, or the shipped defaults for None."""
    from slurmpolicy import settings as settings_mod

    settings = Settings() if path is None else settings_mod.load(path)
    if no_shrink:
        settings = msgspec.structs.replace(settings, preemption=msgspec.structs.replace(
            settings.preemption, shrink_elastic=False))
    return settings


def build_hosts(task: Task) -> tuple[Any, Any]:
    """(Hosts, fabric) of the task's layout: its fabric file, else a generated tree
    (the fabric is None when slurmpolicy.topology is not installed)."""
    from slurmpolicy.sim.cluster import Hosts

    for name, value in (("--hosts", task.hosts), ("--gpus-per-host", task.gpus_per_host),
                        ("--hosts-per-leaf", task.hosts_per_leaf),
                        ("--hosts-per-nvlink", task.hosts_per_nvlink),
                        ("--leaves-per-spine", task.leaves_per_spine)):
        if value < 1 and not task.fabric:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    try:
        from slurmpolicy.topology import synthetic_fabric
        from slurmpolicy.topology.fabric import Fabric
        from slurmpolicy.topology.fabricfile import read_fabric_file
    except ImportError as exc:  # topology not installed: numbers only
        if task.fabric:
            raise ConfigError(
                "--fabric needs slurmpolicy.topology, which is not available") from exc
        return Hosts.layout(task.hosts, task.gpus_per_host, task.hosts_per_leaf,
                            task.hosts_per_nvlink, task.leaves_per_spine), None
    if task.fabric:
        fabric = Fabric.from_spec(read_fabric_file(task.fabric))
    else:
        fabric = synthetic_fabric(hosts=task.hosts, gpus_per_host=task.gpus_per_host,
                                  hosts_per_nvlink=task.hosts_per_nvlink,
                                  hosts_per_leaf=task.hosts_per_leaf,
                                  leaves_per_spine=task.leaves_per_spine)
    table = Hosts.from_fabric(fabric)
    if not table.names or table.total_gpus <= 0:
        raise ConfigError(f"{task.fabric or 'the fabric'}: no hosts with GPUs to simulate")
    return table, fabric


def slurm_model(task: Task) -> Any:
    from slurmpolicy.sim.engine import SlurmModel

    return SlurmModel(grace_time=task.grace_time, bf_interval=task.bf_interval,
                      bf_max_job_test=task.bf_max_job_test)


def load_case(task: Task, settings: Settings, table: Any) -> tuple[list[Any], Any]:
    """The trace of the task's case and the sacct report of reading it; refuses an
    empty trace and jobs bigger than the cluster."""
    from slurmpolicy.sim.trace import SacctReport, TraceRules, load_trace

    if task.format != "synthetic" and task.trace in ("", "-"):
        raise ConfigError("--trace FILE is required (or --format synthetic)")
    rules = TraceRules(seed=task.seed, load_scale=task.load, gpus_per_host=max(table.gpus),
                       production_fraction=task.production_fraction, month=task.month,
                       classes=tuple(settings.classes), default_class=settings.default_class,
                       elastic_fraction=task.elastic_fraction)
    report = SacctReport()
    trace = load_trace(task.trace, task.format, rules, task.limit, report, task.sacct_columns)
    if not trace:
        why = f" ({report.summary()})" if report.rows else ""
        where = task.trace if task.format != "synthetic" else "the synthetic spec"
        raise ConfigError(f"{where or 'the synthetic spec'}: no jobs to replay{why}")
    too_big = [j for j in trace if j.gpus > table.total_gpus]
    if too_big:
        raise ConfigError(f"{len(too_big)} job(s) ask for more GPUs than the cluster has "
                          f"({max(j.gpus for j in too_big)} > {table.total_gpus}); "
                          "use a bigger --hosts")
    return trace, report


def pool_rows(settings: Settings, trace: Sequence[Any]) -> list[dict[str, Any]]:
    """Where job_submit.lua would route each trace job (settings [pools]), in jobs and
    GPU-hours per pool; empty without pools. The replay itself runs one partition."""
    if not settings.pools:
        return []
    from slurmpolicy.pools import Request, pool_report

    return pool_report(settings, ((Request(
        job_class=j.job_class, gpus=j.gpus, nodes=j.min_nodes or j.nodes,
        gpus_per_node=j.gpus_per_node), j.gpus * j.duration / 3600.0) for j in trace))


def settings_labels(tasks: Iterable[Task]) -> dict[str | None, str]:
    """A short name for each settings file of the grid: its file name, or its whole
    path where two share a name; "defaults" for the shipped settings."""
    paths = list(dict.fromkeys(t.settings for t in tasks))
    names = [Path(p).name if p else "defaults" for p in paths]
    return {p: (n if names.count(n) == 1 else (p or n)) for p, n in zip(paths, names,
                                                                          strict=True)}
