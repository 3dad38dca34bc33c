"""`pubsublab bench broker`: one broker between a publisher and a subscriber on a real
Mininet network, and the highest rate it sustains with zero loss.

PADRES' benchmark method: a rate is sustained when, in every whole second of the run,
the notifications delivered equal those generated (bucketed by publication second), and
the publisher really generated the rate (at least 95 % of it); and, since counting by
publication second alone would pass a broker that merely buffers, no notification may
take longer than ``MAX_DELAY_S`` end to end (a backlog that grows shows up there).
The rate steps up until a step fails. Three hosts on a 1 Gbit/s Linux bridge (the
gigabit-cluster topology with three PCs): publisher on pc1, broker (flood core, no
neighbours) on pc2, subscriber (matching everything) on pc3. Broker and clients log
every message, as in experiments.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from experiments.emulation.doctor import probe
from experiments.emulation.network import Emulation
from experiments.runs.emulated import BROKER_PORT, BrokerRun
from nodes.logs import iter_jsonl
from topologies.links import LinkParams
from topologies.registry import build_graph

RATES_HZ = (1000, 2000, 5000, 10000, 20000, 30000, 40000)
MAX_DELAY_S = 1.0
STEP_S = 3.0
QUOTE = {"Symbol": "ACME", "Close": 20.5, "Volume": 1000}


def _log(msg: str) -> None:
    print(f"[bench broker] {msg}", file=sys.stderr, flush=True)


def _step(emu: Emulation, rate_hz: int, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True)
    run = BrokerRun(emu, out)
    broker_ip = emu.graph.nodes["pc2"]["ip"]
    run.start_brokers({"pc2": {
        "broker": "pc2", "listen": ["0.0.0.0", BROKER_PORT], "neighbours": {},
        "core": {"name": "flood", "params": {"tree_neighbours": []}},
        "log_dir": str(out), "emulate_link": False, "seed": 0}})
    try:
        run.wait_links_up(20)
        n = int(rate_hz * STEP_S)
        sub_ops = out / "config" / "sub.ops.jsonl"
        sub_ops.write_text(json.dumps({"t_s": 0.0, "type": "SUBSCRIBE", "msg_id": 1,
                                       "origin": "sub", "payload": {"filter": []}}) + "\n")
        pub_ops = out / "config" / "pub.ops.jsonl"
        pub_ops.write_text("".join(
            json.dumps({"t_s": 1.0 + i / rate_hz, "type": "PUBLISH", "msg_id": i + 1,
                        "origin": "pub", "payload": {"attrs": QUOTE}}) + "\n"
            for i in range(n)))
        start = time.time() + 1.5
        for client, host, ops in (("sub", "pc3", sub_ops), ("pub", "pc1", pub_ops)):
            run.clients[client] = run._start(host, "nodes.client", client, {
                "client": client, "broker": "pc2", "broker_addr": [broker_ip, BROKER_PORT],
                "log_dir": str(out), "ops": str(ops), "start_at_wall": start,
                "duration_s": 1.0 + STEP_S + 2.0})
        run.wait_clients(1.5 + 1.0 + STEP_S + 30)
    finally:
        run.stop_brokers()
    sent = [r["t_pub"] for r in iter_jsonl(out / "pub.jsonl")
            if r["ev"] == "send" and r.get("type") == "PUBLISH"]
    recv = [r for r in iter_jsonl(out / "sub.jsonl")
            if r["ev"] == "recv" and r.get("type") == "PUBLISH"]
    got = [r["t_pub"] for r in recv]
    delays_ms = sorted(1000.0 * (r["t_wall"] - r["t_pub"]) for r in recv)
    t0 = min(sent) if sent else 0.0
    gen, dlv = Counter(int(t - t0) for t in sent), Counter(int(t - t0) for t in got)
    seconds = [s for s in sorted(gen) if s < int(STEP_S)]  # whole seconds only
    per_second = [{"s": s, "generated": gen[s], "delivered": dlv[s]} for s in seconds]
    achieved = len(sent) / (max(sent) - t0) if len(sent) > 1 else 0.0
    max_delay_ms = delays_ms[-1] if delays_ms else None
    ok = (len(sent) == n and achieved >= 0.95 * rate_hz and len(got) == len(sent)
          and all(p["generated"] == p["delivered"] for p in per_second)
          and max_delay_ms is not None and max_delay_ms <= 1000.0 * MAX_DELAY_S)
    return {"rate_hz": rate_hz, "generated": len(sent), "delivered": len(got),
            "achieved_send_hz": round(achieved, 1), "per_second": per_second,
            "delay_ms": {"p50": round(delays_ms[len(delays_ms) // 2], 2) if delays_ms else None,
                         "max": round(max_delay_ms, 2) if max_delay_ms else None},
            "zero_loss": ok}


def run(rates_hz: tuple[int, ...] = RATES_HZ) -> dict[str, Any]:
    """Step the publication rate up until a step loses; returns every step's figures."""
    found = probe()
    if not found["checks"][0]["ok"]:
        raise PermissionError("bench broker builds a Mininet network: run with sudo")
    graph = build_graph("gigabit-cluster", {"n": 3}, LinkParams(bw_mbps=1000))
    out = Path(mkdtemp(prefix="pubsublab-bench-broker-"))
    emu = Emulation(graph, switch="bridge", probe=found, log=_log)
    steps = []
    try:
        emu.start()
        for rate in rates_hz:
            _log(f"{rate}/s for {STEP_S:g} s ...")
            step = _step(emu, rate, out / f"rate-{rate}")
            _log(f"{rate}/s: generated {step['generated']}, delivered {step['delivered']}, "
                 f"send rate {step['achieved_send_hz']}/s, delay {step['delay_ms']} ms, "
                 f"sustained: {step['zero_loss']}")
            steps.append(step)
            if not step["zero_loss"]:
                break
    finally:
        emu.stop()
    sustained = max((s["rate_hz"] for s in steps if s["zero_loss"]), default=0)
    return {"sustained_zero_loss_hz": sustained, "steps": steps, "step_s": STEP_S,
            "logs": str(out), "padres_script_ceiling_hz": 1000, "aim_hz": 10000}


def format_result(result: dict[str, Any]) -> str:
    lines = [f"{'rate/s':>8} {'generated':>10} {'delivered':>10} {'send/s':>9} "
             f"{'p50_ms':>8} {'max_ms':>8}  sustained"]
    for s in result["steps"]:
        d = s["delay_ms"]
        lines.append(f"{s['rate_hz']:8} {s['generated']:10} {s['delivered']:10} "
                     f"{s['achieved_send_hz']:9.0f} {d['p50'] or 0:8.1f} {d['max'] or 0:8.1f}"
                     f"  {s['zero_loss']}")
    lines.append(f"sustained with zero loss: {result['sustained_zero_loss_hz']}/s "
                 f"(PADRES' scripts stop at 1,000/s; aim 10,000/s)")
    return "\n".join(lines)
