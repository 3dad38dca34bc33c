"""Meghdoot in the simulator: every matching subscriber gets each event exactly once (the
timing-aware oracle) for random spaces and workloads while peers join, split and
replicate; the CAN's invariants hold before every operation; greedy routing reaches the
owner of any point from every peer, in O(d N^(1/d)) hops."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.plan import compile_plan
from experiments.runs.simulated import on_demand_links
from experiments.spec import parse_spec
from nodes.cores import can, make_core, resolve_params
from nodes.cores.interface import (
    Arrived,
    Deliver,
    Event,
    FromClient,
    Record,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.cores.meghdoot import PARAMS, MeghdootCore, Runs
from nodes.cores.meghdoot_common import msg_key
from nodes.messages import Message, MsgType
from nodes.model import Predicate, Schema, filter_from_json, filter_to_json, matches
from nodes.sim.links import LinkModel
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.meghdoot import meghdoot_workload
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from topologies.peers import peer_names

LINKS = LinkModel(latency_ms=1.0)


def peer_name(i: int) -> str:
    return peer_names(i + 1)[i]


class CheckedPeer(MeghdootCore):
    """A peer that checks the whole CAN's invariants before each JOIN operation, so
    after every join but the last (the workload spaces operations so that the previous
    one has settled by then; :func:`run` checks once more at the end)."""

    def __init__(self, everyone: list[CheckedPeer], broker: str, params: Mapping[str, Any]
                 ) -> None:
        declared = {k: v for k, v in params.items() if k != "seed_peer"}
        super().__init__(broker, (), {**resolve_params("meghdoot", PARAMS, declared),
                                      "seed_peer": params["seed_peer"]})
        self.everyone = everyone
        everyone.append(self)

    def handle(self, event: Event, now_s: float) -> list:
        if isinstance(event, FromClient) and event.msg.type is MsgType.JOIN:
            check_can(self.everyone)
        return super().handle(event, now_s)


def check_can(peers: Sequence[MeghdootCore]) -> None:
    """Zones tile the space (no overlap, no gap), neighbour tables are exact and
    symmetric, replica groups are exact and their members store the same subscriptions,
    and the same mirror copies: with mirrors, one copy of each stored subscription, at the
    zone the rule files it in (:func:`can.mirror_point`); without, none."""
    live = [p for p in peers if p.zone is not None]
    zones: dict[can.Zone, list[MeghdootCore]] = {}
    for p in live:
        zones.setdefault(p.zone, []).append(p)
    distinct = list(zones)
    assert sum(can.volume(z) for z in distinct) == pytest.approx(1.0, abs=1e-9)
    for i, a in enumerate(distinct):
        for b in distinct[i + 1:]:  # interiors disjoint: some dimension separates them
            assert any(ah <= bl or bh <= al for al, ah, bl, bh
                       in zip(a[0], a[1], b[0], b[1], strict=True)), (a, b)
    for p in live:
        want = {q.broker: q.zone for q in live
                if q.zone != p.zone and can.abutment(p.zone, q.zone)}
        assert p.nbrs == want, p.broker
        by_zone: dict[can.Zone, list[str]] = {}  # the table by zone, as the peer keeps it
        for q in sorted(want):
            by_zone.setdefault(want[q], []).append(q)
        assert p._zones() == sorted(by_zone.items(), key=lambda zp: zp[1][0]), p.broker
        assert p._table.own == p.zone, p.broker  # its sides are this zone's
        assert p.group == {q.broker for q in zones[p.zone]}, p.broker
        assert set(p.subs) == set(zones[p.zone][0].subs), p.broker
    mirrors = mirrors_by_rule(zones) if any(p.mirroring for p in live) else {}
    for p in live:
        assert {k: m.target for k, m in p.mirror_subs.items()} == mirrors.get(p.zone, {}), \
            p.broker


def mirrors_by_rule(zones: Mapping[can.Zone, Sequence[MeghdootCore]]
                    ) -> dict[can.Zone, dict[tuple[str, int], can.Point]]:
    """Zone -> the mirror copies the rule files in it (subscription key -> target)."""
    want: dict[can.Zone, dict[tuple[str, int], can.Point]] = {}
    for zone, holders in zones.items():
        for key, sub in holders[0].subs.items():
            target = can.mirror_point(zone, sub.point)
            if target is not None:
                at = next(z for z in zones if can.contains(z, target))
                want.setdefault(at, {})[key] = target
    return want


def _graph(w: Workload) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(sorted(set(w.clients.values())))
    return g


def run(w: Workload, params: Mapping[str, Any], peers: list | None = None, *,
        checked: bool = True, links: LinkModel = LINKS) -> SimResult:
    """Simulate ``w`` with Meghdoot peers (collected in ``peers``), checking the CAN before
    every join and at the end unless not ``checked`` (a crashed peer's own state stays
    stale)."""
    everyone: list[MeghdootCore] = [] if peers is None else peers
    seed = min(_graph(w).nodes)

    def factory(broker: str, _nbrs: Sequence[str], _p: Mapping[str, Any]) -> MeghdootCore:
        if checked:
            return CheckedPeer(everyone, broker, {"seed_peer": seed, **params})
        everyone.append(make_core("meghdoot", broker, (), {"seed_peer": seed, **params}))
        return everyone[-1]

    result = simulate(_graph(w), w, factory,
                      SimSettings(seed=1, on_demand=links, log_messages=False,
                                  until_s=w.ops[-1].t_s + 2.0))
    if checked:
        check_can(everyone)
    return result


def assert_exactly_once(result: SimResult, w: Workload) -> int:
    want = {k: sorted(v) for k, v in expected_deliveries(w).items() if v}
    got = {k: sorted(v) for k, v in result.deliveries.items()}
    assert got == want  # sorted lists: a duplicate would show
    return sum(map(len, want.values()))


# ---- random spaces and workloads ----------------------------------------------------------


@st.composite
def random_workloads(draw: st.DrawFn) -> tuple[Workload, str]:
    n_attrs = draw(st.integers(1, 3))
    names = [f"a{i}" for i in range(n_attrs)]
    tops = [draw(st.sampled_from([10, 100, 1000])) for _ in names]
    space = can.Space([can.Attribute(n, "num", 0, top) for n, top in zip(names, tops,
                                                                          strict=True)])
    rng = random.Random(draw(st.integers(0, 2**32)))
    n_peers = draw(st.integers(1, 24))
    n_steps = draw(st.integers(5, 80))
    step = 0.05
    ops: list[ClientOp] = []
    clients: dict[str, str] = {}
    live = [peer_name(0)]
    membership: dict[str, list[list[float | None]]] = {live[0]: [[0.0, None]]}

    def value(i: int) -> float:
        return rng.choice([0, tops[i], rng.randint(0, tops[i]), rng.uniform(0, tops[i])])

    for k in range(n_steps):
        peer = rng.choice(live)
        if rng.random() < 0.5:
            preds = []
            for i in rng.sample(range(n_attrs), rng.randint(0, n_attrs)):
                op = rng.choice(["=", "<", "<=", ">", ">=", "range"])
                if op == "range":
                    lo, hi = sorted((value(i), value(i)))
                    preds.append(Predicate(names[i], op, lo, hi))
                else:
                    preds.append(Predicate(names[i], op, value(i)))
            client = f"s{k:03d}"
            msg = Message(MsgType.SUBSCRIBE, 1, client, payload={"filter": filter_to_json(preds)})
        else:
            client = f"e{k:03d}"
            attrs = {names[i]: value(i) for i in range(n_attrs) if rng.random() < 0.9}
            msg = Message(MsgType.PUBLISH, 1, client, payload={"attrs": attrs})
        clients[client] = peer
        ops.append(ClientOp(k * step, client, peer, msg))
        if len(live) < n_peers and rng.random() < 0.5:
            name = peer_name(len(live))
            clients[f"j{name}"] = name
            t = k * step + step / 2
            ops.append(ClientOp(t, f"j{name}", name, Message(
                MsgType.JOIN, 1, f"j{name}", payload={"bootstrap": rng.choice(live)})))
            live.append(name)
            membership[name] = [[t, None]]
    schema = Schema(dict.fromkeys(names, "float"))
    meta = {"membership": membership, "settle_s": step / 2}
    return Workload(schema, clients, tuple(ops), meta), space.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_workloads(), st.sampled_from(["meghdoot", "can"]),
       st.sampled_from(["paper", "none"]), st.sampled_from([0.0, 0.1, 1.0]),
       st.sampled_from([("standout", 2.0), ("relative", 2.0), ("absolute", 1.0)]),
       st.sampled_from(["periodic", "on_change"]), st.sampled_from(can.SPLIT_RULES))
def test_random_spaces_deliver_exactly_once_while_peers_join(
        case: tuple[Workload, str], join: str, dup_rule: str, load_period_s: float,
        rule: tuple[str, float], report_rule: str, split_rule: str) -> None:
    w, space = case
    result = run(w, {"space": space, "join": join, "dup_rule": dup_rule,
                     "load_period_s": load_period_s, "replicate_rule": rule[0],
                     "kappa": rule[1], "report_rule": report_rule,
                     "split_rule": split_rule})
    assert_exactly_once(result, w)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_workloads(), st.sampled_from(["meghdoot", "can"]))
def test_mirror_copies_follow_their_rule_while_peers_join(case: tuple[Workload, str],
                                                          join: str) -> None:
    """With mirrors, :func:`check_can` (before every join and at the end) finds each
    stored subscription's one mirror copy at the zone the rule names, at every replica."""
    w, space = case
    peers: list[MeghdootCore] = []
    result = run(w, {"space": space, "join": join, "load_period_s": 0.1, "mirrors": True},
                 peers)
    assert_exactly_once(result, w)
    assert all(p.mirroring for p in peers)


def test_an_unsubscription_drops_its_mirror_copy() -> None:
    space = can.Space([can.Attribute("a", "num", 0, 100)])
    peers = [peer_name(i) for i in range(6)]
    clients = {f"j{p}": p for p in peers[1:]}
    ops = [ClientOp(0.05 * i, f"j{p}", p, Message(MsgType.JOIN, 1, f"j{p}",
                                                  payload={"bootstrap": peers[0]}))
           for i, p in enumerate(peers[1:])]
    for i in range(40):  # ranges [i, i + 50]: their reflections in the lower-right half
        client, peer = f"s{i:02d}", peers[i % len(peers)]
        clients[client] = peer
        f = filter_to_json([Predicate("a", "range", i, i + 50)])
        ops.append(ClientOp(1.0 + 0.01 * i, client, peer,
                            Message(MsgType.SUBSCRIBE, 1, client, payload={"filter": f})))
        if i % 2:
            ops.append(ClientOp(2.0 + 0.01 * i, client, peer,
                                Message(MsgType.UNSUBSCRIBE, 2, client, payload={"sub_id": 1})))
    w = Workload(Schema({"a": "float"}), clients, tuple(sorted(ops, key=lambda op: op.t_s)), {})
    cores: list[MeghdootCore] = []
    run(w, {"space": space.to_json(), "join": "can", "mirrors": True}, cores)  # checks it
    live = [p for p in cores if p.zone is not None]
    assert len({p.zone for p in live}) == 6
    assert sum(len(p.subs) for p in live) == sum(len(p.mirror_subs) for p in live) == 20


@pytest.mark.parametrize("subs", [1500, 6000])
def test_a_scaled_stream_reaches_its_peer_bound_at_the_papers_share_of_it(subs: int) -> None:
    """Events at a tenth of the paper's: its stream is our subscriptions plus ten times
    our events, and its 199 joins at 10 % a step end at 199 / 0.1 steps of it."""
    w = meghdoot_workload(peer_names(200), subs, 100, seed=2, events_scale=0.1)
    joins = [op.t_s for op in w.ops if op.msg.type is MsgType.JOIN]
    assert len(joins) == 199
    assert joins[-1] / w.ops[-1].t_s == pytest.approx(199 / 0.1 / (subs + 1000), abs=0.08)


def test_joins_with_events_stores_every_subscription_first_and_joins_after_events() -> None:
    """The paper's simulation events read as its published events: the subscriptions
    come first (stored at the first peer), a join follows only an event, with 10 % scaled
    by the paper's events over ours (0.2 here), so 199 joins end near event 995."""
    w = meghdoot_workload(peer_names(200), 300, 2000, seed=2, events_scale=0.5,
                          order="joins_with_events")
    kinds = [op.msg.type for op in w.ops]
    first_event = kinds.index(MsgType.PUBLISH)
    assert set(kinds[:first_event]) == {MsgType.SUBSCRIBE} and first_event == 300
    assert MsgType.SUBSCRIBE not in kinds[first_event:]
    joins = [i for i, k in enumerate(kinds) if k is MsgType.JOIN]
    assert len(joins) == 199 and w.meta["join_probability"] == pytest.approx(0.2)
    assert all(kinds[i - 1] is MsgType.PUBLISH for i in joins)
    events_before_last = kinds[:joins[-1]].count(MsgType.PUBLISH)
    assert events_before_last == pytest.approx(199 / 0.2, rel=0.15)


@pytest.mark.parametrize("order", ["interleaved", "joins_with_events"])
def test_the_stock_workload_is_exact_with_splits_and_replicas_on_120_peers(order: str) -> None:
    w = meghdoot_workload(peer_names(120), 1500, 1500, seed=4, join_probability=0.2,
                          order=order)
    peers: list[CheckedPeer] = []
    result = run(w, {"load_period_s": 1.0}, peers)
    delivered = assert_exactly_once(result, w)
    assert delivered > 1000, "workload too selective to test anything"
    live = [p for p in peers if p.zone is not None]
    assert len(live) == w.meta["n_peers"] == 120
    joins = Counter()
    for p in live:
        joins.update(p.join.by_mode)
    assert joins["split"] >= 10 and joins["replicate"] >= 10, joins  # both kinds happened
    assert sum(p.stuck for p in live) == 0


def test_each_split_rule_keeps_the_can_whole_and_delivers_exactly_once_on_60_peers() -> None:
    """The stock workload under each ``split_rule``: the invariants hold before every
    join and at the end (:class:`CheckedPeer`), every delivery the oracle owes is made
    once, and the rules build different CANs; halving's zones have sides of 2^-k."""
    w = meghdoot_workload(peer_names(60), 600, 400, seed=2, join_probability=0.5,
                          order="joins_with_events")
    zones: dict[str, set[can.Zone]] = {}
    for rule in can.SPLIT_RULES:
        peers: list[CheckedPeer] = []
        result = run(w, {"load_period_s": 1.0, "split_rule": rule}, peers)
        assert assert_exactly_once(result, w) > 500, "workload too selective"
        live = [p for p in peers if p.zone is not None]
        assert len(live) == w.meta["n_peers"] == 60
        assert sum(p.join.by_mode["split"] for p in live) >= 20
        zones[rule] = {p.zone for p in live}
    assert len({frozenset(zs) for zs in zones.values()}) == 3, "two rules built one CAN"
    assert all(math.log2(hi - lo).is_integer() for z in zones["halving"]
               for lo, hi in zip(*z, strict=True))


def _joins_right_after_events(w: Workload, delay_s: float) -> Workload:
    """``w`` with each join ``delay_s`` after the event before it (rather than half a step):
    the join splits zones while that event still spreads."""
    ops, moved, t_event = [], {}, 0.0
    for op in w.ops:
        if op.msg.type is MsgType.PUBLISH:
            t_event = op.t_s
        elif op.msg.type is MsgType.JOIN:
            op = dataclasses.replace(op, t_s=round(t_event + delay_s, 9))
            moved[op.broker] = op.t_s
        ops.append(op)
    membership = {p: [[moved.get(p, spans[0][0]), None]]
                  for p, spans in w.meta["membership"].items()}
    meta = {**w.meta, "membership": membership, "join_times_s": sorted(moved.values())}
    return dataclasses.replace(w, ops=tuple(ops), meta=meta)


@pytest.mark.parametrize(("seed", "delay_s"), [(4, 0.002), (5, 0.003), (1, 0.002)])
def test_a_zone_split_while_an_event_spreads_passes_the_event_to_its_new_half(
        seed: int, delay_s: float) -> None:
    """An event sent for a whole zone that has since split reaches its new owner through
    the old one, once, even where the new owner has co-replicas by then (seed 1); without
    the handoff (``handoff_s: 0``) these runs miss 40, 60 and 29 deliveries."""
    w = _joins_right_after_events(meghdoot_workload(
        peer_names(120), 1500, 1500, seed=seed, join_probability=0.2,
        order="joins_with_events"), delay_s)
    peers: list[MeghdootCore] = []
    result = run(w, {"load_period_s": 1.0}, peers)
    assert assert_exactly_once(result, w) > 1000
    # A copy through an old owner came first, and the peers' final records say so.
    assert sum(r[1]["handoff_first"] for p in peers for r in p.final_records()) > 0
    blind = run(w, {"load_period_s": 1.0, "handoff_s": 0.0}, checked=False)
    want = {k: set(v) for k, v in expected_deliveries(w).items()}
    missed = sum(len(v - set(blind.deliveries.get(k, ()))) for k, v in want.items())
    assert missed > 0


def peer_with_loads(spread: int, subs: int, nbrs: Mapping[str, tuple[int, int]],
                    **params: Any) -> MeghdootCore:
    """A peer that received ``spread`` propagation messages, stores ``subs``
    subscriptions and last heard its neighbours' (propagation messages, subscriptions)."""
    core = make_core("meghdoot", "p0", (), {"seed_peer": "p0", **params})
    core.loads.spread.now = spread
    core.subs = {("c", i): None for i in range(subs)}  # only their number counts
    core._set_nbrs({p: can.whole(core.space.dims) for p in nbrs})
    core.loads.heard({p: [spread_p + subs_p, spread_p, subs_p]
                       for p, (spread_p, subs_p) in nbrs.items()})  # as their reports carry them
    return core


@pytest.mark.parametrize("seed", [1, 4, 5])
def test_a_newcomer_handles_what_reaches_it_before_its_grant(seed: int) -> None:
    """On 2 Mbit/s links a grant (the zone's subscriptions and table) takes longer than
    the neighbours' small update naming the newcomer, so events, updates and split
    notices reach it before its zone does; each join comes 4 ms before an event. Held
    until the grant, every delivery is made once and the final CAN is whole; dropped (as
    before), seed 1 applied a split to a zone it did not cut, and at 10,000 peers one
    event missed a new zone."""
    w = _joins_right_after_events(meghdoot_workload(
        peer_names(120), 1500, 1500, seed=seed, join_probability=0.2,
        order="joins_with_events"), -0.004)
    peers: list[MeghdootCore] = []
    # Not checked at each join: a grant may still be on its way then.
    result = run(w, {"load_period_s": 1.0}, peers, checked=False,
                 links=LinkModel(latency_ms=1.0, link_mbps=2.0))
    assert assert_exactly_once(result, w) > 1000
    check_can(peers)  # settled by the end: the zones tile the space


def test_a_peer_replicates_when_events_not_subscriptions_set_it_above_its_neighbours(
) -> None:
    nbrs = {"p1": (10, 10), "p2": (10, 10), "p3": (10, 10)}
    assert peer_with_loads(60, 10, nbrs).join.loaded_by_events()  # 4x their events: replicate
    assert not peer_with_loads(10, 60, nbrs).join.loaded_by_events()  # 4x their subs: split
    assert not peer_with_loads(20, 20, nbrs).join.loaded_by_events()  # both alike: split
    assert peer_with_loads(20, 20, nbrs, kappa=1.0).join.loaded_by_events()
    assert not peer_with_loads(0, 0, nbrs).join.loaded_by_events()  # no events: never
    # A zone storing no subscriptions replicates only in the path of more events than
    # its neighbours' (the standout rule, the default); the relative rule replicates it
    # whenever it has any.
    assert not peer_with_loads(10, 0, nbrs).join.loaded_by_events()
    assert peer_with_loads(40, 0, nbrs).join.loaded_by_events()
    assert peer_with_loads(1, 0, nbrs, replicate_rule="relative").join.loaded_by_events()
    assert not peer_with_loads(10, 60, nbrs, replicate_rule="relative").join.loaded_by_events()
    # The absolute rule compares the counts themselves: neighbours play no part.
    assert peer_with_loads(10, 10, {}, replicate_rule="absolute", kappa=1.0).join.loaded_by_events()
    assert not peer_with_loads(10, 11, nbrs, replicate_rule="absolute",
                               kappa=1.0).join.loaded_by_events()


def test_a_load_report_carries_the_k_heaviest_peers_heard_of() -> None:
    core = peer_with_loads(0, 0, {"p1": (0, 0), "p2": (0, 0)}, loaded_list=3)
    whole = can.zone_to_json(can.whole(core.space.dims))
    for nbr, top in (("p1", [["x", 5.0], ["y", 9.0]]), ("p2", [["z", 7.0], ["x", 6.0]])):
        load = Message(MsgType.LOAD, 1, nbr, 0,
                       {"loads": {nbr: [1, 0, 1]}, "top": top, "zone": whole})
        core.handle(Arrived(nbr, load), 1.0)
    out = core.handle(TimerFired("load"), 2.0)
    reports = [a.msg.payload for a in out if isinstance(a, Send)]
    assert sorted(a.link for a in out if isinstance(a, Send)) == ["p1", "p2"]
    # x's later report (6) replaced its earlier (5); the peer's own load (0) ranks last.
    assert reports[0]["top"] == [["y", 9.0], ["z", 7.0], ["x", 6.0]]


def test_the_neighbours_hearing_one_load_report_keep_one_record_of_it() -> None:
    """In the simulator a report's copies share their payload: its readers share one
    record of it (10,000 peers hold millions), and a later report is read anew."""
    readers = []
    for name in ("p1", "p2", "p3"):
        core = make_core("meghdoot", name, (), {"seed_peer": name})
        core._set_nbrs({"p0": can.whole(core.space.dims)})
        readers.append(core)
    whole = can.zone_to_json(can.whole(readers[0].space.dims))
    report = Message(MsgType.LOAD, 1, "p0", 0,
                     {"loads": {"p0": [7, 3, 4]}, "top": [], "zone": whole})
    for core in readers:
        core.handle(Arrived("p0", report), 1.0)
    kept = [core.loads.nbr_load["p0"] for core in readers]
    assert kept[0] == (7.0, 3, 4) and all(k is kept[0] for k in kept)
    later = Message(MsgType.LOAD, 2, "p0", 0,
                    {"loads": {"p0": [9, 5, 4]}, "top": [], "zone": whole})
    readers[0].handle(Arrived("p0", later), 2.0)
    assert readers[0].loads.nbr_load["p0"] == (9.0, 5, 4)
    assert readers[1].loads.nbr_load["p0"] == kept[1]


def _two_zones(**params: Any) -> tuple[list[MeghdootCore], list[MeghdootCore]]:
    """Replicas p1, p2, p3 of the lower half of the space and q1, q2 of the upper half,
    each peer's tables exact."""
    lower, upper = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    zones = {"p1": lower, "p2": lower, "p3": lower, "q1": upper, "q2": upper}
    cores = {}
    for name, zone in zones.items():
        core = make_core("meghdoot", name, (), {"seed_peer": "p1", **params})
        core.zone = zone
        core.group = {q for q, z in zones.items() if z == zone}
        core._set_nbrs({q: z for q, z in zones.items() if z != zone})
        cores[name] = core
    return [cores[p] for p in ("p1", "p2", "p3")], [cores[q] for q in ("q1", "q2")]


def test_a_subscriber_peer_notifies_a_client_once_per_event() -> None:
    """An event that reached a zone before its split and the new half again after it
    (traced at 10,000 peers: a replica handled it 15 ms before the split, and a
    neighbour of the new half then sent the half's owner a copy) has each subscription
    in the two halves' region matched twice; the subscriber's peer notifies its client
    once and counts the repeat, for ``notify_s``."""
    (host, mate, _), (other, _) = _two_zones(notify_s=10.0)

    def notify(sender: MeghdootCore, msg_id: int, clients: list[str], t_s: float
               ) -> list[tuple[str, int]]:
        msg = Message(MsgType.NOTIFY, msg_id, "e-p9", 1,
                      {"attrs": {"symbol": "IBM"}, "clients": clients})
        return [(a.client, a.msg.msg_id) for a in host.handle(Arrived(sender.broker, msg), t_s)
                if isinstance(a, Deliver)]

    assert notify(other, 1, ["c1", "c2"], 1.0) == [("c1", 1), ("c2", 1)]
    assert notify(mate, 1, ["c2", "c3"], 1.02) == [("c3", 1)]  # c2 had it
    assert notify(mate, 2, ["c2"], 1.1) == [("c2", 2)]  # another event
    assert host.counters()["notify_repeats"] == 1
    assert notify(other, 1, ["c1"], 11.5) == [("c1", 1)]  # forgotten after notify_s
    assert host.counters()["notify_repeats"] == 1


def _stale_after_two_splits(**params: Any) -> dict[str, MeghdootCore]:
    """A tiling the way a 150,000-subscription run left it when a message circled for
    65,536 hops (traced): ``a1`` holds the left half; the right half was split twice
    by its group ``g1, g2``, first giving ``n1`` its top half, then ``n2`` the upper half
    of what it kept. The splitter's table lacked ``a1`` (a co-replica's had it), so
    ``a1`` still takes ``g1, g2`` for the owners of the whole right half and knows
    neither newcomer, and the newcomers do not know ``a1``."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    rest, top = can.split(right, 1, 0.5)
    low, mid = can.split(rest, 1, 0.25)
    return _peers_with_tables({
        "a1": (left, {"g1": right, "g2": right}),
        "g1": (low, {"a1": left, "n2": mid}), "g2": (low, {"a1": left, "n2": mid}),
        "n2": (mid, {"g1": low, "g2": low, "n1": top}), "n1": (top, {"n2": mid})}, params)


def _peers_with_tables(tables: Mapping[str, tuple[can.Zone, Mapping[str, can.Zone]]],
                       params: Mapping[str, Any]) -> dict[str, MeghdootCore]:
    """Peers holding the given zones and neighbour tables (peers of one zone: a group)."""
    cores = {}
    for name, (zone, nbrs) in tables.items():
        core = make_core("meghdoot", name, (), {"seed_peer": "a1", **params})
        core.zone = zone
        core.group = {q for q, (z, _) in tables.items() if z == zone}
        core._set_nbrs(nbrs)
        cores[name] = core
    return cores


def _route_by_hand(cores: Mapping[str, MeghdootCore], first: str, msg: Message,
                   limit: int = 10_000) -> None:
    """Pass ``msg``, arriving at ``first``, and every message it causes, peer to peer in
    the order sent (at most ``limit`` messages)."""
    _deliver_all(cores, [("x9", first, msg)], limit)


@pytest.mark.parametrize("loop_hops", [8, 10_000])
def test_a_message_circling_on_a_stale_table_corrects_it_and_arrives(loop_hops: int) -> None:
    """``a1`` sends a subscription for a point of ``n1``'s zone to ``g1, g2``; they, not
    holding it, send it back to ``a1``, their nearest neighbour to it. Past ``loop_hops``
    the ``g`` peer passing it on tells ``a1`` its zone and introduces ``n2``, and the
    subscription reaches ``n1`` by ``n2``; without that, it circles until ``max_hops``
    and is dropped."""
    cores = _stale_after_two_splits(loop_hops=loop_hops, max_hops=200)
    point = (0.75, 0.8, *[0.5] * (len(cores["a1"].zone[0]) - 2))
    sub = Message(MsgType.SUBSCRIBE, 1, "c1", 1,
                  {"filter": [], "point": list(point), "peer": "a1", "client": "c1"})
    _route_by_hand(cores, "a1", sub)
    counts = {k: sum(c.counters()[k] for c in cores.values())
              for k in ("route_corrections", "route_dropped")}
    if loop_hops < 200:
        assert list(cores["n1"].subs) == [("c1", 1)]
        assert counts["route_dropped"] == 0 and counts["route_corrections"] >= 1
        assert cores["a1"].nbrs["g1"] == cores["g1"].zone and "n2" in cores["a1"].nbrs
        assert max(cores["n1"].sub_hops) <= loop_hops + 4  # the next round after it
    else:
        assert not cores["n1"].subs
        assert counts == {"route_corrections": 0, "route_dropped": 1}


@pytest.mark.parametrize("loop_hops", [8, 10_000])
def test_two_peers_that_both_lack_the_owner_pass_a_message_on_past_the_loop(
        loop_hops: int) -> None:
    """``b1`` and ``b2`` both abut the owner ``o`` of the point and neither knows it (as
    traced at 150,000 subscriptions, after a split neither was told of); each is the
    other's nearest to the point, so greedy routing passes the subscription between
    them. Past ``loop_hops`` it goes on to the nearest peer not on its trail, ``r``,
    which knows ``o``; without that, it is dropped at ``max_hops``."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    b1, rest = can.split(right, 1, 0.25)
    b2, r = can.split(rest, 1, 0.5)
    cores = _peers_with_tables({
        "o": (left, {"r": r}), "b1": (b1, {"b2": b2}), "b2": (b2, {"b1": b1, "r": r}),
        "r": (r, {"o": left, "b2": b2})}, {"loop_hops": loop_hops, "max_hops": 200})
    point = (0.45, 0.3, *[0.5] * (len(left[0]) - 2))
    sub = Message(MsgType.SUBSCRIBE, 1, "c1", 1,
                  {"filter": [], "point": list(point), "peer": "b1", "client": "c1"})
    _route_by_hand(cores, "b1", sub)
    dropped = sum(c.counters()["route_dropped"] for c in cores.values())
    if loop_hops < 200:
        assert list(cores["o"].subs) == [("c1", 1)] and dropped == 0
    else:
        assert not cores["o"].subs and dropped == 1


def _deliver_all(cores: Mapping[str, MeghdootCore], queue: list[tuple[str, str, Message]],
                 limit: int = 10_000) -> list[tuple[str, str]]:
    """Deliver ``queue`` ((sender, receiver, message), in order) and every message it
    causes, each in the order sent; the (client, event key) of each delivery made."""
    delivered: list[tuple[str, str]] = []
    for _ in range(limit):
        if not queue:
            return delivered
        sender, to, m = queue.pop(0)
        for a in cores[to].handle(Arrived(sender, m), 1.0):
            if isinstance(a, Send):
                queue.append((to, a.link, a.msg))
            elif isinstance(a, Deliver):
                delivered.append((a.client, msg_key(a.msg)))
    raise AssertionError("messages still moving")


def _sends_of(sender: str, actions: Sequence[Any]) -> list[tuple[str, str, Message]]:
    return [(sender, a.link, a.msg) for a in actions if isinstance(a, Send)]


@pytest.mark.parametrize(("mates", "relay_s"), [(False, 1.0), (True, 1.0), (False, 0.0)])
def test_two_neighbours_splitting_at_once_tell_each_others_newcomer(mates: bool,
                                                                   relay_s: float) -> None:
    """``a`` and ``c`` hold the two halves of the space (with ``mates``, ``c`` has a
    co-replica ``d``) and split at once, before either hears of the other's split (two
    joins whose messages cross, as large grants make them at 150,000 subscriptions):
    each newcomer's table comes from its splitter's, so ``n1`` holds ``c``'s old zone
    and ``n2`` ``a``'s, and neither hears of the other from its own splitter. After the
    messages settle every table is exact: the peers of a zone that split pass on to its
    newcomer, for ``relay_s``, the zone changes they hear of; without (``relay_s: 0``)
    the two newcomers' tables stay stale."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    group = {"c": right, "d": right} if mates else {"c": right}
    params = {"relay_s": relay_s}
    cores = _peers_with_tables({"a": (left, dict(group)),
                                **{g: (right, {"a": left}) for g in group}}, params)
    for name in ("n1", "n2"):
        cores[name] = make_core("meghdoot", name, (), {"seed_peer": "a1", **params})
    queue = [*_sends_of("a", cores["a"].join.split("n1", (1, 0.5), 0, 1.0)),
             *_sends_of("c", cores["c"].join.split("n2", (1, 0.5), 0, 1.0))]
    _deliver_all(cores, queue)
    if relay_s > 0:
        check_can(list(cores.values()))
    else:
        assert "n2" not in cores["n1"].nbrs and cores["n1"].nbrs["c"] == right


def test_a_split_reaches_the_neighbours_only_a_co_replica_knew() -> None:
    """``a`` and ``b`` hold the left half, ``y`` the right; ``b``'s table has ``y`` and
    ``a``'s lacks it (an update that reached ``b`` only, as traced at 150,000
    subscriptions). ``a`` splits: ``b``, told whom ``a`` told, tells ``y`` and
    introduces it to the newcomer and to ``a``, so every table is exact."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    cores = _peers_with_tables({"a": (left, {}), "b": (left, {"y": right}),
                                "y": (right, {"a": left, "b": left})}, {})
    cores["n"] = make_core("meghdoot", "n", (), {"seed_peer": "a1"})
    _deliver_all(cores, _sends_of("a", cores["a"].join.split("n", (1, 0.5), 0, 1.0)))
    check_can(list(cores.values()))


@pytest.mark.parametrize(("b_told", "handoff_s", "want"), [
    (False, 1.0, [("s1", "e1:1")]), (True, 1.0, [("s1", "e1:1")]), (False, 0.0, [])])
def test_an_event_meeting_both_halves_of_a_split_reaches_the_half_every_view_leaves_to_another(
        b_told: bool, handoff_s: float, want: list[tuple[str, str]]) -> None:
    """One attribute, so dimension 0 is its start ("left") and 1 its end ("up"). ``l1``
    and ``l2`` hold ``Z``, above ``b``'s zone and left of ``c``'s; ``l1`` splits ``Z`` on
    dimension 0, keeping the left half ``L`` (with the one subscription) and giving the
    right ``U`` to ``u``, and its update has not reached ``b`` yet (unless ``b_told``), as
    a split's updates leave a large group's splitter one after another. The event's
    point is in ``c``'s zone and its region meets ``L``, ``U`` and ``b``'s zone. Under the
    paper's duplicate rule every view leaves ``L`` to another: ``u`` leaves ``L`` to
    ``b``, below both; ``b``, which still holds ``Z`` whole, leaves ``Z`` to ``c``, right
    of both; ``c`` knows only ``U``. Traced at 10,000 peers and 25,000 subscriptions (a
    zone of 51 replicas). For ``handoff_s`` after its grant the newcomer passes an event
    meeting its sibling half to one of its peers; without (``handoff_s: 0``) the one
    matching subscription misses the event."""
    space = can.Space([can.Attribute("a0", "num", 0, 1)])
    lo_half, hi_half = can.split(can.whole(space.dims), 1, 0.5)
    left, c_zone = can.split(hi_half, 0, 0.5)
    b_zone, z = can.split(left, 1, 0.75)
    tables = {"l1": (z, {"b": b_zone, "c": c_zone}), "l2": (z, {"b": b_zone, "c": c_zone}),
              "b": (b_zone, {"l1": z, "l2": z, "c": c_zone, "d": lo_half}),
              "c": (c_zone, {"l1": z, "l2": z, "b": b_zone, "d": lo_half}),
              "d": (lo_half, {"b": b_zone, "c": c_zone})}
    params = {"space": space.to_json(), "handoff_s": handoff_s}
    cores = _peers_with_tables(tables, params)
    cores["u"] = make_core("meghdoot", "u", (), {"seed_peer": "a1", **params})
    sub = Message(MsgType.SUBSCRIBE, 1, "s1", 1, {
        "filter": filter_to_json([Predicate("a0", "range", 0.1, 0.9)]),
        "point": [0.1, 0.9], "peer": "d", "client": "s1"})
    _route_by_hand(cores, "d", sub)
    split = _sends_of("l1", cores["l1"].join.split("u", (0, 0.25), 0, 1.0))
    held = [m for m in split if m[1] == "b" and not b_told]
    _deliver_all(cores, [m for m in split if m not in held])
    assert cores["u"].nbrs["l1"] == cores["l1"].zone and cores["c"].nbrs["u"] == cores["u"].zone
    event = Message(MsgType.PUBLISH, 1, "e1", 0, {"attrs": {"a0": 0.6}})
    assert _deliver_all(cores, [("x9", "c", event)]) == want
    _deliver_all(cores, held)
    check_can(list(cores.values()))


def test_a_load_report_older_than_a_split_update_does_not_bring_back_the_old_zone() -> None:
    """``g``'s zone splits and the half it keeps no longer abuts ``a``'s: ``a`` drops it.
    A report ``g`` sent before the split, arriving after the update (as random
    workloads made it), names the old zone; ``a`` keeps its table exact."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    cores = _peers_with_tables({"a": (left, {"g": right})}, {})
    _, far = can.split(right, 0, 0.75)  # the half g keeps, not beside a's zone
    cores["a"].handle(Arrived("g", Message(MsgType.ZONE, 1, "g", 0, {
        "update": {"g": can.zone_to_json(far)}})), 1.0)
    assert "g" not in cores["a"].nbrs
    report = Message(MsgType.LOAD, 2, "g", 0, {"loads": {"g": [1, 0, 1]}, "top": [],
                                               "zone": can.zone_to_json(right)})
    cores["a"].handle(Arrived("g", report), 1.01)
    assert "g" not in cores["a"].nbrs


def test_a_peer_listing_a_zone_that_split_away_is_corrected_by_the_report_it_sends_there(
        ) -> None:
    """``g``'s zone splits: ``g`` keeps the far half and ``n`` gets the near one, beside
    ``a``'s zone. ``a`` was never told (a newcomer whose table, copied from its splitter,
    predates the split: the 50,000-subscription run's stale entries). ``a``'s load report
    goes to ``g``, which answers with its zone and introduces ``n``: ``a``'s table is
    exact after one load period, and nothing answers a report from a neighbour."""
    left, right = can.split(can.whole(can.space_named("stock").dims), 0, 0.5)
    near, far = can.split(right, 0, 0.75)
    cores = _peers_with_tables({"a": (left, {"g": right}), "g": (far, {"n": near}),
                                "n": (near, {"a": left, "g": far})}, {})
    report = _sent(cores["a"].handle(TimerFired("load"), 1.0))
    assert list(report) == ["g"]
    answer = _sent(cores["g"].handle(Arrived("a", Message(MsgType.LOAD, 1, "a", 0,
                                                           report["g"])), 1.1))
    assert list(answer) == ["a"]
    cores["a"].handle(Arrived("g", Message(MsgType.ZONE, 2, "g", 0, answer["a"])), 1.2)
    assert cores["a"].nbrs == {"n": near}
    assert cores["a"].counters()["report_corrections"] == 0
    assert cores["g"].counters()["report_corrections"] == 1
    again = _sent(cores["a"].handle(TimerFired("load"), 2.0))
    assert list(again) == ["n"]
    assert _sent(cores["n"].handle(Arrived("a", Message(MsgType.LOAD, 3, "a", 0,
                                                         again["n"])), 2.1)) == {}


@pytest.mark.parametrize(("assignment", "message"), [
    ("report_rule=sometimes", "report_rule: bad value 'sometimes'; allowed: str in "
                              "{periodic, on_change}"),
    ("report_change=0", "report_change: bad value 0; allowed: float > 0"),
    ("report_change=-0.5", "report_change: bad value -0.5; allowed: float > 0"),
    ("heartbeat_periods=0", "heartbeat_periods: bad value 0; allowed: int >= 1")])
def test_a_bad_reading_of_load_reports_is_refused_in_one_line(assignment: str,
                                                               message: str) -> None:
    from experiments.plan import compile_plan
    from experiments.spec import SpecError, load_spec
    with pytest.raises(SpecError) as err:
        compile_plan(load_spec("meghdoot-peers", [f"routing.params.{assignment}"]))
    assert str(err.value).startswith(f"routing.params.meghdoot.{message}")
    assert "\n" not in str(err.value)


def test_a_hop_limit_the_frame_cannot_carry_is_refused_in_one_line() -> None:
    from experiments.plan import compile_plan
    from experiments.spec import SpecError, load_spec
    with pytest.raises(SpecError) as err:
        compile_plan(load_spec("meghdoot-peers", ["routing.params.max_hops=65536"]))
    assert str(err.value).startswith("routing.params.meghdoot.max_hops: bad value 65536; "
                                     "allowed: int >= 1 and <= 65535")


def _sent(out: Sequence[Any]) -> dict[str, dict[str, Any]]:
    return {a.link: a.msg.payload for a in out if isinstance(a, Send)}


def test_a_replicated_zone_reports_its_loads_once_to_each_neighbour_peer() -> None:
    (p1, p2, p3), _ = _two_zones()
    whole = can.zone_to_json(p1.zone)
    for mate, load in ((p2, [5, 1, 4]), (p3, [6, 2, 4])):
        report = Message(MsgType.LOAD, 1, mate.broker, 0,
                         {"loads": {mate.broker: load}, "top": [], "zone": whole})
        p1.handle(Arrived(mate.broker, report), 1.0)
    sent = _sent(p1.handle(TimerFired("load"), 2.0))  # p1 reports for the zone
    assert sorted(sent) == ["p2", "p3", "q1", "q2"]
    assert list(sent["p2"]["loads"]) == ["p1"]  # its own load to its co-replicas
    assert sent["q1"]["group"] == ["p1", "p2", "p3"]
    assert {p: list(x) for p, x in sent["q1"]["loads"].items()} == {
        "p1": [0, 0, 0], "p2": [5.0, 1, 4], "p3": [6.0, 2, 4]}
    assert sorted(_sent(p2.handle(TimerFired("load"), 2.0))) == ["p1", "p3"]
    # Our first reading, every peer to every neighbour peer, as an ablation:
    (_, p2, _), _ = _two_zones(load_reports="peer")
    assert sorted(_sent(p2.handle(TimerFired("load"), 2.0))) == ["p1", "p3", "q1", "q2"]


def _downs(core: MeghdootCore, t_s: float) -> list[str]:
    """The peers ``core`` declares failed at its load tick at ``t_s``."""
    return [r.fields["peer"] for r in core.handle(TimerFired("load"), t_s)
            if isinstance(r, Record) and r.kind == "can_peer_down"]


def test_a_zone_report_vouches_for_the_replicas_it_names_two_periods_longer() -> None:
    (p1, _, _), (q1, _) = _two_zones(load_period_s=1.0, failure_periods=3)
    ticks = [k + 0.5 for k in range(8)]
    downs = [_downs(q1, ticks[0])]  # every peer's silence counts from here
    q1.handle(Arrived("p1", Message(MsgType.LOAD, 1, "p1", 0, {
        "loads": {"p1": [0, 0, 0]}, "top": [], "zone": can.zone_to_json(p1.zone),
        "group": ["p1", "p2", "p3"]})), 1.0)
    downs += [_downs(q1, t) for t in ticks[1:]]
    # The silent reporter (and q1's silent co-replica) after three more periods; the
    # peers it named two periods later (by then one of them would have noticed and
    # reported in its place).
    assert downs == [[], [], [], [], ["p1", "q2"], [], ["p2", "p3"], []]


def test_a_peer_stalled_for_many_periods_declares_no_one_failed_on_waking() -> None:
    """Silence counts in the detector's own periods: a broker process that got no CPU
    for 20 periods fires its timer once on waking, then reads what queued up."""
    _, (q1, _) = _two_zones(load_period_s=1.0, failure_periods=3)
    assert _downs(q1, 0.5) == [] and _downs(q1, 20.5) == []
    assert sorted(q1.nbrs) == ["p1", "p2", "p3"] and q1.group == {"q1", "q2"}
    assert _downs(q1, 21.5) == [] and _downs(q1, 22.5) == []
    assert _downs(q1, 23.5) == ["p1", "p2", "p3", "q2"]  # still silent: now they are


@pytest.mark.parametrize("p3_left", [False, True])
def test_a_reporter_tells_its_neighbours_of_a_failed_co_replica(p3_left: bool) -> None:
    (p1, p2, _), (q1, _) = _two_zones(load_period_s=1.0, failure_periods=3)
    for t in (0.5, 1.5, 2.5, 3.5):  # p2 reports every period, p3 is silent
        p1.handle(TimerFired("load"), t)
        p1.handle(Arrived("p2", Message(MsgType.LOAD, 1, "p2", 0, {
            "loads": {"p2": [0, 0, 0]}, "top": [], "zone": can.zone_to_json(p2.zone)})), t)
    out = p1.handle(TimerFired("load"), 4.5)  # p3 silent for four of p1's periods
    sent = _sent(out)
    assert sent["q1"] == sent["q2"] == {"update": {"p3": None}, "failed": ["p3"]}
    assert p1.group == {"p1", "p2"}
    q1.handle(Arrived("p1", next(a.msg for a in out if isinstance(a, Send)
                                 and a.link == "q1")), 3.5)
    assert "p3" not in q1.nbrs
    if p3_left:  # it had only been slow, then left
        q1.handle(Arrived("p3", Message(MsgType.ZONE, 3, "p3", 0,
                                        {"update": {"p3": None}})), 4.0)
    # A report of p1's naming p3 again (p3 was slow; or p1 sent it before it heard
    # that p3 left) takes it back, unless p3 left.
    q1.handle(Arrived("p1", Message(MsgType.LOAD, 9, "p1", 0, {
        "loads": {}, "top": [], "zone": can.zone_to_json(p1.zone),
        "group": ["p1", "p2", "p3"]})), 5.0)
    assert q1.nbrs.get("p3") == (None if p3_left else p1.zone)


def test_an_on_change_peer_reports_what_moved_to_every_neighbour_and_a_new_one_alone(
        ) -> None:
    """Under ``report_rule: on_change`` q1, its zone's reporter, sends its reports to
    all (its own to q2, its zone's to p1 to p3) when a load moved by more than the share
    or a heartbeat is due, to a peer new in its table alone, and else nothing."""
    _, (q1, _) = _two_zones(report_rule="on_change", report_change=0.5, heartbeat_periods=3)

    def tick(t_s: float, events: int = 0) -> list[str]:
        for _ in range(events):
            q1.loads.events.count()
        return sorted(_sent(q1.handle(TimerFired("load"), t_s)))

    everyone = ["p1", "p2", "p3", "q2"]
    assert tick(1.0) == everyone  # its first report
    assert tick(2.0) == []  # nothing moved
    q1._update("p4", q1.nbrs["p1"])  # a replica joins the neighbour zone
    assert tick(3.0) == ["p4"]
    assert tick(4.0) == [*everyone[:3], "p4", "q2"]  # the heartbeat, three periods on
    assert tick(5.0, events=4) == [*everyone[:3], "p4", "q2"]  # its load 0 -> 4
    assert tick(6.0, events=3) == []  # 4 -> 3: by less than half
    assert tick(7.0) == [*everyone[:3], "p4", "q2"]  # 3 -> 0
    # The first reading, as before: every period, to all.
    _, (q1, _) = _two_zones(report_rule="periodic")
    assert [tick(t) for t in (1.0, 2.0)] == [everyone, everyone]


def test_an_emulated_broker_s_peer_takes_the_reading_of_its_config(tmp_path: Path) -> None:
    """The emulated runtime hosts the same core: a broker's config carries the reading,
    and its core re-arms its load timer by name at every tick, as the simulator's."""
    from experiments.plan import compile_plan
    from experiments.runs.brokers import broker_configs
    from experiments.spec import load_spec
    from nodes.emulated.auth import new_secret
    from nodes.emulated.broker import BrokerConfig, build_core
    plan = compile_plan(load_spec("meghdoot-emulated", [
        "routing.params.report_rule=on_change", "routing.params.heartbeat_periods=4"]))
    configs = broker_configs(plan, "meghdoot", emulate_link=False, log_dir=tmp_path)
    core = build_core(BrokerConfig.from_json({**configs[min(configs)], "secret": new_secret()}))
    assert isinstance(core, MeghdootCore) and core.loads.on_change and core.loads.beat == 4
    out = core.handle(TimerFired("load"), 1.0)  # the seed peer: no neighbours, no reports
    assert [a for a in out if not isinstance(a, Record)] == [SetTimer("load", 1.0)]


@pytest.mark.parametrize(("rule", "declared_at"), [("periodic", 4), ("on_change", 7)])
def test_on_change_peers_count_silence_in_heartbeat_periods(rule: str,
                                                           declared_at: int) -> None:
    """Three silent load periods, or three silent heartbeats of two periods each."""
    _, (q1, _) = _two_zones(load_period_s=1.0, failure_periods=3, report_rule=rule,
                            heartbeat_periods=2)
    downs = [_downs(q1, k + 0.5) for k in range(9)]
    assert downs == [["p1", "p2", "p3", "q2"] if k == declared_at else [] for k in range(9)]


def test_the_paper_rule_sends_fewer_event_messages_than_none() -> None:
    w = meghdoot_workload(peer_names(60), 600, 600, seed=5, join_probability=0.3)
    # Plain CAN joins: many zones, whatever the loads (none are reported here).
    paper = run(w, {"dup_rule": "paper", "load_period_s": 0.0, "join": "can"})
    none = run(w, {"dup_rule": "none", "load_period_s": 0.0, "join": "can"})
    assert assert_exactly_once(paper, w) == assert_exactly_once(none, w)
    assert paper.ims_by_type["PUBLISH"] < none.ims_by_type["PUBLISH"]


# ---- greedy routing ---------------------------------------------------------------------


def build_can(n: int, dims_attrs: int, seed: int) -> list[MeghdootCore]:
    """A CAN of ``n`` peers built by plain CAN joins (no subscriptions, no events)."""
    space = can.Space([can.Attribute(f"a{i}", "num", 0, 1) for i in range(dims_attrs)])
    rng = random.Random(seed)
    ops = []
    clients = {}
    for i in range(1, n):
        name = peer_name(i)
        clients[f"j{name}"] = name
        ops.append(ClientOp(0.05 * i, f"j{name}", name, Message(
            MsgType.JOIN, 1, f"j{name}", payload={"bootstrap": peer_name(rng.randrange(i))})))
    clients["c"] = peer_name(0)
    w = Workload(Schema({}), clients, tuple(ops), {})
    cores: list[MeghdootCore] = []

    def factory(broker: str, _nbrs: Sequence[str], _p: Mapping[str, Any]) -> MeghdootCore:
        c = make_core("meghdoot", broker, (), {"seed_peer": peer_name(0), "space": space.to_json(),
                                      "join": "can", "load_period_s": 0.0})
        cores.append(c)
        return c

    g = nx.Graph()
    g.add_nodes_from(peer_name(i) for i in range(n))
    simulate(g, w, factory, SimSettings(seed=1, on_demand=LINKS, log_messages=False))
    assert all(c.zone is not None for c in cores), "a join did not complete"
    return cores


def greedy_hops(peers: Sequence[MeghdootCore], start: MeghdootCore, point: can.Point) -> int:
    """Hops greedy routing takes from ``start`` to the owner of ``point`` (each peer's
    own table, as the core routes)."""
    by_name = {p.broker: p for p in peers}
    at, hops = start, 0
    while not can.contains(at.zone, point):
        ranked = min(((can.distance2(z, point), 0 if can.contains(z, point) else 1), ps[0])
                     for z, ps in at._zones())
        assert ranked[0] < (can.distance2(at.zone, point), 1), "no progress"
        at, hops = by_name[ranked[1]], hops + 1
        assert hops <= len(peers)
    return hops


def test_greedy_routing_reaches_the_owner_from_every_peer() -> None:
    peers = build_can(300, 2, seed=1)
    check_can(peers)
    rng = random.Random(2)
    for start in peers:
        for _ in range(5):
            greedy_hops(peers, start, tuple(rng.random() for _ in range(4)))


def test_routing_hops_grow_as_d_times_the_dth_root_of_n() -> None:
    dims = 4  # two attributes: N^(1/4) grows 3.2x from 100 to 10,000 peers
    rng = random.Random(3)
    means = {}
    for n in (100, 1000, 10_000):
        peers = build_can(n, dims // 2, seed=n)
        hops = [greedy_hops(peers, rng.choice(peers), tuple(rng.random() for _ in range(dims)))
                for _ in range(400)]
        means[n] = sum(hops) / len(hops)
    # Least squares through the origin on x = d N^(1/d); each mean within 20 % of the fit.
    xs = {n: dims * n ** (1 / dims) for n in means}
    a = sum(xs[n] * means[n] for n in means) / sum(x * x for x in xs.values())
    for n, m in means.items():
        assert m == pytest.approx(a * xs[n], rel=0.2), (means, a)
    # A logarithmic growth would fit the three far worse: the ratio 10,000 / 100 peers.
    assert means[10_000] / means[100] > 2.2, means


# ---- failures and leaves ----------------------------------------------------------------


def _peers_at(w: Workload, t_s: float, **params: Any) -> list[MeghdootCore]:
    """The peers as they are at ``t_s`` (the run is deterministic up to then)."""
    peers: list[MeghdootCore] = []
    run(Workload(w.schema, w.clients, tuple(op for op in w.ops if op.t_s < t_s), w.meta),
        {"load_period_s": 0.5, **params}, peers)
    return [p for p in peers if p.zone is not None]


def _ended(w: Workload, ops: list[ClientOp], t_s: float, peers: Sequence[str]) -> Workload:
    """``w`` with ``ops`` (sorted here), ``peers`` members until ``t_s``, and one client
    ``j<peer>`` each (for their membership ops)."""
    membership = {**w.meta["membership"],
                  **{p: [[w.meta["membership"][p][0][0], t_s]] for p in peers}}
    return Workload(w.schema, {**w.clients, **{f"j{p}": p for p in peers}},
                    tuple(sorted(ops, key=lambda op: op.t_s)),
                    {**w.meta, "membership": membership})


def _without(w: Workload, t0: float, t1: float, peer: str) -> list[ClientOp]:
    """``w``'s ops but those in [t0, t1) and every later op of ``peer``."""
    return [op for op in w.ops if not (t0 <= op.t_s < t1) and not (
        op.broker == peer and op.t_s >= t0)]


@pytest.mark.parametrize(("role", "beat"), [("reporter", 0), ("co-replica", 0),
                                            ("reporter", 2), ("co-replica", 2)])
def test_a_crashed_replica_is_dropped_and_every_later_event_is_delivered(role: str,
                                                                         beat: int) -> None:
    """The victim reports its zone's loads to the neighbours (the first of its group by
    name), or only its own to its co-replicas (then the reporter tells the neighbours);
    every period (``beat`` 0), or on change with a heartbeat every ``beat`` periods."""
    base = meghdoot_workload(peer_names(40), 400, 600, seed=6, join_probability=0.5,
                             step_s=0.05)
    t_crash = base.ops[len(base.ops) // 2].t_s + 0.01
    victim = min(p.broker for p in _peers_at(base, t_crash) if len(p.group) > 1
                 and p.broker != "p0000" and (p.broker == min(p.group)) == (role == "reporter"))
    # Three silent periods (or heartbeats), and the period it is noticed in.
    detect_s = (3 * max(beat, 1) + 1) * 0.5
    ops = _without(base, t_crash, t_crash + detect_s, victim)
    ops.append(ClientOp(t_crash, f"j{victim}", victim,
                        Message(MsgType.CRASH, 9, f"j{victim}")))
    w = _ended(base, ops, t_crash, [victim])
    peers: list[MeghdootCore] = []
    reading = {"report_rule": "on_change", "heartbeat_periods": beat} if beat else {}
    result = run(w, {"load_period_s": 0.5, **reading}, peers, checked=False)
    want = {k: sorted(v) for k, v in expected_deliveries(w).items() if v}
    got = {k: sorted(v) for k, v in result.deliveries.items()}
    late = {k for k in want if _published(w, k) > t_crash + detect_s}
    assert len(late) > 50
    assert {k: got.get(k) for k in late} == {k: want[k] for k in late}
    survivors = [p for p in peers if p.broker != victim]
    check_can([p for p in survivors])  # the victim is gone from every table
    assert all(victim not in p.group and victim not in p.nbrs for p in survivors)


def _published(w: Workload, key: tuple[str, int]) -> float:
    return next(op.t_s for op in w.ops if op.msg.type is MsgType.PUBLISH
                and (op.msg.origin, op.msg.msg_id) == key)


def _takeover_s(beat: int) -> float:
    """Detection (three silent load periods, and up to two more: a peer's last message
    may trail its last report by a period) and the coordinator's wait for every
    neighbour's notice (three of its periods), at load periods of 0.5 s; in heartbeat
    periods of ``beat`` load periods under ``on_change``."""
    return (3 + 2 + 3) * beat * 0.5


def _lone_owner_crash(*, join: str, sibling: bool, beat: int = 1
                      ) -> tuple[Workload, str, float]:
    """A workload in which the lone owner (not the seed) storing the most subscriptions
    (then mirror copies) among those whose zone merges with a neighbour's (``sibling``) or
    with none crashes half way; no operation during its takeover. The workload, the
    victim, the crash time."""
    base = meghdoot_workload(peer_names(40), 400, 600, seed=6, join_probability=0.5,
                             step_s=0.05)
    t_crash = base.ops[len(base.ops) // 2].t_s + 0.01
    lone = [p for p in _peers_at(base, t_crash, join=join, mirrors=True)
            if len(p.group) == 1 and p.broker != "p0000"
            and any(can.merged(p.zone, z) for z in p.nbrs.values()) == sibling]
    victim = max(lone, key=lambda p: (len(p.subs), len(p.mirror_subs), p.broker))
    assert len(victim.subs) + len(victim.mirror_subs) >= 10, "too little to lose"
    ops = _without(base, t_crash, t_crash + _takeover_s(beat), victim.broker)
    ops.append(ClientOp(t_crash, f"j{victim.broker}", victim.broker,
                        Message(MsgType.CRASH, 9, f"j{victim.broker}")))
    return _ended(base, ops, t_crash, [victim.broker]), victim.broker, t_crash


@pytest.mark.parametrize(("join", "sibling", "mirrors", "beat"), [
    ("meghdoot", True, True, 0), ("meghdoot", False, True, 0), ("can", False, True, 0),
    ("meghdoot", True, False, 0), ("meghdoot", True, True, 2)],
    ids=["merged", "adopted", "freed", "no-mirrors", "merged-on-change"])
def test_a_crashed_lone_owner_s_subscriptions_come_back_from_their_mirror_copies(
        join: str, sibling: bool, mirrors: bool, beat: int) -> None:
    """A neighbour zone that merges with the failed zone takes it over, else a replica of
    a neighbour zone adopts it, else (plain CAN joins make no replicas) a lone neighbour
    that hands its own zone to its sibling; the subscriptions come back from their mirror
    copies, and the copies the failed peer held from their owners. Without mirrors the
    zone and its subscriptions are lost."""
    w, victim, t_crash = _lone_owner_crash(join=join, sibling=sibling, beat=max(beat, 1))
    peers: list[MeghdootCore] = []
    reading = {"report_rule": "on_change", "heartbeat_periods": beat} if beat else {}
    result = run(w, {"load_period_s": 0.5, "join": join, "mirrors": mirrors, **reading},
                 peers, checked=False)
    want = {k: sorted(v) for k, v in expected_deliveries(w).items() if v}
    got = {k: sorted(v) for k, v in result.deliveries.items()}
    late = {k for k in want if _published(w, k) > t_crash + _takeover_s(max(beat, 1))}
    assert len(late) > 50
    missed = {k for k in late if got.get(k) != want[k]}
    if not mirrors:
        assert missed, "the crash cost nothing: the test shows nothing"
        return
    assert not missed
    survivors = [p for p in peers if p.broker != victim]
    check_can(survivors)  # one taker: the zones still tile the space; copies by the rule
    members = {p.broker for p in peers if p.zone is not None} | {victim}
    subscribed = {(op.msg.origin, op.msg.msg_id) for op in w.ops
                  if op.msg.type is MsgType.SUBSCRIBE and op.broker in members}
    assert {k for p in survivors if p.zone is not None for k in p.subs} == subscribed
    assert result.record_counts.get("can_zone_orphaned", 0) == 0


def test_a_replica_leaves_and_a_lone_owner_hands_its_zone_to_its_sibling() -> None:
    base = meghdoot_workload(peer_names(30), 300, 400, seed=7, join_probability=0.5,
                             step_s=0.05)
    t_leave = base.ops[len(base.ops) // 2].t_s + 0.01
    probe = _peers_at(base, t_leave)
    replica = min(p.broker for p in probe if len(p.group) > 1 and p.broker != "p0000")
    alone = min(p.broker for p in probe if len(p.group) == 1
                and any(can.merged(p.zone, z) for z in p.nbrs.values()))
    ops = [op for op in base.ops if op.broker not in (replica, alone) or op.t_s < t_leave]
    for i, peer in enumerate((replica, alone)):
        ops.append(ClientOp(t_leave + i * 0.001, f"j{peer}", peer,
                            Message(MsgType.LEAVE, 9, f"j{peer}")))
    w = _ended(base, ops, t_leave, [replica, alone])
    peers: list[MeghdootCore] = []
    result = run(w, {"load_period_s": 0.5}, peers)  # invariants hold throughout
    assert_exactly_once(result, w)
    by_name = {p.broker: p for p in peers}
    assert by_name[replica].zone is None and by_name[alone].zone is None


@pytest.mark.parametrize(("join", "mirrors"), [("meghdoot", False), ("meghdoot", True),
                                               ("can", True)])
def test_a_lone_owner_without_a_sibling_leaves_its_zone_to_one_adopter(join: str,
                                                                     mirrors: bool) -> None:
    """A replica of a neighbour zone adopts it (Meghdoot's joins make replicas), or with
    none (plain CAN joins) a lone neighbour that first hands its own zone to its sibling;
    events are delivered exactly once and the invariants hold at every later join."""
    base = meghdoot_workload(peer_names(30), 300, 400, seed=7, join_probability=0.5,
                             step_s=0.05)
    t_leave = base.ops[len(base.ops) // 2].t_s + 0.01
    lone = [p for p in _peers_at(base, t_leave, join=join) if len(p.group) == 1
            and not any(can.merged(p.zone, z) for z in p.nbrs.values())]
    alone = max(lone, key=lambda p: (len(p.subs), p.broker)).broker
    ops = [op for op in base.ops if op.broker != alone or op.t_s < t_leave]
    ops.append(ClientOp(t_leave, f"j{alone}", alone, Message(MsgType.LEAVE, 9, f"j{alone}")))
    w = _ended(base, ops, t_leave, [alone])
    peers: list[MeghdootCore] = []
    result = run(w, {"load_period_s": 0.5, "join": join, "mirrors": mirrors}, peers)
    assert_exactly_once(result, w)
    assert "can_zone_orphaned" not in result.record_counts
    # The adoption, and with plain CAN joins the adopter's sibling merging its zone.
    assert result.record_counts["can_took_over"] == (2 if join == "can" else 1)


def test_a_neighbour_from_before_a_split_that_a_merge_brings_back_is_not_taken_for_failed(
        ) -> None:
    """Zones of [0, 1]²: s keeps its bottom-left quarter, the leaver l (bottom right)
    hands it its own; q (top right), a neighbour of s long ago and dropped at a split,
    comes back with the merge. Its silence counts from the merge, not from when s last
    heard it: declared failed at the next tick, it fell out of the merged zone's table."""
    space = can.Space([can.Attribute("a", "num", 0, 100)]).to_json()
    s = make_core("meghdoot", "s", (), {"space": space, "seed_peer": "s", "load_period_s": 0.5})
    quarter = {"s": ((0.0, 0.0), (0.5, 0.5)), "l": ((0.5, 0.0), (1.0, 0.5)),
               "r": ((0.0, 0.5), (0.5, 1.0)), "q": ((0.5, 0.5), (1.0, 1.0))}
    s.zone = quarter["s"]
    s._set_nbrs({"l": quarter["l"], "r": quarter["r"]})
    s._ticks, s._heard_tick = 40, {"l": 40, "r": 40, "q": 2}  # q last heard at tick 2
    give = Message(MsgType.ZONE, 1, "l", 0, {
        "takeover": can.zone_to_json(quarter["l"]), "subs": [], "mirrors": [],
        "nbrs": {"s": can.zone_to_json(quarter["s"]), "q": can.zone_to_json(quarter["q"])}})
    s.handle(Arrived("l", give), 20.0)
    assert s.zone == ((0.0, 0.0), (1.0, 0.5)) and set(s.nbrs) == {"r", "q"}
    s._ticks += 1
    assert s.repair.detect_failures(20.5) == [] and set(s.nbrs) == {"r", "q"}
    assert s.repair.counts() == {"took_over_left": 1}


# ---- crashes and leaves in the workload, end to end ----------------------------------------


def churn_spec(join: str, **workload: Any) -> dict[str, Any]:
    """64 peers, 600 subscriptions and 600 events, a tenth of the peers crashing and a
    tenth leaving from half of the stream on, mirrors on."""
    return {
        "name": "meghdoot-churn-64", "seed": 3, "topology": {"name": "peers", "params": {"n": 64}},
        "links": {"bw_mbps": 1000, "delay_ms": 1}, "fidelity": {"links": 0},
        "capture": {"enabled": False},
        "workload": {"kind": "meghdoot", "n_subscriptions": 600, "n_events": 600,
                     "join_probability": 0.5, "step_s": 0.05, "crash_fraction": 0.1,
                     "leave_fraction": 0.1, **workload},
        "routing": {"algorithms": ["meghdoot"], "links": "on-demand",
                    "params": {"load_period_s": 0.5, "bucket_s": 0.05, "mirrors": True,
                               "join": join}}}


def owed(w: Workload) -> dict[tuple[str, int], list[str]]:
    """Brute force: each event's subscribers, every subscription tried against it, that
    subscribed at least ``settle_s`` before it and whose peer had not crashed or left
    by then (a subscriber's peer is live when it subscribes)."""
    settle_s, gone = w.meta["settle_s"], {**w.meta["crashes_s"], **w.meta["leaves_s"]}
    subs = [(op.t_s + settle_s, op.client, op.broker, filter_from_json(op.msg.payload["filter"]))
            for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    out = {}
    for op in w.ops:
        if op.msg.type is MsgType.PUBLISH:
            attrs, t = op.msg.payload["attrs"], op.t_s
            clients = sorted(c for t0, c, b, f in subs
                             if t0 <= t < gone.get(b, float("inf")) and matches(f, attrs))
            if clients:
                out[op.msg.key] = clients
    return out


class Checkpoints:
    """When the whole CAN is checked (:func:`check_can`) while the peers come and go:
    at each join, a load period before each peer goes (its zone stands still then) and
    at the stream's first operation after it (the zone repaired); each by the first
    peer that handles anything at or after that time, over the peers not crashed by
    then."""

    def __init__(self, w: Workload, period_s: float) -> None:
        churn = {**w.meta["crashes_s"], **w.meta["leaves_s"]}
        after = [next(op.t_s for op in w.ops if op.t_s > t) for t in churn.values()]
        times = [op.t_s for op in w.ops if op.msg.type is MsgType.JOIN]
        self.due = sorted([*times, *(t - period_s for t in churn.values()), *after])
        self.crashes_s = w.meta["crashes_s"]
        self.checked = 0

    def at(self, peers: Sequence[MeghdootCore], now_s: float) -> None:
        if self.checked < len(self.due) and self.due[self.checked] <= now_s:
            while self.checked < len(self.due) and self.due[self.checked] <= now_s:
                self.checked += 1
            check_can([p for p in peers if self.crashes_s.get(p.broker, now_s) >= now_s])


class ChurnCheckedPeer(MeghdootCore):
    """A peer that checks the CAN at the :class:`Checkpoints` it meets first."""

    def __init__(self, everyone: list[MeghdootCore], checks: Checkpoints, broker: str,
                 params: Mapping[str, Any]) -> None:
        super().__init__(broker, (), params)
        self.everyone, self.checks = everyone, checks
        everyone.append(self)

    def handle(self, event: Event, now_s: float) -> list:
        self.checks.at(self.everyone, now_s)
        return super().handle(event, now_s)


@pytest.mark.parametrize(("join", "beat"), [("meghdoot", 0), ("can", 0), ("meghdoot", 3)],
                         ids=["meghdoot", "can", "meghdoot-on-change"])
def test_crashes_and_leaves_in_the_workload_leave_every_member_its_events_and_a_whole_can(
        join: str, beat: int) -> None:
    """Through the run plan: a tenth of 64 peers crash and a tenth leave mid-stream.
    Every event reaches exactly the members the brute-force oracle owes it to, the zones
    tile the space (tables exact, replicas alike, mirror copies by their rule) before
    and after every change, and the peers count the repairs: plain CAN joins make no
    replicas, so each crash is a lone owner's, taken over, its subscriptions back from
    their mirror copies. With ``beat``, loads are reported on change with a heartbeat
    every ``beat`` load periods: silence, and so every takeover, is counted in
    heartbeats, and the workload holds still that much longer around each crash."""
    spec = churn_spec(join)
    if beat:
        spec["routing"]["params"].update(report_rule="on_change", heartbeat_periods=beat)
    plan = compile_plan(parse_spec(spec), netem=False)
    w, alg = plan.workload, plan.algorithm("meghdoot")
    assert w is not None
    assert (len(w.meta["crashes_s"]), len(w.meta["leaves_s"])) == (6, 6)
    # churn_times_s of the params: detection, slack, the coordinator's wait, one period
    assert w.meta["repair_s"] == (3 + 2 + 3 + 1) * max(beat, 1) * 0.5
    peers: list[MeghdootCore] = []
    checks = Checkpoints(w, 0.5)

    def factory(broker: str, _nbrs: Sequence[str], _p: Mapping[str, Any]) -> MeghdootCore:
        return ChurnCheckedPeer(peers, checks, broker, alg.broker_params(broker))

    result = simulate(plan.overlay, w, factory,
                      SimSettings(seed=1, on_demand=on_demand_links(plan), log_messages=False,
                                  until_s=plan.phase_s()))
    want = owed(w)
    assert {k: sorted(v) for k, v in expected_deliveries(w).items() if v} == want
    assert {k: sorted(v) for k, v in result.deliveries.items()} == want
    assert sum(map(len, want.values())) > 2000
    assert checks.checked == len(checks.due) > 60
    alive = [p for p in peers if p.broker not in w.meta["crashes_s"]]
    check_can(alive)
    done: Counter[str] = Counter()
    for p in alive:
        done.update(p.repair.counts())
    assert done["left"] == 6 and done["orphaned"] == 0 and done["declared_down"] > 6
    if beat:  # a crashed lone owner found by its missing heartbeats and taken over
        assert done["took_over_crashed"] >= 1
    if join == "can":
        assert done["took_over_crashed"] == 6 and done["recovered"] > 0


def test_the_shipped_churn_spec_delivers_everything_and_reports_its_repairs(
        tmp_path: Path) -> None:
    """``meghdoot-churn`` at 32 peers and a shorter stream: nothing missing, unexpected
    or twice; the zones at the end tile the space with exact tables; ``repairs`` gives the
    churn and what was repaired, the same read from the logs (as the emulated runtime
    reads them) and from the simulator's result."""
    from experiments.runs.simulated import run_simulation
    from experiments.spec import load_spec
    small = ["topology.params.n=32", "workload.n_subscriptions=300",
             "workload.n_events=300"]
    blocks = []
    for logs in (False, True):
        _, summaries = run_simulation(compile_plan(load_spec("meghdoot-churn", small),
                                                   netem=False),
                                      tmp_path / str(logs), log_messages=logs)
        s = summaries["meghdoot"]
        assert (s["missing"], s["unexpected"], s["duplicates"]) == (0, 0, 0)
        assert s["expected_deliveries"] > 500
        m = s["meghdoot"]
        assert m["zones"]["volume_sum"] == pytest.approx(1.0) and m["zones"]["peers"] == 26
        assert m["tables"]["inexact_peers"] == 0
        blocks.append(m["repairs"])
    assert blocks[0] == blocks[1]
    repairs = blocks[0]
    assert (repairs["crashes"], repairs["leaves"], repairs["left"]) == (3, 3, 3)
    assert repairs["declared_down"] >= 3 and repairs["orphaned"] == 0


@pytest.mark.parametrize(("change", "error"), [
    ({"crash_fraction": -0.1}, r"workload\.crash_fraction: bad value -0\.1; allowed: a number "
                               r"in \[0, 1\]"),
    ({"leave_fraction": 1.5}, r"workload\.leave_fraction: bad value 1\.5; allowed: a number "
                              r"in \[0, 1\]"),
    ({"churn_from": 2}, r"workload\.churn_from: bad value 2; allowed: a number in \[0, 1\]"),
    ({"crash_fraction": 0.6, "leave_fraction": 0.5},
     r"workload\.crash_fraction: bad value 0\.6 with leave_fraction 0\.5; allowed: the two "
     r"sum to at most 1"),
    ({"crash_fraction": True}, r"workload\.crash_fraction: bad value True; allowed: a finite "
                               r"number"),
    ({"failure_periods": 0}, r"workload\.crash_fraction: meghdoot would never find a crashed "
                             r"peer; allowed: 0, or routing\.params\.load_period_s and "
                             r"failure_periods > 0"),
    ({"join_probability": 0.01, "churn_from": 0.0, "crash_fraction": 1.0, "leave_fraction": 0},
     r"workload\.churn_from: after step \d+ no peer but the first is live to go"),
])
def test_bad_crash_and_leave_fractions_are_refused_in_one_line(change: dict[str, Any],
                                                              error: str) -> None:
    from experiments.spec import SpecError
    spec = churn_spec("meghdoot", **{k: v for k, v in change.items() if k != "failure_periods"})
    if "failure_periods" in change:
        spec["routing"]["params"]["failure_periods"] = change["failure_periods"]
    with pytest.raises(SpecError, match=f"^{error}") as err:
        compile_plan(parse_spec(spec), netem=False)
    assert "\n" not in str(err.value)


def test_the_workload_s_default_holds_are_what_the_core_s_default_params_call_for() -> None:
    import inspect

    from nodes.cores.meghdoot_repair import churn_times_s
    args = inspect.signature(meghdoot_workload).parameters
    defaults = resolve_params("meghdoot", PARAMS, {})
    assert (args["lead_s"].default, args["repair_s"].default) == churn_times_s(defaults)
    assert churn_times_s({**defaults, "report_rule": "on_change"}) == (2.0, 90.0)
    assert churn_times_s({**defaults, "failure_periods": 0}) == (0.0, 0.0)


def test_without_crashes_or_leaves_the_stream_is_what_it_always_was() -> None:
    """The churn's draws are its own: fractions 0 give the stream of before, op for op,
    and a churned stream starts as that one until its first churner goes (from half of
    the stream on)."""
    kw = {"seed": 5, "join_probability": 0.3, "step_s": 0.05}
    before = meghdoot_workload(peer_names(40), 300, 300, **kw)
    assert before == meghdoot_workload(peer_names(40), 300, 300, crash_fraction=0.0, **kw)
    churned = meghdoot_workload(peer_names(40), 300, 300, crash_fraction=0.2,
                                leave_fraction=0.1, churn_from=0.5, **kw)
    first = min([*churned.meta["crashes_s"].values(), *churned.meta["leaves_s"].values()])
    head = [op for op in churned.ops if op.t_s < first]  # held still from its step on
    assert head == list(before.ops[:len(head)])
    assert (len(churned.meta["crashes_s"]), len(churned.meta["leaves_s"])) == (8, 4)
    assert first > before.ops[len(before.ops) // 2].t_s


def test_a_long_simulation_reports_its_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    import nodes.sim.simulator as sim_module

    monkeypatch.setattr(sim_module, "PROGRESS_EVERY_S", 0.0)
    w = meghdoot_workload(peer_names(5), 400, 400, seed=8)
    shares: list[float] = []
    simulate(_graph(w), w, "meghdoot",
             SimSettings(core_params={"load_period_s": 0.0},
                         derived={b: {"seed_peer": "p0000"} for b in _graph(w).nodes}, seed=1,
                         on_demand=LINKS, log_messages=False, progress=shares.append))
    assert len(shares) == len(w.ops) // 256
    # Each operation weighs the peers joined when it runs: the subscriptions stored by
    # the first peer alone count for little beside the events after the joins.
    joins = {op.broker for op in w.ops if op.msg.type is MsgType.JOIN}
    members, weights = 5 - len(joins), []
    for op in sorted(w.ops, key=lambda op: op.t_s):  # ties: the workload's order (stable)
        weights.append(members)
        members += op.msg.type is MsgType.JOIN
    done = list(itertools.accumulate(weights))
    assert shares == [done[k - 1] / done[-1] for k in range(256, len(w.ops) + 1, 256)]
    assert joins and shares[0] < 256 / len(w.ops)


def test_bucket_runs_count_like_a_counter_even_out_of_order() -> None:
    keys = [3, 3, 3, 5, 9, 9, 4, 5, 5, 12]  # a late message (4, 5) after bucket 9
    runs = Runs()
    for k in keys:
        runs.count(k)
    assert runs.items() == sorted(Counter(keys).items())
    assert list(runs) == runs.items()  # what the final record holds, iterated
    assert len(runs.keys) == 6  # the runs, not one entry per message
    in_order = Runs()
    for k in sorted(keys):
        in_order.count(k)
    assert list(in_order) == runs.items()


def test_a_load_report_naming_the_receiver_leaves_its_own_entry_as_it_was() -> None:
    """The receiver knows its own load best: a neighbour's loadedPeerList naming it
    neither changes its entry nor adds one; the others' loads are taken as floats."""
    core = make_core("meghdoot", "p0", (), {"seed_peer": "p0"})
    core.loads.loaded = {"p0": 7, "p1": 1.0}
    core.loads.merge_loaded([["p2", 5], ["p0", 99.0], ["p1", 3]])
    assert core.loads.loaded == {"p0": 7, "p1": 3.0, "p2": 5.0}
    assert [type(v) for v in core.loads.loaded.values()] == [int, float, float]
    core.loads.loaded = {"p1": 1.0}
    core.loads.merge_loaded([["p0", 99.0], ["p3", 2.5]])
    assert core.loads.loaded == {"p1": 1.0, "p3": 2.5}
