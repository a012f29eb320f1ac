"""``nvidia-smi topo -m``: the GPU/NIC matrix of one host, read into a FabricSpec.

Owns parsing of the matrix NVIDIA prints: a header of device columns (GPU0..,
NICs as ``mlx5_0`` on older drivers or ``NIC0`` with a ``NIC Legend`` on newer
ones) followed by ``CPU Affinity``, ``NUMA Affinity`` and, on recent drivers,
``GPU NUMA ID``; one row per device whose cells are ``X`` (self), ``NV#`` (a
bonded set of # NVLinks), ``PIX``, ``PXB``, ``PHB``, ``NODE`` or ``SYS``; then
the ``Legend:``. The variants printed across driver versions and pasted into
issue trackers are read alike: tabs or spaces, the ANSI underline some drivers
put on the header, a header at column 0 or indented with the whole matrix,
device names glued together where a table lost its separators
(``GPU0GPU1``), a dashed separator line, and the pre-2017 ``SOC`` code
(driver <= 375), read as ``SYS`` - the same socket-level path - with a note.

What the fabric takes from it: the number of GPUs, each GPU's NVLink width to
its peers (NV12 on DGX A100, NV18 on DGX H100: the links each GPU has into the
NVSwitch fabric), the PCIe path between GPUs that are not NVLinked, and which
NICs sit on the GPU's own PCIe switch (PIX/PXB), the NIC a job on that GPU
should use. Only ``NV#`` cells make NVLink: a host whose GPUs talk over PCIe
alone is a PCIe host (see :func:`interconnect`), never an NVLink domain.
"""

from __future__ import annotations

import re
from pathlib import Path

from slurmpolicy.errors import TopologyError
from slurmpolicy.topology.spec import FabricSpec, GpuLink, HostSpec, read_source

PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: PCIe paths from best to worst (NVIDIA's legend order): the bandwidth rank of a
#: PCIe-only host is its worst GPU pair's path.
PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_NV = re.compile(r"^NV(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRAILERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_SEPARATOR = re.compile(r"^[\s\-=+|_]+$")
_GLUED = re.compile(r"(?:GPU|NIC)\d+")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")


def _header_columns(line: str) -> tuple[list[str], list[str]]:
    """Device columns and trailing (multi-word) columns of the header."""
    text = line.strip()
    cut = len(text)
    for name in _TRAILERS:
        pos = text.find(name)
        if pos != -1:
            cut = min(cut, pos)
    devices: list[str] = []
    for token in text[:cut].split():
        # "GPU0GPU1GPU2" where a pasted table lost its separators.
        parts = _GLUED.findall(token)
        devices.extend(parts if parts and "".join(parts) == token else [token])
    trailers = [t for t in _TRAILERS if t in text[cut:]]
    return devices, trailers


def _is_header(line: str) -> bool:
    if not re.search(r"GPU0(?!\d)", line):
        return False
    tokens = line.split()
    # A row reads "GPU0 X ..." (or "GPU0X" glued); a header names devices only.
    return not (len(tokens) > 1 and tokens[0] == "GPU0" and _CELL.match(tokens[1])) \
        and not re.match(r"^GPU0X\b", tokens[0])


def parse_topo_matrix(text: str, host: str, path: str = "nvidia-smi topo -m") -> HostSpec:
    """One host's matrix; errors name the file, the line and what was expected."""
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    header_at = next((n for n, ln in enumerate(lines) if _is_header(ln)), None)
    if header_at is None:
        raise TopologyError(
            f"{path}: no matrix header found; expected the output of `nvidia-smi topo -m`"
            " (a line of columns GPU0 GPU1 ... CPU Affinity)"
        )
    devices, trailers = _header_columns(lines[header_at])
    if len(set(devices)) != len(devices):
        raise TopologyError(f"{path}:{header_at + 1}: a device column appears twice in the"
                            f" header ({' '.join(devices)})")
    rows: dict[str, tuple[int, list[str], list[str]]] = {}
    legend_codes: set[str] = set()
    nic_names: dict[str, str] = {}
    notes: list[str] = []
    in_legend = False
    saw_soc = False
    for n in range(header_at + 1, len(lines)):
        line = lines[n]
        lineno = n + 1
        stripped = line.strip()
        if not stripped or _SEPARATOR.match(stripped):
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
        if label not in devices and rows and not _DEVICE.match(label):
            # Text after the matrix (a code fence, a prompt): the matrix has ended; a
            # Legend may still follow.
            in_legend = True
            continue
        if label not in devices:
            raise TopologyError(
                f"{path}:{lineno}: row {label!r} is not a column of the header"
                f" ({', '.join(devices)}); expected one row per device"
            )
        if label in rows:
            raise TopologyError(f"{path}:{lineno}: a second row for {label} (first on line"
                                f" {rows[label][0]}); expected one row per device")
        cells = tokens[1:1 + len(devices)]
        rest = tokens[1 + len(devices):]
        if len(cells) < len(devices):
            raise TopologyError(
                f"{path}:{lineno}: row {label} has {len(cells)} cells; expected"
                f" {len(devices)} (one per device column)"
            )
        for k, (col, cell) in enumerate(zip(devices, cells, strict=True)):
            if cell == "SOC":
                # Drivers before 2017 printed SOC for what is now SYS.
                cells[k] = cell = "SYS"
                saw_soc = True
            if cell != "X" and cell not in PCIE_CODES and not _NV.match(cell):
                raise TopologyError(
                    f"{path}:{lineno}: cell {label}/{col} is {cell!r}; expected X, NV#,"
                    f" {', '.join(PCIE_CODES)} (or SOC)"
                )
            if (col == label) != (cell == "X"):
                raise TopologyError(
                    f"{path}:{lineno}: cell {label}/{col} is {cell!r}; expected X exactly on"
                    " the diagonal"
                )
        rows[label] = (lineno, cells, rest)
    if saw_soc:
        notes.append(f"{path}: the matrix uses SOC (drivers before 2017); read as SYS, the"
                     " socket-level path it was renamed to")
    if legend_codes and "X" not in legend_codes:
        raise TopologyError(
            f"{path}: the Legend lacks X; expected NVIDIA's legend (X, SYS, NODE, PHB, PXB,"
            " PIX, NV#)"
        )
    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    nics = [d for d in devices if d not in gpus]
    if not gpus:
        raise TopologyError(f"{path}:{header_at + 1}: the header names no GPU column")
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise TopologyError(f"{path}: no row for {', '.join(missing)}; expected one per GPU")
    col_of = {d: k for k, d in enumerate(devices)}
    links: list[GpuLink] = []
    not_nvlinked: list[str] = []
    for gpu in gpus:
        lineno, cells, rest = rows[gpu]
        nv: dict[int, int] = {}
        pcie: dict[int, str] = {}
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
                pcie[int(peer[3:])] = cell
                not_nvlinked.append(f"{gpu}-{peer}")
        near = tuple(nic_names.get(nic, nic) for nic in nics
                     if cells[col_of[nic]] in ("PIX", "PXB"))
        nic_paths = {nic_names.get(nic, nic): cells[col_of[nic]] for nic in nics}
        affinity = dict(zip(trailers, rest, strict=False))
        links.append(GpuLink(index=int(gpu[3:]), nvlinks=nv, near_nics=near,
                             cpu_affinity=affinity.get("CPU Affinity", ""),
                             numa_affinity=affinity.get("NUMA Affinity", ""),
                             pcie=pcie, nic_paths=nic_paths))
    spec = HostSpec(name=host, gpus=len(gpus), gpu_links=tuple(links),
                    nics=tuple(nic_names.get(n, n) for n in nics), gpu_fabric="nvlink")
    spec.origin["gpus"] = path
    kind, rank = interconnect(spec)
    if len(gpus) > 1 and kind == "pcie":
        notes.append(f"{path}: {host} has no NVLink: its {len(gpus)} GPUs talk over PCIe"
                     f" (worst path {rank}); it is a PCIe host, not an NVLink domain")
    elif not_nvlinked and len(gpus) > 1:
        notes.append(
            f"{path}: {len(not_nvlinked) // 2} GPU pairs on {host} are not NVLinked"
            f" (e.g. {not_nvlinked[0]}); its GPUs do not form one NVLink domain (at most"
            f" {nvlink_clique(spec)} GPUs are NVLinked all to all)"
        )
    if notes:
        spec.origin["nvlink_warning"] = "; ".join(notes)
    return spec


def nvlink_width(host: HostSpec) -> int | None:
    """NVLinks per GPU into the NVLink fabric (NV18 -> 18), the most any GPU has to a peer."""
    widths = [max(gl.nvlinks.values()) for gl in host.gpu_links if gl.nvlinks]
    return max(widths) if widths else None


def interconnect(host: HostSpec) -> tuple[str, str]:
    """How the host's GPUs talk to each other, and the rank of the worst pair's path.

    ``("nvlink", "NV18")`` when every GPU pair is NVLinked (NVSwitch boards, and
    2-GPU bridges), ``("partial", "SYS")`` when some pairs are (DGX-1's hybrid cube
    mesh, bridged pairs in a PCIe box: the worst pair's path follows),
    ``("pcie", "PHB")`` when none is, and ``("", "")`` without nvidia-smi data or
    with one GPU. The path codes rank PIX (best) to SYS (worst).
    """
    if len(host.gpu_links) < 2:
        return "", ""
    pcie = [code for gl in host.gpu_links for code in gl.pcie.values()]
    if not pcie:
        widths = [w for gl in host.gpu_links for w in gl.nvlinks.values()]
        return "nvlink", f"NV{min(widths)}"
    worst = max(pcie, key=lambda c: PCIE_RANK.get(c, 9))
    if any(gl.nvlinks for gl in host.gpu_links):
        return "partial", worst
    return "pcie", worst


def nvlink_clique(host: HostSpec) -> int:
    """The most GPUs of the host that are NVLinked all to all (1 on a PCIe host; the GPU
    count without nvidia-smi data, where nothing says otherwise)."""
    links = {gl.index: set(gl.nvlinks) for gl in host.gpu_links}
    if not links:
        return host.gpus or 0
    best = 1
    nodes = sorted(links)

    def grow(clique: list[int], candidates: list[int]) -> None:
        nonlocal best
        best = max(best, len(clique))
        for k, g in enumerate(candidates):
            if len(clique) + len(candidates) - k <= best:
                return
            grow([*clique, g], [c for c in candidates[k + 1:] if c in links[g]])

    grow([], nodes)
    return best


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
