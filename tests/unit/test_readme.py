"""The README's examples are real: its TOML blocks load, its directives check."""

import re
from pathlib import Path

import pytest

from slurmpolicy import directives, settings
from slurmpolicy.topology.fabricfile import parse_fabric_file

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_settings_example_loads():
    import tomllib

    (block,) = [b for b in _blocks("toml") if "[classes.production]" in b]
    loaded = settings.from_mapping(tomllib.loads(block), "README.md")
    assert loaded.classes["production"].accounts == ("ops", "vision")
    assert loaded.fairshare.half_life == 7 * 86400
    assert loaded.preemption.min_runtime == 600


def test_fabric_file_example_parses():
    (block,) = [b for b in _blocks("toml") if "[[rack]]" in b]
    spec = parse_fabric_file(block, "README.md")
    assert spec is not None


def test_batch_script_example_passes_the_checker():
    (script,) = [b for b in _blocks("bash") if "#SPOLICY" in b]
    result = directives.check_script(script, settings.Settings(), directives.Context())
    assert not result.problems, result.problems
    assert result.admin_comment.startswith("spolicy:v1 class=research")


@pytest.mark.parametrize("command", ["queue", "nodes", "why", "top", "directives", "ckpt",
                                     "daemon", "plan", "log", "report", "fabric", "plugin",
                                     "config", "devcluster", "simulate", "simulate-gather",
                                     "demo"])
def test_every_command_in_the_table_exists(command):
    from slurmpolicy.cli import cli

    assert f"`slurmpolicy {command}" in README
    assert command in cli.list_commands(None)  # type: ignore[arg-type]
