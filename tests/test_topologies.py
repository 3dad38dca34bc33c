"""Pure graph builders of topologies/ and the package's import structure: no root, no
Mininet."""

from __future__ import annotations

import ast
import ipaddress
import json
import re
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies.addressing import MAX_P2P_LINKS, p2p_pair
from topologies.compute_nodes import balanced_placement, placement_ok, scot_compute_nodes_graph
from topologies.gigabit_cluster import PAPER_IPS, gigabit_cluster_graph
from topologies.graph import (
    IFNAMSIZ,
    brokers,
    check_names,
    intf_name,
    link_ports,
    overlay_of,
    parse_edges,
)
from topologies.links import LinkParams
from topologies.overlay import overlay_as_links_graph, overlay_on_switch_graph
from topologies.registry import TOPOLOGIES, build_graph, describe, parameters
from topologies.scot import paper_tree, parse_tree, scot_graph, scot_overlay, scot_paper_graph

LETTERS = "abcdefghijklmnopqrstuvwxyz"
P = LinkParams(bw_mbps=100, delay_ms=2)


@st.composite
def trees(draw: st.DrawFn) -> list[tuple[str, str]]:
    """A random labelled tree (Prüfer sequence), as edges in random order and direction."""
    n = draw(st.integers(2, 9))
    seq = draw(st.lists(st.integers(0, n - 1), min_size=n - 2, max_size=n - 2))
    labels = draw(st.lists(st.text(LETTERS, min_size=1, max_size=2), min_size=n, max_size=n,
                           unique=True))
    edges = [(labels[u], labels[v]) for u, v in nx.from_prufer_sequence(seq).edges]
    edges = draw(st.permutations(edges))
    flips = draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
    return [(v, u) if f else (u, v) for (u, v), f in zip(edges, flips, strict=True)]


def assert_valid_names(g: nx.Graph) -> None:
    for (u, v), ports in link_ports(g).items():
        for n in (u, v):
            assert re.fullmatch(r"[a-z][a-z0-9]*", n)
            assert len(intf_name(n, ports[n])) <= IFNAMSIZ


def assert_p2p_addressing(g: nx.Graph) -> None:
    seen = []
    for u, v, ips in g.edges(data="ips"):
        a, b = (ipaddress.ip_interface(ips[u]), ipaddress.ip_interface(ips[v]))
        assert a.network == b.network and a.network.prefixlen == 30
        assert a.ip != b.ip and a.ip != a.network.network_address
        assert a.network.subnet_of(ipaddress.ip_network("10.128.0.0/10"))
        seen += [a.ip, b.ip]
    assert len(seen) == len(set(seen)) == 2 * g.number_of_edges()
    # a host's main address is its end of the link on <name>-eth0
    for (u, v), ports in link_ports(g).items():
        for n in (u, v):
            if ports[n] == 0:
                assert g.edges[u, v]["ips"][n] == f"{g.nodes[n]['ip']}/30"


def check_scot(edges: list[tuple[str, str]], m: int, ov: nx.Graph) -> None:
    ta = nx.Graph(edges)
    nv, ne = ta.number_of_nodes(), ta.number_of_edges()
    types = Counter(t for _, _, t in ov.edges(data="type"))
    assert ov.number_of_nodes() == nv * m
    assert types["aLink"] == m * ne
    assert types["iLink"] == nv * m * (m - 1) // 2
    assert sum(types.values()) == ov.number_of_edges()
    leaves = {x for x in ta if ta.degree(x) <= 1}
    roles = Counter(d["role"] for _, d in ov.nodes(data=True))
    assert roles["edge"] == len(leaves) * m and roles["inner"] == (nv - len(leaves)) * m
    for c in range(m):
        cluster = ov.subgraph(b for b, d in ov.nodes(data=True) if d["cluster"] == c)
        assert nx.is_tree(cluster) and cluster.number_of_nodes() == nv
        assert all(t == "aLink" for _, _, t in cluster.edges(data="type"))
    for x in ta:
        region = ov.subgraph(b for b, d in ov.nodes(data=True) if d["region"] == x)
        assert region.number_of_edges() == m * (m - 1) // 2 and region.number_of_nodes() == m
        assert all(t == "iLink" for _, _, t in region.edges(data="type"))
    product = nx.cartesian_product(ta, nx.complete_graph(m))
    relabelled = nx.relabel_nodes(product, {(x, c): f"{x}{c}" for x, c in product})
    assert set(relabelled) == set(ov)
    assert {frozenset(e) for e in relabelled.edges} == {frozenset(e) for e in ov.edges}


# -- SCOT ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(trees(), st.integers(2, 6))
def test_scot_random_trees(edges: list[tuple[str, str]], m: int) -> None:
    g = scot_graph(edges, m, params=P)
    assert g.graph["mode"] == "overlay" and overlay_of(g) is g
    check_scot(edges, m, g)
    assert_valid_names(g)
    assert_p2p_addressing(g)
    assert all(d["params"] is P for _, _, d in g.edges(data=True))
    if any("s" in e for e in edges):
        return  # broker s1 would clash with switch s1 (test_name_clash_...)
    sw = scot_graph(edges, m, mode="switch", params=P)
    check_scot(edges, m, overlay_of(sw))
    assert_valid_names(sw)
    assert sw.number_of_edges() == sw.number_of_nodes() - 1  # a star around s1
    ips = [sw.nodes[b]["ip"] for b in brokers(sw)]
    assert len(set(ips)) == len(ips) and all(ip.startswith("10.") for ip in ips)


@settings(max_examples=30, deadline=None)
@given(trees(), st.integers(2, 4))
def test_scot_does_not_depend_on_edge_order(edges: list[tuple[str, str]], m: int) -> None:
    shuffled = [(v, u) for u, v in reversed(edges)]
    a, b = scot_graph(edges, m, params=P), scot_graph(shuffled, m, params=P)
    assert list(a.nodes(data=True)) == list(b.nodes(data=True))
    assert list(a.edges(data=True)) == list(b.edges(data=True))


def test_scot_naming_and_roles() -> None:
    g = scot_overlay([("a", "b"), ("b", "c")], 3)
    assert list(g) == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2"]
    assert g.nodes["b1"] == {"cluster": 1, "region": "b", "role": "inner"}
    assert g.nodes["c2"]["role"] == "edge"
    # multi-letter labels sort after single letters, names stay unambiguous
    g = scot_overlay([("z", "aa")], 12)
    assert "aa11" in g and g.nodes["aa11"]["region"] == "aa" and g.nodes["aa11"]["cluster"] == 11
    assert next(iter(g)) == "z0"


def test_paper_scot_counts() -> None:
    g = scot_paper_graph(params=P)
    d = describe(g)["counts"]
    assert (d["brokers"], d["aLinks"], d["iLinks"], d["inner"], d["edge"]) == (70, 65, 140, 20, 50)
    inner_regions = {g.nodes[b]["region"] for b in brokers(g) if g.nodes[b]["role"] == "inner"}
    assert inner_regions == {"f", "g", "h", "i"}
    ta = nx.Graph(paper_tree())
    assert [ta.degree(x) for x in "fghi"] == [4, 4, 4, 4] and ta.number_of_nodes() == 14
    assert any("f-g-h-i" in n for n in g.graph["notes"])
    check_scot(paper_tree(), 5, g)
    assert_p2p_addressing(g)


def test_paper_tree_hang_parameter() -> None:
    edges = paper_tree((1, 0, 0, 5))
    assert len(edges) == 3 + 6
    g = scot_paper_graph((1, 0, 0, 5), m=2, mode="switch", params=P)
    roles = Counter(d["role"] for _, d in overlay_of(g).nodes(data=True))
    assert roles == {"inner": 8, "edge": 12}  # f, g, h, i inner; 6 leaves
    for bad in [(3, 2, 2), (3, 2, 2, -1), (30, 0, 0, 0), (1.5, 1, 1, 1)]:
        with pytest.raises(ValueError, match="hang"):
            paper_tree(bad)


@pytest.mark.parametrize(("edges", "m", "problem"), [
    ([("a", "b")], 1, r"m: bad value 1"),
    ([("a", "b")], True, r"m: bad value True"),
    ([("a", "b"), ("b", "c"), ("c", "a")], 3, r"cycle a-b-c-a"),
    ([("a", "b"), ("c", "d")], 3, r"not connected: 2 parts \(a,b \| c,d\)"),
    ([("a", "B")], 3, r"bad label 'B'"),
    ([("a", "a;rm")], 3, r"bad label 'a;rm'"),
    ([("a", "a")], 3, r"self-loop"),
    ([("a", "b"), ("b", "a")], 3, r"edge b-a is given twice"),
    ([], 3, r"at least 2 vertices"),
    (["ab"], 3, r"bad edge 'ab'"),
])
def test_scot_bad_input(edges: list, m: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        scot_graph(edges, m, params=P)  # type: ignore[arg-type]


def test_scot_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode: bad value 'ring'; allowed: overlay, switch"):
        scot_graph([("a", "b")], 2, mode="ring", params=P)


def test_parse_tree() -> None:
    assert parse_tree("f-g,g-h+h-i  f-a") == [("f", "g"), ("g", "h"), ("h", "i"), ("f", "a")]
    for text, problem in [("f-g,g", "bad edge 'g'"), ("f-g-h", "bad edge 'f-g-h'"),
                          ("a-b,b-c,c-a", "cycle"), ("a-;rm", "bad label ';rm'"),
                          ("A-b", "bad label 'A'")]:
        with pytest.raises(ValueError, match=problem):
            parse_tree(text)
    with pytest.raises(ValueError, match="tree: bad value 3"):
        parse_tree(3)  # type: ignore[arg-type]


# -- other builders ----------------------------------------------------------------------


def test_compute_nodes_paper_placement() -> None:
    g = scot_compute_nodes_graph()
    assert placement_ok(g)
    assert g.graph["mode"] == "switch"
    load = Counter(g.nodes[b]["compute"] for b in brokers(g))
    assert sorted(load.values()) == [11, 11, 12, 12, 12, 12]
    assert set(load) == {f"cn{i}" for i in range(1, 7)}
    for b in brokers(g):  # each broker hangs off its own compute node's switch
        assert list(g[b]) == [g.nodes[b]["compute"]]
        assert g.edges[b, g.nodes[b]["compute"]]["type"] == "access"
    uplinks = [(u, v, d) for u, v, d in g.edges(data=True) if d["type"] == "uplink"]
    assert len(uplinks) == 6 and all(d["params"].bw_mbps == 10_000 for *_, d in uplinks)
    assert all("core" in (u, v) for u, v, _ in uplinks)
    assert any("HighBwTCLink" in n for n in g.graph["notes"])
    ov = overlay_of(g)
    assert all(g.nodes[u]["compute"] != g.nodes[v]["compute"] for u, v in ov.edges)
    check_scot(paper_tree(), 5, ov)
    # tampering breaks the rule
    u, v = next(iter(ov.edges))
    g.nodes[u]["compute"] = g.nodes[v]["compute"]
    assert not placement_ok(g)


def test_compute_nodes_impossible() -> None:
    with pytest.raises(ValueError, match=r"n_nodes: bad value 4: brokers (\w+\d, ){4}\w+\d are "
                                         r"all neighbours of each other and need 5 distinct"):
        scot_compute_nodes_graph(4)
    with pytest.raises(ValueError, match="n_nodes: bad value 0"):
        scot_compute_nodes_graph(0)
    with pytest.raises(ValueError, match="uplink_mbps: bw_mbps: bad value 0"):
        scot_compute_nodes_graph(6, 0)


def test_balanced_placement_proves_impossible() -> None:
    # an odd cycle cannot be 2-coloured: exhaustive search, not just the clique bound
    with pytest.raises(ValueError, match="no balanced placement of 5 brokers on 2"):
        balanced_placement(nx.relabel_nodes(nx.cycle_graph(5), lambda i: f"b{i}"), 2)
    # a path can, and balanced
    path = nx.relabel_nodes(nx.path_graph(7), lambda i: f"b{i}")
    colour = balanced_placement(path, 2)
    assert sorted(Counter(colour.values()).values()) == [3, 4]
    assert all(colour[u] != colour[v] for u, v in path.edges)


@settings(max_examples=25, deadline=None)
@given(trees(), st.integers(2, 4), st.integers(0, 2))
def test_balanced_placement_random_scot(edges: list[tuple[str, str]], m: int,
                                        spare: int) -> None:
    ov = scot_overlay(edges, m)
    k = m + spare
    colour = balanced_placement(ov, k)
    assert all(colour[u] != colour[v] for u, v in ov.edges)
    sizes = Counter(colour.values())
    assert max(sizes.values()) - min(sizes.values()) <= 1 and len(sizes) == min(k, len(ov))


def test_gigabit_cluster() -> None:
    g = gigabit_cluster_graph(paper_ips=True)
    pcs = brokers(g)
    assert pcs == [f"pc{i}" for i in range(1, 13)]
    assert [g.nodes[p]["ip"] for p in pcs] == [
        "10.3.17.74", "10.3.17.97", "10.3.17.234", "10.3.17.90", "10.3.17.98", "10.3.17.64",
        "10.3.17.61", "10.3.17.184", "10.3.17.72", "10.3.17.88", "10.3.17.44", "10.3.17.68"]
    assert list(PAPER_IPS) == [g.nodes[p]["ip"] for p in pcs]
    assert {g.nodes[p]["prefixlen"] for p in pcs} == {24}
    assert all(d["params"].bw_mbps == 1000 and d["type"] == "access"
               for _, _, d in g.edges(data=True))
    assert overlay_of(g).number_of_edges() == 66  # every PC talks to every PC
    plain = gigabit_cluster_graph(4)
    assert [plain.nodes[p]["ip"] for p in brokers(plain)] == [f"10.0.0.{i}" for i in range(1, 5)]
    assert {plain.nodes[p]["prefixlen"] for p in brokers(plain)} == {8}
    with pytest.raises(ValueError, match="n: bad value 11 with paper_ips"):
        gigabit_cluster_graph(11, paper_ips=True)
    with pytest.raises(ValueError, match="paper_ips: bad value 'no'"):
        gigabit_cluster_graph(paper_ips="no")  # type: ignore[arg-type]


def test_overlay_as_links_generic() -> None:
    ov = nx.relabel_nodes(nx.petersen_graph(), lambda i: f"p{i}")
    g = overlay_as_links_graph(ov, P)
    assert g.number_of_edges() == 15 and set(g) == set(ov)
    assert {t for _, _, t in g.edges(data="type")} == {"overlay"}
    assert_p2p_addressing(g)
    assert_valid_names(g)
    first = next(iter(g.edges(data="ips")))
    assert sorted(first[2].values()) == ["10.128.0.1/30", "10.128.0.2/30"]
    lonely = nx.Graph([("a1", "a2")])
    lonely.add_node("a3")
    with pytest.raises(ValueError, match="broker 'a3' has no overlay edge"):
        overlay_as_links_graph(lonely, P)
    with pytest.raises(ValueError, match="node name 'A1'"):
        overlay_as_links_graph(nx.Graph([("A1", "a2")]), P)
    with pytest.raises(ValueError, match="too long: its interface 'abcdefghijk-eth0'"):
        overlay_as_links_graph(nx.Graph([("abcdefghijk", "a2")]), P)
    with pytest.raises(ValueError, match="self-loop"):
        overlay_as_links_graph(nx.Graph([("a1", "a1")]), P)


def test_name_clash_between_broker_and_switch() -> None:
    with pytest.raises(ValueError, match="'s1' is used twice"):
        overlay_on_switch_graph(nx.Graph([("s1", "s2")]), P)
    with pytest.raises(ValueError, match=r"'s1' is used twice.*SCOT region 's'"):
        scot_graph([("a", "s")], 2, mode="switch", params=P)


def test_p2p_pair_bounds() -> None:
    assert p2p_pair(0) == ("10.128.0.1/30", "10.128.0.2/30")
    assert p2p_pair(64) == ("10.128.1.1/30", "10.128.1.2/30")
    assert p2p_pair(MAX_P2P_LINKS - 1) == ("10.191.255.253/30", "10.191.255.254/30")
    with pytest.raises(ValueError):
        p2p_pair(MAX_P2P_LINKS)


def test_link_ports_follow_mininet_numbering() -> None:
    g = scot_graph([("a", "b")], 2, mode="switch", params=P)
    ports = link_ports(g)
    assert ports["s1", "a0"] == {"s1": 1, "a0": 0}
    assert ports["s1", "b1"] == {"s1": 4, "b1": 0}
    check_names(g)


def test_parse_edges() -> None:
    assert parse_edges("x1-x2 + x2-x3") == [("x1", "x2"), ("x2", "x3")]
    with pytest.raises(ValueError, match="edges: bad edge '-x'"):
        parse_edges("a-b,-x")


# -- link parameters ----------------------------------------------------------------------


def test_link_params_valid() -> None:
    p = LinkParams(bw_mbps=10_000, delay_ms=0.5, loss_pct=1, max_queue_pkts=100)
    assert vars(p) == {"bw_mbps": 10_000, "delay_ms": 0.5, "loss_pct": 1, "max_queue_pkts": 100}
    assert LinkParams().bw_mbps is None
    assert LinkParams.from_mapping({"bw_mbps": 5}, "links") == LinkParams(bw_mbps=5)


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"bw_mbps": 0}, r"bw_mbps: bad value 0; allowed: a number > 0 and <= 100000"),
    ({"bw_mbps": 100_001}, r"bw_mbps: bad value 100001"),
    ({"bw_mbps": "100"}, r"bw_mbps: bad value '100'"),
    ({"bw_mbps": True}, r"bw_mbps: bad value True"),
    ({"bw_mbps": float("nan")}, r"bw_mbps: bad value nan"),
    ({"delay_ms": -1}, r"delay_ms: bad value -1; allowed: a number >= 0"),
    ({"loss_pct": 100}, r"loss_pct: bad value 100; allowed: a number >= 0 and < 100"),
    ({"loss_pct": -0.1}, r"loss_pct: bad value -0.1"),
    ({"max_queue_pkts": 0}, r"max_queue_pkts: bad value 0; allowed: an integer >= 1"),
    ({"max_queue_pkts": 10.0}, r"max_queue_pkts: bad value 10.0"),
])
def test_link_params_invalid(kwargs: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        LinkParams(**kwargs)
    with pytest.raises(ValueError, match=rf"spec\.links\.{problem}"):
        LinkParams.from_mapping(kwargs, "spec.links")


def test_link_params_from_mapping_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match=r"links: unknown link parameter\(s\) bw, delay; "
                                         r"allowed: bw_mbps, delay_ms, loss_pct, max_queue_pkts"):
        LinkParams.from_mapping({"bw": 10, "delay": "5ms"}, "links")
    with pytest.raises(ValueError, match="links: bad value 5; allowed: a mapping"):
        LinkParams.from_mapping(5, "links")  # type: ignore[arg-type]


# -- registry ----------------------------------------------------------------------------


def test_registry_builds_every_topology() -> None:
    assert set(TOPOLOGIES) == {"scot", "scot-paper", "gigabit-cluster", "scot-compute-nodes",
                               "overlay", "peers", "kyra-example", "transit-stub"}
    for name in TOPOLOGIES:
        g = build_graph(name, {})
        assert g.graph["name"] == name
        assert_valid_names(g)
        d = describe(g)
        json.dumps(d)
        assert d["counts"]["brokers"] == len(d["brokers"]) == len(brokers(g))
        assert d["counts"]["links"] == g.number_of_edges()


def test_registry_parses_text_params() -> None:
    g = build_graph("scot", {"tree": "f-g+g-h", "m": "4", "mode": "switch"})
    assert describe(g)["counts"]["brokers"] == 12
    g = build_graph("scot-paper", {"hang": "1+1+1+1", "m": 2})
    assert describe(g)["counts"]["brokers"] == 16
    g = build_graph("gigabit-cluster", {"paper_ips": "yes"}, LinkParams(bw_mbps=500))
    assert g.nodes["pc1"]["ip"] == "10.3.17.74"
    assert {d["params"].bw_mbps for *_, d in g.edges(data=True)} == {500}
    g = build_graph("scot-compute-nodes", {"n_nodes": "7", "uplink_mbps": "40000"})
    assert placement_ok(g) and len({g.nodes[b]["compute"] for b in brokers(g)}) == 7
    g = build_graph("overlay", {"edges": [("x1", "x2"), ("x2", "x3")]})
    assert g.number_of_edges() == 2
    g = build_graph("peers", {"n": "40"})
    assert brokers(g)[:2] == ["p0000", "p0001"] and len(brokers(g)) == 40
    assert g.graph["mode"] == "switch" and g.graph["overlay"].number_of_edges() == 0
    with pytest.raises(ValueError, match=r"1\.\.10000"):
        build_graph("peers", {"n": 10_001})
    assert parameters("scot") == {"tree": "a-b,b-c", "m": 3, "mode": "overlay"}


@pytest.mark.parametrize(("name", "params", "problem"), [
    ("ring", {}, r"unknown topology 'ring'; allowed: scot, scot-paper, gigabit-cluster, "
                 r"scot-compute-nodes, overlay"),
    ("scot", {"k": 3}, r"topology 'scot': unknown parameter\(s\) k; allowed: tree, m, mode"),
    ("scot", {"m": "one"}, r"topology 'scot': m: bad value 'one'"),
    ("scot", {"tree": "a-b,b-a"}, r"topology 'scot': tree: edge b-a is given twice"),
    ("scot", {"tree": "a-b,c-d"}, r"topology 'scot': tree: not a tree, it is not connected"),
    ("scot", {"tree": "a-b;rm"}, r"topology 'scot': tree: bad label 'b;rm'"),
    ("scot-paper", {"hang": "3+2"}, r"topology 'scot-paper': hang: bad value \[3, 2\]"),
    ("scot-paper", {"hang": 3}, r"topology 'scot-paper': hang: bad value 3"),
    ("scot", {"tree": 5}, r"topology 'scot': tree: bad value 5"),
    ("scot", {"tree": [("a", "b"), 7]}, r"topology 'scot': tree: bad edge 7"),
    ("gigabit-cluster", {"paper_ips": "maybe"}, r"'gigabit-cluster': paper_ips: bad value"),
    ("gigabit-cluster", {"n": 1}, r"'gigabit-cluster': n: bad value 1"),
    ("scot-compute-nodes", {"n_nodes": 3}, r"'scot-compute-nodes': n_nodes: bad value 3"),
    ("overlay", {"edges": "a1-B2"}, r"topology 'overlay': node name 'B2'"),
    ("overlay", {"edges": [("a", "b", "c", "d")]}, r"topology 'overlay': edges: bad value"),
    ("overlay", {"edges": [(["a"], "b")]}, r"topology 'overlay': edges: bad value"),
])
def test_registry_bad_input(name: str, params: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build_graph(name, params)


def test_describe_switch_mode_lists_overlay_and_physical_links() -> None:
    d = describe(build_graph("scot-compute-nodes", {}))
    assert set(d) == {"name", "mode", "brokers", "links", "counts", "notes"}
    assert d["counts"] == {"brokers": 70, "aLinks": 65, "iLinks": 140, "inner": 20, "edge": 50,
                           "links": 76, "switches": 7}
    types = Counter((link["type"], link["physical"]) for link in d["links"])
    assert types == {("aLink", False): 65, ("iLink", False): 140, ("access", True): 70,
                     ("uplink", True): 6}
    b = d["brokers"][0]
    assert set(b) == {"name", "cluster", "region", "kind", "host", "ip"}
    assert b["kind"] in ("inner", "edge") and b["host"].startswith("cn")
    assert len(d["notes"]) >= 2
    o = describe(build_graph("scot-paper", {}, LinkParams(bw_mbps=50, delay_ms=3)))
    assert {(link["type"], link["bw_mbps"], link["delay_ms"], link["physical"])
            for link in o["links"]} == {("aLink", 50, 3, True), ("iLink", 50, 3, True)}


# -- import structure -------------------------------------------------------------------

TOPOLOGIES_DIR = Path(__file__).resolve().parents[1] / "topologies"


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def import_graph(package_dir: Path, package: str) -> nx.DiGraph:
    """Module -> what it imports, for the modules of one flat package: edges to its own
    modules, and to the top-level name of anything else (``networkx``, ``mininet``).

    Every ``import``/``from`` statement counts, at module level or inside a function (a
    lazy import only hides a cycle until that function runs); those under
    ``if TYPE_CHECKING:`` do not, as they never run.
    """
    modules = {package if p.stem == "__init__" else f"{package}.{p.stem}": p
               for p in sorted(package_dir.glob("*.py"))}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 1:  # relative; every module here sits in the package itself
                    base = f"{package}.{base}" if base else package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                own = target
                while own and own not in modules:
                    own = own.rpartition(".")[0]
                target = own or target.partition(".")[0]
                if target and target != name:
                    g.add_edge(name, target)
    return g


def test_import_graph_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pkg.c import C\n"
                              "def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text("import pkg.a\nfrom . import c\nimport os.path\n")
    (pkg / "c.py").write_text("from pkg import b\n")
    g = import_graph(pkg, "pkg")
    assert set(g.edges) == {("pkg.a", "typing"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.a"),
                            ("pkg.b", "pkg.c"), ("pkg.b", "os"), ("pkg.c", "pkg.b")}


def test_no_import_cycle_among_topologies_modules() -> None:
    g = import_graph(TOPOLOGIES_DIR, "topologies")
    assert {"topologies.scot", "topologies.registry", "topologies.mininet_topo",
            "topologies.custom"} <= set(g)
    # the walk sees the imports that once closed the circle
    assert {("topologies.custom", "topologies.mininet_topo"),
            ("topologies.mininet_topo", "topologies.registry"),
            ("topologies.registry", "topologies.scot")} <= set(g.edges)
    cycles = [" -> ".join([*c, c[0]]) for c in nx.simple_cycles(g)]
    assert cycles == [], f"import cycles: {'; '.join(cycles)}"
    # the graph builders stay pure: nothing they import reaches Mininet
    for builder in ("topologies.scot", "topologies.gigabit_cluster",
                    "topologies.compute_nodes", "topologies.registry"):
        assert "mininet" not in nx.descendants(g, builder), builder
    assert "mininet" in nx.descendants(g, "topologies.custom")


def test_a_pinned_host_stays_on_its_server_and_counts_in_its_load() -> None:
    from topologies.placement import place_on_servers
    g = nx.Graph()
    g.add_nodes_from(["h1", "h2", "h3", "h4"], kind="broker")
    g.add_node("s1", kind="switch")
    g.add_edges_from(("s1", h) for h in ["h1", "h2", "h3", "h4"])
    demand = {"h1": 1.0, "h2": 1.0, "h3": 1.0, "h4": 3.0}
    free = place_on_servers(g, demand, ["localhost", "b"])
    assert free["h4"] == "localhost"  # largest first, on the first server
    pinned = place_on_servers(g, demand, ["localhost", "b"], {"h4": "b"})
    assert pinned["h4"] == "b"
    # h4's 3 count on b, so the other three fill localhost first.
    assert [pinned[h] for h in ("h1", "h2", "h3")] == ["localhost"] * 3
    with pytest.raises(ValueError, match="pinned host's server"):
        place_on_servers(g, demand, ["localhost", "b"], {"h4": "c"})
