"""slurmpolicy.topology: the cluster's fabric as a networkx graph (NVLink/NVSwitch
domains, InfiniBand leaves and spines), its sources, placement and fragmentation."""
