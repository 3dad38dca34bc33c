"""Deterministic discrete-event simulator hosting the routing cores (the simulated runtime).

The simulator runs one routing core per broker of an overlay (a networkx graph), drives
the cores with a workload's client operations, and writes the records the emulated runtime
writes (:mod:`nodes.emulated.broker`, :mod:`nodes.emulated.client`,
:mod:`nodes.emulated.overlay_link`), so analysis does not care which runtime produced a
run. This module hosts the cores and composes the model-free engine
(:mod:`nodes.sim.engine`) with the models, each holding its own state: the links
(:mod:`nodes.sim.network`, :mod:`nodes.sim.connections`), processing
(:mod:`nodes.sim.buffers`), membership (:mod:`nodes.sim.membership`) and what the run
counts (:mod:`nodes.sim.tallies`). The model in short (each point in full, under its
name, in docs/design/simulator.md; the settings named are
:class:`~nodes.sim.settings.SimSettings` fields):

- **Links**: each overlay edge is two directed FIFO links with ``bw_mbps`` (Mbit/s;
  ``None``: unshaped), ``delay_ms`` and ``loss_pct`` (missing ones take the
  ``default_*`` settings); a frame serialises in ``frame_size * 8 / bw`` and arrives
  ``delay_ms`` after its last bit left. **NICs**: a node's ``nic_mbps`` is one interface
  all its links share. **Loss** is drawn per link from
  ``random.Random(f"{seed}:{src}:{dst}")``.
- **Queue statistics**: windows end at ``k * window_ms``; a link's ``queue`` record, and a
  core's :class:`~nodes.cores.interface.LinkStats`, come only for windows in which it was
  active or was active in the window before.
- **Clients** sit on zero-latency local links. **Time** is simulated seconds from 0,
  ``t_wall`` is :data:`~nodes.sim.engine.SIM_EPOCH_S` plus it, and ties run in scheduling
  order, so the same inputs and seed give byte-identical logs. **IMs** count when a
  message leaves a link's output queue. **Delays** follow :mod:`nodes.metrics.summary` on
  simulated times; matching delay alone is measured wall time, and it stays out of the logs.
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

import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from itertools import chain
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
from nodes.hosting import (
    HasCounters,
    HasTables,
    bad_action,
    final_records,
    handle_timed,
    merge_params,
    reads_link_stats,
)
from nodes.logs import Ev, message_fields
from nodes.messages import Message, MsgType
from nodes.metrics.summary import CARRIES, TABLE_KINDS
from nodes.sim.buffers import InputBuffers
from nodes.sim.checkpoint import Pause, Paused, read_state, write_state
from nodes.sim.connections import Connections
from nodes.sim.engine import SIM_EPOCH_S, Engine, Handler, rare_full_collections
from nodes.sim.events import (
    ARRIVE,
    CLOSE,
    DEPART,
    DONE,
    DOWN,
    KILL,
    OP,
    RATE,
    REFUSE,
    TIMER,
    UP,
)
from nodes.sim.links import LinkModel
from nodes.sim.membership import Members
from nodes.sim.network import Network
from nodes.sim.node_logs import NodeLogs
from nodes.sim.result import SimResult
from nodes.sim.settings import ParamsArg, SimSettings
from nodes.sim.tallies import Tallies
from nodes.time_left import PROGRESS_EVERY_S

if TYPE_CHECKING:  # only for annotations: the simulator reads ops and clients, nothing else
    from nodes.workloads.ops import ClientOp, Workload

_MEMBERSHIP = frozenset({MsgType.JOIN, MsgType.LEAVE, MsgType.CRASH})
_CARRIES = {MsgType[msg]: MsgType[op] for msg, op in CARRIES.items()}


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
    sim = Simulation(overlay, workload, core, settings)
    sim.progress = settings.progress
    try:
        with rare_full_collections():
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
    if not isinstance(sim, Simulation):
        raise ValueError(f"{path}: not a paused simulation")
    if sim.needs_link_model != (on_demand is not None):
        raise ValueError(f"{path}: the run {'opened' if sim.needs_link_model else 'had no'} "
                         "links on demand; resume it with the same link model")
    sim.on_demand, sim.progress = on_demand, progress
    with rare_full_collections():
        return sim.proceed(pause)


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


class Simulation:
    """One run: the engine, the models, and the cores they host. The engine calls it
    through one handler per event kind (:meth:`_handlers`), the window hook
    (:meth:`_window`) and the pause hook (:meth:`_pause`); the cores' actions go out
    through :meth:`act`. It pickles whole (a pause)."""

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
        self.workload = workload
        self.engine = engine = Engine(settings.window_ms / 1000.0)

        # ---- links: fixed, then on demand (none of the connections' state is used
        # without on_demand)
        self.on_demand = settings.on_demand
        self.net = net = Network(overlay, brokers, bidx, settings.seed,
                                 (settings.default_bw_mbps, settings.default_delay_ms,
                                  settings.default_loss_pct), settings.on_demand, engine)
        self.rate_changes = net.rate_changes(settings.link_changes, bidx)
        self.conns = Connections(self)

        # ---- processing model (nodes.sim.processing)
        self.processing = processing = settings.processing
        self.progress: Callable[[float], None] | None = None
        self.buffers = InputBuffers(self, processing)

        self.clients_of = _attach_clients(workload, bidx)
        self.members = Members(self, workload.ops)
        # The members' sets themselves, never rebound: the handlers and the links test them.
        self.dead, self.dormant = self.members.dead, self.members.dormant
        self.op_work = self.members.op_work

        self.algorithm, self.cores = _make_cores(overlay, core, settings.core_params,
                                                 settings.derived)

        out_dir = settings.out_dir
        self.logs = (
            NodeLogs(out_dir, [*brokers, *sorted(workload.clients)])
            if out_dir is not None else None
        )
        # Windows are for the cores that read them and for the logs' queue records.
        self.stats_to = frozenset(bi for bi, c in enumerate(self.cores) if reads_link_stats(c))
        self.windows = self.logs is not None or bool(self.stats_to)
        # The per-message writer, or None when per-message logs are off.
        self.log = self.logs.write if settings.log_messages and self.logs is not None else None
        net.hook_up(self.buffers, processing is not None, self.log, self.windows)
        if self.log is not None:  # as the emulated broker does when it starts dormant
            for bi in sorted(self.dormant):
                self.log(brokers[bi], Ev.RECORD, 0.0, kind="membership", state="dormant")

        self.tallies = Tallies(workload.clients)
        self.last_window_s = 0.0
        self.ops_done = 0  # client operations carried out
        self.last_report = 0.0  # wall time (time.perf_counter) of the last progress call

    def __getstate__(self) -> dict[str, Any]:
        """The state a pause writes: functions do not pickle, so the link model and the
        progress callback are left out and handed in again by :func:`resume`."""
        state = self.__dict__.copy()
        state.update(on_demand=None, progress=None, needs_link_model=self.on_demand is not None)
        return state

    # ---- the engine's side ---------------------------------------------------------------

    def run(self, until_s: float | None, pause: Pause | None = None) -> SimResult:
        """Start the run: the client operations and the scheduled deaths and rate
        changes go on the heap, then :meth:`proceed`."""
        self.engine.start(chain(
            ((op.t_s, OP, op, None) for op in self.workload.ops),
            ((t, KILL, bi, None) for bi, t in sorted(self.kill_at.items())),
            ((t, RATE, lids, s_per_byte) for t, lids, s_per_byte in self.rate_changes),
        ), until_s)
        return self.proceed(pause)

    def proceed(self, pause: Pause | None) -> SimResult:
        """The events, from where :meth:`run` or a pause left them, to the end of the
        run or, with ``pause``, until its deadline (then
        :class:`~nodes.sim.checkpoint.Paused`)."""
        self.last_report = time.perf_counter()
        events, end_s = self.engine.run(
            self._handlers(), window=self._window if self.windows else None,
            pending=self.net.active, pause=pause, checkpoint=self._pause)
        return self._result(events, end_s)

    def _handlers(self) -> list[Handler]:
        """One handler per event kind (:mod:`nodes.sim.events`), over bound locals: the
        sets and lists they read are changed in place, never rebound."""
        dead, gone, dormant = self.dead, self.net.cut, self.dormant
        net, conns, buffers, cores = self.net, self.conns, self.buffers, self.cores
        link_dst, s_per_byte = net.link_dst, net.s_per_byte
        act, handle_frame, departed = self.act, self.handle_frame, net.departed
        at_dead_broker, announce_death = self.members.at_dead_broker, self.members.announce_death
        take_in, serve, free = buffers.take_in, buffers.serve, buffers.free
        client_op, progress, op_work = self._client_op, self.progress, self.op_work
        proc = self.processing is not None
        brokers, log = self.brokers, self.log
        perf_counter = time.perf_counter

        # With no broker dead and no connection cut, only an arrival at a dormant broker
        # is dropped (a 10,000-peer run has dormant peers until its last join, and asked
        # at_dead_broker of every event).
        def op(a: ClientOp, b: None, t: float) -> bool:
            if (dead or gone) and at_dead_broker(OP, a, b, t):
                return False
            client_op(a, t)
            self.ops_done = done = self.ops_done + 1
            if progress is not None and done % 256 == 0:
                wall = perf_counter()
                if wall - self.last_report >= PROGRESS_EVERY_S:
                    self.last_report = wall
                    progress(op_work[done - 1] / op_work[-1])
            return True

        def arrive(lid: int, msg: Message, t: float) -> bool:
            dst = link_dst[lid]
            if (dead or gone or dst in dormant) and at_dead_broker(ARRIVE, lid, msg, t):
                return False
            act(dst, handle_frame(lid, msg, t), t)
            return True

        def arrive_to_buffer(lid: int, msg: Message, t: float) -> bool:
            # Into the input buffer; handled when the broker gets to it.
            dst = link_dst[lid]
            if (dead or gone or dst in dormant) and at_dead_broker(ARRIVE, lid, msg, t):
                free(dst, t)  # dropped: its place in the window frees
                return False
            take_in(dst, (lid, msg, ""), t)
            return False

        def timer(bi: int, name: str, t: float) -> bool:
            if (dead or gone) and at_dead_broker(TIMER, bi, name, t):
                return False
            act(bi, cores[bi].handle(TimerFired(name), t), t)
            return True

        def depart(lid: int, frame: tuple[Message, bool], t: float) -> bool:
            # A queue hands a frame to the wire; no core sees it.
            if (dead or gone) and at_dead_broker(DEPART, lid, frame, t):
                return False
            departed(lid, frame[0], frame[1], t)
            return False

        def kill(bi: int, _: None, t: float) -> bool:
            dead.add(bi)
            announce_death(bi, t)
            if proc:
                buffers.death(bi, t)
            return False

        def rate(lids: list[int], s: float, t: float) -> bool:
            for lid in lids:
                s_per_byte[lid] = s
            return False

        def down(bi: int, peer: int, t: float) -> bool:
            if bi in dead:
                return False
            link = brokers[peer]
            if log is not None:
                log(brokers[bi], Ev.LINK, t, link=link, role="broker", state="down",
                    reason="peer died")
            act(bi, cores[bi].handle(LinkDown(link), t), t)
            return True

        def done(bi: int, actions: list[Action], t: float) -> bool:
            # The broker has handled a message: its actions go out.
            if (dead or gone) and at_dead_broker(DONE, bi, actions, t):
                return False
            act(bi, actions, t)
            serve(bi, t)
            return True

        by_kind: dict[int, Handler] = {
            OP: op, ARRIVE: arrive_to_buffer if proc else arrive, TIMER: timer,
            DEPART: depart, KILL: kill, RATE: rate, DOWN: down, DONE: done,
            UP: conns.up, CLOSE: conns.closed_by_peer, REFUSE: conns.dial_refused}
        return [by_kind[kind] for kind in range(len(by_kind))]

    def _pause(self, path: Path) -> None:
        """Write the run's state to ``path`` and raise :class:`~nodes.sim.checkpoint.Paused`."""
        ops_done = self.ops_done
        done = self.op_work[ops_done - 1] / self.op_work[-1] if ops_done else 0.0
        try:
            write_state(self, path)
        except OSError as exc:  # a full disk, say: the run is lost, say why in one line
            raise RuntimeError(f"cannot write the paused state to {path}: "
                               f"{exc.strerror or exc}") from None
        raise Paused(path, done, self.engine.heap[0][0])

    def _window(self, t_w: float) -> None:
        """Close the statistics window ending at ``t_w``: log it and feed the cores."""
        self.last_window_s = t_w
        net = self.net
        # Actions taken below may enqueue: those count in the next window.
        figures = net.window_figures(t_w, self.buffers.held)
        window_ms = self.engine.window_s * 1000.0
        zero = LinkWindow(0, 0, 0)
        # Closed links opened on demand are in no out_links, but their last frames count.
        closed: dict[int, list[int]] = {}
        if self.conns.closed:
            for lid in figures:
                if lid in self.conns.closed:
                    closed.setdefault(net.link_src[lid], []).append(lid)
        for bi in sorted({net.link_src[lid] for lid in figures} - self.dead):
            links: dict[str, LinkWindow] = {}
            for nb, lid in net.out_links[bi].items():
                if lid in self.conns.waiting:  # not up yet: the core has not heard of it
                    continue
                fig = figures.get(lid)
                if fig is None:
                    links[nb] = zero
                    continue
                links[nb] = LinkWindow(*fig)
                if self.logs is not None:
                    self.logs.write(
                        self.brokers[bi], Ev.QUEUE, t_w, link=nb, count_in=fig[0],
                        count_out=fig[1], queue_len=fig[2], flushed=net.flushed.pop(lid, 0),
                        window_ms=window_ms,
                    )
            for lid in closed.get(bi, ()):
                fig = figures[lid]
                if self.logs is not None:
                    self.logs.write(
                        self.brokers[bi], Ev.QUEUE, t_w, link=net.link_dst_name[lid],
                        count_in=fig[0], count_out=fig[1], queue_len=fig[2],
                        flushed=net.flushed.pop(lid, 0), window_ms=window_ms,
                    )
            if bi in self.dormant or bi not in self.stats_to:  # dormant, or not a reader
                continue
            self.act(bi, self.cores[bi].handle(LinkStats(window_ms, links), t_w), t_w)

    # ---- the cores' side -----------------------------------------------------------------

    def _client_op(self, op: ClientOp, t: float) -> None:
        """A client sends ``op.msg`` to its broker at ``t``."""
        msg: Message = op.msg
        extra: dict[str, Any] = {}
        if msg.type in _MEMBERSHIP:
            self.members.member_op(op, t)
            return
        tallies = self.tallies
        if msg.type is MsgType.PUBLISH:
            tallies.published += 1
            tallies.first_pub_s = min(tallies.first_pub_s, t)
            extra["t_pub"] = SIM_EPOCH_S + t
            msg = replace(msg, payload={**msg.payload, "t_pub": extra["t_pub"]})
        tallies.sent_at[(msg.type, msg.origin, msg.msg_id)] = t
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
            self.tallies.matching_s.append(took_s)
        return actions

    def handle_frame(self, lid: int, msg: Message, t: float) -> list[Action]:
        """The receiving broker's core handles the frame that came over link ``lid``."""
        net = self.net
        dst = net.link_dst[lid]
        src = net.link_src_name[lid]
        if self.log is not None:
            self.log(self.brokers[dst], Ev.RECV, t, link=src, **message_fields(msg))
        op_type = _CARRIES.get(msg.type)
        if op_type is not None:
            self.tallies.reached((op_type, msg.origin, msg.msg_id), dst, t, msg.hops)
        actions, took_s = handle_timed(self.cores[dst], Arrived(src, msg), t, msg.type)
        if took_s is not None:
            self.tallies.matching_s.append(took_s)
        return actions

    def act(self, bi: int, actions: list[Action], now: float) -> None:
        """Carry out one core's actions at time ``now``."""
        log = self.log
        broker = self.brokers[bi]
        net = self.net
        out_links = net.out_links[bi]
        waiting = self.conns.waiting
        # A core delivers one message to many clients in a row (Meghdoot: one event to
        # every matching client of a peer), so its entries are looked up once a message
        # object, not once a delivery.
        last: Message | None = None
        tallies = self.tallies
        deliveries = tallies.deliveries
        numbers = deliveries.numbers
        clients = self.clients_of[bi]
        got = array("i")
        sent: float | None = None
        # Every delivery of one message here has the same delay (now - sent): counted,
        # and taken as a run of samples when the message changes or the actions end
        # (one call a message rather than one a delivery; the samples' order is the same).
        delayed = 0
        for action in actions:
            cls = type(action)
            if cls is Send:
                lid = out_links.get(action.link)
                if lid is None or lid in waiting:
                    if self.on_demand is None:
                        raise bad_action(broker, action, neighbour=False)
                    self.conns.send(bi, action.link, action.msg, now)
                else:
                    net.enqueue(bi, lid, action.msg, now)
            elif cls is Deliver:
                client = action.client
                if client not in clients:
                    raise bad_action(broker, action, local_client=False)
                msg = action.msg
                if msg is not last:
                    if delayed:
                        tallies.notification_delays.repeat(now - sent, delayed)
                        delayed = 0
                    last = msg
                    got = deliveries.of(msg.key)
                    sent = tallies.sent_at.get((MsgType.PUBLISH, msg.origin, msg.msg_id))
                    tallies.last_delivery_s = now
                got.append(numbers[client])
                if sent is not None:
                    delayed += 1
                if log is not None:
                    t_pub = msg.payload.get("t_pub")
                    fields = message_fields(msg)
                    log(broker, Ev.DELIVER, now, link=client, t_pub=t_pub, **fields)
                    log(client, Ev.RECV, now, link=broker, t_pub=t_pub, **fields)
            elif cls is Record:
                tallies.records[action.kind] += 1
                if log is not None:
                    log(broker, Ev.RECORD, now, kind=action.kind, **action.fields)
            elif cls is SetTimer:
                self.engine.push(now + action.delay_s, TIMER, bi, action.name)
            elif cls is Disconnect:
                if self.on_demand is None:
                    raise ValueError(f"core at {broker} returned {action!r}: links are fixed "
                                     "here (SimSettings.on_demand opens them on demand)")
                self.conns.disconnect(bi, action.link, now)
            else:
                raise bad_action(broker, action)
        if delayed:
            tallies.notification_delays.repeat(now - sent, delayed)

    def _result(self, events: int, end_s: float) -> SimResult:
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
        tallies = self.tallies
        return SimResult(
            algorithm=self.algorithm,
            published=tallies.published,
            deliveries=tallies.deliveries,
            ims_by_type={t.name: n for t, n in sorted(self.net.ims.items())},
            delays_s=tallies.delays_s(),
            hops=tallies.hops(),
            table_sizes=tables,
            record_counts=dict(sorted(tallies.records.items())),
            lost=self.net.lost,
            events=events,
            end_s=end_s,
            counters={b: dict(c.counters()) for b, c in zip(self.brokers, self.cores, strict=True)
                      if isinstance(c, HasCounters)},
            matching_s=tallies.matching_s,
            busy_s=({b: round(s, 9) for b, s in zip(self.brokers, self.buffers.busy_s, strict=True)}
                    if self.processing is not None else {}),
            wait_s=self.buffers.wait_s,
            span_s=tallies.span_s(),
            links_opened=self.conns.links_opened,
            dials_failed=self.conns.dials_failed,
            final=final,
        )
