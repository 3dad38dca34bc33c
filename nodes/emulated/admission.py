"""What a broker admits from the connections it accepts: its limits, and the codes that its
log and ``summary.json`` give for every connection it refuses or cuts off.

The HELLO proof (:mod:`nodes.emulated.auth`) keeps strangers out; these limits bound what any
peer, proven or not, can make a broker hold (config keys of :mod:`nodes.emulated.broker`)::

    max_connections        int = 1024 + 2 per neighbour and peer
                           accepted connections open at once, whatever their stage; one
                           more is closed at once (refused: connection_cap). The default
                           is what the broker's descriptor budget counts on (see
                           nodes.emulated.broker.nofile_needed); a larger one raises that budget
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
frame (and asyncio's 64 KiB read buffer) for at most ``connect_timeout_s``; after it,
the frame being read and, for a client, ``client_queue_bytes`` out. A frame body of up to
64 KiB sits in asyncio's read buffer; a larger one holds a share of ``read_budget_bytes``
for at most ``body_timeout_s``. The stated bound on what frames being read hold, all
connections together (:func:`read_bound_bytes`): ``read_budget_bytes`` twice over (a body
is copied once out of the read buffer, which may also grow by an eighth past it) plus,
per connection, asyncio's read buffer (2 x 64 KiB before it pauses the socket, plus one
256 KiB read): at the defaults 128 MiB + 384 KiB per connection, where before 40
connections proven with the secret pinned 16 MiB each (656 MB, about 16 GiB at the
default ``max_connections``). The overlay links' output queues are another matter
(:mod:`nodes.emulated.overlay_link`).

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodes.frames import MAX_FRAME_BYTES

HELLO_FRAME_BYTES = 4096
CLIENT_QUEUE_BYTES = 4 * 1024 * 1024
MAX_FILTERS_PER_CLIENT = 1000
READ_BUDGET_BYTES = 64 * 1024 * 1024
BODY_TIMEOUT_S = 5.0
READ_BUFFER_BYTES = 2 * 64 * 1024 + 256 * 1024  # asyncio's per connection, see above
LIMIT_KEYS = {"max_connections", "hello_frame_bytes", "client_queue_bytes",
        "max_filters_per_client", "read_budget_bytes", "body_timeout_s"}


@dataclass(frozen=True, slots=True)
class Limits:
    """A broker's admission limits (see the module docstring)."""

    max_connections: int
    hello_frame_bytes: int = HELLO_FRAME_BYTES
    client_queue_bytes: int = CLIENT_QUEUE_BYTES
    max_filters_per_client: int = MAX_FILTERS_PER_CLIENT
    read_budget_bytes: int = READ_BUDGET_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], max_connections: int) -> Limits:
        """The limits a broker config sets (its other keys are ignored here), defaults for
        the rest (``max_connections``: the broker's, which depends on its links);
        ``ValueError`` names a bad value."""
        values = {"max_connections": obj.get("max_connections", max_connections),
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
        body_timeout_s = obj.get("body_timeout_s", BODY_TIMEOUT_S)
        if (isinstance(body_timeout_s, bool) or not isinstance(body_timeout_s, int | float)
                or not 0 < body_timeout_s < float("inf")):
            raise ValueError("broker config: body_timeout_s must be a positive number, "
                             f"got {body_timeout_s!r}")
        return cls(**values, body_timeout_s=float(body_timeout_s))


def read_bound_bytes(limits: Limits, connections: int) -> int:
    """The stated bound on the bytes that frames being read may hold in a broker with
    ``connections`` open (see the module docstring)."""
    return 2 * limits.read_budget_bytes + connections * READ_BUFFER_BYTES
