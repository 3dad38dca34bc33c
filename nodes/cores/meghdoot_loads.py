"""The load reports of a Meghdoot peer (§4.2; who reports to whom, and what a report
carries, are in :mod:`nodes.cores.meghdoot`'s docstring), an object the peer owns.

It keeps the peer's recent event counts, its neighbours' and co-replicas' last reported
loads and the loadedPeerList; every load period (its timer also drives the failure
detection, :mod:`nodes.cores.meghdoot_repair`) it sends the peer's report, if
``report_rule`` says so, and it reads the reports and the loads zone messages carry. A
report from beyond the peer's zone is answered with a correction (the peer's table
repairs, ``report_corrections``).

When a peer reports (``report_rule``; the paper says only "periodically"):

- ``periodic`` (our first reading, the default): every load period, to every addressee.
- ``on_change`` (ours): reports cost what they carry. A peer reports at its tick when a
  load its report carries (its own, or as its zone's reporter its co-replicas') moved by
  more than ``report_change`` of the value last reported, in the load or in the
  propagation messages (what joins read: the hill climb the one, the replicate rule
  both), or when what the report names for the tables changed (its zone, its replica
  group, the neighbours a lone owner names); else only to the peers new in its table
  since its last tick, and every ``heartbeat_periods`` load periods to all, as a
  heartbeat. Failure detection then counts heartbeat periods (``failure_periods`` of
  them), and a failed lone owner's coordinator waits three of them for its notices
  (:attr:`Loads.beat`). The loadedPeerList alone changing sends nothing: joins do not
  read it. A join's zone messages carry the fresh loads of the peers it changed, as in
  either reading.

``periodic`` stays the default: the shipped points were run with it, and ``on_change``
(share 0.25, heartbeats every 10 periods) was measured on ``meghdoot-peers`` at 100 and
1,000 peers, where the joins end within a load period or two of the first and the
reports hardly steer them: it cut the load reports by 75 and 72 % (at 1,000 peers from
18 to 6 % of the messages) and left every other figure of the summary as it was
(docs/papers/meghdoot.md). Where they do steer the joins (1,000 peers with 10 s load
periods, 1,000 subscriptions and 1,100 events: ten periods of joins) it cut them by only
14 %, since loads move while the CAN grows, and moved the replicas (the largest group 15
peers where periodic's had 27; 434 unique zones either way). At 10,000 peers (skewed
events), where the reports steer ten load periods of joins, it cut them by 47 % and moved
the figures as any change of timing does (3,698 unique zones where periodic's had 3,707).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from nodes.cores import can
from nodes.cores.interface import Action, Send, SetTimer
from nodes.messages import MsgType

if TYPE_CHECKING:
    from nodes.cores.meghdoot import MeghdootCore

LOAD_TIMER = "load"


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


class _Report(NamedTuple):
    """A peer's load as its reports carry it (:meth:`Loads.report`)."""

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


class Loads:
    """A peer's loads: its own recent counts, the ones it heard, and its reports."""

    def __init__(self, core: MeghdootCore, params: Mapping[str, Any]) -> None:
        self.core = core
        self.load_reports = params["load_reports"]
        self.on_change = params["report_rule"] == "on_change"
        self.change = float(params["report_change"])
        # Load periods between heartbeats: the unit in which silence is counted.
        self.beat = int(params["heartbeat_periods"]) if self.on_change else 1
        # on_change: what the last report to all carried (peer -> load and propagation
        # messages; zone, group and named neighbours), its tick, and who has had this
        # peer's own report and its zone report since entering its table.
        self._told: dict[str, tuple[float, int]] = {}
        self._told_names: tuple[Any, ...] = ()
        self._told_tick = 0
        self._told_own: set[str] = set()
        self._told_zone: set[str] = set()
        self.k = int(params["loaded_list"])
        self.nbr_load: dict[str, _Report] = {}  # neighbour or co-replica -> its last report
        self.loaded: dict[str, float] = {}  # the loadedPeerList: peer -> load last heard
        self.events = Recent()  # event messages received (routing and propagation)
        self.spread = Recent()  # of which propagation (DeliverEvent from a neighbour)
        self.report_corrections = 0  # reports from beyond this zone answered (load_in)

    @property
    def load(self) -> float:
        """Meghdoot's load (our reading): recent event messages plus stored subscriptions."""
        core = self.core
        return self.events.total + len(core.subs)

    def tick(self, now_s: float) -> list[Action]:
        core = self.core
        if core.zone is None:  # left: no more reports
            core._ticking = False
            return []
        out: list[Action] = [SetTimer(LOAD_TIMER, core.load_period_s)]
        core._ticks += 1
        out += core.repair.detect_failures(now_s)
        out += core.repair.due_orphans(now_s)
        self.events.rotate()
        self.spread.rotate()
        own = self.report()
        self.loaded[core.broker] = own[0]
        top = [list(px) for px in self._trim_loaded()]
        zone = can.zone_to_json(core.zone)
        mates = sorted(core.group - {core.broker})
        # A lone owner names its neighbours: should it fail, they tell one another.
        around = {"around": sorted(core.nbrs)} if core.mirroring and not mates else {}
        # Its own report: to its co-replicas, or with peer reports to its neighbours too.
        own_to = sorted({*core.nbrs, *mates}) if self.load_reports == "peer" else mates
        zone_to = sorted(core.nbrs) if self.reports_for_zone() else []
        loads = {core.broker: own, **{m: self.nbr_load[m] for m in mates
                                      if m in self.nbr_load}} if zone_to else {}
        if self.on_change:
            own_to, zone_to = self._addressees(
                {core.broker: own, **loads}, (core.zone, mates, around), own_to, zone_to)
        if own_to:
            report = core._msg(MsgType.LOAD, {"loads": {core.broker: own}, "top": top,
                                              "zone": zone, **around})
            out += [Send(p, report) for p in own_to]
        if zone_to:
            report = core._msg(MsgType.LOAD, {"loads": loads, "top": top, "zone": zone,
                                              "group": [core.broker, *mates], **around})
            out += [Send(p, report) for p in zone_to]
        return out

    def _addressees(self, loads: Mapping[str, Sequence[float]], names: tuple[Any, ...],
                    own_to: list[str], zone_to: list[str]) -> tuple[list[str], list[str]]:
        """With ``on_change``, whom this tick's own and zone reports go to (the module
        docstring): every addressee if a load in ``loads`` moved by more than the share,
        ``names`` (the zone, co-replicas and named neighbours) changed or a heartbeat is
        due; else only those that have not had the report since entering the table."""
        core = self.core
        due = (core._ticks - self._told_tick >= self.beat or names != self._told_names
               or loads.keys() != self._told.keys()
               or any(self._moved(x, self._told[p]) for p, x in loads.items()))
        fresh_own = own_to if due else [p for p in own_to if p not in self._told_own]
        fresh_zone = zone_to if due else [p for p in zone_to if p not in self._told_zone]
        self._told_own, self._told_zone = set(own_to), set(zone_to)
        if due:
            self._told = {p: (float(x[0]), int(x[1])) for p, x in loads.items()}
            self._told_names, self._told_tick = names, core._ticks
        return fresh_own, fresh_zone

    def _moved(self, now: Sequence[float], told: tuple[float, int]) -> bool:
        """Whether a load or its propagation messages moved by more than the share."""
        return any(abs(float(x) - was) > self.change * was
                   for x, was in ((now[0], told[0]), (now[1], told[1])))

    def reports_for_zone(self) -> bool:
        """Whether this peer is its zone's reporter: the first of its group by name."""
        core = self.core
        return self.load_reports == "zone" and min(core.group) == core.broker

    def load_in(self, peer: str, p: Mapping[str, Any]) -> list[Action]:
        """A load report: the sender's own, or its zone's (``group``: the peers it
        names, whose loads it carries as last heard). Returns this peer's answer to a
        sender whose zone does not abut its own (docs/design/meghdoot-core.md, (4)), else
        nothing."""
        core = self.core
        group = p.get("group", (peer,))
        zone = _zone_of(p["zone"])
        for member in group:
            if member in core._failed:  # wrongly declared failed (a machine too busy
                # to report in time), here or by its reporter: a report naming it
                # brings it back.
                core._failed.discard(member)
                core._update(member, zone)
            else:  # a report refreshes the table, as CAN's periodic updates do
                core._introduce(member, zone)
        if "group" in p:
            vouched = core._ticks + 2
            for member in group:
                if (member != peer and core.nbrs.get(member) == zone
                        and core._heard_tick.get(member, -1) < vouched):
                    core._heard_tick[member] = vouched
        if "around" in p:
            core.repair.around[peer] = list(p["around"])
        else:
            core.repair.around.pop(peer, None)
        self.heard(p["loads"])
        self.merge_loaded(p["top"])
        if peer in core.nbrs or peer in core.group or peer in core._departed:
            return []
        # The sender's zone does not abut this one, so its table holds this zone stale
        # (docs/design/meghdoot-core.md, (4)): it and the peers it reports for are told.
        self.report_corrections += 1
        correction = core._correction(zone)
        return [Send(q, correction) for q in group]

    def share_events(self, share: float) -> None:
        """Keep ``share`` of the recent event count: after a replication or a split the
        zone's events are shared (our reading; the paper's loads are its simulator's
        fresh counts, ours would otherwise stay high for two load periods and draw every
        join of that time to the same peer)."""
        core = self.core
        self.events.keep(share)
        self.spread.keep(share)
        self.loaded[core.broker] = self.load

    def report(self, subs: int | None = None) -> list[float]:
        """A load as reports carry it: ``[load, propagation messages, subscriptions]``;
        with ``subs``, of a peer that shares this one's recent events but stores ``subs``
        subscriptions (a split's newcomer)."""
        core = self.core
        subs = len(core.subs) if subs is None else subs
        return [self.events.total + subs, self.spread.total, subs]

    def heard(self, loads: Mapping[str, Sequence[float]]) -> None:
        """Loads (:meth:`report`) from a load report or of the peers a join changed,
        carried by its zone messages."""
        core = self.core
        for peer, report in _reports_of(loads).items():
            if peer != core.broker:
                if peer in core.nbrs or peer in core.group:
                    self.nbr_load[peer] = report
                if peer in self.loaded:
                    self.loaded[peer] = report.load

    def merge_loaded(self, top: Sequence[Sequence[Any]]) -> None:
        """A report's loadedPeerList into this peer's, but for this peer's own entry
        (which this peer knows best, and which it keeps out of its list if it is not
        there). Every entry is read first (a malformed load fails the whole report)."""
        core = self.core
        loaded, own = self.loaded, self.loaded.get(core.broker)
        loaded.update(_top_of(top))
        if own is not None:
            loaded[core.broker] = own
        else:
            loaded.pop(core.broker, None)
        # Trimmed to the k heaviest when this peer next reports (a sort per report heard
        # cost a tenth of a large run's time; nothing reads the list in between).

    def _trim_loaded(self) -> list[tuple[str, float]]:
        """Keep the ``k`` heaviest of the loadedPeerList; them, heaviest first."""
        keep = _heaviest_first(self.loaded)[: self.k]
        self.loaded = dict(keep)
        return keep
