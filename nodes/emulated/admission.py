"""What a broker admits from the connections it accepts: its limits, and the codes that its
log and ``summary.json`` give for every connection it refuses or cuts off.

The HELLO proof (:mod:`nodes.emulated.auth`) keeps strangers out; these limits bound what any
peer, proven or not, can make a broker hold (config keys of :mod:`nodes.emulated.broker`)::

    max_connections        int = 1024 + 2 per neighbour and peer
                           proven connections (past their HELLO) open at once; one more
                           proven HELLO is answered refused: connection_cap and closed.
                           The default is what the broker's descriptor budget counts on
                           (see nodes.emulated.broker.nofile_needed); a larger one raises
                           that budget
    max_unproven           int = 256
                           accepted connections that have not yet proven a HELLO, a budget
                           of their own so that they can never crowd out the run's
                           clients and neighbours: one more evicts the oldest unproven
                           connection of the source address that holds the most of them
                           (refused: unproven_evicted). An honest peer sends its HELLO as
                           it connects, so it is unproven for one read; a flood from one
                           address evicts its own connections first
    hello_timeout_s        float = 2
                           an accepted connection whose HELLO has not arrived whole within
                           this is closed (a handshake error)
    hello_frame_bytes      int = 4096
                           the largest frame read before a peer's HELLO is accepted (a
                           HELLO takes under 1.2 KB even with 255-byte names, 700 with
                           ASCII ones); a longer length prefix is a handshake error
                           before any of its bytes are read
    client_queue_bytes     int = 4 MiB
                           bytes written to a local client that it has not yet taken
                           (asyncio's write buffer; the kernel's socket buffer comes on
                           top). A delivery that would exceed it disconnects the client
                           as a slow consumer (see below)
    max_filters_per_client int = 1000
                           SUBSCRIBE and ADVERTISE messages one client connection may
                           send (each puts a filter in the routing tables); one more
                           disconnects it (filter_cap)
    read_budget_bytes      int = 64 MiB
                           frame bodies over 64 KiB being read at once, all connections
                           together (nodes.emulated.read_budget); at least
                           nodes.frames.MAX_FRAME_BYTES (16 MiB), so every frame fits.
                           A body waits up to body_timeout_s for its share, else its
                           connection is cut (read_budget)
    body_timeout_s         float = 5
                           a body over 64 KiB that has its share must arrive within this,
                           else its connection is cut (body_timeout), so a peer that
                           stalls mid-frame frees what it holds (an overlay link with
                           nothing arriving for link_timeout_s goes down anyway)

So a connection holds, before its HELLO, at most ``hello_frame_bytes`` of an unread
frame (and asyncio's 64 KiB read buffer) for at most ``hello_timeout_s``; after it,
the frame being read and, for a client, ``client_queue_bytes`` out. A frame body of up to
64 KiB sits in the connection's read buffer (:mod:`nodes.emulated.frame_protocol`); a
larger one holds a share of ``read_budget_bytes`` for at most ``body_timeout_s``. The
stated bound on what frames being read hold, all connections together
(:func:`read_bound_bytes`): ``read_budget_bytes`` twice over (a body is copied once out
of the read buffer, which may also grow by an eighth past it) plus, per connection, the
read buffer (a partial frame of up to 64 KiB and what one 256 KiB read brings with it,
within the 2 x 64 KiB + 256 KiB that asyncio's stream reader held): at the defaults
128 MiB + 384 KiB per connection, where before 40 connections proven with the secret
pinned 16 MiB each (656 MB, about 16 GiB at the default ``max_connections``). The
overlay links' output queues are another matter (:mod:`nodes.emulated.overlay_link`).

**Slow consumers** (the policy of NATS): a broker never blocks on, nor buffers without
bound for, one client. A notification for a client whose waiting bytes plus the new
frame would exceed ``client_queue_bytes`` is not written: the client is disconnected at
once (its unsent bytes discarded), the notification is dropped (``drop`` record, reason
``slow_consumer``) and so is every later one for it (``client_not_connected``). The
``link`` record ``down`` says ``slow_consumer``; the summary counts it; the client,
which never reconnects, exits 1. A frame larger than the bound still goes to a client
with nothing waiting.

Codes: a refused connection is a ``link`` record ``state: refused`` with ``peer``
(ip:port), ``link`` (the name its HELLO claimed, when it got that far) and ``reason``;
a connection cut off for what it did is a ``link`` record ``state: down`` with the
reason (and, for a broken rule, an ``error`` record with the details). The reasons'
names are part of the log schema (:mod:`nodes.logs`): the summary counts by them.
Refusals and handshake errors are rate-limited (:mod:`nodes.emulated.admission_log`):
past a burst the rest are counted in ``admission_suppressed`` records, which the summary
adds in.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from nodes.frames import MAX_FRAME_BYTES

HELLO_FRAME_BYTES = 4096
CLIENT_QUEUE_BYTES = 4 * 1024 * 1024
MAX_FILTERS_PER_CLIENT = 1000
READ_BUDGET_BYTES = 64 * 1024 * 1024
BODY_TIMEOUT_S = 5.0
MAX_UNPROVEN = 256
HELLO_TIMEOUT_S = 2.0
READ_BUFFER_BYTES = 2 * 64 * 1024 + 256 * 1024  # asyncio's per connection, see above
LIMIT_KEYS = {"max_connections", "max_unproven", "hello_frame_bytes", "client_queue_bytes",
              "max_filters_per_client", "read_budget_bytes", "body_timeout_s",
              "hello_timeout_s"}


@dataclass(frozen=True, slots=True)
class Limits:
    """A broker's admission limits (see the module docstring)."""

    max_connections: int
    max_unproven: int = MAX_UNPROVEN
    hello_frame_bytes: int = HELLO_FRAME_BYTES
    client_queue_bytes: int = CLIENT_QUEUE_BYTES
    max_filters_per_client: int = MAX_FILTERS_PER_CLIENT
    read_budget_bytes: int = READ_BUDGET_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S
    hello_timeout_s: float = HELLO_TIMEOUT_S

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], max_connections: int) -> Limits:
        """The limits a broker config sets (its other keys are ignored here), defaults for
        the rest (``max_connections``: the broker's, which depends on its links);
        ``ValueError`` names a bad value."""
        values = {"max_connections": obj.get("max_connections", max_connections),
                  "max_unproven": obj.get("max_unproven", MAX_UNPROVEN),
                  "hello_frame_bytes": obj.get("hello_frame_bytes", HELLO_FRAME_BYTES),
                  "client_queue_bytes": obj.get("client_queue_bytes", CLIENT_QUEUE_BYTES),
                  "max_filters_per_client": obj.get("max_filters_per_client",
                                                    MAX_FILTERS_PER_CLIENT),
                  "read_budget_bytes": obj.get("read_budget_bytes", READ_BUDGET_BYTES)}
        for key, value in values.items():
            if type(value) is not int or value < 1:
                raise ValueError(f"broker config: {key} must be a positive int, got {value!r}")
        if values["hello_frame_bytes"] < 2048:
            raise ValueError("broker config: hello_frame_bytes must be at least 2048 "
                             "(a HELLO with the longest names takes about 1200)")
        if values["read_budget_bytes"] < MAX_FRAME_BYTES:
            raise ValueError(f"broker config: read_budget_bytes must be at least "
                             f"{MAX_FRAME_BYTES} (the largest frame), got "
                             f"{values['read_budget_bytes']}")
        timeouts = {key: obj.get(key, default) for key, default in
                    (("body_timeout_s", BODY_TIMEOUT_S), ("hello_timeout_s", HELLO_TIMEOUT_S))}
        for key, value in timeouts.items():
            if (isinstance(value, bool) or not isinstance(value, int | float)
                    or not 0 < value < float("inf")):
                raise ValueError(f"broker config: {key} must be a positive number, "
                                 f"got {value!r}")
        return cls(**values, **{key: float(value) for key, value in timeouts.items()})


def read_bound_bytes(limits: Limits, connections: int) -> int:
    """The stated bound on the bytes that frames being read may hold in a broker with
    ``connections`` open (see the module docstring)."""
    return 2 * limits.read_budget_bytes + connections * READ_BUFFER_BYTES


class UnprovenConnections:
    """The accepted connections that have not yet proven a HELLO, at most ``limit`` of
    them (``max_unproven`` above). Keys are the connections (any hashable); each is
    admitted with its source address. When a new one finds the budget full, the oldest
    connection of the source holding the most is evicted: whoever floods evicts their
    own connections before anyone else's."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._source: dict[Hashable, str] = {}
        self._by_source: dict[str, dict[Hashable, None]] = {}  # in order of acceptance

    def __len__(self) -> int:
        return len(self._source)

    def admit(self, key: Hashable, source: str) -> Hashable | None:
        """Count ``key`` in; the connection it evicts to make room, if any."""
        evicted = None
        if len(self._source) >= self.limit:
            # ties go to the source present longest (dicts keep insertion order)
            busiest = max(self._by_source.values(), key=len)
            evicted = next(iter(busiest))
            self.discard(evicted)
        self._source[key] = source
        self._by_source.setdefault(source, {})[key] = None
        return evicted

    def discard(self, key: Hashable) -> None:
        """Count ``key`` out (proven, failed or closed); a key not in is ignored."""
        source = self._source.pop(key, None)
        if source is None:
            return
        keys = self._by_source[source]
        del keys[key]
        if not keys:
            del self._by_source[source]
