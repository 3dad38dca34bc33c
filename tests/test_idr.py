"""OctopiA's inter-cluster dynamic routing (core ``idr``) in the simulator.

The paper's four cases are built on its Fig. 7 SCOT (the path a-b-c times K3) with link
states forced at chosen brokers: which links carry which notification copies, with which
CIV, exactly as the case says, and every subscriber gets every notification once. Random
SCOTs with random forced overloads check exactly-once against the oracle, and without
congestion IDR routes exactly as SNR does.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from scot_cases import pairs, random_scot, small_workload

from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec
from nodes.cores import make_core, overlay_params, resolve_params
from nodes.cores.congestion import LST_PARAMS
from nodes.cores.idr import IdrCore
from nodes.cores.interface import Action, Event, LinkStats, LinkWindow, Record, RoutingCore, Send
from nodes.messages import Message, MsgType
from nodes.sim.result import summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from topologies.scot import scot_overlay

NOTIFY = (MsgType.PUBLISH, MsgType.CIV_NOTIFY)
Copy = tuple[str, str, str, tuple[int, ...]]  # (from broker, to broker, type, CIV)
# An ``idr`` record: (broker, case, links avoided, carrier link, CIV carried)
Decision = tuple[str, str, tuple[str, ...], str, tuple[int, ...]]


def _window(queue_len: int, *, overloaded: bool) -> LinkWindow:
    # CE 2 with a queue over theta is overloaded; CE 0.5 (draining) is free whatever the
    # queue.
    return LinkWindow(count_in=2 if overloaded else 1, count_out=1 if overloaded else 2,
                      queue_len=queue_len)


class ForcedIdr(IdrCore):
    """IDR whose Link Status Table is fixed by the test (real windows are ignored), and
    which notes every notification copy it sends."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any],
                 forced: Mapping[str, LinkWindow], copies: list[Copy],
                 decisions: list[Decision] | None = None) -> None:
        super().__init__(broker, neighbours, {**resolve_params("idr", LST_PARAMS, {}), **params})
        self.lst.update(forced)
        self._copies = copies
        self._decisions = decisions if decisions is not None else []

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, LinkStats):
            return []
        actions = super().handle(event, now_s)
        self._copies.extend(
            (self.broker, a.link, a.msg.type.name, tuple(a.msg.payload.get("civ", ())))
            for a in actions if isinstance(a, Send) and a.msg.type in NOTIFY)
        self._decisions.extend(
            (self.broker, a.fields["case"], tuple(a.fields["avoided"]), a.fields["carrier"],
             tuple(a.fields["civ"]))
            for a in actions if isinstance(a, Record) and a.kind == "idr")
        return actions


def run_forced(overlay: nx.Graph, w: Workload, forced: Mapping[tuple[str, str], LinkWindow],
               algorithm: str = "idr", decisions: list[Decision] | None = None
               ) -> tuple[list[Copy], Any]:
    """Simulate ``w`` with IDR whose links ``forced[(broker, neighbour)]`` have the given
    window (``algorithm='snr'`` runs SNR instead, for comparison); returns the
    notification copies sent, sorted, and the result. IDR's decisions go to
    ``decisions``."""
    derived = overlay_params("snr", overlay)
    copies: list[Copy] = []

    def factory(broker: str, neighbours: Sequence[str], params: Mapping[str, Any]
                ) -> RoutingCore:
        p = {**derived[broker], **params}
        if algorithm == "snr":
            core = make_core("snr", broker, neighbours, p)
            original = core.handle

            def noting(event: Event, now_s: float) -> list[Action]:
                actions = original(event, now_s)
                copies.extend((broker, a.link, a.msg.type.name, ())
                              for a in actions if isinstance(a, Send) and a.msg.type in NOTIFY)
                return actions

            core.handle = noting  # type: ignore[method-assign]
            return core
        mine = {nb: win for (b, nb), win in forced.items() if b == broker}
        return ForcedIdr(broker, neighbours, p, mine, copies, decisions)

    result = simulate(overlay, w, factory, SimSettings(seed=0))
    return sorted(copies), result


SYMBOL_ADV = [["Symbol", "range", "a", "m"]]
SYMBOL_SUB = [["Symbol", "=", "ibm"]]


def fig7_workload(publisher_at: str, subscribers_at: Mapping[str, str],
                  n_pubs: int = 3) -> Workload:
    """One publisher (``p``) and subscribers by name -> broker, all interested in every
    publication; setup before 1 s, publications from 2 s."""
    clients = {"p": publisher_at, **subscribers_at}
    ops = [ClientOp(0.0, "p", publisher_at,
                    Message(MsgType.ADVERTISE, 1, "p", payload={"filter": SYMBOL_ADV}))]
    ops += [ClientOp(0.5, s, b, Message(MsgType.SUBSCRIBE, 1, s,
                                        payload={"filter": SYMBOL_SUB}))
            for s, b in sorted(subscribers_at.items())]
    ops += [ClientOp(2.0 + 0.1 * i, "p", publisher_at,
                     Message(MsgType.PUBLISH, 2 + i, "p",
                             payload={"attrs": {"Symbol": "ibm"}, "t_pub": 2.0 + 0.1 * i}))
            for i in range(n_pubs)]
    return Workload(schema=None, clients=clients, ops=tuple(ops), meta={})  # type: ignore[arg-type]


def copies_of_one(copies: list[Copy], n_pubs: int) -> list[Copy]:
    """The copies of one publication: every publication took the same routes (the
    states are fixed), so each copy occurs exactly ``n_pubs`` times."""
    one = sorted(set(copies))
    assert sorted(c for c in one for _ in range(n_pubs)) == copies
    return one


FIG7 = scot_overlay([("a", "b"), ("b", "c")], 3)
# P on b2 (cluster 2); a subscriber in each other cluster and two in the host cluster.
FIG7_SUBS = {"s0": "a0", "s1": "c1", "s2": "a2", "s3": "c2"}
OVER = _window(30, overloaded=True)


def check_case(forced: Mapping[tuple[str, str], LinkWindow], expected: list[Copy],
               decisions: list[Decision], subscribers: Mapping[str, str] = FIG7_SUBS
               ) -> list[Copy]:
    """Three publications from P on b2 take exactly the ``expected`` copies each, and the
    brokers log exactly the ``decisions`` for each."""
    w = fig7_workload("b2", subscribers)
    logged: list[Decision] = []
    copies, result = run_forced(FIG7, w, forced, decisions=logged)
    assert copies_of_one(copies, 3) == sorted(expected)
    assert sorted(logged) == sorted(d for d in decisions for _ in range(3))
    assert pairs(result.deliveries) == pairs(expected_deliveries(w))  # each pair once
    assert "unhandled" not in result.record_counts
    return expected


def test_snr_reference_routes_of_the_fig7_case() -> None:
    copies, _ = run_forced(FIG7, fig7_workload("b2", FIG7_SUBS), {}, algorithm="snr")
    assert copies_of_one(copies, 3) == sorted([
        ("b2", "a2", "PUBLISH", ()), ("b2", "c2", "PUBLISH", ()),
        ("b2", "b0", "PUBLISH", ()), ("b2", "b1", "PUBLISH", ()),
        ("b0", "a0", "PUBLISH", ()), ("b1", "c1", "PUBLISH", ())])


def test_no_congestion_routes_exactly_as_snr() -> None:
    w = fig7_workload("b2", FIG7_SUBS)
    snr, _ = run_forced(FIG7, w, {}, algorithm="snr")
    idr, result = run_forced(FIG7, w, {})
    assert idr == snr
    assert result.record_counts.get("idr", 0) == 0


def test_case_i_civ_n_on_the_free_target_ilink() -> None:
    # b2's iLink into cluster 0 is overloaded: nothing goes on it; the CIV-N (CIV {0})
    # rides the copy into cluster 1, whose broker b1 serves cluster 0 with its own iLink.
    check_case({("b2", "b0"): OVER}, [
        ("b2", "a2", "PUBLISH", ()), ("b2", "c2", "PUBLISH", ()),
        ("b2", "b1", "CIV_NOTIFY", (0,)),
        ("b1", "c1", "PUBLISH", ()), ("b1", "b0", "PUBLISH", ()),
        ("b0", "a0", "PUBLISH", ())], [("b2", "i", ("b0",), "b1", (0,))])


def test_case_i_picks_the_free_ilink_with_the_shortest_queue() -> None:
    ov = scot_overlay([("a", "b")], 4)
    w = fig7_workload("a3", {"s0": "b0", "s1": "b1", "s2": "b2"})
    forced = {("a3", "a0"): OVER, ("a3", "a1"): _window(7, overloaded=False),
              ("a3", "a2"): _window(2, overloaded=False)}
    copies, result = run_forced(ov, w, forced)
    assert copies_of_one(copies, 3) == sorted([
        ("a3", "a1", "PUBLISH", ()), ("a3", "a2", "CIV_NOTIFY", (0,)),
        ("a2", "a0", "PUBLISH", ()), ("a2", "b2", "PUBLISH", ()),
        ("a1", "b1", "PUBLISH", ()), ("a0", "b0", "PUBLISH", ())])
    assert pairs(result.deliveries) == pairs(expected_deliveries(w))


def test_case_ii_civ_n_piggybacked_on_the_least_loaded_free_target_alink() -> None:
    # Both target iLinks overloaded: the copy going down the aLink to c2 anyway (the
    # shorter of the two free aLink queues) carries CIV {0, 1}; c2 takes both clusters
    # over. b2 sends 2 messages where SNR sends 4.
    check_case({("b2", "b0"): OVER, ("b2", "b1"): OVER,
                ("b2", "a2"): _window(5, overloaded=False),
                ("b2", "c2"): _window(1, overloaded=False)}, [
        ("b2", "a2", "PUBLISH", ()), ("b2", "c2", "CIV_NOTIFY", (0, 1)),
        ("c2", "c0", "PUBLISH", ()), ("c2", "c1", "PUBLISH", ()),
        ("c0", "b0", "PUBLISH", ()), ("b0", "a0", "PUBLISH", ())],
        [("b2", "ii", ("b0", "b1"), "c2", (0, 1))])


def test_case_iii_the_hand_over_continues_to_later_brokers() -> None:
    # As case ii, but at c2 the iLink into cluster 0 is overloaded too: c2 applies the
    # same rule and passes CIV {0} on with its copy into cluster 1 (case i at c2); c1
    # finally serves cluster 0 over its own iLink.
    check_case({("b2", "b0"): OVER, ("b2", "b1"): OVER, ("b2", "a2"): OVER,
                ("c2", "c0"): OVER}, [
        ("b2", "a2", "PUBLISH", ()), ("b2", "c2", "CIV_NOTIFY", (0, 1)),
        ("c2", "c1", "CIV_NOTIFY", (0,)),
        ("c1", "c0", "PUBLISH", ()),
        ("c0", "b0", "PUBLISH", ()), ("b0", "a0", "PUBLISH", ())],
        [("b2", "ii", ("b0", "b1"), "c2", (0, 1)), ("c2", "i", ("c0",), "c1", (0,))])


def test_case_iv_nothing_free_least_overloaded_target_ilink() -> None:
    # No subscriber in the host cluster (no target aLink) and both target iLinks
    # overloaded: the CIV-N goes on the shorter overloaded queue (into cluster 1) with
    # CIV {0}; b1's own iLink into cluster 0 is free.
    subs = {"s0": "a0", "s1": "c1"}
    check_case({("b2", "b0"): _window(40, overloaded=True),
                ("b2", "b1"): _window(20, overloaded=True)}, [
        ("b2", "b1", "CIV_NOTIFY", (0,)),
        ("b1", "c1", "PUBLISH", ()), ("b1", "b0", "PUBLISH", ()),
        ("b0", "a0", "PUBLISH", ())], [("b2", "iv", ("b0",), "b1", (0,))], subscribers=subs)


def test_a_single_overloaded_target_with_no_way_round_keeps_snr_copy() -> None:
    subs = {"s0": "a0"}
    check_case({("b2", "b0"): OVER}, [
        ("b2", "b0", "PUBLISH", ()), ("b0", "a0", "PUBLISH", ())], [], subscribers=subs)


def test_lst_record_only_when_the_overloaded_set_changes() -> None:
    idr = make_core("idr", "b2", sorted(FIG7.neighbors("b2")), overlay_params("idr", FIG7)["b2"])
    got = idr.handle(LinkStats(50.0, {"b0": OVER, "b1": _window(0, overloaded=False)}), 1.0)
    assert [(a.kind, dict(a.fields)) for a in got] == [("lst", {"overloaded": ["b0"]})]
    assert idr.handle(LinkStats(50.0, {"b0": OVER}), 1.05) == []  # unchanged: no record
    got = idr.handle(LinkStats(50.0, {"b0": _window(30, overloaded=False)}), 1.1)
    assert [(a.kind, dict(a.fields)) for a in got] == [("lst", {"overloaded": []})]


def _random_case(seed: int) -> tuple[nx.Graph, Workload, dict[tuple[str, str], LinkWindow]]:
    """A random SCOT and workload, with a random share of its directed links forced
    overloaded."""
    rng = random.Random(f"idr/{seed}")
    overlay = random_scot(rng)
    w = small_workload(overlay, seed)
    directed = sorted((a, b) for u, v in overlay.edges for a, b in ((u, v), (v, u)))
    share = rng.choice([0.2, 0.5, 0.9, 1.0])
    forced = {e: _window(rng.randint(11, 60), overloaded=True)
              for e in directed if rng.random() < share}
    return overlay, w, forced


@pytest.mark.parametrize("seed", range(30))
def test_random_forced_overloads_deliver_the_oracle_set_exactly_once(seed: int) -> None:
    overlay, w, forced = _random_case(seed)
    copies, result = run_forced(overlay, w, forced)
    expected = expected_deliveries(w)
    assert pairs(result.deliveries) == pairs(expected)
    s = summarize(result, expected)
    assert (s["missing"], s["duplicates"], s["unexpected"]) == (0, 0, 0)
    assert "unhandled" not in result.record_counts
    # Each target cluster is entered over exactly one iLink in both algorithms; IDR
    # enters over an overloaded one only when nothing else is free, so it never puts more
    # copies on the overloaded iLinks than SNR does on the same workload.
    snr, _ = run_forced(overlay, w, {}, algorithm="snr")
    ilinks = {e for e in forced if overlay.edges[e]["type"] == "iLink"}
    on_overloaded = sum((b, nb) in ilinks for b, nb, _, _ in copies)
    assert on_overloaded <= sum((b, nb) in ilinks for b, nb, _, _ in snr)


def test_the_random_cases_exercise_every_case() -> None:
    # Otherwise the property test above could pass with IDR never acting.
    decisions: list[Decision] = []
    for seed in range(30):
        overlay, w, forced = _random_case(seed)
        run_forced(overlay, w, forced, decisions=decisions)
    cases = Counter(case for _, case, _, _, _ in decisions)
    assert cases["i"] >= 50 and cases["ii"] >= 10 and cases["iv"] >= 50, cases
    assert any(len(civ) > 1 for *_, civ in decisions)  # hand-overs of several clusters


def test_simulated_demo_idr_routes_around_the_throttled_ilink(tmp_path: Path) -> None:
    """The demo spec in the simulator, with real statistics windows: the throttled iLink
    b0-b1 becomes overloaded under the burst and IDR hands cluster 1 over instead."""
    _, s = run_simulation(compile_plan(load_spec("demo")), tmp_path)
    for summary in s.values():
        assert summary["missing"] == summary["duplicates"] == summary["unexpected"] == 0
    on_link = {a: s[a]["scheduled_link_notifications"]["b0>b1"] for a in ("snr", "idr")}
    assert on_link["snr"] >= 1200 and on_link["idr"] < 0.9 * on_link["snr"], on_link
    assert s["idr"]["ims_by_type"]["CIV_NOTIFY"] > 0
    p95 = {a: s[a]["delay_ms"]["notification"]["p95"] for a in ("snr", "idr")}
    assert p95["idr"] < 0.5 * p95["snr"], p95
    assert s["idr"]["burst"]["queue"]["mean_len"] < s["snr"]["burst"]["queue"]["mean_len"]
