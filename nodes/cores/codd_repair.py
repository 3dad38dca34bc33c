"""CoDD's failure handling (ours; the paper has none), an object
:class:`nodes.cores.codd.CoddCore` owns: the protocol, and the root's replays.

With ``heartbeat_s > 0`` a node sends a heartbeat to its parent and to each child every
``heartbeat_s``, and a node waiting for a place (a newcomer the root has not placed, an
orphan) sends one to the root; only heartbeats count as signs of life (a node hears
from nodes that are no longer its parent or child for other reasons). Silent for more
than ``failure_periods`` intervals:

- a silent *parent* makes its child an **orphan**, which asks the root (``add``,
  purpose ``rejoin``) to place it again *with its subtree*, saying the last document
  that came down the tree to it (``since``);
- a silent *child* is reported **lost** to the root by its parent: the root sends
  ``purge`` to the parent, which drops the child's whole entry and sends the names it
  dropped up (``purged``); each ancestor drops those it still holds under the child the
  message came from and passes on only those, so names that re-joined elsewhere
  meanwhile stay.

Repairs are tree changes like the others, serialised by the root and handled before
joins, leaves and reorganizations: losses first, then re-joins, each held for one
detection time (``(failure_periods + 1) * heartbeat_s``) so that the losses it may
depend on have been reported (a crashed node's parent and children find it silent
within that time of each other); no reorganization starts while a re-join is held.
That order is what keeps an orphan from carrying stale names: an entry for a node that
left a subtree while a failure cut the message telling so (a move, a re-join) is
dropped by the loss its old parent reports (the node no longer sends it heartbeats)
before the subtree re-joins.

No document is lost for a survivor, and none is delivered twice (each node keeps the
first copy):

- while cut off, an orphan asks the root every tick to **serve** its subtree: the root
  sends each member, straight, the documents of its window it wants published since
  the last serving (the first time: after ``since``, or after the start of any move that
  ended after it, since a move may bring documents out of order); a newcomer waiting
  for its join is served the same way from its ``from_s`` on, and a node that left
  whose parent failed before its removal, once;
- a re-joined subtree's members then get the rest, from where the serving ended, and a
  newcomer its catch-up.

A change that waits on a node that died is **given up**: after two detection times,
after one when a loss is waiting (likely the node it waits on), at once when the node
it places stopped beating. Its messages carry the root's change number (``cid``), so
late ones change filters but end nothing; the root replays what the change's nodes may
have missed and sends ``retry`` to the node that asked, which asks again if it still
needs to (a leave asked again whose heir has taken the node's place re-joins the rest
under that heir). A node that leaves the overlay before its leave ended tells the root
(``departed``), which drops its changes; the others repair around it as around a crash.

Documents older than the window are not replayed (the default window holds the paper's
whole run). The Siena emulation has no repair (its server tree is placed by arrival).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores.interface import Action, Send, SetTimer
from nodes.messages import Message, MsgType

if TYPE_CHECKING:
    from nodes.cores.codd import CoddCore

HEARTBEAT = "heartbeat"  # the timer's name
# The root's changes that move a subtree (and may bring documents out of order there).
MOVES = frozenset({"rejoin", "leave", "reorganize"})


class Repair:
    """The failure half of a CoDD node (module docstring). The root's queue state it
    reads and changes is :class:`nodes.cores.codd_changes.Changes`'; when the node last
    heard from its parent and children, and the children it found silent, the core
    keeps (its tree messages change them too)."""

    def __init__(self, core: CoddCore) -> None:
        self.core = core
        # The detection time: a crashed node's parent and children find it silent
        # within this of each other.
        self.detect_s = (core.failure_periods + 1) * core.heartbeat_s
        self._orphaned_from: str | None = None  # the parent found dead
        self._served_upto: int | None = None  # cut off: the root served us up to here

    def heard(self, link: str, now_s: float) -> None:
        """A heartbeat from ``link`` at ``now_s`` (s)."""
        core = self.core
        if link == core.parent:
            core._heard_parent_s = now_s
        elif link in core.children:
            core._heard_child_s[link] = now_s
            core._lost.discard(link)  # alive after all (its purge will find it so)
        elif core.broker == core.root:
            core.changes.waiting_s[link] = now_s  # a node waiting for a place

    def silent(self, node: str) -> bool:
        """At the root: whether a node waiting for a place has stopped beating."""
        core = self.core
        heard = core.changes.waiting_s.get(node)
        return (core.heartbeat_s > 0 and heard is not None
                and core._now_s - heard > core.failure_periods * core.heartbeat_s)

    def tick(self, now_s: float) -> list[Action]:
        """Every ``heartbeat_s``: a heartbeat to the parent and each child; an orphan's
        re-join when the parent has been silent too long; a silent child reported lost;
        at the root, a change that waits on a dead node given up, and held re-joins
        started when ready. A node that left the overlay stops (its process runs on)."""
        core, changes = self.core, self.core.changes
        if core.departed:
            return []
        beat = Message(MsgType.HEARTBEAT, 0, core.broker)
        out: list[Action] = [Send(c, beat) for c in sorted(core.children)]
        if core.parent is not None:
            out.append(Send(core.parent, beat))
        elif core.broker != core.root and core._join_at is not None and not core._left:
            out.append(Send(core.root, beat))  # waiting for a place: the root hears it
        silent_s = core.failure_periods * core.heartbeat_s
        if core.parent is not None and now_s - core._heard_parent_s > silent_s:
            self._orphaned_from, core.parent = core.parent, None
            self._served_upto = None
            if not core._left:  # a node that left only needs what it missed
                core.rejoins += 1
                out += self._ask_rejoin()
        if core.parent is None and self._orphaned_from is not None and not (
                core._left and self._served_upto is not None):
            out += self._ask_served()  # a node that left: once (it wants nothing newer)
        elif (not core.attached and core._join_at is not None and core.client is not None
              and core.broker != core.root):
            out += self._ask_served()  # a newcomer the root has not placed yet
        for c in sorted(core.children):
            heard = core._heard_child_s.setdefault(c, now_s)
            if now_s - heard > silent_s and c not in core._lost:
                core._lost.add(c)  # reported once (again if heard and then silent)
                lost = {"dead": c, "reporter": core.broker}
                out += (changes.enqueue("lost", lost) if core.broker == core.root
                        else [Send(core.root, core._tree_msg("lost", **lost))])
        if core.broker == core.root:
            if changes.busy is not None and self._stalled(now_s - changes.busy_since_s):
                out += self._give_up()
            out += changes.pump()
        out.append(SetTimer(HEARTBEAT, core.heartbeat_s))
        return out

    def _stalled(self, waited_s: float) -> bool:
        """Whether the root's current change waits on a dead node: after two detection
        times, after one when a loss is waiting (likely the node it waits on), at once
        when the node it places stopped beating."""
        changes = self.core.changes
        kind, p = changes.busy
        return (waited_s > 2 * self.detect_s
                or bool(changes.losses and waited_s > self.detect_s)
                or (kind in ("join", "rejoin") and self.silent(p["node"])))

    def _ask_served(self) -> list[Action]:
        """While cut off (an orphan, or a node that left whose parent failed) or not
        yet placed (a newcomer whose join waits behind repairs), every tick: the
        documents published since the last ask, for this node's subtree (a newcomer:
        from its ``from_s`` on), straight from the root."""
        core = self.core
        first = self._served_upto is None
        after = core._tree_seq if self._served_upto is None else self._served_upto
        return [Send(core.root, core._tree_msg(
            "serve", members=core.subtree(), after=after, first=first,
            from_s=None if core.attached else core.from_s))]

    def on_serve(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        core = self.core
        after = self._replay_after(p["after"]) if p["first"] else p["after"]
        core.changes.served[link] = core.last_seq
        from_s = -math.inf if p["from_s"] is None else p["from_s"]
        return [*self.replay(p["members"], after, from_s),
                Send(link, core._tree_msg("served", upto=core.last_seq))]

    def on_served(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if self.core.parent is None:
            self._served_upto = p["upto"]
        return []

    def _ask_rejoin(self) -> list[Action]:
        core = self.core
        return [Send(core.root, core._tree_msg(
            "add", node=core.broker, purpose="rejoin", dead=self._orphaned_from,
            members=core.subtree(), since=core._tree_seq))]

    def on_lost(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self.core.changes.enqueue("lost", dict(p))

    def start_lost(self, p: dict[str, Any]) -> list[Action]:
        """The root starts a loss: the reporter purges the lost child."""
        core = self.core
        purge = {"dead": p["dead"], "cid": core.changes.cid}
        if p["reporter"] == core.broker:
            return self.on_purge(core.broker, purge)
        return [Send(p["reporter"], core._tree_msg("purge", **purge))]

    def on_purge(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """The root's go for a lost child: drop its whole entry (if it is still silent)
        and send what was dropped up."""
        core = self.core
        dead = p["dead"]
        if dead not in core._lost or dead not in core.children:
            return core._done_remote(p["cid"])
        core._lost.discard(dead)
        core._heard_child_s.pop(dead, None)
        names = sorted(core.children[dead].members)
        core._take_names(dead, names)
        return self._purged_up(names, p["cid"])

    def on_purged(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        core = self.core
        names = [n for n in p["names"] if core.where.get(n) == link]
        if names:
            core._take_names(link, names)
        return self._purged_up(names, p["cid"])

    def _purged_up(self, names: list[str], cid: int) -> list[Action]:
        """Pass the names this node dropped to its parent; the change ends where none
        are left to drop, at the root, or at an orphan."""
        core = self.core
        if names and core.parent is not None:
            return [Send(core.parent, core._tree_msg("purged", names=names, cid=cid))]
        return core._done_remote(cid)

    def start_rejoin(self, p: dict[str, Any]) -> list[Action]:
        """The root starts a held re-join: a descent from the root, as a join's."""
        core = self.core
        return core._descend({"node": p["node"], "want": core.changes.wanted(p["members"]),
                              "purpose": "rejoin", "cid": core.changes.cid,
                              "dead": p["dead"]})

    def replay(self, members: Mapping[str, Any], after_seq: int,
               from_s: float = -math.inf) -> list[Action]:
        """To each of ``members`` (name -> query), straight from the root: the documents
        of the window it wants published after ``after_seq`` and at or after ``from_s``
        (s; it keeps the first copy)."""
        core = self.core
        out: list[Action] = []
        for member, q in sorted(members.items()):
            query, bit = core._query_of(q), core._bit_of[member]
            for seq, t_s, doc, msg in core._window:
                if seq > after_seq and t_s >= from_s and core._accepts(query, bit, doc):
                    out.append(Send(member, Message(msg.type, msg.msg_id, msg.origin, 1,
                                                    {**msg.payload, "catchup": True})))
        return out

    def known(self, names: Sequence[str]) -> dict[str, Any]:
        """The queries of those of ``names`` the root's entries hold."""
        core = self.core
        return {n: core.children[core.where[n]].members[n] for n in names if n in core.where}

    def _replay_after(self, since: int) -> int:
        """The last document a subtree that last got ``since`` surely has in order: a
        move that ended after ``since`` may have brought documents from its start out of
        order."""
        moves_log = self.core.changes.moves_log
        return min([since, *(first for first, last in moves_log if last >= since)])

    def rejoin_after(self, rejoin: Mapping[str, Any]) -> int:
        """What a re-joined subtree surely has: up to ``since`` (see _replay_after), or
        as far as the root served it while it was cut off (an older serving is of an
        earlier cut, before ``since``)."""
        return max(self._replay_after(rejoin["since"]),
                   self.core.changes.served.get(rejoin["node"], -1))

    def _give_up(self) -> list[Action]:
        """The current change has waited on a dead node for two detection times: replay
        what its nodes may have missed, tell the node that asked, and go on."""
        core, changes = self.core, self.core.changes
        assert changes.busy is not None
        kind, p = changes.busy
        core.decisions.append({"change": kind, "outcome": "given up",
                               "round": len(core.rounds) - 1})
        core.reorg.bfs = None
        out: list[Action] = []
        if kind == "join":
            out += changes.catch_up(p)
        elif kind == "rejoin":
            out += self.replay(p["members"], self.rejoin_after(p))
        elif kind in ("leave", "reorganize") and p.get("members"):
            out += self.replay(self.known(p["members"]), changes.busy_seq)
        if kind in ("join", "rejoin", "leave"):
            out.append(Send(p["node"], core._tree_msg("retry", change=kind)))
        return out + changes.finish(moved=kind in MOVES)

    def on_departed(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """A node left the overlay before its leave ended: drop its queued changes, and
        give up the current one if it is its own."""
        changes = self.core.changes
        node = p["node"]
        changes.gone.add(node)
        changes.held = [h for h in changes.held if h[2]["node"] != node]
        for queue in (changes.ops, changes.reorgs):
            kept = [(k, q) for k, q in queue if node not in (q.get("node"), q.get("requester"))]
            queue.clear()
            queue.extend(kept)
        if changes.busy is not None and node in (changes.busy[1].get("node"),
                                                 changes.busy[1].get("requester")):
            return self._give_up()
        return []

    def on_retry(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """The root gave up this node's change: ask again if it still needs it."""
        core = self.core
        change = p["change"]
        if change == "join":
            return core._join()
        if change == "rejoin" and core.parent is None and core.attached and not core._left:
            return self._ask_rejoin()
        if change == "leave" and core._leaving and not core._left:
            return core.leave.ask()
        return []
