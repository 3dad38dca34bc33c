"""The simulator's processing model (nodes.sim.processing): service times, the knee of a
broker that cannot keep up, backpressure into its sender's output queue, and deaths
while frames are held."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from experiments.plan import compile_plan
from experiments.plan_text import format_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import SpecError, load_spec
from nodes.messages import Message, MsgType
from nodes.sim.processing import CALIBRATION_FILE, Processing, ServiceTime, calibrated_service
from nodes.sim.result import SimResult, processing_figures
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import STOCK_SCHEMA

QUOTE = {"Symbol": "ACME", "Close": 20.5, "Volume": 1000}
LINK = {"bw_mbps": None, "delay_ms": 1.0}  # unshaped: only the brokers limit the rate


def _chain(n: int) -> nx.Graph:
    g = nx.path_graph([f"b{i}" for i in range(n)])
    nx.set_edge_attributes(g, {e: dict(LINK) for e in g.edges})
    return g


def _stream(rate_hz: float, count: int, *, sub_at: str, t0_s: float = 0.5) -> Workload:
    """A match-all subscriber at ``sub_at``, then ``count`` publications at b0."""
    ops = [ClientOp(0.0, "s0", sub_at, Message(MsgType.SUBSCRIBE, 1, "s0", 0, {"filter": []}))]
    ops += [ClientOp(t0_s + i / rate_hz, "p0", "b0",
                     Message(MsgType.PUBLISH, i + 1, "p0", 0, {"attrs": QUOTE}))
            for i in range(count)]
    return Workload(schema=STOCK_SCHEMA, clients={"s0": sub_at, "p0": "b0"}, ops=tuple(ops),
                    meta={})


def _records(path: Path, ev: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["ev"] == ev]


def _exactly_once(result: SimResult, w: Workload) -> None:
    want = {k: sorted(v) for k, v in expected_deliveries(w).items() if v}
    assert {k: sorted(v) for k, v in result.deliveries.items()} == want


def test_one_message_takes_exactly_its_service_times(tmp_path: Path) -> None:
    """b0 handles the publication (one Send), the link takes 1 ms, b1 handles it (one
    Deliver): the delay is the sum, to the nanosecond."""
    proc = Processing(ServiceTime(base_us=300.0, per_match_us=40.0),
                      per_broker={"b1": ServiceTime(1000.0, 500.0)}, cpu_share={"b1": 0.5})
    w = _stream(1.0, 1, sub_at="b1")
    result = simulate(_chain(2), w, "flood", SimSettings(seed=0, out_dir=tmp_path, processing=proc))
    _exactly_once(result, w)
    at_b0 = 300e-6 + 40e-6
    at_b1 = (1000e-6 + 500e-6) / 0.5
    assert list(result.delays_s["notification"]) == [pytest.approx(at_b0 + 1e-3 + at_b1, abs=1e-9)]
    # b1 also handled the SUBSCRIBE (no action: base time only); b0 never saw it.
    assert result.busy_s == {"b0": pytest.approx(at_b0), "b1": pytest.approx(2000e-6 + at_b1)}
    # b1 logs the frame's recv when it starts handling it, as the emulated broker does.
    (recv,) = [r for r in _records(tmp_path / "b1.jsonl", "recv") if r["link"] == "b0"]
    assert recv["t_mono"] == round(0.5 + at_b0 + 1e-3, 6)


def test_the_summary_holds_each_messages_wait_in_its_brokers_buffer() -> None:
    """Two publications at b0 at once: the second waits for b0's first service (340 us);
    at b1, which takes 1 ms a message, the second frame comes 340 us after the first and
    waits the other 660 us. The subscription and the first of each pair wait nothing."""
    proc = Processing(ServiceTime(base_us=300.0, per_match_us=40.0),
                      per_broker={"b1": ServiceTime(1000.0)})
    pub = [ClientOp(0.5, "p0", "b0", Message(MsgType.PUBLISH, i, "p0", 0, {"attrs": QUOTE}))
           for i in (1, 2)]
    subscribed = _stream(1.0, 0, sub_at="b1")
    w = replace(subscribed, ops=(*subscribed.ops, *pub))
    result = simulate(_chain(2), w, "flood",
                      SimSettings(seed=0, processing=proc, log_messages=False))
    _exactly_once(result, w)
    assert sorted(result.wait_s) == pytest.approx([0, 0, 0, 340e-6, 660e-6], abs=1e-12)
    figures = processing_figures(result)
    assert figures is not None
    assert figures["wait_ms"]["max"] == pytest.approx(0.66)
    assert figures["wait_ms"]["mean"] == pytest.approx(0.2)
    assert figures["busy_s"] == {"mean": pytest.approx((680e-6 + 3e-3) / 2),
                                 "max": pytest.approx(3e-3), "busiest": "b1"}
    assert processing_figures(simulate(_chain(2), w, "flood", SimSettings(
        seed=0, log_messages=False))) is None  # no model


def _overload(tmp_path: Path, rate_hz: float, *, buffer_msgs: int = 50,
              seconds: float = 2.0) -> tuple[SimResult, Workload]:
    """b0 -> b1 -> b2 with b1 at a quarter core: (200 + 50 x 1) us / 0.25 = 1 ms a
    message, so it saturates at 1000/s; b0 and b2 take 250 us (4000/s)."""
    proc = Processing(ServiceTime(200.0, 50.0), cpu_share={"b1": 0.25}, buffer_msgs=buffer_msgs)
    w = _stream(rate_hz, int(rate_hz * seconds), sub_at="b2")
    result = simulate(_chain(3), w, "flood",
                      SimSettings(seed=0, out_dir=tmp_path, processing=proc, log_messages=True,
                                  window_ms=100.0))
    return result, w


def _delivered_per_s(tmp_path: Path) -> float:
    """Deliveries per second over the subscriber's busy stretch."""
    t = [r["t_mono"] for r in _records(tmp_path / "s0.jsonl", "recv")]
    return (len(t) - 1) / (t[-1] - t[0])


@pytest.mark.parametrize(("rate_hz", "want_hz"), [
    (400.0, 400.0), (900.0, 900.0), (1250.0, 1000.0), (2000.0, 1000.0), (3000.0, 1000.0)])
def test_a_slow_broker_saturates_at_one_over_its_service_time(
        tmp_path: Path, rate_hz: float, want_hz: float) -> None:
    result, w = _overload(tmp_path, rate_hz)
    _exactly_once(result, w)  # nothing lost, nothing twice, however long the backlog
    assert _delivered_per_s(tmp_path) == pytest.approx(want_hz, rel=0.01)
    # The upstream queue: flat below the knee; above it, it grows by the excess rate
    # less what b1's window takes in (50 frames).
    queue = [r for r in _records(tmp_path / "b0.jsonl", "queue") if r["link"] == "b1"]
    at_end = max((r for r in queue if r["t_mono"] <= 0.5 + 2.0), key=lambda r: r["t_mono"])
    if rate_hz < 1000.0:
        assert max(r["queue_len"] for r in queue) == 0
    else:
        excess = (rate_hz - 1000.0) * (at_end["t_mono"] - 0.5) - 50
        assert at_end["queue_len"] == pytest.approx(excess, abs=0.02 * excess + 5)
        grows = [r["queue_len"] for r in queue if r["t_mono"] <= at_end["t_mono"]]
        assert grows == sorted(grows) and grows[-1] > grows[0]
    assert result.busy_s["b1"] == pytest.approx(result.published * 1e-3, rel=1e-9)


def _in_window(tmp_path: Path) -> int:
    """The most frames b0 ever had sent to b1 that b1 had not yet started handling
    (from the logs: b0's sends to b1, b1's recvs from b0)."""
    marks = [(r["t_mono"], 1, 1) for r in _records(tmp_path / "b0.jsonl", "send")
             if r["link"] == "b1"]
    marks += [(r["t_mono"], 0, -1) for r in _records(tmp_path / "b1.jsonl", "recv")
              if r["link"] == "b0"]
    level = peak = 0
    for _, _, step in sorted(marks):  # a recv before a send at the same instant
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("buffer_msgs", [1, 7, 50])
def test_the_window_is_never_exceeded_and_is_used_whole(tmp_path: Path,
                                                        buffer_msgs: int) -> None:
    result, w = _overload(tmp_path, 2000.0, buffer_msgs=buffer_msgs, seconds=0.5)
    _exactly_once(result, w)
    assert _in_window(tmp_path) == buffer_msgs
    # b2 receives in publication order: held frames keep their place.
    got = [r["msg_id"] for r in _records(tmp_path / "s0.jsonl", "recv")]
    assert got == sorted(got)


def test_a_receiver_that_dies_releases_what_its_senders_held(tmp_path: Path) -> None:
    proc = Processing(ServiceTime(200.0, 50.0), cpu_share={"b1": 0.25}, buffer_msgs=20)
    w = _stream(3000.0, 3000, sub_at="b2")
    result = simulate(_chain(3), w, "flood",
                      SimSettings(seed=0, out_dir=tmp_path, processing=proc, kill_at={"b1": 0.8}))
    queue = [r for r in _records(tmp_path / "b0.jsonl", "queue") if r["link"] == "b1"]
    assert max(r["queue_len"] for r in queue) > 500  # b0 held frames when b1 died
    assert queue[-1]["queue_len"] == 0  # and sent them on (to be lost) after
    delivered = len(result.deliveries)
    assert 250 < delivered < 350  # about 0.3 s at 1000/s before b1 died


def test_a_sender_that_dies_loses_what_it_held(tmp_path: Path) -> None:
    proc = Processing(ServiceTime(200.0, 50.0), cpu_share={"b1": 0.25}, buffer_msgs=20)
    w = _stream(3000.0, 3000, sub_at="b2")
    result = simulate(_chain(3), w, "flood",
                      SimSettings(seed=0, out_dir=tmp_path, processing=proc, kill_at={"b0": 0.8}))
    # b1 handles its window (20 frames) after b0's death, and nothing more arrives.
    handled_after = [r for r in _records(tmp_path / "b1.jsonl", "recv")
                     if r["link"] == "b0" and r["t_mono"] > 0.8]
    assert len(handled_after) <= 20
    assert result.end_s < 0.8 + 0.1


def test_same_seed_gives_identical_logs(tmp_path: Path) -> None:
    a, _ = _overload(tmp_path / "a", 2000.0, seconds=0.3)
    b, _ = _overload(tmp_path / "b", 2000.0, seconds=0.3)
    assert a == b
    for f in sorted((tmp_path / "a").iterdir()):
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes(), f.name


def test_zero_service_time_changes_no_figure() -> None:
    """With no service time and a window no one fills, the model is the plain simulator:
    the same deliveries, in the same order, with the same delays."""
    g = nx.random_labeled_tree(12, seed=3)
    g = nx.relabel_nodes(g, {n: f"b{n}" for n in g})
    nx.set_edge_attributes(g, {e: {"bw_mbps": 10.0, "delay_ms": 2.0} for e in g.edges})
    from nodes.workloads.stock import stock_workload
    w = stock_workload(sorted(g), n_publishers=3, n_subscribers=15, pubs_per_publisher=20,
                       publish_rate_hz=100.0, seed=5, selectivity=0.3, phase_gap_s=0.2)
    plain = simulate(g, w, "flood", SimSettings(seed=0))
    free = simulate(g, w, "flood",
                    SimSettings(seed=0, processing=Processing(ServiceTime(0.0), buffer_msgs=10**9)))
    assert free.deliveries == plain.deliveries
    assert free.delays_s == plain.delays_s
    assert free.ims_by_type == plain.ims_by_type


@pytest.mark.parametrize(("kw", "message"), [
    ({"service": ServiceTime(1.0), "buffer_msgs": 0}, "buffer_msgs: want an integer >= 1"),
    ({"service": ServiceTime(1.0), "cpu_share": {"b0": 0.0}}, "cpu_share of b0"),
    ({"service": ServiceTime(1.0), "cpu_share": {"b0": 2}}, "cpu_share of b0"),
])
def test_bad_models_are_refused(kw: Mapping[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Processing(**kw)


def test_bad_service_times_and_strangers_are_refused() -> None:
    with pytest.raises(ValueError, match="base_us: want a number of us >= 0"):
        ServiceTime(-1.0)
    with pytest.raises(ValueError, match="per_match_us"):
        ServiceTime(1.0, float("nan"))
    with pytest.raises(ValueError, match=r"processing names brokers not in the overlay: \['zz'\]"):
        simulate(_chain(2), _stream(1.0, 1, sub_at="b1"), "flood", SimSettings(
            seed=0, processing=Processing(ServiceTime(1.0), per_broker={"zz": ServiceTime(2.0)})))


def test_the_calibration_file_gives_the_default(tmp_path: Path) -> None:
    data = json.loads(CALIBRATION_FILE.read_text())
    assert calibrated_service() == ServiceTime(data["base_us"],
                                               data["per_matched_subscription_us"])
    with pytest.raises(ValueError, match=r"no usable calibration.*bench broker"):
        calibrated_service(tmp_path / "missing.json")


def test_the_spec_turns_the_model_on_with_calibrated_defaults() -> None:
    cal = calibrated_service()
    assert compile_plan(load_spec("flood-demo"), netem=False).processing is None
    plan = compile_plan(load_spec("flood-demo", [
        "broker.service.base_us=500", "broker.service.buffer_msgs=64",
        "broker.service.brokers={a0: {per_match_us: 90}}", "broker.cpu.a0=0.5"]), netem=False)
    assert plan.processing == Processing(
        ServiceTime(500.0, cal.per_match_us), per_broker={"a0": ServiceTime(500.0, 90.0)},
        cpu_share={"a0": 0.5}, buffer_msgs=64)
    assert plan.describe()["processing"]["per_broker"] == {
        "a0": {"base_us": 500.0, "per_match_us": 90.0}}
    text = format_plan(plan)
    assert "simulated brokers take 500 us + " in text and "; a0 500 + 90 us" in text
    assert "share of one core; emulated and simulated" in text
    calibrated = compile_plan(load_spec("flood-demo", ["broker.service=calibrated"]),
                              netem=False)
    assert calibrated.processing == Processing(cal)


@pytest.mark.parametrize(("override", "where"), [
    ("broker.service=fast", "broker.service: bad value 'fast'"),
    ("broker.service.base_us=-1", "broker.service.base_us: bad value -1"),
    ("broker.service.buffer_msgs=0", "broker.service.buffer_msgs: bad value 0"),
    ("broker.service.speed=1", "broker.service: unknown field(s) speed"),
    ("broker.service.brokers={a0: {base: 1}}", "broker.service.brokers.a0: unknown field"),
])
def test_bad_service_settings_are_one_line_errors(override: str, where: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec("flood-demo", [override])
    assert str(exc.value).startswith(where) and "\n" not in str(exc.value)


def test_service_settings_must_name_brokers() -> None:
    with pytest.raises(SpecError, match=r"broker.service.brokers: 'zz' is not a broker"):
        compile_plan(load_spec("flood-demo", ["broker.service.brokers={zz: {base_us: 1}}"]),
                     netem=False)


def test_a_simulated_run_of_a_spec_takes_its_service_times(tmp_path: Path) -> None:
    """The same spec with a slow broker everywhere: every notification is later by at
    least two services (the publisher's broker, the subscriber's), and the manifest
    says which model ran."""
    plain_dir, plain = run_simulation(compile_plan(load_spec("flood-demo")), tmp_path)
    spec = load_spec("flood-demo", ["broker.service.base_us=20000",
                                    "broker.service.per_match_us=0"])
    slow_dir, slow = run_simulation(compile_plan(spec), tmp_path)
    for alg, summary in slow.items():
        assert summary["missing"] == summary["duplicates"] == 0
        for stat in ("p50", "mean"):  # each delay grows by 40 ms, so each statistic does
            gap = summary["delay_ms"]["notification"][stat] - \
                plain[alg]["delay_ms"]["notification"][stat]
            assert gap >= 2 * 20.0 - 1e-3, (alg, stat, gap)
    manifest = json.loads((slow_dir / "manifest.json").read_text())
    assert manifest["plan"]["processing"]["base_us"] == 20000.0
    assert json.loads((plain_dir / "manifest.json").read_text())["plan"]["processing"] is None


def _sat_point(k: int, cost_us: float, *, send_hz: float = 8000.0) -> dict[str, Any]:
    return {"subscriptions": k, "saturated_cost_us": cost_us,
            "throughput_hz": 0.2e6 / cost_us, "send_hz": send_hz}


def test_the_saturation_fit_keeps_only_saturated_points() -> None:
    from experiments.bench.broker import calibration, saturation_fit

    points = [_sat_point(1, 80.0), _sat_point(1, 84.0), _sat_point(4, 157.0),
              # keeping up with what was sent: no knee, so no cost; left out
              _sat_point(2, 90.0, send_hz=0.2e6 / 90.0)]
    fit = saturation_fit(points, 0.2)
    assert fit is not None
    assert (fit["base_us"], fit["per_matched_subscription_us"]) == (57.0, 25.0)
    assert [m["subscriptions"] for m in fit["medians"]] == [1, 4]
    assert saturation_fit(points[:2], 0.2) is None  # one count fits no line
    at_rate = [{"subscriptions": k, "broker_complete": True, "per_msg_us": 170.0 + 25.0 * k,
                "matching_us_mean": 20.0} for k in (1, 4, 8)]
    cal = calibration(at_rate, 1000, 5.0, saturated=fit)
    assert (cal["source"], cal["base_us"], cal["at_rate"]["base_us"]) == ("saturated", 57.0,
                                                                         170.0)
    assert calibration(at_rate, 1000, 5.0)["base_us"] == 170.0


def test_the_chain_bench_simulates_the_calibrations_it_names() -> None:
    from experiments.bench.chain import BROKER, models, simulated_chain

    m = models(0.2)
    assert m["none"] is None
    assert m["default"] == Processing(calibrated_service(), cpu_share={BROKER: 0.2})
    at = json.loads(CALIBRATION_FILE.read_text())["at_rate"]
    assert m["at_rate"].service == ServiceTime(at["base_us"], at["per_matched_subscription_us"])
    # Below the knee a notification waits for no one: the delay is one service time.
    row = simulated_chain(10.0, 1.0, m["default"])
    base_s, per_match_s = m["default"].seconds(BROKER)
    assert row["p50_ms"] == pytest.approx(1000 * (base_s + per_match_s), abs=1e-6)
    assert row["delivered"] == 10
