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


def _slurm_imports(name: str) -> set[str]:
    """The slurmpolicy.slurm modules one module of the Slurm layer imports."""
    path = ROOT / "slurmpolicy" / "slurm" / f"{name}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("slurmpolicy.slurm."):
                found.add(node.module.rsplit(".", 1)[1])
            elif node.module == "slurmpolicy.slurm":
                found.update(alias.name for alias in node.names)
    return found


# Each module of the Slurm layer and what it may import from the layer: the
# port knows no adapter, neither adapter knows the other, and what both share
# (commands, parse, classify) sits below them. connect() alone knows both.
SLURM_LAYER = {
    "client": set(),
    "classify": set(),
    "parse": {"classify"},
    "commands": {"classify", "client", "parse"},
    "jsoncli": {"client", "commands", "parse"},
    "probe": {"commands"},
    "pyslurm_client": {"client", "commands", "parse", "classify", "probe"},
    "connect": {"client", "jsoncli", "pyslurm_client", "probe"},
}


@pytest.mark.parametrize("module", sorted(SLURM_LAYER))
def test_the_slurm_layer_reads_top_down(module):
    extra = _slurm_imports(module) - SLURM_LAYER[module]
    assert not extra, f"slurm/{module}.py imports {sorted(extra)} from the Slurm layer"


def test_every_slurm_module_has_its_place_in_the_layering():
    present = {p.stem for p in (ROOT / "slurmpolicy" / "slurm").glob("*.py")} - {"__init__"}
    assert present <= set(SLURM_LAYER), sorted(present - set(SLURM_LAYER))
