"""The run plan: one derivation of what both runtimes run, every error before anything starts.

Each test here failed on the code before the plan existed (the defects of the run-plan
issue): runtimes that disagreed in switch mode, mis-merged params, unknown params accepted,
unsuitable algorithms found after Mininet was built, W not settable, validated fields
ignored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments.plan import RunPlan, compile_plan
from experiments.runs.brokers import broker_configs
from experiments.spec import SpecError, load_spec, parse_spec
from nodes.logs import iter_jsonl
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload

REPO = Path(__file__).resolve().parent.parent


def _spec(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "topology": {"name": "scot", "params": {"tree": "a-b", "m": 2,
                                                                "mode": "switch"}},
            "links": {"bw_mbps": 10, "delay_ms": 5, "loss_pct": 1}, **extra}


def _plan(data: dict[str, Any], netem: bool = False) -> RunPlan:
    return compile_plan(parse_spec(data), netem=netem)


# ---- defect 1: one meaning of a switch-mode overlay edge, in both runtimes ----------------


def test_switch_mode_edge_is_the_path_through_the_switch() -> None:
    """a0 - s - a1: two access links of 5 ms and 1 % each, so 10 ms and 1.99 %; the rate
    is the slower link's, and each broker's NIC is its access link."""
    plan = _plan(_spec())
    e = plan.edge("a0", "a1")
    assert (e.bw_mbps, e.delay_ms, e.loss_pct) == (10, 10.0, 1.99)
    assert len(e.links) == 2 and e.mechanism["delay_ms"] == "in-broker"
    assert plan.overlay.nodes["a0"]["nic_mbps"] == 10


@pytest.mark.parametrize("mode", ["switch", "overlay"])
def test_emulated_configs_and_simulator_use_the_plans_figures(mode: str,
                                                              tmp_path: Path) -> None:
    data = _spec(routing={"algorithms": ["flood"]})
    data["topology"]["params"]["mode"] = mode
    data["links"]["loss_pct"] = 0  # lossless, so every hop below is measured
    plan = _plan(data)
    configs = broker_configs(plan, "flood", emulate_link=True, log_dir=tmp_path)
    for e in plan.edges:
        for a, b in ((e.a, e.b), (e.b, e.a)):
            nb = configs[a]["neighbours"][b]
            assert (nb["delay_ms"], nb["loss_pct"]) == (e.delay_ms, e.loss_pct)
        sim_edge = plan.overlay.edges[e.a, e.b]
        assert (sim_edge["bw_mbps"], sim_edge["delay_ms"], sim_edge["loss_pct"]) == (
            e.bw_mbps, e.delay_ms, e.loss_pct)
    # The simulator really carries those figures: a publication's first hop arrives one
    # edge delay (plus its serialisation) after it left.
    pub = Message(MsgType.PUBLISH, 1, "c", 0, {"attrs": {"x": 1}})
    simulate(plan.overlay, Workload(Schema({}), {"c": "a0"}, (ClientOp(0.0, "c", "a0", pub),),
                                    {}), "flood",
             SimSettings(seed=1, out_dir=tmp_path / "sim",
                         derived=plan.algorithm("flood").derived))
    sent = next(iter_jsonl(tmp_path / "sim" / "a0.jsonl", "send"))
    got = next(r for r in iter_jsonl(tmp_path / "sim" / f"{sent['link']}.jsonl", "recv")
               if r["link"] == "a0")
    hop_ms = (got["t_mono"] - sent["t_mono"]) * 1000
    edge = plan.edge("a0", sent["link"])
    assert edge.delay_ms <= hop_ms < edge.delay_ms + 1.0


# ---- defects 2 and 3: params merged right, declared, checked --------------------------------


def test_shared_and_per_algorithm_params_merge() -> None:
    data = _spec(routing={"algorithms": ["idr", "tid-dynamic"],
                          "params": {"theta": 5, "idr": {"ce_min": 2.0}}})
    data["topology"]["params"]["mode"] = "overlay"
    plan = _plan(data)
    assert plan.algorithm("idr").params == {"theta": 5, "ce_min": 2.0}
    assert plan.algorithm("tid-dynamic").params == {"theta": 5, "ce_min": 1.0,
                                                    "max_reroutes": 2, "max_trees": 3}
    # Derived SCOT params reach idr's brokers, and a spec cannot set them.
    assert set(plan.algorithm("idr").broker_params("a0")) >= {"cluster", "primary", "theta"}


@pytest.mark.parametrize(("params", "fragment"), [
    ({"thta": 5}, "no algorithm of this spec has a param 'thta'; allowed: ce_min, idr, theta"),
    ({"idr": {"thta": 5}}, "idr has no param(s) thta; allowed: theta, ce_min"),
    ({"theta": "ten"}, "routing.params.idr.theta: bad value 'ten'; allowed: int >= 0"),
    ({"theta": -5}, "routing.params.idr.theta: bad value -5"),
    ({"theta": True}, "routing.params.idr.theta: bad value True"),
    ({"idr": {"cluster": 1}}, "idr has no param(s) cluster"),
    ({"snr": {"theta": 1}}, "routing.params.snr: snr is not among routing.algorithms"),
])
def test_unknown_or_bad_params_are_refused(params: dict[str, Any], fragment: str) -> None:
    data = _spec(routing={"algorithms": ["idr"], "params": params})
    data["topology"]["params"]["mode"] = "overlay"
    with pytest.raises(SpecError) as err:
        _plan(data)
    assert fragment in str(err.value) and "\n" not in str(err.value)


# ---- defect 4: unknown or unsuitable algorithms fail first, in one line ----------------------


@pytest.mark.parametrize(("override", "fragment"), [
    ("routing.algorithms=[nope]", "routing.algorithms: bad value 'nope'; allowed:"),
    ("routing.algorithms=[snr, snr]", "twice"),
    ("routing.algorithms=[lbdd]", "lbdd does not run a stock workload"),
])
def test_run_refuses_bad_algorithms_before_anything_starts(tmp_path: Path, override: str,
                                                           fragment: str) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "run", "demo", "--set",
                          override, "--out", str(tmp_path / "runs")], capture_output=True,
                         text=True, cwd=REPO, check=False, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "runs").exists()  # no run folder: nothing started


def test_snr_on_a_non_scot_topology_is_refused_by_the_plan() -> None:
    spec = load_spec("flood-demo", ["topology.name=gigabit-cluster", "topology.params={}",
                                    "routing.algorithms=[snr]"])
    with pytest.raises(SpecError, match="snr cannot run on topology 'gigabit-cluster'"):
        compile_plan(spec)


# ---- defect 5: the statistics window W comes from the spec, in both runtimes ---------------


def test_window_reaches_brokers_and_simulator(tmp_path: Path) -> None:
    spec = load_spec("demo", ["routing.window_ms=20", "routing.algorithms=[idr]"])
    plan = compile_plan(spec)
    assert plan.window_ms == 20.0
    assert {c["window_ms"] for c in broker_configs(plan, "idr", emulate_link=True,
                                                   log_dir=tmp_path).values()} == {20.0}
    from experiments.runs.simulated import run_simulation

    run_dir, _ = run_simulation(plan, tmp_path)
    windows = {r["window_ms"] for r in iter_jsonl(run_dir / "idr" / "b0.jsonl", "queue")}
    assert windows == {20.0}


# ---- defect 6: validated fields are applied or refused --------------------------------------


def test_duration_bounds_the_phase_or_is_refused(tmp_path: Path) -> None:
    plan = compile_plan(load_spec("flood-demo"))
    last = max(op.t_s for op in plan.workload.ops)
    assert plan.phase_s() == pytest.approx(last + 2.0)
    with pytest.raises(SpecError, match=r"duration_s: bad value 1.0; allowed: at least"):
        compile_plan(load_spec("flood-demo", ["duration_s=1.0"]))
    longer = compile_plan(load_spec("flood-demo", [f"duration_s={last + 10}"]))
    assert longer.phase_s() == last + 10


@pytest.mark.parametrize(("override", "field"), [
    ("duration_s=100", "duration_s"),
    ("link_schedule=[{at_s: 1, a: pc1, b: pc2, bw_mbps: 5}]", "link_schedule"),
    ("capture.enabled=true", "capture.enabled"),
])
def test_bulk_refuses_what_it_cannot_apply(override: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        compile_plan(load_spec("lbdd-gigabit", [override]))
    msg = str(err.value)
    assert "\n" not in msg and (msg.startswith(field) or msg.startswith("link_schedule"))


def test_capture_is_automatic_and_bulk_applies_the_write_buffer(tmp_path: Path) -> None:
    assert compile_plan(load_spec("flood-demo")).capture.enabled is True
    bulk = compile_plan(load_spec("lbdd-gigabit", ["broker.write_buffer_bytes=4096"]))
    assert bulk.capture.enabled is False
    configs = broker_configs(bulk, "lbdd", emulate_link=False, log_dir=tmp_path)
    assert {c["write_buffer_bytes"] for c in configs.values()} == {4096}


# ---- the plan command -------------------------------------------------------------------------


def test_plan_command_prints_the_plan_without_root_or_runs(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "plan", "demo", "--json"],
                         capture_output=True, text=True, cwd=tmp_path, check=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    plan = json.loads(res.stdout.strip().splitlines()[-1])
    assert plan["algorithms"]["idr"]["params"] == {"theta": 10, "ce_min": 1.0}
    assert plan["window_ms"] == 50.0 and len(plan["overlay"]["edges"]) == 15
    edge = plan["overlay"]["edges"][0]
    assert set(edge) >= {"a", "b", "bw_mbps", "delay_ms", "loss_pct", "mechanism"}
    assert list(tmp_path.iterdir()) == []  # nothing written
    text = subprocess.run([sys.executable, "-m", "experiments.cli", "plan", "demo"],
                          capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "algorithm idr: theta=10, ce_min=1.0" in text and "a0-a1" in text
