"""Choosing the Slurm adapter a site asked for (``[slurm] adapter``).

The only module that knows both adapters; the port (:mod:`.client`) knows none.
The choice and its reason are one line (``client.adapter_note``) that the
daemon logs at start and ``slurmpolicy doctor`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurmpolicy.errors import SlurmUnavailable
from slurmpolicy.slurm.client import SlurmClient
from slurmpolicy.slurm.probe import pyslurm_status

ADAPTERS = ("auto", "jsoncli", "pyslurm")


def connect(adapter: str = "auto", **options: object) -> SlurmClient:
    """Return the adapter the site asked for.

    ``auto`` takes pyslurm when it imports (probed in a child process, so a
    missing slurm.conf cannot end this one) and was built for the Slurm that
    answers, else the JSON CLI, which works with every Slurm since 22.05.
    """
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown Slurm adapter {adapter!r}; allowed: {', '.join(ADAPTERS)}")
    note = "jsoncli: asked for in the settings ([slurm] adapter = \"jsoncli\")"
    if adapter in ("auto", "pyslurm"):
        bin_dir = options.get("bin_dir")
        env = options.get("env")
        status = pyslurm_status(bin_dir=str(bin_dir) if bin_dir else None,
                                env=env if isinstance(env, Mapping) else None)
        if status.reason is None:
            from slurmpolicy.slurm.pyslurm_client import PySlurmClient

            client: SlurmClient = PySlurmClient(**options)  # type: ignore[arg-type]
            client.adapter_note = (f"pyslurm {status.pyslurm_version}: matches Slurm "
                                   f"{status.slurm_version}")
            return client
        if adapter == "pyslurm":
            raise SlurmUnavailable(f"pyslurm adapter asked for, but {status.reason}")
        note = f"jsoncli: pyslurm not used: {status.reason}"
    from slurmpolicy.slurm.jsoncli import JsonCliClient

    client = JsonCliClient(**options)  # type: ignore[arg-type]
    client.adapter_note = note
    return client
