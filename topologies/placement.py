"""Placing one emulated network on several servers: which server builds each node.

The unit of placement is a SCOT cluster where the graph names clusters (its brokers talk
to each other most, and the links inside it stay on one server), else a single host.
Units are placed largest demand first, each on the server with the least demand so far
(the longest-processing-time rule, within 4/3 of the best balance). A unit whose demand
is more than an even share of the total does not fit on one server without leaving the
others idle, so its hosts are placed one by one instead. A switch goes to the server of
most of its neighbours, so that host-to-switch links stay on one server where they can.

``demand`` is whatever the caller estimates per host (:func:`experiments.plan` uses the
client operations a broker serves); hosts without an entry count as 1, so that a network
without a workload is still spread evenly. ``pinned`` hosts go on their given server
before the rest and count in its demand (a bulk round reads its publisher's interface
counters from this machine's /proc, so that host stays here). Ties are broken by name
and by the order of ``servers``, so the placement of a plan is the same on every machine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import networkx as nx


def _units(graph: nx.Graph, hosts: list[str]) -> list[list[str]]:
    clusters: dict[object, list[str]] = {}
    units = []
    for h in hosts:
        cluster = graph.nodes[h].get("cluster")
        if cluster is None:
            units.append([h])
        else:
            clusters.setdefault(cluster, []).append(h)
    return units + list(clusters.values())


def place_on_servers(graph: nx.Graph, demand: Mapping[str, float],
                     servers: Sequence[str], pinned: Mapping[str, str] | None = None
                     ) -> dict[str, str]:
    """The server of every node of ``graph`` (module docstring); ValueError for fewer
    than two servers, a repeated one, or a pin to a server not among them."""
    if len(servers) < 2 or len(set(servers)) != len(servers):
        raise ValueError(f"servers: want two or more distinct servers, got {list(servers)}")
    pinned = dict(pinned or {})
    if set(pinned.values()) - set(servers):
        raise ValueError(f"servers: a pinned host's server is not among {list(servers)}")
    hosts = sorted(n for n, kind in graph.nodes(data="kind") if kind != "switch")

    def weight(unit: list[str]) -> float:
        return sum(float(demand.get(h, 1.0)) for h in unit)

    share = sum(weight([h]) for h in hosts) / len(servers)
    units = []
    for unit in _units(graph, [h for h in hosts if h not in pinned]):
        units += [[h] for h in unit] if weight(unit) > share and len(unit) > 1 else [unit]
    load = dict.fromkeys(servers, 0.0)
    placement: dict[str, str] = {}
    for host, server in sorted(pinned.items()):
        load[server] += weight([host])
        placement[host] = server
    for unit in sorted(units, key=lambda u: (-weight(u), sorted(u))):
        server = min(servers, key=lambda s: (load[s], servers.index(s)))
        load[server] += weight(unit)
        placement.update(dict.fromkeys(unit, server))
    for sw in sorted(n for n, kind in graph.nodes(data="kind") if kind == "switch"):
        near = Counter(placement[n] for n in graph.neighbors(sw) if n in placement)
        placement[sw] = (max(servers, key=lambda s: (near[s], -servers.index(s)))
                         if near else servers[0])
    return placement


def cross_server_links(graph: nx.Graph, placement: Mapping[str, str]) -> list[tuple[str, str]]:
    """The links of ``graph`` whose ends are on different servers, (a, b) sorted."""
    return sorted((min(a, b), max(a, b)) for a, b in graph.edges
                  if placement[a] != placement[b])
