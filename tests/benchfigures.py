"""Benchmarks' figures, kept for scripts/figures (which writes README's table).

A benchmark prints its figures and also calls :func:`record`; when
``SLURMPOLICY_BENCH_FIGURES`` names a file, each call appends one JSON line
to it. Nothing is asserted on the figures: they are read, never judged, here.
"""

from __future__ import annotations

import json
import os
from typing import Any

ENV = "SLURMPOLICY_BENCH_FIGURES"


def record(bench: str, **figures: Any) -> None:
    """Append ``figures`` of ``bench`` to the file ``$SLURMPOLICY_BENCH_FIGURES`` names."""
    path = os.environ.get(ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps({"bench": bench, **figures}, sort_keys=True) + "\n")
