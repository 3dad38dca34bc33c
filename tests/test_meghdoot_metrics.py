"""Meghdoot's metrics (nodes.metrics.meghdoot): hand-made peer records with known answers for
each metric, then one small simulated run whose records must be consistent."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

import nodes.cores
from analysis.meghdoot import draw_meghdoot
from nodes.cores.can import zone_digest
from nodes.cores.meghdoot import bucket_of
from nodes.logs import Ev, iter_jsonl
from nodes.messages import Message, MsgType
from nodes.metrics.meghdoot import CONTACT_BUCKETS_PCT, meghdoot_metrics
from nodes.model import Schema
from nodes.sim.links import LinkModel
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.meghdoot import meghdoot_workload
from nodes.workloads.ops import ClientOp, Workload

ZONE = [[0.0, 0.0], [1.0, 1.0]]


def peer(node: str, **fields: Any) -> dict[str, Any]:
    """A ``can_peer`` record with neutral defaults."""
    return {"node": node, "joined_s": 0.0, "zone": ZONE, "volume": 1.0, "group": [node],
            "subscriptions": 0, "received": 0, "buckets": [], "bucket_s": 0.1,
            "contacts": [], "sub_hops": [], "event_hops": [], "duplicates": 0, **fields}


def workload(events: Sequence[tuple[float, int]], membership: Mapping[str, float]) -> Workload:
    """Events ``(t_s, msg_id)`` from client ``e`` (keys ``e:<msg_id>``) and a
    subscription (not an event) at the start; peers join at the given times."""
    ops = [ClientOp(0.0, "s", "p0", Message(MsgType.SUBSCRIBE, 1, "s", payload={"filter": []}))]
    ops += [ClientOp(t, "e", "p0", Message(MsgType.PUBLISH, k, "e", payload={"attrs": {}}))
            for t, k in events]
    return Workload(Schema({}), {"e": "p0", "s": "p0"}, tuple(ops),
                    {"membership": {p: [[t, None]] for p, t in membership.items()}})


# ---- peers contacted ----------------------------------------------------------------------


def test_contacted_buckets_and_boundaries() -> None:
    names = [f"p{i:02d}" for i in range(20)]  # 20 peers: one peer is 5 %
    # Event k contacts the first n_k peers: 5, 10, 15, 20, 25, 60, 65, 100 %, and none.
    counts = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 12, 7: 13, 8: 20, 9: 0}
    w = workload([(1.0 + k, k) for k in counts], dict.fromkeys(names, 0.0))
    peers = [peer(p, contacts=[f"e:{k}" for k, n in counts.items() if i < n])
             for i, p in enumerate(names)]
    c = meghdoot_metrics(peers, w)["contacted"]
    assert c["events"] == 9
    one = 100 / 9
    assert c["buckets_pct"] == pytest.approx({
        "0-5": 2 * one,  # 0 % and exactly 5 %
        "5-10": one, "10-15": one, "15-20": one, "20-30": one, "30-40": 0.0, "40-50": 0.0,
        "50-60": one,  # exactly 60 %
        "60-100": 2 * one})
    assert list(c["buckets_pct"]) == [f"{lo}-{hi}" for lo, hi in CONTACT_BUCKETS_PCT]
    assert sum(c["buckets_pct"].values()) == pytest.approx(100.0)
    assert c["share_under_5_pct"] == pytest.approx(one)  # only the event with no contact
    assert c["share_under_10_pct"] == pytest.approx(2 * one)  # 0 % and 5 %
    pcts = sorted([5, 10, 15, 20, 25, 60, 65, 100, 0])
    assert c["mean_pct"] == pytest.approx(sum(pcts) / 9)
    assert c["p95_pct"] == pytest.approx(65 + 0.6 * 35)  # position 7.6 of 0..8
    assert c["max_pct"] == 100.0
    assert c["no_contact"] == 1
    assert c["late_contacts"] == c["unknown_keys"] == 0


def test_contacted_counts_distinct_peers_live_at_publication() -> None:
    # p0 from the start, p1..p3 join at 1.05; events at 1.0 (1 live) and 2.0 (4 live).
    w = workload([(1.0, 1), (2.0, 2)], {"p0": 0.0, "p1": 1.05, "p2": 1.05, "p3": 1.05})
    peers = [peer("p0", contacts=["e:1", "e:1", "e:2"]),  # a repeated key counts once
             peer("p1", contacts=["e:2", "x:9"], joined_s=1.06),
             peer("p2", contacts=["e:1"], joined_s=1.07),  # joined after event 1
             peer("p3", joined_s=1.08)]
    c = meghdoot_metrics(peers, w)["contacted"]
    # Event 1: 2 peers of 1 live = 200 % (the late joiner shows); event 2: 2 of 4 = 50 %.
    assert c["max_pct"] == 200.0
    assert c["mean_pct"] == pytest.approx(125.0)
    assert c["buckets_pct"]["40-50"] == 50.0 and c["buckets_pct"]["60-100"] == 50.0
    assert c["late_contacts"] == 1 and c["unknown_keys"] == 1 and c["no_contact"] == 0


def test_contacted_respects_leaves() -> None:
    w = workload([(1.0, 1), (3.0, 2)], {"p0": 0.0, "p1": 0.0})
    w = replace(w, meta={"membership": {"p0": [[0.0, None]], "p1": [[0.0, 2.0]]}})  # p1 leaves
    peers = [peer("p0", contacts=["e:1", "e:2"])]
    c = meghdoot_metrics(peers, w)["contacted"]
    assert c["buckets_pct"]["40-50"] == 50.0  # event 1: 1 of 2 peers
    assert c["buckets_pct"]["60-100"] == 50.0  # event 2: 1 of 1


# ---- load ---------------------------------------------------------------------------------


def test_load_share_counts_messages_since_each_peer_joined() -> None:
    # Buckets of 0.1 s: bucket k spans [(k - 0.5) 0.1, (k + 0.5) 0.1).
    peers = [peer("a", received=8, buckets=[[0, 2], [1, 2], [3, 4]]),
             peer("b", received=4, buckets=[[3, 3], [5, 1]], joined_s=0.26),  # bucket 3
             peer("c", received=3, buckets=[[2, 3]], joined_s=0.16)]  # bucket 2
    assert bucket_of(0.26, 0.1) == 3 and bucket_of(0.16, 0.1) == 2
    load = meghdoot_metrics(peers, workload([], {}))["load"]
    # Totals per bucket: 0: 2, 1: 2, 2: 3, 3: 7, 5: 1 (15 messages).
    shares = {"a": 100 * 8 / 15, "b": 100 * 4 / 8, "c": 100 * 3 / 11}
    assert load["messages"] == 15
    assert load["max_pct"] == pytest.approx(shares["a"])
    assert load["max_peer"] == {"node": "a", "joined_s": 0.0, "received": 8}
    assert load["sum_pct"] == pytest.approx(sum(shares.values()))
    assert load["decile_sizes"] == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert list(load["deciles_pct"].values())[:4] == pytest.approx(
        [shares["a"], shares["b"], shares["c"], None])
    assert load["received_mismatches"] == 0


def test_load_deciles_with_uneven_group_sizes() -> None:
    # 23 peers from the start, peer i received i + 1 messages, all in bucket 0.
    peers = [peer(f"p{i:02d}", received=i + 1, buckets=[[0, i + 1]]) for i in range(23)]
    load = meghdoot_metrics(peers, workload([], {}))["load"]
    total = 23 * 24 / 2
    ranked = list(range(23, 0, -1))
    sizes = [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]
    assert load["decile_sizes"] == sizes
    want, at = [], 0
    for n in sizes:
        want.append(100 * sum(ranked[at:at + n]) / n / total)
        at += n
    assert list(load["deciles_pct"]) == ["0-10", "10-20", "20-30", "30-40", "40-50",
                                         "50-60", "60-70", "70-80", "80-90", "90-100"]
    assert list(load["deciles_pct"].values()) == pytest.approx(want)
    assert load["sum_pct"] == pytest.approx(100.0)  # everyone joined at the start
    assert load["max_pct"] == pytest.approx(100 * 23 / total)


def test_load_flags_records_whose_buckets_disagree_with_received() -> None:
    peers = [peer("a", received=5, buckets=[[0, 4]]), peer("b", received=1, buckets=[[0, 1]])]
    assert meghdoot_metrics(peers, workload([], {}))["load"]["received_mismatches"] == 1
    with pytest.raises(ValueError, match="bucket_s"):
        meghdoot_metrics([peer("a"), peer("b", bucket_s=1.0)], workload([], {}))


# ---- zones, hops, duplicates ------------------------------------------------------------


def test_zones_replication_degrees() -> None:
    z1 = [[0.0, 0.0], [0.5, 1.0]]
    z2 = [[0.5, 0.0], [1.0, 0.5]]
    z3 = [[0.5, 0.5], [1.0, 1.0]]
    peers = [peer(p, zone=z1, volume=0.5, group=["a", "b", "c"], neighbours=[2, 3])
             for p in "abc"]
    peers.append(peer("d", zone=z2, volume=0.25, group=["d"], neighbours=[2, 5]))
    peers += [peer("e", zone=z3, volume=0.25, group=["e", "f"], neighbours=[2, 4]),
              peer("f", zone=z3, volume=0.25, group=["f"], neighbours=[2, 4])]  # stale group
    z = meghdoot_metrics(peers, workload([], {}))["zones"]
    assert z["unique_zones"] == 3 and z["peers"] == 6
    assert z["degree_hist"] == {"1": 1, "2": 1, "3": 1}
    assert z["max_degree"] == 3 and z["replicated_zones"] == 2
    assert z["group_mismatches"] == 1
    assert z["volume_sum"] == pytest.approx(1.0)
    assert z["neighbour_zones"]["mean"] == 2 and z["neighbour_zones"]["max"] == 2
    assert z["neighbour_peers"]["mean"] == pytest.approx(22 / 6)
    assert z["neighbour_peers"]["max"] == 5


def test_tables_count_missing_stale_and_extra_entries() -> None:
    """a and d hold the left half, b the lower right quarter, c the upper: every zone
    abuts the other two. Exact tables count nothing. Then a's table lacks c, b's lists
    a with the whole space (a zone a no longer holds), and c's lists e, which holds no
    zone (gone): one missing, one stale and one extra entry, in three tables."""
    za = ((0.0, 0.0), (0.5, 1.0))
    zb = ((0.5, 0.0), (1.0, 0.5))
    zc = ((0.5, 0.5), (1.0, 1.0))

    def rec(node: str, zone: Any, table: Mapping[str, Any], group: Sequence[str]) -> dict:
        return peer(node, zone=[list(zone[0]), list(zone[1])], group=list(group),
                    table={q: zone_digest(z) for q, z in table.items()})

    exact = [rec("a", za, {"b": zb, "c": zc}, "ad"), rec("d", za, {"b": zb, "c": zc}, "ad"),
             rec("b", zb, {"a": za, "d": za, "c": zc}, "b"),
             rec("c", zc, {"a": za, "d": za, "b": zb}, "c")]
    tables = meghdoot_metrics(exact, workload([], {}))["tables"]
    assert tables == {"inexact_peers": 0, "missing": 0, "stale": 0, "extra": 0}
    wrong = [rec("a", za, {"b": zb}, "ad"), rec("d", za, {"b": zb, "c": zc}, "ad"),
             rec("b", zb, {"a": ((0.0, 0.0), (1.0, 1.0)), "d": za, "c": zc}, "b"),
             rec("c", zc, {"a": za, "d": za, "b": zb, "e": zb}, "c")]
    tables = meghdoot_metrics(wrong, workload([], {}))["tables"]
    assert tables == {"inexact_peers": 3, "missing": 1, "stale": 1, "extra": 1}
    assert meghdoot_metrics([peer("a")], workload([], {}))["tables"] is None  # older runs


def test_joins_are_banded_by_the_peers_live_before_each_joined() -> None:
    peers = [peer("p00")]
    peers += [peer(f"p{i:02d}", joined_s=i + 0.01, joined_as="replica" if i % 4 == 0 else "split")
              for i in range(1, 12)]
    membership = {r["node"]: float(int(r["joined_s"])) for r in peers}
    joins = meghdoot_metrics(peers, workload([], membership))["joins_by_peers"]
    # p01..p09 joined with 1 to 9 peers live (p04, p08 as replicas); p10, p11 with 10, 11.
    assert joins == {"1-9": {"joins": 9, "replicas": 2, "replica_pct": pytest.approx(200 / 9)},
                     "10-99": {"joins": 2, "replicas": 0, "replica_pct": 0.0}}


def test_hops_and_duplicates_merge_the_peers_histograms() -> None:
    peers = [peer("a", sub_hops=[[0, 1], [2, 2]], event_hops=[[1, 3]], duplicates=2),
             peer("b", sub_hops=[[4, 1]], duplicates=1)]
    m = meghdoot_metrics(peers, workload([], {}))
    assert m["hops"]["subscriptions"] == pytest.approx(
        {"count": 4, "mean": 2.0, "p50": 2.0, "p95": 2 + 2 * 0.85, "max": 4})
    assert m["hops"]["events"] == {"count": 3, "mean": 1.0, "p50": 1.0, "p95": 1.0, "max": 1}
    assert m["duplicates"] == 3
    assert json.loads(json.dumps(m)) == m  # JSON-able, and round-trips unchanged


# ---- a simulated run ----------------------------------------------------------------------


def simulated_records(w: Workload, params: Mapping[str, Any], out_dir: Path
                      ) -> list[dict[str, Any]]:
    g = nx.Graph()
    g.add_nodes_from(sorted(set(w.clients.values())))
    # Final records are logged only with per-message logs on (nodes.sim.simulator, _result).
    simulate(g, w, "meghdoot",
             SimSettings(core_params=params, derived=nodes.cores.overlay_params("meghdoot", g),
                         seed=1, out_dir=out_dir, on_demand=LinkModel(latency_ms=1.0),
                         until_s=w.ops[-1].t_s + 2, log_messages=True))
    return [r for b in sorted(g.nodes) for r in iter_jsonl(out_dir / f"{b}.jsonl", Ev.RECORD)
            if r.get("kind") == "can_peer"]


def test_a_simulated_run_is_consistent_and_drawn(tmp_path: Path) -> None:
    w = meghdoot_workload([f"p{i:04d}" for i in range(30)], 300, 300, seed=3,
                          join_probability=0.3)
    (tmp_path / "meghdoot").mkdir()
    (tmp_path / "can").mkdir()
    peers = simulated_records(w, {}, tmp_path / "meghdoot")
    assert len(peers) == w.meta["n_peers"] == 30
    m = meghdoot_metrics(peers, w)
    assert json.loads(json.dumps(m)) == m

    c = m["contacted"]
    keys = [f"{op.msg.origin}:{op.msg.msg_id}" for op in w.ops if op.msg.type is MsgType.PUBLISH]
    per_event = Counter(k for r in peers for k in set(r["contacts"]))
    assert c["events"] == len(keys) == 300
    assert all(per_event[k] >= 1 for k in keys) and c["no_contact"] == 0
    assert c["late_contacts"] == c["unknown_keys"] == 0
    assert sum(c["buckets_pct"].values()) == pytest.approx(100.0)
    assert 0 < c["mean_pct"] <= c["p95_pct"] <= c["max_pct"] <= 100.0

    z = m["zones"]
    assert sum(int(d) * n for d, n in z["degree_hist"].items()) == z["peers"] == 30
    assert z["group_mismatches"] == 0 and z["volume_sum"] == pytest.approx(1.0)
    assert z["max_degree"] >= 2  # event load replicated some zone
    # A split adds a zone and a replica does not (no peer left): the bands count them.
    joins = m["joins_by_peers"]
    assert sum(b["joins"] for b in joins.values()) == 29
    assert sum(b["replicas"] for b in joins.values()) == z["peers"] - z["unique_zones"]

    load = m["load"]
    totals: Counter[int] = Counter()
    for r in peers:
        assert sum(n for _, n in r["buckets"]) == r["received"]
        totals.update({k: n for k, n in r["buckets"]})
    shares = [100 * r["received"]
              / sum(n for k, n in totals.items() if k >= bucket_of(r["joined_s"], 0.1))
              for r in peers]
    assert load["sum_pct"] == pytest.approx(sum(shares))
    assert load["max_pct"] == pytest.approx(max(shares))
    assert load["messages"] == sum(r["received"] for r in peers)
    assert load["decile_sizes"] == [3] * 10
    assert sum(3 * x for x in load["deciles_pct"].values()) == pytest.approx(sum(shares))

    # Every subscription and event reached its owner once.
    assert m["hops"]["subscriptions"]["count"] == 300
    assert m["hops"]["events"]["count"] == 300

    # The plain CAN join (ablation) never replicates: one peer per zone.
    can_peers = simulated_records(w, {"join": "can"}, tmp_path / "can")
    can_m = meghdoot_metrics(can_peers, w)
    assert can_m["zones"]["degree_hist"] == {"1": 30}

    figs = tmp_path / "figs"
    figs.mkdir()
    paths = draw_meghdoot({"30 peers": m, "30 peers, CAN join": can_m, "none": None}, figs)
    assert [p.name for p in paths] == ["fig-meghdoot-contacted.png", "fig-meghdoot-load.png",
                                       "fig-meghdoot-replication.png", "fig-meghdoot-joins.png"]
    for p in paths:
        assert p.stat().st_size > 5_000
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert draw_meghdoot({}, figs) == []


def test_a_run_sums_the_same_core_counters_with_and_without_logs(tmp_path: Path) -> None:
    from experiments.plan import compile_plan
    from experiments.runs.simulated import run_simulation
    from experiments.spec import load_spec

    plan = compile_plan(load_spec("meghdoot-peers", [
        "topology.params.n=20", "workload.n_subscriptions=300", "workload.n_events=200"]))
    _, logged = run_simulation(plan, tmp_path / "logs")
    _, counted = run_simulation(plan, tmp_path / "counts", log_messages=False)
    c = logged["meghdoot"]["counters"]
    assert counted["meghdoot"]["counters"] == c
    # Every peer but the first joined by a split or a replica; nothing was stuck.
    assert c["joins_split"] + c["joins_replicate"] == 19 and c["joins_split"] > 0
    assert c["route_stuck"] == 0
    assert c["subscriptions"] >= 300  # co-replicas store each of theirs
    m = counted["meghdoot"]["meghdoot"]
    assert m == logged["meghdoot"]["meghdoot"]
    # The sums agree with the peers' own end-of-run records.
    assert (c["received"], c["duplicates"], c["handoff_first"]) == (
        m["load"]["messages"], m["duplicates"], m["handoff_first"])
