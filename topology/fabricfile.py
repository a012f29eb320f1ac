"""Our own fabric file (TOML): what no tool reports.

Owns the schema and parsing of the site's fabric file: racks whose NVLink
domain spans hosts (NVL72-style), leaf and spine switch names and parents,
per-host GPU facts (count, type, memory per GPU), and link health. The format
is documented in docs/fabric.md with an example in contrib/fabric.example.toml.

Errors name the file, the line of the table (``[[rack]]`` number N) and what
was expected; TOML syntax errors keep tomllib's line and column.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

import msgspec

from slurmpolicy.errors import TopologyError
from slurmpolicy.hostlist import HostlistError, expand
from slurmpolicy.topology.spec import FabricSpec, LinkSpec, read_source
from slurmpolicy.topology.types import Health


class _T(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class _Defaults(_T):
    gpus: int | None = None
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None


class _Host(_T):
    #: Hostlist, e.g. "dgx[01-04]".
    names: str
    gpus: int | None = None
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    nvlink_domain: str | None = None
    leaf: str | None = None


class _Rack(_T):
    name: str
    hosts: str
    #: True: the rack is one NVLink domain (NVL72); false: racks only group hosts.
    nvlink: bool = True
    #: Name of its NVLink domain; default: the rack name.
    nvlink_domain: str | None = None
    leaf: str | None = None


class _Leaf(_T):
    name: str
    hosts: str | None = None
    spine: str | None = None


class _Spine(_T):
    name: str
    parent: str | None = None


class _Link(_T):
    a: str
    b: str
    health: Literal["ok", "degraded", "down"] = "ok"
    bandwidth_gbps: float | None = None
    note: str = ""


class _File(_T):
    defaults: _Defaults = msgspec.field(default_factory=_Defaults)
    host: list[_Host] = msgspec.field(default_factory=list)
    rack: list[_Rack] = msgspec.field(default_factory=list)
    leaf: list[_Leaf] = msgspec.field(default_factory=list)
    spine: list[_Spine] = msgspec.field(default_factory=list)
    link: list[_Link] = msgspec.field(default_factory=list)


_TABLES: dict[str, type[msgspec.Struct]] = {
    "host": _Host, "rack": _Rack, "leaf": _Leaf, "spine": _Spine, "link": _Link,
}


def _table_lines(text: str, table: str) -> list[int]:
    pat = re.compile(rf"^\s*\[\[\s*{table}\s*\]\]")
    return [n for n, ln in enumerate(text.splitlines(), start=1) if pat.match(ln)]


def _where(path: str, text: str, table: str, index: int) -> str:
    lines = _table_lines(text, table)
    line = lines[index] if index < len(lines) else None
    return f"{path}:{line}" if line else f"{path}: [[{table}]] #{index + 1}"


def parse_fabric_file(text: str, path: str = "fabric.toml") -> FabricSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{path}: not valid TOML: {exc}") from exc
    try:
        doc = msgspec.convert(data, _File, strict=True)
    except msgspec.ValidationError as exc:
        msg = str(exc)
        m = re.search(r"\$\.(host|rack|leaf|spine|link)\[(\d+)\]", msg)
        if "health" in msg:
            where = _where(path, text, "link", int(m.group(2))) if m else path
            expected = "health = \"ok\", \"degraded\" or \"down\""
        elif m:
            where = _where(path, text, m.group(1), int(m.group(2)))
            expected = (f"[[{m.group(1)}]] takes "
                        + ", ".join(_TABLES[m.group(1)].__struct_fields__))
        else:
            where = path
            expected = ("the tables [defaults], [[host]], [[rack]], [[leaf]], [[spine]],"
                        " [[link]]")
        raise TopologyError(f"{where}: {msg}; expected: {expected} (see docs/fabric.md)") from exc
    spec = FabricSpec(source=path)

    def hosts_of(value: str, where: str) -> list[str]:
        try:
            names = expand(value)
        except HostlistError as exc:
            raise TopologyError(f"{where}: {exc}") from exc
        if not names:
            raise TopologyError(f"{where}: empty host list; expected e.g. \"gb[001-018]\"")
        return names

    def assign(host: str, attr: str, value: str | int | float | None, where: str) -> None:
        if value is None:
            return
        hs = spec.host(host)
        old = getattr(hs, attr)
        if old is not None and old != value:
            raise TopologyError(
                f"{where}: {host} {attr} = {value!r}, but {hs.origin.get(attr)} already says"
                f" {old!r}; expected one value per host"
            )
        setattr(hs, attr, value)
        hs.origin[attr] = where

    for k, rack in enumerate(doc.rack):
        where = _where(path, text, "rack", k)
        for h in hosts_of(rack.hosts, where):
            if rack.nvlink:
                assign(h, "nvlink", rack.nvlink_domain or rack.name, where)
            assign(h, "leaf", rack.leaf, where)
    for k, host in enumerate(doc.host):
        where = _where(path, text, "host", k)
        for h in hosts_of(host.names, where):
            assign(h, "gpus", host.gpus, where)
            assign(h, "gpu_type", host.gpu_type, where)
            assign(h, "gpu_memory_gb", host.gpu_memory_gb, where)
            assign(h, "nvlink", host.nvlink_domain, where)
            assign(h, "leaf", host.leaf, where)
    switch_line: dict[str, str] = {}
    for k, leaf in enumerate(doc.leaf):
        where = _where(path, text, "leaf", k)
        if leaf.name in switch_line:
            raise TopologyError(
                f"{where}: leaf {leaf.name} defined again ({switch_line[leaf.name]})"
            )
        switch_line[leaf.name] = where
        if leaf.hosts:
            for h in hosts_of(leaf.hosts, where):
                assign(h, "leaf", leaf.name, where)
        if leaf.spine:
            spec.parents[leaf.name] = leaf.spine
    for k, spine in enumerate(doc.spine):
        where = _where(path, text, "spine", k)
        if spine.name in switch_line:
            raise TopologyError(
                f"{where}: switch {spine.name} defined again ({switch_line[spine.name]})"
            )
        switch_line[spine.name] = where
        if spine.parent:
            spec.parents[spine.name] = spine.parent
    # A spine named by a leaf but never defined is fine (its name is enough);
    # a cycle is not.
    for start in spec.parents:
        seen = [start]
        cur = start
        while cur in spec.parents:
            cur = spec.parents[cur]
            if cur in seen:
                loop = " -> ".join([*seen[seen.index(cur):], cur])
                raise TopologyError(
                    f"{switch_line.get(start, path)}: switch cycle {loop}; expected a tree"
                )
            seen.append(cur)
    d = doc.defaults
    for hs in spec.hosts.values():
        for attr in ("gpus", "gpu_type", "gpu_memory_gb"):
            if getattr(hs, attr) is None and getattr(d, attr) is not None:
                setattr(hs, attr, getattr(d, attr))
                hs.origin[attr] = f"{path} [defaults]"
    for k, link in enumerate(doc.link):
        where = _where(path, text, "link", k)
        spec.links.append(LinkSpec(a=link.a, b=link.b, health=Health[link.health.upper()],
                                   bandwidth_gbps=link.bandwidth_gbps, origin=where))
    return spec


def read_fabric_file(path: Path | str) -> FabricSpec:
    p = Path(path)
    return parse_fabric_file(read_source(p, "fabric file"), str(p))
