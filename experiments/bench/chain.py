"""`pubsublab bench chain`: the simulator's processing model against the emulated broker
(root).

One chain, publisher -> broker -> one match-all subscriber, at increasing offered rates,
in both runtimes side by side:

- **emulated**: the three hosts of ``pubsublab bench broker`` (gigabit-cluster, a
  1 Gbit/s Linux bridge), the broker host CPU-limited to ``SHARE`` of a core so that its
  knee lies within the rates one publisher on this machine can offer
  (:func:`experiments.bench.broker.chain_delays`);
- **simulated**, three ways: without the processing model (brokers take no time, the
  simulator as it was), with the service time measured at a moderate rate (the
  calibration's ``at_rate`` figures), and with the default, the saturated cost; each
  divided by the share, as a CPU-limited broker's is (:mod:`nodes.sim.processing`).

Per rate it prints the notification delay p50 and p95 (ms) and the broker's throughput
(1/s) of each, and the ratio emulated / simulated (default model) of p50 and p95. The
clients of the simulation sit on the broker (no network between them), and the
emulated CPU limit is a CFS quota, on and off every period (10 ms): both show below the
knee, where the emulated delays hold the network's and the quota's pauses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.bench.broker import CHAIN_DRAIN_S, QUOTE, chain_delays
from experiments.emulation.doctor import probe
from experiments.emulation.network import Emulation
from nodes.messages import Message, MsgType
from nodes.metrics.summary import delay_stats_ms
from nodes.runfolder import RUNS_BASE, new_run_dir
from nodes.sim.processing import CALIBRATION_FILE, Processing, ServiceTime
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.time_left import write_line
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import STOCK_SCHEMA
from topologies.links import LinkParams
from topologies.registry import build_graph

SHARE = 0.2
RATES_HZ = (250, 500, 1000, 1500, 2000, 2500, 3000, 4000)
STEP_S = 5.0
BROKER = "pc2"


def _log(msg: str) -> None:
    write_line(f"[bench chain] {msg}")


def chain_workload(rate_hz: float, step_s: float, *, start_s: float = 1.0) -> Workload:
    """A match-all subscriber, then ``rate_hz`` publications for ``step_s`` s, both
    clients on the one broker."""
    ops = [ClientOp(0.0, "sub1", BROKER,
                    Message(MsgType.SUBSCRIBE, 1, "sub1", 0, {"filter": []}))]
    ops += [ClientOp(start_s + i / rate_hz, "pub", BROKER,
                     Message(MsgType.PUBLISH, i + 1, "pub", 0, {"attrs": QUOTE}))
            for i in range(int(rate_hz * step_s))]
    return Workload(schema=STOCK_SCHEMA, clients={"sub1": BROKER, "pub": BROKER},
                    ops=tuple(ops), meta={})


def simulated_chain(rate_hz: float, step_s: float, processing: Processing | None
                    ) -> dict[str, Any]:
    """The chain in the simulator: delays (ms) and the broker's throughput (1/s)."""
    g = nx.Graph()
    g.add_node(BROKER)
    result = simulate(g, chain_workload(rate_hz, step_s), "flood",
                      SimSettings(seed=0, processing=processing))
    stats = delay_stats_ms(result.delays_s["notification"]) or {}
    delivered = sum(len(v) for v in result.deliveries.values())
    return {"p50_ms": stats.get("p50"), "p95_ms": stats.get("p95"), "delivered": delivered,
            "throughput_hz": round((delivered - 1) / result.span_s, 1)
            if result.span_s > 0 else None}


def models(share: float, calibration: Path = CALIBRATION_FILE) -> dict[str, Processing | None]:
    """The simulated columns: no model, the at-rate service time, the default."""
    cal = json.loads(calibration.read_text())
    at = cal["at_rate"]
    return {
        "none": None,
        "at_rate": Processing(ServiceTime(at["base_us"], at["per_matched_subscription_us"]),
                              cpu_share={BROKER: share}),
        "default": Processing(ServiceTime(cal["base_us"], cal["per_matched_subscription_us"]),
                              cpu_share={BROKER: share}),
    }


def run(rates_hz: Sequence[int] = RATES_HZ, step_s: float = STEP_S,
        share: float = SHARE, out_base: Path = RUNS_BASE) -> dict[str, Any]:
    """Both runtimes at every rate of ``rates_hz`` (see the module docstring); the
    emulated chain's logs go to a run folder under ``out_base``."""
    found = probe()
    if not found["checks"][0]["ok"]:
        raise PermissionError("bench chain builds a Mininet network: run with sudo")
    if not found["mechanisms"].get("cpu_limit"):
        raise RuntimeError("bench chain CPU-limits the broker host, which this machine "
                           "cannot do (see pubsublab doctor)")
    sim_models = models(share)
    graph = build_graph("gigabit-cluster", {"n": 3}, LinkParams(bw_mbps=1000))
    out = new_run_dir(out_base, "bench-chain")
    emu = Emulation(graph, switch="bridge", probe=found, log=_log, cpu_limits={BROKER: share})
    rows = []
    try:
        emu.start()
        for i, rate in enumerate(rates_hz):
            left_s = (len(rates_hz) - i) * (step_s + CHAIN_DRAIN_S + 6.0)
            _log(f"{rate}/s for {step_s:g} s ({i + 1} of {len(rates_hz)}, about "
                 f"{left_s:.0f} s left) ...")
            (emulated,) = chain_delays(emu, [rate], step_s, out)
            row = {"rate_hz": rate, "emulated": emulated,
                   **{name: simulated_chain(rate, step_s, p) for name, p in sim_models.items()}}
            d = row["default"]
            row["ratio_p50"] = _ratio(emulated["p50_ms"], d["p50_ms"])
            row["ratio_p95"] = _ratio(emulated["p95_ms"], d["p95_ms"])
            rows.append(row)
    finally:
        emu.stop()
    default = sim_models["default"]
    assert default is not None
    return {"share": share, "step_s": step_s, "rows": rows, "logs": str(out),
            "service_us": {name: None if p is None else vars(p.service)
                           for name, p in sim_models.items()},
            "knee_hz": {"simulated_default": round(
                share / (default.service.base_us + default.service.per_match_us) * 1e6, 1)}}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _fmt(x: float | None, width: int = 9) -> str:
    return f"{x:{width}.2f}" if x is not None else f"{'-':>{width}}"


def format_result(result: dict[str, Any]) -> str:
    svc = result["service_us"]
    lines = [f"broker at {result['share']:g} core; simulated service times (whole core): "
             f"at_rate {svc['at_rate']['base_us']:g} + {svc['at_rate']['per_match_us']:g} us, "
             f"default {svc['default']['base_us']:g} + {svc['default']['per_match_us']:g} us "
             f"per notification; simulated knee {result['knee_hz']['simulated_default']}/s",
             f"{'rate/s':>7} | {'emulated p50/p95/thru':>28} | {'sim none p50/p95':>18} | "
             f"{'sim at_rate p50/p95/thru':>28} | {'sim default p50/p95/thru':>28} | "
             f"{'emu/sim p50':>11} {'p95':>6}"]
    for r in result["rows"]:
        e, n, a, d = r["emulated"], r["none"], r["at_rate"], r["default"]
        cells = [_fmt(e["p50_ms"]) + _fmt(e["p95_ms"]) + _fmt(e["throughput_hz"], 10),
                 _fmt(n["p50_ms"]) + _fmt(n["p95_ms"], 9),
                 _fmt(a["p50_ms"]) + _fmt(a["p95_ms"]) + _fmt(a["throughput_hz"], 10),
                 _fmt(d["p50_ms"]) + _fmt(d["p95_ms"]) + _fmt(d["throughput_hz"], 10),
                 _fmt(r["ratio_p50"], 11) + _fmt(r["ratio_p95"], 7)]
        lines.append(f"{r['rate_hz']:7} | " + " | ".join(cells))
    return "\n".join(lines)
