"""``slurmpolicy doctor``: what this host's slurmpolicy would work with, and why.

One line per check, in the order a cycle needs them: the settings, Slurm's
commands and the controller, the adapter ``connect()`` would choose (with
pyslurm's probe and its reason when it is not used), the fabric sources and
the daemon's state directory. Each line says ok, warn or FAIL and what to do.
The exit status is 1 when any check fails, so scripts and CI can use it.
Nothing is changed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import click

from slurmpolicy.errors import SlurmPolicyError


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "FAIL"
    detail: str


def _settings(ctx: click.Context) -> tuple[Check, object | None]:
    from slurmpolicy import settings as settings_mod

    path = (ctx.obj or {}).get("config_path")
    try:
        cfg = settings_mod.load(path)
    except SlurmPolicyError as exc:
        return Check("settings", "FAIL", str(exc)), None
    where = path or os.environ.get("SLURMPOLICY_CONFIG") or "built-in defaults or " \
        "/etc/slurmpolicy/slurmpolicy.toml"
    return Check("settings", "ok", f"read from {where}"), cfg


def run_checks(ctx: click.Context) -> list[Check]:
    checks: list[Check] = []
    first, cfg = _settings(ctx)
    checks.append(first)
    if cfg is None:
        return checks
    from slurmpolicy.slurm.commands import SlurmCommands
    from slurmpolicy.slurm.connect import connect
    from slurmpolicy.slurm.probe import pyslurm_status

    bin_dir = cfg.slurm.bin_dir or None  # type: ignore[attr-defined]
    timeout = cfg.slurm.command_timeout  # type: ignore[attr-defined]
    cmds = SlurmCommands(bin_dir=bin_dir, timeout=timeout)
    conf = os.environ.get("SLURM_CONF", "")
    try:
        release = cmds.version_string()
        checks.append(Check("slurm", "ok", f"Slurm {release} commands in {bin_dir or '$PATH'}"
                                           + (f", SLURM_CONF={conf}" if conf else "")))
    except SlurmPolicyError as exc:
        checks.append(Check("slurm", "FAIL", str(exc)))
        return checks
    try:
        out = cmds.run(["scontrol", "ping"]).decode("utf-8", "replace")
        line = " ".join(out.split())
        checks.append(Check("controller", "ok" if "UP" in out else "FAIL", line or "(no answer)"))
    except SlurmPolicyError as exc:
        checks.append(Check("controller", "FAIL", str(exc)))
    status = pyslurm_status(bin_dir=bin_dir)
    checks.append(Check("pyslurm", "ok" if status.usable else "warn",
                        f"usable: pyslurm {status.pyslurm_version} for Slurm "
                        f"{status.slurm_version}" if status.usable else str(status.reason)))
    adapter = cfg.slurm.adapter  # type: ignore[attr-defined]
    try:
        options: dict[str, object] = {"timeout": timeout}
        if bin_dir:
            options["bin_dir"] = bin_dir
        client = connect(adapter, **options)
        checks.append(Check("adapter", "ok", f"[slurm] adapter = {adapter!r} -> "
                                             f"{client.adapter_note}"))
    except (SlurmPolicyError, ValueError) as exc:
        checks.append(Check("adapter", "FAIL", str(exc)))
        return checks
    try:
        snap = client.snapshot()
        checks.append(Check("snapshot", "ok", f"{len(snap.jobs)} jobs, {len(snap.nodes)} nodes, "
                                              f"{len(snap.partitions)} partitions read"))
    except SlurmPolicyError as exc:
        checks.append(Check("snapshot", "FAIL", str(exc)))
        return checks
    try:
        from slurmpolicy.topology import Fabric

        fabric = Fabric.from_sources(snap.nodes, cfg.fabric)  # type: ignore[attr-defined]
        conflicts = list(getattr(fabric, "conflicts", ()) or ())
        checks.append(Check("fabric", "warn" if conflicts else "ok",
                            f"{len(fabric.hosts)} hosts, {fabric.total_gpus} GPUs"
                            + (f"; {len(conflicts)} conflicts (slurmpolicy fabric check)"
                               if conflicts else "")))
    except SlurmPolicyError as exc:
        checks.append(Check("fabric", "FAIL", str(exc)))
    checks.append(_state_dir(Path(cfg.daemon.state_dir)))  # type: ignore[attr-defined]
    return checks


def _state_dir(path: Path) -> Check:
    if not path.exists():
        return Check("state dir", "warn", f"{path} does not exist yet (the daemon creates it)")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return Check("state dir", "warn", f"{path} is mode {mode:04o}: others can read the "
                                          "journal; chmod 700 it")
    if not os.access(path, os.W_OK):
        return Check("state dir", "FAIL", f"{path} is not writable by this user")
    return Check("state dir", "ok", f"{path} (mode {mode:04o})")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> int:
    """Check what slurmpolicy needs here: settings, Slurm, adapter, fabric, state dir."""
    checks = run_checks(ctx)
    if as_json:
        click.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            click.echo(f"{c.status:<4}  {c.name:<11} {c.detail}")
    return 1 if any(c.status == "FAIL" for c in checks) else 0
