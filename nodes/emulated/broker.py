"""The broker process of the emulated runtime: one routing core, its overlay links, its clients.

Run ``python -m nodes.emulated.broker --config PATH`` (or ``pubsublab-broker --config PATH``).

Config (one JSON object; missing required and unknown keys are errors, never ignored)::

    broker             str          this broker's name
    listen             [ip, port]   where neighbour brokers and local clients connect
    neighbours         {name: {"addr": [ip, port], "delay_ms": 0.0, "loss_pct": 0.0,
                         "rate_mbps": null}}
                         rate_mbps: a per-stream cap the broker paces its link to
                         (nodes.emulated.overlay_link), whatever the mechanism of delay and loss
    core               {"name": str, "params": {...}}
                         name: a core of the nodes.cores registry (make_core); params
                         go to it unchanged (e.g. flood's tree_neighbours, which a
                         runner derives with nodes.cores.overlay_params)
    log_dir            path         <log_dir>/<broker>.jsonl and <broker>.status.json
    secret             hex str      the run's secret, which every HELLO must prove
                                    (nodes.emulated.auth; never logged)
    emulate_link       bool = false apply delay_ms/loss_pct in this broker (one way, on
                                    its sending side; the kernel has no netem); when false
                                    netem carries them and the broker only logs them
    window_ms          float = 50   link statistics window
    seed               int = 0      seeds each link's loss draws (with both names)
    link_timeout_s     float = 5    an overlay link silent this long is down (keepalive)
    connect_timeout_s  float = 3    bound on one dial attempt (TCP connect + HELLO
                                    exchange); an accepted peer's first HELLO has
                                    hello_timeout_s (nodes.emulated.admission)
    backoff_s          [0.1, 2.0]   first and largest redial delay
    write_buffer_bytes int | null   cap on every connection's kernel send buffer (overlay
                                    and client), so a slow link backs up into the output
                                    queue (see nodes.emulated.overlay_link); null: the kernel's
    read_buffer_bytes  int | null   cap on every connection's kernel receive buffer, so a
                                    broker behind its publishers slows them within a bounded
                                    delay (nodes.emulated.runtime.SocketBuffers); null: the kernel's
    peers              {name: [ip, port] or {"addr": [ip, port], "delay_ms": 0.0,
                         "loss_pct": 0.0}} = {}
                                    brokers this one may open links to on demand (in a
                                    run's on-demand mode: every other broker of the run);
                                    a fixed neighbour listed here stays a fixed link
    dormant            bool = false start dormant, until a local client's JOIN; only for a
                                    broker without fixed neighbours
    max_connections, max_unproven, hello_frame_bytes, client_queue_bytes,
    max_filters_per_client, read_budget_bytes, body_timeout_s, hello_timeout_s
                                    admission limits, defaults and meaning in
                                    nodes.emulated.admission
    queue_high_water_msgs int = 10000  an output queue this long stops the broker
                                    reading from its clients (overload policy, below)
    queue_max_msgs     int = 50000  an output queue this long drops what is sent to it
    log_max_mb         float = 1024 past this size the log keeps only the records that
                                    are not of single messages (nodes.logs.JsonlLog)

In short: of two fixed neighbours the smaller name dials, and redials with backoff; every
connection starts with a HELLO that proves the run's secret (:mod:`nodes.emulated.auth`;
limits in :mod:`nodes.emulated.admission`); a bad frame closes only its connection, an
exception in the core skips only that event. Every ``window_ms`` each link's figures go to
the core (:class:`~nodes.cores.interface.LinkStats`) and to the log (``queue`` records); a
notification's ``recv`` record carries ``matching_ms``; ``<broker>.status.json`` says which
links are up (``all_up``, ``missing``). Idle links carry KEEPALIVEs, and a link silent for
``link_timeout_s`` is down. Overload slows the broker's own clients, never its neighbours
(no deadlock on any overlay), and a queue at ``queue_max_msgs`` drops. Links to ``peers``
open at a core's ``Send`` and close at its ``Disconnect``; a ``dormant`` broker turns dials
away until a local client's JOIN. SIGTERM or SIGINT: links closed, status written, exit 0.

The full protocol, the records and the reasons: docs/design/broker.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import resource
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from nodes.cores import make_core
from nodes.cores.interface import (
    Action,
    Arrived,
    Deliver,
    Disconnect,
    Event,
    FromClient,
    LinkDown,
    LinkStats,
    LinkUp,
    Record,
    RoutingCore,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.emulated.admission import LIMIT_KEYS, MAX_UNPROVEN, Limits, UnprovenConnections
from nodes.emulated.admission_log import AdmissionLog
from nodes.emulated.auth import NonceLog, parse_secret
from nodes.emulated.client_link import ClientLink
from nodes.emulated.frame_protocol import read_frames
from nodes.emulated.overlay_link import OverlayLink
from nodes.emulated.overload import ClientGate
from nodes.emulated.read_budget import ReadBudget
from nodes.emulated.runtime import (
    BUFFER_KEYS,
    Backoff,
    BodyBound,
    HelloCounter,
    ProtocolError,
    Refused,
    Role,
    SocketBuffers,
    Violation,
    check_keys,
    dial,
    install_stop_signals,
    log_message_now,
    log_now,
    parse_addr,
    parse_backoff,
    parse_hello,
    peer_host,
    peer_label,
    read_message,
)
from nodes.emulated.windows import QueueWindows
from nodes.frames import FrameError, encode
from nodes.hosting import MATCHED, bad_action, final_records, reads_link_stats
from nodes.logs import (
    CONNECTION_CAP,
    DEFAULT_LOG_MAX_BYTES,
    NAME_TAKEN,
    REPLAYED,
    SLOW_CONSUMER,
    UNAUTHENTICATED,
    UNPROVEN_EVICTED,
    WRONG_ADDRESS,
    Ev,
    JsonlLog,
    message_fields,
)
from nodes.messages import Message, MsgType
from nodes.runfolder import log_path, read_json, status_path, write_json

CROSSED = "crossed"  # refusal: both brokers dialled each other; the smaller name's dial wins
DORMANT = "dormant"  # refusal: this broker has not joined (or has left)
NOFILE_BASE = 64  # the process itself: stdio, listening socket, log and status files, epoll
NOFILE_PER_LINK = 2  # a link's connection, and a crossed or replacing one beside it briefly
NOFILE_CLIENTS = 1024  # local client connections (a host's client group: one per client)
PEERS_STATUS_EVERY_S = 0.5  # on-demand link changes reach the status file at most this often
KEEPALIVE_S = 1.0  # an overlay link idle this long (s) gets a KEEPALIVE frame
LINK_TIMEOUT_S = 5.0  # an overlay link on which nothing arrived for this long (s) is down
CONNECT_TIMEOUT_S = 3.0  # default bound on one dial attempt or an accepted peer's HELLO (s)


def proven_connections(links: int) -> int:
    """The default ``max_connections`` of a broker with ``links`` neighbours and peers."""
    return NOFILE_PER_LINK * links + NOFILE_CLIENTS


def nofile_needed(links: int) -> int:
    """File descriptors a broker with ``links`` neighbours and peers may need at once, at
    the default limits (unproven connections have a budget of their own)."""
    return NOFILE_BASE + proven_connections(links) + MAX_UNPROVEN


def raise_nofile(needed: int) -> dict[str, int]:
    """Raise this process's ``RLIMIT_NOFILE`` to at least ``needed`` (the hard limit too
    where the process may, as root does); never lower it. The limits now and ``needed``
    (``-1``: unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    if soft != inf and soft < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (needed, hard if hard == inf or hard >= needed else needed))
        except (ValueError, OSError):  # raising the hard limit needs CAP_SYS_RESOURCE
            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (needed if hard == inf else min(needed, hard), hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft": soft, "hard": hard, "needed": needed}


def _peer_config(value: Any, where: str) -> NeighbourConfig:
    """A ``peers`` entry: ``[ip, port]``, or a neighbour's object."""
    if isinstance(value, list | tuple):
        return NeighbourConfig(parse_addr(value, where))
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected [ip, port] or an object, got {value!r}")
    return _neighbour_config(value, where)


def _neighbour_config(value: Mapping[str, Any], where: str) -> NeighbourConfig:
    """A neighbour's or peer's object: address, delay, loss and per-stream rate."""
    check_keys(value, {"addr"}, {"delay_ms", "loss_pct", "rate_mbps"}, where)
    rate = value.get("rate_mbps")
    if rate is not None and (type(rate) not in (int, float) or not rate > 0):
        raise ValueError(f"{where}: rate_mbps must be a positive number or null, got {rate!r}")
    return NeighbourConfig(parse_addr(value["addr"], where), float(value.get("delay_ms", 0.0)),
                           float(value.get("loss_pct", 0.0)),
                           None if rate is None else float(rate))


@dataclass(frozen=True, slots=True)
class NeighbourConfig:
    """Where a neighbour listens, the one-way delay and loss of our link to it, and the
    per-stream rate cap (Mbit/s, None: none) our link to it is paced to."""

    addr: tuple[str, int]
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    rate_mbps: float | None = None


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """A broker's settings; see the module docstring for the JSON form."""

    broker: str
    listen: tuple[str, int]
    neighbours: Mapping[str, NeighbourConfig]
    core_name: str
    log_dir: Path
    secret: bytes = field(repr=False)  # never in a log or a traceback
    limits: Limits
    core_params: Mapping[str, Any] = field(default_factory=dict)
    emulate_link: bool = False
    window_ms: float = 50.0
    seed: int = 0
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    link_timeout_s: float = LINK_TIMEOUT_S
    backoff_s: tuple[float, float] = (0.1, 2.0)
    buffers: SocketBuffers = field(default_factory=SocketBuffers)  # overlay and client
    peers: Mapping[str, NeighbourConfig] = field(default_factory=dict)
    dormant: bool = False
    queue_high_water_msgs: int = 10_000
    queue_max_msgs: int = 50_000
    log_max_mb: float = DEFAULT_LOG_MAX_BYTES / 2**20

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerConfig:
        """Validate and convert the JSON config object."""
        check_keys(obj, {"broker", "listen", "neighbours", "core", "log_dir", "secret"},
                   {"emulate_link", "window_ms", "seed", "connect_timeout_s", "link_timeout_s",
                    "backoff_s",
                    "peers", "dormant", "queue_high_water_msgs",
                    "queue_max_msgs", "log_max_mb"} | LIMIT_KEYS | BUFFER_KEYS, "broker config")
        if not isinstance(obj["neighbours"], dict) or obj["broker"] in obj["neighbours"]:
            raise ValueError("broker config: neighbours must map other brokers' names to links")
        neighbours = {}
        for name, nb in obj["neighbours"].items():
            neighbours[name] = _neighbour_config(nb, f"broker config, neighbour {name}")
        check_keys(obj["core"], {"name"}, {"params"}, "broker config, core")
        window_ms = float(obj.get("window_ms", 50.0))
        if window_ms <= 0:
            raise ValueError(f"broker config: window_ms must be positive, got {window_ms}")
        buffers = SocketBuffers.from_json(obj, "broker config")
        raw_peers = obj.get("peers", {})
        if not isinstance(raw_peers, dict) or obj["broker"] in raw_peers:
            raise ValueError("broker config: peers must map other brokers' names to addresses")
        peers = {name: _peer_config(p, f"broker config, peer {name}")
                 for name, p in raw_peers.items()}
        dormant = obj.get("dormant", False)
        if not isinstance(dormant, bool) or (dormant and neighbours):
            raise ValueError("broker config: dormant must be true or false, and a dormant "
                             "broker has no fixed neighbours (its links open on demand)")
        high = obj.get("queue_high_water_msgs", 10_000)
        cap = obj.get("queue_max_msgs", 50_000)
        if type(high) is not int or type(cap) is not int or not 1 <= high <= cap:
            raise ValueError("broker config: want integers 1 <= queue_high_water_msgs <= "
                             f"queue_max_msgs, got {high!r} and {cap!r}")
        return cls(
            broker=obj["broker"],
            listen=parse_addr(obj["listen"], "broker config, listen"),
            neighbours=neighbours,
            core_name=obj["core"]["name"],
            core_params=obj["core"].get("params", {}),
            log_dir=Path(obj["log_dir"]),
            secret=parse_secret(obj["secret"], "broker config"),
            # by default, the connections the descriptor budget counts on
            limits=Limits.from_json(obj, proven_connections(len(set(neighbours) | set(peers)))),
            emulate_link=bool(obj.get("emulate_link", False)),
            window_ms=window_ms,
            seed=int(obj.get("seed", 0)),
            connect_timeout_s=float(obj.get("connect_timeout_s", CONNECT_TIMEOUT_S)),
            link_timeout_s=_positive(obj.get("link_timeout_s", LINK_TIMEOUT_S),
                                     "link_timeout_s"),
            backoff_s=parse_backoff(obj.get("backoff_s", (0.1, 2.0)), "broker config"),
            buffers=buffers,
            peers=peers,
            dormant=dormant,
            queue_high_water_msgs=high,
            queue_max_msgs=cap,
            log_max_mb=_positive(obj.get("log_max_mb", DEFAULT_LOG_MAX_BYTES / 2**20),
                                 "log_max_mb"),
        )


def _positive(v: Any, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < float("inf"):
        raise ValueError(f"broker config: {key} must be a positive number, got {v!r}")
    return float(v)


def load_config(path: Path | str) -> BrokerConfig:
    """Read a broker config file."""
    return BrokerConfig.from_json(json.loads(Path(path).read_text(encoding="utf-8")))


def build_core(config: BrokerConfig) -> RoutingCore:
    """The routing core the config names, for this broker and its neighbours."""
    return make_core(config.core_name, config.broker, tuple(sorted(config.neighbours)),
                     config.core_params)


class Broker:
    """Hosts one routing core: carries its actions out, feeds it events (see module doc)."""

    def __init__(self, config: BrokerConfig, core: RoutingCore, log: JsonlLog) -> None:
        self.config = config
        self.name = config.broker
        self._core = core
        self._reads_link_stats = reads_link_stats(core)
        self._log = log
        self._hello = HelloCounter(self.name, "broker", config.secret)
        self._nonces = NonceLog()
        self._proven = 0  # connections open past their HELLO (max_connections)
        self._unproven = UnprovenConnections(config.limits.max_unproven)
        self._evicted: set[asyncio.StreamWriter] = set()  # evicted, handshake not yet over
        self._admission_log = AdmissionLog(log)  # refusals, rate-limited
        self._counts_due_s = 0.0  # time.monotonic() before which its counts wait
        # Large frame bodies from every connection share one budget (admission limits).
        self._body_bound = BodyBound(ReadBudget(config.limits.read_budget_bytes),
                                     config.limits.body_timeout_s)
        self._links: dict[str, OverlayLink] = {}
        # Overload policy: reading from the clients waits while a queue is past its mark.
        self._gate = ClientGate(log, self._links)
        self._links.update((name, self._make_link(name, nb))
                           for name, nb in sorted(config.neighbours.items()))
        # Links opened on demand (docs/design/broker.md): their names in _links, the
        # dial under way per peer, whether we dialled the connection that is up, and the
        # links a Disconnect will close once idle.
        self._demand: set[str] = set()
        self._dialling: dict[str, asyncio.Task[None]] = {}
        self._dialled_here: dict[str, bool] = {}
        self._closing: set[str] = set()
        self._dormant = config.dormant
        self._nofile: dict[str, int] = {}
        self._status_stale = False  # an on-demand link changed since the last status write
        self._status_due = 0.0  # time.monotonic() before which such a change waits
        self._clients: dict[str, ClientLink] = {}
        self._last_sent: Message | None = None  # see _frame
        self._last_frame = b""
        self._keepalive_frame = encode(Message(MsgType.KEEPALIVE, 0, self.name))
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._timer_ids = itertools.count()
        self._state = "starting"
        self._status_path = status_path(config.log_dir, self.name)
        self._window_s = config.window_ms / 1000.0
        self._windows = QueueWindows(log)
        self._next_tick = 0.0
        self._tick_handle: asyncio.TimerHandle | None = None
        # The loop, looked up once: asyncio.get_running_loop() makes a getpid() system
        # call each time, and the core's clock is read for every message.
        self._loop = asyncio.get_running_loop()

    def _make_link(self, name: str, nb: NeighbourConfig) -> OverlayLink:
        return OverlayLink(
            name,
            self._log,
            delay_ms=nb.delay_ms if self.config.emulate_link else 0.0,
            loss_pct=nb.loss_pct if self.config.emulate_link else 0.0,
            rng=random.Random(f"{self.config.seed}:{self.name}:{name}"),
            write_buffer_bytes=self.config.buffers.send_bytes,
            rate_mbps=nb.rate_mbps,
            max_queue_msgs=self.config.queue_max_msgs,
            high_water_msgs=self.config.queue_high_water_msgs,
            on_pressure=self._gate.pressure,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        host, port = self.config.listen
        self._nofile = raise_nofile(
            max(nofile_needed(len(set(self.config.neighbours) | set(self.config.peers))),
                NOFILE_BASE + self.config.limits.max_connections
                + self.config.limits.max_unproven))
        try:
            server = await asyncio.start_server(self._accept, host, port)
        except OSError as exc:
            log_now(self._log, Ev.ERROR, stage="listen",
                    reason=f"cannot listen on {host}:{port}: {exc}")
            self._write_status("failed")
            raise
        for name, nb in sorted(self.config.neighbours.items()):
            log_now(self._log, Ev.LINK, link=name, role="broker", state="configured",
                    delay_ms=nb.delay_ms, loss_pct=nb.loss_pct,
                    emulated=self.config.emulate_link,
                    **({} if nb.rate_mbps is None else {"rate_mbps": nb.rate_mbps}))
            if self.name < name:
                self._spawn(self._dial_loop(name))
        if self.config.peers:
            log_now(self._log, Ev.RECORD, kind="nofile", **self._nofile)
        if self._dormant:
            log_now(self._log, Ev.RECORD, kind="membership", state="dormant")
        self._write_status("running")
        self._windows.start = self._next_tick = loop.time()
        self._schedule_tick()
        try:
            await stop.wait()
        finally:
            server.close()
            # Routing-table sizes and counters at the end of the run, for summary.json.
            for kind, fields in final_records(self._core):
                log_now(self._log, Ev.RECORD, kind=kind, **fields)
            await self._shutdown()

    # ---- connections ----------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.config.buffers.apply(writer)
        evicted = self._unproven.admit(writer, peer_host(writer))
        if evicted is not None:
            assert isinstance(evicted, asyncio.StreamWriter)
            self._admission_log.refused(reason=UNPROVEN_EVICTED, peer=peer_label(evicted))
            self._evicted.add(evicted)
            evicted.transport.abort()
        self._tasks.add(task)
        try:
            try:
                peer = await self._handshake(reader, writer)
            finally:
                self._unproven.discard(writer)
                self._evicted.discard(writer)
            if peer is None:
                return
            self._proven += 1
            try:
                await self._serve(*peer, reader, writer)
            finally:
                self._proven -= 1
        finally:
            self._tasks.discard(task)

    async def _serve(self, name: str, role: Role, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        """Carry a proven connection: ``name``'s overlay link, or a local client."""
        if role == "broker":
            wait_s = 3 * self._handshake_delay_s(name)
            if wait_s > 0:  # the dialler's ACK and HELLO crossing (docs/design/broker.md)
                link = self._links.get(name) or self._new_peer_link(name)
                if not link.up:
                    link.hold()
                # Our own dial, if any, is superseded now, not once we are up: its
                # 'crossed' refusal must not outlast connect_timeout_s and fail the link.
                self._dialling.pop(name, None)
                await asyncio.sleep(wait_s)
            await self._run_link(name, reader, writer)
        else:
            await self._run_client(name, reader, writer)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, Role] | None:
        """The accepting side of the handshake; ``None`` (logged, closed) if it fails."""
        addr = peer_label(writer)
        name: str | None = None
        role: Role | None = None
        try:
            async with asyncio.timeout(self.config.limits.hello_timeout_s):
                first = await read_message(reader, self.config.limits.hello_frame_bytes)
            if first is None:
                raise ProtocolError("closed before sending HELLO")
            name, role = parse_hello(first)
            nonce = self._hello.proven_nonce(first)
            if nonce is None:
                raise Violation(UNAUTHENTICATED, "the HELLO does not prove the run's secret")
            if not self._nonces.first_use(nonce):
                raise Violation(REPLAYED, "the HELLO's nonce was accepted before")
            refusal = None
            if role == "broker":
                nb = self.config.neighbours.get(name) or self.config.peers.get(name)
                if nb is None:
                    raise ProtocolError(f"broker {name} is not a neighbour of {self.name}")
                if peer_host(writer) != nb.addr[0]:
                    raise Violation(WRONG_ADDRESS, f"broker {name} connected from {addr}, "
                                                   f"not from {nb.addr[0]}")
                if name not in self.config.neighbours:
                    refusal = self._refusal(name)
                elif name > self.name:
                    raise ProtocolError(f"broker {name} dialled {self.name}; "
                                        "the smaller name dials")
            elif name in self._clients:
                refusal = NAME_TAKEN
            if refusal is None and self._proven >= self.config.limits.max_connections:
                refusal = CONNECTION_CAP
        except Violation as exc:
            self._admission_log.refused(link=name, role=role, reason=exc.code, peer=addr)
            writer.close()
            return None
        except (OSError, FrameError, ProtocolError) as exc:  # TimeoutError is an OSError
            if writer in self._evicted:
                return None  # counted as refused: unproven_evicted when it was evicted
            self._admission_log.handshake_error(peer=addr, addr=addr,
                                                reason=str(exc) or type(exc).__name__)
            writer.close()
            return None
        log_now(self._log, Ev.RECV, link=name, **message_fields(first))
        reply = self._hello.answer(name, nonce, refusal)
        writer.write(encode(reply))
        log_now(self._log, Ev.SEND, link=name, **message_fields(reply))
        if refusal is not None:
            self._admission_log.refused(link=name, role=role, reason=refusal, peer=addr)
            writer.close()  # after the refusal HELLO, which is buffered
            return None
        return name, role

    def _refusal(self, peer: str) -> str | None:
        """Why a dialling peer (not a fixed neighbour) is turned away, or ``None``: we are
        dormant, or both of us dial and ours (the smaller name's) wins."""
        if self._dormant:
            return DORMANT
        link = self._links.get(peer)
        if self.name < peer and (peer in self._dialling or (
                link is not None and link.up and self._dialled_here.get(peer, False))):
            return CROSSED
        return None

    async def _dial_loop(self, name: str) -> None:
        """Keep the link to ``name`` (a neighbour we dial) up, redialling with backoff."""
        nb = self.config.neighbours[name]
        backoff = Backoff(*self.config.backoff_s)
        while True:
            try:
                reader, writer = await dial(nb.addr, self._hello, (name, "broker"), self._log,
                                            self.config.connect_timeout_s,
                                            local_host=self.config.listen[0],
                                            buffers=self.config.buffers)
            except (OSError, FrameError, ProtocolError) as exc:
                wait_s = backoff.next_s()
                log_now(self._log, Ev.LINK, link=name, role="broker", state="dial_failed",
                        reason=str(exc) or type(exc).__name__, retry_in_s=wait_s)
                await asyncio.sleep(wait_s)
                continue
            backoff.reset()
            await self._run_link(name, reader, writer)
            # A link that drops straight after coming up must not be redialled in a tight loop.
            await asyncio.sleep(backoff.next_s())

    async def _run_link(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        dialled: bool = False
    ) -> None:
        if name not in self._links:  # a peer opened a link to us on demand
            self._new_peer_link(name)
        link = self._links[name]
        if name not in self._demand:
            if link.up:
                self._link_down(name, "replaced by a new connection")
            link.attach(writer)
            log_now(self._log, Ev.LINK, link=name, role="broker", state="up",
                    peer=peer_label(writer))
            self._write_status()
        else:
            self._attach_peer(name, writer, dialled)
        reason = await read_frames(name, reader, writer, self._log,
                                   partial(self._from_link, name, link), bound=self._body_bound)
        if link.writer is writer:
            self._link_down(name, reason)

    def _from_link(self, name: str, link: OverlayLink, msg: Message, size: int) -> None:
        link.heard()
        if msg.type is not MsgType.KEEPALIVE:
            self._received(name, Arrived, msg, size)

    def _keepalives(self) -> None:
        """Send KEEPALIVEs on idle links, and declare down the links gone silent (see
        docs/design/broker.md, "Keepalive")."""
        stalled = asyncio.get_running_loop().time() - self._next_tick > KEEPALIVE_S
        now_s = time.monotonic()
        for name, link in list(self._links.items()):  # a LinkDown's actions may add links
            if not stalled and link.silent_s(now_s) > self.config.link_timeout_s:
                writer = link.writer
                assert writer is not None
                self._link_down(name, f"keepalive timeout: nothing received for "
                                      f"{self.config.link_timeout_s:g} s")
                # close() would wait for unsent bytes, which a dead link never takes.
                writer.transport.abort()
            else:
                link.keepalive(self._keepalive_frame, now_s, KEEPALIVE_S)

    def _link_down(self, name: str, reason: str) -> None:
        self._links[name].detach()
        self._dialled_here.pop(name, None)
        self._closing.discard(name)
        log_now(self._log, Ev.LINK, link=name, role="broker", state="down", reason=reason)
        if name in self._demand:
            self._status_stale = True
        else:
            self._write_status()
        self._dispatch(LinkDown(name))

    # ---- links opened on demand (see docs/design/broker.md) -----------------------------

    def _new_peer_link(self, name: str) -> OverlayLink:
        nb = self.config.peers[name]
        link = self._links[name] = self._make_link(name, nb)
        self._demand.add(name)
        log_now(self._log, Ev.LINK, link=name, role="broker", state="configured",
                delay_ms=nb.delay_ms, loss_pct=nb.loss_pct, emulated=self.config.emulate_link)
        return link

    def _open_on_demand(self, name: str, action: Action) -> OverlayLink:
        """Hold the core's messages for ``name`` on its link and dial it."""
        if name not in self.config.peers:
            raise bad_action(self.name, action, neighbour=False)
        link = self._links.get(name) or self._new_peer_link(name)
        link.hold()
        self._dialling[name] = self._spawn(self._dial_on_demand(name))
        return link

    async def _dial_on_demand(self, name: str) -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        began = loop.time()
        give_up = began + self.config.connect_timeout_s
        while True:
            try:
                reader, writer = await dial(self.config.peers[name].addr, self._hello,
                                            (name, "broker"), self._log,
                                            self.config.connect_timeout_s,
                                            local_host=self.config.listen[0],
                                            buffers=self.config.buffers)
                break
            except (OSError, FrameError, ProtocolError) as exc:  # TimeoutError is an OSError
                if self._dialling.get(name) is not task:
                    return  # the peer's own connection won the race: nothing was lost
                if (isinstance(exc, Refused) and exc.reason == CROSSED
                        and loop.time() < give_up):
                    await asyncio.sleep(self.config.backoff_s[0])
                    if self._dialling.get(name) is not task:
                        return
                    continue
                del self._dialling[name]
                self._dial_failed(name, str(exc) or type(exc).__name__)
                return
        # SYN and SYN-ACK over the link's delay (docs/design/broker.md).
        await asyncio.sleep(began + 2 * self._handshake_delay_s(name) - loop.time())
        if self._dialling.get(name) is task:
            del self._dialling[name]
        # The peer accepted this connection, so it is the current one on its side: use it
        # even if its own connection got here first (then ours replaces it).
        await self._run_link(name, reader, writer, dialled=True)

    def _handshake_delay_s(self, name: str) -> float:
        """One way of a peer link's delay in seconds where this broker adds it (a link
        opened on demand; 0 otherwise): what each handshake crossing waits."""
        nb = self.config.peers.get(name)
        if not self.config.emulate_link or nb is None or name in self.config.neighbours:
            return 0.0
        return nb.delay_ms / 1000.0

    def _dial_failed(self, name: str, reason: str) -> None:
        log_now(self._log, Ev.LINK, link=name, role="broker", state="dial_failed",
                reason=reason)
        self._links[name].fail("dial_failed")
        self._closing.discard(name)
        self._dispatch(LinkDown(name))

    def _attach_peer(self, name: str, writer: asyncio.StreamWriter, dialled: bool) -> None:
        link = self._links[name]
        self._dialling.pop(name, None)  # an accepted connection supersedes our dial
        replaced = link.up
        if replaced:
            link.swap(writer)
            log_now(self._log, Ev.LINK, link=name, role="broker", state="down",
                    reason="replaced by a new connection")
        else:
            link.attach(writer)
        self._dialled_here[name] = dialled
        log_now(self._log, Ev.LINK, link=name, role="broker", state="up",
                peer=peer_label(writer),
                reason="replaced" if replaced else "dialled" if dialled else "accepted")
        self._status_stale = True
        if name in self._closing:  # a Disconnect came while we dialled: no LinkUp then
            self._spawn(self._close_when_idle(name, writer))
        elif not replaced:
            self._dispatch(LinkUp(name))

    def _disconnect(self, name: str) -> None:
        if name in self.config.neighbours or name not in self.config.peers:
            raise ValueError(f"core at {self.name} disconnected {name!r}: not a peer "
                             "(a fixed link, or no node); a core bug")
        link = self._links.get(name)
        if link is None or not (link.up or link.holding) or name in self._closing:
            return  # no link open: nothing to do
        self._closing.add(name)
        if link.writer is not None:
            self._spawn(self._close_when_idle(name, link.writer))
        # else: the dial under way attaches the connection and then closes it

    async def _close_when_idle(self, name: str, writer: asyncio.StreamWriter) -> None:
        link = self._links[name]
        await link.wait_idle()
        if name not in self._closing or link.writer is not writer:
            return  # a Send took the link back, or this connection is gone already
        self._closing.discard(name)
        link.release()
        self._dialled_here.pop(name, None)
        log_now(self._log, Ev.LINK, link=name, role="broker", state="down", reason="disconnect")
        self._status_stale = True
        if writer.can_write_eof():
            writer.write_eof()
        # Keep reading (in _run_link) until the peer closes too, but not for ever.
        asyncio.get_running_loop().call_later(self.config.connect_timeout_s, writer.close)

    def _go_dormant(self) -> None:
        """After a LEAVE's actions: close what is still open, and sleep."""
        self._dormant = True
        log_now(self._log, Ev.RECORD, kind="membership", state="left")
        for name in sorted(self._demand):
            link = self._links[name]
            if link.up or link.holding:
                self._disconnect(name)
        self._write_status()

    async def _run_client(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # The handshake refused this name if it was connected: the first connection stays.
        client = self._clients[name] = ClientLink(name, writer, self.config.limits)
        log_now(self._log, Ev.LINK, link=name, role="client", state="up", peer=peer_label(writer))
        self._write_status()
        reason = await read_frames(name, reader, writer, self._log,
                                   partial(self._from_client, client),
                                   gate=self._gate.open, bound=self._body_bound)
        if self._clients.get(name) is client:
            self._client_gone(name, reason)

    def _client_gone(self, name: str, reason: str) -> None:
        del self._clients[name]
        log_now(self._log, Ev.LINK, link=name, role="client", state="down", reason=reason)
        self._write_status()

    def _from_client(self, client: ClientLink, msg: Message, size: int) -> None:
        client.admit(msg)  # a Violation ends the connection before the core sees msg
        self._received(client.name, FromClient, msg, size)

    # ---- the core ---------------------------------------------------------------------

    def _received(
        self, peer: str, event: Callable[[str, Message], Event], msg: Message, size: int
    ) -> None:
        ev = event(peer, msg)
        member_op = msg.type if event is FromClient and self._may_sleep() else None
        if self._dormant and member_op is not MsgType.JOIN:
            log_message_now(self._log, Ev.RECV, peer, msg, size)
            log_message_now(self._log, Ev.DROP, peer, msg, size, reason="dormant")
            return
        if msg.type not in MATCHED:
            log_message_now(self._log, Ev.RECV, peer, msg, size)
            if member_op is MsgType.JOIN and self._dormant:
                self._dormant = False
                log_now(self._log, Ev.RECORD, kind="membership", state="joined")
                self._write_status()
            self._dispatch(ev)
            if member_op is MsgType.LEAVE:
                self._go_dormant()
            return
        # Stamped on arrival but written once the core has run, so that it can carry the
        # matching time, and before any of the core's actions, so the log stays in order.
        t_mono, t_wall = time.monotonic(), time.time()
        t0_s = time.perf_counter()
        try:
            actions = self._core.handle(ev, self._loop.time())
        except Exception as exc:
            self._log.message(Ev.RECV, t_mono, t_wall, peer, msg, size)
            self._core_failed(ev, exc)
            return
        matching_ms = round((time.perf_counter() - t0_s) * 1000.0, 6)
        self._log.message(Ev.RECV, t_mono, t_wall, peer, msg, size, matching_ms=matching_ms)
        self._dispatch(ev, actions)

    def _may_sleep(self) -> bool:
        """Whether JOIN and LEAVE change this broker's dormancy: only without fixed links."""
        return not self.config.neighbours

    def _dispatch(self, event: Event, actions: list[Action] | None = None) -> None:
        """Feed ``event`` to the core (unless ``actions`` is what it already returned for
        it) and carry out its actions; a dormant broker's core gets only its timers."""
        if self._dormant and not isinstance(event, TimerFired | FromClient):
            return
        try:
            if actions is None:
                actions = self._core.handle(event, self._loop.time())
            for action in actions:
                self._act(action)
        except Exception as exc:
            self._core_failed(event, exc)

    def _core_failed(self, event: Event, exc: Exception) -> None:
        # A core bug (or an action the runtime cannot carry out, such as a payload
        # that is not JSON) costs this one event, not the connection it came on.
        log_now(self._log, Ev.ERROR, stage="core",
                reason=f"handling {type(event).__name__} failed: {exc!r}")
        traceback.print_exc(file=sys.stderr)

    def _frame(self, msg: Message) -> bytes:
        """``msg`` encoded; the cores send one message object to every next hop, so the
        last encoding is kept and reused while the same object comes again."""
        if msg is not self._last_sent:
            self._last_sent, self._last_frame = msg, encode(msg)
        return self._last_frame

    def _act(self, action: Action) -> None:
        if type(action) is Deliver:  # the commonest action first: one check, not a match
            self._deliver(action.client, action.msg)
            return
        match action:
            case Send(link=link, msg=msg):
                target = self._links.get(link)
                if target is None or (link in self._demand and not target.up
                                      and not target.holding):
                    target = self._open_on_demand(link, action)
                elif self._closing:
                    self._closing.discard(link)  # a Send after a Disconnect keeps the link
                target.enqueue(msg, self._frame(msg))
            case Deliver(client=client, msg=msg):
                self._deliver(client, msg)
            case Record(kind=kind, fields=fields):
                self._log.core_record(time.monotonic(), time.time(), kind, fields)
            case SetTimer(name=name, delay_s=delay_s):
                timer_id = next(self._timer_ids)
                self._timers[timer_id] = asyncio.get_running_loop().call_later(
                    delay_s, self._fire_timer, timer_id, name)
            case Disconnect(link=link):
                self._disconnect(link)
            case _:
                raise bad_action(self.name, action)

    def _deliver(self, client: str, msg: Message) -> None:
        link = self._clients.get(client)
        frame = self._frame(msg)
        if link is None:
            log_message_now(self._log, Ev.DROP, client, msg, len(frame),
                            reason="client_not_connected")
            return
        if not link.deliver(frame):
            log_message_now(self._log, Ev.DROP, client, msg, len(frame), reason=SLOW_CONSUMER)
            self._client_gone(client, SLOW_CONSUMER)
            return
        self._log.message(Ev.DELIVER, time.monotonic(), time.time(), client, msg, len(frame),
                          t_pub=msg.payload.get("t_pub"))

    def _fire_timer(self, timer_id: int, name: str) -> None:
        del self._timers[timer_id]
        self._dispatch(TimerFired(name))

    # ---- statistics windows -----------------------------------------------------------

    def _schedule_tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._next_tick += self._window_s
        if self._next_tick <= loop.time():
            self._next_tick = loop.time() + self._window_s
        self._tick_handle = loop.call_at(self._next_tick, self._tick)

    def _tick(self) -> None:
        self._keepalives()
        window_ms, figures = self._windows.close(self._links, asyncio.get_running_loop().time())
        if time.monotonic() >= self._counts_due_s:
            self._admission_log.write_counts()
            self._counts_due_s = time.monotonic() + 1.0
        self._log.flush()
        if self._status_stale and time.monotonic() >= self._status_due:
            self._write_status()
        if self._reads_link_stats:
            self._dispatch(LinkStats(window_ms, figures))
        self._schedule_tick()

    # ---- status and shutdown ----------------------------------------------------------

    def _write_status(self, state: str | None = None) -> None:
        # The log is flushed with every status change, so a runner that sees a link change
        # in the status file finds the matching `link` record in the log.
        self._log.flush()
        if state is not None:
            self._state = state
        fixed = sorted(self.config.neighbours)
        up = [name for name in fixed if self._links[name].up]
        missing = sorted(set(fixed) - set(up))
        status = {
            "node": self.name, "pid": os.getpid(), "state": self._state,
            "listen": list(self.config.listen), "neighbours": fixed,
            "up": up, "missing": missing, "all_up": not missing,
            "clients": sorted(self._clients), "t_wall": time.time(),
            "peers_up": sorted(name for name in self._demand if self._links[name].up),
            "dormant": self._dormant, "nofile": self._nofile,
        }
        write_json(self._status_path, status)
        self._status_stale = False
        self._status_due = time.monotonic() + PEERS_STATUS_EVERY_S

    async def _shutdown(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for name, link in self._links.items():
            if link.up:
                link.detach()
                log_now(self._log, Ev.LINK, link=name, role="broker", state="down",
                        reason="shutdown")
            elif link.holding:
                link.fail("shutdown")
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        self._windows.close(self._links, asyncio.get_running_loop().time())
        self._admission_log.write_counts()
        self._write_status("stopped")


def read_status(log_dir: Path | str, broker: str) -> dict[str, Any] | None:
    """The broker's last status (docs/design/broker.md, "Readiness"); ``None`` before it
    wrote one."""
    return read_json(status_path(log_dir, broker))


def wait_until_ready(
    log_dir: Path | str, brokers: Iterable[str], timeout_s: float, poll_s: float = 0.1
) -> dict[str, list[str]]:
    """Wait until every broker in ``brokers`` reports all its overlay links up.

    Returns ``{}`` when they all do, else (at the timeout) the brokers that do not, each
    with the neighbours it still misses (all of them if it has no status yet, or has
    stopped or failed). For a runner outside the broker processes: it only reads files.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        missing: dict[str, list[str]] = {}
        for broker in brokers:
            status = read_status(log_dir, broker)
            if status is None:
                missing[broker] = ["<no status yet>"]
            elif status["state"] != "running":
                missing[broker] = [f"<{status['state']}>", *status["neighbours"]]
            elif status["missing"]:
                missing[broker] = status["missing"]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(poll_s)


async def _serve(config: BrokerConfig, core: RoutingCore, log: JsonlLog) -> None:
    stop = asyncio.Event()
    install_stop_signals(stop)
    await Broker(config, core, log).run(stop)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``pubsublab-broker``: 0 after a signalled stop, 1 if it cannot listen,
    2 for a bad config."""
    parser = argparse.ArgumentParser(prog="pubsublab-broker", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="broker config (JSON)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        core = build_core(config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"pubsublab-broker: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    config.log_dir.mkdir(parents=True, exist_ok=True)
    log = JsonlLog(log_path(config.log_dir, config.broker), config.broker,
                   max_bytes=int(config.log_max_mb * 2**20))
    try:
        asyncio.run(_serve(config, core, log))
    except OSError as exc:
        print(f"pubsublab-broker {config.broker}: {exc}", file=sys.stderr)
        return 1
    finally:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
