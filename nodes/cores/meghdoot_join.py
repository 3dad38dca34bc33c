"""The join protocol of a Meghdoot peer (§4.2, ``join: meghdoot`` or ``can``), an object
the peer owns; the rules, and why the tables need more than the paper's joins, are in
:mod:`nodes.cores.meghdoot`'s docstring.

At the peer a probe reaches: the hill climb on to its heaviest neighbour, or the choice
to replicate its zone (``replicate_rule``) or split it (where: ``split_rule``), and the
grant. At the newcomer:
the grant taken. At the co-replicas of a split zone: the split notice. At every peer of
a zone that split or replicated, for ``relay_s``: the zone changes its neighbours tell
it, passed on to the newcomer.
"""

from __future__ import annotations

import hashlib
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores import can
from nodes.cores.can import Point, Zone
from nodes.cores.interface import Action, Record, Send
from nodes.cores.meghdoot_common import Mirror, Sub
from nodes.cores.meghdoot_loads import Recent
from nodes.messages import Message, MsgType

if TYPE_CHECKING:
    from nodes.cores.meghdoot import MeghdootCore


class JoinProtocol:
    """A peer's part in joins: as the peer a probe reaches, the newcomer, or a
    co-replica of a zone that split."""

    def __init__(self, core: MeghdootCore, params: Mapping[str, Any]) -> None:
        self.core = core
        self.mode = params["join"]
        self.replicate_rule = params["replicate_rule"]
        self.split_rule = params["split_rule"]
        self.kappa = float(params["kappa"])
        self.max_climb = int(params["max_climb"])
        self.relay_s = float(params["relay_s"])
        # (until_s, newcomer) of this zone's recent splits and replications, oldest first.
        self._relays: deque[tuple[float, str]] = deque()
        self.relayed = 0  # zone changes passed on to a newcomer (relay)
        self.by_mode: Counter[str] = Counter()  # joins this peer granted: split, replicate

    def random_point(self) -> Point:
        """The plain CAN join's random point, drawn from a hash of this peer's name."""
        core = self.core
        digest = hashlib.sha256(core.broker.encode()).digest()
        raw = (digest * ((core.space.dims * 4) // len(digest) + 1))[: core.space.dims * 4]
        return tuple(int.from_bytes(raw[4 * j: 4 * j + 4], "big") / 2**32
                     for j in range(core.space.dims))

    def probe(self, msg: Message, now_s: float, sender: str) -> list[Action]:
        core = self.core
        if "point" in msg.payload:  # plain CAN: route to the point
            return core._route(msg, tuple(msg.payload["point"]), now_s, sender)
        climb = int(msg.payload["climb"])
        own = core.loads.load
        # Loads are as last reported, so two peers may each think the other heavier: a
        # probe never returns to a peer it has visited.
        visited = [*msg.payload.get("visited", ()), core.broker]
        known = {p: x.load for p, x in core.loads.nbr_load.items()
                 if p in core.nbrs and p not in visited and p != msg.payload["newcomer"]}
        if known and climb < self.max_climb:
            peer, load = min(known.items(), key=lambda px: (-px[1], px[0]))  # the heaviest
            if load > own:
                return [Send(peer, msg.forwarded({**msg.payload, "climb": climb + 1,
                                                  "visited": visited}))]
        return self.accept(msg, now_s)

    def accept(self, msg: Message, now_s: float) -> list[Action]:
        """This peer takes the newcomer in: replicate its zone or split it."""
        core = self.core
        assert core.zone is not None
        newcomer = str(msg.payload["newcomer"])
        if self.mode == "meghdoot" and self.loaded_by_events():
            return self._replicate(newcomer, msg.payload.get("climb", 0), now_s)
        cut = can.halving_cut(core.zone)
        if self.mode == "meghdoot":
            cut = can.split_cut(self.split_rule, core.zone,
                                [s.point for s in core.subs.values()])
        return self.split(newcomer, cut, msg.payload.get("climb", 0), now_s)

    def loaded_by_events(self) -> bool:
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
        core = self.core
        spread, subs = core.loads.spread.total, len(core.subs)
        if spread == 0:
            return False
        if self.replicate_rule == "absolute":
            return spread >= self.kappa * subs
        mixes = [(spread, subs), *((r.spread, r.subs) for p, r in core.loads.nbr_load.items()
                                   if p in core.nbrs)]
        mean_spread = sum(m[0] for m in mixes) / len(mixes)
        mean_subs = sum(m[1] for m in mixes) / len(mixes)
        subs_ratio = subs / mean_subs if mean_subs else 0.0
        if self.replicate_rule == "standout":
            return spread / mean_spread >= self.kappa * max(1.0, subs_ratio)
        return subs == 0 or spread / mean_spread >= self.kappa * subs_ratio

    def _replicate(self, newcomer: str, climb: int, now_s: float) -> list[Action]:
        core = self.core
        assert core.zone is not None
        zone = core.zone
        self.by_mode["replicate"] += 1
        group = sorted(core.group | {newcomer})
        core.loads.share_events(len(core.group) / len(group))
        loads = {core.broker: core.loads.report(), newcomer: core.loads.report()}
        # Tables travel with their zones as tuples, which JSON writes as arrays: a replica
        # grant of a peer with thousands of neighbours converted each zone to lists, a
        # fifth of a 10,000-peer run's time.
        grant = core._msg(MsgType.ZONE, {
            "grant": "replica", "zone": can.zone_to_json(zone), "group": group,
            "nbrs": dict(core.nbrs),
            "subs": [s.to_json(k) for k, s in core.subs.items()], "climb": climb,
            "recent": [core.loads.events.counts, core.loads.spread.counts],
            "mirrors": core.repair.mirrors_json()})
        core.group.add(newcomer)
        self._relay_to(newcomer, now_s)
        update = core._msg(MsgType.ZONE, {"update": {newcomer: can.zone_to_json(zone)},
                                          "loads": loads})
        others = sorted((set(core.nbrs) | core.group) - {core.broker, newcomer})
        return [Record("can_grant", {"newcomer": newcomer, "mode": "replica", "climb": climb}),
                Send(newcomer, grant), *(Send(p, update) for p in others)]

    def split(self, newcomer: str, cut: tuple[int, float], climb: int, now_s: float
               ) -> list[Action]:
        core = self.core
        assert core.zone is not None
        self.by_mode["split"] += 1
        dim, at = cut
        old = core.zone
        lower, upper = can.split(old, dim, at)
        old_nbrs = dict(core.nbrs)
        group = sorted(core.group)
        given, mirrors = self._apply_split(lower, newcomer, upper, now_s)
        core.loads.share_events(0.5)
        recent = [core.loads.events.counts, core.loads.spread.counts]
        loads = {core.broker: core.loads.report(), newcomer: core.loads.report(subs=len(given))}
        new_nbrs = {g: lower for g in group}
        new_nbrs.update({p: z for p, z in old_nbrs.items() if can.abutment(upper, z)})
        grant = core._msg(MsgType.ZONE, {
            "grant": "split", "zone": can.zone_to_json(upper), "group": [newcomer],
            "nbrs": new_nbrs,
            "subs": [s.to_json(k) for k, s in given], "climb": climb, "recent": recent,
            "mirrors": [m.to_json(k) for k, m in mirrors]})
        out: list[Action] = [
            Record("can_grant", {"newcomer": newcomer, "mode": "split", "climb": climb,
                                 "dim": dim, "given": len(given), "kept": len(core.subs)}),
            Send(newcomer, grant)]
        # The co-replicas tell the neighbours their tables have and this one's lacks,
        # and take the ones they lack (split_in).
        split_msg = core._msg(MsgType.ZONE, {"split": [dim, at], "newcomer": newcomer,
                                             "loads": loads, "told": old_nbrs})
        out += [Send(g, split_msg) for g in group if g != core.broker]
        update = self._split_update(group, lower, newcomer, upper, loads)
        out += [Send(p, update) for p in sorted(old_nbrs)]
        if core.mirroring:  # after the grant: a copy may travel through the newcomer
            for k, sub in core.subs.items():
                out += core.repair.rehome(k, sub, old, lower, old, now_s)
            for k, sub in given:
                out += core.repair.rehome(k, sub, old, upper, old, now_s)
        return out

    def _apply_split(self, lower: Zone, newcomer: str, upper: Zone, now_s: float
                     ) -> tuple[list[tuple[tuple[str, int], Sub]],
                                list[tuple[tuple[str, int], Mirror]]]:
        """This peer keeps ``lower``; the newcomer holds ``upper``; the subscriptions and
        mirror copies that left are returned."""
        core = self.core
        core.zone = lower
        if core.handoff_s > 0:
            core._handoffs.append((now_s + core.handoff_s, upper, (newcomer,)))
        self._relay_to(newcomer, now_s)
        nbrs = {p: z for p, z in core.nbrs.items() if can.abutment(lower, z)}
        nbrs[newcomer] = upper
        core._set_nbrs(nbrs)
        given = core._keep_subs(lower)
        return given, core.repair.split_mirrors(lower, upper, given)

    def granted(self, msg: Message, now_s: float) -> list[Action]:
        """The zone this joining peer was granted: taken, with its subscriptions, table
        and recent counts; the operations held until now are the caller's."""
        core = self.core
        p = msg.payload
        core.zone = can.zone_from_json(p["zone"])
        core.group = set(p["group"]) | {core.broker}
        core._set_nbrs({q: can.zone_from_json(z) for q, z in p["nbrs"].items()
                        if q != core.broker})
        for item in p["subs"]:
            core._store(*Sub.from_json(item))
        core.mirror_subs = dict(Mirror.from_json(m) for m in p.get("mirrors", ()))
        events, spread = p["recent"]
        core.loads.events, core.loads.spread = Recent(*events), Recent(*spread)
        core.joined_s, core.joined_as = now_s, str(p["grant"])
        if p["grant"] == "split" and core.handoff_s > 0:
            # The other way round from the old owner's handoff (_apply_split): the
            # half the splitter kept, to which this half's neighbours may leave an
            # event while their views of the split differ (docs/design/meghdoot-core.md).
            kept = core.nbrs[msg.origin]
            core._handoffs.append((now_s + core.handoff_s, kept, tuple(sorted(
                q for q, zone in core.nbrs.items() if zone == kept))))
        return [Record("can_joined", {
            "mode": p["grant"], "via": msg.origin, "climb": p.get("climb", 0),
            "volume": can.volume(core.zone)})]

    def split_in(self, p: Mapping[str, Any], now_s: float) -> list[Action]:
        """A co-replica split this peer's zone too: keep the lower half. The splitter
        told the neighbours its table had (``told``); a co-replica's table may have more
        (an update the splitter missed), so this peer tells those and introduces them to
        the newcomer and its co-replicas, and takes from ``told`` the ones it lacks."""
        core = self.core
        assert core.zone is not None
        dim, at = p["split"]
        newcomer = str(p["newcomer"])
        lower, upper = can.split(core.zone, int(dim), float(at))
        before = dict(core.nbrs)
        self._apply_split(lower, newcomer, upper, now_s)
        core.loads.share_events(0.5)
        told = p.get("told", {})
        for peer, zj in told.items():
            core._introduce(peer, can.zone_from_json(zj))
        untold = sorted(q for q in before if q not in told and q != newcomer)
        if not untold:
            return []
        update = self._split_update(sorted(core.group), lower, newcomer, upper,
                                    p.get("loads", {}))
        out: list[Action] = [Send(q, update) for q in untold]
        for half, to in ((upper, [newcomer]), (lower, sorted(core.group - {core.broker}))):
            beside = {q: before[q] for q in untold if can.abutment(half, before[q]) is not None}
            if beside:
                introduce = core._msg(MsgType.ZONE, {"update": {}, "introduce": beside})
                out += [Send(g, introduce) for g in to]
        return out

    def _split_update(self, group: Sequence[str], lower: Zone, newcomer: str, upper: Zone,
                      loads: Mapping[str, Any]) -> Message:
        """What a split tells the zone's neighbours: ``group`` holds ``lower`` and
        ``newcomer`` ``upper``, with the loads of the two peers it changed."""
        core = self.core
        return core._msg(MsgType.ZONE, {"update": {
            **{g: can.zone_to_json(lower) for g in group},
            newcomer: can.zone_to_json(upper)}, "loads": loads})

    def _relay_to(self, newcomer: str, now_s: float) -> None:
        """Pass on to ``newcomer``, for ``relay_s``, the zone changes neighbours tell."""
        if self.relay_s > 0:
            self._relays.append((now_s + self.relay_s, newcomer))

    def relay(self, msg: Message, now_s: float) -> list[Action]:
        """A neighbour's zone update, passed on to the newcomers of this zone's recent
        splits and replications as introductions. The newcomer's table is a copy of its
        splitter's: a neighbour that split at the same moment told the splitter, which
        it knew, of its new half, and neither newcomer learns of the other otherwise
        (two joins whose messages cross, as large grants make them)."""
        core = self.core
        while self._relays and self._relays[0][0] <= now_s:
            self._relays.popleft()
        entries = {q: zj for q, zj in msg.payload["update"].items() if zj is not None}
        if not self._relays or not entries:
            return []
        out: list[Action] = []
        for _, newcomer in self._relays:
            if newcomer != msg.origin:
                self.relayed += 1
                out.append(Send(newcomer, core._msg(MsgType.ZONE, {
                    "update": {}, "introduce": {q: zj for q, zj in entries.items()
                                                if q != newcomer}})))
        return out
