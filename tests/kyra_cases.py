"""Shared cases for the Kyra paper's routing tests (siena, multicast, kyra): the worked
example of its Figs. 1-4, what the host derives before a run (from server latencies, the
workload's subscriptions and a calibration sample), a simulator run that keeps the cores
and every Send to inspect, and random servers with churned stock workloads."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
from hypothesis import strategies as st

from nodes.cores import CORES, make_core, overlay_params, resolve_params
from nodes.cores.interface import Action, Event, RoutingCore, Send
from nodes.cores.multicast import Cell
from nodes.cores.multicast import derive_layout as multicast_layout
from nodes.cores.overlay import latency_mst
from nodes.hosting import merge_params
from nodes.messages import Message, MsgType
from nodes.model import Filter, Value, matches
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.interests import publication_attrs, subscriptions_by_broker
from nodes.workloads.kyra_example import kyra_example_workload
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import stock_workload

Sent = list[tuple[str, str, Message]]

# ---- the worked example (Kyra Figs. 1-4; ../shared/READINGS-WAVE2.md 3.3) ------------------

# Fig. 2: per server, per neighbour, the events its table entries match.
FIG2_TABLES = {
    "A": {"C": "0-9"}, "B": {"C": "0-7,9"},
    "C": {"A": "1,5", "B": "7,8", "D": "0,6", "E": "2-7,9"}, "D": {"C": "1-9"},
    "E": {"C": "0-2,5-8", "F": "2,4-7,9"}, "F": {"E": "0-3,5-8", "G": "2,4,6,9"},
    "G": {"F": "0-3,5-8", "H": "2,9"}, "H": {"G": "0-8"},
}
# The example's calibration sample: every event once (Fig. 1 gives no distribution).
EXAMPLE_EVENTS: list[dict[str, Value]] = [{"v": v} for v in range(10)]
# Kyra's clique bounds for the example: the 1 ms pairs are close, 10 ms ones are not.
EXAMPLE_KYRA = {"max_distance_ms": 5.0, "max_clique_size": 3, "zone_attr": "v"}
# Multicast cells for the example: one per event.
EXAMPLE_MULTICAST = {"cell_attrs": "v", "cells_per_attr": 10, "groups": 3}
# Fig. 3's groups, as cells (one zone of v each): g0 {5, 8}, g1 {0, 1, 4, 6}, g2 {2, 3, 7, 9}.
FIG3_GROUPING: list[list[Cell]] = [[(5,), (8,)], [(0,), (1,), (4,), (6,)],
                                   [(2,), (3,), (7,), (9,)]]


def values(text: str) -> set[int]:
    """The events a figure's text names: ``"0-2,5"`` is {0, 1, 2, 5}; ``"-"`` none."""
    out: set[int] = set()
    for part in text.split(","):
        if part != "-":
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def matched_values(filters: Iterable[Filter]) -> set[int]:
    """The example's events (0-9) that any of ``filters`` matches."""
    fs = list(filters)
    return {v for v in range(10) if any(matches(f, {"v": v}) for f in fs)}


def op(t_s: float, client: str, broker: str, kind: MsgType, msg_id: int,
       payload: dict[str, Any]) -> ClientOp:
    return ClientOp(t_s, client, broker, Message(kind, msg_id, client, 0, payload))


def example_workload(publisher: str = "A", event: int = 9) -> Workload:
    """Fig. 1's subscriptions (subscriber ``s<server><value>``, lowercase), then event
    ``event`` published at ``publisher`` by client ``p`` at 1 s."""
    return kyra_example_workload(publisher, (event,))


# ---- what the host derives before a run -----------------------------------------------------

def full_mesh(latency_ms: Mapping[str, Mapping[str, float]]) -> nx.Graph:
    """Every pair of servers linked, each link's delay its latency: any core may send to
    any server (the layouts' edges are a subset)."""
    g = nx.Graph()
    names = sorted(latency_ms)
    g.add_nodes_from(names)
    g.add_edges_from((a, b, {"delay_ms": latency_ms[a][b]})
                     for i, a in enumerate(names) for b in names[i + 1:])
    return g


def derived_params(algorithm: str, latency_ms: Mapping[str, Mapping[str, float]],
                   w: Workload, calibration: Sequence[Mapping[str, Value]],
                   params: Mapping[str, Any], grouping: Sequence[Sequence[Cell]] | None = None
                   ) -> dict[str, dict[str, Any]]:
    """Per-broker derived params of ``algorithm`` for a full-mesh run: the registry's
    ``derive_run``, as a run plan calls it (``grouping``: multicast groups given instead
    of K-means ones)."""
    resolved = resolve_params(algorithm, CORES[algorithm].params, params)
    servers = sorted(latency_ms)
    if grouping is not None:
        return multicast_layout(latency_ms, subscriptions_by_broker(w), calibration, resolved,
                                grouping).broker_params(servers)
    derive = CORES[algorithm].derive_run
    if derive is not None:
        return derive(latency_ms, subscriptions_by_broker(w), calibration, resolved)
    # Siena's tree: the MST by latency, as Kyra's trees (the reading's choice).
    return overlay_params("siena", nx.Graph(latency_mst(servers, latency_ms)))


class Tap:
    """A core that records every Send of the core it wraps (broker, link, message)."""

    ignores_link_stats = True

    def __init__(self, core: RoutingCore, sent: Sent) -> None:
        self.core, self.broker, self.neighbours = core, core.broker, core.neighbours
        self._sent = sent

    def handle(self, event: Event, now_s: float) -> list[Action]:
        actions = self.core.handle(event, now_s)
        self._sent += [(self.broker, a.link, a.msg) for a in actions if isinstance(a, Send)]
        return actions


def run(algorithm: str, latency_ms: Mapping[str, Mapping[str, float]], w: Workload,
        params: Mapping[str, Any], calibration: Sequence[Mapping[str, Value]] | None = None,
        grouping: Sequence[Sequence[Cell]] | None = None,
        ) -> tuple[SimResult, dict[str, Any], Sent]:
    """Simulate ``w`` with ``algorithm`` on the full mesh of ``latency_ms``: the result,
    the cores by broker and every Send. The calibration sample defaults to the
    workload's own publications."""
    derived = derived_params(algorithm, latency_ms, w,
                             publication_attrs(w) if calibration is None else calibration, params,
                             grouping)
    return run_on(full_mesh(latency_ms), algorithm, w, derived, params)


def run_on(overlay: nx.Graph, algorithm: str, w: Workload,
           derived: Mapping[str, Mapping[str, Any]], params: Mapping[str, Any],
           ) -> tuple[SimResult, dict[str, Any], Sent]:
    """Simulate ``w`` on ``overlay`` with ``algorithm``, its ``derived`` params and the
    declared ``params`` (checked, defaults filled in): the result, the cores by broker
    and every Send."""
    resolved = resolve_params(algorithm, CORES[algorithm].params, params)
    cores: dict[str, Any] = {}
    sent: Sent = []

    def factory(broker: str, neighbours: Sequence[str], p: Mapping[str, Any]) -> RoutingCore:
        # As a run plan merges them: a derived key the spec could set is an error.
        core = cores[broker] = make_core(algorithm, broker, neighbours,
                                         merge_params(derived.get(broker, {}),
                                                      {**p, **resolved}))
        return Tap(core, sent)

    return simulate(overlay, w, factory, SimSettings(seed=0)), cores, sent


def publication_hops(sent: Sent) -> list[tuple[str, str]]:
    """The (from, to) of every PUBLISH sent, in order."""
    return [(b, link) for b, link, msg in sent if msg.type is MsgType.PUBLISH]


def euclidean_latency(points: Mapping[str, tuple[float, float]]
                      ) -> dict[str, dict[str, float]]:
    """Latencies (ms) between servers placed on a plane: their distances."""
    return {a: {b: math.dist(pa, pb) for b, pb in points.items()} for a, pa in points.items()}


# ---- random servers and stock workloads -----------------------------------------------------

POINTS = st.dictionaries(st.sampled_from([f"s{i:02d}" for i in range(14)]),
                         st.tuples(st.integers(0, 20), st.integers(0, 20)),
                         min_size=1, max_size=14)


def churned(w: Workload, draw: st.DrawFn) -> Workload:
    """``w`` (subscriptions, then publications) followed, a second apart each, by some
    unsubscriptions (now and then twice), some new subscriptions reusing filters, the
    publications again, and everything left unsubscribed."""
    subs = [o for o in w.ops if o.msg.type is MsgType.SUBSCRIBE]
    pubs = [o for o in w.ops if o.msg.type is MsgType.PUBLISH]
    next_id: Counter[str] = Counter()
    for o in w.ops:
        next_id[o.client] = max(next_id[o.client], o.msg.msg_id)
    t = max(o.t_s for o in w.ops) + 1.0
    ops = list(w.ops)
    live = [(o.client, o.broker, o.msg.msg_id) for o in subs]

    def unsubscribe(t_s: float, client: str, broker: str, n: int) -> None:
        next_id[client] += 1
        ops.append(op(t_s, client, broker, MsgType.UNSUBSCRIBE, next_id[client], {"sub_id": n}))

    for sub in draw(st.lists(st.sampled_from(live), unique=True)) if live else []:
        live.remove(sub)
        unsubscribe(t, *sub)
        if draw(st.booleans()):
            unsubscribe(t + 0.1, *sub)
    for o in draw(st.lists(st.sampled_from(subs), max_size=4)) if subs else []:
        next_id[o.client] += 1
        ops.append(op(t + 0.2, o.client, o.broker, MsgType.SUBSCRIBE, next_id[o.client],
                      o.msg.payload))
        live.append((o.client, o.broker, next_id[o.client]))
    for i, o in enumerate(pubs):
        next_id[o.client] += 1
        ops.append(op(t + 1.0 + 0.01 * i, o.client, o.broker, MsgType.PUBLISH,
                      next_id[o.client], {"attrs": o.msg.payload["attrs"]}))
    for sub in live:
        unsubscribe(t + 2.5 + 0.01 * len(pubs), *sub)
    return Workload(w.schema, w.clients, tuple(sorted(ops, key=lambda o: o.t_s)), w.meta)


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, dict[str, float]], Workload, list, dict]:
    """Servers on a 20 x 20 ms plane (a tree path of 13 hops stays well inside the
    workload's one-second phase gap), a stock workload churned, a calibration sample
    (the run's own publications or an independent draw) and each algorithm's params."""
    points = draw(POINTS.filter(lambda p: len(p) >= 2))
    servers = sorted(points)
    seed = draw(st.integers(0, 10_000))
    mode = draw(st.sampled_from(["meghdoot", "octopia"]))
    kw = {"n_publishers": draw(st.integers(1, 3)), "n_subscribers": draw(st.integers(1, 10)),
          "pubs_per_publisher": draw(st.integers(1, 6)), "publish_rate_hz": 50.0,
          "mode": mode, "selectivity": 0.2}
    w = churned(stock_workload(servers, seed=seed, **kw), draw)
    calibration = publication_attrs(w) if draw(st.booleans()) else publication_attrs(
        stock_workload(servers, seed=seed + 1, **kw))
    params = {
        "siena": {"covering": draw(st.booleans())},
        "multicast": {"groups": draw(st.integers(1, 5)),
                      "cells_per_attr": draw(st.integers(1, 8)),
                      "cell_attrs": draw(st.sampled_from(["Symbol", "Symbol,Low", "Volume"])),
                      "kmeans_seed": draw(st.integers(0, 3))},
        "kyra": {"max_distance_ms": draw(st.sampled_from([3.0, 8.0, 15.0, 30.0])),
                 "max_clique_size": draw(st.integers(1, 5)), "trees": draw(st.integers(0, 4)),
                 "zone_attr": draw(st.sampled_from(["Symbol", "Close"])),
                 "covering": draw(st.booleans())},
    }
    return euclidean_latency(points), w, calibration, params
