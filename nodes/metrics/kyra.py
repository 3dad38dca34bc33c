"""Kyra's metrics, and its baselines' (Siena, multicast), on a modelled underlay.

:func:`routing_load` reads one algorithm's broker logs (either runtime writes the same
records) and the underlay of a ``transit-stub`` topology (the servers' pairwise
``latency_ms`` and ``hops``, the router graph and where each server sits). The Kyra
paper's claims are about the load on the servers and the network's efficiency
("significantly reduces the storage, processing and network traffic loads on pub-sub
servers, while achieving network efficiency close to that of the filter-based approach",
"balances routing load"); its own measurements are lost with the end of our copy, so the
metrics are ours, each stated here.

Per event (a publication, keyed by its ``(origin, msg_id)``)
    - ``net_hops`` and ``net_ms``: every inter-server message that carried it (``send``
      records of PUBLISH and NOTIFY to another server) crosses the underlay on the
      shortest path between the two servers' routers; the event's cost is the sum of
      those paths' link counts and latencies. Normalised (``hops_ratio``, ``ms_ratio``)
      by the shortest-path tree from the publisher's server (the one whose client
      published it) to the servers that delivered it: its distinct links and their
      summed delay, the cost of ideal network-level multicast. Events whose only
      receiver is the publisher's own server have an empty tree and no ratio.
    - ``traversed``: the servers that handled it (the publisher's server and every server
      a message of it reached).
    - ``unwanted``: the servers that got a PUBLISH copy of it, and so matched it against
      their tables, but neither delivered it to a client nor sent a NOTIFY for it (the
      paper's Fig. 2 count: matched at C, E, F and G before H).
    Each is reported by its mean over events (``per_event``) and summed (``totals``).

Per server (the ``counters`` record each broker logs at its end)
    - ``storage``: routing-table entries (``routing_entries``: entries under neighbours,
      over every tree for Kyra; the cell-to-group map for multicast) plus the
      subscriptions the server holds for matching (Kyra's proxy subscriptions, the
      others' local subscriptions);
    - ``management``: subscription messages handled (``sub_messages``: SUBSCRIBE and
      UNSUBSCRIBE from clients, moved to proxies, or on trees);
    - ``processing``: filters tested against events (``match_ops``).
    Each over all servers, zeros included: ``mean``, ``max``, ``max_over_mean`` and
    Jain's fairness index ``jain`` = (sum x)^2 / (n sum x^2), 1 when every server carries
    the same load, 1/n when one carries all of it (1 for an all-zero load).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from statistics import fmean
from typing import Any

import networkx as nx

from nodes.logs import iter_jsonl

_CARRIERS = ("PUBLISH", "NOTIFY")
LOADS = ("storage", "management", "processing")


def load_stats(values: Iterable[float]) -> dict[str, float]:
    """``mean``, ``max``, ``max_over_mean`` and Jain's index of per-server loads."""
    xs = [float(v) for v in values]
    if not xs:
        return {"mean": 0.0, "max": 0.0, "max_over_mean": 1.0, "jain": 1.0}
    mean, top, squares = fmean(xs), max(xs), sum(x * x for x in xs)
    return {"mean": round(mean, 6), "max": top,
            "max_over_mean": round(top / mean, 6) if mean else 1.0,
            "jain": round(sum(xs) ** 2 / (len(xs) * squares), 6) if squares else 1.0}


def server_loads(counters: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per server: its ``storage``, ``management`` and ``processing`` (module docstring)."""
    return {s: {"storage": c.get("routing_entries", 0)
                + c.get("proxy_subscriptions", c.get("local_subscriptions", 0)),
                "management": c.get("sub_messages", 0),
                "processing": c.get("match_ops", 0)}
            for s, c in sorted(counters.items())}


class _Spt:
    """Shortest-path trees (by ``delay_ms``) from each publisher's router, cached."""

    def __init__(self, underlay: nx.Graph) -> None:
        self._g = underlay
        self._paths: dict[Hashable, dict[Hashable, list[Hashable]]] = {}

    def cost(self, src: Hashable, targets: Iterable[Hashable]) -> tuple[int, float]:
        if src not in self._paths:
            self._paths[src] = nx.single_source_dijkstra_path(self._g, src, weight="delay_ms")
        paths = self._paths[src]
        links = {frozenset(e) for t in targets for e in itertools.pairwise(paths[t])}
        return len(links), sum(self._g.edges[tuple(e)]["delay_ms"] for e in links)


def routing_load(records: Iterable[Mapping[str, Any]], servers: Iterable[str],
                 topology: nx.Graph | None = None) -> dict[str, Any]:
    """The metrics of the module docstring from one algorithm's log ``records`` (every
    server's ``send``, ``recv``, ``deliver`` and ``counters`` records) on the underlay
    of a ``transit-stub`` ``topology`` graph (its graph attributes ``latency_ms``, ``hops``,
    ``underlay`` and ``placement``); without one (the paper's worked example, whose
    latencies are ours) the network figures are None."""
    names = set(servers)
    published: dict[tuple[str, int], str] = {}
    sends: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    delivered: dict[tuple[str, int], set[str]] = {}
    counters: dict[str, dict[str, int]] = {s: {} for s in names}
    for r in records:
        ev, node = r.get("ev"), r.get("node")
        if node not in names:
            continue
        if ev == "record":
            if r.get("kind") == "counters":
                counters[node] = {k: v for k, v in r.items() if isinstance(v, int)}
            continue
        key = (r.get("origin"), r.get("msg_id"))
        if ev == "recv" and r["type"] == "PUBLISH" and r["link"] not in names:
            published[key] = node
        elif ev == "send" and r["type"] in _CARRIERS and r["link"] in names:
            sends.setdefault(key, []).append((node, r["link"], r["type"]))
        elif ev == "deliver":
            delivered.setdefault(key, set()).add(node)
    net = topology.graph if topology is not None else None
    spt = _Spt(net["underlay"]) if net is not None else None
    rows = []
    for key, pub in sorted(published.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        msgs = sends.get(key, [])
        wanted = delivered.get(key, set())
        got_copy = {b for _, b, t in msgs if t == "PUBLISH"}
        notified = {a for a, _, t in msgs if t == "NOTIFY"}
        row: dict[str, Any] = dict.fromkeys(("net_hops", "net_ms", "hops_ratio", "ms_ratio"))
        if net is not None and spt is not None:
            place = net["placement"]
            tree_hops, tree_ms = spt.cost(place[pub], (place[s] for s in wanted))
            row["net_hops"] = sum(net["hops"][a][b] for a, b, _ in msgs)
            row["net_ms"] = sum(net["latency_ms"][a][b] for a, b, _ in msgs)
            row["hops_ratio"] = row["net_hops"] / tree_hops if tree_hops else None
            row["ms_ratio"] = row["net_ms"] / tree_ms if tree_ms else None
        rows.append({**row, "traversed": len({pub} | {b for _, b, _ in msgs}),
                     "unwanted": len(got_copy - wanted - notified),
                     "messages": len(msgs)})

    def mean(field: str) -> float | None:
        xs = [r[field] for r in rows if r[field] is not None]
        return round(fmean(xs), 6) if xs else None

    fields = ("net_hops", "net_ms", "hops_ratio", "ms_ratio", "traversed", "unwanted",
              "messages")
    loads = server_loads(counters)
    return {
        "events": len(rows),
        "events_with_tree": sum(r["hops_ratio"] is not None for r in rows),
        "per_event": {f: mean(f) for f in fields},
        "totals": {f: round(sum(r[f] for r in rows), 6) if net is not None or
                   not f.startswith("net_") else None
                   for f in ("net_hops", "net_ms", "traversed", "unwanted", "messages")},
        "servers": len(names),
        "per_server": {k: load_stats(v[k] for v in loads.values()) for k in LOADS},
        "load_index": "max_over_mean and jain (Jain's fairness index) over all servers",
    }


def routing_load_from_logs(out_dir: Path, graph: nx.Graph,
                           servers: Iterable[str]) -> dict[str, Any]:
    """:func:`routing_load` of the logs ``<server>.jsonl`` in ``out_dir``, on the underlay
    the topology ``graph`` carries (``transit-stub``), if any."""
    names = sorted(servers)
    records = (r for s in names for r in iter_jsonl(out_dir / f"{s}.jsonl"))
    return routing_load(records, names, graph if "latency_ms" in graph.graph else None)
