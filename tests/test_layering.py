"""The house's floors, read from the code's imports: data flows down, never up.

- nothing under ``nodes/``, ``topologies/`` or ``analysis/`` imports ``experiments``;
- a routing core (``nodes/cores/``) imports only the core interface, the data model, the
  matching index, other core modules, the standard library and numpy (an allow-list:
  numpy is arithmetic on arrays, with no clock, socket or state outside the core; the
  Meghdoot core tests a hundred neighbour zones against an event's region at once);
- run constants live in one place: the broker port, and the run folder's file names.

Imports are read with ``ast``; an import under ``if TYPE_CHECKING:`` is an annotation,
not a dependency, and is not counted.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOWER_ROOMS = ("nodes", "topologies", "analysis")
CORE_ALLOWED = ("nodes.messages", "nodes.model", "nodes.matching", "nodes.cores", "numpy")


def _modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _runtime_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import that runs, skipping ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("room", LOWER_ROOMS)
def test_lower_rooms_never_import_experiments(room: str) -> None:
    bad = [f"{p.relative_to(REPO)}:{line} imports {mod}" for p in _modules(room)
           for line, mod in _runtime_imports(p) if _top(mod) == "experiments"]
    assert not bad, "\n".join(bad)


def test_cores_import_only_the_allow_list() -> None:
    stdlib = sys.stdlib_module_names
    bad = []
    for p in _modules("nodes/cores"):
        for line, mod in _runtime_imports(p):
            ok = _top(mod) in stdlib or mod == "__future__" or any(
                mod == a or mod.startswith(a + ".") for a in CORE_ALLOWED)
            if not ok:
                bad.append(f"{p.relative_to(REPO)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_the_walker_sees_a_violation(tmp_path: Path) -> None:
    """The checks above can fail: a planted import is found, a TYPE_CHECKING one is not."""
    p = tmp_path / "m.py"
    p.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import networkx\n"
                 "def f():\n    from experiments.plan import RunPlan\n")
    assert [m for _, m in _runtime_imports(p)] == ["typing", "experiments.plan"]


def _literals(folders: tuple[str, ...]) -> Iterator[tuple[Path, int, object]]:
    for folder in folders:
        for p in _modules(folder):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant):
                    yield p, node.lineno, node.value


def test_run_constants_are_defined_once() -> None:
    """The broker port is written in nodes/emulated/runtime.py only; the run folder's file names in
    nodes/runfolder.py only (everyone else asks those modules)."""
    names = {"summary.json", "manifest.json", "workload.jsonl", "rates.json", "nic.json",
             "sweep.json", "report.html"}
    port, files = [], []
    for p, line, value in _literals(("nodes", "experiments", "analysis", "controller")):
        rel = str(p.relative_to(REPO))
        if value == 7000 and rel != "nodes/emulated/runtime.py":
            port.append(f"{rel}:{line}")
        if isinstance(value, str) and value in names and rel != "nodes/runfolder.py":
            files.append(f"{rel}:{line} {value}")
    assert not port, f"port 7000 outside nodes/emulated/runtime.py: {port}"
    assert not files, f"run-folder file names outside nodes/runfolder.py: {files}"
