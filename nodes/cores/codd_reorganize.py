"""CoDD's reorganization (Fig. 7), an object :class:`nodes.cores.codd.CoddCore` owns: a
node's requests, every ``timeout_docs`` documents, to move the child that costs it most
spurious documents; the root's rounds of requests; and the root's breadth-first search,
one request at a time, for a new parent of lower overhead, which every node it asks
answers for itself.

Overheads are counts of documents of the statistics window (``window_docs``); shares
(``threshold_pct``, ``delta_pct``) are fractions of the documents of a period.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodes.cores.interface import Action, Send

if TYPE_CHECKING:
    from nodes.cores.codd import CoddCore


def popcount(bits: int) -> int:
    """Number of set bits."""
    return bits.bit_count()


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
    # the price of a searched node's ancestors on the search path (``search_price: path``)
    above: dict[str, int] = field(default_factory=dict)
    best: str | None = None
    best_ov: float = math.inf
    queried: int = 0


class Reorganization:
    """A node's part in reorganization: its requests and its answers to the root's
    search; at the root, the rounds and the search."""

    def __init__(self, core: CoddCore, params: Mapping[str, Any]) -> None:
        self.core = core
        self.enabled = bool(params["reorganize"]) and params["tree"] == "codd"
        self.threshold = params["threshold_pct"] / 100
        self.cutoff: int = params["cutoff"]
        self.delta = params["delta_pct"] / 100
        self.ask: str = params["ask"]
        self.price: str = params["search_price"]
        # Documents received since the last check (those down the tree), and of them
        # (catch-ups too) the spurious ones: the period's share.
        self.since = self.spur_since = 0
        self.requests = 0
        self._request_share: float | None = None  # share when asked; a move pending
        self._granted_seq = -1  # the last document this node had when its move was done
        self._grant_s = 0.0  # when it was done
        # [share before, share after, granted_seq] per move: the seq orders the moves of
        # all nodes in the run (Fig. 18's "reorganization events")
        self.ratios: list[list[float]] = []
        # Per move whose requester was this node: [share before, share of the period the
        # move fell in, share over that period's documents after the move (None: none
        # came), the move's time (s), seconds until a later period's share was back at
        # the share before (None: not before the end or the node's next move)]; the last
        # one is watched until then.
        self.effects: list[list[float | None]] = []
        self._at_grant: tuple[int, int] | None = None  # (since, spur_since) at the move
        self._watch: list[float | None] | None = None
        # Per subtree a move brought here, at the new parent: [share over the last full
        # period before it came (None: no check yet), share over the period's documents
        # after it came (None: none came)].
        self.adoptions: list[list[float | None]] = []
        self._last_share: float | None = None
        self._adopted: tuple[float | None, int, int] | None = None
        # the root
        self._batch: dict[str, dict[str, Any]] = {}
        self.bfs: _Bfs | None = None

    # ---- requests (at any node) -------------------------------------------------------

    def check(self) -> list[Action]:
        """Every ``timeout_docs`` documents: note a pending move's effect, and ask for a
        move when the spurious share reached the threshold."""
        core = self.core
        share = self.spur_since / self.since
        if self._adopted is not None:
            before, n0, s0 = self._adopted
            self.adoptions.append([before, self._share_after(n0, s0)])
            self._adopted = None
        if self._watch is not None and share >= (self._watch[0] or 0):
            self._watch[4] = core._now_s - (self._watch[3] or 0)  # drift undid the gain
            self._watch = None
        if self._request_share is not None and self._request_share < 0:
            # the move happened
            before = -self._request_share
            self.ratios.append([before, share, self._granted_seq])
            n0, s0 = self._at_grant or (0, 0)
            self._watch = [before, share, self._share_after(n0, s0), self._grant_s, None]
            self.effects.append(self._watch)
        rose = self._last_share is None or share > self._last_share
        self._last_share = share
        self.since = self.spur_since = 0
        self._request_share = None
        if (not self.enabled or not core.children or core._leaving or share <= 0
                or share < self.threshold or (self.ask == "on_increase" and not rose)):
            return []
        child = self._least_overlap()
        if child is None:
            return []
        self.requests += 1
        self._request_share = share
        return [Send(core.root, core._tree_msg("reorganize", node=child,
                                               requester=core.broker, overhead=share))]

    def granted(self) -> None:
        """This node, the old parent, lost the child it asked to move: the move
        happened, and the next check notes its effect."""
        if self._request_share is not None:
            self._request_share = -abs(self._request_share)
            self._granted_seq = self.core.last_seq
            self._at_grant = (self.since, self.spur_since)
            self._grant_s = self.core._now_s

    def adopted(self) -> None:
        """A move brought a subtree here (the new parent): the next check notes the
        share of the documents that came after it."""
        self._adopted = (self._last_share, self.since, self.spur_since)

    def _share_after(self, since0: int, spur0: int) -> float | None:
        """The spurious share of this period's documents after the counts were
        ``since0`` and ``spur0`` (None: none came since)."""
        got = self.since - since0
        return (self.spur_since - spur0) / got if got > 0 else None

    def _least_overlap(self) -> str | None:
        """The child to move: of those whose move would lower this node's overhead (it
        receives documents for them alone), the one of least overlap with this node's
        own documents (the share of what it was sent that this node wanted too); ties:
        the one that costs most, then the name. None if no child costs anything alone."""
        core = self.core
        own = core._win(core.own_bits)
        best: tuple[float, int, str] | None = None
        for c, ch in core.children.items():
            cost = self.current_cost(c)
            if cost == 0:
                continue
            sent = core._win(ch.sent)
            key = (popcount(sent & own) / popcount(sent), -cost, c)
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def current_cost(self, child: str) -> int:
        """Documents this node receives only because of ``child`` (its spurious data
        that moving the child would save)."""
        core = self.core
        others = core.own_bits
        for c, ch in core.children.items():
            if c != child:
                others |= ch.sent
        return popcount(core._win(core.children[child].sent & ~others))

    # ---- the root's rounds and search -------------------------------------------------

    def on_reorganize(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if not self.core.changes.gone.intersection((p["node"], p["requester"])):
            self._batch.setdefault(p["node"], dict(p))
        return []

    def close_round(self) -> list[Action]:
        """The end of a round of ``timeout_docs`` documents: the round's requests,
        heaviest first, ``cutoff`` of them, join the queue of tree changes."""
        core = self.core
        requests = sorted(self._batch.values(), key=lambda r: (-r["overhead"], r["node"]))
        admitted = requests[: self.cutoff] if self.cutoff else requests
        core.rounds.append([len(core.rounds), len(requests), len(admitted)])
        self._batch = {}
        out: list[Action] = []
        for r in admitted:
            out += core.changes.enqueue("reorganize", r)
        return out

    def start(self, p: dict[str, Any]) -> list[Action]:
        """The root starts a request: it asks the requester whether the node to move is
        still its child."""
        core, changes = self.core, self.core.changes
        if changes.gone.intersection((p["node"], p["requester"])):  # asked before leaving
            return changes.finish(moved=False)
        self.bfs = _Bfs(p["node"], p["requester"], p["overhead"])
        return [Send(p["requester"], core._tree_msg("check", node=p["node"], cid=changes.cid))]

    def on_check(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        core = self.core
        node, cid = p["node"], p["cid"]
        if node not in core.children or core._leaving or node in core._lost:
            return [Send(link, core._tree_msg("checked", ok=False, cid=cid))]
        return [Send(link, core._tree_msg(
            "checked", ok=True, recv=format(core._win(core.children[node].sent), "x"),
            current=self.current_cost(node), members=sorted(core.children[node].members),
            cid=cid))]

    def _current(self, p: Mapping[str, Any]) -> _Bfs | None:
        """The search a reply belongs to (None: a late reply to a given-up one)."""
        return self.bfs if p.get("cid") == self.core.changes.cid else None

    def on_checked(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        b = self._current(p)
        if b is None:
            return []
        if not p["ok"]:
            self._decided(b, "stale")
            return self.core.changes.finish(moved=False)
        b.recv, b.current = int(p["recv"], 16), p["current"]
        b.exclude = frozenset(p["members"])
        b.frontier = [self.core.broker]
        return self._bfs_level()

    def _bfs_level(self) -> list[Action]:
        core = self.core
        b = self.bfs
        assert b is not None
        b.replies = {}
        b.queried += len(b.frontier)
        out: list[Action] = []
        recv = format(b.recv, "x")
        for x in b.frontier:
            if x == core.broker:
                b.replies[x] = self._overhead_for(b.recv)
            else:
                out.append(Send(x, core._tree_msg("getoverhead", recv=recv,
                                                  cid=core.changes.cid)))
        if len(b.replies) == len(b.frontier):
            out += self._bfs_decide_level()
        return out

    def _overhead_for(self, recv: int) -> tuple[int, bool, list[str]]:
        """compute_overhead(this node, n) for a node n that received ``recv``: the
        documents n would newly bring here; whether there is room; the children."""
        core = self.core
        ov = popcount(recv & ~core._win(core.received_bits))
        return ov, len(core.children) < core.fanout and not core._leaving, sorted(
            c for c in core.children if c not in core._lost)

    def on_getoverhead(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        ov, spare, kids = self._overhead_for(int(p["recv"], 16))
        return [Send(link, self.core._tree_msg("overhead", ov=ov, spare=spare, kids=kids,
                                               cid=p["cid"]))]

    def on_overhead(self, link: str, p: Mapping[str, Any]) -> list[Action]:
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
        the best overhead so far. ``ov`` is the documents new to the node
        (``search_price: parent``) or to it and each ancestor on the search path
        (``path``: "the spurious data that would be added to the system")."""
        core, changes = self.core, self.core.changes
        b = self.bfs
        assert b is not None
        nxt: list[str] = []
        for x in b.frontier:
            ov, spare, kids = b.replies[x]
            if self.price == "path":
                ov += b.above.get(x, 0)
            if spare:
                if x != b.requester and ov < b.best_ov:
                    b.best, b.best_ov = x, ov
            elif 2 * ov < b.best_ov:
                below = [k for k in kids if k not in b.exclude]
                b.above.update(dict.fromkeys(below, ov))
                nxt += below
        b.frontier = nxt
        if nxt:
            return self._bfs_level()
        granted = b.best is not None and b.best_ov < b.current and (
            b.best_ov <= (1 - self.delta) * b.current)
        self._decided(b, "granted" if granted else "refused")
        if not granted:
            return changes.finish(moved=False)
        assert changes.busy is not None
        changes.busy[1]["members"] = sorted(b.exclude)  # replayed to if it is given up
        return [Send(b.node, core._tree_msg("addresult", parent=b.best,
                                            purpose="reorganize", cid=changes.cid))]

    def _decided(self, b: _Bfs, outcome: str) -> None:
        core = self.core
        core.decisions.append({
            "node": b.node, "requester": b.requester, "overhead": b.overhead,
            "current": b.current, "new": None if b.best is None else b.best_ov,
            "parent": b.best, "outcome": outcome, "queried": b.queried,
            "round": len(core.rounds) - 1})
        self.bfs = None
