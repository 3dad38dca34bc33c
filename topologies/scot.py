"""SCOT (OctopiA): the Cartesian product Ta □ K_m of a tree Ta and a complete graph K_m.

Our readings and choices:

- Broker B(x, c), for tree vertex x and cluster index c in 0..m-1, is named ``f"{x}{c}"``
  (``f0`` ... ``f4``). Tree labels are lowercase letters only and the index is decimal,
  so the name is unambiguous even with multi-letter labels (``aa12`` is B(aa, 12)).
- Cluster c = all B(., c), a copy of Ta; region x = all B(x, .), a copy of K_m.
  aLinks = tree edges inside a cluster (m * |E(Ta)|), iLinks join the brokers of a region
  (|V(Ta)| * m(m-1)/2). A broker is ``'edge'`` with at most one primary (tree)
  neighbour, else ``'inner'``; so every broker of a region has the same role.
- Brokers are ordered by region (labels by length, then alphabetically), then cluster;
  the input order of the tree edges does not matter.
- The paper's evaluation SCOT has 14 x 5 = 70 brokers (4 inner F, G, H, I and 10 edge
  brokers in Ta). Its figure is not in the text: we read Ta as the path f-g-h-i with the
  ten edge brokers hung on it 3, 2, 2, 3 (``hang``), labelled with the other letters in
  alphabetical order (a, b, c on f; d, e on g; j, k on h; l, m, n on i).

Under Mininet: ``sudo mn --custom topologies/custom.py --topo scot,tree=a-b+b-c,m=3``
(edges separated by '+' because mn splits on ','); see :mod:`topologies.custom`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from itertools import pairwise

import networkx as nx

from topologies.graph import MODES, parse_edges
from topologies.links import LinkParams
from topologies.overlay import overlay_as_links_graph, overlay_on_switch_graph

LABEL_RE = re.compile(r"^[a-z]+$")
PAPER_SPINE = ("f", "g", "h", "i")
PAPER_HANG = (3, 2, 2, 3)
PAPER_M = 5


def _label_key(label: str) -> tuple[int, str]:
    return len(label), label


def broker_name(x: str, c: int) -> str:
    """The name of B(x, c)."""
    return f"{x}{c}"


def check_tree(tree_edges: Iterable[Sequence[str]]) -> nx.Graph:
    """Ta as an ``nx.Graph``, or ValueError naming what makes the edges no tree."""
    if isinstance(tree_edges, str) or not isinstance(tree_edges, Iterable):
        raise ValueError(f"tree: bad value {tree_edges!r}; allowed: a list of label pairs "
                         f"(or text like 'f-g,g-h' where a string is read)")
    ta = nx.Graph()
    for edge in tree_edges:
        if isinstance(edge, str) or not isinstance(edge, Sequence) or len(edge) != 2:
            raise ValueError(f"tree: bad edge {edge!r}; allowed: a pair of labels")
        x, y = edge
        for label in (x, y):
            if not isinstance(label, str) or not LABEL_RE.match(label):
                raise ValueError(f"tree: bad label {label!r}; allowed: lowercase letters "
                                 f"a-z only")
        if x == y:
            raise ValueError(f"tree: edge {x}-{y} is a self-loop")
        if ta.has_edge(x, y):
            raise ValueError(f"tree: edge {x}-{y} is given twice")
        ta.add_edge(x, y)
    if ta.number_of_nodes() < 2:
        raise ValueError("tree: needs at least 2 vertices (1 edge); got none")
    try:
        cycle = nx.find_cycle(ta)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = "-".join([u for u, _ in cycle] + [cycle[0][0]])
        raise ValueError(f"tree: not a tree, it has the cycle {path}")
    parts = sorted((sorted(p, key=_label_key) for p in nx.connected_components(ta)),
                   key=lambda p: _label_key(p[0]))
    if len(parts) > 1:
        shown = " | ".join(",".join(p) for p in parts)
        raise ValueError(f"tree: not a tree, it is not connected: {len(parts)} parts "
                         f"({shown})")
    return ta


def parse_tree(text: str) -> list[tuple[str, str]]:
    """Parse and check a tree like ``"f-g,g-h,h-i,f-a"`` (',' '+' or blanks between edges)."""
    edges = parse_edges(text, "tree")
    check_tree(edges)
    return edges


# Bounds checked before anything is built (K_m grows as m^2): the simulator's largest
# overlays are around 10,000 nodes.
MAX_BROKERS = 20_000
MAX_LINKS = 2_000_000


def scot_overlay(tree_edges: Iterable[Sequence[str]], m: int) -> nx.Graph:
    """The SCOT overlay Ta □ K_m over broker names, edges typed 'aLink' / 'iLink'."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(f"m: bad value {m!r}; allowed: an integer >= 2 (the size of K_m)")
    ta = check_tree(tree_edges)
    n_links = ta.number_of_edges() * m + ta.number_of_nodes() * m * (m - 1) // 2
    if ta.number_of_nodes() * m > MAX_BROKERS or n_links > MAX_LINKS:
        raise ValueError(f"m: bad value {m!r}; allowed: a SCOT of at most {MAX_BROKERS} "
                         f"brokers and {MAX_LINKS} links (this one: {ta.number_of_nodes() * m} "
                         f"and {n_links})")
    labels = sorted(ta, key=_label_key)
    ov = nx.Graph()
    for x in labels:
        role = "edge" if ta.degree(x) <= 1 else "inner"
        for c in range(m):
            ov.add_node(broker_name(x, c), cluster=c, region=x, role=role)
    tree = sorted((tuple(sorted(e, key=_label_key)) for e in ta.edges),
                  key=lambda e: (_label_key(e[0]), _label_key(e[1])))
    for c in range(m):
        ov.add_edges_from((broker_name(x, c), broker_name(y, c), {"type": "aLink"})
                          for x, y in tree)
    for x in labels:
        ov.add_edges_from((broker_name(x, c), broker_name(x, d), {"type": "iLink"})
                          for c in range(m) for d in range(c + 1, m))
    return ov


def scot_graph(tree_edges: Iterable[Sequence[str]], m: int, *, mode: str = "overlay",
               params: LinkParams, name: str = "scot") -> nx.Graph:
    """The SCOT Ta □ K_m as a topology graph (see :mod:`topologies.graph`).

    ``mode='overlay'``: one link per aLink/iLink with ``params``; ``mode='switch'``: all
    brokers on switch ``s1`` by access links with ``params``.
    """
    if mode not in MODES:
        raise ValueError(f"mode: bad value {mode!r}; allowed: {', '.join(MODES)}")
    ov = scot_overlay(tree_edges, m)
    if mode == "overlay":
        return overlay_as_links_graph(ov, params, name=name)
    return overlay_on_switch_graph(ov, params, name=name)


def paper_tree(hang: Sequence[int] = PAPER_HANG) -> list[tuple[str, str]]:
    """Our reading of the paper's Ta: the path f-g-h-i with ``hang[i]`` edge brokers on
    its i-th vertex, labelled with the unused letters in alphabetical order."""
    if (isinstance(hang, str) or not isinstance(hang, Sequence) or len(hang) != len(PAPER_SPINE)
            or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in hang)):
        raise ValueError(f"hang: bad value {hang!r}; allowed: {len(PAPER_SPINE)} "
                         f"integers >= 0, edge brokers on f, g, h, i")
    free = [chr(i) for i in range(ord("a"), ord("z") + 1) if chr(i) not in PAPER_SPINE]
    if sum(hang) > len(free):
        raise ValueError(f"hang: bad value {hang!r}; allowed: at most {len(free)} "
                         f"edge brokers in all (one letter each)")
    edges = list(pairwise(PAPER_SPINE))
    leaves = iter(free)
    for spine, k in zip(PAPER_SPINE, hang, strict=True):
        edges += [(spine, next(leaves)) for _ in range(k)]
    return edges


def scot_paper_graph(hang: Sequence[int] = PAPER_HANG, m: int = PAPER_M, *,
                     mode: str = "overlay", params: LinkParams) -> nx.Graph:
    """The paper's evaluation SCOT (70 brokers with the defaults), see :func:`paper_tree`."""
    g = scot_graph(paper_tree(hang), m, mode=mode, params=params, name="scot-paper")
    g.graph["notes"].append(
        f"Ta read as the path f-g-h-i with {'/'.join(map(str, hang))} edge brokers hung on "
        f"it (the paper's figure of Ta is not in its text)")
    return g
