"""Reading a run's JSON-lines logs while they are written, and replaying finished ones.

`pubsublab watch` (:mod:`analysis.live_view`) never asks the brokers for anything: it
reads the files they write anyway (records of :mod:`nodes.logs`), from where it stopped
last time. A live broker flushes its log at every statistics window (50 ms), so a line
can be caught half written: :class:`LogTail` keeps that partial line until its end
arrives. Only the records the view shows are parsed (:func:`wanted`): a broker logs
every message it sends, and parsing those would cost the machine (two cores, shared
with the emulation) far more than the view needs.

A finished run is replayed instead (:func:`replay_records`): the same records, merged
across the logs in time order, for the view to take at a chosen speed.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from nodes.runfolder import log_path

# Records the view shows, as their compact JSON spells them (nodes.logs writes sorted
# keys without blanks): queue windows, core records (lst, idr), deliveries to clients,
# and the publications that enter a broker (the deliveries they call for).
_WANTED = (b'"ev":"queue"', b'"ev":"record"', b'"ev":"deliver"')
_PUBLICATION = (b'"ev":"recv"', b'"type":"PUBLISH"')
# A live read takes at most this much of one file per call, so a view started late in a
# long run catches up over several refreshes instead of freezing on the first.
READ_LIMIT_BYTES = 4 << 20


def wanted(line: bytes) -> bool:
    """Whether a log line holds a record the view shows (a cheap test before parsing)."""
    return any(tag in line for tag in _WANTED) or all(tag in line for tag in _PUBLICATION)


def _parse(line: bytes) -> dict[str, Any] | None:
    """The record on a line: a JSON object with a numeric ``t_wall`` (the view orders by
    it), or None."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("t_wall"), int | float)
    return rec if ok else None


class LogTail:
    """The complete lines appended to one file since the last :meth:`read`.

    The file may not exist yet (a broker not started) and its last line may be partial
    (a write under way): both are left for a later read. A line that is not JSON is
    counted in ``bad_lines`` and skipped, as the analysis does with damaged input (so is
    one without a ``t_wall``)."""

    def __init__(self, path: Path, keep: Callable[[bytes], bool] = wanted) -> None:
        self.path = path
        self._keep = keep
        self._offset = 0
        self._partial = b""
        self.bad_lines = 0

    def read(self, limit_bytes: int = READ_LIMIT_BYTES) -> list[dict[str, Any]]:
        """The wanted records of the complete lines written since the last call (at most
        ``limit_bytes`` of new data)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(limit_bytes)
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        records = []
        for line in lines:
            if not self._keep(line):
                continue
            rec = _parse(line)
            if rec is None:
                self.bad_lines += 1
            else:
                records.append(rec)
        return records


class FolderTail:
    """:class:`LogTail` over the logs of several nodes in one folder, in a fixed order
    (records of one read: each node's in its own order, nodes one after another)."""

    def __init__(self, folder: Path, nodes: Iterable[str]) -> None:
        self.tails = [LogTail(log_path(folder, n)) for n in sorted(nodes)]

    def read(self) -> list[dict[str, Any]]:
        return [rec for tail in self.tails for rec in tail.read()]

    @property
    def bad_lines(self) -> int:
        return sum(t.bad_lines for t in self.tails)


def _records(path: Path, keep: Callable[[bytes], bool]) -> Iterator[dict[str, Any]]:
    """The kept records of a whole file, streamed; a damaged line is skipped (a replay
    shows what it can, as :class:`LogTail` does)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed when the generator ends
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            rec = _parse(line) if keep(line) else None
            if rec is not None:
                yield rec


def replay_records(paths: Iterable[Path], keep: Callable[[bytes], bool] = wanted
                   ) -> Iterator[dict[str, Any]]:
    """The kept records of finished logs merged by ``t_wall`` (each log is in time order
    as its node wrote it), streamed: a replay never holds a run's logs in memory."""
    return heapq.merge(*(_records(p, keep) for p in paths), key=lambda r: r["t_wall"])
