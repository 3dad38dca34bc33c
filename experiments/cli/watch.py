"""``pubsublab watch [RUN_DIR]``: a live view of a run, or a replay of a finished one."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import DEFAULT_RUNS, SpecError

NAME = "watch"
HELP = "a live view of a running experiment, or a replay of a finished one"


def add_parser(sub: Any) -> None:
    """Add the ``watch`` subcommand to ``sub`` (the subparsers action)."""
    w = sub.add_parser(NAME, description="Refreshed about twice a second: per overlay link "
                                         "its output-queue length and whether it is "
                                         "overloaded, IDR's decisions by case, deliveries "
                                         "against the oracle, notification delay p50/p95 "
                                         "over the last 5 s (a replay frame's span if "
                                         "longer), the CPU-idle fidelity figure. "
                                         "Reads the run's logs as they are written; a "
                                         "finished run (emulated or simulated) is replayed.")
    w.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                   help="a run folder (default: the newest run in progress under --runs)")
    w.add_argument("--runs", type=Path, default=DEFAULT_RUNS,
                   help="where to look for the run in progress (default ./runs)")
    w.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="replay at X times the pace of the run (default 1): a frame "
                        "about every 0.5 s covers X x 0.5 s of it, whole statistics "
                        "windows, and shows each link's longest queue and overloaded "
                        "windows in them; no window is skipped")
    w.add_argument("--algorithm", metavar="NAME",
                   help="replay only this algorithm's part of the run")
    w.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Show the view until the run ends (or Ctrl-C); SpecError if there is nothing to show."""
    from analysis.watch import watch

    try:
        watch(args.run_dir, args.runs, speed=args.speed, algorithm=args.algorithm)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return 0
