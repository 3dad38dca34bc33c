"""Faults on a real Mininet network are recorded, and losses decide how a run ends: a
broker killed from outside mid-run makes the run ``lossy`` (exit 3) with its death in its
status file, the summary and the manifest, a declared rate change before it explaining
none of its losses; a CRASH the workload declares is recorded the same way and leaves the
run ``ok``, its losses explained; an interface taken down is noticed by the brokers'
keepalive on both sides within the stated timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_broker import wait_for

from experiments.emulation.doctor import probe
from experiments.emulation.network import Emulation
from experiments.emulation.throttle import link_interfaces
from experiments.plan import RunPlan, compile_plan
from experiments.runs.brokers import BrokerRun, broker_configs
from experiments.runs.emulated import broker_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.emulated.broker import KEEPALIVE_S, LINK_TIMEOUT_S, read_status
from nodes.logs import Ev, iter_jsonl
from nodes.messages import Message, MsgType
from nodes.workloads.ops import ClientOp

pytestmark = pytest.mark.root

# Four brokers; flood's spanning tree is the line b0 - a0 - a1 - b1, and a0 hosts no
# client, so a dead a0 cuts b0's subscribers off from both publishers.
SPEC: dict[str, Any] = {
    "name": "faults",
    "topology": {"name": "scot", "params": {"tree": "a-b", "m": 2, "mode": "overlay"}},
    "links": {"bw_mbps": 20, "delay_ms": 2},
    "seed": 3,
    "fidelity": {"links": 0},
    "capture": {"enabled": False},
    "workload": {"n_publishers": 2, "n_subscribers": 6, "pubs_per_publisher": 40,
                 "publish_rate_hz": 10, "selectivity": 0.3},
    "routing": {"algorithms": ["flood"]},
}
VICTIM = "a0"
KILL_AT_S = 4.0  # on the workload's clock: publications run from 2 s to 6 s
# A declared rate change before the kill, as the shipped demo has: it delays, and must not
# explain the kill's losses.
RATE_CHANGE = {"at_s": 3.0, "a": "a1", "b": "b1", "bw_mbps": 10.0}


def _plan() -> RunPlan:
    plan = compile_plan(parse_spec(SPEC))
    assert plan.workload is not None
    assert VICTIM not in plan.workload.clients.values()
    assert len(plan.algorithm("flood").derived[VICTIM]["tree_neighbours"]) == 2
    return plan


def _check_death(out: Path, declared: bool) -> dict[str, Any]:
    """What every run with a dead VICTIM must record; its summary."""
    summary = json.loads((out / "summary.json").read_text())
    (death,) = summary["broker_exits"]
    assert death["broker"] == VICTIM and death["declared"] is declared
    assert (death["returncode"], death["signal"]) == (-9, "SIGKILL")
    assert KILL_AT_S <= death["t_s"] <= KILL_AT_S + 1.0
    status = read_status(out, VICTIM)
    assert status is not None and status["state"] == "exited" and status["returncode"] == -9
    # both tree neighbours saw the link to it end while the workload ran
    downs = {(d["broker"], d["link"]) for d in summary["link_downs"]}
    assert {("a1", VICTIM), ("b0", VICTIM)} <= downs
    assert summary["missing"] > 0
    return summary


def test_a_broker_killed_from_outside_makes_the_run_lossy(tmp_path: Path) -> None:
    spec = tmp_path / "faults.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "link_schedule": [RATE_CHANGE]}))
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "run", str(spec),
                             "--out", str(tmp_path / "runs"), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        config = wait_for(lambda: sorted(tmp_path.glob("runs/*/flood/config/b0.clients.json")),
                           60, "the clients to start")[0]
        t0_wall = json.loads(config.read_text())["common"]["start_at_wall"]
        pid = wait_for(lambda: (read_status(config.parent.parent, VICTIM) or {}).get("pid"),
                        10, f"{VICTIM}'s status")
        time.sleep(max(0.0, t0_wall + KILL_AT_S - time.time()))
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["status"] == "lossy"
    run_dir = Path(result["run_dir"])
    summary = _check_death(run_dir / "flood", declared=False)
    assert summary["faults"]["declared"] == [
        {"kind": "link_rate", "a": "a1", "b": "b1", "bw_mbps": 10.0, "t_s": 3.0}]
    assert summary["faults"]["unexplained"] == {"missing": summary["missing"],
                                                "duplicates": summary["duplicates"]}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "lossy" and manifest["faults"]["lossy"] is True
    assert manifest["faults"]["algorithms"]["flood"]["broker_exits"] == summary["broker_exits"]


def test_a_declared_crash_is_recorded_and_explains_its_losses(tmp_path: Path) -> None:
    plan = _plan()
    workload = plan.workload
    assert workload is not None
    crasher = f"x{VICTIM}"  # a client of the victim's, only to carry the CRASH
    ops = sorted([*workload.ops, ClientOp(KILL_AT_S, crasher, VICTIM,
                                          Message(MsgType.CRASH, 1, crasher))],
                 key=lambda op: op.t_s)
    plan = replace(plan, workload=replace(workload, ops=tuple(ops),
                                          clients={**workload.clients, crasher: VICTIM}))
    run_dir, manifest = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    summary = _check_death(run_dir / "flood", declared=True)
    assert summary["crashed"]["brokers"][0]["broker"] == VICTIM
    declared = [{"kind": "crash", "broker": VICTIM, "t_s": KILL_AT_S}]
    assert summary["faults"]["declared"] == manifest["faults"]["declared"] == declared
    # every notification lost was published after the crash (less its time in flight)
    assert summary["faults"]["unexplained"] == {"missing": 0, "duplicates": 0}
    assert manifest["status"] == "ok"


def test_keepalive_marks_a_downed_interface_link_down(tmp_path: Path) -> None:
    plan = _plan()
    emu = Emulation(plan.graph, switch="bridge", probe=probe(), log=lambda _m: None)
    out = tmp_path / "flood"
    run: BrokerRun | None = None
    try:
        emu.start()
        run = BrokerRun(emu, out)
        run.start_brokers(broker_configs(
            plan, "flood", emulate_link=emu.probe["mechanisms"]["delay_loss"] == "in-broker",
            log_dir=out))
        run.wait_links_up(30)
        (_, intf), _ = link_interfaces("a0", "a1")
        emu.net["a0"].cmd(f"ip link set {intf} down")
        t_down = time.monotonic()

        def lost(broker: str, peer: str) -> float | None:
            status = read_status(out, broker) or {}
            return time.monotonic() - t_down if peer in status.get("missing", []) else None

        noticed_s = {b: wait_for(lambda b=b, p=p: lost(b, p), LINK_TIMEOUT_S + 10,
                                  f"{b} to declare its link to {p} down")
                     for b, p in (("a0", "a1"), ("a1", "a0"))}
        # the other links carry keepalives too, and stay up
        assert {b: read_status(out, b)["missing"] for b in ("a0", "a1", "b0", "b1")} == {
            "a0": ["a1"], "a1": ["a0"], "b0": [], "b1": []}
        emu.net["a0"].cmd(f"ip link set {intf} up")
        wait_for(lambda: all((read_status(out, b) or {}).get("all_up") for b in ("a0", "a1")),
                  15, "a0 to redial a1 once the interface is back")
    finally:
        if run is not None:
            run.stop_brokers()
        emu.stop()
    for b, t_s in noticed_s.items():
        # The last frame before the cut came at most one keepalive interval before it.
        assert LINK_TIMEOUT_S - KEEPALIVE_S - 0.2 <= t_s <= LINK_TIMEOUT_S + 1.0, (b, t_s)
    for b, p in (("a0", "a1"), ("a1", "a0")):
        reasons = [r["reason"] for r in iter_jsonl(out / f"{b}.jsonl", Ev.LINK)
                   if r["link"] == p and r["state"] == "down"]
        assert reasons[0] == f"keepalive timeout: nothing received for {LINK_TIMEOUT_S:g} s"
