"""Progress lines for the user: standard error, so ``--json`` output stays clean."""

from __future__ import annotations

import os
import sys

PREFIX = "[pubsublab] "


def log(msg: str) -> None:
    """One progress line on standard error, prefixed with the program's name."""
    print(f"{PREFIX}{msg}", file=sys.stderr, flush=True)


def log_from_signal_handler(msg: str) -> None:
    """:func:`log` for a signal handler: one ``write`` to file descriptor 2. A handler
    that prints re-enters the stream's buffer when the signal interrupted a print, and
    Python then raises RuntimeError in the interrupted code."""
    os.write(2, f"{PREFIX}{msg}\n".encode())
