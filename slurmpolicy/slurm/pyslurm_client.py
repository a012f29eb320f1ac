"""The pyslurm adapter: Slurm's C API through pyslurm (>= 25.11), no JSON at all.

This module owns the translation between pyslurm's objects and our model,
and between pyslurm's ``RPCError`` and our typed errors. It is chosen by
``connect("auto")`` only when :func:`unavailable_reason` returns None: pyslurm
imports and its major.minor equals that of the Slurm that answers (pyslurm is
built against one Slurm release; a mismatch fails in the RPC layer).

What pyslurm 25.11.2 does differently, and how this adapter copes (see
tests/fixtures/slurm/README.md and pyslurm's own sources):

- ``Node.allocated_gres`` comes back empty: per-node GPU use is derived from
  the running jobs' allocations (``parse.derive_gpu_use``).
- ``Job.send_signal`` wants a number or ``"SIGUSR1"``; "USR1" is rejected, so
  names are converted to ``signal.Signals`` first.
- ``JobSubmitDescription(site_factor=0)`` is dropped (pyslurm tests the value
  for truth), so a site factor of 0 goes through ``scontrol``.
- ``Job.array_task_id`` reports task 0 as None: restored from the array id.
- No job record carries the site factor: it comes from ``sprio``, as in the
  JSON adapter.
- ``Reservation.duration`` is in minutes; ``create()`` needs users or
  accounts, a start and a duration.
"""

from __future__ import annotations

import re
import signal as _signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from slurmpolicy.errors import JobGone, ReservationError, SlurmError, SlurmUnavailable
from slurmpolicy.hostlist import HostlistError, compress, expand
from slurmpolicy.model import EMPTY_GRES, Job, Node, Partition, Reservation, Snapshot
from slurmpolicy.slurm import parse
from slurmpolicy.slurm.classify import classify
from slurmpolicy.slurm.client import ReservationSpec, SignalTarget
from slurmpolicy.slurm.commands import SlurmCommands, parse_signal, reservation_args
from slurmpolicy.slurm.probe import import_pyslurm, pyslurm_status

# Slurm's reservation flag names (scontrol) <-> pyslurm's ReservationFlags.
_RESV_FLAG_TO_PYSLURM = {
    "MAINT": "MAINTENANCE", "IGNORE_JOBS": "IGNORE_RUNNING_JOBS",
    "SPEC_NODES": "SPECIFIC_NODES", "PURGE_COMP": "PURGE", "PART_NODES": "PARTITION_NODES_ONLY",
    "STATIC": "STATIC_NODES", "USER_DELETE": "USER_DELETION",
    "NO_HOLD_JOBS_AFTER": "NO_JOB_HOLD_AFTER_END",
}
_RESV_FLAG_FROM_PYSLURM = {v: k for k, v in _RESV_FLAG_TO_PYSLURM.items()}


def unavailable_reason(bin_dir: str | None = None,
                       env: Mapping[str, str] | None = None) -> str | None:
    """None when the pyslurm adapter can be used here; otherwise why not, in words.

    Decided by :mod:`slurmpolicy.slurm.probe` without importing pyslurm into
    this process first (an import without a readable slurm.conf ends it).
    """
    return pyslurm_status(bin_dir=bin_dir, env=env).reason


@contextmanager
def _rpc(what: str, error: type[SlurmError] = SlurmError) -> Iterator[None]:
    """pyslurm's RPCError -> our typed error, keeping Slurm's message."""
    import pyslurm

    try:
        yield
    except pyslurm.RPCError as exc:
        message = str(getattr(exc, "msg", "") or exc)
        raise classify(message, what, error) from exc


def _gres_text(gres: Any) -> str:
    """pyslurm's GRES dict ({"gpu:h100": 8} or {"gpu": {"count": 2, ...}}) -> text."""
    if not gres:
        return ""
    if isinstance(gres, str):
        return gres
    parts = []
    for key, value in dict(gres).items():
        count = value.get("count", 1) if isinstance(value, dict) else value
        parts.append(f"{key}:{count}")
    return ",".join(parts)


#: Slurm's job state reason codes are identifiers ("JobHeldUser"); pyslurm
#: returns the free-text description instead when one is set.
_REASON_CODE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _needs_cli(job: Job) -> bool:
    """True for a job pyslurm 25.11.2 cannot read as the JSON adapter does.

    - its reason is Slurm's description ("job requeued in held state"), not
      the code (``JobHeldUser``) policy and ``why`` need;
    - it is pending with no GPUs per node: it may ask ``--gpus=N``, which
      lives in ``tres_per_job``, a string pyslurm parses as key=value pairs
      and so always reads as empty (running jobs show their GPUs in the
      resource layout instead).
    """
    if not _REASON_CODE.fullmatch(job.reason):
        return True
    return job.is_pending and not job.gpus_per_node


def _allocated_gpus(j: Any) -> tuple[dict[str, int], str | None]:
    """GPUs per allocated node and their one type, from the job's resource layout."""
    try:
        layout = j.get_resource_layout_per_node() or {}
    except (AttributeError, ValueError):
        return {}, None
    counts: dict[str, int] = {}
    types: set[str] = set()
    for host, res in layout.items():
        gres = (res or {}).get("gres") or {}
        total = 0
        for key, value in gres.items():
            text = f"{key}:{value.get('count', 1) if isinstance(value, dict) else value}"
            by_type = parse.gpus_by_type(text)
            total += sum(by_type.values())
            types.update(t for t in by_type if t)
        counts[str(host)] = total
    if not any(counts.values()):
        return {}, None
    return counts, (next(iter(types)) if len(types) == 1 else None)


def _time(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _minutes(value: Any) -> float | None:
    return float(value) * 60.0 if isinstance(value, int | float) else None


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) else default


class PySlurmClient:
    """The :class:`~slurmpolicy.slurm.client.SlurmClient` over pyslurm."""

    name = "pyslurm"
    adapter_note = ""

    def __init__(self, bin_dir: str | None = None, timeout: float = 30,
                 env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        # pyslurm reads SLURM_CONF once, when it is imported; the CLI side
        # (sprio, scontrol for what pyslurm cannot do) gets env explicitly.
        self.cli = SlurmCommands(bin_dir=bin_dir, timeout=timeout, env=env, clock=clock)
        self.clock = clock
        # Probe first: a bare import without a readable slurm.conf would end
        # the process. Raises SlurmError with the reason when unusable.
        self._env = dict(env or {})
        import_pyslurm(self._env)
        #: The ended jobs of the last snapshot's load (pyslurm lists them; squeue
        #: does not), for the one ended_jobs() call that follows it, and the ids
        #: of those it could not read faithfully; None: no such load, ask squeue.
        self._ended: tuple[list[Job], list[int]] | None = None

    def _api(self) -> Any:
        """pyslurm, initialised for this client's cluster (see probe.import_pyslurm)."""
        return import_pyslurm(self._env)

    # ---------------------------------------------------------------- reads

    def snapshot(self) -> Snapshot:
        pyslurm = self._api()

        sites = self.cli.site_factors()
        taken_at = self.clock()
        with _rpc("pyslurm.Jobs.load"):
            pjobs = pyslurm.Jobs.load(preload_passwd_info=True)
        with _rpc("pyslurm.Nodes.load"):
            pnodes = pyslurm.Nodes.load()
        with _rpc("pyslurm.Partitions.load"):
            pparts = pyslurm.Partitions.load()
        with _rpc("pyslurm.Reservations.load"):
            presvs = pyslurm.Reservations.load()
        jobs: list[Job] = []
        undecodable: list[int] = []
        ended: list[Job] = []
        ended_odd: list[int] = []
        for j in pjobs.values():
            if not _listed_by_squeue(j):
                # An ended job Slurm still keeps: not in the snapshot (squeue
                # leaves it out on 23.02+), kept for the lifecycle's
                # ended_jobs(), which would otherwise list the whole queue
                # through squeue --states=all every cycle.
                try:
                    done = self._job(j, sites, taken_at)
                except (UnicodeDecodeError, SlurmError):
                    ended_odd.append(int(j.id))  # the CLI reads it faithfully
                    continue
                if _needs_cli(done) or not done.state.is_finished:
                    ended_odd.append(done.job_id)
                else:
                    ended.append(done)
                continue
            try:
                job = self._job(j, sites, taken_at)
            except UnicodeDecodeError:
                # pyslurm decodes names and comments as strict UTF-8; Slurm
                # stores bytes. One user's odd job name must not blind us.
                undecodable.append(int(j.id))
                continue
            if _needs_cli(job):
                undecodable.append(job.job_id)
            else:
                jobs.append(job)
        if undecodable:
            jobs.extend(self._jobs_from_cli(undecodable, sites, taken_at))
        self._ended = (ended, ended_odd)
        nodes = [self._node(n) for n in pnodes.values()]
        partitions = [self._partition(p) for p in pparts.values()]
        reservations = [self._reservation(r) for r in presvs.values()]
        cluster = next((j.cluster for j in pjobs.values() if getattr(j, "cluster", "")), "")
        if not cluster:
            cluster = str(getattr(getattr(pyslurm, "settings", None), "LOCAL_CLUSTER", "") or "")
        return parse.assemble(taken_at=taken_at, slurm_version=self.cli.version_string(),
                              cluster_name=cluster, jobs=jobs, nodes=nodes,
                              partitions=partitions, reservations=reservations)

    def _jobs_from_cli(self, job_ids: list[int], sites: Mapping[int, int],
                       now: float) -> list[Job]:
        """The jobs pyslurm cannot read faithfully, through one ``squeue --json --jobs``.

        See :func:`_needs_cli`. squeue serialises only the jobs named, so the
        call stays cheap however long the queue (the controller's binary
        listing is what it costs). Its decoder replaces bytes that are not
        UTF-8 (one U+FFFD a byte), as the JSON adapter does for every job.
        """
        raw = self.cli.run(["squeue", "--all", "--json", "--jobs",
                            ",".join(str(i) for i in job_ids)])
        jobs, _, _, _ = parse.decode_jobs(raw, sites, now)
        return jobs

    @staticmethod
    def _job(j: Any, sites: Mapping[int, int], now: float) -> Job:
        job_id = int(j.id)
        try:
            state, flags = parse.job_state(j.state or "")
        except ValueError as exc:
            raise SlurmError(f"job {job_id}: field `state`: {exc}") from exc
        per_node_text = _gres_text(j.gres_per_node)
        per_node = parse.gpu_count(per_node_text)
        gpu_type = parse.gpu_type_of(per_node_text)
        node_count = _int(j.num_nodes, 1) or 1
        try:
            hosts = tuple(expand(j.allocated_nodes or ""))
        except HostlistError as exc:
            raise SlurmError(f"job {job_id}: field `allocated_nodes`: {exc}") from exc
        running = state.value in ("RUNNING", "SUSPENDED") or "COMPLETING" in flags
        # Where it runs, or ran once it ended (as squeue and scontrol show an
        # ended job: the lifecycle reads a failed job's nodes); a pending
        # job's are a past run's, which squeue does not show.
        placed = running or state.is_finished
        on_node: Mapping[str, int] = EMPTY_GRES
        if hosts and placed:
            # What each node gave the job, typed ("gpu:h100"), as the JSON
            # adapter reads it from gres_detail: the only place a --gpus=N
            # job's GPUs show (pyslurm cannot read tres_per_job, see below).
            counts, held_type = _allocated_gpus(j)
            if counts:
                on_node = MappingProxyType(counts)
                gpu_type = gpu_type or held_type
            elif per_node:
                on_node = MappingProxyType(dict.fromkeys(hosts, per_node))
        if on_node and not per_node:
            per_node = max(on_node.values())
        gpus = sum(on_node.values()) if on_node else per_node * node_count
        array_id = j.array_id if isinstance(j.array_id, int) and j.array_id else None
        task = j.array_task_id if isinstance(j.array_task_id, int) else None
        if array_id is not None and task is None and not j.array_tasks_waiting:
            task = 0  # pyslurm turns task 0 into None (zero is "no value" there)
        het = j.heterogeneous_id if isinstance(j.heterogeneous_id, int) and \
            j.heterogeneous_id else None
        mem = j.memory_per_node
        if not isinstance(mem, int):
            per_cpu = j.memory_per_cpu
            mem = per_cpu * max(1, _int(j.cpus, 1) // node_count) if isinstance(per_cpu, int) \
                else 0
        eligible = _time(j.eligible_time)
        begin = eligible if state.value == "PENDING" and eligible and eligible > now else None
        return Job(
            job_id=job_id, name=j.name or "", user=j.user_name or str(j.user_id),
            account=j.account or "", partition=j.partition or "", state=state,
            reason=j.state_reason or "None", state_flags=flags,
            array_job_id=array_id, array_task_id=task if array_id is not None else None,
            het_job_id=het, het_job_offset=_int(j.heterogeneous_offset) if het else None,
            user_id=j.user_id, qos=j.qos or "", priority=_int(j.priority),
            site_factor=sites.get(job_id, 0), node_count=node_count,
            gpus_per_node=per_node, gpus=gpus, gpu_type=gpu_type,
            cpus=_int(j.cpus, 1), memory_mb=int(mem), time_limit=_minutes(j.time_limit),
            submit_time=_time(j.submit_time), eligible_time=eligible,
            start_time=_time(j.start_time), end_time=_time(j.end_time),
            restart_count=_int(j.requeue_count), requeue=bool(j.is_requeueable),
            features=",".join(j.constraints or ()), reservation=j.reservation or "",
            nodes=hosts if placed else (),
            gpus_on_node=on_node,
            dependency=_dependency_text(j.dependencies),
            comment=j.comment or "", admin_comment=j.admin_comment or "",
            begin_time=begin,
            exit_code=_opt_int(getattr(j, "exit_code", None)),
            exit_signal=_opt_int(getattr(j, "exit_code_signal", None)) or None,
            excluded_nodes=_excluded(getattr(j, "excluded_nodes", None)),
            submit_line=getattr(j, "submit_line", None) or "",
        )

    @staticmethod
    def _node(n: Any) -> Node:
        state, flags = parse.node_state(n.state or "UNKNOWN")
        alloc = parse.gpus_by_type(_gres_text(n.allocated_gres))
        return Node(
            name=n.name, state=state, flags=flags, reason=n.reason or "",
            cpus=_int(n.total_cpus), cpus_alloc=_int(n.allocated_cpus),
            memory_mb=_int(n.real_memory), memory_alloc_mb=_int(n.allocated_memory),
            gpus_by_type=parse.gpus_by_type(_gres_text(n.configured_gres)),
            # Empty in pyslurm 25.11.2 even with GPUs in use: let assemble() derive it.
            gpus_alloc_by_type=alloc if alloc else parse._UNKNOWN_ALLOC,
            features=tuple(n.available_features or ()),
            partitions=tuple(n.partitions or ()),
        )

    @staticmethod
    def _partition(p: Any) -> Partition:
        return Partition(
            name=p.name, nodes=tuple(expand(p.nodes or "")),
            priority_tier=_int(p.priority_tier, 1),
            preempt_mode=str(p.preempt_mode or "OFF").upper(),
            default=bool(p.is_default), state=str(p.state or "UP").upper(),
            max_time=_minutes(p.max_time), default_time=_minutes(p.default_time),
            grace_time=float(_int(p.preemption_grace_time)),
        )

    @staticmethod
    def _reservation(r: Any) -> Reservation:
        flags = frozenset(_RESV_FLAG_FROM_PYSLURM.get(f.name, f.name)
                          for f in type(r.flags) if f in r.flags and f.name)
        return Reservation(
            name=r.name, nodes=tuple(expand(r.nodes or "")),
            start_time=_time(r.start_time), end_time=_time(r.end_time), flags=flags,
            users=tuple(r.users or ()), accounts=tuple(r.accounts or ()),
            partition=r.partition or "", comment=r.comment or "",
        )

    # ---------------------------------------------------------------- writes

    def _modify(self, job_id: int, what: str, **changes: Any) -> None:
        pyslurm = self._api()

        with _rpc(f"pyslurm Job({job_id}).modify({what})"):
            pyslurm.Job(_check_id(job_id)).modify(pyslurm.JobSubmitDescription(**changes))

    def set_site_factors(self, job_ids: Sequence[int], site_factor: int) -> dict[int, SlurmError]:
        """In-process: one update per job, no process to start for any of them."""
        failed: dict[int, SlurmError] = {}
        for job_id in job_ids:
            try:
                self.set_site_factor(job_id, site_factor)
            except SlurmUnavailable:
                raise
            except SlurmError as exc:
                failed[job_id] = exc
        return failed

    def private_data(self) -> frozenset[str]:
        """Slurm's PrivateData, as :meth:`JsonCliClient.private_data` reads it."""
        return self.cli.private_data()

    def set_site_factor(self, job_id: int, site_factor: int) -> None:
        if int(site_factor) == 0:
            # pyslurm drops a falsy site_factor; scontrol sets it.
            self.cli.update_job(job_id, "sitefactor", "0")
            return
        self._modify(job_id, "site_factor", site_factor=int(site_factor))

    def signal(self, job_id: int, signal: str, target: SignalTarget = "batch") -> None:
        pyslurm = self._api()

        if target not in ("batch", "all", "steps"):
            raise ValueError(f"invalid signal target {target!r}; allowed: batch, all, steps")
        number = _signal.Signals["SIG" + parse_signal(signal)]
        # pyslurm calls the job steps without the batch shell "children".
        steps = "children" if target == "steps" else target
        with _rpc(f"pyslurm Job({job_id}).send_signal({number.name})"):
            # A plain int: pyslurm's signal_to_num tests str(sig).isnumeric().
            pyslurm.Job(_check_id(job_id)).send_signal(int(number), steps=steps)

    def job(self, job_id: int) -> Job | None:
        """One job in whatever state Slurm still remembers it (finished ones too)."""
        pyslurm = self._api()
        try:
            with _rpc(f"pyslurm Job.load({job_id})"):
                j = pyslurm.Job.load(_check_id(job_id))
            job = self._job(j, {}, self.clock())
        except JobGone:
            return None
        except UnicodeDecodeError:
            return self.cli.job(job_id)
        return self.cli.job(job_id) if _needs_cli(job) else job

    def jobs(self, job_ids: Sequence[int]) -> dict[int, Job | None]:
        """:meth:`job` of each (one RPC each: a few signalled victims)."""
        return {int(j): self.job(int(j)) for j in job_ids}

    def batch_script(self, job_id: int) -> str:
        pyslurm = self._api()
        with _rpc(f"pyslurm Job({job_id}).get_batch_script()"):
            text = pyslurm.Job(_check_id(job_id)).get_batch_script()
        return text if isinstance(text, str) else ""

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        pyslurm = self._api()

        with _rpc(f"pyslurm Job({job_id}).requeue(hold={hold})"):
            pyslurm.Job(_check_id(job_id)).requeue(hold=hold)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        self._modify(job_id, "admin_comment", admin_comment=text)

    def set_comment(self, job_id: int, text: str) -> None:
        self._modify(job_id, "comment", comment=text)

    def set_node_count(self, job_id: int, min_nodes: int, max_nodes: int) -> None:
        # scontrol's NumNodes=MIN-MAX (slurm/commands.py): Slurm's own parsing.
        self.cli.set_node_count(_check_id(job_id), min_nodes, max_nodes)

    def set_begin_time(self, job_id: int, begin: float | None) -> None:
        self._modify(job_id, "begin_time", begin_time="now" if begin is None else int(begin))

    def set_excluded_nodes(self, job_id: int, nodes: Sequence[str]) -> None:
        # Through scontrol: one well-tested path for a rare call.
        self.cli.set_excluded_nodes(job_id, nodes)

    def drain_node(self, node: str, reason: str) -> None:
        self.cli.drain_node(node, reason)

    def ended_jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        """The ended jobs Slurm still keeps (of ``job_ids``, or all): those the
        last snapshot's load listed, once (the cycle's own read, in process;
        one the load could not read faithfully, see ``_needs_cli``, through
        the CLI by its id); through squeue when there is no such load."""
        kept, self._ended = self._ended, None
        if kept is None:
            return self.cli.ended_jobs(job_ids)
        ended, odd = kept
        wanted = None if job_ids is None else {int(j) for j in job_ids}
        out = [j for j in ended if wanted is None or j.job_id in wanted]
        for job_id in odd:
            if wanted is None or job_id in wanted:
                job = self.cli.job(job_id)
                if job is not None and job.state.is_finished:
                    out.append(job)
        return out

    def set_job_reservation(self, job_id: int, name: str) -> None:
        # pyslurm drops an empty reservation (falsy) instead of clearing it;
        # scontrol does both, with the same messages.
        if any(c in name for c in " \t\n=,"):
            raise ValueError(f"invalid reservation name {name!r}; allowed: no spaces, = or ,")
        self.cli.update_job(_check_id(job_id), "reservationname", name)

    def _resv_fields(self, spec: ReservationSpec, create: bool) -> dict[str, Any]:
        pyslurm = self._api()

        reservation_args(spec, create)  # same validation, same messages
        fields: dict[str, Any] = {"start_time": int(spec.start_time),
                                  "duration": int(spec.duration_minutes)}
        if spec.nodes:
            fields["nodes"] = compress(spec.nodes)
        if spec.users:
            fields["users"] = list(spec.users)
        if spec.accounts:
            fields["accounts"] = list(spec.accounts)
        if spec.partition:
            fields["partition"] = spec.partition
        if spec.flags:
            names = [_RESV_FLAG_TO_PYSLURM.get(f.upper(), f.upper()) for f in spec.flags]
            unknown = [f for f in names if f not in pyslurm.ReservationFlags.__members__]
            if unknown:
                raise ValueError(f"reservation flags {unknown} unknown to pyslurm")
            fields["flags"] = pyslurm.ReservationFlags.from_list(names)
        return fields

    def create_reservation(self, spec: ReservationSpec) -> None:
        pyslurm = self._api()

        fields = self._resv_fields(spec, create=True)
        with _rpc(f"pyslurm Reservation({spec.name}).create", ReservationError):
            pyslurm.Reservation(name=spec.name, **fields).create()

    def update_reservation(self, spec: ReservationSpec) -> None:
        pyslurm = self._api()

        fields = self._resv_fields(spec, create=False)
        fields.pop("flags", None)  # as with scontrol: flags are set at creation
        with _rpc(f"pyslurm Reservation({spec.name}).modify", ReservationError):
            pyslurm.Reservation(name=spec.name, **fields).modify()

    def delete_reservation(self, name: str) -> None:
        pyslurm = self._api()

        with _rpc(f"pyslurm Reservation({name}).delete", ReservationError):
            pyslurm.Reservation(name).delete()


#: What ``squeue`` lists without ``--states`` (its default filter, print.c
#: ``_filter_job``): jobs pending, running, suspended, staging out or still
#: completing. pyslurm's ``Jobs.load()`` also returns jobs that ended but are
#: still in slurmctld's memory (MinJobAge), which the JSON adapter never sees.
#: pyslurm's ``state`` is Slurm's ``job_state_string()``: one word, a flag
#: (COMPLETING, REQUEUED, ...) in place of the base state when one is set;
#: every flag word but REVOKED belongs to a job squeue lists.
_SQUEUE_WORDS = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "STAGE_OUT", "CONFIGURING",
    "EXPEDITING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT",
    "STOPPED", "RESV_DEL_HOLD", "SIGNALING",
})


def _listed_by_squeue(j: Any) -> bool:
    return str(j.state or "").upper() in _SQUEUE_WORDS


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _excluded(value: Any) -> tuple[str, ...]:
    """pyslurm gives a list of names or a hostlist string (or nothing)."""
    if not value:
        return ()
    if isinstance(value, str):
        try:
            return tuple(expand(value))
        except HostlistError:
            return ()
    return tuple(str(v) for v in value)


def _check_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"invalid job id {job_id!r}; allowed: a positive integer")
    return job_id


def _dependency_text(deps: Any) -> str:
    """pyslurm's parsed dependency dict back to Slurm's text (afterok:1,...)."""
    if not deps:
        return ""
    if isinstance(deps, str):
        return deps
    deps = dict(deps)
    parts = []
    for kind, ids in deps.items():
        if isinstance(ids, list | tuple) and ids:
            parts.append(f"{kind}:{':'.join(str(i) for i in ids)}")
        elif ids is True:
            parts.append(str(kind))
    # pyslurm's "satisfy": "any" stands for Slurm's "?" separator.
    return ("?" if deps.get("satisfy") == "any" else ",").join(parts)

