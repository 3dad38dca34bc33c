"""Which subscribers each notification reached in a simulated run, 4 bytes a delivery.

A run's result maps each notification ``(origin, msg_id)`` to the clients it reached, in
delivery order, one entry per delivery (duplicates stay visible). As lists of names those
took an 8-byte pointer a delivery and the lists' spare room, about 9 bytes; a 10,000-peer
Meghdoot run makes 72 million deliveries. Here each notification holds one array of
32-bit client numbers, and the names are made when a value is read.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping

from nodes.metrics.summary import MsgKey


class Deliveries(Mapping[MsgKey, list[str]]):
    """Per notification, the names of the clients it reached in delivery order (a
    read-only mapping; the simulator appends with :meth:`of` and :attr:`numbers`)."""

    def __init__(self, clients: Iterable[str]) -> None:
        self._names = sorted(clients)
        self._numbers = {c: i for i, c in enumerate(self._names)}
        self._by_key: dict[MsgKey, array] = {}

    @property
    def numbers(self) -> Mapping[str, int]:
        """The number :meth:`of`'s arrays hold for each workload client (read only; a
        mapping, not a method, since the simulator looks one up a delivery)."""
        return self._numbers

    def of(self, key: MsgKey) -> array:
        """The client numbers notification ``key`` reached so far, to append to."""
        got = self._by_key.get(key)
        if got is None:
            got = self._by_key[key] = array("i")
        return got

    def total(self) -> int:
        """Deliveries of every notification, duplicates included."""
        return sum(len(got) for got in self._by_key.values())

    def __getitem__(self, key: MsgKey) -> list[str]:
        names = self._names
        return [names[i] for i in self._by_key[key]]

    def __iter__(self) -> Iterator[MsgKey]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __repr__(self) -> str:
        return f"Deliveries({dict(self.items())!r})"
