"""``pubsublab doctor``: what this machine can emulate and what to install."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import DEFAULT_RUNS, emit, json_flag

NAME = "doctor"
HELP = "check what this machine can emulate and what to install"


def add_parser(sub: Any) -> None:
    """Add the ``doctor`` subcommand to ``sub`` (the subparsers action)."""
    d = sub.add_parser(NAME, description="Probe root, Mininet, Open vSwitch, netem/htb/tbf, "
                                         "Java, cgroups, memory and cores; say what to "
                                         "install when missing.")
    d.add_argument("--servers", metavar="HOST,HOST,...",
                   help="also check each of these servers for `run --servers`: SSH as root "
                        "without a password, the same pubsublab code and Python at the same "
                        "path, mnexec, tc, tcpdump, sudo, cgroup2, the runs folder shared "
                        "(--out) and the clock within "
                        "experiments.emulation.server_checks.MAX_CLOCK_SKEW_MS")
    d.add_argument("--ssh-config", type=Path, metavar="FILE",
                   help="with --servers: the SSH client configuration that reaches them")
    d.add_argument("--out", type=Path, default=DEFAULT_RUNS,
                   help="with --servers: the runs folder to check is shared (default ./runs)")
    json_flag(d)
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the probe's report (and the servers'); exit 0 if the machine (and every
    server) can emulate, else 1."""
    from dataclasses import asdict

    from experiments.emulation.doctor import format_report, probe

    result = probe()
    if args.servers:
        from experiments.emulation.cluster import Servers
        from experiments.emulation.server_checks import check_servers
        from experiments.runs.manifest import code_fingerprint

        names = tuple(s.strip() for s in args.servers.split(",") if s.strip())
        servers = Servers(names if "localhost" in names else ("localhost", *names),
                          args.ssh_config)
        remote = check_servers(servers, code_fingerprint(), args.out)
        result["checks"] += [asdict(c) for c in remote]
        result["ok"] = result["ok"] and all(c.ok for c in remote)
    emit(args, result, format_report(result))
    return 0 if result["ok"] else 1
