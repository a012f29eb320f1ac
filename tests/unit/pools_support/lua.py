"""Run the rendered job_submit.lua's pool routing under lua5.3 and liblua5.1
(route_harness.lua plays slurmctld), as directives_support.lua does for directives."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from directives_support.lua import _CTYPES_RUNNER

HARNESS = Path(__file__).with_name("route_harness.lua")


@dataclass(frozen=True)
class RouteCase:
    script: bytes
    tres_per_node: str | None = None
    tres_per_job: str | None = None
    min_nodes: int | None = None
    partition: str | None = None
    max_nodes: int | None = None


@dataclass
class RouteOutcome:
    rc: str
    partition: str | None = None
    admin: str | None = None
    messages: list[str] = field(default_factory=list)


def run_routes(plugin: str, cases: list[RouteCase], interpreter: str) -> list[RouteOutcome]:
    data = bytearray()
    for c in cases:
        cols = [c.tres_per_node or "-", c.tres_per_job or "-",
                str(c.min_nodes) if c.min_nodes is not None else "-",
                str(c.max_nodes) if c.max_nodes is not None else "-", c.partition or "-",
                str(len(c.script))]
        data += "\t".join(cols).encode() + b"\n" + c.script + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "plugin.lua").write_text(plugin, encoding="utf-8")
        (d / "cases.bin").write_bytes(bytes(data))
        args = [str(d / "plugin.lua"), str(d / "cases.bin"), str(d / "out.txt")]
        if interpreter.endswith((".so", ".so.0")):
            cmd = [sys.executable, "-c", _CTYPES_RUNNER, interpreter, str(HARNESS), *args]
        else:
            cmd = [interpreter, str(HARNESS), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{interpreter} failed: {proc.stderr}")
        text = (d / "out.txt").read_text(encoding="latin-1")
    outcomes: list[RouteOutcome] = []
    current = RouteOutcome(rc="")
    for line in text.split("\n"):
        tag, _, rest = line.partition(" ")
        if tag == "RC":
            current.rc = rest
        elif tag == "PARTITION":
            current.partition = None if rest == "nil" else rest
        elif tag == "ADMIN":
            current.admin = None if rest == "nil" else rest
        elif tag == "MSG":
            current.messages.append(rest)
        elif tag == "END":
            outcomes.append(current)
            current = RouteOutcome(rc="")
    if len(outcomes) != len(cases):
        raise RuntimeError(f"{len(cases)} cases but {len(outcomes)} outcomes")
    return outcomes
