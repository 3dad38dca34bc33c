"""How fast Meghdoot simulates: the ``pubsublab bench meghdoot`` benchmark.

The shipped ``meghdoot-peers`` spec (uniform events; the stream of subscriptions, events
and joins its header states) at a fixed peer bound, simulated without logs up to a share
of its client operations (joins included) counted from its first join: the part of the
stream where the peers join and their tables grow is what makes a 10,000-peer run slow,
and the subscriptions the spec stores before the first join fill the first peer alone.
Per point: wall seconds of the simulation (the plan, workload and oracle built
beforehand are not timed), milliseconds per client operation, inter-broker messages
(IMs) and their rate, the deliveries, and the peak memory of the process that ran it
(each point in a fresh process, as ``pubsublab bench sim`` does: ``VmHWM``, the
interpreter and imports included), also as bytes over the process's baseline per
delivery. The cost per operation grows with the peer count and along the stream, so
compare figures of one peer count and share only; the machine's other load shows in
them too. So each point also states its CPU time: microseconds of this process's CPU
per IM, IMs per CPU second, and the simulator's events per CPU second as a share of a
bare ``heapq`` loop's (:func:`experiments.bench.floor.bare_loop_rate`), measured in the
same process just before the point, which the machine's load moves much as it moves
the point.

The default points are 1,000 and 3,000 peers at 30 % of the stream; ``peer_counts``
and ``share`` choose others (``pubsublab bench meghdoot --peers 10000 --share 0.01``: a
10,000-peer point, the first 1 % of its operations from the first join, the figure the
paper's own scale is measured against; a whole 10,000-peer stream takes hours).

Each point runs twice, side by side: with the core's load reports by zone (the default:
a replicated zone's first peer reports for the group) and by peer (every peer to every
neighbour peer, our first reading); the table ends with the ratios of the two, per
peer count.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from experiments.runs.resources import peak_rss_mib

SPEC = "meghdoot-peers"


READINGS = ("zone", "peer")  # the core's load_reports, ours first


def _measure(peers: int, share: float, load_reports: str, allow_large: bool = False
             ) -> dict[str, Any]:
    """One point, in the (fresh) process that calls it."""
    from experiments.bench.floor import bare_loop_rate
    from experiments.plan import compile_plan
    from experiments.runs.simulated import sim_settings
    from experiments.spec import load_spec
    from nodes.messages import MsgType
    from nodes.sim.simulator import simulate

    baseline = peak_rss_mib()
    floor = bare_loop_rate()
    plan = compile_plan(load_spec(SPEC, [f"topology.params.n={peers}",
                                         f"routing.params.load_reports={load_reports}"]),
                        netem=False, allow_large=allow_large)
    ops = plan.workload.ops
    head = next((i for i, op in enumerate(ops) if op.msg.type is MsgType.JOIN), 0)
    n_ops = max(1, min(len(ops), head + round((len(ops) - head) * share)))
    # Every op up to this one's time (ties included); the whole stream as `pubsublab sim`
    # runs it, to the end of its phase (its load timers never stop by themselves).
    until_s = plan.phase_s() if n_ops == len(ops) else ops[n_ops - 1].t_s
    alg = plan.algorithms[0]
    t0, cpu0 = time.perf_counter(), time.process_time()

    def progress(x: float) -> None:
        print(f"[bench meghdoot] {peers} peers, {load_reports} reports: {x:.1%} of all "
              f"operations after "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    # As `pubsublab sim --no-logs` runs it (the spec has no rate changes or processing).
    result = simulate(plan.overlay, plan.workload, alg.name,
                      sim_settings(plan, alg, until_s=until_s, progress=progress))
    wall_s = time.perf_counter() - t0
    cpu_s = max(time.process_time() - cpu0, 1e-9)
    done = sum(1 for op in ops if op.t_s <= until_s)
    ims = sum(result.ims_by_type.values())
    return {"peers": peers, "load_reports": load_reports, "share": share,
            "operations": done, "of_operations": len(ops), "first_join": head,
            "wall_s": round(wall_s, 2), "ms_per_operation": round(1000 * wall_s / done, 3),
            "ims": ims, "ims_per_s": round(ims / wall_s),
            "cpu_s": round(cpu_s, 2), "us_per_im": round(1e6 * cpu_s / max(ims, 1), 2),
            "ims_per_cpu_s": round(ims / cpu_s), "events": result.events,
            "events_per_cpu_s": round(result.events / cpu_s),
            "floor_events_per_s": round(floor),
            "floor_share": round(result.events / cpu_s / floor, 4),
            "deliveries": result.deliveries.total(),
            "baseline_mib": round(baseline, 1), "peak_mib": round(peak_rss_mib(), 1)}


def run(peer_counts: Sequence[int] = (1000, 3000), share: float = 0.3,
        readings: Sequence[str] = READINGS, allow_large: bool = False) -> dict[str, Any]:
    """Each peer count's point with each reading of load reports (module docstring),
    each in a fresh process; ``ratios``: per peer count, by peer over by zone (with
    both readings)."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    ctx = multiprocessing.get_context("spawn")
    points = []
    for peers in peer_counts:
        for reading in readings:
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
                points.append(pool.submit(_measure, peers, share, reading,
                                          allow_large).result())
    by = {(p["peers"], p["load_reports"]): p for p in points}
    ratios = [{"peers": n, **{k: round(by[n, "peer"][k] / by[n, "zone"][k], 2)
                              for k in ("wall_s", "ims", "peak_mib")}}
              for n in peer_counts if (n, "peer") in by and (n, "zone") in by]
    return {"spec": SPEC, "events": "uniform", "share": share, "points": points,
            "ratios": ratios,
            "memory": "VmHWM (peak RSS) of a fresh spawned process, MiB, interpreter "
                      "included"}


def _bytes_per_delivery(point: dict[str, Any]) -> float:
    """A point's peak memory over its baseline, in bytes per delivery (0 deliveries: its
    whole peak over baseline)."""
    return (point["peak_mib"] - point["baseline_mib"]) * 2**20 / max(point["deliveries"], 1)


def format_result(result: dict[str, Any]) -> str:
    """The benchmark as a table: time per operation at each peer count and reading, then
    how much more each costs with every peer reporting."""
    lines = [f"{result['spec']}, the first {result['share']:.0%} of its operations from its "
             "first join "
             f"(peak = {result['memory']}):",
             f"{'peers':>6} {'reports':>7} {'ops':>6} {'wall_s':>8} {'ms/op':>8} {'IMs':>9} "
             f"{'IMs/s':>8} {'cpu_s':>8} {'us/IM':>6} {'IMs/cpu_s':>9} {'delivered':>10} "
             f"{'floor':>6} {'peak MiB':>9}"]
    for p in result["points"]:
        lines.append(f"{p['peers']:6} {p['load_reports']:>7} {p['operations']:6} "
                     f"{p['wall_s']:8.1f} {p['ms_per_operation']:8.2f} {p['ims']:9} "
                     f"{p['ims_per_s']:8} {p['cpu_s']:8.1f} {p['us_per_im']:6.1f} "
                     f"{p['ims_per_cpu_s']:9} {p['deliveries']:10} {p['floor_share']:6.1%} "
                     f"{p['peak_mib']:9.0f}")
    lines.append("us/IM: microseconds of CPU per inter-broker message; floor: the "
                 "simulator's events per CPU second as a share of a bare heapq loop's, "
                 "measured in the same process (" + ", ".join(
                     f"{p['floor_events_per_s']}" for p in result["points"]) + " events/s)")
    lines.append("peak over the process's baseline per delivery (the plan and the cores' tables "
                 "included): " + ", ".join(
                     f"{_bytes_per_delivery(p):.0f} B" for p in result["points"]))
    if result["ratios"]:
        lines.append("load reports by peer over by zone (wall, IMs, peak):")
    for r in result["ratios"]:
        lines.append(f"{r['peers']:6} peers: {r['wall_s']:.2f}x wall, {r['ims']:.2f}x IMs, "
                     f"{r['peak_mib']:.2f}x peak")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(run()))
