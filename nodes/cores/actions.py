"""Action lists the routing cores build alike: a matched publication fanned out, and a
message a core does not handle reported."""

from __future__ import annotations

from collections.abc import Set

from nodes.cores.interface import Action, Deliver, Record, Send
from nodes.messages import Message


def fan_out(msg: Message, clients: Set[str], onward: Set[str], subscriptions: int
            ) -> list[Action]:
    """A broker matched ``msg`` against its ``subscriptions``: a ``match`` record
    (subscriptions held, local clients matched; none when it holds no subscription, as
    it matched nothing), one delivery to each of ``clients`` and one copy, one hop
    further, to each neighbour in ``onward`` (both in sorted order)."""
    actions: list[Action] = []
    if subscriptions:
        actions.append(Record("match", {"origin": msg.origin, "msg_id": msg.msg_id,
                                        "subscriptions": subscriptions,
                                        "matched": len(clients)}))
    actions.extend(Deliver(c, msg) for c in sorted(clients))
    if onward:
        copy = msg.forwarded()  # messages are immutable: one copy serves every link
        actions.extend(Send(nb, copy) for nb in sorted(onward))
    return actions


def unhandled(msg: Message, reason: str | None = None) -> Record:
    """An ``unhandled`` record for a message the core drops, with the reason why if the
    type alone does not say it."""
    fields = {"type": msg.type.name, "origin": msg.origin, "msg_id": msg.msg_id}
    if reason is not None:
        fields["reason"] = reason
    return Record("unhandled", fields)
