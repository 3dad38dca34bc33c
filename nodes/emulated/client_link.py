"""One local client as its broker sees it: the connection, the rules its messages must
follow, and the bounded queue of what is delivered to it (see :mod:`nodes.emulated.admission`)."""

from __future__ import annotations

import asyncio

from nodes.emulated.admission import Limits
from nodes.emulated.runtime import Violation
from nodes.logs import FILTER_CAP, FORGED_ORIGIN
from nodes.messages import Message, MsgType

FILTER_TYPES = (MsgType.SUBSCRIBE, MsgType.ADVERTISE)  # each puts a filter in the tables


class ClientLink:
    """A connected client ``name`` (its HELLO proved the secret) on ``writer``."""

    def __init__(self, name: str, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self.name = name
        self.writer = writer
        self._queue_bytes = limits.client_queue_bytes
        self._max_filters = limits.max_filters_per_client
        self._filters = 0  # SUBSCRIBE and ADVERTISE messages taken so far

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
        waiting = self.writer.transport.get_write_buffer_size()  # not yet in the kernel
        if waiting and waiting + len(frame) > self._queue_bytes:
            # abort(), not close(): close() would keep the unsent bytes until the client
            # reads them, which a slow consumer may never do.
            self.writer.transport.abort()
            return False
        self.writer.write(frame)
        return True

    def close(self) -> None:
        self.writer.close()
