"""The oracle's addressed publications (CoDD's interest classes): a publication names its
candidate recipients in a hex bitmap over ``meta["addressed"]``; a candidate receives it
when its addressed subscription counts (settled, not cancelled, its node a member).
Random schedules mixing addressed and filter traffic against a plain brute force, and the
boundaries by hand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.messages import Message, MsgType
from nodes.model import Schema, filter_from_json, matches
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import METHODS, expected_deliveries, iter_expected

SCHEMA = Schema({"x": "int"})
FILTERS: tuple[list[list[Any]], ...] = ([], [["x", ">=", 3]], [["x", "<", 2]])
TIMES = [i / 2 for i in range(11)]  # a coarse grid: many ties, and t + settle is exact
# The client of each bit: the root's bit names nobody; "nobody" never subscribes.
ADDRESSED = [None, "s0", "s1", "s2", "s3", "nobody"]
Expected = dict[tuple[str, int], frozenset[str]]
Membership = Mapping[str, Sequence[Sequence[float | None]]]


def _op(t: float, client: str, broker: str, mtype: MsgType, msg_id: int,
        payload: dict[str, Any]) -> ClientOp:
    return ClientOp(t, client, broker, Message(mtype, msg_id, client, 0, payload))


def _workload(ops: Sequence[ClientOp], **meta: Any) -> Workload:
    ops = sorted(ops, key=lambda op: op.t_s)
    return Workload(SCHEMA, {op.client: op.broker for op in ops}, tuple(ops),
                    {"addressed": ADDRESSED, **meta})


def _all_methods(w: Workload) -> Expected:
    """Every method's answer, the same, and the same one publication at a time in op
    order (addressed and filtered publications interleaved)."""
    results = [expected_deliveries(w, method=m) for m in METHODS]
    assert all(r == results[0] for r in results[1:])
    published = [op.msg.key for op in w.ops if op.msg.type is MsgType.PUBLISH]
    for m in METHODS:
        one_at_a_time = list(iter_expected(w, method=m))
        assert [key for key, _ in one_at_a_time] == published
        assert dict(one_at_a_time) == results[0]
    return results[0]


def brute_force(w: Workload, settle_s: float, membership: Membership | None) -> Expected:
    """The definition, pair by pair: each publication against each subscription."""
    subs = [op for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    unsubs = [op for op in w.ops if op.msg.type is MsgType.UNSUBSCRIBE]

    def member(node: str, t: float) -> bool:
        if membership is None or node not in membership:
            return True
        return any(j <= t and (leave is None or t < leave) for j, leave in membership[node])

    out: Expected = {}
    for pub in (op for op in w.ops if op.msg.type is MsgType.PUBLISH):
        t_p, payload = pub.t_s, pub.msg.payload
        got = set()
        for sub in subs:
            cancels = [u.t_s for u in unsubs if u.client == sub.client
                       and u.msg.payload["sub_id"] == sub.msg.msg_id and u.t_s >= sub.t_s]
            if (sub.t_s + settle_s > t_p or (cancels and t_p >= min(cancels))
                    or not member(sub.broker, t_p)):
                continue
            if "to" in payload:
                named = {ADDRESSED[j] for j in range(len(ADDRESSED))
                         if int(payload["to"], 16) >> j & 1}
                if sub.msg.payload.get("addressed") is True and sub.client in named:
                    got.add(sub.client)
            elif "filter" in sub.msg.payload and matches(
                    filter_from_json(sub.msg.payload["filter"]), payload["attrs"]):
                got.add(sub.client)
        out[pub.msg.key] = frozenset(got)
    return out


@st.composite
def schedules(draw: st.DrawFn) -> tuple[Workload, float, dict[str, list[list[Any]]] | None]:
    brokers = [f"b{i}" for i in range(draw(st.integers(1, 3)))]
    subscribers = {c: draw(st.sampled_from(brokers)) for c in ADDRESSED[1:]}
    next_id: dict[str, int] = {}
    subscribed: dict[str, list[int]] = {}
    ops: list[ClientOp] = []

    def fresh(client: str) -> int:
        next_id[client] = next_id.get(client, 0) + 1
        return next_id[client]

    for _ in range(draw(st.integers(0, 40))):
        t = draw(st.sampled_from(TIMES))
        kind = draw(st.sampled_from(["sub", "unsub", "pub", "pub"]))
        if kind == "pub":
            payload: dict[str, Any] = (
                {"to": format(draw(st.integers(0, 2 ** len(ADDRESSED) - 1)), "x")}
                if draw(st.booleans()) else {"attrs": {"x": draw(st.integers(0, 5))}})
            ops.append(_op(t, "producer", brokers[0], MsgType.PUBLISH, fresh("producer"),
                           payload))
            continue
        s = draw(st.sampled_from(ADDRESSED[1:-1]))
        if kind == "sub":
            msg_id = fresh(s)
            subscribed.setdefault(s, []).append(msg_id)
            payload = ({"addressed": True} if draw(st.booleans())
                       else {"filter": draw(st.sampled_from(FILTERS))})
            ops.append(_op(t, s, subscribers[s], MsgType.SUBSCRIBE, msg_id, payload))
        else:
            target = draw(st.sampled_from([*subscribed.get(s, []), 999]))
            ops.append(_op(t, s, subscribers[s], MsgType.UNSUBSCRIBE, fresh(s),
                           {"sub_id": target}))
    membership = None
    if draw(st.booleans()):
        membership = {}
        for b in draw(st.lists(st.sampled_from(brokers), unique=True)):
            intervals = []
            for _ in range(draw(st.integers(0, 2))):
                j = draw(st.sampled_from(TIMES))
                leave = draw(st.sampled_from([None, *(x for x in TIMES if x >= j)]))
                intervals.append([j, leave])
            membership[b] = intervals
    settle = draw(st.sampled_from((0.0, 0.5, 1.0)))
    meta: dict[str, Any] = {"settle_s": settle}
    if membership is not None:
        meta["membership"] = membership
    return _workload(ops, **meta), settle, membership


@settings(max_examples=400, deadline=None)
@given(schedules())
def test_random_mixed_schedules_agree_with_brute_force(
    case: tuple[Workload, float, dict[str, list[list[Any]]] | None],
) -> None:
    w, settle, membership = case
    assert _all_methods(w) == brute_force(w, settle, membership)


# ---- the boundaries, by hand --------------------------------------------------------------


def _addressed_sub(t: float, client: str = "s0", broker: str = "b0") -> ClientOp:
    return _op(t, client, broker, MsgType.SUBSCRIBE, 1, {"addressed": True})


def _to(t: float, msg_id: int, bits: int) -> ClientOp:
    return _op(t, "producer", "b9", MsgType.PUBLISH, msg_id, {"to": format(bits, "x")})


def test_settle_boundary_is_inclusive() -> None:
    """Subscribed at 1.0 with 0.5 s to settle: 1.5 counts, 1.0 does not."""
    w = _workload([_addressed_sub(1.0), _to(1.0, 1, 0b10), _to(1.5, 2, 0b10)], settle_s=0.5)
    assert _all_methods(w) == {("producer", 1): frozenset(),
                               ("producer", 2): frozenset({"s0"})}


def test_leave_boundary_is_exclusive_and_a_rejoin_counts_again() -> None:
    """s0's node is a member on [0, 2) and from 3 on: 1.5 counts, 2.0 and 2.5 do not,
    3.0 does (its subscription was not cancelled by leaving)."""
    ops = [_addressed_sub(0.0), *(_to(t, n, 0b10) for n, t in enumerate((1.5, 2.0, 2.5, 3.0)))]
    w = _workload(ops, membership={"b0": [[0.0, 2.0], [3.0, None]]})
    got = _all_methods(w)
    assert [bool(got[("producer", n)]) for n in range(4)] == [True, False, False, True]


def test_root_bit_and_unsubscribed_candidates_get_nothing() -> None:
    """Bit 0 is the root's (no client), bit 5 a client that never subscribed; s1 is
    addressed but not named. Only s0 must receive it."""
    ops = [_addressed_sub(0.0), _addressed_sub(0.0, "s1"), _to(1.0, 1, 0b100011)]
    assert _all_methods(_workload(ops)) == {("producer", 1): frozenset({"s0"})}


def test_addressed_and_filter_traffic_never_mix() -> None:
    """A match-all filter gets no addressed publication; an addressed subscription gets
    no publication with attributes."""
    ops = [_addressed_sub(0.0), _op(0.0, "s1", "b0", MsgType.SUBSCRIBE, 1, {"filter": []}),
           _to(1.0, 1, 0b110), _op(1.0, "producer", "b9", MsgType.PUBLISH, 2,
                                   {"attrs": {"x": 1}})]
    assert _all_methods(_workload(ops)) == {("producer", 1): frozenset({"s0"}),
                                            ("producer", 2): frozenset({"s1"})}


def test_an_unsubscribe_ends_an_addressed_subscription_at_once() -> None:
    ops = [_addressed_sub(0.0), _op(2.0, "s0", "b0", MsgType.UNSUBSCRIBE, 2, {"sub_id": 1}),
           _to(1.5, 1, 0b10), _to(2.0, 2, 0b10)]
    assert _all_methods(_workload(ops, settle_s=0.5)) == {("producer", 1): frozenset({"s0"}),
                                                          ("producer", 2): frozenset()}


@pytest.mark.parametrize(("payload", "fragment"), [
    ({"to": "0x2"}, "lowercase hex"),
    ({"to": "A"}, "lowercase hex"),
    ({"to": ""}, "lowercase hex"),
    ({"to": 2}, "lowercase hex"),
    ({"to": format(1 << len(ADDRESSED), "x")}, "sets bit 6"),
])
def test_malformed_addresses_are_refused(payload: dict[str, Any], fragment: str) -> None:
    w = _workload([_addressed_sub(0.0),
                   _op(1.0, "producer", "b9", MsgType.PUBLISH, 1, payload)])
    with pytest.raises(ValueError, match=fragment):
        expected_deliveries(w)


def test_addressed_publications_need_the_bit_owners() -> None:
    w = _workload([_addressed_sub(0.0), _to(1.0, 1, 0b10)])
    bare = Workload(w.schema, w.clients, w.ops, {})
    with pytest.raises(ValueError, match=r"meta\['addressed'\]"):
        expected_deliveries(bare)


@pytest.mark.parametrize("payload", [{"addressed": False}, {"addressed": True, "filter": []}])
def test_malformed_addressed_subscriptions_are_refused(payload: dict[str, Any]) -> None:
    w = _workload([_op(0.0, "s0", "b0", MsgType.SUBSCRIBE, 1, payload), _to(1.0, 1, 0b10)])
    with pytest.raises(ValueError, match="addressed subscription"):
        expected_deliveries(w)
