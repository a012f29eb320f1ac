"""Choosing the Slurm adapter a site asked for (``[slurm] adapter``).

The only module that knows both adapters; the port (:mod:`.client`) knows none.
"""

from __future__ import annotations

from slurmpolicy.slurm.client import SlurmClient


def connect(adapter: str = "auto", **options: object) -> SlurmClient:
    """Return the adapter the site asked for.

    ``auto`` takes pyslurm when it imports and was built for the Slurm that
    answers, else the JSON CLI, which works with every Slurm since 21.08.
    """
    if adapter not in ("auto", "jsoncli", "pyslurm"):
        raise ValueError(f"unknown Slurm adapter {adapter!r}; allowed: auto, jsoncli, pyslurm")
    if adapter in ("auto", "pyslurm"):
        from slurmpolicy.slurm import pyslurm_client

        reason = pyslurm_client.unavailable_reason()
        if reason is None:
            return pyslurm_client.PySlurmClient(**options)  # type: ignore[arg-type]
        if adapter == "pyslurm":
            from slurmpolicy.errors import SlurmUnavailable

            raise SlurmUnavailable(f"pyslurm adapter asked for, but {reason}")
    from slurmpolicy.slurm.jsoncli import JsonCliClient

    return JsonCliClient(**options)  # type: ignore[arg-type]
