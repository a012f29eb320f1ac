"""Slurm's outputs -> model records: the decoding half of the JSON CLI adapter.

This module owns everything between the bytes Slurm prints and the frozen
records of :mod:`slurmpolicy.model`. It runs no command, so the same code
reads a live controller (:mod:`slurmpolicy.slurm.jsoncli`), a saved set of
outputs (``--from-dir``, the fixtures) and the benchmark's synthetic queues.

Shapes understood:

- ``squeue --json``: Slurm 22.05 (openapi v0.0.38: plain numbers, one state
  string) up to 25.11 (data_parser v0.0.44: numbers as
  ``{"set", "infinite", "number"}``, states as lists). One set of msgspec
  Structs covers both through unions, so a 20,000-job listing decodes in a
  fraction of a second and only the fields we name are materialised.
- ``sinfo --json`` of 22.05 (a flat ``nodes`` list) and
  ``scontrol show nodes --json`` of 23.02+ (same flat list).
- ``scontrol show partitions|reservations --json`` (23.02+) and their
  one-line text form (``-o``) for 22.05, which has no ``scontrol --json``.
- ``sprio -h -o '%i|%S'`` and ``sprio -l`` for site factors.

Unknown fields are ignored; a missing required field raises
:class:`~slurmpolicy.errors.SlurmParseError` naming it.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from slurmpolicy import gcpause
from slurmpolicy.errors import SlurmError, SlurmParseError
from slurmpolicy.hostlist import HostlistError, expand
from slurmpolicy.model import (
    EMPTY_GRES,
    Job,
    JobState,
    Node,
    Partition,
    Reservation,
    Snapshot,
)
from slurmpolicy.slurm.classify import classify

# Slurm's sentinels in the plain-number shape (22.05): NO_VAL and INFINITE,
# 32 and 64 bit. Anything at or above NO_VAL means "not a real number".
_NO_VAL = 0xFFFFFFFE
_NO_VAL16 = 0xFFFE

# --------------------------------------------------------------------------
# msgspec Structs: only the fields we use. gc=False: these hold no cycles and
# 20,000 of them should not wake the cyclic collector.


class Num(msgspec.Struct, gc=False):
    """data_parser's number: ``{"set": true, "infinite": false, "number": 5}``."""

    set: bool = True
    infinite: bool = False
    number: int | float = 0


# A number as any supported Slurm prints it.
N = int | float | Num | None
# A state or flag set: one string ("RUNNING", "IDLE+DRAIN") or a list.
States = str | list[str]


class _Version(msgspec.Struct, gc=False):
    release: str = ""
    cluster: str = ""


class _Meta(msgspec.Struct, gc=False):
    # 22.05 spells it "Slurm", 23.02+ "slurm".
    Slurm: _Version | None = None
    slurm: _Version | None = None

    @property
    def release(self) -> str:
        v = self.slurm or self.Slurm
        return v.release if v else ""

    @property
    def cluster(self) -> str:
        v = self.slurm or self.Slurm
        return v.cluster if v else ""


class _ExitSignal(msgspec.Struct, gc=False):
    id: N = None
    name: str = ""


class ExitCode(msgspec.Struct, gc=False):
    """23.02+: ``{"status": [...], "return_code": N, "signal": {"id": N}}``."""

    status: list[str] = []
    return_code: N = None
    signal: _ExitSignal | None = None


def exit_status(value: int | ExitCode | None) -> tuple[int | None, int | None]:
    """(return code, terminating signal) of a job; 22.05 prints the raw wait status."""
    if value is None:
        return None, None
    if isinstance(value, int):
        if value >= _NO_VAL:
            return None, None
        return (value >> 8) & 0xFF, (value & 0x7F) or None
    code = num(value.return_code)
    sig = num(value.signal.id) if value.signal is not None else None
    return (int(code) if code is not None else None), (int(sig) if sig else None)


class JobRecord(msgspec.Struct, gc=False):
    job_id: int
    name: str
    user_name: str
    partition: str
    job_state: States
    user_id: int | None = None
    account: str = ""
    qos: str = ""
    state_reason: str = "None"
    array_job_id: N = None
    array_task_id: N = None
    het_job_id: N = None
    het_job_offset: N = None
    priority: N = None
    node_count: N = None
    cpus: N = None
    memory_per_node: N = None
    memory_per_cpu: N = None
    time_limit: N = None
    submit_time: N = None
    eligible_time: N = None
    start_time: N = None
    end_time: N = None
    restart_cnt: int = 0
    requeue: bool = False
    features: str = ""
    resv_name: str = ""
    nodes: str = ""
    dependency: str = ""
    comment: str = ""
    admin_comment: str = ""
    cluster: str = ""
    tres_per_node: str = ""
    tres_per_job: str = ""
    tres_per_task: str = ""
    tres_alloc_str: str = ""
    gres_detail: list[str] = []
    exit_code: int | ExitCode | None = None
    excluded_nodes: str = ""
    submit_line: str = ""


class JobsDoc(msgspec.Struct, gc=False):
    jobs: list[JobRecord]
    meta: _Meta = msgspec.field(default_factory=_Meta)
    errors: list[Any] = []
    last_update: N = None


class NodeRecord(msgspec.Struct, gc=False):
    name: str
    state: States
    state_flags: list[str] = []
    reason: str = ""
    cpus: N = 0
    alloc_cpus: N = 0
    real_memory: N = 0
    alloc_memory: N = 0
    gres: str = ""
    gres_used: str = ""
    features: States = ""
    partitions: list[str] = []


class NodesDoc(msgspec.Struct, gc=False):
    nodes: list[NodeRecord]
    meta: _Meta = msgspec.field(default_factory=_Meta)
    errors: list[Any] = []


class _PartNodes(msgspec.Struct, gc=False):
    configured: str = ""


class _PartPriority(msgspec.Struct, gc=False):
    tier: int = 1


class _PartTime(msgspec.Struct, gc=False):
    time: N = None


class _PartState(msgspec.Struct, gc=False):
    state: list[str] = []


class PartitionRecord(msgspec.Struct, gc=False):
    name: str
    nodes: _PartNodes = msgspec.field(default_factory=_PartNodes)
    priority: _PartPriority = msgspec.field(default_factory=_PartPriority)
    maximums: _PartTime = msgspec.field(default_factory=_PartTime)
    defaults: _PartTime = msgspec.field(default_factory=_PartTime)
    grace_time: int = 0
    partition: _PartState = msgspec.field(default_factory=_PartState)
    # Not printed by 25.11's data_parser; read when a release does.
    preempt_mode: States = ""
    flags: list[str] = []


class PartitionsDoc(msgspec.Struct, gc=False):
    partitions: list[PartitionRecord]
    errors: list[Any] = []


class ReservationRecord(msgspec.Struct, gc=False):
    name: str
    node_list: str = ""
    start_time: N = None
    end_time: N = None
    flags: States = []
    users: States = ""
    accounts: States = ""
    partition: str = ""
    comment: str = ""


class ReservationsDoc(msgspec.Struct, gc=False):
    reservations: list[ReservationRecord]
    errors: list[Any] = []


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type) -> msgspec.json.Decoder[Any]:
    dec = _DECODERS.get(kind)
    if dec is None:
        dec = _DECODERS[kind] = msgspec.json.Decoder(kind)
    return dec


_MISSING = re.compile(r"missing required field `([^`]+)`")


def decode(raw: bytes, kind: type, what: str) -> Any:
    """Decode ``raw`` as ``kind``; Slurm's error list and bad shapes become typed errors.

    Slurm prints user-written strings (job names, comments) byte for byte; a
    job name that is not UTF-8 would make the whole listing undecodable and let
    one user blind the daemon. Such bytes are replaced, deterministically, by
    U+FFFD (Python's ``errors="replace"``) and the listing decoded again.
    """
    dec = _decoder(kind)
    try:
        doc = dec.decode(raw)
    except msgspec.DecodeError as exc:
        if "utf-8" not in str(exc).lower():
            raise _parse_error(exc, what) from exc
        try:
            doc = dec.decode(raw.decode("utf-8", "replace").encode("utf-8"))
        except msgspec.DecodeError as exc2:
            raise _parse_error(exc2, what) from exc2
    errors = getattr(doc, "errors", None)
    if errors:
        raise classify("; ".join(_error_text(e) for e in errors), what)
    return doc


def _error_text(entry: Any) -> str:
    if isinstance(entry, dict):
        for key in ("description", "error"):
            if entry.get(key):
                return str(entry[key])
    return str(entry)


def _parse_error(exc: Exception, what: str) -> SlurmParseError:
    text = str(exc)
    m = _MISSING.search(text)
    if m:
        return SlurmParseError(
            f"{what}: Slurm's output lacks the required field `{m.group(1)}` ({text})",
            slurm_message=text,
        )
    return SlurmParseError(f"{what}: unexpected shape of Slurm's output ({text})",
                           slurm_message=text)


# --------------------------------------------------------------------------
# Small value helpers.


def num(value: N) -> int | float | None:
    """A plain number, or None for unset / infinite / Slurm's NO_VAL sentinels."""
    if type(value) is int:  # the common case, first: this runs ~10x per job
        return value if value < _NO_VAL else None
    if value is None:
        return None
    if isinstance(value, Num):
        if not value.set or value.infinite:
            return None
        value = value.number
    if value >= _NO_VAL:
        return None
    return value


def int_or(value: N, default: int = 0) -> int:
    v = num(value)
    return default if v is None else int(v)


def epoch(value: N) -> float | None:
    """A time: seconds since the epoch; 0 and unset are None."""
    v = num(value)
    return float(v) if v else None


def minutes(value: N) -> float | None:
    """A Slurm time limit in minutes -> seconds; unset or infinite -> None (UNLIMITED)."""
    v = num(value)
    return None if v is None else float(v) * 60.0


def words(value: States) -> list[str]:
    if isinstance(value, list):
        return [w for w in value if w]
    return [w for w in value.replace("+", ",").split(",") if w] if value else []


def csv(value: States) -> tuple[str, ...]:
    """A comma list or JSON list of names; Slurm's "(null)" is empty."""
    items = value if isinstance(value, list) else value.split(",")
    return tuple(i.strip() for i in items if i.strip() and i.strip() not in ("(null)", "N/A"))


# --------------------------------------------------------------------------
# GRES and TRES strings.

_GRES_ENTRY = re.compile(r"^(?:gres[/:])?gpu(?::([^:=()]*))?(?:[:=](\d+)([KMG]?))?(?:\(.*\))?$")
_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses: ``gpu:h100:2(IDX:0,3),nic:1``."""
    out: list[str] = []
    depth = start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


@functools.lru_cache(maxsize=4096)
def gpus_by_type(text: str) -> Mapping[str, int]:
    """GPUs by type in a GRES or TRES string; ``""`` is the untyped count.

    Understands ``gpu:h100:8(S:0-1)``, ``gpu:h100:4(IDX:0-3)``, ``gpu:8``,
    ``gres:gpu:8`` (22.05 tres_per_node), ``gres/gpu:h100:8`` (25.11),
    ``gres/gpu=16`` and ``gres/gpu:h100=16`` (TRES), and lists of them.
    Other GRES (nic, shard, mps) are not GPUs and are skipped. Cached: a
    cluster's queue repeats a handful of these strings thousands of times.
    """
    if not text or text in ("(null)", "N/A"):
        return EMPTY_GRES
    out: dict[str, int] = {}
    for entry in _split_top(text):
        entry = entry.strip()
        m = _GRES_ENTRY.match(entry)
        if not m:
            continue
        gtype, count, mult = m.group(1), m.group(2), m.group(3)
        # "gpu:8" puts the count where a type would be.
        if gtype is not None and count is None and gtype.isdigit():
            gtype, count = "", gtype
        n = int(count) * _MULT[mult or ""] if count is not None else 1
        key = gtype or ""
        out[key] = out.get(key, 0) + n
    return MappingProxyType(out) if out else EMPTY_GRES


_SHARD_ENTRY = re.compile(r"^(?:gres[/:])?shard(?::([^:=()]*))?(?:[:=](\d+))?(?:\(.*\))?$")


@functools.lru_cache(maxsize=1024)
def shards_by_type(text: str) -> Mapping[str, int]:
    """GPU shards by the GPU type they share in a GRES string (``shard:a100:4``,
    ``shard:8``, ``gres/shard=8``); ``""`` is the untyped count."""
    if not text or text in ("(null)", "N/A"):
        return EMPTY_GRES
    out: dict[str, int] = {}
    for entry in _split_top(text):
        m = _SHARD_ENTRY.match(entry.strip())
        if not m:
            continue
        gtype, count = m.group(1), m.group(2)
        if gtype is not None and count is None and gtype.isdigit():
            gtype, count = "", gtype
        key = gtype or ""
        out[key] = out.get(key, 0) + (int(count) if count is not None else 1)
    return MappingProxyType(out) if out else EMPTY_GRES


@functools.lru_cache(maxsize=4096)
def gpu_info(text: str) -> tuple[int, str | None]:
    """(GPU count, the one GPU type or None) of a GRES/TRES string; cached."""
    by_type = gpus_by_type(text)
    types = [t for t in by_type if t]
    return sum(by_type.values()), (types[0] if len(types) == 1 else None)


def gpu_count(text: str) -> int:
    return gpu_info(text)[0]


def gpu_type_of(text: str) -> str | None:
    return gpu_info(text)[1]


# --------------------------------------------------------------------------
# States.

_JOB_FLAG_BASE = {
    # 22.05 prints some flags instead of the base state in its one string.
    "COMPLETING": JobState.COMPLETED,
    "CONFIGURING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "REVOKED": JobState.CANCELLED,
    "POWER_UP_NODE": JobState.PENDING,
    "LAUNCH_FAILED": JobState.PENDING,
    "UPDATE_DB": JobState.PENDING,
}
_JOB_STATES = {s.value: s for s in JobState}


@functools.lru_cache(maxsize=256)
def _job_state_words(key: tuple[str, ...]) -> tuple[JobState, frozenset[str]]:
    base: JobState | None = None
    flags: set[str] = set()
    for w in key:
        w = w.upper()
        if base is None and w in _JOB_STATES:
            base = _JOB_STATES[w]
        else:
            flags.add(w)
    if base is None:
        for f in flags:
            if f in _JOB_FLAG_BASE:
                base = _JOB_FLAG_BASE[f]
                break
    if base is None:
        raise ValueError(f"unknown Slurm job state {'+'.join(key)!r}")
    return base, frozenset(flags)


def job_state(value: States) -> tuple[JobState, frozenset[str]]:
    return _job_state_words(tuple(words(value)))


NODE_BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_NODE_SUFFIX = {
    "*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
    "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
_NODE_ALIASES = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "UNK": "UNKNOWN", "FUT": "FUTURE",
                 "DRAINED": "DRAIN", "DRAINING": "DRAIN", "DRNG": "DRAIN", "DRAIN": "DRAIN"}


@functools.lru_cache(maxsize=256)
def _node_state_words(key: tuple[str, ...]) -> tuple[str, frozenset[str]]:
    base = ""
    flags: set[str] = set()
    for w in key:
        w = w.upper()
        while w and w[-1] in _NODE_SUFFIX:
            flags.add(_NODE_SUFFIX[w[-1]])
            w = w[:-1]
        w = _NODE_ALIASES.get(w, w)
        if not base and w in NODE_BASE_STATES:
            base = w
        elif w:
            flags.add(w)
    return base or "UNKNOWN", frozenset(flags)


def node_state(value: States, extra_flags: Iterable[str] = ()) -> tuple[str, frozenset[str]]:
    base, flags = _node_state_words(tuple(words(value)))
    extra = frozenset(f.upper() for f in extra_flags)
    return base, (flags | extra) if extra else flags


# --------------------------------------------------------------------------
# Jobs.


def _opt_id(value: N) -> int | None:
    v = num(value)
    return int(v) if v else None


def job_from_record(r: JobRecord, site_factors: Mapping[int, int] = MappingProxyType({}),
                    now: float | None = None) -> Job:
    try:
        state, flags = job_state(r.job_state)
    except ValueError as exc:
        raise SlurmParseError(f"job {r.job_id}: field `job_state`: {exc}") from exc
    node_count = int_or(r.node_count, 1) or 1
    per_node, gpu_type = gpu_info(r.tres_per_node)
    per_job, job_type = gpu_info(r.tres_per_job) if r.tres_per_job else (0, None)
    if per_job and not gpu_type:
        gpu_type = job_type
    try:
        hosts = tuple(expand(r.nodes)) if r.nodes else ()
    except HostlistError as exc:
        raise SlurmParseError(f"job {r.job_id}: field `nodes`: {exc}") from exc
    on_node: Mapping[str, int] = EMPTY_GRES
    if hosts and r.gres_detail:
        # gres_detail lists one entry per allocated node, in hostlist order.
        counts: dict[str, int] = {}
        for host, detail in zip(hosts, r.gres_detail, strict=False):
            counts[host], detail_type = gpu_info(detail)
            if not gpu_type:
                gpu_type = detail_type
        on_node = MappingProxyType(counts)
    elif hosts and per_node:
        on_node = MappingProxyType(dict.fromkeys(hosts, per_node))
    if per_job:
        gpus = per_job
        if not per_node:
            per_node = max(on_node.values()) if on_node else -(-per_job // node_count)
    else:
        gpus = sum(on_node.values()) if on_node else per_node * node_count
    if not gpus and r.tres_alloc_str:
        gpus = gpu_count(r.tres_alloc_str)
    mem = num(r.memory_per_node)
    if mem is None:
        per_cpu = num(r.memory_per_cpu)
        cpus = int_or(r.cpus, 1)
        mem = per_cpu * max(1, cpus // node_count) if per_cpu is not None else 0
    eligible = epoch(r.eligible_time)
    future = state is JobState.PENDING and eligible and now and eligible > now
    begin = eligible if future else None
    array_job = _opt_id(r.array_job_id)
    array_task = num(r.array_task_id)
    het_job = _opt_id(r.het_job_id)
    code, sig = exit_status(r.exit_code) if r.exit_code else (0, None)
    return make_job(
        job_id=r.job_id,
        name=r.name,
        user=r.user_name,
        account=r.account,
        partition=r.partition,
        state=state,
        reason=r.state_reason or "None",
        state_flags=flags,
        array_job_id=array_job,
        array_task_id=int(array_task) if array_job is not None and array_task is not None else None,
        het_job_id=het_job,
        het_job_offset=int_or(r.het_job_offset) if het_job is not None else None,
        user_id=r.user_id,
        qos=r.qos,
        priority=int_or(r.priority),
        site_factor=site_factors.get(r.job_id, 0),
        node_count=node_count,
        gpus_per_node=per_node,
        gpus=gpus,
        gpu_type=gpu_type,
        cpus=int_or(r.cpus, 1),
        memory_mb=int(mem),
        time_limit=minutes(r.time_limit),
        submit_time=epoch(r.submit_time),
        eligible_time=eligible,
        start_time=epoch(r.start_time),
        end_time=epoch(r.end_time),
        restart_count=r.restart_cnt,
        requeue=r.requeue,
        features=r.features,
        reservation=r.resv_name,
        nodes=hosts,
        gpus_on_node=on_node,
        dependency=r.dependency,
        comment=r.comment,
        admin_comment=r.admin_comment,
        begin_time=begin,
        exit_code=code,
        exit_signal=sig,
        excluded_nodes=_excluded(r),
        submit_line=r.submit_line,
        batch_signal="",
    )


def _excluded(r: JobRecord) -> tuple[str, ...]:
    if not r.excluded_nodes:
        return ()
    try:
        return tuple(expand(r.excluded_nodes))
    except HostlistError:
        return ()


_JOB_FIELDS = tuple(f.name for f in fields(Job))
_JOB_SETTERS = tuple((name, Job.__dict__[name].__set__) for name in _JOB_FIELDS)
_new = object.__new__


def make_job(**values: Any) -> Job:
    """``Job(**values)`` at half the cost, for listings of 20,000 jobs.

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` for
    each of its ~40 fields; setting the slots through their descriptors does
    the same work with less overhead. Only used when every field is given
    (job_from_record does so); anything else takes the ordinary constructor,
    so a field added to Job later cannot be left unset.
    """
    if len(values) != len(_JOB_FIELDS):
        return Job(**values)
    job = _new(Job)
    for name, setter in _JOB_SETTERS:
        setter(job, values[name])
    return job


def decode_jobs(raw: bytes, site_factors: Mapping[int, int] = MappingProxyType({}),
                now: float | None = None) -> tuple[list[Job], str, str, float | None]:
    """``squeue --json`` -> (jobs, Slurm release, cluster name, last_update)."""
    doc: JobsDoc = decode(raw, JobsDoc, "squeue --json")
    with gcpause.paused():
        jobs = [job_from_record(r, site_factors, now) for r in doc.jobs]
    cluster = doc.meta.cluster or next((r.cluster for r in doc.jobs if r.cluster), "")
    return jobs, doc.meta.release, cluster, epoch(doc.last_update)


# --------------------------------------------------------------------------
# Nodes.


def node_from_record(r: NodeRecord) -> Node:
    state, flags = node_state(r.state, r.state_flags)
    used = r.gres_used.strip()
    alloc = gpus_by_type(used) if used and used not in ("(null)", "N/A") else None
    return Node(
        name=r.name,
        state=state,
        flags=flags,
        reason=r.reason,
        cpus=int_or(r.cpus),
        cpus_alloc=int_or(r.alloc_cpus),
        memory_mb=int_or(r.real_memory),
        memory_alloc_mb=int_or(r.alloc_memory),
        gpus_by_type=gpus_by_type(r.gres),
        # None here means "Slurm did not say": assemble() derives it from jobs.
        gpus_alloc_by_type=alloc if alloc is not None else _UNKNOWN_ALLOC,
        features=csv(r.features),
        partitions=tuple(r.partitions),
        shards_by_type=shards_by_type(r.gres),
    )


# A marker mapping (compared by identity) for "allocation not reported".
_UNKNOWN_ALLOC: Mapping[str, int] = MappingProxyType({})


def decode_nodes(raw: bytes) -> tuple[list[Node], str]:
    """``sinfo --json`` (22.05) or ``scontrol show nodes --json`` -> (nodes, release)."""
    doc: NodesDoc = decode(raw, NodesDoc, "node listing (--json)")
    return [node_from_record(r) for r in doc.nodes], doc.meta.release


# --------------------------------------------------------------------------
# Partitions and reservations, JSON (23.02+).


def partition_from_record(r: PartitionRecord) -> Partition:
    states = [s.upper() for s in r.partition.state]
    base = next((s for s in states if s in ("UP", "DOWN", "DRAIN", "INACTIVE")), "UP")
    preempt = "+".join(words(r.preempt_mode)).upper() or "OFF"
    try:
        nodes = tuple(expand(r.nodes.configured))
    except HostlistError as exc:
        raise SlurmParseError(f"partition {r.name}: field `nodes.configured`: {exc}") from exc
    return Partition(
        name=r.name,
        nodes=nodes,
        priority_tier=r.priority.tier,
        preempt_mode=preempt,
        default="DEFAULT" in states or "DEFAULT" in (f.upper() for f in r.flags),
        state=base,
        max_time=minutes(r.maximums.time),
        default_time=minutes(r.defaults.time),
        grace_time=float(r.grace_time),
    )


def decode_partitions(raw: bytes) -> list[Partition]:
    doc: PartitionsDoc = decode(raw, PartitionsDoc, "scontrol show partitions --json")
    return [partition_from_record(r) for r in doc.partitions]


def reservation_from_record(r: ReservationRecord) -> Reservation:
    try:
        nodes = tuple(expand(r.node_list))
    except HostlistError as exc:
        raise SlurmParseError(f"reservation {r.name}: field `node_list`: {exc}") from exc
    return Reservation(
        name=r.name,
        nodes=nodes,
        start_time=epoch(r.start_time),
        end_time=epoch(r.end_time),
        flags=frozenset(w.upper() for w in words(r.flags)),
        users=csv(r.users),
        accounts=csv(r.accounts),
        partition=r.partition if r.partition != "(null)" else "",
        comment=r.comment,
    )


def decode_reservations(raw: bytes) -> list[Reservation]:
    doc: ReservationsDoc = decode(raw, ReservationsDoc, "scontrol show reservations --json")
    return [reservation_from_record(r) for r in doc.reservations]


# --------------------------------------------------------------------------
# The one-line text form of scontrol (22.05).

# A new field starts at a space followed by a key; Slurm's keys start with an
# upper-case letter (AllocNode:Sid, CPUs/Task, MCS_label). Free-text values
# (Reason, OS, Comment) may hold spaces and even "word=value": where such
# fields occur (nodes, jobs) the caller names the record's keys and only those
# start a field. Partitions and reservations, written by admins, need not.
_KEY = re.compile(r"(?:^| )([A-Z][A-Za-z0-9_/:]*)=")


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


NODE_KEYS = _keys(
    "NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUTot CPULoad AvailableFeatures "
    "ActiveFeatures Gres GresDrain GresUsed NodeAddr NodeHostName Port Version OS RealMemory "
    "AllocMem FreeMem Sockets Boards State ThreadsPerCore TmpDisk Weight Owner MCS_label "
    "Partitions BootTime SlurmdStartTime LastBusyTime ResumeAfterTime CfgTRES AllocTRES "
    "CapWatts CurrentWatts AveWatts ExtSensorsJoules ExtSensorsWatts ExtSensorsTemp Reason "
    "Comment Extra CPUSpecList MemSpecLimit InstanceId InstanceType NextState"
)


def parse_oneliner(line: str, keys: frozenset[str] | None = None) -> dict[str, str]:
    """One ``scontrol show ... -o`` line -> {key: value}, values stripped.

    Values may contain spaces only where a key of ``keys`` does not follow;
    with ``keys=None`` every capitalised ``Key=`` starts a field.
    """
    starts = [m for m in _KEY.finditer(line) if keys is None or m.group(1) in keys]
    out: dict[str, str] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def _text_time(value: str) -> float | None:
    """scontrol's local-time stamp ``2026-12-03T13:53:16``; Unknown/None/N/A -> None."""
    if not value or value in ("Unknown", "None", "N/A", "(null)"):
        return None
    return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))


def _text_limit(value: str) -> float | None:
    from slurmpolicy.durations import parse_duration

    if not value or value.upper() in ("UNLIMITED", "NONE", "INFINITE", "(NULL)", "N/A"):
        return None
    return parse_duration(value)


def _null(value: str) -> str:
    return "" if value in ("(null)", "N/A") else value


def partitions_from_text(text: str) -> list[Partition]:
    out: list[Partition] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # Any capitalised Key= starts a field: partition values hold no
        # spaces, and a key a newer Slurm adds must not run into Nodes=.
        f = parse_oneliner(line)
        name = _require(f, "PartitionName", "scontrol show partitions -o")
        try:
            out.append(Partition(
                name=name,
                nodes=tuple(expand(_null(f.get("Nodes", "")))),
                priority_tier=int(f.get("PriorityTier", "1") or 1),
                preempt_mode=f.get("PreemptMode", "OFF").upper(),
                default=f.get("Default", "NO").upper() == "YES",
                state=f.get("State", "UP").upper(),
                max_time=_text_limit(f.get("MaxTime", "UNLIMITED")),
                default_time=_text_limit(f.get("DefaultTime", "NONE")),
                grace_time=float(f.get("GraceTime", "0") or 0),
            ))
        except (ValueError, HostlistError) as exc:
            raise SlurmParseError(f"partition {name}: {exc}") from exc
    return out


def reservations_from_text(text: str) -> list[Reservation]:
    out: list[Reservation] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("No reservations"):
            continue
        f = parse_oneliner(line)
        name = _require(f, "ReservationName", "scontrol show reservations -o")
        try:
            out.append(Reservation(
                name=name,
                nodes=tuple(expand(_null(f.get("Nodes", "")))),
                start_time=_text_time(f.get("StartTime", "")),
                end_time=_text_time(f.get("EndTime", "")),
                flags=frozenset(csv(f.get("Flags", "").upper())),
                users=csv(f.get("Users", "")),
                accounts=csv(f.get("Accounts", "")),
                partition=_null(f.get("PartitionName", "")),
                comment=_null(f.get("Comment", "")),
            ))
        except (ValueError, HostlistError) as exc:
            raise SlurmParseError(f"reservation {name}: {exc}") from exc
    return out


def _require(fields: Mapping[str, str], key: str, what: str) -> str:
    value = fields.get(key)
    if not value:
        raise SlurmParseError(f"{what}: a record lacks the required field `{key}`")
    return value


# --------------------------------------------------------------------------
# sprio: the site factor of pending jobs (no listing carries it).


def site_factors_from_sprio(text: str) -> dict[int, int]:
    """``sprio -h -o '%i|%S'`` lines, or ``sprio -l`` with its header."""
    out: dict[int, int] = {}
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and "JOBID" in lines[0].split():
        header = lines[0].split()
        i_job, i_site = header.index("JOBID"), header.index("SITE")
        for ln in lines[1:]:
            cols = ln.split()
            if len(cols) > max(i_job, i_site) and cols[i_job].isdigit():
                out[int(cols[i_job])] = int(cols[i_site])
        return out
    for ln in lines:
        job, _, site = ln.strip().partition("|")
        if job.isdigit() and site.strip().lstrip("-").isdigit():
            out[int(job)] = int(site.strip())
    return out


# --------------------------------------------------------------------------
# Assembly.


def derive_gpu_use(nodes: Sequence[Node], jobs: Sequence[Job]) -> list[Node]:
    """Fill each node's allocated GPUs that Slurm did not report, from the jobs.

    A node whose ``gres_used`` was printed keeps Slurm's figure; otherwise the
    GPUs held there by running (and still completing) jobs are summed, under
    the job's GPU type or, when the job names none, the node's only type.
    """
    if not any(n.gpus_alloc_by_type is _UNKNOWN_ALLOC for n in nodes):
        return list(nodes)
    held: dict[str, dict[str | None, int]] = {}
    for j in jobs:
        if not j.gpus_on_node:
            continue
        if not (j.state is JobState.RUNNING or j.state is JobState.SUSPENDED
                or "COMPLETING" in j.state_flags):
            continue
        for host, count in j.gpus_on_node.items():
            per = held.setdefault(host, {})
            per[j.gpu_type] = per.get(j.gpu_type, 0) + count
    out: list[Node] = []
    for n in nodes:
        if n.gpus_alloc_by_type is not _UNKNOWN_ALLOC:
            out.append(n)
            continue
        # Every configured type is listed, idle ones at 0, as Slurm's
        # gres_used prints them ("gpu:h100:0(IDX:N/A)").
        alloc: dict[str, int] = dict.fromkeys(n.gpus_by_type, 0)
        types = list(n.gpus_by_type)
        for gtype, count in held.get(n.name, {}).items():
            key = gtype if gtype is not None else (types[0] if len(types) == 1 else "")
            alloc[key] = alloc.get(key, 0) + count
        out.append(replace(n, gpus_alloc_by_type=MappingProxyType(alloc) if alloc else EMPTY_GRES))
    return out


def assemble(*, taken_at: float, slurm_version: str, cluster_name: str, jobs: Sequence[Job],
             nodes: Sequence[Node], partitions: Sequence[Partition] = (),
             reservations: Sequence[Reservation] = ()) -> Snapshot:
    return Snapshot(
        taken_at=taken_at,
        slurm_version=slurm_version,
        cluster_name=cluster_name,
        jobs=tuple(jobs),
        nodes=tuple(derive_gpu_use(nodes, jobs)),
        partitions=tuple(partitions),
        reservations=tuple(reservations),
    )


# --------------------------------------------------------------------------
# A saved set of outputs (the fixtures, a support bundle, a demo).


def load_dir(path: str | Path, now: float | None = None,
             clock: Callable[[], float] = time.time) -> Snapshot:
    """Read a directory of saved Slurm outputs, named like tests/fixtures/slurm/slurm-22.05.

    Needs ``squeue.json`` and a node listing (``scontrol-show-nodes.json`` or
    the flat 22.05 ``sinfo.json``); partitions, reservations and ``sprio.txt``
    are read when present, as JSON or as the ``-o`` text form. ``now`` (the
    snapshot's time) defaults to the listing's ``last_update`` or, failing
    that, the newest submit or start time in it, so that saved outputs show
    the waits they had.
    """
    d = Path(path)
    if not d.is_dir():
        raise SlurmError(f"--from-dir {str(d)!r} is not a directory of saved Slurm outputs")
    squeue = d / "squeue.json"
    if not squeue.exists():
        raise SlurmError(f"{d}: missing squeue.json (the output of `squeue --json`)")
    sites: dict[int, int] = {}
    if (d / "sprio.txt").exists():
        sites = site_factors_from_sprio((d / "sprio.txt").read_text())
    raw_jobs = squeue.read_bytes()
    doc: JobsDoc = decode(raw_jobs, JobsDoc, "squeue --json")
    if now is None:
        now = epoch(doc.last_update)
    if now is None:
        stamps: list[float] = []
        for r in doc.jobs:
            stamps.append(epoch(r.submit_time) or 0.0)
            if "PENDING" not in words(r.job_state):  # a pending start is a forecast
                stamps.append(epoch(r.start_time) or 0.0)
        now = max(stamps) if stamps and max(stamps) > 0 else clock()
    jobs = [job_from_record(r, sites, now) for r in doc.jobs]
    cluster = doc.meta.cluster or next((r.cluster for r in doc.jobs if r.cluster), "")
    nodes_file = d / "scontrol-show-nodes.json"
    if not nodes_file.exists():
        nodes_file = d / "sinfo.json"
    if not nodes_file.exists():
        raise SlurmError(f"{d}: missing scontrol-show-nodes.json or sinfo.json")
    nodes, _ = decode_nodes(nodes_file.read_bytes())
    partitions: list[Partition] = []
    if (d / "scontrol-show-partitions.json").exists():
        partitions = decode_partitions((d / "scontrol-show-partitions.json").read_bytes())
    elif (d / "scontrol-show-partitions.txt").exists():
        partitions = partitions_from_text((d / "scontrol-show-partitions.txt").read_text())
    reservations: list[Reservation] = []
    if (d / "scontrol-show-reservations.json").exists():
        reservations = decode_reservations((d / "scontrol-show-reservations.json").read_bytes())
    elif (d / "scontrol-show-reservations.txt").exists():
        reservations = reservations_from_text((d / "scontrol-show-reservations.txt").read_text())
    return assemble(taken_at=now, slurm_version=doc.meta.release, cluster_name=cluster,
                    jobs=jobs, nodes=nodes, partitions=partitions, reservations=reservations)
