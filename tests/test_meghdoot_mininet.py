"""Meghdoot on a real Mininet network (root): 16 peer processes on one switch, links
opened on demand, the CAN built by joins while subscriptions and events flow. Every
matching subscriber gets each event exactly once (the oracle), the simulator on the same
plan delivers the same pairs, and the peers' final zones tile the space. Then with peers
crashing (processes killed) and leaving mid-stream, mirrors on: every member still gets
exactly its events, once, as in the simulator, the survivors' zones tile the space and
the summary counts the repairs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from experiments.plan import RunPlan, compile_plan
from experiments.runs.emulated import broker_phase
from experiments.runs.simulated import on_demand_links
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.cores import can
from nodes.logs import Ev, iter_jsonl
from nodes.metrics.log_summary import client_receipts
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries

pytestmark = pytest.mark.root

SPEC = {
    "name": "meghdoot-16",
    "topology": {"name": "peers", "params": {"n": 16}},
    "links": {"bw_mbps": 100, "delay_ms": 1},
    "seed": 3,
    "fidelity": {"links": 0},
    "capture": {"enabled": False},
    "workload": {"kind": "meghdoot", "n_subscriptions": 200, "n_events": 150,
                 "join_probability": 0.2, "step_s": 0.1},
    "routing": {"algorithms": ["meghdoot"], "links": "on-demand",
                "params": {"load_period_s": 1.0, "bucket_s": 0.1}},
}


def _pairs(deliveries: dict) -> list:
    return sorted((key, sub) for key, subs in deliveries.items() for sub in subs)


def _run_against_oracle_and_simulator(plan: RunPlan, tmp_path: Path
                                      ) -> tuple[Path, Path, dict[str, Any], dict[str, Any]]:
    """The plan's 16-peer workload: the oracle's pairs, the same from the simulator, then
    from Mininet, each pair once, nothing missing or unexpected; the run folder, the
    algorithm's folder, the summary's meghdoot block and the simulator's final zones."""
    workload = plan.workload
    assert workload is not None and workload.meta["n_peers"] == 16
    expected = _pairs(expected_deliveries(workload))
    assert len(expected) > 100, "the workload should exercise many deliveries"
    alg = plan.algorithm("meghdoot")
    overlay = nx.Graph()
    overlay.add_nodes_from(plan.overlay.nodes)
    simulated = simulate(overlay, workload, "meghdoot",
                         SimSettings(core_params=dict(alg.params), derived=alg.derived,
                                     seed=plan.spec.seed, until_s=plan.phase_s(),
                                     on_demand=on_demand_links(plan), log_messages=False))
    assert _pairs(simulated.deliveries) == expected
    run_dir, _ = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    out = run_dir / "meghdoot"
    got = _pairs(client_receipts(out, workload)["deliveries"])
    assert got == expected  # each pair once: lists, not sets
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    return run_dir, out, summary["meghdoot"], _final_zones(simulated.final.items())


def test_meghdoot_on_16_peers_in_mininet_agrees_with_the_oracle_and_the_simulator(
        tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    run_dir, out, m, simulated_zones = _run_against_oracle_and_simulator(plan, tmp_path)
    assert m["zones"]["peers"] == 16 and m["zones"]["group_mismatches"] == 0
    # One CAN in both runtimes: every join taken in by the same peer, split or replicated
    # alike, so each peer ends with the simulator's zone and co-replicas.
    assert _logged_zones(plan, out) == simulated_zones
    assert m["contacted"]["no_contact"] == 0 and m["contacted"]["events"] == 150

    _assert_final_zones_tile(plan, out)
    assert (run_dir / "fig-meghdoot-contacted.png").stat().st_size > 0


def _final_zones(finals: Iterable[tuple[str, Iterable[tuple[str, dict[str, Any]]]]]
                 ) -> dict[str, Any]:
    """Peer -> (zone, co-replicas) of its ``can_peer`` record, from each peer's final
    records."""
    return {b: (r["zone"], r["group"]) for b, records in finals for kind, r in records
            if kind == "can_peer"}


def _logged_zones(plan: RunPlan, out: Path) -> dict[str, Any]:
    return _final_zones((b, ((r["kind"], r) for r in iter_jsonl(out / f"{b}.jsonl", Ev.RECORD)
                             if "kind" in r)) for b in plan.overlay.nodes)


def _assert_final_zones_tile(plan: RunPlan, out: Path) -> None:
    """The final zones the peers logged tile the space: volumes sum to one and no two
    distinct zones share an interior point."""
    zones = {can.zone_from_json(zone) for zone, _ in _logged_zones(plan, out).values()}
    assert sum(can.volume(z) for z in zones) == pytest.approx(1.0)
    for a in zones:
        for b in zones:
            assert a == b or any(ah <= bl or bh <= al for al, ah, bl, bh
                                 in zip(a[0], a[1], b[0], b[1], strict=True))


CHURN = {**SPEC, "name": "meghdoot-16-churn",
         "workload": {**SPEC["workload"], "crash_fraction": 0.15, "leave_fraction": 0.15},
         "routing": {**SPEC["routing"], "params": {**SPEC["routing"]["params"],
                                                   "mirrors": True}}}


def test_meghdoot_members_of_16_mininet_peers_some_killed_some_leaving_get_their_events(
        tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(CHURN))
    assert plan.workload is not None
    assert (len(plan.workload.meta["crashes_s"]), len(plan.workload.meta["leaves_s"])) == (2, 2)
    _, out, m, _ = _run_against_oracle_and_simulator(plan, tmp_path)
    assert m["zones"]["peers"] == 12 and m["tables"]["inexact_peers"] == 0
    repairs = m["repairs"]
    assert (repairs["crashes"], repairs["leaves"], repairs["left"]) == (2, 2, 2)
    assert repairs["declared_down"] >= 2 and repairs["orphaned"] == 0
    _assert_final_zones_tile(plan, out)
