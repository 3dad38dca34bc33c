"""CoDD in the simulator and on hand-made trees: exactly the documents the timing-aware
oracle expects, each once, through joins, leaves, reorganization moves and crashes
(hypothesis schedules; a crashed node may miss what it was owed while cut off, never a
survivor); the tree's invariants (one parent each, fanout, no cycle, every aggregate
filter exactly its subtree's queries) every time the root finishes a change, and whole
again once failures are repaired; the paper's protocol traces (a join that descends two
levels, a leave that promotes a child, a reorganization that moves a node to a better
parent); and ours for failures (an orphan re-joins, two failures on one path, a leave
a failure stalls)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.plan import compile_plan
from experiments.spec import SpecError, load_spec
from nodes.cores import CORES, resolve_params
from nodes.cores.codd import VARIANTS, CoddCore, overlay_params
from nodes.cores.codd_changes import Changes
from nodes.cores.codd_invariants import tree_problems
from nodes.cores.interface import Action, Arrived, Deliver, FromClient, Send, TimerFired
from nodes.messages import Message, MsgType
from nodes.metrics.codd import codd_metrics
from nodes.sim.links import LinkModel
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.codd import codd_workload
from nodes.workloads.ops import Workload
from nodes.workloads.oracle import expected_deliveries
from topologies.peers import peer_names


class CheckedNode(CoddCore):
    """A node whose root checks the whole tree each time it finishes a change (a join,
    a move, a leave or a repair: the moment no filter is being changed). Before the
    first crash the tree must be whole; after it, failures may be pending."""

    def __init__(self, everyone: dict[str, CoddCore], broker: str, params: Mapping[str, Any]
                 ) -> None:
        super().__init__(broker, (), params)
        self.everyone = everyone
        self.crashes_s: Mapping[str, float] = params.get("crashes_s", {})
        self.finished = 0
        self.changes = CheckedChanges(self)  # in place of the plain queue, before any event
        everyone[broker] = self


class CheckedChanges(Changes):
    """The root's queue of changes of a :class:`CheckedNode`."""

    def finish(self, moved: bool) -> list[Action]:
        node = self.core
        assert isinstance(node, CheckedNode)
        node.finished += 1
        dead = {x for x, t in node.crashes_s.items() if t <= node._now_s}
        assert tree_problems(node.everyone, dead, settled=not dead) == []
        return super().finish(moved)


def run(w: Workload, params: Mapping[str, Any], core: str = "codd"
        ) -> tuple[SimResult, dict[str, CoddCore]]:
    """Simulate ``w`` with the registry's ``core`` (a CoDD variant) and ``params`` (those
    the variant does not take are dropped), then long enough for every failure to be
    repaired; the tree must then be whole, every surviving node in it."""
    names = sorted(set(w.clients.values()))
    graph = nx.Graph()
    graph.add_nodes_from(names)
    fixed, declared = VARIANTS[core]
    taken = {k: v for k, v in params.items() if k in {p.name for p in declared}}
    resolved = {**resolve_params(core, CORES[core].params, taken), **fixed}
    derived = overlay_params(graph)
    everyone: dict[str, CoddCore] = {}
    crashes_s = w.meta.get("crashes_s", {})

    def factory(broker: str, _nbrs: Sequence[str], _p: Mapping[str, Any]) -> CoddCore:
        return CheckedNode(everyone, broker, {**resolved, **derived[broker],
                                              "crashes_s": crashes_s})

    result = simulate(graph, w, factory,
                      SimSettings(seed=1, on_demand=LinkModel(latency_ms=1.0), log_messages=False,
                                  until_s=w.ops[-1].t_s + 40.0))
    dead = set(crashes_s)
    assert tree_problems(everyone, dead) == []
    stray = [n for n, c in everyone.items() if n not in dead and not c.departed
             and not c._left and c.client is not None and (not c.attached or c.parent is None)]
    assert stray == []  # every surviving member is in the tree
    return result, everyone


def assert_exactly_once(result: SimResult, w: Workload) -> int:
    want = {k: sorted(v) for k, v in expected_deliveries(w).items() if v}
    got = {k: sorted(v) for k, v in result.deliveries.items()}
    assert got == want  # sorted lists: a duplicate would show
    return sum(map(len, want.values()))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 30), d=st.integers(20, 300), seed=st.integers(0, 10**6),
       interest=st.sampled_from(["classes", "stock"]),
       leave_fraction=st.sampled_from([0.0, 0.3, 1.0]),
       crash_fraction=st.sampled_from([0.0, 0.0, 0.1, 0.3]),
       heartbeats=st.booleans(),
       fanout=st.integers(1, 4), timeout_docs=st.integers(3, 30),
       threshold_pct=st.sampled_from([0.0, 10.0, 40.0]), cutoff=st.integers(0, 3),
       delta_pct=st.sampled_from([0.0, 20.0]),
       core=st.sampled_from(["codd", "codd", "codd-nr", "codd-flood"]),
       window_docs=st.sampled_from([10, 10000]))
def test_random_schedules_deliver_exactly_once_and_keep_the_tree(
        n: int, d: int, seed: int, interest: str, leave_fraction: float,
        crash_fraction: float, heartbeats: bool, fanout: int,
        timeout_docs: int, threshold_pct: float, cutoff: int, delta_pct: float,
        core: str, window_docs: int) -> None:
    # Crashes need heartbeats, and a window that still holds what orphans missed;
    # heartbeats without crashes must change nothing that is delivered.
    if crash_fraction:
        heartbeats, window_docs = True, 10000
    w = codd_workload(peer_names(n), d, seed=seed, interest=interest,
                      leave_fraction=leave_fraction, crash_fraction=crash_fraction,
                      k=5, c=1, cf=25)
    result, nodes = run(w, {"fanout": fanout, "timeout_docs": timeout_docs,
                            "threshold_pct": threshold_pct, "cutoff": cutoff,
                            "delta_pct": delta_pct, "window_docs": window_docs,
                            "heartbeat_s": 0.5 if heartbeats else 0.0}, core)
    crashed = {f"q-{x}" for x in w.meta["crashes_s"]}
    want = expected_deliveries(w)
    if crashed:  # a node that crashes while cut off by an earlier crash dies before
        # the replay that would bring what it missed: it may miss, never get more.
        for key, subs in result.deliveries.items():
            assert len(subs) == len(set(subs)) and set(subs) <= want.get(key, set())
        want = {k: v - crashed for k, v in want.items()}
        got = {k: sorted(set(v) - crashed) for k, v in result.deliveries.items()
               if set(v) - crashed}
        assert got == {k: sorted(v) for k, v in want.items() if v}  # survivors: exact
    else:
        assert_exactly_once(result, w)
    root = nodes[w.meta["root"]]
    if crashed:  # orphans re-join, and changes may be given up and asked again
        return
    joins, leaves = n - 1, len(w.meta["leaves_s"])
    granted = sum(x["outcome"] == "granted" for x in root.decisions)
    assert root.finished >= joins + leaves + granted  # every change was checked
    assert sum(c.rejoins for c in nodes.values()) == 0  # no false alarm


def test_siena_emulation_and_codd_deliver_exactly_once_at_100_nodes() -> None:
    w = codd_workload(peer_names(100), 2000, seed=3)
    for core in ("codd-siena", "codd-nr", "codd"):
        result, nodes = run(w, {}, core)
        assert assert_exactly_once(result, w) > 10_000
    moves = sum(c.moves for c in nodes.values())
    assert moves > 0  # CoDD-R moved nodes on this workload


def test_siena_tree_is_a_balanced_server_tree_with_f_clients_per_server() -> None:
    w = codd_workload(peer_names(120), 200, seed=5)
    _, nodes = run(w, {"fanout": 3}, "codd-siena")
    root = nodes[w.meta["root"]]
    servers = root.changes.servers
    assert 120 // 4 - 15 <= len(servers) <= 120 // 4 + 15  # p = 1/(f+1), 119 draws
    for k, s in enumerate(servers):  # breadth-first, f per level: server k under k-f // f
        assert nodes[s].parent == (root.broker if k < 3 else servers[(k - 3) // 3])
    for name, core in nodes.items():
        if name == root.broker or name in servers:
            continue
        assert core.parent in servers and not core.children  # clients are leaves
    for s in servers:
        assert sum(1 for c in nodes[s].children if c not in servers) <= 3


# ---- protocol traces on hand-made trees --------------------------------------------------


class Pump:
    """Hand-driven nodes (the root is the first name: ``R`` sorts before lower case):
    each message is delivered in FIFO order, one hop at a time,
    and the control messages are traced as (from, to, op)."""

    def __init__(self, names: Sequence[str], **params: Any) -> None:
        resolved = resolve_params("codd", CORES["codd"].params, params)  # CoDD-R
        graph = nx.Graph()
        graph.add_nodes_from(names)
        derived = overlay_params(graph)
        self.nodes = {n: CoddCore(n, (), {**resolved, **VARIANTS["codd"][0], **derived[n]})
                      for n in names}
        self.root = self.nodes[min(names)]
        self.trace: list[tuple[str, str, str]] = []
        self.delivered: list[tuple[str, int]] = []
        self.dead: set[str] = set()  # crashed: what is sent to them is lost
        self.t = 0.0

    def run(self, at: str, actions: list[Action]) -> None:
        queue: deque[tuple[str, Action]] = deque((at, a) for a in actions)
        while queue:
            src, action = queue.popleft()
            if isinstance(action, Deliver):
                self.delivered.append((action.client, action.msg.payload["seq"]))
            if not isinstance(action, Send) or (action.msg.type is MsgType.HEARTBEAT and (
                    action.link in self.dead)):
                continue
            msg = action.msg
            if msg.type is MsgType.TREE:
                self.trace.append((src, action.link, msg.payload["op"]))
            if action.link in self.dead:
                continue
            out = self.nodes[action.link].handle(Arrived(src, msg), self.t)
            queue.extend((action.link, a) for a in out)

    def tick(self, seconds: float) -> None:
        """Let ``seconds`` pass: every live node's heartbeat timer fires each second."""
        for _ in range(round(seconds)):
            self.t += 1.0
            for n, core in sorted(self.nodes.items()):
                if n not in self.dead:
                    self.run(n, core.handle(TimerFired("heartbeat"), self.t))

    def client(self, node: str, msg: Message) -> None:
        self.run(node, self.nodes[node].handle(FromClient(msg.origin, msg), self.t))

    def join(self, node: str) -> None:
        self.client(node, Message(MsgType.JOIN, 1, f"j-{node}",
                                  payload={"seeds": [self.root.broker], "from_s": 0.0}))
        self.client(node, Message(MsgType.SUBSCRIBE, 1, f"q-{node}",
                                  payload={"addressed": True}))

    def publish(self, seq: int, to: Sequence[str]) -> None:
        bits = sum(1 << sorted(self.nodes).index(n) for n in to)
        self.t = max(self.t, seq * 0.1)
        self.client(self.root.broker, Message(MsgType.PUBLISH, seq + 1, "producer", payload={
            "seq": seq, "t_s": self.t, "to": format(bits, "x")}))

    def ops(self) -> list[tuple[str, str, str]]:
        trace, self.trace = self.trace, []
        return trace


def test_a_join_descends_two_levels_to_the_first_node_with_room() -> None:
    p = Pump(["R", "a", "b", "m"], fanout=1)
    p.join("a")
    p.join("b")  # R is full: b goes under a
    assert p.nodes["b"].parent == "a"
    p.ops()
    p.join("m")  # R and a are full: two levels down, under b
    assert p.ops() == [
        ("m", "R", "add"), ("R", "a", "add"), ("a", "b", "add"), ("b", "m", "addresult"),
        ("m", "b", "addchild"), ("b", "a", "add_query"), ("a", "R", "add_query")]
    assert p.nodes["m"].parent == "b"
    assert p.nodes["R"].children["a"].members == {"a": None, "b": None, "m": None}
    assert tree_problems(p.nodes) == []


def test_a_join_descends_towards_the_child_that_already_gets_what_it_wants() -> None:
    p = Pump(["R", "a", "b", "m"], fanout=2)
    p.join("a")
    p.join("b")
    for seq in range(10):  # b and m (not yet joined) want every document, a none
        p.publish(seq, ["b", "m"])
    p.join("m")  # m would want what b gets: under b, not a
    assert p.nodes["m"].parent == "b"
    p.publish(10, ["m"])
    assert ("q-m", 10) in p.delivered and p.nodes["a"].received == 0


def test_a_leave_promotes_the_child_of_most_overlap_and_re_joins_the_others_under_it(
        ) -> None:
    p = Pump(["R", "a", "b", "c", "d"], fanout=2)
    for n in "abc":  # c: under a (equal subtrees, the smaller name)
        p.join(n)
    for seq in range(6):  # d (not yet joined) shares a's interest, c does not
        p.publish(seq, ["a", "d"] if seq % 2 else ["c"])
    p.join("d")  # under a, which gets what d wants (b gets nothing)
    assert (p.nodes["c"].parent, p.nodes["d"].parent) == ("a", "a")
    p.ops()
    p.client("a", Message(MsgType.UNSUBSCRIBE, 2, "q-a", payload={"sub_id": 1, "at_s": 0.6}))
    assert p.ops() == [
        ("a", "R", "leave_req"), ("R", "a", "leave_go"),
        ("a", "d", "addresult"), ("d", "R", "addchild"), ("R", "a", "moved"),  # d promoted
        ("a", "d", "add"), ("d", "c", "addresult"), ("c", "d", "addchild"),  # c re-joins
        ("d", "R", "add_query"), ("R", "a", "moved"),
        ("a", "R", "leave_ready")]  # a, now a leaf, is dropped by its parent, the root
    assert p.nodes["d"].parent == "R" and p.nodes["c"].parent == "d"
    assert set(p.nodes["R"].children) == {"b", "d"}
    assert tree_problems(p.nodes) == []
    p.publish(6, ["a", "c"])
    assert ("q-c", 6) in p.delivered and ("q-a", 6) not in p.delivered


def test_a_reorganization_moves_a_child_to_the_parent_that_already_gets_its_documents(
        ) -> None:
    p = Pump(["R", "a", "c", "x"], fanout=2, timeout_docs=4, threshold_pct=10.0)
    p.join("a")
    p.join("x")
    p.join("c")  # R is full (a, x); c under a (nothing seen yet: the smaller name)
    assert p.nodes["c"].parent == "a"
    p.ops()
    for seq in range(8):  # c and x want the odd documents, a the even ones
        p.publish(seq, ["c", "x"] if seq % 2 else ["a"])
    # After 4 documents a's spurious share is 1/2: it asks to move c. The root's round
    # of 4 documents ended before the request came, so the next round admits it (a asks
    # again after 8, for the round after). The search: R is full (overhead 0: explore),
    # a has room but is the requester, x has room and already gets all of c's documents
    # (overhead 0 < a's current cost: the 4 documents it gets only for c).
    trace = [t for t in p.ops() if t[2] != "reorganize"]
    assert trace == [
        ("R", "a", "check"), ("a", "R", "checked"), ("R", "a", "getoverhead"),
        ("R", "x", "getoverhead"), ("a", "R", "overhead"), ("x", "R", "overhead"),
        ("R", "c", "addresult"), ("c", "x", "addchild"), ("x", "R", "add_query"),
        ("R", "a", "moved"), ("a", "R", "done")]
    assert p.nodes["c"].parent == "x" and "c" not in p.nodes["a"].children
    decision = p.root.decisions[-1]
    assert (decision["outcome"], decision["parent"], decision["new"], decision["current"]
            ) == ("granted", "x", 0, 4)
    assert tree_problems(p.nodes) == []
    before = p.nodes["a"].spurious
    for seq in range(8, 16):
        p.publish(seq, ["c", "x"] if seq % 2 else ["a"])
    assert p.nodes["a"].spurious == before  # a no longer receives c's documents
    assert sorted(s for c, s in p.delivered if c == "q-c") == list(range(1, 16, 2))
    # a's next check notes the move's effect (share 1/2 before, 0 after) and when it was
    # done: after document 7, the last a had then
    assert p.nodes["a"].reorg.ratios == [[0.5, 0.0, 7]]
    # a had asked again at document 7 and was moved before it received another, so the
    # documents after the move are the whole period's: [before, after, after the move
    # alone, when (s), not undone]; x, the new parent, got none it did not want either
    # side of the move
    assert p.nodes["a"].reorg.effects == [[0.5, 0.0, 0.0, pytest.approx(0.7), None]]
    assert p.nodes["x"].reorg.adoptions == [[0.0, 0.0]]


@pytest.mark.parametrize("ties, parent", [("smaller", "b"), ("larger", "a"), ("name", "a")])
def test_max_overlap_nodes_subtree_tie_break_is_selectable(ties: str, parent: str) -> None:
    p = Pump(["R", "a", "b", "c", "m"], fanout=2, join_ties=ties)
    for n in "abc":  # c: under a (equal subtrees of one, the name)
        p.join(n)
    p.join("m")  # nothing published: a (two members) and b (one) tie on overlap
    assert p.nodes["m"].parent == parent


@pytest.mark.parametrize("delta_pct, granted", [(0.0, True), (60.0, False)])
def test_the_delta_threshold_refuses_a_move_that_saves_too_little(
        delta_pct: float, granted: bool) -> None:
    p = Pump(["R", "a", "c", "x"], fanout=2, timeout_docs=4, delta_pct=delta_pct)
    for n in "axc":
        p.join(n)
    for seq in range(8):  # x gets half of what c wants: new cost 2 of current 4
        p.publish(seq, ["c"] + (["x"] if seq % 4 == 1 else []) if seq % 2 else ["a"])
    decision = p.root.decisions[-1]
    assert (decision["current"], decision["new"]) == (4, 2)
    assert (decision["outcome"] == "granted") is granted
    assert (p.nodes["c"].parent == "x") is granted


def test_the_siena_emulation_with_leaves_is_refused_before_anything_starts() -> None:
    spec = load_spec("codd-nodes", ["workload.leave_fraction=0.2",
                                    "topology.params.n=20", "workload.n_documents=100"])
    with pytest.raises(SpecError, match=r"leave_fraction.*codd-siena"):
        compile_plan(spec)
    compile_plan(load_spec("codd-nodes", ["workload.leave_fraction=0.2",
                                          "routing.algorithms=[codd,codd-nr]"]))


def test_crashes_without_heartbeats_or_with_the_siena_emulation_are_refused() -> None:
    with pytest.raises(SpecError, match=r"crash_fraction.*codd-siena"):
        compile_plan(load_spec("codd-failures", ["routing.algorithms=[codd,codd-siena]",
                                                 "workload.leave_fraction=0"]))
    with pytest.raises(SpecError, match=r"crash_fraction: codd, codd-nr would never find"):
        compile_plan(load_spec("codd-failures", ["routing.params.heartbeat_s=0",
                                                 "routing.algorithms=[codd,codd-nr]"]))
    plan = compile_plan(load_spec("codd-failures"))
    last = max(op.t_s for op in plan.workload.ops)
    assert plan.phase_s() == pytest.approx(last + 2.0 + 5 * 2 * 4 * 0.5)  # room to repair


# ---- failures (ours: heartbeats, orphans re-join with their subtrees) ---------------------


def chain(names: str, crash: str, **params: Any) -> Pump:
    """A chain R - names[0] - names[1] ... (fanout 1), heartbeats every second, a node
    silent for over two seconds found failed; then the nodes in ``crash`` crash."""
    p = Pump(["R", *names], fanout=1, heartbeat_s=1.0, failure_periods=2)
    for n in names:
        p.join(n)
    for seq in range(3):
        p.publish(seq, list(names))
    p.tick(1)  # every node's heartbeats start
    p.dead |= set(crash)
    p.ops()
    return p


def test_an_orphan_re_joins_with_its_subtree_and_gets_what_it_missed_once() -> None:
    p = chain("abcd", crash="b")
    for seq in range(3, 6):  # c and d are cut off: these reach a alone
        p.publish(seq, ["a", "c", "d"])
    p.tick(8)
    ops = p.ops()
    assert ("a", "R", "lost") in ops and ("c", "R", "add") in ops  # found from both sides
    # The loss first (the purge of b and what hung under it), then the re-join, once
    # held for one detection time; while held, the root serves the cut-off subtree.
    purge, rejoin = ops.index(("R", "a", "purge")), ops.index(("R", "a", "add"))
    assert purge < rejoin and ("c", "R", "serve") in ops[:rejoin]
    assert p.nodes["c"].parent == "a" and p.nodes["d"].parent == "c"
    assert p.nodes["R"].children["a"].members == {"a": None, "c": None, "d": None}
    assert tree_problems(p.nodes, dead={"b"}) == []
    for n in "cd":  # every document once, the missed ones from the root
        assert sorted(s for c, s in p.delivered if c == f"q-{n}") == list(range(6))
    p.publish(6, ["d"])
    assert ("q-d", 6) in p.delivered  # through the tree again
    # the re-join's replay starts where the serving while cut off ended: no copy twice
    assert p.nodes["c"].duplicates == p.nodes["d"].duplicates == 0


def test_two_failures_on_one_path_leave_no_stale_name_in_any_filter() -> None:
    p = chain("abcde", crash="bd")  # c is cut off from above and e from c
    for seq in range(3, 6):
        p.publish(seq, ["c", "e"])
    p.tick(12)
    assert tree_problems(p.nodes, dead={"b", "d"}) == []  # settled: whole again
    members = p.nodes["R"].children["a"].members
    assert set(members) == {"a", "c", "e"}  # b and d purged, c and e placed
    for n in "ce":
        assert sorted(s for c, s in p.delivered if c == f"q-{n}") == list(range(6))
    assert p.root.decisions == [] and sum(p.nodes[n].rejoins for n in "ce") == 2


def test_a_leave_stalled_by_a_failure_is_given_up_and_asked_again() -> None:
    p = chain("abc", crash="c")  # c crashes; b leaves before anyone finds c silent
    p.client("b", Message(MsgType.UNSUBSCRIBE, 2, "q-b", payload={"sub_id": 1, "at_s": 1.5}))
    assert ("b", "c", "addresult") in p.ops()  # b's heir is c, dead: the leave stalls
    p.tick(12)
    outcomes = [(d["change"], d["outcome"]) for d in p.root.decisions]
    assert outcomes == [("leave", "given up")]  # given up once b reported c lost
    assert p.nodes["b"]._left and not p.nodes["a"].children  # b's second try ended it
    assert tree_problems(p.nodes, dead={"c"}) == []


def test_fig_18s_shares_split_the_moves_by_the_order_they_were_done_not_by_node() -> None:
    """Ten moves: the first four in order (whichever node made them) did not help, the
    later six did but one; the node list's order is not the moves' order."""
    helped, worse = [0.5, 0.25], [0.5, 0.75]
    a = {"ratios": [[*helped, 9], [*worse, 1], [*helped, 6], [*worse, 3], [*helped, 8]]}
    b = {"ratios": [[*worse, 0], [*helped, 5], [*worse, 2], [*worse, 7], [*helped, 4]]}
    nodes = [{"received": 0, "spurious": 0, "children": 0, "hops_sum": 0, "series": [],
              "series_docs": 100, "delivered": 0, "duplicates": 0, "catchup": 0,
              "requests": 5, "moves": 5, "rejoins": 0, **n} for n in (a, b)]
    reorg = codd_metrics(nodes, None)["reorganization"]
    assert reorg["ratio_below_1_pct"] == pytest.approx(50.0)
    assert reorg["successful_first_40_pct"] == pytest.approx(0.0)  # orders 0-3
    assert reorg["successful_later_60_pct"] == pytest.approx(500 / 6)  # 4-9: all but 7
    assert reorg["successful_later_minus_first_pts"] == pytest.approx(500 / 6)


def test_the_over_time_fifths_compare_the_end_of_the_stream_with_its_start() -> None:
    def node(series: list[list[int]], children: int) -> dict[str, Any]:
        received, spurious = sum(s[1] for s in series), sum(s[2] for s in series)
        return {"received": received, "spurious": spurious, "children": children,
                "hops_sum": received, "series": series, "series_docs": 100,
                "delivered": received - spurious, "duplicates": 0, "catchup": 0,
                "requests": 0, "moves": 0, "ratios": [], "rejoins": 0}

    # ten buckets: the first two (a fifth) 1 useless of 10, the last two 4 of 10
    a = node([[k, 10, 1 if k < 2 else 4 if k >= 8 else 2] for k in range(10)], 1)
    b = node([[k, 10, 1 if k < 2 else 4 if k >= 8 else 3] for k in range(10)], 0)
    over_time = codd_metrics([a, b], None)["over_time"]
    assert over_time["first_fifth"] == pytest.approx(0.1)
    assert over_time["last_fifth"] == pytest.approx(0.4)
    assert over_time["last_over_first"] == pytest.approx(4.0)
