"""PADRES-style TID routing (core ``tid-static``) in the simulator: the oracle's deliveries
exactly once on random SCOTs and other cyclic overlays, advertisements on every broker of
the 70-broker SCOT with their duplicates counted, subscriptions along the advertisement
trees, and no stale state after unsubscribe and unadvertise, even mid-flood."""

from __future__ import annotations

import random
from typing import Any

import networkx as nx
import pytest
from scot_cases import (
    check_oracle_run,
    churn_case,
    racing_workload,
    random_scot,
    run,
    small_workload,
)

from experiments.plan import overlay_edges
from nodes.cores.interface import Arrived, FromClient, Send
from nodes.cores.tid import TidCore
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json, overlaps
from nodes.sim.result import summarize
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import stock_workload
from topologies.links import LinkParams
from topologies.scot import scot_paper_graph

EMPTY = {"srt": {}, "prt": {}, "local": [], "withdrawn": {}}


def _cyclic(seed: int) -> nx.Graph:
    """A random connected cyclic overlay (no SCOT structure: the baseline needs none)."""
    rng = random.Random(f"cyclic/{seed}")
    g = nx.connected_watts_strogatz_graph(rng.randint(4, 12), 4, 0.4, seed=seed)
    g = nx.relabel_nodes(g, {n: f"b{n}" for n in g})
    for _, _, data in g.edges(data=True):
        data["delay_ms"] = rng.uniform(0.1, 3.0)
        data["bw_mbps"] = rng.choice([None, 2.0, 100.0])
    return g


@pytest.mark.parametrize("seed", range(25))
def test_random_overlays_deliver_the_oracle_set_exactly_once(seed: int) -> None:
    overlay = random_scot(random.Random(seed)) if seed % 5 else _cyclic(seed)
    w = small_workload(overlay, seed)
    result = check_oracle_run(overlay, w, "tid-static")
    assert "no_tree" not in result.record_counts
    # Flooding with duplicate detection: every broker sends each advertisement on every
    # link but the one it first came on; the host broker on all of its links.
    n_advs = sum(op.msg.type is MsgType.ADVERTISE for op in w.ops)
    per_adv = 2 * overlay.number_of_edges() - (overlay.number_of_nodes() - 1)
    assert result.ims_by_type["ADVERTISE"] == n_advs * per_adv


def _expected_prt(overlay: nx.Graph, w: Any, info: dict[str, Any],
                  srt: dict[str, dict[tuple[str, int], str]]) -> dict[str, dict]:
    """Bindings from scratch: each kept subscription, for each kept advertisement it
    overlaps, walks from its host broker up that advertisement's tree (the SRT last hops)
    to the publisher's host; each broker on the way binds it with the broker before."""
    advs = {(op.client, op.msg.msg_id): filter_from_json(op.msg.payload["filter"])
            for op in w.ops if op.msg.type is MsgType.ADVERTISE}
    prt: dict[str, dict[tuple[str, int], list]] = {b: {} for b in overlay}
    for sub_id in info["kept_subs"]:
        host = w.clients[sub_id[0]]
        prt[host][sub_id] = []
        for tid in info["kept_advs"]:
            if not overlaps(advs[tid], info["subs"][sub_id]):
                continue
            prev, cur = sub_id[0], host
            while True:
                prt[cur].setdefault(sub_id, []).append((tid, prev))
                up = srt[cur][tid]
                if up not in overlay:
                    break  # the publisher: cur is its host broker
                prev, cur = cur, up
    return {b: {s: sorted(v) for s, v in sorted(p.items())} for b, p in prt.items()}


@pytest.mark.parametrize("seed", range(12))
def test_unsubscribe_and_unadvertise_leave_exact_state_then_none(seed: int) -> None:
    overlay, w, info = churn_case(seed, "tid-static", EMPTY)

    # Midway: every broker holds exactly the kept advertisements, no withdrawal is still
    # pending, and the bindings are those of the kept subscriptions along the trees.
    _, cores = run(overlay, w, "tid-static", until_s=info["checkpoint_s"])
    states = {b: core.state() for b, core in cores.items()}
    srt = {b: s["srt"] for b, s in states.items()}
    want = _expected_prt(overlay, w, info, srt)
    for b, s in sorted(states.items()):
        assert sorted(s["srt"]) == info["kept_advs"], b
        assert s["withdrawn"] == {}, b
        assert s["prt"] == want[b], b
        assert [sid for sid, _ in s["local"]] == [
            sid for sid in info["kept_subs"] if w.clients[sid[0]] == b]


@pytest.mark.parametrize("seed", range(12))
def test_withdrawals_racing_the_flood_leave_nothing(seed: int) -> None:
    """Unadvertisements chase their advertisements' floods: late duplicates must not
    re-create entries, and the withdrawn ids must be forgotten once all copies passed."""
    overlay = random_scot(random.Random(f"race-scot/{seed}")) if seed % 3 else _cyclic(seed)
    result, cores = run(overlay, racing_workload(overlay, seed), "tid-static")
    assert "unhandled" not in result.record_counts
    for b, core in cores.items():
        assert core.state() == EMPTY, b


def test_paper_scot_advertisements_reach_every_broker_subscriptions_follow_trees() -> None:
    link = LinkParams(bw_mbps=100.0, delay_ms=1.0)
    overlay, _ = overlay_edges(scot_paper_graph(params=link), netem=True)
    w = stock_workload(sorted(overlay.nodes), n_publishers=30, n_subscribers=60,
                       pubs_per_publisher=3, publish_rate_hz=10.0, seed=5, selectivity=0.02,
                       advertise_spread_s=0.3)
    result, cores = run(overlay, w, "tid-static")
    summary = summarize(result, expected_deliveries(w))
    assert (summary["missing"], summary["duplicates"]) == (0, 0)
    assert summary["srt_size"] == {"mean": 30.0, "max": 30}  # every broker, every advertisement
    # 205 links, 70 brokers: 341 copies per advertisement, 272 of them duplicates.
    assert result.ims_by_type["ADVERTISE"] == 30 * 341
    # A subscription is stored only where one of its overlapping advertisements' trees
    # leads back from the publisher to it; a subscription overlapping none, or only
    # advertisements of publishers on its own broker, stays home.
    advs = [(op.broker, filter_from_json(op.msg.payload["filter"]))
            for op in w.ops if op.msg.type is MsgType.ADVERTISE]
    for op in w.ops:
        if op.msg.type is not MsgType.SUBSCRIBE:
            continue
        f = filter_from_json(op.msg.payload["filter"])
        holders = {b for b, c in cores.items() if op.msg.key in c.state()["prt"]}
        publishers_at = {b for b, a in advs if overlaps(a, f)}
        if publishers_at <= {op.broker}:
            assert holders == {op.broker}
        else:
            assert op.broker in holders and len(holders) > 1


def test_publication_takes_one_tree_and_unadvertised_ones_are_dropped() -> None:
    core = TidCore("b0", ["b1"], {})
    for n, window in ((1, ["a", "m"]), (2, ["h", "z"])):
        adv = Message(MsgType.ADVERTISE, n, "p", 0,
                      {"filter": [["Symbol", "range", *window]]})
        assert [a.link for a in core.handle(FromClient("p", adv), 0.0)
                if isinstance(a, Send)] == ["b1"]
    sub = Message(MsgType.SUBSCRIBE, 1, "s", 1, {"filter": [["Symbol", "=", "ibm"]],
                                                 "tids": [["p", 1], ["p", 2]]})
    assert core.handle(Arrived("b1", sub), 0.1) == []  # the publisher's host: path ends here
    assert core.state()["prt"] == {("s", 1): [(("p", 1), "b1"), (("p", 2), "b1")]}
    assert core.table_sizes() == {"srt": 2, "prt": 1}  # one (subscription, last hop) entry
    pub = Message(MsgType.PUBLISH, 5, "p", 0, {"attrs": {"Symbol": "ibm"}})
    (send,) = [a for a in core.handle(FromClient("p", pub), 0.2) if isinstance(a, Send)]
    assert send.link == "b1" and send.msg.payload["tid"] == ["p", 1]  # the smallest of two
    off = Message(MsgType.PUBLISH, 6, "p", 0, {"attrs": {"Symbol": "abc"}})
    assert [a.kind for a in core.handle(FromClient("p", off), 0.2)] == ["match"]
    outside = Message(MsgType.PUBLISH, 7, "q", 0, {"attrs": {"Symbol": "ibm"}})
    assert [a.kind for a in core.handle(FromClient("q", outside), 0.2)] == ["no_tree"]
