"""CoDD on a real Mininet network (root): 16 node processes on one switch, links opened
on demand, the tree built by joins, changed by leaves and reorganization moves while
documents flow. Each node receives exactly the documents the oracle expects, once; the
simulator on the same plan delivers the same pairs; and the nodes' final records agree
with the tree's invariants (one parent each, every consumer that stayed attached).
Then with node processes killed mid-stream (heartbeats on): every survivor still gets
exactly its documents, once, its orphaned subtree re-joined, as in the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from experiments.plan import RunPlan, compile_plan
from experiments.runs.emulated import broker_phase
from experiments.runs.simulated import on_demand_links
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.logs import Ev, iter_jsonl
from nodes.metrics.log_summary import client_receipts
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries

pytestmark = pytest.mark.root

SPEC = {
    "name": "codd-16",
    "topology": {"name": "peers", "params": {"n": 16}},
    "links": {"bw_mbps": 100, "delay_ms": 1},
    "seed": 3,
    "fidelity": {"links": 0},
    "capture": {"enabled": False},
    "workload": {"kind": "codd", "n_documents": 300, "k": 5, "c": 1, "cf": 50,
                 "leave_fraction": 0.25, "step_s": 0.1},
    "routing": {"algorithms": ["codd"], "links": "on-demand",
                "params": {"fanout": 2, "timeout_docs": 20}},
}


def _pairs(deliveries: dict) -> list:
    return sorted((key, sub) for key, subs in deliveries.items() for sub in subs)


def _simulated(plan: RunPlan) -> SimResult:
    """CoDD-R on the plan's workload in the simulator (the Mininet run's twin)."""
    alg = plan.algorithm("codd")
    overlay = nx.Graph()
    overlay.add_nodes_from(plan.overlay.nodes)
    return simulate(overlay, plan.workload, "codd",
                    SimSettings(core_params=dict(alg.params), derived=alg.derived,
                                seed=plan.spec.seed, until_s=plan.phase_s(),
                                on_demand=on_demand_links(plan), log_messages=False))


def _parents(plan: RunPlan, out: Path) -> dict[str, str]:
    """Each consumer's parent, from its final ``codd_node`` record."""
    return {b: r["parent"] for b in plan.overlay.nodes
            for r in iter_jsonl(out / f"{b}.jsonl", Ev.RECORD) if r.get("kind") == "codd_node"}


def test_codd_on_16_nodes_in_mininet_agrees_with_the_oracle_and_the_simulator(
        tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    workload = plan.workload
    assert workload is not None and len(workload.meta["leaves_s"]) >= 3
    expected = _pairs(expected_deliveries(workload))
    assert len(expected) > 300, "the workload should exercise many deliveries"

    simulated = _simulated(plan)
    assert _pairs(simulated.deliveries) == expected

    run_dir, _ = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    out = run_dir / "codd"
    got = _pairs(client_receipts(out, workload)["deliveries"])
    assert got == expected  # each pair once: lists, not sets
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    m = summary["codd"]
    assert m["nodes"] == 15 and m["reorganization"]["moves"] > 0  # the tree did change
    assert summary["ims_by_type"]["TREE"] > 0

    # Every consumer that did not leave names a parent that is the root or another
    # consumer that did not leave: the tree the records describe is whole.
    left = set(workload.meta["leaves_s"])
    parents = _parents(plan, out)
    stayed = {b for b in parents if b not in left}
    root = workload.meta["root"]
    assert all(parents[b] == root or parents[b] in stayed for b in stayed)


FAILURES = {**SPEC, "name": "codd-16-failures",
            "workload": {**SPEC["workload"], "crash_fraction": 0.15, "leave_fraction": 0.2},
            "routing": {**SPEC["routing"], "params": {**SPEC["routing"]["params"],
                                                      "heartbeat_s": 0.5}}}


def test_codd_survivors_of_killed_nodes_in_mininet_get_exactly_their_documents(
        tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(FAILURES))
    workload = plan.workload
    assert workload is not None
    crashed = {f"q-{x}" for x in workload.meta["crashes_s"]}
    assert len(crashed) == 2

    def survivors(deliveries: dict) -> list:
        return [(k, sub) for k, sub in _pairs(deliveries) if sub not in crashed]

    expected = survivors(expected_deliveries(workload))
    simulated = _simulated(plan)
    assert survivors(simulated.deliveries) == expected

    run_dir, _ = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    out = run_dir / "codd"
    got = client_receipts(out, workload)["deliveries"]
    assert survivors(got) == expected  # each pair once: lists, not sets
    want = expected_deliveries(workload)
    assert all(set(subs) <= want.get(k, set()) for k, subs in got.items())  # none extra
    summary = json.loads((out / "summary.json").read_text())
    assert summary["codd"]["reorganization"]["rejoins"] > 0  # orphans did re-join
    parents = _parents(plan, out)
    gone = set(workload.meta["leaves_s"]) | set(workload.meta["crashes_s"])
    stayed = {b for b in parents if b not in gone}
    root = workload.meta["root"]
    assert stayed and all(parents[b] == root or parents[b] in stayed for b in stayed)
