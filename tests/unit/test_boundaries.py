"""The design's boundaries, held by a test: the pure core imports no I/O or UI.

policy/ and topology/ decide and compute; they must not talk to Slurm, the
journal or the terminal. Only slurm/ runs Slurm's commands.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"subprocess", "sqlite_utils", "sqlite3", "rich", "click", "textual", "socket"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


PURE = sorted(
    [*(ROOT / "slurmpolicy" / "policy").rglob("*.py"), *(ROOT / "topology").rglob("*.py")]
)


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_core_imports_no_io_or_ui(path):
    bad = _imports(path) & FORBIDDEN
    where = path.relative_to(ROOT)
    assert not bad, f"{where} imports {sorted(bad)}; policy/ and topology/ stay pure"


def test_only_the_slurm_package_runs_slurm_commands():
    offenders = []
    for path in (ROOT / "slurmpolicy").rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[1] in ("slurm", "commands", "sim", "tui") or rel.name in (
                "job.py", "devcluster.py"):
            continue
        text = path.read_text(encoding="utf-8")
        for tool in ('"squeue"', '"scontrol"', '"sbatch"', '"scancel"', '"sinfo"'):
            if tool in text:
                offenders.append(f"{rel}: {tool}")
    assert not offenders, offenders
