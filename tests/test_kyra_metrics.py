"""Kyra's metrics (nodes.metrics.kyra) on hand-made logs over a small underlay, against
figures counted by hand, and on a simulated transit-stub run against its own logs."""

from __future__ import annotations

import networkx as nx
import pytest

from nodes.metrics.kyra import load_stats, routing_load

# Routers 0-1-2-3 on a line (delays 1, 2, 4 ms) and 1-4 (8 ms); servers on 0, 3, 4, 2.
UNDERLAY = nx.Graph()
UNDERLAY.add_weighted_edges_from([(0, 1, 1.0), (1, 2, 2.0), (2, 3, 4.0), (1, 4, 8.0)],
                                 weight="delay_ms")
PLACE = {"a": 0, "b": 3, "c": 4, "d": 2}
LAT = {s: {t: nx.shortest_path_length(UNDERLAY, PLACE[s], PLACE[t], weight="delay_ms")
           for t in PLACE} for s in PLACE}
HOPS = {s: {t: nx.shortest_path_length(UNDERLAY, PLACE[s], PLACE[t]) for t in PLACE}
        for s in PLACE}


def rec(ev: str, node: str, link: str, type_: str = "PUBLISH", **kw: object) -> dict:
    return {"ev": ev, "node": node, "link": link, "type": type_, "origin": "p",
            "msg_id": 1, **kw}


def test_one_event_cost_tree_and_unwanted_servers() -> None:
    # Published at a; a -> d -> b (b delivers), d relays without wanting it; a -> c
    # notifies c, whose client gets it.
    records = [rec("recv", "a", "p"), rec("send", "a", "d"), rec("send", "d", "b"),
               rec("send", "a", "c", "NOTIFY"), rec("deliver", "b", "sb"),
               rec("deliver", "c", "sc"),
               {"ev": "record", "kind": "counters", "node": "a", "routing_entries": 3,
                "local_subscriptions": 1, "sub_messages": 4, "match_ops": 2}]
    topo = nx.Graph(latency_ms=LAT, hops=HOPS, underlay=UNDERLAY, placement=PLACE)
    m = routing_load(records, PLACE, topo)
    ev = m["per_event"]
    assert ev["net_hops"] == 2 + 1 + 2 == HOPS["a"]["d"] + HOPS["d"]["b"] + HOPS["a"]["c"]
    assert ev["net_ms"] == 3 + 4 + 9
    # Shortest-path tree a -> {b, c}: links 0-1, 1-2, 2-3, 1-4 (4 links, 15 ms).
    assert ev["hops_ratio"] == pytest.approx(5 / 4)
    assert ev["ms_ratio"] == pytest.approx(16 / 15)
    assert ev["traversed"] == 4
    assert ev["unwanted"] == 1  # d
    storage = m["per_server"]["storage"]
    assert storage == {"mean": 1.0, "max": 4.0, "max_over_mean": 4.0, "jain": 0.25}


def test_load_index_by_definition() -> None:
    assert load_stats([2, 2, 2])["jain"] == 1.0
    assert load_stats([0, 0, 5, 0])["jain"] == 0.25
    xs = [1, 2, 3, 6]
    assert load_stats(xs)["jain"] == pytest.approx(sum(xs) ** 2 / (4 * sum(x * x for x in xs)))
    assert load_stats(xs)["max_over_mean"] == 2.0


def test_a_simulated_transit_stub_run_reports_them(tmp_path) -> None:
    import json
    import subprocess
    import sys
    spec = tmp_path / "ts.yaml"
    spec.write_text(
        "name: ts\ntopology: {name: transit-stub, params: {preset: ts400, n_servers: 16}}\n"
        "seed: 2\nscale: 0.01\nworkload: {kind: stock, mode: meghdoot, n_publishers: 3, "
        "n_subscribers: 40, pubs_per_publisher: 5, phase_gap_s: 3}\n"
        "routing: {links: on-demand, algorithms: [kyra, siena, multicast], "
        "params: {kyra: {max_distance_ms: 30}, multicast: {groups: 4}}}\n")
    out = subprocess.run([sys.executable, "-m", "experiments.cli", "sim", str(spec), "--out",
                          str(tmp_path), "--json"], capture_output=True, text=True, check=True)
    summaries = json.loads(out.stdout.strip().splitlines()[-1])
    for name, s in summaries.items():
        assert (s["delivered"], s["missing"], s["duplicates"]) == (s["expected_deliveries"],
                                                                  0, 0), name
        load = s["routing_load"]
        assert load["events"] == s["published"] == 15
        assert load["servers"] == 16
    # Siena broadcasts every subscription: each server stores all 40, once.
    assert summaries["siena"]["routing_load"]["per_server"]["storage"] == {
        "mean": 40.0, "max": 40.0, "max_over_mean": 1.0, "jain": 1.0}
    # Siena's messages follow the tree: each reaches a new server.
    ev = summaries["siena"]["routing_load"]["per_event"]
    assert ev["traversed"] == pytest.approx(ev["messages"] + 1)
