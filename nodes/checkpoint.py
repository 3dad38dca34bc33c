"""A long simulation paused to a file and resumed in another process.

A 10,000-peer Meghdoot run with 40,000 events takes about three hours of a core here,
longer than one sitting at the machine. The simulator can stop between two of its events
once a wall-clock budget is spent, write its whole state to a file, and go on from that
file later in a fresh process, making exactly what one uninterrupted run makes: its state
is plain data (heaps, tables, counters, seeded random generators), and nothing in a run
depends on the process it runs in (string hashes change between processes, and no
result may follow a set's order already, since logs are byte-identical for a seed).

The file is a pickle, the standard library's serialiser of Python object graphs
(shared objects stay shared, so a payload sized once is still sized once); a file
written by some code is read only by the same code (:mod:`experiments.runs.simulated`
checks a digest of the sources first). Functions do not pickle: the caller hands the
simulator's again on resume.
"""

from __future__ import annotations

import gc
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Pause:
    """Stop at the first point between two events once ``time.perf_counter()`` reaches
    ``until`` (seconds, that clock's reading), and write the state to ``path``. A
    deadline rather than a budget, so that a caller's budget covers what it did before
    (reading the state it resumes from)."""

    until: float
    path: Path


class Paused(Exception):
    """The run paused: its state is in ``path``, ``done`` the share of its client
    operations carried out, ``t_s`` the simulated time it stopped at."""

    def __init__(self, path: Path, done: float, t_s: float) -> None:
        super().__init__(f"paused at {done:.0%} of the client operations, simulated "
                         f"time {t_s:.1f} s: state in {path}")
        self.path, self.done, self.t_s = path, done, t_s


def write_state(state: Any, path: Path) -> None:
    """Pickle ``state`` to ``path`` (through a temporary file, so a run stopped while
    writing never leaves a half file under the name)."""
    tmp = path.with_name(path.name + ".part")
    try:
        with open(tmp, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def read_state(path: Path) -> Any:
    """The object :func:`write_state` wrote to ``path``. The collector is off meanwhile:
    reading builds tens of millions of objects and no garbage, and each collection of
    the older generations would walk all that is built so far."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    finally:
        if enabled:
            gc.enable()
