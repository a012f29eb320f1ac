"""Synthetic fabrics of any size, for tests, the simulator and benchmarks.

Owns :func:`synthetic_fabric`: a regular tree of hosts under NVLink domains,
leaves and spines, with zero-padded host names (gpu01..gpu16, gpu0001..gpu4096).
"""

from __future__ import annotations

from slurmpolicy.topology.fabric import Fabric
from slurmpolicy.topology.spec import FabricSpec, HostSpec


def synthetic_fabric(
    hosts: int,
    gpus_per_host: int = 8,
    hosts_per_nvlink: int = 1,
    hosts_per_leaf: int = 4,
    leaves_per_spine: int = 4,
    gpu_type: str | None = "h100",
    prefix: str = "gpu",
    gpu_memory_gb: float | None = 80.0,
) -> Fabric:
    """A regular fabric: ``hosts`` hosts named ``{prefix}01``.. (width = digits of
    ``hosts``, at least 2), NVLink domains of ``hosts_per_nvlink`` hosts (1: the
    domain is the host, as on HGX boards; more: ``nvl1``, ``nvl2``.. as on
    NVL72 racks), leaves ``leaf1``.. of ``hosts_per_leaf`` hosts and spines
    ``spine1``.. of ``leaves_per_spine`` leaves. A partial last group is kept.
    """
    for name, value in (("hosts", hosts), ("hosts_per_nvlink", hosts_per_nvlink),
                        ("hosts_per_leaf", hosts_per_leaf),
                        ("leaves_per_spine", leaves_per_spine)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if gpus_per_host < 0:
        raise ValueError(f"gpus_per_host must be >= 0, got {gpus_per_host}")
    width = max(2, len(str(hosts)))
    spec = FabricSpec(source="synthetic")
    leaves: set[int] = set()
    for k in range(hosts):
        name = f"{prefix}{k + 1:0{width}d}"
        leaf = k // hosts_per_leaf + 1
        leaves.add(leaf)
        spec.hosts[name] = HostSpec(
            name=name, gpus=gpus_per_host, gpu_type=gpu_type, gpu_memory_gb=gpu_memory_gb,
            nvlink=None if hosts_per_nvlink == 1 else f"nvl{k // hosts_per_nvlink + 1}",
            leaf=f"leaf{leaf}",
        )
    for leaf in sorted(leaves):
        spec.parents[f"leaf{leaf}"] = f"spine{(leaf - 1) // leaves_per_spine + 1}"
    return Fabric(spec)
