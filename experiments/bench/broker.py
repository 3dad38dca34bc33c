"""`pubsublab bench broker`: one broker between a publisher and a subscriber on a real
Mininet network, and the highest rate it sustains with zero loss.

PADRES' benchmark method: a rate is sustained when, in every whole second of the run,
the notifications delivered equal those generated (bucketed by publication second), the
publisher really generated the rate (at least 95 % of it), and no notification took
longer than ``MAX_DELAY_S`` end to end. The rate steps up until a step fails. Three hosts
on a 1 Gbit/s Linux bridge: publisher on pc1, broker (flood core, no neighbours) on pc2,
subscriber (matching everything) on pc3; broker and clients log every message.

**Calibration** (the simulator's default per-message service time): after the rate steps,
rounds with k match-all subscribers for each k of ``sub_counts`` (default 1, 4, 8),
repeated ``repeats`` times, give the broker's CPU time per handled message, c(k) in
microseconds (its idle rate subtracted), and the least-squares fit of the medians
``c(k) = base_us + per_matched_subscription_us x k``. The figures, the points, the method
and the machine go to ``nodes/sim/calibration.json`` (``--calibration-out``), which the
simulator reads; they hold at about the calibration rate, which the file records.

**Saturation** (for the simulator's processing-capacity model): :func:`saturation_point`
offers a CPU-limited broker more than it handles and returns its throughput and the cost
per message it implies; :func:`chain_delays` gives the notification delays and the
broker's throughput at increasing offered rates through the same chain.

The method, the file's keys and the caveats in full: docs/design/bench-broker.md.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import platform
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.emulation.doctor import probe
from experiments.emulation.network import Emulation, cpu_usage_ns
from experiments.runs.brokers import BrokerRun
from nodes.emulated.runtime import BROKER_PORT
from nodes.logs import Ev, iter_jsonl
from nodes.metrics.summary import percentile
from nodes.runfolder import RUNS_BASE, new_run_dir
from nodes.sim.processing import CALIBRATION_FILE
from nodes.time_left import write_line
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
# Saturation: the broker host at SATURATION_SHARE of a core, k match-all subscribers,
# offered SATURATION_OVERLOAD x the rate a 75 us/k message cost would allow (the
# broker's saturated cost on our machines is about 72 us with one subscription).
SATURATION_COUNTS = (1, 2, 4)
SATURATION_SHARE = 0.2
SATURATION_OVERLOAD = 3.0
SATURATION_STEP_S = 3.0
SATURATION_REPEATS = 2
_CLIENT_START_S = 1.5  # the clients' t_s = 0 lies this far after they are started
_IDLE_FROM_S, _PUB_AT_S = 0.5, 2.0  # the idle stretch, on the clients' clock
CHAIN_DRAIN_S = 5.0  # chain_delays: the subscriber's time after the publisher's end
_LEAD_S, _SETTLE_S = 1.0, 0.2  # alternating_saturation: before the first window; after a switch


def _log(msg: str) -> None:
    write_line(f"[bench broker] {msg}")


def _start_broker(emu: Emulation, out: Path) -> BrokerRun:
    """The broker under test: flood, no neighbours, on pc2, logging into ``out``."""
    out.mkdir(parents=True)
    run = BrokerRun(emu, out)
    run.start_brokers({"pc2": {
        "broker": "pc2", "listen": ["0.0.0.0", BROKER_PORT], "neighbours": {},
        "core": {"name": "flood", "params": {"tree_neighbours": []}},
        "log_dir": str(out), "emulate_link": False, "seed": 0}})
    return run


def _step(emu: Emulation, rate_hz: int, out: Path, step_s: float = STEP_S,
          max_delay_s: float = MAX_DELAY_S) -> dict[str, Any]:
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
            run.clients[client] = run._start(host, "nodes.emulated.client", client, {
                "client": client, "broker": "pc2", "broker_addr": [broker_ip, BROKER_PORT],
                "secret": run.secret, "log_dir": str(out), "ops": str(ops),
                "start_at_wall": start,
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
          and max_delay_ms is not None and max_delay_ms <= 1000.0 * max_delay_s)
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


@dataclass(frozen=True)
class _ChainRun:
    """What one run of the chain (publisher on pc1, broker on pc2, subscribers on pc3)
    measured besides its logs (see :func:`_run_chain`)."""

    published: int  # publications scheduled
    idle_cpu_share: float  # the broker's CPU rate before the first publication (cores)
    busy_s: float  # from just before the first publication until the clients ended
    busy_cpu_s: float  # the broker's CPU over busy_s, less idle_cpu_share x busy_s
    end_wall: float  # Unix time at the end of busy_s
    codes: dict[str, int]  # the clients' exit statuses
    cgroup: dict[str, Any] | None  # pc2's cgroup figures over busy_s (None: not limited)


def _run_chain(emu: Emulation, k: int, rate_hz: int, step_s: float, out: Path,
               tail_s: float = 0.0, on_start: Callable[[float], None] | None = None
               ) -> _ChainRun:
    """Start the broker, k match-all subscribers (one client process on pc3) and one
    publisher on pc1 sending ``rate_hz`` for ``step_s`` s from ``_PUB_AT_S``; the clients
    end 2 s after the last scheduled publication (the subscribers ``tail_s`` s later
    still). The broker's CPU is read over an idle stretch before the first publication
    and over the busy stretch until the clients ended (see docs/design/bench-broker.md); pc2's
    cgroup is sampled over the latter where it is CPU-limited. ``on_start`` is called
    with the Unix time of the first publication once the clients are started. The
    broker is stopped."""
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
                  "secret": run.secret, "log_dir": str(out), "start_at_wall": start,
                  "duration_s": _PUB_AT_S + step_s + 2.0}
        run.clients["subs"] = run._start("pc3", "nodes.emulated.client", "subs", {
            "clients": subs, "common": {**common,
                                        "duration_s": common["duration_s"] + tail_s}})
        run.clients["pub"] = run._start("pc1", "nodes.emulated.client", "pub", {
            "client": "pub", "ops": str(pub_ops), **common})
        if on_start is not None:
            on_start(start + _PUB_AT_S)
        _sleep_until(start + _IDLE_FROM_S)
        t_a, c_a = time.monotonic(), process_cpu_s(pid)
        _sleep_until(start + _PUB_AT_S - 0.05)
        t_b, c_b = time.monotonic(), process_cpu_s(pid)
        with emu.cpu_sampler(interval_s=0.5) as sampler:
            codes = run.wait_clients(_CLIENT_START_S + _PUB_AT_S + step_s + tail_s + 30)
            t_c, c_c, end_wall = time.monotonic(), process_cpu_s(pid), time.time()
    finally:
        run.stop_brokers()
    idle_rate = (c_b - c_a) / (t_b - t_a)
    return _ChainRun(published=n, idle_cpu_share=idle_rate, busy_s=t_c - t_b,
                     busy_cpu_s=(c_c - c_b) - idle_rate * (t_c - t_b), end_wall=end_wall,
                     codes=codes, cgroup=sampler.summary().get("pc2"))


def _broker_publish_walls(out: Path) -> list[float]:
    """Wall times (s) at which the broker received each PUBLISH (its ``recv`` records)."""
    return [r["t_wall"] for r in iter_jsonl(out / "pc2.jsonl", Ev.RECV)
            if r.get("type") == "PUBLISH"]


def _busy_throughput_hz(walls: Sequence[float], until_wall: float) -> float | None:
    """PUBLISHes handled per second over the broker's busy stretch: those received by
    ``until_wall`` (the clients' end) over the time from the first to the last of them
    (None: fewer than two). What the broker handles after the clients ended is left
    out: its deliveries then fail (each one logged on its standard error) and it is
    being stopped, so it costs something else."""
    walls = [t for t in walls if t <= until_wall]
    if len(walls) < 2 or walls[-1] <= walls[0]:
        return None
    return len(walls) / (walls[-1] - walls[0])


def _delays_ms(out: Path, k: int) -> list[float]:
    """Notification delays (ms, sorted): t_wall - t_pub of every PUBLISH the k
    subscribers received."""
    return sorted(1000.0 * (r["t_wall"] - r["t_pub"]) for i in range(1, k + 1)
                  for r in iter_jsonl(out / f"sub{i}.jsonl", Ev.RECV)
                  if r.get("type") == "PUBLISH")


def _quantile(sorted_xs: Sequence[float], q: float) -> float | None:
    """The q-quantile of sorted values (None: no values)."""
    return percentile(sorted_xs, q) if sorted_xs else None


def _send_figures(out: Path) -> tuple[int, float]:
    """PUBLISHes the publisher sent and its achieved rate (1/s, first to last send)."""
    sent = [r["t_pub"] for r in iter_jsonl(out / "pub.jsonl", Ev.SEND)
            if r.get("type") == "PUBLISH"]
    rate = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 else 0.0
    return len(sent), rate


def _calibration_step(emu: Emulation, k: int, rate_hz: int, step_s: float, out: Path
                      ) -> dict[str, Any]:
    """One calibration point: k match-all subscribers, ``rate_hz`` publications for
    ``step_s`` s; the broker's CPU per handled PUBLISH (docs/design/bench-broker.md)."""
    chain = _run_chain(emu, k, rate_hz, step_s, out)
    n, busy_cpu_s = chain.published, chain.busy_cpu_s
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
        "zero_loss": len(recv) == n and got == n * k and not any(chain.codes.values()),
        "idle_cpu_share": round(chain.idle_cpu_share, 5), "busy_s": round(chain.busy_s, 3),
        "busy_cpu_s": round(busy_cpu_s, 5),
        "per_msg_us": round(1e6 * busy_cpu_s / len(recv), 3) if recv else None,
        "matching_us_mean": (round(1000.0 * sum(matching) / len(matching), 3)
                             if matching else None),
    }


def _limit_broker(emu: Emulation, cpu_share: float) -> None:
    """Give the broker host pc2 ``cpu_share`` of a core on the running network."""
    if "pc2" not in emu.cpu_limits:
        raise ValueError("the broker host pc2 is not CPU-limited: build the Emulation "
                         "with cpu_limits={'pc2': share}")
    if emu.cpu_limits["pc2"] != cpu_share:
        emu.set_cpu_share("pc2", cpu_share)


def saturation_point(emu: Emulation, cpu_share: float, rate_hz: int, step_s: float,
                     out: Path, k: int = 1) -> dict[str, Any]:
    """One step of the broker on pc2 limited to ``cpu_share`` of a core (the Emulation
    must be built with pc2 CPU-limited; the share is set here on the running network),
    k match-all subscribers, the publisher offering ``rate_hz`` (meant to be well above
    what the broker can handle) for ``step_s`` s, so that a backlog stays in front of
    the broker until the clients end and the broker is stopped.

    Returns ``handled`` (PUBLISHes the broker received, all of its log, including
    those it took in after the clients ended, while it was being stopped) and
    ``handled_in_busy`` (those received by the clients' end); its ``throughput_hz``
    over its busy stretch (``handled_in_busy`` / (t_wall of the last of their ``recv``
    records - of the first), 1/s); ``per_msg_us`` (its CPU per handled message as in the
    calibration, over ``handled_in_busy``); ``saturated_cost_us`` (``cpu_share`` /
    ``throughput_hz``: the cost per message the knee implies, us); ``delay_ms`` p50 and
    p95 (the subscribers' t_wall - t_pub, ms); what the publisher really sent (``sent``,
    ``send_hz``); and pc2's cgroup figures over the busy stretch (``cpu_used_share``:
    share of a core used; ``throttled_periods`` of ``periods``), with ``cpu_cost_us``
    (``cpu_used_share`` / ``throughput_hz``: the cost per message from the CPU time the
    host really used, which a broker kept from part of its quota by other work on the
    machine does not inflate, as it does ``saturated_cost_us``)."""
    _limit_broker(emu, cpu_share)
    chain = _run_chain(emu, k, rate_hz, step_s, out)
    walls = _broker_publish_walls(out)
    in_busy = sum(1 for t in walls if t <= chain.end_wall)
    throughput = _busy_throughput_hz(walls, chain.end_wall)
    delays = _delays_ms(out, k)
    sent, send_hz = _send_figures(out)
    cg = chain.cgroup or {}
    return {
        "cpu_share": cpu_share, "subscriptions": k, "rate_hz": rate_hz, "step_s": step_s,
        "published": chain.published, "sent": sent, "send_hz": round(send_hz, 1),
        "handled": len(walls), "handled_in_busy": in_busy, "delivered": len(delays),
        "busy_s": round(chain.busy_s, 3),
        "throughput_hz": round(throughput, 1) if throughput else None,
        "per_msg_us": round(1e6 * chain.busy_cpu_s / in_busy, 2) if in_busy else None,
        "saturated_cost_us": round(1e6 * cpu_share / throughput, 2) if throughput else None,
        "delay_ms": {"p50": _round(_quantile(delays, 0.5)),
                     "p95": _round(_quantile(delays, 0.95))},
        "cpu_used_share": cg.get("achieved_mean"),
        "cpu_cost_us": (round(1e6 * cg["achieved_mean"] / throughput, 2)
                        if throughput and cg.get("achieved_mean") else None),
        "throttled_periods": cg.get("throttled_periods"), "periods": cg.get("periods"),
    }


def alternating_saturation(emu: Emulation, shares: Sequence[float], window_s: float,
                           rate_hz: int, out: Path) -> list[dict[str, Any]]:
    """One saturated run of the chain (one match-all subscriber), the broker host's
    share switched on the running network to each of ``shares`` in turn for
    ``window_s`` s, the publisher offering ``rate_hz`` throughout (meant to be well
    above what the broker handles at the largest share).

    Windows next to each other see the machine at nearly the same pace, which runs
    apart from one step to the next (the CPU per message here moved by up to 40 %
    between saturated 3 s steps 15 s apart, alike at both shares), so comparing
    neighbours compares the shares and little else. The first window starts
    ``_LEAD_S`` s after the first publication (a backlog has built), and each is
    measured from ``_SETTLE_S`` s after its switch (the new quota holds from the next
    CFS period).

    Per window, in order: ``cpu_share`` (configured), ``start_wall`` and ``end_wall``
    (Unix s, what was measured), ``handled`` (PUBLISHes the broker received within it),
    ``throughput_hz``, ``cpu_used_share`` (pc2's cgroup CPU time over it, share of one
    core), ``cpu_cost_us`` (``cpu_used_share`` / ``throughput_hz``) and ``backlog``
    (publications sent but not yet received by the broker at its end: above zero, the
    broker never waited for work)."""
    _limit_broker(emu, shares[0])
    # Per window: its share, and the Unix time and pc2's CPU time (ns) at its two ends.
    marks: list[tuple[float, float, int, float, int]] = []

    def switch(first_pub_wall: float) -> None:
        for i, share in enumerate(shares):
            switch_wall = first_pub_wall + _LEAD_S + i * window_s
            _sleep_until(switch_wall)
            emu.set_cpu_share("pc2", share)
            _sleep_until(switch_wall + _SETTLE_S)
            from_wall, from_ns = time.time(), cpu_usage_ns("pc2")
            _sleep_until(switch_wall + window_s)
            marks.append((share, from_wall, from_ns, time.time(), cpu_usage_ns("pc2")))

    switcher: threading.Thread | None = None  # started by the chain once its clients are

    def on_start(first_pub_wall: float) -> None:
        nonlocal switcher
        switcher = threading.Thread(target=switch, args=(first_pub_wall,),
                                    name="share-switch", daemon=True)
        switcher.start()

    _run_chain(emu, 1, rate_hz, _LEAD_S + len(shares) * window_s + 0.5, out,
               on_start=on_start)
    if switcher is not None:
        switcher.join()
    walls = sorted(_broker_publish_walls(out))
    sends = sorted(r["t_pub"] for r in iter_jsonl(out / "pub.jsonl", Ev.SEND)
                   if r.get("type") == "PUBLISH")
    rows = []
    for share, from_wall, from_ns, to_wall, to_ns in marks:
        length_s = to_wall - from_wall
        got_by_end = bisect.bisect_right(walls, to_wall)
        handled = got_by_end - bisect.bisect_right(walls, from_wall)
        used = (to_ns - from_ns) / 1e9 / length_s
        throughput = handled / length_s
        rows.append({
            "cpu_share": share, "start_wall": round(from_wall, 3),
            "end_wall": round(to_wall, 3), "handled": handled,
            "throughput_hz": round(throughput, 1), "cpu_used_share": round(used, 4),
            "cpu_cost_us": round(1e6 * used / throughput, 2) if handled else None,
            "backlog": bisect.bisect_right(sends, to_wall) - got_by_end,
        })
    return rows


def chain_delays(emu: Emulation, rates_hz: Sequence[int], step_s: float, out: Path
                 ) -> list[dict[str, Any]]:
    """The chain publisher -> broker -> one match-all subscriber at each offered rate
    of ``rates_hz`` (in that order) for ``step_s`` s each, with the broker host as the
    Emulation has it (CPU-limited or not). The subscriber runs ``CHAIN_DRAIN_S`` s
    longer than the publisher, so that what a broker behind the offered rate still
    holds can reach it. Per rate: ``rate_hz``, ``published`` (scheduled), ``sent`` and
    ``send_hz`` (what the publisher really sent, 1/s), ``delivered`` (notifications
    received), their delay ``p50_ms`` and ``p95_ms`` (t_wall - t_pub) and the broker's
    ``throughput_hz`` over its busy stretch (1/s, as in :func:`saturation_point`)."""
    rows = []
    for rate in rates_hz:
        step_out = out / f"chain-{rate}"
        chain = _run_chain(emu, 1, rate, step_s, step_out, tail_s=CHAIN_DRAIN_S)
        delays = _delays_ms(step_out, 1)
        sent, send_hz = _send_figures(step_out)
        throughput = _busy_throughput_hz(_broker_publish_walls(step_out), chain.end_wall)
        rows.append({"rate_hz": rate, "published": chain.published, "sent": sent,
                     "send_hz": round(send_hz, 1), "delivered": len(delays),
                     "p50_ms": _round(_quantile(delays, 0.5)),
                     "p95_ms": _round(_quantile(delays, 0.95)),
                     "throughput_hz": round(throughput, 1) if throughput else None})
    return rows


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


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


def saturation_fit(points: list[dict[str, Any]], share: float) -> dict[str, Any] | None:
    """The saturated cost per message, ``cpu_share / throughput_hz`` (us), fitted over the
    subscription counts as the calibration's c(k) is; None without two counts of points
    that really saturated the broker (throughput under 90 % of what was sent)."""
    good = [p for p in points if p["saturated_cost_us"] is not None
            and p["throughput_hz"] < 0.9 * p["send_hz"]]
    ks = sorted({p["subscriptions"] for p in good})
    if len(ks) < 2:
        return None
    medians = [{"subscriptions": k,
                "saturated_cost_us": round(_median([p["saturated_cost_us"] for p in good
                                                    if p["subscriptions"] == k]), 2),
                "throughput_hz": round(_median([p["throughput_hz"] for p in good
                                                if p["subscriptions"] == k]), 1),
                "repeats": sum(1 for p in good if p["subscriptions"] == k)} for k in ks]
    fit = least_squares(ks, [m["saturated_cost_us"] for m in medians])
    return {
        "base_us": round(fit["intercept"], 2),
        "per_matched_subscription_us": round(fit["slope"], 2),
        "r2": round(fit["r2"], 4),
        "cpu_share": share,
        "method": (f"the broker host CPU-limited to {share:g} core (cgroup CFS quota); per "
                   "point k match-all subscribers and a publisher offering about "
                   f"{SATURATION_OVERLOAD:g} x what the broker handles for "
                   f"{SATURATION_STEP_S:g} s, so a backlog stays in front of it; its "
                   "throughput over the busy stretch (PUBLISHes received until the clients "
                   "ended, over the time from the first to the last): the cost per message "
                   "c(k) = share / throughput, in us of a whole core"),
        "regression": "ordinary least squares over k of the median of c(k) over the "
                      "repeats (points whose throughput stayed under 90 % of the send rate)",
        "medians": medians,
        "points": points,
    }


def calibration(points: list[dict[str, Any]], rate_hz: int, step_s: float,
                busy_pct: float | None = None,
                sensitivity: list[dict[str, Any]] | None = None,
                saturated: dict[str, Any] | None = None) -> dict[str, Any]:
    """The calibration record (docs/design/bench-broker.md) from the steps' points and, if
    measured, the saturation fit, which then gives the simulator's default."""
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
    at_rate = {
        "base_us": round(cost["intercept"], 2),
        "per_matched_subscription_us": round(cost["slope"], 2),
        "r2": round(cost["r2"], 4),
        "matching_only": {"base_us": round(match["intercept"], 2),
                          "per_matched_subscription_us": round(match["slope"], 2),
                          "r2": round(match["r2"], 4),
                          "what": "the same fit of the recv records' matching_ms (the "
                                  "core's handle alone, a part of the figures above)"},
        "method": ("pubsublab bench broker: one emulated broker (nodes.emulated.broker, flood "
                   "core, no "
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
    }
    top = saturated or at_rate
    return {
        "what": "a broker's service time per handled message, as the simulator's default: "
                "base_us + per_matched_subscription_us x (subscriptions the message matches)",
        "base_us": top["base_us"],
        "per_matched_subscription_us": top["per_matched_subscription_us"],
        "r2": top["r2"],
        "source": "saturated" if saturated else "at_rate",
        "why": "the processing model matters where a broker cannot keep up, and a busy "
               "broker reads many frames per wake-up of its event loop, so its cost per "
               "message is the saturated one (the knee of a CPU-limited broker is where "
               "share / saturated cost says); at_rate is what a message costs a broker "
               "that is mostly idle, which adds latency but sets no limit",
        "saturated": saturated,
        "at_rate": at_rate,
        "machine": {**machine(), "busy_pct_during": busy_pct,
                    "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_revision(),
    }


def _probe_as_root() -> dict[str, Any]:
    found = probe()
    if not found["checks"][0]["ok"]:
        raise PermissionError("bench broker builds a Mininet network: run with sudo")
    return found


def _three_hosts_graph() -> Any:
    """pc1, pc2 and pc3 on one switch, 1 Gbit/s links: publisher, broker, subscriber."""
    return build_graph("gigabit-cluster", {"n": 3}, LinkParams(bw_mbps=1000))


@contextlib.contextmanager
def three_hosts(log: Callable[[str], None]) -> Iterator[Emulation]:
    """The benchmark's three hosts (:func:`_three_hosts_graph`) built and started, and
    stopped at the end (root)."""
    emu = Emulation(_three_hosts_graph(), switch="bridge", probe=_probe_as_root(), log=log)
    try:
        emu.start()
        yield emu
    finally:
        emu.stop()


def run(rates_hz: Sequence[int] = RATES_HZ, step_s: float = STEP_S, *,
        sub_counts: Sequence[int] = SUB_COUNTS,
        calibration_rate_hz: int = CALIBRATION_RATE_HZ,
        calibration_step_s: float = CALIBRATION_STEP_S,
        repeats: int = CALIBRATION_REPEATS,
        saturation_counts: Sequence[int] = SATURATION_COUNTS,
        calibration_out: Path | None = CALIBRATION_FILE,
        out_base: Path = RUNS_BASE, max_delay_s: float = MAX_DELAY_S) -> dict[str, Any]:
    """Step the publication rate up until a step loses or a notification takes longer
    than ``max_delay_s`` (no ``rates_hz``: skip), then
    calibrate the per-message cost at each of ``sub_counts`` (none: skip), at
    ``calibration_rate_hz`` and, on a broker host CPU-limited to ``SATURATION_SHARE``,
    saturated at each of ``saturation_counts`` (none, or a machine that cannot limit
    CPU: skip), and write the calibration to ``calibration_out`` (None: do not write);
    returns every step's figures. Logs go to a run folder under ``out_base``."""
    found = _probe_as_root()
    if repeats < 1:
        raise ValueError("calibration repeats must be at least 1")
    if sub_counts and (len(set(sub_counts)) < 2 or min(sub_counts) < 1):
        raise ValueError("calibration needs at least two distinct subscription counts, "
                         "each at least 1")
    graph = _three_hosts_graph()
    out = new_run_dir(out_base, "bench-broker")
    _log(f"logs in {out}")
    emu = Emulation(graph, switch="bridge", probe=found, log=_log)
    steps, points, sensitivity = [], [], []
    try:
        emu.start()
        for rate in rates_hz:
            _log(f"{rate}/s for {step_s:g} s ...")
            step = _step(emu, rate, out / f"rate-{rate}", step_s, max_delay_s)
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
    saturated = (_saturation(graph, found, saturation_counts, out)
                 if sub_counts and saturation_counts else [])
    sustained = max((s["rate_hz"] for s in steps if s["zero_loss"]), default=0)
    result: dict[str, Any] = {
        "sustained_zero_loss_hz": sustained, "steps": steps, "step_s": step_s,
        "max_delay_s": max_delay_s,
        "logs": str(out), "padres_script_ceiling_hz": 1000, "aim_hz": 10000,
        "machine": machine(), "date": datetime.now(UTC).isoformat(timespec="seconds")}
    usable = {p["subscriptions"] for p in points if p["broker_complete"]}
    if points and len(usable) < 2:
        result["calibration_error"] = (
            "fewer than two subscription counts where the broker handled every message: "
            "no calibration (lower --calibration-rate)")
        _log(result["calibration_error"])
    elif points:
        busy = (round(100.0 * (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 1)
                if cpu1[1] > cpu0[1] else None)
        fit = saturation_fit(saturated, SATURATION_SHARE) if saturated else None
        if saturated and fit is None:
            _log("saturation: fewer than two subscription counts saturated the broker; the "
                 "at-rate figures stay the default")
        result["calibration"] = calibration(points, calibration_rate_hz, calibration_step_s,
                                            busy, sensitivity, fit)
        if calibration_out is not None:
            calibration_out.write_text(json.dumps(result["calibration"], indent=1) + "\n")
            result["calibration_file"] = str(calibration_out)
            _log(f"calibration written to {calibration_out}")
    return result


def _saturation(graph: Any, found: dict[str, Any], counts: Sequence[int], out: Path
                ) -> list[dict[str, Any]]:
    """The saturation points (see :func:`saturation_point`), on a network of their own
    whose broker host is CPU-limited; none where the machine cannot limit CPU."""
    if not found["mechanisms"].get("cpu_limit"):
        _log("saturation: skipped, this machine cannot CPU-limit hosts (pubsublab doctor)")
        return []
    emu = Emulation(graph, switch="bridge", probe=found, log=_log,
                    cpu_limits={"pc2": SATURATION_SHARE})
    points = []
    try:
        emu.start()
        for r in range(SATURATION_REPEATS):
            for k in counts:
                rate = round(SATURATION_OVERLOAD * SATURATION_SHARE * 1e6 / (75.0 * k))
                _log(f"saturation {r + 1}/{SATURATION_REPEATS}: {k} subscription(s), "
                     f"{SATURATION_SHARE:g} core, offered {rate}/s ...")
                point = saturation_point(emu, SATURATION_SHARE, rate, SATURATION_STEP_S,
                                         out / f"saturation-{k}-{r + 1}", k)
                _log(f"saturation: {point['throughput_hz']}/s handled, "
                     f"{point['saturated_cost_us']} us per message")
                points.append({**point, "repeat": r + 1})
    finally:
        emu.stop()
    return points


def format_result(result: dict[str, Any]) -> str:
    lines = [f"{'rate/s':>8} {'generated':>10} {'delivered':>10} {'send/s':>9} "
             f"{'p50_ms':>8} {'max_ms':>8}  sustained"] if result["steps"] else []
    for s in result["steps"]:
        d = s["delay_ms"]
        lines.append(f"{s['rate_hz']:8} {s['generated']:10} {s['delivered']:10} "
                     f"{s['achieved_send_hz']:9.0f} {d['p50'] or 0:8.1f} {d['max'] or 0:8.1f}"
                     f"  {s['zero_loss']}")
    if result["steps"]:
        m = result["machine"]
        lines.append(f"sustained with zero loss: {result['sustained_zero_loss_hz']}/s "
                     f"(PADRES' scripts stop at 1,000/s; aim 10,000/s), on {m['hostname']} "
                     f"({m['cpu_model']}, {m['cores']} cores) at {result['date']}")
    cal = result.get("calibration")
    if result.get("calibration_error"):
        lines.append(result["calibration_error"])
    if cal:
        lines.append(f"{'subs':>8} {'handled':>10} {'delivered':>10} {'us/msg':>9} "
                     f"{'match_us':>9} {'idle_cpu':>9}  broker complete, zero loss")
        at = cal["at_rate"]
        for p in at["points"]:
            lines.append(f"{p['subscriptions']:8} {p['handled']:10} "
                         f"{p['received_by_subscribers']:10} {p['per_msg_us'] or 0:9.1f} "
                         f"{p['matching_us_mean'] or 0:9.1f} {p['idle_cpu_share']:9.4f}"
                         f"  {p['broker_complete']}, {p['zero_loss']}")
        for p in at["rate_sensitivity"]:
            lines.append(f"  at {p['rate_hz']}/s, 1 subscription: {p['per_msg_us']} us per "
                         f"message (broker complete {p['broker_complete']})")
        m = at["matching_only"]
        lines.append(f"at {at['rate_hz']}/s: {at['base_us']:g} us + "
                     f"{at['per_matched_subscription_us']:g} us per matched subscription "
                     f"(least squares, r^2 {at['r2']:g}); of it matching: {m['base_us']:g} "
                     f"us + {m['per_matched_subscription_us']:g} us per subscription")
        sat = cal["saturated"]
        for p in (sat or {}).get("points", []):
            lines.append(f"  saturated, {p['subscriptions']} subscription(s), offered "
                         f"{p['rate_hz']}/s: {p['throughput_hz']}/s handled on "
                         f"{p['cpu_share']:g} core: {p['saturated_cost_us']} us per message")
        lines.append(f"the simulator's default ({cal['source']}): {cal['base_us']:g} us + "
                     f"{cal['per_matched_subscription_us']:g} us per matched subscription "
                     f"(r^2 {cal['r2']:g})")
        lines.append(f"measured on {cal['machine']['hostname']} ({cal['machine']['cpu_model']}"
                     f", {cal['machine']['cores']} cores, {cal['machine']['busy_pct_during']} "
                     f"% busy meanwhile) at {cal['date']}"
                     + (f"; written to {result['calibration_file']}"
                        if "calibration_file" in result else ""))
    return "\n".join(lines)
