"""A client process of the emulated runtime: publishers and subscribers attached to one broker.

Run ``python -m nodes.emulated.client --config PATH``. The config is one client's (below) or a
group's: several clients in one process and one asyncio loop (see "Groups").

Config (one JSON object; missing required and unknown keys are errors)::

    client             str           this client's name (its HELLO, its log file)
    broker             str           its broker's name (checked against the broker's HELLO)
    broker_addr        [ip, port]
    log_dir            path          <log_dir>/<client>.jsonl
    secret             hex str       the run's secret, proven in the HELLO (nodes.emulated.auth)
    start_at_wall      float = now   the Unix time that op time t_s = 0 stands for, so all
                                     clients of a run share one schedule
    duration_s         float | null  stop this long after start_at_wall (null: run until
                                     SIGTERM/SIGINT)
    connect_timeout_s  float = 3     bound on one connection attempt
    backoff_s          [0.1, 2.0]    first and largest delay between attempts
    write_buffer_bytes int | null    its connection's kernel send and receive buffers
    read_buffer_bytes  int | null    (nodes.emulated.runtime.SocketBuffers); null: the kernel's
    and exactly one of
    ops                path          JSON lines, one op each: {"t_s": 0.5, "type": "PUBLISH",
                                     "msg_id": 7, "origin": "p1", "hops": 0, "payload": {...}}
                                     (hops and payload optional; "client" and "broker"
                                     allowed if they name this client; see dump_ops);
                                     relative to the config file's folder; every op's
                                     origin must be the client (its broker cuts off a
                                     client that sends under another name)
    role               "publisher":  publish (payload), count, rate_per_s or burst: true,
                                     start_s = 0.5, advertise (payload, optional, sent at 0)
                       "subscriber": subscribe (payload), at_s = 0
                       "bulk-publisher": topic, data_bytes, slice_bytes = 65536,
                                     data_seed = 1, start_s = 0.5: ADVERTISE {"topic"} at
                                     0, then the whole data as DATA slices at start_s
                                     (nodes.workloads.bulkdata), back to back, each written when TCP
                                     takes it

Groups (one process for many clients, so that a workload of hundreds of clients does not
need hundreds of interpreters on a 2-core machine)::

    clients            [object, ...] client configs as above (at least one, names unique)
    common             object = {}   keys merged under every client's own (e.g. broker,
                                     broker_addr, log_dir, start_at_wall, duration_s)
    status_file        path | null   written (atomically) when the group ends:
                                     {"codes": {client: exit status}, "pid": ...}

In short: a role expands (:func:`role_ops`) into the op list an ops file gives, so there is
one send path; ops go out on an absolute schedule, and every PUBLISH is stamped
``payload["t_pub"]`` (wall-clock seconds) when it is written to the socket. The client
retries its first connection with backoff and never reconnects: exit 0 at the end of
``duration_s`` or on SIGTERM/SIGINT, 1 if it lost or never reached the broker, 2 for a bad
config. A grouped client behaves exactly as a lone one (its own connection, log and
status); the group exits 0 if every client's status is 0, else 1.

The design choices and the records in full: docs/design/client.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from nodes.emulated.auth import parse_secret
from nodes.emulated.frame_protocol import read_frames
from nodes.emulated.runtime import (
    BUFFER_KEYS,
    WRITE_BATCH_BYTES,
    Backoff,
    HelloCounter,
    ProtocolError,
    SocketBuffers,
    check_keys,
    dial,
    install_stop_signals,
    log_message_now,
    log_now,
    parse_addr,
    parse_backoff,
)
from nodes.frames import FrameError, encode
from nodes.logs import DEFAULT_LOG_MAX_BYTES, Ev, JsonlLog
from nodes.messages import Message, MsgType, message_from_json, message_to_json
from nodes.runfolder import log_path, read_json, write_json
from nodes.workloads.bulkdata import SLICE_BYTES, DataLog, data_messages


@dataclass(frozen=True, slots=True)
class Op:
    """Send ``msg`` at ``t_s`` seconds after the run's start."""

    t_s: float
    msg: Message


def dump_ops(path: Path | str, ops: Iterable[Op]) -> None:
    """Write an ops file :func:`load_ops` reads (one JSON object per line)."""
    with open(path, "w", encoding="utf-8") as fh:
        for op in ops:
            fh.write(json.dumps({"t_s": op.t_s, **message_to_json(op.msg)}, sort_keys=True) + "\n")


def load_ops(path: Path | str, client: str, broker: str) -> list[Op]:
    """The ops of a JSON-lines file (blank lines skipped), in time order (stable).

    A line may also carry ``client`` and ``broker`` (as the workload files of
    :mod:`nodes.workloads.stock` do, so their lines can be copied verbatim); they must then
    name this client and its broker.
    """
    ops = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            for key, mine in (("client", client), ("broker", broker)):
                if obj.pop(key, mine) != mine:
                    raise ValueError(f"the op is for another {key}, not {mine}")
            t_s = float(obj.pop("t_s"))
            ops.append(Op(t_s, message_from_json(obj)))
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"{path}:{lineno}: bad op: {exc}") from None
    return sorted(ops, key=lambda op: op.t_s)


_PUBLISHER_KEYS = {"publish", "count", "rate_per_s", "burst", "start_s", "advertise"}
_SUBSCRIBER_KEYS = {"subscribe", "at_s"}
_BULK_KEYS = {"topic", "data_bytes", "slice_bytes", "data_seed", "start_s"}
_ROLE_KEYS = _PUBLISHER_KEYS | _SUBSCRIBER_KEYS | _BULK_KEYS


def role_ops(client: str, role: str, spec: dict[str, Any]) -> list[Op]:
    """The ops a ``publisher`` or ``subscriber`` role stands for (see the module docstring)."""
    if role == "subscriber":
        check_keys(spec, {"subscribe"}, _SUBSCRIBER_KEYS, "subscriber role")
        return [Op(float(spec.get("at_s", 0.0)),
                   Message(MsgType.SUBSCRIBE, 1, client, 0, spec["subscribe"]))]
    if role == "bulk-publisher":
        check_keys(spec, {"topic", "data_bytes"}, _BULK_KEYS, "bulk-publisher role")
        start_s = float(spec.get("start_s", 0.5))
        data = data_messages(client, str(spec["topic"]), int(spec["data_bytes"]),
                             int(spec.get("slice_bytes", SLICE_BYTES)),
                             int(spec.get("data_seed", 1)))
        advertise = Message(MsgType.ADVERTISE, 1, client, 0, {"topic": spec["topic"]})
        return [Op(0.0, advertise), *(Op(start_s, msg) for msg in data)]
    if role != "publisher":
        raise ValueError(f"role must be 'publisher', 'subscriber' or 'bulk-publisher', "
                         f"got {role!r}")
    check_keys(spec, {"publish", "count"}, _PUBLISHER_KEYS, "publisher role")
    if spec.get("burst", False) == ("rate_per_s" in spec):
        raise ValueError("publisher role: give either rate_per_s or burst: true")
    ops = []
    if "advertise" in spec:
        ops.append(Op(0.0, Message(MsgType.ADVERTISE, 1, client, 0, spec["advertise"])))
    start_s = float(spec.get("start_s", 0.5))
    gap_s = 0.0 if spec.get("burst", False) else 1.0 / float(spec["rate_per_s"])
    first_id = len(ops) + 1
    ops.extend(
        Op(start_s + i * gap_s, Message(MsgType.PUBLISH, first_id + i, client, 0, spec["publish"]))
        for i in range(int(spec["count"]))
    )
    return ops


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """A client's settings; see the module docstring for the JSON form."""

    client: str
    broker: str
    broker_addr: tuple[str, int]
    log_dir: Path
    ops: list[Op]
    start_at_wall: float
    secret: bytes = field(repr=False)  # never in a log or a traceback
    duration_s: float | None = None
    connect_timeout_s: float = 3.0
    backoff_s: tuple[float, float] = (0.1, 2.0)
    buffers: SocketBuffers = field(default_factory=SocketBuffers)  # its connection's

    @classmethod
    def from_json(cls, obj: dict[str, Any], base_dir: Path = Path(".")) -> ClientConfig:
        """Validate and convert the JSON config object; a relative ``ops`` path is taken
        from ``base_dir``."""
        check_keys(obj, {"client", "broker", "broker_addr", "log_dir", "secret"},
                   {"start_at_wall", "duration_s", "connect_timeout_s", "backoff_s", "ops",
                    "role"} | _ROLE_KEYS | BUFFER_KEYS, "client config")
        if ("ops" in obj) == ("role" in obj):
            raise ValueError("client config: give exactly one of 'ops' and 'role'")
        if "ops" in obj:
            stray = sorted(_ROLE_KEYS & set(obj))
            if stray:
                raise ValueError(f"client config: role settings {stray} without a role")
            ops = load_ops(base_dir / obj["ops"], obj["client"], obj["broker"])
        else:
            ops = role_ops(obj["client"], obj["role"], {k: obj[k] for k in _ROLE_KEYS & set(obj)})
        foreign = next((op for op in ops if op.msg.origin != obj["client"]), None)
        if foreign is not None:
            raise ValueError(f"client config: an op at t_s = {foreign.t_s} has origin "
                             f"{foreign.msg.origin!r}, not the client's name")
        duration_s = obj.get("duration_s")
        return cls(
            client=obj["client"],
            broker=obj["broker"],
            broker_addr=parse_addr(obj["broker_addr"], "client config, broker_addr"),
            log_dir=Path(obj["log_dir"]),
            ops=ops,
            start_at_wall=float(obj.get("start_at_wall", time.time())),
            secret=parse_secret(obj["secret"], "client config"),
            duration_s=None if duration_s is None else float(duration_s),
            connect_timeout_s=float(obj.get("connect_timeout_s", 3.0)),
            backoff_s=parse_backoff(obj.get("backoff_s", (0.1, 2.0)), "client config"),
            buffers=SocketBuffers.from_json(obj, "client config"),
        )


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Several clients run by one process; see "Groups" in the module docstring."""

    clients: tuple[ClientConfig, ...]
    status_file: Path | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any], base_dir: Path = Path(".")) -> GroupConfig:
        """Validate and convert a group config; ``ValueError`` names every bad client."""
        check_keys(obj, {"clients"}, {"common", "status_file"}, "client group config")
        entries, common = obj["clients"], obj.get("common", {})
        if not isinstance(entries, list) or not entries:
            raise ValueError("client group config: clients must be a non-empty list")
        if not isinstance(common, dict):
            raise ValueError("client group config: common must be an object")
        configs, errors = [], []
        for i, entry in enumerate(entries):
            name = entry.get("client", f"#{i}") if isinstance(entry, dict) else f"#{i}"
            try:
                if not isinstance(entry, dict):
                    raise ValueError("not an object")
                configs.append(ClientConfig.from_json({**common, **entry}, base_dir))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                errors.append(f"client {name}: {exc}")
        names = [c.client for c in configs]
        errors += [f"client {n}: named twice" for n in sorted({n for n in names
                                                              if names.count(n) > 1})]
        if errors:
            raise ValueError("client group config: " + "; ".join(errors))
        status_file = obj.get("status_file")
        return cls(tuple(configs), None if status_file is None else Path(status_file))


def load_config(path: Path | str) -> ClientConfig | GroupConfig:
    """Read a client config file, or a group's (it has ``clients``); relative ``ops``
    paths are relative to the file."""
    path = Path(path)
    obj = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(obj, dict) and "clients" in obj:
        return GroupConfig.from_json(obj, path.parent)
    return ClientConfig.from_json(obj, path.parent)


def read_group_status(path: Path | str) -> dict[str, Any] | None:
    """A group's status file (see the module docstring); ``None`` if it was not written
    (the group was rejected or killed)."""
    return read_json(path)


async def run_client(config: ClientConfig, log: JsonlLog, stop: asyncio.Event) -> int:
    """Connect, play the ops and log what arrives until the run ends; the exit status."""
    connected = asyncio.Event()
    session = asyncio.create_task(_session(config, log, connected))
    stopped = asyncio.create_task(stop.wait())
    timeout_s = None
    if config.duration_s is not None:
        timeout_s = max(0.0, config.start_at_wall + config.duration_s - time.time())
    done, pending = await asyncio.wait({session, stopped}, timeout=timeout_s,
                                       return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if session in done:
        session.result()  # a bug in the session surfaces here, not silently
        return 1  # the session only ends by itself when the broker connection ended
    if not connected.is_set():
        log_now(log, Ev.ERROR, peer=config.broker, stage="dial",
                reason="the run ended before the broker could be reached")
        return 1
    return 0


async def _session(config: ClientConfig, log: JsonlLog, connected: asyncio.Event) -> None:
    hello = HelloCounter(config.client, "client", config.secret)
    backoff = Backoff(*config.backoff_s)
    while True:
        try:
            reader, writer = await dial(config.broker_addr, hello, (config.broker, "broker"),
                                        log, config.connect_timeout_s, buffers=config.buffers)
            break
        except (OSError, FrameError, ProtocolError) as exc:  # TimeoutError is an OSError
            wait_s = backoff.next_s()
            log_now(log, Ev.LINK, link=config.broker, role="broker", state="dial_failed",
                    reason=str(exc) or type(exc).__name__, retry_in_s=wait_s)
            await asyncio.sleep(wait_s)
    connected.set()
    log_now(log, Ev.LINK, link=config.broker, role="broker", state="up")
    log.flush()
    data_log = DataLog()
    sender = asyncio.create_task(_send_ops(config, writer, log, data_log))
    try:
        reason = await read_frames(config.broker, reader, writer, log,
                                   partial(_received, config.broker, log, data_log))
    finally:
        sender.cancel()
    log_now(log, Ev.LINK, link=config.broker, role="broker", state="down", reason=reason)
    log.flush()


def _log_message(log: JsonlLog, ev: Ev, broker: str, msg: Message, size: int,
                 data_log: DataLog, **extra: Any) -> None:
    """Log a frame of ``size`` bytes sent to or received from the broker; a DATA message is
    checked too, and the data's checksum logged (and the log flushed) once the data is
    complete."""
    done = None
    if msg.type is MsgType.DATA:
        fields, done = data_log.add(msg)
        extra.update(fields)
    log_message_now(log, ev, broker, msg, size, **extra)
    if done is not None:
        log_now(log, Ev.RECORD, kind=f"data_{ev}", **done)
        log.flush()


def _received(broker: str, log: JsonlLog, data_log: DataLog, msg: Message, size: int) -> None:
    _log_message(log, Ev.RECV, broker, msg, size, data_log, t_pub=msg.payload.get("t_pub"))


async def _send_ops(config: ClientConfig, writer: asyncio.StreamWriter, log: JsonlLog,
                    data_log: DataLog) -> None:
    loop = asyncio.get_running_loop()
    t0_mono = loop.time() + (config.start_at_wall - time.time())
    # The ops that are due go out in one write (one system call, not one per op), up to
    # WRITE_BATCH_BYTES before the writer's backpressure is asked; a failed write ends the
    # connection, which the reader reports.
    due: list[bytes] = []
    due_bytes = 0
    with contextlib.suppress(ConnectionError):
        for op in config.ops:
            wait_s = t0_mono + op.t_s - loop.time()
            if wait_s > 0 or due_bytes >= WRITE_BATCH_BYTES:
                if due:
                    writer.writelines(due)
                    due.clear()
                    due_bytes = 0
                    await writer.drain()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
            msg = op.msg
            if msg.type is MsgType.PUBLISH:
                t_pub = time.time()
                # The constructor, not dataclasses.replace: once per publication, ~3x cheaper.
                msg = Message(msg.type, msg.msg_id, msg.origin, msg.hops,
                              {**msg.payload, "t_pub": t_pub}, msg.body)
                extra = {"t_pub": t_pub}
            else:
                extra = {}
            frame = encode(msg)
            due.append(frame)
            due_bytes += len(frame)
            _log_message(log, Ev.SEND, config.broker, msg, len(frame), data_log, **extra)
        writer.writelines(due)
        await writer.drain()


async def run_group(configs: Iterable[ClientConfig], logs: dict[str, JsonlLog],
                    stop: asyncio.Event) -> dict[str, int]:
    """Run every client in this loop until each has ended; their exit statuses by name."""
    configs = list(configs)
    results = await asyncio.gather(*(run_client(c, logs[c.client], stop) for c in configs),
                                   return_exceptions=True)
    codes = {}
    for config, result in zip(configs, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result  # KeyboardInterrupt, SystemExit: the process is going anyway
            # One client's bug must not hide what its siblings did: it alone fails.
            print(f"nodes.emulated.client: client {config.client} crashed:", file=sys.stderr)
            traceback.print_exception(result, file=sys.stderr)
            codes[config.client] = 1
        else:
            codes[config.client] = result
    return codes


async def _serve(config: ClientConfig, log: JsonlLog) -> int:
    stop = asyncio.Event()
    install_stop_signals(stop)
    return await run_client(config, log, stop)


async def _serve_group(group: GroupConfig, logs: dict[str, JsonlLog]) -> dict[str, int]:
    stop = asyncio.Event()
    install_stop_signals(stop)
    return await run_group(group.clients, logs, stop)


def _open_log(config: ClientConfig) -> JsonlLog:
    config.log_dir.mkdir(parents=True, exist_ok=True)
    return JsonlLog(log_path(config.log_dir, config.client), config.client,
                    max_bytes=DEFAULT_LOG_MAX_BYTES)


def _write_group_status(path: Path, codes: dict[str, int]) -> None:
    write_json(path, {"codes": dict(sorted(codes.items())), "pid": os.getpid(),
                             "t_wall": time.time()})


def _main_group(group: GroupConfig) -> int:
    logs: dict[str, JsonlLog] = {}
    try:
        for config in group.clients:
            logs[config.client] = _open_log(config)
        codes = asyncio.run(_serve_group(group, logs))
    finally:
        for log in logs.values():
            log.close()
    if group.status_file is not None:
        _write_group_status(group.status_file, codes)
    return 0 if all(code == 0 for code in codes.values()) else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 at the end of the run or on a signal, 1 if the broker connection was
    lost or never made (for a group: if that happened to any of its clients), 2 for a
    bad config."""
    parser = argparse.ArgumentParser(prog="python -m nodes.emulated.client",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, type=Path,
                        help="client or client group config (JSON)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"nodes.emulated.client: bad config {args.config}: {exc}", file=sys.stderr)
        return 2
    if isinstance(config, GroupConfig):
        return _main_group(config)
    log = _open_log(config)
    try:
        return asyncio.run(_serve(config, log))
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
