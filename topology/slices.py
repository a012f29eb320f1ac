"""GPU slices: MIG instances and shards, as Slurm reports them, laid out under
the physical GPUs they belong to.

Owns recognising a slice in a gres type and placing a host's slices on GPUs:

- **MIG**: Slurm's NVML autodetection names a MIG instance's gres type after
  its GPU and profile, ``nvidia_a100_3g.40gb`` or ``nvidia_h100_80gb_hbm3_4g.40gb``
  (a site writing gres.conf by hand may say ``1g.10gb`` or ``a100l.2g.20gb``).
  The profile ``Ng.Mgb`` gives its compute slices (N of 7) and memory (M GB).
  Slurm does not say which GPU an instance lives on, so the instances of a
  host are packed onto GPUs first-fit by decreasing size, 7 compute slices a
  GPU (A100, H100, H200 and B200 all cut into 7); each such GPU is whole-GPU
  capacity no more.
- **Shards** (gres ``shard``): Slurm 22.05+ reports them typed by the GPU they
  share, ``shard:a100:4`` or ``shard:1g.10gb:3``; they are spread evenly over
  the GPUs (or MIG instances) of that type.

Vendor-neutral: other vendors' partitions (AMD CPX/NPS modes) reach Slurm as
plain types and are whole GPUs here until Slurm names them as slices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurmpolicy.model import Node

#: Compute slices of one MIG-capable GPU.
MIG_COMPUTE_SLICES = 7
_MIG = re.compile(r"^(?:(?P<parent>.+?)[_.])?(?P<compute>[1-7])g\.(?P<memory>\d+)gb(?:\+me)?$",
                  re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SliceProfile:
    """What a MIG gres type says of its instance."""

    gpu_type: str
    #: The GPU's own type as the name carries it (``nvidia_a100``), '' when absent.
    parent: str
    #: Compute slices, 1..7.
    compute: int
    memory_gb: int


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """One slice on a host: a MIG instance or a shard, under GPU ``gpu``."""

    #: Index of the GPU on the host it lives on (after the whole GPUs for MIG).
    gpu: int
    #: ``mig`` or ``shard``.
    kind: str
    #: The gres type Slurm reports (``1g.10gb``; for a shard, the type it shares).
    gpu_type: str
    #: Memory it offers, in GB (None: unknown, e.g. a shard of an unknown GPU).
    memory_gb: float | None = None
    compute: int = 0


def slice_profile(gpu_type: str) -> SliceProfile | None:
    """The MIG profile in a gres type, or None when the type is a whole GPU."""
    m = _MIG.match(gpu_type or "")
    if not m:
        return None
    return SliceProfile(gpu_type=gpu_type, parent=m.group("parent") or "",
                        compute=int(m.group("compute")), memory_gb=int(m.group("memory")))


def shards_in_gres(text: str) -> dict[str, int]:
    """Shards by type in a slurm.conf ``Gres=`` value (``gpu:a100:1,shard:8``)."""
    out: dict[str, int] = {}
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if parts[0] != "shard" or len(parts) > 3:
            continue
        count = parts[-1].split("(")[0] if len(parts) > 1 else "1"
        if not count.isdigit():
            continue
        key = parts[1] if len(parts) == 3 else ""
        out[key] = out.get(key, 0) + int(count)
    return out


def is_slice_type(gpu_type: str) -> bool:
    return slice_profile(gpu_type) is not None


def whole_gpus(by_type: Mapping[str, int]) -> dict[str, int]:
    """The whole-GPU part of a node's gpu gres (slice types left out)."""
    return {t: n for t, n in by_type.items() if not is_slice_type(t)}


def slice_counts(by_type: Mapping[str, int]) -> dict[str, int]:
    """The MIG part of a node's gpu gres."""
    return {t: n for t, n in by_type.items() if is_slice_type(t)}


def layout(by_type: Mapping[str, int], shards: Mapping[str, int] = {},
           memory_of: Mapping[str, float] = {}) -> tuple[int, tuple[SliceSpec, ...]]:
    """(whole GPUs, the slices) of one host from its gres counts.

    MIG instances go on GPUs numbered after the whole ones, packed first-fit
    by decreasing size; shards of a type are spread evenly over the GPUs or
    instances of that type. ``memory_of``: GB per whole GPU type, for shards.
    """
    whole = whole_gpus(by_type)
    n_whole = sum(whole.values())
    instances: list[SliceProfile] = []
    for t, n in sorted(slice_counts(by_type).items()):
        profile = slice_profile(t)
        assert profile is not None
        instances += [profile] * max(0, n)
    instances.sort(key=lambda p: (-p.compute, p.gpu_type))
    room: list[int] = []  # free compute slices of each MIG GPU
    out: list[SliceSpec] = []
    gpu_of_type: dict[str, list[int]] = {}
    for profile in instances:
        k = next((i for i, free in enumerate(room) if free >= profile.compute), None)
        if k is None:
            room.append(MIG_COMPUTE_SLICES)
            k = len(room) - 1
        room[k] -= profile.compute
        gpu = n_whole + k
        out.append(SliceSpec(gpu=gpu, kind="mig", gpu_type=profile.gpu_type,
                             memory_gb=float(profile.memory_gb), compute=profile.compute))
        gpu_of_type.setdefault(profile.gpu_type, []).append(gpu)
    first = 0
    for t, n in sorted(whole.items()):
        gpu_of_type[t] = list(range(first, first + n))
        first += n
    for t, n in sorted(shards.items()):
        gpus = gpu_of_type.get(t) or gpu_of_type.get("") or list(range(n_whole))
        if not gpus:
            continue
        profile = slice_profile(t)
        whole_mem = memory_of.get(t.lower())
        for j in range(max(0, n)):
            gpu = gpus[j * len(gpus) // n] if n else gpus[0]
            per = n / len(gpus)
            mem = (profile.memory_gb if profile else whole_mem)
            out.append(SliceSpec(gpu=gpu, kind="shard", gpu_type=t,
                                 memory_gb=round(mem / per, 3) if mem else None))
    return n_whole, tuple(out)


def node_free(node: Node) -> tuple[int, int]:
    """(free whole GPUs, free slices) of a Slurm node.

    Whole: configured minus allocated over the node's whole-GPU types; slices:
    its free MIG instances plus its shards (Slurm's gres_used does not break
    shards down per job here, so shards count as free while the node takes work).
    """
    if not node.schedulable:
        return 0, 0
    if not any(is_slice_type(t) for t in node.gpus_by_type):
        return node.gpus_free, sum(node.shards_by_type.values())
    alloc = node.gpus_alloc_by_type
    whole = sum(max(0, n - alloc.get(t, 0)) for t, n in whole_gpus(node.gpus_by_type).items())
    mig = sum(max(0, n - alloc.get(t, 0)) for t, n in slice_counts(node.gpus_by_type).items())
    return whole, mig + sum(node.shards_by_type.values())
