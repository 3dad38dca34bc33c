"""Multicast-based routing (``multicast``): the cells a filter wants against brute force,
the derived groups (every server that wants a cell is in its group, trees are latency
MSTs, entries the nearest members), and on random servers and stock workloads every
publication carried to exactly its group's members, once each, through the nearest
member when the publisher's server is not one."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kyra_cases import (
    EXAMPLE_EVENTS,
    EXAMPLE_MULTICAST,
    cases,
    example_workload,
    run,
)

from nodes.cores import CORES, resolve_params
from nodes.cores.interface import FromClient, Record
from nodes.cores.multicast import (
    MulticastCore,
    cell_key,
    cell_of,
    derive_layout,
    wanted_cells,
)
from nodes.cores.zones import zone_index
from nodes.messages import Message, MsgType
from nodes.model import Predicate, matches
from nodes.workloads.interests import subscriptions_by_broker
from topologies.kyra_example import example_latency

# ---- the cells a filter wants ----------------------------------------------------------------

X_POOL = [0, 1, 2, 2.5, 3, 5]
S_POOL = ["", "a", "a\x00", "ab", "b", "c"]


@st.composite
def predicates(draw: st.DrawFn) -> Predicate:
    attr = draw(st.sampled_from(["x", "s"]))
    pool = X_POOL if attr == "x" else S_POOL
    op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "range"]))
    value = draw(st.sampled_from(pool))
    if op != "range":
        return Predicate(attr, op, value)
    return Predicate(attr, op, value, draw(st.sampled_from([v for v in pool if v >= value])))


def _probes(attr: str, constants: set[Any]) -> list[Any]:
    """Values that witness every non-empty interval whose bounds are ``constants``:
    strings and their successors (``s + '\\x00'``); numbers, the points between and
    beyond them."""
    if attr == "s":
        return sorted({"", *constants, *(c + "\x00" for c in constants)})
    cs = sorted(constants)
    return sorted({cs[0] - 1, cs[-1] + 1, *cs, *((a + b) / 2 for a, b in itertools.pairwise(cs))})


@settings(max_examples=400, deadline=None)
@given(st.lists(predicates(), max_size=3).map(tuple),
       st.lists(st.sampled_from(X_POOL), max_size=3).map(sorted),
       st.lists(st.sampled_from(S_POOL), max_size=3).map(sorted),
       st.booleans())
def test_wanted_cells_against_brute_force(f: tuple[Predicate, ...], x_cuts: list[Any],
                                          s_cuts: list[Any], both: bool) -> None:
    """A cell is wanted iff some event in it (carrying both attributes) matches the
    filter; the cells cut x, or x and s."""
    attrs = ("x", "s") if both else ("x",)
    cuts = (tuple(x_cuts), tuple(s_cuts))[:len(attrs)]
    probes = [_probes(a, {p.value for p in f if p.attr == a}
                      | {p.high for p in f if p.attr == a and p.high is not None}
                      | set(c) | ({0} if a == "x" else {""}))
              for a, c in (("x", x_cuts), ("s", s_cuts))]
    want = {cell_of(ev, attrs, cuts) for ev in (dict(zip(("x", "s"), vs, strict=True))
                                                for vs in itertools.product(*probes))
            if matches(f, ev)}
    assert set(wanted_cells(f, attrs, cuts)) == want


# ---- the derived groups ------------------------------------------------------------------------

def _resolved(params: dict[str, Any]) -> dict[str, Any]:
    return resolve_params("multicast", CORES["multicast"].params, params)


@settings(max_examples=80, deadline=None)
@given(cases())
def test_groups_hold_every_interested_server_and_trees_are_msts(case: tuple) -> None:
    latency, w, calibration, params = case
    resolved = _resolved(params["multicast"])
    layout = derive_layout(latency, subscriptions_by_broker(w), calibration, resolved)
    group_of = {c: g for g, (cells, _) in enumerate(layout.groups) for c in cells}
    cells = [cell for cells, _ in layout.groups for cell in cells]
    assert len(cells) == len(set(cells)) == len(list(itertools.product(
        *(range(len(c) + 1) for c in layout.cuts))))  # a partition of every cell
    assert len(layout.groups) <= resolved["groups"]
    # Every server with a subscription an event matches is in the event's group.
    for server, filters in subscriptions_by_broker(w).items():
        for ev in calibration:
            if any(matches(f, ev) for f in filters):
                cell = cell_of(ev, layout.cell_attrs, layout.cuts)
                assert server in layout.groups[group_of[cell]][1]
    for (_, members), edges in zip(layout.groups, layout.trees, strict=True):
        tree = nx.Graph(edges)
        tree.add_nodes_from(members)
        assert set(tree) == set(members) and (not members or nx.is_tree(tree))
        full = nx.complete_graph(members)
        for a, b in full.edges:
            full.edges[a, b]["w"] = latency[a][b]
        assert sum(latency[a][b] for a, b in edges) == pytest.approx(
            nx.minimum_spanning_tree(full, weight="w").size(weight="w"))
    for server, by_group in layout.entry.items():
        for g, member in by_group.items():
            members = layout.groups[g][1]
            assert server not in members
            assert latency[server][member] == min(latency[server][m] for m in members)


def test_the_groups_param_bounds_the_groups_and_kmeans_gives_other_groups_than_fig3() -> None:
    """Fig. 3 is not a K-means result (tests/test_multicast_groups.py); ours still
    delivers event 9 to H alone."""
    layout = derive_layout(example_latency(), subscriptions_by_broker(example_workload()),
                           EXAMPLE_EVENTS, _resolved(EXAMPLE_MULTICAST))
    assert len(layout.groups) == 3
    assert {frozenset(c for (c,) in cells) for cells, _ in layout.groups} != {
        frozenset({5, 8}), frozenset({0, 1, 4, 6}), frozenset({2, 3, 7, 9})}
    result, _, _ = run("multicast", example_latency(), example_workload(), EXAMPLE_MULTICAST,
                       EXAMPLE_EVENTS)
    assert result.deliveries == {("p", 1): ["sh9"]}


# ---- forwarding on random servers and workloads ------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(cases())
def test_each_publication_reaches_exactly_its_groups_members_once(case: tuple) -> None:
    latency, w, calibration, params = case
    resolved = _resolved(params["multicast"])
    layout = derive_layout(latency, subscriptions_by_broker(w), calibration, resolved)
    result, cores, sent = run("multicast", latency, w, params["multicast"], calibration)
    broker_of = {o.msg.key: o.broker for o in w.ops if o.msg.type is MsgType.PUBLISH}
    attrs_of = {o.msg.key: o.msg.payload["attrs"] for o in w.ops
                if o.msg.type is MsgType.PUBLISH}
    got = Counter((m.key, link) for _, link, m in sent if m.type is MsgType.PUBLISH)
    want: Counter[tuple[tuple[str, int], str]] = Counter()
    for key, attrs in attrs_of.items():
        cell = cell_of(attrs, layout.cell_attrs, layout.cuts)
        members = next(m for cells, m in layout.groups if cell in cells)
        publisher = broker_of[key]
        want.update((key, m) for m in members if m != publisher)
    assert got == want
    assert {(min(b, link), max(b, link)) for b, link, _ in sent} <= layout.edges()
    received = sum(c.counters()["events_matched"] for c in cores.values())
    in_groups = sum(len(next(m for cells, m in layout.groups
                             if cell_of(a, layout.cell_attrs, layout.cuts) in cells))
                    for a in attrs_of.values())
    assert received == in_groups  # every member matches each of its group's events once
    assert "unhandled" not in result.record_counts


def test_a_publication_without_a_cell_attribute_is_reported() -> None:
    core = MulticastCore("a", [], {"cell_axes": ["x"], "cell_cuts": [[5]],
                                   "group_of": {cell_key((0,)): 0}, "trees": {"0": []},
                                   "entry": {}})
    out = core.handle(FromClient("p", Message(MsgType.PUBLISH, 1, "p", 0,
                                              {"attrs": {"y": 1}})), 0.0)
    assert [a.kind for a in out if isinstance(a, Record)] == ["unhandled"]
    assert zone_index([5], 4) == 0


def test_missing_derived_params_are_named() -> None:
    with pytest.raises(ValueError, match="derive_layout"):
        MulticastCore("a", [], {})
