"""Transit-stub Internet underlay: the router graph under an overlay of servers.

The transit-stub model of Zegura, Calvert and Bhattacharjee ("How to model an
internetwork", INFOCOM 1996): ``transit_domains`` transit domains of ``transit_routers``
routers each; every transit router has ``stubs_per_transit_router`` stub domains of
``stub_routers`` routers each hung from it. This is an underlay of routers, not a topology
of the :mod:`topologies.graph` contract (no brokers, switches or link parameters): it gives
servers placed on stub routers their pairwise latencies and hop counts.

Our readings and choices (all of them parameters of :class:`TransitStubParams`):

- Each domain is a random graph G(n, p) (``p_transit``, ``p_stub``) made connected by
  joining components, never by retrying: components in order of their smallest router,
  each joined to the routers before it by one edge between a random router of it and a
  random router of those before. So p = 0 gives a random tree, p = 1 a complete graph.
- The transit domains are joined the same way: a connected random graph over the domains
  (``p_domains``); each of its edges becomes one link between a random router of each of
  the two domains.
- A stub domain hangs from its transit router by one link from a random router of it.
  ``extra_transit_stub`` more links join a random stub router to a random transit router,
  and ``extra_stub_stub`` more links join random stub routers of different stub domains
  (pairs not linked yet, drawn again until new).
- Link delays by class, in ms (ours, the model sets none): intra-transit 20,
  inter-transit 50, transit-stub 10, intra-stub 2, stub-stub 10.
- One ``random.Random(seed)`` draws everything, in a fixed order over sorted routers:
  the same parameters give the same graph, edge order and attributes included.

Graph: routers are the ints ``0 .. n_routers - 1``, transit routers first (domain by
domain), then stub routers (stub domain by stub domain, in order of their transit router).
Node attributes ``kind`` (``'transit'`` | ``'stub'``) and ``domain`` (``'t0'`` ... for
transit domains, ``'s0'`` ... for stub domains); edge attributes ``delay_ms`` (float) and
``cls`` (:data:`CLASSES`); graph attributes ``name`` and ``params``.

Presets: :data:`TS5050` (10 x 5 transit routers, 10 stub domains of 10 routers per transit
router: 50 + 5,000 = 5,050 routers, the size of Scribe's evaluation) for the simulator;
:data:`TS400` (4 x 4 transit routers, 4 stub domains of 6 routers per transit router:
16 + 384 = 400 routers) for emulated latency matrices. :func:`generate` takes about 25 ms
for TS5050 (10,118 links with seed 0).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, fields

import networkx as nx

from nodes.cores.overlay import latency_mst
from topologies.links import LinkParams
from topologies.overlay import overlay_on_switch_graph

TRANSIT = "transit"
STUB = "stub"
CLASSES = ("intra_transit", "inter_transit", "transit_stub", "intra_stub", "stub_stub")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)  # NaN fails ranges


@dataclass(frozen=True)
class TransitStubParams:
    """Parameters of :func:`generate`; checked on construction (one-line ValueError)."""

    transit_domains: int = 4
    transit_routers: int = 4  # per transit domain
    stubs_per_transit_router: int = 4
    stub_routers: int = 6  # per stub domain
    p_domains: float = 0.5  # edge probability between transit domains
    p_transit: float = 0.6  # edge probability inside a transit domain
    p_stub: float = 0.42  # edge probability inside a stub domain
    extra_transit_stub: int = 0
    extra_stub_stub: int = 0
    intra_transit_delay_ms: float = 20.0
    inter_transit_delay_ms: float = 50.0
    transit_stub_delay_ms: float = 10.0
    intra_stub_delay_ms: float = 2.0
    stub_stub_delay_ms: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("p_"):
                if not _is_number(value) or not 0 <= value <= 1:
                    raise ValueError(f"{f.name}: bad value {value!r}; allowed: a number in "
                                     f"[0, 1]")
            elif f.name.endswith("_ms"):
                if not _is_number(value) or not 0 <= value < math.inf:
                    raise ValueError(f"{f.name}: bad value {value!r}; allowed: a finite "
                                     f"number >= 0")
            elif f.name.startswith("extra_"):
                if not _is_int(value) or value < 0:
                    raise ValueError(f"{f.name}: bad value {value!r}; allowed: an integer "
                                     f">= 0")
            elif f.name == "seed":
                if not _is_int(value):
                    raise ValueError(f"seed: bad value {value!r}; allowed: an integer")
            elif not _is_int(value) or value < 1:
                raise ValueError(f"{f.name}: bad value {value!r}; allowed: an integer >= 1")
        free_ts = self.n_stub_routers * self.n_transit_routers - self.n_stub_domains
        if self.extra_transit_stub > free_ts:
            raise ValueError(f"extra_transit_stub: bad value {self.extra_transit_stub!r}; "
                             f"allowed: at most {free_ts} (unlinked stub-transit pairs)")
        free_ss = (math.comb(self.n_stub_routers, 2)
                   - self.n_stub_domains * math.comb(self.stub_routers, 2))
        if self.extra_stub_stub > free_ss:
            raise ValueError(f"extra_stub_stub: bad value {self.extra_stub_stub!r}; "
                             f"allowed: at most {free_ss} (stub pairs in different domains)")

    @property
    def n_transit_routers(self) -> int:
        return self.transit_domains * self.transit_routers

    @property
    def n_stub_domains(self) -> int:
        return self.n_transit_routers * self.stubs_per_transit_router

    @property
    def n_stub_routers(self) -> int:
        return self.n_stub_domains * self.stub_routers

    @property
    def n_routers(self) -> int:
        return self.n_transit_routers + self.n_stub_routers

    def delay_ms(self, cls: str) -> float:
        """The delay of a link of class ``cls`` (one of :data:`CLASSES`)."""
        return float(getattr(self, f"{cls}_delay_ms"))


TS5050 = TransitStubParams(transit_domains=10, transit_routers=5, stubs_per_transit_router=10,
                           stub_routers=10)
TS400 = TransitStubParams(transit_domains=4, transit_routers=4, stubs_per_transit_router=4,
                          stub_routers=6)
PRESETS = {"ts5050": TS5050, "ts400": TS400}


def _connected_random(rng: random.Random, nodes: Sequence[int],
                      p: float) -> list[tuple[int, int]]:
    """Edges of G(len(nodes), p) over ``nodes``, then one edge per extra component."""
    edges = [(u, v) for i, u in enumerate(nodes) for v in nodes[i + 1:] if rng.random() < p]
    h = nx.Graph(edges)
    h.add_nodes_from(nodes)
    comps = sorted((sorted(c) for c in nx.connected_components(h)), key=lambda c: c[0])
    joined = comps[0]
    for comp in comps[1:]:
        edges.append((rng.choice(comp), rng.choice(joined)))
        joined = joined + comp
    return edges


def generate(params: TransitStubParams) -> nx.Graph:
    """The transit-stub router graph of ``params`` (module docstring)."""
    if not isinstance(params, TransitStubParams):
        raise ValueError(f"params: bad value {params!r}; allowed: a TransitStubParams")
    rng = random.Random(params.seed)
    g = nx.Graph(name="transit-stub", params=asdict(params))

    def link(u: int, v: int, cls: str) -> None:
        g.add_edge(u, v, delay_ms=params.delay_ms(cls), cls=cls)

    nt, ns = params.transit_routers, params.stub_routers
    transit = [list(range(d * nt, (d + 1) * nt)) for d in range(params.transit_domains)]
    for d, routers in enumerate(transit):
        g.add_nodes_from(routers, kind=TRANSIT, domain=f"t{d}")
    base = params.n_transit_routers
    stubs = [list(range(base + s * ns, base + (s + 1) * ns)) for s in range(params.n_stub_domains)]
    for s, routers in enumerate(stubs):
        g.add_nodes_from(routers, kind=STUB, domain=f"s{s}")

    for routers in transit:
        for u, v in _connected_random(rng, routers, params.p_transit):
            link(u, v, "intra_transit")
    for a, b in _connected_random(rng, range(params.transit_domains), params.p_domains):
        link(rng.choice(transit[a]), rng.choice(transit[b]), "inter_transit")
    for s, routers in enumerate(stubs):
        for u, v in _connected_random(rng, routers, params.p_stub):
            link(u, v, "intra_stub")
        link(s // params.stubs_per_transit_router, rng.choice(routers), "transit_stub")

    stub_routers = range(base, params.n_routers)
    added = 0
    while added < params.extra_transit_stub:
        u, v = rng.choice(stub_routers), rng.randrange(base)
        if not g.has_edge(u, v):
            link(v, u, "transit_stub")
            added += 1
    added = 0
    while added < params.extra_stub_stub:
        u, v = sorted(rng.sample(stub_routers, 2))
        if g.nodes[u]["domain"] != g.nodes[v]["domain"] and not g.has_edge(u, v):
            link(u, v, "stub_stub")
            added += 1
    return g


def server_names(n: int) -> list[str]:
    """``s000`` ... : zero-padded (at least 3 digits), so name order is index order."""
    width = max(3, len(str(n - 1)))
    return [f"s{i:0{width}d}" for i in range(n)]


def place_servers(graph: nx.Graph, n: int, seed: int, *,
                  names: tuple[str, str] = ("n", "seed")) -> dict[str, Hashable]:
    """``n`` servers (:func:`server_names`) on distinct stub routers drawn by
    ``random.Random(seed)`` from the sorted stub routers: ``{server: router}``. A bad
    ``n`` or ``seed`` is a ValueError naming it as ``names`` say (the caller's fields)."""
    n_name, seed_name = names
    if not _is_int(n) or n < 1:
        raise ValueError(f"{n_name}: bad value {n!r}; allowed: an integer >= 1")
    if not _is_int(seed):
        raise ValueError(f"{seed_name}: bad value {seed!r}; allowed: an integer")
    stubs = sorted(r for r, kind in graph.nodes(data="kind") if kind == STUB)
    if n > len(stubs):
        raise ValueError(f"{n_name}: bad value {n!r}; allowed: at most {len(stubs)} (one "
                         f"server per stub router)")
    return dict(zip(server_names(n), random.Random(seed).sample(stubs, n), strict=True))


def server_latency(graph: nx.Graph, placement: dict[str, Hashable]
                   ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """All-pairs ``(latency_ms, hops)`` between the servers of ``placement``.

    ``latency_ms[a][b]`` is the shortest-path latency (sum of ``delay_ms``) between the
    routers of a and b; ``hops[a][b]`` the number of links of that path (the fewest among
    equally short paths). One networkx Dijkstra per server, about 10 ms each on
    :data:`TS5050`: 1,000 servers took 10 s of CPU (12 s wall, 125 MB peak, Python 3.11,
    networkx 3.6.1, beside another busy process on a 2-core machine).
    """
    routers = set(graph)
    missing = [s for s, r in placement.items() if r not in routers]
    if missing:
        raise ValueError(f"placement: server(s) {', '.join(map(str, missing[:5]))} on no "
                         f"router of the graph")
    latency: dict[str, dict[str, float]] = {}
    hops: dict[str, dict[str, int]] = {}
    for server, src in placement.items():
        pred, dist = nx.dijkstra_predecessor_and_distance(graph, src, weight="delay_ms")
        count = {src: 0}
        for v in dist:  # in the order Dijkstra settled them: predecessors come first
            if v != src:
                count[v] = 1 + min(count[u] for u in pred[v] if u in count)
        unreached = [t for t, r in placement.items() if r not in dist]
        if unreached:
            raise ValueError(f"placement: server {unreached[0]} is not reachable from server "
                             f"{server} (the graph is not connected)")
        latency[server] = {t: float(dist[r]) for t, r in placement.items()}
        hops[server] = {t: count[r] for t, r in placement.items()}
    return latency, hops


def transit_stub_servers_graph(n_servers: int, params: TransitStubParams, placement_seed: int,
                               link: LinkParams) -> nx.Graph:
    """``n_servers`` servers ``srv000`` ... (:func:`server_names` with ``srv`` for ``s``)
    placed on the stub routers of the
    underlay ``params`` (:func:`place_servers` with ``placement_seed``), as a topology of
    the :mod:`topologies.graph` contract (registry name ``transit-stub``).

    The routers are not emulated: Mininet cannot hold 5,050 bridges, and a bridged mesh
    with cycles would loop. Every server hangs off one switch ``s1`` by an access link
    with ``link`` (its rate is the server's NIC; its delay should stay 0), and the
    underlay lives in graph attributes: ``latency_ms`` and ``hops`` (all server pairs,
    :func:`server_latency`), ``underlay`` (the router graph) and ``placement``. A
    pair of servers meets the underlay's shortest-path latency, added in the broker
    where the kernel has no netem (:func:`experiments.plan.pair_figures` reads
    ``latency_ms``). The overlay's fixed edges are the servers' latency MST: it is
    Siena's acyclic overlay (its BFS tree over a tree is the tree itself, so Siena
    routes on the latency MST, the reading's tree, rather than on a hop-count BFS tree
    of a mesh); Kyra's cliques and trees and the multicast groups are derived from
    ``latency_ms`` and reach any server over links opened on demand
    (``routing.links: on-demand``)."""
    underlay = generate(params)
    # "srv000" ...: the stock workload names its subscribers s0, s1, ..., and a client
    # may not share a broker's name (one log file each).
    placement = {f"srv{name[1:]}": router for name, router in place_servers(
        underlay, n_servers, placement_seed, names=("n_servers", "placement_seed")).items()}
    latency, hops = server_latency(underlay, placement)
    overlay = nx.Graph()
    overlay.add_nodes_from(placement)
    overlay.add_edges_from(latency_mst(placement, latency))
    g = overlay_on_switch_graph(overlay, link, name="transit-stub")
    g.graph.update(latency_ms=latency, hops=hops, underlay=underlay, placement=placement)
    g.graph["notes"].append(
        f"transit-stub underlay of {params.n_routers} routers (seed {params.seed}), "
        f"{n_servers} servers on stub routers (placement seed {placement_seed}): a pair's "
        "delay is the underlay's shortest-path latency; fixed overlay edges are the "
        "servers' latency MST (Siena's tree), other pairs open links on demand")
    return g
