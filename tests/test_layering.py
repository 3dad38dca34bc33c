"""The house's floors, read from the code's imports: data flows down, never up.

- every room (a top folder, a folder of ``nodes/`` or a shared module of it) has a floor
  in :data:`FLOORS`, and every import goes to a room on a lower floor: none sideways (the
  two hosts never import each other), none up but the ones :data:`UP` states with why;
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


# From the top floor down. A room of ``nodes/`` is a folder (``nodes.sim``) or a module
# both hosts share (``nodes.logs``); ``topologies`` sits among them, below the workloads
# (the burst workload places its publishers on an overlay) and above the cores (the
# topology builders derive core params).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("experiments",),
    ("analysis",),
    ("controller",),
    ("nodes.emulated", "nodes.sim"),
    ("nodes.hosting",),
    ("nodes.metrics",),
    ("nodes.workloads",),
    ("topologies",),
    ("nodes.cores",),
    ("nodes.logs",),
    ("nodes.frames", "nodes.runfolder", "nodes.time_left"),
    ("nodes.matching",),
    ("nodes.messages", "nodes.model"),
)
# Arrows that run up, each with why it stays: none today (the admission's reason names,
# which the summary counts by, live in the log schema, nodes.logs).
UP: dict[tuple[str, str], str] = {}
HOUSE = ("nodes", "topologies", "analysis", "experiments", "controller")


def _room(module: str) -> str:
    """The room of a module: its top folder, or for ``nodes`` its folder or shared module."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "nodes" else parts[0]


def _arrows() -> Iterator[tuple[str, str, str]]:
    """(from room, to room, where) of every import between two rooms of the house."""
    for top in HOUSE:
        for p in _modules(top):
            rel = p.relative_to(REPO)
            here = _room(".".join(rel.with_suffix("").parts))
            tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
            froms = {node.lineno: [f"{node.module}.{a.name}" for a in node.names]
                     for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     and node.module in HOUSE}  # ``from nodes import logs``: nodes.logs
            for line, mod in _runtime_imports(p):
                for target in froms.get(line, [mod]) if mod in HOUSE else [mod]:
                    there = _room(target)
                    if _top(target) in HOUSE and there != here:
                        yield here, there, f"{rel}:{line} imports {target}"


def _misplaced(arrows: list[tuple[str, str, str]]) -> tuple[set[str], list[str]]:
    """The rooms with no floor, and the arrows that go sideways or up unstated."""
    floor = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
    unplaced, wrong = set(), []
    for here, there, where in arrows:
        unplaced.update(r for r in (here, there) if r not in floor)
        if (here in floor and there in floor and floor[there] <= floor[here]
                and (here, there) not in UP):
            wrong.append(f"{where}: {here} (floor {floor[here]}) to {there} "
                         f"(floor {floor[there]})")
    return unplaced, wrong


def test_every_room_has_a_floor_and_imports_only_below() -> None:
    arrows = list(_arrows())
    unplaced, wrong = _misplaced(arrows)
    assert not unplaced, f"rooms with no floor in FLOORS: {sorted(unplaced)}"
    assert not wrong, "\n".join(wrong)
    used = {(h, t) for h, t, _ in arrows}
    assert set(UP) <= used, f"stated arrows no import needs any more: {set(UP) - used}"


def test_the_floor_check_sees_arrows_up_sideways_and_unplaced() -> None:
    unplaced, wrong = _misplaced([("nodes.cores", "nodes.sim", "a"),
                                  ("nodes.sim", "nodes.emulated", "b"),
                                  ("nodes.attic", "nodes.model", "c"),
                                  ("nodes.sim", "nodes.cores", "d")])
    assert unplaced == {"nodes.attic"}
    assert [w.split(":")[0] for w in wrong] == ["a", "b"]


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
