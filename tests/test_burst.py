"""The high-rate-publisher burst: its workload's placement and timing, spec errors, and
its metrics and figures on a small simulated run, checked against the logs by hand."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from analysis.burst import draw_burst
from experiments.plan import compile_plan, workload_params
from experiments.runs.simulated import run_simulation
from experiments.spec import Spec, SpecError, parse_spec
from nodes.messages import MsgType
from nodes.metrics.burst import burst_metrics, default_block_size
from nodes.model import filter_from_json
from nodes.sim.engine import SIM_EPOCH_S
from nodes.workloads.burst import HRP, HRP_SYMBOL, add_burst, burst_settings, clusters_of
from nodes.workloads.ops import Workload, workload_from_jsonl
from nodes.workloads.oracle import expected_deliveries

SMALL_SCOT = {"name": "scot", "params": {"tree": "a-b,b-c", "m": 3, "mode": "overlay"}}
BURST = {"rate_hz": 1000, "count": 400, "start_s": 1.5, "n_subscribers": 7}


def _spec(burst: Any = BURST, topology: dict | None = None, algorithm: str = "snr",
          **workload: Any) -> Spec:
    return parse_spec({
        "name": "burst", "topology": topology or SMALL_SCOT, "seed": 5,
        "links": {"bw_mbps": 1, "delay_ms": 1},
        "workload": {"n_publishers": 2, "n_subscribers": 12, "pubs_per_publisher": 40,
                     "publish_rate_hz": 10, "selectivity": 0.2, **workload,
                     "burst": burst},
        "routing": {"algorithms": [algorithm]},
    })


def _build(spec: Spec) -> tuple[Workload, nx.Graph]:
    plan = compile_plan(spec)
    assert plan.workload is not None
    return plan.workload, plan.graph


# ---- the workload ---------------------------------------------------------------------

def _hrp_subscribers(w: Workload) -> dict[str, str]:
    return {c: b for c, b in w.clients.items() if c.startswith("hrps")}


@pytest.mark.parametrize(("topology", "n_subs", "n_clusters"), [
    (SMALL_SCOT, 7, 3),
    ({"name": "scot-paper", "params": {}}, 40, 5),
    ({"name": "gigabit-cluster", "params": {"n": 4}}, 3, 1),  # no clusters: one
])
def test_placement_every_cluster_never_the_hrp_broker(topology: dict, n_subs: int,
                                                      n_clusters: int) -> None:
    # flood: the placement does not depend on the algorithm, and snr needs a SCOT.
    w, graph = _build(_spec({**BURST, "n_subscribers": n_subs}, topology, "flood"))
    meta = w.meta["burst"]
    hrp_broker = w.clients[HRP]
    assert meta["broker"] == hrp_broker and meta["clusters"] == n_clusters
    subs = _hrp_subscribers(w)
    assert len(subs) == n_subs and subs == meta["subscribers"]
    assert hrp_broker not in subs.values()
    clusters = clusters_of(graph)
    cluster_of = {b: c for c, bs in clusters.items() for b in bs}
    per_cluster = Counter(cluster_of[b] for b in subs.values())
    assert set(per_cluster) == set(clusters)  # every cluster has one
    # Round-robin: cluster sizes differ by at most one, earlier clusters first.
    sizes = [per_cluster[c] for c in clusters]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1
    # Subscriber i sits in the i-th cluster, round robin.
    order = list(clusters)
    for i in range(n_subs):
        assert cluster_of[subs[f"hrps{i}"]] == order[i % len(order)]


def test_rates_counts_ids_and_timing() -> None:
    spec = _spec()
    w, _ = _build(spec)
    p = workload_params(spec)
    ops = [op for op in w.ops if op.client == HRP]
    assert [op.msg.type for op in ops[:1]] == [MsgType.ADVERTISE]
    pubs = [op for op in ops if op.msg.type is MsgType.PUBLISH]
    assert len(pubs) == BURST["count"] == w.meta["burst"]["count"]
    t_pub0 = w.meta["start_s"] + 2 * p["phase_gap_s"]
    assert pubs[0].t_s == pytest.approx(t_pub0 + BURST["start_s"])
    gaps = {round(b.t_s - a.t_s, 9) for a, b in itertools.pairwise(pubs)}
    assert gaps == {round(1 / BURST["rate_hz"], 9)}
    assert w.meta["burst"]["t_last_s"] == pytest.approx(pubs[-1].t_s)
    assert all(op.msg.payload["t_pub"] == op.t_s for op in pubs)
    # Ids unique per origin; ops in time order; every op from its client's broker.
    keys = [(op.msg.type, op.msg.origin, op.msg.msg_id) for op in w.ops]
    assert len(keys) == len(set(keys))
    assert len({(o, i) for t, o, i in keys if t is MsgType.PUBLISH}) == \
        sum(t is MsgType.PUBLISH for t, _, _ in keys)
    assert [op.t_s for op in w.ops] == sorted(op.t_s for op in w.ops)
    assert all(w.clients[op.client] == op.broker for op in w.ops)
    # HRP subscribers subscribe during the subscription phase, before any publication.
    subs = [op for op in w.ops if op.client.startswith("hrps")]
    assert all(op.msg.type is MsgType.SUBSCRIBE for op in subs)
    first_pub = min(op.t_s for op in w.ops if op.msg.type is MsgType.PUBLISH)
    assert all(op.t_s < first_pub for op in subs)


def test_dedicated_symbol_and_the_oracle() -> None:
    w, _ = _build(_spec())
    regular_symbols = {op.msg.payload["attrs"]["Symbol"] for op in w.ops
                       if op.msg.type is MsgType.PUBLISH and op.client != HRP}
    hrp_pubs = [op.msg for op in w.ops if op.client == HRP and op.msg.type is MsgType.PUBLISH]
    assert {m.payload["attrs"]["Symbol"] for m in hrp_pubs} == {HRP_SYMBOL}
    assert HRP_SYMBOL not in regular_symbols
    subs = _hrp_subscribers(w)
    for op in w.ops:
        if op.client in subs:
            f = filter_from_json(op.msg.payload["filter"])
            assert len(f) == 1 and (f[0].attr, f[0].op, f[0].value) == ("Symbol", "=", HRP_SYMBOL)
    expected = expected_deliveries(w)
    regular = 0
    for m in hrp_pubs:
        assert set(subs) <= expected[m.key]
        regular += len(expected[m.key] - set(subs))
    assert w.meta["burst"]["regular_pairs"] == regular
    assert w.meta["burst"]["hrp_pairs"] == len(hrp_pubs) * len(subs)


def test_seeded_and_pinned() -> None:
    a, _ = _build(_spec())
    b, _ = _build(_spec())
    assert a.ops == b.ops and a.clients == b.clients
    pinned, _ = _build(_spec({**BURST, "broker": "b1"}))
    assert pinned.clients[HRP] == "b1" and "b1" not in _hrp_subscribers(pinned).values()


def test_no_burst_leaves_the_workload_alone() -> None:
    spec = _spec(None)
    w, _ = _build(spec)
    assert workload_params(spec)["burst"] is None
    assert "burst" not in w.meta and HRP not in w.clients


def test_defaults_fill_missing_fields() -> None:
    s = burst_settings({"count": 5})
    assert s == {"rate_hz": 1000.0, "count": 5, "start_s": 2.0, "n_subscribers": 10,
                 "broker": None}


# ---- spec errors ----------------------------------------------------------------------

@pytest.mark.parametrize(("burst", "field"), [
    ({**BURST, "rate_hz": 0}, "workload.burst.rate_hz"),
    ({**BURST, "rate_hz": "fast"}, "workload.burst.rate_hz"),
    ({**BURST, "rate_hz": float("inf")}, "workload.burst.rate_hz"),
    ({**BURST, "count": 1.5}, "workload.burst.count"),
    ({**BURST, "count": 0}, "workload.burst.count"),
    ({**BURST, "count": True}, "workload.burst.count"),
    ({**BURST, "start_s": -1}, "workload.burst.start_s"),
    ({**BURST, "n_subscribers": 0}, "workload.burst.n_subscribers"),
    ({**BURST, "broker": 3}, "workload.burst.broker"),
    ({**BURST, "colour": "red"}, "colour"),
    ([1, 2], "workload.burst"),
    # Only the topology can tell these:
    ({**BURST, "broker": "z9"}, "workload.burst.broker"),
    ({**BURST, "n_subscribers": 2}, "workload.burst.n_subscribers"),
])
def test_bad_burst_fields_are_named(burst: Any, field: str) -> None:
    spec = _spec(burst)
    with pytest.raises(SpecError) as info:
        _build(spec)
    msg = str(info.value)
    assert field in msg and "\n" not in msg, msg


def test_burst_on_a_bulk_workload_is_refused() -> None:
    spec = parse_spec({"name": "bulk", "topology": {"name": "gigabit-cluster"},
                       "workload": {"kind": "bulk", "burst": BURST}})
    with pytest.raises(SpecError, match="burst"):
        workload_params(spec)


def test_a_cluster_with_only_the_hrp_broker_is_refused() -> None:
    """add_burst is below the spec layer: it raises ValueError naming the field (the plan
    turns that into a SpecError)."""
    spec = _spec(None)
    w, _ = _build(spec)
    g = nx.Graph()
    g.add_node("a0", cluster=0)
    g.add_node("b0", cluster=0)
    g.add_node("a1", cluster=1)
    g.add_edges_from([("a0", "b0"), ("a0", "a1")])
    with pytest.raises(ValueError, match=r"workload\.burst\.broker.*cluster 1"):
        add_burst(w, g, {**burst_settings(BURST), "broker": "a1", "n_subscribers": 2},
                  seed=1)


# ---- metrics and figures on a simulated run -------------------------------------------

@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    spec = _spec()
    run_dir, summaries = run_simulation(compile_plan(spec), tmp_path_factory.mktemp("runs"))
    return run_dir, summaries


def _hand(run_dir: Path, w: Workload, hrp_broker: str, links: list[str], *, under_s: float,
          block: int, normal_ms: float) -> dict[str, Any]:
    """The metrics recomputed from the raw logs, the plain way."""
    rows = []  # (t_recv, client index, line index, delay, origin)
    for ci, client in enumerate(sorted(w.clients)):
        lines = (run_dir / f"{client}.jsonl").read_text().splitlines()
        for li, line in enumerate(lines):
            r = json.loads(line)
            if r["ev"] == "recv" and r.get("type") == "PUBLISH":
                rows.append((r["t_wall"], ci, li, r["t_wall"] - r["t_pub"], r["origin"]))
    rows.sort()
    delays = [row[3] for row in rows]
    hrp_sends = [json.loads(x) for x in (run_dir / "hrp.jsonl").read_text().splitlines()]
    pubs = [r["t_pub"] for r in hrp_sends if r["ev"] == "send" and r["type"] == "PUBLISH"]
    t0, t1 = min(pubs), max(pubs)
    blocks = [(rows[min(i + block, len(rows)) - 1][0] - t0, max(delays[i:i + block]) * 1000)
              for i in range(0, len(rows), block)]
    bad_ends = [t for t, m in blocks if m >= normal_ms]
    area, n_links = 0.0, len(links)
    for line in (run_dir / f"{hrp_broker}.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["ev"] == "queue" and r["link"] in links and t0 < r["t_wall"] <= t1:
            area += r["queue_len"] * r["window_ms"] / 1000
    return {
        "n": len(rows),
        "share": sum(d < under_s for d in delays) / len(delays),
        "mean_ms": 1000 * sum(delays) / len(delays),
        "hrp_n": sum(row[4] == HRP for row in rows),
        "blocks": blocks,
        "queue_mean": area / (n_links * (t1 - t0)),
        "return_s": (max(bad_ends[-1], t1 - t0) - (t1 - t0)) if bad_ends else 0.0,
        "before_max_ms": 1000 * max(d for row, d in zip(rows, delays, strict=True)
                                    if row[0] < t0),
    }


def test_metrics_match_a_hand_computation(sim_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summaries = sim_run
    out = run_dir / "snr"
    s = summaries["snr"]
    assert s["missing"] == 0 and s["duplicates"] == 0
    w = workload_from_jsonl(run_dir / "workload.jsonl")
    graph = compile_plan(_spec()).overlay
    hrp_broker = w.meta["burst"]["broker"]
    links = sorted(graph.neighbors(hrp_broker))
    m = s["burst"]
    assert json.loads((out / "summary.json").read_text())["burst"] == m
    assert m["broker"] == hrp_broker and m["queue"]["links"] == links
    assert m["published"] == BURST["count"]
    assert m["duration_s"] == pytest.approx((BURST["count"] - 1) / BURST["rate_hz"])
    # Every HRP notification reached its subscribers and the regular ones it matches.
    assert m["hrp_deliveries"] == w.meta["burst"]["hrp_pairs"] + w.meta["burst"]["regular_pairs"]
    assert m["deliveries"] == s["delivered"]
    assert m["block_size"] == default_block_size(m["deliveries"])
    assert m["queue"]["mean_len"] > 1  # 1 Mbit/s carries about 500 quotes/s: 1000 Hz queue

    # Thresholds that split this run's delays, so the comparison is not trivial.
    under_s, block, normal_ms = 0.05, 37, 40.0
    got = burst_metrics(out, w, graph, block_size=block, under_s=under_s, normal_ms=normal_ms)
    hand = _hand(out, w, hrp_broker, links, under_s=under_s, block=block, normal_ms=normal_ms)
    assert 0.05 < hand["share"] < 0.95, hand["share"]
    assert got["deliveries"] == hand["n"] and got["hrp_deliveries"] == hand["hrp_n"]
    assert got["share_under"] == pytest.approx(hand["share"], abs=1e-6)
    assert got["delay_ms_mean"] == pytest.approx(hand["mean_ms"], abs=1e-5)
    assert len(got["blocks"]["t_s"]) == len(hand["blocks"]) == math.ceil(hand["n"] / block)
    for t, mx, (ht, hmx) in zip(got["blocks"]["t_s"], got["blocks"]["max_delay_ms"],
                                hand["blocks"], strict=True):
        assert t == pytest.approx(ht, abs=2e-6) and mx == pytest.approx(hmx, abs=2e-6)
    assert got["queue"]["mean_len"] == pytest.approx(hand["queue_mean"], abs=1e-6)
    assert got["normal"]["threshold_ms"] == normal_ms
    assert got["normal"]["return_s"] == pytest.approx(hand["return_s"], abs=2e-6)
    assert got["normal"]["return_s"] > 0
    # The default threshold: twice the worst delay before the burst.
    assert m["normal"]["threshold_ms"] == pytest.approx(2 * hand["before_max_ms"], abs=1e-5)
    # A threshold nothing meets: never back to normal; one everything meets: at once.
    assert burst_metrics(out, w, graph, normal_ms=1e-6)["normal"]["return_s"] is None
    assert burst_metrics(out, w, graph, normal_ms=1e9)["normal"]["return_s"] == 0.0


def test_metrics_read_t_s_logs_and_do_without_the_hrp_log(
        sim_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Logs stamped ``t_s`` (no ``t_wall``) give the same metrics; without the HRP's
    log the burst's span comes from the ``t_pub`` of its notifications."""
    run_dir, summaries = sim_run
    w = workload_from_jsonl(run_dir / "workload.jsonl")
    graph = compile_plan(_spec()).overlay
    copy = tmp_path / "snr"
    shutil.copytree(run_dir / "snr", copy)
    for path in copy.glob("*.jsonl"):
        recs = []
        for line in path.read_text().splitlines():
            r = json.loads(line)
            r["t_s"] = r.pop("t_wall") - SIM_EPOCH_S
            if r.get("t_pub") is not None:
                r["t_pub"] -= SIM_EPOCH_S
            recs.append(json.dumps(r))
        path.write_text("\n".join(recs) + "\n")
    want = summaries["snr"]["burst"]
    got = burst_metrics(copy, w, graph)
    assert got["share_under"] == want["share_under"]
    assert got["delay_ms_mean"] == pytest.approx(want["delay_ms_mean"], abs=1e-3)
    assert got["blocks"]["t_s"] == pytest.approx(want["blocks"]["t_s"], abs=1e-5)
    assert got["queue"]["mean_len"] == pytest.approx(want["queue"]["mean_len"], rel=1e-6)
    (copy / "hrp.jsonl").unlink()
    alone = burst_metrics(copy, w, graph)
    assert alone["duration_s"] == pytest.approx(want["duration_s"], abs=1e-5)
    assert alone["deliveries"] == want["deliveries"]


def test_figures_are_written(sim_run: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    run_dir, summaries = sim_run
    for name in ("fig-burst-delay.png", "fig-burst-summary.png"):
        data = (run_dir / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
    m = summaries["snr"]["burst"]
    never = {**m, "normal": {**m["normal"], "at_s": None, "return_s": None}}
    paths = draw_burst({"snr": m, "idr": never, "skipped": None}, tmp_path)
    assert [p.name for p in paths] == ["fig-burst-delay.png", "fig-burst-summary.png"]
    assert all(p.stat().st_size > 5000 for p in paths)
    assert draw_burst({}, tmp_path / "none") == []


def test_runs_without_a_burst_have_no_burst_metrics(tmp_path: Path) -> None:
    run_dir, summaries = run_simulation(compile_plan(_spec(None)), tmp_path)
    assert "burst" not in summaries["snr"]
    assert not list(run_dir.glob("fig-burst-*.png"))
