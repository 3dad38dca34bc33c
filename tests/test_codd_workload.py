"""CoDD's workload: consumers arrive half a step before document floor(i d / m), documents
name their recipients in a hex bitmap that a replay of the bucket memberships recorded in
the meta reproduces, shuffles keep k buckets and each consumer's bucket count, the
measured selectivity is near the asked one, leaves fall where the readings put them, and
the oracle expects what the arrival and leave rules say; the plan's ``codd`` kind refuses
bad values in one line."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from experiments.plan import compile_plan
from experiments.spec import SpecError, parse_spec
from nodes.messages import MsgType
from nodes.model import filter_from_json, matches
from nodes.workloads.codd import LEAVE_GRACE_S, codd_workload
from nodes.workloads.kinds import WORKLOADS
from nodes.workloads.meghdoot import MEGHDOOT_SCHEMA
from nodes.workloads.membership import membership_intervals
from nodes.workloads.ops import Workload, workload_from_jsonl, workload_to_jsonl
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import MEGHDOOT_TEMPLATES

# Names whose given order is not their sorted order, so bit order is tested too.
NODES = [f"n{i:02d}" for i in (7, 3, 12, 0, 9, 1, 5, 11, 2, 10, 4, 8, 6)]


def _docs(w: Workload) -> list[Any]:
    return [op for op in w.ops if op.msg.type is MsgType.PUBLISH]


def _recipients(w: Workload, to: str) -> set[str]:
    bits = int(to, 16)
    return {x for j, x in enumerate(sorted(w.meta["nodes"])) if bits >> j & 1}


def _replayed_buckets(w: Workload) -> list[list[set[str]]]:
    """The bucket memberships before each document, replayed from the meta alone."""
    buckets = [set(b) for b in w.meta["buckets"]]
    shuffles = dict(zip(w.meta["shuffle_documents"], w.meta["shuffle_buckets"], strict=True))
    out = []
    for i in range(w.meta["n_documents"]):
        for b, members in shuffles.get(i, []):
            buckets[b] = set(members)
        out.append([set(b) for b in buckets])
    return out


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    a = codd_workload(NODES, 300, seed=4, leave_fraction=0.3, cf=50)
    b = codd_workload(list(reversed(NODES)), 300, seed=4, leave_fraction=0.3, cf=50)
    assert a == b  # the given order of the nodes does not matter either
    assert a.ops != codd_workload(NODES, 300, seed=5, leave_fraction=0.3, cf=50).ops


@pytest.mark.parametrize(("d", "step_s"), [(100, 0.1), (7, 0.3), (1000, 0.01)])
def test_consumers_arrive_half_a_step_before_their_document(d: int, step_s: float) -> None:
    w = codd_workload(NODES, d, seed=1, step_s=step_s)
    names = sorted(NODES)
    root, consumers = names[0], names[1:]
    m = len(consumers)
    assert w.meta["root"] == root and w.meta["settle_s"] == step_s / 4
    docs = _docs(w)
    assert [op.t_s for op in docs] == pytest.approx([i * step_s for i in range(d)])
    assert all(op.broker == root and op.client == "producer" and op.msg.msg_id == i + 1
               for i, op in enumerate(docs))
    for i, x in enumerate(consumers):
        a = math.floor(i * d / m)
        t = w.meta["arrivals_s"][x]
        assert t == pytest.approx(max(0.0, a * step_s - step_s / 2), abs=1e-9)
        ops = [op for op in w.ops if op.broker == x]
        # The JOIN first, the SUBSCRIBE a quarter step later: a runtime attaches a node's
        # clients once it has joined, and two clients at one instant may arrive in
        # either order.
        sub_t = ops[1].t_s
        assert sub_t == pytest.approx(t + step_s / 4 if a else step_s / 4, abs=1e-9)
        assert [(op.msg.type, op.client, op.msg.msg_id) for op in ops] == [
            (MsgType.JOIN, f"j-{x}", 1), (MsgType.SUBSCRIBE, f"q-{x}", 1)]
        assert ops[0].t_s == t
        assert ops[0].msg.payload == {"seeds": [root], "from_s": sub_t + w.meta["settle_s"]}
        assert ops[1].msg.payload == {"addressed": True}
        if a:  # the oracle's inclusive settle boundary counts document a, not a - 1
            assert docs[a - 1].t_s < sub_t + w.meta["settle_s"] <= docs[a].t_s
    # Ops are in time order, and a consumer arriving with document 0 joins before it.
    assert [op.t_s for op in w.ops] == sorted(op.t_s for op in w.ops)
    at_zero = [op.msg.type for op in w.ops if op.t_s == 0]
    assert at_zero[-1] is MsgType.PUBLISH and set(at_zero[:-1]) == {MsgType.JOIN}


def test_the_oracle_expects_each_consumer_from_its_document_until_its_leave() -> None:
    """What a user notices: the documents a consumer must receive are those addressed to
    it from document floor(i d / m) on (document 0 excepted: published as the first
    consumer arrives) and before its leave."""
    d = 400
    w = codd_workload(NODES, d, seed=2, leave_fraction=0.5, cf=40)
    consumers = sorted(NODES)[1:]
    first = {x: math.floor(i * d / len(consumers)) for i, x in enumerate(consumers)}
    expected = expected_deliveries(w)
    assert w.meta["leaves_s"]
    for i, op in enumerate(_docs(w)):
        live = {x for x in _recipients(w, op.msg.payload["to"])
                if max(first[x], 1) <= i and op.t_s < w.meta["leaves_s"].get(x, math.inf)}
        assert expected[op.msg.key] == {f"q-{x}" for x in live}


@pytest.mark.parametrize("buckets_per_node", [1, 3])
def test_recipients_are_the_union_of_the_documents_buckets(buckets_per_node: int) -> None:
    w = codd_workload(NODES, 600, seed=3, cf=25, c=5, k=8, selectivity=0.3,
                      buckets_per_node=buckets_per_node)
    assert w.meta["buckets_per_document"] == round(0.3 * 8)
    replay = _replayed_buckets(w)
    for i, op in enumerate(_docs(w)):
        picked = w.meta["document_buckets"][i]
        assert len(set(picked)) == len(picked) == w.meta["buckets_per_document"]
        union = set().union(*(replay[i][b] for b in picked))
        assert _recipients(w, op.msg.payload["to"]) == union


@pytest.mark.parametrize(("k", "c", "buckets_per_node"), [(20, 4, 1), (6, 6, 3), (5, 2, 4)])
def test_shuffles_keep_k_buckets_and_each_consumers_count(k: int, c: int,
                                                          buckets_per_node: int) -> None:
    cf = 10
    w = codd_workload(NODES, 300, seed=6, k=k, c=c, cf=cf, buckets_per_node=buckets_per_node)
    consumers = sorted(NODES)[1:]
    assert w.meta["shuffle_documents"] == list(range(cf, 300, cf))
    replay = _replayed_buckets(w)
    changed = 0
    for before, after in itertools.pairwise(replay):
        assert len(after) == k
        counts = Counter(x for bucket in after for x in bucket)
        assert counts == dict.fromkeys(consumers, buckets_per_node)
        rebuilt = [b for b in range(k) if before[b] != after[b]]
        assert len(rebuilt) <= c
        changed += bool(rebuilt)
    # Each shuffle rebuilds c buckets: the memberships do change (not once in 29 did the
    # pairing give every half back to its own bucket).
    assert changed >= len(w.meta["shuffle_documents"]) // 2
    for shuffle in w.meta["shuffle_buckets"]:
        assert len({b for b, _ in shuffle}) == c


def test_a_shuffle_merges_pairs_of_halves_of_the_buckets_it_picks() -> None:
    """One bucket per consumer: each rebuilt bucket is two halves (floor or ceil of half a
    picked bucket each; a whole bucket counts as its own two halves) of picked buckets."""
    w = codd_workload([f"c{i:03d}" for i in range(61)], 400, seed=12, k=6, c=3, cf=20)
    replay = _replayed_buckets(w)
    for i, shuffle in zip(w.meta["shuffle_documents"], w.meta["shuffle_buckets"],
                          strict=True):
        old = [replay[i - 1][b] for b, _ in shuffle]
        for _, members in shuffle:
            assert set(members) <= set().union(*old)
            halves = 0
            for bucket in old:
                part = len(bucket & set(members))
                if part == len(bucket) >= 2:
                    halves += 2
                elif part:
                    assert part in (len(bucket) // 2, len(bucket) - len(bucket) // 2)
                    halves += 1
            assert halves <= 2


@pytest.mark.parametrize(("selectivity", "seed"), [(0.1, 1), (0.2, 2), (0.2, 3), (0.5, 4)])
def test_measured_selectivity_is_near_the_asked_one(selectivity: float, seed: int) -> None:
    """With one bucket per consumer the buckets partition the consumers, and a document's
    j = s k buckets are drawn uniformly whatever the partition, so its share of
    consumers has mean exactly j / k = s given the past: the shares minus s are bounded
    martingale differences (range 1). Azuma-Hoeffding over d = 2,000 documents:
    P(|mean - s| >= 0.05) <= 2 exp(-2 d 0.05^2) = 2 e^-10 < 1e-4 per seed."""
    nodes = [f"c{i:03d}" for i in range(101)]
    w = codd_workload(nodes, 2000, seed=seed, selectivity=selectivity)
    shares = [len(_recipients(w, op.msg.payload["to"])) / 100 for op in _docs(w)]
    assert w.meta["selectivity"] == pytest.approx(sum(shares) / len(shares))
    assert w.meta["selectivity_asked"] == selectivity
    assert abs(w.meta["selectivity"] - selectivity) < 0.05


def test_to_is_lowercase_hex_over_the_sorted_names_without_the_root() -> None:
    w = codd_workload(NODES, 200, seed=8, selectivity=0.9, k=10)
    names = sorted(NODES)
    assert w.meta["nodes"] == names
    assert w.meta["addressed"] == [None, *(f"q-{x}" for x in names[1:])]
    seen = set()
    for op in _docs(w):
        to = op.msg.payload["to"]
        assert to == format(int(to, 16), "x")  # lowercase, no 0x, no leading zeros
        assert not int(to, 16) & 1  # bit 0 is the root's
        assert int(to, 16) >> len(names) == 0
        seen |= _recipients(w, to)
    assert seen == set(names[1:])  # every bit 1..12 is used, in sorted-name order


def test_stock_interest_subscribes_with_meghdoot_templates_over_stock_events() -> None:
    w = codd_workload(NODES, 500, seed=9, interest="stock")
    assert w.schema == MEGHDOOT_SCHEMA
    subs = {op.broker: filter_from_json(op.msg.payload["filter"])
            for op in w.ops if op.msg.type is MsgType.SUBSCRIBE}
    assert sorted(subs) == sorted(NODES)[1:]
    assert sum(w.meta["templates"].values()) == len(subs)
    assert set(w.meta["templates"]) <= {t for t, _ in MEGHDOOT_TEMPLATES}
    reached = 0
    for op in _docs(w):
        attrs = op.msg.payload["attrs"]
        assert "to" not in op.msg.payload and set(attrs) == set(MEGHDOOT_SCHEMA)
        reached += sum(matches(f, attrs) for f in subs.values())
    assert w.meta["selectivity"] == pytest.approx(reached / (500 * len(subs)))
    assert 0 < w.meta["selectivity"] < 0.2
    # The oracle reads these as filter traffic: every expected pair matches.
    for key, clients in expected_deliveries(w).items():
        attrs = _docs(w)[key[1] - 1].msg.payload["attrs"]
        assert all(matches(subs[c[2:]], attrs) for c in clients)


@pytest.mark.parametrize(("leave_fraction", "d"), [(0.4, 300), (1.0, 300), (1.0, 40)])
def test_leaves_fall_after_five_steps_and_before_the_last_document(
        leave_fraction: float, d: int) -> None:
    step_s = 0.1
    w = codd_workload(NODES, d, seed=10, leave_fraction=leave_fraction, step_s=step_s)
    arrivals, leaves = w.meta["arrivals_s"], w.meta["leaves_s"]
    last_doc_s = (d - 1) * step_s
    can_leave = [x for x, t in arrivals.items() if t + 5.5 * step_s <= last_doc_s + 1e-9]
    assert len(leaves) == round(leave_fraction * len(can_leave))
    assert set(leaves) <= set(can_leave)
    for x, t in leaves.items():
        assert arrivals[x] + 5 * step_s - 1e-9 <= t < last_doc_s
        assert (t / step_s) % 1 == pytest.approx(0.5)  # between two documents
        (un,) = [op for op in w.ops if op.msg.type is MsgType.UNSUBSCRIBE and op.broker == x]
        assert (un.t_s, un.client, un.msg.msg_id, un.msg.payload) == (
            t, f"q-{x}", 2, {"sub_id": 1, "at_s": t})
        (op,) = [op for op in w.ops if op.msg.type is MsgType.LEAVE and op.broker == x]
        assert (op.t_s, op.client, op.msg.msg_id) == (t + LEAVE_GRACE_S, f"j-{x}", 2)


def test_membership_matches_the_join_and_leave_ops() -> None:
    w = codd_workload(NODES, 300, seed=11, leave_fraction=0.5)
    root = sorted(NODES)[0]
    membership = dict(w.meta["membership"])
    assert membership.pop(root) == [[0.0, None]]
    assert membership == membership_intervals(w.ops)
    assert any(spans[0][1] is not None for spans in membership.values())


def test_a_run_folders_workload_file_gives_the_same_expectations(tmp_path: Path) -> None:
    """workload.jsonl keeps the nudged arrival times exactly, so a re-read workload gives
    the oracle the same settle boundaries."""
    w = codd_workload(NODES, 300, seed=13, leave_fraction=0.5)
    workload_to_jsonl(w, tmp_path / "workload.jsonl")
    again = workload_from_jsonl(tmp_path / "workload.jsonl")
    assert again.ops == w.ops
    assert expected_deliveries(again) == expected_deliveries(w)


# ---- the run plan's codd kind -------------------------------------------------------------


def _spec(**workload: Any) -> dict[str, Any]:
    return {"name": "codd-t", "seed": 3, "topology": {"name": "peers", "params": {"n": 12}},
            "links": {"bw_mbps": 100, "delay_ms": 1},
            "workload": {"kind": "codd", **workload},
            "routing": {"algorithms": ["codd"], "links": "on-demand"}}


def test_plan_builds_the_papers_defaults_over_the_brokers() -> None:
    plan = compile_plan(parse_spec(_spec()), netem=False)
    assert {k: v for k, v in WORKLOADS["codd"].defaults.items() if k != "kind"} == {
        "n_documents": 10000, "interest": "classes", "selectivity": 0.2, "k": 20, "c": 4,
        "cf": 200, "buckets_per_node": 1, "step_s": 0.1, "leave_fraction": 0.0,
        "crash_fraction": 0.0}
    assert plan.workload == codd_workload(sorted(plan.overlay.nodes), 10000, seed=3)
    assert plan.links == "on-demand"


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("n_documents", 0, "an integer >= 1"),
    ("n_documents", 2.5, r"an integer \(its default is 10000\)"),  # its type first
    ("interest", "xml", "one of classes, stock"),
    ("selectivity", 0, r"a number in \(0, 1\]"),
    ("selectivity", 1.5, r"a number in \(0, 1\]"),
    ("k", 0, "an integer >= 1"),
    ("c", 21, r"an integer 0..k \(20\)"),
    ("cf", 0, "an integer >= 1"),
    ("buckets_per_node", 0, r"an integer 1..k \(20\)"),
    ("step_s", 0, "a number > 0"),
    ("leave_fraction", 1.5, r"a number in \[0, 1\]"),
    ("leave_fraction", True, r"a finite number \(its default is 0.0\)"),
    ("crash_fraction", -0.1, r"a number in \[0, 1\]"),
])
def test_plan_refuses_bad_values_in_one_line(field: str, value: Any, allowed: str) -> None:
    with pytest.raises(SpecError, match=rf"^workload\.{field}: bad value .*; allowed: "
                                        rf"{allowed}$") as err:
        compile_plan(parse_spec(_spec(**{field: value})), netem=False)
    assert "\n" not in str(err.value)


def test_plan_refuses_fixed_links_and_unknown_fields() -> None:
    fixed = _spec()
    fixed["routing"]["links"] = "fixed"
    with pytest.raises(SpecError, match=r"^routing\.links: .*allowed: on-demand$"):
        compile_plan(parse_spec(fixed), netem=False)
    with pytest.raises(SpecError, match=r"^workload: unknown field.*allowed: .*leave_fraction"):
        compile_plan(parse_spec(_spec(fanout=6)), netem=False)
