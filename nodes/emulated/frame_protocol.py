"""Reading a connection's frames after its handshake: :func:`read_frames`.

The handshake reads its one frame with a ``StreamReader`` (:func:`nodes.emulated.runtime.
read_message`); after it, :class:`FrameProtocol` takes the connection's transport over,
so every frame arrived whole is handed on from the transport's own ``data_received``,
all of them in one wake-up of the event loop, with no task switch and no copy of the
stream into a reader's buffer first. Writing is left to the connection's
``StreamWriter`` (a thin wrapper of the transport): the protocol passes the transport's
``pause_writing``/``resume_writing`` and ``connection_lost`` on to the stream's own
protocol, so ``writer.drain()`` and ``writer.close()`` behave as before.

Backpressure: while ``gate`` is clear, or while a large body waits for its share of the
read budget, the protocol pauses the transport's reading; what arrived meanwhile (at
most one read of the kernel's) waits here, and the kernel's socket buffers then stop
the peer. A body over :data:`~nodes.emulated.read_budget.SMALL_BODY_BYTES` is read only
with its reservation, and must arrive within the bound's timeout (:class:`Violation`
``read_budget`` or ``body_timeout`` otherwise), as :func:`~nodes.emulated.runtime.
read_message` reads one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from nodes.emulated.read_budget import SMALL_BODY_BYTES
from nodes.emulated.runtime import BodyBound, ProtocolError, Violation, log_now, peer_label
from nodes.frames import PREFIX_BYTES, FrameError, body_length, decode_body
from nodes.logs import BODY_TIMEOUT, READ_BUDGET, Ev, JsonlLog
from nodes.messages import Message, MsgType

CLOSED_BY_PEER = "closed by peer"  # read_frames' reason for a clean end between frames


class FrameProtocol(asyncio.Protocol):
    """Hands every whole frame arriving on ``transport`` to ``on_message`` (with the
    frame's length in bytes) as it arrives; :attr:`done` holds why the stream ended: the
    reason string, or the :class:`FrameError`, :class:`ProtocolError` (a HELLO after
    the handshake, or what ``on_message`` raised) or connection error that ended it.
    ``stream``: the protocol the transport had, to which the write side's callbacks go on."""

    def __init__(self, transport: asyncio.Transport, on_message: Callable[[Message, int], None],
                 *, gate: asyncio.Event | None = None, bound: BodyBound | None = None,
                 stream: asyncio.BaseProtocol | None = None) -> None:
        self._transport = transport
        self._on_message = on_message
        self._gate = gate
        self._bound = bound
        self._stream = stream
        # What arrived and is not handed on yet, in the chunks it came in (joined only
        # when a frame is whole, so a large body arriving slowly is copied once).
        self._chunks: list[bytes] = []
        # A large body being read (with its share of the read budget) grows here in place
        # instead, as in a StreamReader's buffer: its bytes are held once, not per chunk.
        self._large: bytearray | None = None
        self._have = 0  # bytes in _chunks or _large
        self._need = PREFIX_BYTES  # bytes _chunks must hold before a frame can be whole
        self._paused = False  # by this protocol: the gate is clear, or a share is awaited
        self._eof = False
        self._reserved = 0  # the read budget's bytes the body at the front holds
        self._body_timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[None] | None = None  # for the gate or a share
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    # ---- the transport's callbacks -----------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._large is not None:
            self._large += data
        else:
            self._chunks.append(data)
        self._have += len(data)
        if not self._paused and self._have >= self._need:
            self._hand_on()

    def eof_received(self) -> bool:
        self._eof = True
        if not self._paused:
            self._ended()
        return True  # keep the transport open: the writer may still be sending

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stream is not None:
            self._stream.connection_lost(exc)  # wakes the writer's drain() and wait_closed()
        if exc is not None:
            self._finish(exc)
        elif not self._eof:
            # Closed here (or aborted): what is buffered is still handed on, once a
            # clear gate opens, as a StreamReader's buffer was.
            self._eof = True
            if not self._paused:
                self._ended()

    def pause_writing(self) -> None:
        if self._stream is not None:
            self._stream.pause_writing()

    def resume_writing(self) -> None:
        if self._stream is not None:
            self._stream.resume_writing()

    # ---- reading -------------------------------------------------------------------------

    def _hand_on(self) -> None:
        """Hand on every whole frame buffered, while the gate is open; pause for the gate
        or for a large body's share of the read budget."""
        data = self._buffered()
        # Only `data` holds the bytes now: a large body is in memory twice at most (here,
        # and the message's copy of it), as when it was read out of a StreamReader.
        self._chunks, self._large = [], None
        pos, end = 0, len(data)
        need = PREFIX_BYTES
        gate, bound, on_message = self._gate, self._bound, self._on_message
        try:
            while end - pos >= PREFIX_BYTES:
                if gate is not None and not gate.is_set():
                    self._wait(self._for_gate(gate))
                    break
                n_bytes = body_length(data[pos:pos + PREFIX_BYTES])
                if bound is not None and n_bytes > SMALL_BODY_BYTES and not self._reserved:
                    self._wait(self._for_share(bound, n_bytes))
                    break
                need = PREFIX_BYTES + n_bytes
                if end - pos < need:
                    break
                if self._reserved:
                    # A view, not a slice: the large body is not held a third time while
                    # its message takes its own copy.
                    msg = decode_body(memoryview(data)[pos + PREFIX_BYTES:pos + need])
                    self._body_arrived()
                else:
                    msg = decode_body(data[pos + PREFIX_BYTES:pos + need])
                pos += need
                if msg.type is MsgType.HELLO:
                    raise ProtocolError("HELLO after the handshake")
                on_message(msg, need)
                need = PREFIX_BYTES
        except (FrameError, ProtocolError) as exc:
            self._finish(exc)
            return
        if pos:
            data = data[pos:]
        if self._reserved:  # the large body at the front is still arriving
            self._large = data if isinstance(data, bytearray) else bytearray(data)
        elif data:
            self._chunks = [data]
        self._have = len(data)
        self._need = need
        if self._eof and not self._paused:
            self._ended()

    def _wait(self, waiting: Coroutine[Any, Any, None]) -> None:
        self._paused = True
        self._transport.pause_reading()
        self._waiting = asyncio.get_running_loop().create_task(waiting)

    def _resume(self) -> None:
        self._waiting = None
        self._paused = False
        if self.done.done():
            return
        self._transport.resume_reading()
        if self._have >= self._need or (self._eof and self._have):
            self._hand_on()
        elif self._eof:
            self._ended()

    async def _for_gate(self, gate: asyncio.Event) -> None:
        await gate.wait()
        self._resume()

    async def _for_share(self, bound: BodyBound, n_bytes: int) -> None:
        if not await bound.budget.reserve(n_bytes, bound.timeout_s):
            self._finish(Violation(READ_BUDGET, f"no room in the {bound.budget.total_bytes}"
                                                f"-byte read budget for a {n_bytes}-byte frame "
                                                f"within {bound.timeout_s:g} s"))
            return
        self._reserved = n_bytes
        self._body_timer = asyncio.get_running_loop().call_later(
            bound.timeout_s, self._body_late, n_bytes, bound.timeout_s)
        self._resume()

    def _body_late(self, n_bytes: int, timeout_s: float) -> None:
        self._body_timer = None
        self._finish(Violation(BODY_TIMEOUT, f"a {n_bytes}-byte frame body did not arrive "
                                             f"within {timeout_s:g} s"))

    def _body_arrived(self) -> None:
        """The large body at the front is whole: its share goes back."""
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        assert self._bound is not None
        self._bound.budget.release(self._reserved)
        self._reserved = 0

    def _ended(self) -> None:
        """The stream ended and what is buffered is handed on: a clean end, or a frame cut."""
        if not self._have:
            self._finish(None)
            return
        data = self._buffered()
        if len(data) < PREFIX_BYTES:
            self._finish(FrameError(f"stream ended inside a length prefix ({len(data)} bytes)"))
            return
        n_bytes = body_length(data[:PREFIX_BYTES])
        self._finish(FrameError(f"truncated frame: {len(data) - PREFIX_BYTES} of {n_bytes} "
                                "body bytes"))

    def _buffered(self) -> bytes | bytearray:
        if self._large is not None:
            return self._large
        chunks = self._chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _finish(self, exc: BaseException | None) -> None:
        if self.done.done():
            return
        self._chunks, self._large, self._have = [], None, 0  # a cut-off frame's bytes go
        if exc is None:
            self.done.set_result(CLOSED_BY_PEER)
        else:
            self.done.set_exception(exc)
            self._transport.pause_reading()  # nothing more is read from a failed stream
        self.stop()

    def stop(self) -> None:
        """Give back what is held: a share of the read budget, its timer, a wait."""
        if self._waiting is not None and self._waiting is not asyncio.current_task():
            self._waiting.cancel()
        self._waiting = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if self._reserved:
            assert self._bound is not None
            self._bound.budget.release(self._reserved)
            self._reserved = 0


def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              on_message: Callable[[Message, int], None], *, gate: asyncio.Event | None = None,
              bound: BodyBound | None = None) -> FrameProtocol:
    """Put a :class:`FrameProtocol` on the connection of ``reader`` and ``writer`` (past
    its handshake), starting with what ``reader`` holds already."""
    transport = writer.transport
    assert isinstance(transport, asyncio.Transport)
    frames = FrameProtocol(transport, on_message, gate=gate, bound=bound,
                           stream=transport.get_protocol())
    # What arrived after the HELLO is in the reader's buffer (asyncio offers no public
    # way to take it), and the reader may have paused the transport for it.
    held = bytes(reader._buffer)
    reader._buffer.clear()
    failed = reader.exception()
    transport.set_protocol(frames)
    if failed is not None:
        frames._finish(failed)
        return frames
    if held:
        frames.data_received(held)
    if reader.at_eof():
        frames.eof_received()
    if not (frames.done.done() or frames._paused or transport.is_reading()):
        transport.resume_reading()
    return frames


async def read_frames(
    peer: str,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    log: JsonlLog,
    on_message: Callable[[Message, int], None],
    *,
    gate: asyncio.Event | None = None,
    bound: BodyBound | None = None,
) -> str:
    """Hand every message after the handshake to ``on_message``, with its frame's length
    in bytes, until the connection ends; return why it ended. A bad frame (undecodable,
    truncated, or a second HELLO), or a :class:`Violation` raised by ``on_message``, is
    logged as an ``error`` record naming ``peer`` and ends the connection (the reason
    returned is then the violation's code); the connection is closed in every case. With
    ``gate``, no message is handed on while it is clear (reading pauses, the socket's
    buffers fill and the peer's writes wait: backpressure). With ``bound``, large bodies
    are read as the module docstring says."""
    frames = take_over(reader, writer, on_message, gate=gate, bound=bound)
    try:
        return await frames.done
    except (FrameError, ProtocolError) as exc:
        log_now(log, Ev.ERROR, peer=peer, addr=peer_label(writer), stage="read", reason=str(exc))
        return exc.code if isinstance(exc, Violation) else f"protocol error: {exc}"
    except ConnectionError as exc:
        return f"connection lost: {exc!r}"
    finally:
        frames.stop()
        writer.close()
