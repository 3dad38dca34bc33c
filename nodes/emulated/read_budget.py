"""The bytes of frame bodies a broker may hold at once while it reads them, shared by all
its connections (``read_budget_bytes`` of :mod:`nodes.emulated.admission`).

A connection's reader (:mod:`nodes.emulated.frame_protocol`, and ``StreamReader.
readexactly(n)`` for the HELLO) keeps a whole frame body in memory as it arrives, so
without a shared bound every connection could pin one frame of
:data:`nodes.frames.MAX_FRAME_BYTES`. A body larger than :data:`SMALL_BODY_BYTES` reserves
its length here once its prefix is read and gives it back once it is decoded (or the
connection is cut); a smaller one stays within a connection's own read bound and
reserves nothing, so a full budget never delays ordinary publications.
"""

from __future__ import annotations

import asyncio
from collections import deque

SMALL_BODY_BYTES = 64 * 1024  # asyncio's StreamReader limit, the bound a connection's buffer had


class ReadBudget:
    """``total_bytes`` shared by the frames being read; waiters are served in order, so a
    large frame is not starved by smaller ones arriving after it."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.free_bytes = total_bytes
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def reserve(self, n_bytes: int, timeout_s: float) -> bool:
        """Take ``n_bytes`` (at most ``total_bytes``), waiting up to ``timeout_s``; False
        if they did not come free in that time (nothing is then held)."""
        if not self._waiters and n_bytes <= self.free_bytes:
            self.free_bytes -= n_bytes
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n_bytes, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_s):
                await future
            return True
        except BaseException as exc:  # the timeout, or the connection's task cancelled
            if future.done() and not future.cancelled():  # granted as the wait ended
                if isinstance(exc, TimeoutError):
                    return True
                self.release(n_bytes)
                raise
            self._waiters.remove(entry)
            self._grant()  # the frames queued behind this one may fit now
            if isinstance(exc, TimeoutError):
                return False
            raise

    def release(self, n_bytes: int) -> None:
        """Give back what :meth:`reserve` took."""
        self.free_bytes += n_bytes
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._waiters[0][0] <= self.free_bytes:
            n_bytes, future = self._waiters.popleft()
            self.free_bytes -= n_bytes
            future.set_result(None)
