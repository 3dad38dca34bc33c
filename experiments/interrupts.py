"""Ctrl-C and SIGTERM while a run tears down: the first ends the run, later ones wait.

In the ``pubsublab`` process (:func:`interrupt_once`) the first SIGINT or SIGTERM raises
KeyboardInterrupt, which unwinds the run through its teardown: the ``finally`` blocks
that stop brokers and captures, take the network down, remove the state file and write
the manifest. A second one used to raise again inside that teardown and cut it short,
leaving processes, a state file and a manifest that says ``running``. So after the
first, they only print "tearing down, please wait"; so do all of them during a teardown
(:func:`teardown`, which the runner and :meth:`Emulation.stop
<experiments.emulation.network.Emulation.stop>` use, also when called from a library).
Whoever cannot wait can still SIGKILL the runner: the next run's sweep
(:mod:`experiments.emulation.leftovers`) removes what it left.

Python runs signal handlers in the main thread only, and only the main thread may set
them; called from another thread, these change nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from experiments.progress import log_from_signal_handler

SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, FrameType | None], Any]


def _wait(_signo: int, _frame: FrameType | None) -> None:
    log_from_signal_handler(f"tearing down, please wait (SIGKILL to pid {os.getpid()} "
                            "abandons it; the next run removes what it leaves)")


def _ignore() -> None:
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def _interrupt_once(signo: int, _frame: FrameType | None) -> None:
    for s in SIGNALS:
        signal.signal(s, _wait)
    # As it exits, Python resets handlers to the default, death by the signal: one
    # arriving then would turn exit status 130 into a kill. It leaves "ignore" alone.
    atexit.register(_ignore)
    raise KeyboardInterrupt(signal.Signals(signo).name)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def interrupt_once() -> None:
    """For a command-line process: the first SIGINT or SIGTERM raises KeyboardInterrupt,
    every later one only prints that teardown is under way (the process ends after it)."""
    if _main_thread():
        for s in SIGNALS:
            signal.signal(s, _interrupt_once)


@contextlib.contextmanager
def _handlers(handler: Handler, signals: tuple[signal.Signals, ...]) -> Iterator[None]:
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def teardown() -> contextlib.AbstractContextManager[None]:
    """Within: SIGINT and SIGTERM only print that teardown is under way."""
    return _handlers(_wait, SIGNALS)


def at_prompt() -> contextlib.AbstractContextManager[None]:
    """Within: every Ctrl-C raises KeyboardInterrupt, as an interactive prompt (the Mininet
    CLI) expects, where it stops the command typed rather than the run."""
    return _handlers(signal.default_int_handler, (signal.SIGINT,))
