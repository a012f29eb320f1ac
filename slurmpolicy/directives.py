"""The ``#SPOLICY`` directive schema: the one source of truth for what a batch
script may tell slurmpolicy, and the Python validator of it.

Owns:

- :func:`schema` - every directive (name, value type, allowed values or
  range, default, account restrictions, help, example), built from the
  site's settings (classes and their accounts, deferral windows);
- :func:`check_script` / :func:`parse_script` - read the leading comment
  block of a batch script the way sbatch reads ``#SBATCH`` lines, validate
  every ``#SPOLICY`` line and produce a :class:`~slurmpolicy.jobpolicy.JobPolicy`;
- :func:`lua_config` - the same schema as data for the job_submit Lua
  plugin (:mod:`slurmpolicy.plugin`), whose Lua code implements this exact
  grammar and emits byte-for-byte the same messages (a test runs both on
  the same scripts).

The grammar, shared with the Lua side (keep them in step):

- The script is read as bytes and, like Slurm hands it to the plugin (a C
  string), ends at its first NUL byte. Lines end at ``\\n``, as sbatch splits
  them (src/sbatch/opt.c ``next_line``). A script with a DOS line break
  (``\\r\\n``) anywhere is refused with sbatch's own words (src/sbatch/sbatch.c),
  since sbatch refuses it before any directive is read.
- The header is line 1 when it starts with ``#!``, then every line that is
  blank (C ``isspace``: space, tab, ``\\v``, ``\\f``, ``\\r``) or whose first
  non-blank character is ``#``; the first other line, a command, ends it, as
  it ends sbatch's reading of ``#SBATCH`` lines. ``#SPOLICY`` lines after it
  are not read; each (up to :data:`MAX_LATE_WARNINGS`, within
  :data:`MAX_HEADER_BYTES` after the command) is a warning, at submit and in
  ``directives check``, because the user meant it. At most
  :data:`MAX_HEADER_LINES` lines and :data:`MAX_HEADER_BYTES` bytes are
  examined, and at most
  :data:`MAX_DIRECTIVE_LINES` directive lines are accepted, so that a 1 MB
  script or one of 10,000 directive lines costs bounded time inside
  slurmctld.
- A line whose first 8 characters are ``#SPOLICY`` in any case is a
  directive line: ``#SPOLICY`` in capitals, then blanks, then
  ``--name=value`` or ``--name value`` options separated by spaces or tabs;
  a word starting with ``#`` ends the line (a comment).
- Values are printable ASCII; durations use Slurm's ``--time`` formats
  (:mod:`slurmpolicy.durations`) and are rounded to whole seconds - except
  that a checkpoint's ``grace`` and ``interval`` must not be a bare number:
  ``--time`` counts minutes but ``--signal=SIG@N`` and GraceTime count
  seconds, so ``grace=60`` is refused with both readings shown.

Every problem is reported as ``line N: <the line>: <problem>; allowed:
<what is allowed>``; at most :data:`MAX_PROBLEMS` are reported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmpolicy.durations import format_duration, parse_duration
from slurmpolicy.errors import ConfigError, InvalidDirective
from slurmpolicy.jobpolicy import Checkpoint, JobPolicy, render_admin_comment
from slurmpolicy.settings import Settings, doorbell_classes

#: The literal that starts a directive line.
PREFIX = "#SPOLICY"
#: Lines of the script examined for the header (directives after it are not read).
MAX_HEADER_LINES = 1000
#: Bytes of the script examined for the header.
MAX_HEADER_BYTES = 65536
#: Directive lines accepted; more is an error (and scanning stops there).
MAX_DIRECTIVE_LINES = 64
#: Longest directive line accepted, in bytes.
MAX_LINE_BYTES = 1024
#: Problems reported per script; scanning stops after this many.
MAX_PROBLEMS = 10
#: #SPOLICY lines after the first command warned about, per script.
MAX_LATE_WARNINGS = 3
#: sbatch's refusal of a DOS script (src/sbatch/sbatch.c), in its own words.
CRLF_PROBLEM = ("script: Batch script contains DOS line breaks (\\r\\n) instead of expected"
                " UNIX line breaks (\\n), as sbatch says; allowed: UNIX line breaks (convert"
                " with dos2unix)")
#: What C's isspace() skips: a line of only these is blank to sbatch.
BLANKS = " \t\n\v\f\r"
#: A line or value shown in a message is cut to this many characters.
SHOW_LINE = 120
SHOW_VALUE = 64
#: Suggestions ("did you mean") are offered for inputs up to this length.
SUGGEST_MAX_LEN = 40

#: Signals a job may ask to be warned with (names without "SIG"). KILL and
#: STOP cannot be caught, so they are not here.
SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "CONT", "URG", "XCPU")
TOPOLOGY_LEVELS = ("nvlink", "leaf", "spine", "any")

#: (min, max) seconds of each duration; max is inclusive.
RANGES: dict[str, tuple[int, int]] = {
    "grace": (1, 86400),
    "interval": (60, 30 * 86400),
    "after": (0, 30 * 86400),
    "expected-runtime": (1, 365 * 86400),
    "deadline": (1, 30 * 86400),
    "min-gpu-memory": (1, 4096),
}
NAME_MAX = {"gpu-type": 64, "data": 128}


@dataclass(frozen=True, slots=True)
class Directive:
    """One ``#SPOLICY --name=value`` directive as users see it."""

    name: str
    #: Kind of value: enum, checkpoint, preemptible, topology, duration, name, gigabytes, window.
    value_type: str
    #: What is allowed, in words (used verbatim in every error message).
    allowed: str
    #: What a job without this directive gets.
    default: str
    help: str
    example: str
    #: Class name -> accounts allowed to use it (only restricted classes; --class only).
    restrictions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "value_type": self.value_type, "allowed": self.allowed,
            "default": self.default, "help": self.help, "example": self.example,
            "restrictions": {k: list(v) for k, v in self.restrictions.items()},
        }


def _dur(seconds: int) -> str:
    """A limit as people read it: 90s, 30m, 2h, 1d; else Slurm's D-HH:MM:SS."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s" if seconds < 60 else format_duration(seconds)


def _range_text(key: str) -> str:
    lo, hi = RANGES[key]
    return f"from {_dur(lo)} to {_dur(hi)}"


DURATION_WORDS = "a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) or 90s/30m/2h/1d"


def schema(settings: Settings | None = None) -> tuple[Directive, ...]:
    """Every directive, in the order they are documented and listed."""
    s = settings or Settings()
    classes = list(s.classes)
    restricted = {name: tuple(c.accounts) for name, c in s.classes.items() if c.accounts}
    class_words = ", ".join(
        name + (f" (accounts {', '.join(restricted[name])})" if name in restricted else "")
        for name in classes
    )
    windows = list(s.deferral.windows)
    if windows:
        window_words = (f"a deferral window ({', '.join(windows)}), optionally "
                        f",deadline=DURATION ({_range_text('deadline')})")
    else:
        window_words = "nothing: no deferral windows are configured on this cluster"
    grace_default = _dur(int(s.preemption.default_grace))
    return (
        Directive(
            "class", "enum", class_words, s.default_class,
            "Priority class of the job; a class may be restricted to listed accounts.",
            "--class=research", restricted),
        Directive(
            "checkpoint", "checkpoint",
            f"none, periodic,interval=DURATION, or signal:SIG,grace=DURATION"
            f"[,interval=DURATION][,exit=done] with SIG one of "
            f"{', '.join(SIGNALS)}, grace {_range_text('grace')} (default {grace_default}), "
            f"interval {_range_text('interval')}",
            "not said: the job's own --signal=SIG@TIME with --requeue, if it has them "
            "(signal SIG, grace TIME); else unable to checkpoint",
            "The job writes a checkpoint when sent SIG and needs at most grace to do so; "
            "it also checkpoints by itself every interval. exit=done: an exit after SIG "
            "means the job is done (else it saved and exited, and is requeued to "
            "continue). periodic: it only checkpoints by itself every interval and is "
            "requeued without a signal. none: it cannot checkpoint.",
            "--checkpoint=signal:USR1,grace=2m,interval=30m"),
        Directive(
            "preemptible", "preemptible", f"yes, no, or after=DURATION ({_range_text('after')})",
            "yes (as its class allows)",
            "Whether the job may be preempted by a higher class; after=D: only once it "
            "has run for D.",
            "--preemptible=after=1h"),
        Directive(
            "topology", "topology",
            "nvlink, leaf, spine or any, optionally followed by ,strict", "any",
            "How compactly its nodes must be placed: within one NVLink domain, one leaf "
            "switch, one spine; strict: wait rather than spread wider.",
            "--topology=leaf,strict"),
        Directive(
            "expected-runtime", "duration", f"{DURATION_WORDS}, {_range_text('expected-runtime')}",
            "its time limit",
            "How long the job is expected to run (its time limit is the upper bound).",
            "--expected-runtime=6:00:00"),
        Directive(
            "gpu-type", "name",
            "a GPU type name: letters, digits, _ . - (at most 64), e.g. h100, a100", "any type",
            "The GPU type the job needs on a heterogeneous cluster.", "--gpu-type=h100"),
        Directive(
            "min-gpu-memory", "gigabytes", "whole gigabytes from 1 to 4096, e.g. 80 or 80G",
            "any", "The least memory per GPU the job needs, in GB.", "--min-gpu-memory=80G"),
        Directive(
            "data", "name", "a data set name: letters, digits, _ . : / - (at most 128)", "none",
            "The data set the job reads, so it may be placed near it.", "--data=imagenet"),
        Directive(
            "deferrable", "window", window_words, "not deferrable",
            "The job may wait for a cheaper or greener window; deadline: release it at "
            "the latest this long after submission.",
            f"--deferrable={windows[0] if windows else 'night'},deadline=1d"),
        Directive(
            "retry", "count", f"a whole number from 0 to {s.lifecycle.max_retries}",
            _retry_default(s),
            "How often a checkpointing job is requeued to resume from its checkpoint after "
            "a failure that is not its own (node failure, hardware error, start-up fault).",
            "--retry=3"),
    )


def _retry_default(s: Settings) -> str:
    own = {n: c.retries for n, c in s.classes.items() if c.retries is not None}
    text = f"{s.lifecycle.default_retries}"
    if own:
        text += " (" + ", ".join(f"class {n}: {v}" for n, v in own.items()) + ")"
    return text


# --- problems ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """One bad line: ``message`` is exactly what the Lua plugin tells sbatch."""

    line: int | None
    message: str


class DirectiveErrors(InvalidDirective):
    """A script's directives are invalid; ``problems`` holds each one."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("\n".join(p.message for p in problems))
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class Context:
    """What the validator knows of the submission besides the script.

    ``account`` / ``partition``: the job's (None: none given). The flags say
    whether the restriction checks can be made at all (offline checks may
    not know the account Slurm would use).
    """

    account: str | None = None
    partition: str | None = None
    check_account: bool = True
    check_partition: bool = True


@dataclass(frozen=True, slots=True)
class Result:
    """The verdict on one script."""

    policy: JobPolicy
    problems: tuple[Problem, ...]
    #: (line number, name, value) of each directive read, in order.
    directives: tuple[tuple[int, str, str], ...]
    #: Things the offline check could not verify.
    notes: tuple[str, ...] = ()
    #: Lines the user meant but sbatch never reads (#SPOLICY after the first command).
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def admin_comment(self) -> str | None:
        """What the plugin stores; None when the script has no directives (left alone)."""
        if self.problems or not self.directives:
            return None
        return render_admin_comment(self.policy)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "admin_comment": self.admin_comment,
            "problems": [{"line": p.line, "message": p.message} for p in self.problems],
            "directives": [{"line": n, "name": k, "value": v} for n, k, v in self.directives],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }


# --- shared helpers (mirrored one to one in the Lua template) ---------------------

_PRINTABLE = re.compile(r"[^\x20-\x7e]")
_DIGITS10 = re.compile(r"[0-9]{10}")
_DURATION_CHARS = re.compile(r"[0-9A-Za-z:.\-]+")
_NAME = {
    "gpu-type": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*"),
    "data": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/\-]*"),
}
_GIGABYTES = re.compile(r"([0-9]{1,6})(?:[Gg]|[Gg][Bb])?")


def _sanitize(text: str, limit: int) -> str:
    """Printable ASCII only (tab -> space, others -> ?), cut to ``limit`` characters."""
    text = _PRINTABLE.sub("?", text.replace("\t", " "))
    return text[:limit] + "..." if len(text) > limit else text


_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _upper(text: str) -> str:
    """ASCII-only upper case, as C's toupper in slurmctld's C locale."""
    return text.translate(_UPPER)


def _lower(text: str) -> str:
    return text.translate(_LOWER)


def levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def suggest(word: str, candidates: Sequence[str]) -> str | None:
    """The closest candidate within 2 edits (ties: the first); None if none is close."""
    if not word or len(word) > SUGGEST_MAX_LEN:
        return None
    best, best_d = None, 3
    for cand in candidates:
        if abs(len(word) - len(cand)) >= best_d:
            continue  # the distance is at least the difference in length
        d = levenshtein(_lower(word), _lower(cand))
        if d < best_d and d < max(len(word), 2):
            best, best_d = cand, d
    return best


def _mean(word: str | None) -> str:
    return f" (did you mean {word}?)" if word else ""


def parse_directive_duration(value: str) -> int | None:
    """Whole seconds of a directive's duration; None if not a finite duration.

    The Lua plugin implements exactly this: ASCII only, no run of more than
    9 digits (so that no implementation overflows), then Slurm's formats,
    rounded half up to whole seconds.
    """
    if not _DURATION_CHARS.fullmatch(value) or _DIGITS10.search(value):
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        return None
    if math.isinf(seconds):
        return None
    return math.floor(seconds + 0.5)


class _Bad(Exception):
    """A value is wrong: ``reason`` (may be empty) and a suggestion."""

    def __init__(self, reason: str = "", suggestion: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.suggestion = suggestion


def _bare_number(key: str, text: str) -> None:
    """A checkpoint duration without a unit is refused, showing both readings."""
    if text.isdigit() and len(text) <= 9:
        raise _Bad(f"{key}={text} has no unit: {text}s (seconds, as --signal=SIG@{text} and"
                   f" GraceTime count) or {text}m (minutes, as --time counts)? write"
                   f" {text}s or {text}m")


def _duration_in_range(key: str, text: str) -> int:
    seconds = parse_directive_duration(text)
    if seconds is None:
        raise _Bad(f"{key} '{_sanitize(text, SHOW_VALUE)}' is not a duration")
    lo, hi = RANGES[key]
    if seconds < lo or seconds > hi:
        raise _Bad(f"{key} must be {_range_text(key)}")
    return seconds


class Validator:
    """Validates directive values against the schema built from ``settings``."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.directives = {d.name: d for d in schema(self.settings)}
        self.names = tuple(self.directives)
        self.allowed_names = ", ".join(f"--{n}" for n in self.names)

    # Each returns the JobPolicy fields the value sets, or raises _Bad.
    def value(self, name: str, value: str, ctx: Context) -> dict[str, Any]:
        check = getattr(self, "_v_" + name.replace("-", "_"))
        result: dict[str, Any] = check(value, ctx)
        return result

    def _v_class(self, value: str, ctx: Context) -> dict[str, Any]:
        if value not in self.settings.classes:
            raise _Bad("", suggest(value, list(self.settings.classes)))
        return {"job_class": value}

    def _v_checkpoint(self, value: str, ctx: Context) -> dict[str, Any]:
        if value == "none":
            return {"checkpoint": Checkpoint(signal=None)}
        seen: dict[str, str] = {}
        for part in value.split(","):
            if part == "periodic":
                key, text = "periodic", ""
            elif part.startswith(("signal:", "signal=")):
                key, text = "signal", part[7:]
            elif part.startswith("grace="):
                key, text = "grace", part[6:]
            elif part.startswith("interval="):
                key, text = "interval", part[9:]
            elif part.startswith("exit="):
                key, text = "exit", part[5:]
            else:
                raise _Bad(f"unknown part '{_sanitize(part, SHOW_VALUE)}'")
            if key in seen:
                raise _Bad(f"{key} given twice")
            seen[key] = text
        if "periodic" in seen:
            # A periodic checkpointer: no signal to send, it is requeued at once.
            if "signal" in seen or "grace" in seen or "exit" in seen:
                raise _Bad("periodic takes no signal, grace or exit; give its interval only")
            if "interval" not in seen:
                raise _Bad("periodic needs interval=DURATION (how often it checkpoints)")
            return {"checkpoint": Checkpoint(
                signal=None, interval=float(_duration_in_range("interval", seen["interval"])))}
        if "signal" not in seen:
            raise _Bad("signal is missing")
        on_exit = seen.get("exit", "requeue")
        if on_exit not in ("requeue", "done"):
            raise _Bad(f"unknown exit '{_sanitize(on_exit, SHOW_VALUE)}'",
                       suggest(on_exit, ["requeue", "done"]))
        sig = _upper(seen["signal"])
        if sig.startswith("SIG"):
            sig = sig[3:]
        if sig not in SIGNALS:
            raise _Bad(f"unknown signal '{_sanitize(seen['signal'], SHOW_VALUE)}'",
                       suggest(sig, SIGNALS))
        for key in ("grace", "interval"):
            if key in seen:
                _bare_number(key, seen[key])
        grace = (_duration_in_range("grace", seen["grace"]) if "grace" in seen
                 else math.floor(self.settings.preemption.default_grace + 0.5))
        interval = (_duration_in_range("interval", seen["interval"]) if "interval" in seen
                    else None)
        return {"checkpoint": Checkpoint(signal=sig, grace=float(grace),
                                         interval=None if interval is None else float(interval),
                                         on_exit=on_exit)}

    def _v_preemptible(self, value: str, ctx: Context) -> dict[str, Any]:
        if value == "yes":
            return {"preemptible": True}
        if value == "no":
            return {"preemptible": False}
        if value.startswith("after="):
            return {"preemptible": True,
                    "preemptible_after": float(_duration_in_range("after", value[6:]))}
        raise _Bad("", suggest(value, ("yes", "no")))

    def _v_topology(self, value: str, ctx: Context) -> dict[str, Any]:
        level, comma, flag = value.partition(",")
        if level not in TOPOLOGY_LEVELS:
            raise _Bad("", suggest(level, TOPOLOGY_LEVELS))
        if comma and flag != "strict":
            raise _Bad(f"unknown flag '{_sanitize(flag, SHOW_VALUE)}'", suggest(flag, ("strict",)))
        if level == "any" and comma:
            raise _Bad("strict needs a level other than any")
        return {"topology": level, "topology_strict": bool(comma)}

    def _v_expected_runtime(self, value: str, ctx: Context) -> dict[str, Any]:
        seconds = parse_directive_duration(value)
        if seconds is None:
            raise _Bad("not a duration")
        lo, hi = RANGES["expected-runtime"]
        if seconds < lo or seconds > hi:
            raise _Bad(f"must be {_range_text('expected-runtime')}")
        return {"expected_runtime": float(seconds)}

    def _name(self, key: str, value: str) -> str:
        if len(value) > NAME_MAX[key] or not _NAME[key].fullmatch(value):
            raise _Bad()
        return value

    def _v_gpu_type(self, value: str, ctx: Context) -> dict[str, Any]:
        return {"gpu_type": self._name("gpu-type", value)}

    def _v_data(self, value: str, ctx: Context) -> dict[str, Any]:
        return {"data": self._name("data", value)}

    def _v_min_gpu_memory(self, value: str, ctx: Context) -> dict[str, Any]:
        m = _GIGABYTES.fullmatch(value)
        if not m:
            raise _Bad()
        gb = int(m.group(1))
        lo, hi = RANGES["min-gpu-memory"]
        if gb < lo or gb > hi:
            raise _Bad(f"must be from {lo} to {hi} GB")
        return {"min_gpu_memory_gb": float(gb)}

    def _v_retry(self, value: str, ctx: Context) -> dict[str, Any]:
        # Digits only (no sign, no blanks), at most 3 of them: the Lua side checks the same.
        if not value.isascii() or not value.isdigit() or len(value) > 3:
            raise _Bad("not a whole number")
        count = int(value)
        if count > self.settings.lifecycle.max_retries:
            raise _Bad(f"must be from 0 to {self.settings.lifecycle.max_retries}")
        return {"retries": count}

    def _v_deferrable(self, value: str, ctx: Context) -> dict[str, Any]:
        windows = list(self.settings.deferral.windows)
        if not windows:
            raise _Bad()
        window, comma, rest = value.partition(",")
        if window not in windows:
            raise _Bad("", suggest(window, windows))
        fields: dict[str, Any] = {"defer_window": window}
        if comma:
            if not rest.startswith("deadline="):
                raise _Bad(f"unknown part '{_sanitize(rest, SHOW_VALUE)}'")
            fields["defer_deadline"] = float(_duration_in_range("deadline", rest[9:]))
        return fields


def _split_words(rest: str) -> list[str]:
    return [w for w in re.split(r"[ \t]+", rest) if w]


def check_script(script: bytes | str, settings: Settings | None = None,
                 context: Context | None = None) -> Result:
    """Validate the directives of ``script``; never raises for a bad script."""
    validator = Validator(settings)
    ctx = context or Context()
    # Work on bytes (one char per byte), as the Lua plugin does; str is UTF-8 encoded.
    raw = script if isinstance(script, bytes) else script.encode("utf-8")
    text = raw.decode("latin-1")
    nul = text.find("\0")
    if nul >= 0:  # slurmctld hands the plugin the script as a C string
        text = text[:nul]
    head = text[:MAX_HEADER_BYTES]
    problems: list[Problem] = []
    directives: list[tuple[int, str, str]] = []
    fields: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    notes: list[str] = []
    warnings: list[str] = []
    directive_lines = 0
    if "\r\n" in text:  # sbatch refuses the script before reading a directive
        return Result(JobPolicy(), (Problem(None, CRLF_PROBLEM),), ())

    def report(lineno: int, line: str, problem: str, allowed: str) -> None:
        problems.append(Problem(lineno, f"line {lineno}: {_sanitize(line, SHOW_LINE)}: "
                                         f"{problem}; allowed: {allowed}"))

    pos, lineno, cut, command = 0, 0, False, 0
    while len(problems) < MAX_PROBLEMS:
        if pos >= len(head):
            cut = len(text) > len(head)
            break
        if lineno >= MAX_HEADER_LINES:
            cut = True
            break
        nl = head.find("\n", pos)
        if nl < 0:
            if len(text) > len(head):  # a partial line at the byte cap
                cut = True
                break
            nl = len(head)
        line = head[pos:nl]
        pos = nl + 1
        lineno += 1
        if lineno == 1 and line.startswith("#!"):
            continue
        stripped = line.lstrip(BLANKS)
        if not stripped:
            continue
        if not stripped.startswith("#"):
            command = lineno  # the first command ends the header, as for #SBATCH
            break
        if _upper(line[:8]) != PREFIX:
            continue
        directive_lines += 1
        if directive_lines > MAX_DIRECTIVE_LINES:
            report(lineno, line, f"more than {MAX_DIRECTIVE_LINES} #SPOLICY lines",
                   f"at most {MAX_DIRECTIVE_LINES} #SPOLICY lines")
            break
        if len(line) > MAX_LINE_BYTES:
            report(lineno, line, f"line longer than {MAX_LINE_BYTES} bytes",
                   f"#SPOLICY lines of at most {MAX_LINE_BYTES} bytes")
            continue
        if line[:8] != PREFIX:
            report(lineno, line, "the prefix must be #SPOLICY in capitals",
                   "#SPOLICY --name=value")
            continue
        rest = line[8:]
        if rest and rest[0] not in " \t":
            report(lineno, line, "a blank must follow #SPOLICY", "#SPOLICY --name=value")
            continue
        words = _split_words(rest)
        i, said = 0, False
        while i < len(words) and len(problems) < MAX_PROBLEMS:
            word = words[i]
            i += 1
            if word.startswith("#"):
                break
            said = True
            if not word.startswith("--"):
                bare = word.lstrip("-")
                guess = bare.partition("=")[0]
                hint = f"--{bare}" if guess in validator.directives else None
                report(lineno, line,
                       f"expected --name=value, found '{_sanitize(word, SHOW_VALUE)}'{_mean(hint)}",
                       "#SPOLICY --name=value")
                continue
            name, eq, value = word[2:].partition("=")
            if not eq and i < len(words) and not words[i].startswith(("-", "#")):
                value = words[i]
                i += 1
            if name not in validator.directives:
                hint = suggest(name, validator.names)
                report(lineno, line,
                       f"unknown directive --{_sanitize(name, SHOW_VALUE)}"
                       f"{_mean('--' + hint if hint else None)}",
                       validator.allowed_names)
                continue
            allowed = validator.directives[name].allowed
            if not value:
                report(lineno, line, f"--{name} needs a value", allowed)
                continue
            if name in first_line:
                report(lineno, line, f"--{name} given twice (first on line {first_line[name]})",
                       "each directive once")
                continue
            first_line[name] = lineno
            try:
                got = validator.value(name, value, ctx)
            except _Bad as bad:
                problem = f"invalid value '{_sanitize(value, SHOW_VALUE)}' for --{name}"
                if bad.reason:
                    problem += f": {bad.reason}"
                report(lineno, line, problem + _mean(bad.suggestion), allowed)
                continue
            directives.append((lineno, name, value))
            restriction = _restriction(validator, name, got, ctx, notes)
            if restriction:
                report(lineno, line, *restriction)
                continue
            fields.update(got)
        if not said and len(problems) < MAX_PROBLEMS:
            report(lineno, line, "no directive after #SPOLICY", "#SPOLICY --name=value")
    if cut and not problems and text.find("\n" + PREFIX, pos - 1 if pos else 0) >= 0:
        problems.append(Problem(None, (
            f"script: the leading comment block is longer than {MAX_HEADER_LINES} lines or "
            f"{MAX_HEADER_BYTES} bytes and #SPOLICY lines follow it; allowed: #SPOLICY lines "
            f"within the first {MAX_HEADER_LINES} lines and {MAX_HEADER_BYTES} bytes")))
    if command:
        warnings = _late_directives(text, pos, lineno, command)
    policy = JobPolicy(**fields) if not problems else JobPolicy()
    return Result(policy, tuple(problems), tuple(directives), tuple(notes), tuple(warnings))


def _late_directives(text: str, pos: int, lineno: int, command: int) -> list[str]:
    """Warnings for #SPOLICY lines after the first command (sbatch never reads them).

    ``pos`` is where the line after the command starts, ``lineno`` the command's line.
    Only the :data:`MAX_HEADER_BYTES` after the command are looked at, so a 1 MB body
    costs the plugin no more than a 64 KiB one."""
    out: list[str] = []
    start = counted = pos - 1
    at = lineno
    stop = min(len(text), start + MAX_HEADER_BYTES)
    while len(out) < MAX_LATE_WARNINGS:
        nl = text.find("\n#", start, stop)
        if nl < 0:
            break
        if _upper(text[nl + 1:nl + 9]) != PREFIX:
            start = nl + 1
            continue
        at += text.count("\n", counted, nl + 1)
        counted = nl + 1
        end = text.find("\n", nl + 1)
        line = text[nl + 1:end if end >= 0 else len(text)]
        out.append(f"line {at}: {_sanitize(line, SHOW_LINE)}: after the first command (line"
                   f" {command}), where sbatch stops reading directives; this line is ignored;"
                   " allowed: #SPOLICY lines before the first command")
        start = nl + 1
    return out


def _restriction(validator: Validator, name: str, got: Mapping[str, Any], ctx: Context,
                 notes: list[str]) -> tuple[str, str] | None:
    """(problem, allowed) when a valid value is refused to this job's account/partition."""
    s = validator.settings
    if name == "class":
        cls = got["job_class"]
        accounts = s.classes[cls].accounts
        if not accounts:
            return None
        listed = ", ".join(accounts)
        if not ctx.check_account:
            notes.append(f"class '{cls}' is restricted to accounts {listed}; "
                         "the account was not checked (pass --account)")
            return None
        if ctx.account in accounts:
            return None
        usable = [n for n, c in s.classes.items() if not c.accounts or ctx.account in c.accounts]
        if ctx.account is None:
            return (f"class '{cls}' is restricted to accounts {listed} and the job names no "
                    "account", f"accounts {listed} (#SBATCH --account=), or the classes "
                    f"{', '.join(usable)}")
        account = _sanitize(ctx.account, SHOW_VALUE)
        return (f"class '{cls}' is restricted to accounts {listed}, not '{account}'",
                f"for account '{account}': {', '.join(usable) or 'no class'}")
    if name == "checkpoint" and not got["checkpoint"].capable:
        partitions = s.preemption.no_checkpoint_partitions
        if not partitions:
            return None
        listed = ", ".join(partitions)
        if not ctx.check_partition:
            notes.append(f"--checkpoint=none is allowed only in partitions {listed}; "
                         "the partition was not checked (pass --partition)")
            return None
        asked = [p for p in (ctx.partition or "").split(",") if p]
        if asked and all(p in partitions for p in asked):
            return None
        where = f"'{_sanitize(ctx.partition or '', SHOW_VALUE)}'" if asked else "not named"
        return (f"--checkpoint=none is allowed only in partitions {listed}; the job's "
                f"partition is {where}",
                f"--checkpoint=signal:SIG,grace=DURATION, or partitions {listed} "
                "(#SBATCH --partition=)")
    return None


def parse_script(script: bytes | str, settings: Settings | None = None,
                 context: Context | None = None) -> JobPolicy:
    """The JobPolicy of ``script``; raise :class:`DirectiveErrors` naming every bad line."""
    result = check_script(script, settings, context)
    if result.problems:
        raise DirectiveErrors(result.problems)
    return result.policy


# --- #SBATCH context for offline checks ----------------------------------------

_SBATCH_OPT = re.compile(r"^#SBATCH[ \t]+(.*)$")


def sbatch_options(script: bytes | str) -> dict[str, str]:
    """``account`` and ``partition`` named by the script's ``#SBATCH`` header lines."""
    text = script.decode("latin-1") if isinstance(script, bytes) else script
    found: dict[str, str] = {}
    for number, line in enumerate(text[:MAX_HEADER_BYTES].split("\n")[:MAX_HEADER_LINES], 1):
        if number == 1 and line.startswith("#!"):
            continue
        stripped = line.lstrip(BLANKS)
        if stripped and not stripped.startswith("#"):
            break
        m = _SBATCH_OPT.match(line)
        if not m:
            continue
        words = _split_words(m.group(1))
        for i, word in enumerate(words):
            if word.startswith("#"):
                break  # sbatch: an unescaped # starts a comment
            nxt = words[i + 1] if i + 1 < len(words) else ""
            for key, long, short in (("account", "--account", "-A"),
                                     ("partition", "--partition", "-p")):
                if word.startswith(long + "="):
                    found[key] = word[len(long) + 1:]
                elif word in (long, short) and nxt:
                    found[key] = nxt
                elif word.startswith(short) and len(word) > 2 and not word.startswith("--"):
                    found[key] = word[2:]
    return found


# --- the schema as data for the Lua plugin -------------------------------------


_PLAIN = re.compile(r"[A-Za-z0-9_.:/\-]+")


def _check_plain_names(s: Settings) -> None:
    """Names the plugin compares byte for byte must be plain ASCII words."""
    named: list[tuple[str, str]] = [(f"$.classes.{c}", c) for c in s.classes]
    named += [(f"$.classes.{c}.accounts", a) for c, k in s.classes.items() for a in k.accounts]
    named += [(f"$.deferral.windows.{w}", w) for w in s.deferral.windows]
    named += [("$.preemption.no_checkpoint_partitions", p)
              for p in s.preemption.no_checkpoint_partitions]
    for where, name in named:
        if not _PLAIN.fullmatch(name):
            raise ConfigError(f"{name!r} cannot be used in #SPOLICY directives: use letters, "
                              f"digits and _ . : / - only - at `{where}`")


def lua_config(settings: Settings | None = None) -> dict[str, Any]:
    """Everything the Lua plugin needs, as plain data (rendered into a Lua table)."""
    s = settings or Settings()
    _check_plain_names(s)
    directives = schema(s)
    return {
        "version": "spolicy:v1",
        "names": [d.name for d in directives],
        "allowed": {d.name: d.allowed for d in directives},
        "allowed_names": ", ".join(f"--{d.name}" for d in directives),
        "class_order": list(s.classes),
        "class_accounts": {n: list(c.accounts) for n, c in s.classes.items()},
        "windows": list(s.deferral.windows),
        "signals": list(SIGNALS),
        "levels": list(TOPOLOGY_LEVELS),
        "default_grace": math.floor(s.preemption.default_grace + 0.5),
        "no_checkpoint_partitions": list(s.preemption.no_checkpoint_partitions),
        "ranges": {k: list(v) for k, v in RANGES.items()},
        "range_text": {k: _range_text(k) for k in RANGES},
        "name_max": dict(NAME_MAX),
        "admin_uids": list(s.plugin.admin_uids),
        "set_requeue": s.plugin.set_requeue,
        "max_retries": s.lifecycle.max_retries,
        "set_site_factor": s.plugin.set_site_factor,
        "doorbell": s.plugin.doorbell,
        "doorbell_classes": doorbell_classes(s),
        "class_weights": {n: c.weight for n, c in s.classes.items()},
        "default_class": s.default_class,
        "limits": {
            "header_lines": MAX_HEADER_LINES, "header_bytes": MAX_HEADER_BYTES,
            "directive_lines": MAX_DIRECTIVE_LINES, "line_bytes": MAX_LINE_BYTES,
            "problems": MAX_PROBLEMS, "show_line": SHOW_LINE, "show_value": SHOW_VALUE,
            "suggest_max_len": SUGGEST_MAX_LEN, "late_warnings": MAX_LATE_WARNINGS,
        },
        "crlf_problem": CRLF_PROBLEM,
    }
