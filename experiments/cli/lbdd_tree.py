"""``pubsublab lbdd-tree --source IP --members IP,...``: LBDD's MD5 dissemination tree."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "lbdd-tree"
HELP = "print the LBDD tree of a source and members"


def add_parser(sub: Any) -> None:
    """Add the ``lbdd-tree`` subcommand to ``sub`` (the subparsers action)."""
    lt = sub.add_parser(NAME, description="The MD5 dissemination tree LBDD's agents build "
                                          "(nodes.cores.lbdd.lbdd_tree): each member's "
                                          "parent, the buckets, the depth and the mean "
                                          "out-degree.")
    lt.add_argument("--source", required=True, metavar="IP", help="the publisher's address")
    lt.add_argument("--members", required=True, metavar="IP,IP,...",
                    help="the subscribers' addresses, comma-separated")
    json_flag(lt)
    lt.set_defaults(func=run)


def _ipv4(text: str, where: str) -> str:
    """A dotted-quad IPv4 address exactly as LBDD hashes it (no leading zeros, no blanks)."""
    import ipaddress

    try:
        if str(ipaddress.IPv4Address(text)) == text:
            return text
    except ValueError:
        pass
    raise SpecError(f"{where}: bad address {text!r}; allowed: a dotted-quad IPv4 address "
                    "such as 10.3.17.74")


def run(args: argparse.Namespace) -> int:
    """Print each bucket's members with their parents, the depth and the out-degree."""
    from nodes.cores.lbdd import buckets, lbdd_tree, tree_stats

    source = _ipv4(args.source, "--source")
    members = [_ipv4(m.strip(), "--members") for m in args.members.split(",") if m.strip()]
    if not members or len(set(members)) != len(members) or source in members:
        raise SpecError("--members: give distinct addresses, other than the source")
    parent = lbdd_tree(source, members)
    by_bucket = buckets(source, members)
    result = {"source": source, "parent": parent, **tree_stats(source, parent),
              "buckets": {str(k): ips for k, ips in by_bucket.items()}}
    lines = [f"source {source} (bucket 0), depth {result['depth']}, mean out-degree "
             f"{result['mean_out_degree']} (Theorem 2 counts the nodes that send to a next "
             f"bucket)"]
    for k, ips in by_bucket.items():
        lines.append(f"bucket {k}: " + ", ".join(f"{ip} <- {parent[ip]}" for ip in ips))
    emit(args, result, "\n".join(lines))
    return 0
