"""``pubsublab doctor``: what this machine can emulate and what to install."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import emit, json_flag

NAME = "doctor"
HELP = "check what this machine can emulate and what to install"


def add_parser(sub: Any) -> None:
    """Add the ``doctor`` subcommand to ``sub`` (the subparsers action)."""
    d = sub.add_parser(NAME, description="Probe root, Mininet, Open vSwitch, netem/htb/tbf, "
                                         "Java, cgroups, memory and cores; say what to "
                                         "install when missing.")
    json_flag(d)
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the probe's report; exit 0 if the machine can emulate, else 1."""
    from experiments.emulation.doctor import format_report, probe

    result = probe()
    emit(args, result, format_report(result))
    return 0 if result["ok"] else 1
