"""Kyra: event routing on server cliques and per-zone routing trees (registry ``kyra``).

Paper: Cao and Singh, "Efficient Event Routing in Content-based Publish-Subscribe Service
Networks", INFOCOM 2004. Our copy stops in §III-B; the mechanism is §III as far as it
goes, completed as ``../shared/READINGS-WAVE2.md`` 3.2 proposes. In short:

- **Derived before the run** (:func:`derive_layout`, by the host, fixed for a run):
  cliques of servers by latency (:func:`nodes.cores.cliques.server_cliques`, bounded by
  ``max_distance_ms`` and ``max_clique_size``), zones on ``zone_attr`` balanced on a
  calibration sample (a clique of k servers cuts k local zones; ``trees`` global zones, one
  per routing tree) and each tree a latency MST.
- **Subscriptions** go to their *proxies*, the clique's servers whose zone the filter
  overlaps, which enter them, cut to the zone, into each joined tree's routing; each tree
  is an independent Siena network (:class:`nodes.cores.siena.SienaCore`).
- **Publishing**: to the clique's covering proxy, then along the covering tree; matching
  proxies NOTIFY the origin servers, so each subscriber gets an event once. An event
  without ``zone_attr`` is ``unhandled``. Unsubscriptions retrace the movement.

Derived params per broker: ``clique`` (its members, sorted, itself included),
``clique_cuts`` (its clique's local partition), ``global_cuts`` and ``routing_trees``
(tree -> its tree neighbours, for the trees it joined). Counters (:meth:`KyraCore.counters`):
``routing_entries`` (entries under tree neighbours, all trees), ``proxy_subscriptions``,
``trees_joined``, ``local_subscriptions`` (its clients'), ``sub_messages`` (SUBSCRIBE and
UNSUBSCRIBE handled: from clients, moved, on trees), ``sub_messages_sent``, ``covered``,
``events_matched`` (events matched on a tree here: the paper's "matched at server X"),
``events_unwanted`` (of those, events no proxy subscription here matched) and
``match_ops`` (filters tested, Siena's count summed over the trees).

Our readings and choices in full: docs/design/kyra-cores.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.cores.actions import unhandled
from nodes.cores.cliques import server_cliques
from nodes.cores.interface import Action, Arrived, Deliver, Event, FromClient, Send
from nodes.cores.overlay import latency_mst, tree_neighbours
from nodes.cores.params import Param
from nodes.cores.siena import SienaCore
from nodes.cores.zones import balanced_cuts, require_attrs, zone_filter, zone_index
from nodes.messages import Message, MsgType
from nodes.model import Filter, Value, filter_from_json, filter_to_json, overlaps

PARAMS = (
    Param("max_distance_ms", "float", 50.0, "ms", "largest latency between two servers of "
          "one clique (Fig. 5's maxDistance; two intra-transit hops of the transit-stub "
          "presets)", minimum=0),
    Param("max_clique_size", "int", 8, "", "most servers in one clique (Fig. 5's "
          "maxNumServers)", minimum=1),
    Param("trees", "int", 0, "", "routing trees T, one per global zone; 0: the largest "
          "clique's size (the paper's T ~ max k_i)", minimum=0),
    Param("zone_attr", "str", "Symbol", "", "the attribute cut into continuous zones"),
    Param("covering", "bool", False, "", "Siena's covering inside each routing tree"),
)

SubId = tuple[str, int]
_SEP = "\x00"  # joins two names into one identity; no name holds it


@dataclass(frozen=True)
class KyraLayout:
    """The figures a Kyra run derives before it starts (docs/design/kyra-cores.md).

    ``cliques`` sorted lists of servers; ``clique_cuts[i]`` the local partition of clique
    ``i`` (its j-th server owns zone j); ``global_cuts`` the T global zones;
    ``tree_members[t]`` and ``tree_edges[t]`` tree t's servers and MST edges."""

    zone_attr: str
    cliques: tuple[tuple[str, ...], ...]
    clique_cuts: tuple[tuple[Value, ...], ...]
    global_cuts: tuple[Value, ...]
    tree_members: tuple[tuple[str, ...], ...]
    tree_edges: tuple[tuple[tuple[str, str], ...], ...]

    def zone_of(self, server: str) -> Filter:
        """``server``'s local zone as a filter."""
        for members, cuts in zip(self.cliques, self.clique_cuts, strict=True):
            if server in members:
                return zone_filter(self.zone_attr, cuts, members.index(server))
        raise ValueError(f"{server!r} is in no clique")

    def broker_params(self) -> dict[str, dict[str, Any]]:
        """Per broker: ``clique``, ``clique_cuts``, ``global_cuts``, ``routing_trees``."""
        nbs = [tree_neighbours(edges) for edges in self.tree_edges]
        out = {}
        for members, cuts in zip(self.cliques, self.clique_cuts, strict=True):
            for s in members:
                out[s] = {"clique": list(members), "clique_cuts": list(cuts),
                          "global_cuts": list(self.global_cuts),
                          "routing_trees": {str(t): list(nbs[t].get(s, ()))
                                    for t, m in enumerate(self.tree_members) if s in m}}
        return dict(sorted(out.items()))

    def edges(self) -> set[tuple[str, str]]:
        """Every pair that exchanges messages: clique meshes and tree edges (sorted pairs)."""
        pairs = {(a, b) for c in self.cliques for i, a in enumerate(c) for b in c[i + 1:]}
        return pairs | {e for edges in self.tree_edges for e in edges}


def derive_layout(
    latency_ms: Mapping[str, Mapping[str, float]],
    calibration: Sequence[Mapping[str, Value]],
    params: Mapping[str, Any],
) -> KyraLayout:
    """Cliques, zones and trees (docs/design/kyra-cores.md) for the servers of ``latency_ms`` (ms,
    all pairs), a ``calibration`` sample of events' attributes and the declared
    ``params`` (:data:`PARAMS`, resolved). ValueError for an empty sample,
    ParamValueError for an event of it without ``zone_attr``."""
    attr = params["zone_attr"]
    require_attrs("zone_attr", attr, [attr], calibration)
    values = [ev[attr] for ev in calibration]
    cliques = tuple(tuple(c) for c in server_cliques(latency_ms, params["max_distance_ms"],
                                                     params["max_clique_size"]))
    n_trees = params["trees"] or max(len(c) for c in cliques)
    global_cuts = tuple(balanced_cuts(values, n_trees))
    clique_cuts = tuple(tuple(balanced_cuts(values, len(c))) for c in cliques)
    members: list[list[str]] = [[] for _ in range(n_trees)]
    for clique, cuts in zip(cliques, clique_cuts, strict=True):
        for i, s in enumerate(clique):
            zone = zone_filter(attr, cuts, i)
            for t in range(n_trees):
                if overlaps(zone, zone_filter(attr, global_cuts, t)):
                    members[t].append(s)
    return KyraLayout(attr, cliques, clique_cuts, global_cuts,
                      tuple(tuple(sorted(m)) for m in members),
                      tuple(tuple(latency_mst(m, latency_ms)) for m in members))


class KyraCore:
    """One Kyra server; see the module docstring."""

    ignores_link_stats = True  # static cliques and trees: statistics change nothing

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        missing = [k for k in ("clique", "clique_cuts", "global_cuts", "routing_trees",
                               "zone_attr") if k not in params]
        if missing:
            raise ValueError(f"kyra core at {broker}: params need {missing} (derived before "
                             "the run: nodes.cores.kyra.derive_layout)")
        self.attr: str = params["zone_attr"]
        self.clique = tuple(params["clique"])
        self.clique_cuts = tuple(params["clique_cuts"])
        self.global_cuts = tuple(params["global_cuts"])
        if broker not in self.clique or len(self.clique_cuts) != len(self.clique) - 1:
            raise ValueError(f"kyra core at {broker}: clique {list(self.clique)} does not "
                             f"hold it or has not one zone per server")
        self._zones = [zone_filter(self.attr, self.clique_cuts, i)
                       for i in range(len(self.clique))]
        self.zone = self._zones[self.clique.index(broker)]
        covering = bool(params["covering"])
        self.trees = {int(t): SienaCore(broker, nbs, {"tree_neighbours": nbs,
                                                      "covering": covering})
                      for t, nbs in sorted(params["routing_trees"].items(),
                                           key=lambda item: int(item[0]))}
        self._tree_zone = {t: zone_filter(self.attr, self.global_cuts, t) for t in self.trees}
        self._moved: dict[SubId, tuple[str, ...]] = {}  # a local client's: its proxies
        self._proxied: dict[SubId, tuple[str, tuple[int, ...]]] = {}  # origin server, trees
        self._counts: Counter[str] = Counter()

    # ---- views --------------------------------------------------------------------------

    def proxy_subscriptions(self) -> dict[SubId, str]:
        """The proxy subscriptions held here: client subscription -> origin server."""
        return {k: server for k, (server, _) in sorted(self._proxied.items())}

    def table_sizes(self) -> dict[str, int]:
        """No SRT; the PRT holds every tree's entries, proxy subscriptions included (once
        per tree they were entered into)."""
        return {"srt": 0, "prt": sum(c.table_sizes()["prt"] for c in self.trees.values())}

    def counters(self) -> dict[str, int]:
        """Plain counts (see the module docstring)."""
        tree = Counter[str]()
        for core in self.trees.values():
            tree.update(core.counters())
        return {"routing_entries": tree["routing_entries"],
                "proxy_subscriptions": len(self._proxied), "trees_joined": len(self.trees),
                "local_subscriptions": len(self._moved),
                "sub_messages": self._counts["sub_messages"],
                "sub_messages_sent": self._counts["sub_messages_sent"],
                "covered": tree["covered"], "events_matched": tree["events_matched"],
                "events_unwanted": self._counts["events_unwanted"],
                "match_ops": tree["match_ops"]}

    # ---- events -------------------------------------------------------------------------

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see docs/design/kyra-cores.md for the rules."""
        if isinstance(event, FromClient):
            msg = event.msg
            if msg.type is MsgType.SUBSCRIBE:
                self._counts["sub_messages"] += 1
                return self._move(msg, now_s)
            if msg.type is MsgType.UNSUBSCRIBE:
                self._counts["sub_messages"] += 1
                return self._move_unsubscribe(msg, now_s)
            if msg.type is MsgType.PUBLISH:
                return self._to_proxy(msg, now_s)
            if msg.type in (MsgType.ADVERTISE, MsgType.UNADVERTISE):
                return []
            return [unhandled(msg)]
        if isinstance(event, Arrived):
            return self._arrived(event.link, event.msg, now_s)
        return []  # static cliques and trees: timers, statistics, lost links change nothing

    def _arrived(self, link: str, msg: Message, now_s: float) -> list[Action]:
        tree = msg.payload.get("tree")
        if tree is not None:
            return self._on_tree(tree, link, msg, now_s)
        if link not in self.clique:
            return [unhandled(msg, f"from {link}, not of this clique and on no tree")]
        t = msg.type
        if t is MsgType.SUBSCRIBE:
            self._counts["sub_messages"] += 1
            return self._proxy_subscribe(msg, link, now_s)
        if t is MsgType.UNSUBSCRIBE:
            self._counts["sub_messages"] += 1
            return self._proxy_unsubscribe(msg, now_s)
        if t is MsgType.PUBLISH:
            return self._publish_as_proxy(msg, now_s)
        if t is MsgType.NOTIFY:
            publication = {k: v for k, v in msg.payload.items() if k != "clients"}
            pub = Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops, publication)
            return [Deliver(c, pub) for c in msg.payload["clients"]]
        return [unhandled(msg)]

    # ---- subscriptions ------------------------------------------------------------------

    def _move(self, msg: Message, now_s: float) -> list[Action]:
        key = (msg.origin, msg.msg_id)
        if key in self._moved:
            return [unhandled(msg, "subscription already stored")]
        f = filter_from_json(msg.payload["filter"])
        proxies = tuple(p for p, zone in zip(self.clique, self._zones, strict=True)
                        if overlaps(f, zone))
        self._moved[key] = proxies
        return self._to_proxies(msg, proxies, lambda: self._proxy_subscribe(msg, self.broker,
                                                                            now_s))

    def _move_unsubscribe(self, msg: Message, now_s: float) -> list[Action]:
        proxies = self._moved.pop((msg.origin, int(msg.payload["sub_id"])), None)
        if proxies is None:
            return []  # un-subscribing twice is harmless
        return self._to_proxies(msg, proxies, lambda: self._proxy_unsubscribe(msg, now_s))

    def _to_proxies(self, msg: Message, proxies: Sequence[str],
                    here: Callable[[], list[Action]]) -> list[Action]:
        """``msg`` to each proxy: sent on, or ``here()`` for this server."""
        actions: list[Action] = []
        copy = msg.forwarded()
        for p in proxies:
            if p == self.broker:
                actions += here()
            else:
                self._counts["sub_messages_sent"] += 1
                actions.append(Send(p, copy))
        return actions

    def _proxy_subscribe(self, msg: Message, server: str, now_s: float) -> list[Action]:
        key = (msg.origin, msg.msg_id)
        if key in self._proxied:
            return [unhandled(msg, "proxy subscription already stored")]
        proxy_filter = filter_from_json(msg.payload["filter"]) + self.zone
        trees = tuple(t for t, zone in self._tree_zone.items() if overlaps(proxy_filter, zone))
        self._proxied[key] = (server, trees)
        actions: list[Action] = []
        for t in trees:
            inner = Message(MsgType.SUBSCRIBE, msg.msg_id, msg.origin + _SEP + self.broker,
                            msg.hops, {"filter": filter_to_json(proxy_filter
                                                                + self._tree_zone[t])})
            actions += self._from_tree(t, self.trees[t].handle(
                FromClient(server + _SEP + msg.origin, inner), now_s))
        return actions

    def _proxy_unsubscribe(self, msg: Message, now_s: float) -> list[Action]:
        sub = int(msg.payload["sub_id"])
        entry = self._proxied.pop((msg.origin, sub), None)
        if entry is None:
            return []
        server, trees = entry
        actions: list[Action] = []
        for t in trees:
            inner = Message(MsgType.UNSUBSCRIBE, msg.msg_id, msg.origin + _SEP + self.broker,
                            msg.hops, {"sub_id": sub})
            actions += self._from_tree(t, self.trees[t].handle(
                FromClient(server + _SEP + msg.origin, inner), now_s))
        return actions

    # ---- publications -------------------------------------------------------------------

    def _to_proxy(self, msg: Message, now_s: float) -> list[Action]:
        value = msg.payload["attrs"].get(self.attr)
        if value is None:
            return [unhandled(msg, f"a publication needs the zone attribute {self.attr!r}")]
        proxy = self.clique[zone_index(self.clique_cuts, value)]
        if proxy == self.broker:
            return self._publish_as_proxy(msg, now_s)
        return [Send(proxy, msg.forwarded())]

    def _publish_as_proxy(self, msg: Message, now_s: float) -> list[Action]:
        value = msg.payload["attrs"].get(self.attr)
        if value is None or self.clique[zone_index(self.clique_cuts, value)] != self.broker:
            return [unhandled(msg, "a publication outside this server's zone")]
        t = zone_index(self.global_cuts, value)
        tagged = Message(msg.type, msg.msg_id, msg.origin, msg.hops, {**msg.payload, "tree": t})
        return self._from_tree(t, self.trees[t].handle(FromClient("", tagged), now_s),
                               publication=True)

    # ---- trees --------------------------------------------------------------------------

    def _on_tree(self, tree: Any, link: str, msg: Message, now_s: float) -> list[Action]:
        core = self.trees.get(tree) if isinstance(tree, int) else None
        if core is None:
            return [unhandled(msg, f"tree {tree!r} is not one this server joined")]
        if msg.type in (MsgType.SUBSCRIBE, MsgType.UNSUBSCRIBE):
            self._counts["sub_messages"] += 1
            payload = {k: v for k, v in msg.payload.items() if k not in ("tree", "proxy")}
            msg = Message(msg.type, msg.msg_id, msg.origin + _SEP + msg.payload["proxy"],
                          msg.hops, payload)
        return self._from_tree(tree, core.handle(Arrived(link, msg), now_s),
                               publication=msg.type is MsgType.PUBLISH)

    def _from_tree(self, tree: int, actions: list[Action], publication: bool = False
                   ) -> list[Action]:
        """Tree ``tree``'s Siena actions on the wire: its subscription messages with the
        client's identity and ``tree`` and ``proxy``, its deliveries to proxy
        subscriptions as one notification per origin server (``publication``: the
        actions are a publication's, counted unwanted when they deliver nothing)."""
        out: list[Action] = []
        notify: dict[str, list[str]] = {}
        pub: Message | None = None
        for a in actions:
            if isinstance(a, Send) and a.msg.type is not MsgType.PUBLISH:
                m = a.msg
                client, _, proxy = m.origin.partition(_SEP)
                self._counts["sub_messages_sent"] += 1
                out.append(Send(a.link, Message(m.type, m.msg_id, client, m.hops,
                                                {**m.payload, "tree": tree, "proxy": proxy})))
            elif isinstance(a, Deliver):
                server, _, client = a.client.partition(_SEP)
                notify.setdefault(server, []).append(client)
                pub = a.msg
            else:
                out.append(a)
        self._counts["events_unwanted"] += publication and pub is None
        if pub is not None:
            publication = {k: v for k, v in pub.payload.items() if k != "tree"}
            plain = Message(MsgType.PUBLISH, pub.msg_id, pub.origin, pub.hops, publication)
            for server, clients in sorted(notify.items()):
                if server == self.broker:
                    out += [Deliver(c, plain) for c in sorted(clients)]
                else:
                    out.append(Send(server, Message(MsgType.NOTIFY, pub.msg_id, pub.origin,
                                                    pub.hops + 1,
                                                    {**publication, "clients": sorted(clients)})))
        return out


# The keys :func:`run_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("clique", "clique_cuts", "global_cuts", "routing_trees")


def run_params(latency_ms: Mapping[str, Mapping[str, float]],
               subscriptions: Mapping[str, Sequence[Filter]],
               calibration: Sequence[Mapping[str, Value]],
               params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-broker derived params for a run (the registry's ``derive_run``); Kyra's layout
    does not depend on the subscriptions (it moves them to where the zones are)."""
    del subscriptions
    return derive_layout(latency_ms, calibration, params).broker_params()
