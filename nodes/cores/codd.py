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

Records: ``codd_node`` (per consumer, at the end) and ``codd_root`` (rounds and
reorganization decisions); see :meth:`CoddCore.final_records`.

The protocols step by step, with our readings: docs/design/codd.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import unhandled
from nodes.cores.codd_repair import HEARTBEAT, MOVES, Repair
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
from nodes.cores.multicast_groups import unit_draw
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


def popcount(bits: int) -> int:
    """Number of set bits."""
    return bits.bit_count()


@dataclass
class Child:
    """What a node keeps of one child: its subtree's queries by member, the members'
    bits (addressed documents) and the documents sent to it (a bitmap over seq)."""

    members: dict[str, Any]
    mask: int = 0
    sent: int = 0


@dataclass
class _Bfs:
    """The root's search for a new parent of ``node`` (one at a time)."""

    node: str
    requester: str
    overhead: float
    recv: int = 0
    current: int = 0
    exclude: frozenset[str] = frozenset()
    frontier: list[str] = field(default_factory=list)
    replies: dict[str, tuple[int, bool, list[str]]] = field(default_factory=dict)
    best: str | None = None
    best_ov: float = math.inf
    queried: int = 0


class CoddCore(Repair):
    """One CoDD node (see the module docstring)."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(neighbours)
        self.root: str = params["root"]
        self._bit_of = {n: i for i, n in enumerate(params["nodes"])}
        self._bit = self._bit_of[broker]
        self.fanout: int = params["fanout"]
        self.window_docs: int = params["window_docs"]
        self.series_docs: int = params["series_docs"]
        # failures (docs/design/codd.md)
        self.heartbeat_s: float = params["heartbeat_s"]
        self.failure_periods: int = params["failure_periods"]
        self._detect_s = (self.failure_periods + 1) * self.heartbeat_s
        self._ticking = False
        self._now_s = 0.0  # the time of the event being handled
        self._heard_parent_s = 0.0  # when the parent was last heard from
        self._tree_seq = -1  # the last document that came down the tree (not a replay)
        self.rejoins = 0
        self._heard_child_s: dict[str, float] = {}  # when each child was last heard from
        self._lost: set[str] = set()  # children reported silent to the root
        self._orphaned_from: str | None = None  # the parent found dead
        self._served_upto: int | None = None  # cut off: the root served us up to here
        self.tree: str = params["tree"]
        self.reorganize = bool(params["reorganize"]) and self.tree == "codd"
        self.forward_all = params["forward"] == "all"
        # Without reorganization these only set the root's rounds (recorded, unused).
        self.timeout_docs: int = params["timeout_docs"]
        self.threshold = params["threshold_pct"] / 100
        self.cutoff: int = params["cutoff"]
        self.delta = params["delta_pct"] / 100
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
        self.hops_sum = self.catchup = self.requests = self.moves = 0
        self.series: dict[int, list[int]] = {}
        self._since = self._spur_since = 0
        self._request_share: float | None = None  # share when asked; a move pending
        self.ratios: list[list[float]] = []  # [share before, share after] per move
        # leaving
        self._leaving = False
        self._leave_rest: list[str] = []
        self._heir: str | None = None  # the child that takes a leaving node's place
        self._left = False  # the leave protocol has ended (a leaf, removed)
        self._leave_cid: int | None = None  # the root's number of this node's leave
        self._leave_pending = False  # ask to leave again once re-joined
        self.departed = False  # the broker left the overlay (its LEAVE op)
        # the root
        self._window: deque[tuple[int, float, Any, Message]] = deque()
        self._losses: deque[tuple[str, dict[str, Any]]] = deque()  # first
        self._held: list[tuple[float, str, dict[str, Any]]] = []  # re-joins, when ready
        self._ops: deque[tuple[str, dict[str, Any]]] = deque()  # joins and leaves
        self._reorgs: deque[tuple[str, dict[str, Any]]] = deque()  # after them
        self._busy: tuple[str, dict[str, Any]] | None = None
        self._cid = 0  # the number of the root's current (or last) change
        self._busy_since_s = 0.0  # when the root started its current change
        self._busy_seq = -1  # the last document published when it started
        self._moves_log: deque[tuple[int, int]] = deque()  # [first, last] seq of moves
        self._waiting_s: dict[str, float] = {}  # nodes waiting for a place: last heard
        self._served: dict[str, int] = {}  # cut-off subtrees: served up to this seq
        self._batch: dict[str, dict[str, Any]] = {}
        self._bfs: _Bfs | None = None
        self._pumping = False  # the root is starting queued changes (no re-entry)
        self.published = 0
        self.rounds: list[list[int]] = []  # [round, requests, handled]
        self.decisions: list[dict[str, Any]] = []
        self._servers: list[str] = []
        self._gone: set[str] = set()  # nodes that asked to leave (no requests from them)
        self._clients_of: dict[str, int] = {}

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
                self._heard(event.link, now_s)
                out = []
            else:
                out = [unhandled(msg)]
        elif isinstance(event, FromClient):
            out = self._from_client(event.client, event.msg)
        elif isinstance(event, TimerFired) and event.name == HEARTBEAT:
            return self._tick(now_s)
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
            return self._ask_leave()
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
            out += self._close_round()
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
            self._spur_since += 1
            counts[1] += 1
        if p.get("catchup"):
            self.catchup += 1
            return out
        self._tree_seq = max(self._tree_seq, seq)
        out += self._forward(msg, seq, doc)
        self._since += 1
        if self._since >= self.timeout_docs:
            out += self._check()
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

    # ---- reorganization requests (at any node) ------------------------------------------

    def _check(self) -> list[Action]:
        """Every ``timeout_docs`` documents: note a pending move's effect, and ask for a
        move when the spurious share reached the threshold."""
        share = self._spur_since / self._since
        self._since = self._spur_since = 0
        if self._request_share is not None and self._request_share < 0:
            self.ratios.append([-self._request_share, share])  # the move happened
        self._request_share = None
        if (not self.reorganize or not self.children or self._leaving or share <= 0
                or share < self.threshold):
            return []
        child = self._least_overlap()
        if child is None:
            return []
        self.requests += 1
        self._request_share = share
        return [Send(self.root, self._tree_msg("reorganize", node=child,
                                               requester=self.broker, overhead=share))]

    def _least_overlap(self) -> str | None:
        """The child to move: of those whose move would lower this node's overhead (it
        receives documents for them alone), the one of least overlap with this node's
        own documents (the share of what it was sent that this node wanted too); ties:
        the one that costs most, then the name. None if no child costs anything alone."""
        own = self._win(self.own_bits)
        best: tuple[float, int, str] | None = None
        for c, ch in self.children.items():
            cost = self._current_cost(c)
            if cost == 0:
                continue
            sent = self._win(ch.sent)
            key = (popcount(sent & own) / popcount(sent), -cost, c)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def _current_cost(self, child: str) -> int:
        """Documents this node receives only because of ``child`` (its spurious data
        that moving the child would save)."""
        others = self.own_bits
        for c, ch in self.children.items():
            if c != child:
                others |= ch.sent
        return popcount(self._win(self.children[child].sent & ~others))

    # ---- control messages -------------------------------------------------------------

    def _tree_op(self, link: str, msg: Message) -> list[Action]:
        p = msg.payload
        op = p["op"]
        handler = getattr(self, f"_on_{op}", None)
        if handler is None:
            return [unhandled(msg, f"unknown tree op {op!r}")]
        return handler(link, p)

    def _on_add(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if self.broker == self.root and p.get("purpose") == "rejoin" and "want" not in p:
            return self._enqueue("rejoin", dict(p))
        if self.broker == self.root and "want" not in p:  # a join starts here
            return self._enqueue("join", dict(p))
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
            key = (popcount(seen & ~sent), -popcount(seen & sent), len(ch.members), c)
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
        if self._leave_pending:
            self._leave_pending = False
            out += self._ask_leave()
        return out

    def _on_addchild(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        self._heard_child_s[link] = self._now_s
        self._lost.discard(link)
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
            return out + self._complete(change["cid"], names=list(members))
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
            if self._request_share is not None:
                self._request_share = -abs(self._request_share)  # our request was granted
            return self._done_remote(cid)
        if purpose == "leave" and self._leaving and cid == self._leave_cid:
            return self._leave_next()
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
            return self._complete(cid, **extra)
        return [Send(self.root, self._tree_msg("done", cid=cid, **extra))]

    def _on_done(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self._complete(p.get("cid"), names=p.get("names", ()))

    # ---- the root's queue of tree changes ----------------------------------------------

    def _enqueue(self, kind: str, p: dict[str, Any]) -> list[Action]:
        if kind in ("join", "rejoin"):
            self._waiting_s[p["node"]] = self._now_s
        if kind == "rejoin":
            self._held = [h for h in self._held if h[2]["node"] != p["node"]]
            self._held.append((self._now_s + self._detect_s, kind, p))
        else:
            {"reorganize": self._reorgs, "lost": self._losses}.get(kind, self._ops).append(
                (kind, p))
        return self._next()

    def _pop_change(self) -> tuple[str, dict[str, Any]] | None:
        """Losses, then re-joins whose hold is over, then joins and leaves, then
        reorganizations, but none while a re-join is held (a tree with a subtree cut off
        is no basis for one, and the re-join must not wait behind it). A join or re-join
        of a node that stopped beating while it waited is dropped."""
        if self._losses:
            return self._losses.popleft()
        self._held = [h for h in self._held if not self._silent(h[2]["node"])]
        ready = [h for h in self._held if h[0] <= self._now_s]
        if ready:
            self._held.remove(ready[0])
            return ready[0][1], ready[0][2]
        while self._ops and self._ops[0][0] == "join" and self._silent(self._ops[0][1]["node"]):
            self._ops.popleft()
        if self._ops:
            return self._ops.popleft()
        if self._reorgs and not self._held:
            return self._reorgs.popleft()
        return None

    def _next(self) -> list[Action]:
        out: list[Action] = []
        if self._pumping:
            return out
        self._pumping = True
        try:
            while self._busy is None:
                change = self._pop_change()
                if change is None:
                    break
                self._busy = change
                self._cid += 1
                self._busy_since_s, self._busy_seq = self._now_s, self.last_seq
                out += getattr(self, f"_start_{change[0]}")(change[1])
        finally:
            self._pumping = False
        return out

    def _complete(self, cid: int | None, names: Sequence[str] = ()) -> list[Action]:
        """The current change ``cid`` has ended (a late message of a given-up change
        ends nothing): a join's newcomer gets its catch-up, a re-joined subtree its
        replay."""
        if self._busy is None or cid != self._cid:
            return []
        kind, p = self._busy
        out: list[Action] = []
        if kind == "join":
            out += self._catch_up(p)
        elif kind == "rejoin":
            out += self._replay({**self._known(names), **p["members"]}, self._rejoin_after(p))
        return out + self._finish(moved=kind in MOVES)

    def _finish(self, moved: bool) -> list[Action]:
        """Log a move's span of documents (for replays) and start the next change."""
        if moved:
            self._moves_log.append((self._busy_seq, self.last_seq))
            while self._moves_log and self._moves_log[0][1] < self.last_seq - self.window_docs:
                self._moves_log.popleft()
        self._busy = None
        return self._next()

    def _start_join(self, p: dict[str, Any]) -> list[Action]:
        node = p["node"]
        if self.tree == "siena":
            return [Send(node, self._tree_msg("addresult", parent=self._siena_parent(node),
                                              cid=self._cid))]
        return self._descend({**p, "want": self._wanted({node: p["query"]}), "cid": self._cid})

    def _wanted(self, members: Mapping[str, Any]) -> str:
        """The window's documents some of ``members`` (name -> query) wants, as hex bits
        over seq (the extensional statistics a descent compares children by)."""
        queries = [(self._query_of(q), self._bit_of[m]) for m, q in members.items()]
        want = 0
        for seq, _t, doc, _msg in self._window:
            if any(self._accepts(q, bit, doc) for q, bit in queries):
                want |= 1 << seq
        return format(want, "x")

    def _siena_parent(self, node: str) -> str:
        """The Siena emulation's place for a newcomer (docs/design/codd.md)."""
        f = self.fanout
        free = [s for s in self._servers if self._clients_of[s] < f]
        if free and unit_draw(f"siena-server/{node}", 0) >= 1 / (f + 1):
            server = free[int(unit_draw(f"siena-client/{node}", 0) * len(free))]
            self._clients_of[server] += 1
            return server
        k = len(self._servers)
        self._servers.append(node)
        self._clients_of[node] = 0
        return self.root if k < f else self._servers[(k - f) // f]

    def _catch_up(self, join: Mapping[str, Any]) -> list[Action]:
        """The documents a newcomer wants that were published from its ``from_s`` on
        (after those served to it while it waited), sent straight to it (it keeps the
        first copy of each)."""
        node = join["node"]
        return self._replay({node: join["query"]}, self._served.get(node, -1),
                            float(join["from_s"]))

    def _on_reorganize(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if not self._gone.intersection((p["node"], p["requester"])):
            self._batch.setdefault(p["node"], dict(p))
        return []

    def _close_round(self) -> list[Action]:
        """The end of a round of ``timeout_docs`` documents: the round's requests,
        heaviest first, ``cutoff`` of them, join the queue of tree changes."""
        requests = sorted(self._batch.values(), key=lambda r: (-r["overhead"], r["node"]))
        admitted = requests[: self.cutoff] if self.cutoff else requests
        self.rounds.append([len(self.rounds), len(requests), len(admitted)])
        self._batch = {}
        out: list[Action] = []
        for r in admitted:
            out += self._enqueue("reorganize", r)
        return out

    def _start_reorganize(self, p: dict[str, Any]) -> list[Action]:
        if self._gone.intersection((p["node"], p["requester"])):  # asked before leaving
            return self._finish(moved=False)
        self._bfs = _Bfs(p["node"], p["requester"], p["overhead"])
        return [Send(p["requester"], self._tree_msg("check", node=p["node"], cid=self._cid))]

    def _on_check(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        node, cid = p["node"], p["cid"]
        if node not in self.children or self._leaving or node in self._lost:
            return [Send(link, self._tree_msg("checked", ok=False, cid=cid))]
        return [Send(link, self._tree_msg(
            "checked", ok=True, recv=format(self._win(self.children[node].sent), "x"),
            current=self._current_cost(node), members=sorted(self.children[node].members),
            cid=cid))]

    def _current(self, p: Mapping[str, Any]) -> _Bfs | None:
        """The search a reply belongs to (None: a late reply to a given-up one)."""
        return self._bfs if p.get("cid") == self._cid else None

    def _on_checked(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        b = self._current(p)
        if b is None:
            return []
        if not p["ok"]:
            self._decided(b, "stale")
            return self._finish(moved=False)
        b.recv, b.current = int(p["recv"], 16), p["current"]
        b.exclude = frozenset(p["members"])
        b.frontier = [self.broker]
        return self._bfs_level()

    def _bfs_level(self) -> list[Action]:
        b = self._bfs
        assert b is not None
        b.replies = {}
        b.queried += len(b.frontier)
        out: list[Action] = []
        recv = format(b.recv, "x")
        for x in b.frontier:
            if x == self.broker:
                b.replies[x] = self._overhead_for(b.recv)
            else:
                out.append(Send(x, self._tree_msg("getoverhead", recv=recv, cid=self._cid)))
        if len(b.replies) == len(b.frontier):
            out += self._bfs_decide_level()
        return out

    def _overhead_for(self, recv: int) -> tuple[int, bool, list[str]]:
        """compute_overhead(this node, n) for a node n that received ``recv``: the
        documents n would newly bring here; whether there is room; the children."""
        ov = popcount(recv & ~self._win(self.received_bits))
        return ov, len(self.children) < self.fanout and not self._leaving, sorted(
            c for c in self.children if c not in self._lost)

    def _on_getoverhead(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        ov, spare, kids = self._overhead_for(int(p["recv"], 16))
        return [Send(link, self._tree_msg("overhead", ov=ov, spare=spare, kids=kids,
                                          cid=p["cid"]))]

    def _on_overhead(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        b = self._current(p)
        if b is None or link not in b.frontier:
            return []
        b.replies[link] = (p["ov"], p["spare"], p["kids"])
        if len(b.replies) < len(b.frontier):
            return []
        return self._bfs_decide_level()

    def _bfs_decide_level(self) -> list[Action]:
        """Fig. 7 over one level, in queue order: a node with room is a candidate (not
        the current parent); a full one's children are searched when ``2 ov`` is below
        the best overhead so far."""
        b = self._bfs
        assert b is not None
        nxt: list[str] = []
        for x in b.frontier:
            ov, spare, kids = b.replies[x]
            if spare:
                if x != b.requester and ov < b.best_ov:
                    b.best, b.best_ov = x, ov
            elif 2 * ov < b.best_ov:
                nxt += [k for k in kids if k not in b.exclude]
        b.frontier = nxt
        if nxt:
            return self._bfs_level()
        granted = b.best is not None and b.best_ov < b.current and (
            b.best_ov <= (1 - self.delta) * b.current)
        self._decided(b, "granted" if granted else "refused")
        if not granted:
            return self._finish(moved=False)
        assert self._busy is not None
        self._busy[1]["members"] = sorted(b.exclude)  # replayed to if it is given up
        return [Send(b.node, self._tree_msg("addresult", parent=b.best,
                                            purpose="reorganize", cid=self._cid))]

    def _decided(self, b: _Bfs, outcome: str) -> None:
        self.decisions.append({
            "node": b.node, "requester": b.requester, "overhead": b.overhead,
            "current": b.current, "new": None if b.best is None else b.best_ov,
            "parent": b.best, "outcome": outcome, "queried": b.queried,
            "round": len(self.rounds) - 1})
        self._bfs = None

    # ---- leaving ----------------------------------------------------------------------

    def _ask_leave(self) -> list[Action]:
        if self.parent is None:  # not placed yet, or an orphan: once (re-)placed
            self._leave_pending = True
            return []
        self._leave_rest = []
        return [Send(self.root, self._tree_msg("leave_req", node=self.broker,
                                               members=sorted(self.subtree())))]

    def _on_leave_req(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        self._gone.add(p["node"])
        return self._enqueue("leave", dict(p))

    def _start_leave(self, p: dict[str, Any]) -> list[Action]:
        return [Send(p["node"], self._tree_msg("leave_go", cid=self._cid))]

    def _on_leave_go(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        self._leave_cid = p["cid"]
        if self.parent is None:  # orphaned since it asked: again once re-joined
            self._leave_pending = True
            return [Send(self.root, self._tree_msg("done", cid=p["cid"]))]
        live = [c for c in self.children if c not in self._lost]
        if not live:
            return self._leave_ready()
        if self._heir is not None and self._heir not in self.children:
            # Asked again after a failure held up the first try, whose heir has taken
            # this node's place already: the rest re-join under it (a second heir would
            # leave the parent a child over its fanout).
            self._leave_rest = sorted(live)
            return self._leave_next()
        own = self._win(self.own_bits)
        heir = max(live, key=lambda c: (popcount(self._win(self.children[c].sent) & own),
                                        len(self.children[c].members), c))
        self._leave_rest = sorted(c for c in live if c != heir)
        self._heir = heir
        return [Send(heir, self._tree_msg("addresult", parent=self.parent, purpose="leave",
                                          cid=self._leave_cid))]

    def _leave_next(self) -> list[Action]:
        """The next child re-joins with seed set {the heir}; when none is left, this
        node, now a leaf (but for children found silent), is removed."""
        while self._leave_rest:
            c = self._leave_rest.pop(0)
            if c not in self.children:  # purged meanwhile (it failed)
                continue
            want = format(self._win(self.children[c].sent), "x")
            return [Send(self._heir, self._tree_msg("add", node=c, want=want,
                                                    purpose="leave", cid=self._leave_cid))]
        return self._leave_ready()

    def _leave_ready(self) -> list[Action]:
        self._left = True
        return [Send(self.root, self._tree_msg("leave_ready", node=self.broker,
                                               cid=self._leave_cid))]

    def _on_leave_ready(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self._on_remove(link, p)


    # ---- results ----------------------------------------------------------------------

    def counters(self) -> Mapping[str, int]:
        """Plain counts (summed over nodes by the summary)."""
        return {"received": self.received, "spurious": self.spurious,
                "duplicates": self.duplicates, "requests": self.requests,
                "moves": self.moves, "catchup": self.catchup, "rejoins": self.rejoins}

    def final_records(self) -> list[tuple[str, dict[str, Any]]]:
        """``codd_node`` for a consumer (its place in the tree, the documents it received
        and found spurious, in all and per ``series_docs`` bucket, the hops they took,
        its requests and moves, and per granted request the spurious share before and
        after); ``codd_root`` for the root (rounds, decisions, documents published)."""
        if self.broker == self.root:
            return [("codd_root", {"published": self.published, "rounds": self.rounds,
                                   "decisions": self.decisions, "children": len(self.children),
                                   "servers": len(self._servers)})]
        if self.client is None:
            return []
        return [("codd_node", {
            "parent": self.parent, "children": len(self.children),
            "subtree": 1 + sum(len(ch.members) for ch in self.children.values()),
            "received": self.received, "spurious": self.spurious,
            "delivered": self.delivered, "duplicates": self.duplicates,
            "catchup": self.catchup, "hops_sum": self.hops_sum,
            "series": [[k, *v] for k, v in sorted(self.series.items())],
            "series_docs": self.series_docs, "requests": self.requests, "moves": self.moves,
            "rejoins": self.rejoins,
            "ratios": self.ratios, "from_s": self.from_s if self.from_s < math.inf else None,
            "left_s": self.left_s if self.left_s < math.inf else None})]
