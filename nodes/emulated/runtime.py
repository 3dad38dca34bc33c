"""Plumbing shared by the emulated runtime's processes (:mod:`nodes.emulated.broker`,
:mod:`nodes.emulated.client`).

- **Framed streams.** :func:`read_message` turns an asyncio byte stream into messages
  (frames of :mod:`nodes.frames`). A clean end of stream at a frame boundary is ``None``;
  a stream that ends inside a frame is a truncated frame, a :class:`~nodes.frames.FrameError`
  like any other undecodable frame.
- **Handshake.** The first frame each side writes on every connection is a HELLO whose
  payload is ``{"name": ..., "role": "broker" | "client", "proof": ...}`` and whose
  origin is the same name. The dialling side writes first, with a fresh ``nonce``; the
  accepting side answers once it has accepted the dialler's HELLO. Each ``proof`` shows
  that its sender knows the run's secret (:mod:`nodes.emulated.auth`); an answer whose proof does
  not hold fails the dial. The dialler reads the answer with a limit of
  :data:`~nodes.emulated.admission.HELLO_FRAME_BYTES`, as the accepting broker reads its HELLO.
  A HELLO's ``msg_id`` comes from the node's own counter starting at
  :data:`HELLO_ID_BASE` (2**63), so that ``(origin, msg_id)`` stays unique even though a
  broker's core numbers its own messages from small integers. A frame that decodes but
  is out of place (a HELLO after the handshake, a non-HELLO first frame, a HELLO from the
  wrong peer) is a :class:`ProtocolError`; the runtime treats it exactly like an
  undecodable frame: log an ``error`` record, close that connection; a frame that breaks
  one of a broker's admission rules is a :class:`Violation` (the same, plus a code for
  the ``link`` record, :mod:`nodes.emulated.admission`). An accepting broker
  may instead turn a dialling broker away by answering with a HELLO whose payload also
  holds ``refused`` (why: ``dormant``, or ``crossed`` when both brokers dial each other at
  once, see :mod:`nodes.emulated.broker`) and closing; :func:`dial` raises :class:`Refused` then.
- **Reconnecting.** :class:`Backoff` doubles the wait after each failed attempt
  (default 0.1 s up to 2 s), so an unreachable peer costs one attempt and one log record
  per backoff step and never a busy loop.
- **Logging.** :func:`log_now` stamps a record with both clocks (``time.monotonic`` and
  ``time.time``), :func:`log_message_now` a message's record (the fast path,
  :meth:`nodes.logs.JsonlLog.message`). On Linux the monotonic clock is system-wide, and
  Mininet hosts share the kernel, so ``t_mono`` of different processes on one machine are
  directly comparable.
- **Ops files** hold messages as :func:`nodes.messages.message_to_json` objects (the one
  place a message is (de)serialised as JSON) with ``t_s`` added.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nodes.emulated.admission import HELLO_FRAME_BYTES
from nodes.emulated.auth import is_nonce, is_proof, new_nonce, prove
from nodes.emulated.read_budget import SMALL_BODY_BYTES, ReadBudget
from nodes.frames import (
    MAX_FRAME_BYTES,
    PREFIX_BYTES,
    FrameError,
    body_length,
    decode_body,
    encode,
)
from nodes.logs import BODY_TIMEOUT, READ_BUDGET, Ev, JsonlLog, message_fields
from nodes.messages import Message, MsgType

Role = Literal["broker", "client"]
ROLES: tuple[Role, ...] = ("broker", "client")
HELLO_ID_BASE = 1 << 63
BROKER_PORT = 7000  # every emulated broker listens here; the analysis filters pcaps on it


class ProtocolError(ValueError):
    """A frame that decodes but is not acceptable at this point of the conversation."""


class Violation(ProtocolError):
    """A frame that breaks a broker's admission rule ``code`` (:mod:`nodes.emulated.admission`)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class Refused(ProtocolError):
    """The peer answered our HELLO with a refusal (its HELLO carries ``refused``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused by the peer: {reason}")
        self.reason = reason


def log_now(log: JsonlLog, ev: Ev, **fields: Any) -> None:
    """Append record ``ev`` stamped with the monotonic and the wall clock, now."""
    log.write(ev, time.monotonic(), time.time(), **fields)


def log_message_now(log: JsonlLog, ev: Ev, link: str, msg: Message, size: int,
                    **extra: Any) -> None:
    """Append the record ``ev`` of ``msg`` (a frame of ``size`` bytes) on ``link``,
    stamped with both clocks, now."""
    log.message(ev, time.monotonic(), time.time(), link, msg, size, **extra)


@dataclass(frozen=True, slots=True)
class BodyBound:
    """What reading a large frame body may cost a broker: a share of ``budget`` (see
    :mod:`nodes.emulated.read_budget`), waited for and then received within ``timeout_s``
    each."""

    budget: ReadBudget
    timeout_s: float


async def read_message(reader: asyncio.StreamReader, max_bytes: int = MAX_FRAME_BYTES,
                       bound: BodyBound | None = None) -> Message | None:
    """The next message on ``reader``; ``None`` when the stream ends between frames (the
    handshake's one frame: after it, :mod:`nodes.emulated.frame_protocol` reads the stream).

    Raises :class:`FrameError` for an undecodable or truncated frame, or one whose length
    prefix announces more than ``max_bytes`` (then none of its body is read); connection
    errors (``ConnectionError``) pass through. With ``bound``, a body over
    :data:`~nodes.emulated.read_budget.SMALL_BODY_BYTES` is read only once it has its
    reservation, and must arrive in time: :class:`Violation` ``read_budget`` or
    ``body_timeout`` otherwise.
    """
    try:
        prefix = await reader.readexactly(PREFIX_BYTES)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError(
                f"stream ended inside a length prefix ({len(exc.partial)} bytes)"
            ) from None
        return None
    n_bytes = body_length(prefix, max_bytes)
    if bound is None or n_bytes <= SMALL_BODY_BYTES:
        return decode_body(await _read_body(reader, n_bytes))
    return decode_body(await _read_reserved(reader, n_bytes, b"", bound))


async def _read_reserved(reader: asyncio.StreamReader, n_bytes: int, have: bytes,
                         bound: BodyBound) -> bytes:
    """A large body of ``n_bytes``, of which ``have`` has arrived, read once ``bound``'s
    budget has room for it and within its timeout (:class:`Violation` otherwise)."""
    if not await bound.budget.reserve(n_bytes, bound.timeout_s):
        raise Violation(READ_BUDGET, f"no room in the {bound.budget.total_bytes}-byte read "
                                     f"budget for a {n_bytes}-byte frame within "
                                     f"{bound.timeout_s:g} s")
    try:
        try:
            async with asyncio.timeout(bound.timeout_s):
                return have + await _read_body(reader, n_bytes - len(have))
        except TimeoutError:
            raise Violation(BODY_TIMEOUT, f"a {n_bytes}-byte frame body did not arrive "
                                          f"within {bound.timeout_s:g} s") from None
    finally:
        bound.budget.release(n_bytes)


async def _read_body(reader: asyncio.StreamReader, n_bytes: int) -> bytes:
    try:
        return await reader.readexactly(n_bytes)
    except asyncio.IncompleteReadError as exc:
        raise FrameError(f"truncated frame: {len(exc.partial)} of {n_bytes} body bytes") from None


# What a writer puts in one write of frames that are due together before it asks the
# socket's backpressure (drain) again.
WRITE_BATCH_BYTES = 64 * 1024


class HelloCounter:
    """Builds this node's HELLO messages, numbered from :data:`HELLO_ID_BASE` and proven
    with the run's ``secret``, and checks the proofs in its peers' HELLOs."""

    def __init__(self, name: str, role: Role, secret: bytes) -> None:
        self.name = name
        self.role = role
        self._secret = secret
        self._ids: Iterator[int] = iter(range(HELLO_ID_BASE, 1 << 64))

    def _hello(self, payload: dict[str, Any]) -> Message:
        return Message(MsgType.HELLO, next(self._ids), self.name, 0,
                       {"name": self.name, "role": self.role, **payload})

    def dialling(self, to: str) -> Message:
        """The HELLO that opens a connection to ``to``, with a fresh nonce."""
        nonce = new_nonce()
        return self._hello({"nonce": nonce,
                            "proof": prove(self._secret, self.name, self.role, to, nonce)})

    def answer(self, to: str, nonce: str, refused: str | None = None) -> Message:
        """The answer to ``to``'s HELLO (whose nonce was ``nonce``); with ``refused``, one
        that turns the dialling peer away (see :class:`Refused`)."""
        payload: dict[str, Any] = {"proof": prove(self._secret, self.name, self.role, to,
                                                  nonce)}
        if refused is not None:
            payload["refused"] = refused
        return self._hello(payload)

    def proven_nonce(self, hello: Message) -> str | None:
        """The nonce of a dialler's HELLO to this node (already through
        :func:`parse_hello`) if its proof holds, else ``None``."""
        nonce = hello.payload.get("nonce")
        if not is_nonce(nonce) or not is_proof(self._secret, hello.payload.get("proof"),
                                               hello.origin, hello.payload["role"],
                                               self.name, nonce):
            return None
        return nonce

    def is_answer(self, hello: Message, nonce: str) -> bool:
        """Whether the answer ``hello`` (already through :func:`parse_hello`) proves that
        its sender knows the secret, for our HELLO with ``nonce``."""
        return is_proof(self._secret, hello.payload.get("proof"), hello.origin,
                        hello.payload["role"], self.name, nonce)


def parse_hello(msg: Message) -> tuple[str, Role]:
    """The ``(name, role)`` a HELLO announces; :class:`ProtocolError` if it is not one."""
    if msg.type is not MsgType.HELLO:
        raise ProtocolError(f"expected HELLO as the first frame, got {msg.type.name}")
    name, role = msg.payload.get("name"), msg.payload.get("role")
    if not isinstance(name, str) or name != msg.origin:
        raise ProtocolError(f"HELLO name {name!r} does not match its origin {msg.origin!r}")
    if role not in ROLES:
        raise ProtocolError(f"HELLO role {role!r} is not one of {ROLES}")
    return name, role


def peer_label(writer: asyncio.StreamWriter) -> str:
    """``ip:port`` of the remote end, for error records about not-yet-named peers."""
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "unknown"


def peer_host(writer: asyncio.StreamWriter) -> str | None:
    """The remote end's IP address (``None`` if the connection has none)."""
    peer = writer.get_extra_info("peername")
    return peer[0] if peer else None


BUFFER_KEYS = frozenset({"write_buffer_bytes", "read_buffer_bytes"})
# What every emulated run gives each connection's kernel buffers unless its spec says
# otherwise (broker.write_buffer_bytes, broker.read_buffer_bytes). Measured by `pubsublab
# bench backlog` (a broker on loopback offered 40,000/s, more than the 31,000-36,000 it
# forwards): the worst delay over 20 s was 385-404 ms with 256 KiB each way, 2.4-2.8 s
# with the kernel's own, and that grows with the length of the overload. 256 KiB still
# lets one TCP connection carry 210 Mbit/s at a 10 ms round trip (a window per round
# trip), more than a broker forwards here.
DEFAULT_BUFFER_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class SocketBuffers:
    """What the kernel may hold of one connection, in bytes: its send buffer
    (``SO_SNDBUF``) and receive buffer (``SO_RCVBUF``); None leaves that one to the
    kernel, which grows it to megabytes under load (``net.ipv4.tcp_wmem``/``tcp_rmem``).
    Bytes in those buffers wait where no queue of ours sees them: a broker that cannot
    keep up would find its backlog in its readers' receive buffers and its publishers'
    send buffers before its own queues (where backpressure and IDR look) grew at all."""

    send_bytes: int | None = None
    recv_bytes: int | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], where: str) -> SocketBuffers:
        """``write_buffer_bytes`` and ``read_buffer_bytes`` of a config (absent: None)."""
        values = []
        for key in ("write_buffer_bytes", "read_buffer_bytes"):
            v = obj.get(key)
            if v is not None and (type(v) is not int or v <= 0):
                raise ValueError(f"{where}: {key} must be a positive int or null")
            values.append(v)
        return cls(*values)

    def apply(self, writer: asyncio.StreamWriter) -> None:
        """Set them on ``writer``'s socket (Linux doubles each for its bookkeeping)."""
        sock = writer.get_extra_info("socket")
        if sock is None:
            return
        for opt, v in ((socket.SO_SNDBUF, self.send_bytes), (socket.SO_RCVBUF, self.recv_bytes)):
            if v is not None:
                sock.setsockopt(socket.SOL_SOCKET, opt, v)


async def dial(
    addr: tuple[str, int],
    hello: HelloCounter,
    expect: tuple[str, Role],
    log: JsonlLog,
    timeout_s: float,
    local_host: str | None = None,
    buffers: SocketBuffers | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to ``addr`` and complete the handshake with the peer ``expect`` names.

    The whole attempt (TCP connect and HELLO exchange) is bounded by ``timeout_s``; both
    HELLOs are logged. Raises ``OSError``, ``TimeoutError``, :class:`FrameError` or
    :class:`ProtocolError` (:class:`Refused` when the peer turned us away, after proving
    the secret); the connection is closed on failure.
    """
    link = expect[0]
    local_addr = (local_host, 0) if local_host else None
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(addr[0], addr[1], local_addr=local_addr)
        if buffers is not None:
            buffers.apply(writer)
        try:
            mine = hello.dialling(link)
            writer.write(encode(mine))
            log_now(log, Ev.SEND, link=link, **message_fields(mine))
            reply = await read_message(reader, HELLO_FRAME_BYTES)
            if reply is None:
                raise ProtocolError("peer closed the connection during the handshake")
            if parse_hello(reply) != expect:
                raise ProtocolError(f"expected {expect[1]} {expect[0]}, "
                                    f"got HELLO from {reply.payload['role']} {reply.origin}")
            if not hello.is_answer(reply, mine.payload["nonce"]):
                raise ProtocolError(f"{link}'s HELLO does not prove the run's secret")
            log_now(log, Ev.RECV, link=link, **message_fields(reply))
            if "refused" in reply.payload:
                raise Refused(str(reply.payload["refused"]))
        except BaseException:
            writer.close()
            raise
    return reader, writer


class Backoff:
    """Exponential retry delays: ``first_s``, doubling per failure, capped at ``max_s``."""

    def __init__(self, first_s: float = 0.1, max_s: float = 2.0) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(f"backoff needs 0 < first_s <= max_s, got {first_s}, {max_s}")
        self.first_s = first_s
        self.max_s = max_s
        self._next_s = first_s

    def next_s(self) -> float:
        """The delay before the next attempt (and double the one after it)."""
        delay_s = self._next_s
        self._next_s = min(self._next_s * 2, self.max_s)
        return delay_s

    def reset(self) -> None:
        """Start again from ``first_s`` (after a success)."""
        self._next_s = self.first_s


def install_stop_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT (graceful shutdown instead of a traceback)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def check_keys(obj: Mapping[str, Any], required: set[str], optional: set[str], where: str) -> None:
    """Reject missing and unknown keys: a misspelt setting must never be silently ignored."""
    missing = sorted(required - set(obj))
    unknown = sorted(set(obj) - required - optional)
    if missing or unknown:
        raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}")


def parse_addr(value: Any, where: str) -> tuple[str, int]:
    """An ``[ip, port]`` config value as a tuple."""
    if (not isinstance(value, list | tuple) or len(value) != 2 or not isinstance(value[0], str)
            or not isinstance(value[1], int)):
        raise ValueError(f"{where}: expected [ip, port], got {value!r}")
    return value[0], value[1]


def parse_backoff(value: Any, where: str) -> tuple[float, float]:
    """A ``[first_s, max_s]`` config value, checked as :class:`Backoff` needs it."""
    first_s, max_s = (float(v) for v in value)
    Backoff(first_s, max_s)  # raises ValueError for an unusable pair
    return first_s, max_s
