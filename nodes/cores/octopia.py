"""OctopiA on a clustered SCOT: CIV advertisement forwarding, subscription broadcast, SNR.

Registry name ``snr``. Paper: Shafique, "Adaptive Content-based Routing using
Subscription Subgrouping in Structured Overlays" (``../shared/seeds/octopia-scot-idr.txt``):
clusters and the cluster index vector (Section IV), advertisement forwarding (V),
subscription broadcast (VI) and static notification routing, SNR (VII-A). In short:

- **SCOT**: broker B(x, c) has aLinks (its tree neighbours in cluster c) and iLinks
  (B(x, d) for every other cluster d), derived by :func:`overlay_params`, which refuses an
  overlay that is not a SCOT.
- **Advertisements** go from the host H to its m-1 secondary neighbours only. B(x, c)
  counts the PRT subscriptions overlapping each one; its SCB is on while the count is
  positive, and H's CIV bit c follows it (ADV_REPLY, CIB_SET, CIB_CLEAR).
- **Subscriptions** are flooded over the tree of the subscriber's host cluster (aLinks
  only); CIB_SET also names the advertisements whose bit it turns on (a stated deviation).
- **Notifications** (SNR): reverse path inside the cluster, and one copy over the iLink to
  each cluster whose CIV bit is on; every broker that matches reports a ``match`` record.
- UNSUBSCRIBE and UNADVERTISE (ours) remove every piece of state over the FIFO links that
  created it. Identities are ``(origin, msg_id)``, as in the oracle; overlap is
  :func:`nodes.model.overlaps` without a schema.

SNR is static: statistics windows, timers and lost links need no reaction (IDR, which
reacts to congested queues, is a separate core).

Our readings and choices in full: docs/design/octopia-cores.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import fan_out, unhandled
from nodes.cores.interface import Action, Arrived, Event, FromClient, Send
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, filter_from_json, matches, overlaps

if TYPE_CHECKING:
    import networkx as nx

AdvId = tuple[str, int]
SubId = tuple[str, int]


@dataclass(slots=True)
class _HostedAdv:
    """An advertisement of a local publisher: this broker is its host broker H."""

    filter: Filter
    civ: set[int]  # clusters whose bit is on, besides the context bit (H's own cluster)


@dataclass(slots=True)
class _ForwardedAdv:
    """An advertisement of a publisher hosted by the secondary neighbour ``host``."""

    filter: Filter
    host: str
    overlapping: int  # PRT subscriptions that overlap it; the SCB is on while > 0


@dataclass(slots=True)
class _Sub:
    filter: Filter
    last_hop: str  # a primary neighbour, or the local subscriber


def _adv_ids(payload: Mapping[str, Any]) -> list[AdvId]:
    return [(str(pub), int(n)) for pub, n in payload["advs"]]


class OctopiaCore:
    """One SCOT broker running OctopiA's static routing; see the module docstring."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        if not {"cluster", "primary", "secondary"} <= set(params):
            raise ValueError(
                f"snr core at {broker}: params need 'cluster', 'primary' and 'secondary' "
                "(derived from a SCOT overlay by nodes.cores.overlay_params('snr', overlay))"
            )
        self.cluster = int(params["cluster"])
        self.primary = tuple(sorted(params["primary"]))
        self.secondary = {str(nb): int(c) for nb, c in sorted(params["secondary"].items())}
        if set(self.primary) & set(self.secondary) or (
            set(self.primary) | set(self.secondary) != set(self.neighbours)
        ):
            raise ValueError(
                f"snr core at {broker}: primary {list(self.primary)} and secondary "
                f"{sorted(self.secondary)} must split the neighbours {list(self.neighbours)}"
            )
        clusters = sorted(self.secondary.values())
        if len(set(clusters)) != len(clusters) or self.cluster in clusters:
            raise ValueError(
                f"snr core at {broker} (cluster {self.cluster}): secondary neighbours must "
                f"lie in distinct other clusters, got {self.secondary}"
            )
        self._primary_set = frozenset(self.primary)
        self._ilink = {c: nb for nb, c in self.secondary.items()}
        self._hosted: dict[str, dict[int, _HostedAdv]] = {}  # publisher -> adv msg_id -> adv
        self._forwarded: dict[AdvId, _ForwardedAdv] = {}
        self._prt: dict[SubId, _Sub] = {}
        self._index = SubscriptionIndex()

    def table_sizes(self) -> dict[str, int]:
        """``srt``: advertisements stored (hosted here, or forwarded by a secondary
        neighbour); ``prt``: (subscription, last hop) entries, one per subscription of this
        broker's cluster (a cluster is a tree). CIV bits set by CIB_SET are not entries."""
        hosted = sum(len(advs) for advs in self._hosted.values())
        return {"srt": hosted + len(self._forwarded), "prt": len(self._prt)}

    def state(self) -> dict[str, Any]:
        """The routing state as plain data, for tests and debugging: ``hosted``: adv id ->
        its CIV as the sorted clusters whose bit is on (the context bit included);
        ``forwarded``: adv id -> (host broker, overlapping subscriptions); ``prt``: sub id
        -> last hop."""
        hosted = {
            (pub, n): sorted({self.cluster, *adv.civ})
            for pub, advs in sorted(self._hosted.items())
            for n, adv in sorted(advs.items())
        }
        forwarded = {a: (adv.host, adv.overlapping) for a, adv in sorted(self._forwarded.items())}
        prt = {s: sub.last_hop for s, sub in sorted(self._prt.items())}
        return {"hosted": hosted, "forwarded": forwarded, "prt": prt}

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see docs/design/octopia-cores.md for the rules."""
        if isinstance(event, FromClient):
            msg, link, over = event.msg, event.client, "client"
        elif isinstance(event, Arrived):
            msg, link = event.msg, event.link
            over = "iLink" if link in self.secondary else "aLink"
        else:
            return []
        t = msg.type
        if t is MsgType.PUBLISH:
            return self._publish(msg) if over == "client" else self._route(msg, came_from=link)
        if over != "iLink":  # subscriptions come from clients and travel over aLinks only
            if t is MsgType.SUBSCRIBE:
                return self._subscribe(msg, last_hop=link)
            if t is MsgType.UNSUBSCRIBE:
                return self._unsubscribe(msg, came_from=link)
        if over == "client":
            if t is MsgType.ADVERTISE:
                return self._advertise(msg)
            if t is MsgType.UNADVERTISE:
                return self._unadvertise(msg)
        if over == "iLink":  # advertisements and CIV bits travel over iLinks only
            if t is MsgType.ADVERTISE:
                return self._store_forwarded(link, msg)
            if t is MsgType.UNADVERTISE:
                self._forwarded.pop((msg.origin, int(msg.payload["adv_id"])), None)
                return []
            if t in (MsgType.ADV_REPLY, MsgType.CIB_SET, MsgType.CIB_CLEAR):
                advs = [msg.key] if t is MsgType.ADV_REPLY else _adv_ids(msg.payload)
                self._set_bits(advs, self.secondary[link], on=t is not MsgType.CIB_CLEAR)
                return []
        return [unhandled(msg, f"not expected from a {over}")]

    # ---- advertisements ---------------------------------------------------------------

    def _advertise(self, msg: Message) -> list[Action]:
        advs = self._hosted.setdefault(msg.origin, {})
        if msg.msg_id in advs:
            return [unhandled(msg, "advertisement already stored")]
        advs[msg.msg_id] = _HostedAdv(filter_from_json(msg.payload["filter"]), set())
        copy = msg.forwarded()
        return [Send(nb, copy) for nb in self.secondary]

    def _unadvertise(self, msg: Message) -> list[Action]:
        advs = self._hosted.get(msg.origin, {})
        if advs.pop(int(msg.payload["adv_id"]), None) is None:
            return []  # un-advertising twice is harmless
        if not advs:
            del self._hosted[msg.origin]
        copy = msg.forwarded()
        return [Send(nb, copy) for nb in self.secondary]

    def _store_forwarded(self, host: str, msg: Message) -> list[Action]:
        adv_id = (msg.origin, msg.msg_id)
        if adv_id in self._forwarded:
            return [unhandled(msg, "advertisement already stored")]
        f = filter_from_json(msg.payload["filter"])
        n = sum(overlaps(f, sub.filter) for sub in self._prt.values())
        self._forwarded[adv_id] = _ForwardedAdv(f, host, n)
        if not n:
            return []
        return [Send(host, Message(MsgType.ADV_REPLY, msg.msg_id, msg.origin, msg.hops + 1))]

    def _set_bits(self, advs: list[AdvId], cluster: int, *, on: bool) -> None:
        """Turn ``cluster``'s bit on or off in the CIVs of hosted advertisements ``advs``;
        ids no longer hosted (un-advertised meanwhile) are skipped."""
        for pub, n in advs:
            adv = self._hosted.get(pub, {}).get(n)
            if adv is None:
                continue
            if on:
                adv.civ.add(cluster)
            else:
                adv.civ.discard(cluster)

    # ---- subscriptions ----------------------------------------------------------------

    def _subscribe(self, msg: Message, last_hop: str) -> list[Action]:
        sub_id = (msg.origin, msg.msg_id)
        if sub_id in self._prt:
            return [unhandled(msg, "subscription already stored")]
        f = filter_from_json(msg.payload["filter"])
        self._prt[sub_id] = _Sub(f, last_hop)
        self._index.add(sub_id, f)
        actions = self._flood_in_cluster(msg, last_hop)
        turned_on = self._count_overlaps(f, +1)
        actions.extend(
            Send(host, Message(MsgType.CIB_SET, msg.msg_id, msg.origin, msg.hops + 1,
                               {"filter": msg.payload["filter"], "advs": advs}))
            for host, advs in turned_on
        )
        return actions

    def _unsubscribe(self, msg: Message, came_from: str) -> list[Action]:
        sub_id = (msg.origin, int(msg.payload["sub_id"]))
        sub = self._prt.pop(sub_id, None)
        if sub is None:
            return []  # un-subscribing twice is harmless
        self._index.remove(sub_id)
        actions = self._flood_in_cluster(msg, came_from)
        turned_off = self._count_overlaps(sub.filter, -1)
        actions.extend(
            Send(host, Message(MsgType.CIB_CLEAR, msg.msg_id, msg.origin, msg.hops + 1,
                               {"advs": advs}))
            for host, advs in turned_off
        )
        return actions

    def _flood_in_cluster(self, msg: Message, came_from: str) -> list[Action]:
        """A copy to every primary neighbour but ``came_from`` (a neighbour or a client)."""
        onward = [nb for nb in self.primary if nb != came_from]
        if not onward:
            return []
        copy = msg.forwarded()
        return [Send(nb, copy) for nb in onward]

    def _count_overlaps(self, f: Filter, step: int) -> list[tuple[str, list[list[Any]]]]:
        """Add ``step`` (+1 or -1) to the count of every forwarded advertisement ``f``
        overlaps; returns, per host broker (sorted), the ids whose SCB changed (count
        0 -> 1 or 1 -> 0), as JSON for a CIB_SET or CIB_CLEAR payload."""
        changed: dict[str, list[list[Any]]] = {}
        threshold = 1 if step > 0 else 0
        for adv_id, adv in sorted(self._forwarded.items()):
            if overlaps(adv.filter, f):
                adv.overlapping += step
                if adv.overlapping == threshold:
                    changed.setdefault(adv.host, []).append(list(adv_id))
        return sorted(changed.items())

    # ---- notifications ----------------------------------------------------------------

    def _publish(self, msg: Message) -> list[Action]:
        actions = self._route(msg, came_from=None)
        clusters = self._target_clusters(msg)
        if clusters:
            copy = msg.forwarded()
            actions.extend(Send(self._ilink[c], copy) for c in sorted(clusters))
        return actions

    def _route(self, msg: Message, came_from: str | None) -> list[Action]:
        """Reverse-path forwarding inside this broker's cluster, plus local delivery."""
        if not len(self._index):
            return []
        clients, onward = self._in_cluster_targets(msg, came_from)
        return fan_out(msg, clients, onward, len(self._index))

    def _in_cluster_targets(self, msg: Message, came_from: str | None
                            ) -> tuple[set[str], set[str]]:
        """(local subscribers, primary neighbours) the publication in ``msg`` goes to by
        reverse-path forwarding, never back to ``came_from``."""
        clients: set[str] = set()
        onward: set[str] = set()
        for sub_id in self._index.match(msg.payload["attrs"]):
            hop = self._prt[sub_id].last_hop
            if hop == came_from:
                continue  # that subscriber lies back where the publication came from
            (onward if hop in self._primary_set else clients).add(hop)
        return clients, onward

    def _target_clusters(self, msg: Message) -> set[int]:
        """Clusters whose bit is on in the CIVs of the publisher's advertisements that
        the publication matches (the host broker's target clusters)."""
        attrs = msg.payload["attrs"]
        clusters: set[int] = set()
        for adv in self._hosted.get(msg.origin, {}).values():
            if matches(adv.filter, attrs):
                clusters |= adv.civ
        return clusters



# ---- overlay-derived params ---------------------------------------------------------


# The keys :func:`overlay_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("cluster", "primary", "secondary")


def overlay_params(overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Per broker B(x, c): ``cluster`` c, ``primary`` (aLink neighbours, sorted) and
    ``secondary`` ({iLink neighbour: its cluster}), read from the SCOT overlay's node
    attributes ``cluster``/``region`` and edge attribute ``type`` (see
    :func:`topologies.scot.scot_overlay`). ValueError unless every edge is an aLink inside
    a cluster or an iLink inside a region, every region joins all clusters, and every
    cluster is a tree."""
    place: dict[str, tuple[int, Any]] = {}
    for b in sorted(overlay.nodes):
        cluster, region = overlay.nodes[b].get("cluster"), overlay.nodes[b].get("region")
        if isinstance(cluster, bool) or not isinstance(cluster, int) or region is None:
            raise ValueError(
                f"snr needs a SCOT overlay (nodes with cluster and region, edges typed "
                f"aLink/iLink; see topologies.scot): broker {b!r} has cluster={cluster!r}, "
                f"region={region!r}"
            )
        place[b] = (cluster, region)
    clusters = sorted({c for c, _ in place.values()})
    params: dict[str, dict[str, Any]] = {}
    for b, (c, x) in sorted(place.items()):
        primary: list[str] = []
        secondary: dict[str, int] = {}
        for nb in sorted(overlay.neighbors(b)):
            kind = overlay.edges[b, nb].get("type")
            nc, nx_ = place[nb]
            if kind == "aLink" and nc == c and nx_ != x:
                primary.append(nb)
            elif kind == "iLink" and nx_ == x and nc != c:
                secondary[nb] = nc
            else:
                raise ValueError(
                    f"snr: edge {b}-{nb} (type {kind!r}) is neither an aLink inside cluster "
                    f"{c} nor an iLink inside region {x!r}"
                )
        if sorted(secondary.values()) != [d for d in clusters if d != c]:
            raise ValueError(
                f"snr: region {x!r} is not complete: {b} (cluster {c}) has iLinks to "
                f"clusters {sorted(secondary.values())} of {clusters}"
            )
        params[b] = {"cluster": c, "primary": primary, "secondary": secondary}
    for c in clusters:
        _check_tree(c, [b for b, (bc, _) in sorted(place.items()) if bc == c], params)
    return params


def _check_tree(cluster: int, members: list[str], params: Mapping[str, Mapping[str, Any]]
                ) -> None:
    """ValueError unless the aLinks of ``cluster`` form a tree over ``members``: a cycle
    would send a subscription round it forever."""
    n_links = sum(len(params[b]["primary"]) for b in members) // 2
    seen = {members[0]}
    todo = deque(seen)
    while todo:
        for nb in params[todo.popleft()]["primary"]:
            if nb not in seen:
                seen.add(nb)
                todo.append(nb)
    if n_links != len(members) - 1 or len(seen) != len(members):
        raise ValueError(
            f"snr: cluster {cluster} is not a tree ({len(members)} brokers, {n_links} "
            f"aLinks, {len(seen)} reachable from {members[0]})"
        )
