"""Progress lines for the user: standard error, so ``--json`` output stays clean."""

from __future__ import annotations

import os

from nodes.time_left import write_line

PREFIX = "[pubsublab] "


def log(msg: str) -> None:
    """One progress line on standard error, prefixed with the program's name."""
    write_line(f"{PREFIX}{msg}")


def log_from_signal_handler(msg: str) -> None:
    """:func:`log` for a signal handler: one ``write`` to file descriptor 2, past the
    stream and :func:`~nodes.time_left.write_line`'s lock. A handler that prints
    re-enters the stream's buffer when the signal interrupted a print, and Python then
    raises RuntimeError in the interrupted code."""
    os.write(2, f"{PREFIX}{msg}\n".encode())
