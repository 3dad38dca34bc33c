"""OctopiA's inter-cluster dynamic routing (IDR): SNR that routes around overloaded iLinks.

Registry name ``idr``. Paper: Section VII-B of ``../shared/seeds/octopia-scot-idr.txt``.
Everything but the forwarding of notifications between clusters is SNR
(:mod:`nodes.cores.octopia`): the same advertisements, CIVs, subscription broadcast,
CIB_SET/CIB_CLEAR and in-cluster reverse-path forwarding.

Link status
    The broker keeps a Link Status Table (:class:`nodes.cores.congestion.LinkStatusTable`,
    params ``theta`` and ``ce_min``) fed by the runtime's statistics windows, and logs an
    ``lst`` record with the overloaded links whenever that set changes.

Target clusters
    At the publisher's host broker they are the clusters whose CIV bit is on (as SNR). A
    broker that receives a CIV-N (message type ``CIV_NOTIFY``: the publication plus the
    ``civ``, the clusters still to be served) *takes over* the listed clusters. A target
    cluster's *target iLink* is this broker's iLink into it; the *target aLinks* are the
    primary neighbours the publication goes to anyway by reverse-path forwarding.

The rule, applied by every broker that has target clusters (the paper's four cases)
    Let O be the target clusters whose iLink is overloaded and F the others.

    - O empty: one plain copy per target iLink, as SNR.
    - (i) F not empty: a plain copy on every free target iLink except one, the free
      target iLink with the shortest queue, which carries the CIV-N with CIV = O.
      Nothing is added to the overloaded iLinks.
    - (ii) F empty, some target aLink free: the copy that goes down the free target aLink
      with the shortest queue anyway becomes the CIV-N with CIV = O (piggybacked: no
      extra message). Nothing goes on any iLink.
    - (iv) F empty, every target aLink overloaded or none: the CIV-N goes on the least
      overloaded target iLink (shortest queue, then lowest CE), into cluster d, with
      CIV = O minus d.
    - (iii) is the recursion: a receiver of a CIV-N serves its own cluster as usual
      (reverse-path forwarding, never back where the CIV-N came from) and applies the
      same rule to the listed clusters with its own iLinks and target aLinks; a hand-over
      can thus pass along several brokers.

    The queue lengths compared are those of the last window; ties go to the lower
    CE, then the link name, so decisions are deterministic.

Exactly once
    Each target cluster is handed to exactly one party: a plain copy on its iLink (the
    receiver serves it, and SNR's in-cluster routing from any broker of a cluster reaches
    every matching subscriber of that cluster, because the cluster's PRTs hold every one
    of its subscriptions with last hops), or the CIV of exactly one CIV-N. A CIV-N over an
    iLink into cluster d never lists d nor the cluster it left (neither is a target
    there), so every iLink hop strictly shrinks the set still to serve; a CIV-N over an
    aLink moves down a subscription tree, away from where it came, and a tree is finite.
    Hence every hand-over ends, and no cluster is served twice. Each receiving broker
    routes in its own cluster once per notification, as in SNR.

Deliveries to local subscribers are plain PUBLISH messages (a client never sees a CIV).
An ``idr`` record names each decision that avoided an overloaded iLink: the case, the
links avoided, the carrier link and the CIV it carried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodes.cores.actions import fan_out
from nodes.cores.congestion import LinkStatusTable
from nodes.cores.interface import Action, Arrived, Event, LinkStats, Record, Send
from nodes.cores.octopia import OctopiaCore
from nodes.messages import Message, MsgType


class IdrCore(OctopiaCore):
    """One SCOT broker running OctopiA with IDR; see the module docstring."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        super().__init__(broker, neighbours, params)
        self.lst = LinkStatusTable.from_params(params)

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """SNR's handling, except for link statistics and notifications (see the module
        docstring)."""
        if isinstance(event, LinkStats):
            return self.lst.observe(event.links)
        if isinstance(event, Arrived) and event.msg.type is MsgType.CIV_NOTIFY:
            civ = {int(c) for c in event.msg.payload["civ"]}
            return self._serve(event.msg, came_from=event.link, targets=civ)
        return super().handle(event, now_s)

    def _publish(self, msg: Message) -> list[Action]:
        return self._serve(msg, came_from=None, targets=self._target_clusters(msg))

    def _route(self, msg: Message, came_from: str | None) -> list[Action]:
        return self._serve(msg, came_from=came_from, targets=set())

    def _serve(self, msg: Message, came_from: str | None, targets: set[int]) -> list[Action]:
        """Route in this broker's cluster, deliver locally, and hand the ``targets``
        clusters on by the IDR rule."""
        targets = targets - {self.cluster}
        if not len(self._index) and not targets:
            return []
        clients, onward = self._in_cluster_targets(msg, came_from)
        civ_on, extra, decision = self._plan(targets, onward)
        plain = _as_publication(msg)
        actions = fan_out(plain, clients, set(), len(self._index))
        copy = plain.forwarded()
        # SNR's order: aLinks by name, then iLinks by cluster.
        for link in [*sorted(onward), *sorted(extra, key=self.secondary.__getitem__)]:
            civ = civ_on.get(link)
            if civ is None:
                actions.append(Send(link, copy))
            else:
                payload = {**plain.payload, "civ": sorted(civ)}
                actions.append(Send(link, Message(MsgType.CIV_NOTIFY, msg.msg_id, msg.origin,
                                                  msg.hops + 1, payload)))
        if decision is not None:
            actions.append(Record("idr", {"origin": msg.origin, "msg_id": msg.msg_id,
                                          **decision}))
        return actions

    def _plan(self, targets: set[int], onward: set[str]
              ) -> tuple[dict[str, set[int]], set[str], dict[str, Any] | None]:
        """For target clusters ``targets`` and target aLinks ``onward``: the CIV each
        carrier link gets, the iLinks that get a copy, and the ``idr`` record fields (None
        when no iLink was avoided)."""
        ilinks = {c: self._ilink[c] for c in sorted(targets)}
        over = {c for c, link in ilinks.items() if self.lst.overloaded(link)}
        free = [link for c, link in ilinks.items() if c not in over]
        if not over:
            return {}, set(free), None
        avoided = sorted(ilinks[c] for c in over)
        carrier = self.lst.least_loaded(free)
        case = "i"
        if carrier is None:
            carrier = self.lst.least_loaded(a for a in onward if not self.lst.overloaded(a))
            case = "ii"
        if carrier is None:  # case iv: the least overloaded target iLink after all
            carrier = min(avoided, key=self.lst.load_key)
            avoided.remove(carrier)
            case = "iv"
            over = over - {self.secondary[carrier]}
            free = [carrier]
        if not avoided:  # a single overloaded target and nowhere else to go: SNR's copy
            return {}, set(free), None
        decision = {"case": case, "avoided": avoided, "carrier": carrier, "civ": sorted(over)}
        return {carrier: over}, set(free), decision


def _as_publication(msg: Message) -> Message:
    """The PUBLISH inside a CIV-N (its payload without the CIV); a PUBLISH unchanged."""
    if msg.type is MsgType.PUBLISH:
        return msg
    payload = {k: v for k, v in msg.payload.items() if k != "civ"}
    return Message(MsgType.PUBLISH, msg.msg_id, msg.origin, msg.hops, payload)
