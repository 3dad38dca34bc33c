"""Progress lines for the user: standard error, so ``--json`` output stays clean."""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    """One progress line on standard error, prefixed with the program's name."""
    print(f"[pubsublab] {msg}", file=sys.stderr, flush=True)
