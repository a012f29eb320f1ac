"""Pools: which partition a job goes to when it names none, and why.

Owns the routing rule that job_submit.lua applies at submit time (the Lua
side, in ``plugin/job_submit.lua.in``, implements exactly this rule and these
messages; a test runs both on the same requests), and its uses outside the
plugin: ``slurmpolicy directives check`` (where a script would go),
``slurmpolicy why`` (why a job is where it is) and the simulator's pool report.

The site lists pools in ``[pools.NAME]`` (:class:`~slurmpolicy.settings.Pool`),
in order. A pool is one Slurm partition and what its hardware is (GPU types,
vendor, GPUs per node, nodes, GPU memory) plus what it takes (classes, a
range of job sizes in GPUs). The rule:

1. A job that names a partition keeps it. When every partition it names is a
   pool that can never run it (wrong type, too big, class not taken), it is
   refused at submit with the reasons, rather than left to wait forever.
2. Otherwise the job goes to the first whole-GPU pool, in the file's order,
   that takes it and can ever run it. A small job (at most one GPU on one node,
   no GPU type or a slice type, a GPU memory need a slice meets) also gets
   every slice pool (``slices = true``: MIG slices or shards) that fits, as
   further partitions: Slurm starts it wherever a place frees first, so it
   takes a slice when whole GPUs are scarce, and slices never split a whole
   GPU (MIG layouts are static).
3. A job that no pool can ever run is refused with each pool's reason.

``--gpu-type`` may name a vendor (``nvidia``, ``amd``, ``intel``): then any
pool of that vendor fits. A job that names a GPU type in its gres (``--gres=gpu:mi250:2``)
only fits pools with that type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurmpolicy.settings import Pool, Settings

#: Vendor names ``--gpu-type`` may use instead of a type.
VENDORS = ("nvidia", "amd", "intel")
#: Type name patterns of each vendor, used when a pool does not say its vendor.
#: MIG profiles (``1g.10gb``, ``3g.40gb``) are NVIDIA's.
_VENDOR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("amd", re.compile(r"^(amd_)?(mi\d+\w*|instinct.*|radeon.*|w\d{4}\w*)$", re.I)),
    ("intel", re.compile(r"^(intel_)?(max\d+|pvc|flex\d*|gaudi\d*)$", re.I)),
    ("nvidia", re.compile(r"^(nvidia_)?([abhlvtkp]\d+\w*|gh\d+|gb\d+|rtx\w*|a\d+x|"
                          r"(\w+_)?\d+g\.\d+gb|shard)$", re.I)),
)
#: Slurm's "no value" for unset numbers in job_desc (NO_VAL and above).
NO_VAL = 0xFFFFFFFE


def vendor_of_type(gpu_type: str) -> str:
    """The vendor of a GPU type name, '' when unknown."""
    for vendor, pattern in _VENDOR_PATTERNS:
        if pattern.match(gpu_type):
            return vendor
    return ""


def pool_vendor(pool: Pool) -> str:
    """The pool's vendor: as set, else the one vendor of its types, else ''."""
    if pool.vendor:
        return pool.vendor
    found = {vendor_of_type(t) for t in pool.gpu_types}
    return found.pop() if len(found) == 1 else ""


@dataclass(frozen=True, slots=True)
class Request:
    """What routing looks at: a job's class, size, GPU type and memory needs."""

    job_class: str
    #: GPUs of the whole job.
    gpus: int = 0
    #: Nodes (the least, for ``--nodes=MIN-MAX``).
    nodes: int = 1
    gpus_per_node: int = 0
    #: The gres type (``--gres=gpu:h100:8``), else ``--gpu-type`` (a type or a vendor).
    gpu_type: str | None = None
    #: ``--min-gpu-memory`` in GB.
    min_gpu_memory_gb: int | None = None
    #: The partition(s) the job names; None: none.
    partition: str | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a job goes and the sentence that says why."""

    #: Partitions to set (comma-joined into job_desc.partition); empty: leave as is.
    partitions: tuple[str, ...] = ()
    #: The pool chosen first; None when the job kept a partition that is no pool.
    pool: str | None = None
    #: True when the job named its partition.
    kept: bool = False
    #: One line for sbatch, ``why`` and ``directives check``.
    text: str = ""
    #: Set when the job is refused: why no pool can ever run it.
    refused: str | None = None

    @property
    def partition(self) -> str:
        return ",".join(self.partitions)


def partition_of(name: str, pool: Pool) -> str:
    return pool.partition or name


def _gb(value: int) -> str:
    return f"{value} GB"


def why_not(name: str, pool: Pool, req: Request) -> str | None:
    """Why ``pool`` can never run ``req`` (None: it can). Same words as the Lua plugin."""
    if pool.classes and req.job_class not in pool.classes:
        return f"class {req.job_class} is not one of its classes ({', '.join(pool.classes)})"
    if pool.typed_only and not req.gpu_type:
        return "it takes only jobs that ask for its GPU type or vendor"
    if req.gpu_type:
        want = req.gpu_type.lower()
        if want in VENDORS:
            vendor = pool_vendor(pool)
            if vendor and vendor != want:
                return f"its GPUs are {vendor}, not {want}"
        elif pool.gpu_types and want not in [t.lower() for t in pool.gpu_types]:
            return f"it has no {req.gpu_type} GPUs (only {', '.join(pool.gpu_types)})"
    if req.min_gpu_memory_gb and pool.gpu_memory_gb and pool.gpu_memory_gb < req.min_gpu_memory_gb:
        return (f"its GPUs have {_gb(pool.gpu_memory_gb)}, the job needs "
                f"{_gb(req.min_gpu_memory_gb)}")
    if pool.slices:
        if req.gpus < 1:
            return "a slice pool takes only jobs that ask for a GPU"
        if req.gpus > 1 or req.nodes > 1:
            return (f"the job asks {req.gpus} GPUs on {req.nodes} node(s); a slice pool takes "
                    "at most one GPU on one node")
    if req.gpus < pool.min_gpus:
        return f"the job asks {req.gpus} GPUs; the pool takes at least {pool.min_gpus}"
    if pool.max_gpus and req.gpus > pool.max_gpus:
        return f"the job asks {req.gpus} GPUs; the pool takes at most {pool.max_gpus}"
    if pool.gpus_per_node and req.gpus_per_node > pool.gpus_per_node:
        return (f"the job asks {req.gpus_per_node} GPUs per node; its nodes have "
                f"{pool.gpus_per_node}")
    if pool.nodes and req.nodes > pool.nodes:
        return f"the job asks {req.nodes} nodes; the pool has {pool.nodes}"
    if pool.capacity and req.gpus > pool.capacity:
        return f"the job asks {req.gpus} GPUs; the pool has {pool.capacity}"
    return None


def _label(name: str, pool: Pool) -> str:
    return f"pool {name} (partition {partition_of(name, pool)})"


def route(pools: Mapping[str, Pool], req: Request) -> Route:
    """Where ``req`` goes under ``pools``; see the module docstring for the rule."""
    if not pools:
        return Route(kept=bool(req.partition))
    by_partition = {partition_of(n, p): n for n, p in pools.items()}
    if req.partition:
        named = [p for p in req.partition.split(",") if p]
        reasons = []
        for part in named:
            name = by_partition.get(part)
            if name is None:
                return Route(kept=True, text=f"kept its partition {req.partition} (not a pool)")
            reason = why_not(name, pools[name], req)
            if reason is None:
                label = _label(name, pools[name])
                return Route(pool=name, kept=True,
                             text=f"kept its partition {req.partition} ({label})")
            reasons.append(f"{_label(name, pools[name])}: {reason}")
        able = [_label(n, p) for n, p in pools.items() if why_not(n, p, req) is None]
        return Route(kept=True, refused=(
            f"partition {req.partition} can never run this job: {'; '.join(reasons)}; allowed: "
            f"{', '.join(able) if able else 'no pool of this cluster'}"))
    skipped: list[str] = []
    primary: str | None = None
    extra: list[str] = []
    for name, pool in pools.items():
        reason = why_not(name, pool, req)
        if pool.slices:
            if reason is None:
                extra.append(name)
            continue
        if primary is not None:
            continue
        if reason is None:
            primary = name
        else:
            skipped.append(f"{name}: {reason}")
    if primary is None and not extra:
        every = [f"{n}: {why_not(n, p, req)}" for n, p in pools.items()]
        return Route(refused=(f"no pool can ever run this job ({'; '.join(every)}); allowed: "
                              "a job that fits one of these pools, or #SBATCH --partition="))
    chosen = [primary] if primary is not None else []
    chosen += extra
    text = "routed to " + _label(chosen[0], pools[chosen[0]])
    if primary is not None and extra:
        text += ", or a GPU slice in " + ", ".join(_label(n, pools[n]) for n in extra) + \
            " when whole GPUs are scarce"
    elif len(chosen) > 1:
        text += ", or " + ", ".join(_label(n, pools[n]) for n in chosen[1:])
    if skipped:
        text += "; not " + "; ".join(skipped)
    return Route(partitions=tuple(partition_of(n, pools[n]) for n in chosen), pool=chosen[0],
                 text=text)


# --- requests from #SBATCH lines and GRES strings (mirrored in the Lua plugin) ----

_GPU_ENTRY = re.compile(r"^(?:gres[:/])?gpu(?::([^:,]+))?(?::(\d+))?$")
_SHARD_ENTRY = re.compile(r"^(?:gres[:/])?shard(?::[^,]*)?$")


def gpu_request(text: str | None) -> tuple[int, str | None]:
    """(GPUs, type) of a gres request: ``gpu:h100:8``, ``gres:gpu:8`` (22.05's
    tres_per_node), ``gres/gpu:mi250:2`` (23.02+), ``gpu`` (one); a request of
    shards only (``shard:2``) is one slice of type ``shard``; others ignored."""
    count, gtype = 0, None
    shards = False
    for entry in (text or "").split(","):
        m = _GPU_ENTRY.match(entry.strip())
        if not m:
            shards = shards or bool(_SHARD_ENTRY.match(entry.strip()))
            continue
        first, second = m.group(1), m.group(2)
        if second is not None:
            count += int(second)
            gtype = first
        elif first is not None and first.isdigit():
            count += int(first)
        else:
            count += 1
            gtype = first
    if count == 0 and shards:
        return 1, "shard"
    return count, gtype


def node_range(text: str) -> tuple[int, int | None]:
    """``--nodes`` as (min, max): ``4`` -> (4, 4), ``2-8`` -> (2, 8); bad text -> (1, None)."""
    lo, dash, hi = text.partition("-")
    if not lo.isdigit() or (dash and not hi.isdigit()):
        return 1, None
    low = max(1, int(lo))
    return low, (int(hi) if dash else low)


_SBATCH = re.compile(r"^#SBATCH[ \t]+(.*)$")
_OPTIONS = {"--nodes": "nodes", "-N": "nodes", "--gres": "gres", "--gpus": "gpus",
            "-G": "gpus", "--gpus-per-node": "gpus_per_node", "--partition": "partition",
            "-p": "partition"}


def sbatch_request(script: bytes | str) -> dict[str, str]:
    """What the script's ``#SBATCH`` header asks for: nodes, gres, gpus,
    gpus_per_node, partition (the last line that says wins, as in sbatch)."""
    text = script.decode("latin-1") if isinstance(script, bytes) else script
    found: dict[str, str] = {}
    for number, raw in enumerate(text[:65536].split("\n")[:1000], 1):
        line = raw.rstrip("\r")
        if number == 1 and line.startswith("#!"):
            continue
        stripped = line.lstrip(" \t")
        if stripped and not stripped.startswith("#"):
            break
        m = _SBATCH.match(line)
        if not m:
            continue
        words = [w for w in re.split(r"[ \t]+", m.group(1)) if w]
        for i, word in enumerate(words):
            opt, eq, value = word.partition("=")
            if opt in _OPTIONS and eq:
                found[_OPTIONS[opt]] = value
            elif opt in _OPTIONS and i + 1 < len(words):
                found[_OPTIONS[opt]] = words[i + 1]
            elif len(word) > 2 and word[:2] in ("-N", "-G", "-p") and not word.startswith("--"):
                found[_OPTIONS[word[:2]]] = word[2:]
    return found


def request_from_options(options: Mapping[str, str], job_class: str, gpu_type: str | None,
                         min_gpu_memory_gb: float | None,
                         partition: str | None = None) -> Request:
    """A Request from sbatch-style options (as :func:`sbatch_request` returns them)."""
    nodes, _ = node_range(options.get("nodes", "1"))
    per_node, gres_type = gpu_request(options.get("gres"))
    if not per_node and options.get("gpus_per_node"):
        per_node, gres_type = gpu_request("gpu:" + options["gpus_per_node"])
    if per_node:
        gpus = per_node * nodes
    else:
        gpus, gres_type = (gpu_request("gpu:" + options["gpus"]) if options.get("gpus")
                           else (0, None))
        per_node = -(-gpus // nodes) if gpus else 0
    return Request(job_class=job_class, gpus=gpus, nodes=nodes, gpus_per_node=per_node,
                   gpu_type=gres_type or gpu_type,
                   min_gpu_memory_gb=int(min_gpu_memory_gb) if min_gpu_memory_gb else None,
                   partition=partition or options.get("partition") or None)


def describe_job(settings: Settings, job_class: str, partition: str, gpus: int, nodes: int,
                 gpus_per_node: int, gpu_type: str | None,
                 min_gpu_memory_gb: float | None) -> str | None:
    """One line for ``why``: which pool the job is in and why (None: no pools configured)."""
    pools = settings.pools
    if not pools:
        return None
    req = Request(job_class=job_class, gpus=gpus, nodes=nodes, gpus_per_node=gpus_per_node,
                  gpu_type=gpu_type,
                  min_gpu_memory_gb=int(min_gpu_memory_gb) if min_gpu_memory_gb else None)
    fresh = route(pools, req)
    named = tuple(p for p in partition.split(",") if p)
    if fresh.partitions and set(named) <= set(fresh.partitions):
        return f"pool: {fresh.text}"
    kept = route(pools, Request(**{**_fields(req), "partition": partition}))
    if kept.refused:
        return f"pool: {kept.refused}"
    if fresh.refused:
        return f"pool: {kept.text}; {fresh.refused}"
    return f"pool: {kept.text}; a job without a partition would be {fresh.text}"


def _fields(req: Request) -> dict[str, Any]:
    return {f: getattr(req, f) for f in Request.__slots__}


def lua_pools(settings: Settings) -> list[dict[str, Any]]:
    """The pools as plain data for the Lua plugin, in routing order."""
    return [{
        "name": name, "partition": partition_of(name, p), "classes": list(p.classes),
        "gpu_types": [t.lower() for t in p.gpu_types], "gpu_types_text": ", ".join(p.gpu_types),
        "vendor": pool_vendor(p), "gpus_per_node": p.gpus_per_node, "nodes": p.nodes,
        "capacity": p.capacity, "gpu_memory_gb": p.gpu_memory_gb, "min_gpus": p.min_gpus,
        "max_gpus": p.max_gpus, "slices": p.slices, "typed_only": p.typed_only,
    } for name, p in settings.pools.items()]


def pool_report(settings: Settings,
                requests: Iterable[tuple[Request, float]]) -> list[dict[str, Any]]:
    """Jobs and GPU-hours each pool would take, for the simulator's report.

    ``requests``: (request, GPU-hours) per job. A last row named ``(refused)``
    counts jobs no pool could ever run.
    """
    rows: dict[str, dict[str, Any]] = {
        name: {"pool": name, "partition": partition_of(name, p), "jobs": 0, "gpu_hours": 0.0,
               "with_slice_overflow": 0} for name, p in settings.pools.items()}
    refused: dict[str, Any] = {"pool": "(refused)", "partition": "", "jobs": 0, "gpu_hours": 0.0,
               "with_slice_overflow": 0}
    for req, gpu_hours in requests:
        r = route(settings.pools, req)
        row = refused if r.pool is None else rows[r.pool]
        row["jobs"] += 1
        row["gpu_hours"] += gpu_hours
        if len(r.partitions) > 1:
            row["with_slice_overflow"] += 1
    out = list(rows.values())
    if refused["jobs"]:
        out.append(refused)
    return out
