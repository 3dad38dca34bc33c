"""Kyra, Siena and the multicast groups on a real Mininet network (root): 16 servers
placed on a 400-router transit-stub underlay, every pair's latency added in the brokers,
links opened on demand. Each algorithm delivers exactly what the oracle expects, once,
and the same pairs as the simulator on the same plan; its summary has Kyra's metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.emulated import broker_phase
from experiments.runs.simulated import on_demand_links
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.metrics.log_summary import client_receipts
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries

pytestmark = pytest.mark.root

ALGORITHMS = ("kyra", "siena", "multicast")
SPEC = {
    "name": "kyra-16",
    "topology": {"name": "transit-stub",
                 "params": {"preset": "ts400", "n_servers": 16, "seed": 0}},
    "links": {"bw_mbps": 100},
    "seed": 2,
    "fidelity": {"links": 0},
    "capture": {"enabled": False},
    "workload": {"kind": "stock", "mode": "meghdoot", "n_publishers": 4,
                 "n_subscribers": 48, "pubs_per_publisher": 5, "phase_gap_s": 3,
                 "calibration_seed": 101},
    "routing": {"algorithms": list(ALGORITHMS), "links": "on-demand",
                "params": {"kyra": {"max_distance_ms": 30}, "multicast": {"groups": 4}}},
}


def _pairs(deliveries: dict) -> list:
    return sorted((key, sub) for key, subs in deliveries.items() for sub in subs)


def test_three_routings_on_16_servers_in_mininet_agree_with_oracle_and_simulator(
        tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    workload = plan.workload
    assert workload is not None
    expected = _pairs(expected_deliveries(workload))
    assert len(expected) > 40, "the workload should exercise many deliveries"
    for name in ALGORITHMS:
        alg = plan.algorithm(name)
        simulated = simulate(plan.overlay, workload, name,
                             SimSettings(core_params=dict(alg.params), derived=alg.derived,
                                         seed=plan.spec.seed, on_demand=on_demand_links(plan),
                                         log_messages=False))
        assert _pairs(simulated.deliveries) == expected, name

    run_dir, _ = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    for name in ALGORITHMS:
        out = run_dir / name
        assert _pairs(client_receipts(out, workload)["deliveries"]) == expected, name
        summary = json.loads((out / "summary.json").read_text())
        assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
        load = summary["routing_load"]
        assert load["servers"] == 16 and load["events"] == summary["published"] == 20
        # Messages crossed the underlay: their latency is what the plan says.
        assert load["per_event"]["net_ms"] > 0
