"""``pubsublab plan SPEC``: the compiled run plan, every check done, nothing started."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import allow_large_flag, emit, json_flag, plan_of, spec_arguments

NAME = "plan"
HELP = "print what a spec will run, checked, without running it"


def add_parser(sub: Any) -> None:
    """Add the ``plan`` subcommand to ``sub`` (the subparsers action)."""
    pl = sub.add_parser(NAME, description="Compile a spec into its run plan and print it (no "
                                          "root, nothing started): per overlay edge the "
                                          "rate, delay and loss both runtimes use and which "
                                          "mechanism carries each; per algorithm its params "
                                          "with defaults filled in; the statistics window, "
                                          "the workload, the link schedule, the capture. "
                                          "Every error a run would meet in its spec is "
                                          "reported here, in one line.")
    spec_arguments(pl, with_spec=True, with_out=False)
    allow_large_flag(pl)
    json_flag(pl)
    pl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the plan (with --json its ``describe()`` object)."""
    from experiments.plan_text import format_plan

    plan = plan_of(args)
    emit(args, plan.describe(), format_plan(plan))
    return 0
