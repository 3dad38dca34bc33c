"""Leaving, failures and mirror copies of a Meghdoot peer (§4.3): :class:`Repair`, which
:class:`nodes.cores.meghdoot.MeghdootCore` owns.

- **Leaving**: a peer whose zone has replicas tells its co-replicas and neighbours; a lone
  owner hands its zone (subscriptions and mirror copies) to a neighbour zone it merges with
  into a box, else to an adopter that frees itself (none left: ``can_zone_orphaned``).
- **Failures**: a peer not heard from for ``failure_periods`` load periods (counted in the
  detector's own; heartbeat periods with ``report_rule: on_change``) is declared failed
  by its co-replicas and neighbours, and its zone lives on in its replicas; a failed lone
  owner's zone is taken over by the same rule, through a coordinator, with ``mirrors``
  only (without, its subscriptions are lost). A peer declared failed that reports again
  is taken back. What is not built is listed on the page below.
- **Mirror copies** (``mirrors``): each stored subscription has one copy at its mirror
  point (:func:`nodes.cores.can.mirror_point`), kept apart and never matched, and moved as
  zones split and merge; the taker of a failed zone recovers its subscriptions by querying
  the reflection of the zone's coordinates (:func:`nodes.cores.can.mirror_regions`).

What each peer repaired is counted for its end-of-run record (:meth:`Repair.counts`);
how long a zone must stand still before a crash and its takeover may take, for a
workload that crashes peers, is :func:`churn_times_s`.

The rules in full: docs/design/meghdoot-core.md ("Leaving, failures and mirror copies").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodes.cores import can
from nodes.cores.can import Point, Zone
from nodes.cores.interface import Action, Record, Send
from nodes.cores.meghdoot_common import RECOVERED, Mirror, Sub, msg_key, pick
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType

if TYPE_CHECKING:
    from nodes.cores.meghdoot import MeghdootCore

# Load periods a failed lone owner's coordinator waits for a neighbour's notice that has
# not come (every neighbour declares it failed within about two periods of the first:
# silence counts from its last message, which may trail its last report by a period);
# heartbeat periods with report_rule on_change, for the same reason.
ORPHAN_WAIT_PERIODS = 3
# Load periods a failed lone owner's neighbours may take to declare it failed past the
# limit: silence counts from its last message, which may trail its last report by one,
# and the tick that notices it may come one after the limit.
DETECT_SLACK_PERIODS = 2


def churn_times_s(params: Mapping[str, Any]) -> tuple[float, float]:
    """For a peer of ``params`` (a core's resolved params): how long a zone must stand
    still before its peer crashes for its last load report to have named its neighbours
    (two load periods: a peer reports first a period after its grant, and with
    ``report_rule: on_change`` a changed zone reports at its next tick too), and the
    longest the takeover of its zone then takes (detection, up to
    :data:`DETECT_SLACK_PERIODS` more, the coordinator's wait, one period for the
    takeover's messages; heartbeat periods under ``on_change``), in s. (0, 0) without
    failure detection (no load reports, or ``failure_periods`` 0)."""
    period_s = float(params["load_period_s"])
    failure_periods = int(params["failure_periods"])
    if period_s <= 0 or failure_periods <= 0:
        return 0.0, 0.0
    beat = int(params["heartbeat_periods"]) if params["report_rule"] == "on_change" else 1
    periods = failure_periods + DETECT_SLACK_PERIODS + ORPHAN_WAIT_PERIODS + 1
    return 2 * period_s, periods * beat * period_s


@dataclass(slots=True)
class Orphan:
    """A failed lone owner's zone, as its coordinator collects its neighbours' notices:
    each neighbour zone with its peers and whether it merges with a zone of its own
    neighbours (it could then free itself to adopt the orphan); the neighbours not yet
    heard from; the tick after which it decides without them."""

    zone: Zone
    due_tick: int
    candidates: dict[Zone, tuple[list[str], bool]]
    waiting: set[str]
    decided: bool = False


def _adopters(zones: Iterable[tuple[Zone, Sequence[str]]]) -> list[str]:
    """Who may adopt an orphaned zone, in turn (our reading): a replica of each
    replicated zone (its last peer by name, as the first reports for the zone; zones by
    their first peer), then the lone owners, the smallest zone first (ties by name): CAN's
    choice of the smallest neighbour, each of which adopts only if it can free itself."""
    zones = list(zones)
    replicated = sorted(sorted(peers) for _, peers in zones if len(peers) > 1)
    lone = sorted((can.volume(z), peers[0]) for z, peers in zones if len(peers) == 1)
    return [peers[-1] for peers in replicated] + [name for _, name in lone]


class Repair:
    """The leaving, failure and mirror-copy part of a Meghdoot peer (module docstring),
    an object the peer owns."""

    def __init__(self, core: MeghdootCore) -> None:
        self.core = core
        self._orphans: dict[str, Orphan] = {}  # failed lone owners this peer coordinates
        # Lone neighbour -> its neighbours, as its last report named them (with mirrors):
        # who to tell, and who coordinates, should it fail.
        self.around: dict[str, list[str]] = {}
        # What this peer repaired, for its end-of-run record (:meth:`counts`).
        self.done: Counter[str] = Counter()

    def counts(self) -> dict[str, int]:
        """What this peer repaired, by what: ``declared_down`` (peers it declared failed),
        ``took_over_crashed`` and ``took_over_left`` (zones it took over after a crash or
        a leave: merged into its own or adopted, each zone counted by one peer of its
        taker, the first by name), ``recovered`` (subscriptions it stored again from
        their mirror copies, counted by the peer that asked), ``orphaned`` (zones it
        found it could leave to no one: each peer that finds one counts it) and ``left``
        (1 if it left). Only what is not 0."""
        return {k: v for k, v in sorted(self.done.items()) if v}

    def _orphaned(self, peer: str, zone: Any) -> Record:
        """The record of a zone left without an owner (``zone``: its JSON form)."""
        self.done["orphaned"] += 1
        return Record("can_zone_orphaned", {"peer": peer, "zone": zone})

    # ---- mirror copies ----------------------------------------------------------------------

    def mirror(self, mtype: MsgType, key: tuple[str, int], sub: Sub, now_s: float
                ) -> list[Action]:
        """File (SUBSCRIBE) or drop (UNSUBSCRIBE) the mirror copy of this zone's ``sub``."""
        core = self.core
        assert core.zone is not None
        target = can.mirror_point(core.zone, sub.point) if core.mirroring else None
        return [] if target is None else self._mirror_to(mtype, key, sub, target, now_s)

    def _mirror_to(self, mtype: MsgType, key: tuple[str, int], sub: Sub, target: Point,
                   now_s: float) -> list[Action]:
        """A mirror copy filed or dropped at ``target``, routed there as any point is."""
        core = self.core
        body = sub.to_json(key) if mtype is MsgType.SUBSCRIBE else list(key)
        msg = core._msg(mtype, {"mirror": body, "point": list(target)})
        return core._route(msg, target, now_s)

    def mirror_in(self, msg: Message, *, replica_copy: bool) -> list[Action]:
        """A mirror copy filed or dropped here (and at the co-replicas)."""
        core = self.core
        p = msg.payload
        target = tuple(map(float, p["point"]))
        if msg.type is MsgType.SUBSCRIBE:
            key, sub = Sub.from_json(p["mirror"])
            core.mirror_subs[key] = Mirror(sub, target)
        else:
            key = (str(p["mirror"][0]), int(p["mirror"][1]))
            held = core.mirror_subs.get(key)
            # Only the copy filed at this target: a moved copy's drop and its new filing
            # may land in one zone, in either order.
            if held is not None and held.target == target:
                del core.mirror_subs[key]
        return [] if replica_copy else core._to_replicas(msg)

    def rehome(self, key: tuple[str, int], sub: Sub, before: Zone, after: Zone,
                here: Zone, now_s: float) -> list[Action]:
        """Move the mirror copy of ``sub`` from where the rule filed it while ``before``
        stored it to where it files it now that ``after`` does; a copy that lies in
        ``here`` (what the zone change covers) is moved by the change itself."""
        old, new = can.mirror_point(before, sub.point), can.mirror_point(after, sub.point)
        if old == new:
            return []
        out: list[Action] = []
        if old is not None and not can.contains(here, old):
            out += self._mirror_to(MsgType.UNSUBSCRIBE, key, sub, old, now_s)
        if new is not None and not can.contains(here, new):
            out += self._mirror_to(MsgType.SUBSCRIBE, key, sub, new, now_s)
        return out

    def refill(self, zone: Zone, now_s: float) -> list[Action]:
        """File again the mirror copies of this zone's subscriptions that the rule files
        in ``zone`` (a failed peer's: they were lost with it)."""
        core = self.core
        assert core.zone is not None
        out: list[Action] = []
        for key, sub in core.subs.items():
            target = can.mirror_point(core.zone, sub.point)
            if target is not None and can.contains(zone, target):
                out += self._mirror_to(MsgType.SUBSCRIBE, key, sub, target, now_s)
        return out

    def split_mirrors(self, lower: Zone, upper: Zone,
                       given: Sequence[tuple[tuple[str, int], Sub]]
                       ) -> list[tuple[tuple[str, int], Mirror]]:
        """The mirror copies ``upper`` takes when this zone splits (it keeps ``lower``;
        ``given``: the subscriptions that left with ``upper``): those filed in it, and
        those of the subscriptions kept here that the rule now files in it. This zone
        keeps the rest and files the copies of the given ones that the rule files here."""
        core = self.core
        if not core.mirroring:
            return []
        gone = [(k, m) for k, m in core.mirror_subs.items() if not can.contains(lower, m.target)]
        for k, _ in gone:
            del core.mirror_subs[k]
        for k, sub in given:
            target = can.mirror_point(upper, sub.point)
            if target is not None and can.contains(lower, target):
                core.mirror_subs[k] = Mirror(sub, target)
        for k, sub in core.subs.items():
            target = can.mirror_point(lower, sub.point)
            if target is not None and can.contains(upper, target):
                gone.append((k, Mirror(sub, target)))
        return gone

    def _merge_mirrors(self, own: Zone, given: Zone, mirrors: Sequence[Sequence[Any]],
                       now_s: float, *, acting: bool) -> list[Action]:
        """The mirror copies after this zone (``own``) merged with ``given``: the given
        zone's join this one's; copies of subscriptions the merged zone now stores become
        its own (a failed sibling's subscriptions come back so); the acting peer (the
        first by name) moves the copies whose rule changed with the zone."""
        core = self.core
        assert core.zone is not None
        for item in mirrors:
            key, m = Mirror.from_json(item)
            core.mirror_subs[key] = m
        for key, m in list(core.mirror_subs.items()):
            if can.contains(core.zone, m.sub.point):
                del core.mirror_subs[key]
                if key not in core.subs:
                    core._store(key, m.sub)
        if not acting:
            return []
        out: list[Action] = []
        for key, sub in core.subs.items():
            before = own if can.contains(own, sub.point) else given
            out += self.rehome(key, sub, before, core.zone, core.zone, now_s)
        return out

    def mirrors_json(self) -> list[list[Any]]:
        core = self.core
        return [m.to_json(k) for k, m in core.mirror_subs.items()]

    # ---- leaving, failures, a lone owner's zone taken over ------------------------------------

    def _announce_failed(self, peer: str) -> list[Action]:
        """A co-replica declared failed, told to the neighbours by the zone's reporter
        (with zone reports, they hear of it from no one else). They file it as failed,
        so that a report naming it again (it was only slow) brings it back."""
        core = self.core
        if not core.loads.reports_for_zone():
            return []
        msg = core._msg(MsgType.ZONE, {"update": {peer: None}, "failed": [peer]})
        return [Send(q, msg) for q in sorted(core.nbrs)]

    def detect_failures(self, now_s: float) -> list[Action]:
        """Drop the co-replicas and neighbours not heard from for ``failure_periods``
        of this peer's load periods, or heartbeat periods (their load reports double as
        heartbeats, §4.3)."""
        core = self.core
        if core.failure_periods <= 0:
            return []
        limit = core.failure_periods * core.loads.beat
        out: list[Action] = []
        for peer in sorted(set(core.nbrs) | (core.group - {core.broker})):
            heard = core._heard_tick.setdefault(peer, core._ticks)
            if core._ticks - heard > limit:
                out += self._declare_failed(peer, now_s)
        return out

    def _declare_failed(self, peer: str, now_s: float) -> list[Action]:
        """Drop ``peer``, a co-replica or neighbour: not heard from, or named failed by a
        neighbour's notice (:meth:`down_in`)."""
        core = self.core
        zone = core.nbrs.get(peer, core.zone)
        assert zone is not None
        mate = peer in core.group
        core._update(peer, None)
        core._failed.add(peer)
        self.done["declared_down"] += 1
        out: list[Action] = [Record("can_peer_down", {"peer": peer})]
        if mate:
            out += self._announce_failed(peer)
        held = zone == core.zone or any(z == zone for z in core.nbrs.values())
        if held:
            return out
        if not core.mirroring:
            return [*out, self._orphaned(peer, can.zone_to_json(zone))]
        return out + self._notice(peer, zone, now_s)

    def _sibling(self) -> tuple[Zone, list[str]] | None:
        """The first neighbour zone (in the zones' order) this zone merges with into a box
        (CAN's sibling), with its peers."""
        core = self.core
        assert core.zone is not None
        return next(((z, peers) for z, peers in core._zones()
                     if can.merged(core.zone, z) is not None), None)

    def _notice(self, failed: str, zone: Zone, now_s: float) -> list[Action]:
        """Tell the coordinator of a failed lone owner's ``zone`` (the first by name of
        the neighbours its last report named) that this neighbour saw it fail: its zone,
        its peers, and whether it merges with a neighbour of its own. Told directly, not
        routed: greedy routing may not get round the hole the failed zone leaves."""
        core = self.core
        assert core.zone is not None
        around = self.around.pop(failed, None)
        if around is None:  # it never named its neighbours to this peer
            return [self._orphaned(failed, can.zone_to_json(zone))]
        notice = core._msg(MsgType.ZONE, {
            "down": failed, "zone": can.zone_to_json(zone), "around": around,
            "from": can.zone_to_json(core.zone), "group": sorted(core.group),
            "sibling": self._sibling() is not None})
        return self._tell([min(around)], notice, now_s)

    def down_in(self, msg: Message, now_s: float) -> list[Action]:
        """A notice at the coordinator, which declares the failed peer failed too if it
        has not yet, and decides (:meth:`_hand_orphan`) once every neighbour the failed
        peer named has sent one (or, failing that, at :meth:`due_orphans`)."""
        core = self.core
        p = msg.payload
        failed = str(p["down"])
        out = self._declare_failed(failed, now_s) if failed in core.nbrs else []
        orphan = self._orphans.get(failed)
        if orphan is None:
            wait = ORPHAN_WAIT_PERIODS * core.loads.beat
            orphan = self._orphans[failed] = Orphan(
                can.zone_from_json(p["zone"]), core._ticks + wait, {}, set(p["around"]))
        if orphan.decided:  # a notice later than the decision changes nothing
            return out
        orphan.candidates[can.zone_from_json(p["from"])] = (list(p["group"]),
                                                           bool(p["sibling"]))
        orphan.waiting.discard(msg.origin)
        if not orphan.waiting:
            orphan.decided = True
            out += self._hand_orphan(failed, orphan, now_s)
        return out

    def due_orphans(self, now_s: float) -> list[Action]:
        core = self.core
        out: list[Action] = []
        for failed, orphan in self._orphans.items():
            if not orphan.decided and orphan.due_tick <= core._ticks:
                orphan.decided = True
                out += self._hand_orphan(failed, orphan, now_s)
        return out

    def _hand_orphan(self, failed: str, orphan: Orphan, now_s: float) -> list[Action]:
        """Who takes a failed lone owner's zone over, from its neighbours' notices (every
        peer of every neighbour zone sends one, so together they are its neighbour
        table): the peers of a zone that merges with it into a box (the first by its
        first peer), as for a graceful leave; else an adopter (:func:`_adopters`). They
        recover its subscriptions from their mirror copies."""
        core = self.core
        zone = can.zone_to_json(orphan.zone)
        table = {q: z for z, (peers, _) in orphan.candidates.items() for q in peers}
        common = {"leaver": failed, "nbrs": table, "subs": [], "mirrors": [], "recover": True}
        merging = sorted(peers for z, (peers, _) in orphan.candidates.items()
                         if can.merged(z, orphan.zone) is not None)
        if merging:
            return self._tell(merging[0], core._msg(MsgType.ZONE, {"takeover": zone,
                                                                   **common}), now_s)
        walk = _adopters([(z, peers) for z, (peers, sibling) in orphan.candidates.items()
                          if len(peers) > 1 or sibling])
        if not walk:
            return [self._orphaned(failed, zone)]
        adopt = core._msg(MsgType.ZONE, {"adopt": zone, **common, "next": walk[1:]})
        return self._tell([walk[0]], adopt, now_s)

    def _tell(self, peers: Sequence[str], msg: Message, now_s: float) -> list[Action]:
        """``msg`` to ``peers``; this peer's own share is handled here."""
        core = self.core
        out: list[Action] = [Send(q, msg) for q in peers if q != core.broker]
        if core.broker in peers:
            out += core._zone_msg(msg, now_s)
        return out

    def _hand_zone(self, peers: Sequence[str], *, stays: bool = False) -> list[Action]:
        """This zone, its subscriptions and mirror copies, to the peers of a zone that
        merges with it (:meth:`take_over`)."""
        core = self.core
        assert core.zone is not None
        give = core._msg(MsgType.ZONE, {
            "takeover": can.zone_to_json(core.zone), "nbrs": dict(core.nbrs),
            "subs": [s.to_json(k) for k, s in core.subs.items()],
            "mirrors": self.mirrors_json(), **({"stays": True} if stays else {})})
        return [Send(p, give) for p in peers]

    def _heard_anew(self, told: set[str]) -> None:
        """After a takeover set this peer's table anew: the peers in it that were not in
        ``told`` (its table and group before) count their silence from now. A split or a
        takeover drops neighbours without forgetting when they were last heard, so a
        neighbour from before this zone's splits came back silent for dozens of periods
        and was declared failed at the next tick: the merged zone's table then lacked
        it, and the CAN's tables were no longer symmetric (a lone owner's leave to its
        sibling, 64 peers, tests/test_meghdoot.py)."""
        core = self.core
        for q in set(core.nbrs) - told:
            core._heard_tick[q] = core._ticks

    def adopt(self, msg: Message, now_s: float) -> list[Action]:
        """Hold an orphaned zone, one that merges with no neighbour zone (a failed or
        leaving lone owner's): as a replica, leaving its zone to its co-replicas; as a
        lone owner, after handing its zone to a sibling zone of its own. Neither: the
        next adopter of the list is asked (none left: the zone stays orphaned)."""
        core = self.core
        assert core.zone is not None
        p = msg.payload
        leaver = str(p["leaver"])
        out: list[Action] = []
        sibling = None
        if len(core.group) < 2:
            sibling = self._sibling()
            if sibling is None:
                rest = list(p["next"])
                if not rest:
                    return [self._orphaned(leaver, p["adopt"])]
                return [Send(rest[0], msg.forwarded({**p, "next": rest[1:]}))]
            out += self._hand_zone(sibling[1], stays=True)
        zone = can.zone_from_json(p["adopt"])
        table = {q: can.zone_from_json(z) for q, z in p["nbrs"].items()
                 if q != core.broker and q not in core._departed}
        if sibling is not None:  # its sibling zone now holds this peer's zone too
            table.update(dict.fromkeys(sibling[1], can.merged(core.zone, sibling[0])))
        told = (set(core.nbrs) | core.group) - {core.broker}
        core.zone, core.group = zone, {core.broker}
        core.subs, core._index = {}, SubscriptionIndex()
        for item in p["subs"]:
            core._store(*Sub.from_json(item))
        core.mirror_subs = dict(Mirror.from_json(m) for m in p["mirrors"])
        core._set_nbrs({q: z for q, z in table.items() if can.abutment(zone, z)})
        self._heard_anew(told)
        recover = core.mirroring and bool(p.get("recover"))
        update = core._msg(MsgType.ZONE, {
            "update": {core.broker: p["adopt"], leaver: None},
            **({"refill": p["adopt"]} if recover else {})})
        out += [Send(q, update) for q in sorted(told | set(core.nbrs))]
        if recover:
            out += self._recover(zone, now_s)
        self.done["took_over_crashed" if p.get("recover") else "took_over_left"] += 1
        return [Record("can_took_over", {"from": leaver, "mode": "adopt"}), *out]

    def _recover(self, zone: Zone, now_s: float) -> list[Action]:
        """Ask for a failed ``zone``'s subscriptions back (§4.3: "querying the reflection
        of the zone's coordinates"): a query to each box that holds their mirror copies
        (:func:`nodes.cores.can.mirror_regions`), spread over the zones meeting it. The
        first also asks those zones to file again the mirror copies the failed peer held
        (their subscriptions' reflections lie in it); this peer's update asks the same of
        its neighbours, whose reflections may have stepped out into it."""
        core = self.core
        out: list[Action] = []
        for i, region in enumerate(can.mirror_regions(zone)):
            query = core._msg(MsgType.ZONE, {
                "to": list(region[0]), "recover": can.zone_to_json(zone),
                "region": can.zone_to_json(region), "taker": core.broker, "refill": i == 0})
            out += core._route(query, region[0], now_s)
        return out

    def recover_in(self, msg: Message, now_s: float) -> list[Action]:
        """A recovery query (:meth:`_recover`) at a zone meeting its region: passed on to
        one peer of each neighbour zone meeting it; this zone's mirror copies of the failed
        zone's subscriptions sent to the peer that took it over."""
        core = self.core
        key = msg_key(msg)
        if not core._first_contact(key, now_s, RECOVERED):
            return []
        p = msg.payload
        zone, region = can.zone_from_json(p["recover"]), can.zone_from_json(p["region"])
        spread = msg.forwarded({k: v for k, v in p.items() if k != "to"})
        out: list[Action] = [Send(pick(peers, key), spread) for z, peers in core._zones()
                             if can.meets(z, region)]
        found = [m.sub.to_json(k) for k, m in core.mirror_subs.items()
                 if can.contains(zone, m.sub.point)]
        if found and p["taker"] != core.broker:
            out.append(Send(str(p["taker"]), core._msg(MsgType.ZONE, {
                "recovered": found, "failed": p["recover"]})))
        if p["refill"]:
            out += self.refill(zone, now_s)
        return out

    def recovered_in(self, msg: Message, now_s: float) -> list[Action]:
        """A failed zone's subscriptions, sent back from their mirror copies: stored, passed
        on to the co-replicas, and their copies moved when the zone that now stores them
        files them elsewhere (a merged zone)."""
        core = self.core
        assert core.zone is not None
        p = msg.payload
        failed = can.zone_from_json(p["failed"])
        copy = bool(p.get("copy"))
        out: list[Action] = []
        if not copy:
            mates = sorted(core.group - {core.broker})
            out += [Send(g, msg.forwarded({**p, "copy": True})) for g in mates]
        for item in p["recovered"]:
            key, sub = Sub.from_json(item)
            if key in core.subs or not can.contains(core.zone, sub.point):
                continue
            core._store(key, sub)
            if not copy:
                self.done["recovered"] += 1
                out += self.rehome(key, sub, failed, core.zone, core.zone, now_s)
        return out

    def leave(self) -> list[Action]:
        """Leave the zone to its co-replicas, or hand it to a sibling zone, or else to an
        adopter (docs/design/meghdoot-core.md); the runtime makes this peer dormant either way."""
        core = self.core
        assert core.zone is not None
        out: list[Action] = []
        if len(core.group) < 2:
            sibling = self._sibling()
            walk = _adopters(core._zones()) if sibling is None else []
            if sibling is not None:
                out += self._hand_zone(sibling[1])
            elif walk:
                out.append(Send(walk[0], core._msg(MsgType.ZONE, {
                    "adopt": can.zone_to_json(core.zone), "leaver": core.broker,
                    "nbrs": dict(core.nbrs),
                    "subs": [s.to_json(k) for k, s in core.subs.items()],
                    "mirrors": self.mirrors_json(), "next": walk[1:]})))
            else:  # the last peer: no one is left to hold the space
                out.append(self._orphaned(core.broker, can.zone_to_json(core.zone)))
        gone = core._msg(MsgType.ZONE, {"update": {core.broker: None}})
        out += [Send(p, gone) for p in sorted(set(core.nbrs) | (core.group - {core.broker}))]
        core.zone, core.group, core.subs, core.mirror_subs = None, {core.broker}, {}, {}
        core._index = SubscriptionIndex()
        core._set_nbrs({})
        self.done["left"] += 1
        return [*out, Record("can_left", {})]

    def take_over(self, msg: Message, now_s: float) -> list[Action]:
        """A zone that merges with this one into a box is handed to it: a leaving lone
        owner's (with its subscriptions and mirror copies), an adopter's that frees itself
        for an orphaned zone (``stays``: it announces its new zone itself), or a failed
        lone owner's, named by its coordinator (``recover``: its subscriptions come back
        from their mirror copies). Merge, store, and tell every neighbour of the merged
        zone (each co-replica does the same; the first by name alone moves mirror copies
        and asks for the lost subscriptions)."""
        core = self.core
        assert core.zone is not None
        p = msg.payload
        leaver = str(p.get("leaver", msg.origin))
        given = can.zone_from_json(p["takeover"])
        own = core.zone
        zone = can.merged(own, given)
        if zone is None:  # the leaver's view was stale: nothing to merge with
            return [self._orphaned(leaver, p["takeover"])]
        known = {**{q: can.zone_from_json(z) for q, z in p["nbrs"].items()
                    if q not in core._departed}, **core.nbrs}
        told = (set(core.nbrs) | core.group) - {core.broker}
        core.zone = zone
        core._set_nbrs({q: z for q, z in known.items() if q not in core.group
                        and q != leaver and can.abutment(zone, z)})
        self._heard_anew(told)
        for item in p["subs"]:
            core._store(*Sub.from_json(item))
        acting = min(core.group) == core.broker
        moved = self._merge_mirrors(own, given, p.get("mirrors", ()), now_s,
                                    acting=acting) if core.mirroring else []
        entries: dict[str, Any] = {g: can.zone_to_json(zone) for g in core.group}
        if not p.get("stays"):
            entries[leaver] = None
        recover = acting and core.mirroring and bool(p.get("recover"))
        if acting and not p.get("stays"):  # an adopter freeing itself is no takeover
            self.done["took_over_crashed" if p.get("recover") else "took_over_left"] += 1
        update = core._msg(MsgType.ZONE, {"update": entries, **(
            {"refill": p["takeover"]} if recover else {})})
        out: list[Action] = [Record("can_took_over", {"from": leaver}),
                             *(Send(q, update) for q in sorted(core.nbrs)), *moved]
        if recover:
            out += self._recover(given, now_s)
        return out
