"""Durations in Slurm's own formats, and back.

Slurm's ``--time`` accepts "minutes", "minutes:seconds",
"hours:minutes:seconds", "days-hours", "days-hours:minutes" and
"days-hours:minutes:seconds"; a bare number is minutes. We accept those, and
for readability a number with one unit suffix (``90s``, ``30m``, ``2h``,
``1d``). "UNLIMITED", "INFINITE" and "-1" mean no limit and give ``inf``.
The job_submit Lua plugin implements the same grammar; tests hold them equal.
"""

from __future__ import annotations

import math
import re

_SUFFIX = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DAYS = re.compile(r"^(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?$")
_CLOCK = re.compile(r"^(\d+)(?::(\d+)(?::(\d+))?)?$")

ALLOWED = (
    "Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS;"
    " or a number with s/m/h/d (90s, 30m, 2h, 1d)"
)


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raise ValueError naming the value and the allowed forms."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return math.inf
    if m := _SUFFIX.match(value):
        return float(m.group(1)) * _UNIT[m.group(2)]
    if m := _DAYS.match(value):
        days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
        return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
    if m := _CLOCK.match(value):
        a, b, c = m.groups()
        if c is not None:  # HH:MM:SS
            return float(int(a) * 3600 + int(b) * 60 + int(c))
        if b is not None:  # MM:SS
            return float(int(a) * 60 + int(b))
        return float(int(a) * 60)  # MM
    raise ValueError(f"invalid duration {text!r}; allowed: {ALLOWED}")


def format_duration(seconds: float | None) -> str:
    """Slurm's own rendering: ``D-HH:MM:SS`` or ``HH:MM:SS``; UNLIMITED for None/inf."""
    if seconds is None or math.isinf(seconds):
        return "UNLIMITED"
    total = round(seconds)
    sign = "-" if total < 0 else ""
    total = abs(total)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"


def humanize(seconds: float | None) -> str:
    """Short words for people: ``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    if seconds is None or math.isinf(seconds):
        return "unlimited"
    s = round(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m"
    if s < 86400:
        return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{sign}{s // 86400}d{(s % 86400) // 3600:02d}h"
