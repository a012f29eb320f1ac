"""The pyslurm adapter (placeholder until its implementation lands)."""

from __future__ import annotations


def unavailable_reason() -> str | None:
    try:
        import pyslurm  # noqa: F401
    except ImportError as exc:
        return f"pyslurm does not import ({exc})"
    return "pyslurm adapter not implemented yet"
