"""LBDD: load-balancing data distribution over an MD5 dissemination tree (Li et al., 2014).

The tree (:func:`lbdd_tree`, pure; also printed by ``pubsublab lbdd-tree``):

- **Digest** (Section 3.2): MD5 of the node's IP address written as dotted-quad ASCII
  text (``"10.3.17.74"``); the highest 32 bits, i.e. the first four bytes of the digest
  read big-endian.
- **Distance** to the source: XOR of the two digests. **Bucket** ``k`` holds the nodes
  whose distance lies in ``[2^(k-1), 2^k)``, so ``k`` is the distance's bit length
  (1..32); the source is bucket 0. (A subscriber whose digest equals the source's, a
  2^-32 event, has distance 0: it forms its own group just after the source.)
- **Rank** inside a bucket (Algorithm 1): ascending digest, ties (equal top 32 bits of
  two addresses) by address text.
- **Target selection** (Algorithm 2): the nodes of one non-empty bucket send to the next
  non-empty bucket (the publisher sends to the first). With ``m`` senders and ``t``
  targets the paper's ratio ``t/m`` need not be whole; we floor both of its bounds:
  the sender of rank ``r`` (1-based) gets the targets at 1-based positions
  ``floor(t(r-1)/m) + 1 .. floor(t r/m)``. These ranges are contiguous, disjoint, cover
  the bucket exactly, and hold ``floor(t/m)`` or ``ceil(t/m)`` targets; when ``t < m``
  the lower-ranked senders get none.

Hence every subscriber has exactly one parent, in an earlier bucket (Theorem 1), the
depth is the number of non-empty buckets, and, since a random 32-bit distance is twice
as likely to fall in bucket ``k+1`` as in bucket ``k``, a sender has two targets on
average (Theorem 2). :func:`tree_stats` measures both.

The agent around the tree (membership by JOIN and heartbeat, path update after a join or
a timeout, sliced data with per-child windows and resume) is
:class:`~nodes.cores.dissemination.DisseminationAgent`.

DESIGN.md's reading (top 32 bits of MD5, XOR distance, buckets ``[2^(k-1), 2^k)``, ranks
by digest, one contiguous range per sender, heartbeats, Algorithm 3) agrees with the
paper; what neither says (the address text hashed, ties, the rounding of the ratio) is
chosen above.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from nodes.cores.dissemination import DisseminationAgent


def digest(ip: str) -> int:
    """The node's 32-bit sequence ID: the highest 32 bits of MD5(ip as ASCII text)."""
    return int.from_bytes(hashlib.md5(ip.encode("ascii")).digest()[:4], "big")


def bucket_of(source_ip: str, ip: str) -> int:
    """The bucket of ``ip`` relative to the source: the bit length of the XOR distance."""
    return (digest(ip) ^ digest(source_ip)).bit_length()


def buckets(source_ip: str, member_ips: Sequence[str]) -> dict[int, list[str]]:
    """The members by bucket, ascending, each bucket in rank order (digest, then ip)."""
    if len(set(member_ips)) != len(member_ips):
        raise ValueError("member IPs must be distinct")
    if source_ip in member_ips:
        raise ValueError(f"the source {source_ip} cannot also be a member")
    src = digest(source_ip)
    found: dict[int, list[tuple[int, str]]] = {}
    for ip in member_ips:
        d = digest(ip)
        found.setdefault((d ^ src).bit_length(), []).append((d, ip))
    return {k: [ip for _, ip in sorted(found[k])] for k in sorted(found)}


def lbdd_tree(source_ip: str, member_ips: Sequence[str]) -> dict[str, str]:
    """Each member's parent in the LBDD tree rooted at ``source_ip`` (see the module doc)."""
    parent: dict[str, str] = {}
    senders = [source_ip]
    for targets in buckets(source_ip, member_ips).values():
        m, t = len(senders), len(targets)
        for r, sender in enumerate(senders):
            for ip in targets[r * t // m : (r + 1) * t // m]:
                parent[ip] = sender
        senders = targets
    return parent


def tree_stats(source: str, parent: Mapping[str, str]) -> dict[str, Any]:
    """Depth and out-degrees of a tree given as ``{member: parent}`` rooted at ``source``.

    ``depth``: edges from the source to the deepest member (0 without members).
    ``mean_out_degree``: children per sender, averaged over the nodes that send to a
    next level (the source and every member with a deeper member below its level), as
    Theorem 2 counts; a sender given an empty range counts with 0. ``mean_out_degree_
    internal``: averaged over nodes with at least one child only. ValueError if the map
    is not a tree rooted at ``source`` (a member without a path to it, or a cycle).
    """
    level = {source: 0}
    for node in parent:
        path = [node]
        while path[-1] not in level:
            up = parent.get(path[-1])
            if up is None or up in path:
                raise ValueError(f"{node} has no path to the source {source}")
            path.append(up)
        for step, n in enumerate(reversed(path[:-1]), 1):
            level[n] = level[path[-1]] + step
    depth = max(level.values())
    out_degree = dict.fromkeys(level, 0)
    for p in parent.values():
        out_degree[p] += 1
    senders = [n for n, lv in level.items() if lv < depth]
    internal = [d for d in out_degree.values() if d]
    return {
        "depth": depth,
        "members": len(parent),
        "out_degree": dict(sorted(out_degree.items())),
        "max_out_degree": max(out_degree.values()),
        "source_out_degree": out_degree[source],
        "mean_out_degree": round(len(parent) / len(senders), 6) if senders else 0.0,
        "mean_out_degree_internal": round(sum(internal) / len(internal), 6) if internal else 0.0,
    }


class LbddCore(DisseminationAgent):
    """An LBDD agent: the dissemination agent over :func:`lbdd_tree`, one window per child."""

    tree = staticmethod(lbdd_tree)
