"""Brokers' input buffers and the frames their full windows hold back, the runtime state of
the processing model (:mod:`nodes.sim.processing` describes the model).

An :class:`InputBuffers` belongs to one simulation: it hands messages to the simulation's
cores when each broker gets to them and schedules the end of their service on the
engine's heap. It pickles with the simulation (a pause).
"""

from __future__ import annotations

from array import array
from collections import deque
from typing import TYPE_CHECKING

from nodes.cores.interface import Deliver, Send
from nodes.messages import Message
from nodes.sim.events import DONE
from nodes.sim.processing import Processing

if TYPE_CHECKING:  # only for annotations: the simulator imports this module
    from nodes.sim.simulator import Simulation


class InputBuffers:
    """The input buffers of simulation ``sim``'s brokers under ``processing`` (``None``:
    no model; then only :attr:`occupied` and the per-broker lists exist, unused)."""

    def __init__(self, sim: Simulation, processing: Processing | None) -> None:
        self.sim = sim
        self.net = sim.net
        brokers = sim.brokers
        if processing is not None:
            strangers = sorted((set(processing.per_broker) | set(processing.cpu_share))
                               - set(sim.bidx))
            if strangers:
                raise ValueError(f"processing names brokers not in the overlay: {strangers}")
            self.service_s = [processing.seconds(b) for b in brokers]
            self.buffer_msgs = processing.buffer_msgs
        # Per broker: messages waiting to be handled, as ((link, message, client), the
        # time it came in) with link None for a client's operation; whether it is
        # handling one; the frames of its window (in flight to it or in its buffer); its
        # busy time (s). The queues exist with the model only (a deque costs 600 bytes,
        # two per broker). Per handled message, the seconds it waited in its buffer, as
        # doubles (8 bytes a message).
        queues = len(brokers) if processing is not None else 0
        self.inbuf: list[deque[tuple[tuple[int | None, Message, str], float]]] = [
            deque() for _ in range(queues)]
        self.serving = [False] * len(brokers)
        self.occupied = [0] * len(brokers)
        self.busy_s = [0.0] * len(brokers)
        self.wait_s = array("d")
        # Frames a full window holds in their senders' output queues, per link, and per
        # receiving broker the links holding frames for it, served in turn.
        self.held: dict[int, deque[Message]] = {}
        self.blocked: list[deque[int]] = [deque() for _ in range(queues)]

    def take_in(self, bi: int, item: tuple[int | None, Message, str], t: float) -> None:
        """A message reaches broker ``bi``'s input buffer at ``t``."""
        self.inbuf[bi].append((item, t))
        if not self.serving[bi]:
            self.serve(bi, t)

    def serve(self, bi: int, t: float) -> None:
        """Broker ``bi`` starts on the next message of its buffer, if any: its core
        handles it now and its actions go out when the service time has passed."""
        sim = self.sim
        buf = self.inbuf[bi]
        if not buf:
            self.serving[bi] = False
            return
        (lid, msg, client), t_in = buf.popleft()
        self.wait_s.append(t - t_in)
        if lid is None:
            actions = sim.handle_op(bi, client, msg, t)
        else:
            self.free(bi, t)
            actions = sim.handle_frame(lid, msg, t)
        n = sum(1 for x in actions if type(x) is Send or type(x) is Deliver)
        base_s, per_match_s = self.service_s[bi]
        took = base_s + per_match_s * n
        self.busy_s[bi] += took
        self.serving[bi] = True
        sim.engine.push(t + took, DONE, bi, actions)

    def free(self, bi: int, t: float) -> None:
        """A frame of broker ``bi``'s window is gone (being handled, or dropped): the
        space goes to the links holding frames for it, one frame each in turn."""
        self.occupied[bi] -= 1
        self._release(bi, t)

    def _release(self, bi: int, t: float) -> None:
        """Send what the links hold for broker ``bi`` while its window has room (a dead
        broker's has no bound: what reaches it is dropped)."""
        sim, net = self.sim, self.net
        blocked = self.blocked[bi]
        while blocked and (self.occupied[bi] < self.buffer_msgs or bi in sim.dead):
            lid = blocked.popleft()
            queue = self.held[lid]
            msg = queue.popleft()
            if queue:
                blocked.append(lid)
            else:
                del self.held[lid]
            net.transmit(net.link_src[lid], lid, msg, t)

    def death(self, bi: int, t: float) -> None:
        """Broker ``bi`` died at ``t``: its buffer is lost, the frames its own output
        queues held are gone, and those held for it go (to be dropped on arrival)."""
        net = self.net
        self.inbuf[bi].clear()
        for lid in [lid for lid in self.held if net.link_src[lid] == bi]:
            del self.held[lid]
            self.blocked[net.link_dst[lid]].remove(lid)
        self._release(bi, t)

    def hold(self, lid: int, msg: Message) -> bool:
        """Whether ``msg``, enqueued on link ``lid``, stays in the sender's output queue:
        the link holds frames already, or the receiver's window is full (a dead
        receiver's has no bound)."""
        sim, net = self.sim, self.net
        dst = net.link_dst[lid]
        held = self.held.get(lid)
        if held is not None:
            held.append(msg)
            return True
        if self.occupied[dst] >= self.buffer_msgs and dst not in sim.dead:
            self.held[lid] = deque((msg,))
            self.blocked[dst].append(lid)
            return True
        return False
