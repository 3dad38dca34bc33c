"""A simulated run's delay samples, kept in a temporary file rather than in memory.

The simulator takes one notification delay a delivery and one matching delay a
publication a core handles: 72 million and some 66 million doubles in a 10,000-peer
Meghdoot run with 50,000 events, 1 GiB held until its end, when the cores' tables are
largest. A :class:`SampleFile` holds the last :data:`CHUNK_SAMPLES` in memory and the
rest, in order, in an unnamed temporary file (``$TMPDIR``, deleted when closed); the
summary reads them back whole, as one numpy array, once the simulation is over and its
cores are gone. Every figure is the same: the same doubles, in the same order.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from typing import IO, Any

# Samples held in memory before they go to the file (512 KiB): few writes, little held.
CHUNK_SAMPLES = 1 << 16
_BYTES = array("d").itemsize


class SampleFile:
    """Doubles appended in order (:meth:`append`, or :meth:`repeat` for a run of one
    value), read back in order: ``len``, iteration, and ``numpy.asarray`` (a new array
    of them all)."""

    def __init__(self) -> None:
        self._tail = array("d")
        self._file: IO[bytes] | None = None
        self._on_file = 0  # samples in the file, ahead of the tail

    def append(self, value: float) -> None:
        tail = self._tail
        tail.append(value)
        if len(tail) >= CHUNK_SAMPLES:
            self._spill()

    def repeat(self, value: float, count: int) -> None:
        """``value`` appended ``count`` times (a message's deliveries at one moment)."""
        tail = self._tail
        tail.extend(array("d", (value,)) * count)
        if len(tail) >= CHUNK_SAMPLES:
            self._spill()

    def _spill(self) -> None:
        """The tail onto the end of the file (reads use pread, so the file's offset is
        always its end)."""
        if self._file is None:
            # Held as long as the samples; closed (and so deleted) when they are collected.
            self._file = tempfile.TemporaryFile(  # noqa: SIM115
                prefix="pubsublab-samples-", buffering=0)
        self._tail.tofile(self._file)
        self._on_file += len(self._tail)
        self._tail = array("d")

    def _filed(self) -> Iterator[bytes]:
        """The file's samples in order, at most :data:`CHUNK_SAMPLES` a chunk, as bytes."""
        if self._file is not None:
            fd = self._file.fileno()
            for start in range(0, self._on_file, CHUNK_SAMPLES):
                n = min(CHUNK_SAMPLES, self._on_file - start)
                yield os.pread(fd, n * _BYTES, start * _BYTES)

    def _chunks(self) -> Iterator[array]:
        """The samples in order, at most :data:`CHUNK_SAMPLES` a chunk."""
        for data in self._filed():
            chunk = array("d")
            chunk.frombytes(data)
            yield chunk
        yield self._tail

    def __len__(self) -> int:
        return self._on_file + len(self._tail)

    def __iter__(self) -> Iterator[float]:
        for chunk in self._chunks():
            yield from chunk

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """All the samples as a new float64 array (numpy's array protocol)."""
        import numpy as np  # here: numpy is slow to import, and only a summary asks

        out = np.empty(len(self), dtype=np.float64)
        at = 0
        for chunk in self._chunks():
            out[at:at + len(chunk)] = np.frombuffer(chunk, dtype=np.float64)
            at += len(chunk)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __eq__(self, other: object) -> bool:
        """The same samples in the same order (a resumed run's are compared with an
        uninterrupted run's)."""
        if not isinstance(other, SampleFile):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                      strict=True))

    def __getstate__(self) -> dict[str, Any]:
        """A paused run's samples (a file does not pickle), as chunks of bytes: an array
        is read back from bytes that the unpickler keeps until the whole state is read,
        so arrays would be held twice meanwhile."""
        return {"chunks": [*self._filed(), self._tail.tobytes()]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._file, self._on_file = None, 0
        for data in state["chunks"]:
            self._tail = array("d")
            self._tail.frombytes(data)
            if self._tail:
                self._spill()
        self._tail = array("d")

    def __repr__(self) -> str:
        return f"SampleFile({len(self)} samples)"
