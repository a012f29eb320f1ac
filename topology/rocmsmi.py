"""``rocm-smi --showtopo``: the GPU links of one AMD host, read into a FabricSpec.

Owns parsing of what ROCm SMI prints: banner lines (``=== ROCm System
Management Interface ===``, ``WARNING: ...``), then titled sections, each a
matrix over ``GPU0 GPU1 ...`` (``Weight between two GPUs``, ``Hops between
two GPUs``, ``Link Type between two GPUs``: ``0`` on the diagonal, ``XGMI`` or
``PCIE`` elsewhere) and ``Numa Nodes`` lines (``GPU[0]\\t\\t: (Topology) Numa
Node: 0`` on recent ROCm, ``GPU 0          : ...`` on older ones). Columns
are separated by runs of blanks; an output whose blanks were squeezed (pasted
into an issue) reads the same.

What the fabric takes from it, in the same vendor-neutral form as
``nvidia-smi topo -m`` (:mod:`slurmpolicy.topology.nvsmi`): the number of GPUs,
each GPU's direct GPU-to-GPU fabric links (XGMI, AMD's counterpart of NVLink:
one link per XGMI peer; ``nvlinks`` in :class:`GpuLink` counts fabric links
whatever the vendor), its NUMA node, and ``gpu_fabric = "xgmi"``. A host
whose GPUs are not all XGMI-linked (PCIe between two XGMI hives, or PCIe only)
gets a warning: its GPUs do not form one GPU-fabric domain.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.spec import FabricSpec, GpuLink, HostSpec, read_source

LINK_TYPES = ("XGMI", "PCIE")
_TITLE = re.compile(r"^=+\s*(.*?)\s*=+$")
_NUMA = re.compile(r"^GPU\s*\[?(\d+)\]?\s*:\s*\(Topology\)\s*Numa (Node|Affinity):\s*(-?\d+)\s*$")
_SECTIONS = {"Weight between two GPUs": "weight", "Hops between two GPUs": "hops",
             "Link Type between two GPUs": "link", "Numa Nodes": "numa"}


def _matrix(rows: list[tuple[int, str]], path: str,
            title: str) -> tuple[list[str], dict[str, list[str]], dict[str, int]]:
    """(columns, row label -> cells, row label -> line number) of one matrix section."""
    if not rows:
        raise TopologyError(f"{path}: section {title!r} is empty; expected a GPU matrix")
    lineno, header = rows[0]
    columns = header.split()
    if not columns or not all(re.fullmatch(r"GPU\d+", c) for c in columns):
        raise TopologyError(f"{path}:{lineno}: {title}: header {header.strip()!r}; expected "
                            "columns GPU0 GPU1 ...")
    cells: dict[str, list[str]] = {}
    where: dict[str, int] = {}
    for n, line in rows[1:]:
        tokens = line.split()
        if tokens[0] not in columns:
            raise TopologyError(f"{path}:{n}: {title}: row {tokens[0]!r} is not a column of the"
                                f" header ({', '.join(columns)}); expected one row per GPU")
        if len(tokens) - 1 != len(columns):
            raise TopologyError(f"{path}:{n}: {title}: row {tokens[0]} has {len(tokens) - 1}"
                                f" cells; expected {len(columns)} (one per GPU)")
        cells[tokens[0]] = tokens[1:]
        where[tokens[0]] = n
    missing = [c for c in columns if c not in cells]
    if missing:
        raise TopologyError(f"{path}: {title}: no row for {', '.join(missing)}; expected one"
                            " per GPU")
    return columns, cells, where


def parse_showtopo(text: str, host: str, path: str = "rocm-smi --showtopo") -> HostSpec:
    """One host's ``rocm-smi --showtopo``; errors name the file, the line and what was expected."""
    sections: dict[str, list[tuple[int, str]]] = {}
    current: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _TITLE.match(line.strip())
        if m:
            current = _SECTIONS.get(m.group(1))
            if current is not None:
                sections[current] = []
            continue
        if current is not None:
            sections[current].append((n, line))
    if "link" not in sections:
        raise TopologyError(f"{path}: no 'Link Type between two GPUs' section; expected the"
                            " output of `rocm-smi --showtopo`")
    columns, links, where = _matrix(sections["link"], path, "Link Type between two GPUs")
    index = {c: k for k, c in enumerate(columns)}
    xgmi: dict[int, dict[int, int]] = {int(c[3:]): {} for c in columns}
    # PCIe peers get a path code as nvidia-smi's (slurmpolicy.topology.nvsmi.PCIE_RANK):
    # rocm-smi's hops say 2 for the same CPU socket (NODE), 3 across sockets (SYS);
    # without a Hops section, SYS (the worst, so never overrated).
    hops: dict[str, list[str]] = {}
    if sections.get("hops"):
        hop_cols, hop_cells, _ = _matrix(sections["hops"], path, "Hops between two GPUs")
        if hop_cols == columns:
            hops = hop_cells
    pcie: dict[int, dict[int, str]] = {int(c[3:]): {} for c in columns}
    for row, cells in links.items():
        for col, cell in zip(columns, cells, strict=True):
            if col != row and cell not in LINK_TYPES:
                raise TopologyError(f"{path}:{where[row]}: cell {row}/{col} is {cell!r};"
                                    f" expected {' or '.join(LINK_TYPES)}")
    for row, cells in links.items():
        for col, cell in zip(columns, cells, strict=True):
            if col == row:
                if cell not in ("0", "X"):
                    raise TopologyError(f"{path}:{where[row]}: cell {row}/{col} is {cell!r};"
                                        " expected 0 on the diagonal")
                continue
            mirror = links[col][index[row]]
            if mirror != cell:
                raise TopologyError(f"{path}:{where[row]}: {row}/{col} is {cell} but {col}/{row}"
                                    f" is {mirror} (line {where[col]}); expected a symmetric"
                                    " matrix")
            if cell == "XGMI":
                xgmi[int(row[3:])][int(col[3:])] = 1
            else:
                hop = hops.get(row, [""] * len(columns))[index[col]]
                pcie[int(row[3:])][int(col[3:])] = "NODE" if hop in ("1", "2") else "SYS"
    numa: dict[int, str] = {}
    for n, line in sections.get("numa", []):
        m = _NUMA.match(line.strip())
        if m is None:
            raise TopologyError(f"{path}:{n}: {line.strip()!r}; expected 'GPU[N] : (Topology)"
                                " Numa Node: M'")
        if m.group(2) == "Node":
            numa[int(m.group(1))] = m.group(3)
    gpus = sorted(xgmi)
    gpu_links = tuple(GpuLink(index=k, nvlinks=xgmi[k], numa_affinity=numa.get(k, ""),
                              pcie=pcie[k]) for k in gpus)
    spec = HostSpec(name=host, gpus=len(gpus), gpu_links=gpu_links,
                    gpu_fabric="xgmi" if any(xgmi.values()) else None)
    spec.origin["gpus"] = path
    hives = _hives(gpus, xgmi)
    if len(gpus) > 1 and len(hives) > 1:
        shown = "; ".join(",".join(f"GPU{k}" for k in h) for h in hives)
        spec.origin["nvlink_warning"] = (
            f"{path}: the GPUs of {host} form {len(hives)} XGMI groups ({shown}) joined by PCIe"
            "; its GPUs do not form one GPU-fabric domain")
    return spec


def _hives(gpus: list[int], xgmi: dict[int, dict[int, int]]) -> list[list[int]]:
    """GPUs grouped by XGMI reachability (an XGMI hive), in index order."""
    seen: set[int] = set()
    out: list[list[int]] = []
    for start in gpus:
        if start in seen:
            continue
        group, todo = [], [start]
        seen.add(start)
        while todo:
            k = todo.pop()
            group.append(k)
            for peer in xgmi[k]:
                if peer not in seen:
                    seen.add(peer)
                    todo.append(peer)
        out.append(sorted(group))
    return out


def read_showtopo_files(paths: list[Path]) -> FabricSpec:
    """Several hosts' outputs; each file is named after its host (``mi01.txt``)."""
    spec = FabricSpec(source="rocm-smi --showtopo")
    for p in sorted(paths):
        text = read_source(p, "rocm-smi --showtopo output", errors="replace")
        host = p.name.split(".", 1)[0]
        hs = parse_showtopo(text, host, str(p))
        if "nvlink_warning" in hs.origin:
            spec.warnings.append(hs.origin.pop("nvlink_warning"))
        spec.hosts[host] = hs
    return spec
