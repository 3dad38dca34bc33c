"""Siena filter-based routing (``siena``) and subscription covering (``covers``): exactly
once against the oracle on random trees with and without covering, covering's message
savings, and the tree rule (the Kyra paper's Fig. 2 is in ``test_kyra_example.py``)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scot_cases import pairs

from nodes.cores import make_core, overlay_params, resolve_params
from nodes.cores.interface import Action, Arrived, Event, FromClient, RoutingCore, Send
from nodes.cores.siena import PARAMS, SienaCore
from nodes.messages import Message, MsgType
from nodes.model import (
    Filter,
    Predicate,
    Schema,
    ValidationError,
    covers,
    filter_from_json,
    matches,
)
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries

P = Predicate

# ---- covers -------------------------------------------------------------------------

INT_SCHEMA = Schema({"x": "int"})


@pytest.mark.parametrize(("f", "g", "schema", "want"), [
    ((), (P("x", "=", 1),), None, True),  # the empty filter covers everything
    ((P("x", "=", 1),), (), None, False),  # g matches notifications without x
    ((P("x", ">=", 3),), (P("x", "range", 4, 6),), None, True),
    ((P("x", "range", 4, 6),), (P("x", ">=", 3),), None, False),
    ((P("x", ">", 3),), (P("x", ">=", 3),), None, False),  # 3 escapes
    ((P("x", ">=", 3),), (P("x", ">", 3),), None, True),
    ((P("x", "<", 5),), (P("x", "<=", 5),), None, False),
    ((P("x", "<=", 5),), (P("x", "<", 5),), None, True),
    ((P("x", "range", 1, 5),), (P("x", "=", 1),), None, True),
    ((P("x", ">", 1),), (P("x", "=", 1),), None, False),
    ((P("x", ">=", 3),), (P("x", ">", 2),), None, False),  # dense: 2.5 escapes
    ((P("x", ">=", 3),), (P("x", ">", 2),), INT_SCHEMA, True),  # integers: x > 2 is x >= 3
    ((P("x", "<", 3),), (P("x", "<=", 2.5),), INT_SCHEMA, True),
    ((P("x", ">=", 1),), (P("x", ">=", 2), P("s", "=", "a")), None, True),  # s left free
    ((P("x", ">=", 1), P("s", ">=", "")), (P("x", ">=", 2),), None, False),
    ((P("x", "=", 1),), (P("x", ">", 5), P("x", "<", 3)), None, True),  # g matches nothing
    ((P("s", ">=", "a"),), (P("s", "=", "ab"),), None, True),
    ((P("s", "<", "b"),), (P("s", "<=", "a"),), None, True),
    ((P("s", "<", "b"),), (P("s", "<=", "b"),), None, False),
    ((P("s", ">", "a"),), (P("s", ">=", "a\x00"),), None, True),  # 'a\0' succeeds 'a'
    ((P("s", ">=", "a\x00"),), (P("s", ">", "a"),), None, True),
    ((P("s", "<=", "a"),), (P("s", "<", "a\x00"),), None, True),
    ((P("s", ">", "a"),), (P("s", ">=", "a"),), None, False),
])
def test_covers_hand_cases(f: Filter, g: Filter, schema: Schema | None, want: bool) -> None:
    assert covers(f, g, schema) is want


def test_covers_refuses_str_against_number() -> None:
    with pytest.raises(ValidationError, match="mix"):
        covers((P("x", "=", "a"),), (P("x", "=", 1),))


# Small pools, so that random filters meet often; notifications also carry values
# between and beyond the constants, and one attribute in ten is missing.
SCHEMA = Schema({"x": "int", "y": "float", "s": "str"})
POOLS: dict[str, list[Any]] = {"x": list(range(-2, 7)),
                               "y": [v / 2 for v in range(-2, 13)] + [2.25],
                               "s": ["", "a", "a\x00", "ab", "b", "ba", "c"]}
NOTE_VALUES: dict[str, list[Any]] = {
    "x": list(range(-4, 9)), "y": [v / 8 for v in range(-24, 64)],
    "s": [*POOLS["s"], "a\x00\x00", "aa", "abc", "bb", "d"],
}
_MISSING = object()


# Tiny pools on one or two attributes, so that bounds meet at the same constant or at a
# successor (x > 2 against x >= 3, s > 'a' against s >= 'a\x00') often enough.
TINY_POOLS: dict[str, list[Any]] = {"x": [0, 1, 2, 3], "y": [0, 0.5, 1],
                                    "s": ["", "a", "a\x00", "b"]}


@st.composite
def predicates(draw: st.DrawFn, pools: Mapping[str, list[Any]] = POOLS) -> Predicate:
    attr = draw(st.sampled_from(sorted(pools)))
    op = draw(st.sampled_from(["=", "<", "<=", ">", ">=", "range"]))
    value = draw(st.sampled_from(pools[attr]))
    if op != "range":
        return P(attr, op, value)
    return P(attr, op, value, draw(st.sampled_from([v for v in pools[attr] if v >= value])))


filters = st.lists(predicates(), max_size=3).map(tuple)


@st.composite
def filter_pairs(draw: st.DrawFn) -> tuple[Filter, Filter]:
    """Two filters over the same one or two attributes: wide pools or tiny ones."""
    pools = draw(st.sampled_from([POOLS, TINY_POOLS]))
    attrs = draw(st.lists(st.sampled_from(sorted(pools)), min_size=1, max_size=2, unique=True))
    some = predicates({a: pools[a] for a in attrs})
    return (tuple(draw(st.lists(some, max_size=3))), tuple(draw(st.lists(some, max_size=3))))


def _note(values: Mapping[str, Any]) -> dict[str, Any]:
    return {a: v for a, v in values.items() if v is not _MISSING}


@settings(max_examples=400, deadline=None)
@given(filters, filters, st.lists(st.fixed_dictionaries(
    {a: st.sampled_from([*vs, _MISSING]) for a, vs in NOTE_VALUES.items()}), max_size=30))
def test_covers_is_sound_on_sampled_notifications(f: Filter, g: Filter,
                                                  samples: list[dict[str, Any]]) -> None:
    assert covers(f, f) and covers(f, f, SCHEMA)
    for schema in (None, SCHEMA):
        if covers(f, g, schema):
            for note in map(_note, samples):
                assert not matches(g, note) or matches(f, note), (note, schema)


def _candidates(attr: str, constants: set[Any]) -> list[Any]:
    """Values that witness every non-empty interval whose bounds are ``constants``."""
    if attr == "s":
        return sorted({"", *constants, *(c + "\x00" for c in constants)})
    cs = sorted(constants)
    if attr == "x":  # integers
        return list(range(int(cs[0]) - 1, int(cs[-1]) + 2))
    return sorted({cs[0] - 1, cs[-1] + 1, *cs, *((a + b) / 2 for a, b in itertools.pairwise(cs))})


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.tuples(filters, filters), filter_pairs()))
def test_covers_is_exact_against_brute_force(fg: tuple[Filter, Filter]) -> None:
    f, g = fg
    attrs = sorted({p.attr for p in f + g})
    domains = []
    for a in attrs:
        constants = {c for p in f + g if p.attr == a for c in (p.value, p.high)} - {None}
        domains.append([*_candidates(a, constants), _MISSING])
    escapes = any(matches(g, n) and not matches(f, n)
                  for n in (_note(dict(zip(attrs, vs, strict=True)))
                            for vs in itertools.product(*domains)))
    assert covers(f, g, SCHEMA) is not escapes


# ---- running the core ----------------------------------------------------------------

class _Tap:
    """A core that records every Send of the core it wraps (broker, link, message)."""

    ignores_link_stats = True

    def __init__(self, core: SienaCore, sent: list[tuple[str, str, Message]]) -> None:
        self.core, self.broker, self.neighbours = core, core.broker, core.neighbours
        self._sent = sent

    def handle(self, event: Event, now_s: float) -> list[Action]:
        actions = self.core.handle(event, now_s)
        self._sent += [(self.broker, a.link, a.msg) for a in actions if isinstance(a, Send)]
        return actions


def _run(overlay: nx.Graph, w: Workload, covering: bool
         ) -> tuple[SimResult, dict[str, SienaCore], list[tuple[str, str, Message]]]:
    """Simulate ``w`` with ``siena``: the result, the cores by broker and every Send."""
    derived = overlay_params("siena", overlay)
    cores: dict[str, SienaCore] = {}
    sent: list[tuple[str, str, Message]] = []

    def factory(broker: str, neighbours: Sequence[str], params: Mapping[str, Any]
                ) -> RoutingCore:
        core = make_core("siena", broker, neighbours,
                         {**derived.get(broker, {}), **params, "covering": covering})
        assert isinstance(core, SienaCore)
        cores[broker] = core
        return _Tap(core, sent)

    return simulate(overlay, w, factory, SimSettings(seed=0)), cores, sent


def _op(t_s: float, client: str, broker: str, kind: MsgType, msg_id: int,
        payload: dict[str, Any]) -> ClientOp:
    return ClientOp(t_s, client, broker, Message(kind, msg_id, client, 0, payload))


def _workload(ops: list[ClientOp], schema: Schema) -> Workload:
    ops = sorted(ops, key=lambda op: op.t_s)
    return Workload(schema, {op.client: op.broker for op in ops}, tuple(ops), {})


def _check_exact(result: SimResult, w: Workload) -> None:
    assert pairs(result.deliveries) == pairs(expected_deliveries(w))  # duplicates would show
    assert "unhandled" not in result.record_counts


def _sub_messages(result: SimResult) -> int:
    return result.ims_by_type.get("SUBSCRIBE", 0) + result.ims_by_type.get("UNSUBSCRIBE", 0)


# ---- random trees and workloads against the oracle --------------------------------------

RANDOM_SCHEMA = Schema({"x": "int", "s": "str"})
# Many covering relations: the empty filter covers all; x >= 3 covers x in [4, 4] ...
SUB_FILTERS: tuple[list[list[Any]], ...] = (
    [],
    [["x", ">=", 3]],
    [["x", "range", 2, 6]],
    [["x", "=", 4]],
    [["x", "range", 4, 4], ["s", "=", "a"]],
    [["s", "=", "a"]],
    [["s", "<=", "b"]],
    [["x", "<", 3]],
    [["x", ">", 2], ["x", "<", 5]],
    [["s", ">", "a"], ["x", ">=", 0]],
)


@st.composite
def overlays(draw: st.DrawFn) -> nx.Graph:
    """A random tree on 2..8 brokers (Prüfer sequence), sometimes with extra edges that
    close cycles (the core then routes on the spanning tree); random link delays."""
    n = draw(st.integers(2, 8))
    seq = draw(st.lists(st.integers(0, n - 1), min_size=n - 2, max_size=n - 2))
    g = nx.Graph([(0, 1)]) if n == 2 else nx.from_prufer_sequence(seq)
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            g.add_edge(a, b)
    g = nx.relabel_nodes(g, {i: f"b{i}" for i in g})
    for _, _, data in sorted(g.edges(data=True)):
        data["delay_ms"] = draw(st.sampled_from([0.1, 1.0, 3.0]))
    return g


@st.composite
def workloads(draw: st.DrawFn, brokers: Sequence[str]) -> Workload:
    """Subscriptions at [0, 0.5) s (some withdrawn a few ms later, while still spreading),
    publications at [1, 1.5) s; at [2, 2.5) s some unsubscribe (twice, now and then) and
    new ones subscribe; publications at [3, 3.5) s; at 4 s everything left unsubscribes.
    Phases are far apart against link delays, so the oracle's timing is exact."""
    ops: list[ClientOp] = []
    subscribers = [(f"s{i}", draw(st.sampled_from(brokers)))
                   for i in range(draw(st.integers(1, 8)))]
    live: list[tuple[str, str, int]] = []
    next_id = Counter[str]()

    def subscribe(t_s: float, client: str, broker: str) -> None:
        next_id[client] += 1
        f = draw(st.sampled_from(SUB_FILTERS))
        ops.append(_op(t_s, client, broker, MsgType.SUBSCRIBE, next_id[client], {"filter": f}))
        live.append((client, broker, next_id[client]))

    def unsubscribe(t_s: float, sub: tuple[str, str, int]) -> None:
        client, broker, n = sub
        next_id[client] += 1
        ops.append(_op(t_s, client, broker, MsgType.UNSUBSCRIBE, next_id[client], {"sub_id": n}))

    def publish(t0_s: float) -> None:
        for j in range(draw(st.integers(0, 12))):
            client, broker = draw(st.sampled_from(publishers))
            next_id[client] += 1
            attrs = {"x": draw(st.integers(0, 7)),
                     "s": draw(st.sampled_from(["a", "ab", "b", "c"]))}
            if draw(st.integers(0, 9)) == 0:
                del attrs[draw(st.sampled_from(["x", "s"]))]
            ops.append(_op(t0_s + j * 0.03, client, broker, MsgType.PUBLISH, next_id[client],
                           {"attrs": attrs}))

    publishers = [(f"p{i}", draw(st.sampled_from(brokers))) for i in range(draw(st.integers(1, 3)))]
    for client, broker in subscribers:
        for _ in range(draw(st.integers(1, 3))):
            t_s = draw(st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.4]))
            subscribe(t_s, client, broker)
            if draw(st.integers(0, 5)) == 0:  # withdrawn while it spreads
                unsubscribe(t_s + draw(st.sampled_from([0.0005, 0.002, 0.005])), live.pop())
    publish(1.0)
    for sub in draw(st.lists(st.sampled_from(live), unique=True)) if live else []:
        live.remove(sub)
        unsubscribe(2.0, sub)
        if draw(st.booleans()):
            unsubscribe(2.1, sub)  # twice: harmless
    for client, broker in draw(st.lists(st.sampled_from(subscribers), max_size=4)):
        subscribe(2.2, client, broker)
    publish(3.0)
    for sub in live:
        unsubscribe(4.0, sub)
    return _workload(ops, RANDOM_SCHEMA)


@st.composite
def cases(draw: st.DrawFn) -> tuple[nx.Graph, Workload]:
    overlay = draw(overlays())
    return overlay, draw(workloads(sorted(overlay.nodes)))


EMPTY = {"local": [], "table": {}, "sent": {}, "held": {}}


@settings(max_examples=200, deadline=None)
@given(cases())
def test_random_trees_deliver_the_oracle_set_exactly_once_with_and_without_covering(
    case: tuple[nx.Graph, Workload],
) -> None:
    overlay, w = case
    runs = {}
    for covering in (False, True):
        result, cores, _ = _run(overlay, w, covering)
        _check_exact(result, w)
        for b, core in cores.items():  # every subscription retraced: nothing left anywhere
            assert core.state() == EMPTY, (b, covering)
            assert core.counters()["routing_entries"] == 0
        runs[covering] = result
    # Covering sends a subset of the subscription messages, publications alike.
    assert _sub_messages(runs[True]) <= _sub_messages(runs[False])
    assert runs[True].ims_by_type.get("PUBLISH", 0) == runs[False].ims_by_type.get("PUBLISH", 0)
    # Without covering every subscription crosses every tree edge once, away from its host.
    n_tree_edges = len(overlay) - 1
    n_subs = sum(op.msg.type is MsgType.SUBSCRIBE for op in w.ops)
    assert runs[False].ims_by_type.get("SUBSCRIBE", 0) == n_subs * n_tree_edges


# ---- covering saves subscription messages ------------------------------------------------

def test_covering_sends_strictly_fewer_and_releases_held_subscriptions_in_time() -> None:
    """On the path b0-b1-b2-b3: at b0 ``[]`` then ``x = 4`` (covered); at b3 ``x >= 3``
    then ``x in [3, 5]`` (covered). At 1 s ``[]`` unsubscribes: ``x = 4`` must now go
    out, hop by hop, before x = 4 is published at b3 at 2 s."""
    ops = [_op(0.0, "s0", "b0", MsgType.SUBSCRIBE, 1, {"filter": []}),
           _op(0.1, "s1", "b0", MsgType.SUBSCRIBE, 1, {"filter": [["x", "=", 4]]}),
           _op(0.0, "s2", "b3", MsgType.SUBSCRIBE, 1, {"filter": [["x", ">=", 3]]}),
           _op(0.1, "s3", "b3", MsgType.SUBSCRIBE, 1, {"filter": [["x", "range", 3, 5]]}),
           _op(0.5, "p", "b3", MsgType.PUBLISH, 1, {"attrs": {"x": 4}}),
           _op(1.0, "s0", "b0", MsgType.UNSUBSCRIBE, 2, {"sub_id": 1}),
           _op(2.0, "p", "b3", MsgType.PUBLISH, 2, {"attrs": {"x": 4}}),
           _op(2.1, "q", "b0", MsgType.PUBLISH, 1, {"attrs": {"x": 1}})]
    w = _workload(ops, Schema({"x": "int"}))
    overlay = nx.path_graph([f"b{i}" for i in range(4)])
    off, _, _ = _run(overlay, w, covering=False)
    on, cores, _ = _run(overlay, w, covering=True)
    for result in (off, on):
        _check_exact(result, w)
    assert sorted(on.deliveries[("p", 2)]) == ["s1", "s2", "s3"]
    assert off.ims_by_type["SUBSCRIBE"] == 4 * 3
    assert on.ims_by_type["SUBSCRIBE"] == 3 + 3 + 3  # s0, s2, then s1 released; s3 never
    assert on.ims_by_type["UNSUBSCRIBE"] == off.ims_by_type["UNSUBSCRIBE"] == 3
    assert _sub_messages(on) < _sub_messages(off)
    assert cores["b0"].counters()["covered"] == 1 and cores["b3"].counters()["covered"] == 1
    assert cores["b3"].state()["held"] == {"b2": [("s3", 1)]}


def test_held_subscription_goes_out_before_the_unsubscription_of_its_cover() -> None:
    core = make_core("siena", "b", ["m"], {"tree_neighbours": ["m"], "covering": True})
    sub = Message(MsgType.SUBSCRIBE, 1, "c", 0, {"filter": []})
    narrow = Message(MsgType.SUBSCRIBE, 2, "c", 0, {"filter": [["x", "=", 4]]})
    narrower = Message(MsgType.SUBSCRIBE, 3, "c", 0, {"filter": [["x", "range", 4, 4]]})
    assert core.handle(FromClient("c", sub), 0.0) == [Send("m", sub.forwarded())]
    assert core.handle(FromClient("c", narrow), 0.0) == []
    assert core.handle(FromClient("c", narrower), 0.0) == []
    unsub = Message(MsgType.UNSUBSCRIBE, 4, "c", 0, {"sub_id": 1})
    # Of the two equal held filters the earlier goes out, and covers the other.
    assert core.handle(FromClient("c", unsub), 0.0) == [
        Send("m", narrow.forwarded()), Send("m", unsub.forwarded())]
    assert core.state()["held"] == {"m": [("c", 3)]}
    assert core.counters() == {"routing_entries": 0, "local_subscriptions": 2,
                               "sub_messages": 4, "sub_messages_sent": 3, "covered": 2,
                               "events_matched": 0, "match_ops": 0}


# ---- the tree rule -------------------------------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(cases(), st.booleans())
def test_publications_cross_exactly_the_edges_towards_matching_subscribers(
    case: tuple[nx.Graph, Workload], covering: bool,
) -> None:
    """Per directed edge u -> v, the publications sent are exactly those whose
    publisher's broker lies on u's side and that some live subscriber on v's side must
    receive (oracle): never towards a subtree with no matching subscription, never
    back, never off the tree."""
    overlay, w = case
    result, cores, sent = _run(overlay, w, covering)
    tree = nx.Graph((b, nb) for b, c in cores.items() for nb in c.tree_neighbours)
    tree.add_nodes_from(overlay)
    assert nx.is_tree(tree)
    expected = expected_deliveries(w)
    hosts = {op.msg.key: op.broker for op in w.ops if op.msg.type is MsgType.PUBLISH}
    want: Counter[tuple[str, str]] = Counter()
    for u, v in tree.edges:
        cut = tree.copy()
        cut.remove_edge(u, v)
        side_v = nx.node_connected_component(cut, v)
        for key, host in hosts.items():
            wanted_on_v = any(w.clients[c] in side_v for c in expected.get(key, ()))
            wanted_on_u = any(w.clients[c] not in side_v for c in expected.get(key, ()))
            if host not in side_v and wanted_on_v:
                want[(u, v)] += 1
            if host in side_v and wanted_on_u:
                want[(v, u)] += 1
    got = Counter((b, link) for b, link, msg in sent if msg.type is MsgType.PUBLISH)
    assert got == want
    _check_exact(result, w)


# ---- registry and params ----------------------------------------------------------------

def test_registry_derives_the_tree_and_declares_covering() -> None:
    tree = [("a", "b"), ("b", "c"), ("b", "d")]
    assert overlay_params("siena", nx.Graph(tree)) == {
        "a": {"tree_neighbours": ("b",)}, "b": {"tree_neighbours": ("a", "c", "d")},
        "c": {"tree_neighbours": ("b",)}, "d": {"tree_neighbours": ("b",)}}
    cyclic = overlay_params("siena", nx.cycle_graph(["a", "b", "c"]))
    assert sum(len(p["tree_neighbours"]) for p in cyclic.values()) == 2 * 2
    assert resolve_params("siena", PARAMS, {}) == {"covering": False}
    with pytest.raises(ValueError, match="covering"):
        resolve_params("siena", PARAMS, {"covering": 1})
    with pytest.raises(ValueError, match="tree_neighbours"):
        SienaCore("a", ["b"], {})


def test_filters_travel_unchanged() -> None:
    """A forwarded subscription carries the client's filter as it came (JSON)."""
    core = make_core("siena", "b", ["m", "n"], {"tree_neighbours": ["m", "n"]})
    f = [["x", "range", 1, 2], ["s", "=", "a"]]
    out = core.handle(FromClient("c", Message(MsgType.SUBSCRIBE, 7, "c", 0, {"filter": f})), 0.0)
    assert [a.link for a in out if isinstance(a, Send)] == ["m", "n"]
    assert all(isinstance(a, Send) and filter_from_json(a.msg.payload["filter"])
               == filter_from_json(f) and a.msg.hops == 1 for a in out)


def test_never_back_on_the_link_a_publication_came_from() -> None:
    core = make_core("siena", "b", ["m", "n"], {"tree_neighbours": ["m", "n"]})
    core.handle(Arrived("m", Message(MsgType.SUBSCRIBE, 1, "c", 1, {"filter": []})), 0.0)
    pub = Message(MsgType.PUBLISH, 1, "p", 0, {"attrs": {"x": 1}})
    assert [a for a in core.handle(Arrived("n", pub), 0.0) if isinstance(a, Send)] == [
        Send("m", pub.forwarded())]
    assert [a for a in core.handle(Arrived("m", pub), 0.0) if isinstance(a, Send)] == []
    assert core.counters()["match_ops"] == 1  # the entry under m is not tested for m's event
