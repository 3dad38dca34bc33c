"""Peers on one switch with no fixed overlay: the testbed of peer-to-peer systems whose
overlay is built while they run (Meghdoot's CAN).

``n`` hosts ``p0000`` ... on switch ``s1`` by access links with the given figures, flat
addresses (every host reaches every other), and an overlay graph with the peers and no
edge: the links between peers are opened on demand (``routing.links: on-demand``).
The Meghdoot paper has no network topology (its simulator has no latency); this is the
simplest network that carries its messages, as a LAN of PCs would.
"""

from __future__ import annotations

import networkx as nx

from topologies.links import LinkParams
from topologies.overlay import overlay_on_switch_graph

MAX_PEERS = 10_000


def peer_names(n: int) -> list[str]:
    """The names of ``n`` peers, in order (zero-padded, so name order is index order)."""
    return [f"p{i:04d}" for i in range(n)]


def peers_graph(n: int, params: LinkParams) -> nx.Graph:
    """``n`` peers on one switch, no fixed overlay link (module docstring)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PEERS:
        raise ValueError(f"n: bad value {n!r}; allowed: an integer 1..{MAX_PEERS}")
    overlay = nx.Graph()
    overlay.add_nodes_from(peer_names(n))
    return overlay_on_switch_graph(overlay, params, name="peers")
