"""``pubsublab topo list`` and ``pubsublab topo show NAME``: topologies, never built."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "topo"
HELP = "list topologies or show one's brokers and links"


def add_parser(sub: Any) -> None:
    """Add the ``topo`` subcommand to ``sub`` (the subparsers action)."""
    t = sub.add_parser(NAME, description="Show a topology without building it (no root "
                                         "needed).")
    t.add_argument("action", choices=["show", "list"])
    t.add_argument("name", nargs="?", help="topology name, e.g. scot, scot-paper, "
                                           "gigabit-cluster, scot-compute-nodes")
    t.add_argument("--param", "-p", action="append", default=[], metavar="KEY=VALUE",
                   help="topology parameter, e.g. -p m=3 -p tree=a-b,b-c (repeatable)")
    t.add_argument("--bw-mbps", type=float, help="link bandwidth (default: the topology's)")
    t.add_argument("--delay-ms", type=float, help="link delay (default: the topology's)")
    json_flag(t)
    t.set_defaults(func=run)


def _params(pairs: list[str]) -> dict[str, Any]:
    """``--param key=value`` pairs as a dict, each value read as YAML; SpecError if bad."""
    import yaml

    params: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SpecError(f"--param {pair!r}: expected key=value")
        k, v = pair.split("=", 1)
        try:
            params[k] = yaml.safe_load(v)
        except yaml.YAMLError as exc:
            raise SpecError(f"--param {pair!r}: not valid YAML: "
                            f"{str(exc).splitlines()[0]}") from None
    return params


def run(args: argparse.Namespace) -> int:
    """List the topology names, or describe one topology's brokers and links."""
    from topologies.links import LinkParams
    from topologies.registry import TOPOLOGIES, build_graph, describe

    if args.action == "list":
        emit(args, {"topologies": sorted(TOPOLOGIES)}, "\n".join(sorted(TOPOLOGIES)))
        return 0
    if not args.name:
        raise SpecError("topo show: name a topology (pubsublab topo list)")
    try:
        links = None
        if args.bw_mbps is not None or args.delay_ms is not None:
            links = LinkParams(bw_mbps=args.bw_mbps, delay_ms=args.delay_ms or 0.0)
        g = build_graph(args.name, _params(args.param), links)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    d = describe(g)
    counts = ", ".join(f"{k} {v}" for k, v in d["counts"].items())
    text = f"{d['name']} ({d['mode']}): {counts}"
    for note in d.get("notes", []):
        text += f"\nnote: {note}"
    emit(args, d, text)
    return 0
