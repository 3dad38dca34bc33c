"""Links opened on demand, per connection (docs/design/simulator.md, "Links on
demand", "Disconnect", "Failed dials"): dials, the two sides coming up, closes
and refusals.

A :class:`Connections` belongs to one simulation and works on its links' state
(:class:`~nodes.sim.network.Network`) and its engine's heap; what it keeps itself is the
state of connections not yet up or being closed, and its two counts. It pickles with the
simulation (a pause).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from nodes.cores.interface import LinkDown, LinkUp
from nodes.logs import Ev, message_fields
from nodes.messages import Message
from nodes.sim.events import CLOSE, REFUSE, UP

if TYPE_CHECKING:  # only for annotations: the simulator imports this module
    from nodes.sim.simulator import Simulation


class Connections:
    """The on-demand connections of simulation ``sim``."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.net = sim.net
        self.waiting: dict[int, list[Message]] = {}  # sides not up yet -> Sends held
        self.close_when_up: set[int] = set()  # Disconnected before they came up
        self.closed: set[int] = set()  # sides closed: no Send takes them again
        # Dials failing, by (dialling broker, name): the reason and the Sends made meanwhile.
        self.refusing: dict[tuple[int, str], tuple[str, list[Message]]] = {}
        self.links_opened = 0  # sides that came up (SimResult.links_opened)
        self.dials_failed = 0

    def send(self, bi: int, name: str, msg: Message, now: float) -> None:
        """A Send to ``name`` on no link that is up: it waits for the side coming up, joins
        a dial that is failing, or dials (docs/design/simulator.md, "Links on demand")."""
        sim, net = self.sim, self.net
        lid = net.out_links[bi].get(name)
        if lid is not None:  # a side not up yet (our dial, or the peer's)
            self.waiting[lid].append(msg)
            return
        failing = self.refusing.get((bi, name))
        if failing is not None:
            failing[1].append(msg)
            return
        me = sim.brokers[bi]
        ti = sim.bidx.get(name)
        if ti is None or ti == bi:  # a core bug, as in the emulated broker
            raise ValueError(f"core at {me} sent {msg.type.name} to {name!r}: "
                             f"{'itself' if ti == bi else 'no such broker'}")
        model = sim.on_demand
        assert model is not None  # _act sends here only with a link model
        lat = model.latency_ms
        if callable(lat):
            d_ab, d_ba = model.latency_s(me, name), model.latency_s(name, me)
        else:
            d_ab = d_ba = lat / 1000.0  # checked by LinkModel
        if math.isinf(d_ab) or math.isinf(d_ba):
            self._refuse(bi, name, msg, now, "no route")
        elif ti in sim.dead:
            self._refuse(bi, name, msg, now + d_ab + d_ba, "refused")
        elif ti in sim.dormant:
            self._refuse(bi, name, msg, now + d_ab + d_ba, "dormant")
        else:
            rate = model.link_mbps
            if rate is None:
                s_ab = s_ba = 0.0
            else:
                s_ab, s_ba = model.s_per_byte(me, name), model.s_per_byte(name, me)
            ab = net.new_pair(bi, ti, d_ab, d_ba, s_ab, s_ba)
            ba = ab + 1
            net.out_links[bi][name] = ab
            net.out_links[ti][me] = ba  # one connection a pair: the peer's Sends join it
            self.waiting[ab] = [msg]
            self.waiting[ba] = []
            sim.engine.push(now + d_ab + d_ba, UP, ab, True)  # SYN, SYN-ACK: one round trip

    def _refuse(self, bi: int, name: str, msg: Message, at: float, reason: str) -> None:
        sim = self.sim
        self.refusing[(bi, name)] = (reason, [msg])
        sim.engine.push(at, REFUSE, bi, name)

    def disconnect(self, bi: int, name: str, now: float) -> None:
        """Broker ``bi`` closes its link to ``name``: what is queued still goes, then the
        peer's side closes one link delay after the last frame left."""
        sim, net = self.sim, self.net
        lid = net.out_links[bi].get(name)
        if name not in sim.bidx or (lid is not None and lid < net.n_fixed):
            raise ValueError(f"core at {sim.brokers[bi]} disconnected {name!r}: "
                             f"{'a fixed link' if lid is not None else 'no such broker'}")
        if lid is None:
            return  # no link open: nothing to close
        del net.out_links[bi][name]  # a later Send dials again
        if lid in self.waiting:
            self.close_when_up.add(lid)
            return
        self._close_own(lid, now)

    def _close_own(self, lid: int, now: float) -> None:
        sim, net = self.sim, self.net
        self.closed.add(lid)
        if sim.log is not None:
            sim.log(net.link_src_name[lid], Ev.LINK, now, link=net.link_dst_name[lid],
                     role="broker", state="down", reason="disconnect")
        last_bit = max(now, net.busy_until[lid])
        sim.engine.push(last_bit + net.delay_s[lid], CLOSE, net.link_rev[lid],
                        "closed by peer")

    def dial_refused(self, bi: int, name: str, t: float) -> bool:
        """A REFUSE entry: broker ``bi``'s dial to ``name`` failed; whether its core heard."""
        reason, msgs = self.refusing.pop((bi, name))
        return self._dial_failed(bi, name, msgs, reason, t)

    def _dial_failed(self, bi: int, peer: str, msgs: list[Message], reason: str,
                     t: float) -> bool:
        sim = self.sim
        if bi in sim.dead:
            return False
        self.dials_failed += 1
        if sim.log is not None:
            broker = sim.brokers[bi]
            sim.log(broker, Ev.LINK, t, link=peer, role="broker", state="dial_failed",
                     reason=reason)
            for msg in msgs:
                sim.log(broker, Ev.DROP, t, link=peer, reason="dial_failed",
                         **message_fields(msg))
        if bi in sim.dormant:  # a dormant core hears of no link
            return False
        sim.act(bi, sim.cores[bi].handle(LinkDown(peer), t), t)
        return True

    def up(self, lid: int, dialler: bool, t: float) -> bool:
        """Side ``lid`` of a connection comes up: the dialler's one round trip after its
        first Send, the acceptor's when the dialler's handshake (its ACK and HELLO frame)
        arrives one link delay later."""
        sim, net = self.sim, self.net
        msgs = self.waiting.pop(lid, None)
        src = net.link_src[lid]
        if msgs is None or src in sim.dead:
            return False  # closed before it came up
        peer = net.link_dst_name[lid]
        self.links_opened += 1
        if sim.log is not None:
            sim.log(sim.brokers[src], Ev.LINK, t, link=peer, role="broker", state="up",
                     peer=peer, reason="dialled" if dialler else "accepted")
        if dialler:  # before our first frame, whose arrival can tie with it
            sim.engine.push(t + net.delay_s[lid], UP, net.link_rev[lid], False)
        for msg in msgs:
            net.enqueue(src, lid, msg, t)
        if lid in self.close_when_up or src in sim.dormant:
            # The core closed it already (it never sees it up), or it is dormant and
            # keeps no connection: what it sent goes, then it closes.
            self.close_when_up.discard(lid)
            if net.out_links[src].get(peer) == lid:
                del net.out_links[src][peer]
            self._close_own(lid, t)
            return False
        actions = sim.cores[src].handle(LinkUp(peer), t)
        if actions:
            sim.act(src, actions, t)
        return True

    def closed_by_peer(self, lid: int, reason: str, t: float) -> bool:
        """A CLOSE entry, the peer closed (or died): side ``lid`` closes and what it still
        has queued is flushed (frames already sent still arrive). A side that never came
        up fails as a dial would, if its core sent on it."""
        sim, net = self.sim, self.net
        if lid in self.closed:
            return False
        self.closed.add(lid)
        src, peer = net.link_src[lid], net.link_dst_name[lid]
        if net.out_links[src].get(peer) == lid:
            del net.out_links[src][peer]
        self.close_when_up.discard(lid)
        msgs = self.waiting.pop(lid, None)
        if msgs is not None:
            return bool(msgs) and self._dial_failed(src, peer, msgs, reason, t)
        net.cut.add(lid)
        if src in sim.dead:
            return False
        if sim.log is not None:
            sim.log(sim.brokers[src], Ev.LINK, t, link=peer, role="broker", state="down",
                     reason=reason)
        if src in sim.dormant:
            return False
        sim.act(src, sim.cores[src].handle(LinkDown(peer), t), t)
        return True
