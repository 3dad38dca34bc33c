"""``pubsublab reproduce PAPER``: a paper's experiments and its reproduction.html."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import (
    DEFAULT_RUNS,
    allow_large_flag,
    emit_or_pause,
    json_flag,
    out_dir,
    pause_after_s,
    trust_flag,
)
from experiments.spec import PAPERS

NAME = "reproduce"
HELP = "run a paper's experiments and write reproduction.html beside the paper's numbers"


def add_parser(sub: Any) -> None:
    """Add the ``reproduce`` subcommand to ``sub`` (the subparsers action)."""
    rp = sub.add_parser(NAME, description="Run the paper's shipped experiment specs (at their "
                                          "stated scale; --quick at the smaller one its data "
                                          "file states) and write one self-contained "
                                          "reproduction.html: per headline number of the "
                                          "paper its source, ours, the ratio, whether the "
                                          "direction agrees and why they differ, with our "
                                          "figure on the paper's axes and links to the run "
                                          "folders. Papers: experiments/papers/PAPER.yaml.")
    rp.add_argument("paper", help=f"one of: {', '.join(PAPERS)}")
    rp.add_argument("--runtime", choices=["sim", "emulated"], default="sim",
                    help="simulator (default) or Mininet (root)")
    rp.add_argument("--resume", metavar="FOLDER",
                    help="an earlier reproduction folder of this paper (same runtime and "
                         "scale): its finished points are read, not run again; the rest "
                         "run into it and the page is written anew")
    rp.add_argument("--beside", metavar="FOLDER",
                    help="an earlier reproduction folder of this paper and scale in the "
                         "other runtime: its numbers go in their own columns and its "
                         "curves, dashed, on our figures (read, not run again); e.g. "
                         "sudo pubsublab reproduce octopia --runtime emulated --beside "
                         "runs/<stamp>-reproduce-octopia-sim")
    rp.add_argument("--no-run", action="store_true",
                    help="with --resume: run nothing; the page of the points the folder "
                         "has, listing those it lacks with their estimated time (e.g. "
                         "a copy of experiments/papers/finished/<stamp>-reproduce-"
                         "meghdoot-sim, read in seconds)")
    rp.add_argument("--quick", action="store_true",
                    help="the smaller scale the data file states (about a minute each)")
    rp.add_argument("--pause-after-min", type=float, metavar="MIN",
                    help="stop after MIN minutes of wall time: inside a simulated point "
                         "without logs (its simulator's state goes into its run folder, "
                         "gigabytes at 10,000 peers) or else before the next point (one "
                         "that cannot pause, with logs, bulk or in Mininet, starts only if "
                         "its estimate fits, and runs to its end); the "
                         "command printed then (--resume FOLDER) goes on, the paused point "
                         "from where it stopped, on the code it started on (a sitting's "
                         "first point runs at least to its first pause, so each sitting "
                         "gets on). For a "
                         "reproduction longer than one sitting (Meghdoot's, about 17 hours).")
    rp.add_argument("--master", metavar="URL",
                    help="run the points on a Spark cluster, spark://HOST:PORT (or local[N] "
                         "on this machine), all at once, each point its own process on an "
                         "executor (a point that crashes or whose worker dies fails "
                         "alone: the page lists it with its log, and --resume runs it "
                         "again); the page equals a "
                         "local run's. Every executor must see this project and the "
                         "--out folder at the same paths as here (a shared file system; "
                         "on one machine any local folder) and run $PYSPARK_PYTHON with "
                         "pubsublab's dependencies. With --pause-after-min the points "
                         "that can pause pause as in a local run")
    rp.add_argument("--out", type=Path, default=DEFAULT_RUNS,
                    help="folder for the reproduction folder (default ./runs)")
    allow_large_flag(rp)
    trust_flag(rp)
    json_flag(rp)
    rp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Reproduce the paper and print its rows and the page's path (or where it paused)."""
    from analysis.reproduction import format_rows
    from experiments.reproduce import reproduce

    resume = Path(args.resume) if args.resume else None
    beside = Path(args.beside) if args.beside else None
    pause_s = pause_after_s(args)

    failed = False

    def work() -> tuple[Any, str]:
        nonlocal failed
        _, result = reproduce(args.paper, args.runtime, args.quick, out_dir(args.out),
                              resume, beside, run=not args.no_run, pause_after_s=pause_s,
                              trust=args.trust_paused_state, master=args.master,
                              allow_large=args.allow_large)
        failed = bool(result.get("failed"))
        return result, f"{format_rows(result['rows'])}\npage: {result['page']}"

    status = emit_or_pause(args, work)
    return 1 if failed else status
