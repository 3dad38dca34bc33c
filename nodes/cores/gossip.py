"""``gossip``: a small peer-to-peer core that learns its peers from messages and talks to
them directly over links opened on demand; the reference for runtimes whose overlay
changes while they run (Meghdoot's CAN and CoDD's trees build on the same machinery).

Readings and choices (ours; no paper):

- **Membership.** A node named in a JOIN client operation is dormant until it; it then
  sends JOIN to the bootstrap node its payload names (``{"bootstrap": NAME}``). The
  bootstrap answers with MEMBERS (its member list, the newcomer included) and announces the
  newcomer to every other member with MEMBER; a member adds what it hears of. A node with
  no JOIN operation is a member from the start and knows only itself (a seed). LEAVE (a
  client operation) sends LEAVE to every member and closes each link (:class:`Disconnect`);
  a member that receives LEAVE forgets the sender.
- **Failure detection** (optional, ``heartbeat_s`` > 0): from its first event (a seed)
  or its JOIN, every ``heartbeat_s`` a member
  sends HEARTBEAT to every member it knows; one not heard from for ``timeout_s`` is declared
  dead (a ``member_down`` record) and forgotten. A lost link alone (:class:`LinkDown`)
  proves nothing (a peer may have closed an idle link) and is only recorded.
- **Publish/subscribe.** Subscriptions stay at the subscriber's node (as in ``flood``); a
  publication from a local client is matched locally and sent once to every other member
  it knows, which matches it against its own local subscriptions and never forwards it.
  Every matching subscriber gets it exactly once as long as the publisher's member list is
  complete: the workload's settle time must cover a join's three messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodes.cores.actions import unhandled
from nodes.cores.interface import (
    Action,
    Arrived,
    Deliver,
    Disconnect,
    Event,
    FromClient,
    LinkDown,
    LinkUp,
    Record,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.cores.params import Param
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json

PARAMS = (
    Param("heartbeat_s", "float", 0.0, "s",
          "interval between heartbeats to every known member (0: no failure detection)",
          minimum=0),
    Param("timeout_s", "float", 2.0, "s", "silence after which a member is declared dead",
          minimum=1e-3),
)
_HEARTBEAT_TIMER = "heartbeat"
_IGNORED = frozenset({MsgType.ADVERTISE, MsgType.UNADVERTISE})


class GossipCore:
    """One gossip node (see the module docstring)."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        self.heartbeat_s = float(params["heartbeat_s"])
        self.timeout_s = float(params["timeout_s"])
        # The runtime keeps a node that will JOIN dormant (no events) until its JOIN, so a
        # core starts as a member that knows only itself: a seed, or a node about to join.
        self.joined = True
        self.members: set[str] = {broker}
        self._heard_s: dict[str, float] = {}
        self._index = SubscriptionIndex()
        # The last message id used: an int, not itertools.count, which pickles no more
        # from Python 3.14 on (a paused simulation pickles its cores).
        self._last_id = 0
        self._ticking = False

    # ---- helpers ------------------------------------------------------------------------

    def _msg(self, mtype: MsgType, payload: dict[str, Any]) -> Message:
        self._last_id += 1
        return Message(mtype, self._last_id, self.broker, 0, payload)

    def _others(self) -> list[str]:
        return sorted(self.members - {self.broker})

    def _start_ticking(self) -> list[Action]:
        if self.heartbeat_s <= 0 or self._ticking:
            return []
        self._ticking = True
        return [SetTimer(_HEARTBEAT_TIMER, self.heartbeat_s)]

    def _learn(self, names: Sequence[str], now_s: float) -> None:
        for name in names:
            if name not in self.members:
                self.members.add(name)
                self._heard_s[name] = now_s

    # ---- events ---------------------------------------------------------------------------

    def handle(self, event: Event, now_s: float) -> list[Action]:
        out = self._handle(event, now_s)
        # A seed (no JOIN of its own) starts its heartbeats with its first event, a joiner
        # with its JOIN (and again after a LEAVE and a new JOIN).
        return (self._start_ticking() if self.joined else []) + out

    def _handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, FromClient):
            return self._from_client(event.client, event.msg, now_s)
        if isinstance(event, Arrived):
            self._heard_s[event.link] = now_s
            return self._arrived(event.link, event.msg, now_s)
        if isinstance(event, TimerFired) and event.name == _HEARTBEAT_TIMER:
            return self._tick(now_s)
        if isinstance(event, LinkDown):
            return [Record("link_lost", {"peer": event.link})]
        if isinstance(event, LinkUp):
            return []
        return []  # statistics windows: nothing to do

    def _from_client(self, client: str, msg: Message, now_s: float) -> list[Action]:
        t = msg.type
        if t is MsgType.JOIN:
            self.joined = True
            self.members.add(self.broker)
            boot = msg.payload.get("bootstrap")
            out: list[Action] = []
            if isinstance(boot, str) and boot != self.broker:
                self._learn([boot], now_s)
                out.append(Send(boot, self._msg(MsgType.JOIN, {})))
            return out
        if t is MsgType.LEAVE:
            out = []
            for m in self._others():
                out += [Send(m, self._msg(MsgType.LEAVE, {})), Disconnect(m)]
            self.joined, self.members = False, set()
            return out
        if t is MsgType.SUBSCRIBE:
            self._index.add((client, msg.msg_id), filter_from_json(msg.payload["filter"]))
            return []
        if t is MsgType.UNSUBSCRIBE:
            self._index.remove((client, msg.payload["sub_id"]))
            return []
        if t is MsgType.PUBLISH:
            copy = msg.forwarded()
            return [*self._deliver(msg), *(Send(m, copy) for m in self._others())]
        if t in _IGNORED:
            return []
        return [unhandled(msg)]

    def _arrived(self, peer: str, msg: Message, now_s: float) -> list[Action]:
        t = msg.type
        if t is MsgType.JOIN and "members" in msg.payload:  # our bootstrap's answer
            self._learn(msg.payload["members"], now_s)
            return []
        if t is MsgType.JOIN and "member" in msg.payload:  # a newcomer, announced
            self._learn([msg.payload["member"]], now_s)
            return []
        if t is MsgType.JOIN:  # we are the bootstrap of ``peer``
            others = self._others()
            self._learn([peer], now_s)
            out: list[Action] = [Send(peer, self._msg(MsgType.JOIN,
                                                      {"members": sorted(self.members)}))]
            out += [Send(m, self._msg(MsgType.JOIN, {"member": peer})) for m in others]
            return out
        if t is MsgType.HEARTBEAT:
            self._learn([peer], now_s)
            return []
        if t is MsgType.LEAVE:
            self.members.discard(peer)
            self._heard_s.pop(peer, None)
            return []
        if t is MsgType.PUBLISH:
            return self._deliver(msg)
        return [unhandled(msg)]

    def _deliver(self, msg: Message) -> list[Action]:
        clients = sorted({c for c, _ in self._index.match(msg.payload["attrs"])})
        return [Deliver(c, msg) for c in clients]

    def _tick(self, now_s: float) -> list[Action]:
        if not self.joined:
            self._ticking = False
            return []
        out: list[Action] = [SetTimer(_HEARTBEAT_TIMER, self.heartbeat_s)]
        for m in self._others():
            if now_s - self._heard_s.get(m, now_s) > self.timeout_s:
                self.members.discard(m)
                self._heard_s.pop(m, None)
                out.append(Record("member_down", {"member": m}))
            else:
                out.append(Send(m, self._msg(MsgType.HEARTBEAT, {})))
        return out
