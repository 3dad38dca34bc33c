"""Multicast-based event routing: the Kyra paper's second baseline (registry ``multicast``).

Kyra §II-B, "the approach in [25]" (very likely Riabov et al., ICDCS 2002): the event
space is partitioned into a limited number of multicast groups, each with a multicast tree
over the servers that want its events. In short:

- The grouping and the trees are *derived params* (:func:`derive_params`), computed once
  by the host from every subscription of the workload, the servers' latencies and a
  calibration sample of events: the baseline's best case, never learnt at run time.
- **Cells**: ``cells_per_attr`` balanced zones per attribute of ``cell_attrs``; an event
  must carry every cell attribute (else ``unhandled``). **Groups**: Forgy's K-means
  (:func:`nodes.cores.multicast_groups.forgy_kmeans`, ``kmeans_seed``) into ``groups``
  groups, or a grouping given. **Trees**: a latency MST over each group's members; a
  server outside a group publishes into it through its *entry*.
- A member forwards an event on its tree and delivers it to its matching local clients;
  subscriptions stay at their server.

Derived params per broker: ``cell_axes`` (the cell attributes) and ``cell_cuts`` (same
everywhere),
``group_of`` (cell key ``"i,j,..."`` -> group, only cells some server wants),
``trees`` (group -> tree neighbours, for the groups it is a member of) and ``entry``
(group -> entry member, for the others). Counters (:meth:`MulticastCore.counters`):
``routing_entries`` (cells in the group table, the same at every server: the paper's
"routing table is the same for every server"), ``groups_joined``,
``local_subscriptions``, ``sub_messages`` (SUBSCRIBE and UNSUBSCRIBE from clients),
``events_matched`` (events received and matched here), ``events_unwanted`` (of those,
events no local subscription matched: the paper's extraneous traffic) and ``match_ops``
(local subscriptions tested).

Our readings and choices in full: docs/design/kyra-cores.md.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.cores.actions import fan_out, unhandled
from nodes.cores.interface import Action, Arrived, Event, FromClient, Send
from nodes.cores.multicast_groups import forgy_kmeans, interest_vectors, multicast_groups
from nodes.cores.overlay import latency_mst, tree_neighbours
from nodes.cores.params import Param, ParamValueError
from nodes.cores.zones import balanced_cuts, require_attrs, zone_index
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, Interval, Value, filter_bounds, filter_from_json

PARAMS = (
    Param("groups", "int", 8, "", "multicast groups (Forgy K-means clusters of cells); like "
          "Kyra's default T, at most the clique size of 8", minimum=1),
    Param("cell_attrs", "str", "Symbol", "", "comma-separated attributes whose zones make "
          "the cells"),
    Param("cells_per_attr", "int", 64, "", "zones per cell attribute, balanced on the "
          "calibration sample", minimum=1),
    Param("kmeans_seed", "int", 0, "", "seed of Forgy's draw of initial centroids"),
)

Cell = tuple[int, ...]


def cell_key(cell: Cell) -> str:
    """A cell as a JSON object key: its zone indices joined by commas."""
    return ",".join(map(str, cell))


def cell_of(attrs: Mapping[str, Value], cell_attrs: Sequence[str],
            cuts: Sequence[Sequence[Value]]) -> Cell | None:
    """The cell of an event's attributes; None when it lacks a cell attribute."""
    if any(a not in attrs for a in cell_attrs):
        return None
    return tuple(zone_index(c, attrs[a]) for a, c in zip(cell_attrs, cuts, strict=True))


def _zones_meeting(iv: Interval | None, cuts: Sequence[Value]) -> list[int]:
    """The non-empty zones of ``cuts`` an attribute interval overlaps (``None``: no
    constraint).

    Between the zones of its two ends, a zone lies inside the interval, and is empty
    only when its two cuts are equal; the end zones may miss it (an interval that ends
    on a cut, or an empty zone below the least string), so they are tested."""
    n = len(cuts) + 1
    iv = Interval() if iv is None else iv
    first = 0 if iv.lo is None else zone_index(cuts, iv.lo)
    last = n - 1 if iv.hi is None else zone_index(cuts, iv.hi)

    def meets(i: int) -> bool:
        zone = Interval(cuts[i - 1] if i > 0 else None, i > 0,
                        cuts[i] if i < len(cuts) else None, False)
        return iv.intersect(zone).witness() is not None

    while first <= last and not meets(first):
        first += 1
    while last >= first and not meets(last):
        last -= 1
    return [i for i in range(first, last + 1) if i in (first, last) or cuts[i - 1] != cuts[i]]


def wanted_cells(f: Filter, cell_attrs: Sequence[str],
                 cuts: Sequence[Sequence[Value]]) -> list[Cell]:
    """The cells filter ``f`` overlaps (none when no event matches it)."""
    bounds = filter_bounds(f)
    if any(iv.witness() is None for iv in bounds.values()):
        return []
    return list(itertools.product(*(_zones_meeting(bounds.get(a), c)
                                    for a, c in zip(cell_attrs, cuts, strict=True))))


@dataclass(frozen=True)
class MulticastLayout:
    """The derived figures of a multicast run: cells, groups and their trees.

    ``groups[g]`` is ``(cells, members)``; ``trees[g]`` the tree edges over the members;
    ``entry[server][g]`` the member a non-member ``server`` sends group ``g``'s events
    to. :meth:`broker_params` gives each broker's derived params, :meth:`edges` every
    pair of servers that exchange messages (the fixed overlay a run needs)."""

    cell_attrs: tuple[str, ...]
    cuts: tuple[tuple[Value, ...], ...]
    groups: tuple[tuple[tuple[Cell, ...], tuple[str, ...]], ...]
    trees: tuple[tuple[tuple[str, str], ...], ...]
    entry: Mapping[str, Mapping[int, str]]

    def broker_params(self, servers: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per broker: ``cell_axes``, ``cell_cuts``, ``group_of``, ``trees``, ``entry``."""
        group_of = {cell_key(c): g for g, (cells, members) in enumerate(self.groups)
                    if members for c in cells}
        nbs = [tree_neighbours(edges) for edges in self.trees]
        out = {}
        for s in sorted(servers):
            trees = {str(g): list(nbs[g].get(s, ())) for g, (_, members)
                     in enumerate(self.groups) if s in members}
            entry = {str(g): m for g, m in self.entry.get(s, {}).items()}
            out[s] = {"cell_axes": list(self.cell_attrs),
                      "cell_cuts": [list(c) for c in self.cuts], "group_of": group_of,
                      "trees": trees, "entry": entry}
        return out

    def edges(self) -> set[tuple[str, str]]:
        """Tree edges and every server-to-entry pair, as sorted pairs."""
        pairs = {e for edges in self.trees for e in edges}
        pairs |= {(min(s, m), max(s, m)) for s, by_group in self.entry.items()
                  for m in by_group.values()}
        return pairs


def derive_layout(
    latency_ms: Mapping[str, Mapping[str, float]],
    subscriptions: Mapping[str, Sequence[Filter]],
    calibration: Sequence[Mapping[str, Value]],
    params: Mapping[str, Any],
    grouping: Sequence[Sequence[Cell]] | None = None,
) -> MulticastLayout:
    """The cells, groups, trees and entries (docs/design/kyra-cores.md) for the servers of
    ``latency_ms`` (ms, all pairs), their ``subscriptions`` (every filter each server's
    clients will subscribe to), a ``calibration`` sample of events' attributes and the
    declared ``params`` (:data:`PARAMS`, resolved). ``grouping`` (lists of cells) replaces
    K-means, for the paper's hand-made Fig. 3. ParamValueError for an event of the
    sample without a cell attribute, ValueError for an empty sample."""
    servers = sorted(latency_ms)
    cell_attrs = tuple(a.strip() for a in str(params["cell_attrs"]).split(",") if a.strip())
    if not cell_attrs:
        raise ParamValueError("cell_attrs", params["cell_attrs"],
                              "comma-separated attribute names")
    require_attrs("cell_attrs", params["cell_attrs"], cell_attrs, calibration)
    cuts = tuple(tuple(balanced_cuts([ev[a] for ev in calibration], params["cells_per_attr"]))
                 for a in cell_attrs)
    cells = list(itertools.product(*(range(len(c) + 1) for c in cuts)))
    wants = {s: {c for f in subscriptions.get(s, ()) for c in wanted_cells(f, cell_attrs, cuts)}
             for s in servers}
    if grouping is None:
        weight = Counter(cell_of(ev, cell_attrs, cuts) for ev in calibration)
        x = interest_vectors(cells, servers, wants)
        distinct = len({tuple(row) for row in x.tolist()})
        labels = forgy_kmeans(x, min(params["groups"], distinct), params["kmeans_seed"],
                              weights=[weight[c] for c in cells])
    else:
        label_of = {c: g for g, group in enumerate(grouping) for c in group}
        labels = [label_of[c] for c in cells]
    groups = tuple(multicast_groups(labels, cells, wants))
    trees = tuple(tuple(latency_mst(members, latency_ms)) for _, members in groups)
    entry: dict[str, dict[int, str]] = {}
    for g, (_, members) in enumerate(groups):
        for s in servers:
            if members and s not in members:
                entry.setdefault(s, {})[g] = min(members, key=lambda m: (latency_ms[s][m], m))
    return MulticastLayout(cell_attrs, cuts, groups, trees, entry)


class MulticastCore:
    """One server of multicast-based routing; see the module docstring."""

    ignores_link_stats = True  # static groups: statistics windows change nothing

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        missing = [k for k in ("cell_axes", "cell_cuts", "group_of", "trees", "entry")
                   if k not in params]
        if missing:
            raise ValueError(f"multicast core at {broker}: params need {missing} (derived "
                             "before the run: nodes.cores.multicast.derive_layout)")
        self.cell_attrs = tuple(params["cell_axes"])
        self.cuts = tuple(tuple(c) for c in params["cell_cuts"])
        self.group_of: Mapping[str, int] = params["group_of"]
        self.trees = {int(g): tuple(nbs) for g, nbs in params["trees"].items()}
        self.entry = {int(g): m for g, m in params["entry"].items()}
        self._index = SubscriptionIndex()
        self._clients: dict[tuple[str, int], str] = {}
        self._counts: Counter[str] = Counter()

    def table_sizes(self) -> dict[str, int]:
        """No SRT; the PRT holds the local subscriptions."""
        return {"srt": 0, "prt": len(self._clients)}

    def counters(self) -> dict[str, int]:
        """Plain counts (see the module docstring)."""
        return {"routing_entries": len(self.group_of), "groups_joined": len(self.trees),
                "local_subscriptions": len(self._clients),
                **{k: self._counts[k] for k in ("sub_messages", "events_matched",
                                                "events_unwanted", "match_ops")}}

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see docs/design/kyra-cores.md for the rules."""
        if isinstance(event, FromClient):
            msg = event.msg
            if msg.type is MsgType.PUBLISH:
                return self._publish(msg)
            if msg.type is MsgType.SUBSCRIBE:
                self._counts["sub_messages"] += 1
                sub_id = (msg.origin, msg.msg_id)
                self._clients[sub_id] = event.client
                self._index.add(sub_id, filter_from_json(msg.payload["filter"]))
                return []
            if msg.type is MsgType.UNSUBSCRIBE:
                self._counts["sub_messages"] += 1
                sub_id = (msg.origin, int(msg.payload["sub_id"]))
                if self._clients.pop(sub_id, None) is not None:
                    self._index.remove(sub_id)
                return []  # un-subscribing twice is harmless
            if msg.type in (MsgType.ADVERTISE, MsgType.UNADVERTISE):
                return []
            return [unhandled(msg)]
        if isinstance(event, Arrived):
            if event.msg.type is not MsgType.PUBLISH:
                return [unhandled(event.msg)]
            return self._multicast(event.msg, event.link)
        return []  # static groups: timers, statistics and lost links change nothing

    def _publish(self, msg: Message) -> list[Action]:
        cell = cell_of(msg.payload["attrs"], self.cell_attrs, self.cuts)
        if cell is None:
            return [unhandled(msg, f"a publication needs every cell attribute {self.cell_attrs}")]
        group = self.group_of.get(cell_key(cell))
        if group is None:
            return []  # nobody wants this cell
        payload = {**msg.payload, "group": group}
        if group in self.trees:
            return self._multicast(Message(msg.type, msg.msg_id, msg.origin, msg.hops,
                                           payload), None)
        return [Send(self.entry[group], msg.forwarded(payload))]

    def _multicast(self, msg: Message, came_from: str | None) -> list[Action]:
        group = msg.payload.get("group")
        nbs = self.trees.get(group) if isinstance(group, int) else None
        if nbs is None:
            return [unhandled(msg, f"group {group!r} is not one of this server's")]
        if came_from not in nbs:
            came_from = None  # from the publisher's server: this is the group's entry
        publication = {k: v for k, v in msg.payload.items() if k != "group"}
        clients = {self._clients[s] for s in self._index.match(publication["attrs"])}
        self._counts["events_matched"] += 1
        self._counts["events_unwanted"] += not clients
        self._counts["match_ops"] += len(self._clients)
        actions = fan_out(Message(msg.type, msg.msg_id, msg.origin, msg.hops, publication),
                          clients, set(), len(self._clients))
        copy = msg.forwarded()
        actions += [Send(nb, copy) for nb in nbs if nb != came_from]
        return actions


# The keys :func:`run_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("cell_axes", "cell_cuts", "group_of", "trees", "entry")


def run_params(latency_ms: Mapping[str, Mapping[str, float]],
               subscriptions: Mapping[str, Sequence[Filter]],
               calibration: Sequence[Mapping[str, Value]],
               params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-broker derived params for a run (the registry's ``derive_run``): the layout
    of :func:`derive_layout` by K-means."""
    return derive_layout(latency_ms, subscriptions, calibration, params).broker_params(
        sorted(latency_ms))
