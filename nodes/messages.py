"""Overlay messages: what travels between brokers and clients.

A message is a type, a system-wide unique id, the node it originated at, the number of
overlay hops it has taken, and a JSON-able payload that only routing cores interpret.
The binary frame encoding of a message lives in :mod:`nodes.frames`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class MsgType(enum.IntEnum):
    """Message types; the integer is the one-byte code on the wire (never reuse a code)."""

    ADVERTISE = 1
    UNADVERTISE = 2
    SUBSCRIBE = 3
    UNSUBSCRIBE = 4
    PUBLISH = 5
    ADV_REPLY = 6  # OctopiA: a secondary cluster tells the host broker to set its CIV bit
    CIB_SET = 7  # OctopiA: a subscription asks a publisher's host broker to set a CIV bit
    CIV_NOTIFY = 8  # OctopiA IDR: a notification with the clusters still to be served
    HELLO = 9  # link handshake: the sender names itself
    DATA = 10  # bulk data slice (LBDD and point-to-point)
    HEARTBEAT = 11
    JOIN = 12
    CIB_CLEAR = 13  # OctopiA: a secondary cluster tells the host broker to clear its CIV bit
    DATA_ACK = 14  # bulk data: a receiver acknowledges one slice to the node that sent it
    HAVE = 15  # bulk data: a receiver tells a sender which slices it already holds
    HAVE_QUERY = 16  # bulk data: a sender asks a new child which slices it already holds
    LEAVE = 17  # membership: a node leaves gracefully (a client op, like JOIN)
    CRASH = 18  # membership: the runtime kills the node (a workload op; never sent)
    KEEPALIVE = 19  # an idle overlay link says it is alive (broker to broker; no core sees it)
    NOTIFY = 20  # Meghdoot: a zone hands a matched event to its subscribers' peer
    ZONE = 21  # Meghdoot: a zone granted to a joining peer, split, or announced to neighbours
    LOAD = 22  # Meghdoot: a peer's load and the heaviest peers it has heard of
    TREE = 23  # CoDD: tree maintenance (join, leave, reorganization); payload "op" names the step


# The most overlay hops a message can record: the frame carries ``hops`` as a u16.
MAX_HOPS = 2**16 - 1

# Frames that keep a connection rather than carry routing: never an inter-broker message.
LINK_FRAMES = (MsgType.HELLO, MsgType.KEEPALIVE)


@dataclass(frozen=True, slots=True)
class Message:
    """One overlay message.

    ``msg_id`` is unique per ``origin`` (the origin's own sequence number), so the pair
    ``(origin, msg_id)`` identifies a message system-wide. A message a broker makes on
    behalf of a client's operation (OctopiA's ADV_REPLY, CIB_SET and CIB_CLEAR) keeps that
    operation's origin and msg_id: with the type, the triple tells them apart, and the
    pair ties them to the operation they serve. ``hops`` counts overlay hops
    taken so far. ``payload`` must be JSON-serialisable (str keys; str, int, float,
    bool, None, lists and dicts of those). ``body`` is raw bytes carried beside the
    payload (a bulk data slice); empty for every other message, and then the frame is
    exactly the JSON-only frame of version 1 (see :mod:`nodes.frames`).
    """

    type: MsgType
    msg_id: int
    origin: str
    hops: int = 0
    payload: dict[str, Any] = field(default_factory=dict)
    body: bytes = field(default=b"", repr=False)  # 64 KB in a repr helps nobody

    @property
    def key(self) -> tuple[str, int]:
        """The system-wide identity of the message."""
        return (self.origin, self.msg_id)

    def forwarded(self, payload: dict[str, Any] | None = None) -> Message:
        """A copy one hop further on, optionally with a new payload (the body stays)."""
        # The constructor, not dataclasses.replace: this runs once per hop, ~3x cheaper.
        return Message(self.type, self.msg_id, self.origin, self.hops + 1,
                       self.payload if payload is None else payload, self.body)


_MESSAGE_KEYS = {"type", "msg_id", "origin"}
_MESSAGE_OPTIONAL = {"hops", "payload"}


def message_to_json(msg: Message) -> dict[str, Any]:
    """``msg`` as a JSON-able object (type by name)."""
    return {"type": msg.type.name, "msg_id": msg.msg_id, "origin": msg.origin,
            "hops": msg.hops, "payload": msg.payload}


def message_from_json(obj: Mapping[str, Any]) -> Message:
    """The message a :func:`message_to_json` object describes (``hops`` 0 and ``payload``
    ``{}`` when absent); ``ValueError`` names what is wrong."""
    missing = sorted(_MESSAGE_KEYS - set(obj))
    unknown = sorted(set(obj) - _MESSAGE_KEYS - _MESSAGE_OPTIONAL)
    if missing or unknown:
        raise ValueError(f"message: missing keys {missing}, unknown keys {unknown}")
    try:
        mtype = MsgType[obj["type"]]
    except KeyError:
        raise ValueError(f"unknown message type {obj['type']!r}") from None
    payload = obj.get("payload", {})
    if not isinstance(payload, dict):
        raise ValueError("message payload must be a JSON object")
    return Message(mtype, int(obj["msg_id"]), str(obj["origin"]), int(obj.get("hops", 0)),
                   payload)
