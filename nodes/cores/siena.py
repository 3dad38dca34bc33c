"""Siena-style filter-based routing on an acyclic overlay: Kyra's first baseline.

Registry name ``siena``. Paper: Carzaniga, Rosenblum and Wolf, "Design and evaluation
of a wide-area event notification service" (TOCS 2001), in its acyclic peer-to-peer
form, as the Kyra paper's Section II describes it. In short:

- **Tree**: ``params["tree_neighbours"]``, derived by :func:`overlay_params` (a BFS
  spanning tree; on an overlay that is a tree, the overlay itself); overlay links off the
  tree are never used.
- **Subscriptions** are broadcast over the tree into per-neighbour routing tables;
  advertisements are accepted and ignored. With ``covering`` (off by default) a covered
  subscription is held back from a neighbour; publications take the same edges either way.
- **Unsubscriptions** retrace the subscription. **Publications** go once to each matching
  local client and to each tree neighbour (never back) whose table holds a match.

Counters (:meth:`SienaCore.counters`, plain counts): ``routing_entries`` (current entries
under neighbours), ``local_subscriptions`` (current), ``sub_messages`` (SUBSCRIBE and
UNSUBSCRIBE handled, from clients and neighbours), ``sub_messages_sent``, ``covered``
(sendings withheld by covering, cumulative), ``events_matched`` (publications matched
here: the paper's "matched at server X") and ``match_ops`` (filters tested against events:
per event, every entry held but those under the link it came from, as a linear matcher
would test; the index we use finds the same matches faster).

Our readings and choices in full: docs/design/kyra-cores.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import fan_out, unhandled
from nodes.cores.interface import Action, Arrived, Event, FromClient, Send
from nodes.cores.overlay import spanning_tree_neighbours
from nodes.cores.params import Param
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, Interval, bounds_cover, filter_bounds, filter_from_json

if TYPE_CHECKING:
    import networkx as nx

SubId = tuple[str, int]

PARAMS = (
    Param("covering", "bool", False, "",
          "do not send a subscription to a neighbour already sent one that covers it"),
)

_IGNORED = frozenset({MsgType.ADVERTISE, MsgType.UNADVERTISE})


@dataclass(slots=True)
class _Sub:
    filter: Filter
    bounds: dict[str, Interval]  # kept for covering tests
    payload: dict[str, Any]  # the SUBSCRIBE's, sent on as it came
    hops: int  # of the SUBSCRIBE as it reached us
    source: str | None  # the neighbour it came from; None for a local client
    client: str  # the local subscriber; "" when it came from a neighbour


class SienaCore:
    """One broker of filter-based routing on a tree; see the module docstring."""

    ignores_link_stats = True  # static routing: statistics windows change nothing

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        if "tree_neighbours" not in params and self.neighbours:
            raise ValueError(f"siena core at {broker}: params need 'tree_neighbours' "
                             "(see nodes.cores.siena.overlay_params)")
        tree = tuple(sorted(params.get("tree_neighbours", ())))
        stray = sorted(set(tree) - set(self.neighbours))
        if stray:
            raise ValueError(f"siena core at {broker}: tree neighbours {stray} are not neighbours")
        self.tree_neighbours = tree
        self.covering = bool(params["covering"])
        self._subs: dict[SubId, _Sub] = {}  # insertion order: arrival order
        self._per_source: Counter[str | None] = Counter()
        self._index = SubscriptionIndex()  # every entry, local or not, by sub id
        # Per tree neighbour: subscriptions sent there and still live; those held back
        # because a sent one covers them (dicts, not sets: deterministic order).
        self._sent: dict[str, dict[SubId, None]] = {nb: {} for nb in tree}
        self._held: dict[str, dict[SubId, None]] = {nb: {} for nb in tree}
        self._counts: Counter[str] = Counter()

    # ---- views --------------------------------------------------------------------------

    def table(self) -> dict[str, dict[SubId, Filter]]:
        """The routing table: per tree neighbour, the subscriptions received from it."""
        out: dict[str, dict[SubId, Filter]] = {nb: {} for nb in self.tree_neighbours}
        for sub_id, sub in self._subs.items():
            if sub.source is not None:
                out[sub.source][sub_id] = sub.filter
        return out

    def state(self) -> dict[str, Any]:
        """All routing state as plain sorted data (empty lists/dicts when none), for tests."""
        return {
            "local": sorted((s, sub.client) for s, sub in self._subs.items()
                            if sub.source is None),
            "table": {nb: sorted(t) for nb, t in self.table().items() if t},
            "sent": {nb: sorted(s) for nb, s in self._sent.items() if s},
            "held": {nb: sorted(h) for nb, h in self._held.items() if h},
        }

    def table_sizes(self) -> dict[str, int]:
        """No SRT; the PRT holds every subscription known here, local ones included."""
        return {"srt": 0, "prt": len(self._subs)}

    def counters(self) -> dict[str, int]:
        """Plain counts (see the module docstring)."""
        local = self._per_source[None]
        return {"routing_entries": len(self._subs) - local, "local_subscriptions": local,
                **{k: self._counts[k] for k in ("sub_messages", "sub_messages_sent", "covered",
                                                "events_matched", "match_ops")}}

    # ---- events -------------------------------------------------------------------------

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see docs/design/kyra-cores.md for the rules."""
        if isinstance(event, FromClient):
            return self._dispatch(event.msg, None, event.client)
        if isinstance(event, Arrived):
            if event.link not in self._sent:
                return [unhandled(event.msg, f"from {event.link}, not a tree neighbour")]
            return self._dispatch(event.msg, event.link, "")
        return []  # static routing: timers, statistics and lost links change nothing

    def _dispatch(self, msg: Message, link: str | None, client: str) -> list[Action]:
        t = msg.type
        if t is MsgType.PUBLISH:
            return self._publish(msg, link)
        if t is MsgType.SUBSCRIBE:
            self._counts["sub_messages"] += 1
            return self._subscribe(msg, link, client)
        if t is MsgType.UNSUBSCRIBE:
            self._counts["sub_messages"] += 1
            return self._unsubscribe(msg, link)
        if t in _IGNORED:
            return []
        return [unhandled(msg)]

    # ---- subscriptions ------------------------------------------------------------------

    def _subscribe(self, msg: Message, source: str | None, client: str) -> list[Action]:
        sub_id = (msg.origin, msg.msg_id)
        if sub_id in self._subs:
            return [unhandled(msg, "subscription already stored")]
        f = filter_from_json(msg.payload["filter"])
        sub = self._subs[sub_id] = _Sub(f, filter_bounds(f), msg.payload, msg.hops, source,
                                        client)
        self._per_source[source] += 1
        self._index.add(sub_id, f)
        actions: list[Action] = []
        for nb in self.tree_neighbours:
            if nb == source:
                continue
            if self.covering and self._covered(sub, nb):
                self._held[nb][sub_id] = None
                self._counts["covered"] += 1
            else:
                actions.append(self._send_sub(sub_id, sub, nb))
        return actions

    def _covered(self, sub: _Sub, nb: str) -> bool:
        """Whether a subscription already sent to ``nb`` covers ``sub``."""
        return any(bounds_cover(self._subs[s].bounds, sub.bounds) for s in self._sent[nb])

    def _send_sub(self, sub_id: SubId, sub: _Sub, nb: str) -> Send:
        self._sent[nb][sub_id] = None
        self._counts["sub_messages_sent"] += 1
        return Send(nb, Message(MsgType.SUBSCRIBE, sub_id[1], sub_id[0], sub.hops + 1,
                                sub.payload))

    def _unsubscribe(self, msg: Message, source: str | None) -> list[Action]:
        sub_id = (msg.origin, int(msg.payload["sub_id"]))
        sub = self._subs.get(sub_id)
        if sub is None and source is None:
            return []  # un-subscribing twice is harmless
        if sub is None or sub.source != source:
            return [unhandled(msg, "unsubscription of a subscription not from that link")]
        del self._subs[sub_id]
        self._per_source[source] -= 1
        self._index.remove(sub_id)
        actions: list[Action] = []
        copy = msg.forwarded()
        for nb in self.tree_neighbours:
            held, sent = self._held[nb], self._sent[nb]
            if sub_id in held:
                del held[sub_id]  # held back, so never sent: nothing to retract there
            elif sub_id in sent:
                del sent[sub_id]
                # Before the UNSUBSCRIBE, on the same FIFO link: nb keeps a cover throughout.
                actions += self._release(nb)
                actions.append(Send(nb, copy))
                self._counts["sub_messages_sent"] += 1
        return actions

    def _release(self, nb: str) -> list[Action]:
        """Send to ``nb`` the held subscriptions no sent one covers any more; one that
        another of them covers (or equals, arriving earlier) stays held, now under that
        one's cover (covering is transitive)."""
        free = [s for s in self._held[nb] if not self._covered(self._subs[s], nb)]
        order = {s: i for i, s in enumerate(free)}

        def dominated(s: SubId) -> bool:
            b = self._subs[s].bounds
            return any(bounds_cover(self._subs[o].bounds, b)
                       and (order[o] < order[s] or not bounds_cover(b, self._subs[o].bounds))
                       for o in free if o != s)

        actions: list[Action] = []
        for s in [s for s in free if not dominated(s)]:
            del self._held[nb][s]
            actions.append(self._send_sub(s, self._subs[s], nb))
        return actions

    # ---- publications -------------------------------------------------------------------

    def _publish(self, msg: Message, came_from: str | None) -> list[Action]:
        clients: set[str] = set()
        onward: set[str] = set()
        for sub_id in self._index.match(msg.payload["attrs"]):
            sub = self._subs[sub_id]
            if sub.source is None:
                clients.add(sub.client)
            elif sub.source != came_from:
                onward.add(sub.source)
        tested = len(self._subs) - (self._per_source[came_from] if came_from is not None else 0)
        self._counts["events_matched"] += 1
        self._counts["match_ops"] += tested
        return fan_out(msg, clients, onward, tested)


# The keys :func:`overlay_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("tree_neighbours",)


def overlay_params(overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Per-broker params derived from the overlay: each broker's tree neighbours in the
    BFS spanning tree (the overlay itself when it is a tree; only edges are read)."""
    return {broker: {"tree_neighbours": nbs}
            for broker, nbs in spanning_tree_neighbours(overlay.edges).items()}
