"""Topologies by name, for experiment specs, the CLI (``pubsublab topo show``) and ``mn``.

Each entry of :data:`TOPOLOGIES` is a builder ``f(link_params, **params)``; its keyword
names are the parameters a spec may give, and its defaults are the defaults. Parameters
may arrive as text (``mn --topo``, ``--set``): numbers, booleans, trees
(``"f-g,g-h"`` or ``"f-g+g-h"``) and count lists (``"3+2+2+3"``) are parsed here, and
checked by the builders. ``link_params=None`` means the topology's own default link
parameters (unshaped, or 1000 Mbit/s for the gigabit cluster); given link parameters
replace them as a whole.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import networkx as nx

from topologies.compute_nodes import scot_compute_nodes_graph
from topologies.gigabit_cluster import GIGABIT, gigabit_cluster_graph
from topologies.graph import SWITCH, brokers, overlay_of, parse_edges
from topologies.kyra_example import kyra_example_graph
from topologies.links import UNSHAPED, LinkParams
from topologies.overlay import overlay_as_links_graph
from topologies.peers import peers_graph
from topologies.scot import PAPER_HANG, PAPER_M, parse_tree, scot_graph, scot_paper_graph
from topologies.transit_stub import PRESETS, transit_stub_servers_graph

Builder = Callable[..., nx.Graph]
DEFAULT_TREE = "a-b,b-c"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def as_bool(value: Any, where: str) -> bool:
    """A bool from a bool, 0/1 or text such as ``true``/``no``; ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if isinstance(value, int | str) and text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(f"{where}: bad value {value!r}; allowed: true/false, yes/no, 1/0")


def _number(value: Any) -> Any:
    """Text that spells a number becomes that number; anything else is left to the
    builder's check, which names the parameter."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value.strip())
            except ValueError:
                pass
    return value


def _counts(value: Any) -> Any:
    if isinstance(value, str):
        return [_number(v) for v in re.split(r"[,+\s]+", value.strip())]
    return value


def _scot(link: LinkParams | None, *, tree: Any = DEFAULT_TREE, m: Any = 3,
          mode: str = "overlay") -> nx.Graph:
    edges = parse_tree(tree) if isinstance(tree, str) else tree
    return scot_graph(edges, _number(m), mode=mode, params=link or UNSHAPED)


def _scot_paper(link: LinkParams | None, *, hang: Any = PAPER_HANG, m: Any = PAPER_M,
                mode: str = "overlay") -> nx.Graph:
    return scot_paper_graph(_counts(hang), _number(m), mode=mode, params=link or UNSHAPED)


def _gigabit_cluster(link: LinkParams | None, *, n: Any = 12,
                     paper_ips: Any = False) -> nx.Graph:
    return gigabit_cluster_graph(_number(n), paper_ips=as_bool(paper_ips, "paper_ips"),
                                 params=link or GIGABIT)


def _scot_compute_nodes(link: LinkParams | None, *, n_nodes: Any = 6,
                        uplink_mbps: Any = 10_000, hang: Any = PAPER_HANG,
                        m: Any = PAPER_M) -> nx.Graph:
    return scot_compute_nodes_graph(_number(n_nodes), _number(uplink_mbps), hang=_counts(hang),
                                    m=_number(m), params=link or UNSHAPED)


def _overlay(link: LinkParams | None, *, edges: Any = DEFAULT_TREE) -> nx.Graph:
    pairs = parse_edges(edges) if isinstance(edges, str) else edges
    if not isinstance(pairs, list | tuple) or not all(
            isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in pairs):
        raise ValueError(f"edges: bad value {edges!r}; allowed: 'a-b,b-c' or a list of "
                         f"name pairs")
    given: set[frozenset[str]] = set()
    for a, b in pairs:  # a graph merges a repeated edge silently: refuse it instead
        if frozenset((a, b)) in given:
            raise ValueError(f"edges: edge {a}-{b} given twice (in either direction); "
                             "allowed: each edge once")
        given.add(frozenset((a, b)))
    overlay = nx.Graph()
    overlay.add_edges_from(pairs)
    return overlay_as_links_graph(overlay, link or UNSHAPED)


def _peers(link: LinkParams | None, *, n: Any = 16) -> nx.Graph:
    return peers_graph(_number(n), link or UNSHAPED)


def _kyra_example(link: LinkParams | None) -> nx.Graph:
    return kyra_example_graph(link or UNSHAPED)


def _transit_stub(link: LinkParams | None, *, preset: str = "ts5050", n_servers: Any = 100,
                  seed: Any = 0, placement_seed: Any = 0) -> nx.Graph:
    """Servers on a transit-stub underlay (``preset`` with its router ``seed``)."""
    if preset not in PRESETS:
        raise ValueError(f"preset: bad value {preset!r}; allowed: {', '.join(PRESETS)}")
    params = replace(PRESETS[preset], seed=_number(seed))
    return transit_stub_servers_graph(_number(n_servers), params, _number(placement_seed),
                                      link or UNSHAPED)


TOPOLOGIES: dict[str, Builder] = {
    "scot": _scot,
    "scot-paper": _scot_paper,
    "gigabit-cluster": _gigabit_cluster,
    "scot-compute-nodes": _scot_compute_nodes,
    "overlay": _overlay,
    "peers": _peers,
    "kyra-example": _kyra_example,
    "transit-stub": _transit_stub,
}


def parameters(name: str) -> dict[str, Any]:
    """The parameters topology ``name`` accepts, with their defaults."""
    return {p.name: p.default for p in inspect.signature(TOPOLOGIES[name]).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY}


def build_graph(name: str, params: Mapping[str, Any],
                link_params: LinkParams | None = None) -> nx.Graph:
    """Build topology ``name``; ValueError naming the topology and what is allowed."""
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}; allowed: {', '.join(TOPOLOGIES)}")
    if not isinstance(params, Mapping):
        raise ValueError(f"topology {name!r}: parameters must be a mapping, got {params!r}")
    allowed = parameters(name)
    unknown = sorted(set(params) - set(allowed), key=str)
    if unknown:
        raise ValueError(f"topology {name!r}: unknown parameter(s) "
                         f"{', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}")
    try:
        return TOPOLOGIES[name](link_params, **params)
    except ValueError as exc:
        raise ValueError(f"topology {name!r}: {exc}") from None


def describe(g: nx.Graph) -> dict[str, Any]:
    """The JSON object of ``pubsublab topo show NAME --json``.

    ``links`` lists the physical links (``physical: true``) and, in switch mode, also the
    logical overlay edges (aLink/iLink/overlay, ``physical: false``, no bandwidth of their
    own). ``counts.links`` counts physical links.
    """
    overlay = overlay_of(g)
    names = brokers(g)
    links = []
    if g.graph["mode"] == "switch":
        links += [{"a": u, "b": v, "type": t, "bw_mbps": None, "delay_ms": None,
                   "physical": False} for u, v, t in overlay.edges(data="type")]
    links += [{"a": u, "b": v, "type": d["type"], "bw_mbps": d["params"].bw_mbps,
               "delay_ms": d["params"].delay_ms, "physical": True}
              for u, v, d in g.edges(data=True)]
    types = Counter(t for _, _, t in overlay.edges(data="type"))
    roles = Counter(g.nodes[b]["role"] for b in names)
    return {
        "name": g.graph["name"],
        "mode": g.graph["mode"],
        "brokers": [{"name": b, "cluster": g.nodes[b]["cluster"], "region": g.nodes[b]["region"],
                     "kind": g.nodes[b]["role"], "host": g.nodes[b]["compute"],
                     "ip": g.nodes[b]["ip"]} for b in names],
        "links": links,
        "counts": {"brokers": len(names), "aLinks": types["aLink"], "iLinks": types["iLink"],
                   "inner": roles["inner"], "edge": roles["edge"],
                   "links": g.number_of_edges(),
                   "switches": sum(k == SWITCH for _, k in g.nodes(data="kind"))},
        "notes": list(g.graph.get("notes", [])),
    }
