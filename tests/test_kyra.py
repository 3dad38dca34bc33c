"""Kyra (``kyra``) and its two baselines (``siena``, ``multicast``) on random servers and
stock workloads: exactly once against the oracle, through unsubscriptions and new
subscriptions, every table emptied when everything is withdrawn; Kyra's derived layout
(cliques, balanced continuous zones, trees as MSTs over the servers whose zones overlap
theirs) against brute force; each clique notified once per event."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kyra_cases import POINTS, cases, euclidean_latency, run
from scot_cases import pairs

from nodes.cores import CORES, make_core, resolve_params
from nodes.cores.interface import FromClient, Record
from nodes.cores.kyra import KyraCore, derive_layout
from nodes.cores.zones import balanced_cuts, zone_filter, zone_index
from nodes.messages import Message, MsgType
from nodes.model import matches
from nodes.workloads.oracle import expected_deliveries

# ---- balanced continuous zones ---------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=60), st.integers(1, 9))
def test_balanced_cuts_against_their_definition(sample: list[int], n: int) -> None:
    """n - 1 non-decreasing cuts, each a sample value; zone i holds the values in
    [cut i-1, cut i); cut i is the smallest value with at least i/n of the sample
    below it (else the largest value); on distinct values the zones differ by at most
    one value."""
    cuts = balanced_cuts(sample, n)
    assert len(cuts) == n - 1 and cuts == sorted(cuts) and set(cuts) <= set(sample)
    for i, cut in enumerate(cuts, start=1):
        enough = [v for v in sorted(set(sample))
                  if sum(x < v for x in sample) >= i * len(sample) / n]
        assert cut == (enough[0] if enough else max(sample))
    counts = Counter(zone_index(cuts, v) for v in sample)
    for v in sample:  # the zone index and the zone's filter agree
        assert matches(zone_filter("x", cuts, zone_index(cuts, v)), {"x": v})
    if len(set(sample)) == len(sample):
        sizes = [counts[i] for i in range(n)]
        assert max(sizes) - min(sizes) <= 1


def test_balanced_cuts_refuse_bad_input() -> None:
    for sample, n in (([], 2), ([1], 0), ([1, "a"], 2)):
        with pytest.raises(ValueError):
            balanced_cuts(sample, n)


# ---- Kyra's layout against brute force -------------------------------------------------------

def _resolved(algorithm: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return resolve_params(algorithm, CORES[algorithm].params, params)


@settings(max_examples=150, deadline=None)
@given(POINTS, st.lists(st.integers(0, 40), min_size=1, max_size=40),
       st.sampled_from([0.0, 5.0, 12.0, 30.0]), st.integers(1, 5), st.integers(0, 6))
def test_layout_against_brute_force(points: dict[str, tuple[int, int]], sample: list[int],
                                    max_distance_ms: float, max_size: int,
                                    trees: int) -> None:
    latency = euclidean_latency(points)
    params = _resolved("kyra", {"max_distance_ms": max_distance_ms,
                                "max_clique_size": max_size, "trees": trees,
                                "zone_attr": "x"})
    layout = derive_layout(latency, [{"x": v} for v in sample], params)
    servers = sorted(points)
    assert sorted(s for c in layout.cliques for s in c) == servers
    for clique in layout.cliques:
        assert len(clique) <= max_size
        assert all(latency[a][b] <= max_distance_ms for a, b in itertools.combinations(clique, 2))
    n_trees = trees or max(len(c) for c in layout.cliques)
    assert len(layout.tree_members) == len(layout.global_cuts) + 1 == n_trees
    # Every value lies in exactly one zone per clique (probe between and beyond the cuts).
    probes = sorted({*sample, *(v + d for v in sample for d in (-0.5, 0.5))})
    in_zone = {s: {v for v in probes if matches(layout.zone_of(s), {"x": v})} for s in servers}
    for clique in layout.cliques:
        for v in probes:
            assert sum(v in in_zone[s] for s in clique) == 1
    for t, (members, edges) in enumerate(zip(layout.tree_members, layout.tree_edges,
                                             strict=True)):
        tree_zone = {v for v in probes if matches(zone_filter("x", layout.global_cuts, t),
                                                  {"x": v})}
        assert set(members) == {s for s in servers if in_zone[s] & tree_zone}
        tree = nx.Graph(edges)
        tree.add_nodes_from(members)
        assert set(tree) == set(members) and (not members or nx.is_tree(tree))
        full = nx.Graph((a, b, {"w": latency[a][b]})
                        for a, b in itertools.combinations(members, 2))
        assert sum(latency[a][b] for a, b in edges) == pytest.approx(
            nx.minimum_spanning_tree(full, weight="w").size(weight="w"))


# ---- exactly once against the oracle, for all three ------------------------------------------

ALGORITHMS = ("siena", "multicast", "kyra")


@settings(max_examples=300, deadline=None)
@given(cases())
def test_all_three_deliver_the_oracle_set_exactly_once(case: tuple) -> None:
    latency, w, calibration, params = case
    want = pairs(expected_deliveries(w))
    for algorithm in ALGORITHMS:
        result, cores, sent = run(algorithm, latency, w, params[algorithm], calibration)
        assert pairs(result.deliveries) == want, algorithm  # duplicates would show
        assert "unhandled" not in result.record_counts, algorithm
        counters = {b: c.counters() for b, c in cores.items()}
        # Everything was withdrawn: no subscription is left anywhere.
        assert all(c["local_subscriptions"] == 0 for c in counters.values()), algorithm
        if algorithm != "multicast":  # multicast keeps no routing entries per subscription
            assert all(c["routing_entries"] == 0 for c in counters.values()), algorithm
        if algorithm == "kyra":
            assert all(c["proxy_subscriptions"] == 0 for c in counters.values())
            # Every message crosses a pair a fixed overlay of the layout's edges holds.
            layout = derive_layout(latency, calibration, _resolved("kyra", params["kyra"]))
            assert {(min(b, link), max(b, link)) for b, link, _ in sent} <= layout.edges()
            # One NOTIFY per publication and origin server: each clique notified once.
            notify = Counter((m.key, link) for _, link, m in sent if m.type is MsgType.NOTIFY)
            assert set(notify.values()) <= {1}


def test_a_publication_without_the_zone_attribute_is_reported() -> None:
    core = make_core("kyra", "a", ["b"], {"clique": ["a", "b"], "clique_cuts": [5],
                                          "global_cuts": [], "routing_trees": {"0": []},
                                          "zone_attr": "x"})
    out = core.handle(FromClient("p", Message(MsgType.PUBLISH, 1, "p", 0,
                                              {"attrs": {"y": 1}})), 0.0)
    assert [a.kind for a in out if isinstance(a, Record)] == ["unhandled"]


def test_missing_derived_params_are_named() -> None:
    with pytest.raises(ValueError, match="derive_layout"):
        KyraCore("a", [], {"zone_attr": "x"})


def test_default_trees_is_the_largest_clique() -> None:
    points = {"a": (0, 0), "b": (0, 1), "c": (0, 2), "d": (50, 0), "e": (50, 1)}
    layout = derive_layout(euclidean_latency(points), [{"x": v} for v in range(12)],
                           _resolved("kyra", {"max_distance_ms": 5.0, "zone_attr": "x"}))
    assert [list(c) for c in layout.cliques] == [["a", "b", "c"], ["d", "e"]]
    assert len(layout.tree_members) == 3
    assert math.isclose(len(layout.global_cuts), 2)
