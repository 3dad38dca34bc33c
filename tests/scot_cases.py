"""Shared cases for the routing-core tests: random small SCOTs, stock workloads with their
setup phase shuffled, a churn workload with unsubscriptions and unadvertisements and its
oracle, a simulator run that keeps the cores to inspect, and the 3 x 3 SCOT spec on
which the runtimes are cross-checked in Mininet."""

from __future__ import annotations

import random
import string
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import networkx as nx

from nodes.cores import make_core, overlay_params
from nodes.cores.interface import RoutingCore
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json, matches
from nodes.sim.result import SimResult, summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import stock_workload
from topologies.scot import scot_overlay

Pairs = list[tuple[tuple[str, int], str]]

# The 3 x 3 SCOT (a-b-c times K3) the runtimes are cross-checked on; tests add routing.
AGREE_SPEC: dict[str, Any] = {
    "name": "agree",
    "topology": {"name": "scot", "params": {"tree": "a-b,b-c", "m": 3, "mode": "overlay"}},
    "links": {"bw_mbps": 20, "delay_ms": 2},
    "seed": 11,
    "fidelity": {"links": 1, "iperf_s": 1},
    "workload": {"n_publishers": 3, "n_subscribers": 12, "pubs_per_publisher": 25,
                 "publish_rate_hz": 20, "selectivity": 0.1},
}


def random_scot(rng: random.Random, *, max_tree: int = 8, max_m: int = 4) -> nx.Graph:
    """Ta from a random Prüfer sequence (3..``max_tree`` vertices) times K_m (m in
    2..``max_m``), each link with its own random delay and bandwidth, so that first
    arrivals (TID trees) and message races differ from case to case."""
    n = rng.randint(3, max_tree)
    ta = nx.from_prufer_sequence([rng.randrange(n) for _ in range(n - 2)])
    tree = [(string.ascii_lowercase[a], string.ascii_lowercase[b]) for a, b in ta.edges]
    ov = scot_overlay(tree, rng.randint(2, max_m))
    for _, _, data in ov.edges(data=True):
        data["delay_ms"] = rng.uniform(0.1, 3.0)
        data["bw_mbps"] = rng.choice([None, 2.0, 20.0, 100.0])
    return ov


def shuffled_setup(w: Workload, rng: random.Random, window_s: float) -> Workload:
    """``w`` with its advertisements and subscriptions re-timed at random in
    ``[0, window_s)`` (subscriptions may now come before the advertisements they overlap);
    publications keep their times, which must lie after the window."""
    ops = [replace(op, t_s=rng.uniform(0.0, window_s))
           if op.msg.type in (MsgType.ADVERTISE, MsgType.SUBSCRIBE) else op for op in w.ops]
    return replace(w, ops=tuple(sorted(ops, key=lambda op: op.t_s)))


def small_workload(overlay: nx.Graph, seed: int) -> Workload:
    """A stock workload with a shuffled setup phase on ``overlay``'s brokers."""
    rng = random.Random(f"workload/{seed}")
    w = stock_workload(sorted(overlay.nodes), n_publishers=rng.randint(1, 6),
                       n_subscribers=rng.randint(1, 25), pubs_per_publisher=rng.randint(2, 12),
                       publish_rate_hz=50.0, seed=seed, selectivity=rng.choice([0.05, 0.2, 0.5]),
                       phase_gap_s=1.0, mode=rng.choice(["octopia", "meghdoot"]))
    return shuffled_setup(w, rng, window_s=1.5)


def pairs(deliveries: Mapping[tuple[str, int], Sequence[str]]) -> Pairs:
    """(notification, subscriber) pairs, sorted, one per delivery (duplicates stay)."""
    return sorted((key, sub) for key, subs in deliveries.items() for sub in subs)


def check_oracle_run(overlay: nx.Graph, w: Workload, algorithm: str) -> SimResult:
    """Simulate ``w``; check it delivered exactly the oracle's set, each pair once, and
    that no core met a message it does not handle. Returns the result."""
    expected = expected_deliveries(w)
    result = simulate(overlay, w, algorithm, SimSettings(seed=0))
    assert pairs(result.deliveries) == pairs(expected)  # lists: a duplicate would show
    summary = summarize(result, expected)
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    assert "unhandled" not in result.record_counts
    return result


def run(overlay: nx.Graph, w: Workload, algorithm: str, **kw: Any
        ) -> tuple[SimResult, dict[str, Any]]:
    """Simulate ``w`` with core ``algorithm``; the result and the cores by broker."""
    derived = overlay_params(algorithm, overlay)
    cores: dict[str, Any] = {}

    def factory(broker: str, neighbours: Sequence[str], params: Mapping[str, Any]
                ) -> RoutingCore:
        core = cores[broker] = make_core(algorithm, broker, neighbours,
                                         {**derived.get(broker, {}), **params})
        return core

    result = simulate(overlay, w, factory, SimSettings(seed=0, **kw))
    return result, cores


def churn_case(seed: int, algorithm: str, empty: Mapping[str, Any]
               ) -> tuple[nx.Graph, Workload, dict[str, Any]]:
    """Run :func:`churn_workload` on a random SCOT with ``algorithm``; check the oracle's
    deliveries, exactly once, and that every core's state is ``empty`` at the end.
    Returns the overlay, the workload and its info for a look midway."""
    overlay = random_scot(random.Random(f"churn-scot/{seed}"))
    w, info = churn_workload(overlay, seed)
    result, cores = run(overlay, w, algorithm)
    assert pairs(result.deliveries) == info["expected"]
    for b, core in cores.items():
        assert core.state() == empty, b
        assert core.table_sizes() == {"srt": 0, "prt": 0}, b
    return overlay, w, info


def churn_workload(overlay: nx.Graph, seed: int) -> tuple[Workload, dict[str, Any]]:
    """Setup (shuffled) by 1.5 s; publications at [2, 3) s; at 4 s about half the
    subscribers unsubscribe and about a third of the publishers unadvertise; the
    publishers still advertised publish again at [5, 6) s; from 7 s everything left is
    withdrawn. Returns the workload and ``{"expected": pairs, "checkpoint_s": 6.5,
    "kept_subs": ..., "kept_advs": ...}`` (the ids still in place at the checkpoint)."""
    rng = random.Random(f"churn/{seed}")
    base = small_workload(overlay, seed)
    setup = [op for op in base.ops if op.msg.type is not MsgType.PUBLISH]
    pubs = [op for op in base.ops if op.msg.type is MsgType.PUBLISH]
    subs = {(op.client, op.msg.msg_id): filter_from_json(op.msg.payload["filter"])
            for op in setup if op.msg.type is MsgType.SUBSCRIBE}
    advs = sorted((op.client, op.msg.msg_id) for op in setup
                  if op.msg.type is MsgType.ADVERTISE)
    gone_subs = {s for s in sorted(subs) if rng.random() < 0.5}
    gone_advs = {a for a in advs if rng.random() < 0.35}
    kept_subs = sorted(set(subs) - gone_subs)
    kept_pubs = {pub for pub, n in advs if (pub, n) not in gone_advs}

    ops: list[ClientOp] = list(setup)
    expected: Pairs = []
    next_id = 1000

    def withdraw(t_s: float, ids: Sequence[tuple[str, int]], kind: MsgType, key: str) -> None:
        nonlocal next_id
        for client, n in ids:
            next_id += 1
            ops.append(ClientOp(t_s, client, base.clients[client],
                                Message(kind, next_id, client, 0, {key: n})))

    for phase, (t0_s, publishers) in enumerate(((2.0, None), (5.0, kept_pubs))):
        live = sorted(subs) if phase == 0 else kept_subs
        chosen = [op for op in pubs if publishers is None or op.client in publishers]
        for i, op in enumerate(chosen):
            next_id += 1
            msg = Message(MsgType.PUBLISH, next_id, op.client, 0, op.msg.payload)
            ops.append(ClientOp(t0_s + i / (len(chosen) + 1), op.client, op.broker, msg))
            attrs = op.msg.payload["attrs"]
            expected += [(msg.key, client) for client, n in live
                         if matches(subs[(client, n)], attrs)]
    withdraw(4.0, sorted(gone_subs), MsgType.UNSUBSCRIBE, "sub_id")
    withdraw(4.0, sorted(gone_advs), MsgType.UNADVERTISE, "adv_id")
    withdraw(7.0, kept_subs, MsgType.UNSUBSCRIBE, "sub_id")
    withdraw(7.0, sorted(set(advs) - gone_advs), MsgType.UNADVERTISE, "adv_id")
    w = replace(base, ops=tuple(sorted(ops, key=lambda op: op.t_s)))
    info = {"expected": sorted(expected), "checkpoint_s": 6.5, "kept_subs": kept_subs,
            "kept_advs": sorted(set(advs) - gone_advs), "subs": subs}
    return w, info


def racing_workload(overlay: nx.Graph, seed: int) -> Workload:
    """Every advertisement and subscription of a small workload is withdrawn a few
    milliseconds after it was issued, while it is still spreading (no publications)."""
    rng = random.Random(f"race/{seed}")
    base = small_workload(overlay, seed)
    ops: list[ClientOp] = []
    for i, op in enumerate(op for op in base.ops if op.msg.type is not MsgType.PUBLISH):
        t_s = rng.uniform(0.0, 0.01)
        kind, key = ((MsgType.UNADVERTISE, "adv_id") if op.msg.type is MsgType.ADVERTISE
                     else (MsgType.UNSUBSCRIBE, "sub_id"))
        withdraw = Message(kind, 1000 + i, op.client, 0, {key: op.msg.msg_id})
        ops += [replace(op, t_s=t_s),
                ClientOp(t_s + rng.uniform(0.0, 0.004), op.client, op.broker, withdraw)]
    return replace(base, ops=tuple(sorted(ops, key=lambda op: op.t_s)))
