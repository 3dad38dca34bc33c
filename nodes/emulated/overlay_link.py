"""One overlay link as a broker sees it: the output queue, the emulated wire, the counters.

Every message the routing core sends to neighbour N goes through::

    Send -> output queue --pump--> [loss] -> delay line --release--> socket
            (count_in)    (count_out, `send` record)

- The output queue is an application-level FIFO whose pump writes what is queued in
  batches (one system call each, no larger than ``write_buffer_bytes``) and awaits
  ``drain()`` after each batch, so congestion shows as queue length
  (``write_buffer_bytes`` caps the socket's buffers so that it shows early). Past
  ``high_water_msgs`` the link tells the broker (``on_pressure``); a message that finds
  ``max_queue_msgs`` queued is dropped (``queue_full``).
- ``send`` means "left the output queue onto the link"; with in-broker emulation the frame
  then waits ``delay_ms`` (ms) in the delay line, and loss is drawn as it leaves the queue
  (the link's own seeded ``random.Random``). ``rate_mbps`` (Mbit/s, None: none) paces the
  pump: a per-stream cap.
- Link down: what is queued or in the delay line is dropped (``link_down``, counted as
  ``flushed``). Links opened on demand use :meth:`hold`, :meth:`fail`, :meth:`swap`,
  :meth:`wait_idle` and :meth:`release`; :meth:`heard` and :meth:`keepalive` serve the
  broker's keepalive.

The design choices in full: docs/design/broker.md ("One overlay link").
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections import deque
from collections.abc import Callable

from nodes.cores.interface import LinkWindow
from nodes.emulated.runtime import WRITE_BATCH_BYTES, log_message_now, log_now
from nodes.frames import encode
from nodes.logs import Ev, JsonlLog, message_fields
from nodes.messages import Message

# A paced link whose next slot passed less than this long ago (seconds) was busy, its
# timer only late: the slot is kept, so lateness does not slow the stream.
PACE_SLACK_S = 0.005


class OverlayLink:
    """Output queue, optional in-broker delay/loss, and window counters for one neighbour."""

    def __init__(
        self,
        neighbour: str,
        log: JsonlLog,
        *,
        delay_ms: float = 0.0,
        loss_pct: float = 0.0,
        rng: random.Random | None = None,
        write_buffer_bytes: int | None = None,
        rate_mbps: float | None = None,
        max_queue_msgs: int | None = None,
        high_water_msgs: int | None = None,
        on_pressure: Callable[[str, bool], None] | None = None,
    ) -> None:
        if delay_ms < 0 or not 0 <= loss_pct <= 100:
            raise ValueError(f"link to {neighbour}: need delay_ms >= 0 and 0 <= loss_pct <= 100")
        if rate_mbps is not None and not rate_mbps > 0:
            raise ValueError(f"link to {neighbour}: rate_mbps must be positive, got {rate_mbps}")
        if loss_pct and rng is None:
            raise ValueError(f"link to {neighbour}: emulated loss needs a seeded rng")
        self.neighbour = neighbour
        self._log = log
        self._delay_s = delay_ms / 1000.0
        self._loss_p = loss_pct / 100.0
        self._rng = rng
        self._write_buffer_bytes = write_buffer_bytes
        self._batch_bytes = min(WRITE_BATCH_BYTES, write_buffer_bytes or WRITE_BATCH_BYTES)
        # Seconds per byte of the per-stream rate (0: unpaced), and the loop time before
        # which the next frame may not leave the queue.
        self._pace_s_per_byte = 0.0 if rate_mbps is None else 8.0 / (rate_mbps * 1e6)
        self._free_at = 0.0
        self._queue: deque[tuple[Message, bytes]] = deque()
        self._line: deque[tuple[float, bytes, Message]] = deque()
        self._queued = asyncio.Event()
        self._writer: asyncio.StreamWriter | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._release_timer: asyncio.TimerHandle | None = None
        self._count_in = 0
        self._count_out = 0
        self._flushed = 0
        self._holding = False
        self._idle = asyncio.Event()
        # time.monotonic() when bytes were last handed to the socket, and when a frame
        # last arrived on the connection (the keepalive's two clocks).
        self._written_s = 0.0
        self._heard_s = 0.0
        self._max_queue = max_queue_msgs
        self._high_water = high_water_msgs
        self._on_pressure = on_pressure
        self._pressed = False  # over the high-water mark, and not yet back under half

    @property
    def up(self) -> bool:
        """Whether a connection to the neighbour is attached."""
        return self._writer is not None

    @property
    def writer(self) -> asyncio.StreamWriter | None:
        """The attached connection's writer (to tell a replaced connection from the current one)."""
        return self._writer

    @property
    def holding(self) -> bool:
        """Whether messages are queued for a connection still being opened (:meth:`hold`)."""
        return self._holding

    @property
    def queue_len(self) -> int:
        """Messages waiting in the output queue."""
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in the delay line."""
        return not self._queue and not self._line

    def hold(self) -> None:
        """Queue (and count in) messages while a connection is being opened; :meth:`attach`
        starts carrying them, :meth:`fail` drops them."""
        if self._writer is not None:
            raise RuntimeError(f"link to {self.neighbour} is already up")
        self._holding = True

    def fail(self, reason: str) -> None:
        """The connection :meth:`hold` waited for could not be opened: drop (and log with
        ``reason``) everything queued."""
        self._holding = False
        self._flushed += len(self._queue)
        dropped = [msg for msg, _ in self._queue]
        self._queue.clear()
        self._idle.set()
        self._eased()
        for msg in dropped:
            log_now(self._log, Ev.DROP, link=self.neighbour, reason=reason,
                    **message_fields(msg))

    async def wait_idle(self) -> None:
        """Return once nothing is queued or in the delay line (every frame handed to the
        connection); at once if that is so now."""
        while not self.idle:
            self._idle.clear()
            await self._idle.wait()

    def enqueue(self, msg: Message, frame: bytes | None = None) -> None:
        """Put ``msg`` on the output queue (or drop and log it if the link is down);
        ``frame``: its encoding, when the caller has it (a copy sent on several links is
        encoded once)."""
        if self._writer is None and not self._holding:
            log_now(self._log, Ev.DROP, link=self.neighbour, reason="link_down",
                    **message_fields(msg))
            return
        self._count_in += 1
        if self._max_queue is not None and len(self._queue) >= self._max_queue:
            self._flushed += 1
            log_now(self._log, Ev.DROP, link=self.neighbour, reason="queue_full",
                    **message_fields(msg))
            return
        self._queue.append((msg, encode(msg) if frame is None else frame))
        self._queued.set()
        if (self._high_water is not None and not self._pressed
                and len(self._queue) >= self._high_water):
            self._press(True)

    def _press(self, on: bool) -> None:
        """Cross the high-water mark (up) or half of it (down): tell the broker."""
        self._pressed = on
        if self._on_pressure is not None:
            self._on_pressure(self.neighbour, on)

    def _eased(self) -> None:
        """The queue shrank: lift the pressure once it is at half the mark or less."""
        if self._pressed and len(self._queue) <= (self._high_water or 0) // 2:
            self._press(False)

    def attach(self, writer: asyncio.StreamWriter) -> None:
        """Start carrying the queue over the connection ``writer`` (after its handshake)."""
        if self._writer is not None:
            raise RuntimeError(f"link to {self.neighbour} is already up")
        if self._write_buffer_bytes is not None:
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, self._write_buffer_bytes
            )
            writer.transport.set_write_buffer_limits(high=self._write_buffer_bytes)
        self._writer = writer
        self._holding = False
        self._written_s = self._heard_s = time.monotonic()
        self._pump_task = asyncio.create_task(self._pump(writer), name=f"pump-{self.neighbour}")

    def swap(self, writer: asyncio.StreamWriter) -> None:
        """Carry on over the connection ``writer`` instead of the current one, which is
        closed once it has sent what it buffered; the queue and the delay line move over."""
        old = self._writer
        if old is None:
            raise RuntimeError(f"link to {self.neighbour} is not up")
        self._stop_pump()
        old.close()
        self._writer = None
        self.attach(writer)
        if self._line:
            loop = asyncio.get_running_loop()
            self._release_timer = loop.call_at(self._line[0][0], self._release)

    def release(self) -> asyncio.StreamWriter:
        """Hand the connection back, still open, for a graceful close; only when
        :attr:`idle` (nothing is dropped)."""
        writer = self._writer
        if writer is None or not self.idle:
            raise RuntimeError(f"link to {self.neighbour} is not up and idle")
        self._stop_pump()
        self._writer = None
        return writer

    def _stop_pump(self) -> None:
        assert self._pump_task is not None
        self._pump_task.cancel()
        self._pump_task = None
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None

    def detach(self) -> None:
        """Close the connection; drop (and log) everything queued or in flight on it."""
        if self._writer is None:
            return
        assert self._pump_task is not None
        self._pump_task.cancel()
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self._writer.close()
        self._writer = None
        self._flushed += len(self._queue)
        dropped = [msg for msg, _ in self._queue] + [msg for _, _, msg in self._line]
        self._queue.clear()
        self._line.clear()
        self._idle.set()
        self._eased()
        for msg in dropped:
            log_now(self._log, Ev.DROP, link=self.neighbour, reason="link_down",
                    **message_fields(msg))

    def heard(self) -> None:
        """A frame arrived on the connection (any frame, a KEEPALIVE included)."""
        self._heard_s = time.monotonic()

    def silent_s(self, now_s: float) -> float:
        """Seconds (``time.monotonic``) since a frame last arrived; 0 while the link is down."""
        return now_s - self._heard_s if self._writer is not None else 0.0

    def keepalive(self, frame: bytes, now_s: float, idle_s: float) -> None:
        """Write ``frame`` (a KEEPALIVE) if the link is up and idle: nothing queued and
        nothing handed to the socket for ``idle_s`` seconds (``time.monotonic``)."""
        if self._writer is None or self._queue or now_s - self._written_s < idle_s:
            return
        self._writer.write(frame)
        self._written_s = now_s

    def take_window(self) -> tuple[LinkWindow, int]:
        """The figures of the window just ended, and how many queued messages were flushed
        by a lost link in it; the counters restart from zero."""
        window = LinkWindow(self._count_in, self._count_out, len(self._queue))
        flushed = self._flushed
        self._count_in = self._count_out = self._flushed = 0
        return window, flushed

    async def _pump(self, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._queue:
                    self._queued.clear()
                    if not self._line:
                        self._idle.set()
                    await self._queued.wait()
                    continue
                if self._pace_s_per_byte:
                    wait_s = self._free_at - loop.time()
                    if wait_s > 0:
                        await asyncio.sleep(wait_s)
                        continue  # the queue may have been flushed meanwhile
                # Unpaced, what is queued leaves in one write (one system call), up to
                # WRITE_BATCH_BYTES (no more than the socket's capped buffer holds, so
                # congestion still shows in the queue) before backpressure is asked again.
                frames: list[bytes] = []
                batch_bytes = 0
                while True:
                    frame = self._take(loop)
                    if frame is not None:
                        frames.append(frame)
                        batch_bytes += len(frame)
                    if (self._pace_s_per_byte or not self._queue
                            or batch_bytes >= self._batch_bytes):
                        break
                if frames:
                    writer.writelines(frames)
                    self._written_s = time.monotonic()
                await writer.drain()
        except ConnectionError:
            # The reader of this connection sees it end and reports the link down.
            writer.close()

    def _take(self, loop: asyncio.AbstractEventLoop) -> bytes | None:
        """Take the next message off the queue onto the link (its ``send`` record, and
        the pace's next slot); its frame to write now, or ``None`` when the emulated wire
        loses it or delays it (the delay line writes it later)."""
        msg, frame = self._queue.popleft()
        if self._pace_s_per_byte:
            # Back to back, the next slot follows this one exactly (a timer that
            # fired a little late is not lost rate); after an idle spell it starts now.
            now = loop.time()
            start = self._free_at if now - self._free_at < PACE_SLACK_S else now
            self._free_at = start + len(frame) * self._pace_s_per_byte
        self._count_out += 1
        if self._pressed:
            self._eased()
        log_message_now(self._log, Ev.SEND, self.neighbour, msg, len(frame))
        if self._loss_p and self._rng.random() < self._loss_p:
            log_message_now(self._log, Ev.DROP, self.neighbour, msg, len(frame), reason="loss")
            return None
        if self._delay_s:
            self._line.append((loop.time() + self._delay_s, frame, msg))
            if self._release_timer is None:
                self._release_timer = loop.call_at(self._line[0][0], self._release)
            return None
        return frame

    def _release(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = []
        while self._line and self._line[0][0] <= now:
            due.append(self._line.popleft()[1])
        assert self._writer is not None  # detach() cancels this timer
        self._writer.writelines(due)
        self._written_s = time.monotonic()
        self._release_timer = loop.call_at(self._line[0][0], self._release) if self._line else None
        if not self._line and not self._queue:
            self._idle.set()
