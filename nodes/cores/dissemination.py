"""The agent shared by the bulk-dissemination cores: membership, trees, sliced data.

LBDD (:mod:`nodes.cores.lbdd`) and the point-to-point baselines (:mod:`nodes.cores.p2p`)
differ only in the tree they build and in how a sender paces its children; everything
else is this class. Our reading of the paper's system model (Section 2.1), with the
choices it leaves open:

**Membership.** Every node runs one agent (a broker); its users (publisher and
subscriber clients) talk only to it. Agents are fully connected, so "informing all other
agents in a flooding way" is one hop: an agent sends its JOIN (payload ``ip``, ``pubs``,
``subs``: its own address and its users' topics) straight to every neighbour when a
local user advertises or subscribes. Every ``heartbeat_s`` (0.5 s) it sends the same
fields as a HEARTBEAT, so an agent that comes late learns everybody within one period.
Any message from an agent proves it alive; an agent not heard from for ``timeout_s``
(four heartbeats, checked at each heartbeat) is removed, which the paper equates with unsubscribing
from every topic (Section 3.4), and is let back in when it is heard again. Lost links
(:class:`~nodes.cores.interface.LinkDown`) are not used for detection: the paper detects failures by
heartbeat, and the runtime only loses a link when the peer dies. Link statistics are
not used either. Timers start at the agent's first event.

**Transfers and trees.** Data is published per (source agent, topic). The tree of a
transfer spans the source and every live agent subscribing to the topic (the source's
own subscribers get the data locally): ``tree(source_ip, member_ips)`` gives each
member's parent. Every agent computes the same tree from the same membership; after a
membership change (a join, a timeout) each agent recomputes it (the path update of
Algorithm 3), ``path_update_s`` (0 s) later, so that a burst of changes at one instant
costs one computation. A ``path`` record gives the agent's new parent and children.

**Data.** DATA payload ``topic``, ``source``, ``index``, ``n_slices``, ``data_bytes``;
the slice is the binary ``body``. The source's agent takes slices from its local
publisher (``source`` is added there). Every agent stores the slices it holds (so it can
resume a child after a path update), delivers each slice once to each local subscriber
of the topic, and counts, acknowledges and otherwise ignores a slice it already holds.

**Flow control.** A receiver acknowledges every slice to the agent it came from
(DATA_ACK). A sender keeps at most ``window_slices`` unacknowledged slices per child
(``window_per_child``) or over all its children together, so an overlay output queue
holds at most that many slices and the TCP link under it does the rest. An agent
acknowledges a slice only once it has passed it to every child that needs it, so a slow
subtree slows its parent and, hop by hop, the publisher's agent: the tree moves at the
pace of its slowest path (the paper's per-subscriber rate "remains around 24 Mbit/s").
The publisher's agent takes the data from its local user as fast as the loopback TCP
connection carries it.

**Resume.** When an agent's children change, it asks each new child which slices it
holds (HAVE_QUERY); the child answers HAVE (``have``: half-open index ranges) whatever
its own view of the tree, and the parent sends it nothing before that answer, then only
what it lacks: first what the parent already stores, then new slices as they arrive. No
transfer restarts, and the parent's view alone decides, so the answer is never stale:
a HAVE from an agent that is not (or no longer) a child is ignored. While views differ
(an old parent has not yet noticed the change), a slice may arrive twice: it is counted
as a duplicate and never delivered twice. Slices lost with a link whose peer lives on
are not resent (the runtime only loses a link when its peer dies).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import unhandled
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
from nodes.messages import Message, MsgType

if TYPE_CHECKING:  # annotations only: agents read the overlay, they never build one
    import networkx as nx

TreeFn = Callable[[str, Sequence[str]], dict[str, str]]
"""``(source_ip, member_ips) -> {member_ip: parent_ip}``: a tree rooted at the source."""

HEARTBEAT_TIMER = "heartbeat"
PATH_TIMER = "path_update"
_ANNOUNCE = (MsgType.JOIN, MsgType.HEARTBEAT)


@dataclass(frozen=True)
class _Member:
    """What an agent announced."""

    ip: str
    pubs: frozenset[str]
    subs: frozenset[str]


@dataclass
class _Transfer:
    """One (source agent, topic) as this agent sees it."""

    source: str
    topic: str
    n_slices: int | None = None
    store: dict[int, Message] = field(default_factory=dict)
    parent: str | None = None
    children: tuple[str, ...] = ()
    child_has: dict[str, set[int]] = field(default_factory=dict)  # answered, then sent
    pending: dict[str, deque[int]] = field(default_factory=dict)
    inflight: dict[str, int] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)  # slice -> pending copies
    came_from: dict[int, str] = field(default_factory=dict)  # slice -> link to ack on
    complete: bool = False


def ranges(indices: Iterable[int]) -> list[list[int]]:
    """Sorted indices as half-open ``[lo, hi)`` ranges: ``{0, 1, 2, 5}`` -> ``[[0, 3], [5, 6]]``."""
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def _from_ranges(spans: Iterable[Sequence[int]]) -> set[int]:
    return {i for lo, hi in spans for i in range(int(lo), int(hi))}


def _number(params: Mapping[str, Any], key: str, lo: float) -> float:
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < lo:
        raise ValueError(f"param {key}={value!r}: need a number >= {lo}")
    return float(value)


def agent_params(window_slices: int) -> tuple[Param, ...]:
    """The settings of a dissemination agent whose sender window defaults to
    ``window_slices`` (LBDD 8 per child, point-to-point 1)."""
    return (
        Param("heartbeat_s", "float", 0.5, "s", "interval between heartbeats", minimum=1e-3),
        Param("timeout_s", "float", None, "s",
              "silence after which a member is declared dead (null: 4 x heartbeat_s)",
              minimum=1e-3),
        Param("window_slices", "int", window_slices, "slices",
              "unacknowledged slices a sender keeps in flight", minimum=1),
        Param("path_update_s", "float", 0.0, "s",
              "delay before a membership change rebuilds the buckets", minimum=0),
    )


class DisseminationAgent:
    """One agent; subclasses name the tree and the pacing (see the module docstring).

    Params: ``ip`` (required: the agent's address, which LBDD hashes), ``heartbeat_s``,
    ``timeout_s``, ``window_slices``, ``path_update_s``.
    """

    tree: TreeFn
    window_per_child = True
    default_window_slices = 8

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        ip = params.get("ip")
        if not isinstance(ip, str) or not ip:
            raise ValueError(f"{type(self).__name__} at {broker}: params need 'ip' "
                             "(the agent's address; see nodes.cores.overlay_params)")
        self.ip = ip
        self.heartbeat_s = _number(params, "heartbeat_s", 1e-3)
        self.timeout_s = (4 * self.heartbeat_s if params["timeout_s"] is None
                          else _number(params, "timeout_s", self.heartbeat_s))
        self.window_slices = int(_number(params, "window_slices", 1))
        self.path_update_s = _number(params, "path_update_s", 0.0)
        self._pubs: set[str] = set()
        self._subs: dict[str, set[str]] = {}  # topic -> local subscriber clients
        self._members: dict[str, _Member] = {}
        self._alive: set[str] = set()
        self._heard_s: dict[str, float] = {}
        self._transfers: dict[tuple[str, str], _Transfer] = {}
        self._started = False
        self._path_pending = False
        self._next_id = 0
        self._counters = {"slices_received": 0, "slices_duplicate": 0, "slices_sent": 0}

    # ---- the core interface -----------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Slices received (distinct, from links and local users), duplicates, copies sent."""
        return dict(self._counters)

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see the module docstring for the rules."""
        out: list[Action] = []
        if not self._started:
            self._started = True
            out.append(SetTimer(HEARTBEAT_TIMER, self.heartbeat_s))
        if isinstance(event, Arrived):
            self._arrived(event.link, event.msg, now_s, out)
        elif isinstance(event, FromClient):
            self._from_client(event.client, event.msg, out)
        elif isinstance(event, TimerFired):
            if event.name == HEARTBEAT_TIMER:
                self._heartbeat(now_s, out)
            elif event.name == PATH_TIMER:
                self._path_pending = False
                self._update_paths(out)
        return out

    # ---- membership -------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _announce(self, mtype: MsgType, out: list[Action]) -> None:
        payload = {"ip": self.ip, "pubs": sorted(self._pubs), "subs": sorted(self._subs)}
        msg = Message(mtype, self._new_id(), self.broker, 0, payload)
        out.extend(Send(nb, msg) for nb in self.neighbours)

    def _membership_changed(self, out: list[Action]) -> None:
        if not self._path_pending:
            self._path_pending = True
            out.append(SetTimer(PATH_TIMER, self.path_update_s))

    def _heard(self, agent: str, msg: Message, now_s: float, out: list[Action]) -> None:
        self._heard_s[agent] = now_s
        changed = False
        if msg.type in _ANNOUNCE:
            p = msg.payload
            info = _Member(str(p["ip"]), frozenset(p["pubs"]), frozenset(p["subs"]))
            changed = self._members.get(agent) != info
            self._members[agent] = info
        if agent in self._members and agent not in self._alive:
            self._alive.add(agent)
            out.append(Record("member_up", {"agent": agent, "ip": self._members[agent].ip}))
            changed = True
        if changed:
            self._membership_changed(out)

    def _heartbeat(self, now_s: float, out: list[Action]) -> None:
        self._announce(MsgType.HEARTBEAT, out)
        out.append(SetTimer(HEARTBEAT_TIMER, self.heartbeat_s))
        dead = sorted(a for a in self._alive if now_s - self._heard_s[a] > self.timeout_s)
        for agent in dead:
            self._alive.discard(agent)
            out.append(Record("member_down", {"agent": agent,
                                              "silent_s": round(now_s - self._heard_s[agent], 6)}))
        if dead:
            self._membership_changed(out)

    # ---- trees (path update) ----------------------------------------------------------

    def _ip_of(self, agent: str) -> str:
        return self.ip if agent == self.broker else self._members[agent].ip

    def _update_paths(self, out: list[Action]) -> None:
        """Recompute every transfer this agent takes part in (Algorithm 3)."""
        live = {a: self._members[a] for a in sorted(self._alive)}
        keys = {(self.broker, t) for t in self._pubs}
        keys |= {(a, t) for a, m in live.items() for t in m.pubs if t in self._subs}
        keys |= set(self._transfers)  # a dead source's transfer loses its tree
        for source, topic in sorted(keys):
            tr = self._transfer(source, topic)
            subscribers = [a for a, m in live.items() if topic in m.subs and a != source]
            if topic in self._subs and self.broker != source:
                subscribers.append(self.broker)
            by_ip = {self._ip_of(a): a for a in subscribers}
            parents = self.tree(self._ip_of(source), sorted(by_ip)) if source in live or \
                source == self.broker else {}
            parent_ip = parents.get(self.ip)
            parent = None if parent_ip is None else (
                source if parent_ip == self._ip_of(source) else by_ip[parent_ip])
            children = tuple(sorted(by_ip[m] for m, p in parents.items() if p == self.ip))
            self._repath(tr, parent, children, out)

    def _transfer(self, source: str, topic: str) -> _Transfer:
        tr = self._transfers.get((source, topic))
        if tr is None:
            tr = self._transfers[(source, topic)] = _Transfer(source, topic)
        return tr

    def _repath(self, tr: _Transfer, parent: str | None, children: tuple[str, ...],
                out: list[Action]) -> None:
        if parent == tr.parent and children == tr.children:
            return
        for child in sorted(set(tr.children) - set(children)):
            self._drop_child(tr, child, out)
        query = {"source": tr.source, "topic": tr.topic}
        out.extend(Send(child, Message(MsgType.HAVE_QUERY, self._new_id(), self.broker, 0,
                                       query))
                   for child in children if child not in tr.children)
        tr.parent, tr.children = parent, children
        out.append(Record("path", {"source": tr.source, "topic": tr.topic, "parent": parent,
                                   "children": list(children)}))
        self._pump(tr, out)

    def _drop_child(self, tr: _Transfer, child: str, out: list[Action]) -> None:
        for index in tr.pending.pop(child, ()):
            self._sent_or_dropped(tr, index, out)
        tr.inflight.pop(child, None)
        tr.child_has.pop(child, None)

    def _serve(self, tr: _Transfer, child: str, out: list[Action]) -> None:
        """Start (or restart) serving ``child`` with what it lacks of our store."""
        for index in tr.pending.pop(child, ()):
            self._sent_or_dropped(tr, index, out)
        queue: deque[int] = deque()
        tr.pending[child] = queue
        tr.inflight.setdefault(child, 0)
        for index in sorted(set(tr.store) - tr.child_has[child]):
            self._enqueue(tr, child, index)
        out.append(Record("resume", {"source": tr.source, "topic": tr.topic, "child": child,
                                     "child_has": len(tr.child_has[child]),
                                     "to_send": len(queue)}))

    # ---- data -------------------------------------------------------------------------

    def _from_client(self, client: str, msg: Message, out: list[Action]) -> None:
        topic = str(msg.payload.get("topic", ""))
        if msg.type is MsgType.SUBSCRIBE:
            self._subs.setdefault(topic, set()).add(client)
            self._announce(MsgType.JOIN, out)
            self._membership_changed(out)
        elif msg.type is MsgType.ADVERTISE:
            self._pubs.add(topic)
            self._announce(MsgType.JOIN, out)
            self._membership_changed(out)
        elif msg.type is MsgType.DATA:
            tagged = Message(msg.type, msg.msg_id, msg.origin, msg.hops,
                             {**msg.payload, "source": self.broker}, msg.body)
            self._slice(self._transfer(self.broker, topic), tagged, None, out)
        else:
            out.append(unhandled(msg))

    def _arrived(self, link: str, msg: Message, now_s: float, out: list[Action]) -> None:
        self._heard(link, msg, now_s, out)
        if msg.type in _ANNOUNCE:
            return
        p = msg.payload
        if msg.type not in (MsgType.DATA, MsgType.DATA_ACK, MsgType.HAVE, MsgType.HAVE_QUERY):
            out.append(unhandled(msg))
            return
        tr = self._transfer(str(p["source"]), str(p["topic"]))
        if msg.type is MsgType.DATA:
            self._slice(tr, msg, link, out)
        elif msg.type is MsgType.DATA_ACK:
            if tr.inflight.get(link, 0) > 0:
                tr.inflight[link] -= 1
            self._pump(tr, out)
        elif msg.type is MsgType.HAVE_QUERY:
            payload = {"source": tr.source, "topic": tr.topic, "have": ranges(tr.store)}
            out.append(Send(link, Message(MsgType.HAVE, self._new_id(), self.broker, 0,
                                          payload)))
        elif link in tr.children:  # a HAVE from anyone else is stale or premature
            tr.child_has[link] = _from_ranges(p["have"])
            self._serve(tr, link, out)
            self._pump(tr, out)

    def _slice(self, tr: _Transfer, msg: Message, link: str | None, out: list[Action]) -> None:
        """A slice from neighbour ``link`` (``None``: from the local publisher)."""
        index = int(msg.payload["index"])
        if index in tr.store:
            self._counters["slices_duplicate"] += 1
            if link is not None:
                out.append(self._ack(tr, index, link))
            return
        self._counters["slices_received"] += 1
        tr.n_slices = int(msg.payload["n_slices"])
        tr.store[index] = msg
        out.extend(Deliver(c, msg) for c in sorted(self._subs.get(tr.topic, ())))
        if link is not None:
            tr.came_from[index] = link
            tr.waiting[index] = 0
        for child in tr.children:
            if child in tr.pending and index not in tr.child_has[child]:
                self._enqueue(tr, child, index)
        if link is not None and tr.waiting[index] == 0:
            del tr.waiting[index]
            out.append(self._ack(tr, index, tr.came_from.pop(index)))
        self._pump(tr, out)
        if not tr.complete and len(tr.store) == tr.n_slices:
            tr.complete = True
            out.append(Record("transfer_complete", {"source": tr.source, "topic": tr.topic,
                                                    "slices": tr.n_slices}))

    def _ack(self, tr: _Transfer, index: int, link: str) -> Send:
        payload = {"source": tr.source, "topic": tr.topic, "index": index}
        return Send(link, Message(MsgType.DATA_ACK, self._new_id(), self.broker, 0, payload))

    def _enqueue(self, tr: _Transfer, child: str, index: int) -> None:
        tr.pending[child].append(index)
        if index in tr.waiting:
            tr.waiting[index] += 1

    def _sent_or_dropped(self, tr: _Transfer, index: int, out: list[Action]) -> None:
        """One pending copy of ``index`` is gone; acknowledge upstream after the last."""
        if index in tr.waiting:
            tr.waiting[index] -= 1
            if tr.waiting[index] == 0:
                del tr.waiting[index]
                out.append(self._ack(tr, index, tr.came_from.pop(index)))

    def _send(self, tr: _Transfer, child: str, out: list[Action]) -> None:
        index = tr.pending[child].popleft()
        out.append(Send(child, tr.store[index].forwarded()))
        tr.inflight[child] += 1
        tr.child_has[child].add(index)
        self._counters["slices_sent"] += 1
        self._sent_or_dropped(tr, index, out)

    def _pump(self, tr: _Transfer, out: list[Action]) -> None:
        """Send what the window allows: per child, or over all children in slice order."""
        served = [c for c in tr.children if c in tr.pending]
        if self.window_per_child:
            for child in served:
                while tr.pending[child] and tr.inflight[child] < self.window_slices:
                    self._send(tr, child, out)
            return
        while sum(tr.inflight[c] for c in served) < self.window_slices:
            ready = [c for c in served if tr.pending[c]]
            if not ready:
                return
            self._send(tr, min(ready, key=lambda c: (tr.pending[c][0], c)), out)


# The keys :func:`agent_ips` gives each broker (the registry's ``derived_keys``).
AGENT_DERIVED_KEYS = ("ip",)


def agent_ips(overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Each agent's ``ip`` param from the overlay graph's ``ip`` node attribute (the
    address LBDD hashes); ValueError when a broker has none."""
    missing = sorted(b for b, ip in overlay.nodes(data="ip") if not ip)
    if missing:
        raise ValueError(f"bulk dissemination needs every broker's IP address; none for "
                         f"{missing[:5]}")
    return {b: {"ip": ip} for b, ip in sorted(overlay.nodes(data="ip"))}

