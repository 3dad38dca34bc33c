"""``codd``: cooperative, data-aware dissemination trees (CoDD: Chand and Felber's
companion work on dissemination trees; our reading is ``../shared/READINGS-WAVE2.md``,
section 2), one consumer node per broker, links opened on demand.

One producer, at the root broker (the derived param ``root``: the first broker by name),
streams documents down a tree. A node keeps, per child, the aggregate filter of the
child's subtree (``members``: name -> query) and sends a document to a child only if some
member's query accepts it. Queries are *addressed* (bits of ``to``, as
:mod:`nodes.workloads.codd` writes them) or content filters over ``attrs``. Documents are
PUBLISH messages with payload ``seq``, ``t_s`` and ``to`` or ``attrs``; a node delivers one
to its client iff its query accepts it and ``from_s <= t_s < left_s`` (the oracle's
rules); a document received again is a duplicate, never delivered or forwarded twice.
Statistics: per node, bitmaps over the last ``window_docs`` documents.

Protocols (TREE messages; payload ``op`` names the step): **join** (Figs. 3-4: ``add``
descends from the root to a node with fewer than ``fanout`` children, least overhead
first), **leave** (Figs. 5-6: the child of most overlap takes the node's place),
**reorganization** (Fig. 7: every ``timeout_docs`` documents, by ``threshold_pct``,
``cutoff`` and ``delta_pct``), a flooding reference (``forward: all``) and a Siena
emulation (``tree: siena``). Ours: the root serialises tree changes, nothing is lost or
delivered twice while the tree changes, and failures are :mod:`nodes.cores.codd_repair`'s.

The core holds the tree (children's filters, joins, the moves' filter changes) and the
documents; each other protocol is a part it owns, with its own state: reorganization
(:mod:`nodes.cores.codd_reorganize`), leaving (:mod:`nodes.cores.codd_leave`), failures
(:mod:`nodes.cores.codd_repair`) and the root's queue of tree changes
(:mod:`nodes.cores.codd_changes`). Every TREE op's handler is in :meth:`CoddCore._handlers`.

Records: ``codd_node`` (per consumer, at the end) and ``codd_root`` (rounds and
reorganization decisions); see :meth:`CoddCore.final_records`.

The protocols step by step, with our readings: docs/design/codd.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import unhandled
from nodes.cores.codd_changes import Changes
from nodes.cores.codd_leave import Leave
from nodes.cores.codd_reorganize import Reorganization, popcount
from nodes.cores.codd_repair import HEARTBEAT, Repair
from nodes.cores.interface import (
    Action,
    Arrived,
    Deliver,
    Event,
    FromClient,
    Record,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.cores.params import Param
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, filter_from_json, matches

if TYPE_CHECKING:
    import networkx as nx

TREE_PARAMS = (
    Param("fanout", "int", 6, "", "f: the most children a node (the root too) accepts; in "
          "the Siena emulation, the server tree's arity and the clients per server",
          minimum=1),
    Param("join_ties", "str", "smaller", "", "max_overlap_node's tie-break at a full "
          "node, after least new documents and most shared ones: the child of the smaller "
          "subtree (smaller), of the larger (larger), or by name alone (name)",
          choices=("smaller", "larger", "name")),
    Param("window_docs", "int", 10000, "", "W: documents kept in a node's statistics",
          minimum=1),
    Param("series_docs", "int", 100, "", "documents per bucket of a node's received and "
          "spurious counts over time", minimum=1),
    Param("heartbeat_s", "float", 0.0, "s", "interval of the heartbeats between parent "
          "and child (0: no failure detection; see nodes.cores.codd_repair)", minimum=0),
    Param("failure_periods", "int", 3, "", "heartbeat intervals without one from a parent "
          "(a child) after which it is taken for failed: the child re-joins with its "
          "subtree (the parent reports it lost)", minimum=1),
)
REORGANIZATION_PARAMS = (
    Param("timeout_docs", "int", 200, "", "r: documents a node receives between two checks "
          "for a reorganization request, and documents per round at the root", minimum=1),
    Param("threshold_pct", "float", 10.0, "%", "rthresh: the spurious share over the last "
          "r documents at which a node asks for a reorganization", minimum=0),
    Param("cutoff", "int", 0, "", "top-c: requests the root handles per round, heaviest "
          "first (0: all)", minimum=0),
    Param("delta_pct", "float", 0.0, "%", "the least improvement, as a share of the "
          "current cost, for which a move is granted (0: any strict improvement)",
          minimum=0),
    Param("ask", "str", "periodic", "", "when a node asks (§4: 'periodically after a "
          "configurable time-limit has passed, or ... on demand when the node detects an "
          "increase'): every r documents at the threshold (periodic), or only when the "
          "share also rose over the last period's (on_increase)",
          choices=("periodic", "on_increase")),
    Param("search_price", "str", "parent", "", "what the root's search prices a "
          "candidate parent at: the documents new to it (parent), or new to it and to "
          "each of its ancestors on the search path (path)", choices=("parent", "path")),
)
PARAMS = TREE_PARAMS + REORGANIZATION_PARAMS
# The registry's variants (nodes.cores.CORES): what each fixes, and the params it takes.
# A variant without reorganization still runs the root's rounds (recorded, unused), at the
# declared defaults of the params it does not take.
_CODD_R = {"tree": "codd", "reorganize": True, "forward": "filter"}
_NO_REORGANIZATION = {**_CODD_R, "reorganize": False,
                      **{p.name: p.default for p in REORGANIZATION_PARAMS}}
VARIANTS: dict[str, tuple[dict[str, Any], tuple[Param, ...]]] = {
    "codd": (_CODD_R, PARAMS),  # CoDD-R
    "codd-nr": (_NO_REORGANIZATION, TREE_PARAMS),  # the paper's ablation
    "codd-siena": ({**_NO_REORGANIZATION, "tree": "siena"}, TREE_PARAMS),
    "codd-flood": ({**_NO_REORGANIZATION, "forward": "all"}, TREE_PARAMS),  # the reference
}


def variant(name: str) -> Callable[[str, Sequence[str], Mapping[str, Any]], CoddCore]:
    """The factory of registry variant ``name`` (:data:`VARIANTS`)."""
    fixed = VARIANTS[name][0]

    def make(broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> CoddCore:
        return CoddCore(broker, neighbours, {**params, **fixed})

    return make


# The keys :func:`overlay_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("root", "nodes")


def overlay_params(graph: nx.Graph) -> dict[str, dict[str, Any]]:
    """Every node learns the root (the first broker by name) and the brokers' order (the
    bit order of an addressed document's ``to``)."""
    names = sorted(graph.nodes)
    return {b: {"root": names[0], "nodes": names} for b in names}


# A TREE op's handler: (the link it came on, its payload) -> the actions it takes.
Handler = Callable[[str, Mapping[str, Any]], list[Action]]


@dataclass
class Child:
    """What a node keeps of one child: its subtree's queries by member, the members'
    bits (addressed documents) and the documents sent to it (a bitmap over seq)."""

    members: dict[str, Any]
    mask: int = 0
    sent: int = 0


class CoddCore:
    """One CoDD node (see the module docstring): the tree, the documents and the joins,
    and the parts it owns (``reorg``, ``leave``, ``repair``, ``changes``)."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(neighbours)
        self.root: str = params["root"]
        self._bit_of = {n: i for i, n in enumerate(params["nodes"])}
        self._bit = self._bit_of[broker]
        self.fanout: int = params["fanout"]
        self.window_docs: int = params["window_docs"]
        # max_overlap_node's subtree tie-break: +1 the smaller first, -1 the larger, 0 none
        self._tie_sign = {"smaller": 1, "larger": -1, "name": 0}[params["join_ties"]]
        self.series_docs: int = params["series_docs"]
        # failures (docs/design/codd.md)
        self.heartbeat_s: float = params["heartbeat_s"]
        self.failure_periods: int = params["failure_periods"]
        self._ticking = False
        self._now_s = 0.0  # the time of the event being handled
        self._heard_parent_s = 0.0  # when the parent was last heard from
        self._tree_seq = -1  # the last document that came down the tree (not a replay)
        self.rejoins = 0
        self._heard_child_s: dict[str, float] = {}  # when each child was last heard from
        self._lost: set[str] = set()  # children reported silent to the root
        self.tree: str = params["tree"]
        self.forward_all = params["forward"] == "all"
        # Without reorganization this only sets the root's rounds (recorded, unused).
        self.timeout_docs: int = params["timeout_docs"]
        self._seq = 0  # msg_id of this node's TREE messages
        # membership and query
        self.client: str | None = None
        self.query: Filter | None = None  # None: addressed
        self.query_json: Any = None
        self.from_s = math.inf
        self._join_at: float | None = None  # the JOIN op's from_s, once it has come
        self.left_s = math.inf
        self.attached = broker == self.root
        self.parent: str | None = None
        self.children: dict[str, Child] = {}
        self.where: dict[str, str] = {}  # member -> the child whose subtree holds it
        self._index = SubscriptionIndex()  # descendants' filters (content queries)
        # statistics
        self.received_bits = 0
        self.own_bits = 0
        self.last_seq = -1
        self.received = self.spurious = self.duplicates = self.delivered = 0
        self.hops_sum = self.catchup = self.moves = 0
        self.series: dict[int, list[int]] = {}
        # leaving: every part asks whether the node leaves, or has
        self._leaving = False
        self._left = False  # the leave protocol has ended (a leaf, removed)
        self.departed = False  # the broker left the overlay (its LEAVE op)
        # the root
        self._window: deque[tuple[int, float, Any, Message]] = deque()
        self.published = 0
        self.rounds: list[list[int]] = []  # [round, requests, handled]
        self.decisions: list[dict[str, Any]] = []
        self.reorg = Reorganization(self, params)
        self.leave = Leave(self)
        self.repair = Repair(self)
        self.changes = Changes(self)  # last: it starts the others' changes
        self._tree_ops = self._handlers()

    def _handlers(self) -> dict[str, Handler]:
        """Every TREE op, by the name a message's payload gives it, with its handler."""
        reorg, leave, repair = self.reorg, self.leave, self.repair
        return {
            # joins, moves and the filters along the tree
            "add": self._on_add, "addresult": self._on_addresult,
            "addchild": self._on_addchild, "add_query": self._on_add_query,
            "moved": self._on_moved, "remove": self._on_remove, "done": self._on_done,
            # reorganization
            "reorganize": reorg.on_reorganize, "check": reorg.on_check,
            "checked": reorg.on_checked, "getoverhead": reorg.on_getoverhead,
            "overhead": reorg.on_overhead,
            # leaving
            "leave_req": leave.on_leave_req, "leave_go": leave.on_leave_go,
            "leave_ready": leave.on_leave_ready,
            # failures
            "serve": repair.on_serve, "served": repair.on_served, "lost": repair.on_lost,
            "purge": repair.on_purge, "purged": repair.on_purged,
            "departed": repair.on_departed, "retry": repair.on_retry,
        }

    # ---- plumbing ---------------------------------------------------------------------

    def _tree_msg(self, op: str, **payload: Any) -> Message:
        self._seq += 1
        return Message(MsgType.TREE, self._seq, self.broker, payload={"op": op, **payload})

    def _win(self, bits: int) -> int:
        """``bits`` limited to the statistics window."""
        low = self.last_seq - self.window_docs + 1
        return bits >> low << low if low > 0 else bits

    def _accepts(self, query: Filter | None, bit: int, doc: Any) -> bool:
        """Whether a query (None: addressed to bit ``bit``) accepts ``doc`` (an int of
        ``to`` bits, or attrs)."""
        if query is None:
            return isinstance(doc, int) and bool(doc >> bit & 1)
        return not isinstance(doc, int) and matches(query, doc)

    @staticmethod
    def _query_of(query_json: Any) -> Filter | None:
        return None if query_json is None else filter_from_json(query_json)

    @staticmethod
    def _doc_of(payload: Mapping[str, Any]) -> Any:
        to = payload.get("to")
        return int(to, 16) if to is not None else payload["attrs"]

    def subtree(self) -> dict[str, Any]:
        """This node's subtree: its members' queries by name, itself included."""
        out = {self.broker: self.query_json}
        for ch in self.children.values():
            out.update(ch.members)
        return out

    def _put(self, child: str, members: Mapping[str, Any]) -> None:
        ch = self.children.setdefault(child, Child({}))
        for name, q in members.items():
            ch.members[name] = q
            self.where[name] = child
            if q is None:
                ch.mask |= 1 << self._bit_of[name]
            else:
                self._index.add((name, 0), filter_from_json(q))

    def _take_names(self, child: str, names: Sequence[str]) -> None:
        """Drop ``names`` (members of ``child``'s entry) from the entry."""
        ch = self.children[child]
        for name in names:
            q = ch.members.pop(name)
            del self.where[name]
            if q is None:
                ch.mask &= ~(1 << self._bit_of[name])
            else:
                self._index.remove((name, 0))
        if not ch.members:
            del self.children[child]
            self._heard_child_s.pop(child, None)
            self._lost.discard(child)

    # ---- events -----------------------------------------------------------------------

    def handle(self, event: Event, now_s: float) -> list[Action]:
        self._now_s = now_s
        if isinstance(event, Arrived):
            msg = event.msg
            if msg.type is MsgType.PUBLISH:
                out = self._document(msg)
            elif msg.type is MsgType.TREE:
                out = self._tree_op(event.link, msg)
            elif msg.type is MsgType.HEARTBEAT:
                self.repair.heard(event.link, now_s)
                out = []
            else:
                out = [unhandled(msg)]
        elif isinstance(event, FromClient):
            out = self._from_client(event.client, event.msg)
        elif isinstance(event, TimerFired) and event.name == HEARTBEAT:
            return self.repair.tick(now_s)
        else:
            return []  # statistics windows, links coming and going
        if self.heartbeat_s > 0 and not self._ticking:
            self._ticking = True
            self._heard_parent_s = now_s
            out.append(SetTimer(HEARTBEAT, self.heartbeat_s))
        return out

    def _from_client(self, client: str, msg: Message) -> list[Action]:
        t, p = msg.type, msg.payload
        if t is MsgType.SUBSCRIBE and self.broker != self.root and self.client is None:
            self.client = client
            self.query_json = p.get("filter")
            self.query = self._query_of(self.query_json)
            return self._join()
        if t is MsgType.JOIN and not self.attached and self._join_at is None:
            self._join_at = float(p.get("from_s", 0.0))
            return self._join()
        if t is MsgType.UNSUBSCRIBE and client == self.client and not self._leaving:
            # the consumer leaves: the leave protocol starts (once placed, if a failure
            # held up the join)
            self.left_s = float(p.get("at_s", math.inf))
            self._leaving = True
            return self.leave.ask()
        if t is MsgType.LEAVE:  # the broker leaves the overlay, once the tree let it go
            self.departed = True  # the runtime stops it now: its children will find it
            if self._left:
                return []
            # Before its leave ended (the root was busy repairing): the root drops its
            # changes, and the others repair around it as around a crash.
            return [Record("codd_left_early", {}),
                    Send(self.root, self._tree_msg("departed", node=self.broker))]
        if t is MsgType.PUBLISH and self.broker == self.root:
            return self._produce(msg)
        return [unhandled(msg, "not a CoDD client operation here")]

    def _join(self) -> list[Action]:
        """Ask the root for a place once both the JOIN and the query have come (a
        runtime hands a node its clients' operations once it has joined)."""
        if self._join_at is None or self.client is None or self.attached:
            return []
        self.from_s = self._join_at
        return [Send(self.root, self._tree_msg("add", node=self.broker, query=self.query_json,
                                               from_s=self.from_s))]

    # ---- documents --------------------------------------------------------------------

    def _produce(self, msg: Message) -> list[Action]:
        p = msg.payload
        seq = int(p["seq"])
        doc = self._doc_of(p)
        self.last_seq = seq
        self.received_bits |= 1 << seq
        self._window.append((seq, float(p["t_s"]), doc, msg))
        while self._window[0][0] <= seq - self.window_docs:
            self._window.popleft()
        out = self._forward(msg, seq, doc)
        self.published += 1
        if self.published % self.timeout_docs == 0:
            out += self.reorg.close_round()
        return out

    def _document(self, msg: Message) -> list[Action]:
        p = msg.payload
        seq = int(p["seq"])
        bit = 1 << seq
        if self.received_bits & bit:
            self.duplicates += 1
            return []
        self.received_bits |= bit
        self.last_seq = max(self.last_seq, seq)
        self.received += 1
        self.hops_sum += msg.hops
        doc = self._doc_of(p)
        counts = self.series.setdefault(seq // self.series_docs, [0, 0])
        counts[0] += 1
        out: list[Action] = []
        if self._accepts(self.query, self._bit, doc):
            self.own_bits |= bit
            if self.from_s <= float(p["t_s"]) < self.left_s and self.client is not None:
                self.delivered += 1
                out.append(Deliver(self.client, msg))
        else:
            self.spurious += 1
            self.reorg.spur_since += 1
            counts[1] += 1
        if p.get("catchup"):
            self.catchup += 1
            return out
        self._tree_seq = max(self._tree_seq, seq)
        out += self._forward(msg, seq, doc)
        self.reorg.since += 1
        if self.reorg.since >= self.timeout_docs:
            out += self.reorg.check()
        return out

    def _forward(self, msg: Message, seq: int, doc: Any) -> list[Action]:
        if not self.children:
            return []
        if self.forward_all:
            targets = list(self.children)
        elif isinstance(doc, int):
            targets = [c for c, ch in self.children.items() if ch.mask & doc]
        else:
            targets = list({self.where[name] for name, _ in self._index.match(doc)})
        if not targets:
            return []
        bit = 1 << seq
        copy = msg.forwarded()
        out: list[Action] = []
        for c in sorted(targets):
            self.children[c].sent |= bit
            out.append(Send(c, copy))
        return out

    # ---- control messages -------------------------------------------------------------

    def _tree_op(self, link: str, msg: Message) -> list[Action]:
        p = msg.payload
        op = p["op"]
        handler = self._tree_ops.get(op)
        if handler is None:
            return [unhandled(msg, f"unknown tree op {op!r}")]
        return handler(link, p)

    def _on_add(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if self.broker == self.root and p.get("purpose") == "rejoin" and "want" not in p:
            return self.changes.enqueue("rejoin", dict(p))
        if self.broker == self.root and "want" not in p:  # a join starts here
            return self.changes.enqueue("join", dict(p))
        return self._descend(p)

    def _descend(self, p: Mapping[str, Any]) -> list[Action]:
        node = p["node"]
        if self.parent is None and self.broker != self.root:
            # An orphan takes no one while its own place is being repaired (whoever
            # joined under it would stay cut off): the change is given up and asked
            # again.
            return []
        # A node whose own leave is queued still takes a child: its leave hands it on.
        if len(self.children) < self.fanout:
            return [Send(node, self._tree_msg("addresult", parent=self.broker,
                                              purpose=p.get("purpose", "join"),
                                              cid=p.get("cid"), dead=p.get("dead")))]
        want = int(p["want"], 16)
        seen = self._win(want & self.received_bits)
        best: tuple[int, int, int, str] | None = None
        for c, ch in self.children.items():
            sent = ch.sent
            key = (popcount(seen & ~sent), -popcount(seen & sent),
                   self._tie_sign * len(ch.members), c)
            if best is None or key < best:
                best = key
        assert best is not None  # fanout >= 1 and full
        onward = {k: v for k, v in p.items() if k != "op"}
        return [Send(best[3], self._tree_msg("add", **onward))]

    def _on_addresult(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        parent, purpose = p["parent"], p.get("purpose", "join")
        if purpose == "rejoin" and (self.parent is not None or self._left):
            return [Send(self.root, self._tree_msg("done", cid=p["cid"]))]  # placed already
        move = self.attached and purpose != "rejoin"
        self.parent = parent
        self._heard_parent_s = self._now_s
        self.attached = True
        if move:
            self.moves += 1
        out = [Send(parent, self._tree_msg("addchild", members=self.subtree(), purpose=purpose,
                                           cid=p.get("cid"), dead=p.get("dead")))]
        if self.leave.pending:
            self.leave.pending = False
            out += self.leave.ask()
        return out

    def _on_addchild(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        self._heard_child_s[link] = self._now_s
        self._lost.discard(link)
        if p.get("purpose") == "reorganize":
            self.reorg.adopted()
        return self._added(link, p)

    def _on_add_query(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self._added(link, p)

    def _added(self, child: str, p: Mapping[str, Any]) -> list[Action]:
        """``p["members"]`` now live under ``child``. Where some lived under another
        child, this node is the common ancestor of a move's old and new places: the
        switch point, which drops them from the old path (``moved``, top-down behind the
        documents already sent there); otherwise the parent is told. Members this node
        did not know (after a failure, a re-joining subtree may hold both: newcomers
        that joined it while it was cut off, and names purged above) go on up either
        way."""
        members = p["members"]
        old: dict[str, list[str]] = {}
        for name in members:
            o = self.where.get(name)
            if o is not None and o != child:
                old.setdefault(o, []).append(name)
        unknown = {n: q for n, q in members.items() if n not in self.where}
        change = {k: p.get(k) for k in ("purpose", "cid", "dead")}
        out: list[Action] = []
        for o, names in sorted(old.items()):
            out += self._drop(o, names, change)
        self._put(child, members)
        if old and not unknown:
            return out
        if old:
            members = unknown
        if self.parent is not None:
            out.append(Send(self.parent, self._tree_msg("add_query", members=dict(members),
                                                        **change)))
            return out
        if self.broker == self.root and change["purpose"] in ("join", "rejoin"):
            return out + self.changes.complete(change["cid"], names=list(members))
        return out  # an orphan: its re-join carries these members up

    def _drop(self, child: str, names: Sequence[str], change: Mapping[str, Any]
              ) -> list[Action]:
        """Drop ``names`` from ``child``'s subtree: the child itself when it is one of
        them (it moved or left), or the failed node an orphan left; else pass the news
        down to it."""
        purpose, cid = change["purpose"], change["cid"]
        gone = child in names
        self._take(child, names)
        if purpose == "rejoin" and child == change["dead"]:  # the failed node's parent
            return self._done_remote(cid, names=list(names))
        if not gone:
            return [Send(child, self._tree_msg("moved", names=list(names), **change))]
        if purpose == "reorganize":  # the old parent: the move is complete
            self.reorg.granted()  # our request was granted
            return self._done_remote(cid)
        if purpose == "leave" and self._leaving and cid == self.leave.cid:
            return self.leave.next()
        return []

    def _take(self, child: str, names: Sequence[str]) -> None:
        """Drop ``names`` from ``child``'s entry; all of it when the child is one of
        them (a child that moves or leaves takes its whole subtree)."""
        ch = self.children[child]
        self._take_names(child, list(ch.members) if child in names else names)

    def _on_moved(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        by_child: dict[str, list[str]] = {}
        for name in p["names"]:
            if name in self.where:  # else dropped already (a failure's purge)
                by_child.setdefault(self.where[name], []).append(name)
        change = {k: p.get(k) for k in ("purpose", "cid", "dead")}
        out: list[Action] = []
        for o, sub in sorted(by_child.items()):
            out += self._drop(o, sub, change)
        if not by_child and change["purpose"] == "rejoin":
            out += self._done_remote(change["cid"], names=list(p["names"]))
        return out

    def _on_remove(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        node, cid = p["node"], p.get("cid")
        o = self.where.get(node)
        if o is None:  # purged already (its parent failed)
            return self._done_remote(cid)
        self._take(o, [node])
        if o == node:
            return self._done_remote(cid)
        return [Send(o, self._tree_msg("remove", node=node, cid=cid))]

    def _done_remote(self, cid: int | None, **extra: Any) -> list[Action]:
        if self.broker == self.root:
            return self.changes.complete(cid, **extra)
        return [Send(self.root, self._tree_msg("done", cid=cid, **extra))]

    def _on_done(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self.changes.complete(p.get("cid"), names=p.get("names", ()))

    # ---- results ----------------------------------------------------------------------

    def counters(self) -> Mapping[str, int]:
        """Plain counts (summed over nodes by the summary)."""
        return {"received": self.received, "spurious": self.spurious,
                "duplicates": self.duplicates, "requests": self.reorg.requests,
                "moves": self.moves, "catchup": self.catchup, "rejoins": self.rejoins}

    def final_records(self) -> list[tuple[str, dict[str, Any]]]:
        """``codd_node`` for a consumer (its place in the tree, the documents it received
        and found spurious, in all and per ``series_docs`` bucket, the hops they took,
        its requests and moves, and per granted request the spurious share before and
        after); ``codd_root`` for the root (rounds, decisions, documents published)."""
        if self.broker == self.root:
            return [("codd_root", {"published": self.published, "rounds": self.rounds,
                                   "decisions": self.decisions, "children": len(self.children),
                                   "servers": len(self.changes.servers)})]
        if self.client is None:
            return []
        return [("codd_node", {
            "parent": self.parent, "children": len(self.children),
            "subtree": 1 + sum(len(ch.members) for ch in self.children.values()),
            "received": self.received, "spurious": self.spurious,
            "delivered": self.delivered, "duplicates": self.duplicates,
            "catchup": self.catchup, "hops_sum": self.hops_sum,
            "series": [[k, *v] for k, v in sorted(self.series.items())],
            "series_docs": self.series_docs, "requests": self.reorg.requests, "moves": self.moves,
            "rejoins": self.rejoins,
            "ratios": self.reorg.ratios, "effects": self.reorg.effects,
            "adoptions": self.reorg.adoptions,
            "from_s": self.from_s if self.from_s < math.inf else None,
            "left_s": self.left_s if self.left_s < math.inf else None})]
