"""``slurmpolicy config``: validate and show settings."""

from __future__ import annotations

import json

import click
import msgspec

from slurmpolicy import settings as settings_mod
from slurmpolicy.inert import inert


@click.group()
def config() -> None:
    """Check and show the settings file."""


@config.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def check(path: str) -> None:
    """Validate PATH; print what is wrong (file, key, expectation) or 'ok', and a
    note for each key that its other keys make do nothing."""
    _, notes = settings_mod.load_with_notices(path)
    click.echo(f"{path}: ok")
    for note in notes:
        click.echo(f"note: {inert(note)}")


@config.command("ranges")
def ranges() -> None:
    """Print every numeric setting with its allowed range and default (Markdown)."""
    click.echo("| key | allowed | default |")
    click.echo("|---|---|---|")
    for key, allowed, default in settings_mod.ranges():
        click.echo(f"| `{key}` | {allowed} | {default or '-'} |")


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings (file merged over defaults)."""
    loaded = settings_mod.load(ctx.obj.get("config_path") if ctx.obj else None)
    data = msgspec.to_builtins(loaded)
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
