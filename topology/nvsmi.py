"""``nvidia-smi topo -m``: the GPU/NIC matrix of one host, read into a FabricSpec.

Owns parsing of the matrix NVIDIA prints: a header of device columns (GPU0..,
NICs as ``mlx5_0`` on older drivers or ``NIC0`` with a ``NIC Legend`` on newer
ones) followed by ``CPU Affinity``, ``NUMA Affinity`` and, on recent drivers,
``GPU NUMA ID``; one row per device whose cells are ``X`` (self), ``NV#`` (a
bonded set of # NVLinks), ``PIX``, ``PXB``, ``PHB``, ``NODE`` or ``SYS``; then
the ``Legend:``. Tabs or spaces, and the ANSI underline some drivers put on
the header, are both accepted.

What the fabric takes from it: the number of GPUs, each GPU's NVLink width to
its peers (NV12 on DGX A100, NV18 on DGX H100: the links each GPU has into the
NVSwitch fabric), and which NICs sit on the GPU's own PCIe switch (PIX/PXB),
which is the NIC a job on that GPU should use. A host whose GPUs are not all
NVLinked to each other gets a warning: its GPUs are not one NVLink domain.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.spec import FabricSpec, GpuLink, HostSpec, read_source

PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"^NV(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRAILERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def _header_columns(line: str) -> tuple[list[str], list[str]]:
    """Device columns and trailing (multi-word) columns of the header."""
    text = line.strip()
    cut = len(text)
    for name in _TRAILERS:
        pos = text.find(name)
        if pos != -1:
            cut = min(cut, pos)
    devices = text[:cut].split()
    trailers = [t for t in _TRAILERS if t in text[cut:]]
    return devices, trailers


def parse_topo_matrix(text: str, host: str, path: str = "nvidia-smi topo -m") -> HostSpec:
    """One host's matrix; errors name the file, the line and what was expected."""
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    header_at = next((n for n, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln)
                      and not ln.startswith("GPU")), None)
    if header_at is None:
        raise TopologyError(
            f"{path}: no matrix header found; expected the output of `nvidia-smi topo -m`"
            " (a line of columns GPU0 GPU1 ... CPU Affinity)"
        )
    devices, trailers = _header_columns(lines[header_at])
    rows: dict[str, tuple[int, list[str], list[str]]] = {}
    legend_codes: set[str] = set()
    nic_names: dict[str, str] = {}
    in_legend = False
    for n in range(header_at + 1, len(lines)):
        line = lines[n]
        lineno = n + 1
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(("Legend", "NIC Legend")):
            in_legend = True
            continue
        if in_legend:
            m = _NIC_LEGEND.match(line)
            if m:
                nic_names[m.group(1)] = m.group(2)
                continue
            code = stripped.split("=", 1)[0].strip()
            if "=" in stripped:
                legend_codes.add(code)
            continue
        tokens = stripped.split()
        label = tokens[0]
        if label not in devices:
            raise TopologyError(
                f"{path}:{lineno}: row {label!r} is not a column of the header"
                f" ({', '.join(devices)}); expected one row per device"
            )
        cells = tokens[1:1 + len(devices)]
        rest = tokens[1 + len(devices):]
        if len(cells) < len(devices):
            raise TopologyError(
                f"{path}:{lineno}: row {label} has {len(cells)} cells; expected"
                f" {len(devices)} (one per device column)"
            )
        for col, cell in zip(devices, cells, strict=True):
            if cell != "X" and cell not in PCIE_CODES and not _NV.match(cell):
                raise TopologyError(
                    f"{path}:{lineno}: cell {label}/{col} is {cell!r}; expected X, NV#,"
                    f" {', '.join(PCIE_CODES)}"
                )
            if (col == label) != (cell == "X"):
                raise TopologyError(
                    f"{path}:{lineno}: cell {label}/{col} is {cell!r}; expected X exactly on"
                    " the diagonal"
                )
        rows[label] = (lineno, cells, rest)
    if legend_codes and not {"X", "NV#", "SYS"} <= legend_codes:
        raise TopologyError(
            f"{path}: the Legend lacks {sorted({'X', 'NV#', 'SYS'} - legend_codes)}; expected"
            " NVIDIA's legend (X, SYS, NODE, PHB, PXB, PIX, NV#)"
        )
    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devices if d not in gpus]
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise TopologyError(f"{path}: no row for {', '.join(missing)}; expected one per GPU")
    col_of = {d: k for k, d in enumerate(devices)}
    links: list[GpuLink] = []
    not_nvlinked: list[str] = []
    for gpu in gpus:
        lineno, cells, rest = rows[gpu]
        nv: dict[int, int] = {}
        for peer in gpus:
            if peer == gpu:
                continue
            cell = cells[col_of[peer]]
            m = _NV.match(cell)
            mirror = rows[peer][1][col_of[gpu]]
            if cell != mirror:
                raise TopologyError(
                    f"{path}:{lineno}: {gpu}/{peer} is {cell} but {peer}/{gpu} is {mirror}"
                    f" (line {rows[peer][0]}); expected a symmetric matrix"
                )
            if m:
                nv[int(peer[3:])] = int(m.group(1))
            else:
                not_nvlinked.append(f"{gpu}-{peer}")
        near = tuple(nic_names.get(nic, nic) for nic in nics
                     if cells[col_of[nic]] in ("PIX", "PXB"))
        affinity = dict(zip(trailers, rest, strict=False))
        links.append(GpuLink(index=int(gpu[3:]), nvlinks=nv, near_nics=near,
                             cpu_affinity=affinity.get("CPU Affinity", ""),
                             numa_affinity=affinity.get("NUMA Affinity", "")))
    spec = HostSpec(name=host, gpus=len(gpus), gpu_links=tuple(links),
                    nics=tuple(nic_names.get(n, n) for n in nics), gpu_fabric="nvlink")
    spec.origin["gpus"] = path
    if not_nvlinked and len(gpus) > 1:
        spec.origin["nvlink_warning"] = (
            f"{path}: {len(not_nvlinked) // 2} GPU pairs on {host} are not NVLinked"
            f" (e.g. {not_nvlinked[0]}); its GPUs do not form one NVLink domain"
        )
    return spec


def nvlink_width(host: HostSpec) -> int | None:
    """NVLinks per GPU into the NVLink fabric (NV18 -> 18), the most any GPU has to a peer."""
    widths = [max(gl.nvlinks.values()) for gl in host.gpu_links if gl.nvlinks]
    return max(widths) if widths else None


def read_topo_files(paths: list[Path]) -> FabricSpec:
    """Several hosts' matrices; each file is named after its host (``dgx01.txt``)."""
    spec = FabricSpec(source="nvidia-smi topo -m")
    for p in sorted(paths):
        text = read_source(p, "nvidia-smi topo -m output", errors="replace")
        host = p.name.split(".", 1)[0]
        hs = parse_topo_matrix(text, host, str(p))
        if "nvlink_warning" in hs.origin:
            spec.warnings.append(hs.origin.pop("nvlink_warning"))
        spec.hosts[host] = hs
    return spec
