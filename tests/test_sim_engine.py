"""The simulator's engine on its own, with no model behind it (nodes.sim.engine): event
order, statistics windows, the horizon and the pause hook."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nodes.sim.engine
from nodes.sim.checkpoint import Pause
from nodes.sim.engine import Engine

KIND = 0  # the one kind these tests schedule


def _recorder(engine: Engine, seen: list[tuple[float, Any]]) -> list[Any]:
    """One handler: it notes (time, a) and schedules what ``b`` names, at once."""

    def handle(a: Any, b: Any, t: float) -> bool:
        seen.append((t, a))
        if b is not None:
            engine.push(t, KIND, b, None)
        return a != "uncounted"

    return [handle]


def _no_pause(path: Path) -> None:
    raise AssertionError("no pause was asked for")


def test_ties_run_in_scheduling_order_and_windows_close_before_their_time() -> None:
    engine = Engine(window_s=1.0)
    seen: list[tuple[float, Any]] = []
    windows: list[float] = []
    engine.start([(2.0, KIND, "a", "pushed at 2"), (0.5, KIND, "b", None),
                  (2.0, KIND, "c", None), (2.0, KIND, "uncounted", None)], until_s=2.5)
    events, end_s = engine.run(_recorder(engine, seen), window=windows.append,
                               pending={"a link"}, pause=None, checkpoint=_no_pause)
    # "pushed at 2", scheduled while the ties ran, comes after all three.
    assert seen == [(0.5, "b"), (2.0, "a"), (2.0, "c"), (2.0, "uncounted"), (2.0, "pushed at 2")]
    assert windows == [1.0, 2.0]  # none past the horizon
    assert (events, end_s) == (4, 2.0)


def test_no_window_closes_without_pending_figures_and_none_past_the_horizon() -> None:
    engine = Engine(window_s=0.1)
    seen: list[tuple[float, Any]] = []
    windows: list[float] = []
    engine.start([(0.05, KIND, "x", None), (7.0, KIND, "late", None)], until_s=5.0)
    assert engine.run(_recorder(engine, seen), window=windows.append, pending=set(),
                      pause=None, checkpoint=_no_pause) == (1, 0.05)
    assert seen == [(0.05, "x")] and windows == []


class _Stop(Exception):
    pass


def test_a_passed_deadline_calls_the_checkpoint_with_the_loop_state_kept(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(nodes.sim.engine, "PAUSE_CHECK_EVERY", 3)
    engine = Engine(window_s=1.0)
    seen: list[tuple[float, Any]] = []
    asked: list[Path] = []

    def checkpoint(path: Path) -> None:
        asked.append(path)
        raise _Stop

    engine.start([(float(i), KIND, i, None) for i in range(10)], until_s=None)
    handlers = _recorder(engine, seen)
    with pytest.raises(_Stop):
        engine.run(handlers, window=None, pending=(), pause=Pause(0.0, tmp_path / "s"),
                   checkpoint=checkpoint)
    assert asked == [tmp_path / "s"] and [a for _, a in seen] == [0, 1]
    _, _, events, end_s = engine.loop_state
    assert (events, end_s) == (2, 1.0)
    # Going on without a pause processes the rest, counting on from there.
    assert engine.run(handlers, window=None, pending=(), pause=None,
                      checkpoint=_no_pause) == (10, 9.0)
    assert [a for _, a in seen] == list(range(10))
