"""JSON-lines event logs, shared by the emulated and the simulated runtime.

Every message a broker or client sends or receives, every delivery, and every queue
statistics window becomes one JSON object per line. Both runtimes write the same record
shapes so that analysis does not care which runtime produced a run. Fields:

- ``t_mono``: seconds on the runtime's monotonic clock (simulated time in the simulator);
- ``t_wall``: Unix time in seconds (the simulator uses a fixed epoch plus simulated time);
- ``node``: the broker or client writing the record;
- ``ev``: ``send`` | ``recv`` | ``deliver`` | ``drop`` | ``queue`` | ``link`` | ``record``
  | ``error``;
- for message events: ``type`` (MsgType name), ``origin``, ``msg_id``, ``hops``,
  ``link`` (neighbour or client name), ``size`` (frame bytes);
- for ``queue``: ``link``, ``count_in``, ``count_out``, ``queue_len``, ``window_ms``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from nodes.frames import frame_size
from nodes.messages import Message


def message_fields(msg: Message, size: int | None = None) -> dict[str, Any]:
    """The log fields that identify a message; ``size``: its frame's length in bytes,
    when the caller has the frame already (otherwise it is computed)."""
    return {
        "type": msg.type.name,
        "origin": msg.origin,
        "msg_id": msg.msg_id,
        "hops": msg.hops,
        "size": frame_size(msg) if size is None else size,
    }


class JsonlLog:
    """Append-only JSON-lines log for one node. Keys are written in sorted order so that
    identical runs give byte-identical files."""

    def __init__(self, path: Path | str, node: str) -> None:
        self.node = node
        self._fh: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, ev: str, t_mono: float, t_wall: float, **fields: Any) -> None:
        rec = {"t_mono": round(t_mono, 6), "t_wall": round(t_wall, 6), "node": self.node, "ev": ev}
        rec.update(fields)
        self._fh.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def iter_jsonl(path: Path, ev: str | None = None) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines log, streamed (none if the file is missing); with
    ``ev``, only the records of that event."""
    if not path.exists():
        return
    tag = f'"{ev}"' if ev is not None else ""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if tag in line and line.strip():  # cheap filter: runs have millions of lines
                r = json.loads(line)
                if ev is None or r.get("ev") == ev:
                    yield r
