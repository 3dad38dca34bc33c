"""The ``transit-stub`` topology: servers on the stub routers of a transit-stub underlay,
as specs, ``pubsublab sim`` and ``pubsublab run`` use it. Checked against networkx over
the router graph: no root, no Mininet."""

from __future__ import annotations

import networkx as nx
import pytest

from experiments.plan import compile_plan, pair_figures
from experiments.spec import SpecError, parse_spec
from nodes.cores.kyra import derive_layout
from nodes.workloads.interests import publication_attrs
from topologies.graph import brokers, overlay_of
from topologies.links import LinkParams
from topologies.registry import build_graph
from topologies.transit_stub import TS400


@pytest.fixture(scope="module")
def ts() -> nx.Graph:
    return build_graph("transit-stub", {"preset": "ts400", "n_servers": 24, "seed": 3,
                                        "placement_seed": 5})


def test_requested_servers_on_distinct_stub_routers_of_the_requested_underlay(
        ts: nx.Graph) -> None:
    underlay = ts.graph["underlay"]
    assert underlay.number_of_nodes() == TS400.n_routers == 400
    assert len(brokers(ts)) == 24
    routers = list(ts.graph["placement"].values())
    assert len(set(routers)) == 24
    assert all(underlay.nodes[r]["kind"] == "stub" for r in routers)


def test_every_pair_meets_the_underlays_shortest_path_delay(ts: nx.Graph) -> None:
    underlay, place = ts.graph["underlay"], ts.graph["placement"]
    names = brokers(ts)
    for a in names[:6]:
        dist = nx.single_source_dijkstra_path_length(underlay, place[a], weight="delay_ms")
        for b in names:
            assert ts.graph["latency_ms"][a][b] == pytest.approx(dist[place[b]])
            assert pair_figures(ts, a, b)[1] == pytest.approx(dist[place[b]])
    # Per-class delays reach the servers: a pair in one stub domain meets intra-stub
    # links only (multiples of 2 ms), one across transit domains at least one 50 ms link.
    far = max(names, key=lambda b: ts.graph["latency_ms"][names[0]][b])
    assert ts.graph["latency_ms"][names[0]][far] >= TS400.inter_transit_delay_ms


def test_the_fixed_overlay_is_the_servers_latency_mst_and_connected(ts: nx.Graph) -> None:
    overlay = overlay_of(ts)
    complete = nx.Graph()
    lat = ts.graph["latency_ms"]
    complete.add_weighted_edges_from((a, b, lat[a][b]) for a in lat for b in lat if a < b)
    assert nx.is_tree(overlay)
    assert sum(lat[a][b] for a, b in overlay.edges) == pytest.approx(
        nx.minimum_spanning_tree(complete).size(weight="weight"))


def test_same_parameters_same_topology_other_seed_another(ts: nx.Graph) -> None:
    again = build_graph("transit-stub", {"preset": "ts400", "n_servers": "24", "seed": "3",
                                         "placement_seed": 5})
    assert again.graph["latency_ms"] == ts.graph["latency_ms"]
    assert sorted(overlay_of(again).edges) == sorted(overlay_of(ts).edges)
    other = build_graph("transit-stub", {"preset": "ts400", "n_servers": 24, "seed": 4,
                                         "placement_seed": 5})
    assert other.graph["latency_ms"] != ts.graph["latency_ms"]


def test_access_links_carry_the_given_rate() -> None:
    g = build_graph("transit-stub", {"preset": "ts400", "n_servers": 4},
                    LinkParams(bw_mbps=10))
    assert pair_figures(g, "srv000", "srv001")[0] == 10


@pytest.mark.parametrize("params, field", [({"preset": "ts9"}, "preset"),
                                           ({"n_servers": 0}, "n_servers"),
                                           ({"n_servers": 385}, "n_servers"),
                                           ({"placement_seed": "x"}, "placement_seed")])
def test_bad_parameters_are_one_line_errors(params: dict, field: str) -> None:
    """Each error names the parameter the spec set (``n_servers``, not the placement's
    own ``n``)."""
    with pytest.raises(ValueError, match=f"'transit-stub': {field}: bad value"):
        build_graph("transit-stub", {"preset": "ts400", **params})


def test_a_plan_derives_kyra_from_the_underlays_latencies() -> None:
    spec = parse_spec({
        "name": "ts", "topology": {"name": "transit-stub",
                                   "params": {"preset": "ts400", "n_servers": 16}},
        "seed": 1, "workload": {"kind": "stock", "mode": "meghdoot", "n_publishers": 2,
                                "n_subscribers": 20, "pubs_per_publisher": 3},
        "routing": {"links": "on-demand", "algorithms": ["kyra", "siena"],
                    "params": {"kyra": {"max_distance_ms": 30}}}})
    plan = compile_plan(spec, netem=False)
    kyra, siena = plan.algorithms
    layout = derive_layout(plan.graph.graph["latency_ms"], publication_attrs(plan.workload),
                           kyra.params)
    assert kyra.derived == layout.broker_params()
    # Siena's tree is the servers' latency MST, the fixed overlay.
    tree = {frozenset((a, b)) for a in siena.derived
            for b in siena.derived[a]["tree_neighbours"]}
    assert tree == {frozenset(e) for e in overlay_of(plan.graph).edges}


def _stock_spec(**workload: object) -> dict:
    return {"name": "ts", "topology": {"name": "transit-stub",
                                       "params": {"preset": "ts400", "n_servers": 8}},
            "seed": 1, "workload": {"kind": "stock", "mode": "meghdoot", "n_publishers": 2,
                                    "n_subscribers": 10, "pubs_per_publisher": 4, **workload},
            "routing": {"links": "on-demand", "algorithms": ["kyra"]}}


def test_calibration_seed_gives_kyra_an_independent_sample() -> None:
    own = compile_plan(parse_spec(_stock_spec()), netem=False)
    other = compile_plan(parse_spec(_stock_spec(calibration_seed=9)), netem=False)
    sample = compile_plan(parse_spec({**_stock_spec(), "seed": 9}), netem=False)
    assert "calibration" not in own.workload.meta
    assert other.workload.meta["calibration"] == publication_attrs(sample.workload)
    assert other.workload.ops == own.workload.ops
    assert tuple(other.algorithms[0].derived["srv000"]["global_cuts"]) == derive_layout(
        other.graph.graph["latency_ms"], publication_attrs(sample.workload),
        other.algorithms[0].params).global_cuts
    with pytest.raises(SpecError, match="calibration_seed: bad value"):
        compile_plan(parse_spec(_stock_spec(calibration_seed="x")), netem=False)


def test_emulated_brokers_add_the_underlays_latency_themselves(tmp_path) -> None:
    from experiments.runs.brokers import broker_configs
    spec = _stock_spec()
    plan = compile_plan(parse_spec(spec), netem=True)
    configs = broker_configs(plan, "kyra", emulate_link=False, log_dir=tmp_path)
    lat = plan.graph.graph["latency_ms"]
    for b, c in configs.items():
        assert c["emulate_link"] is True  # netem or not: no emulated link carries it
        assert {p: v["delay_ms"] for p, v in c["peers"].items()} == pytest.approx(
            {p: lat[b][p] for p in lat if p != b})
    assert all(e.mechanism["delay_ms"].startswith("in-broker") for e in plan.edges)
