"""CoDD's failure handling (ours; the paper has none), a mixin of
:class:`nodes.cores.codd.CoddCore`: the protocol, and the root's replays.

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
from typing import Any

from nodes.cores.interface import Action, Send, SetTimer
from nodes.messages import Message, MsgType

HEARTBEAT = "heartbeat"  # the timer's name
# The root's changes that move a subtree (and may bring documents out of order there).
MOVES = frozenset({"rejoin", "leave", "reorganize"})


class Repair:
    """The failure half of a CoDD node (module docstring); the state it uses is set up
    by :class:`nodes.cores.codd.CoddCore`."""

    def _heard(self, link: str, now_s: float) -> None:
        if link == self.parent:
            self._heard_parent_s = now_s
        elif link in self.children:
            self._heard_child_s[link] = now_s
            self._lost.discard(link)  # alive after all (its purge will find it so)
        elif self.broker == self.root:
            self._waiting_s[link] = now_s  # a node waiting for a place

    def _silent(self, node: str) -> bool:
        """At the root: whether a node waiting for a place has stopped beating."""
        heard = self._waiting_s.get(node)
        return (self.heartbeat_s > 0 and heard is not None
                and self._now_s - heard > self.failure_periods * self.heartbeat_s)

    def _tick(self, now_s: float) -> list[Action]:
        """Every ``heartbeat_s``: a heartbeat to the parent and each child; an orphan's
        re-join when the parent has been silent too long; a silent child reported lost;
        at the root, a change that waits on a dead node given up, and held re-joins
        started when ready. A node that left the overlay stops (its process runs on)."""
        if self.departed:
            return []
        beat = Message(MsgType.HEARTBEAT, 0, self.broker)
        out: list[Action] = [Send(c, beat) for c in sorted(self.children)]
        if self.parent is not None:
            out.append(Send(self.parent, beat))
        elif self.broker != self.root and self._join_at is not None and not self._left:
            out.append(Send(self.root, beat))  # waiting for a place: the root hears it
        silent_s = self.failure_periods * self.heartbeat_s
        if self.parent is not None and now_s - self._heard_parent_s > silent_s:
            self._orphaned_from, self.parent = self.parent, None
            self._served_upto = None
            if not self._left:  # a node that left only needs what it missed
                self.rejoins += 1
                out += self._ask_rejoin()
        if self.parent is None and self._orphaned_from is not None and not (
                self._left and self._served_upto is not None):
            out += self._ask_served()  # a node that left: once (it wants nothing newer)
        elif (not self.attached and self._join_at is not None and self.client is not None
              and self.broker != self.root):
            out += self._ask_served()  # a newcomer the root has not placed yet
        for c in sorted(self.children):
            heard = self._heard_child_s.setdefault(c, now_s)
            if now_s - heard > silent_s and c not in self._lost:
                self._lost.add(c)  # reported once (again if heard and then silent)
                lost = {"dead": c, "reporter": self.broker}
                out += (self._enqueue("lost", lost) if self.broker == self.root
                        else [Send(self.root, self._tree_msg("lost", **lost))])
        if self.broker == self.root:
            if self._busy is not None and self._stalled(now_s - self._busy_since_s):
                out += self._give_up()
            out += self._next()
        out.append(SetTimer(HEARTBEAT, self.heartbeat_s))
        return out

    def _stalled(self, waited_s: float) -> bool:
        """Whether the root's current change waits on a dead node: after two detection
        times, after one when a loss is waiting (likely the node it waits on), at once
        when the node it places stopped beating."""
        kind, p = self._busy
        return (waited_s > 2 * self._detect_s or bool(self._losses and waited_s > self._detect_s)
                or (kind in ("join", "rejoin") and self._silent(p["node"])))

    def _ask_served(self) -> list[Action]:
        """While cut off (an orphan, or a node that left whose parent failed) or not
        yet placed (a newcomer whose join waits behind repairs), every tick: the
        documents published since the last ask, for this node's subtree (a newcomer:
        from its ``from_s`` on), straight from the root."""
        first = self._served_upto is None
        after = self._tree_seq if self._served_upto is None else self._served_upto
        return [Send(self.root, self._tree_msg(
            "serve", members=self.subtree(), after=after, first=first,
            from_s=None if self.attached else self.from_s))]

    def _on_serve(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        after = self._replay_after(p["after"]) if p["first"] else p["after"]
        self._served[link] = self.last_seq
        from_s = -math.inf if p["from_s"] is None else p["from_s"]
        return [*self._replay(p["members"], after, from_s),
                Send(link, self._tree_msg("served", upto=self.last_seq))]

    def _on_served(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        if self.parent is None:
            self._served_upto = p["upto"]
        return []

    def _ask_rejoin(self) -> list[Action]:
        return [Send(self.root, self._tree_msg(
            "add", node=self.broker, purpose="rejoin", dead=self._orphaned_from,
            members=self.subtree(), since=self._tree_seq))]

    def _on_lost(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        return self._enqueue("lost", dict(p))

    def _start_lost(self, p: dict[str, Any]) -> list[Action]:
        purge = {"dead": p["dead"], "cid": self._cid}
        if p["reporter"] == self.broker:
            return self._on_purge(self.broker, purge)
        return [Send(p["reporter"], self._tree_msg("purge", **purge))]

    def _on_purge(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """The root's go for a lost child: drop its whole entry (if it is still silent)
        and send what was dropped up."""
        dead = p["dead"]
        if dead not in self._lost or dead not in self.children:
            return self._done_remote(p["cid"])
        self._lost.discard(dead)
        self._heard_child_s.pop(dead, None)
        names = sorted(self.children[dead].members)
        self._take_names(dead, names)
        return self._purged_up(names, p["cid"])

    def _on_purged(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        names = [n for n in p["names"] if self.where.get(n) == link]
        if names:
            self._take_names(link, names)
        return self._purged_up(names, p["cid"])

    def _purged_up(self, names: list[str], cid: int) -> list[Action]:
        """Pass the names this node dropped to its parent; the change ends where none
        are left to drop, at the root, or at an orphan."""
        if names and self.parent is not None:
            return [Send(self.parent, self._tree_msg("purged", names=names, cid=cid))]
        return self._done_remote(cid)

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

    def _start_rejoin(self, p: dict[str, Any]) -> list[Action]:
        return self._descend({"node": p["node"], "want": self._wanted(p["members"]),
                              "purpose": "rejoin", "cid": self._cid, "dead": p["dead"]})

    def _replay(self, members: Mapping[str, Any], after_seq: int,
                from_s: float = -math.inf) -> list[Action]:
        """To each of ``members`` (name -> query), straight from the root: the documents
        of the window it wants published after ``after_seq`` and at or after ``from_s``
        (it keeps the first copy)."""
        out: list[Action] = []
        for member, q in sorted(members.items()):
            query, bit = self._query_of(q), self._bit_of[member]
            for seq, t_s, doc, msg in self._window:
                if seq > after_seq and t_s >= from_s and self._accepts(query, bit, doc):
                    out.append(Send(member, Message(msg.type, msg.msg_id, msg.origin, 1,
                                                    {**msg.payload, "catchup": True})))
        return out

    def _known(self, names: Sequence[str]) -> dict[str, Any]:
        """The queries of those of ``names`` the root's entries hold."""
        return {n: self.children[self.where[n]].members[n] for n in names if n in self.where}

    def _replay_after(self, since: int) -> int:
        """The last document a subtree that last got ``since`` surely has in order: a
        move that ended after ``since`` may have brought documents from its start out of
        order."""
        return min([since, *(first for first, last in self._moves_log if last >= since)])

    def _rejoin_after(self, rejoin: Mapping[str, Any]) -> int:
        """What a re-joined subtree surely has: up to ``since`` (see _replay_after), or
        as far as the root served it while it was cut off (an older serving is of an
        earlier cut, before ``since``)."""
        return max(self._replay_after(rejoin["since"]), self._served.get(rejoin["node"], -1))

    def _give_up(self) -> list[Action]:
        """The current change has waited on a dead node for two detection times: replay
        what its nodes may have missed, tell the node that asked, and go on."""
        assert self._busy is not None
        kind, p = self._busy
        self.decisions.append({"change": kind, "outcome": "given up",
                               "round": len(self.rounds) - 1})
        self._bfs = None
        out: list[Action] = []
        if kind == "join":
            out += self._catch_up(p)
        elif kind == "rejoin":
            out += self._replay(p["members"], self._rejoin_after(p))
        elif kind in ("leave", "reorganize") and p.get("members"):
            out += self._replay(self._known(p["members"]), self._busy_seq)
        if kind in ("join", "rejoin", "leave"):
            out.append(Send(p["node"], self._tree_msg("retry", change=kind)))
        return out + self._finish(moved=kind in MOVES)

    def _on_departed(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """A node left the overlay before its leave ended: drop its queued changes, and
        give up the current one if it is its own."""
        node = p["node"]
        self._gone.add(node)
        self._held = [h for h in self._held if h[2]["node"] != node]
        for queue in (self._ops, self._reorgs):
            kept = [(k, q) for k, q in queue if node not in (q.get("node"), q.get("requester"))]
            queue.clear()
            queue.extend(kept)
        if self._busy is not None and node in (self._busy[1].get("node"),
                                               self._busy[1].get("requester")):
            return self._give_up()
        return []

    def _on_retry(self, link: str, p: Mapping[str, Any]) -> list[Action]:
        """The root gave up this node's change: ask again if it still needs it."""
        change = p["change"]
        if change == "join":
            return self._join()
        if change == "rejoin" and self.parent is None and self.attached and not self._left:
            return self._ask_rejoin()
        if change == "leave" and self._leaving and not self._left:
            return self._ask_leave()
        return []

