"""``meghdoot``: content-based publish/subscribe over a CAN (Gupta, Sahin, Agrawal and
El Abbadi, Middleware 2004), one peer per broker, links opened on demand.

The space and the zone geometry are in :mod:`nodes.cores.can`; leaving, failures and mirror
copies (§4.3) in :mod:`nodes.cores.meghdoot_repair`. What a peer does, in short:

- **Routing a point** (§3.3): greedily, to the neighbour zone nearest the point (squared
  distance in normalised coordinates; ties by name); a replicated zone through the replica
  a hash of the message's identity picks, the same for every sender.
- **Subscribe**: the subscription's point is routed to its owner, which stores it and
  copies it to its co-replicas; placement uses the point, the final match the filter.
- **Publish** (§3.4, DeliverEvent): the event's point is routed to its owner, which
  notifies the matching subscribers (one NOTIFY per subscriber peer) and propagates the
  event to the upper-left neighbour zones meeting its region (``dup_rule``); a peer handles
  an event once (later copies: ``duplicates``).
- **Join** (§4.2, ``join: meghdoot``): hill climbing to a loaded peer, which replicates its
  zone (``replicate_rule``: ``standout``, ``relative`` or ``absolute``, with ``kappa``) or
  splits it so that both halves hold half its subscriptions (``split_rule``); ``join:
  can`` is CAN's own.
- **Loads** (§4.2): reported to the neighbours, per zone or per peer (``load_reports``),
  with the ``loaded_list`` heaviest peers heard of: every ``load_period_s``, or with
  ``report_rule: on_change`` only when they changed, with a heartbeat
  (:mod:`nodes.cores.meghdoot_loads` says which is the default, and why).
- **While the CAN grows** (ours; the paper's sequential simulator has nothing in flight):
  ``handoff_s`` passes events across a recent split, ``notify_s`` notifies each client once
  per event, split notices, load reports and introductions (``relay_s``,
  ``report_corrections``) keep the neighbour tables exact, ``loop_hops`` and ``max_hops``
  stop a looping route, and a joining peer holds what reaches it before its grant.

The peer owns a part for each protocol beside routing and DeliverEvent: its loads and
reports (:mod:`nodes.cores.meghdoot_loads`), joins (:mod:`nodes.cores.meghdoot_join`)
and repair (:mod:`nodes.cores.meghdoot_repair`).

The first broker by name (the derived param ``seed_peer``) owns the whole space from the
start; every other peer joins through a JOIN client operation. Times are in seconds.

Every reading, every rule we added and the runs that called for it:
docs/design/meghdoot-core.md.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores import can
from nodes.cores.actions import unhandled
from nodes.cores.can import Point, Zone
from nodes.cores.can_table import ZoneTable
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
from nodes.cores.meghdoot_common import CONTACTED, HANDLED, Mirror, Sub, msg_key, pick
from nodes.cores.meghdoot_join import JoinProtocol
from nodes.cores.meghdoot_loads import LOAD_TIMER, Loads
from nodes.cores.meghdoot_repair import Repair
from nodes.cores.params import Param
from nodes.matching import SubscriptionIndex
from nodes.messages import MAX_HOPS, Message, MsgType
from nodes.model import filter_from_json

if TYPE_CHECKING:
    import networkx as nx

PARAMS = (
    Param("space", "str", "stock", "",
          "the content space: 'stock' (Meghdoot's 7 attributes) or a JSON list "
          "[[name, embedding, lo, hi], ...]"),
    Param("join", "str", "meghdoot", "",
          "'meghdoot' (hill climbing to a loaded peer, which replicates or splits) or 'can' "
          "(a random point's owner halves its zone)", choices=("meghdoot", "can")),
    Param("dup_rule", "str", "paper", "",
          "'paper' (skip a neighbour a bottom-right neighbour also reaches) or 'none'",
          choices=("paper", "none")),
    Param("replicate_rule", "str", "standout", "",
          "when a loaded peer replicates rather than splits: 'standout' (its propagation "
          "messages, relative to its neighbourhood's mean, >= kappa x the larger of 1 and "
          "its subscriptions relative to theirs), 'relative' (>= kappa x its subscriptions "
          "relative to theirs, so a zone storing none always replicates) or 'absolute' "
          "(propagation messages >= kappa x subscriptions)",
          choices=("standout", "relative", "absolute")),
    Param("split_rule", "str", "balanced", "",
          "where a split cuts a zone: 'balanced' (the cut halving its subscriptions most "
          "evenly), 'halving' (CAN's middle of the longest side) or 'balanced_separating' "
          "(the most balanced cut not parting open ranges from the rest, else balanced)",
          choices=can.SPLIT_RULES),
    Param("kappa", "float", 2.0, "",
          "the factor of replicate_rule (2: set with the relative rule on Table 1's 100-peer "
          "row, 76 unique zones; see experiments/papers/meghdoot.yaml)",
          minimum=0),
    Param("load_period_s", "float", 1.0, "s",
          "interval between load reports to neighbours (0: none)", minimum=0),
    Param("load_reports", "str", "zone", "",
          "who reports loads to neighbours: 'zone' (a replicated zone's first peer by name "
          "reports its group's loads) or 'peer' (every peer its own)",
          choices=("zone", "peer")),
    Param("report_rule", "str", "periodic", "",
          "when a peer reports loads: 'periodic' (every load period) or 'on_change' "
          "(when a load moved by more than report_change or its zone or group changed, "
          "to a peer new in its table, else every heartbeat_periods load periods)",
          choices=("periodic", "on_change")),
    Param("report_change", "float", 0.25, "",
          "share of its last reported value by which a load or its propagation messages "
          "must move before an on_change peer reports again", above=0),
    Param("heartbeat_periods", "int", 10, "",
          "load periods between an on_change peer's unchanged reports (its heartbeats; "
          "failure_periods then counts these)", minimum=1),
    Param("loaded_list", "int", 10, "", "size k of the loadedPeerList", minimum=1),
    Param("loop_hops", "int", 64, "",
          "hops past which a routed message is taken to circle on a stale table: each peer "
          "that then passes it on tells the peer it came from its zone and introduces "
          "the neighbours it knows beside that peer (the longest routes of the shipped "
          "10,000-peer runs took 11 to 47 hops)", minimum=1),
    Param("max_hops", "int", 4096, "",
          "hops after which a routed message is dropped and counted (route_dropped): a "
          "message's hop count has 16 bits on the wire", minimum=1, maximum=MAX_HOPS),
    Param("max_climb", "int", 16, "", "hops after which a join probe stops (a join must "
          "finish within a workload step)", minimum=0),
    Param("failure_periods", "int", 3, "",
          "load periods of its own (heartbeat periods with report_rule on_change) "
          "without a message after which a peer declares a neighbour or co-replica "
          "failed (0: no failure detection)", minimum=0),
    Param("mirrors", "bool", False, "",
          "keep a mirror copy of every subscription at the zone of its reflection point "
          "(§4.3), from which the peer that takes over a failed lone owner's zone "
          "recovers its subscriptions (false: that zone is left without an owner and its "
          "subscriptions are lost)"),
    Param("handoff_s", "float", 1.0, "s",
          "how long after a split each half's peers pass events meeting the other half "
          "on to it (the views of the zone's neighbours lag the split)",
          minimum=0),
    Param("relay_s", "float", 1.0, "s",
          "how long after a split or a replication the zone's peers pass on to the "
          "newcomer the zone changes their neighbours tell them (its table is a copy of "
          "its splitter's, which a neighbour's join at the same moment changes)",
          minimum=0),
    Param("seen_s", "float", 60.0, "s",
          "how long a peer remembers an event it has seen (duplicate detection)", minimum=0),
    Param("notify_s", "float", 5.0, "s",
          "how long a subscriber's peer remembers which of its clients it notified of an "
          "event (a later notification of it to one of them is dropped)", minimum=0),
    Param("bucket_s", "float", 0.1, "s",
          "width of the time buckets of a peer's received-message counts (load share; "
          "the workload's step)", minimum=1e-6),
)


# The keys :func:`overlay_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("seed_peer",)


def overlay_params(graph: nx.Graph) -> dict[str, dict[str, Any]]:
    """Every peer learns the seed peer: the first broker by name."""
    seed = min(graph.nodes)
    return {b: {"seed_peer": seed} for b in graph.nodes}


def bucket_of(t_s: float, bucket_s: float) -> int:
    """The time bucket of ``t_s``: bucket k spans ``[(k - 1/2) bucket_s, (k + 1/2)
    bucket_s)``, so with ``bucket_s`` the workload's step, an operation at step k and its
    messages fall in bucket k and a join half a step later starts bucket k + 1."""
    return math.floor(t_s / bucket_s + 0.5)


class Runs:
    """Counts per time bucket, kept as runs of equal buckets in two integer arrays (a
    peer's buckets arrive in time order; a dict per peer would hold an entry, about 100
    bytes, per bucket in which it received anything: gigabytes at 10,000 peers). A
    bucket's number takes 64 bits (an emulated broker's clock is the machine's uptime, and
    buckets may be a microsecond wide), its count 32 (messages a peer received in one
    bucket; more would be an OverflowError, not a wrong count)."""

    def __init__(self) -> None:
        self.keys, self.counts = array("q"), array("I")

    def count(self, key: int) -> None:
        if self.keys and self.keys[-1] == key:
            self.counts[-1] += 1
        else:
            self.keys.append(key)
            self.counts.append(1)

    def items(self) -> list[tuple[int, int]]:
        """``(bucket, count)`` pairs, ascending by bucket, one per bucket."""
        merged: Counter[int] = Counter()
        for k, c in zip(self.keys, self.counts, strict=True):
            merged[k] += c
        return sorted(merged.items())

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """The pairs of :meth:`items`, made one at a time: the final record holds this
        object, not the list, since every peer's record is held at once at the end of a
        simulated run, and as tuples of ints the pairs took 92 bytes a bucket (a
        10,000-peer run has some 66 million). Runs in time order are the buckets already."""
        keys = self.keys
        if all(keys[i] < keys[i + 1] for i in range(len(keys) - 1)):
            return zip(keys, self.counts, strict=True)
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        """The same counts per bucket (a resumed run's records are compared with an
        uninterrupted run's)."""
        if not isinstance(other, Runs):
            return NotImplemented
        return self.items() == other.items()


def _publication(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A publication's own payload (its attributes and the runtime's ``t_pub`` stamp),
    without what Meghdoot adds on the way (the spread and handoff flags, a NOTIFY's
    clients, a looping message's trail)."""
    return {k: v for k, v in payload.items() if k not in ("spread", "clients", "handoff", "trail")}


def _forget(order: deque[tuple[float, str]], table: dict[str, Any], before_s: float) -> None:
    """Drop from ``table`` the keys ``order`` (time first seen, key; oldest first) saw
    before ``before_s``: the expiry of a peer's event memories (``seen_s``, ``notify_s``)."""
    while order and order[0][0] < before_s:
        table.pop(order.popleft()[1], None)


class MeghdootCore:
    """One Meghdoot peer (see the module docstring)."""

    ignores_link_stats = True  # loads are its own messages, not queue statistics

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        self.space = can.space_named(str(params["space"]))
        self.dup_rule = params["dup_rule"]
        self.load_period_s = float(params["load_period_s"])
        self.loop_hops = int(params["loop_hops"])
        self.max_hops = int(params["max_hops"])
        self.seen_s = float(params["seen_s"])
        self.notify_s = float(params["notify_s"])
        self.handoff_s = float(params["handoff_s"])
        # (until_s, half, its peers) of this zone's recent splits, oldest first: on the
        # old owner's side the half it gave away, on the newcomer's the half kept.
        self._handoffs: deque[tuple[float, Zone, tuple[str, ...]]] = deque()
        # Peers dropped from the table because the zone they were last told to hold no
        # longer abuts this one: a report sent before that news, arriving after it,
        # names their older (larger) zone and must not bring them back (_introduce).
        self._moved: dict[str, Zone] = {}
        self.failure_periods = int(params["failure_periods"])
        self.mirroring = bool(params["mirrors"])
        # Peer -> this peer's load period in which it was last heard from (a count of its
        # ticks): silence is counted in the detector's own periods, so a detector that
        # was itself stalled (an overloaded machine) does not, on waking, find everyone
        # silent: its timer fires once, then it reads what queued up meanwhile.
        self._heard_tick: dict[str, int] = {}
        self._ticks = 0
        # Peers announced gone (left or failed): a table handed over by another peer may
        # still list them, and must not bring them back.
        self._departed: set[str] = set()
        self._failed: set[str] = set()  # peers this one declared failed
        self._bootstrap: str | None = None  # the peer a JOIN asked, while joining
        self._waiting: list[tuple[str, Message]] = []  # client ops before the grant
        self._early: list[tuple[str, Message]] = []  # peers' messages before the grant
        self.bucket_s = float(params["bucket_s"])
        seed = params.get("seed_peer", broker)
        self.zone: Zone | None = can.whole(self.space.dims) if broker == seed else None
        self.group: set[str] = {broker}  # the peers holding this zone, this one included
        self.nbrs: dict[str, Zone] = {}  # neighbour peer -> its zone (co-replicas apart)
        # nbrs by zone, as arrays kept as the table changes (nodes/cores/can_table.py):
        # what DeliverEvent and routing ask of every neighbour zone.
        self._table = ZoneTable(self.space.dims)
        self._table.reset(self.zone, {})
        self.subs: dict[tuple[str, int], Sub] = {}
        self._index = SubscriptionIndex()
        # Mirror copies of subscriptions stored elsewhere, filed here by their target
        # point (never matched against events).
        self.mirror_subs: dict[tuple[str, int], Mirror] = {}
        self._local: dict[tuple[str, int], Point] = {}  # this peer's clients' subscriptions
        self._seen: dict[str, int] = {}
        self._seen_order: deque[tuple[float, str]] = deque()
        # Event -> this peer's clients it notified of it, for notify_s (_notify).
        self._notified: dict[str, set[str]] = {}
        self._notified_order: deque[tuple[float, str]] = deque()
        # The last message id used: an int, not itertools.count, which pickles no more
        # from Python 3.14 on (a paused simulation pickles its cores).
        self._last_id = 0
        self._ticking = False
        # Metrics (the final record; analysis.meghdoot reads them).
        self.joined_s: float | None = 0.0 if self.zone is not None else None
        self.joined_as: str | None = None  # "replica" or "split" (the seed peer: None)
        self.received = 0
        self._buckets = Runs()
        self.contacts: list[str] = []  # event keys, interned: one string per event
        self.sub_hops: Counter[int] = Counter()
        self.event_hops: Counter[int] = Counter()
        self.duplicates = self.notifications = self.stuck = self.mirror_messages = 0
        self.corrections = self.dropped = 0  # loops on stale tables (_route)
        self.handoff_first = 0  # events a split's other half passed on that came here first
        self.repeats = 0  # notifications of an event to a client that had it (dropped)
        # The parts that keep state of their own, each with this peer to act on.
        self.loads = Loads(self, params)
        self.join = JoinProtocol(self, params)
        self.repair = Repair(self)

    # ---- what the peer knows --------------------------------------------------------------

    def _zones(self) -> list[tuple[Zone, list[str]]]:
        """Neighbour zones, each with its peers (sorted), in a fixed order (by their
        first peer's name)."""
        return self._table.ordered()

    def _set_nbrs(self, nbrs: Mapping[str, Zone]) -> None:
        """The whole neighbour table anew (after this peer's own zone changed)."""
        self.nbrs = dict(nbrs)
        self._table.reset(self.zone, self.nbrs)

    def _nbr_put(self, peer: str, zone: Zone) -> None:
        old = self.nbrs.get(peer)
        if old == zone:
            return  # nothing changes: the table by zone stays
        if old is not None:
            self._nbr_drop(peer)
        self.nbrs[peer] = zone
        self._table.add(peer, zone)

    def _nbr_drop(self, peer: str) -> None:
        old = self.nbrs.pop(peer, None)
        if old is not None:
            self._table.remove(peer, old)

    def _msg(self, mtype: MsgType, payload: dict[str, Any]) -> Message:
        self._last_id += 1
        return Message(mtype, self._last_id, self.broker, 0, payload)

    def _store(self, key: tuple[str, int], sub: Sub) -> None:
        self.subs[key] = sub
        self._index.add(key, sub.filter)

    def _keep_subs(self, zone: Zone) -> list[tuple[tuple[str, int], Sub]]:
        """Keep the subscriptions whose points lie in ``zone``; return the others."""
        gone = [(k, s) for k, s in self.subs.items() if not can.contains(zone, s.point)]
        for k, _ in gone:
            del self.subs[k]
            self._index.remove(k)
        return gone

    # ---- events -----------------------------------------------------------------------------

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, Arrived):
            out = self._arrived(event.link, event.msg, now_s)
        elif isinstance(event, FromClient):
            out = self._from_client(event.client, event.msg, now_s)
        elif isinstance(event, TimerFired) and event.name == LOAD_TIMER:
            return self.loads.tick(now_s)
        else:
            return []  # statistics windows, links coming and going: nothing to do
        if self.zone is not None and not self._ticking and self.load_period_s > 0:
            self._ticking = True
            out.append(SetTimer(LOAD_TIMER, self.load_period_s))
        return out

    def _from_client(self, client: str, msg: Message, now_s: float) -> list[Action]:
        t = msg.type
        if t is MsgType.JOIN:
            boot = msg.payload.get("bootstrap")
            if self.zone is not None or not isinstance(boot, str) or boot == self.broker:
                return [Record("can_join_ignored", {"bootstrap": str(boot)})]
            payload: dict[str, Any] = {"newcomer": self.broker, "climb": 0}
            if self.join.mode == "can":
                payload["point"] = list(self.join.random_point())
            self._bootstrap = boot
            return [Send(boot, self._msg(MsgType.JOIN, payload))]
        if self.zone is None:
            if self._bootstrap is None:
                return [unhandled(msg, "not joined")]
            self._waiting.append((client, msg))  # joining: carried out once granted
            return []
        if t is MsgType.LEAVE:
            return self.repair.leave()
        if t is MsgType.SUBSCRIBE:
            f = filter_from_json(msg.payload["filter"])
            point = self.space.sub_point(f)
            self._local[(client, msg.msg_id)] = point
            sub = msg.forwarded({"filter": msg.payload["filter"], "point": list(point),
                                 "peer": self.broker, "client": client})
            return self._route(sub, point, now_s)
        if t is MsgType.UNSUBSCRIBE:
            key = (client, int(msg.payload["sub_id"]))
            point = self._local.pop(key, None)
            if point is None:
                return [unhandled(msg, "unknown subscription")]
            un = msg.forwarded({"sub": [client, key[1]], "point": list(point)})
            return self._route(un, point, now_s)
        if t is MsgType.PUBLISH:
            key = msg_key(msg)
            point, _ = self.space.event_geometry(key, msg.payload["attrs"])
            if can.contains(self.zone, point):  # the origin peer is the owner: contacted
                self._contact(key, now_s)
            return self._route(msg.forwarded(), point, now_s)
        if t in (MsgType.ADVERTISE, MsgType.UNADVERTISE):
            return []
        return [unhandled(msg)]

    def _arrived(self, peer: str, msg: Message, now_s: float) -> list[Action]:
        t = msg.type
        # Whose silence counts (failures); a reporter may have vouched for it until later.
        if ((peer in self.nbrs or peer in self.group)
                and self._heard_tick.get(peer, -1) < self._ticks):
            self._heard_tick[peer] = self._ticks
        if self.zone is None:  # granted zones arrive as ZONE; nothing else before that
            if t is MsgType.JOIN and self._bootstrap is not None:
                # Another newcomer took this joining peer for a member: pass its probe
                # on to the peer this one asked.
                return [Send(self._bootstrap, msg.forwarded())]
            joining = self._bootstrap is not None and self.joined_s is None
            if t is MsgType.ZONE and ("grant" in msg.payload or not joining):
                return self._zone_msg(msg, now_s)
            # Sent before the grant came: handled once granted (docs/design/meghdoot-core.md,
            # "A joining peer's early messages").
            if joining:
                self._early.append((peer, msg))
                return []
            return [unhandled(msg)]
        if t in (MsgType.SUBSCRIBE, MsgType.UNSUBSCRIBE, MsgType.PUBLISH):
            if msg.payload.get("copy"):  # a co-replica's copy: neither routing nor spread
                return self._owner(msg, now_s, replica_copy=True)
            if "mirror" in msg.payload:  # a mirror copy on its way: no subscription's load
                self.mirror_messages += 1
                return self._route(msg, tuple(msg.payload["point"]), now_s, peer)
            self.received += 1
            self._buckets.count(bucket_of(now_s, self.bucket_s))
            spread = msg.payload.get("spread")
            if t is not MsgType.PUBLISH:
                if spread:
                    return self._spread_in(msg, msg_key(msg), now_s)
                return self._route(msg, tuple(msg.payload["point"]), now_s, peer)
            key = msg_key(msg)  # one event's key, worked out once a hop
            self.loads.events.count()
            if spread:
                self.loads.spread.count()
            self._contact(key, now_s)
            if spread:
                return self._spread_in(msg, key, now_s)
            return self._route(msg, self.space.event_geometry(key, msg.payload["attrs"])[0],
                               now_s, peer)
        if t is MsgType.NOTIFY:
            pub = Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops,
                          _publication(msg.payload))
            return self._notify(msg_key(msg), msg.payload["clients"], pub, now_s)
        if t is MsgType.LOAD:
            return self.loads.load_in(peer, msg.payload)
        if t is MsgType.JOIN:
            return self.join.probe(msg, now_s, peer)
        if t is MsgType.ZONE:
            if "to" in msg.payload:  # a recovery query on its way to a point
                return self._route(msg, tuple(msg.payload["to"]), now_s, peer)
            return self._zone_msg(msg, now_s)
        return [unhandled(msg)]

    # ---- routing ----------------------------------------------------------------------------

    def _first_contact(self, key: str, now_s: float, bit: int) -> bool:
        """Remember ``bit`` of event ``key``; whether it was new."""
        _forget(self._seen_order, self._seen, now_s - self.seen_s)
        had = self._seen.get(key, 0)
        if not had:
            self._seen_order.append((now_s, key))
        self._seen[key] = had | bit
        return not had & bit

    def _notify(self, key: str, clients: Sequence[str], pub: Message, now_s: float
                ) -> list[Action]:
        """Deliver event ``key`` (as ``pub``) to this peer's ``clients``, each once: a
        client it notified of the event within ``notify_s`` is not notified again
        (counted as ``notify_repeats``). Two zones notify one subscription when the event
        reached its zone before a split and the new half again after it, along the new
        neighbours: traced in a 10,000-peer run with 50,000 subscriptions, once in
        16,684,244 deliveries (a replica handled the event 15 ms before its zone split;
        a neighbour of the new half then sent the half's owner a copy). A client whose
        two subscriptions match one event in two zones is notified once too (the oracle
        expects a client once per event; Meghdoot's workloads give each subscription its
        own client). ``notify_s`` (5 s) outlasts an event's spread (the latest
        notification of that run came 1.5 s after its publication); ``seen_s`` (60 s)
        would keep some 870,000 pairs over all peers there (1,450 deliveries an event,
        ten events a second), this about 70,000."""
        _forget(self._notified_order, self._notified, now_s - self.notify_s)
        got = self._notified.get(key)
        if got is None:
            got = self._notified[key] = set()
            self._notified_order.append((now_s, key))
        out: list[Action] = []
        add, append = got.add, out.append
        for client in clients:
            if client in got:
                self.repeats += 1
            else:
                add(client)
                append(Deliver(client, pub))
        return out

    def _route(self, msg: Message, point: Point, now_s: float, sender: str | None = None
               ) -> list[Action]:
        """``msg`` toward the owner of ``point``; the owner's work if this peer is it.
        ``sender``: the peer it came from (None: this peer's client or its own)."""
        assert self.zone is not None
        if can.contains(self.zone, point):
            return self._owner(msg, now_s)
        if not self._table:
            return [Record("can_stuck", {"type": msg.type.name, "msg_id": msg.msg_id})]
        if msg.hops >= self.max_hops:
            self.dropped += 1
            return [Record("can_dropped", {"type": msg.type.name, "msg_id": msg.msg_id,
                                           "origin": msg.origin})]
        out: list[Action] = []
        if sender is None or msg.hops <= self.loop_hops:
            peers, d2, holds = self._table.nearest(point)
            forwarded = msg.forwarded()
        else:
            # Gone round a loop: the sender may hold this zone stale, and two peers
            # that both lack the owner's zone (a split neither was told of) pass the
            # message back and forth as each other's nearest; so the sender is told,
            # and the message goes on to the nearest peer it has not passed through
            # (the last loop_hops of them, carried along).
            if sender in self.nbrs:
                self.corrections += 1
                out.append(Send(sender, self._correction(self.nbrs[sender])))
            trail = list(msg.payload.get("trail", [sender]))[-self.loop_hops:]
            peers, d2, holds = self._table.nearest(point, avoid=trail)
            forwarded = msg.forwarded({**msg.payload, "trail": [*trail, self.broker]})
        if not (d2, 0 if holds else 1) < (can.distance2(self.zone, point), 1):
            # Greedy routing made no progress: this peer's table lacks the zones
            # between it and the point (see loop_hops).
            self.stuck += 1
            out.append(Record("can_stuck", {"type": msg.type.name, "msg_id": msg.msg_id}))
        out.append(Send(pick(peers, msg_key(msg)), forwarded))
        return out

    def _correction(self, theirs: Zone) -> Message:
        """For a peer holding ``theirs`` that may hold this zone stale (a split it was
        not told of): this zone's peers and zone, and the neighbours this peer knows
        beside ``theirs``, which it may lack (the split's newcomer), to be taken only
        where its table has no entry (its own entries may be fresher than this peer's).
        Sent to a neighbour that passed this peer a message gone round a loop
        (:meth:`_route`) and to a peer whose load report came from beyond this zone
        (:meth:`Loads.load_in`)."""
        assert self.zone is not None
        zone = can.zone_to_json(self.zone)
        beside = {q: can.zone_to_json(z) for q, z in self.nbrs.items()
                  if z != theirs and can.abutment(theirs, z) is not None}
        return self._msg(MsgType.ZONE, {"update": dict.fromkeys(sorted(self.group), zone),
                                        "introduce": beside})

    def _owner(self, msg: Message, now_s: float, *, replica_copy: bool = False) -> list[Action]:
        """This peer's zone holds the message's point."""
        t = msg.type
        if "mirror" in msg.payload:
            return self.repair.mirror_in(msg, replica_copy=replica_copy)
        if t is MsgType.ZONE:  # a routed query reached the owner of its point
            return self._zone_msg(msg, now_s)
        if t is MsgType.SUBSCRIBE:
            key = (msg.origin, msg.msg_id)
            p = msg.payload
            f = filter_from_json(p["filter"])
            sub = Sub(p["filter"], f, tuple(p["point"]), p["peer"], p["client"])
            self._store(key, sub)
            if replica_copy:
                return []
            self.sub_hops[msg.hops - 1] += 1
            return [*self._to_replicas(msg),
                    *self.repair.mirror(MsgType.SUBSCRIBE, key, sub, now_s)]
        if t is MsgType.UNSUBSCRIBE:
            key = (str(msg.payload["sub"][0]), int(msg.payload["sub"][1]))
            gone = self.subs.pop(key, None)
            if gone is not None:
                self._index.remove(key)
            if replica_copy:
                return []
            out = self._to_replicas(msg)
            if gone is not None:
                out += self.repair.mirror(MsgType.UNSUBSCRIBE, key, gone, now_s)
            return out
        if t is MsgType.JOIN:  # plain CAN join: this peer owns the newcomer's point
            return self.join.accept(msg, now_s)
        self.event_hops[msg.hops - 1] += 1
        key = msg_key(msg)
        self._first_contact(key, now_s, HANDLED)
        return self._deliver_event(msg, key, now_s)

    def _to_replicas(self, msg: Message) -> list[Action]:
        copy = msg.forwarded({**msg.payload, "copy": True})
        return [Send(g, copy) for g in sorted(self.group - {self.broker})]

    # ---- DeliverEvent ------------------------------------------------------------------------

    def _contact(self, key: str, now_s: float) -> None:
        """The event ``key`` reached this peer (Meghdoot's "peers contacted", counted
        once)."""
        if self._first_contact(key, now_s, CONTACTED):
            self.contacts.append(sys.intern(key))

    def _spread_in(self, msg: Message, key: str, now_s: float) -> list[Action]:
        """A spread copy of event ``key`` (``msg_key(msg)``)."""
        if not self._first_contact(key, now_s, HANDLED):
            self.duplicates += 1
            return []
        handoff = msg.payload.get("handoff")
        if handoff is True and len(self.group) > 1:
            # One half of a split sent it to the other, which may have more co-replicas
            # than the sender knew: the replica every other sender picks handles it (this
            # one, having passed it on, drops later copies; passed on once, so that two
            # replicas with different views of their group cannot pass it round).
            picked = pick(sorted(self.group), key)
            if picked != self.broker:
                return [Send(picked, msg.forwarded({**msg.payload, "handoff": "picked"}))]
        if handoff:
            self.handoff_first += 1
        return self._deliver_event(msg, key, now_s)

    def _deliver_event(self, msg: Message, key: str, now_s: float) -> list[Action]:
        """DeliverEvent for event ``key`` (``msg_key(msg)``) at this peer."""
        assert self.zone is not None
        attrs = msg.payload["attrs"]
        publication = _publication(msg.payload)
        by_peer: dict[str, list[str]] = {}
        subs = self.subs
        for sub_key in self._index.match(attrs):
            sub = subs[sub_key]
            by_peer.setdefault(sub.peer, []).append(sub.client)
        out: list[Action] = []
        for peer in sorted(by_peer):
            clients = sorted(set(by_peer[peer]))
            if peer == self.broker:
                # Made here, not for every copy: few copies match a subscriber of this
                # peer's own (meghdoot-peers: 776 of 241,306 at 100 peers, 362 of 417,887
                # at 300; the others' peers get a NOTIFY). sorted(by_peer) names this
                # peer once, so its deliveries still share one message.
                pub = Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops, publication)
                out += self._notify(key, clients, pub, now_s)
            else:
                self.notifications += 1
                out.append(Send(peer, Message(MsgType.NOTIFY, msg.msg_id, msg.origin,
                                              msg.hops + 1,
                                              {**publication, "clients": clients})))
        point, region = self.space.event_geometry(key, attrs)
        # A spread copy passes on the payload it came with (the publication, flagged):
        # in the simulator every copy of an event then shares one payload, whose frame
        # size is worked out once rather than by every peer the event reaches.
        spread = (msg.forwarded() if msg.payload.get("spread") is True
                  and "handoff" not in msg.payload
                  else msg.forwarded({**publication, "spread": True}))
        targets = self._table.propagation(region, paper=self.dup_rule == "paper")
        out += [Send(pick(peers, key), spread) for peers in targets]
        while self._handoffs and self._handoffs[0][0] < now_s:
            self._handoffs.popleft()
        if self._handoffs:
            # Not to the zone of the event's point: the routed copy is handled there (by
            # whichever replica it reaches), and the spread never comes back to it.
            reached = {p for peers in targets for p in peers}
            handoff = msg.forwarded({**publication, "spread": True, "handoff": True})
            out += [Send(pick(peers, key), handoff) for _, half, peers in self._handoffs
                    if reached.isdisjoint(peers) and can.meets(half, region)
                    and not can.contains(half, point)]
        return out

    # ---- zone messages ----------------------------------------------------------------------

    def _zone_msg(self, msg: Message, now_s: float) -> list[Action]:
        p = msg.payload
        if "grant" in p:
            out: list[Action] = self.join.granted(msg, now_s)
            waiting, self._waiting = self._waiting, []
            for client, op in waiting:
                out += self._from_client(client, op, now_s)
            early, self._early = self._early, []
            for peer, early_msg in early:
                out += self._arrived(peer, early_msg, now_s)
            return out
        if self.zone is None:
            return [unhandled(msg, "not joined")]
        if "takeover" in p:
            return self.repair.take_over(msg, now_s)
        if "adopt" in p:
            return self.repair.adopt(msg, now_s)
        if "down" in p:
            return self.repair.down_in(msg, now_s)
        if "recover" in p:
            return self.repair.recover_in(msg, now_s)
        if "recovered" in p:
            return self.repair.recovered_in(msg, now_s)
        out = []
        if "split" in p:
            out = self.join.split_in(p, now_s)
        else:
            failed = p.get("failed", ())
            for peer, zj in p["update"].items():
                self._update(peer, None if zj is None else can.zone_from_json(zj))
                if zj is not None or peer == self.broker:
                    continue
                if peer in failed:  # as if declared failed here
                    self._failed.add(peer)
                else:  # it left: a late report naming it must not bring it back
                    self._failed.discard(peer)
            for peer, zj in p.get("introduce", {}).items():
                self._introduce(peer, can.zone_from_json(zj))
            if "refill" in p and min(self.group) == self.broker:  # one peer per zone
                out = self.repair.refill(can.zone_from_json(p["refill"]), now_s)
            out += self.join.relay(msg, now_s)
        self.loads.heard(p.get("loads", {}))
        return out

    def _introduce(self, peer: str, zone: Zone) -> None:
        """What another peer says ``peer`` holds, second hand, which may be older than
        what this peer has heard: taken for a peer not in the table (unless it left or
        failed), or for a neighbour whose listed zone holds it (a zone only shrinks by
        splits: the smaller is the later)."""
        if (peer == self.broker or peer in self.group or peer in self._departed
                or peer in self._failed):
            return
        moved = self._moved.get(peer)
        if moved is not None and moved != zone and can.inside(moved, zone):
            return  # older than what this peer was told first hand
        known = self.nbrs.get(peer)
        if known is None or (known != zone and can.inside(zone, known)):
            self._update(peer, zone)

    def _update(self, peer: str, zone: Zone | None) -> None:
        """What a peer now holds (None: nothing); this peer files it where it belongs."""
        if peer == self.broker or self.zone is None:
            return
        if zone is None:
            self._departed.add(peer)
        else:
            self._departed.discard(peer)
            if peer not in self.nbrs and peer not in self.group:
                # Entering the table: its silence counts anew (a split or a takeover
                # drops neighbours without forgetting when they were last heard, and a
                # peer that adopted a zone comes back from afar).
                self._heard_tick.pop(peer, None)
        self._moved.pop(peer, None)
        if zone == self.zone:
            self.group.add(peer)
            self._nbr_drop(peer)
        elif zone is not None and can.abutment(self.zone, zone):
            self._nbr_put(peer, zone)
            self.group.discard(peer)
        else:
            if zone is not None:
                self._moved[peer] = zone
            self._nbr_drop(peer)
            self.group.discard(peer)
            self.loads.nbr_load.pop(peer, None)
            self._heard_tick.pop(peer, None)  # if it comes back, its silence counts anew

    # ---- metrics ------------------------------------------------------------------------------

    def counters(self) -> Mapping[str, int]:
        """Plain counts (summed over peers by the summary)."""
        return {"subscriptions": len(self.subs), "received": self.received,
                "duplicates": self.duplicates, "notify_messages": self.notifications,
                "route_stuck": self.stuck, "handoff_first": self.handoff_first,
                "route_corrections": self.corrections, "route_dropped": self.dropped,
                "table_relays": self.join.relayed,
                "report_corrections": self.loads.report_corrections,
                "notify_repeats": self.repeats,
                "joins_split": self.join.by_mode["split"],
                "joins_replicate": self.join.by_mode["replicate"],
                **({"mirror_copies": len(self.mirror_subs),
                    "mirror_messages": self.mirror_messages} if self.mirroring else {})}

    def final_records(self) -> list[tuple[str, dict[str, Any]]]:
        """One ``can_peer`` record for a peer that holds a zone: its zone, replicas,
        neighbours (zones and peers, and its table: each neighbour's zone as
        :func:`can.zone_digest`), load, contacts, and how it joined; and one
        ``can_repairs`` record, joined or left, if it repaired anything
        (:meth:`Repair.counts`)."""
        repairs = self.repair.counts()
        out: list[tuple[str, dict[str, Any]]] = [("can_repairs", repairs)] if repairs else []
        if self.zone is None:
            return out
        return [*out, ("can_peer", {
            "joined_s": self.joined_s, "joined_as": self.joined_as,
            "zone": can.zone_to_json(self.zone),
            "volume": can.volume(self.zone), "group": sorted(self.group),
            "neighbours": [len(self._table), len(self.nbrs)],
            "table": {q: can.zone_digest(z) for q, z in self.nbrs.items()},
            "subscriptions": len(self.subs), "received": self.received,
            "buckets": self._buckets, "bucket_s": self.bucket_s,
            "contacts": self.contacts, "sub_hops": sorted(self.sub_hops.items()),
            "event_hops": sorted(self.event_hops.items()), "duplicates": self.duplicates,
            "handoff_first": self.handoff_first})]
