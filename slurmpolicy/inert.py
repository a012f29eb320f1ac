"""Untrusted text made inert for a terminal or a log line.

Owns the one rule every renderer applies to a string that came from Slurm or
from a user (job names, accounts, comments, reasons, Slurm's messages, node
reasons): control characters are shown escaped, never sent. An ANSI/OSC
escape (``ESC``), a carriage return or a newline in a job name can then
neither recolour a terminal, retitle it, hide text, nor forge a line of
``slurmpolicy log`` or of the daemon's own log.

Escaped: C0 controls and DEL (``\\n``, ``\\r``, ``\\t``, ``\\x1b`` ...), C1
controls (``\\x9b`` is a one-byte CSI), the Unicode line and paragraph
separators, and the bidirectional overrides and isolates (which reorder what
follows them on screen), and lone surrogates (undecodable bytes). Everything
else, accents and CJK included, is kept.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, TypeVar

T = TypeVar("T")

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
#: Bidi embeddings, overrides and isolates, and the marks (they reorder text).
_BIDI = (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)
_TABLE: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))},
    **_NAMED,
    **{c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *_BIDI)},
    # Lone surrogates (bytes that were not UTF-8, decoded with surrogateescape)
    # cannot be written to a UTF-8 terminal or log at all.
    **{c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)},
}


def inert(value: object) -> str:
    """``value`` as text with every control character escaped (see the module)."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text  # the common case (no Cc, Cf, Cs, Zl, Zp): nothing to escape, no copy
    return text.translate(_TABLE)


def is_inert(text: str) -> bool:
    """True when ``text`` holds no character that :func:`inert` escapes."""
    return not any(ord(c) in _TABLE for c in text)


def inert_fields(value: T) -> T:
    """A copy of a dataclass (or tuple, dict, str) with every string in it made inert."""
    return _walk(value)


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, tuple):
        return tuple(_walk(v) for v in value)
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {_walk(k): _walk(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name)) for f in dataclasses.fields(value)
                   if f.init}
        return dataclasses.replace(value, **changes)
    return value


class InertFormatter(logging.Formatter):
    """A log formatter whose every record is one line.

    The message (with its arguments, which carry job names and Slurm's
    words) is escaped, so a newline in a job name cannot start a line that
    looks like a record of its own; a traceback keeps its lines but each is
    indented, so that no line of it can pass for a record either.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = inert(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        text = super().formatException(ei)  # type: ignore[arg-type]
        return "\n".join("    | " + inert(line) for line in text.splitlines())

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("    | " + inert(line) for line in stack_info.splitlines())
