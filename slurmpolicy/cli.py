"""The ``slurmpolicy`` command: a click group whose commands are thin calls into
the core. Commands load lazily, so that ``slurmpolicy ckpt ack`` inside a job
does not pay for networkx or rich. This module is the one place where typed
errors become messages and exit codes.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import click

from slurmpolicy import __version__
from slurmpolicy.errors import SlurmPolicyError

#: command name -> "module:attribute" of a click command or group.
COMMANDS: dict[str, tuple[str, str]] = {
    "devcluster": ("slurmpolicy.commands.devcluster", "devcluster"),
    "queue": ("slurmpolicy.commands.views", "queue"),
    "nodes": ("slurmpolicy.commands.views", "nodes"),
    "fabric": ("slurmpolicy.commands.fabric", "fabric"),
    "directives": ("slurmpolicy.commands.directives", "directives"),
    "plugin": ("slurmpolicy.commands.directives", "plugin"),
    "config": ("slurmpolicy.commands.config", "config"),
    "plan": ("slurmpolicy.commands.plan", "plan"),
    "daemon": ("slurmpolicy.commands.daemon", "daemon"),
    "log": ("slurmpolicy.commands.daemon", "log"),
    "report": ("slurmpolicy.commands.daemon", "report"),
    "ckpt": ("slurmpolicy.commands.ckpt", "ckpt"),
    "why": ("slurmpolicy.commands.inspect", "why"),
    "top": ("slurmpolicy.commands.inspect", "top"),
    "simulate": ("slurmpolicy.commands.simulate", "simulate"),
    "simulate-task": ("slurmpolicy.commands.simulate", "simulate_task"),
    "simulate-gather": ("slurmpolicy.commands.simulate", "simulate_gather"),
    "demo": ("slurmpolicy.commands.demo", "demo"),
    "doctor": ("slurmpolicy.commands.doctor", "doctor"),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(
            name for name, (module, _) in COMMANDS.items()
            if importlib.util.find_spec(module) is not None
        )

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or importlib.util.find_spec(entry[0]) is None:
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = getattr(module, entry[1])
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmpolicy")
@click.option(
    "--config", "-c", "config_path", type=click.Path(dir_okay=False), envvar="SLURMPOLICY_CONFIG",
    help="Settings file (default /etc/slurmpolicy/slurmpolicy.toml; env SLURMPOLICY_CONFIG).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """slurmpolicy: fabric-aware fair share and checkpoint-first preemption for Slurm."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


def main(argv: list[str] | None = None) -> Any:
    """Entry point: run the group, turning our typed errors into one line and a code."""
    try:
        # With standalone_mode off, click returns ctx.exit()'s code instead of
        # exiting; a command may also return an int to set the exit status.
        rv = cli.main(args=argv, prog_name="slurmpolicy", standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        return rv
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SlurmPolicyError as exc:
        from slurmpolicy.inert import inert

        # Messages quote files, job names and Slurm's words: controls shown escaped.
        message = inert(str(exc))
        slurm_message = getattr(exc, "slurm_message", "")
        if slurm_message and slurm_message not in str(exc):
            message = f"{message}\n  Slurm said: {inert(slurm_message)}"
        click.echo(f"slurmpolicy: error: {message}", err=True)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
