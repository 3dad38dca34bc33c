"""How fast the discrete-event simulator runs: the ``pubsublab bench sim`` benchmark.

For each node count, two random overlays (a uniformly random labelled tree and a random
4-regular graph, both seeded) carry the stock workload with the flood core and per-message
logs off. "Messages" are inter-broker messages (IMs): flooding costs ``n - 1`` IMs per
publication, so a run gets ``ceil(messages / (n - 1))`` publications. The figures are
wall-clock rates on this machine: events/s (client operations, arrivals, timers) and
IMs/s of the event loop, with overlay building, workload generation and the simulator's
set-up timed apart.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import networkx as nx

from nodes.sim import simulate
from nodes.workloads.stock import stock_workload

DEGREE = 4  # of the random regular overlays; even, so any node count works
LINK = {"bw_mbps": 1000.0, "delay_ms": 1.0}  # gigabit links, 1 ms: the LBDD cluster's scale
TARGET_NODES, TARGET_MESSAGES, TARGET_S = 10_000, 100_000, 300.0


def _overlay(kind: str, n: int, seed: int) -> nx.Graph:
    if kind == "random_tree":
        g = nx.random_labeled_tree(n, seed=seed)
    else:
        g = nx.random_regular_graph(DEGREE, n, seed=seed)
    width = len(str(n - 1))
    g = nx.relabel_nodes(g, {i: f"b{i:0{width}d}" for i in g})
    nx.set_edge_attributes(g, {e: dict(LINK) for e in g.edges})
    return g


def _one(kind: str, n: int, messages: int, seed: int) -> dict[str, Any]:
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
    t2 = time.perf_counter()
    # Set-up alone (links, spanning tree, cores) is the same run without client operations.
    simulate(overlay, replace(workload, ops=()), "flood", seed=seed, log_messages=False)
    t3 = time.perf_counter()
    result = simulate(overlay, workload, "flood", seed=seed, log_messages=False)
    t4 = time.perf_counter()
    ims = sum(result.ims_by_type.values())
    setup_s, total_s = t3 - t2, t4 - t3
    loop_s = max(total_s - setup_s, 1e-9)
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
    }


def run(
    node_counts: Sequence[int] = (1000, 10_000),
    messages: int = 100_000,
    seed: int = 0,
    overlays: Sequence[str] = ("random_tree", "random_regular"),
) -> dict[str, Any]:
    """Benchmark the simulator (see the module docstring).

    Per run: ``simulate_s`` is the whole :func:`nodes.sim.simulate` call, ``setup_s`` its
    set-up share (links, spanning tree, cores), and the rates are over the rest, the
    event loop. ``target_met`` says whether every run at 10,000 nodes or more carried at
    least 100,000 IMs within five minutes.
    """
    runs = [_one(kind, n, messages, seed) for n in node_counts for kind in overlays]
    at_target = [
        r for r in runs if r["nodes"] >= TARGET_NODES and r["ims"] >= TARGET_MESSAGES
    ]
    return {
        "core": "flood",
        "seed": seed,
        "messages": messages,
        "runs": runs,
        "target": f"{TARGET_NODES} nodes, {TARGET_MESSAGES} IMs in under {TARGET_S:.0f} s",
        "target_met": bool(at_target) and all(r["simulate_s"] < TARGET_S for r in at_target),
    }


if __name__ == "__main__":
    print(json.dumps(run()))


def format_result(result: dict[str, Any]) -> str:
    """The benchmark as a table of simulated events and inter-broker messages per second."""
    lines = [f"{'overlay':15} {'nodes':>6} {'IMs':>8} {'events/s':>10} {'IMs/s':>10} {'sim_s':>7}"]
    for r in result["runs"]:
        lines.append(f"{r['overlay']:15} {r['nodes']:6} {r['ims']:8} {r['events_per_s']:10} "
                     f"{r['ims_per_s']:10} {r['simulate_s']:7.2f}")
    lines.append(f"target ({result['target']}): {'met' if result['target_met'] else 'NOT met'}")
    return "\n".join(lines)
