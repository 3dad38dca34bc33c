"""Which losses a declared fault explains, without a network: the vertices on some simple
path agree with a brute-force listing of every simple path; a rate change explains no
loss; a crash explains only the losses of notifications published at most the in-flight
bound before it that could pass the crashed broker."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest

from experiments.plan import RunPlan, compile_plan
from experiments.runs.emulated import oracle_workload
from experiments.runs.faults import IN_FLIGHT_S, delivery_faults, notification_routes
from experiments.spec import parse_spec
from nodes.logs import Ev
from nodes.messages import MsgType
from nodes.metrics.summary import MsgKey
from nodes.runfolder import log_path
from nodes.workloads.oracle import expected_deliveries
from topologies.graph import SimplePaths


def _brute_force(g: nx.Graph, a: str, b: str) -> frozenset[str]:
    if a == b:
        return frozenset({a})
    on = {v for path in nx.all_simple_paths(g, a, b) for v in path}
    return frozenset(on or {a, b})


@pytest.mark.parametrize("seed", range(40))
def test_simple_paths_match_every_simple_path_listed(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    # sparse graphs, so that there are cut vertices, bridges and several components
    g = nx.gnm_random_graph(n, rng.randint(0, n + 3), seed=seed)
    g = nx.relabel_nodes(g, {v: f"b{v}" for v in g})
    simple = SimplePaths(g)
    for a, b in itertools.product(g.nodes, repeat=2):
        assert simple.between(a, b) == _brute_force(g, a, b), (sorted(g.edges), a, b)


def test_a_cut_vertex_and_a_dangling_branch() -> None:
    # a triangle x-y-z, a bridge z-w, a tail w-t and a leaf y-l
    g = nx.Graph([("x", "y"), ("y", "z"), ("z", "x"), ("z", "w"), ("w", "t"), ("y", "l")])
    simple = SimplePaths(g)
    assert simple.between("x", "t") == {"x", "y", "z", "w", "t"}  # not the leaf l
    assert simple.between("w", "t") == {"w", "t"}
    assert simple.between("l", "x") == {"l", "y", "z", "x"}


# Four brokers on the 4-cycle a0 - a1 - b1 - b0 - a0; the publishers at a1 and b1.
SPEC = {
    "name": "rule",
    "topology": {"name": "scot", "params": {"tree": "a-b", "m": 2, "mode": "overlay"}},
    "links": {"bw_mbps": 20, "delay_ms": 2},
    "seed": 3,
    "workload": {"n_publishers": 2, "n_subscribers": 6, "pubs_per_publisher": 40,
                 "publish_rate_hz": 10, "selectivity": 0.3},
    "routing": {"algorithms": ["flood"]},
}


def _run(tmp_path: Path, lost: set[tuple[MsgKey, str]], twice: set[tuple[MsgKey, str]]
         ) -> tuple[RunPlan, dict[MsgKey, frozenset[str]], Path]:
    """A plan, its expected deliveries, and a folder of client logs that received every
    expected delivery but those in ``lost``, and those in ``twice`` twice."""
    plan = compile_plan(parse_spec(SPEC))
    assert plan.workload is not None
    expected = expected_deliveries(oracle_workload(plan.workload))
    logs: dict[str, list[str]] = {c: [] for c in plan.workload.clients}
    for key, subs in expected.items():
        for sub in subs:
            copies = 0 if (key, sub) in lost else 2 if (key, sub) in twice else 1
            logs[sub] += [json.dumps({"ev": Ev.RECV, "type": "PUBLISH", "origin": key[0],
                                      "msg_id": key[1], "t_wall": 1.0, "t_pub": 0.5})] * copies
    for client, lines in logs.items():
        log_path(tmp_path, client).write_text("".join(f"{line}\n" for line in lines))
    return plan, expected, tmp_path


def _faults(plan: RunPlan, expected: dict[MsgKey, frozenset[str]], out: Path,
            declared: list[dict], missing: int, duplicates: int) -> dict[str, int]:
    assert plan.workload is not None
    summary = {"missing": missing, "duplicates": duplicates}
    faults = delivery_faults(out, plan.workload, summary, expected, declared,
                             notification_routes(plan))
    assert faults["exactly_once"] is (missing == duplicates == 0)
    return faults["unexplained"]


def _published(plan: RunPlan) -> dict[MsgKey, tuple[float, str]]:
    assert plan.workload is not None
    return {op.msg.key: (op.t_s, op.broker) for op in plan.workload.ops
            if op.msg.type is MsgType.PUBLISH}


def test_a_rate_change_explains_no_loss(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    expected = expected_deliveries(oracle_workload(plan.workload))
    late = sorted((key, sub) for key, subs in expected.items() for sub in subs
                  if _published(plan)[key][0] >= 4.0)[:5]
    plan, expected, out = _run(tmp_path, set(late[:3]), set(late[3:]))
    rate = [{"kind": "link_rate", "a": "a1", "b": "b1", "bw_mbps": 1.0, "t_s": 2.0}]
    assert _faults(plan, expected, out, rate, 3, 2) == {"missing": 3, "duplicates": 2}


def test_a_crash_explains_only_what_could_pass_the_crashed_broker(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    assert plan.workload is not None
    clients = plan.workload.clients
    published = _published(plan)
    expected = expected_deliveries(oracle_workload(plan.workload))
    pairs = sorted((key, sub) for key, subs in expected.items() for sub in subs)
    crash_s = 4.0

    def pick(early: bool, local: bool) -> tuple[MsgKey, str]:
        # local: the subscriber's broker is the publisher's, so no path leaves it
        return next((key, sub) for key, sub in pairs
                    if (published[key][0] < crash_s - IN_FLIGHT_S) is early
                    and (clients[sub] == published[key][1]) is local)

    explained = pick(early=False, local=False)  # after the crash, across the cycle
    too_early = pick(early=True, local=False)
    local = pick(early=False, local=True)
    plan, expected, out = _run(tmp_path, {explained, too_early, local}, set())
    crash = [{"kind": "crash", "broker": "a0", "t_s": crash_s}]
    # a0 hosts no client but lies on the cycle, so on some path between any two others
    assert _faults(plan, expected, out, crash, 3, 0) == {"missing": 2, "duplicates": 0}
    # a crash of the local pair's own broker explains that loss too (and the one across
    # the cycle, which it lies on): only the one published too early is left
    own = [{"kind": "crash", "broker": published[local[0]][1], "t_s": crash_s}]
    assert _faults(plan, expected, out, own, 3, 0) == {"missing": 1, "duplicates": 0}


def test_a_crash_beyond_a_bridge_explains_nothing_across_it(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    # the overlay with b0's links cut but one: b0 now hangs off a0 by a bridge
    line = nx.Graph([("a0", "a1"), ("a1", "b1"), ("a0", "b0")])
    plan = replace(plan, overlay=line)
    assert plan.workload is not None
    published = _published(plan)
    clients = plan.workload.clients
    expected = expected_deliveries(oracle_workload(plan.workload))
    # a notification from a1 or b1 to a subscriber at a1 or b1, after the crash
    lost = next((key, sub) for key, subs in sorted(expected.items()) for sub in sorted(subs)
                if published[key][0] >= 4.0 and clients[sub] != "b0"
                and clients[sub] != published[key][1])
    _, expected, out = _run(tmp_path, {lost}, set())
    for broker, unexplained in (("b0", 1), ("a0", 1), ("a1", 0)):
        crash = [{"kind": "crash", "broker": broker, "t_s": 4.0}]
        assert _faults(plan, expected, out, crash, 1, 0)["missing"] == unexplained, broker
