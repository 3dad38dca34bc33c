"""``pubsublab throttle A B --bw-mbps R``: a live overlay link's rate (root)."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "throttle"
HELP = "change a live overlay link's rate (root)"


def add_parser(sub: Any) -> None:
    """Add the ``throttle`` subcommand to ``sub`` (the subparsers action)."""
    th = sub.add_parser(NAME, description="Set the rate of the emulated link between brokers "
                                          "A and B on the running network (overlay-as-links "
                                          "mode), e.g. from a second terminal during "
                                          "`pubsublab run SPEC --cli`. While a run's workload "
                                          "runs, the change is recorded in its folder "
                                          "(throttles.jsonl, then the summaries and the "
                                          "manifest) and undone before the next algorithm.")
    th.add_argument("a", help="one broker, e.g. a0")
    th.add_argument("b", help="the other broker, e.g. a1")
    th.add_argument("--bw-mbps", type=float, required=True,
                    help="new rate in Mbit/s, 0.001 to 100000")
    json_flag(th)
    th.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Set the link's rate; PermissionError without root, SpecError for a bad link."""
    import os

    from experiments.emulation.throttle import throttle

    if os.geteuid() != 0:
        raise PermissionError("throttle changes tc on Mininet hosts: run with sudo")
    try:
        result = throttle(args.a, args.b, args.bw_mbps)
    except (LookupError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    recorded = (f"recorded in {result['recorded_in']}" if result["recorded_in"]
                else "no run's workload is live: recorded nowhere")
    emit(args, result, f"{args.a}-{args.b}: {args.bw_mbps:g} Mbit/s on "
                       f"{', '.join(result['interfaces'])} ({recorded})")
    return 0
