"""The root's queue of tree changes (ours: the paper's simulator has nothing in flight), an
object :class:`nodes.cores.codd.CoddCore` owns: joins, re-joins, leaves, losses and
reorganization moves, one at a time, so that nothing is lost or delivered twice while the
tree changes; also the Siena emulation's placement, which the root decides alone.

Each change has a number (``cid``) its messages carry: a late message of a change the
root gave up (:mod:`nodes.cores.codd_repair`) ends nothing. Times are in seconds,
documents are counted by their ``seq``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores.codd_repair import MOVES
from nodes.cores.interface import Action, Send
from nodes.cores.multicast_groups import unit_draw

if TYPE_CHECKING:
    from nodes.cores.codd import CoddCore

Change = tuple[str, dict[str, Any]]  # kind (join, rejoin, leave, lost, reorganize), payload


class Changes:
    """The root's tree changes: the queues, the current change, the log of moves and
    what it served nodes that were cut off or waited for a place. Built after the
    core's other parts, whose changes it starts."""

    def __init__(self, core: CoddCore) -> None:
        self.core = core
        self.losses: deque[Change] = deque()  # first
        self.held: list[tuple[float, str, dict[str, Any]]] = []  # re-joins, when ready
        self.ops: deque[Change] = deque()  # joins and leaves
        self.reorgs: deque[Change] = deque()  # after them
        self.busy: Change | None = None
        self.cid = 0  # the number of the root's current (or last) change
        self.busy_since_s = 0.0  # when the root started its current change
        self.busy_seq = -1  # the last document published when it started
        self.moves_log: deque[tuple[int, int]] = deque()  # [first, last] seq of moves
        self.waiting_s: dict[str, float] = {}  # nodes waiting for a place: last heard
        self.served: dict[str, int] = {}  # cut-off subtrees: served up to this seq
        self._pumping = False  # the root is starting queued changes (no re-entry)
        self.gone: set[str] = set()  # nodes that asked to leave (no requests from them)
        self.servers: list[str] = []  # the Siena emulation's servers, in arrival order
        self._clients_of: dict[str, int] = {}
        # Who starts each kind of change.
        self._starts: dict[str, Callable[[dict[str, Any]], list[Action]]] = {
            "join": self._start_join, "rejoin": core.repair.start_rejoin,
            "leave": core.leave.start, "lost": core.repair.start_lost,
            "reorganize": core.reorg.start}

    def enqueue(self, kind: str, p: dict[str, Any]) -> list[Action]:
        """Queue a change of ``kind`` (payload ``p``) and start what can start."""
        core = self.core
        if kind in ("join", "rejoin"):
            self.waiting_s[p["node"]] = core._now_s
        if kind == "rejoin":
            self.held = [h for h in self.held if h[2]["node"] != p["node"]]
            self.held.append((core._now_s + core.repair.detect_s, kind, p))
        else:
            {"reorganize": self.reorgs, "lost": self.losses}.get(kind, self.ops).append(
                (kind, p))
        return self.pump()

    def _pop_change(self) -> Change | None:
        """Losses, then re-joins whose hold is over, then joins and leaves, then
        reorganizations, but none while a re-join is held (a tree with a subtree cut off
        is no basis for one, and the re-join must not wait behind it). A join or re-join
        of a node that stopped beating while it waited is dropped."""
        silent, now_s = self.core.repair.silent, self.core._now_s
        if self.losses:
            return self.losses.popleft()
        self.held = [h for h in self.held if not silent(h[2]["node"])]
        ready = [h for h in self.held if h[0] <= now_s]
        if ready:
            self.held.remove(ready[0])
            return ready[0][1], ready[0][2]
        while self.ops and self.ops[0][0] == "join" and silent(self.ops[0][1]["node"]):
            self.ops.popleft()
        if self.ops:
            return self.ops.popleft()
        if self.reorgs and not self.held:
            return self.reorgs.popleft()
        return None

    def pump(self) -> list[Action]:
        """Start queued changes while none is under way."""
        core = self.core
        out: list[Action] = []
        if self._pumping:
            return out
        self._pumping = True
        try:
            while self.busy is None:
                change = self._pop_change()
                if change is None:
                    break
                self.busy = change
                self.cid += 1
                self.busy_since_s, self.busy_seq = core._now_s, core.last_seq
                out += self._starts[change[0]](change[1])
        finally:
            self._pumping = False
        return out

    def complete(self, cid: int | None, names: Sequence[str] = ()) -> list[Action]:
        """The current change ``cid`` has ended (a late message of a given-up change
        ends nothing): a join's newcomer gets its catch-up, a re-joined subtree its
        replay."""
        repair = self.core.repair
        if self.busy is None or cid != self.cid:
            return []
        kind, p = self.busy
        out: list[Action] = []
        if kind == "join":
            out += self.catch_up(p)
        elif kind == "rejoin":
            out += repair.replay({**repair.known(names), **p["members"]},
                                 repair.rejoin_after(p))
        return out + self.finish(moved=kind in MOVES)

    def finish(self, moved: bool) -> list[Action]:
        """Log a move's span of documents (for replays) and start the next change."""
        core = self.core
        if moved:
            self.moves_log.append((self.busy_seq, core.last_seq))
            while self.moves_log and self.moves_log[0][1] < core.last_seq - core.window_docs:
                self.moves_log.popleft()
        self.busy = None
        return self.pump()

    def _start_join(self, p: dict[str, Any]) -> list[Action]:
        core = self.core
        node = p["node"]
        if core.tree == "siena":
            return [Send(node, core._tree_msg("addresult", parent=self._siena_parent(node),
                                              cid=self.cid))]
        return core._descend({**p, "want": self.wanted({node: p["query"]}), "cid": self.cid})

    def wanted(self, members: Mapping[str, Any]) -> str:
        """The window's documents some of ``members`` (name -> query) wants, as hex bits
        over seq (the extensional statistics a descent compares children by)."""
        core = self.core
        queries = [(core._query_of(q), core._bit_of[m]) for m, q in members.items()]
        want = 0
        for seq, _t, doc, _msg in core._window:
            if any(core._accepts(q, bit, doc) for q, bit in queries):
                want |= 1 << seq
        return format(want, "x")

    def _siena_parent(self, node: str) -> str:
        """The Siena emulation's place for a newcomer (docs/design/codd.md)."""
        core = self.core
        f = core.fanout
        free = [s for s in self.servers if self._clients_of[s] < f]
        if free and unit_draw(f"siena-server/{node}", 0) >= 1 / (f + 1):
            server = free[int(unit_draw(f"siena-client/{node}", 0) * len(free))]
            self._clients_of[server] += 1
            return server
        k = len(self.servers)
        self.servers.append(node)
        self._clients_of[node] = 0
        return core.root if k < f else self.servers[(k - f) // f]

    def catch_up(self, join: Mapping[str, Any]) -> list[Action]:
        """The documents a newcomer wants that were published from its ``from_s`` on
        (after those served to it while it waited), sent straight to it (it keeps the
        first copy of each)."""
        node = join["node"]
        return self.core.repair.replay({node: join["query"]}, self.served.get(node, -1),
                                       float(join["from_s"]))
