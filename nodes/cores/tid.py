"""PADRES-style TID-based static routing on an unclustered overlay: OctopiA's baseline.

Registry name ``tid-static``. Paper: the OctopiA paper's Sections II and VIII
(``../shared/seeds/octopia-scot-idr.txt``), after Li, Muthusamy and Jacobsen, "Adaptive
content-based routing in general overlay topologies" (Middleware 2008, its ref. [20]).
The paper runs it on the same SCOT "left unclustered": this core needs no params and runs
on any overlay. In short:

- **Advertisements** are flooded with a tree id (TID: the advertisement's own id); the
  first copy sets a broker's last hop, later copies are duplicates (dropped, yet IMs).
- **Subscriptions** go towards each overlapping advertisement's last hop, one SUBSCRIBE
  per next hop carrying the TIDs bound that way, up to the publisher's host broker; an
  advertisement that comes later is bound at the subscriber's host broker only.
- **Notifications** follow one TID (the smallest, when several advertisements match) along
  the reverse paths, matched at every broker; a publication matching no advertisement is
  dropped (``no_tree`` record).
- UNSUBSCRIBE retraces the subscription; UNADVERTISE is flooded on every link and the TID
  kept *withdrawn* until it has come in on each. Overlap as in :mod:`nodes.cores.octopia`.

The dynamic variant, registry name ``tid-dynamic``, is :class:`TidDynamicCore` below: the
same core, except that a publisher's host broker floods its advertisement again, as a new
tree with its own TID, when a link the newest tree leaves by is overloaded, and a
notification may leave an overloaded last hop for another last hop of the same
subscriptions bound to a different TID (its docstring has the rules and why every
subscriber still gets each notification exactly once).

Our readings and choices in full: docs/design/octopia-cores.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.cores.actions import fan_out, unhandled
from nodes.cores.congestion import LST_PARAMS, LinkStatusTable
from nodes.cores.interface import Action, Arrived, Event, FromClient, LinkStats, Record, Send
from nodes.cores.params import Param
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, filter_from_json, filter_to_json, matches, overlaps

Tid = tuple[str, int]
SubId = tuple[str, int]


@dataclass(slots=True)
class _Adv:
    filter: Filter
    last_hop: str  # the neighbour it first came from, or the local publisher


@dataclass(slots=True)
class _Sub:
    filter: Filter
    filter_json: Any  # as it travels in SUBSCRIBE payloads
    hops: dict[Tid, str]  # bound TID -> last hop (a neighbour, or the local subscriber)


def _tids(raw: Iterable[Sequence[Any]]) -> list[Tid]:
    return [(str(pub), int(n)) for pub, n in raw]


class TidCore:
    """One broker running TID-based static routing; see the module docstring."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        self._neighbour_set = frozenset(self.neighbours)
        self._srt: dict[Tid, _Adv] = {}
        self._hosted: dict[str, set[int]] = {}  # local publisher -> its advertisements' ids
        self._withdrawn: dict[Tid, set[str]] = {}  # TID -> links its UNADVERTISE must come on
        self._prt: dict[SubId, _Sub] = {}
        self._local: dict[SubId, str] = {}  # subscriptions of local clients -> the client
        self._index = SubscriptionIndex()

    def table_sizes(self) -> dict[str, int]:
        """``srt``: advertisements stored (every broker stores every one); ``prt``:
        (subscription, last hop) entries: a subscription bound to TIDs over two links
        counts twice; a local subscription counts once, bound or not. Withdrawn TIDs are
        not entries (they leave once the unadvertisement has drained)."""
        prt = 0
        for sub_id, sub in self._prt.items():
            last_hops = set(sub.hops.values())
            if sub_id in self._local:
                last_hops.add(self._local[sub_id])
            prt += len(last_hops)
        return {"srt": len(self._srt), "prt": prt}

    def state(self) -> dict[str, Any]:
        """The routing state as plain data, for tests and debugging: ``srt``: TID -> last
        hop; ``prt``: sub id -> sorted (TID, last hop) bindings; ``local``: sorted (sub id,
        local subscriber); ``withdrawn``: TID -> links its unadvertisement is still awaited on."""
        return {
            "srt": {t: adv.last_hop for t, adv in sorted(self._srt.items())},
            "prt": {s: sorted(sub.hops.items()) for s, sub in sorted(self._prt.items())},
            "local": sorted(self._local.items()),
            "withdrawn": {t: sorted(links) for t, links in sorted(self._withdrawn.items())},
        }

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see docs/design/octopia-cores.md for the rules."""
        if isinstance(event, FromClient):
            return self._from_client(event.client, event.msg)
        if isinstance(event, Arrived):
            return self._arrived(event.link, event.msg)
        return []  # static routing: statistics windows, timers and lost links change nothing

    def _from_client(self, client: str, msg: Message) -> list[Action]:
        t = msg.type
        if t is MsgType.PUBLISH:
            return self._publish(msg)
        if t is MsgType.SUBSCRIBE:
            return self._subscribe(client, msg)
        if t is MsgType.UNSUBSCRIBE:
            return self._unsubscribe_local(msg)
        if t is MsgType.ADVERTISE:
            return self._advertise(msg, last_hop=client)
        if t is MsgType.UNADVERTISE:
            tid = (msg.origin, int(msg.payload["adv_id"]))
            return self._withdraw(msg, tid, came_from=None) if tid in self._srt else []
        return [unhandled(msg, "not a client operation")]

    def _arrived(self, link: str, msg: Message) -> list[Action]:
        t = msg.type
        if t is MsgType.PUBLISH:
            return self._route(msg, _tids([msg.payload["tid"]])[0])
        if t is MsgType.SUBSCRIBE:
            return self._subscribe_forwarded(link, msg)
        if t is MsgType.UNSUBSCRIBE:
            return self._unsubscribe_forwarded(link, msg)
        if t is MsgType.ADVERTISE:
            tid = (msg.origin, msg.msg_id)
            if tid in self._srt or tid in self._withdrawn:
                return []  # a duplicate: detected by its TID and dropped
            return self._advertise(msg, last_hop=link)
        if t is MsgType.UNADVERTISE:
            return self._unadvertise_forwarded(link, msg)
        return [unhandled(msg, "not expected between TID brokers")]

    # ---- advertisements ---------------------------------------------------------------

    def _advertise(self, msg: Message, last_hop: str) -> list[Action]:
        tid = (msg.origin, msg.msg_id)
        if tid in self._srt:
            return [unhandled(msg, "advertisement already stored")]
        adv = self._srt[tid] = _Adv(filter_from_json(msg.payload["filter"]), last_hop)
        if last_hop not in self._neighbour_set:
            self._hosted.setdefault(msg.origin, set()).add(msg.msg_id)
        actions: list[Action] = []
        onward = [nb for nb in self.neighbours if nb != last_hop]
        if onward:
            copy = msg.forwarded()
            actions.extend(Send(nb, copy) for nb in onward)
        # A late advertisement: local subscriptions bind to it and go up its tree.
        for sub_id, client in sorted(self._local.items()):
            sub = self._prt[sub_id]
            if overlaps(adv.filter, sub.filter):
                actions.extend(self._bind(sub_id, sub, 0, [tid], client))
        return actions

    def _withdraw(self, msg: Message, tid: Tid, came_from: str | None) -> list[Action]:
        """Drop ``tid`` and its bindings, send the unadvertisement on every link, and
        await it on every link but ``came_from``."""
        del self._srt[tid]
        hosted = self._hosted.get(tid[0])
        if hosted is not None:
            hosted.discard(tid[1])
            if not hosted:
                del self._hosted[tid[0]]
        for sub_id in sorted(self._prt):
            sub = self._prt[sub_id]
            if sub.hops.pop(tid, None) is not None:
                self._drop_if_unbound(sub_id, sub)
        waiting = self._neighbour_set - {came_from}
        if waiting:
            self._withdrawn[tid] = set(waiting)
        if not self.neighbours:
            return []
        copy = msg.forwarded()
        return [Send(nb, copy) for nb in self.neighbours]

    def _unadvertise_forwarded(self, link: str, msg: Message) -> list[Action]:
        tid = (msg.origin, int(msg.payload["adv_id"]))
        waiting = self._withdrawn.get(tid)
        if waiting is not None:
            waiting.discard(link)
            if not waiting:
                del self._withdrawn[tid]
            return []
        if tid in self._srt:
            return self._withdraw(msg, tid, came_from=link)
        return [unhandled(msg, "unadvertisement of an unknown advertisement")]

    # ---- subscriptions ----------------------------------------------------------------

    def _subscribe(self, client: str, msg: Message) -> list[Action]:
        sub_id = (msg.origin, msg.msg_id)
        if sub_id in self._prt:
            return [unhandled(msg, "subscription already stored")]
        f = filter_from_json(msg.payload["filter"])
        sub = self._prt[sub_id] = _Sub(f, msg.payload["filter"], {})
        self._local[sub_id] = client
        self._index.add(sub_id, f)
        tids = [t for t, adv in sorted(self._srt.items()) if overlaps(adv.filter, f)]
        return self._bind(sub_id, sub, msg.hops, tids, client)

    def _subscribe_forwarded(self, link: str, msg: Message) -> list[Action]:
        sub_id = (msg.origin, msg.msg_id)
        sub = self._prt.get(sub_id)
        new = sub is None
        if sub is None:
            sub = _Sub(filter_from_json(msg.payload["filter"]), msg.payload["filter"], {})
        actions = self._bind(sub_id, sub, msg.hops, _tids(msg.payload["tids"]), link)
        if new and sub.hops:
            self._prt[sub_id] = sub
            self._index.add(sub_id, sub.filter)
        return actions

    def _bind(self, sub_id: SubId, sub: _Sub, hops: int, tids: list[Tid], last_hop: str
              ) -> list[Action]:
        """Bind ``tids`` (those still in the SRT) to ``sub`` with ``last_hop``; one
        SUBSCRIBE per next hop towards their publishers carries them on."""
        ahead: dict[str, list[list[Any]]] = {}
        for tid in tids:
            adv = self._srt.get(tid)
            if adv is None:
                continue  # withdrawn while the subscription was on its way
            sub.hops[tid] = last_hop
            if adv.last_hop in self._neighbour_set:
                ahead.setdefault(adv.last_hop, []).append(list(tid))
        return [
            Send(nb, Message(MsgType.SUBSCRIBE, sub_id[1], sub_id[0], hops + 1,
                             {"filter": sub.filter_json, "tids": tids_json}))
            for nb, tids_json in sorted(ahead.items())
        ]

    def _unsubscribe_local(self, msg: Message) -> list[Action]:
        sub_id = (msg.origin, int(msg.payload["sub_id"]))
        if self._local.pop(sub_id, None) is None:
            return []  # un-subscribing twice is harmless
        sub = self._prt.pop(sub_id)
        self._index.remove(sub_id)
        return self._unbind(msg, sorted(sub.hops))

    def _unsubscribe_forwarded(self, link: str, msg: Message) -> list[Action]:
        sub_id = (msg.origin, int(msg.payload["sub_id"]))
        sub = self._prt.get(sub_id)
        if sub is None:
            return []  # every binding went with an unadvertisement meanwhile
        gone = [t for t in _tids(msg.payload["tids"]) if sub.hops.get(t) == link]
        for tid in gone:
            del sub.hops[tid]
        self._drop_if_unbound(sub_id, sub)
        return self._unbind(msg, gone)

    def _unbind(self, msg: Message, tids: list[Tid]) -> list[Action]:
        """One UNSUBSCRIBE per next hop towards the publishers of ``tids``."""
        ahead: dict[str, list[list[Any]]] = {}
        for tid in tids:
            adv = self._srt.get(tid)
            if adv is not None and adv.last_hop in self._neighbour_set:
                ahead.setdefault(adv.last_hop, []).append(list(tid))
        return [
            Send(nb, msg.forwarded({"sub_id": msg.payload["sub_id"], "tids": tids_json}))
            for nb, tids_json in sorted(ahead.items())
        ]

    def _drop_if_unbound(self, sub_id: SubId, sub: _Sub) -> None:
        """A forwarded subscription with no binding left is no PRT entry any more."""
        if not sub.hops and sub_id not in self._local:
            del self._prt[sub_id]
            self._index.remove(sub_id)

    # ---- notifications ----------------------------------------------------------------

    def _publish(self, msg: Message) -> list[Action]:
        attrs = msg.payload["attrs"]
        tids = [(msg.origin, n) for n in sorted(self._hosted.get(msg.origin, ()))
                if matches(self._srt[(msg.origin, n)].filter, attrs)]
        if not tids:
            return [Record("no_tree", {"origin": msg.origin, "msg_id": msg.msg_id})]
        tid = tids[0]
        tagged = Message(msg.type, msg.msg_id, msg.origin, msg.hops,
                         {**msg.payload, "tid": list(tid)})
        return self._route(tagged, tid)

    def _route(self, msg: Message, tid: Tid) -> list[Action]:
        """Deliver to local subscribers and forward along the subscriptions bound to ``tid``."""
        if not len(self._index):
            return []
        clients: set[str] = set()
        onward: set[str] = set()
        for sub_id in self._index.match(msg.payload["attrs"]):
            hop = self._prt[sub_id].hops.get(tid)
            if hop is not None:
                (onward if hop in self._neighbour_set else clients).add(hop)
        return fan_out(msg, clients, onward, len(self._index))


DEFAULT_MAX_REROUTES = 2
DEFAULT_MAX_TREES = 3
DYNAMIC_PARAMS = (
    *LST_PARAMS,
    Param("max_reroutes", "int", DEFAULT_MAX_REROUTES, "hops",
          "how many times one notification may be sent over another last hop", minimum=0),
    Param("max_trees", "int", DEFAULT_MAX_TREES, "",
          "how many advertisement trees one advertisement may have (1: only the "
          "client's; more: its host broker floods it again when a link it uses is "
          "overloaded)", minimum=1),
)
# Tree k >= 1 of a publisher's advertisement n has TID (publisher, n + k * TREE_ID_STRIDE):
# a client's advertisement ids stay below it, so re-issued trees never take a client's id.
TREE_ID_STRIDE = 2**32

Alternative = tuple[str, Tid]  # (the neighbour a rerouted copy goes to, the TID it is tagged with)


class TidDynamicCore(TidCore):
    """TID-based routing with PADRES's dynamic variant: ``tid-dynamic``.

    Advertisements, subscriptions and their withdrawal are :class:`TidCore`'s. The
    broker keeps a Link Status Table (:class:`nodes.cores.congestion.LinkStatusTable`,
    params ``theta`` and ``ce_min``) fed by the runtime's statistics windows, and logs an
    ``lst`` record with the overloaded links whenever that set changes (as ``idr`` does).

    New trees (where the alternatives come from). The paper binds a subscription to the
    TIDs of all matching advertisements and uses "paths associated with the bounded TIDs
    ... in dynamic routing of publications provided their last hops are different"
    (Section II). With one advertisement per publisher a subscription that matches one
    publisher has one TID, and first-arrival trees on unloaded links leave a common
    broker towards a subscriber the same way, so there is nothing to reroute onto. The
    paper also says what a system with fixed paths must do when "a link is congested":
    "reissue advertisements and subscriptions calls to generate new routing paths"
    (Section I), and that a tree formed while links are loaded avoids them (Fig. 1(b)).
    So: after each statistics window, for each advertisement of a local publisher whose
    newest tree leaves this broker by an overloaded link (a subscription bound to that
    tree here has it as last hop), the broker floods the advertisement again as tree k
    (TID: the publisher and ``adv_id + k * TREE_ID_STRIDE``), up to ``max_trees`` trees
    in all (default 3, a param; 1 turns this off), and logs a ``new_tree`` record. The
    flood is :class:`TidCore`'s: first copies set last hops, so the new tree forms
    around the links whose queues are long now; subscribers' host brokers bind their
    local subscriptions to it, which go up it as a late advertisement's do. Notifications
    keep the first tree's TID (``tid-static``'s routes when nothing is congested); the
    new trees are alternatives only. Withdrawing the advertisement withdraws every tree
    (one UNADVERTISE flood each).

    Terms. A notification copy carries a tag ``tid`` and, once rerouted, a *restriction*
    ``only`` (the subscription ids it serves) and ``reroutes`` (how many reroutes its
    line of copies has taken). A broker *serves* a subscription with a copy when the
    subscription matches, is in the copy's restriction (a copy without one is
    unrestricted) and is bound to the copy's tag here. The served subscriptions form one
    *group* per last hop for the tag: the local ones, delivered to, and one per neighbour.

    The rule, per neighbour group G on last hop h
        - h is free, or the copy already took ``max_reroutes`` reroutes (default 2, a
          param): the copy goes on h as in the static core: unrestricted if it came
          unrestricted (so without congestion this core sends exactly what ``tid-static``
          sends), else restricted to G.
        - h is overloaded: G is rerouted as a whole when every subscriber (client) with
          subscriptions in G has an *alternative*: a TID other than the tag bound, with
          the same last hop, to every one of its subscriptions in G, whose last hop is a
          free neighbour and not the link the copy came on (going straight back would
          only invite ping-pong). Clients are then covered greedily: the alternative
          serving the most of the clients left first (ties: the shorter queue, lower CE,
          name, then TID); each chosen alternative (h', t') gets one copy tagged t',
          restricted to the subscriptions of the clients it covers, one reroute further.
          Nothing goes on h for G. If one client has no alternative, G goes on h: the
          group is never split between h and a detour.
        A ``reroute`` record per rerouted copy names ``tid_from``, ``tid_to``, the link
        ``avoided``, the link ``used`` and the number of ``subscriptions`` it serves.

    Exactly once (per client; a client's subscription ids begin with its name, the
    origin of its SUBSCRIBE messages, which is how a broker tells them apart).
        (a) The bindings of a subscription s of client c (host broker H) to a TID t are
            the path of t's advertisement tree from H up to the publisher's host, each
            broker holding as last hop its child on that path (a new tree is an
            advertisement tree like any other, and s climbs it from H). So at any broker all of
            c's subscriptions bound to t have the same last hop, and a child of the
            broker off that path has none of them bound to t (its subtree in t's tree is
            disjoint from the one holding H).
        (b) Hence at each broker, the subscriptions of c served with one copy fall in
            one group, and that group goes on exactly one outgoing copy (static on h, or
            as a whole on the one alternative chosen for c) or is delivered to c: at
            most one successor copy serves c, and at H the local delivery ends the line.
        (c) Every copy that serves c has a predecessor that served c, but the first:
            a restricted copy's restriction is a subset of what its sender served, and an
            unrestricted copy tagged t travels only down t's tree from the publisher's
            host, one copy per tree edge, and serves c only on c's path (a), entered once.
        So the processings serving c form one chain: c gets at most one copy. The chain
        does not stop before H: a last hop h' bound to t' means h' sent this broker the
        subscription with t', so h' has it bound to t' too, one step nearer to H on the
        path of t'. It ends: between reroutes it walks down one tree path, and a line of copies
        takes at most ``max_reroutes`` reroutes (the budget is what rules out a detour
        loop, e.g. t's path leading back to a broker that rerouted onto t'). While a
        subscription is still on its way up (or being withdrawn) a copy may find it not
        yet bound; like the static core it then misses it, never doubles it.

    Limitations (our choices). Link failures (``LinkDown``) are not routed around; the
    restriction grows the copy by the subscription ids it lists; the alternative is taken
    only if free now, from the last window's verdict. Only the publisher's host broker
    (the root of its trees) floods a new tree, from its own links' verdicts: a congested
    link further down a tree, or a congested host broker itself, gets no new tree.
    Trees are never retired before the advertisement is (each stays in every SRT).
    """

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        super().__init__(broker, neighbours, params)
        self.lst = LinkStatusTable.from_params(params)
        self.max_reroutes = int(params["max_reroutes"])
        if self.max_reroutes < 0:
            raise ValueError(f"max_reroutes must be >= 0, got {self.max_reroutes}")
        self.max_trees = int(params["max_trees"])
        if self.max_trees < 1:
            raise ValueError(f"max_trees must be >= 1, got {self.max_trees}")
        # A hosted client advertisement's TID -> how many trees it has (its own included).
        self._tree_count: dict[Tid, int] = {}

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """The static core's handling, plus link statistics, new trees and rerouting (see
        the class docstring)."""
        if isinstance(event, LinkStats):
            return [*self.lst.observe(event.links), *self._new_trees()]
        return super().handle(event, now_s)

    def _from_client(self, client: str, msg: Message) -> list[Action]:
        if msg.type is MsgType.ADVERTISE and msg.msg_id >= TREE_ID_STRIDE:
            return [unhandled(msg, f"advertisement ids from {TREE_ID_STRIDE} on are the "
                                   "broker's own trees")]
        if msg.type is MsgType.UNADVERTISE:
            # The advertisement goes with every tree its host broker flooded for it.
            first = (msg.origin, int(msg.payload["adv_id"]))
            actions: list[Action] = []
            for tid in self._trees_of(first):
                tree_msg = Message(msg.type, msg.msg_id, msg.origin, msg.hops,
                                   {**msg.payload, "adv_id": tid[1]})
                actions.extend(self._withdraw(tree_msg, tid, came_from=None))
            self._tree_count.pop(first, None)
            return actions
        return super()._from_client(client, msg)

    def _trees_of(self, first: Tid) -> list[Tid]:
        """The TIDs of a hosted client advertisement's trees still stored, its own first."""
        origin, n = first
        count = self._tree_count.get(first, 1)
        return [t for t in ((origin, n + k * TREE_ID_STRIDE) for k in range(count))
                if t in self._srt]

    def _new_trees(self) -> list[Action]:
        """A new tree for each hosted advertisement whose newest tree leaves this broker
        over an overloaded link (a subscription bound to it here has that last hop),
        while it has fewer than ``max_trees``."""
        if self.max_trees == 1 or not self._hosted:
            return []
        busy = {nb for nb in self.neighbours if self.lst.overloaded(nb)}
        if not busy:
            return []
        newest: dict[Tid, Tid] = {}  # the newest tree's TID -> the client advertisement's
        for origin, ids in self._hosted.items():
            for n in ids:
                count = self._tree_count.get((origin, n), 1)
                if n < TREE_ID_STRIDE and count < self.max_trees:
                    newest[(origin, n + (count - 1) * TREE_ID_STRIDE)] = (origin, n)
        if not newest:
            return []
        due = {newest[t] for sub in self._prt.values() for t, hop in sub.hops.items()
               if hop in busy and t in newest}
        actions: list[Action] = []
        for first in sorted(due):
            adv = self._srt[first]
            k = self._tree_count.get(first, 1)
            self._tree_count[first] = k + 1
            tree = Message(MsgType.ADVERTISE, first[1] + k * TREE_ID_STRIDE, first[0], 0,
                           {"filter": filter_to_json(adv.filter)})
            actions.append(Record("new_tree", {"tid": list(first), "tree": k,
                                               "overloaded": sorted(busy)}))
            actions.extend(self._advertise(tree, last_hop=adv.last_hop))
        return actions

    def _arrived(self, link: str, msg: Message) -> list[Action]:
        if msg.type is MsgType.PUBLISH:
            return self._route_dynamic(msg, _tids([msg.payload["tid"]])[0], came_from=link)
        return super()._arrived(link, msg)

    def _route(self, msg: Message, tid: Tid) -> list[Action]:
        # Only the publisher's host broker gets here (arrivals go through _arrived).
        return self._route_dynamic(msg, tid, came_from=None)

    def _route_dynamic(self, msg: Message, tid: Tid, came_from: str | None) -> list[Action]:
        """Serve the copy ``msg`` tagged ``tid``: deliver, forward, reroute (class docstring)."""
        if not len(self._index):
            return []
        only = msg.payload.get("only")
        scope = None if only is None else {(str(c), int(n)) for c, n in only}
        clients: set[str] = set()
        groups: dict[str, list[SubId]] = {}
        for sub_id in self._index.match(msg.payload["attrs"]):
            if scope is not None and sub_id not in scope:
                continue
            hop = self._prt[sub_id].hops.get(tid)
            if hop is None:
                continue
            if hop in self._neighbour_set:
                groups.setdefault(hop, []).append(sub_id)
            else:
                clients.add(hop)
        reroutes = int(msg.payload.get("reroutes", 0))
        static: set[str] = set()
        detours: list[Action] = []
        for hop, group in sorted(groups.items()):
            plan = None
            if reroutes < self.max_reroutes and self.lst.overloaded(hop):
                plan = self._reroute_plan(tid, group, came_from)
            if plan is None:
                static.add(hop)
                continue
            for (alt, alt_tid), subs in sorted(plan.items()):
                payload = {**msg.payload, "tid": list(alt_tid),
                           "only": [list(s) for s in subs], "reroutes": reroutes + 1}
                detours.append(Send(alt, msg.forwarded(payload)))
                detours.append(Record("reroute", {
                    "origin": msg.origin, "msg_id": msg.msg_id, "tid_from": list(tid),
                    "tid_to": list(alt_tid), "avoided": hop, "used": alt,
                    "subscriptions": len(subs)}))
        if scope is None:
            actions = fan_out(msg, clients, static, len(self._index))
        else:
            # A restricted copy stays restricted, narrowed to the group each hop serves.
            actions = fan_out(msg, clients, set(), len(self._index))
            actions.extend(
                Send(hop, msg.forwarded({**msg.payload,
                                         "only": [list(s) for s in sorted(groups[hop])]}))
                for hop in sorted(static))
        actions.extend(detours)
        return actions

    def _reroute_plan(self, tid: Tid, group: list[SubId], came_from: str | None
                      ) -> dict[Alternative, list[SubId]] | None:
        """The copies that replace ``group``'s copy tagged ``tid``: alternative -> the
        subscriptions it serves (sorted); None when some client has no alternative."""
        by_client: dict[str, list[SubId]] = {}
        for sub_id in group:
            by_client.setdefault(sub_id[0], []).append(sub_id)
        options: dict[str, set[Alternative]] = {}
        for client, subs in by_client.items():
            common: set[Alternative] | None = None
            for sub_id in subs:
                mine = {(hop, t) for t, hop in self._prt[sub_id].hops.items()
                        if t != tid and hop in self._neighbour_set and hop != came_from
                        and not self.lst.overloaded(hop)}
                common = mine if common is None else common & mine
            if not common:
                return None
            options[client] = common
        plan: dict[Alternative, list[SubId]] = {}
        left = set(options)
        while left:
            count = Counter(alt for client in left for alt in options[client])
            best = min(count, key=lambda alt: (-count[alt], self.lst.load_key(alt[0]), alt[1]))
            covered = {client for client in left if best in options[client]}
            plan[best] = sorted(s for client in covered for s in by_client[client])
            left -= covered
        return plan
