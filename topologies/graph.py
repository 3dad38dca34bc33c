"""The topology graph contract shared by every builder, the Mininet layer and the runner.

Every builder returns an undirected ``nx.Graph`` (works with networkx 2.8 and 3.x):

Graph attributes
    ``name``     the topology name (``scot``, ``gigabit-cluster``, ...).
    ``mode``     ``'overlay'``: every overlay edge is its own host-to-host link, and the
                 graph *is* the overlay; ``'switch'``: hosts hang off switches, and the
                 broker overlay is kept in ``graph['overlay']``.
    ``overlay``  (switch mode only) an ``nx.Graph`` over broker names; its edges carry
                 ``type`` ('aLink' | 'iLink' | 'overlay'). Use :func:`overlay_of`.
    ``notes``    list of str: choices the user should know about (shown by ``topo show``
                 and copied into run manifests).

Node attributes
    ``kind``     ``'broker'`` (a Mininet host) or ``'switch'``.
    Brokers also carry:
    ``cluster``  int or None (SCOT cluster index c of B(x, c)),
    ``region``   str or None (SCOT region x of B(x, c)),
    ``role``     ``'inner'`` | ``'edge'`` | None,
    ``compute``  name of the compute node (switch) it runs on, or None,
    ``ip``       its main address *without* prefix, e.g. ``'10.3.17.74'`` (LBDD hashes
                 exactly this string), and ``prefixlen`` (int). In overlay mode the main
                 address is the broker's end of its first link (``<name>-eth0``), which is
                 what Mininet reports as ``host.IP()``.

Edge attributes
    ``type``     ``'aLink'`` | ``'iLink'`` | ``'overlay'`` (host-to-host overlay links),
                 ``'access'`` (host to switch), ``'uplink'`` (switch to switch);
    ``params``   a :class:`~topologies.links.LinkParams`;
    ``ips``      host-to-host links only: ``{node: 'a.b.c.d/30'}`` for both ends.

Names are valid Mininet host names and safe in shells: lowercase letters and digits,
starting with a letter, and short enough that ``<name>-eth<N>`` fits Linux's 15-character
interface names for the node's highest port. Ports are numbered in ``graph.edges`` order,
from 0 on hosts and from 1 on switches, as Mininet does (:func:`link_ports`).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import networkx as nx

BROKER = "broker"
SWITCH = "switch"
MODES = ("overlay", "switch")
OVERLAY_TYPES = ("aLink", "iLink", "overlay")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")
IFNAMSIZ = 15  # Linux interface names: 16 bytes including the terminating NUL
_EDGE_SEP = re.compile(r"[,+\s]+")  # '+' because `mn --topo` splits its arguments on ','


def new_graph(name: str, mode: str) -> nx.Graph:
    """An empty graph with the contract's graph attributes."""
    if mode not in MODES:
        raise ValueError(f"mode: bad value {mode!r}; allowed: {', '.join(MODES)}")
    return nx.Graph(name=name, mode=mode, notes=[])


def add_broker(g: nx.Graph, name: str, **attrs: Any) -> None:
    """Add a broker host; attributes the contract names default to None."""
    _check_new(g, name)
    g.add_node(name, kind=BROKER, **{"cluster": None, "region": None, "role": None,
                                     "compute": None, "ip": None, "prefixlen": None, **attrs})


def add_switch(g: nx.Graph, name: str) -> None:
    _check_new(g, name)
    g.add_node(name, kind=SWITCH)


def _check_new(g: nx.Graph, name: str) -> None:
    if name in g:
        raise ValueError(f"node name {name!r} is used twice: broker and switch names must "
                         f"differ (a SCOT region 's' makes a broker 's1', like the switch)")


def brokers(g: nx.Graph) -> list[str]:
    """Broker names in graph order."""
    return [n for n, kind in g.nodes(data="kind") if kind == BROKER]


def overlay_of(g: nx.Graph) -> nx.Graph:
    """The broker overlay: ``graph['overlay']`` in switch mode, else the graph itself (a
    topology graph in overlay mode, or an overlay graph already)."""
    return g.graph["overlay"] if g.graph.get("mode") == "switch" else g


def endpoint_ip(g: nx.Graph, a: str, b: str) -> str:
    """The address broker ``a`` dials to reach broker ``b``: b's end of their own link in
    overlay mode, b's main address where they meet through switches."""
    if g.has_edge(a, b) and "ips" in g.edges[a, b]:
        return g.edges[a, b]["ips"][b].split("/")[0]
    return g.nodes[b]["ip"].split("/")[0]


def path_links(g: nx.Graph, a: str, b: str) -> list[tuple[str, str]]:
    """The physical links on the shortest path from ``a`` to ``b``."""
    if g.has_edge(a, b):  # the only shortest path; the search costs O(links) per pair
        return [(a, b)]
    path = nx.shortest_path(g, a, b)
    return list(itertools.pairwise(path))


class SimplePaths:
    """Which vertices of ``g`` lie on some simple path between two others
    (:meth:`between`, each pair worked out once), from the graph's block-cut tree, built
    once.

    A vertex lies on some simple a-b path exactly when it belongs to a biconnected block
    on the path from ``a`` to ``b`` in the block-cut tree: inside a block any vertex lies
    on a simple path between any two others, and between blocks every path passes the
    same cut vertices. Building the tree is one linear pass, where listing the simple
    paths is exponential in the graph's cycles.
    """

    def __init__(self, g: nx.Graph) -> None:
        self._g = g
        self._blocks = [frozenset(c) for c in nx.biconnected_components(g)]
        self._cuts = set(nx.articulation_points(g))
        self._tree = nx.Graph()
        self._block_of: dict[str, int] = {}
        self._between: dict[tuple[str, str], frozenset[str]] = {}  # asked pairs, kept
        for i, block in enumerate(self._blocks):
            self._tree.add_node(("block", i))
            self._tree.add_edges_from((("block", i), ("cut", v)) for v in block & self._cuts)
            # a cut vertex is in several blocks, any other vertex of a path in exactly one
            self._block_of.update((v, i) for v in block - self._cuts)

    def between(self, a: str, b: str) -> frozenset[str]:
        """The vertices on at least one simple path from ``a`` to ``b``, both ends
        included (``{a, b}`` when no path joins them)."""
        if (a, b) not in self._between:
            self._between[a, b] = self._find(a, b)
        return self._between[a, b]

    def _find(self, a: str, b: str) -> frozenset[str]:
        if a == b:
            return frozenset({a})
        if not nx.has_path(self._g, a, b):
            return frozenset({a, b})
        on_path = nx.shortest_path(self._tree, self._tree_node(a), self._tree_node(b))
        return frozenset().union(*(self._blocks[i] for kind, i in on_path if kind == "block"))

    def _tree_node(self, v: str) -> tuple[str, Any]:
        return ("cut", v) if v in self._cuts else ("block", self._block_of[v])


def parse_edges(text: str, what: str = "edges") -> list[tuple[str, str]]:
    """Parse ``"a-b,b-c"`` (also ``+`` or blanks between edges) into name pairs."""
    if not isinstance(text, str):
        raise ValueError(f"{what}: bad value {text!r}; allowed: a string like 'a-b,b-c'")
    edges = []
    for item in _EDGE_SEP.split(text.strip()):
        ends = item.split("-")
        if len(ends) != 2 or not all(ends):
            raise ValueError(f"{what}: bad edge {item!r} in {text!r}; allowed: "
                             f"NAME-NAME items separated by ',' or '+'")
        edges.append((ends[0], ends[1]))
    return edges


def link_ports(g: nx.Graph) -> dict[tuple[str, str], dict[str, int]]:
    """Port of each end of each link, keyed by the edge as ``g.edges`` yields it.

    Mininet's own numbering (hosts from 0, switches from 1, in link order) so that our
    interface names match the ones Mininet would have made.
    """
    next_port = {n: 1 if kind == SWITCH else 0 for n, kind in g.nodes(data="kind")}
    ports = {}
    for u, v in g.edges:
        ports[u, v] = {u: next_port[u], v: next_port[v]}
        next_port[u] += 1
        next_port[v] += 1
    return ports


def intf_name(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def check_names(g: nx.Graph) -> None:
    """Raise ValueError for a node name Mininet or Linux would reject or mangle."""
    top_port = {n: -1 for n in g}
    for ends in link_ports(g).values():
        for n, port in ends.items():
            top_port[n] = max(top_port[n], port)
    for n, port in top_port.items():
        if not isinstance(n, str) or not NAME_RE.match(n):
            raise ValueError(f"node name {n!r}: allowed: lowercase letters and digits, "
                             f"starting with a letter")
        if len(intf_name(n, max(port, 0))) > IFNAMSIZ:
            raise ValueError(f"node name {n!r} is too long: its interface "
                             f"{intf_name(n, max(port, 0))!r} exceeds Linux's {IFNAMSIZ} "
                             f"characters")
