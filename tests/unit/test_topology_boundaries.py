"""topology/ stays pure: no subprocess, sqlite_utils, rich or click (the CLI draws)."""

import ast
from pathlib import Path

import pytest

FORBIDDEN = {"subprocess", "sqlite_utils", "rich", "click"}
TOPOLOGY = Path(__file__).parents[2] / "topology"


@pytest.mark.parametrize("path", sorted(TOPOLOGY.rglob("*.py")), ids=lambda p: p.name)
def test_no_forbidden_imports(path):
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    assert not found & FORBIDDEN, f"{path.name} imports {sorted(found & FORBIDDEN)}"


def test_there_are_modules_to_check():
    assert len(list(TOPOLOGY.rglob("*.py"))) >= 10
