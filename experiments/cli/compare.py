"""``pubsublab compare RUN...``: the summaries of several runs side by side."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "compare"
HELP = "the summaries of several runs side by side"


def add_parser(sub: Any) -> None:
    """Add the ``compare`` subcommand to ``sub`` (the subparsers action)."""
    c = sub.add_parser(NAME, description="Print a side-by-side table of summary.json figures. "
                                         "Each RUN is a run folder (all its algorithms) or a "
                                         "summary.json file.")
    c.add_argument("runs", nargs="+", metavar="RUN")
    json_flag(c)
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the table (with --json the summaries by label); SpecError if a RUN is bad."""
    from analysis.compare import load_summaries, table

    try:
        summaries = load_summaries(args.runs)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    emit(args, summaries, table(summaries))
    return 0
