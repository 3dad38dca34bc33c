"""The floor a discrete-event simulator in Python stands on: a bare ``heapq`` event loop.

:func:`bare_loop_rate` runs a loop that does nothing but what every simulator event
costs at least: pop the earliest event (a tuple shaped as the simulator's,
``(t_s, seq, kind, a, b)``) and push the one it schedules, with a heap as full as a
run's. Benchmarks measure it in the same process and the same minute as their own run,
so the share of the floor they print says how close the simulator comes to it whatever
else the (shared) machine is doing. Rates are per second of this process's CPU time.
"""

from __future__ import annotations

import heapq
import random
import time

FLOOR_EVENTS = 1_000_000  # events of one measurement: about a second of CPU
FLOOR_PENDING = 10_000  # events waiting on the heap meanwhile (a large run holds more)


def bare_loop_rate(events: int = FLOOR_EVENTS, pending: int = FLOOR_PENDING,
                   seed: int = 0) -> float:
    """Events per CPU second of a bare heapq loop: ``events`` pops, each pushing one
    event a (seeded) random delay of 0-2 ms later, over a heap of ``pending`` events."""
    rng = random.Random(seed)
    delays = [rng.random() * 0.002 for _ in range(4096)]  # drawn before the clock starts
    heap = [(rng.random() * 0.002, i, 0, i, None) for i in range(pending)]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    seq = pending
    t0 = time.process_time()
    for i in range(events):
        t, _, kind, a, b = pop(heap)
        seq += 1
        push(heap, (t + delays[i & 4095], seq, kind, a, b))
    return events / max(time.process_time() - t0, 1e-9)
