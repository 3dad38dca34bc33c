"""How fast the discrete-event simulator runs: the ``pubsublab bench sim`` benchmark.

For each node count, two random overlays (a uniformly random labelled tree and a random
4-regular graph, both seeded) carry the stock workload with the flood core and per-message
logs off. "Messages" are inter-broker messages (IMs): flooding costs ``n - 1`` IMs per
publication, so a run gets ``ceil(messages / (n - 1))`` publications. The figures are
wall-clock rates on this machine: events/s (client operations, arrivals, timers) and
IMs/s of the event loop, with overlay building, workload generation and the simulator's
set-up timed apart.

**Links on demand** (:func:`on_demand_compare`, part of :func:`run`): at the largest node
count, every node has 20 random others (seeded) and sends ``messages / nodes`` messages
(10 at 10,000 nodes and 100,000 messages), each to one of its 20 drawn at random, all in
one client operation at a random time in the first second, through a bench core
(:class:`Blast`) that sends what the operation names and ignores what arrives; the
simulator opens a link on the first message of each pair (:class:`nodes.sim.links.LinkModel`:
1 ms, gigabit NICs). Beside it, the flood core on the random 4-regular overlay of the
same size carries the same number of IMs, as in the table. Each of the two runs in a
fresh process (``multiprocessing`` spawn), so its peak memory is its own: the peak
resident set size of that process, ``VmHWM`` in ``/proc/self/status`` (the interpreter
and imports included, about 40 MiB: ``baseline_mib``, read before the overlay is built;
not ``ru_maxrss``, which a spawned child inherits from its parent across exec). Rates are
messages (IMs) per second of the event loop, as in the table; ``ratio`` is static over
on-demand.

**Against the floor**: :func:`run` first measures a bare ``heapq`` event loop in the same
process (:func:`experiments.bench.floor.bare_loop_rate`, events per CPU second), and each
run states its event loop's events and IMs per CPU second as shares of it
(``events_share``, ``ims_share``): the share is what the simulator's own work costs,
and it moves less with the shared machine's load than the rates do.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

import networkx as nx

from experiments.bench.floor import bare_loop_rate
from experiments.runs.resources import peak_rss_mib
from nodes.cores.interface import Action, Event, FromClient, Send
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.sim.links import LinkModel
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import stock_workload

DEGREE = 4  # of the random regular overlays; even, so any node count works
LINK = {"bw_mbps": 1000.0, "delay_ms": 1.0}  # gigabit links, 1 ms: the LBDD cluster's scale
TARGET_NODES, TARGET_MESSAGES, TARGET_S = 10_000, 100_000, 300.0
FANOUT = 20  # on demand: the random others each node may send to
ON_DEMAND_LINKS = LinkModel(latency_ms=1.0, nic_mbps=1000.0)


def _overlay(kind: str, n: int, seed: int) -> nx.Graph:
    if kind == "random_tree":
        g = nx.random_labeled_tree(n, seed=seed)
    else:
        g = nx.random_regular_graph(DEGREE, n, seed=seed)
    width = len(str(n - 1))
    g = nx.relabel_nodes(g, {i: f"b{i:0{width}d}" for i in g})
    nx.set_edge_attributes(g, {e: dict(LINK) for e in g.edges})
    return g


def _one(kind: str, n: int, messages: int, seed: int,
         floor: float | None = None) -> dict[str, Any]:
    """One overlay's run; with ``floor`` (events per CPU second of a bare heapq loop),
    its loop's rates per CPU second as shares of it."""
    t0 = time.perf_counter()
    overlay = _overlay(kind, n, seed)
    publications = math.ceil(messages / (n - 1))
    n_publishers = min(10, publications)
    n_subscribers = max(1, n // 10)
    t1 = time.perf_counter()
    workload = stock_workload(
        sorted(overlay.nodes),
        n_publishers=n_publishers,
        n_subscribers=n_subscribers,
        pubs_per_publisher=math.ceil(publications / n_publishers),
        publish_rate_hz=100.0,
        seed=seed,
    )
    t2, c2 = time.perf_counter(), time.process_time()
    # Set-up alone (links, spanning tree, cores) is the same run without client operations.
    simulate(overlay, replace(workload, ops=()), "flood",
             SimSettings(seed=seed, log_messages=False))
    t3, c3 = time.perf_counter(), time.process_time()
    result = simulate(overlay, workload, "flood", SimSettings(seed=seed, log_messages=False))
    t4, c4 = time.perf_counter(), time.process_time()
    ims = sum(result.ims_by_type.values())
    setup_s, total_s = t3 - t2, t4 - t3
    loop_s = max(total_s - setup_s, 1e-9)
    loop_cpu_s = max((c4 - c3) - (c3 - c2), 1e-9)
    shares = {} if floor is None else {
        "events_share": round(result.events / loop_cpu_s / floor, 4),
        "ims_share": round(ims / loop_cpu_s / floor, 4)}
    return {
        "overlay": kind,
        "nodes": n,
        "links": overlay.number_of_edges(),
        "publications": result.published,
        "subscribers": n_subscribers,
        "ims": ims,
        "events": result.events,
        "deliveries": sum(len(v) for v in result.deliveries.values()),
        "simulated_s": round(result.end_s, 6),
        "overlay_s": round(t1 - t0, 3),
        "workload_s": round(t2 - t1, 3),
        "setup_s": round(setup_s, 3),
        "simulate_s": round(total_s, 3),
        "events_per_s": round(result.events / loop_s),
        "ims_per_s": round(ims / loop_s),
        "loop_cpu_s": round(loop_cpu_s, 3),
        "us_per_im": round(1e6 * loop_cpu_s / max(ims, 1), 2),
        **shares,
    }


def run(
    node_counts: Sequence[int] = (1000, 10_000),
    messages: int = 100_000,
    seed: int = 0,
    overlays: Sequence[str] = ("random_tree", "random_regular"),
    on_demand: bool = True,
) -> dict[str, Any]:
    """Benchmark the simulator (see the module docstring).

    Per run: ``simulate_s`` is the whole :func:`nodes.sim.simulator.simulate` call, ``setup_s`` its
    set-up share (links, spanning tree, cores), and the rates are over the rest, the
    event loop. ``target_met`` says whether every run at 10,000 nodes or more carried at
    least 100,000 IMs within five minutes. With ``on_demand`` the result also has
    ``on_demand``: :func:`on_demand_compare` at the largest node count.
    """
    floor = bare_loop_rate()
    runs = [_one(kind, n, messages, seed, floor) for n in node_counts for kind in overlays]
    at_target = [
        r for r in runs if r["nodes"] >= TARGET_NODES and r["ims"] >= TARGET_MESSAGES
    ]
    out = {
        "core": "flood",
        "seed": seed,
        "floor_events_per_s": round(floor),
        "messages": messages,
        "runs": runs,
        "target": f"{TARGET_NODES} nodes, {TARGET_MESSAGES} IMs in under {TARGET_S:.0f} s",
        "target_met": bool(at_target) and all(r["simulate_s"] < TARGET_S for r in at_target),
    }
    if on_demand:
        out["on_demand"] = on_demand_compare(max(node_counts), messages, seed)
    return out


class Blast:
    """The on-demand benchmark's core: a client operation's payload ``to`` lists brokers,
    and each gets one small DATA message (one object, so it is encoded once); whatever
    arrives, and every link event, is ignored."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]):
        self.broker = broker
        self.neighbours = tuple(neighbours)

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if type(event) is not FromClient:
            return []
        msg = Message(MsgType.DATA, event.msg.msg_id, self.broker)
        return [Send(to, msg) for to in event.msg.payload["to"]]


def _on_demand_workload(n: int, messages: int, seed: int) -> tuple[nx.Graph, Workload]:
    """Nodes with FANOUT random others each; every node sends ``messages / n`` (rounded
    up) messages, to others drawn from its FANOUT, in one op in the first second."""
    rng = random.Random(f"{seed}/on-demand")
    width = len(str(n - 1))
    names = [f"b{i:0{width}d}" for i in range(n)]
    per_node = math.ceil(messages / n)
    fanout = min(FANOUT, n - 1)
    ops = []
    for i, b in enumerate(names):
        others = rng.sample(range(n - 1), fanout)  # indices of the others, skipping i
        peers = [names[j + (j >= i)] for j in others]
        to = [rng.choice(peers) for _ in range(per_node)]
        client = f"c{i:0{width}d}"
        ops.append(ClientOp(rng.random(), client, b,
                            Message(MsgType.DATA, 1, client, 0, {"to": to})))
    ops.sort(key=lambda op: op.t_s)
    g = nx.Graph()
    g.add_nodes_from(names)
    clients = {op.client: op.broker for op in ops}
    return g, Workload(Schema({}), clients, tuple(ops), {"seed": seed})


def _measure(kind: str, n: int, messages: int, seed: int) -> dict[str, Any]:
    """One run of the comparison, in the (fresh) process that calls it."""
    baseline = peak_rss_mib()
    if kind == "static":
        r = _one("random_regular", n, messages, seed)
        r["rate_per_s"] = r["ims_per_s"]
    else:
        g, w = _on_demand_workload(n, messages, seed)
        t0 = time.perf_counter()
        simulate(g, replace(w, ops=()), Blast,
                 SimSettings(seed=seed, log_messages=False, on_demand=ON_DEMAND_LINKS))
        t1 = time.perf_counter()
        res = simulate(g, w, Blast,
                       SimSettings(seed=seed, log_messages=False, on_demand=ON_DEMAND_LINKS))
        t2 = time.perf_counter()
        ims = sum(res.ims_by_type.values())
        loop_s = max((t2 - t1) - (t1 - t0), 1e-9)
        r = {"overlay": "on_demand", "nodes": n, "fanout": min(FANOUT, n - 1),
             "ims": ims, "links_opened": res.links_opened, "events": res.events,
             "setup_s": round(t1 - t0, 3), "simulate_s": round(t2 - t1, 3),
             "events_per_s": round(res.events / loop_s), "ims_per_s": round(ims / loop_s),
             "rate_per_s": round(ims / loop_s)}
    r["baseline_mib"] = round(baseline, 1)
    r["peak_mib"] = round(peak_rss_mib(), 1)
    return r


def _in_fresh_process(kind: str, n: int, messages: int, seed: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_measure, kind, n, messages, seed).result()


def on_demand_compare(n: int = TARGET_NODES, messages: int = TARGET_MESSAGES,
                      seed: int = 0) -> dict[str, Any]:
    """Links on demand beside the static overlay at ``n`` nodes and ``messages`` IMs
    (module docstring): each in a fresh process, with its peak memory."""
    static = _in_fresh_process("static", n, messages, seed)
    lazy = _in_fresh_process("on_demand", n, messages, seed)
    return {
        "nodes": n, "messages": messages, "fanout": lazy["fanout"],
        "memory": "VmHWM (peak RSS) of a fresh spawned process, MiB, interpreter included",
        "static": static, "on_demand": lazy,
        "ratio": round(static["rate_per_s"] / max(lazy["rate_per_s"], 1), 2),
        "memory_ratio": round(lazy["peak_mib"] / max(static["peak_mib"], 1e-9), 2),
    }


if __name__ == "__main__":
    print(json.dumps(run()))


def format_result(result: dict[str, Any]) -> str:
    """The benchmark as a table of simulated events and inter-broker messages per second."""
    lines = [f"{'overlay':15} {'nodes':>6} {'IMs':>8} {'events/s':>10} {'IMs/s':>10} "
             f"{'sim_s':>7} {'us/IM':>6} {'events':>7} {'IMs':>6}"]
    for r in result["runs"]:
        lines.append(f"{r['overlay']:15} {r['nodes']:6} {r['ims']:8} {r['events_per_s']:10} "
                     f"{r['ims_per_s']:10} {r['simulate_s']:7.2f} {r['us_per_im']:6.2f} "
                     f"{r['events_share']:7.1%} {r['ims_share']:6.1%}")
    lines.append(f"the last two: events and IMs per CPU second of the event loop as shares of "
                 f"a bare heapq loop's, {result['floor_events_per_s']} events/s in this run "
                 "(us/IM: microseconds of CPU per IM)")
    lines.append(f"target ({result['target']}): {'met' if result['target_met'] else 'NOT met'}")
    od = result.get("on_demand")
    if od:
        s, d = od["static"], od["on_demand"]
        lines += [
            f"links on demand, {od['nodes']} nodes, {od['fanout']} random others each, "
            f"{od['messages']} messages (each run in a fresh process; peak = {od['memory']}):",
            f"  static   flood on random_regular: {s['rate_per_s']:>9} IMs/s, "
            f"peak {s['peak_mib']:.0f} MiB (baseline {s['baseline_mib']:.0f})",
            f"  on demand blast core:             {d['rate_per_s']:>9} msgs/s, "
            f"peak {d['peak_mib']:.0f} MiB (baseline {d['baseline_mib']:.0f}), "
            f"{d['links_opened']} directed links opened",
            f"  static/on-demand: {od['ratio']}x the rate; on-demand/static: "
            f"{od['memory_ratio']}x the peak memory",
        ]
    return "\n".join(lines)
