"""``slurmpolicy fabric show | check | render | place``: the fabric as slurmpolicy sees it.

Owns the command line of the topology package: reading the configured
sources (settings [fabric], overridable with --topology-conf, --fabric-file,
--nvidia-smi-topo, --slurm-conf), the free GPUs of a live snapshot when Slurm
answers (or all GPUs free with --no-slurm), and drawing with rich. The
topology package itself neither prints nor talks to Slurm.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from slurmpolicy import settings as settings_mod
from slurmpolicy.errors import SlurmError
from slurmpolicy.hostlist import HostlistError, compress, expand
from slurmpolicy.inert import inert
from slurmpolicy.model import Node
from slurmpolicy.topology import Fabric
from slurmpolicy.topology.render import render, source_form
from slurmpolicy.topology.slices import node_free
from slurmpolicy.topology.types import Health, Level, NoPlacement, Shape


class _Loaded:
    """The fabric, the free GPUs per host, and where the free figures came from."""

    def __init__(self, fabric: Fabric, free: dict[str, int], used: dict[str, int],
                 live: bool, note: str) -> None:
        self.fabric = fabric
        self.free = free
        self.used = used
        self.live = live
        self.note = note
        #: Free GPU slices (MIG instances, shards) per host.
        self.free_slices: dict[str, int] = {}


def _source_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--topology-conf", type=click.Path(dir_okay=False),
                     help="topology.conf to read (default: settings, else beside slurm.conf)."),
        click.option("--fabric-file", type=click.Path(dir_okay=False),
                     help="Fabric file (TOML) to read (default: settings [fabric])."),
        click.option("--nvidia-smi-topo", metavar="GLOB",
                     help="`nvidia-smi topo -m` outputs, one file per host named after it."),
        click.option("--slurm-conf", type=click.Path(dir_okay=False), envvar="SLURM_CONF",
                     help="slurm.conf (default: $SLURM_CONF, /etc/slurm/slurm.conf)."),
        click.option("--no-slurm", is_flag=True,
                     help="Do not ask Slurm: nodes from slurm.conf, all GPUs free."),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _load(ctx: click.Context, topology_conf: str | None, fabric_file: str | None,
          nvidia_smi_topo: str | None, slurm_conf: str | None, no_slurm: bool) -> _Loaded:
    cfg = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    nodes: list[Node] = []
    note = ""
    live = False
    if not no_slurm:
        try:
            from slurmpolicy.slurm.connect import connect

            snapshot = connect(cfg.slurm.adapter).snapshot()
            nodes = list(snapshot.nodes)
            live = True
        except ImportError as exc:
            note = (f"no Slurm adapter could be loaded ({exc}); nodes from slurm.conf, all GPUs"
                    " counted free")
        except SlurmError as exc:
            note = f"Slurm did not answer ({exc}); nodes from slurm.conf, all GPUs counted free"
    else:
        note = "--no-slurm: nodes from slurm.conf, all GPUs counted free"
    fabric = Fabric.from_sources(
        nodes, cfg.fabric, slurm_conf, topology_conf=topology_conf, fabric_file=fabric_file,
        nvidia_smi_topo=nvidia_smi_topo,
    )
    if live:
        by_name = {n.name: n for n in nodes}
        free = {h: node_free(by_name[h])[0] if h in by_name else 0 for h in fabric.hosts}
        free_slices = {h: node_free(by_name[h])[1] if h in by_name else 0
                       for h in fabric.hosts}
        used = {h: by_name[h].gpus_alloc if h in by_name else 0 for h in fabric.hosts}
    else:
        free = {h: fabric.usable_gpus_of(h) for h in fabric.hosts}
        used = {h: 0 for h in fabric.hosts}
        free_slices = {h: len(fabric.slices_of(h)) for h in fabric.hosts}
    loaded = _Loaded(fabric, free, used, live, note)
    loaded.free_slices = free_slices
    return loaded


def _with_sources(fn: Callable[..., Any]) -> Callable[..., Any]:
    @_source_options
    @click.pass_context
    @functools.wraps(fn)
    def wrapper(ctx: click.Context, topology_conf: str | None, fabric_file: str | None,
                nvidia_smi_topo: str | None, slurm_conf: str | None, no_slurm: bool,
                as_json: bool, **kwargs: Any) -> Any:
        loaded = _load(ctx, topology_conf, fabric_file, nvidia_smi_topo, slurm_conf, no_slurm)
        return fn(loaded, as_json, **kwargs)

    return wrapper


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


@click.group()
def fabric() -> None:
    """Show, check, render and query the GPU fabric (NVLink domains, IB leaves, spines)."""


# ---------------------------------------------------------------------- show
@fabric.command("show")
@click.option("--hosts/--no-hosts", "with_hosts", default=None,
              help="Draw every host (default: only when there are at most 64).")
@_with_sources
def show(loaded: _Loaded, as_json: bool, with_hosts: bool | None) -> None:
    """Draw spines, leaves, NVLink domains and hosts with their free/used GPUs."""
    fab = loaded.fabric
    frag = fab.fragmentation(loaded.free, free_slices=loaded.free_slices)
    if as_json:
        data = fab.to_dict()
        for host in data["hosts"]:
            host["gpus_free"] = loaded.free.get(host["name"], 0)
            host["gpus_used"] = loaded.used.get(host["name"], 0)
        data["free_gpus"] = frag.free_gpus
        data["slices"] = frag.slices
        data["free_slices"] = frag.free_slices
        data["fragmentation_index"] = frag.index
        data["summary"] = frag.summary()
        data["live"] = loaded.live
        data["note"] = loaded.note
        _dump(data)
        return
    from rich.console import Console
    from rich.tree import Tree

    console = Console()
    total = fab.total_gpus
    root = Tree(f"[bold]cluster[/] {len(fab.hosts)} hosts, {total} GPUs, "
                f"{frag.free_gpus} free - {frag.summary()}")
    multi_nv = any(len(h) > 1 for h in fab.domains(Level.NVLINK).values())
    if with_hosts is None:
        with_hosts = len(fab.hosts) <= 64
    spines = fab.domains(Level.SPINE)
    leaves = fab.domains(Level.LEAF)
    for spine in sorted(spines):
        s_hosts = spines[spine]
        s_node = root.add(f"[bold cyan]spine {_shown(spine)}[/] {_counts(loaded, s_hosts)}")
        leaf_names = sorted({fab.domain_of(h, Level.LEAF) for h in s_hosts})
        for leaf in leaf_names:
            l_hosts = leaves[leaf]
            l_node = s_node.add(f"[cyan]leaf {_shown(leaf)}[/] {_counts(loaded, l_hosts)}")
            if not with_hosts:
                continue
            if multi_nv:
                groups: dict[str, list[str]] = {}
                for h in l_hosts:
                    groups.setdefault(fab.domain_of(h, Level.NVLINK), []).append(h)
                for nv, hosts in sorted(groups.items()):
                    n_node = l_node.add(
                        f"[magenta]NVLink {_shown(nv)}[/] {_counts(loaded, hosts)}")
                    for h in hosts:
                        n_node.add(_host_line(loaded, h))
            else:
                for h in l_hosts:
                    l_node.add(_host_line(loaded, h))
    console.print(root)
    _print_notes(loaded, console.print)


def _counts(loaded: _Loaded, hosts: tuple[str, ...] | list[str]) -> str:
    fab = loaded.fabric
    free = sum(loaded.free.get(h, 0) for h in hosts)
    total = sum(fab.gpus_of(h) for h in hosts)
    whole = sum(1 for h in hosts if fab.gpus_of(h) and loaded.free.get(h, 0) == fab.gpus_of(h))
    bad = sum(1 for h in hosts if fab.host_health(h) != Health.OK)
    text = f"[dim]{len(hosts)} hosts, {free}/{total} GPUs free, {whole} hosts wholly free"
    return text + (f"[/] [yellow]{bad} with link trouble[/]" if bad else "[/]")


def _host_line(loaded: _Loaded, host: str) -> str:
    fab = loaded.fabric
    gpus = fab.gpus_of(host)
    free = loaded.free.get(host, 0)
    # Slurm's allocated count includes MIG instances: whole GPUs only here.
    used = min(loaded.used.get(host, 0), max(0, gpus - free))
    off = max(0, gpus - free - used)
    bar = "[red]" + "#" * used + "[/][green]" + "." * free + "[/][dim]" + "x" * off + "[/]"
    health = fab.host_health(host)
    mark = {Health.OK: "", Health.DEGRADED: " [yellow]degraded link[/]",
            Health.DOWN: " [red]uplink down[/]"}[health]
    kind = fab.gpu_type_of(host) or "gpu"
    slices = fab.slices_of(host)
    extra = (f" + {loaded.free_slices.get(host, 0)}/{len(slices)} GPU slices free"
             if slices else "")
    return f"{_shown(host)} {bar} {free}/{gpus} {_shown(kind)} free{extra}{mark}"


def _print_notes(loaded: _Loaded, out: Callable[[str], None]) -> None:
    fab = loaded.fabric
    for conflict in fab.conflicts:
        out(f"[red]conflict:[/] {_shown(conflict.message)}")
    for warning in fab.warnings:
        out(f"[yellow]warning:[/] {_shown(warning)}")
    if loaded.note:
        out(f"[dim]{_shown(loaded.note)}[/]")


def _shown(text: object) -> str:
    """A name from Slurm or a fabric file inside markup: controls escaped, no markup."""
    from rich.markup import escape

    return escape(inert(text))


# --------------------------------------------------------------------- check
@fabric.command("check")
@_with_sources
def check(loaded: _Loaded, as_json: bool) -> None:
    """Read every source; report counts, warnings and conflicts (exit 1 on a conflict)."""
    fab = loaded.fabric
    counts = {lv.name.lower(): len(fab.domains(lv))
              for lv in (Level.NVLINK, Level.LEAF, Level.SPINE)}
    status = "conflicts" if fab.conflicts else "ok"
    # How hosts' GPUs talk, where nvidia-smi said (only NV# links make NVLink).
    kinds: dict[str, list[str]] = {}
    for host in fab.hosts:
        kind = fab.interconnect_of(host)[0]
        if kind:
            kinds.setdefault(kind, []).append(host)
    if as_json:
        _dump({"status": status, "source": fab.source, "hosts": len(fab.hosts),
               "gpus": fab.total_gpus, "domains": counts,
               "interconnect": {k: compress(v) for k, v in sorted(kinds.items())},
               "conflicts": [c.message for c in fab.conflicts], "warnings": fab.warnings})
    else:
        click.echo(inert(f"sources: {fab.source}"))
        click.echo(inert(f"{len(fab.hosts)} hosts ({compress(fab.hosts)}), {fab.total_gpus} GPUs; "
                         + ", ".join(f"{v} {k} domain{'s' if v != 1 else ''}"
                                     for k, v in counts.items())))
        words = {"nvlink": "GPUs NVLinked all to all", "partial": "GPUs partly NVLinked",
                 "pcie": "PCIe only, no NVLink"}
        for kind, hosts in sorted(kinds.items()):
            click.echo(inert(f"{compress(hosts)}: {words[kind]}"))
        for warning in fab.warnings:
            click.echo(inert(f"warning: {warning}"))
        for conflict in fab.conflicts:
            click.echo(inert(f"conflict: {conflict.message}"))
        click.echo(status)
    if fab.conflicts:
        click.get_current_context().exit(1)


# -------------------------------------------------------------------- render
@fabric.command("render")
@click.option("--form", type=click.Choice(["tree", "block", "ring", "yaml"]), default=None,
              help="topology.conf tree (IB switches), block (NVLink domains) or ring"
                   " (Slurm 26.05), or topology.yaml (Slurm 25.05+) with tree and block."
                   "  [default: the form the topology source was written in]")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Write to this file instead of standard output.")
@_with_sources
def render_cmd(loaded: _Loaded, as_json: bool, form: str | None, output: str | None) -> None:
    """Print Slurm's topology.conf for this fabric, so Slurm places jobs as we do."""
    form = form or source_form(loaded.fabric)
    text = render(loaded.fabric, form)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    if as_json:
        _dump({"form": form, "text": text, "output": output})
    elif not output:
        sys.stdout.write(text)


# --------------------------------------------------------------------- place
@fabric.command("place")
@click.option("--nodes", "-N", type=click.IntRange(min=1), required=True, help="Hosts asked for.")
@click.option("--gpus-per-node", "-G", type=click.IntRange(min=0), required=True,
              help="Free GPUs needed on each host.")
@click.option("--level", default="cluster", show_default=True,
              help="Domain to fit in: nvlink, leaf, spine, cluster.")
@click.option("--strict", is_flag=True, help="Must fit in one domain of --level.")
@click.option("--gpu-type", help="Only hosts with GPUs of this type (e.g. h100).")
@click.option("--min-gpu-memory", type=float, help="Only GPUs with at least this many GB.")
@click.option("--prefer", metavar="HOSTLIST", help="Hosts to prefer, all else equal.")
@_with_sources
def place(loaded: _Loaded, as_json: bool, nodes: int, gpus_per_node: int, level: str,
          strict: bool, gpu_type: str | None, min_gpu_memory: float | None,
          prefer: str | None) -> None:
    """Where would a job of N nodes x G GPUs go now, most compactly?"""
    try:
        lv = Level.parse(level)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--level") from None
    try:
        preferred = frozenset(expand(prefer)) if prefer else frozenset()
    except HostlistError as exc:
        raise click.BadParameter(str(exc), param_hint="--prefer") from None
    shape = Shape(nodes=nodes, gpus_per_node=gpus_per_node, level=lv, strict=strict,
                  gpu_type=gpu_type, min_gpu_memory_gb=min_gpu_memory, prefer=preferred)
    result = loaded.fabric.place(shape, loaded.free)
    if isinstance(result, NoPlacement):
        if as_json:
            _dump({"placed": False, "reason": result.reason, "free_gpus": result.free_gpus,
                   "best_hosts_in_one_domain": result.best_hosts_in_one_domain,
                   "note": loaded.note})
        else:
            click.echo(inert(f"no placement: {result.reason}"))
            if loaded.note:
                click.echo(inert(loaded.note))
        click.get_current_context().exit(1)
    spans = {lv.name.lower(): n for lv, n in result.spans.items()}
    if as_json:
        _dump({"placed": True, "hosts": list(result.hosts), "hostlist": compress(result.hosts),
               "level": result.level.name.lower(), "spans": spans, "cost": result.cost,
               "degraded": result.degraded, "note": loaded.note})
    else:
        word = {Level.NVLINK: "NVLink domain"}.get(result.level, result.level.name.lower())
        where = loaded.fabric.domain_of(result.hosts[0], result.level)
        click.echo(inert(f"{compress(result.hosts)}: within one {word} ({where}); spans "
                         + ", ".join(f"{n} {k}" for k, n in spans.items()
                                     if k in ("nvlink", "leaf", "spine"))
                         + f"; cost {result.cost:g}"
                         + ("; uses a degraded link" if result.degraded else "")))
        if loaded.note:
            click.echo(inert(loaded.note))
