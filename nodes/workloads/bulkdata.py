"""Bulk topic data (LBDD and point-to-point): the publisher's data, its slices, checksums.

- **Data.** ``data_bytes`` bytes of seeded pseudo-random bytes cut into slices of
  ``slice_bytes`` (the paper's 64 KB; the last slice may be shorter). Slice ``i`` is
  ``random.Random(f"{seed}:{i}").randbytes(n)``, so any slice can be regenerated on its
  own (by the simulator, a checker or a test) without the ones before it.
- **Messages.** A client announces the topic it publishes or subscribes to with
  ADVERTISE or SUBSCRIBE, payload ``{"topic": t}``. Slice ``i`` travels as a DATA
  message from the publisher client: ``msg_id = FIRST_DATA_ID + i`` (the client's
  ADVERTISE is ``msg_id`` 1), payload ``{"topic", "index", "n_slices", "data_bytes"}``
  and the slice as the message's binary ``body`` (frame version 2, :mod:`nodes.frames`).
- **Checksums.** Every slice has a SHA-256 digest; the checksum of the data is the
  SHA-256 of the slice digests concatenated in index order (a hash list). Two copies have
  the same checksum exactly when every slice is byte-identical (up to SHA-256
  collisions), and a subscriber computes it from slices arriving in any order without
  keeping them. :class:`SliceChecker` does it for one data item, :class:`DataLog` for
  whatever DATA a client sends or receives (keyed by publisher and topic).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import Any

from nodes.messages import Message, MsgType

FIRST_DATA_ID = 2
SLICE_BYTES = 64 * 1024  # the paper's slice size


def slice_count(data_bytes: int, slice_bytes: int) -> int:
    """How many slices ``data_bytes`` make (the last one may be short)."""
    if data_bytes <= 0 or slice_bytes <= 0:
        raise ValueError(f"need data_bytes > 0 and slice_bytes > 0, got {data_bytes}, "
                         f"{slice_bytes}")
    return -(-data_bytes // slice_bytes)


def slice_data(seed: int, index: int, data_bytes: int, slice_bytes: int) -> bytes:
    """The bytes of slice ``index`` of the data seeded with ``seed``."""
    if not 0 <= index < slice_count(data_bytes, slice_bytes):
        raise ValueError(f"slice {index} outside the data")
    n = min(slice_bytes, data_bytes - index * slice_bytes)
    return random.Random(f"{seed}:{index}").randbytes(n)


def data_messages(publisher: str, topic: str, data_bytes: int, slice_bytes: int,
                  seed: int) -> Iterator[Message]:
    """The DATA messages a publisher client sends for the whole data, in index order."""
    n_slices = slice_count(data_bytes, slice_bytes)
    for i in range(n_slices):
        payload = {"topic": topic, "index": i, "n_slices": n_slices, "data_bytes": data_bytes}
        yield Message(MsgType.DATA, FIRST_DATA_ID + i, publisher, 0, payload,
                      slice_data(seed, i, data_bytes, slice_bytes))


def data_checksum(slice_digests: list[bytes]) -> str:
    """The checksum of the data (hex) from its slices' SHA-256 digests in index order."""
    return hashlib.sha256(b"".join(slice_digests)).hexdigest()


def source_checksum(data_bytes: int, slice_bytes: int, seed: int) -> str:
    """The checksum of the data the publisher sends (regenerated from the seed)."""
    return data_checksum([hashlib.sha256(slice_data(seed, i, data_bytes, slice_bytes)).digest()
                          for i in range(slice_count(data_bytes, slice_bytes))])


class SliceChecker:
    """A subscriber's view of one topic's data: which slices arrived, how often, and the
    checksum once all of them did."""

    def __init__(self) -> None:
        self.n_slices: int | None = None
        self.data_bytes = 0
        self._digests: dict[int, bytes] = {}
        self.duplicates = 0
        self.bytes_received = 0

    def add(self, msg: Message) -> tuple[int, str, bool]:
        """Take one DATA message: (index, the slice's SHA-256 hex, whether it is a duplicate)."""
        index = int(msg.payload["index"])
        self.n_slices = int(msg.payload["n_slices"])
        self.data_bytes = int(msg.payload["data_bytes"])
        digest = hashlib.sha256(msg.body).digest()
        duplicate = index in self._digests
        if duplicate:
            self.duplicates += 1
        else:
            self._digests[index] = digest
            self.bytes_received += len(msg.body)
        return index, digest.hex(), duplicate

    @property
    def complete(self) -> bool:
        """Whether every slice has arrived."""
        return self.n_slices is not None and len(self._digests) == self.n_slices

    def summary(self) -> dict[str, Any]:
        """Slices, bytes and duplicates so far, and the checksum once complete."""
        checksum = None
        if self.complete:
            assert self.n_slices is not None
            checksum = data_checksum([self._digests[i] for i in range(self.n_slices)])
        return {"slices": len(self._digests), "n_slices": self.n_slices,
                "bytes": self.bytes_received, "data_bytes": self.data_bytes,
                "duplicates": self.duplicates, "checksum": checksum}


class DataLog:
    """A client's DATA messages, sent or received, checked per (publisher, topic)."""

    def __init__(self) -> None:
        self._checkers: dict[tuple[str, str], SliceChecker] = {}

    def add(self, msg: Message) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Take one DATA message: the fields to log with it (``index``, ``sha256``,
        ``duplicate``), and the data's summary (:meth:`SliceChecker.summary` plus
        ``origin`` and ``topic``) if this message completed it, else ``None``."""
        key = (msg.origin, str(msg.payload["topic"]))
        checker = self._checkers.setdefault(key, SliceChecker())
        was_complete = checker.complete
        index, sha256, duplicate = checker.add(msg)
        fields = {"index": index, "sha256": sha256, "duplicate": duplicate}
        if checker.complete and not was_complete:
            return fields, {"origin": key[0], "topic": key[1], **checker.summary()}
        return fields, None
