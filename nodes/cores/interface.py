"""The pure routing-core interface: events and time in, actions out.

A routing core is a state machine for one broker. It owns no sockets, clocks, threads or
random state: the hosting runtime (the emulated broker process in
:mod:`nodes.emulated.broker`, or the discrete-event simulator in :mod:`nodes.sim.simulator`)
turns the world into :data:`Event` values, calls :meth:`RoutingCore.handle` with the
current time, and carries out the returned :data:`Action` values. Both runtimes host the
same cores, so the same workload must deliver the same notifications to the same
subscribers in both.

Links are named by the neighbour broker at the other end; local clients by their name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodes.messages import Message

# ---- events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrived:
    """A message arrived from the neighbour broker ``link``."""

    link: str
    msg: Message


@dataclass(frozen=True, slots=True)
class FromClient:
    """A local client sent ``msg`` (advertise, subscribe, publish, un-...)."""

    client: str
    msg: Message


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A timer the core set with :class:`SetTimer` fired."""

    name: str


@dataclass(frozen=True, slots=True)
class LinkWindow:
    """Output-queue figures of one overlay link for one statistics window.

    ``count_in``: messages enqueued on the link's output queue during the window;
    ``count_out``: messages that left the queue onto the wire during the window;
    ``queue_len``: messages waiting in the queue at the end of the window.
    """

    count_in: int
    count_out: int
    queue_len: int


@dataclass(frozen=True, slots=True)
class LinkStats:
    """The statistics window of length ``window_ms`` just ended, per link."""

    window_ms: float
    links: Mapping[str, LinkWindow]


@dataclass(frozen=True, slots=True)
class LinkDown:
    """The overlay link to neighbour ``link`` was lost."""

    link: str


@dataclass(frozen=True, slots=True)
class LinkUp:
    """A link to ``link`` opened on demand: the runtime dialled it on this core's first
    ``Send`` to a node that was not yet a neighbour, or ``link`` dialled us. Fixed
    overlays never see it (their links are the core's ``neighbours`` from the start)."""

    link: str


Event = Arrived | FromClient | TimerFired | LinkStats | LinkDown | LinkUp

# ---- actions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """Put ``msg`` on the output queue of the overlay link to neighbour ``link``."""

    link: str
    msg: Message


@dataclass(frozen=True, slots=True)
class Deliver:
    """Hand notification ``msg`` to the local client ``client``."""

    client: str
    msg: Message


@dataclass(frozen=True, slots=True)
class Record:
    """Append a metric record (``kind`` plus JSON-able ``fields``) to the broker's log."""

    kind: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Fire :class:`TimerFired` ``name`` once, ``delay_s`` seconds from now."""

    name: str
    delay_s: float


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the link to ``link`` (opened on demand); messages still queued on it are
    sent first. The other side gets :class:`LinkDown`; a later ``Send`` opens it again."""

    link: str


Action = Send | Deliver | Record | SetTimer | Disconnect


class RoutingCore(Protocol):
    """What every routing core provides.

    ``broker`` is the core's own broker name and ``neighbours`` the brokers it has
    fixed overlay links to at construction. A core may also ``Send`` to any node whose
    name it has learnt (from a message, a bootstrap param or its own state) where the
    runtime opens links on demand; such links come and go with :class:`LinkUp`,
    :class:`Disconnect` and :class:`LinkDown`.
    """

    broker: str
    neighbours: tuple[str, ...]

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event at time ``now_s`` (seconds, runtime clock) into actions."""
        ...
