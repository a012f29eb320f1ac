"""``slurmpolicy directives`` (check a batch script, list the directives) and
``slurmpolicy plugin`` (render job_submit.lua). Thin: the work is in
:mod:`slurmpolicy.directives` and :mod:`slurmpolicy.plugin`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from slurmpolicy import settings as settings_mod
from slurmpolicy.directives import (
    Context,
    DirectiveErrors,
    check_script,
    sbatch_options,
    schema,
)
from slurmpolicy.errors import ConfigError
from slurmpolicy.jobpolicy import parse_admin_comment, with_node_range
from slurmpolicy.pools import Route, node_range, request_from_options, route, sbatch_request


def _settings(ctx: click.Context, path: str | None = None) -> settings_mod.Settings:
    chosen = path or (ctx.obj or {}).get("config_path")
    return settings_mod.load(chosen)


@click.group()
def directives() -> None:
    """The #SPOLICY directives of batch scripts."""


@directives.command("check")
@click.argument("script", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--account", "-A", help="Account the job is submitted under "
              "(default: the script's #SBATCH --account, then $SBATCH_ACCOUNT).")
@click.option("--partition", "-p", help="Partition(s) the job is submitted to "
              "(default: the script's #SBATCH --partition, then $SBATCH_PARTITION).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable verdict.")
@click.pass_context
def check(ctx: click.Context, script: str, account: str | None, partition: str | None,
          as_json: bool) -> None:
    """Validate SCRIPT's #SPOLICY lines as job_submit.lua will ('-': stdin).

    Prints the admin_comment the job would carry, or every bad line with what
    is allowed; exits 2 on errors.
    """
    loaded = _settings(ctx)
    try:
        data = sys.stdin.buffer.read() if script == "-" else Path(script).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"{script}: cannot read: {exc.strerror}") from exc
    from_script = sbatch_options(data)
    account = account or from_script.get("account") or os.environ.get("SBATCH_ACCOUNT")
    partition = partition or from_script.get("partition") or os.environ.get("SBATCH_PARTITION")
    result = check_script(data, loaded, Context(
        account=account, partition=partition,
        check_account=account is not None, check_partition=partition is not None))
    routed = _route(loaded, data, result, partition)
    admin = _with_node_range(result.admin_comment, data) if result.ok else None
    if as_json:
        extra: dict[str, Any] = {"admin_comment": admin, "route": None if routed is None else {
            "partitions": list(routed.partitions), "pool": routed.pool, "text": routed.text,
            "refused": routed.refused}}
        click.echo(json.dumps({"script": script, **result.to_dict(), **extra}, indent=2))
        if not result.ok or (routed is not None and routed.refused):
            ctx.exit(DirectiveErrors.exit_code)
        return
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    for warning in result.warnings:
        # sbatch would never see these lines; the job_submit plugin says the same at submit.
        click.echo(f"{script}: warning: {warning}", err=True)
    if not result.ok:
        # One line per problem, compiler style, in the plugin's own words.
        for problem in result.problems:
            click.echo(f"{script}: {problem.message}", err=True)
        ctx.exit(DirectiveErrors.exit_code)
    if routed is not None and routed.refused:
        click.echo(f"{script}: {routed.refused}", err=True)
        ctx.exit(DirectiveErrors.exit_code)
    if routed is not None and routed.text:
        click.echo(f"pool: {routed.text}")
    if admin is None:
        click.echo(f"{script}: no #SPOLICY directives; the job gets the defaults "
                   f"(class {loaded.default_class})")
        return
    click.echo(f"{script}: ok")
    click.echo(f"admin_comment: {admin}")
    policy = parse_admin_comment(admin)
    if policy.node_range is not None:
        lo, hi = policy.node_range
        click.echo(f"elastic: starts on {lo} to {hi} nodes, with what is free; " + (
            f"a higher class may shrink it (checkpoint, requeue at no fewer than {lo} nodes) "
            "instead of evicting it" if policy.can_checkpoint else
            "it cannot checkpoint, so it is evicted, never shrunk"))
    if policy.can_checkpoint and policy.checkpoint is not None:
        click.echo(f"note: job_submit.lua also sets requeue=1; to be warned before the time "
                   f"limit as well, add '#SBATCH --signal=B:{policy.checkpoint.signal}@"
                   f"{max(60, int(policy.checkpoint.grace))}'", err=True)


def _with_node_range(admin_comment: str | None, data: bytes) -> str | None:
    """The admin_comment job_submit.lua writes: the directives, plus ``nodes=MIN-MAX``
    for a node range (an elastic job), even without directives."""
    lo, hi = node_range(sbatch_request(data).get("nodes", "1"))
    return with_node_range(admin_comment, lo, hi)


def _route(loaded: settings_mod.Settings, data: bytes, result: Any,
           partition: str | None) -> Route | None:
    """Where job_submit.lua's pool routing would send the script (None: no pools)."""
    if not loaded.pools or not result.ok:
        return None
    policy = result.policy
    request = request_from_options(sbatch_request(data), policy.job_class or loaded.default_class,
                                   policy.gpu_type, policy.min_gpu_memory_gb, partition)
    return route(loaded.pools, request)


@directives.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable schema.")
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Every directive: allowed values, default and an example."""
    items = schema(_settings(ctx))
    if as_json:
        click.echo(json.dumps([d.to_dict() for d in items], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="#SPOLICY directives", show_lines=True)
    for column in ("directive", "allowed", "default", "example"):
        table.add_column(column, overflow="fold")
    for d in items:
        table.add_row(f"--{d.name}\n[dim]{d.help}[/dim]", d.allowed, d.default,
                      f"#SPOLICY {d.example}")
    Console().print(table)


@click.group()
def plugin() -> None:
    """The job_submit Lua plugin."""


@plugin.command("render")
@click.option("--settings", "settings_path", type=click.Path(dir_okay=False),
              help="Settings file to render with (default: the global --config).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              show_default=True, help="Where to write job_submit.lua ('-': stdout).")
@click.pass_context
def render_cmd(ctx: click.Context, settings_path: str | None, output: str) -> None:
    """Write job_submit.lua generated from the directive schema and the settings.

    Install it beside slurm.conf with JobSubmitPlugins=lua; slurmctld reloads
    it on the next submission when the file changes.
    """
    from slurmpolicy.plugin import render

    text = render(_settings(ctx, settings_path))
    if output == "-":
        click.echo(text, nl=False)
        return
    target = Path(output)
    tmp = target.with_name(target.name + ".tmp")
    try:
        # Write then rename: slurmctld must never read a half-written script.
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(target)
    except OSError as exc:
        raise ConfigError(f"{output}: cannot write: {exc.strerror}") from exc
    click.echo(f"wrote {output}", err=True)


render_cmd.name = "render"
list_.name = "list"
