"""The directed links of one simulated run: their output queues, NICs and loss draws, and
the figures statistics windows report (docs/design/simulator.md, "Links", "NICs",
"Loss", "Queue statistics"; the link figures themselves come from :mod:`nodes.sim.links`).

Links are integers in (source, destination) name order, then in the order links on
demand open, and per-link state lives in parallel arrays and lists indexed by link,
which keeps the per-frame path free of object creation. A :class:`Network` pickles with
the simulation (a pause).
"""

from __future__ import annotations

import math
import random
from array import array
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from heapq import heappush
from typing import TYPE_CHECKING, Any

import networkx as nx

from nodes.frames import frame_size
from nodes.logs import Ev, message_fields
from nodes.messages import Message, MsgType
from nodes.sim.engine import Engine
from nodes.sim.events import ARRIVE, DEPART
from nodes.sim.links import LinkModel, fixed_links, link_number, reserve_nic
from nodes.sim.settings import RateChange

if TYPE_CHECKING:  # only for annotations: the simulator wires these in
    from nodes.sim.buffers import InputBuffers
    from nodes.sim.node_logs import LogFn

# Frame sizes remembered (see Network.size_cache). A message's copies are sized within a
# few link delays of each other: over the first tenth of the 10,000-peer Meghdoot stream
# 4,096 sized as few frames as 65,536 (48,940), which kept 28 MB of payloads alive at a
# fifth of it (zone grants carry whole tables).
SIZE_CACHE_MAX = 4_096

# A window's figures of one link: (frames enqueued, frames that left, frames queued).
Figures = tuple[int, int, int]


class Network:
    """The links among ``brokers`` (sorted names; ``bidx`` their indices): ``overlay``'s
    edges as fixed links (``defaults``: bw_mbps, delay_ms, loss_pct of an edge without
    them), loss drawn from ``seed``, and NICs (``nic_mbps`` node attributes, else
    ``on_demand``'s); events go on ``engine``'s heap. The simulation completes it with
    :meth:`hook_up` before the first event."""

    def __init__(self, overlay: nx.Graph, brokers: Sequence[str], bidx: Mapping[str, int],
                 seed: int, defaults: tuple[float | None, float, float],
                 on_demand: LinkModel | None, engine: Engine) -> None:
        self.engine = engine
        self.heap = engine.heap  # the list itself, never rebound: transmit pushes on it
        self.brokers = brokers
        directed = fixed_links(overlay, defaults)
        self.link_src = [bidx[a] for a, _, _, _, _ in directed]
        self.link_dst = [bidx[b] for _, b, _, _, _ in directed]
        self.link_src_name = [a for a, _, _, _, _ in directed]
        self.link_dst_name = [b for _, b, _, _, _ in directed]
        # Per-link numbers in typed arrays, not lists: a list holds a float or int object
        # per link (24-28 bytes beside its 8), and 10,000 peers open millions of links.
        self.s_per_byte = array("d", [0.0 if bw is None else 8.0 / (bw * 1e6)
                                      for _, _, bw, _, _ in directed])
        self.delay_s = array("d", [d / 1000.0 for _, _, _, d, _ in directed])
        self.loss_p = [p / 100.0 for _, _, _, _, p in directed]
        self.link_rng = [
            random.Random(f"{seed}:{a}:{b}") if p > 0 else None for a, b, _, _, p in directed
        ]
        n_links = len(directed)
        self.busy_until = array("d", [0.0]) * n_links
        nic_default = None if on_demand is None else on_demand.nic_mbps
        nics = [overlay.nodes[b].get("nic_mbps", nic_default) for b in brokers]
        self.nic_s_per_byte = [0.0 if bw is None else 8.0 / (link_number("nic_mbps", bw, 1e-9,
                                                                          math.inf) * 1e6)
                               for bw in nics]
        # Per NIC, the (start, end) intervals it is reserved for, in time order.
        self.nic_busy: list[list[tuple[float, float]]] = [[] for _ in brokers]
        # Per link with departures still to count in a window, their start times (a dict:
        # an empty deque per link costs 600 bytes, gigabytes with millions of on-demand
        # links).
        self.tx_starts: dict[int, deque[float]] = {}
        self.count_in = [0] * n_links
        # Links with figures to report at the next window (changed in place, never
        # rebound: the engine tests it before every event).
        self.active: set[int] = set()
        self.out_links: list[dict[str, int]] = [{} for _ in brokers]
        for lid, (a, b, _, _, _) in enumerate(directed):
            self.out_links[bidx[a]][b] = lid
        self.n_fixed = n_links  # links from here on were opened on demand
        self.link_rev = array("q", [self.out_links[bidx[b]][a] for a, b, _, _, _ in directed])
        self.cut: set[int] = set()  # links whose queued frames are dropped (peer gone)
        # Frames flushed from a cut link's queue, by (link, id(message)): their arrivals,
        # scheduled when they were enqueued, never happen. Each entry holds the message
        # and how many of its copies on that link were flushed: the message keeps its
        # id unused by another until its arrivals are dropped, and a resumed run, whose
        # messages are new objects, keys the entries anew (__setstate__).
        self.flushed_frames: dict[tuple[int, int], list[Any]] = {}
        self.flushed: dict[int, int] = {}  # frames dropped from a queue, per link
        # Frame sizes by (type, origin, msg_id), valid while the payload object is the same
        # one: forwarded copies share their payload, so encoding happens once per message.
        # Emptied when it reaches SIZE_CACHE_MAX: it holds the payloads alive, and a run
        # with millions of distinct messages would otherwise keep every one of them.
        self.size_cache: dict[tuple[MsgType, str, int], tuple[dict[str, Any], int]] = {}
        self.ims: Counter[MsgType] = Counter()  # messages that left a queue, by type
        self.lost = 0  # frames lost on the wire
        # Set by hook_up.
        self.log: LogFn | None = None
        self.windows = False
        self.hold: Any = None
        self.occupied: list[int] = []

    def hook_up(self, buffers: InputBuffers, processing: bool, log: LogFn | None,
                windows: bool) -> None:
        """What the other models add: the brokers' input windows (``buffers``, which
        hold frames back when ``processing``), the per-message log writer (``None``:
        off), and whether windows are counted (none: nothing reads them)."""
        self.occupied = buffers.occupied  # the list itself, counted in on every frame
        self.hold = buffers.hold if processing else None
        self.log = log
        self.windows = windows

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A paused run read back: its messages are new objects, so the flushed frames
        are keyed by their new ids."""
        self.__dict__.update(state)
        self.flushed_frames = {(lid, id(entry[0])): entry
                               for (lid, _), entry in state["flushed_frames"].items()}

    def rate_changes(self, link_changes: Sequence[RateChange], bidx: Mapping[str, int]
                     ) -> list[tuple[float, list[int], float]]:
        """``link_changes`` as (t_s, both links' ids, seconds per byte), checked."""
        out_links = self.out_links
        changes: list[tuple[float, list[int], float]] = []
        for t_s, a, b, bw in link_changes:
            lids = [out_links[bidx[x]].get(y) for x, y in ((a, b), (b, a))
                    if x in bidx and y in bidx]
            if len(lids) != 2 or None in lids:
                raise ValueError(f"link_changes: {a}-{b} is not an overlay link")
            bw = link_number("bw_mbps", bw, 1e-9, math.inf)
            changes.append((float(t_s), lids, 8.0 / (bw * 1e6)))
        return changes

    def new_pair(self, a: int, b: int, d_ab: float, d_ba: float, s_ab: float,
                 s_ba: float) -> int:
        """Append links a -> b and b -> a (ids ab and ab + 1) to every per-link list (in
        place: the event loop holds some of them); ab."""
        ab = len(self.link_src)
        na, nb = self.brokers[a], self.brokers[b]
        self.link_src += (a, b)
        self.link_dst += (b, a)
        self.link_src_name += (na, nb)
        self.link_dst_name += (nb, na)
        self.s_per_byte.extend((s_ab, s_ba))
        self.delay_s.extend((d_ab, d_ba))
        self.loss_p += (0.0, 0.0)
        self.link_rng += (None, None)
        self.busy_until.extend((0.0, 0.0))
        self.count_in += (0, 0)
        self.link_rev.extend((ab + 1, ab))
        return ab

    def enqueue(self, bi: int, lid: int, msg: Message, now: float) -> None:
        """Put ``msg`` on link ``lid``'s output queue at ``now`` (docs/design/simulator.md,
        Links and NICs): schedule its departure and its arrival, or, if the receiver's window
        is full (processing model), hold it there."""
        if self.windows:  # figures for the next window (none: nothing reads them)
            self.count_in[lid] += 1
            self.active.add(lid)
        hold = self.hold
        if hold is not None and hold(lid, msg):
            return
        self.transmit(bi, lid, msg, now)

    def transmit(self, bi: int, lid: int, msg: Message, now: float) -> None:
        """Schedule ``msg``'s departure from link ``lid``'s queue and its arrival."""
        ckey = (msg.type, msg.origin, msg.msg_id)
        size_cache = self.size_cache
        cached = size_cache.get(ckey)
        if cached is not None and cached[0] is msg.payload:
            size = cached[1]
        else:
            size = frame_size(msg)
            if len(size_cache) >= SIZE_CACHE_MAX:
                size_cache.clear()
            size_cache[ckey] = (msg.payload, size)
        busy_until = self.busy_until
        start = busy_until[lid]
        if start < now:
            start = now
        nic = self.nic_s_per_byte[bi]
        if nic:
            start = reserve_nic(self.nic_busy[bi], start, size * nic, now)
            s_per_byte = self.s_per_byte[lid]
            end = start + size * (nic if nic >= s_per_byte else s_per_byte)
        else:
            end = start + size * self.s_per_byte[lid]
        busy_until[lid] = end
        if self.windows:  # departures still to count in a window (none: nothing reads it)
            waiting = self.tx_starts.get(lid)
            if waiting is None:
                waiting = self.tx_starts[lid] = deque()
            waiting.append(start)
        rng = self.link_rng[lid]
        lost = rng is not None and rng.random() < self.loss_p[lid]
        heap = self.heap
        engine = self.engine
        if start > now:
            # Scheduled before the arrival, so `send` precedes `recv` even on a
            # tie; extra sequence numbers keep the other events' order.
            engine.seq += 1
            heappush(heap, (start, engine.seq, DEPART, lid, (msg, lost)))
        else:
            self.departed(lid, msg, lost, now)
        if lost:
            self.lost += 1
        else:
            self.occupied[self.link_dst[lid]] += 1
            engine.seq += 1
            heappush(heap, (end + self.delay_s[lid], engine.seq, ARRIVE, lid, msg))

    def departed(self, lid: int, msg: Message, lost: bool, t: float) -> None:
        """``msg`` leaves link ``lid``'s queue at ``t``: an IM (counted here, see
        :mod:`nodes.hosting`), logged with its loss on the wire."""
        if self.cut and lid in self.cut:  # its connection was lost: flushed, never sent
            if self.windows:
                self.tx_starts[lid].remove(t)
            self.flushed[lid] = self.flushed.get(lid, 0) + 1
            self.flushed_frames.setdefault((lid, id(msg)), [msg, 0])[1] += 1
            self.active.add(lid)
            if self.log is not None:
                self.log(self.link_src_name[lid], Ev.DROP, t, link=self.link_dst_name[lid],
                         reason="link_down", **message_fields(msg))
            return
        self.ims[msg.type] += 1
        if self.log is None:
            return
        fields = message_fields(msg)
        broker, link = self.link_src_name[lid], self.link_dst_name[lid]
        self.log(broker, Ev.SEND, t, link=link, **fields)
        if lost:
            self.log(broker, Ev.DROP, t, link=link, reason="loss", **fields)

    def window_figures(self, t_w: float, held_by: Mapping[int, Sequence[Message]]
                       ) -> dict[int, Figures]:
        """The figures of the window ending at ``t_w`` of each link active in it
        (``held_by``: frames the processing model holds in the links' queues); the links
        with figures other than zeros stay active for the next window, as do those
        enqueued on from here on."""
        figures: dict[int, Figures] = {}
        still_active: set[int] = set()
        for lid in sorted(self.active):
            waiting = self.tx_starts.get(lid)
            out = 0
            while waiting and waiting[0] < t_w:
                waiting.popleft()
                out += 1
            if waiting is not None and not waiting:
                del self.tx_starts[lid]
            held = held_by.get(lid)
            fig = (self.count_in[lid], out, (len(waiting) if waiting else 0)
                   + (len(held) if held else 0))
            self.count_in[lid] = 0
            figures[lid] = fig
            if fig != (0, 0, 0):
                still_active.add(lid)
        self.active.clear()
        self.active |= still_active
        return figures
