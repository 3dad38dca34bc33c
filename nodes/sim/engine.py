"""Deterministic discrete-event simulator hosting the routing cores (the simulated runtime).

The simulator runs one routing core per broker of an overlay (a networkx graph), drives
the cores with a workload's client operations, and writes the records the emulated runtime
writes (:mod:`nodes.emulated.broker`, :mod:`nodes.emulated.client`,
:mod:`nodes.emulated.overlay_link`), so analysis does not care which runtime produced a
run. The model in short (each point in full, under its name, in docs/design/simulator.md):

- **Links**: each overlay edge is two directed FIFO links with ``bw_mbps`` (Mbit/s;
  ``None``: unshaped), ``delay_ms`` and ``loss_pct`` (missing ones take the
  :class:`~nodes.sim.settings.SimSettings` ``default_*`` fields); a frame serialises
  in ``frame_size * 8 / bw`` and arrives ``delay_ms`` after its last bit left. **NICs**:
  a node's ``nic_mbps`` is one interface all its links share. **Loss** is drawn per
  link from ``random.Random(f"{seed}:{src}:{dst}")``.
- **Queue statistics**: windows end at ``k * window_ms``; a link's ``queue`` record, and a
  core's :class:`~nodes.cores.interface.LinkStats`, come only for windows in which it was
  active or was active in the window before.
- **Clients** sit on zero-latency local links. **Time** is simulated seconds from 0,
  ``t_wall`` is :data:`SIM_EPOCH_S` plus it, and ties run in scheduling order, so the same
  inputs and seed give byte-identical logs. **IMs** count when a message leaves a link's
  output queue. **Delays** follow :mod:`nodes.metrics.summary` on simulated times; matching
  delay alone is measured wall time, and it stays out of the logs.
- **Records** and **table sizes** are the emulated broker's; ``log_messages=False`` writes
  only the ``queue`` records.
- **Failures** (``kill_at``, CRASH ops): a dead broker gets no event, and its live
  neighbours get :class:`~nodes.cores.interface.LinkDown` one link delay later. Keepalives
  are not modelled.
- **Links on demand** (``on_demand``, a :class:`~nodes.sim.links.LinkModel`): a ``Send`` to
  a broker with no link dials it, with a TCP dial's timing and one connection a pair;
  **Disconnect** closes it; **failed dials** (``no route``, ``refused``, ``dormant``) log
  ``dial_failed`` and give the core LinkDown.
- **Membership**: a broker named by a JOIN op is dormant until it, and dormant again after
  a LEAVE; a client op other than JOIN on a dormant broker is a ``ValueError``.
- **Processing** (``processing``, :mod:`nodes.sim.processing`): each broker one server with
  an input buffer and a service time. **Rate changes**: ``link_changes`` lists ``(t_s, a,
  b, bw_mbps)``. **Pausing** (``pause``, :mod:`nodes.sim.checkpoint`): a run without logs
  may stop at a wall-clock deadline and go on with :func:`resume` in another process.

The full model: docs/design/simulator.md.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
import resource
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from nodes.cores import CoreFactory, make_core, overlay_params
from nodes.cores.interface import (
    Action,
    Arrived,
    Deliver,
    Disconnect,
    FromClient,
    LinkDown,
    LinkStats,
    LinkWindow,
    Record,
    RoutingCore,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.frames import frame_size
from nodes.hosting import (
    HasCounters,
    HasTables,
    bad_action,
    final_records,
    handle_timed,
    merge_params,
    reads_link_stats,
)
from nodes.logs import Ev, JsonlLog, message_fields
from nodes.messages import Message, MsgType
from nodes.metrics.summary import (
    CARRIES,
    MATCHED_TYPES,
    TABLE_KINDS,
    Expected,
    build_summary,
    propagation_delays,
)
from nodes.runfolder import log_path
from nodes.sim.buffers import InputBuffers
from nodes.sim.checkpoint import Pause, Paused, read_state, write_state
from nodes.sim.connections import Connections
from nodes.sim.deliveries import Deliveries
from nodes.sim.events import ARRIVE, DEPART, DONE, DOWN, KILL, OP, RATE, TIMER, UP
from nodes.sim.links import LinkModel, fixed_links, link_number, reserve_nic
from nodes.sim.membership import Members
from nodes.sim.samples import SampleFile
from nodes.sim.settings import ParamsArg, SimSettings
from nodes.time_left import PROGRESS_EVERY_S

if TYPE_CHECKING:  # only for annotations: the simulator reads ops and clients, nothing else
    from nodes.workloads.ops import ClientOp, Workload

SIM_EPOCH_S = 1_704_067_200.0  # 2024-01-01T00:00:00Z: fixed so logs do not depend on the day
# Log files kept open at once (others are reopened in append mode): half the soft limit on
# open files, 512..4096, so a run of a few thousand nodes does not reopen a file per record.
MAX_OPEN_LOGS = max(512, min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2))

_MEMBERSHIP = frozenset({MsgType.JOIN, MsgType.LEAVE, MsgType.CRASH})
_CARRIES = {MsgType[msg]: MsgType[op] for msg, op in CARRIES.items()}
_MATCHED = frozenset(MsgType[name] for name in MATCHED_TYPES)

_SentKey = tuple[MsgType, str, int]
# Frame sizes remembered (see _Sim.size_cache). A message's copies are sized within a
# few link delays of each other: over the first tenth of the 10,000-peer Meghdoot stream
# 4,096 sized as few frames as 65,536 (48,940), which kept 28 MB of payloads alive at a
# fifth of it (zone grants carry whole tables).
SIZE_CACHE_MAX = 4_096
# Python's full collection walks every live object; a run holds millions (a 10,000-peer
# Meghdoot run's links and tables) and makes no cycles of its own: those walks found
# nothing and took 7 % of that run's CPU time at a fifth of its operations. During a run
# a full collection waits for this many collections of the middle generation (Python's
# default: 10); the young generations are collected as before.
FULL_GC_AFTER = 1000
# Heap events between two looks at the clock for a pause: a look costs a system call,
# and 4,096 events of a large run take a fraction of a second.
PAUSE_CHECK_EVERY = 4096


@contextmanager
def _rare_full_collections() -> Iterator[None]:
    """Full collections at most every :data:`FULL_GC_AFTER` middle ones, meanwhile."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, max(full, FULL_GC_AFTER))
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


@dataclass
class SimResult:
    """What one simulated run produced (all of it deterministic for a given seed).

    ``deliveries`` lists, per notification (origin, msg_id), the subscribers it reached in
    delivery order, one entry per delivery (duplicates stay visible; a
    :class:`~nodes.sim.deliveries.Deliveries`, 4 bytes a delivery). ``ims_by_type``
    counts inter-broker messages (Send actions) by type name. ``delays_s`` has samples
    per kind (``notification``: one per delivery; ``advertisement`` and
    ``subscription``: one per propagated message). ``table_sizes`` lists, per table kind,
    one size per broker in sorted broker order. ``events`` counts client operations,
    arrivals and timers processed; ``end_s`` is the time of the last of them.
    ``counters`` maps each broker whose core counts (``counters()``) to its counters.
    """

    algorithm: str
    published: int
    deliveries: Deliveries
    ims_by_type: dict[str, int]
    delays_s: dict[str, Sequence[float]]
    table_sizes: dict[str, list[int]]
    record_counts: dict[str, int]
    lost: int
    events: int
    end_s: float
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # From the first publication's send to the last notification's delivery (seconds), the
    # summary's duration_s in both runtimes; 0 without deliveries.
    span_s: float = 0.0
    # Links opened on demand: directed links that came up (one per `link` record with
    # state up; a connection is two), and dials that failed (`link` state dial_failed).
    links_opened: int = 0
    dials_failed: int = 0
    # Processing model only: each broker's time spent handling messages (s).
    busy_s: dict[str, float] = field(default_factory=dict)
    # Each live broker's end-of-run records (kind, fields), as its log ends with them
    # (:func:`nodes.hosting.final_records`); kept with or without logs.
    final: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict,
                                                                repr=False)
    # The one figure that is not deterministic: seconds (time.perf_counter) each core
    # handle of a notification took, the matching delay; left out of comparisons.
    # Doubles, 8 bytes a sample where a list of floats takes 32, the simulator's in a
    # file (nodes.sim.samples): one sample per publication a core handles, some ten
    # million at 10,000 Meghdoot peers.
    matching_s: Sequence[float] = field(default_factory=lambda: array("d"), compare=False,
                                        repr=False)


class _Logs:
    """One JSON-lines log per node, at most MAX_OPEN_LOGS files open at a time."""

    def __init__(self, out_dir: Path, nodes: Sequence[str]) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self._dir = out_dir
        self._open: dict[str, JsonlLog] = {}
        for node in nodes:
            # JsonlLog appends; start every file empty so reruns are byte-identical.
            log_path(out_dir, node).write_bytes(b"")

    def write(self, node: str, ev: Ev, t_s: float, **fields: Any) -> None:
        log = self._open.get(node)
        if log is None:
            if len(self._open) >= MAX_OPEN_LOGS:
                self._open.pop(next(iter(self._open))).close()
            log = self._open[node] = JsonlLog(log_path(self._dir, node), node)
        log.write(ev, t_s, SIM_EPOCH_S + t_s, **fields)

    def close(self) -> None:
        for log in self._open.values():
            log.close()
        self._open.clear()


def simulate(overlay: nx.Graph, workload: Workload, core: str | CoreFactory,
             settings: SimSettings) -> SimResult:
    """Run ``workload`` over ``overlay`` with routing core ``core`` at every broker, as
    ``settings`` says (:class:`~nodes.sim.settings.SimSettings`, each field documented).

    ``core`` is a name from :data:`nodes.cores.CORES` (the params it derives from the
    overlay graph, node and edge attributes included, see
    :func:`nodes.cores.overlay_params`, are merged with ``settings.core_params``; a run
    plan passes what it derived as ``settings.derived``) or a factory. With
    ``settings.on_demand`` a core may send to any broker of the overlay, whose edges
    (fixed links) are then optional: the simulator opens links as the
    :class:`~nodes.sim.links.LinkModel` says (docs/design/simulator.md, "Links on
    demand"). Workload JOIN, LEAVE and CRASH ops drive membership
    (docs/design/simulator.md, "Membership"). With ``settings.processing`` brokers take
    time to handle messages and hold their senders back when their input buffers fill
    (:mod:`nodes.sim.processing`). ``settings.progress`` weighs each operation by the
    brokers that are members when it runs (see :func:`nodes.sim.membership.plan_membership`).
    With ``settings.pause`` the run may stop early, its state written to a file, and raise
    :class:`~nodes.sim.checkpoint.Paused` (docs/design/simulator.md, "Pausing"; no logs: a
    paused run cannot keep its log files open); :func:`resume` goes on from there.
    """
    sim = _Sim(overlay, workload, core, settings)
    sim.progress = settings.progress
    try:
        with _rare_full_collections():
            return sim.run(settings.until_s, settings.pause)
    finally:
        if sim.logs is not None:
            sim.logs.close()


def resume(path: Path, *, on_demand: LinkModel | None = None,
           progress: Callable[[float], None] | None = None,
           pause: Pause | None = None, trust: bool = False) -> SimResult:
    """Go on with the run paused to ``path`` (:func:`simulate` with ``pause``) until it
    ends or pauses again (to ``pause.path``). ``on_demand`` must be the link model the
    run started with (its functions were not written to the file) and is asked only of
    pairs that open links from here on. The state is read only if this user's key signed
    it, or with ``trust`` (:func:`~nodes.sim.checkpoint.read_state`; else
    :class:`~nodes.sim.checkpoint.StateRefused`, nothing unpickled)."""
    sim = read_state(path, trust=trust)
    if not isinstance(sim, _Sim):
        raise ValueError(f"{path}: not a paused simulation")
    if sim.needs_link_model != (on_demand is not None):
        raise ValueError(f"{path}: the run {'opened' if sim.needs_link_model else 'had no'} "
                         "links on demand; resume it with the same link model")
    sim.on_demand, sim.progress = on_demand, progress
    with _rare_full_collections():
        return sim.proceed(pause)


def summarize(
    result: SimResult,
    expected: Expected,
    *,
    scale: float = 1.0,
) -> dict[str, Any]:
    """The summary.json object of a simulated run against the oracle's ``expected`` (as
    :func:`~nodes.metrics.summary.build_summary` takes it)."""
    summary = build_summary(
        algorithm=result.algorithm,
        runtime="simulated",
        scale=scale,
        published=result.published,
        expected=expected,
        deliveries=result.deliveries,
        ims_by_type=result.ims_by_type,
        delays_s={**result.delays_s, "matching": result.matching_s},
        table_sizes=result.table_sizes,
        duration_s=result.span_s,
    )
    summary["events"] = result.events
    summary["lost"] = result.lost
    return summary


def _rate_changes(link_changes: Sequence[tuple[float, str, str, float]],
                  out_links: Sequence[Mapping[str, int]],
                  bidx: Mapping[str, int]) -> list[tuple[float, list[int], float]]:
    """``link_changes`` as (t_s, both links' ids, seconds per byte), checked."""
    rate_changes: list[tuple[float, list[int], float]] = []
    for t_s, a, b, bw in link_changes:
        lids = [out_links[bidx[x]].get(y) for x, y in ((a, b), (b, a))
                if x in bidx and y in bidx]
        if len(lids) != 2 or None in lids:
            raise ValueError(f"link_changes: {a}-{b} is not an overlay link")
        bw = link_number("bw_mbps", bw, 1e-9, math.inf)
        rate_changes.append((float(t_s), lids, 8.0 / (bw * 1e6)))
    return rate_changes


def _attach_clients(workload: Workload, bidx: Mapping[str, int]) -> list[set[str]]:
    """Per broker (index), the clients the workload attaches to it, checked against its ops."""
    clashes = sorted(set(workload.clients) & set(bidx))
    if clashes:
        raise ValueError(f"clients named like brokers (one log file each): {clashes}")
    clients_of: list[set[str]] = [set() for _ in bidx]
    for client, broker in sorted(workload.clients.items()):
        if broker not in bidx:
            raise ValueError(f"client {client} is attached to {broker}, not in the overlay")
        clients_of[bidx[broker]].add(client)
    for op in workload.ops:
        if workload.clients.get(op.client) != op.broker:
            raise ValueError(f"op at {op.t_s} s: client {op.client} is not attached to "
                             f"{op.broker} in the workload's client map")
    return clients_of


def _make_cores(overlay: nx.Graph, core: str | CoreFactory, core_params: ParamsArg | None,
                derived: Mapping[str, Mapping[str, Any]] | None,
                ) -> tuple[str, list[RoutingCore]]:
    """The algorithm's name and one core per broker, in sorted broker order (see
    :class:`~nodes.sim.settings.SimSettings` for ``core_params`` and ``derived``)."""
    if isinstance(core, str):
        algorithm = core
        if derived is None:
            derived = overlay_params(core, overlay)
        factory: CoreFactory = partial(make_core, core)
    else:
        algorithm = getattr(core, "__name__", type(core).__name__)
        derived = derived or {}
        factory = core
    cores: list[RoutingCore] = []
    for b in sorted(overlay.nodes):
        if core_params is None:
            user: Mapping[str, Any] = {}
        elif callable(core_params):
            user = core_params(b)
        else:
            user = core_params
        params = merge_params(derived.get(b, {}), user)
        cores.append(factory(b, tuple(sorted(overlay.neighbors(b))), params))
    return algorithm, cores


class _Sim:
    """The simulator state; the event loop is in :meth:`run`.

    Links are integers in (source, destination) name order, and per-link state lives in
    parallel lists indexed by link, which keeps the hot loop free of object creation.
    """

    def __init__(self, overlay: nx.Graph, workload: Workload, core: str | CoreFactory,
                 settings: SimSettings) -> None:
        brokers = sorted(overlay.nodes)
        if any(not isinstance(b, str) for b in brokers):
            raise ValueError("overlay nodes must be broker names (str)")
        self.brokers = brokers
        self.bidx = bidx = {b: i for i, b in enumerate(brokers)}
        kill_at = settings.kill_at or {}
        strangers = sorted(set(kill_at) - set(bidx))
        if strangers:
            raise ValueError(f"kill_at names brokers not in the overlay: {strangers}")
        self.kill_at = {bidx[b]: float(t) for b, t in kill_at.items()}
        self.window_s = settings.window_ms / 1000.0
        self.workload = workload

        self._init_links(overlay, settings.seed, (settings.default_bw_mbps,
                                                  settings.default_delay_ms,
                                                  settings.default_loss_pct),
                         settings.on_demand)
        self.rate_changes = _rate_changes(settings.link_changes, self.out_links, bidx)

        # ---- processing model (nodes.sim.processing)
        self.processing = processing = settings.processing
        self.progress: Callable[[float], None] | None = None
        self.buffers = InputBuffers(self, processing)
        # The buffers' list itself, never rebound: transmit counts in it on every frame.
        self.occupied = self.buffers.occupied

        self.clients_of = _attach_clients(workload, bidx)
        self.members = Members(self, workload.ops)
        # The members' sets themselves, never rebound: the event loop and the links test them.
        self.dead, self.dormant = self.members.dead, self.members.dormant
        self.op_work = self.members.op_work

        self.algorithm, self.cores = _make_cores(overlay, core, settings.core_params,
                                                 settings.derived)

        out_dir = settings.out_dir
        self.logs = (
            _Logs(out_dir, [*brokers, *sorted(workload.clients)]) if out_dir is not None else None
        )
        # Windows are for the cores that read them and for the logs' queue records.
        self.stats_to = frozenset(bi for bi, c in enumerate(self.cores) if reads_link_stats(c))
        self.windows = self.logs is not None or bool(self.stats_to)
        # The per-message writer, or None when per-message logs are off.
        self.log = self.logs.write if settings.log_messages and self.logs is not None else None
        if self.log is not None:  # as the emulated broker does when it starts dormant
            for bi in sorted(self.dormant):
                self.log(brokers[bi], Ev.RECORD, 0.0, kind="membership", state="dormant")

        self._init_tallies()

    def _init_links(self, overlay: nx.Graph, seed: int,
                    defaults: tuple[float | None, float, float],
                    on_demand: LinkModel | None) -> None:
        """The per-link state (the overlay's fixed links, then links opened on demand) and
        the NICs."""
        bidx, brokers = self.bidx, self.brokers
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
        self.active: set[int] = set()  # links with figures to report at the next window
        self.out_links: list[dict[str, int]] = [{} for _ in brokers]
        for lid, (a, b, _, _, _) in enumerate(directed):
            self.out_links[bidx[a]][b] = lid
        # ---- links on demand (none of this is used without on_demand)
        self.on_demand = on_demand
        self.n_fixed = n_links  # links from here on were opened on demand
        self.link_rev = array("q", [self.out_links[bidx[b]][a] for a, b, _, _, _ in directed])
        self.conns = Connections(self)
        # The connections' dict itself, never rebound: act tests it on every Send.
        self.waiting = self.conns.waiting
        self.cut: set[int] = set()  # links whose queued frames are dropped (peer gone)
        # Frames flushed from a cut link's queue, by (link, id(message)): their arrivals,
        # scheduled when they were enqueued, never happen. Each entry holds the message
        # and how many of its copies on that link were flushed: the message keeps its
        # id unused by another until its arrivals are dropped, and a resumed run, whose
        # messages are new objects, keys the entries anew (__setstate__).
        self.flushed_frames: dict[tuple[int, int], list[Any]] = {}
        self.flushed: dict[int, int] = {}  # frames dropped from a queue, per link

    def _init_tallies(self) -> None:
        """The heap and what the run counts for its result."""
        self.heap: list[tuple[Any, ...]] = []
        self.seq = 0
        self.deliveries = Deliveries(self.workload.clients)
        self.ims: Counter[MsgType] = Counter()
        self.records: Counter[str] = Counter()
        # One sample a delivery, as doubles in a file (nodes.sim.samples): in memory they
        # took 8 bytes a delivery, 580 MB of a 72-million-delivery Meghdoot run.
        self.notification_delays = SampleFile()
        # Wall time of core.handle per notification (nodes.metrics.summary's matching delay):
        # it depends on the machine, so it goes to the summary only, never to a log.
        self.matching_s = SampleFile()  # as SimResult.matching_s
        self.sent_at: dict[_SentKey, float] = {}  # client operations' send times
        # Per advertisement/subscription: the brokers it has reached, and the time the
        # latest of them was first reached.
        self.reached_by: dict[_SentKey, set[int]] = {}
        self.reached_at: dict[_SentKey, float] = {}
        self.lost = 0
        self.published = 0
        self.first_pub_s = math.inf
        self.last_window_s = 0.0
        self.last_delivery_s = -math.inf
        # Frame sizes by (type, origin, msg_id), valid while the payload object is the same
        # one: forwarded copies share their payload, so encoding happens once per message.
        # Emptied when it reaches SIZE_CACHE_MAX: it holds the payloads alive, and a run
        # with millions of distinct messages would otherwise keep every one of them.
        self.size_cache: dict[_SentKey, tuple[dict[str, Any], int]] = {}

    # ---- event loop ---------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The state a pause writes: functions do not pickle, so the link model and the
        progress callback are left out and handed in again by :func:`resume`."""
        state = self.__dict__.copy()
        state.update(on_demand=None, progress=None, needs_link_model=self.on_demand is not None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A paused run read back: its messages are new objects, so the flushed frames
        are keyed by their new ids."""
        self.__dict__.update(state)
        self.flushed_frames = {(lid, id(entry[0])): entry
                               for (lid, _), entry in state["flushed_frames"].items()}

    def run(self, until_s: float | None, pause: Pause | None = None) -> SimResult:
        """Start the run: the client operations and the scheduled deaths and rate
        changes go on the heap, then :meth:`proceed`."""
        ops = self.workload.ops
        heap = self.heap
        heap.extend((op.t_s, i, OP, op, None) for i, op in enumerate(ops))
        heap.extend((t, len(ops) + i, KILL, bi, None)
                    for i, (bi, t) in enumerate(sorted(self.kill_at.items())))
        base = len(heap)
        heap.extend((t, base + i, RATE, lids, s_per_byte)
                    for i, (t, lids, s_per_byte) in enumerate(self.rate_changes))
        heapq.heapify(heap)
        self.seq = len(heap)
        self.horizon = math.inf if until_s is None else until_s
        # The loop's counters, kept here between the parts of a paused run: the window
        # index and end, events processed, the last event's time, client ops done.
        self.loop_state = (1, self.window_s, 0, 0.0, 0)
        return self.proceed(pause)

    def proceed(self, pause: Pause | None) -> SimResult:
        """The event loop, from where :meth:`run` or a pause left it, to the end of the
        run or, with ``pause``, until its deadline (then
        :class:`~nodes.sim.checkpoint.Paused`)."""
        heap = self.heap
        dead = self.dead
        gone = self.cut  # sets changed in place, never rebound
        dormant = self.dormant
        horizon = self.horizon
        window_s = self.window_s
        k, window_t, events, end_s, ops_done = self.loop_state
        countdown = PAUSE_CHECK_EVERY
        cores = self.cores
        link_dst = self.link_dst
        act = self.act
        up, link_event = self.conns.up, self.conns.event
        at_dead_broker = self.members.at_dead_broker
        take_in, serve, free = self.buffers.take_in, self.buffers.serve, self.buffers.free
        pop = heapq.heappop
        log = self.log
        proc = self.processing is not None
        last_report = time.perf_counter()
        while True:
            countdown -= 1
            if not countdown:
                countdown = PAUSE_CHECK_EVERY
                if pause is not None and heap and time.perf_counter() >= pause.until:
                    self.loop_state = (k, window_t, events, end_s, ops_done)
                    self._pause(pause.path, ops_done)
            t = heap[0][0] if heap else math.inf
            if self.windows and self.active and window_t <= t:
                if window_t > horizon:
                    break
                self._window(window_t)
                k += 1
                window_t = k * window_s
                continue
            if not heap or t > horizon:
                break
            while window_t <= t:  # idle windows report nothing: skip them
                k = max(k + 1, int(t // window_s))
                window_t = k * window_s
            t, _, kind, a, b = pop(heap)
            if kind == KILL:
                dead.add(a)
                self.members.announce_death(a, t)
                if proc:
                    self.buffers.death(a, t)
                continue
            if kind == DOWN:
                if a not in dead:
                    link = self.brokers[b]
                    if log is not None:
                        log(self.brokers[a], Ev.LINK, t, link=link, role="broker",
                            state="down", reason="peer died")
                    act(a, cores[a].handle(LinkDown(link), t), t)
                    events += 1
                    end_s = t
                continue
            if kind == RATE:
                for lid in a:
                    self.s_per_byte[lid] = b
                continue
            if kind >= UP:  # links on demand: up, closed by the peer, dial failed
                if up(a, b, t) if kind == UP else link_event(kind, a, b, t):
                    events += 1
                    end_s = t
                continue
            # With no broker dead and no connection cut, only an arrival at a dormant
            # broker is dropped (a 10,000-peer run has dormant peers until its last join,
            # and asked at_dead_broker of every event).
            if ((dead or gone or (kind == ARRIVE and link_dst[a] in dormant))
                    and at_dead_broker(kind, a, b, t)):
                if proc and kind == ARRIVE:  # dropped: its place in the window frees
                    free(link_dst[a], t)
                continue
            if kind == ARRIVE:
                if proc:  # into the input buffer; handled when the broker gets to it
                    take_in(link_dst[a], (a, b, ""), t)
                    continue
                act(link_dst[a], self.handle_frame(a, b, t), t)
            elif kind == DONE:  # the broker has handled a message: its actions go out
                act(a, b, t)
                serve(a, t)
            elif kind == OP:
                self._client_op(a, t)
                ops_done += 1
                if self.progress is not None and ops_done % 256 == 0:
                    wall = time.perf_counter()
                    if wall - last_report >= PROGRESS_EVERY_S:
                        last_report = wall
                        self.progress(self.op_work[ops_done - 1] / self.op_work[-1])
            elif kind == TIMER:
                act(a, cores[a].handle(TimerFired(b), t), t)
            else:  # DEPART: a queue hands a frame to the wire; no core sees it
                self._departed(a, b[0], b[1], t)
                continue
            events += 1
            end_s = t
        return self._result(events, end_s)

    def _pause(self, path: Path, ops_done: int) -> None:
        """Write the run's state to ``path`` and raise :class:`~nodes.sim.checkpoint.Paused`."""
        done = self.op_work[ops_done - 1] / self.op_work[-1] if ops_done else 0.0
        try:
            write_state(self, path)
        except OSError as exc:  # a full disk, say: the run is lost, say why in one line
            raise RuntimeError(f"cannot write the paused state to {path}: "
                               f"{exc.strerror or exc}") from None
        raise Paused(path, done, self.heap[0][0])

    def _client_op(self, op: ClientOp, t: float) -> None:
        """A client sends ``op.msg`` to its broker at ``t``."""
        msg: Message = op.msg
        extra: dict[str, Any] = {}
        if msg.type in _MEMBERSHIP:
            self.members.member_op(op, t)
            return
        if msg.type is MsgType.PUBLISH:
            self.published += 1
            self.first_pub_s = min(self.first_pub_s, t)
            extra["t_pub"] = SIM_EPOCH_S + t
            msg = replace(msg, payload={**msg.payload, "t_pub": extra["t_pub"]})
        self.sent_at[(msg.type, msg.origin, msg.msg_id)] = t
        if self.log is not None:
            self.log(op.client, Ev.SEND, t, link=op.broker, **extra, **message_fields(msg))
        bi = self.bidx[op.broker]
        if self.processing is not None:
            self.buffers.take_in(bi, (None, msg, op.client), t)
        else:
            self.act(bi, self.handle_op(bi, op.client, msg, t), t)

    def handle_op(self, bi: int, client: str, msg: Message, t: float) -> list[Action]:
        """Broker ``bi``'s core handles ``client``'s message at ``t``."""
        if self.log is not None:
            self.log(self.brokers[bi], Ev.RECV, t, link=client, **message_fields(msg))
        actions, took_s = handle_timed(self.cores[bi], FromClient(client, msg), t, msg.type)
        if took_s is not None:
            self.matching_s.append(took_s)
        return actions

    def handle_frame(self, lid: int, msg: Message, t: float) -> list[Action]:
        """The receiving broker's core handles the frame that came over link ``lid``."""
        dst = self.link_dst[lid]
        src = self.link_src_name[lid]
        if self.log is not None:
            self.log(self.brokers[dst], Ev.RECV, t, link=src, **message_fields(msg))
        op_type = _CARRIES.get(msg.type)
        if op_type is not None:
            key = (op_type, msg.origin, msg.msg_id)
            if key in self.sent_at:
                reached = self.reached_by.setdefault(key, set())
                if dst not in reached:  # later copies reach no new broker
                    reached.add(dst)
                    self.reached_at[key] = t
        actions, took_s = handle_timed(self.cores[dst], Arrived(src, msg), t, msg.type)
        if took_s is not None:
            self.matching_s.append(took_s)
        return actions

    def act(self, bi: int, actions: list[Action], now: float) -> None:
        """Carry out one core's actions at time ``now``."""
        log = self.log
        broker = self.brokers[bi]
        out_links = self.out_links[bi]
        waiting = self.waiting
        # A core delivers one message to many clients in a row (Meghdoot: one event to
        # every matching client of a peer), so its entries are looked up once a message
        # object, not once a delivery.
        last: Message | None = None
        deliveries = self.deliveries
        got = array("i")
        sent: float | None = None
        for action in actions:
            cls = type(action)
            if cls is Send:
                lid = out_links.get(action.link)
                if lid is None or lid in waiting:
                    if self.on_demand is None:
                        raise bad_action(broker, action, neighbour=False)
                    self.conns.send(bi, action.link, action.msg, now)
                else:
                    self.enqueue(bi, lid, action.msg, now)
            elif cls is Deliver:
                client = action.client
                if client not in self.clients_of[bi]:
                    raise bad_action(broker, action, local_client=False)
                msg = action.msg
                if msg is not last:
                    last = msg
                    got = deliveries.of(msg.key)
                    sent = self.sent_at.get((MsgType.PUBLISH, msg.origin, msg.msg_id))
                    self.last_delivery_s = now
                got.append(deliveries.number(client))
                if sent is not None:
                    self.notification_delays.append(now - sent)
                if log is not None:
                    t_pub = msg.payload.get("t_pub")
                    fields = message_fields(msg)
                    log(broker, Ev.DELIVER, now, link=client, t_pub=t_pub, **fields)
                    log(client, Ev.RECV, now, link=broker, t_pub=t_pub, **fields)
            elif cls is Record:
                self.records[action.kind] += 1
                if log is not None:
                    log(broker, Ev.RECORD, now, kind=action.kind, **action.fields)
            elif cls is SetTimer:
                self.seq += 1
                heapq.heappush(self.heap, (now + action.delay_s, self.seq, TIMER, bi, action.name))
            elif cls is Disconnect:
                if self.on_demand is None:
                    raise ValueError(f"core at {broker} returned {action!r}: links are fixed "
                                     "here (SimSettings.on_demand opens them on demand)")
                self.conns.disconnect(bi, action.link, now)
            else:
                raise bad_action(broker, action)

    def enqueue(self, bi: int, lid: int, msg: Message, now: float) -> None:
        """Put ``msg`` on link ``lid``'s output queue at ``now`` (docs/design/simulator.md,
        Links and NICs): schedule its departure and its arrival, or, if the receiver's window
        is full (processing model), hold it there."""
        if self.windows:  # figures for the next window (none: nothing reads them)
            self.count_in[lid] += 1
            self.active.add(lid)
        if self.processing is not None and self.buffers.hold(lid, msg):
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
        if start > now:
            # Scheduled before the arrival, so `send` precedes `recv` even on a
            # tie; extra sequence numbers keep the other events' order.
            self.seq += 1
            heapq.heappush(heap, (start, self.seq, DEPART, lid, (msg, lost)))
        else:
            self._departed(lid, msg, lost, now)
        if lost:
            self.lost += 1
        else:
            self.occupied[self.link_dst[lid]] += 1
            self.seq += 1
            heapq.heappush(heap, (end + self.delay_s[lid], self.seq, ARRIVE, lid, msg))

    def _departed(self, lid: int, msg: Message, lost: bool, t: float) -> None:
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

    def _window(self, t_w: float) -> None:
        """Close the statistics window ending at ``t_w``: log it and feed the cores."""
        self.last_window_s = t_w
        held_by = self.buffers.held
        figures: dict[int, tuple[int, int, int]] = {}
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
        # Actions taken below may enqueue: those count in the next window.
        self.active = still_active
        window_ms = self.window_s * 1000.0
        zero = LinkWindow(0, 0, 0)
        # Closed links opened on demand are in no out_links, but their last frames count.
        closed: dict[int, list[int]] = {}
        if self.conns.closed:
            for lid in figures:
                if lid in self.conns.closed:
                    closed.setdefault(self.link_src[lid], []).append(lid)
        for bi in sorted({self.link_src[lid] for lid in figures} - self.dead):
            links: dict[str, LinkWindow] = {}
            for nb, lid in self.out_links[bi].items():
                if lid in self.waiting:  # not up yet: the core has not heard of it
                    continue
                fig = figures.get(lid)
                if fig is None:
                    links[nb] = zero
                    continue
                links[nb] = LinkWindow(*fig)
                if self.logs is not None:
                    self.logs.write(
                        self.brokers[bi], Ev.QUEUE, t_w, link=nb, count_in=fig[0],
                        count_out=fig[1], queue_len=fig[2], flushed=self.flushed.pop(lid, 0),
                        window_ms=window_ms,
                    )
            for lid in closed.get(bi, ()):
                fig = figures[lid]
                if self.logs is not None:
                    self.logs.write(
                        self.brokers[bi], Ev.QUEUE, t_w, link=self.link_dst_name[lid],
                        count_in=fig[0], count_out=fig[1], queue_len=fig[2],
                        flushed=self.flushed.pop(lid, 0), window_ms=window_ms,
                    )
            if bi in self.dormant or bi not in self.stats_to:  # dormant, or not a reader
                continue
            self.act(bi, self.cores[bi].handle(LinkStats(window_ms, links), t_w), t_w)

    def _result(self, events: int, end_s: float) -> SimResult:
        delays: dict[str, Sequence[float]] = {
            "notification": self.notification_delays,
            **propagation_delays(
                {(t.name, o, i): s for (t, o, i), s in self.sent_at.items()},
                {(t.name, o, i): s for (t, o, i), s in self.reached_at.items()},
            ),
        }
        tables: dict[str, list[int]] = {kind: [] for kind in TABLE_KINDS}
        final: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for bi, c in enumerate(self.cores):
            sizes: Mapping[str, int] = c.table_sizes() if isinstance(c, HasTables) else {}
            for kind in TABLE_KINDS:
                tables[kind].append(int(sizes.get(kind, 0)))
            if bi in self.dead:
                continue
            final[self.brokers[bi]] = records = final_records(c)
            if self.logs is not None and self.log is not None:
                # After the last event and the last window, so every log stays in order.
                t_end = max(end_s, self.last_window_s)
                for kind, fields in records:
                    self.logs.write(self.brokers[bi], Ev.RECORD, t_end, kind=kind, **fields)
        return SimResult(
            algorithm=self.algorithm,
            published=self.published,
            deliveries=self.deliveries,
            ims_by_type={t.name: n for t, n in sorted(self.ims.items())},
            delays_s=delays,
            table_sizes=tables,
            record_counts=dict(sorted(self.records.items())),
            lost=self.lost,
            events=events,
            end_s=end_s,
            counters={b: dict(c.counters()) for b, c in zip(self.brokers, self.cores, strict=True)
                      if isinstance(c, HasCounters)},
            matching_s=self.matching_s,
            busy_s=({b: round(s, 9) for b, s in zip(self.brokers, self.buffers.busy_s, strict=True)}
                    if self.processing is not None else {}),
            span_s=max(0.0, self.last_delivery_s - self.first_pub_s)
            if self.last_delivery_s > self.first_pub_s else 0.0,
            links_opened=self.conns.links_opened,
            dials_failed=self.conns.dials_failed,
            final=final,
        )

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

    def push(self, t: float, kind: int, a: Any, b: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))
