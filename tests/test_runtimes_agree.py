"""The reference core in both runtimes: exactly the oracle's deliveries, once each, and
the simulator and a real 9-broker Mininet network agree on who got what. Also: a broker
killed mid-run is noticed by its neighbours, who keep running, and teardown is clean."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from scot_cases import AGREE_SPEC, pairs

from experiments.emulation.doctor import probe
from experiments.emulation.leftovers import STATE_DIR, root_interfaces
from experiments.emulation.network import Emulation
from experiments.plan import compile_plan
from experiments.runs.brokers import BrokerRun, broker_configs
from experiments.runs.emulated import broker_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.metrics.log_summary import client_receipts
from nodes.sim.result import summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries

pytestmark = pytest.mark.root

SPEC = {**AGREE_SPEC, "routing": {"algorithms": ["flood"]}}


def test_flood_delivers_the_oracle_set_in_both_runtimes(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    workload = plan.workload
    assert workload is not None
    expected = sorted((k, s) for k, subs in expected_deliveries(workload).items() for s in subs)
    assert len(expected) > 50, "the workload should exercise many deliveries"

    flood = plan.algorithm("flood")
    sim = simulate(plan.overlay, workload, "flood",
                   SimSettings(core_params=dict(flood.params), derived=flood.derived,
                               seed=plan.spec.seed, window_ms=plan.window_ms,
                               until_s=plan.duration_s))
    sim_pairs = pairs(sim.deliveries)

    run_dir, manifest = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    emu_pairs = pairs(client_receipts(run_dir / "flood", workload)["deliveries"])

    assert sim_pairs == expected  # exactly the oracle's set, each once (a list, not a set)
    assert emu_pairs == expected
    assert sim_pairs == emu_pairs
    summary = json.loads((run_dir / "flood" / "summary.json").read_text())
    assert summary["missing"] == 0 and summary["duplicates"] == 0
    # Flooding over a spanning tree of 9 brokers: 8 inter-broker copies per publication.
    assert summary["ims_by_type"]["PUBLISH"] == 8 * summary["published"]
    assert manifest["summaries"]["flood"]["delivered"] == len(expected)
    sim_summary = summarize(sim, expected_deliveries(workload))
    assert summary["prt_size"] == sim_summary["prt_size"]
    assert summary["ims_by_type"] == sim_summary["ims_by_type"]


def test_killed_broker_is_noticed_and_teardown_is_clean(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    graph = plan.graph
    emu = Emulation(graph, switch="bridge", probe=probe(), log=lambda _m: None)
    try:
        emu.start()
        run = BrokerRun(emu, tmp_path)
        run.start_brokers(broker_configs(plan, "flood", emulate_link=True, log_dir=tmp_path))
        run.wait_links_up(30)
        victim = "b1"
        os.kill(run.brokers[victim].pid, signal.SIGKILL)
        neighbours = sorted(graph.neighbors(victim))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            statuses = {n: run.status(n) for n in neighbours}
            if all(s and victim in s["missing"] for s in statuses.values()):
                break
            time.sleep(0.1)
        for n in neighbours:
            assert victim in run.status(n)["missing"], n
            assert run.brokers[n].poll() is None, f"{n} died with its neighbour"
            downs = [json.loads(x) for x in (tmp_path / f"{n}.jsonl").read_text().splitlines()
                     if '"ev":"link"' in x and '"down"' in x]
            assert any(r.get("link", r.get("peer")) == victim for r in downs), n
        codes = run.stop_brokers()
        assert all(code == 0 for b, code in codes.items() if b != victim), codes
    finally:
        emu.stop()
    assert not [i for i in root_interfaces() if i.split("-", 1)[0] in graph.nodes]
    assert not list(STATE_DIR.glob("*.json"))
