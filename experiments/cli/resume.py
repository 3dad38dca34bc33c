"""``pubsublab resume RUN_FOLDER``: go on with a simulated run that paused."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import json_flag, pause_after_s, pause_flag, run_or_pause, trust_flag

NAME = "resume"
HELP = "go on with a simulated run that paused"


def add_parser(sub: Any) -> None:
    """Add the ``resume`` subcommand to ``sub`` (the subparsers action)."""
    rs = sub.add_parser(NAME, description="Go on with a run that `pubsublab sim ... "
                                          "--pause-after-min` paused, from the simulator's "
                                          "state in its folder, in this process: it makes "
                                          "what the run would have made without the pause "
                                          "(the manifest's resources list each part). Only "
                                          "on the code the run started on (its commit, and "
                                          "the same changes to it), and only a state this "
                                          "user's key signed on this machine: a paused state "
                                          "is not a format for sharing (see "
                                          "--trust-paused-state).")
    rs.add_argument("run", type=Path, metavar="RUN_FOLDER",
                    help="the paused run's folder (it holds paused.json)")
    pause_flag(rs)
    trust_flag(rs)
    json_flag(rs)
    rs.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resume the paused run in this process: its summaries, or where it paused again."""
    from experiments.runs.simulated import resume_simulation

    pause_s = pause_after_s(args)
    return run_or_pause(args, lambda: resume_simulation(
        args.run, pause_after_s=pause_s, trust=args.trust_paused_state))
