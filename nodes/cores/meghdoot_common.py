"""What the modules of a Meghdoot peer (:mod:`nodes.cores.meghdoot`,
:mod:`nodes.cores.meghdoot_repair`) share: a stored subscription and a mirror copy of
one, as zone messages carry them; a message's identity, and the replica of a zone it
goes to."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from nodes.cores.can import Point
from nodes.messages import Message
from nodes.model import Filter, filter_from_json

CONTACTED, HANDLED, RECOVERED = 1, 2, 4  # what a peer remembers of an event or query


@dataclass(frozen=True, slots=True)
class Sub:
    """A stored subscription: its filter (and JSON form), point, subscriber peer, client."""

    filter_json: list[Any]
    filter: Filter
    point: Point
    peer: str
    client: str

    def to_json(self, key: tuple[str, int]) -> list[Any]:
        return [key[0], key[1], self.filter_json, list(self.point), self.peer, self.client]

    @staticmethod
    def from_json(obj: Sequence[Any]) -> tuple[tuple[str, int], Sub]:
        origin, msg_id, fj, point, peer, client = obj
        return (origin, int(msg_id)), Sub(fj, filter_from_json(fj), tuple(map(float, point)),
                                          peer, client)


class Mirror(NamedTuple):
    """A mirror copy of a subscription and the point it is filed at
    (:func:`nodes.cores.can.mirror_point` of its point and its owner's zone)."""

    sub: Sub
    target: Point

    def to_json(self, key: tuple[str, int]) -> list[Any]:
        return [*self.sub.to_json(key), list(self.target)]

    @staticmethod
    def from_json(obj: Sequence[Any]) -> tuple[tuple[str, int], Mirror]:
        key, sub = Sub.from_json(obj[:6])
        return key, Mirror(sub, tuple(map(float, obj[6])))


def msg_key(msg: Message) -> str:
    return f"{msg.origin}:{msg.msg_id}"


def pick(peers: Sequence[str], key: str) -> str:
    """One replica of a zone for the message ``key`` (the same at every sender)."""
    return peers[zlib.crc32(key.encode()) % len(peers)] if len(peers) > 1 else peers[0]
