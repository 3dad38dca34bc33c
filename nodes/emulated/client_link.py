"""One local client as its broker sees it: the connection, the rules its messages must
follow, and the bounded queue of what is delivered to it (see :mod:`nodes.emulated.admission`)."""

from __future__ import annotations

import asyncio

from nodes.emulated.admission import Limits
from nodes.emulated.runtime import WRITE_BATCH_BYTES, Violation
from nodes.logs import FILTER_CAP, FORGED_ORIGIN
from nodes.messages import Message, MsgType

FILTER_TYPES = (MsgType.SUBSCRIBE, MsgType.ADVERTISE)  # each puts a filter in the tables


class ClientLink:
    """A connected client ``name`` (its HELLO proved the secret) on ``writer``."""

    def __init__(self, name: str, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self.name = name
        self.writer = writer
        self._transport = writer.transport
        self._loop = asyncio.get_running_loop()  # once: each look-up is a getpid() call
        self._queue_bytes = limits.client_queue_bytes
        self._max_filters = limits.max_filters_per_client
        self._filters = 0  # SUBSCRIBE and ADVERTISE messages taken so far
        # Frames delivered in this turn of the event loop, written together at its end
        # or once they make WRITE_BATCH_BYTES (one system call for a batch of arrivals).
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def admit(self, msg: Message) -> None:
        """Check a message from the client before the core sees it; :class:`Violation`
        (which ends the connection) if it claims another origin or one filter too many."""
        if msg.origin != self.name:
            raise Violation(FORGED_ORIGIN, f"client {self.name} sent a {msg.type.name} "
                                           f"with origin {msg.origin!r}")
        if msg.type in FILTER_TYPES:
            self._filters += 1
            if self._filters > self._max_filters:
                raise Violation(FILTER_CAP, f"client {self.name} sent more than "
                                            f"{self._max_filters} SUBSCRIBE/ADVERTISE messages")

    def deliver(self, frame: bytes) -> bool:
        """Write ``frame`` to the client, unless the bytes waiting for it and the frame
        would exceed ``client_queue_bytes``: then drop the connection at once, with what
        waits (a slow consumer), and return False. A client with nothing waiting always
        takes the frame, however large."""
        # Not yet in the kernel: the transport's buffer and this turn's frames.
        waiting = self._transport.get_write_buffer_size() + self._pending_bytes
        if waiting and waiting + len(frame) > self._queue_bytes:
            # abort(), not close(): close() would keep the unsent bytes until the client
            # reads them, which a slow consumer may never do.
            self._pending.clear()
            self._pending_bytes = 0
            self._transport.abort()
            return False
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(frame)
        self._pending_bytes += len(frame)
        if self._pending_bytes >= WRITE_BATCH_BYTES:
            self._flush()  # on to the kernel now: a batch is waiting bytes too
        return True

    def _flush(self) -> None:
        if self._pending and not self._transport.is_closing():
            # One write of the joined frames (what StreamWriter.writelines does, a call less).
            self._transport.write(b"".join(self._pending))
        self._pending.clear()
        self._pending_bytes = 0

    def close(self) -> None:
        self._flush()
        self.writer.close()
