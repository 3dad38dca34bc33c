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
  splits it so that both halves hold half its subscriptions; ``join: can`` is CAN's own.
- **Loads** (§4.2): reported every ``load_period_s`` to the neighbours, per zone or per peer
  (``load_reports``), with the ``loaded_list`` heaviest peers heard of.
- **While the CAN grows** (ours; the paper's sequential simulator has nothing in flight):
  ``handoff_s`` passes events across a recent split, ``notify_s`` notifies each client once
  per event, split notices, load reports and introductions (``relay_s``,
  ``report_corrections``) keep the neighbour tables exact, ``loop_hops`` and ``max_hops``
  stop a looping route, and a joining peer holds what reaches it before its grant.

The first broker by name (the derived param ``seed_peer``) owns the whole space from the
start; every other peer joins through a JOIN client operation. Times are in seconds.

Every reading, every rule we added and the runs that called for it:
docs/design/meghdoot-core.md.
"""

from __future__ import annotations

import hashlib
import math
import sys
from array import array
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

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
from nodes.cores.meghdoot_repair import Orphan, Repair
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
          "load periods of its own without a message after which a peer declares a "
          "neighbour or co-replica failed (0: no failure detection)", minimum=0),
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
_LOAD_TIMER = "load"


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


class Recent:
    """A count over the current and the previous load period."""

    def __init__(self, now: int = 0, before: int = 0) -> None:
        self.now, self.before = int(now), int(before)

    @property
    def total(self) -> int:
        return self.now + self.before

    @property
    def counts(self) -> list[int]:
        return [self.now, self.before]

    def count(self) -> None:
        self.now += 1

    def rotate(self) -> None:
        self.now, self.before = 0, self.now

    def keep(self, share: float) -> None:
        self.now, self.before = round(self.now * share), round(self.before * share)


class Runs:
    """Counts per time bucket, kept as runs of equal buckets in two integer arrays (a
    peer's buckets arrive in time order; a dict per peer would hold an entry, about 100
    bytes, per bucket in which it received anything: gigabytes at 10,000 peers)."""

    def __init__(self) -> None:
        self.keys, self.counts = array("q"), array("q")

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


class _Report(NamedTuple):
    """A peer's load as its reports carry it (:meth:`MeghdootCore._report`)."""

    load: float
    spread: int  # propagation messages in the last two load periods
    subs: int  # subscriptions stored


P = TypeVar("P")  # a payload part
R = TypeVar("R")  # what is read from it


class _SharedRead(Generic[P, R]):
    """``read(part)`` of a payload part, remembered for the part last read (kept alive
    here, so the identity test cannot meet a new part at a freed one's address). In the
    simulator a report's copies share one payload and reach the sender's neighbours one
    after another: they then share what is read from it too, where each read its own.
    For the loads that was about 100 bytes for each of the millions of (peer, neighbour)
    pairs of 10,000 peers; for a report's zone and loadedPeerList, the time to convert
    them, at each of the 112 million load reports of a 10,000-peer run with 30,000
    events (two thirds of its messages). Each emulated broker decodes its own payload:
    no sharing there, the same values either way."""

    def __init__(self, read: Callable[[P], R]) -> None:
        self.read = read
        self.last: tuple[P, R] | None = None

    def __call__(self, part: P) -> R:
        last = self.last
        if last is not None and last[0] is part:
            return last[1]
        value = self.read(part)
        self.last = (part, value)
        return value


def _read_loads(loads: Mapping[str, Sequence[float]]) -> dict[str, _Report]:
    """The :class:`_Report` of each peer's ``[load, spread, subs]`` in a report's loads."""
    return {peer: _Report(float(load), int(spread), int(subs))
            for peer, (load, spread, subs) in loads.items()}


def _read_top(top: Sequence[Sequence[Any]]) -> list[tuple[str, float]]:
    """A report's loadedPeerList as ``(peer, load)`` pairs."""
    return [(str(peer), float(load)) for peer, load in top]


_reports_of = _SharedRead(_read_loads)
_zone_of = _SharedRead(can.zone_from_json)  # a report's zone
_top_of = _SharedRead(_read_top)


def _heaviest_first(loads: Mapping[str, float]) -> list[tuple[str, float]]:
    """``(peer, load)`` pairs, heaviest first (ties by name, so every peer ranks alike)."""
    return sorted(loads.items(), key=lambda px: (-px[1], px[0]))


class MeghdootCore(Repair):
    """One Meghdoot peer (see the module docstring)."""

    ignores_link_stats = True  # loads are its own messages, not queue statistics

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        self.space = can.space_named(str(params["space"]))
        self.join_mode = params["join"]
        self.dup_rule = params["dup_rule"]
        self.replicate_rule = params["replicate_rule"]
        self.kappa = float(params["kappa"])
        self.load_period_s = float(params["load_period_s"])
        self.load_reports = params["load_reports"]
        self.k = int(params["loaded_list"])
        self.max_climb = int(params["max_climb"])
        self.loop_hops = int(params["loop_hops"])
        self.max_hops = int(params["max_hops"])
        self.seen_s = float(params["seen_s"])
        self.notify_s = float(params["notify_s"])
        self.handoff_s = float(params["handoff_s"])
        # (until_s, half, its peers) of this zone's recent splits, oldest first: on the
        # old owner's side the half it gave away, on the newcomer's the half kept.
        self._handoffs: deque[tuple[float, Zone, tuple[str, ...]]] = deque()
        self.relay_s = float(params["relay_s"])
        # (until_s, newcomer) of this zone's recent splits and replications, oldest first.
        self._relays: deque[tuple[float, str]] = deque()
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
        self._orphans: dict[str, Orphan] = {}  # failed lone owners this peer coordinates
        # Lone neighbour -> its neighbours, as its last report named them (with mirrors):
        # who to tell, and who coordinates, should it fail.
        self._around: dict[str, list[str]] = {}
        self._local: dict[tuple[str, int], Point] = {}  # this peer's clients' subscriptions
        self.nbr_load: dict[str, _Report] = {}  # neighbour or co-replica -> its last report
        self.loaded: dict[str, float] = {}  # the loadedPeerList: peer -> load last heard
        self.events = Recent()  # event messages received (routing and propagation)
        self.spread = Recent()  # of which propagation (DeliverEvent from a neighbour)
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
        self.report_corrections = 0  # reports from beyond this zone answered (_load_in)
        self.relayed = 0  # zone changes passed on to a newcomer (_relay)
        self.handoff_first = 0  # events a split's other half passed on that came here first
        self.repeats = 0  # notifications of an event to a client that had it (dropped)
        self.joins: Counter[str] = Counter()

    # ---- what the peer knows --------------------------------------------------------------

    @property
    def load(self) -> float:
        """Meghdoot's load (our reading): recent event messages plus stored subscriptions."""
        return self.events.total + len(self.subs)

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
        elif isinstance(event, TimerFired) and event.name == _LOAD_TIMER:
            return self._tick(now_s)
        else:
            return []  # statistics windows, links coming and going: nothing to do
        if self.zone is not None and not self._ticking and self.load_period_s > 0:
            self._ticking = True
            out.append(SetTimer(_LOAD_TIMER, self.load_period_s))
        return out

    def _from_client(self, client: str, msg: Message, now_s: float) -> list[Action]:
        t = msg.type
        if t is MsgType.JOIN:
            boot = msg.payload.get("bootstrap")
            if self.zone is not None or not isinstance(boot, str) or boot == self.broker:
                return [Record("can_join_ignored", {"bootstrap": str(boot)})]
            payload: dict[str, Any] = {"newcomer": self.broker, "climb": 0}
            if self.join_mode == "can":
                payload["point"] = list(self._random_point())
            self._bootstrap = boot
            return [Send(boot, self._msg(MsgType.JOIN, payload))]
        if self.zone is None:
            if self._bootstrap is None:
                return [unhandled(msg, "not joined")]
            self._waiting.append((client, msg))  # joining: carried out once granted
            return []
        if t is MsgType.LEAVE:
            return self._leave()
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
            point, _ = self.space.event_geometry(msg_key(msg), msg.payload["attrs"])
            if can.contains(self.zone, point):  # the origin peer is the owner: contacted
                self._contact(msg, now_s)
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
            if t is MsgType.PUBLISH:
                self.events.count()
                if msg.payload.get("spread"):
                    self.spread.count()
                self._contact(msg, now_s)
            if msg.payload.get("spread"):
                return self._spread_in(msg, now_s)
            point = tuple(msg.payload["point"]) if t is not MsgType.PUBLISH else \
                self.space.event_geometry(msg_key(msg), msg.payload["attrs"])[0]
            return self._route(msg, point, now_s, peer)
        if t is MsgType.NOTIFY:
            pub = Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops,
                          _publication(msg.payload))
            return self._notify(msg_key(msg), msg.payload["clients"], pub, now_s)
        if t is MsgType.LOAD:
            return self._load_in(peer, msg.payload)
        if t is MsgType.JOIN:
            return self._join_probe(msg, now_s, peer)
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
        for client in clients:
            if client in got:
                self.repeats += 1
            else:
                got.add(client)
                out.append(Deliver(client, pub))
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
        (:meth:`_load_in`)."""
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
            return self._mirror_in(msg, replica_copy=replica_copy)
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
            return [*self._to_replicas(msg), *self._mirror(MsgType.SUBSCRIBE, key, sub, now_s)]
        if t is MsgType.UNSUBSCRIBE:
            key = (str(msg.payload["sub"][0]), int(msg.payload["sub"][1]))
            gone = self.subs.pop(key, None)
            if gone is not None:
                self._index.remove(key)
            if replica_copy:
                return []
            out = self._to_replicas(msg)
            if gone is not None:
                out += self._mirror(MsgType.UNSUBSCRIBE, key, gone, now_s)
            return out
        if t is MsgType.JOIN:  # plain CAN join: this peer owns the newcomer's point
            return self._accept(msg, now_s)
        self.event_hops[msg.hops - 1] += 1
        self._first_contact(msg_key(msg), now_s, HANDLED)
        return self._deliver_event(msg, now_s)

    def _to_replicas(self, msg: Message) -> list[Action]:
        copy = msg.forwarded({**msg.payload, "copy": True})
        return [Send(g, copy) for g in sorted(self.group - {self.broker})]

    # ---- DeliverEvent ------------------------------------------------------------------------

    def _contact(self, msg: Message, now_s: float) -> None:
        """The event reached this peer (Meghdoot's "peers contacted", counted once)."""
        key = msg_key(msg)
        if self._first_contact(key, now_s, CONTACTED):
            self.contacts.append(sys.intern(key))

    def _spread_in(self, msg: Message, now_s: float) -> list[Action]:
        key = msg_key(msg)
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
        return self._deliver_event(msg, now_s)

    def _deliver_event(self, msg: Message, now_s: float) -> list[Action]:
        assert self.zone is not None
        attrs = msg.payload["attrs"]
        publication = _publication(msg.payload)
        pub = Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops, publication)
        key = msg_key(msg)
        by_peer: dict[str, list[str]] = {}
        for sub_key in self._index.match(attrs):
            sub = self.subs[sub_key]
            by_peer.setdefault(sub.peer, []).append(sub.client)
        out: list[Action] = []
        for peer in sorted(by_peer):
            clients = sorted(set(by_peer[peer]))
            if peer == self.broker:
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

    # ---- loads ------------------------------------------------------------------------------

    def _tick(self, now_s: float) -> list[Action]:
        if self.zone is None:  # left: no more reports
            self._ticking = False
            return []
        out: list[Action] = [SetTimer(_LOAD_TIMER, self.load_period_s)]
        self._ticks += 1
        out += self._detect_failures(now_s)
        out += self._due_orphans(now_s)
        self.events.rotate()
        self.spread.rotate()
        own = self._report()
        self.loaded[self.broker] = own[0]
        top = [list(px) for px in self._trim_loaded()]
        zone = can.zone_to_json(self.zone)
        mates = sorted(self.group - {self.broker})
        # A lone owner names its neighbours: should it fail, they tell one another.
        around = {"around": sorted(self.nbrs)} if self.mirroring and not mates else {}
        # Its own report: to its co-replicas, or with peer reports to its neighbours too.
        own_to = sorted({*self.nbrs, *mates}) if self.load_reports == "peer" else mates
        if own_to:
            report = self._msg(MsgType.LOAD, {"loads": {self.broker: own}, "top": top,
                                              "zone": zone, **around})
            out += [Send(p, report) for p in own_to]
        if self._reports_for_zone() and self.nbrs:
            loads = {self.broker: own, **{m: self.nbr_load[m] for m in mates
                                          if m in self.nbr_load}}
            report = self._msg(MsgType.LOAD, {"loads": loads, "top": top, "zone": zone,
                                              "group": [self.broker, *mates], **around})
            out += [Send(p, report) for p in sorted(self.nbrs)]
        return out

    def _reports_for_zone(self) -> bool:
        """Whether this peer is its zone's reporter: the first of its group by name."""
        return self.load_reports == "zone" and min(self.group) == self.broker

    def _load_in(self, peer: str, p: Mapping[str, Any]) -> list[Action]:
        """A load report: the sender's own, or its zone's (``group``: the peers it
        names, whose loads it carries as last heard). Returns this peer's answer to a
        sender whose zone does not abut its own (docs/design/meghdoot-core.md, (4)), else
        nothing."""
        group = p.get("group", (peer,))
        zone = _zone_of(p["zone"])
        for member in group:
            if member in self._failed:  # wrongly declared failed (a machine too busy
                # to report in time), here or by its reporter: a report naming it
                # brings it back.
                self._failed.discard(member)
                self._update(member, zone)
            else:  # a report refreshes the table, as CAN's periodic updates do
                self._introduce(member, zone)
        if "group" in p:
            vouched = self._ticks + 2
            for member in group:
                if (member != peer and self.nbrs.get(member) == zone
                        and self._heard_tick.get(member, -1) < vouched):
                    self._heard_tick[member] = vouched
        if "around" in p:
            self._around[peer] = list(p["around"])
        else:
            self._around.pop(peer, None)
        self._heard(p["loads"])
        self._merge_loaded(p["top"])
        if peer in self.nbrs or peer in self.group or peer in self._departed:
            return []
        # The sender's zone does not abut this one, so its table holds this zone stale
        # (docs/design/meghdoot-core.md, (4)): it and the peers it reports for are told.
        self.report_corrections += 1
        correction = self._correction(zone)
        return [Send(q, correction) for q in group]

    # ---- loads as reports carry them -------------------------------------------------------

    def _share_events(self, share: float) -> None:
        """Keep ``share`` of the recent event count: after a replication or a split the
        zone's events are shared (our reading; the paper's loads are its simulator's
        fresh counts, ours would otherwise stay high for two load periods and draw every
        join of that time to the same peer)."""
        self.events.keep(share)
        self.spread.keep(share)
        self.loaded[self.broker] = self.load

    def _report(self, subs: int | None = None) -> list[float]:
        """A load as reports carry it: ``[load, propagation messages, subscriptions]``;
        with ``subs``, of a peer that shares this one's recent events but stores ``subs``
        subscriptions (a split's newcomer)."""
        subs = len(self.subs) if subs is None else subs
        return [self.events.total + subs, self.spread.total, subs]

    def _heard(self, loads: Mapping[str, Sequence[float]]) -> None:
        """Loads (:meth:`_report`) from a load report or of the peers a join changed,
        carried by its zone messages."""
        for peer, report in _reports_of(loads).items():
            if peer != self.broker:
                if peer in self.nbrs or peer in self.group:
                    self.nbr_load[peer] = report
                if peer in self.loaded:
                    self.loaded[peer] = report.load

    def _merge_loaded(self, top: Sequence[Sequence[Any]]) -> None:
        """A report's loadedPeerList into this peer's, but for this peer's own entry
        (which this peer knows best, and which it keeps out of its list if it is not
        there). Every entry is read first (a malformed load fails the whole report)."""
        loaded, own = self.loaded, self.loaded.get(self.broker)
        loaded.update(_top_of(top))
        if own is not None:
            loaded[self.broker] = own
        else:
            loaded.pop(self.broker, None)
        # Trimmed to the k heaviest when this peer next reports (a sort per report heard
        # cost a tenth of a large run's time; nothing reads the list in between).

    def _trim_loaded(self) -> list[tuple[str, float]]:
        """Keep the ``k`` heaviest of the loadedPeerList; them, heaviest first."""
        keep = _heaviest_first(self.loaded)[: self.k]
        self.loaded = dict(keep)
        return keep

    # ---- joins ------------------------------------------------------------------------------

    def _random_point(self) -> Point:
        """The plain CAN join's random point, drawn from a hash of this peer's name."""
        digest = hashlib.sha256(self.broker.encode()).digest()
        raw = (digest * ((self.space.dims * 4) // len(digest) + 1))[: self.space.dims * 4]
        return tuple(int.from_bytes(raw[4 * j: 4 * j + 4], "big") / 2**32
                     for j in range(self.space.dims))

    def _join_probe(self, msg: Message, now_s: float, sender: str) -> list[Action]:
        if "point" in msg.payload:  # plain CAN: route to the point
            return self._route(msg, tuple(msg.payload["point"]), now_s, sender)
        climb = int(msg.payload["climb"])
        own = self.load
        # Loads are as last reported, so two peers may each think the other heavier: a
        # probe never returns to a peer it has visited.
        visited = [*msg.payload.get("visited", ()), self.broker]
        known = {p: x.load for p, x in self.nbr_load.items()
                 if p in self.nbrs and p not in visited and p != msg.payload["newcomer"]}
        if known and climb < self.max_climb:
            peer, load = min(known.items(), key=lambda px: (-px[1], px[0]))  # the heaviest
            if load > own:
                return [Send(peer, msg.forwarded({**msg.payload, "climb": climb + 1,
                                                  "visited": visited}))]
        return self._accept(msg, now_s)

    def _accept(self, msg: Message, now_s: float) -> list[Action]:
        """This peer takes the newcomer in: replicate its zone or split it."""
        assert self.zone is not None
        newcomer = str(msg.payload["newcomer"])
        if self.join_mode == "meghdoot" and self._loaded_by_events():
            return self._replicate(newcomer, msg.payload.get("climb", 0), now_s)
        cut = None
        if self.join_mode == "meghdoot":
            cut = can.balanced_cut(self.zone, [s.point for s in self.subs.values()])
        return self._split(newcomer, cut or can.halving_cut(self.zone),
                           msg.payload.get("climb", 0), now_s)

    def _loaded_by_events(self) -> bool:
        """Whether this peer is "loaded due to event propagation" (§4.2) rather than by
        its subscriptions (``replicate_rule``; every reading is ours). The standout and
        relative readings compare each part with the mean of this peer and its
        neighbours (as last reported), so they do not depend on the mix of events and
        subscriptions in the stream, which scaling the events changes; the absolute
        reading does. Standout replicates only a zone in the path of more events than
        its neighbours' (the paper's Fig. 7): relative also replicates every zone that
        stores no subscriptions, and a hill climb that stops at a replica of a zone
        whose neighbours are alike replicates it again, so a large group draws the
        joins that start in it (one zone took 53 of 729 peers at 1,000 peers)."""
        spread, subs = self.spread.total, len(self.subs)
        if spread == 0:
            return False
        if self.replicate_rule == "absolute":
            return spread >= self.kappa * subs
        mixes = [(spread, subs), *((r.spread, r.subs) for p, r in self.nbr_load.items()
                                   if p in self.nbrs)]
        mean_spread = sum(m[0] for m in mixes) / len(mixes)
        mean_subs = sum(m[1] for m in mixes) / len(mixes)
        subs_ratio = subs / mean_subs if mean_subs else 0.0
        if self.replicate_rule == "standout":
            return spread / mean_spread >= self.kappa * max(1.0, subs_ratio)
        return subs == 0 or spread / mean_spread >= self.kappa * subs_ratio

    def _replicate(self, newcomer: str, climb: int, now_s: float) -> list[Action]:
        assert self.zone is not None
        zone = self.zone
        self.joins["replicate"] += 1
        group = sorted(self.group | {newcomer})
        self._share_events(len(self.group) / len(group))
        loads = {self.broker: self._report(), newcomer: self._report()}
        # Tables travel with their zones as tuples, which JSON writes as arrays: a replica
        # grant of a peer with thousands of neighbours converted each zone to lists, a
        # fifth of a 10,000-peer run's time.
        grant = self._msg(MsgType.ZONE, {
            "grant": "replica", "zone": can.zone_to_json(zone), "group": group,
            "nbrs": dict(self.nbrs),
            "subs": [s.to_json(k) for k, s in self.subs.items()], "climb": climb,
            "recent": [self.events.counts, self.spread.counts], "mirrors": self._mirrors_json()})
        self.group.add(newcomer)
        self._relay_to(newcomer, now_s)
        update = self._msg(MsgType.ZONE, {"update": {newcomer: can.zone_to_json(zone)},
                                          "loads": loads})
        others = sorted((set(self.nbrs) | self.group) - {self.broker, newcomer})
        return [Record("can_grant", {"newcomer": newcomer, "mode": "replica", "climb": climb}),
                Send(newcomer, grant), *(Send(p, update) for p in others)]

    def _split(self, newcomer: str, cut: tuple[int, float], climb: int, now_s: float
               ) -> list[Action]:
        assert self.zone is not None
        self.joins["split"] += 1
        dim, at = cut
        old = self.zone
        lower, upper = can.split(old, dim, at)
        old_nbrs = dict(self.nbrs)
        group = sorted(self.group)
        given, mirrors = self._apply_split(lower, newcomer, upper, now_s)
        self._share_events(0.5)
        recent = [self.events.counts, self.spread.counts]
        loads = {self.broker: self._report(), newcomer: self._report(subs=len(given))}
        new_nbrs = {g: lower for g in group}
        new_nbrs.update({p: z for p, z in old_nbrs.items() if can.abutment(upper, z)})
        grant = self._msg(MsgType.ZONE, {
            "grant": "split", "zone": can.zone_to_json(upper), "group": [newcomer],
            "nbrs": new_nbrs,
            "subs": [s.to_json(k) for k, s in given], "climb": climb, "recent": recent,
            "mirrors": [m.to_json(k) for k, m in mirrors]})
        out: list[Action] = [
            Record("can_grant", {"newcomer": newcomer, "mode": "split", "climb": climb,
                                 "dim": dim, "given": len(given), "kept": len(self.subs)}),
            Send(newcomer, grant)]
        # The co-replicas tell the neighbours their tables have and this one's lacks,
        # and take the ones they lack (_split_in).
        split_msg = self._msg(MsgType.ZONE, {"split": [dim, at], "newcomer": newcomer,
                                             "loads": loads, "told": old_nbrs})
        out += [Send(g, split_msg) for g in group if g != self.broker]
        update = self._split_update(group, lower, newcomer, upper, loads)
        out += [Send(p, update) for p in sorted(old_nbrs)]
        if self.mirroring:  # after the grant: a copy may travel through the newcomer
            for k, sub in self.subs.items():
                out += self._rehome(k, sub, old, lower, old, now_s)
            for k, sub in given:
                out += self._rehome(k, sub, old, upper, old, now_s)
        return out

    def _apply_split(self, lower: Zone, newcomer: str, upper: Zone, now_s: float
                     ) -> tuple[list[tuple[tuple[str, int], Sub]],
                                list[tuple[tuple[str, int], Mirror]]]:
        """This peer keeps ``lower``; the newcomer holds ``upper``; the subscriptions and
        mirror copies that left are returned."""
        self.zone = lower
        if self.handoff_s > 0:
            self._handoffs.append((now_s + self.handoff_s, upper, (newcomer,)))
        self._relay_to(newcomer, now_s)
        nbrs = {p: z for p, z in self.nbrs.items() if can.abutment(lower, z)}
        nbrs[newcomer] = upper
        self._set_nbrs(nbrs)
        given = self._keep_subs(lower)
        return given, self._split_mirrors(lower, upper, given)

    def _zone_msg(self, msg: Message, now_s: float) -> list[Action]:
        p = msg.payload
        if "grant" in p:
            self.zone = can.zone_from_json(p["zone"])
            self.group = set(p["group"]) | {self.broker}
            self._set_nbrs({q: can.zone_from_json(z) for q, z in p["nbrs"].items()
                            if q != self.broker})
            for item in p["subs"]:
                self._store(*Sub.from_json(item))
            self.mirror_subs = dict(Mirror.from_json(m) for m in p.get("mirrors", ()))
            events, spread = p["recent"]
            self.events, self.spread = Recent(*events), Recent(*spread)
            self.joined_s, self.joined_as = now_s, str(p["grant"])
            if p["grant"] == "split" and self.handoff_s > 0:
                # The other way round from the old owner's handoff (_apply_split): the
                # half the splitter kept, to which this half's neighbours may leave an
                # event while their views of the split differ (docs/design/meghdoot-core.md).
                kept = self.nbrs[msg.origin]
                self._handoffs.append((now_s + self.handoff_s, kept, tuple(sorted(
                    q for q, zone in self.nbrs.items() if zone == kept))))
            out: list[Action] = [Record("can_joined", {
                "mode": p["grant"], "via": msg.origin, "climb": p.get("climb", 0),
                "volume": can.volume(self.zone)})]
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
            return self._take_over(msg, now_s)
        if "adopt" in p:
            return self._adopt(msg, now_s)
        if "down" in p:
            return self._down_in(msg, now_s)
        if "recover" in p:
            return self._recover_in(msg, now_s)
        if "recovered" in p:
            return self._recovered_in(msg, now_s)
        out = []
        if "split" in p:
            out = self._split_in(p, now_s)
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
                out = self._refill(can.zone_from_json(p["refill"]), now_s)
            out += self._relay(msg, now_s)
        self._heard(p.get("loads", {}))
        return out

    def _split_in(self, p: Mapping[str, Any], now_s: float) -> list[Action]:
        """A co-replica split this peer's zone too: keep the lower half. The splitter
        told the neighbours its table had (``told``); a co-replica's table may have more
        (an update the splitter missed), so this peer tells those and introduces them to
        the newcomer and its co-replicas, and takes from ``told`` the ones it lacks."""
        assert self.zone is not None
        dim, at = p["split"]
        newcomer = str(p["newcomer"])
        lower, upper = can.split(self.zone, int(dim), float(at))
        before = dict(self.nbrs)
        self._apply_split(lower, newcomer, upper, now_s)
        self._share_events(0.5)
        told = p.get("told", {})
        for peer, zj in told.items():
            self._introduce(peer, can.zone_from_json(zj))
        untold = sorted(q for q in before if q not in told and q != newcomer)
        if not untold:
            return []
        update = self._split_update(sorted(self.group), lower, newcomer, upper,
                                    p.get("loads", {}))
        out: list[Action] = [Send(q, update) for q in untold]
        for half, to in ((upper, [newcomer]), (lower, sorted(self.group - {self.broker}))):
            beside = {q: before[q] for q in untold if can.abutment(half, before[q]) is not None}
            if beside:
                introduce = self._msg(MsgType.ZONE, {"update": {}, "introduce": beside})
                out += [Send(g, introduce) for g in to]
        return out

    def _split_update(self, group: Sequence[str], lower: Zone, newcomer: str, upper: Zone,
                      loads: Mapping[str, Any]) -> Message:
        """What a split tells the zone's neighbours: ``group`` holds ``lower`` and
        ``newcomer`` ``upper``, with the loads of the two peers it changed."""
        return self._msg(MsgType.ZONE, {"update": {
            **{g: can.zone_to_json(lower) for g in group},
            newcomer: can.zone_to_json(upper)}, "loads": loads})

    def _relay_to(self, newcomer: str, now_s: float) -> None:
        """Pass on to ``newcomer``, for ``relay_s``, the zone changes neighbours tell."""
        if self.relay_s > 0:
            self._relays.append((now_s + self.relay_s, newcomer))

    def _relay(self, msg: Message, now_s: float) -> list[Action]:
        """A neighbour's zone update, passed on to the newcomers of this zone's recent
        splits and replications as introductions. The newcomer's table is a copy of its
        splitter's: a neighbour that split at the same moment told the splitter, which
        it knew, of its new half, and neither newcomer learns of the other otherwise
        (two joins whose messages cross, as large grants make them)."""
        while self._relays and self._relays[0][0] <= now_s:
            self._relays.popleft()
        entries = {q: zj for q, zj in msg.payload["update"].items() if zj is not None}
        if not self._relays or not entries:
            return []
        out: list[Action] = []
        for _, newcomer in self._relays:
            if newcomer != msg.origin:
                self.relayed += 1
                out.append(Send(newcomer, self._msg(MsgType.ZONE, {
                    "update": {}, "introduce": {q: zj for q, zj in entries.items()
                                                if q != newcomer}})))
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
            self.nbr_load.pop(peer, None)
            self._heard_tick.pop(peer, None)  # if it comes back, its silence counts anew

    # ---- metrics ------------------------------------------------------------------------------

    def counters(self) -> Mapping[str, int]:
        """Plain counts (summed over peers by the summary)."""
        return {"subscriptions": len(self.subs), "received": self.received,
                "duplicates": self.duplicates, "notify_messages": self.notifications,
                "route_stuck": self.stuck, "handoff_first": self.handoff_first,
                "route_corrections": self.corrections, "route_dropped": self.dropped,
                "table_relays": self.relayed, "report_corrections": self.report_corrections,
                "notify_repeats": self.repeats,
                "joins_split": self.joins["split"],
                "joins_replicate": self.joins["replicate"],
                **({"mirror_copies": len(self.mirror_subs),
                    "mirror_messages": self.mirror_messages} if self.mirroring else {})}

    def final_records(self) -> list[tuple[str, dict[str, Any]]]:
        """One ``can_peer`` record: the peer's zone, replicas, neighbours (zones and
        peers, and its table: each neighbour's zone as :func:`can.zone_digest`), load,
        contacts, and how it joined."""
        if self.zone is None:
            return []
        return [("can_peer", {
            "joined_s": self.joined_s, "joined_as": self.joined_as,
            "zone": can.zone_to_json(self.zone),
            "volume": can.volume(self.zone), "group": sorted(self.group),
            "neighbours": [len(self._table), len(self.nbrs)],
            "table": {q: can.zone_digest(z) for q, z in self.nbrs.items()},
            "subscriptions": len(self.subs), "received": self.received,
            "buckets": self._buckets.items(), "bucket_s": self.bucket_s,
            "contacts": self.contacts, "sub_hops": sorted(self.sub_hops.items()),
            "event_hops": sorted(self.event_hops.items()), "duplicates": self.duplicates,
            "handoff_first": self.handoff_first})]
