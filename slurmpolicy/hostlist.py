"""Slurm's hostlist syntax: ``dgx[01-04,07],gpu-a[1-2]b[3-4],login1``.

Owns expansion and compression of host lists as Slurm writes them, with zero
padding kept (``dgx[08-10]`` -> dgx08, dgx09, dgx10), several bracket groups
in one name (cartesian product, leftmost varying slowest, as Slurm does), and
commas inside brackets not splitting names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import product

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
#: Refuse absurd ranges instead of allocating millions of names.
MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    """A malformed hostlist; the message names the text and the problem."""


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in hostlist {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unclosed '[' in hostlist {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise HostlistError(
                f"bad range {item!r} in hostlist {whole!r}; expected N or N-M, e.g. [01-04,07]"
            )
        lo_text, hi_text = m.group(1), m.group(2)
        if hi_text is None:
            out.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(f"range {item!r} runs backwards in hostlist {whole!r}")
        if hi - lo >= MAX_HOSTS:
            raise HostlistError(f"range {item!r} in hostlist {whole!r} is too large")
        width = len(lo_text) if lo_text.startswith("0") or len(lo_text) == len(hi_text) else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def _expand_one(name: str, whole: str) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", name):
        pieces.append([name[pos:m.start()]])
        pieces.append(_expand_range(m.group(1), whole))
        pos = m.end()
    pieces.append([name[pos:]])
    return ["".join(combo) for combo in product(*pieces)]


def expand(text: str | None) -> list[str]:
    """All host names of a hostlist, in Slurm's order; ``""``/``None``/``(null)`` give []."""
    if not text or text in ("(null)", "None"):
        return []
    names: list[str] = []
    for part in _split_top(text):
        names.extend(_expand_one(part, text))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"hostlist {text[:80]!r} expands to too many hosts")
    return names


_TAIL_NUMBER = re.compile(r"^(.*?)(\d+)$")


def compress(hosts: Iterable[str]) -> str:
    """The shortest usual Slurm form: ``dgx[01-04,07],login1``. Order: sorted by prefix."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    numbered: list[tuple[str, str]] = []
    padded: dict[str, set[int]] = {}
    for host in dict.fromkeys(hosts):
        m = _TAIL_NUMBER.match(host)
        if not m:
            plain.append(host)
            continue
        prefix, digits = m.group(1), m.group(2)
        numbered.append((prefix, digits))
        if digits.startswith("0"):
            padded.setdefault(prefix, set()).add(len(digits))
    for prefix, digits in numbered:
        if digits.startswith("0"):
            width = len(digits)
        else:
            # gpu10 joins gpu01..gpu09 (width 2): zero padding does not change it.
            fits = [w for w in padded.get(prefix, ()) if w <= len(digits)]
            width = max(fits, default=0)
        groups.setdefault((prefix, width), []).append(int(digits))
    out: list[str] = sorted(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        numbers.sort()
        if len(numbers) == 1:
            out.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
