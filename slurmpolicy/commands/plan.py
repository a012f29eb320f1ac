"""``slurmpolicy plan``: what the policy would do now, without doing it.

Reads one snapshot (through the configured adapter, or saved Slurm outputs
with ``--from-dir``), the fabric (``Fabric.from_sources``), the daemon's
intents when its journal is readable, and prints the Plan: every action with
the job or reservation it concerns and its reason. Nothing is changed.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from slurmpolicy import settings as settings_mod
from slurmpolicy.policy.actions import Action, Intents


def load_intents(state_dir: str) -> tuple[Intents, str]:
    """The daemon's intents, read-only, when its journal exists and can be read."""
    try:
        from slurmpolicy import store  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return Intents(), "no daemon journal support installed: no intents"
    path = Path(state_dir) / getattr(store, "FILE_NAME", "journal.sqlite")
    if not path.exists():
        return Intents(), f"no daemon journal at {path}: planning as if nothing were in flight"
    try:
        journal = store.Journal(path, read_only=True)
        return journal.load_intents(), f"intents from {path}"
    except Exception as exc:  # the journal is optional here: say why and go on
        return Intents(), f"could not read the daemon journal {path} ({exc}); no intents"


def target_of(action: Action) -> str:
    for name in ("job_id", "beneficiary", "name", "preemption_id"):
        value = getattr(action, name, None)
        if value is not None:
            return f"job {value}" if name in ("job_id", "beneficiary") else str(value)
    return "-"


def action_dict(action: Action) -> dict[str, Any]:
    data = asdict(action)
    return {"kind": action.kind, **data}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--from-dir", "from_dir", type=click.Path(exists=True, file_okay=False),
              help="Read saved Slurm outputs (squeue.json, scontrol-show-nodes.json, "
                   "slurm.conf, topology.conf ...) instead of asking Slurm.")
@click.option("--adapter", type=click.Choice(["auto", "jsoncli", "pyslurm"]), default=None,
              help="Slurm adapter (default: [slurm] adapter setting).")
@click.option("--no-notes", is_flag=True, help="Hide annotations (decisions that change nothing).")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, from_dir: str | None, adapter: str | None,
         no_notes: bool) -> None:
    """Show what the policy would do now (a dry run: nothing is changed)."""
    from slurmpolicy.commands.views import read_snapshot
    from slurmpolicy.policy import plan as make_plan
    from slurmpolicy.topology import Fabric

    cfg = settings_mod.load((ctx.obj or {}).get("config_path"))
    snapshot = read_snapshot(ctx, adapter, from_dir)
    slurm_conf = None
    if from_dir and (Path(from_dir) / "slurm.conf").exists():
        slurm_conf = Path(from_dir) / "slurm.conf"
    fabric = Fabric.from_sources(snapshot.nodes, cfg.fabric, slurm_conf)
    if from_dir:
        intents, source = Intents(), "saved outputs: no intents"
    else:
        intents, source = load_intents(cfg.daemon.state_dir)
    now = snapshot.taken_at
    result = make_plan(snapshot, fabric, cfg, intents, now)
    actions = [a for a in result.actions if not (no_notes and a.kind == "Annotate")]
    if as_json:
        click.echo(json.dumps({"now": now, "intents": source,
                               "actions": [action_dict(a) for a in actions],
                               "site_factors_held_back": result.held_back},
                              indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from slurmpolicy.inert import inert

    console = Console()
    pending = sum(1 for j in snapshot.jobs if j.is_pending)
    running = sum(1 for j in snapshot.jobs if j.is_running)
    # Text, never markup: names and reasons are data, shown with controls escaped.
    console.print(Text("Plan", style="bold") + Text(
        inert(f" for {snapshot.cluster_name or 'cluster'}: "
              f"{pending} pending, {running} running jobs; {source}")))
    held = (f"{result.held_back} more site factor(s) wait for a later cycle: past "
            f"daemon.max_slurm_calls_per_cycle ({cfg.daemon.max_slurm_calls_per_cycle})"
            if result.held_back else "")
    if not actions:
        console.print("Nothing to do.")
        if held:
            console.print(held)
        return
    table = Table(show_lines=False)
    table.add_column("action", style="bold")
    table.add_column("concerns")
    table.add_column("reason", overflow="fold")
    for a in actions:
        table.add_row(a.kind, Text(inert(target_of(a))), Text(inert(a.reason)))
    console.print(table)
    if held:
        console.print(held)
