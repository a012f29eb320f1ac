"""slurmpolicy: the policy layer for GPU training clusters on Slurm."""

__version__ = "0.1.0"
