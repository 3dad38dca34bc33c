"""The LBDD testbed: twelve PCs on a gigabit switch.

The paper used two D-Link gigabit switches; we read them as one switch ``s1`` (a
non-blocking gigabit fabric), with 1000 Mbit/s access links by default. Hosts are
``pc1`` ... ``pcN``. LBDD builds its tree from MD5 digests of the hosts' IPs, so
``paper_ips=True`` gives the twelve PCs the paper's addresses in the paper's order
(10.3.17.74, .97, .234, ...); otherwise they get 10.0.0.1/8, 10.0.0.2/8, ...

Every PC can reach every other directly, so the overlay (``graph['overlay']``) is the
complete graph on the PCs, typed 'overlay'.

Under Mininet: ``sudo mn --custom topologies/custom.py --topo gigabit-cluster,paper_ips=1
--switch lxbr --controller none``
"""

from __future__ import annotations

import networkx as nx

from topologies.links import LinkParams
from topologies.overlay import overlay_on_switch_graph

PAPER_PREFIXLEN = 24
PAPER_IPS = tuple(f"10.3.17.{octet}"
                  for octet in (74, 97, 234, 90, 98, 64, 61, 184, 72, 88, 44, 68))
PAPER_N = len(PAPER_IPS)
GIGABIT = LinkParams(bw_mbps=1000)


def gigabit_cluster_graph(n: int = PAPER_N, *, paper_ips: bool = False,
                          params: LinkParams = GIGABIT) -> nx.Graph:
    """``n`` PCs on one switch; see the module docstring."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n: bad value {n!r}; allowed: an integer >= 2")
    if not isinstance(paper_ips, bool):
        raise ValueError(f"paper_ips: bad value {paper_ips!r}; allowed: true or false")
    if paper_ips and n != PAPER_N:
        raise ValueError(f"n: bad value {n!r} with paper_ips; allowed: {PAPER_N} (the paper "
                         f"lists {PAPER_N} addresses)")
    pcs = [f"pc{i}" for i in range(1, n + 1)]
    addresses = None
    if paper_ips:
        addresses = {pc: (ip, PAPER_PREFIXLEN) for pc, ip in zip(pcs, PAPER_IPS, strict=True)}
    g = overlay_on_switch_graph(nx.complete_graph(pcs), params, name="gigabit-cluster",
                                addresses=addresses)
    g.graph["notes"].append("the paper's two gigabit switches are emulated as one switch s1")
    return g
