"""Run the rendered job_submit.lua under a real Lua interpreter, with the
pure-logic harness (harness.lua) standing in for slurmctld.

Two interpreters: the ``lua5.3`` program, and liblua5.1 (the library that
Debian's slurmctld job_submit/lua links) loaded through ctypes in a child
Python process, so the same plugin is checked under 5.1 and 5.3.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HARNESS = Path(__file__).with_name("harness.lua")
LUA53 = "lua5.3"
LIBLUA51 = "liblua5.1.so.0"


@dataclass
class Case:
    kind: str  # submit | modify | duration
    body: bytes
    uid: int = 1000
    account: str | None = None
    partition: str | None = None
    #: submit: default partition name; modify: requeue0 | admincomment
    extra: str | None = None


@dataclass
class Outcome:
    rc: str
    admin: str | None = None
    requeue: str | None = None
    messages: list[str] = field(default_factory=list)


def _encode(cases: list[Case]) -> bytes:
    out = bytearray()
    for c in cases:
        header = " ".join([c.kind, str(c.uid), c.account or "-", c.partition or "-",
                           c.extra or "-", str(len(c.body))])
        out += header.encode() + b"\n" + c.body + b"\n"
    return bytes(out)


def _decode(text: str) -> list[Outcome]:
    outcomes: list[Outcome] = []
    current = Outcome(rc="")
    for line in text.split("\n"):
        tag, _, rest = line.partition(" ")
        if tag == "RC":
            current.rc = rest
        elif tag == "ADMIN":
            current.admin = None if rest == "nil" else rest
        elif tag == "REQUEUE":
            current.requeue = None if rest == "nil" else rest
        elif tag == "MSG":
            current.messages.append(rest)
        elif tag == "END":
            outcomes.append(current)
            current = Outcome(rc="")
    return outcomes


_CTYPES_RUNNER = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.luaL_newstate.restype = ctypes.c_void_p
lib.luaL_openlibs.argtypes = [ctypes.c_void_p]
lib.luaL_loadstring.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
lib.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
lib.lua_tolstring.restype = ctypes.c_char_p
L = lib.luaL_newstate()
lib.luaL_openlibs(L)
boot = "arg = {%r, %r, %r}; dofile(%r)" % tuple(sys.argv[3:6] + [sys.argv[2]])
if lib.luaL_loadstring(L, boot.encode()) or lib.lua_pcall(L, 0, 0, 0):
    sys.stderr.write(lib.lua_tolstring(L, -1, None).decode(errors="replace") + "\n")
    sys.exit(1)
"""


def run(plugin: str, cases: list[Case], interpreter: str = LUA53) -> list[Outcome]:
    """Outcomes of ``cases`` fed to the plugin source ``plugin`` under ``interpreter``."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "plugin.lua").write_text(plugin, encoding="utf-8")
        (d / "cases.bin").write_bytes(_encode(cases))
        args = [str(d / "plugin.lua"), str(d / "cases.bin"), str(d / "out.txt")]
        if not interpreter.endswith((".so", ".so.0")):  # a lua program: lua5.3, lua5.4
            cmd = [interpreter, str(HARNESS), *args]
        else:
            cmd = [sys.executable, "-c", _CTYPES_RUNNER, interpreter, str(HARNESS), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{interpreter} failed: {proc.stderr}")
        outcomes = _decode((d / "out.txt").read_text(encoding="latin-1"))
    if len(outcomes) != len(cases):
        raise RuntimeError(f"{len(cases)} cases but {len(outcomes)} outcomes")
    return outcomes


def interpreters() -> list[str]:
    """lua5.3 and liblua5.1 always (the project needs them); lua5.4 too when installed."""
    found = [LUA53, LIBLUA51]
    if shutil.which("lua5.4"):
        found.append("lua5.4")
    return found


def liblua51_available() -> bool:
    try:
        ctypes.CDLL(LIBLUA51)
    except OSError:
        return False
    return True
