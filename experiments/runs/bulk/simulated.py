"""Bulk rounds in the simulator, and LBDD's simulated depth sweep."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.plan import RunPlan
from experiments.progress import log
from experiments.runs.bulk.rounds import (
    RECORD_KINDS,
    Observation,
    round_limit_s,
    round_summary,
    run_rounds,
)
from experiments.runs.manifest import base_manifest
from experiments.runs.resources import RunCost, cost_text
from nodes.cores import make_core, overlay_params
from nodes.cores.interface import Action, Deliver, Event, Record, Send
from nodes.cores.lbdd import lbdd_tree, tree_stats
from nodes.frames import frame_size
from nodes.messages import MsgType
from nodes.runfolder import new_run_dir, write_manifest, write_summary
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.bulk import GIB, BulkPlan, bulk_workload


class _Observer:
    """Collects what the simulated agents do (the simulator hosts them wrapped in
    :class:`_Observed`), on simulated time."""

    def __init__(self, clients: Mapping[str, str]) -> None:
        self.clients = clients
        self.obs_receipts: list[tuple[float, str, int]] = []
        self.data_sent: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.records: list[tuple[float, str, str, dict[str, Any]]] = []

    def note(self, broker: str, actions: list[Action], now_s: float) -> None:
        for a in actions:
            if isinstance(a, Deliver) and a.msg.type is MsgType.DATA:
                self.obs_receipts.append((now_s, self.clients[a.client],
                                          int(a.msg.payload["index"])))
            elif isinstance(a, Send) and a.msg.type is MsgType.DATA:
                self.data_sent[broker].append((now_s, frame_size(a.msg)))
            elif isinstance(a, Record) and a.kind in RECORD_KINDS:
                self.records.append((now_s, broker, a.kind, dict(a.fields)))


class _Observed:
    """A routing core whose actions an :class:`_Observer` sees."""

    def __init__(self, core: Any, observer: _Observer) -> None:
        self.broker = core.broker
        self.neighbours = core.neighbours
        self._core = core
        self._observer = observer

    def handle(self, event: Event, now_s: float) -> list[Action]:
        actions = self._core.handle(event, now_s)
        self._observer.note(self.broker, actions, now_s)
        return actions

    def counters(self) -> dict[str, int]:
        return self._core.counters()


def simulate_round(overlay: nx.Graph, plan: BulkPlan, algorithm: str,
                   params: Mapping[str, Any], subscribers: Sequence[str], *,
                   derived: Mapping[str, Mapping[str, Any]] | None = None,
                   kill_after_s: float | None = None) -> Observation:
    """One round in the simulator (the overlay's nodes carry ``ip`` and ``nic_mbps``);
    ``derived``: the per-broker params the core derives (default: derived here)."""
    workload = bulk_workload(plan, subscribers)
    observer = _Observer(workload.clients)
    if derived is None:
        derived = overlay_params(algorithm, overlay)

    def factory(broker: str, neighbours: Sequence[str], p: Mapping[str, Any]) -> _Observed:
        return _Observed(make_core(algorithm, broker, neighbours, p), observer)

    victim = plan.failure["victim"] if kill_after_s is not None and plan.failure else None
    kill_at = {victim: plan.start_s + kill_after_s} if victim else None
    nic = overlay.nodes[plan.publisher].get("nic_mbps")
    until_s = plan.start_s + round_limit_s(plan, len(subscribers), nic, params,
                                           victim is not None)
    result = simulate(overlay, workload, factory, SimSettings(
        seed=plan.seed, core_params=lambda b: {**derived[b], **params}, log_messages=False,
        kill_at=kill_at, until_s=until_s))
    return Observation(subscribers=tuple(subscribers), start_s=plan.start_s,
                       receipts=observer.obs_receipts, data_sent=dict(observer.data_sent),
                       ims_by_type=result.ims_by_type, records=observer.records,
                       counters=result.counters,
                       killed_s=None if kill_at is None else plan.start_s + kill_after_s)


def stream_capped(overlay: nx.Graph, stream_mbps: float | None) -> nx.Graph:
    """``overlay`` with every edge's rate at most ``stream_mbps`` (None: as it is): each
    edge is one agent-to-agent connection, and the NICs stay at their rate, so a capped
    stream leaves its NIC free for the others (NICs in docs/design/simulator.md)."""
    if stream_mbps is None:
        return overlay
    capped = nx.Graph(overlay)
    for _, _, data in capped.edges(data=True):
        bw = data.get("bw_mbps")
        data["bw_mbps"] = stream_mbps if bw is None else min(bw, stream_mbps)
    return capped


def _random_ips(n: int, rng: random.Random) -> list[str]:
    found: dict[str, None] = {}
    while len(found) < n:
        v = rng.getrandbits(32)
        found[".".join(str((v >> s) & 255) for s in (24, 16, 8, 0))] = None
    return list(found)


def depth_sweep(run_plan: RunPlan, nic_mbps: float | None, out_dir: Path) -> dict[str, Any]:
    """The simulated sweep of tree depth and out-degree (see the module docstring)."""
    rows = []
    spec, plan_params = run_plan.spec, run_plan.workload_params
    params = run_plan.algorithm("lbdd").params
    for n in plan_params["sweep_nodes"]:
        stats = []
        for trial in range(int(plan_params["trials"])):
            ips = _random_ips(n, random.Random(f"{spec.seed}:{n}:{trial}"))
            stats.append(tree_stats(ips[0], lbdd_tree(ips[0], ips[1:])))
        ips = _random_ips(n, random.Random(f"{spec.seed}:{n}:0"))
        names = [f"h{i:03d}" for i in range(n)]
        overlay = nx.complete_graph(names)
        for name, ip in zip(names, ips, strict=True):
            overlay.nodes[name].update(ip=ip, nic_mbps=nic_mbps)
        plan = BulkPlan(topic=str(plan_params["topic"]), data_bytes=max(
            int(plan_params["slice_kb"] * 1024), round(plan_params["data_gb"] * GIB * spec.scale)),
            slice_bytes=int(plan_params["slice_kb"] * 1024), seed=spec.seed,
            start_s=float(plan_params["start_s"]), publisher=names[0],
            others=tuple(names[1:]), counts=(n - 1,), failure=None,
            rate_bin_s=float(plan_params["rate_bin_s"]))
        obs = simulate_round(overlay, plan, "lbdd", params, names[1:])
        row, _ = round_summary(obs, plan, "lbdd", "simulated", spec.scale,
                               dict(zip(names, ips, strict=True)), nic_mbps)
        depths = [s["depth"] for s in stats]
        means = [s["mean_out_degree"] for s in stats]
        sweep_row = {
            "nodes": n, "trials": len(stats),
            "depth": {"min": min(depths), "mean": round(sum(depths) / len(depths), 3),
                      "max": max(depths)},
            "mean_out_degree": {"min": min(means), "mean": round(sum(means) / len(means), 4),
                                "max": max(means)},
            "source_out_degree_mean": round(sum(s["source_out_degree"] for s in stats)
                                            / len(stats), 3),
            "max_out_degree": max(s["max_out_degree"] for s in stats),
            "simulated": {k: row[k] for k in ("complete", "missing", "duplicates",
                                              "distribution_delay_s", "tree_as_computed")},
            "publisher_contribution": row["contribution"].get(names[0], 0.0),
            "max_subscriber_contribution": max((c for b, c in row["contribution"].items()
                                                if b != names[0]), default=0.0),
        }
        rows.append(sweep_row)
        log(f"sweep n={n}: depth {sweep_row['depth']}, mean out-degree "
            f"{sweep_row['mean_out_degree']['mean']}, simulated {sweep_row['simulated']}")
    per_node = ("contribution", "copies_sent", "counters", "rate_mbps", "tree", "tree_stats")
    top = {k: v for k, v in row.items() if k not in per_node}  # 500 nodes' maps: see rows
    top["sweep"] = rows
    (out_dir / "lbdd").mkdir(parents=True, exist_ok=True)
    write_summary(out_dir / "lbdd", top)
    return {"lbdd": top}


def run_bulk_simulation(run_plan: RunPlan, out_base: Path, *, label: str | None = None
                        ) -> tuple[Path, dict[str, dict[str, Any]]]:
    """``pubsublab sim`` for a bulk plan: the rounds in the simulator, or the depth sweep;
    the run folder is named ``label`` (default ``<spec>-sim``)."""
    cost = RunCost()
    run_dir = new_run_dir(out_base, label or f"{run_plan.name}-sim")
    manifest = {**base_manifest(run_plan, run_dir, "simulated"),
                "workload": dict(run_plan.workload_params)}
    overlay = run_plan.overlay
    names = list(overlay.nodes)
    if run_plan.bulk is None:  # the depth sweep (only lbdd: the plan checked)
        summaries = depth_sweep(run_plan, overlay.nodes[names[0]].get("nic_mbps"), run_dir)
    else:
        plan = run_plan.bulk
        nic = overlay.nodes[plan.publisher].get("nic_mbps")
        manifest["bulk"] = plan.describe()
        overlay = stream_capped(overlay, plan.stream_mbps)

        def round_fn(algorithm: str, subs: Sequence[str], _folder: Path,
                     kill_after_s: float | None) -> tuple[Observation, float | None]:
            alg = run_plan.algorithm(algorithm)
            obs = simulate_round(overlay, plan, algorithm, alg.params, subs,
                                 derived=alg.derived, kill_after_s=kill_after_s)
            return obs, nic

        ips = {b: overlay.nodes[b]["ip"] for b in names}
        summaries = run_rounds(run_plan, ips, "simulated", round_fn, run_dir)
    manifest["resources"] = cost.record()
    write_manifest(run_dir, manifest)
    log(cost_text(manifest["resources"]))
    return run_dir, summaries
