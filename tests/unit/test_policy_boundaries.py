"""policy/ stays pure: no subprocess, sqlite_utils, rich, click, no clock, no I/O."""

import ast
from pathlib import Path

import pytest

FORBIDDEN = {"subprocess", "sqlite_utils", "rich", "click", "socket", "os", "time",
             "datetime", "pathlib"}
POLICY = Path(__file__).parents[2] / "slurmpolicy" / "policy"


@pytest.mark.parametrize("path", sorted(POLICY.glob("*.py")), ids=lambda p: p.name)
def test_no_forbidden_imports(path):
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    calls = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.add(node.func.id)
    assert not found & FORBIDDEN, f"{path.name} imports {sorted(found & FORBIDDEN)}"
    assert "open" not in calls and "print" not in calls, f"{path.name} does I/O"


def test_there_are_modules_to_check():
    assert {p.name for p in POLICY.glob("*.py")} >= {
        "plan.py", "explain.py", "priority.py", "fairshare.py", "preemption.py",
        "reservations.py", "deferral.py", "classes.py"}
