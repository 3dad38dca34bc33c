"""Deterministic discrete-event simulator hosting the routing cores (the simulated runtime).

The simulator runs one routing core per broker of an overlay (a networkx graph), drives
the cores with a workload's client operations, and writes the records the emulated
runtime writes (:mod:`nodes.broker`, :mod:`nodes.client`, :mod:`nodes.overlay_link`), so
analysis does not care which runtime produced a run. Modelling choices:

- **Links.** Every overlay edge is two directed links, each with its own FIFO output
  queue, bandwidth and propagation latency (edge attributes ``bw_mbps``, ``delay_ms``,
  ``loss_pct``; missing ones take the ``default_*`` arguments, whose defaults match
  :class:`topologies.links.LinkParams`; ``bw_mbps=None`` is an unshaped link that
  serialises in no time). A message enqueued at ``t`` leaves the queue when the link is
  free, ``start = max(t, end of the previous message)``, takes ``frame_size * 8 / bw``
  to serialise (the frame of :mod:`nodes.frames`, length prefix included, no TCP/IP
  headers) and arrives ``delay_ms`` after its last bit left. Queues are unbounded, like
  the emulated broker's application-level output queue.
- **NICs.** A broker with a ``nic_mbps`` node attribute sends every frame, on any of its
  links, through that one interface as well (a host on a switch has one access link for
  all its overlay links): frames leave in enqueue order, each when both its link and
  the NIC are free, at the slower of the two rates. Without it, links are independent.
- **Loss.** With ``loss_pct`` > 0 a message that leaves the queue is lost on the wire
  with that probability, drawn from the link's own ``random.Random(f"{seed}:{src}:{dst}")``
  (the emulated broker seeds its links the same way), so one link's drops do not depend
  on traffic elsewhere. This is a lossy message link; TCP under netem loss would
  retransmit instead, so keep loss at 0 when cross-checking the runtimes.
- **Queue statistics** (:class:`nodes.core.LinkWindow`): windows end at
  ``k * window_ms`` (k = 1, 2, ...) and are processed before events scheduled at exactly
  that time. A message counts in when it is enqueued and out when it leaves the queue
  for the wire; ``queue_len`` counts messages still waiting at the window's end. As in
  the emulated broker, a link's ``queue`` record is written only for windows in which it
  was active (any non-zero figure) or was active in the window before, so every return
  to idle is visible and a missing window means all zeros. A broker's core gets
  :class:`~nodes.core.LinkStats` (all of its links) for exactly the windows in which one
  of its links has a record; the emulated broker feeds every window, but a window of
  zeros after a window of zeros tells a core nothing new, and skipping them lets idle
  brokers cost nothing.
- **Clients** are not cores: each is attached to its broker by a zero-latency,
  infinitely fast local link. A client operation becomes a
  :class:`~nodes.core.FromClient` event at ``op.t_s``; a :class:`~nodes.core.Deliver`
  reaches the client at the same instant. As the emulated client does, every PUBLISH is
  stamped with ``payload["t_pub"]`` = its send time on the wall-clock scale of the logs.
- **Time** is simulated seconds from 0; ``t_wall`` in logs (and ``t_pub``) is
  :data:`SIM_EPOCH_S` plus simulated time. Events at the same time run in the order they
  were scheduled (a sequence counter breaks ties), so the same inputs and seed give
  byte-identical logs.
- **IMs** are counted when a message leaves a link's output queue for the wire (its
  ``send`` record), as in the emulated broker: a message still queued at the end, or
  queued at a broker that died, is not an IM.
- **Records.** ``send`` when a message leaves a link's output queue (as in
  :mod:`nodes.overlay_link`), ``drop`` (reason ``loss``) right after it for a lost one,
  ``recv`` on arrival, ``deliver`` at the broker and ``recv`` at the client (both with
  ``t_pub``), client ``send`` (with ``t_pub`` for PUBLISH) and broker ``recv`` for a
  client operation, ``record`` for a core's :class:`~nodes.core.Record`, ``queue`` per
  window. ``log_messages=False`` writes only the ``queue`` records.
- **Delays** come from simulated times, not from the rounded logs, with the
  definitions of :mod:`nodes.summary`: notification delay is delivery time minus the
  publication's send time; advertisement and subscription delay run from the client's
  send until the last broker the operation reaches has it (per broker the first
  inter-broker arrival of a message carrying it, see :data:`nodes.summary.CARRIES`).
  Matching delay is the one measured figure: the wall time (``time.perf_counter``) a
  core's ``handle`` takes for a notification on this machine, as the emulated broker
  measures it; simulated time does not advance for it, and it stays out of the logs,
  which therefore remain byte-identical for a seed.
- **Table sizes** are read at the end of the run from cores that have tables
  (:class:`nodes.hosting.HasTables`, keys ``srt``, ``prt``); others count 0, and
  per-broker counters from cores that count (:class:`nodes.hosting.HasCounters`); with
  logs, each live broker also logs them as the emulated broker does at stop.
- **Failures.** ``kill_at`` maps a broker to the time its process dies (SIGKILL in the
  emulated runtime): from then on its core gets no event, its clients' operations are
  not carried out, and messages from or to it that arrive later are dropped (a killed
  process's sockets are reset, so what it had not yet delivered is lost). Each live
  neighbour gets :class:`~nodes.core.LinkDown` (and a ``link`` record ``state: down``)
  one link delay after the death, as the emulated broker does when the dead process's
  connection ends (:mod:`nodes.hosting`); whether a core acts on it is the core's
  reading (LBDD's agents detect failures by heartbeats only, as the paper does).
- **Rate changes.** ``link_changes`` lists ``(t_s, a, b, bw_mbps)``: from ``t_s`` on, the
  link between brokers a and b (both directions) serialises at ``bw_mbps``. Messages
  enqueued before ``t_s`` keep the departure times they were given at the old rate (a
  simplification: the emulated runtime's HTB class changes under the queued packets too).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from nodes.core import (
    Action,
    Arrived,
    Deliver,
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
from nodes.cores import CoreFactory, make_core, overlay_params
from nodes.frames import frame_size
from nodes.hosting import (
    HasCounters,
    HasTables,
    bad_action,
    final_records,
    handle_timed,
    merge_params,
)
from nodes.logs import Ev, JsonlLog, message_fields
from nodes.messages import Message, MsgType
from nodes.runfolder import log_path
from nodes.summary import (
    CARRIES,
    MATCHED_TYPES,
    TABLE_KINDS,
    MsgKey,
    build_summary,
    propagation_delays,
)

if TYPE_CHECKING:  # only for annotations: the simulator reads ops and clients, nothing else
    from nodes.workloads.ops import ClientOp, Workload

SIM_EPOCH_S = 1_704_067_200.0  # 2024-01-01T00:00:00Z: fixed so logs do not depend on the day
MAX_OPEN_LOGS = 512  # log files kept open at once; others are reopened in append mode

# Heap entries are (time_s, seq, kind, a, b); seq is unique, so a and b are never compared.
_OP, _ARRIVE, _TIMER, _DEPART, _KILL, _RATE, _DOWN = 0, 1, 2, 3, 4, 5, 6
_CARRIES = {MsgType[msg]: MsgType[op] for msg, op in CARRIES.items()}
_MATCHED = frozenset(MsgType[name] for name in MATCHED_TYPES)

ParamsArg = Mapping[str, Any] | Callable[[str], Mapping[str, Any]]
_SentKey = tuple[MsgType, str, int]


@dataclass
class SimResult:
    """What one simulated run produced (all of it deterministic for a given seed).

    ``deliveries`` lists, per notification (origin, msg_id), the subscribers it reached in
    delivery order, one entry per delivery (duplicates stay visible). ``ims_by_type``
    counts inter-broker messages (Send actions) by type name. ``delays_s`` has samples
    per kind (``notification``: one per delivery; ``advertisement`` and
    ``subscription``: one per propagated message). ``table_sizes`` lists, per table kind,
    one size per broker in sorted broker order. ``events`` counts client operations,
    arrivals and timers processed; ``end_s`` is the time of the last of them.
    ``counters`` maps each broker whose core counts (``counters()``) to its counters.
    """

    algorithm: str
    published: int
    deliveries: dict[MsgKey, list[str]]
    ims_by_type: dict[str, int]
    delays_s: dict[str, list[float]]
    table_sizes: dict[str, list[int]]
    record_counts: dict[str, int]
    lost: int
    events: int
    end_s: float
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # From the first publication's send to the last notification's delivery (seconds), the
    # summary's duration_s in both runtimes; 0 without deliveries.
    span_s: float = 0.0
    # The one figure that is not deterministic: seconds (time.perf_counter) each core
    # handle of a notification took, the matching delay; left out of comparisons.
    matching_s: list[float] = field(default_factory=list, compare=False, repr=False)


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


def simulate(
    overlay: nx.Graph,
    workload: Workload,
    core: str | CoreFactory,
    core_params: ParamsArg | None = None,
    *,
    seed: int,
    out_dir: Path | None = None,
    window_ms: float = 50.0,
    until_s: float | None = None,
    log_messages: bool = True,
    default_bw_mbps: float | None = None,
    default_delay_ms: float = 0.0,
    default_loss_pct: float = 0.0,
    kill_at: Mapping[str, float] | None = None,
    link_changes: Sequence[tuple[float, str, str, float]] = (),
    derived: Mapping[str, Mapping[str, Any]] | None = None,
) -> SimResult:
    """Run ``workload`` over ``overlay`` with routing core ``core`` at every broker.

    ``core`` is a name from :data:`nodes.cores.CORES` (the params it derives from the
    overlay graph, node and edge attributes included, see
    :func:`nodes.cores.overlay_params`, are merged with ``core_params``; a run plan
    passes what it derived as ``derived``) or a factory.
    ``core_params`` is one mapping for every broker or a function of the broker name.
    With ``out_dir`` every broker and client gets ``<node>.jsonl`` there (overwritten).
    Events after ``until_s`` are not processed. ``seed`` seeds the links' loss draws.
    ``kill_at`` maps brokers to the times they die, ``link_changes`` lists rate changes
    ``(t_s, a, b, bw_mbps)`` (see the module docstring for both).
    """
    if window_ms <= 0:
        raise ValueError(f"window_ms must be > 0, got {window_ms}")
    sim = _Sim(
        overlay,
        workload,
        core,
        core_params,
        seed=seed,
        out_dir=out_dir,
        window_s=window_ms / 1000.0,
        log_messages=log_messages,
        defaults=(default_bw_mbps, default_delay_ms, default_loss_pct),
        kill_at=kill_at or {},
        link_changes=link_changes,
        derived=derived,
    )
    try:
        return sim.run(until_s)
    finally:
        if sim.logs is not None:
            sim.logs.close()


def summarize(
    result: SimResult, expected: Mapping[MsgKey, frozenset[str]], *, scale: float = 1.0
) -> dict[str, Any]:
    """The summary.json object of a simulated run against the oracle's ``expected``."""
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


def _link_number(key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValueError(f"link attribute {key}={value!r} outside [{lo}, {hi}]")
    return float(value)


class _Sim:
    """The simulator state; the event loop is in :meth:`run`.

    Links are integers in (source, destination) name order, and per-link state lives in
    parallel lists indexed by link, which keeps the hot loop free of object creation.
    """

    def __init__(
        self,
        overlay: nx.Graph,
        workload: Workload,
        core: str | CoreFactory,
        core_params: ParamsArg | None,
        *,
        seed: int,
        out_dir: Path | None,
        window_s: float,
        log_messages: bool,
        defaults: tuple[float | None, float, float],
        kill_at: Mapping[str, float],
        link_changes: Sequence[tuple[float, str, str, float]] = (),
        derived: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        brokers = sorted(overlay.nodes)
        if any(not isinstance(b, str) for b in brokers):
            raise ValueError("overlay nodes must be broker names (str)")
        self.brokers = brokers
        self.bidx = bidx = {b: i for i, b in enumerate(brokers)}
        strangers = sorted(set(kill_at) - set(bidx))
        if strangers:
            raise ValueError(f"kill_at names brokers not in the overlay: {strangers}")
        self.kill_at = {bidx[b]: float(t) for b, t in kill_at.items()}
        self.dead: set[int] = set()
        self.window_s = window_s
        self.workload = workload

        # ---- links
        bw_default, delay_default, loss_default = defaults
        directed: list[tuple[str, str, float | None, float, float]] = []
        for a, b, data in overlay.edges(data=True):
            if a == b:
                continue
            bw = data.get("bw_mbps", bw_default)
            if bw is not None:
                bw = _link_number("bw_mbps", bw, 1e-9, math.inf)
            delay = _link_number("delay_ms", data.get("delay_ms", delay_default), 0.0, math.inf)
            loss = _link_number("loss_pct", data.get("loss_pct", loss_default), 0.0, 100.0)
            directed.append((a, b, bw, delay, loss))
            directed.append((b, a, bw, delay, loss))
        directed.sort()
        self.link_src = [bidx[a] for a, _, _, _, _ in directed]
        self.link_dst = [bidx[b] for _, b, _, _, _ in directed]
        self.link_src_name = [a for a, _, _, _, _ in directed]
        self.link_dst_name = [b for _, b, _, _, _ in directed]
        self.s_per_byte = [0.0 if bw is None else 8.0 / (bw * 1e6) for _, _, bw, _, _ in directed]
        self.delay_s = [d / 1000.0 for _, _, _, d, _ in directed]
        self.loss_p = [p / 100.0 for _, _, _, _, p in directed]
        self.link_rng = [
            random.Random(f"{seed}:{a}:{b}") if p > 0 else None for a, b, _, _, p in directed
        ]
        n_links = len(directed)
        self.busy_until = [0.0] * n_links
        nics = [overlay.nodes[b].get("nic_mbps") for b in brokers]
        self.nic_s_per_byte = [0.0 if bw is None else 8.0 / (_link_number("nic_mbps", bw, 1e-9,
                                                                          math.inf) * 1e6)
                               for bw in nics]
        self.nic_busy_until = [0.0] * len(brokers)
        self.tx_starts: list[deque[float]] = [deque() for _ in range(n_links)]
        self.count_in = [0] * n_links
        self.active: set[int] = set()  # links with figures to report at the next window
        self.out_links: list[dict[str, int]] = [{} for _ in brokers]
        for lid, (a, b, _, _, _) in enumerate(directed):
            self.out_links[bidx[a]][b] = lid
        self.rate_changes: list[tuple[float, list[int], float]] = []
        for t_s, a, b, bw in link_changes:
            lids = [self.out_links[bidx[x]].get(y) for x, y in ((a, b), (b, a))
                    if x in bidx and y in bidx]
            if len(lids) != 2 or None in lids:
                raise ValueError(f"link_changes: {a}-{b} is not an overlay link")
            bw = _link_number("bw_mbps", bw, 1e-9, math.inf)
            self.rate_changes.append((float(t_s), lids, 8.0 / (bw * 1e6)))

        # ---- clients
        clashes = sorted(set(workload.clients) & set(bidx))
        if clashes:
            raise ValueError(f"clients named like brokers (one log file each): {clashes}")
        self.clients_of: list[set[str]] = [set() for _ in brokers]
        for client, broker in sorted(workload.clients.items()):
            if broker not in bidx:
                raise ValueError(f"client {client} is attached to {broker}, not in the overlay")
            self.clients_of[bidx[broker]].add(client)
        for op in workload.ops:
            if workload.clients.get(op.client) != op.broker:
                raise ValueError(f"op at {op.t_s} s: client {op.client} is not attached to "
                                 f"{op.broker} in the workload's client map")

        # ---- cores
        if isinstance(core, str):
            self.algorithm = core
            if derived is None:
                derived = overlay_params(core, overlay)
            factory: CoreFactory = partial(make_core, core)
        else:
            self.algorithm = getattr(core, "__name__", type(core).__name__)
            derived = derived or {}
            factory = core
        self.cores: list[RoutingCore] = []
        for b in brokers:
            if core_params is None:
                user: Mapping[str, Any] = {}
            elif callable(core_params):
                user = core_params(b)
            else:
                user = core_params
            params = merge_params(derived.get(b, {}), user)
            self.cores.append(factory(b, tuple(sorted(overlay.neighbors(b))), params))

        self.logs = (
            _Logs(out_dir, [*brokers, *sorted(workload.clients)]) if out_dir is not None else None
        )
        # The per-message writer, or None when per-message logs are off.
        self.log = self.logs.write if log_messages and self.logs is not None else None

        # ---- results
        self.heap: list[tuple[Any, ...]] = []
        self.seq = 0
        self.deliveries: dict[MsgKey, list[str]] = {}
        self.ims: Counter[MsgType] = Counter()
        self.records: Counter[str] = Counter()
        self.notification_delays: list[float] = []
        # Wall time of core.handle per notification (nodes.summary's matching delay):
        # it depends on the machine, so it goes to the summary only, never to a log.
        self.matching_s: list[float] = []
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
        self.size_cache: dict[_SentKey, tuple[dict[str, Any], int]] = {}

    # ---- event loop ---------------------------------------------------------------------

    def run(self, until_s: float | None) -> SimResult:
        ops = self.workload.ops
        heap = self.heap
        heap.extend((op.t_s, i, _OP, op, None) for i, op in enumerate(ops))
        heap.extend((t, len(ops) + i, _KILL, bi, None)
                    for i, (bi, t) in enumerate(sorted(self.kill_at.items())))
        base = len(heap)
        heap.extend((t, base + i, _RATE, lids, s_per_byte)
                    for i, (t, lids, s_per_byte) in enumerate(self.rate_changes))
        heapq.heapify(heap)
        self.seq = len(heap)
        dead = self.dead
        horizon = math.inf if until_s is None else until_s
        window_s = self.window_s
        k = 1
        window_t = window_s
        events = 0
        end_s = 0.0
        cores = self.cores
        link_dst = self.link_dst
        link_src_name = self.link_src_name
        act = self._act
        pop = heapq.heappop
        log = self.log
        carries = _CARRIES
        sent_at = self.sent_at
        reached_by = self.reached_by
        reached_at = self.reached_at
        while True:
            t = heap[0][0] if heap else math.inf
            if self.active and window_t <= t:
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
            if kind == _KILL:
                dead.add(a)
                self._announce_death(a, t)
                continue
            if kind == _DOWN:
                if a not in dead:
                    link = self.brokers[b]
                    if log is not None:
                        log(self.brokers[a], Ev.LINK, t, link=link, role="broker",
                            state="down", reason="peer died")
                    act(a, cores[a].handle(LinkDown(link), t), t)
                    events += 1
                    end_s = t
                continue
            if kind == _RATE:
                for lid in a:
                    self.s_per_byte[lid] = b
                continue
            if dead and self._at_dead_broker(kind, a):
                continue
            if kind == _ARRIVE:
                dst = link_dst[a]
                src = link_src_name[a]
                if log is not None:
                    log(self.brokers[dst], Ev.RECV, t, link=src, **message_fields(b))
                op_type = carries.get(b.type)
                if op_type is not None:
                    key = (op_type, b.origin, b.msg_id)
                    if key in sent_at:
                        reached = reached_by.setdefault(key, set())
                        if dst not in reached:  # later copies reach no new broker
                            reached.add(dst)
                            reached_at[key] = t
                actions, took_s = handle_timed(cores[dst], Arrived(src, b), t, b.type)
                if took_s is not None:
                    self.matching_s.append(took_s)
                act(dst, actions, t)
            elif kind == _OP:
                self._client_op(a, t)
            elif kind == _TIMER:
                act(a, cores[a].handle(TimerFired(b), t), t)
            else:  # _DEPART: a queue hands a frame to the wire; no core sees it
                self._departed(a, b[0], b[1], t)
                continue
            events += 1
            end_s = t
        return self._result(events, end_s)

    def _announce_death(self, bi: int, t: float) -> None:
        """Broker ``bi`` died at ``t``: each live neighbour loses its link one link delay
        later (when the dead process's FIN or RST would reach it)."""
        for nb, lid in sorted(self.out_links[bi].items()):
            nbi = self.bidx[nb]
            if nbi not in self.dead:
                self.seq += 1
                heapq.heappush(self.heap, (t + self.delay_s[lid], self.seq, _DOWN, nbi, bi))

    def _at_dead_broker(self, kind: int, a: Any) -> bool:
        """Whether a heap entry concerns a dead broker, and so never happens."""
        if kind == _TIMER:
            return a in self.dead
        if kind == _OP:
            return self.bidx[a.broker] in self.dead
        # a is a link: a dead sender's frames are lost, and so is what reaches the dead.
        if kind == _DEPART:
            return self.link_src[a] in self.dead
        return self.link_src[a] in self.dead or self.link_dst[a] in self.dead

    def _client_op(self, op: ClientOp, t: float) -> None:
        """A client sends ``op.msg`` to its broker at ``t``."""
        msg: Message = op.msg
        extra: dict[str, Any] = {}
        if msg.type is MsgType.PUBLISH:
            self.published += 1
            self.first_pub_s = min(self.first_pub_s, t)
            extra["t_pub"] = SIM_EPOCH_S + t
            msg = replace(msg, payload={**msg.payload, "t_pub": extra["t_pub"]})
        self.sent_at[(msg.type, msg.origin, msg.msg_id)] = t
        if self.log is not None:
            fields = message_fields(msg)
            self.log(op.client, Ev.SEND, t, link=op.broker, **extra, **fields)
            self.log(op.broker, Ev.RECV, t, link=op.client, **fields)
        bi = self.bidx[op.broker]
        actions, took_s = handle_timed(self.cores[bi], FromClient(op.client, msg), t, msg.type)
        if took_s is not None:
            self.matching_s.append(took_s)
        self._act(bi, actions, t)

    def _act(self, bi: int, actions: list[Action], now: float) -> None:
        """Carry out one core's actions at time ``now``."""
        log = self.log
        broker = self.brokers[bi]
        for action in actions:
            cls = type(action)
            if cls is Send:
                lid = self.out_links[bi].get(action.link)
                if lid is None:
                    raise bad_action(broker, action, neighbour=False)
                msg = action.msg
                ckey = (msg.type, msg.origin, msg.msg_id)
                cached = self.size_cache.get(ckey)
                if cached is not None and cached[0] is msg.payload:
                    size = cached[1]
                else:
                    size = frame_size(msg)
                    self.size_cache[ckey] = (msg.payload, size)
                start = self.busy_until[lid]
                if start < now:
                    start = now
                nic = self.nic_s_per_byte[bi]
                if nic:
                    start = max(start, self.nic_busy_until[bi])
                    end = self.nic_busy_until[bi] = start + size * max(nic, self.s_per_byte[lid])
                else:
                    end = start + size * self.s_per_byte[lid]
                self.busy_until[lid] = end
                self.tx_starts[lid].append(start)
                self.count_in[lid] += 1
                self.active.add(lid)
                rng = self.link_rng[lid]
                lost = rng is not None and rng.random() < self.loss_p[lid]
                if start > now:
                    # Scheduled before the arrival, so `send` precedes `recv` even on a
                    # tie; extra sequence numbers keep the other events' order.
                    self.seq += 1
                    heapq.heappush(self.heap, (start, self.seq, _DEPART, lid, (msg, lost)))
                else:
                    self._departed(lid, msg, lost, now)
                if lost:
                    self.lost += 1
                else:
                    self.seq += 1
                    arrive = end + self.delay_s[lid]
                    heapq.heappush(self.heap, (arrive, self.seq, _ARRIVE, lid, msg))
            elif cls is Deliver:
                client = action.client
                if client not in self.clients_of[bi]:
                    raise bad_action(broker, action, local_client=False)
                msg = action.msg
                self.deliveries.setdefault(msg.key, []).append(client)
                self.last_delivery_s = now
                sent = self.sent_at.get((MsgType.PUBLISH, msg.origin, msg.msg_id))
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
                heapq.heappush(self.heap, (now + action.delay_s, self.seq, _TIMER, bi, action.name))
            else:
                raise bad_action(broker, action)

    def _departed(self, lid: int, msg: Message, lost: bool, t: float) -> None:
        """``msg`` leaves link ``lid``'s queue at ``t``: an IM (counted here, see
        :mod:`nodes.hosting`), logged with its loss on the wire."""
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
        figures: dict[int, tuple[int, int, int]] = {}
        still_active: set[int] = set()
        for lid in sorted(self.active):
            waiting = self.tx_starts[lid]
            out = 0
            while waiting and waiting[0] < t_w:
                waiting.popleft()
                out += 1
            fig = (self.count_in[lid], out, len(waiting))
            self.count_in[lid] = 0
            figures[lid] = fig
            if fig != (0, 0, 0):
                still_active.add(lid)
        # Actions taken below may enqueue: those count in the next window.
        self.active = still_active
        window_ms = self.window_s * 1000.0
        zero = LinkWindow(0, 0, 0)
        for bi in sorted({self.link_src[lid] for lid in figures} - self.dead):
            links: dict[str, LinkWindow] = {}
            for nb, lid in self.out_links[bi].items():
                fig = figures.get(lid)
                if fig is None:
                    links[nb] = zero
                    continue
                links[nb] = LinkWindow(*fig)
                if self.logs is not None:
                    self.logs.write(
                        self.brokers[bi], Ev.QUEUE, t_w, link=nb, count_in=fig[0],
                        count_out=fig[1], queue_len=fig[2], flushed=0, window_ms=window_ms,
                    )
            self._act(bi, self.cores[bi].handle(LinkStats(window_ms, links), t_w), t_w)

    def _result(self, events: int, end_s: float) -> SimResult:
        delays: dict[str, list[float]] = {
            "notification": self.notification_delays,
            **propagation_delays(
                {(t.name, o, i): s for (t, o, i), s in self.sent_at.items()},
                {(t.name, o, i): s for (t, o, i), s in self.reached_at.items()},
            ),
        }
        tables: dict[str, list[int]] = {kind: [] for kind in TABLE_KINDS}
        for bi, c in enumerate(self.cores):
            sizes: Mapping[str, int] = c.table_sizes() if isinstance(c, HasTables) else {}
            for kind in TABLE_KINDS:
                tables[kind].append(int(sizes.get(kind, 0)))
            if self.logs is not None and self.log is not None and bi not in self.dead:
                # After the last event and the last window, so every log stays in order.
                t_end = max(end_s, self.last_window_s)
                for kind, fields in final_records(c):
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
            span_s=max(0.0, self.last_delivery_s - self.first_pub_s)
            if self.last_delivery_s > self.first_pub_s else 0.0,
        )
