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

**Calibration** (the simulator's default per-message service time): after the rate
steps, one step per subscription count k in ``sub_counts`` (default 1, 4, 8) runs k
subscriber clients on pc3 (one client process, each client with its own connection and
a match-all subscription, so every notification matches k subscriptions and the broker
delivers it k times) and one publisher at ``calibration_rate_hz`` for
``calibration_step_s`` seconds, and the whole round is repeated ``repeats`` times (the
counts interleaved, so a change in the machine's load touches all alike). The broker's
CPU time is read from ``/proc/<pid>``
(``schedstat``'s run time in ns, summed over its threads; ``stat``'s utime + stime where
there is no schedstat): over an idle stretch after the subscriptions and before the
first publication (its idle rate: the statistics windows, status writes), and from the
first publication until every client has ended. A point counts if the broker handled
every publication and delivered it k times (``broker_complete``; a subscriber process
falling behind does not matter). The step's cost per handled message is

    c(k) = (CPU over the busy stretch - idle rate x its length) / PUBLISHes received

in microseconds. The regression is ordinary least squares, over the counts, of the
median of c(k) over the repeats: ``c(k) = base_us + per_matched_subscription_us x k``;
``base_us`` is what a handled message costs whatever it matches (decode, the core's
``handle``, its ``recv`` and ``match`` log records), ``per_matched_subscription_us``
what each matching subscription adds (the matching itself, then one delivery: encode,
socket write, ``deliver`` record).
The same fit of the ``recv`` records' ``matching_ms`` (the core's ``handle`` alone)
shows how much of it is matching. The figures, the points, the method, the machine and
the date go to ``nodes/calibration.json`` (``--calibration-out``), which the simulator
reads as its default service time; ``pubsublab bench broker`` prints them.

The cost per message falls as the rate rises (the broker reads several frames per
wake-up of its event loop, so the fixed costs are shared), so the figures hold at about
the calibration rate, which the file records, with c(1) at half and twice that rate
(``rate_sensitivity``). ``nodes/calibration.json``: ``base_us``,
``per_matched_subscription_us``, ``r2``, ``rate_hz``, ``matching_only`` (the same fit of
the matching time alone), ``method``, ``regression``, ``caveat``, ``points`` (per k:
published, handled, delivered, idle CPU share, busy CPU seconds, ``per_msg_us``,
``matching_us_mean``, ``broker_complete``, ``zero_loss``, ``repeat``), ``medians`` (per
k), ``machine`` (host name, CPU model, cores, kernel, Python, how busy the whole machine
was during the calibration, its load average after), ``date`` (UTC) and ``git``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from experiments.emulation.doctor import probe
from experiments.emulation.network import Emulation
from experiments.runs.brokers import BrokerRun
from nodes.logs import Ev, iter_jsonl
from nodes.runtime import BROKER_PORT
from topologies.links import LinkParams
from topologies.registry import build_graph

RATES_HZ = (1000, 2000, 5000, 10000, 20000, 30000, 40000)
MAX_DELAY_S = 1.0
STEP_S = 3.0
QUOTE = {"Symbol": "ACME", "Close": 20.5, "Volume": 1000}
SUB_COUNTS = (1, 4, 8)
CALIBRATION_RATE_HZ = 1000
CALIBRATION_STEP_S = 5.0
CALIBRATION_REPEATS = 3
CALIBRATION_FILE = Path(__file__).resolve().parents[2] / "nodes" / "calibration.json"
_CLIENT_START_S = 1.5  # the clients' t_s = 0 lies this far after they are started
_IDLE_FROM_S, _PUB_AT_S = 0.5, 2.0  # the idle stretch, on the clients' clock


def _log(msg: str) -> None:
    print(f"[bench broker] {msg}", file=sys.stderr, flush=True)


def _start_broker(emu: Emulation, out: Path) -> BrokerRun:
    """The broker under test: flood, no neighbours, on pc2, logging into ``out``."""
    out.mkdir(parents=True)
    run = BrokerRun(emu, out)
    run.start_brokers({"pc2": {
        "broker": "pc2", "listen": ["0.0.0.0", BROKER_PORT], "neighbours": {},
        "core": {"name": "flood", "params": {"tree_neighbours": []}},
        "log_dir": str(out), "emulate_link": False, "seed": 0}})
    return run


def _step(emu: Emulation, rate_hz: int, out: Path, step_s: float = STEP_S
          ) -> dict[str, Any]:
    run = _start_broker(emu, out)
    broker_ip = emu.graph.nodes["pc2"]["ip"]
    try:
        run.wait_links_up(20)
        n = int(rate_hz * step_s)
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
                "duration_s": 1.0 + step_s + 2.0})
        run.wait_clients(1.5 + 1.0 + step_s + 30)
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
    seconds = [s for s in sorted(gen) if s < int(step_s)]  # whole seconds only
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


def process_cpu_s(pid: int) -> float:
    """CPU time (s) process ``pid`` has used: the sum of its threads' run time from
    ``/proc/<pid>/task/*/schedstat`` (ns), or utime + stime from ``/proc/<pid>/stat``
    (clock ticks) where the kernel has no schedstat."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return sum(int((t / "schedstat").read_text().split()[0])
                   for t in tasks.iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (clock ticks, all cores)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return sum(ticks) - idle, sum(ticks)


def _sleep_until(t_wall: float) -> None:
    time.sleep(max(0.0, t_wall - time.time()))


def _calibration_step(emu: Emulation, k: int, rate_hz: int, step_s: float, out: Path
                      ) -> dict[str, Any]:
    """One calibration point: k match-all subscribers, ``rate_hz`` publications for
    ``step_s`` s; the broker's CPU per handled PUBLISH (see the module docstring)."""
    run = _start_broker(emu, out)
    broker_ip = emu.graph.nodes["pc2"]["ip"]
    pid = run.brokers["pc2"].pid
    try:
        run.wait_links_up(20)
        n = int(rate_hz * step_s)
        subs = []
        for i in range(1, k + 1):
            ops = out / "config" / f"sub{i}.ops.jsonl"
            ops.write_text(json.dumps({"t_s": 0.0, "type": "SUBSCRIBE", "msg_id": 1,
                                       "origin": f"sub{i}", "payload": {"filter": []}}) + "\n")
            subs.append({"client": f"sub{i}", "ops": str(ops)})
        pub_ops = out / "config" / "pub.ops.jsonl"
        pub_ops.write_text("".join(
            json.dumps({"t_s": _PUB_AT_S + i / rate_hz, "type": "PUBLISH", "msg_id": i + 1,
                        "origin": "pub", "payload": {"attrs": QUOTE}}) + "\n"
            for i in range(n)))
        start = time.time() + _CLIENT_START_S
        common = {"broker": "pc2", "broker_addr": [broker_ip, BROKER_PORT],
                  "log_dir": str(out), "start_at_wall": start,
                  "duration_s": _PUB_AT_S + step_s + 2.0}
        run.clients["subs"] = run._start("pc3", "nodes.client", "subs", {
            "clients": subs, "common": common})
        run.clients["pub"] = run._start("pc1", "nodes.client", "pub", {
            "client": "pub", "ops": str(pub_ops), **common})
        _sleep_until(start + _IDLE_FROM_S)
        t_a, c_a = time.monotonic(), process_cpu_s(pid)
        _sleep_until(start + _PUB_AT_S - 0.05)
        t_b, c_b = time.monotonic(), process_cpu_s(pid)
        codes = run.wait_clients(_CLIENT_START_S + _PUB_AT_S + step_s + 30)
        t_c, c_c = time.monotonic(), process_cpu_s(pid)
    finally:
        run.stop_brokers()
    idle_rate = (c_b - c_a) / (t_b - t_a)
    busy_cpu_s = (c_c - c_b) - idle_rate * (t_c - t_b)
    recv = [r for r in iter_jsonl(out / "pc2.jsonl", Ev.RECV) if r.get("type") == "PUBLISH"]
    delivers = sum(1 for r in iter_jsonl(out / "pc2.jsonl", Ev.DELIVER)
                   if r.get("type") == "PUBLISH")
    got = sum(1 for i in range(1, k + 1) for r in iter_jsonl(out / f"sub{i}.jsonl", Ev.RECV)
              if r.get("type") == "PUBLISH")
    matching = [r["matching_ms"] for r in recv if "matching_ms" in r]
    return {
        "subscriptions": k, "rate_hz": rate_hz, "step_s": step_s, "published": n,
        "handled": len(recv), "delivered_by_broker": delivers, "received_by_subscribers": got,
        # The broker's figures need only the broker to have handled and delivered every
        # message; subscribers that fall behind (one process for k clients) do not matter.
        "broker_complete": len(recv) == n and delivers == n * k,
        "zero_loss": len(recv) == n and got == n * k and not any(codes.values()),
        "idle_cpu_share": round(idle_rate, 5), "busy_s": round(t_c - t_b, 3),
        "busy_cpu_s": round(busy_cpu_s, 5),
        "per_msg_us": round(1e6 * busy_cpu_s / len(recv), 3) if recv else None,
        "matching_us_mean": (round(1000.0 * sum(matching) / len(matching), 3)
                             if matching else None),
    }


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """Ordinary least squares y = intercept + slope x, with r^2 (1 for an exact fit)."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("a line needs at least two distinct x values")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return {"intercept": intercept, "slope": slope,
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu_model": model, "cores": os.cpu_count(),
            "kernel": platform.release(), "python": platform.python_version()}


def _median(xs: Sequence[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def calibration(points: list[dict[str, Any]], rate_hz: int, step_s: float,
                busy_pct: float | None = None,
                sensitivity: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The calibration record (see the module docstring) from the steps' points."""
    from experiments.runs.manifest import git_revision

    good = [p for p in points if p["broker_complete"] and p["per_msg_us"] is not None]
    ks = sorted({p["subscriptions"] for p in good})
    medians = [{"subscriptions": k,
                "per_msg_us": round(_median([p["per_msg_us"] for p in good
                                             if p["subscriptions"] == k]), 3),
                "matching_us": round(_median([p["matching_us_mean"] or 0.0 for p in good
                                              if p["subscriptions"] == k]), 3),
                "repeats": sum(1 for p in good if p["subscriptions"] == k)} for k in ks]
    cost = least_squares(ks, [m["per_msg_us"] for m in medians])
    match = least_squares(ks, [m["matching_us"] for m in medians])
    return {
        "what": "a broker's service time per handled message, as the simulator's default: "
                "base_us + per_matched_subscription_us x (subscriptions the message matches)",
        "base_us": round(cost["intercept"], 2),
        "per_matched_subscription_us": round(cost["slope"], 2),
        "r2": round(cost["r2"], 4),
        "matching_only": {"base_us": round(match["intercept"], 2),
                          "per_matched_subscription_us": round(match["slope"], 2),
                          "r2": round(match["r2"], 4),
                          "what": "the same fit of the recv records' matching_ms (the "
                                  "core's handle alone, a part of the figures above)"},
        "method": ("pubsublab bench broker: one emulated broker (nodes.broker, flood core, no "
                   "neighbours, logging every message) on a Mininet host of a 1 Gbit/s Linux "
                   "bridge; per point, k match-all subscribers (one client process on another "
                   f"host) and one publisher at {rate_hz}/s for {step_s:g} s; the broker's CPU "
                   "time from /proc/<pid>/task/*/schedstat over the busy stretch (first "
                   "publication to the clients' end) less its idle rate (measured before the "
                   "first publication) times that stretch, divided by the PUBLISHes it "
                   "received: c(k) in us"),
        "regression": "ordinary least squares over k of the median of c(k) over the "
                      "repeats: c(k) = base_us + per_matched_subscription_us x k (points "
                      "where the broker handled and delivered every message: "
                      "broker_complete)",
        "medians": medians,
        "rate_hz": rate_hz,
        "caveat": "the cost per message falls as the rate rises (the broker reads several "
                  "frames per wake-up of its event loop, so fixed costs are shared): these "
                  "figures hold at about rate_hz; rate_sensitivity gives c(1) at half and "
                  "twice that rate",
        "rate_sensitivity": sensitivity or [],
        "points": points,
        "machine": {**machine(), "busy_pct_during": busy_pct,
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_revision(),
    }


def run(rates_hz: Sequence[int] = RATES_HZ, step_s: float = STEP_S, *,
        sub_counts: Sequence[int] = SUB_COUNTS,
        calibration_rate_hz: int = CALIBRATION_RATE_HZ,
        calibration_step_s: float = CALIBRATION_STEP_S,
        repeats: int = CALIBRATION_REPEATS,
        calibration_out: Path | None = CALIBRATION_FILE) -> dict[str, Any]:
    """Step the publication rate up until a step loses (no ``rates_hz``: skip), then
    calibrate the per-message cost at each of ``sub_counts`` (none: skip) and write it
    to ``calibration_out`` (None: do not write); returns every step's figures."""
    found = probe()
    if not found["checks"][0]["ok"]:
        raise PermissionError("bench broker builds a Mininet network: run with sudo")
    if repeats < 1:
        raise ValueError("calibration repeats must be at least 1")
    if sub_counts and (len(set(sub_counts)) < 2 or min(sub_counts) < 1):
        raise ValueError("calibration needs at least two distinct subscription counts, "
                         "each at least 1")
    graph = build_graph("gigabit-cluster", {"n": 3}, LinkParams(bw_mbps=1000))
    out = Path(mkdtemp(prefix="pubsublab-bench-broker-"))
    emu = Emulation(graph, switch="bridge", probe=found, log=_log)
    steps, points, sensitivity = [], [], []
    try:
        emu.start()
        for rate in rates_hz:
            _log(f"{rate}/s for {step_s:g} s ...")
            step = _step(emu, rate, out / f"rate-{rate}", step_s)
            _log(f"{rate}/s: generated {step['generated']}, delivered {step['delivered']}, "
                 f"send rate {step['achieved_send_hz']}/s, delay {step['delay_ms']} ms, "
                 f"sustained: {step['zero_loss']}")
            steps.append(step)
            if not step["zero_loss"]:
                break
        cpu0 = machine_cpu()
        for r in range(repeats if sub_counts else 0):
            for k in sub_counts:
                _log(f"calibration {r + 1}/{repeats}: {k} subscription(s), "
                     f"{calibration_rate_hz}/s for {calibration_step_s:g} s ...")
                point = _calibration_step(emu, k, calibration_rate_hz, calibration_step_s,
                                          out / f"calibration-{k}-{r + 1}")
                _log(f"calibration {r + 1}/{repeats}: {k} subscription(s): "
                     f"{point['per_msg_us']} us per message (matching "
                     f"{point['matching_us_mean']} us), broker complete "
                     f"{point['broker_complete']}, zero loss {point['zero_loss']}")
                points.append({**point, "repeat": r + 1})
        for rate in ((calibration_rate_hz // 2, 2 * calibration_rate_hz)
                     if sub_counts else ()):
            _log(f"calibration, rate sensitivity: 1 subscription, {rate}/s ...")
            point = _calibration_step(emu, 1, rate, calibration_step_s,
                                      out / f"calibration-rate-{rate}")
            _log(f"calibration, rate sensitivity: {rate}/s: {point['per_msg_us']} us per "
                 f"message, broker complete {point['broker_complete']}")
            sensitivity.append({k: point[k] for k in (
                "rate_hz", "per_msg_us", "matching_us_mean", "broker_complete")})
        cpu1 = machine_cpu()
    finally:
        emu.stop()
    sustained = max((s["rate_hz"] for s in steps if s["zero_loss"]), default=0)
    result: dict[str, Any] = {
        "sustained_zero_loss_hz": sustained, "steps": steps, "step_s": step_s,
        "logs": str(out), "padres_script_ceiling_hz": 1000, "aim_hz": 10000}
    usable = {p["subscriptions"] for p in points if p["broker_complete"]}
    if points and len(usable) < 2:
        result["calibration_error"] = (
            "fewer than two subscription counts where the broker handled every message: "
            "no calibration (lower --calibration-rate)")
        _log(result["calibration_error"])
    elif points:
        busy = (round(100.0 * (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 1)
                if cpu1[1] > cpu0[1] else None)
        result["calibration"] = calibration(points, calibration_rate_hz, calibration_step_s,
                                            busy, sensitivity)
        if calibration_out is not None:
            calibration_out.write_text(json.dumps(result["calibration"], indent=1) + "\n")
            result["calibration_file"] = str(calibration_out)
            _log(f"calibration written to {calibration_out}")
    return result


def format_result(result: dict[str, Any]) -> str:
    lines = [f"{'rate/s':>8} {'generated':>10} {'delivered':>10} {'send/s':>9} "
             f"{'p50_ms':>8} {'max_ms':>8}  sustained"] if result["steps"] else []
    for s in result["steps"]:
        d = s["delay_ms"]
        lines.append(f"{s['rate_hz']:8} {s['generated']:10} {s['delivered']:10} "
                     f"{s['achieved_send_hz']:9.0f} {d['p50'] or 0:8.1f} {d['max'] or 0:8.1f}"
                     f"  {s['zero_loss']}")
    if result["steps"]:
        lines.append(f"sustained with zero loss: {result['sustained_zero_loss_hz']}/s "
                     f"(PADRES' scripts stop at 1,000/s; aim 10,000/s)")
    cal = result.get("calibration")
    if result.get("calibration_error"):
        lines.append(result["calibration_error"])
    if cal:
        lines.append(f"{'subs':>8} {'handled':>10} {'delivered':>10} {'us/msg':>9} "
                     f"{'match_us':>9} {'idle_cpu':>9}  broker complete, zero loss")
        for p in cal["points"]:
            lines.append(f"{p['subscriptions']:8} {p['handled']:10} "
                         f"{p['received_by_subscribers']:10} {p['per_msg_us'] or 0:9.1f} "
                         f"{p['matching_us_mean'] or 0:9.1f} {p['idle_cpu_share']:9.4f}"
                         f"  {p['broker_complete']}, {p['zero_loss']}")
        for p in cal["rate_sensitivity"]:
            lines.append(f"  at {p['rate_hz']}/s, 1 subscription: {p['per_msg_us']} us per "
                         f"message (broker complete {p['broker_complete']})")
        m = cal["matching_only"]
        lines.append(f"service time per handled message: {cal['base_us']:g} us + "
                     f"{cal['per_matched_subscription_us']:g} us per matched subscription "
                     f"(least squares, r^2 {cal['r2']:g}); of it matching: {m['base_us']:g} "
                     f"us + {m['per_matched_subscription_us']:g} us per subscription")
        lines.append(f"measured on {cal['machine']['hostname']} ({cal['machine']['cpu_model']}"
                     f", {cal['machine']['cores']} cores, {cal['machine']['busy_pct_during']} "
                     f"% busy meanwhile) at {cal['date']}"
                     + (f"; written to {result['calibration_file']}"
                        if "calibration_file" in result else ""))
    return "\n".join(lines)
