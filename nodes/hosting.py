"""What every host of routing cores does, whichever runtime it is: the shared hosting kernel.

The emulated broker (:mod:`nodes.emulated.broker`) and the simulator (:mod:`nodes.sim.simulator`)
differ in how they move bytes and keep time; they must not differ in how they treat a core. Both
follow these rules, written here once:

- **Params.** A core gets the params its registry entry derives from the overlay merged
  with the declared params of the run plan (:func:`merge_params`; the two never share a
  key).
- **Actions.** A ``Send`` must name a neighbour, a ``Deliver`` a local client; anything
  else a core returns is a bug in the core (:func:`bad_action`). Where the host opens
  links on demand, a ``Send`` may name any node (below), and ``Disconnect`` is an action.
- **Links on demand.** A ``Send`` to a node the core has no link to dials it; the dial
  costs what a TCP connect does: the dialler's side is up one round trip after the
  first ``Send`` (its core gets :class:`~nodes.cores.interface.LinkUp`, then what it sent meanwhile
  goes, in order), the acceptor's when the dialler's HELLO arrives (its ``LinkUp`` before
  the first message). One connection per pair: both directions share it. Every side that
  comes up logs ``link`` ``state: up`` with ``peer`` and ``reason`` ``dialled`` or
  ``accepted``. ``Disconnect``: what is queued still goes, then the connection closes;
  the closer logs ``link`` ``state: down`` (no ``LinkDown`` to its core) and still
  receives what the peer sent before the close reached it; the peer gets ``LinkDown``
  when it does; a later ``Send`` dials again. A dial to a node that is dead or dormant
  fails: ``link`` ``state: dial_failed`` with the reason, a ``drop`` (reason
  ``dial_failed``) for each message sent on it, and ``LinkDown`` to the dialler's core.
  A ``Send`` to, or ``Disconnect`` of, a name that is no node, and a ``Disconnect`` of a
  fixed link, are core bugs; a ``Disconnect`` with no link open does nothing.
- **Membership.** A node with a JOIN operation in the workload is dormant until its
  first JOIN, and again after a LEAVE (``record`` kind ``membership``, ``state``
  ``dormant``, ``joined``, ``left``): it accepts no connection, drops what reaches it
  (``drop`` reason ``dormant``) and its core gets no event but the timers it set before
  a LEAVE. JOIN (payload ``{"bootstrap": NAME}``) and LEAVE reach the core as client
  operations; after a LEAVE the host closes what links the core left open. CRASH kills
  the node's process. A client operation other than JOIN on a dormant node is a workload
  error (the simulator refuses it before the run).
- **Matching delay.** The handling of a message of a type in
  :data:`~nodes.metrics.summary.MATCHED_TYPES` is timed on ``time.perf_counter``
  (:func:`handle_timed`): the paper's matching delay, measured, never modelled.
- **Statistics windows.** Every ``window_ms`` the host hands the core a
  :class:`~nodes.cores.interface.LinkStats`; a link's ``queue`` record is written only for a window
  in which it was active or was active in the window before (:func:`window_worth_logging`).
  A core that declares it never reads them (:class:`IgnoresLinkStats`) is not handed
  them; the records are still written where the host keeps logs.
- **Events.** A lost overlay link is a :class:`~nodes.cores.interface.LinkDown` to the core and a
  ``link`` record ``state: down`` (the emulated broker when the connection ends, the
  simulator when a neighbour's process dies, one link delay later, as the peer's FIN or
  RST would arrive). A link opened on demand is a :class:`~nodes.cores.interface.LinkUp` when it
  comes up (links on demand, above); fixed links never give one.
- **Inter-broker messages (IMs)** are counted when they leave an output queue onto the
  wire (a ``send`` record), not when a core enqueues them: a message still queued when a
  run ends, or queued at a broker that dies, never reached the network.
- **End of run.** A core with tables logs their sizes (``record`` kind ``tables``), one
  with counters logs them (kind ``counters``), one with records of its own logs those:
  :func:`final_records`.

Optional capabilities of a core are declared as protocols (:class:`HasTables`,
:class:`HasCounters`, :class:`HasFinalRecords`, :class:`IgnoresLinkStats`), checked with
``isinstance``.
"""

from __future__ import annotations

from collections.abc import Mapping
from time import perf_counter
from typing import Any, Protocol, runtime_checkable

from nodes.cores.interface import Action, Event, RoutingCore
from nodes.messages import MsgType
from nodes.metrics.summary import MATCHED_TYPES

MATCHED = frozenset(MsgType[name] for name in MATCHED_TYPES)


@runtime_checkable
class HasTables(Protocol):
    """A core with routing tables whose sizes the summary reports (``srt``, ``prt``)."""

    def table_sizes(self) -> Mapping[str, int]: ...


@runtime_checkable
class HasCounters(Protocol):
    """A core that counts what it did (the bulk agents' slices sent and received)."""

    def counters(self) -> Mapping[str, int]: ...


@runtime_checkable
class IgnoresLinkStats(Protocol):
    """A core that never acts on a :class:`~nodes.cores.interface.LinkStats` (it sets the class
    attribute ``ignores_link_stats = True``): a simulator without logs then needs no
    statistics windows at all, which with thousands of links on demand is most of its
    bookkeeping."""

    ignores_link_stats: bool


def reads_link_stats(core: RoutingCore) -> bool:
    """Whether ``core`` is to be handed statistics windows (see :class:`IgnoresLinkStats`)."""
    return not (isinstance(core, IgnoresLinkStats) and core.ignores_link_stats)


def merge_params(derived: Mapping[str, Any], declared: Mapping[str, Any]) -> dict[str, Any]:
    """A core's params: what it derives from the overlay and what the plan declares;
    ValueError if they share a key (a spec must not override a derived param)."""
    both = sorted(set(derived) & set(declared))
    if both:
        raise ValueError(f"params {both} are derived from the overlay and cannot be set")
    return {**derived, **declared}


def handle_timed(core: RoutingCore, event: Event, now_s: float, msg_type: MsgType | None
                 ) -> tuple[list[Action], float | None]:
    """``core.handle(event, now_s)``, and the seconds it took if the event carries a
    message of type ``msg_type`` that counts as a matching (else ``None``)."""
    if msg_type not in MATCHED:
        return core.handle(event, now_s), None
    t0_s = perf_counter()
    actions = core.handle(event, now_s)
    return actions, perf_counter() - t0_s


def bad_action(broker: str, action: Any, *, neighbour: bool | None = None,
               local_client: bool | None = None) -> Exception:
    """The error a host raises for an action it must refuse (see the module docstring)."""
    if neighbour is False:
        return ValueError(f"core at {broker} sent on {action.link!r}: not a neighbour")
    if local_client is False:
        return ValueError(f"core at {broker} delivered to non-local client {action.client!r}")
    return TypeError(f"core at {broker} returned {action!r}, not an action")


def window_worth_logging(figures: tuple[int, int, int], was_active: bool) -> bool:
    """Whether a link's window (count in, count out, queue length) gets a ``queue``
    record: it was active, or it was active in the window before (its return to idle)."""
    return figures != (0, 0, 0) or was_active


@runtime_checkable
class HasFinalRecords(Protocol):
    """A core with records of its own to log when a run ends (Meghdoot's zone and load)."""

    def final_records(self) -> list[tuple[str, dict[str, Any]]]: ...


def final_records(core: RoutingCore) -> list[tuple[str, dict[str, Any]]]:
    """The ``record`` entries (kind, fields) a host logs for ``core`` when a run ends."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(core, HasTables):
        out.append(("tables", dict(core.table_sizes())))
    if isinstance(core, HasCounters):
        out.append(("counters", dict(core.counters())))
    if isinstance(core, HasFinalRecords):
        out += core.final_records()
    return out
