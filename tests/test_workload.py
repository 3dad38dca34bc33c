"""Stock workloads: deterministic, realistic, correctly timed, and their oracle is right."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from pathlib import Path

import pytest

from nodes.messages import Message, MsgType
from nodes.model import filter_from_json, matches, overlaps
from nodes.workloads.ops import ClientOp, Workload, workload_from_jsonl, workload_to_jsonl
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import MEGHDOOT_TEMPLATES, N_SYMBOLS, STOCK_SCHEMA, stock_workload

BROKERS = [f"b{i}" for i in range(6)]
MODERATE = {
    "n_publishers": 20,
    "n_subscribers": 400,
    "pubs_per_publisher": 60,
    "publish_rate_hz": 5.0,
    "seed": 11,
}


@pytest.fixture(scope="module", params=["octopia", "meghdoot"])
def workload(request: pytest.FixtureRequest) -> Workload:
    return stock_workload(BROKERS, mode=request.param, **MODERATE)


def _of(w: Workload, t: MsgType) -> list[ClientOp]:
    return [op for op in w.ops if op.msg.type is t]


def test_same_seed_same_workload_and_other_seed_differs(workload: Workload) -> None:
    mode = workload.meta["mode"]
    assert stock_workload(BROKERS, mode=mode, **MODERATE) == workload
    other = stock_workload(BROKERS, mode=mode, **{**MODERATE, "seed": 12})
    assert other.ops != workload.ops
    assert other.clients != workload.clients


def test_shape_schema_and_counts(workload: Workload) -> None:
    advs, subs, pubs = (
        _of(workload, t) for t in (MsgType.ADVERTISE, MsgType.SUBSCRIBE, MsgType.PUBLISH)
    )
    assert len(advs) == MODERATE["n_publishers"]
    assert len(subs) == MODERATE["n_subscribers"]
    assert len(pubs) == MODERATE["n_publishers"] * MODERATE["pubs_per_publisher"]
    assert len(advs) + len(subs) + len(pubs) == len(workload.ops)
    assert workload.meta["n_notifications"] == len(pubs)
    assert set(workload.clients.values()) <= set(BROKERS)
    for op in workload.ops:
        assert workload.clients[op.client] == op.broker
        assert op.msg.origin == op.client and op.msg.hops == 0
        if op.msg.type is MsgType.PUBLISH:
            assert len(op.msg.payload["attrs"]) == 10
            STOCK_SCHEMA.validate_notification(op.msg.payload["attrs"])
            assert op.msg.payload["t_pub"] == op.t_s
        else:
            STOCK_SCHEMA.validate_filter(filter_from_json(op.msg.payload["filter"]))
    # 20 contiguous blocks of 25 symbols, each published 60 times: all 500 symbols quoted
    assert len({op.msg.payload["attrs"]["Symbol"] for op in pubs}) == N_SYMBOLS


def test_phases_timing_and_message_ids(workload: Workload) -> None:
    start, gap, rate = 0.0, 1.0, MODERATE["publish_rate_hz"]
    times = [op.t_s for op in workload.ops]
    assert times == sorted(times)
    assert all(op.t_s == start for op in _of(workload, MsgType.ADVERTISE))
    assert all(start + gap <= op.t_s < start + 1.5 * gap for op in _of(workload, MsgType.SUBSCRIBE))
    ids: dict[str, list[int]] = defaultdict(list)
    pub_times: dict[str, list[float]] = defaultdict(list)
    for op in workload.ops:
        ids[op.client].append(op.msg.msg_id)
        if op.msg.type is MsgType.PUBLISH:
            pub_times[op.client].append(op.t_s)
    assert all(seq == list(range(1, len(seq) + 1)) for seq in ids.values())
    firsts = sorted(ts[0] for ts in pub_times.values())
    # By default publisher i starts i / n of a publish period late: evenly over one period.
    n = MODERATE["n_publishers"]
    assert all(math.isclose(t, start + 2 * gap + i / (n * rate))
               for i, t in enumerate(firsts))
    for ts in pub_times.values():
        assert all(math.isclose(b - a, 1 / rate) for a, b in itertools.pairwise(ts))


def test_publishers_start_over_the_whole_period_unless_asked_otherwise() -> None:
    def firsts(**kw: float) -> list[float]:
        w = stock_workload(BROKERS, n_publishers=100, n_subscribers=0, pubs_per_publisher=1,
                           publish_rate_hz=1.0, seed=1, **kw)
        return [op.t_s for op in _of(w, MsgType.PUBLISH)]

    spread = firsts()
    assert max(spread) - min(spread) > 0.9  # s: 100 publishers over one 1 s period
    assert sum(t < min(spread) + 0.01 for t in spread) == 1  # s: one per 10 ms slot
    bunched = firsts(publish_spread_share=0.01)
    assert max(bunched) - min(bunched) < 0.01  # s: the earlier behaviour, on request
    assert len(set(bunched)) == 100  # still no ties
    with pytest.raises(ValueError, match="publish_spread_share"):
        firsts(publish_spread_share=0.0)


def test_spread_phases_stay_in_their_half_gap() -> None:
    w = stock_workload(BROKERS, n_publishers=8, n_subscribers=10, pubs_per_publisher=2,
                       publish_rate_hz=5.0, seed=2, phase_gap_s=2.0, advertise_spread_s=0.8,
                       subscribe_spread_s=0.5)
    adv_times = [op.t_s for op in _of(w, MsgType.ADVERTISE)]
    assert adv_times == [0.8 * i / 8 for i in range(8)]  # publisher i at i / n of the spread
    assert all(2.0 <= op.t_s < 2.5 for op in _of(w, MsgType.SUBSCRIBE))
    assert (w.meta["advertise_spread_s"], w.meta["subscribe_spread_s"]) == (0.8, 0.5)
    for bad in ({"advertise_spread_s": 1.5}, {"subscribe_spread_s": -0.1}):
        with pytest.raises(ValueError, match="phase_gap_s / 2"):
            stock_workload(BROKERS, n_publishers=2, n_subscribers=2, pubs_per_publisher=2,
                           publish_rate_hz=5.0, seed=2, phase_gap_s=2.0, **bad)


def test_oracle_agrees_with_brute_force(workload: Workload) -> None:
    subs = [
        (op.client, filter_from_json(op.msg.payload["filter"]))
        for op in _of(workload, MsgType.SUBSCRIBE)
    ]
    want = {
        op.msg.key: frozenset(c for c, f in subs if matches(f, op.msg.payload["attrs"]))
        for op in _of(workload, MsgType.PUBLISH)
    }
    got = expected_deliveries(workload)
    assert got == want
    pairs = sum(map(len, want.values()))
    assert workload.meta["expected_deliveries"] == pairs
    assert workload.meta["selectivity"] == pairs / (len(want) * len(subs))


def test_publications_match_their_advertisement_and_most_subscriptions_overlap_one(
    workload: Workload,
) -> None:
    advs = {
        op.client: filter_from_json(op.msg.payload["filter"])
        for op in _of(workload, MsgType.ADVERTISE)
    }
    for op in _of(workload, MsgType.PUBLISH):
        assert matches(advs[op.client], op.msg.payload["attrs"])
    subs = [filter_from_json(op.msg.payload["filter"]) for op in _of(workload, MsgType.SUBSCRIBE)]
    overlapping = sum(any(overlaps(a, s, STOCK_SCHEMA) for a in advs.values()) for s in subs)
    assert overlapping >= 0.9 * len(subs)


def test_most_prices_lie_between_10_and_30(workload: Workload) -> None:
    prices = [
        op.msg.payload["attrs"][a]
        for op in _of(workload, MsgType.PUBLISH)
        for a in ("Open", "High", "Low", "Close")
    ]
    share = sum(10 <= p <= 30 for p in prices) / len(prices)
    assert share >= 0.75, share
    assert workload.meta["close_share_10_30"] >= 0.75


def test_octopia_selectivity_is_near_the_target() -> None:
    for target in (0.02, 0.05):
        w = stock_workload(BROKERS, mode="octopia", selectivity=target, **MODERATE)
        assert abs(w.meta["selectivity"] - target) <= 0.15 * target, w.meta["selectivity"]
        for kind, s in w.meta["selectivity_by_kind"].items():
            assert abs(s - target) <= 0.3 * target, (kind, s)
        assert w.meta["selectivity_target"] == target


def test_meghdoot_templates_follow_their_probabilities() -> None:
    n = 3000
    w = stock_workload(BROKERS, mode="meghdoot", **{**MODERATE, "n_subscribers": n})
    counts = w.meta["subscription_kinds"]
    assert sum(counts.values()) == n
    for name, p in MEGHDOOT_TEMPLATES:
        assert abs(counts.get(name, 0) / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 0.005, name
    # the template's shape shows in each filter
    shapes = {
        ("Open", "Symbol"),
        ("Low", "Symbol"),
        ("High", "Symbol"),
        ("Symbol", "Volume"),
        ("Volume",),
    }
    for op in _of(w, MsgType.SUBSCRIBE):
        attrs = tuple(sorted(p.attr for p in filter_from_json(op.msg.payload["filter"])))
        assert attrs in shapes


def test_jsonl_round_trip(workload: Workload, tmp_path: Path) -> None:
    path = tmp_path / "workload.jsonl"
    workload_to_jsonl(workload, path)
    assert workload_from_jsonl(path) == workload


def test_many_publishers_share_symbols() -> None:
    many = {"n_publishers": N_SYMBOLS + 2, "n_subscribers": 5, "pubs_per_publisher": 2}
    w = stock_workload(BROKERS, **{**MODERATE, **many})
    first = {
        op.client: op.msg.payload["attrs"] for op in _of(w, MsgType.PUBLISH) if op.msg.msg_id == 2
    }
    assert first["p0"] == first[f"p{N_SYMBOLS}"]
    assert first["p1"] == first[f"p{N_SYMBOLS + 1}"]
    assert first["p0"] != first["p1"]


def test_oracle_refuses_timing_dependent_ops(workload: Workload) -> None:
    unsub = ClientOp(9.0, "s0", workload.clients["s0"], Message(MsgType.UNSUBSCRIBE, 2, "s0"))
    w = Workload(workload.schema, workload.clients, (*workload.ops, unsub), workload.meta)
    with pytest.raises(ValueError, match="UNSUBSCRIBE"):
        expected_deliveries(w)


@pytest.mark.parametrize(
    "change",
    [
        {"mode": "padres"},
        {"n_publishers": 0},
        {"pubs_per_publisher": 0},
        {"publish_rate_hz": 0.0},
        {"selectivity": 0.0},
        {"max_preds": 0},
    ],
)
def test_bad_arguments_are_refused(change: dict) -> None:
    with pytest.raises(ValueError):
        stock_workload(BROKERS, **{**MODERATE, **change})
