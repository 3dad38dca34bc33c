"""Turn any broker overlay (an ``nx.Graph`` over broker names) into a topology graph.

Two physical readings of the same overlay:

- :func:`overlay_as_links_graph` (mode ``'overlay'``): one emulated host-to-host link per
  overlay edge, each with its own /30, so a single overlay link (say one iLink) can be
  throttled on its own. Hosts do not forward IP: a broker reaches only its overlay
  neighbours, which is all a broker needs; Mininet's ``pingall`` therefore fails between
  non-neighbours by design.
- :func:`overlay_on_switch_graph` (mode ``'switch'``): every broker on a switch (one
  switch ``s1`` unless told otherwise) with a flat 10.0.0.x/8 address by default; the
  overlay is then only logical and is kept in ``graph['overlay']``.

Node attributes of the overlay (``cluster``, ``region``, ``role``, ``compute``) and the
edges' ``type`` (default ``'overlay'``) are carried over.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from topologies.addressing import FLAT_PREFIXLEN, P2P_PREFIXLEN, flat_address, p2p_pair
from topologies.graph import (
    OVERLAY_TYPES,
    add_broker,
    add_switch,
    check_names,
    link_ports,
    new_graph,
)
from topologies.links import LinkParams

_CARRIED = ("cluster", "region", "role", "compute")


def _check_overlay(overlay: nx.Graph) -> None:
    if overlay.is_directed() or overlay.is_multigraph():
        raise ValueError("overlay: must be an undirected nx.Graph (no multi-edges)")
    loops = list(nx.selfloop_edges(overlay))
    if loops:
        raise ValueError(f"overlay: self-loop at {loops[0][0]!r}")
    for _, _, t in overlay.edges(data="type"):
        if t is not None and t not in OVERLAY_TYPES:
            raise ValueError(f"overlay: edge type {t!r}; allowed: {', '.join(OVERLAY_TYPES)}")


def _add_brokers_of(g: nx.Graph, overlay: nx.Graph) -> None:
    for n, data in overlay.nodes(data=True):
        add_broker(g, n, **{k: data.get(k) for k in _CARRIED})


def _typed_overlay(g: nx.Graph, overlay: nx.Graph) -> nx.Graph:
    """A copy of the overlay over g's brokers, with g's broker attributes and edge types."""
    ov = nx.Graph()
    ov.add_nodes_from((n, g.nodes[n]) for n in overlay)
    ov.add_edges_from((u, v, {"type": t or "overlay"}) for u, v, t in overlay.edges(data="type"))
    return ov


def overlay_as_links_graph(overlay: nx.Graph, params: LinkParams, *,
                           name: str = "overlay") -> nx.Graph:
    """Mode 'overlay': one host-to-host link per overlay edge, /30 each, in edge order."""
    _check_overlay(overlay)
    lonely = [n for n in overlay if overlay.degree(n) == 0]
    if lonely:
        raise ValueError(f"overlay: broker {lonely[0]!r} has no overlay edge, so it would "
                         f"have no interface and no address")
    g = new_graph(name, "overlay")
    g.graph["notes"].append("overlay mode: one link with its own /30 per overlay edge; hosts "
                            "do not forward IP, so a broker reaches only its overlay "
                            "neighbours (Mininet's pingall fails between the others)")
    _add_brokers_of(g, overlay)
    for i, (u, v, t) in enumerate(overlay.edges(data="type")):
        ip_u, ip_v = p2p_pair(i)
        g.add_edge(u, v, type=t or "overlay", params=params, ips={u: ip_u, v: ip_v})
    for (u, v), ports in link_ports(g).items():
        for n in (u, v):
            if ports[n] == 0:
                g.nodes[n]["ip"] = g.edges[u, v]["ips"][n].split("/")[0]
                g.nodes[n]["prefixlen"] = P2P_PREFIXLEN
    check_names(g)
    return g


def overlay_on_switch_graph(overlay: nx.Graph, params: LinkParams, *, name: str = "overlay",
                            switch_of: Mapping[str, str] | None = None,
                            addresses: Mapping[str, tuple[str, int]] | None = None) -> nx.Graph:
    """Mode 'switch': every broker on a switch by an 'access' link with ``params``.

    ``switch_of`` maps each broker to its switch (default: all on ``s1``); switches are
    added first, in order of first use. ``addresses`` maps a broker to (ip, prefixlen);
    by default brokers get 10.0.0.x/8 in overlay node order.
    """
    _check_overlay(overlay)
    switch_of = switch_of or dict.fromkeys(overlay, "s1")
    g = new_graph(name, "switch")
    for s in dict.fromkeys(switch_of[n] for n in overlay):
        add_switch(g, s)
    _add_brokers_of(g, overlay)
    for i, n in enumerate(overlay):
        ip, prefixlen = addresses[n] if addresses else (flat_address(i), FLAT_PREFIXLEN)
        g.nodes[n].update(ip=ip, prefixlen=prefixlen)
        g.add_edge(n, switch_of[n], type="access", params=params)
    g.graph["overlay"] = _typed_overlay(g, overlay)
    check_names(g)
    return g
