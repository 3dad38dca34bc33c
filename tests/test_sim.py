"""The discrete-event simulator: oracle deliveries, determinism, timing, queue statistics."""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.bench import sim as bench_sim
from nodes.cores.flood import FloodCore
from nodes.cores.interface import (
    Action,
    Arrived,
    Event,
    FromClient,
    LinkStats,
    Record,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.frames import frame_size
from nodes.messages import Message, MsgType
from nodes.metrics import summary as summary_module
from nodes.metrics.summary import build_summary, delay_stats_ms
from nodes.model import filter_from_json, matches
from nodes.sim.engine import SIM_EPOCH_S
from nodes.sim.result import summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import STOCK_SCHEMA, stock_workload

LINK = {"bw_mbps": 10.0, "delay_ms": 2.0}


def _named(g: nx.Graph, prefix: str = "b") -> nx.Graph:
    width = len(str(g.number_of_nodes() - 1))
    g = nx.relabel_nodes(g, {n: f"{prefix}{i:0{width}d}" for i, n in enumerate(sorted(g))})
    nx.set_edge_attributes(g, {e: dict(LINK) for e in g.edges})
    return g


def scot_like() -> nx.Graph:
    """Ta (a path with edge brokers) times K4: clusters are tree copies, regions cliques."""
    ta = nx.Graph([("F", "G"), ("G", "H"), ("F", "a"), ("G", "b"), ("H", "c"), ("H", "d")])
    g = nx.cartesian_product(ta, nx.complete_graph(4))
    return _named(nx.relabel_nodes(g, {(x, c): f"{x}{c}" for x, c in g}))


OVERLAYS = {
    "scot": scot_like,
    "random_tree": lambda: _named(nx.random_labeled_tree(25, seed=7)),
    "ring_with_chords": lambda: _named(nx.circulant_graph(16, [1, 5])),
}


def _workload(g: nx.Graph, seed: int, **kw: Any) -> Workload:
    args = {"n_publishers": 4, "n_subscribers": 20, "pubs_per_publisher": 15,
            "publish_rate_hz": 200.0, "selectivity": 0.2, "phase_gap_s": 0.2} | kw
    return stock_workload(sorted(g.nodes), seed=seed, **args)


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_flood_delivers_exactly_the_oracle_set_once(name: str, tmp_path: Path) -> None:
    g = OVERLAYS[name]()
    w = _workload(g, seed=11)
    expected = expected_deliveries(w)
    result = simulate(g, w, "flood", SimSettings(seed=0, out_dir=tmp_path))
    got = {key: sorted(subs) for key, subs in result.deliveries.items()}
    want = {key: sorted(subs) for key, subs in expected.items() if subs}
    assert got == want  # sorted lists, so a duplicate delivery would show
    assert sum(map(len, want.values())) > 20, "workload too selective to test anything"

    summary = summarize(result, expected, scale=0.5)
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    assert summary["delivered"] == summary["expected_deliveries"] == sum(map(len, want.values()))
    n_pubs = sum(op.msg.type is MsgType.PUBLISH for op in w.ops)
    assert summary["published"] == n_pubs
    # Flooding over a spanning tree: each publication crosses every tree edge once.
    assert summary["ims_by_type"] == {"PUBLISH": n_pubs * (g.number_of_nodes() - 1)}
    assert summary["ims_total"] == n_pubs * (g.number_of_nodes() - 1)
    assert summary["runtime"] == "simulated" and summary["algorithm"] == "flood"
    assert summary["delay_ms"]["advertisement"] is None
    assert summary["delay_ms"]["notification"]["max"] > 0
    n_subs = sum(op.msg.type is MsgType.SUBSCRIBE for op in w.ops)
    assert summary["prt_size"]["mean"] == pytest.approx(n_subs / g.number_of_nodes())

    # Client logs agree with the result: one recv per delivery, with t_pub.
    recvs = [r for c in sorted(w.clients) if c.startswith("s")
             for r in _read(tmp_path / f"{c}.jsonl") if r["ev"] == "recv"]
    assert len(recvs) == summary["delivered"]
    assert all(r["type"] == "PUBLISH" and "t_pub" in r for r in recvs)
    assert {p.name for p in tmp_path.iterdir()} == {
        f"{n}.jsonl" for n in [*g.nodes, *w.clients]
    }
    for path in tmp_path.iterdir():
        times = [r["t_mono"] for r in _read(path)]
        assert times == sorted(times), f"{path.name} is not in time order"


def _logs(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_same_seed_gives_byte_identical_logs_and_another_seed_differs(tmp_path: Path) -> None:
    g = OVERLAYS["ring_with_chords"]()
    runs = {}
    for label, seed in (("a", 5), ("b", 5), ("c", 6)):
        simulate(g, _workload(g, seed=seed), "flood",
                 SimSettings(seed=seed, out_dir=tmp_path / label))
        runs[label] = _logs(tmp_path / label)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    # Rerunning into a used folder overwrites instead of appending.
    simulate(g, _workload(g, seed=5), "flood", SimSettings(seed=5, out_dir=tmp_path / "a"))
    assert _logs(tmp_path / "a") == runs["b"]


def test_loss_is_seeded() -> None:
    g = OVERLAYS["random_tree"]()
    nx.set_edge_attributes(g, 20.0, "loss_pct")
    w = _workload(g, seed=1)
    first, again, other = (simulate(g, w, "flood",
                                    SimSettings(seed=s, out_dir=None)) for s in (1, 1, 2))
    assert first.lost > 0
    assert first.deliveries == again.deliveries and first.lost == again.lost
    assert first.deliveries != other.deliveries
    assert summarize(first, expected_deliveries(w))["missing"] > 0


def _matching_pair(seed: int = 2) -> tuple[Message, Message]:
    """A subscription and a publication it matches, from the stock workload."""
    w = stock_workload(["x"], n_publishers=1, n_subscribers=20, pubs_per_publisher=30,
                       publish_rate_hz=10.0, seed=seed, selectivity=0.3)
    subs = [op.msg for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    for op in w.ops:
        if op.msg.type is MsgType.PUBLISH:
            for sub in subs:
                if matches(filter_from_json(sub.payload["filter"]), op.msg.payload["attrs"]):
                    return sub, op.msg
    raise AssertionError("no matching pair in the fixture workload")


def _path(*links: Mapping[str, float]) -> nx.Graph:
    g = nx.Graph()
    for i, attrs in enumerate(links):
        g.add_edge(f"b{i}", f"b{i + 1}", **attrs)
    return g


def _ops(ops: Sequence[ClientOp]) -> Workload:
    clients = {op.client: op.broker for op in ops}
    return Workload(schema=STOCK_SCHEMA, clients=clients, ops=tuple(ops), meta={})


def test_two_hop_timing_is_exact(tmp_path: Path) -> None:
    sub, pub = _matching_pair()
    t_pub = 1.0
    pub = Message(pub.type, pub.msg_id, "p0", 0, pub.payload)
    g = _path({"bw_mbps": 8.0, "delay_ms": 5.0}, {"bw_mbps": 2.0, "delay_ms": 10.0})
    w = _ops([ClientOp(0.0, "s0", "b2", sub), ClientOp(t_pub, "p0", "b0", pub)])
    result = simulate(g, w, "flood", SimSettings(seed=0, out_dir=tmp_path))
    # The client stamps t_pub on the logs' wall-clock scale; hops do not change the size.
    stamped = Message(pub.type, pub.msg_id, "p0", 0, {**pub.payload, "t_pub": SIM_EPOCH_S + 1})
    bits = frame_size(stamped) * 8
    at_b1 = t_pub + bits / 8e6 + 0.005
    at_b2 = at_b1 + bits / 2e6 + 0.010
    assert result.deliveries == {pub.key: ["s0"]}
    assert list(result.delays_s["notification"]) == [pytest.approx(at_b2 - t_pub, abs=1e-12)]
    b2 = _read(tmp_path / "b2.jsonl")
    (recv,) = [r for r in b2 if r["ev"] == "recv" and r["link"] == "b1"]
    assert recv["t_mono"] == round(at_b2, 6)
    assert recv["t_wall"] == round(SIM_EPOCH_S + at_b2, 6)
    assert (recv["hops"], recv["size"]) == (2, bits // 8)
    (deliver,) = [r for r in b2 if r["ev"] == "deliver"]
    assert (deliver["link"], deliver["origin"]) == ("s0", "p0")
    assert deliver["t_pub"] == SIM_EPOCH_S + t_pub
    (got,) = [r for r in _read(tmp_path / "s0.jsonl") if r["ev"] == "recv"]
    assert (got["link"], got["msg_id"], got["t_mono"]) == ("b2", pub.msg_id, round(at_b2, 6))
    assert got["t_wall"] - got["t_pub"] == pytest.approx(at_b2 - t_pub, abs=2e-6)
    (sent,) = [r for r in _read(tmp_path / "p0.jsonl") if r["ev"] == "send"]
    assert (sent["t_mono"], sent["t_pub"], sent["link"]) == (t_pub, SIM_EPOCH_S + t_pub, "b0")
    assert result.end_s == pytest.approx(at_b2)


def test_a_nic_serves_a_fast_link_between_the_frames_of_a_slow_one(tmp_path: Path) -> None:
    # b0's NIC (10 Mbit/s) feeds a 2 Mbit/s link to b1 and a 100 Mbit/s link to b2; two
    # publications flood both at one instant. A frame holds its link at the slower of the
    # two rates but the NIC only at its own, so b2's frames leave in the NIC's gaps while
    # b1's second frame waits for its link alone (NICs in nodes/sim/network.py).
    _, pub = _matching_pair()
    pubs = [Message(pub.type, i, "p0", 0, pub.payload) for i in (1, 2)]
    g = nx.Graph()
    g.add_edge("b0", "b1", bw_mbps=2.0, delay_ms=1.0)
    g.add_edge("b0", "b2", bw_mbps=100.0, delay_ms=1.0)
    g.nodes["b0"]["nic_mbps"] = 10.0
    t = 1.0
    simulate(g, _ops([ClientOp(t, "p0", "b0", m) for m in pubs]), "flood",
             SimSettings(seed=0, out_dir=tmp_path))
    size = {frame_size(Message(m.type, m.msg_id, "p0", 0, {**m.payload, "t_pub": SIM_EPOCH_S + t}))
            for m in pubs}
    assert len(size) == 1  # equal frames: the arithmetic below holds for both
    nic_s = size.pop() * 8 / 10e6  # a frame's time on the NIC (and on the fast link)
    slow_s = 5 * nic_s  # on the 2 Mbit/s link

    def arrivals(at: str) -> list[float]:
        return sorted(r["t_mono"] for r in _read(tmp_path / f"{at}.jsonl")
                      if r["ev"] == "recv" and r["link"] == "b0")

    # NIC: b1's first frame [0, 1), b2's first [1, 2), b2's second [2, 3) (in nic_s, from
    # t); b1's second starts when its link is free, at 5.
    assert arrivals("b2") == pytest.approx([t + 2 * nic_s + 0.001, t + 3 * nic_s + 0.001],
                                           abs=2e-6)
    assert arrivals("b1") == pytest.approx([t + slow_s + 0.001, t + 2 * slow_s + 0.001],
                                           abs=2e-6)


class _Probe:
    """A flood core that remembers every event it is given and sets a timer per publish."""

    def __init__(self, broker: str, neighbours: Sequence[str], seen: list[Any]) -> None:
        self.inner = FloodCore(broker, neighbours, {"tree_neighbours": neighbours})
        self.broker, self.neighbours = broker, self.inner.neighbours
        self.seen = seen

    def handle(self, event: Event, now_s: float) -> list[Action]:
        self.seen.append((self.broker, now_s, event))
        actions = self.inner.handle(event, now_s)
        if isinstance(event, FromClient) and event.msg.type is MsgType.PUBLISH:
            actions.append(SetTimer("tick", 0.25))
        return actions


def test_queue_statistics_of_a_burst_on_a_slow_link(tmp_path: Path) -> None:
    _, pub = _matching_pair()
    g = _path({"bw_mbps": 0.1, "delay_ms": 1.0})
    burst = [ClientOp(0.01, "p0", "b0", Message(MsgType.PUBLISH, i, "p0", 0,
                                                {**pub.payload, "t_pub": 0.01}))
             for i in range(20)]
    seen: list[tuple[str, float, Event]] = []

    def probe(broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> _Probe:
        return _Probe(broker, neighbours, seen)

    result = simulate(g, _ops(burst), probe, SimSettings(seed=0, out_dir=tmp_path, window_ms=50.0))
    queue = [r for r in _read(tmp_path / "b0.jsonl") if r["ev"] == "queue"]
    assert all(r["link"] == "b1" and r["window_ms"] == 50.0 for r in queue)
    assert any(r["queue_len"] > 0 and r["count_in"] > r["count_out"] for r in queue)
    assert sum(r["count_in"] for r in queue) == 20 == result.ims_by_type["PUBLISH"]
    assert sum(r["count_out"] for r in queue) == 20
    assert all(r["flushed"] == 0 for r in queue)
    # `send` is logged when a message leaves the queue, as the emulated overlay link does.
    sends = [r["t_mono"] for r in _read(tmp_path / "b0.jsonl") if r["ev"] == "send"]
    size = frame_size(replace(burst[0].msg, payload={**pub.payload, "t_pub": SIM_EPOCH_S + 0.01}))
    per_msg_s = size * 8 / 0.1e6
    assert sends == [round(0.01 + i * per_msg_s, 6) for i in range(20)]
    assert queue[-1] == {**queue[-1], "count_in": 0, "count_out": 0, "queue_len": 0}
    assert queue[0]["count_out"] == int((0.05 - 0.01) / per_msg_s) + 1
    assert [r["t_mono"] for r in queue] == [round(0.05 * k, 6) for k in range(1, len(queue) + 1)]
    # The core was fed the same figures, and its timers fired 0.25 s after each publish.
    stats = [(t, e.links["b1"]) for b, t, e in seen if b == "b0" and isinstance(e, LinkStats)]
    assert [(w.count_in, w.count_out, w.queue_len) for _, w in stats] == [
        (r["count_in"], r["count_out"], r["queue_len"]) for r in queue]
    timers = [t for b, t, e in seen if b == "b0" and isinstance(e, TimerFired)]
    assert timers == [pytest.approx(0.26)] * 20
    assert result.events == 20 + 20 + 20  # client ops, arrivals, timers


class _Deaf(_Probe):
    """The probe, declaring it never reads statistics windows."""

    ignores_link_stats = True


def test_a_core_that_ignores_windows_gets_none_and_the_run_is_the_same(tmp_path: Path) -> None:
    _, pub = _matching_pair()
    g = _path({"bw_mbps": 0.1, "delay_ms": 1.0})
    burst = _ops([ClientOp(0.01, "p0", "b0", Message(MsgType.PUBLISH, i, "p0", 0,
                                                     {**pub.payload, "t_pub": 0.01}))
                  for i in range(20)])
    runs: dict[str, tuple[Any, list[Any]]] = {}
    for name, cls, out in (("reads", _Probe, tmp_path / "reads"),
                           ("deaf", _Deaf, tmp_path / "deaf"), ("deaf, no logs", _Deaf, None)):
        seen: list[Any] = []
        result = simulate(g, burst, lambda b, n, p, cls=cls, seen=seen: cls(b, n, seen),
                          SimSettings(seed=0, out_dir=out, window_ms=50.0))
        runs[name] = (result, [e for _, _, e in seen])
    assert any(isinstance(e, LinkStats) for e in runs["reads"][1])
    for name in ("deaf", "deaf, no logs"):
        result, events = runs[name]
        assert not any(isinstance(e, LinkStats) for e in events)
        assert result.deliveries == runs["reads"][0].deliveries
        assert result.ims_by_type == runs["reads"][0].ims_by_type
    # With logs the queue records are still written, as for a core that reads them.
    assert _read(tmp_path / "deaf" / "b0.jsonl") == _read(tmp_path / "reads" / "b0.jsonl")


def test_logs_off_keeps_only_queue_records_and_counts_the_same(tmp_path: Path) -> None:
    g = OVERLAYS["scot"]()
    w = _workload(g, seed=4)
    full = simulate(g, w, "flood", SimSettings(seed=0, out_dir=tmp_path / "full"))
    quiet = simulate(g, w, "flood",
                     SimSettings(seed=0, out_dir=tmp_path / "quiet", log_messages=False))
    assert quiet == full
    records = [r for p in sorted((tmp_path / "quiet").iterdir()) for r in _read(p)]
    assert records and {r["ev"] for r in records} == {"queue"}
    assert records == [r for p in sorted((tmp_path / "full").iterdir()) for r in _read(p)
                       if r["ev"] == "queue"]


def test_until_s_stops_the_run() -> None:
    g = OVERLAYS["random_tree"]()
    w = _workload(g, seed=3)
    full = simulate(g, w, "flood", SimSettings(seed=0))
    cut = simulate(g, w, "flood", SimSettings(seed=0, until_s=0.25))
    assert 0 < cut.events < full.events
    assert cut.end_s <= 0.25 < full.end_s


class _Relay:
    """Floods subscriptions over a path overlay (to test propagation delays)."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker, self.neighbours = broker, tuple(neighbours)

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, FromClient | Arrived) and event.msg.type is MsgType.SUBSCRIBE:
            came = event.link if isinstance(event, Arrived) else None
            return [Send(nb, event.msg.forwarded()) for nb in self.neighbours if nb != came]
        return [Record("seen", {"n": 1})] if isinstance(event, FromClient) else []


def test_subscription_delay_is_the_last_arrival(tmp_path: Path) -> None:
    sub, pub = _matching_pair()
    g = _path({"delay_ms": 3.0}, {"delay_ms": 4.0})  # unshaped: no serialisation time
    w = _ops([ClientOp(0.5, "s0", "b0", sub), ClientOp(0.6, "p0", "b1", pub)])
    result = simulate(g, w, _Relay, SimSettings(seed=0, out_dir=tmp_path))
    assert result.delays_s["subscription"] == [pytest.approx(0.007)]
    assert result.algorithm == "_Relay"
    assert result.record_counts == {"seen": 1}
    assert result.table_sizes == {"srt": [0, 0, 0], "prt": [0, 0, 0]}
    summary = summarize(result, {pub.key: frozenset()})
    assert summary["delay_ms"]["subscription"]["max"] == pytest.approx(7.0)
    # b2, reached last, got it after two hops
    assert result.hops == {"advertisement": [], "subscription": [2]}
    assert summary["hops"] == {"advertisement": None, "subscription": {"mean": 2.0, "max": 2}}
    assert summary["delay_ms"]["notification"] is None
    (rec,) = [r for r in _read(tmp_path / "b1.jsonl") if r["ev"] == "record"]
    assert (rec["kind"], rec["n"], rec["t_mono"]) == ("seen", 1, 0.6)


def test_bad_inputs_are_refused() -> None:
    g = _path({"bw_mbps": 0})
    with pytest.raises(ValueError, match="bw_mbps"):
        simulate(g, _ops([]), "flood", SimSettings(seed=0))
    with pytest.raises(ValueError, match=r"allowed: .*flood"):
        simulate(_path({}), _ops([]), "nope", SimSettings(seed=0))
    sub, _ = _matching_pair()
    with pytest.raises(ValueError, match="named like brokers"):
        simulate(_path({}), _ops([ClientOp(0.0, "b0", "b0", sub)]), "flood", SimSettings(seed=0))
    with pytest.raises(ValueError, match="not in the overlay"):
        simulate(_path({}), _ops([ClientOp(0.0, "s0", "elsewhere", sub)]), "flood",
                 SimSettings(seed=0))


def test_single_broker_overlay(tmp_path: Path) -> None:
    g = nx.Graph()
    g.add_node("solo")
    w = _workload(g, seed=8)
    result = simulate(g, w, "flood", SimSettings(seed=0, out_dir=tmp_path))
    summary = summarize(result, expected_deliveries(w))
    assert summary["expected_deliveries"] > 0
    assert (summary["missing"], summary["duplicates"], summary["ims_total"]) == (0, 0, 0)
    assert summary["delay_ms"]["notification"]["max"] == 0.0


def test_bench_runs_small() -> None:
    report = bench_sim.run(node_counts=(40,), messages=400, seed=1)
    assert [r["overlay"] for r in report["runs"]] == ["random_tree", "random_regular"]
    for r in report["runs"]:
        assert r["ims"] == r["publications"] * 39 >= 400
        assert r["events_per_s"] > 0
        # the loop's rates per CPU second as shares of a bare heapq loop's, same run
        assert 0 < r["ims_share"] < 1 and 0 < r["events_share"] < 1
    assert report["floor_events_per_s"] > 0
    assert report["target_met"] is False  # 40 nodes are not the 10,000-node target
    table = bench_sim.format_result(report).splitlines()
    assert table[1].split()[-2:] == [f"{report['runs'][0]['events_share']:.1%}",
                                     f"{report['runs'][0]['ims_share']:.1%}"]


def test_summary_counts_and_percentiles() -> None:
    k1, k2, k3 = ("p0", 0), ("p0", 1), ("p1", 0)
    summary = build_summary(
        algorithm="x", runtime="emulated", scale=0.1, published=3,
        expected={k1: frozenset({"s0", "s1"}), k2: frozenset({"s0"}), k3: frozenset()},
        deliveries={k1: ["s0", "s0", "s1"], k3: ["s2"], ("p2", 0): ["s0"]},  # not published
        ims_by_type={"SUBSCRIBE": 2, "PUBLISH": 5},
        delays_s={"notification": [0.004, 0.001, 0.002, 0.003]},
        hops={"subscription": [3, 1, 1]},
        table_sizes={"srt": [1, 2, 6], "prt": []},
        duration_s=12.5,
    )
    assert summary["expected_deliveries"] == 3
    assert (summary["delivered"], summary["duplicates"], summary["missing"],
            summary["unexpected"]) == (4, 1, 1, 2)
    assert summary["ims_by_type"] == {"PUBLISH": 5, "SUBSCRIBE": 2}
    assert summary["ims_total"] == 7
    assert summary["srt_size"] == {"mean": 3.0, "max": 6}
    assert summary["prt_size"] == {"mean": 0.0, "max": 0}
    assert summary["delay_ms"]["notification"] == {"p50": 2.5, "p95": 3.85, "max": 4.0,
                                                   "mean": 2.5}
    assert summary["delay_ms"]["subscription"] is None
    assert summary["hops"] == {"advertisement": None,
                               "subscription": {"mean": pytest.approx(5 / 3), "max": 3}}
    assert delay_stats_ms([0.2]) == {"p50": 200.0, "p95": 200.0, "max": 200.0, "mean": 200.0}
    # The oracle's answer one publication at a time (as a long simulation gives it) counts
    # alike; a key given twice counts as the later, as in a mapping.
    pairs = [(k1, frozenset({"s2"})), (k1, frozenset({"s0", "s1"})), (k2, frozenset({"s0"})),
             (k3, frozenset())]
    for answer in (iter(pairs), iter(dict(pairs).items())):
        one_at_a_time = build_summary(
            algorithm="x", runtime="emulated", scale=0.1, published=3, expected=answer,
            deliveries={k1: ["s0", "s0", "s1"], k3: ["s2"], ("p2", 0): ["s0"]},
            ims_by_type={"SUBSCRIBE": 2, "PUBLISH": 5},
            delays_s={"notification": [0.004, 0.001, 0.002, 0.003]},
            hops={"subscription": [3, 1, 1]},
            table_sizes={"srt": [1, 2, 6], "prt": []}, duration_s=12.5)
        assert one_at_a_time == summary


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 50, allow_subnormal=False), min_size=1, max_size=300))
def test_delay_statistics_are_the_same_sorted_as_floats_or_as_one_array(
        delays_s: list[float]) -> None:
    """Few samples are sorted as Python floats, many as one numpy array (see
    delay_stats_ms): the figures are the same to the last digit either way."""
    as_floats = delay_stats_ms(delays_s)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(summary_module, "_ARRAY_SAMPLES", 0)
        assert delay_stats_ms(array("d", delays_s)) == as_floats


def test_a_rate_change_applies_from_its_time_on(tmp_path: Path) -> None:
    _, pub = _matching_pair()

    def publish(t: float, client: str, broker: str, n: int) -> ClientOp:
        return ClientOp(t, client, broker, Message(MsgType.PUBLISH, n, client, 0,
                                                   {**pub.payload, "t_pub": t}))

    g = _path({"bw_mbps": 1.0, "delay_ms": 0.0})
    # b0 -> b1: one frame long before the change, one enqueued just before it (it keeps
    # the old rate, the documented simplification), two back to back after it; b1 -> b0:
    # one after it (the change is for both directions).
    ops = [publish(0.1, "p0", "b0", 1), publish(0.9995, "p0", "b0", 2),
           publish(1.1, "p0", "b0", 3), publish(1.101, "p0", "b0", 4),
           publish(1.2, "p1", "b1", 1)]
    simulate(g, _ops(ops), "flood",
             SimSettings(seed=0, out_dir=tmp_path, link_changes=[(1.0, "b1", "b0", 0.1)]))
    def wire_s(op: ClientOp, mbps: float) -> float:  # t_pub's digits change the size
        stamped = replace(op.msg, payload={**pub.payload, "t_pub": SIM_EPOCH_S + op.t_s})
        return frame_size(stamped) * 8 / (mbps * 1e6)

    fast = [wire_s(op, 1.0) for op in ops]
    slow = [wire_s(op, 0.1) for op in ops]

    def arrivals(at: str, came_from: str) -> list[float]:
        return [r["t_mono"] for r in _read(tmp_path / f"{at}.jsonl")
                if r["ev"] == "recv" and r["link"] == came_from]

    # The fourth frame waits for the third to leave: slow is 16 ms, they are 1 ms apart.
    assert slow[2] > 0.01
    assert arrivals("b1", "b0") == pytest.approx(
        [0.1 + fast[0], 0.9995 + fast[1], 1.1 + slow[2], 1.1 + slow[2] + slow[3]], abs=2e-6)
    assert arrivals("b0", "b1") == pytest.approx([1.2 + slow[4]], abs=2e-6)
    with pytest.raises(ValueError, match="not an overlay link"):
        simulate(g, _ops(ops), "flood", SimSettings(seed=0, link_changes=[(1.0, "b0", "b2", 0.1)]))


def test_of_arrivals_at_one_instant_the_latest_is_the_one_of_more_hops() -> None:
    """Both readers of an operation's arrivals (the simulator's and the logs') keep the
    same one whatever order they meet ties in."""
    latest = summary_module.latest_arrival
    assert latest(None, 1.0, 3) == (1.0, 3)
    assert latest((1.0, 3), 2.0, 1) == (2.0, 1)  # later wins, fewer hops or not
    assert latest((1.0, 3), 0.5, 9) == (1.0, 3)
    assert latest((1.0, 3), 1.0, 2) == latest(latest(None, 1.0, 2), 1.0, 3) == (1.0, 3)
