"""JSON-lines event logs, shared by the emulated and the simulated runtime.

Every message a broker or client sends or receives, every delivery, and every queue
statistics window becomes one JSON object per line. Both runtimes write the same record
shapes so that analysis does not care which runtime produced a run. The schema is typed
in code: :class:`Ev` lists the events (writers must pass one, readers compare with one)
and :data:`LOG_FIELDS` every field a writer writes, with its kind (the analysis,
:mod:`analysis.logs`, derives its columns from it). Events (``ev``):

- ``send`` / ``recv``: a message left for / arrived from ``link``; a client's DATA also
  carries ``index``, ``sha256`` and ``duplicate``; a broker's ``recv`` of a notification
  carries ``matching_ms``; a publication carries ``t_pub``;
- ``deliver``: a broker handed a notification to its client ``link`` (with ``t_pub``);
- ``drop``: a message that will not arrive (``reason``: ``loss``, ``link_down``,
  ``client_not_connected``, ``dial_failed`` (a link opened on demand could not be),
  ``dormant`` (it reached a node that has not joined), ``slow_consumer`` (its client
  was disconnected for not reading, :mod:`nodes.emulated.admission`));
- ``queue``: one statistics window of the output queue to ``link``: ``count_in``,
  ``count_out``, ``queue_len``, ``flushed``, ``window_ms``;
- ``link``: a connection to ``link`` (``role`` broker or client) changed ``state``
  (``configured`` with ``delay_ms``, ``loss_pct``, ``emulated`` and, when the broker
  paces the link to a per-stream cap, ``rate_mbps``; ``up`` with ``peer``
  and, for links opened on demand, ``reason`` ``dialled``, ``accepted`` or ``replaced``;
  ``down`` with ``reason``; ``dial_failed`` with ``reason`` and ``retry_in_s``;
  ``refused``: a dialler turned away, with ``peer``, ``reason`` ``crossed`` or
  ``dormant``, or an admission code of :mod:`nodes.emulated.admission` (then ``link`` and
  ``role`` only if the HELLO got that far));
- ``record``: a routing core's :class:`~nodes.cores.interface.Record` (or a host's end-of-run
  ``tables``/``counters``, its ``nofile`` limit and ``membership`` changes, a client's
  ``data_send``/``data_recv``): ``kind`` and the
  record's own fields, which are free-form (a field named like one below has its kind);
- ``error``: something went wrong at ``stage`` (``listen``, ``handshake``, ``read``,
  ``core``, ``dial``) with ``peer``/``addr`` where known, and ``reason``.

Fields (kinds: ``float`` is a JSON number, ``int`` an integer, ``int32`` one that fits
32 signed bits, ``str`` a string, ``bool`` true/false; a ``null`` value means the same as
an absent field):

- ``t_wall`` (float): Unix time in seconds (the simulator uses a fixed epoch plus
  simulated time);
- ``t_mono`` (float): seconds on the runtime's monotonic clock (simulated time in the
  simulator);
- ``node`` (str): the broker or client writing the record;
- ``ev`` (str): the event, one of :class:`Ev`;
- message events: ``type`` (str, MsgType name), ``origin`` (str), ``msg_id`` (int,
  unsigned 64-bit), ``hops`` (int32), ``link`` (str, neighbour or client name), ``size``
  (int, frame bytes), ``t_pub`` (float, the publication's send time on the ``t_wall``
  scale);
- ``queue``: ``count_in``, ``count_out``, ``queue_len``, ``flushed`` (int),
  ``window_ms`` (float);
- ``kind`` (str, of a ``record``), ``state``, ``reason``, ``role`` (str);
- ``matching_ms`` (float), ``index`` (int), ``sha256`` (str), ``duplicate`` (bool),
  ``delay_ms``, ``loss_pct``, ``rate_mbps`` (float), ``emulated`` (bool),
  ``retry_in_s`` (float),
  ``stage``, ``peer``, ``addr`` (str): as above.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from nodes.frames import frame_size
from nodes.messages import Message, MsgType


class Ev(StrEnum):
    """The event of a log record (its ``ev`` field). A member is a ``str``: it compares
    equal to, formats as and is written to JSON as its plain value."""

    SEND = "send"
    RECV = "recv"
    DELIVER = "deliver"
    DROP = "drop"
    QUEUE = "queue"
    LINK = "link"
    RECORD = "record"
    ERROR = "error"


FieldKind = Literal["float", "int", "int32", "str", "bool"]


@dataclass(frozen=True)
class LogField:
    """One field of the log records: its ``name``, its ``kind`` (the JSON values it
    takes, see the module docstring) and what it means."""

    name: str
    kind: FieldKind
    meaning: str


# Every field any writer writes. The order is the column order of the analysis
# (analysis.logs): append new fields, do not reorder.
LOG_FIELDS: tuple[LogField, ...] = (
    LogField("t_wall", "float", "Unix time, s (simulator: fixed epoch + simulated time)"),
    LogField("t_mono", "float", "monotonic clock, s (simulator: simulated time)"),
    LogField("node", "str", "the broker or client writing the record"),
    LogField("ev", "str", "the event, an Ev"),
    LogField("type", "str", "message type (MsgType name)"),
    LogField("origin", "str", "message origin"),
    LogField("msg_id", "int", "message id (unsigned 64-bit)"),
    LogField("hops", "int32", "message hop count"),
    LogField("link", "str", "neighbour or client the record is about"),
    LogField("size", "int", "frame bytes, length prefix included"),
    LogField("t_pub", "float", "publication's send time, t_wall scale"),
    LogField("count_in", "int", "queue window: messages enqueued"),
    LogField("count_out", "int", "queue window: messages that left the queue"),
    LogField("queue_len", "int", "queue window: messages waiting at its end"),
    LogField("flushed", "int", "queue window: messages flushed by a lost link"),
    LogField("window_ms", "float", "queue window: length, ms"),
    LogField("kind", "str", "record: the Record's kind"),
    LogField("state", "str", "link: configured | up | down | dial_failed"),
    LogField("reason", "str", "why (drop, link down or failed, error)"),
    LogField("role", "str", "link: the peer's role, broker | client"),
    LogField("matching_ms", "float", "broker recv of a notification: core handle time, ms"),
    LogField("index", "int", "client DATA send/recv: slice index"),
    LogField("sha256", "str", "client DATA send/recv: the slice's SHA-256, hex"),
    LogField("duplicate", "bool", "client DATA recv: the slice had arrived before"),
    LogField("delay_ms", "float", "link configured: one-way delay, ms"),
    LogField("loss_pct", "float", "link configured: loss, percent"),
    LogField("emulated", "bool", "link configured: the broker applies delay and loss"),
    LogField("rate_mbps", "float", "link configured: the per-stream cap the broker paces "
             "the link to, Mbit/s (absent: none)"),
    LogField("retry_in_s", "float", "link dial_failed: seconds until the next attempt"),
    LogField("stage", "str", "error: listen | handshake | read | core | dial"),
    LogField("peer", "str", "link up, error: the remote end (name or ip:port)"),
    LogField("addr", "str", "error: the remote end's ip:port"),
)
FIELDS_BY_NAME: dict[str, LogField] = {f.name: f for f in LOG_FIELDS}
# The reasons of ``link`` records (nodes.emulated.admission holds the policy; the summary
# counts by these names).
# Refusals, before a connection is admitted.
CONNECTION_CAP = "connection_cap"  # max_connections (proven connections) reached
UNPROVEN_EVICTED = "unproven_evicted"  # evicted unproven to make room (max_unproven)
UNAUTHENTICATED = "unauthenticated"  # no proof of the run's secret, or a wrong one
REPLAYED = "replayed"  # a proof with a nonce this broker has accepted before
WRONG_ADDRESS = "wrong_address"  # a neighbour's or peer's name from another address
NAME_TAKEN = "name_taken"  # a client name that is connected already (the first stays)
REFUSALS = (CONNECTION_CAP, UNPROVEN_EVICTED, UNAUTHENTICATED, REPLAYED, WRONG_ADDRESS,
            NAME_TAKEN)
# Disconnections of an admitted client.
SLOW_CONSUMER = "slow_consumer"
FORGED_ORIGIN = "forged_origin"  # a message whose origin is not the client's own name
FILTER_CAP = "filter_cap"
# Connections (a client's or a broker link) cut while reading a large frame body.
READ_BUDGET = "read_budget"  # no room in the broker's read budget in time
BODY_TIMEOUT = "body_timeout"  # the body did not arrive in time
DISCONNECTIONS = (SLOW_CONSUMER, FORGED_ORIGIN, FILTER_CAP, READ_BUDGET, BODY_TIMEOUT)
# The fields every record has, whatever its event (the rest of a record payload, for
# ev == record, is the core's own).
COMMON_FIELDS = ("t_mono", "t_wall", "node", "ev")


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


# Records of single messages: what a log bound stops writing (see JsonlLog).
PER_MESSAGE = frozenset({Ev.SEND, Ev.RECV, Ev.DELIVER, Ev.DROP})
_TYPE_NAMES = {t: t.name for t in MsgType}  # Enum.name is a descriptor: a lookup is cheaper


class MessageRecord(msgspec.Struct, kw_only=True):
    """The fixed fields of a record of one message (:data:`PER_MESSAGE`), written by
    :meth:`JsonlLog.message` without building a dict per record. The fields are declared
    in sorted order, so that the encoded line is byte for byte the one the dict of the
    same fields gives with sorted keys; an optional field left ``UNSET`` is absent from
    the line, one given ``None`` is ``null``, as in a dict."""

    duplicate: bool | UnsetType = UNSET
    ev: str
    hops: int
    index: int | UnsetType = UNSET
    link: str
    matching_ms: float | UnsetType = UNSET
    msg_id: int
    node: str
    origin: str
    reason: str | UnsetType = UNSET
    sha256: str | UnsetType = UNSET
    size: int
    t_mono: float
    t_pub: float | UnsetType | None = UNSET
    t_wall: float
    type: str


class MatchRecord(msgspec.Struct, kw_only=True):
    """A routing core's ``match`` record (:func:`nodes.cores.actions.fan_out`: one per
    publication a broker matches), written by :meth:`JsonlLog.core_record` as
    :class:`MessageRecord` is: fields in sorted order, the line of the dict."""

    ev: str
    kind: str
    matched: int
    msg_id: int
    node: str
    origin: str
    subscriptions: int
    t_mono: float
    t_wall: float


_MATCH_FIELDS = frozenset(MatchRecord.__struct_fields__) - {*COMMON_FIELDS, "kind"}
# Records are encoded by msgspec with sorted keys: the same compact JSON as the standard
# library's, about eight times faster (a broker writes two or three records per message);
# a record it cannot encode in sorted order (a dict with keys that are not strings, in a
# core's free-form fields) falls back to ``json``.


def _as_json(value: Any) -> Any:
    """A value of a record that neither encoder takes as it is: an iterable made lazily
    (Meghdoot's bucket runs in its final record) is written as the list of its items."""
    if isinstance(value, Iterable):
        return list(value)
    raise TypeError(f"a log record cannot hold {type(value).__name__}")


_encode_record = msgspec.json.Encoder(order="sorted", enc_hook=_as_json).encode
_encode_struct = msgspec.json.Encoder().encode  # a MessageRecord's fields are in order
# Records wait in a buffer of this size; a broker flushes it every statistics window (a
# second by default), so readers of a live log (`pubsublab watch`) lag by at most that.
LOG_BUFFER_BYTES = 1 << 16
# The emulated nodes' bound, per log: 1 GiB (a broker at 20,000 notifications/s writes
# about that in a minute); the simulator's logs are not bounded (its runs are sized).
DEFAULT_LOG_MAX_BYTES = 1 << 30


class JsonlLog:
    """Append-only JSON-lines log for one node. Keys are written in sorted order so that
    identical runs give byte-identical files.

    With ``max_bytes`` the log is bounded: once it holds that much, records of single
    messages (:data:`PER_MESSAGE`) are counted instead of written, while everything else
    (queues, links, records, errors) still is, so the log stays a faithful account of the
    run's state if not of every message. The first record skipped writes a ``record``
    of kind ``log_limit`` (``state: reached``, ``max_bytes``); :meth:`close` writes
    another (``state: final``) with the number skipped per event, which the summary
    reports (its per-message figures are then partial)."""

    def __init__(self, path: Path | str, node: str, max_bytes: int | None = None) -> None:
        self.node = node
        self._fh: IO[bytes] = open(path, "ab", buffering=LOG_BUFFER_BYTES)  # noqa: SIM115 - closed in close()
        self._max_bytes = max_bytes
        self._bytes = 0
        self.skipped: dict[str, int] = {}
        self._last_t = (0.0, 0.0)

    def write(self, ev: Ev, t_mono: float, t_wall: float, **fields: Any) -> None:
        """Append one record; ``ev`` must be an :class:`Ev` (a plain string is refused,
        so a writer cannot invent an event)."""
        if not isinstance(ev, Ev):
            raise ValueError(f"log event {ev!r} is not an Ev")
        if self._max_bytes is None or self._admits(ev, t_mono, t_wall):
            self._put(ev, t_mono, t_wall, fields)

    def message(self, ev: Ev, t_mono: float, t_wall: float, link: str, msg: Message,
                size: int, **extra: Any) -> None:
        """Append the record of one message ``msg`` (a frame of ``size`` bytes) sent to,
        received from, delivered to or dropped on ``link``: the line :meth:`write` gives
        for ``link`` and :func:`message_fields` plus ``extra``, at a fraction of its cost
        (brokers and clients write two or three per message). ``extra``: the optional
        fields of :class:`MessageRecord` only."""
        if type(ev) is not Ev or ev not in PER_MESSAGE:
            raise ValueError(f"log event {ev!r} is not the Ev of a message")
        # Below the bound every message record is admitted: _admits (which stamps the
        # time close() writes its record at) only matters once the log is full.
        if self._max_bytes is not None and self.full and not self._admits(ev, t_mono, t_wall):
            return
        self._append(_encode_struct(MessageRecord(
            ev=ev, hops=msg.hops, link=link, msg_id=msg.msg_id, node=self.node,
            origin=msg.origin, size=size, t_mono=round(t_mono, 6), t_wall=round(t_wall, 6),
            type=_TYPE_NAMES[msg.type], **extra)))

    def core_record(self, t_mono: float, t_wall: float, kind: str,
                    fields: Mapping[str, Any]) -> None:
        """Append a routing core's record ``kind`` with its free-form ``fields``: the line
        :meth:`write` gives for ``Ev.RECORD``, ``kind`` and ``fields``; a ``match`` record
        of the usual fields (one per publication) without building a dict."""
        if kind == "match" and fields.keys() == _MATCH_FIELDS:
            if self._max_bytes is not None:
                self._last_t = (t_mono, t_wall)  # the stamp close() writes its record at
            self._append(_encode_struct(MatchRecord(
                ev=Ev.RECORD, kind=kind, node=self.node, t_mono=round(t_mono, 6),
                t_wall=round(t_wall, 6), **fields)))
        else:
            self.write(Ev.RECORD, t_mono, t_wall, kind=kind, **fields)

    def _admits(self, ev: Ev, t_mono: float, t_wall: float) -> bool:
        """Whether the bound (``max_bytes`` given) lets a record of ``ev`` in; counts it
        if not."""
        self._last_t = (t_mono, t_wall)
        if ev not in PER_MESSAGE or not self.full:
            return True
        if not self.skipped:
            self._put(Ev.RECORD, t_mono, t_wall, {"kind": "log_limit", "state": "reached",
                                                  "max_bytes": self._max_bytes})
        self.skipped[ev] = self.skipped.get(ev, 0) + 1
        return False

    @property
    def full(self) -> bool:
        """Whether the log holds its bound (``max_bytes``) already."""
        return self._max_bytes is not None and self._bytes >= self._max_bytes

    def _put(self, ev: Ev, t_mono: float, t_wall: float, fields: dict[str, Any]) -> None:
        rec = {"t_mono": round(t_mono, 6), "t_wall": round(t_wall, 6), "node": self.node, "ev": ev,
               **fields}
        try:
            record = _encode_record(rec)
        except TypeError:
            record = json.dumps(rec, sort_keys=True, separators=(",", ":"),
                                default=_as_json).encode()
        self._append(record)

    def _append(self, record: bytes) -> None:
        line = record + b"\n"
        self._bytes += len(line)
        self._fh.write(line)

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        if self.skipped:  # at the last record's time, so the log stays in order
            self._put(Ev.RECORD, *self._last_t, {"kind": "log_limit", "state": "final",
                                                 "skipped": dict(sorted(self.skipped.items()))})
        self._fh.close()


def iter_jsonl(path: Path, ev: Ev | None = None, *, contains: str = ""
               ) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines log, streamed (none if the file is missing); with
    ``ev``, only the records of that event; with ``contains``, only the lines holding
    that text (as written: compact JSON, e.g. ``'"state":"down"'``), a cheaper filter
    where the event's name is also a field's, as ``link`` is. A last line without its
    newline is a record cut short (a node killed mid-write, or one still writing) and is
    not read: :func:`torn_tail_bytes` says how long it is."""
    if not path.exists():
        return
    tag = f'"{ev}"' if ev is not None else ""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            # Cheap filters before parsing: runs have millions of lines.
            if tag in line and contains in line and line.endswith("\n") and line.strip():
                r = json.loads(line)
                if ev is None or r.get("ev") == ev:
                    yield r


def torn_tail_bytes(path: Path) -> int:
    """Bytes after the last newline of a log: a record cut short, which :func:`iter_jsonl`
    skips (0 for a log that ends whole, or a missing one). A node killed with SIGKILL
    leaves one when it dies with its write buffer half on disk."""
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        back = 0
        while back < size:
            step = min(4096, size - back)
            fh.seek(size - back - step)
            chunk = fh.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                return back + step - newline - 1
            back += step
        return size
