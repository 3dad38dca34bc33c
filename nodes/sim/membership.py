"""Which brokers are members when (docs/design/simulator.md,
"Membership" and "Failures"): a workload's JOIN, LEAVE and CRASH ops checked before the
run starts, then joins, leaves and deaths as the run meets them.

A :class:`Members` belongs to one simulation and keeps which of its brokers are dead and
which dormant; it pickles with the simulation (a pause).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores.interface import FromClient
from nodes.logs import Ev, message_fields
from nodes.messages import MsgType
from nodes.sim.events import ARRIVE, CLOSE, DEPART, DONE, DOWN, OP, TIMER

if TYPE_CHECKING:  # only for annotations: the simulator imports this module
    from nodes.sim.simulator import Simulation
    from nodes.workloads.ops import ClientOp


def plan_membership(ops: Sequence[ClientOp], bidx: Mapping[str, int],
                    kill_at: dict[int, float]) -> tuple[set[int], array[int]]:
    """Check the workload's membership ops and return the brokers (indices in ``bidx``)
    dormant at the start (those with a JOIN op), and the work done once each operation in
    run order has run, for the progress share; CRASH ops become kills in ``kill_at``
    (broker index -> time of death, updated in place; the earliest counts).

    The work: each operation weighted by the members (brokers joined and not left)
    there are when it runs, since an event reaches a share of them. On a fixed
    overlay that is the share of operations. In a 10,000-peer Meghdoot run the
    events after the last join cost thousands of times the subscriptions the first
    peer stores before the first; counted alike, a run's line said "91 % done, about
    20 min left" after 5 minutes of 69."""
    for op in ops:
        if op.msg.type is MsgType.CRASH:
            bi = bidx[op.broker]
            kill_at[bi] = min(kill_at.get(bi, math.inf), float(op.t_s))
    dormant = {bidx[op.broker] for op in ops if op.msg.type is MsgType.JOIN}
    away = set(dormant)
    done = 0  # the members summed over the operations so far
    cumulative = array("q")
    for i in sorted(range(len(ops)), key=lambda i: (ops[i].t_s, i)):  # run order
        done += max(1, len(bidx) - len(away))
        cumulative.append(done)
        op = ops[i]
        bi, mtype = bidx[op.broker], op.msg.type
        dies = kill_at.get(bi, math.inf)
        if mtype is MsgType.JOIN:
            if op.t_s >= dies:
                raise ValueError(f"op at {op.t_s} s: JOIN by client {op.client} on "
                                 f"{op.broker}, killed at {dies} s (a killed broker does "
                                 "not come back)")
            away.discard(bi)
        elif mtype is MsgType.CRASH or op.t_s > dies:
            continue  # the ops of a dead broker are not carried out
        elif bi in away:
            raise ValueError(f"op at {op.t_s} s: {mtype.name} by client {op.client} on "
                             f"{op.broker}, which is dormant (not joined): clients attach "
                             "only to nodes that have joined")
        elif mtype is MsgType.LEAVE:
            away.add(bi)
    return dormant, cumulative


class Members:
    """The dead and the dormant brokers of simulation ``sim`` (indices), and the run's
    progress weights, from the workload's ``ops`` (:func:`plan_membership`, which turns
    CRASH ops into ``sim.kill_at`` entries)."""

    def __init__(self, sim: Simulation, ops: Sequence[ClientOp]) -> None:
        self.sim = sim
        self.net = sim.net
        self.dead: set[int] = set()
        self.dormant, self.op_work = plan_membership(ops, sim.bidx, sim.kill_at)

    def announce_death(self, bi: int, t: float) -> None:
        """Broker ``bi`` died at ``t``: each live neighbour loses its link one link delay
        later (when the dead process's FIN or RST would reach it)."""
        sim, net = self.sim, self.net
        for nb, lid in sorted(net.out_links[bi].items()):
            nbi = sim.bidx[nb]
            if nbi not in self.dead:
                if lid < net.n_fixed:
                    sim.engine.push(t + net.delay_s[lid], DOWN, nbi, bi)
                else:  # a link opened on demand: the peer's side closes
                    sim.engine.push(t + net.delay_s[lid], CLOSE, net.link_rev[lid],
                                    "peer died")
        # Disconnected before they came up: no longer in out_links, but the peer's side
        # waits for them.
        for lid in sorted(x for x in sim.conns.close_when_up if net.link_src[x] == bi):
            sim.engine.push(t + net.delay_s[lid], CLOSE, net.link_rev[lid], "peer died")

    def at_dead_broker(self, kind: int, a: Any, b: Any = None, t: float = 0.0) -> bool:
        """Whether a heap entry concerns a dead broker, and so never happens; or is the
        arrival of a flushed frame, or one at a dormant broker (dropped, and logged)."""
        sim, net = self.sim, self.net
        if kind in (TIMER, DONE):
            return a in self.dead
        if kind == OP:
            return sim.bidx[a.broker] in self.dead
        # a is a link: a dead sender's frames are lost, and so is what reaches the dead.
        if kind == DEPART:
            return net.link_src[a] in self.dead
        if net.link_src[a] in self.dead or net.link_dst[a] in self.dead:
            return True
        if kind != ARRIVE:
            return False
        if a in net.cut:
            key = (a, id(b))
            entry = net.flushed_frames.get(key)
            if entry is not None:
                entry[1] -= 1
                if not entry[1]:
                    del net.flushed_frames[key]
                return True
        if net.link_dst[a] in self.dormant:
            if sim.log is not None:
                sim.log(net.link_dst_name[a], Ev.DROP, t, link=net.link_src_name[a],
                         reason="dormant", **message_fields(b))
            return True
        return False

    def member_op(self, op: ClientOp, t: float) -> None:
        """A JOIN, LEAVE or CRASH op (CRASH is carried out as a kill, see plan_membership)."""
        sim, net = self.sim, self.net
        mtype = op.msg.type
        if mtype is MsgType.CRASH:
            return
        bi = sim.bidx[op.broker]
        log = sim.log
        if log is not None:
            fields = message_fields(op.msg)
            log(op.client, Ev.SEND, t, link=op.broker, **fields)
            log(op.broker, Ev.RECV, t, link=op.client, **fields)
        if mtype is MsgType.JOIN and bi in self.dormant:
            self.dormant.discard(bi)
            if log is not None:
                log(op.broker, Ev.RECORD, t, kind="membership", state="joined")
        sim.act(bi, sim.cores[bi].handle(FromClient(op.client, op.msg), t), t)
        if mtype is MsgType.LEAVE:
            self.dormant.add(bi)
            for nb, lid in sorted(net.out_links[bi].items()):
                if lid >= net.n_fixed:
                    sim.conns.disconnect(bi, nb, t)
            if log is not None:
                log(op.broker, Ev.RECORD, t, kind="membership", state="left")
