"""The timing-aware oracle: subscriptions count from their settle time until their
unsubscribe, nodes while they are members; random interleaved schedules against a plain
brute force, today's result on phase-separated workloads, and the boundaries."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scot_cases import churn_workload, random_scot

from nodes.messages import Message, MsgType
from nodes.model import Schema, filter_from_json, filter_to_json, matches
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import METHODS, expected_deliveries, iter_expected
from nodes.workloads.stock import stock_workload

SCHEMA = Schema({"x": "int", "y": "str"})
FILTERS: tuple[list[list[Any]], ...] = (
    [],
    [["x", ">=", 3]],
    [["x", "<", 2]],
    [["x", "range", 1, 4]],
    [["x", "=", 2], ["y", "=", "a"]],
    [["y", "=", "b"]],
    [["y", "<=", "b"], ["x", ">", 0]],
)
TIMES = [i / 2 for i in range(13)]  # a coarse grid: many ties, and t + settle is exact
SETTLES = (0.0, 0.5, 1.0)
Expected = dict[tuple[str, int], frozenset[str]]


def _sub(t: float, client: str, broker: str, msg_id: int, f: list[list[Any]]) -> ClientOp:
    return ClientOp(t, client, broker, Message(MsgType.SUBSCRIBE, msg_id, client, 0,
                                               {"filter": f}))


def _unsub(t: float, client: str, broker: str, msg_id: int, sub_id: int) -> ClientOp:
    return ClientOp(t, client, broker, Message(MsgType.UNSUBSCRIBE, msg_id, client, 0,
                                               {"sub_id": sub_id}))


def _pub(t: float, client: str, broker: str, msg_id: int, attrs: dict[str, Any]) -> ClientOp:
    return ClientOp(t, client, broker, Message(MsgType.PUBLISH, msg_id, client, 0,
                                               {"attrs": attrs}))


def _workload(ops: Sequence[ClientOp], **meta: Any) -> Workload:
    ops = sorted(ops, key=lambda op: op.t_s)  # stable: ties keep their drawn order
    return Workload(SCHEMA, {op.client: op.broker for op in ops}, tuple(ops), meta)


def _all_methods(w: Workload, **kw: Any) -> Expected:
    """The oracle's result, after checking that every method gives the same one, and
    gives it one publication at a time in op order too."""
    results = [expected_deliveries(w, method=m, **kw) for m in METHODS]
    assert all(r == results[0] for r in results[1:])
    published = [op.msg.key for op in w.ops if op.msg.type is MsgType.PUBLISH]
    for m in METHODS:
        one_at_a_time = list(iter_expected(w, method=m, **kw))
        assert [key for key, _ in one_at_a_time] == published
        assert dict(one_at_a_time) == results[0]
    return results[0]


def brute_force(w: Workload, settle_s: float,
                membership: Mapping[str, Sequence[Sequence[float | None]]] | None) -> Expected:
    """The definition, pair by pair: for each publication, each subscription."""
    subs = [op for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    unsubs = [op for op in w.ops if op.msg.type is MsgType.UNSUBSCRIBE]

    def member(node: str, t: float) -> bool:
        if membership is None or node not in membership:
            return True
        return any(j <= t and (leave is None or t < leave) for j, leave in membership[node])

    out: Expected = {}
    for pub in w.ops:
        if pub.msg.type is not MsgType.PUBLISH:
            continue
        t_p = pub.t_s
        got = set()
        for sub in subs:
            if not sub.t_s + settle_s <= t_p:
                continue  # not installed yet
            cancels = [u.t_s for u in unsubs if u.client == sub.client
                       and u.msg.payload["sub_id"] == sub.msg.msg_id and u.t_s >= sub.t_s]
            if cancels and not t_p < min(cancels):
                continue  # unsubscribed
            if not member(sub.broker, t_p):
                continue
            if matches(filter_from_json(sub.msg.payload["filter"]), pub.msg.payload["attrs"]):
                got.add(sub.client)
        out[pub.msg.key] = frozenset(got)
    return out


@st.composite
def schedules(draw: st.DrawFn) -> tuple[Workload, float, dict[str, list[list[Any]]] | None]:
    brokers = [f"b{i}" for i in range(draw(st.integers(2, 4)))]
    subscribers = {f"s{i}": draw(st.sampled_from(brokers)) for i in range(draw(st.integers(1, 5)))}
    publishers = {f"p{i}": draw(st.sampled_from(brokers)) for i in range(2)}
    next_id: dict[str, int] = {}
    subscribed: dict[str, list[int]] = {}
    ops: list[ClientOp] = []

    def fresh(client: str) -> int:
        next_id[client] = next_id.get(client, 0) + 1
        return next_id[client]

    for _ in range(draw(st.integers(0, 60))):
        t = draw(st.sampled_from(TIMES))
        kind = draw(st.sampled_from(["sub", "unsub", "pub", "pub"]))
        if kind == "pub":
            p = draw(st.sampled_from(sorted(publishers)))
            attrs = {"x": draw(st.integers(0, 5)), "y": draw(st.sampled_from("abc"))}
            if draw(st.integers(0, 9)) == 0:
                del attrs[draw(st.sampled_from(["x", "y"]))]  # a missing attribute
            ops.append(_pub(t, p, publishers[p], fresh(p), attrs))
            continue
        s = draw(st.sampled_from(sorted(subscribers)))
        if kind == "sub":
            msg_id = fresh(s)
            subscribed.setdefault(s, []).append(msg_id)
            ops.append(_sub(t, s, subscribers[s], msg_id, draw(st.sampled_from(FILTERS))))
        else:
            # Mostly one of the client's SUBSCRIBEs (earlier or later), sometimes unknown.
            target = draw(st.sampled_from([*subscribed.get(s, []), 999]))
            ops.append(_unsub(t, s, subscribers[s], fresh(s), target))
    membership = None
    if draw(st.booleans()):
        membership = {}
        for b in draw(st.lists(st.sampled_from(brokers), unique=True)):
            intervals = []
            for _ in range(draw(st.integers(0, 3))):
                j = draw(st.sampled_from(TIMES))
                leave = draw(st.sampled_from([None, *(x for x in TIMES if x >= j)]))
                intervals.append([j, leave])
            membership[b] = intervals
    settle = draw(st.sampled_from(SETTLES))
    meta: dict[str, Any] = {"settle_s": settle} if draw(st.booleans()) else {}
    if membership is not None:
        meta["membership"] = membership
    return _workload(ops, **meta), settle, membership


@settings(max_examples=400, deadline=None)
@given(schedules())
def test_random_interleaved_schedules_agree_with_brute_force(
    case: tuple[Workload, float, dict[str, list[list[Any]]] | None],
) -> None:
    w, settle, membership = case
    want = brute_force(w, settle, membership)
    kw = {} if "settle_s" in w.meta else {"settle_s": settle}
    assert _all_methods(w, **kw) == want


# ---- regression: phase-separated workloads keep today's result ---------------------------


def untimed(w: Workload) -> Expected:
    """Today's definition: every subscription counts for every publication."""
    subs = [(op.client, filter_from_json(op.msg.payload["filter"]))
            for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    return {op.msg.key: frozenset(c for c, f in subs if matches(f, op.msg.payload["attrs"]))
            for op in w.ops if op.msg.type is MsgType.PUBLISH}


@pytest.mark.parametrize("mode", ["octopia", "meghdoot"])
@pytest.mark.parametrize("seed", [1, 7])
def test_stock_workload_keeps_todays_result(mode: str, seed: int) -> None:
    w = stock_workload(["b0", "b1", "b2"], n_publishers=3, n_subscribers=40,
                       pubs_per_publisher=20, publish_rate_hz=5.0, seed=seed, mode=mode,
                       selectivity=0.1)
    today = untimed(w)
    assert sum(map(len, today.values())) == w.meta["expected_deliveries"] > 0
    assert _all_methods(w) == today
    # Settling within the phase gap changes nothing: the last subscription (t < 1.5 s)
    # is installed by the first publication (2 s) even after 0.5 s.
    assert _all_methods(w, settle_s=0.5) == today
    # Everything members always, stated explicitly: the same again.
    always = Workload(w.schema, w.clients, w.ops,
                      {**w.meta, "membership": {"b0": [[0.0, None]]}})
    assert _all_methods(always) == today
    # A settle time longer than the gap costs the early publications their subscribers.
    late = _all_methods(w, settle_s=2.0)
    assert late == brute_force(w, 2.0, None) != today


def test_churn_workload_matches_its_hand_made_oracle() -> None:
    """The routing-core tests' churn workload (unsubscriptions between two publication
    phases): the timing-aware oracle agrees with the pairs the workload expects. Its
    UNADVERTISEs are dropped (the oracle refuses them); no publisher publishes after its
    own, so they change nothing."""
    for seed in range(3):
        w, info = churn_workload(random_scot(random.Random(f"churn-scot/{seed}")), seed)
        kept = tuple(op for op in w.ops if op.msg.type is not MsgType.UNADVERTISE)
        got = _all_methods(Workload(w.schema, w.clients, kept, w.meta))
        pairs = sorted((key, sub) for key, subs in got.items() for sub in subs)
        assert pairs == sorted(set(info["expected"]))


# ---- boundaries and conventions -----------------------------------------------------------

F = filter_to_json(filter_from_json([["x", ">=", 3]]))


def _one_sub(*more: ClientOp, t_sub: float = 0.0, **meta: Any) -> Workload:
    return _workload([_sub(t_sub, "s", "b1", 1, F), *more], **meta)


def _receivers(w: Workload, **kw: Any) -> dict[int, bool]:
    """Per publication msg_id: whether ``s`` must receive it."""
    return {key[1]: "s" in subs for key, subs in _all_methods(w, **kw).items()}


def test_a_publication_at_the_settle_end_counts_one_before_does_not() -> None:
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate((0.0, 1.25, 1.5, 2.0))]
    w = _one_sub(*pubs, t_sub=1.0, settle_s=0.5)
    assert _receivers(w) == {0: False, 1: False, 2: True, 3: True}
    # The argument overrides the workload's settle time; without either it is 0.
    assert _receivers(w, settle_s=0.0) == {0: False, 1: True, 2: True, 3: True}
    assert _receivers(_one_sub(*pubs, t_sub=1.0)) == {0: False, 1: True, 2: True, 3: True}


def test_a_publication_at_the_unsubscribe_time_does_not_count() -> None:
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate((1.0, 1.999, 2.0, 3.0))]
    w = _one_sub(*pubs, _unsub(2.0, "s", "b1", 2, 1))
    assert _receivers(w) == {0: True, 1: True, 2: False, 3: False}


def test_unsubscribe_at_the_subscribe_time_means_never() -> None:
    w = _one_sub(_pub(0.0, "p", "b0", 1, {"x": 5}), _unsub(0.0, "s", "b1", 2, 1))
    assert _receivers(w) == {1: False}


def test_a_late_join() -> None:
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate((1.0, 2.999, 3.0, 9.0))]
    w = _one_sub(*pubs, membership={"b1": [[3.0, None]]})
    assert _receivers(w) == {0: False, 1: False, 2: True, 3: True}


def test_leave_and_rejoin() -> None:
    times = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate(times)]
    w = _one_sub(*pubs, membership={"b1": [[0.0, 2.0], [4.0, None]]})
    assert _receivers(w) == {0: True, 1: True, 2: False, 3: False, 4: True, 5: True}
    # Back-to-back intervals leave no gap; an empty one adds nothing; nodes the mapping
    # does not list (the publisher's b0 here) are members always.
    w = _one_sub(*pubs, membership={"b1": [[0.0, 2.0], [2.0, 3.0], [4.0, 4.0]]})
    assert _receivers(w) == {0: True, 1: True, 2: True, 3: False, 4: False, 5: False}
    # A node listed with no intervals is never a member.
    assert _receivers(_one_sub(*pubs, membership={"b1": []})) == dict.fromkeys(range(6), False)


def test_membership_ops_are_read_through_meta_only() -> None:
    """JOIN, LEAVE and CRASH ops change nothing by themselves: ``membership`` says it all
    (without it they are refused, see test_refused_and_malformed_inputs)."""
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate((1.0, 3.0, 5.0))]
    churn = [ClientOp(t, "s", "b1", Message(kind, i, "s", 0, {}))
             for i, (t, kind) in enumerate(((0.0, MsgType.JOIN), (2.0, MsgType.LEAVE),
                                            (4.0, MsgType.JOIN), (4.5, MsgType.CRASH)), 10)]
    membership = {"b1": [[0.0, 2.0], [4.0, 4.5]]}
    want = {0: True, 1: False, 2: False}
    assert _receivers(_one_sub(*pubs, membership=membership)) == want
    assert _receivers(_one_sub(*pubs, *churn, membership=membership)) == want


def test_unknown_early_and_repeated_unsubscribes_are_ignored() -> None:
    pubs = [_pub(t, "p", "b0", i, {"x": 5}) for i, t in enumerate((1.0, 3.0, 5.0))]
    base = _receivers(_one_sub(*pubs))
    assert base == {0: True, 1: True, 2: True}
    # An unknown sub_id, another client's subscription, an unsubscribe before the
    # subscribe: no effect, as the cores ignore the unsubscription of nothing.
    for stray in (_unsub(2.0, "s", "b1", 2, 99), _unsub(2.0, "q", "b1", 1, 1),
                  _unsub(0.5, "s", "b1", 2, 1)):
        assert _receivers(_one_sub(*pubs, stray, t_sub=0.75)) == base
    # Two unsubscribes: the earlier one (at or after the subscribe) ends it.
    w = _one_sub(*pubs, _unsub(4.0, "s", "b1", 2, 1), _unsub(2.0, "s", "b1", 3, 1))
    assert _receivers(w) == {0: True, 1: False, 2: False}


def test_refused_and_malformed_inputs() -> None:
    pub = _pub(1.0, "p", "b0", 1, {"x": 5})
    bad_ops = [
        (ClientOp(0.5, "s", "b1", Message(MsgType.UNSUBSCRIBE, 2, "s")), "no sub_id"),
        (ClientOp(0.5, "p", "b0", Message(MsgType.UNADVERTISE, 2, "p", 0, {"adv_id": 1})),
         "UNADVERTISE"),
        (ClientOp(0.5, "s", "b1", Message(MsgType.JOIN, 2, "s")), "membership"),
        (ClientOp(0.5, "s", "b1", Message(MsgType.CRASH, 2, "s")), "membership"),
        (_sub(0.5, "s", "b1", 1, F), "share msg_id"),
    ]
    # One publication at a time or all at once, a bad input is refused on the call.
    for oracle in (expected_deliveries, iter_expected):
        for op, match in bad_ops:
            with pytest.raises(ValueError, match=match):
                oracle(_one_sub(pub, op))
        for meta in ({"settle_s": -1}, {"settle_s": float("nan")}, {"settle_s": "1"},
                     {"membership": [["b1", 0, 1]]}, {"membership": {"b1": [[2.0, 1.0]]}},
                     {"membership": {"b1": [[0.0]]}}, {"membership": {"b1": [[None, 1.0]]}}):
            with pytest.raises(ValueError):
                oracle(_one_sub(pub, **meta))
        with pytest.raises(ValueError, match="method"):
            oracle(_one_sub(pub), method="guess")  # type: ignore[arg-type]


def test_no_publications_and_no_subscriptions() -> None:
    assert expected_deliveries(_one_sub()) == {}
    w = _workload([_pub(1.0, "p", "b0", 1, {"x": 5})], membership={"b0": []})
    assert _all_methods(w) == {("p", 1): frozenset()}


def test_ops_out_of_time_order_are_answered_in_op_order() -> None:
    """A workload made by hand need not be sorted (a Workload's ops are): the answers,
    worked out along the time line, still come in op order, and a key published twice
    keeps the later op's set."""
    ops = [_sub(0.0, "s", "b1", 1, F), _sub(2.0, "r", "b2", 1, [["x", "<", 2]]),
           _pub(3.0, "p", "b0", 1, {"x": 1}), _pub(1.0, "p", "b0", 2, {"x": 1}),
           _pub(2.5, "p", "b0", 3, {"x": 5})]
    w = Workload(SCHEMA, {op.client: op.broker for op in ops}, tuple(ops),
                 {"membership": {"b1": [[0.0, None]]}})
    assert list(iter_expected(w)) == [(("p", 1), frozenset({"r"})), (("p", 2), frozenset()),
                                      (("p", 3), frozenset({"s"}))]
    again = Workload(w.schema, w.clients, (*ops, _pub(0.5, "p", "b0", 1, {"x": 5})), w.meta)
    assert [key for key, _ in iter_expected(again)] == [("p", 1), ("p", 2), ("p", 3), ("p", 1)]
    assert expected_deliveries(again)[("p", 1)] == frozenset({"s"})
    # No comparison orders a NaN time, so the time line may put a publication after one
    # of a later op: its answer still goes with its own key.
    ops = [_pub(0.0, "p", "b0", 0, {"x": 5}), _sub(0.5, "s", "b1", 1, F),
           _pub(float("nan"), "p", "b0", 1, {"x": 5}), _pub(1.0, "p", "b0", 2, {"x": 5}),
           _unsub(1.5, "s", "b1", 2, 1)]
    w = Workload(SCHEMA, {op.client: op.broker for op in ops}, tuple(ops), {})
    for method in METHODS:
        assert list(iter_expected(w, method=method)) == [
            (("p", 0), frozenset()), (("p", 1), frozenset()), (("p", 2), frozenset({"s"}))]
