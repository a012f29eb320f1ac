"""Pausing CPython's cyclic garbage collector around bulk work.

Owns one rule: code that builds or walks tens of thousands of records at a
time (a ``squeue --json`` listing decoded, a ``plan()`` over a deep queue)
runs with the cyclic collector paused. Every container it makes is tracked,
so at CPython's default thresholds such work triggers full passes over
everything the process holds (the snapshot, the journal's intents, the
caches), none of which frees anything: reference counting frees these
records, which hold no cycles. The collector's state is restored after, and
what it did not run for is collected at its next pass.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; on again after (if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
