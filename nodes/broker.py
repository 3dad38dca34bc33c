"""The broker process of the emulated runtime: one routing core, its overlay links, its clients.

Run ``python -m nodes.broker --config PATH`` (or ``pubsublab-broker --config PATH``).

Config (one JSON object; missing required and unknown keys are errors, never ignored)::

    broker             str          this broker's name
    listen             [ip, port]   where neighbour brokers and local clients connect
    neighbours         {name: {"addr": [ip, port], "delay_ms": 0.0, "loss_pct": 0.0}}
    core               {"name": str, "params": {...}}
                         name: a core of the nodes.cores registry (make_core); params
                         go to it unchanged (e.g. flood's tree_neighbours, which a
                         runner derives with nodes.cores.overlay_params)
    log_dir            path         <log_dir>/<broker>.jsonl and <broker>.status.json
    emulate_link       bool = false apply delay_ms/loss_pct in this broker (one way, on
                                    its sending side; the kernel has no netem); when false
                                    netem carries them and the broker only logs them
    window_ms          float = 50   link statistics window
    seed               int = 0      seeds each link's loss draws (with both names)
    connect_timeout_s  float = 3    bound on one dial attempt (TCP connect + HELLO
                                    exchange), and on an accepted peer's first HELLO
    backoff_s          [0.1, 2.0]   first and largest redial delay
    write_buffer_bytes int | null   cap on overlay sockets' send buffers, so a slow link
                                    backs up into the output queue (see nodes.overlay_link)

Behaviour (design choices):

- **Who dials.** Of two neighbours, the one with the lexicographically smaller name
  dials; the other only accepts. A broker HELLO that breaks this rule, or names a broker
  that is not a neighbour, is a protocol error. A second connection from a neighbour
  whose link is up replaces the first (the newest wins, so a half-open connection left
  by a crashed peer cannot keep the link out).
- **Handshake** (see :mod:`nodes.runtime`): each side's first frame is a HELLO; a peer
  that sends nothing acceptable within ``connect_timeout_s`` is dropped.
- **Errors.** A malformed, truncated or out-of-place frame: an ``error`` record (``peer``:
  the name, or ``ip:port`` before the handshake; ``addr``; ``stage``: ``handshake`` or
  ``read``; ``reason``), the frame dropped, that connection closed; every other link
  carries on. A dial that fails: one ``link`` record (``state: dial_failed``, with the
  reason and ``retry_in_s``) per attempt, attempts spaced by exponential backoff. A
  lost link: ``link`` record ``state: down``, :class:`~nodes.core.LinkDown` to the core,
  everything queued on it dropped and logged, and the dialling side redials. The core
  interface has no "link up" event: after a redial the link simply carries ``Send``
  actions again. An exception raised by the core, or by carrying out its actions (a
  ``Send`` to a non-neighbour, a payload that is not JSON, a ``Record`` field that
  clashes with a log key), is logged as an ``error`` record (``stage: core``; the
  traceback goes to standard error) and the rest of that event is skipped, so one bad
  message does not take the broker or its connection down.
- **Statistics windows.** Every ``window_ms`` (scheduled on absolute times, so windows
  do not drift; a stalled loop skips windows rather than firing a burst) each link's
  figures go to the core as one :class:`~nodes.core.LinkStats` (every neighbour, up or
  not, with the measured window length) and to the log as ``queue`` records with
  ``count_in``, ``count_out``, ``queue_len``, ``flushed`` and ``window_ms``. As in the
  simulator, a link's ``queue`` record is written only in windows where it was active
  or was active in the window before (so every return to idle is visible); a missing
  window means all zeros. The log is flushed at every window.
- **Records.** ``record`` kind ``tables`` (srt, prt sizes) at stop when the core has
  ``table_sizes()``, and kind ``counters`` when it has ``counters()`` (the bulk agents'
  slices received, duplicate and sent); ``send``/``recv`` for every frame on a
  connection (HELLOs included, ``link`` = neighbour or client name); ``deliver`` when a
  notification is written to a local client (with ``t_pub``); ``drop``; ``link``
  (``configured`` with the link's delay/loss and whether this broker emulates them,
  ``up``, ``down``, ``dial_failed``; ``role`` says broker or client); ``queue``;
  ``record`` (core records, their fields flattened next to ``kind``); ``error``.
  Inter-broker messages are the ``send`` records whose type is not HELLO.
- **Matching delay.** The ``recv`` record of a notification (a type in
  :data:`nodes.summary.MATCHED_TYPES`, from a client or a neighbour) carries
  ``matching_ms``: how long the core's ``handle`` took on ``time.perf_counter``, i.e.
  matching it against the routing tables and choosing the next hops; carrying out the
  actions (encoding, queueing, logging) is not included. The record keeps the arrival
  time: it is stamped before the core runs and written after.
- **Readiness.** ``<log_dir>/<broker>.status.json`` is rewritten (atomically) whenever
  the broker starts listening, a link or client comes or goes, and at stop: ``state``
  (``running``, ``stopped``, ``failed``), ``neighbours``, ``up``, ``missing``,
  ``all_up``, ``clients``, ``pid``, ``listen``; the log is flushed first, so the
  matching ``link`` records are on disk by then. A runner waits for ``all_up`` on every
  broker and names the ``missing`` links on timeout.
- **Stop.** SIGTERM or SIGINT: close the links (logged ``down``, reason ``shutdown``,
  no ``LinkDown`` to the core), log the last partial window, write the status, flush and
  close the log, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from nodes.core import (
    Action,
    Arrived,
    Deliver,
    Event,
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
from nodes.cores import make_core
from nodes.frames import FrameError, encode
from nodes.hosting import MATCHED, bad_action, final_records
from nodes.logs import Ev, JsonlLog, message_fields
from nodes.messages import Message
from nodes.overlay_link import OverlayLink
from nodes.runfolder import log_path, read_json, status_path, write_json
from nodes.runtime import (
    Backoff,
    HelloCounter,
    ProtocolError,
    Role,
    check_keys,
    dial,
    install_stop_signals,
    log_now,
    parse_addr,
    parse_backoff,
    parse_hello,
    peer_label,
    read_frames,
    read_message,
)


@dataclass(frozen=True, slots=True)
class NeighbourConfig:
    """Where a neighbour listens, and the one-way delay and loss of our link to it."""

    addr: tuple[str, int]
    delay_ms: float = 0.0
    loss_pct: float = 0.0


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """A broker's settings; see the module docstring for the JSON form."""

    broker: str
    listen: tuple[str, int]
    neighbours: Mapping[str, NeighbourConfig]
    core_name: str
    log_dir: Path
    core_params: Mapping[str, Any] = field(default_factory=dict)
    emulate_link: bool = False
    window_ms: float = 50.0
    seed: int = 0
    connect_timeout_s: float = 3.0
    backoff_s: tuple[float, float] = (0.1, 2.0)
    write_buffer_bytes: int | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> BrokerConfig:
        """Validate and convert the JSON config object."""
        check_keys(obj, {"broker", "listen", "neighbours", "core", "log_dir"},
                   {"emulate_link", "window_ms", "seed", "connect_timeout_s", "backoff_s",
                    "write_buffer_bytes"}, "broker config")
        if not isinstance(obj["neighbours"], dict) or obj["broker"] in obj["neighbours"]:
            raise ValueError("broker config: neighbours must map other brokers' names to links")
        neighbours = {}
        for name, nb in obj["neighbours"].items():
            where = f"broker config, neighbour {name}"
            check_keys(nb, {"addr"}, {"delay_ms", "loss_pct"}, where)
            neighbours[name] = NeighbourConfig(parse_addr(nb["addr"], where),
                                               float(nb.get("delay_ms", 0.0)),
                                               float(nb.get("loss_pct", 0.0)))
        check_keys(obj["core"], {"name"}, {"params"}, "broker config, core")
        window_ms = float(obj.get("window_ms", 50.0))
        if window_ms <= 0:
            raise ValueError(f"broker config: window_ms must be positive, got {window_ms}")
        write_buffer_bytes = obj.get("write_buffer_bytes")
        if write_buffer_bytes is not None and (type(write_buffer_bytes) is not int
                                               or write_buffer_bytes <= 0):
            raise ValueError("broker config: write_buffer_bytes must be a positive int or null")
        return cls(
            broker=obj["broker"],
            listen=parse_addr(obj["listen"], "broker config, listen"),
            neighbours=neighbours,
            core_name=obj["core"]["name"],
            core_params=obj["core"].get("params", {}),
            log_dir=Path(obj["log_dir"]),
            emulate_link=bool(obj.get("emulate_link", False)),
            window_ms=window_ms,
            seed=int(obj.get("seed", 0)),
            connect_timeout_s=float(obj.get("connect_timeout_s", 3.0)),
            backoff_s=parse_backoff(obj.get("backoff_s", (0.1, 2.0)), "broker config"),
            write_buffer_bytes=write_buffer_bytes,
        )


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
        self._log = log
        self._hello = HelloCounter(self.name, "broker")
        self._links = {
            name: OverlayLink(
                name,
                log,
                delay_ms=nb.delay_ms if config.emulate_link else 0.0,
                loss_pct=nb.loss_pct if config.emulate_link else 0.0,
                rng=random.Random(f"{config.seed}:{self.name}:{name}"),
                write_buffer_bytes=config.write_buffer_bytes,
            )
            for name, nb in sorted(config.neighbours.items())
        }
        self._clients: dict[str, asyncio.StreamWriter] = {}
        self._last_sent: Message | None = None  # see _frame
        self._last_frame = b""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._timer_ids = itertools.count()
        self._active: set[str] = set()
        self._state = "starting"
        self._status_path = status_path(config.log_dir, self.name)
        self._window_s = config.window_ms / 1000.0
        self._window_start = 0.0
        self._next_tick = 0.0
        self._tick_handle: asyncio.TimerHandle | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        host, port = self.config.listen
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
                    emulated=self.config.emulate_link)
            if self.name < name:
                self._spawn(self._dial_loop(name))
        self._write_status("running")
        self._window_start = self._next_tick = loop.time()
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

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            peer = await self._handshake(reader, writer)
            if peer is None:
                return
            name, role = peer
            if role == "broker":
                await self._run_link(name, reader, writer)
            else:
                await self._run_client(name, reader, writer)
        finally:
            self._tasks.discard(task)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, Role] | None:
        """The accepting side of the handshake; ``None`` (logged, closed) if it fails."""
        addr = peer_label(writer)
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                first = await read_message(reader)
            if first is None:
                raise ProtocolError("closed before sending HELLO")
            name, role = parse_hello(first)
            if role == "broker" and name not in self._links:
                raise ProtocolError(f"broker {name} is not a neighbour of {self.name}")
            if role == "broker" and name > self.name:
                raise ProtocolError(f"broker {name} dialled {self.name}; the smaller name dials")
        except (OSError, FrameError, ProtocolError) as exc:  # TimeoutError is an OSError
            log_now(self._log, Ev.ERROR, peer=addr, addr=addr, stage="handshake",
                    reason=str(exc) or type(exc).__name__)
            writer.close()
            return None
        log_now(self._log, Ev.RECV, link=name, **message_fields(first))
        reply = self._hello.new()
        writer.write(encode(reply))
        log_now(self._log, Ev.SEND, link=name, **message_fields(reply))
        return name, role

    async def _dial_loop(self, name: str) -> None:
        """Keep the link to ``name`` (a neighbour we dial) up, redialling with backoff."""
        nb = self.config.neighbours[name]
        backoff = Backoff(*self.config.backoff_s)
        while True:
            try:
                reader, writer = await dial(nb.addr, self._hello, (name, "broker"), self._log,
                                            self.config.connect_timeout_s,
                                            local_host=self.config.listen[0])
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
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        link = self._links[name]
        if link.up:
            self._link_down(name, "replaced by a new connection")
        link.attach(writer)
        log_now(self._log, Ev.LINK, link=name, role="broker", state="up", peer=peer_label(writer))
        self._write_status()
        reason = await read_frames(name, reader, writer, self._log,
                                   partial(self._received, name, Arrived))
        if link.writer is writer:
            self._link_down(name, reason)

    def _link_down(self, name: str, reason: str) -> None:
        self._links[name].detach()
        log_now(self._log, Ev.LINK, link=name, role="broker", state="down", reason=reason)
        self._write_status()
        self._dispatch(LinkDown(name))

    async def _run_client(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        old = self._clients.get(name)
        if old is not None:
            old.close()
            log_now(self._log, Ev.LINK, link=name, role="client", state="down",
                    reason="replaced by a new connection")
        self._clients[name] = writer
        log_now(self._log, Ev.LINK, link=name, role="client", state="up", peer=peer_label(writer))
        self._write_status()
        reason = await read_frames(name, reader, writer, self._log,
                                   partial(self._received, name, FromClient))
        if self._clients.get(name) is writer:
            del self._clients[name]
            log_now(self._log, Ev.LINK, link=name, role="client", state="down", reason=reason)
            self._write_status()

    # ---- the core ---------------------------------------------------------------------

    def _received(
        self, peer: str, event: Callable[[str, Message], Event], msg: Message
    ) -> None:
        fields = message_fields(msg)
        ev = event(peer, msg)
        if msg.type not in MATCHED:
            log_now(self._log, Ev.RECV, link=peer, **fields)
            self._dispatch(ev)
            return
        # Stamped on arrival but written once the core has run, so that it can carry the
        # matching time, and before any of the core's actions, so the log stays in order.
        t_mono, t_wall = time.monotonic(), time.time()
        t0_s = time.perf_counter()
        try:
            actions = self._core.handle(ev, asyncio.get_running_loop().time())
        except Exception as exc:
            self._log.write(Ev.RECV, t_mono, t_wall, link=peer, **fields)
            self._core_failed(ev, exc)
            return
        matching_ms = round((time.perf_counter() - t0_s) * 1000.0, 6)
        self._log.write(Ev.RECV, t_mono, t_wall, link=peer, matching_ms=matching_ms, **fields)
        self._dispatch(ev, actions)

    def _dispatch(self, event: Event, actions: list[Action] | None = None) -> None:
        """Feed ``event`` to the core (unless ``actions`` is what it already returned for
        it) and carry out its actions."""
        try:
            if actions is None:
                actions = self._core.handle(event, asyncio.get_running_loop().time())
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
        match action:
            case Send(link=link, msg=msg):
                target = self._links.get(link)
                if target is None:
                    raise bad_action(self.name, action, neighbour=False)
                target.enqueue(msg, self._frame(msg))
            case Deliver(client=client, msg=msg):
                self._deliver(client, msg)
            case Record(kind=kind, fields=fields):
                log_now(self._log, Ev.RECORD, kind=kind, **fields)
            case SetTimer(name=name, delay_s=delay_s):
                timer_id = next(self._timer_ids)
                self._timers[timer_id] = asyncio.get_running_loop().call_later(
                    delay_s, self._fire_timer, timer_id, name)
            case _:
                raise bad_action(self.name, action)

    def _deliver(self, client: str, msg: Message) -> None:
        writer = self._clients.get(client)
        fields = message_fields(msg)
        if writer is None:
            log_now(self._log, Ev.DROP, link=client, reason="client_not_connected", **fields)
            return
        writer.write(encode(msg))
        log_now(self._log, Ev.DELIVER, link=client, t_pub=msg.payload.get("t_pub"), **fields)

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
        window_ms, figures = self._close_window()
        self._log.flush()
        self._dispatch(LinkStats(window_ms, figures))
        self._schedule_tick()

    def _close_window(self) -> tuple[float, dict[str, LinkWindow]]:
        """End the current window: log each link's figures; (window_ms, figures)."""
        now = asyncio.get_running_loop().time()
        window_ms = round((now - self._window_start) * 1000.0, 3)
        self._window_start = now
        figures: dict[str, LinkWindow] = {}
        active: set[str] = set()
        for name, link in self._links.items():
            w, flushed = link.take_window()
            figures[name] = w
            if w.count_in or w.count_out or w.queue_len or flushed:
                active.add(name)
            if name in active or name in self._active:
                log_now(self._log, Ev.QUEUE, link=name, count_in=w.count_in,
                        count_out=w.count_out, queue_len=w.queue_len, flushed=flushed,
                        window_ms=window_ms)
        self._active = active
        return window_ms, figures

    # ---- status and shutdown ----------------------------------------------------------

    def _write_status(self, state: str | None = None) -> None:
        # The log is flushed with every status change, so a runner that sees a link change
        # in the status file finds the matching `link` record in the log.
        self._log.flush()
        if state is not None:
            self._state = state
        up = sorted(name for name, link in self._links.items() if link.up)
        missing = sorted(set(self._links) - set(up))
        status = {
            "node": self.name, "pid": os.getpid(), "state": self._state,
            "listen": list(self.config.listen), "neighbours": sorted(self._links),
            "up": up, "missing": missing, "all_up": not missing,
            "clients": sorted(self._clients), "t_wall": time.time(),
        }
        write_json(self._status_path, status)

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
        for writer in self._clients.values():
            writer.close()
        self._clients.clear()
        self._close_window()
        self._write_status("stopped")


def read_status(log_dir: Path | str, broker: str) -> dict[str, Any] | None:
    """The broker's last status (see the module docstring), ``None`` before it wrote one."""
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
    log = JsonlLog(log_path(config.log_dir, config.broker), config.broker)
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
