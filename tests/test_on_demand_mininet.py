"""``gossip`` with links opened on demand on a real Mininet network: 16 brokers on one
switch (the gigabit-cluster topology: flat addressing, every host reaches every other),
``routing.links: on-demand``. Every node starts dormant and JOINs through a seed
(the seed through itself); between the subscriptions and the publications one
subscriber's node LEAVEs and another's CRASHes (the runner SIGKILLs it). Exactly the
oracle's deliveries arrive, each once; the simulator, when it has links on demand, agrees
on who got what; heartbeats report the crash; the run tears down clean."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from experiments.emulation.leftovers import root_interfaces
from experiments.plan import RunPlan, compile_plan, pair_figures
from experiments.runs.brokers import dormant_brokers
from experiments.runs.emulated import broker_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.emulated.broker import nofile_needed
from nodes.logs import iter_jsonl
from nodes.messages import Message, MsgType
from nodes.metrics.log_summary import client_receipts
from nodes.sim import simulator as sim_module
from nodes.sim.links import LinkModel
from nodes.sim.settings import SimSettings
from nodes.workloads.membership import membership_intervals, oracle_workload
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries

pytestmark = pytest.mark.root

HEARTBEAT_S, TIMEOUT_S = 0.3, 1.5
SPEC = {
    "name": "gossip-on-demand",
    "topology": {"name": "gigabit-cluster", "params": {"n": 16}},
    "links": {"bw_mbps": 100, "delay_ms": 1},  # 2 ms between two hosts, via the switch
    "seed": 5,
    "fidelity": {"links": 0},
    "capture": {"enabled": False},
    "routing": {"algorithms": ["gossip"],
                "links": "on-demand", "params": {"heartbeat_s": HEARTBEAT_S,
                           "timeout_s": TIMEOUT_S}},
    "workload": {"n_publishers": 3, "n_subscribers": 12, "pubs_per_publisher": 15,
                 "publish_rate_hz": 10, "selectivity": 0.2},
}
JOIN_GAP_S = 0.05
SHIFT_S = 1.5  # the stock workload starts after every node has joined


def with_membership(w: Workload, nodes: list[str]) -> tuple[Workload, str, str, str]:
    """The stock workload ``w`` SHIFT_S later, after every node JOINs (one member client
    ``j<node>`` each; the seed through itself), with one subscriber node leaving and one
    crashing between the subscriptions and the publications; the workload, the seed, the
    leaver and the crasher."""
    ops = [replace(op, t_s=round(op.t_s + SHIFT_S, 9)) for op in w.ops]
    seed = nodes[0]
    pubs = {op.broker for op in ops if op.msg.type is MsgType.PUBLISH}
    subs = {op.broker for op in ops if op.msg.type is MsgType.SUBSCRIBE}
    leaver, crasher = [b for b in nodes if b in subs and b not in pubs and b != seed][:2]
    clients = dict(w.clients)
    for i, b in enumerate(nodes):
        clients[f"j{b}"] = b
        ops.append(ClientOp(round(JOIN_GAP_S * i, 9), f"j{b}", b,
                            Message(MsgType.JOIN, 1, f"j{b}", 0, {"bootstrap": seed})))
    last_sub = max(op.t_s for op in ops if op.msg.type is MsgType.SUBSCRIBE)
    first_pub = min(op.t_s for op in ops if op.msg.type is MsgType.PUBLISH)
    t_churn = round((last_sub + first_pub) / 2, 9)
    for b, mtype in ((leaver, MsgType.LEAVE), (crasher, MsgType.CRASH)):
        ops.append(ClientOp(t_churn, f"j{b}", b, Message(mtype, 2, f"j{b}", 0, {})))
    ops.sort(key=lambda op: op.t_s)
    meta = {**w.meta, "settle_s": 0.3, "membership": membership_intervals(ops)}
    return Workload(w.schema, clients, tuple(ops), meta), seed, leaver, crasher


def _pairs(deliveries: dict[tuple[str, int], list[str]] | dict) -> list:
    return sorted((key, sub) for key, subs in deliveries.items() for sub in subs)


def _simulated(plan: RunPlan, workload: Workload) -> list:
    """The simulator's deliveries with links on demand."""
    overlay = nx.Graph()
    overlay.add_nodes_from(plan.overlay.nodes(data=True))  # no fixed links
    model = LinkModel(latency_ms=lambda a, b: pair_figures(plan.graph, a, b)[1])
    alg = plan.algorithm("gossip")
    result = sim_module.simulate(overlay, workload, "gossip",
                                 SimSettings(core_params=dict(alg.params), seed=plan.spec.seed,
                                             window_ms=plan.window_ms, until_s=plan.phase_s(),
                                             on_demand=model))
    return _pairs(result.deliveries)


def test_gossip_with_links_on_demand_in_mininet(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    assert plan.links == "on-demand" and plan.graph.graph["mode"] == "switch"
    assert plan.workload is not None
    nodes = list(plan.overlay.nodes)
    workload, seed, leaver, crasher = with_membership(plan.workload, nodes)
    plan = replace(plan, workload=workload)
    assert dormant_brokers(plan) == frozenset(nodes)  # everyone joins, the seed first

    oracle = expected_deliveries(oracle_workload(workload))
    expected = _pairs(oracle)
    assert len(expected) > 30, "the workload should exercise many deliveries"
    # the churn matters: without it the two nodes' subscribers would have got some
    gone = {c for c, b in workload.clients.items() if b in (leaver, crasher)}
    always = expected_deliveries(oracle_workload(replace(
        workload, meta={**workload.meta, "membership": {}})))
    assert gone & {c for subs in always.values() for c in subs}
    assert not gone & {c for subs in oracle.values() for c in subs}
    simulated = _simulated(plan, workload)

    run_dir, manifest = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    out = run_dir / "gossip"

    got = _pairs(client_receipts(out, workload)["deliveries"])
    assert got == expected  # each pair once: lists, not sets
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    assert summary["client_failures"] == {}
    assert [c["broker"] for c in summary["crashed"]["brokers"]] == [crasher]
    assert summary["crashed"]["clients"]  # they lost their broker: expected, not failures
    assert manifest["plan"]["links"] == "on-demand"
    assert simulated == expected == got

    live = [b for b in nodes if b not in (leaver, crasher)]

    def log(b: str) -> list[dict]:
        return list(iter_jsonl(out / f"{b}.jsonl"))

    pairs_up = set()
    for b in nodes:
        recs = log(b)
        states = [r["state"] for r in recs if r.get("kind") == "membership"]
        assert states[:2] == ["dormant", "joined"], b
        ups = [r for r in recs if r["ev"] == "link" and r["state"] == "up"
               and r["role"] == "broker"]
        assert {r["reason"] for r in ups} <= {"dialled", "accepted"}, b
        # one connection per pair: never two ups for a peer without a down between
        assert len({r["link"] for r in ups}) == len(ups), b
        pairs_up |= {frozenset((b, r["link"])) for r in ups}
        assert {r["reason"] for r in recs if r["ev"] == "link" and r["state"] == "refused"
                } <= {"crossed", "dormant"}
        assert not [r for r in recs if r["ev"] == "error"], b
        status = json.loads((out / f"{b}.status.json").read_text())
        assert status["nofile"]["soft"] >= nofile_needed(len(nodes) - 1)
        if b in live:
            assert status["state"] == "stopped"
            # heartbeats found the crash within the timeout (and nobody else dead)
            assert [r["member"] for r in recs if r.get("kind") == "member_down"] == [crasher]
    # heartbeats made a full mesh among the live nodes: 91 connections, each opened once
    assert {p for p in pairs_up if p <= set(live)} == {
        frozenset((a, b)) for a in live for b in live if a < b}
    left = log(leaver)
    assert [r["state"] for r in left if r.get("kind") == "membership"] == [
        "dormant", "joined", "left"]
    closed = {r["link"] for r in left if r["ev"] == "link" and r.get("reason") == "disconnect"}
    # every live member got its LEAVE, then the close (the crasher, dying at the same
    # time, may have gone first)
    assert set(live) <= closed <= set(nodes) - {leaver}
    # torn down: no interface or process of ours is left
    assert not [i for i in root_interfaces() if i.split("-", 1)[0] in set(plan.graph.nodes)]
    ours = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if str(run_dir).encode() in cmd:
                ours.append(cmd.replace(b"\0", b" "))
    assert not ours, f"processes left: {ours}"
    assert seed == nodes[0]
