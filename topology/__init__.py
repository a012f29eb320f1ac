"""slurmpolicy.topology: the cluster's fabric as a networkx graph (NVLink/NVSwitch
domains, InfiniBand leaves and spines), its sources, placement and fragmentation.

Public API::

    from slurmpolicy.topology import Fabric, synthetic_fabric
    from slurmpolicy.topology.types import Level, Shape, Placement, NoPlacement, Fragmentation
"""

from slurmpolicy.topology.fabric import Fabric
from slurmpolicy.topology.synthetic import synthetic_fabric
from slurmpolicy.topology.types import (
    DomainFragmentation,
    Fragmentation,
    Health,
    Level,
    NoPlacement,
    Placement,
    Shape,
)

__all__ = [
    "DomainFragmentation",
    "Fabric",
    "Fragmentation",
    "Health",
    "Level",
    "NoPlacement",
    "Placement",
    "Shape",
    "synthetic_fabric",
]
