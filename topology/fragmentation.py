"""Fragmentation: how much free GPU capacity is scattered where no job can use it.

Owns :func:`fragmentation`. Per domain of one level (leaf by default) and
overall it counts:

- free GPUs (GPUs whose NVLink is down are not counted as free);
- stranded GPUs: free GPUs that none of the waiting shapes could use. A
  host's free GPUs serve a shape when the host is eligible for it (type,
  memory, at least ``gpus_per_node`` free) and the shape's scope holds enough
  such hosts (the host's domain at ``shape.level`` in strict mode, the whole
  cluster otherwise); of its free GPUs, whole multiples of ``gpus_per_node``
  count as served. With no shapes nothing is stranded;
- a shape-independent index: 1 - free GPUs on entirely free hosts / free
  GPUs (0 when free capacity sits on whole hosts, towards 1 when thinly spread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from slurmpolicy.topology.types import DomainFragmentation, Fragmentation, Level, Shape

if TYPE_CHECKING:
    from slurmpolicy.topology.fabric import Fabric


def _served(fab: Fabric, free: list[int], shape: Shape) -> list[int]:
    """GPUs of each host that this shape could use (0 where it could not)."""
    g = shape.gpus_per_node
    need = max(g, 1)
    want = shape.gpu_type.lower() if shape.gpu_type else None
    ok = [False] * len(free)
    for i, f in enumerate(free):
        if f < need:
            continue
        if want is not None and (fab._gpu_type[i] or "").lower() != want:
            continue
        if shape.min_gpu_memory_gb is not None:
            mem = fab._gpu_mem[i]
            if mem is None or mem < shape.min_gpu_memory_gb:
                continue
        ok[i] = True
    scope = fab._dom[shape.level] if shape.strict else fab._dom[Level.CLUSTER]
    per: dict[int, int] = {}
    for i, flag in enumerate(ok):
        if flag:
            per[scope[i]] = per.get(scope[i], 0) + 1
    out = [0] * len(free)
    for i, flag in enumerate(ok):
        if flag and per[scope[i]] >= shape.nodes:
            out[i] = free[i] if g == 0 else (free[i] // g) * g
    return out


def fragmentation(fab: Fabric, free: Mapping[str, int], shapes: Sequence[Shape] = (),
                  level: Level = Level.LEAF,
                  free_slices: Mapping[str, int] | None = None) -> Fragmentation:
    """Fragmentation per domain of ``level`` and overall; see the module docstring.

    GPU slices (MIG instances, shards) are counted on their own: all the
    fabric's slices, and of them the free ones (``free_slices`` per host;
    None: all free). Whole GPUs cut into slices are not free GPUs."""
    free_col = [max(0, min(free.get(h, 0), fab._usable[i])) for i, h in enumerate(fab.hosts)]
    served = [0] * len(free_col)
    for shape in shapes:
        for i, s in enumerate(_served(fab, free_col, shape)):
            if s > served[i]:
                served[i] = s
    stranded = [f - s for f, s in zip(free_col, served, strict=True)] if shapes else \
        [0] * len(free_col)
    col = fab._dom[level]
    names = fab._dom_names[level]
    per_free = [0] * len(names)
    per_stranded = [0] * len(names)
    per_largest = [0] * len(names)
    whole = 0
    for i, f in enumerate(free_col):
        d = col[i]
        per_free[d] += f
        per_stranded[d] += stranded[i]
        per_largest[d] = max(per_largest[d], f)
        if f and f == fab._gpus[i]:
            whole += f
    total = sum(free_col)
    by_domain = tuple(
        DomainFragmentation(domain=names[d], level=level, free_gpus=per_free[d],
                            stranded_gpus=per_stranded[d], largest_free_host=per_largest[d])
        for d in range(len(names))
    )
    slices = fab.total_slices
    if free_slices is None:
        loose = slices
    else:
        loose = sum(min(free_slices.get(h, 0), len(fab.slices_of(h))) for h in fab.hosts)
    return Fragmentation(
        slices=slices, free_slices=loose,
        free_gpus=total, stranded_gpus=sum(stranded),
        index=0.0 if total == 0 else round(1.0 - whole / total, 6),
        by_domain=by_domain, level=level, largest_domain_free=max(per_free, default=0),
        whole_host_free=whole,
    )
