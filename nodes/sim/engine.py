"""The simulator's engine: the clock, the event heap, statistics windows and pauses, and
nothing of what an event means (as SimPy's environment, PeerSim's and ns-3's simulator
cores are apart from their models).

An event is a heap entry ``(t_s, seq, kind, a, b)``: ``seq`` is unique and rises as
entries are scheduled, so ties run in scheduling order and ``a`` and ``b`` are never
compared. The models (:mod:`nodes.sim.simulator` composes them) hand the engine one
handler per kind (:mod:`nodes.sim.events`), called as ``handler(a, b, t_s)`` and
returning whether the event counts as processed (a client operation, an arrival, a
timer handled by a core). Statistics windows end at ``k * window_s`` and close before
events at exactly that time; a window closes only while the models have figures pending
(idle windows are skipped). Time is simulated seconds from 0; logs stamp wall time as
:data:`SIM_EPOCH_S` plus it.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nodes.sim.checkpoint import Pause

SIM_EPOCH_S = 1_704_067_200.0  # 2024-01-01T00:00:00Z: fixed so logs do not depend on the day
# Python's full collection walks every live object; a run holds millions (a 10,000-peer
# Meghdoot run's links and tables) and makes no cycles of its own: those walks found
# nothing and took 7 % of that run's CPU time at a fifth of its operations. During a run
# a full collection waits for this many collections of the middle generation (Python's
# default: 10); the young generations are collected as before.
FULL_GC_AFTER = 1000
# Heap events between two looks at the clock for a pause: a look costs a system call,
# and 4,096 events of a large run take a fraction of a second.
PAUSE_CHECK_EVERY = 4096

# handler(a, b, t_s) -> whether the event counts as processed.
Handler = Callable[[Any, Any, float], bool]


@contextmanager
def rare_full_collections() -> Iterator[None]:
    """Full collections at most every :data:`FULL_GC_AFTER` middle ones, meanwhile."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, max(full, FULL_GC_AFTER))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


class Engine:
    """The clock and the event heap of one run, with windows of ``window_s`` seconds.
    It pickles with the models (a pause): between the parts of a paused run it keeps
    the window index and end, the events processed and the last one's time."""

    def __init__(self, window_s: float) -> None:
        self.heap: list[tuple[Any, ...]] = []  # changed in place, never rebound
        self.seq = 0
        self.window_s = window_s
        self.horizon = math.inf
        self.loop_state: tuple[int, float, int, float] = (1, window_s, 0, 0.0)

    def start(self, entries: Iterable[tuple[float, int, Any, Any]],
              until_s: float | None) -> None:
        """The first events, ``(t_s, kind, a, b)`` each, numbered in the order given;
        no event after ``until_s`` (``None``: no bound) is processed."""
        heap = self.heap
        heap.extend((t, i, kind, a, b) for i, (t, kind, a, b) in enumerate(entries))
        heapq.heapify(heap)
        self.seq = len(heap)
        self.horizon = math.inf if until_s is None else until_s

    def push(self, t: float, kind: int, a: Any, b: Any) -> None:
        """Schedule an event of ``kind`` at ``t``, after those scheduled before it."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def run(self, handlers: Sequence[Handler], *, window: Callable[[float], None] | None,
            pending: Collection[Any], pause: Pause | None,
            checkpoint: Callable[[Path], None]) -> tuple[int, float]:
        """Process events from where the engine stands to the horizon, or until the heap
        is empty; the events processed and the last one's time. ``handlers[kind]``
        carries out an event; ``window(t_w)`` closes the window ending at ``t_w``, asked
        only while ``pending`` (a collection the models change in place) is not empty;
        ``None``: no windows. With ``pause``, once its deadline has passed,
        ``checkpoint(pause.path)`` writes the state and raises (it does not return)."""
        heap = self.heap
        pop = heapq.heappop
        horizon = self.horizon
        window_s = self.window_s
        windows = window is not None
        k, window_t, events, end_s = self.loop_state
        countdown = PAUSE_CHECK_EVERY
        while True:
            countdown -= 1
            if not countdown:
                countdown = PAUSE_CHECK_EVERY
                if pause is not None and heap and time.perf_counter() >= pause.until:
                    self.loop_state = (k, window_t, events, end_s)
                    checkpoint(pause.path)
            t = heap[0][0] if heap else math.inf
            if windows and pending and window_t <= t:
                if window_t > horizon:
                    break
                window(window_t)
                k += 1
                window_t = k * window_s
                continue
            if not heap or t > horizon:
                break
            while window_t <= t:  # idle windows report nothing: skip them
                k = max(k + 1, int(t // window_s))
                window_t = k * window_s
            t, _, kind, a, b = pop(heap)
            if handlers[kind](a, b, t):
                events += 1
                end_s = t
        self.loop_state = (k, window_t, events, end_s)
        return events, end_s
