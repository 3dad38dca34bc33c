"""The OctopiA testbed: the 70-broker paper SCOT on 6 compute nodes and a 10 Gbit/s switch.

Model: each compute node is a switch ``cn1`` ... ``cnN`` that its brokers attach to by
'access' links (``params``, unshaped by default: in the paper they share a machine);
each compute-node switch attaches to the central switch ``core`` by an 'uplink' at
``uplink_mbps`` (the paper's Mellanox SX1012, 10 Gbit/s links).

Placement, as in the paper: no broker shares a compute node with any of its primary or
secondary neighbours, i.e. a proper colouring of the overlay with ``n_nodes`` colours.
We also keep it balanced (brokers per node differ by at most one: 12, 12, 12, 12, 11, 11
for 70 on 6), which the paper does not state but which a 12-core-per-node cluster
suggests. The search is deterministic: DSatur order with backtracking, least-loaded node
first. A SCOT region is a K_m clique, so fewer than m compute nodes is impossible and is
refused up front with the clique named. Compute nodes are numbered in order of first use
by the brokers.

Under Mininet: ``sudo mn --custom topologies/custom.py --topo scot-compute-nodes
--switch lxbr --controller none``
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx

from topologies.graph import add_switch, brokers, check_names, overlay_of
from topologies.links import UNSHAPED, LinkParams
from topologies.overlay import overlay_on_switch_graph
from topologies.scot import PAPER_HANG, PAPER_M, paper_tree, scot_overlay

CORE = "core"
MAX_SEARCH_STEPS = 50_000
MININET_BW_MAX_MBPS = 1000  # mininet.link.TCIntf.bwParamMax in Mininet 2.3.0


class _SearchExhausted(Exception):
    pass


def balanced_placement(overlay: nx.Graph, n_nodes: int) -> dict[str, int]:
    """Node index (0-based) per broker: neighbours never share one, loads differ <= 1.

    Raises ValueError naming the conflict when there is none (or none was found within
    :data:`MAX_SEARCH_STEPS` steps).
    """
    nodes = list(overlay)
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or not 1 <= n_nodes <= len(nodes):
        raise ValueError(f"n_nodes: bad value {n_nodes!r}; allowed: an integer from 1 to the "
                         f"number of brokers ({len(nodes)})")
    clique = max(nx.find_cliques(overlay), key=len)
    if len(clique) > n_nodes:
        raise ValueError(f"n_nodes: bad value {n_nodes}: brokers {', '.join(sorted(clique))} "
                         f"are all neighbours of each other and need {len(clique)} distinct "
                         f"compute nodes")
    floor, extra = divmod(len(nodes), n_nodes)
    order = {v: i for i, v in enumerate(nodes)}
    colour: dict[str, int] = {}
    size = [0] * n_nodes
    full = 0  # nodes already holding floor + 1 brokers; at most `extra` may
    steps = 0

    def pick() -> str:
        # DSatur: most distinct neighbour colours first, then most uncoloured neighbours.
        def key(v: str) -> tuple[int, int, int]:
            seen = {colour[u] for u in overlay[v] if u in colour}
            return -len(seen), -sum(u not in colour for u in overlay[v]), order[v]
        return min((v for v in nodes if v not in colour), key=key)

    def search() -> bool:
        nonlocal steps, full
        if len(colour) == len(nodes):
            return True
        steps += 1
        if steps > MAX_SEARCH_STEPS:
            raise _SearchExhausted
        v = pick()
        taken = {colour[u] for u in overlay[v] if u in colour}
        fits = [c for c in range(n_nodes) if c not in taken
                and (size[c] < floor or (size[c] == floor and full < extra))]
        for c in sorted(fits, key=lambda c: (size[c], c)):
            full += size[c] == floor
            size[c] += 1
            colour[v] = c
            if search():
                return True
            del colour[v]
            size[c] -= 1
            full -= size[c] == floor
        return False

    try:
        found = search()
    except _SearchExhausted:
        raise ValueError(f"n_nodes: no balanced placement of {len(nodes)} brokers on "
                         f"{n_nodes} compute nodes found in {MAX_SEARCH_STEPS} search steps; "
                         f"try more compute nodes") from None
    if not found:
        raise ValueError(f"n_nodes: no balanced placement of {len(nodes)} brokers on "
                         f"{n_nodes} compute nodes keeps every overlay neighbour apart")
    return colour


def scot_compute_nodes_graph(n_nodes: int = 6, uplink_mbps: float = 10_000, *,
                             hang: Sequence[int] = PAPER_HANG, m: int = PAPER_M,
                             params: LinkParams = UNSHAPED) -> nx.Graph:
    """The paper SCOT (``hang``, ``m``) placed on ``n_nodes`` compute nodes (mode 'switch')."""
    try:
        uplink = LinkParams(bw_mbps=uplink_mbps)
    except ValueError as exc:
        raise ValueError(f"uplink_mbps: {exc}") from None
    ov = scot_overlay(paper_tree(hang), m)
    colour = balanced_placement(ov, n_nodes)
    names = {c: f"cn{i}" for i, c in enumerate(dict.fromkeys(colour[b] for b in ov), 1)}
    for b in ov:
        ov.nodes[b]["compute"] = names[colour[b]]
    g = overlay_on_switch_graph(ov, params, name="scot-compute-nodes",
                                switch_of={b: ov.nodes[b]["compute"] for b in ov})
    add_switch(g, CORE)
    for cn in names.values():
        g.add_edge(cn, CORE, type="uplink", params=uplink)
    check_names(g)
    load = {cn: 0 for cn in names.values()}
    for b in ov:
        load[ov.nodes[b]["compute"]] += 1
    g.graph["notes"].append(
        "placement (no broker shares a compute node with a primary or secondary neighbour), "
        "brokers per node: " + ", ".join(f"{cn} {k}" for cn, k in load.items()))
    if uplink_mbps > MININET_BW_MAX_MBPS:
        g.graph["notes"].append(
            f"uplinks at {uplink_mbps:g} Mbit/s exceed Mininet's {MININET_BW_MAX_MBPS} Mbit/s "
            f"limit (TCIntf.bwParamMax, above which it leaves a link unshaped with only an "
            f"error log); topologies.mininet_topo.HighBwTCLink raises the limit so HTB shapes "
            f"them")
    return g


def placement_ok(g: nx.Graph) -> bool:
    """True when every broker has a compute node and no overlay neighbour shares it."""
    compute = {b: g.nodes[b]["compute"] for b in brokers(g)}
    return (all(c is not None for c in compute.values())
            and all(compute[u] != compute[v] for u, v in overlay_of(g).edges))
