"""OctopiA's static routing (core ``snr``) in the simulator: the oracle's deliveries exactly
once on random SCOTs, the paper's structural facts on its 70-broker SCOT, the CIV protocol
message by message, and no stale state after unsubscribe and unadvertise."""

from __future__ import annotations

import json
import random
import re
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

from experiments.plan import compile_plan, overlay_edges, processing_model
from experiments.reproduce import load_paper, paper_specs
from experiments.spec import load_spec
from nodes.cores import make_core, overlay_params
from nodes.cores.interface import Arrived, Deliver, FromClient, Send
from nodes.cores.octopia import OctopiaCore
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json, overlaps
from nodes.sim.processing import calibrated_service
from nodes.sim.result import summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import stock_workload
from topologies.links import LinkParams
from topologies.scot import scot_overlay, scot_paper_graph

EMPTY = {"hosted": {}, "forwarded": {}, "prt": {}}


@pytest.mark.parametrize("seed", range(25))
def test_random_scots_deliver_the_oracle_set_exactly_once(seed: int) -> None:
    overlay = random_scot(random.Random(seed))
    check_oracle_run(overlay, small_workload(overlay, seed), "snr")


def _cluster(overlay: nx.Graph, broker: str) -> int:
    return overlay.nodes[broker]["cluster"]


def _expected_state(overlay: nx.Graph, w: Any, info: dict[str, Any]) -> dict[str, Any]:
    """What every broker should hold with only ``kept_subs`` and ``kept_advs`` in place,
    computed from scratch (no reference counts): CIVs, overlap counts, PRT last hops."""
    subs, advs = info["subs"], {}
    for op in w.ops:
        if op.msg.type is MsgType.ADVERTISE:
            advs[(op.client, op.msg.msg_id)] = filter_from_json(op.msg.payload["filter"])
    state: dict[str, Any] = {b: {"hosted": {}, "forwarded": {}, "prt": {}} for b in overlay}
    for client, n in info["kept_subs"]:
        host = w.clients[client]
        members = [b for b in overlay if _cluster(overlay, b) == _cluster(overlay, host)]
        tree = overlay.subgraph(members)
        for b in members:
            hop = client if b == host else nx.shortest_path(tree, b, host)[1]
            state[b]["prt"][(client, n)] = hop
    for adv_id in info["kept_advs"]:
        host = w.clients[adv_id[0]]
        region, h = overlay.nodes[host]["region"], _cluster(overlay, host)
        civ = {h}
        for b in overlay:
            if overlay.nodes[b]["region"] != region or b == host:
                continue
            c = _cluster(overlay, b)
            count = sum(overlaps(advs[adv_id], subs[s]) for s in info["kept_subs"]
                        if _cluster(overlay, w.clients[s[0]]) == c)
            state[b]["forwarded"][adv_id] = (host, count)
            if count:
                civ.add(c)
        state[host]["hosted"][adv_id] = sorted(civ)
    return {b: {k: dict(sorted(v.items())) for k, v in s.items()} for b, s in state.items()}


@pytest.mark.parametrize("seed", range(12))
def test_unsubscribe_and_unadvertise_leave_exact_state_then_none(seed: int) -> None:
    overlay, w, info = churn_case(seed, "snr", EMPTY)

    # Midway, with half the subscriptions and some advertisements withdrawn, every
    # reference-counted bit and count equals what a recomputation from scratch gives.
    _, cores = run(overlay, w, "snr", until_s=info["checkpoint_s"])
    want = _expected_state(overlay, w, info)
    for b, core in sorted(cores.items()):
        assert core.state() == want[b], b


@pytest.mark.parametrize("seed", range(12))
def test_withdrawals_racing_their_own_spread_leave_nothing(seed: int) -> None:
    overlay = random_scot(random.Random(f"race-scot/{seed}"))
    result, cores = run(overlay, racing_workload(overlay, seed), "snr")
    assert "unhandled" not in result.record_counts
    for b, core in cores.items():
        assert core.state() == EMPTY, b


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The 70-broker paper SCOT with 40 publishers and 120 subscribers, logs kept."""
    link = LinkParams(bw_mbps=100.0, delay_ms=1.0)
    overlay, _ = overlay_edges(scot_paper_graph(params=link), netem=True)
    w = stock_workload(sorted(overlay.nodes), n_publishers=40, n_subscribers=120,
                       pubs_per_publisher=3, publish_rate_hz=10.0, seed=5, selectivity=0.02,
                       advertise_spread_s=0.3)
    out = tmp_path_factory.mktemp("paper")
    result, cores = run(overlay, w, "snr", out_dir=out)
    return {"overlay": overlay, "w": w, "result": result, "cores": cores, "out": out}


def test_paper_scot_advertisement_trees_have_length_one(paper_run: dict[str, Any]) -> None:
    overlay, w, out = paper_run["overlay"], paper_run["w"], paper_run["out"]
    m = 5
    recvs = [r for b in overlay for line in (out / f"{b}.jsonl").read_text().splitlines()
             if (r := json.loads(line))["ev"] == "recv" and r["type"] == "ADVERTISE"
             and r["link"] in overlay]
    n_advs = sum(op.msg.type is MsgType.ADVERTISE for op in w.ops)
    assert len(recvs) == n_advs * (m - 1) == paper_run["result"].ims_by_type["ADVERTISE"]
    assert {r["hops"] for r in recvs} == {1}
    for r in recvs:  # over an iLink, from the publisher's host broker
        assert overlay.edges[r["node"], r["link"]]["type"] == "iLink"
        assert r["link"] == w.clients[r["origin"]]


def test_paper_scot_advertisements_on_m_brokers_subscriptions_in_their_cluster(
        paper_run: dict[str, Any]) -> None:
    overlay, w, cores = paper_run["overlay"], paper_run["w"], paper_run["cores"]
    stored: dict[tuple[str, int], set[str]] = {}
    prt: dict[tuple[str, int], set[str]] = {}
    for b, core in cores.items():
        s = core.state()
        for adv_id in [*s["hosted"], *s["forwarded"]]:
            stored.setdefault(adv_id, set()).add(b)
        for sub_id in s["prt"]:
            prt.setdefault(sub_id, set()).add(b)
    assert len(stored) == 40 and len(prt) == 120
    for (pub, _), brokers in stored.items():
        region = overlay.nodes[w.clients[pub]]["region"]
        assert brokers == {f"{region}{c}" for c in range(5)}  # exactly m, all of its region
    for (sub, _), brokers in prt.items():
        cluster = overlay.nodes[w.clients[sub]]["cluster"]
        assert brokers == {b for b in overlay if overlay.nodes[b]["cluster"] == cluster}
    summary = summarize(paper_run["result"], expected_deliveries(w))
    assert summary["srt_size"]["mean"] == pytest.approx(40 * 5 / 70)
    assert summary["prt_size"]["mean"] == pytest.approx(120 * 14 / 70)
    assert (summary["missing"], summary["duplicates"]) == (0, 0)
    assert 1.0 < summary["delay_ms"]["advertisement"]["max"] < 1.1  # one 1 ms hop
    assert summary["delay_ms"]["subscription"]["mean"] > 2.0  # trees of 14 brokers
    assert summary["hops"]["advertisement"] == {"mean": 1.0, "max": 1}
    # A subscription's last broker is in its cluster's tree, or one CIB_SET beyond it,
    # and each of its hops took a 1 ms link at least.
    tree = overlay.subgraph(b for b in overlay if overlay.nodes[b]["cluster"] == 0)
    assert 2 <= summary["hops"]["subscription"]["max"] <= nx.diameter(tree) + 1
    result = paper_run["result"]
    assert all(d >= h * 1e-3 for d, h in zip(result.delays_s["subscription"],
                                            result.hops["subscription"], strict=True))


# ---- the CIV protocol, message by message, on a 2 x 2 SCOT ---------------------------

ADV = [["Symbol", "range", "a", "m"]]
SUB = [["Symbol", "=", "ibm"]]


def _cores() -> dict[str, OctopiaCore]:
    ov = scot_overlay([("a", "b")], 2)  # a0-b0 (cluster 0), a1-b1 (cluster 1); a0-a1, b0-b1
    params = overlay_params("snr", ov)
    return {b: make_core("snr", b, sorted(ov.neighbors(b)), params[b]) for b in ov}


def _sends(actions: list[Any]) -> list[tuple[str, str, Any]]:
    return [(a.link, a.msg.type.name, a.msg.payload) for a in actions if isinstance(a, Send)]


def test_cib_set_carries_the_subscription_and_cib_clear_undoes_it() -> None:
    c = _cores()
    adv = Message(MsgType.ADVERTISE, 1, "p", 0, {"filter": ADV})
    assert _sends(c["a0"].handle(FromClient("p", adv), 0.0)) == [("a1", "ADVERTISE", adv.payload)]
    assert c["a1"].handle(Arrived("a0", adv.forwarded()), 0.0) == []  # no subscription yet
    sub = Message(MsgType.SUBSCRIBE, 1, "s", 0, {"filter": SUB})
    assert _sends(c["b1"].handle(FromClient("s", sub), 0.1)) == [("a1", "SUBSCRIBE", sub.payload)]
    (cib,) = [a for a in c["a1"].handle(Arrived("b1", sub.forwarded()), 0.1)
              if isinstance(a, Send)]
    assert (cib.link, cib.msg.type, cib.msg.key, cib.msg.hops) == (
        "a0", MsgType.CIB_SET, sub.key, 2)
    assert cib.msg.payload == {"filter": SUB, "advs": [["p", 1]]}
    c["a0"].handle(Arrived("a1", cib.msg), 0.1)
    assert c["a0"].state()["hosted"] == {("p", 1): [0, 1]}
    assert c["a0"].table_sizes() == {"srt": 1, "prt": 0}  # CIB_SET stores no subscription

    pub = Message(MsgType.PUBLISH, 2, "p", 0, {"attrs": {"Symbol": "ibm"}})
    assert _sends(c["a0"].handle(FromClient("p", pub), 0.2)) == [("a1", "PUBLISH", pub.payload)]
    assert _sends(c["a1"].handle(Arrived("a0", pub.forwarded()), 0.2)) == [
        ("b1", "PUBLISH", pub.payload)]
    got = c["b1"].handle(Arrived("a1", pub.forwarded().forwarded()), 0.2)
    assert [(a.client, a.msg.key) for a in got if isinstance(a, Deliver)] == [("s", pub.key)]
    other = Message(MsgType.PUBLISH, 3, "p", 0, {"attrs": {"Symbol": "xyz"}})  # outside ADV
    assert _sends(c["a0"].handle(FromClient("p", other), 0.2)) == []

    unsub = Message(MsgType.UNSUBSCRIBE, 4, "s", 0, {"sub_id": 1})
    c["b1"].handle(FromClient("s", unsub), 0.3)
    (clear,) = _sends(c["a1"].handle(Arrived("b1", unsub.forwarded()), 0.3))
    assert clear == ("a0", "CIB_CLEAR", {"advs": [["p", 1]]})
    assert c["a1"].handle(Arrived("b1", unsub.forwarded()), 0.3) == []  # a repeat: no-op
    c["a0"].handle(Arrived("a1", Message(MsgType.CIB_CLEAR, 4, "s", 2, clear[2])), 0.3)
    assert c["a0"].state()["hosted"] == {("p", 1): [0]}


def test_adv_reply_when_the_subscription_came_first() -> None:
    c = _cores()
    sub = Message(MsgType.SUBSCRIBE, 1, "s", 0, {"filter": SUB})
    c["b1"].handle(FromClient("s", sub), 0.0)
    assert _sends(c["a1"].handle(Arrived("b1", sub.forwarded()), 0.0)) == []  # no adv yet
    adv = Message(MsgType.ADVERTISE, 1, "p", 0, {"filter": ADV})
    c["a0"].handle(FromClient("p", adv), 0.1)
    (reply,) = [a for a in c["a1"].handle(Arrived("a0", adv.forwarded()), 0.1)
                if isinstance(a, Send)]
    assert (reply.link, reply.msg.type, reply.msg.key) == ("a0", MsgType.ADV_REPLY, adv.key)
    c["a0"].handle(Arrived("a1", reply.msg), 0.1)
    assert c["a0"].state()["hosted"] == {("p", 1): [0, 1]}
    assert c["a1"].state()["forwarded"] == {("p", 1): ("a0", 1)}
    unadv = Message(MsgType.UNADVERTISE, 5, "p", 0, {"adv_id": 1})
    assert _sends(c["a0"].handle(FromClient("p", unadv), 0.2)) == [
        ("a1", "UNADVERTISE", {"adv_id": 1})]
    c["a1"].handle(Arrived("a0", unadv.forwarded()), 0.2)
    assert c["a0"].state()["hosted"] == {} and c["a1"].state()["forwarded"] == {}


def test_params_come_from_a_scot_and_are_checked() -> None:
    ov = scot_overlay([("a", "b"), ("b", "c")], 3)
    p = overlay_params("snr", ov)
    assert p["b1"] == {"cluster": 1, "primary": ["a1", "c1"], "secondary": {"b0": 0, "b2": 2}}
    assert json.loads(json.dumps(p)) == p  # they travel in broker config files
    with pytest.raises(ValueError, match="SCOT overlay"):
        overlay_params("snr", nx.path_graph(["x", "y"]))
    looped = ov.copy()
    looped.add_edge("a0", "c0", type="aLink")
    with pytest.raises(ValueError, match="cluster 0 is not a tree"):
        overlay_params("snr", looped)
    thin = ov.copy()
    thin.remove_edge("b0", "b2")
    with pytest.raises(ValueError, match="region 'b' is not complete"):
        overlay_params("snr", thin)
    with pytest.raises(ValueError, match="params need"):
        OctopiaCore("b1", ["a1"], {})
    with pytest.raises(ValueError, match="must split the neighbours"):
        OctopiaCore("b1", ["a1", "c1", "b0"], {**p["b1"]})


def _spec_summaries(name: str, *overrides: str) -> dict[str, dict[str, Any]]:
    """Simulate a shipped spec (no logs, its processing model) with both algorithms;
    summaries by algorithm."""
    plan = compile_plan(load_spec(name, list(overrides)))
    w = plan.workload
    assert w is not None
    expected = expected_deliveries(w)
    return {a.name: summarize(simulate(plan.overlay, w, a.name,
                                       SimSettings(core_params=dict(a.params), derived=a.derived,
                                                   seed=plan.spec.seed, window_ms=plan.window_ms,
                                                   log_messages=False,
                                                   processing=plan.processing)),
                              expected)
            for a in plan.algorithms}


def test_the_reproductions_brokers_take_the_calibrated_service_time() -> None:
    """Every point `pubsublab reproduce octopia` simulates, at either scale, gives its
    brokers the calibrated service time (the burst's overwhelmed broker 1/share of it),
    and each experiment's conditions say so."""
    paper = load_paper("octopia")
    calibrated = calibrated_service()
    for scale in ("full", "quick"):
        points = paper_specs(paper["experiments"],
                             {n: e[scale] for n, e in paper["experiments"].items()})
        for name, runs in points.items():
            for _, _, spec in runs:
                model = processing_model(spec)
                assert model is not None and model.service == calibrated, (name, scale)
                assert not model.per_broker, name
    for name, exp in paper["experiments"].items():
        said = exp["conditions"]
        if (other := re.match(r"as '([^']+)'", said)) is not None:  # another's, but ...
            said = paper["experiments"][other[1]]["conditions"]
        assert "calibrated" in said, name


def test_shipped_publisher_spec_shows_the_papers_directions() -> None:
    s = _spec_summaries("octopia-publishers")
    snr, tid = s["snr"], s["tid-static"]
    for x in (snr, tid):
        assert (x["missing"], x["duplicates"]) == (0, 0)
    assert snr["srt_size"]["mean"] < 0.1 * tid["srt_size"]["mean"]  # paper: 93 % smaller
    assert tid["ims_by_type"]["ADVERTISE"] > 50 * snr["ims_by_type"]["ADVERTISE"]  # 98.9x
    adv = "advertisement"
    assert snr["delay_ms"][adv]["mean"] < 0.5 * tid["delay_ms"][adv]["mean"]  # 63.5 % lower


@pytest.mark.parametrize(("mode", "reading"), [("octopia", "advertisements"),
                                               ("octopia", "publications"),
                                               ("meghdoot", "advertisements")])
def test_subscriber_spec_prt_and_ims_depend_on_how_many_advertisements_overlap(
        mode: str, reading: str) -> None:
    """The paper: OctopiA's PRTs 33 % larger and 32.7 % more subscription IMs, its
    subscription delay 33 % lower. Its PRTs hold every subscription of the cluster; a TID
    subscription is stored along the trees of the advertisements it overlaps. With
    selectivity read as a share of the publications, OctopiA-mode subscriptions (price
    windows) overlap most of the 100 domain-wide advertisements, so TID's trees span most
    of the 70 brokers and its PRTs and subscription IMs exceed OctopiA's; read as a share
    of the advertisements (the default: 2 of 100 overlap), or with Meghdoot's templates (a
    symbol each, about one advertisement), the paper's direction shows."""
    s = _spec_summaries("octopia-subscribers", f"workload.mode={mode}",
                        f"workload.selectivity_of={reading}", "workload.n_subscribers=100")
    snr, tid = s["snr"], s["tid-static"]
    for x in (snr, tid):
        assert (x["missing"], x["duplicates"]) == (0, 0)
    more = (lambda a, b: a < b) if reading == "publications" else (lambda a, b: a > b)
    assert more(snr["prt_size"]["mean"], tid["prt_size"]["mean"])
    assert more(snr["ims_by_type"]["SUBSCRIBE"], tid["ims_by_type"]["SUBSCRIBE"])
    if reading == "publications":
        sub = "subscription"
        assert snr["delay_ms"][sub]["mean"] < tid["delay_ms"][sub]["mean"]
