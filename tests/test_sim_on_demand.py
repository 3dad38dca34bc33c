"""The simulator with links opened on demand and membership over time: gossip at 2,000
nodes against the oracle, JOIN/LEAVE/CRASH with heartbeats, the dial/close/refusal
rules, fixed overlays untouched, and determinism."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import networkx as nx
import pytest

from nodes.cores.interface import (
    Action,
    Arrived,
    Disconnect,
    Event,
    FromClient,
    LinkDown,
    LinkStats,
    LinkUp,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.frames import frame_size
from nodes.logs import Ev, iter_jsonl
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.sim.links import LinkModel, underlay_latency
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.membership import churn_workload
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries
from nodes.workloads.stock import stock_workload


def _bare(names: Sequence[str]) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(names)
    return g


def _check_exactly_once(result: SimResult, w: Workload) -> int:
    """Every publication reached exactly the oracle's subscribers, each once; the number
    of deliveries."""
    expected = expected_deliveries(w)
    got = {k: sorted(v) for k, v in result.deliveries.items()}
    want = {k: sorted(v) for k, v in expected.items() if v}
    assert got == want  # sorted lists: a duplicate would show
    return sum(map(len, want.values()))


def _records(out: Path, node: str, ev: Ev) -> list[dict[str, Any]]:
    return list(iter_jsonl(out / f"{node}.jsonl", ev))


# ---- (a) gossip at 2,000 nodes --------------------------------------------------------


def test_gossip_on_2000_nodes_delivers_the_oracle_set_once_over_few_links(
        tmp_path: Path) -> None:
    n = 2000
    w = churn_workload(n, n_seeds=100, n_publishers=3, pubs_per_publisher=3,
                       join_gap_s=0.002, settle_s=1.0, seed=3)
    result = simulate(_bare(sorted(w.clients.values())), w, "gossip",
                      SimSettings(seed=1, on_demand=LinkModel(latency_ms=2.0, nic_mbps=100.0),
                                  out_dir=tmp_path))

    delivered = _check_exactly_once(result, w)
    assert delivered > 1000, "workload too selective to test anything"
    assert result.published == 9 and result.dials_failed == 0

    # Links: far below n^2, and exactly the `link` up records of the logs.
    ups = [(r["node"], r["link"], r["reason"]) for b in sorted(w.clients.values())
           for r in _records(tmp_path, b, Ev.LINK) if r["state"] == "up"]
    assert len(ups) == result.links_opened
    assert result.links_opened < n * n / 100
    # Each connection is two sides, one dialled and one accepted, and opened once.
    dialled = {(a, b) for a, b, why in ups if why == "dialled"}
    accepted = {(b, a) for a, b, why in ups if why == "accepted"}
    assert dialled == accepted and len(dialled) * 2 == len(ups)
    # Without heartbeats a node talks to its seed only, a publisher to every node: each
    # other node has one connection, each publisher n - 1, publishers share 3.
    p = len(w.meta["publishers"])
    assert len(ups) == 2 * ((n - 100 - p) + p * (n - 1) - p * (p - 1) // 2)


# ---- (b) membership over time ---------------------------------------------------------

HEARTBEAT_S, TIMEOUT_S, LATENCY_MS = 0.2, 1.0, 5.0


def _churn(seed: int = 4) -> Workload:
    return churn_workload(30, n_publishers=3, pubs_per_publisher=4, n_leave=3, n_crash=3,
                          rejoin=True, join_gap_s=0.02, churn_gap_s=0.5, settle_s=2.0,
                          seed=seed)


def _run_churn(w: Workload, out: Path | None) -> SimResult:
    # Heartbeats never stop: the run ends a few timeouts after the last publication.
    return simulate(_bare(sorted(w.clients.values())), w, "gossip",
                    SimSettings(core_params={"heartbeat_s": HEARTBEAT_S, "timeout_s": TIMEOUT_S},
                                seed=2, on_demand=LinkModel(latency_ms=LATENCY_MS), out_dir=out,
                                until_s=w.meta["phases"]["end_s"] + 3 * TIMEOUT_S))


def _members_at(w: Workload, t: float) -> set[str]:
    return {b for b, spans in w.meta["membership"].items()
            if any(j <= t and (leave is None or t < leave) for j, leave in spans)}


def test_join_leave_crash_with_heartbeats(tmp_path: Path) -> None:
    w = _churn()
    result = _run_churn(w, tmp_path)
    assert _check_exactly_once(result, w) > 0
    nodes = sorted(w.clients.values())
    downs = {b: [(r["t_mono"], r["member"]) for r in _records(tmp_path, b, Ev.RECORD)
                 if r["kind"] == "member_down"] for b in nodes}
    crashes, leaves = w.meta["crashes"], w.meta["leaves"]
    assert crashes and leaves

    bound_s = TIMEOUT_S + HEARTBEAT_S + LATENCY_MS / 1000
    for x, t_crash in crashes.items():
        # Live peers: members when it crashed that are still members at the deadline.
        peers = _members_at(w, t_crash) & _members_at(w, t_crash + bound_s) - {x}
        late = {b: [t for t, m in downs[b] if m == x] for b in peers}
        assert all(late.values()), f"peers that never reported {x}: " \
                                   f"{sorted(b for b, ts in late.items() if not ts)}"
        assert all(t_crash < ts[0] <= t_crash + bound_s + 1e-9 for ts in late.values()), late
    for x, t_leave in leaves.items():
        peers = _members_at(w, t_leave) - {x}
        saw = {b for b in peers for r in _records(tmp_path, b, Ev.RECV)
               if r["type"] == "LEAVE" and r["link"] == x}
        assert saw == peers, f"peers that missed {x}'s LEAVE: {sorted(peers - saw)}"
    reported = {m for b in nodes for _, m in downs[b]}
    assert reported == set(crashes), "member_down only for crashed nodes, never a leaver"

    # Membership records as the emulated broker writes them.
    x = sorted(leaves)[0]
    states = [r["state"] for r in _records(tmp_path, x, Ev.RECORD) if r["kind"] == "membership"]
    assert states == ["dormant", "joined", "left", "joined"]
    # Peers dialling a crashed node are refused; dials fail only then.
    assert result.dials_failed > 0
    failed = [r for b in nodes for r in _records(tmp_path, b, Ev.LINK)
              if r["state"] == "dial_failed"]
    assert len(failed) == result.dials_failed
    assert {r["link"] for r in failed} <= set(crashes)
    assert {r["reason"] for r in failed} == {"refused"}


# ---- (d) determinism ------------------------------------------------------------------


def _logs(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_on_demand_run_is_byte_identical_for_a_seed(tmp_path: Path) -> None:
    runs = {}
    for label, seed in (("a", 4), ("b", 4), ("c", 5)):
        _run_churn(_churn(seed), tmp_path / label)
        runs[label] = _logs(tmp_path / label)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]
    assert any(b'"state":"up"' in v for v in runs["a"].values())


# ---- (c) fixed links untouched ---------------------------------------------------------


def test_fixed_overlay_is_unchanged_with_on_demand_on(tmp_path: Path) -> None:
    g = nx.relabel_nodes(nx.random_labeled_tree(12, seed=3), lambda i: f"b{i:02d}")
    nx.set_edge_attributes(g, {e: {"bw_mbps": 10.0, "delay_ms": 2.0} for e in g.edges})
    w = stock_workload(sorted(g.nodes), n_publishers=2, n_subscribers=8, pubs_per_publisher=5,
                       publish_rate_hz=50.0, seed=1, phase_gap_s=0.2)
    static = simulate(g, w, "flood", SimSettings(seed=0, out_dir=tmp_path / "static"))
    lazy = simulate(g, w, "flood",
                    SimSettings(seed=0, out_dir=tmp_path / "lazy",
                                on_demand=LinkModel(latency_ms=50.0)))
    assert _logs(tmp_path / "static") == _logs(tmp_path / "lazy")
    assert static == lazy and lazy.links_opened == 0


# ---- the rules, one by one, with a scripted core --------------------------------------

EVENTS: list[tuple[float, str, str]] = []


def _name(event: Event) -> str:
    if isinstance(event, Arrived):
        return f"arrived {event.link} {event.msg.type.name} {event.msg.msg_id}"
    if isinstance(event, LinkUp | LinkDown):
        return f"{type(event).__name__} {event.link}"
    if isinstance(event, FromClient):
        return f"client {event.msg.type.name}"
    if isinstance(event, TimerFired):
        return f"timer {event.name}"
    assert isinstance(event, LinkStats)
    return "stats"


class Scripted:
    """Records its events in EVENTS; a client PUBLISH's payload ``do`` lists actions:
    ``["send", to, msg_id]`` or ``["disconnect", to]``."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]):
        self.broker = broker
        self.neighbours = tuple(neighbours)

    def handle(self, event: Event, now_s: float) -> list[Action]:
        EVENTS.append((round(now_s, 9), self.broker, _name(event)))
        if not isinstance(event, FromClient) or event.msg.type is not MsgType.PUBLISH:
            return []
        out: list[Action] = []
        for step in event.msg.payload["do"]:
            if step[0] == "send":
                out.append(Send(step[1], Message(MsgType.HEARTBEAT, step[2], self.broker)))
            else:
                out.append(Disconnect(step[1]))
        return out


SCHEMA = Schema({"x": "int"})


def _script(steps: Sequence[tuple[float, str, Any]], nodes: Sequence[str] = ("a", "b", "c"),
            ) -> Workload:
    """Ops ``(t, node, do)`` (do: a list of actions, or a MsgType for JOIN/LEAVE/CRASH)."""
    clients = {f"c{n}": n for n in nodes}
    ops = []
    for i, (t, node, do) in enumerate(steps):
        if isinstance(do, MsgType):
            payload: dict[str, Any] = {"bootstrap": "a"} if do is MsgType.JOIN else {}
            msg = Message(do, i + 1, f"c{node}", 0, payload)
        else:
            msg = Message(MsgType.PUBLISH, i + 1, f"c{node}", 0, {"attrs": {"x": 1}, "do": do})
        ops.append(ClientOp(t, f"c{node}", node, msg))
    return Workload(SCHEMA, clients, tuple(ops), {})


def _play(w: Workload, model: LinkModel | None = None, **kw: Any) -> list[tuple[float, str, str]]:
    EVENTS.clear()
    simulate(_bare(sorted(w.clients.values())), w, Scripted,
             SimSettings(seed=0, on_demand=model or LinkModel(latency_ms=10.0), window_ms=10_000.0,
                         **kw))
    return [e for e in EVENTS if not e[2].startswith(("client", "stats"))]


def test_a_dial_costs_one_round_trip_and_the_acceptor_hears_first() -> None:
    events = _play(_script([(1.0, "a", [["send", "b", 7], ["send", "b", 8]])]))
    assert events == [
        (1.02, "a", "LinkUp b"),  # SYN, SYN-ACK
        (1.03, "b", "LinkUp a"),  # the ACK with a's HELLO, before the first frame
        (1.03, "b", "arrived a HEARTBEAT 7"),
        (1.03, "b", "arrived a HEARTBEAT 8"),
    ]


def test_rates_serialise_through_the_nic() -> None:
    size = frame_size(Message(MsgType.HEARTBEAT, 7, "a"))
    model = LinkModel(latency_ms=10.0, nic_mbps=1.0)
    events = _play(_script([(1.0, "a", [["send", "b", 7], ["send", "c", 7]])]), model)
    arrivals = [t for t, _, what in events if what.startswith("arrived")]
    ser = size * 8 / 1e6
    assert arrivals == pytest.approx([1.03 + ser, 1.03 + 2 * ser])  # c waits for b's frame
    events = _play(_script([(1.0, "a", [["send", "b", 7], ["send", "c", 7]])]),
                   LinkModel(latency_ms=10.0, link_mbps=1.0))
    arrivals = [t for t, _, what in events if what.startswith("arrived")]
    assert arrivals == pytest.approx([1.03 + ser, 1.03 + ser])  # two links, no NIC


def test_disconnect_sends_what_is_queued_then_the_peer_hears_and_a_send_reopens() -> None:
    events = _play(_script([
        (1.0, "a", [["send", "b", 7], ["disconnect", "b"]]),  # before the link is up
        (2.0, "b", [["send", "a", 9]]),  # b's side is gone: b dials again
        (3.0, "a", [["disconnect", "b"], ["disconnect", "b"]]),  # the second does nothing
    ]))
    assert events == [
        (1.03, "b", "LinkUp a"),  # a closed before its side came up: it hears nothing
        (1.03, "b", "arrived a HEARTBEAT 7"),
        (1.03, "b", "LinkDown a"),  # the FIN, one link delay after the last bit left
        (2.02, "b", "LinkUp a"),
        (2.03, "a", "LinkUp b"),
        (2.03, "a", "arrived b HEARTBEAT 9"),
        (3.01, "b", "LinkDown a"),
    ]


def test_the_closer_still_receives_what_the_peer_sent_before_the_close() -> None:
    events = _play(_script([
        (1.0, "a", [["send", "b", 7]]),
        (2.0, "b", [["send", "a", 9]]),
        (2.005, "a", [["disconnect", "b"]]),  # b's frame is in flight
    ]))
    assert (2.01, "a", "arrived b HEARTBEAT 9") in events
    assert (2.015, "b", "LinkDown a") in events


def test_dials_to_dormant_and_dead_nodes_fail_after_a_round_trip(tmp_path: Path) -> None:
    w = _script([
        (0.5, "c", MsgType.JOIN),  # c joins here: dormant before
        (1.0, "a", [["send", "b", 7], ["send", "b", 8]]),
        (2.0, "c", MsgType.LEAVE),
        (3.0, "a", [["send", "c", 9]]),
        (4.0, "b", MsgType.CRASH),
        (5.0, "a", [["send", "b", 10]]),  # the link closed when b died
    ])
    EVENTS.clear()
    result = simulate(_bare(["a", "b", "c"]), w, Scripted,
                      SimSettings(seed=0, out_dir=tmp_path, on_demand=LinkModel(latency_ms=10.0),
                                  window_ms=10_000.0))
    events = [e for e in EVENTS if not e[2].startswith(("client", "stats"))]
    assert events == [
        (1.02, "a", "LinkUp b"),
        (1.03, "b", "LinkUp a"),
        (1.03, "b", "arrived a HEARTBEAT 7"),
        (1.03, "b", "arrived a HEARTBEAT 8"),
        (3.02, "a", "LinkDown c"),  # c left: dormant again
        (4.01, "a", "LinkDown b"),  # b's death, one link delay later
        (5.02, "a", "LinkDown b"),  # refused
    ]
    assert result.dials_failed == 2 and result.links_opened == 2
    links = [(r["t_mono"], r["link"], r["state"], r.get("reason"))
             for r in _records(tmp_path, "a", Ev.LINK)]
    assert links == [(1.02, "b", "up", "dialled"), (3.02, "c", "dial_failed", "dormant"),
                     (4.01, "b", "down", "peer died"), (5.02, "b", "dial_failed", "refused")]
    drops = [(r["link"], r["msg_id"], r["reason"]) for r in _records(tmp_path, "a", Ev.DROP)]
    assert drops == [("c", 9, "dial_failed"), ("b", 10, "dial_failed")]
    states = [r["state"] for r in _records(tmp_path, "c", Ev.RECORD)]
    assert states == ["dormant", "joined", "left"]


def test_a_frame_in_flight_to_a_node_that_left_is_dropped_there(tmp_path: Path) -> None:
    w = _script([
        (1.0, "a", [["send", "b", 7]]),
        (2.0, "a", [["send", "b", 8]]),  # arrives at 2.01, after b has left
        (2.005, "b", MsgType.LEAVE),
    ])
    EVENTS.clear()
    simulate(_bare(["a", "b", "c"]), w, Scripted,
             SimSettings(seed=0, out_dir=tmp_path, on_demand=LinkModel(latency_ms=10.0),
                         window_ms=10_000.0))
    events = [e for e in EVENTS if not e[2].startswith(("client", "stats"))]
    assert (1.03, "b", "arrived a HEARTBEAT 7") in events
    assert not any(what == "arrived a HEARTBEAT 8" for _, _, what in events)
    drops = [(r["t_mono"], r["link"], r["msg_id"], r["reason"])
             for r in _records(tmp_path, "b", Ev.DROP)]
    assert drops == [(2.01, "a", 8, "dormant")]


@pytest.mark.parametrize(("steps", "message"), [
    ([(1.0, "a", [["send", "zz", 1]])], "no such broker"),
    ([(1.0, "a", [["send", "a", 1]])], "itself"),
    ([(1.0, "a", [["disconnect", "zz"]])], "no such broker"),
    ([(1.0, "b", MsgType.JOIN), (0.5, "b", [["send", "a", 1]])], "PUBLISH by client cb"),
    ([(1.0, "b", MsgType.JOIN), (2.0, "b", MsgType.LEAVE), (3.0, "b", [])],
     "PUBLISH by client cb on b, which is dormant"),
    ([(1.0, "b", MsgType.CRASH), (2.0, "b", MsgType.JOIN)], "killed at 1.0 s"),
])
def test_core_bugs_and_workload_errors_are_refused(steps: Any, message: str) -> None:
    steps = sorted(steps, key=lambda s: s[0])
    with pytest.raises(ValueError, match=message):
        _play(_script(steps))


def test_fixed_links_cannot_be_disconnected_and_static_runs_have_no_disconnect() -> None:
    w = _script([(1.0, "a", [["disconnect", "b"]])])
    g = nx.Graph([("a", "b")])
    g.add_node("c")
    with pytest.raises(ValueError, match="a fixed link"):
        simulate(g, w, Scripted, SimSettings(seed=0, on_demand=LinkModel()))
    with pytest.raises(ValueError, match="links are fixed here"):
        simulate(g, w, Scripted, SimSettings(seed=0))


def test_underlay_latency_is_the_shortest_path_cached_per_source() -> None:
    u = nx.Graph()
    u.add_edge("h1", "r", delay_ms=1.0)
    u.add_edge("r", "h2", delay_ms=2.0)
    u.add_edge("h1", "h2", delay_ms=5.0)
    u.add_edge("r", "h3")  # no delay_ms: default_ms
    u.add_node("island")
    lat = underlay_latency(u, host_of={"a": "h1", "b": "h2", "c": "h3", "d": "island"},
                           default_ms=0.5, max_sources=2)
    assert lat("a", "b") == 3.0 and lat("b", "a") == 3.0
    assert lat.dijkstra_runs == 1  # undirected: a's search answers b -> a
    assert lat("a", "c") == 1.5 and lat("a", "a") == 0.0
    assert lat("a", "d") == float("inf")
    with pytest.raises(ValueError, match="not in the underlay"):
        lat("zz", "a")
    events = _play(_script([(1.0, "a", [["send", "b", 7], ["send", "d", 8]])],
                           nodes=("a", "b", "d")), LinkModel(latency_ms=lat))
    assert events == [(1.0, "a", "LinkDown d"), (1.006, "a", "LinkUp b"),
                      (1.009, "b", "LinkUp a"), (1.009, "b", "arrived a HEARTBEAT 7")]


def test_churn_workload_meta() -> None:
    w = _churn()
    meta = w.meta
    assert meta["settle_s"] == 2.0 and json.loads(json.dumps(meta)) == meta
    for x, t in meta["leaves"].items():
        (j0, l0), (j1, l1) = meta["membership"][x]
        assert j0 < l0
        assert l0 == t and j1 > t and l1 is None
    for x, t in meta["crashes"].items():
        assert meta["membership"][x][-1][1] == t
    kinds = Counter(op.msg.type.name for op in w.ops)
    assert kinds["JOIN"] == 29 + 3 and kinds["LEAVE"] == 3 and kinds["CRASH"] == 3
    assert kinds["PUBLISH"] == 2 * 3 * 4
    # Every other op comes from a member, as the simulator requires.
    for op in w.ops:
        if op.msg.type not in (MsgType.JOIN, MsgType.LEAVE, MsgType.CRASH):
            assert op.broker in _members_at(w, op.t_s), op


# ---- (d) memory per link ----------------------------------------------------------------

class _DialsAll:
    """On its client's op, sends one HEARTBEAT to every other node of NODES; on the
    timer it sets then (after every link is up and every frame has arrived), notes the
    memory traced in TRACED."""

    NODES: ClassVar[tuple[str, ...]] = ()
    TRACED: ClassVar[list[int]] = []

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]):
        self.broker = broker

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, TimerFired):
            self.TRACED.append(tracemalloc.get_traced_memory()[0])
            return []
        if not isinstance(event, FromClient):
            return []
        if not self.TRACED:  # the first op: nothing opened yet
            self.TRACED.append(tracemalloc.get_traced_memory()[0])
        msg = Message(MsgType.HEARTBEAT, 1, self.broker)
        return [*(Send(b, msg) for b in self.NODES if b != self.broker),
                SetTimer("count", 60.0)]


def test_an_idle_link_opened_on_demand_costs_under_200_bytes() -> None:
    # 10,000 Meghdoot peers open millions of links and never close them: each link's
    # figures are kept without a float or int object of its own (171 bytes a link here;
    # 259 when they were lists).
    n = 150
    nodes = tuple(f"n{i:03d}" for i in range(n))
    _DialsAll.NODES, _DialsAll.TRACED = nodes, []
    ops = tuple(ClientOp(1.0 + i * 0.001, f"c{b}", b, Message(MsgType.PUBLISH, 1, f"c{b}", 0,
                                                               {"attrs": {"x": 1}}))
                for i, b in enumerate(nodes))
    w = Workload(SCHEMA, {f"c{b}": b for b in nodes}, ops, {})
    # Figures computed per pair, as the peers topology's are (a new float each).
    model = LinkModel(latency_ms=lambda a, b: 0.5 + 0.5, link_mbps=lambda a, b: 500.0 * 2)
    tracemalloc.start()
    try:
        result = simulate(_bare(nodes), w, _DialsAll, SimSettings(seed=0, on_demand=model))
    finally:
        tracemalloc.stop()
    assert result.links_opened == n * (n - 1)  # every side of every pair came up
    links = result.links_opened
    grown = _DialsAll.TRACED[-1] - _DialsAll.TRACED[0]
    assert grown / links < 200, f"{grown / links:.0f} bytes a link"
