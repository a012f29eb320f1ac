"""The inspector's terminal views: rich renderables of the queue, running jobs,
fabric, preemptions and decisions (``views``), the data behind them
(``frame``, ``feed``) and the live ``top`` application (``app``).

Imports here stay lazy: ``import slurmpolicy.tui`` loads neither rich nor
textual, so that commands which do not draw stay fast.
"""

from __future__ import annotations

from typing import Any


def run_top(feed: Any = None, **options: Any) -> None:
    """Run the live ``top`` view in this terminal until the user quits.

    Options: ``settings``, ``client`` (a SlurmClient), ``from_dir``, ``journal``,
    ``interval`` (seconds between reads), ``user``, ``account``, ``partition``
    (initial filters). See :func:`slurmpolicy.tui.app.run_top`.
    """
    from slurmpolicy.tui.app import run_top as _run_top

    _run_top(feed, **options)


__all__ = ["run_top"]
