"""The transit-stub underlay generator: sizes, link classes, determinism, server placement
and server-to-server latencies. Pure networkx: no root, no Mininet."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter

import networkx as nx
import pytest

from topologies.transit_stub import (
    CLASSES,
    PRESETS,
    TS400,
    TS5050,
    TransitStubParams,
    generate,
    place_servers,
    server_latency,
    server_names,
)

# Distinct delays per class, so a link given another class's delay is seen.
DELAYS = {"intra_transit_delay_ms": 21.0, "inter_transit_delay_ms": 53.0,
          "transit_stub_delay_ms": 11.0, "intra_stub_delay_ms": 2.5, "stub_stub_delay_ms": 7.0}
SMALL = dataclasses.replace(TS400, extra_transit_stub=12, extra_stub_stub=9, **DELAYS)


@pytest.fixture(scope="module")
def ts5050() -> nx.Graph:
    return generate(TS5050)


@pytest.fixture(scope="module")
def small() -> nx.Graph:
    return generate(SMALL)


def _domains(g: nx.Graph, kind: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r, d in g.nodes(data=True):
        if d["kind"] == kind:
            out.setdefault(d["domain"], []).append(r)
    return out


def _snapshot(g: nx.Graph) -> tuple[list, list]:
    return list(g.nodes(data=True)), list(g.edges(data=True))


def test_presets_have_the_stated_sizes() -> None:
    assert PRESETS == {"ts5050": TS5050, "ts400": TS400}
    assert (TS5050.n_transit_routers, TS5050.n_stub_domains, TS5050.n_routers) == (50, 500, 5050)
    assert (TS400.n_transit_routers, TS400.n_stub_domains, TS400.n_routers) == (16, 64, 400)


def test_ts5050_has_exactly_the_requested_domains_and_routers(ts5050: nx.Graph) -> None:
    assert ts5050.number_of_nodes() == 5050
    assert sorted(ts5050) == list(range(5050))
    transit, stub = _domains(ts5050, "transit"), _domains(ts5050, "stub")
    assert len(transit) == 10 and {len(r) for r in transit.values()} == {5}
    assert len(stub) == 500 and {len(r) for r in stub.values()} == {10}
    assert set(nx.get_node_attributes(ts5050, "kind").values()) == {"transit", "stub"}


@pytest.mark.parametrize("params", [
    TS400, SMALL,
    dataclasses.replace(TS400, p_domains=0.0, p_transit=0.0, p_stub=0.0, seed=5),
    dataclasses.replace(TS400, transit_domains=1, transit_routers=1, stub_routers=1),
], ids=["ts400", "extras", "p0", "one-router-domains"])
def test_the_graph_and_every_domain_are_connected(params: TransitStubParams) -> None:
    g = generate(params)
    assert g.number_of_nodes() == params.n_routers
    assert nx.is_connected(g)
    intra = {"transit": "intra_transit", "stub": "intra_stub"}
    for kind, cls in intra.items():
        for routers in _domains(g, kind).values():
            inside = nx.Graph([(u, v) for u, v, c in g.subgraph(routers).edges(data="cls")
                               if c == cls])
            inside.add_nodes_from(routers)
            assert nx.is_connected(inside)
    domains = nx.Graph((g.nodes[u]["domain"], g.nodes[v]["domain"])
                       for u, v, c in g.edges(data="cls") if c == "inter_transit")
    domains.add_nodes_from(_domains(g, "transit"))
    assert nx.is_connected(domains)


def test_probability_zero_gives_trees_and_one_complete_domains() -> None:
    tree = generate(dataclasses.replace(TS400, p_transit=0.0, p_stub=0.0, p_domains=0.0))
    assert nx.is_tree(tree)
    full = generate(dataclasses.replace(TS400, p_transit=1.0, p_stub=1.0, p_domains=1.0))
    n = Counter(c for *_, c in full.edges(data="cls"))
    assert n["intra_stub"] == 64 * math.comb(6, 2)
    assert n["intra_transit"] == 4 * math.comb(4, 2)
    assert n["inter_transit"] == math.comb(4, 2)


def test_every_link_has_its_class_delay_and_joins_the_right_routers(small: nx.Graph) -> None:
    for u, v, d in small.edges(data=True):
        assert d["cls"] in CLASSES
        assert d["delay_ms"] == DELAYS[f"{d['cls']}_delay_ms"], (u, v, d)
        a, b = small.nodes[u], small.nodes[v]
        kinds = sorted((a["kind"], b["kind"]))
        same = a["domain"] == b["domain"]
        expected = {"intra_transit": (["transit", "transit"], True),
                    "inter_transit": (["transit", "transit"], False),
                    "transit_stub": (["stub", "transit"], False),
                    "intra_stub": (["stub", "stub"], True),
                    "stub_stub": (["stub", "stub"], False)}[d["cls"]]
        assert (kinds, same) == expected, (u, v, d)
    counts = Counter(c for *_, c in small.edges(data="cls"))
    assert set(counts) == set(CLASSES)
    assert counts["transit_stub"] == SMALL.n_stub_domains + 12
    assert counts["stub_stub"] == 9


def test_each_stub_domain_hangs_from_its_own_transit_router(ts5050: nx.Graph) -> None:
    """Without extra links: one link per stub domain, to a transit router that carries
    exactly ``stubs_per_transit_router`` stub domains."""
    up: dict[str, list[int]] = {}
    for u, v, c in ts5050.edges(data="cls"):
        if c == "transit_stub":
            stub, transit = (u, v) if ts5050.nodes[u]["kind"] == "stub" else (v, u)
            up.setdefault(ts5050.nodes[stub]["domain"], []).append(transit)
    assert len(up) == 500 and all(len(t) == 1 for t in up.values())
    assert Counter(t[0] for t in up.values()) == dict.fromkeys(range(50), 10)
    assert all(t == [int(d[1:]) // 10] for d, t in up.items())  # s0..s9 on router 0, ...
    assert set(nx.get_edge_attributes(ts5050, "cls").values()) == set(CLASSES) - {"stub_stub"}


def test_same_seed_same_graph_other_seed_another() -> None:
    a, b = generate(SMALL), generate(dataclasses.replace(SMALL))
    assert _snapshot(a) == _snapshot(b)
    random.random()  # the global RNG plays no part
    assert _snapshot(generate(SMALL)) == _snapshot(a)
    c = generate(dataclasses.replace(SMALL, seed=1))
    assert sorted(a.edges) != sorted(c.edges)


def test_servers_sit_on_distinct_stub_routers_by_seed(ts5050: nx.Graph) -> None:
    p = place_servers(ts5050, 1000, seed=3)
    assert list(p) == server_names(1000) and list(p)[:2] == ["s000", "s001"]
    assert len(set(p.values())) == 1000
    assert all(ts5050.nodes[r]["kind"] == "stub" for r in p.values())
    assert place_servers(ts5050, 1000, seed=3) == p
    assert place_servers(ts5050, 1000, seed=4) != p
    assert len(set(place_servers(ts5050, 5000, seed=0).values())) == 5000


def test_too_many_servers_is_a_one_line_error(small: nx.Graph) -> None:
    with pytest.raises(ValueError, match=r"^n: bad value 385; allowed: at most 384") as e:
        place_servers(small, 385, seed=0)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^n: bad value 0"):
        place_servers(small, 0, seed=0)


def test_latency_matrix_is_a_metric_and_matches_networkx(small: nx.Graph) -> None:
    p = place_servers(small, 60, seed=7)
    lat, hops = server_latency(small, p)
    names = list(p)
    assert list(lat) == names and all(list(row) == names for row in lat.values())
    for a in names:
        assert lat[a][a] == 0.0 and hops[a][a] == 0
        for b in names:
            assert lat[a][b] == lat[b][a] and hops[a][b] == hops[b][a]
            if a != b:
                assert lat[a][b] > 0 and hops[a][b] >= 1
    rng = random.Random(0)
    for a, b, c in (rng.sample(names, 3) for _ in range(2000)):
        assert lat[a][c] <= lat[a][b] + lat[b][c] + 1e-9
    for a, b in rng.sample(list(itertools.combinations(names, 2)), 15):
        u, v = p[a], p[b]
        assert lat[a][b] == pytest.approx(nx.shortest_path_length(small, u, v, "delay_ms"))
        paths = nx.all_shortest_paths(small, u, v, weight="delay_ms")
        assert hops[a][b] == min(len(path) - 1 for path in paths)


def test_of_equally_short_paths_the_fewest_hops_count() -> None:
    """0-1-2-3 and 0-3 both take 6 ms; 0-4-3 takes 7 ms."""
    g = nx.Graph()
    g.add_weighted_edges_from([(0, 1, 2.0), (1, 2, 2.0), (2, 3, 2.0), (0, 3, 6.0),
                               (0, 4, 3.5), (4, 3, 3.5)], weight="delay_ms")
    lat, hops = server_latency(g, {"s000": 0, "s001": 3, "s002": 2})
    assert lat["s000"]["s001"] == 6.0 and hops["s000"]["s001"] == 1
    assert lat["s001"]["s000"] == 6.0 and hops["s001"]["s000"] == 1
    assert lat["s000"]["s002"] == 4.0 and hops["s000"]["s002"] == 2


def test_latencies_on_ts5050_cross_the_transit_core(ts5050: nx.Graph) -> None:
    """Servers under different transit domains pay two transit-stub links and at least one
    inter-transit link: 2 x 10 + 50 ms, 3 hops."""
    p = place_servers(ts5050, 40, seed=1)
    lat, hops = server_latency(ts5050, p)
    top = {s: ts5050.nodes[r]["domain"] for s, r in p.items()}  # stub domain sK
    top = {s: int(d[1:]) // 10 // 5 for s, d in top.items()}  # its transit domain
    pairs = [(a, b) for a, b in itertools.combinations(p, 2) if top[a] != top[b]]
    assert len(pairs) > 500
    assert min(lat[a][b] for a, b in pairs) >= 70.0
    assert min(hops[a][b] for a, b in pairs) >= 3


def test_placement_on_a_foreign_router_is_an_error(small: nx.Graph) -> None:
    with pytest.raises(ValueError, match=r"^placement: server\(s\) s001 on no router"):
        server_latency(small, {"s000": 0, "s001": "nowhere"})
    two = nx.Graph()
    two.add_nodes_from([0, 1])
    with pytest.raises(ValueError, match=r"not connected"):
        server_latency(two, {"s000": 0, "s001": 1})


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("transit_domains", 0, "an integer >= 1"),
    ("transit_routers", -1, "an integer >= 1"),
    ("stubs_per_transit_router", 2.0, "an integer >= 1"),
    ("stub_routers", True, "an integer >= 1"),
    ("p_transit", 1.5, r"a number in \[0, 1\]"),
    ("p_stub", -0.1, r"a number in \[0, 1\]"),
    ("p_domains", float("nan"), r"a number in \[0, 1\]"),
    ("intra_stub_delay_ms", -2, "a finite number >= 0"),
    ("inter_transit_delay_ms", float("inf"), "a finite number >= 0"),
    ("extra_stub_stub", -1, "an integer >= 0"),
    ("extra_transit_stub", 10**6, "at most 6080"),
    ("seed", "1", "an integer"),
])
def test_bad_parameters_are_one_line_errors(field: str, value: object, allowed: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}: bad value .*; allowed: {allowed}") as e:
        dataclasses.replace(TS400, **{field: value})
    assert "\n" not in str(e.value)
