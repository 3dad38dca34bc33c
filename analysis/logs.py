"""Broker and client JSON-lines logs (:mod:`nodes.logs`) to Arrow columns, one file at a time.

Choices:

- **One wide, sparse schema** for every record kind, derived from the typed field table
  :data:`nodes.logs.LOG_FIELDS` (its order, each kind's Arrow and Spark type): the
  fields of message, queue, link and record events each get a column (null where a
  record has no such field); the fields in :data:`IN_EXTRA` and anything else a record
  carries (core records' own fields, ``retry_in_s``, ...) are kept as a JSON object in
  ``extra`` so nothing is lost.
- **Problems are reported, the rest is kept.** A line that is not JSON, not an object,
  lacks ``t_wall``/``node``/``ev`` or has a field of the wrong type is reported with its
  file and line number and skipped; an empty file is reported as such. Never a whole
  file dropped in silence.
- ``msg_id`` is an unsigned 64-bit number on the wire (HELLO ids start at 2^63); it is
  stored as the signed 64-bit integer with the same bits, as Spark and Parquet have no
  unsigned type. Wire frames are stored the same way, so the two sides join.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from nodes import logs as node_logs

# A field kind of nodes.logs -> (Arrow type, Spark DDL type, Python types accepted).
_NUM = (int, float)
KIND_TYPES: dict[str, tuple[pa.DataType, str, tuple[type, ...]]] = {
    "float": (pa.float64(), "double", _NUM),
    "int": (pa.int64(), "bigint", (int,)),
    "int32": (pa.int32(), "int", (int,)),
    "str": (pa.string(), "string", (str,)),
    "bool": (pa.bool_(), "boolean", (bool,)),
}
# Fields of nodes.logs.LOG_FIELDS kept in ``extra`` rather than in columns of their own:
# rare or runtime-specific ones (link configuration, errors, DATA slice checks) and
# ``matching_ms`` (emulated runs only; summary.json reads it from the logs). Columns
# would change the schema of the stored log_events tables.
IN_EXTRA = frozenset({"matching_ms", "index", "sha256", "duplicate", "delay_ms", "loss_pct",
                      "emulated", "rate_mbps", "retry_in_s", "stage", "peer", "addr"})
# The columns: (field, Arrow type, Spark DDL type, Python types accepted), in the order
# of nodes.logs.LOG_FIELDS.
LOG_COLUMNS: tuple[tuple[str, pa.DataType, str, tuple[type, ...]], ...] = tuple(
    (f.name, *KIND_TYPES[f.kind]) for f in node_logs.LOG_FIELDS if f.name not in IN_EXTRA)
_REQUIRED = ("t_wall", "node", "ev")
_KNOWN = {name for name, *_ in LOG_COLUMNS}
_U64_WRAP = 1 << 64
_I64_MAX = (1 << 63) - 1
_INT_RANGES = {"msg_id": (0, _U64_WRAP - 1), "hops": (0, (1 << 31) - 1)}


def log_schema() -> pa.Schema:
    """The Arrow schema of :func:`read_log`'s table."""
    return pa.schema([(name, typ) for name, typ, _, _ in LOG_COLUMNS]
                     + [("extra", pa.string()), ("line", pa.int64())])


def spark_ddl(extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The Spark schema (DDL) of the log columns, ``extra`` columns first."""
    cols = [*extra, *((name, ddl) for name, _, ddl, _ in LOG_COLUMNS),
            ("extra", "string"), ("line", "bigint")]
    return ", ".join(f"{name} {ddl}" for name, ddl in cols)


def signed_msg_id(msg_id: int) -> int:
    """The signed 64-bit integer with the bits of the unsigned ``msg_id``."""
    return msg_id - _U64_WRAP if msg_id > _I64_MAX else msg_id


def _check(rec: Any) -> str | None:
    """Why a parsed line is not a usable record (None if it is)."""
    if not isinstance(rec, dict):
        return f"not a JSON object but {type(rec).__name__}"
    missing = [k for k in _REQUIRED if k not in rec]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    for name, _, _, types in LOG_COLUMNS:
        v = rec.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, types):
            return f"field {name} has a {type(v).__name__}, not a {types[0].__name__}"
        lo, hi = _INT_RANGES.get(name, (-(1 << 63), _I64_MAX))
        if isinstance(v, int) and not lo <= v <= hi:
            return f"field {name} = {v} is out of range"
    return None


def read_log(path: str | Path) -> tuple[pa.Table, list[tuple[int | None, str]]]:
    """The records of one JSON-lines log, and its problems as (line number or None, what)."""
    columns: dict[str, list[Any]] = {name: [] for name in log_schema().names}
    problems: list[tuple[int | None, str]] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                problems.append((number, f"not JSON ({exc})"))
                continue
            why = _check(rec)
            if why is not None:
                problems.append((number, why))
                continue
            if isinstance(rec.get("msg_id"), int):
                rec["msg_id"] = signed_msg_id(rec["msg_id"])
            for name, *_ in LOG_COLUMNS:
                columns[name].append(rec.get(name))
            rest = {k: v for k, v in rec.items() if k not in _KNOWN}
            columns["extra"].append(json.dumps(rest, sort_keys=True) if rest else None)
            columns["line"].append(number)
    if not columns["line"] and not problems:
        problems.append((None, "empty log: no records"))
    return pa.table(columns, schema=log_schema()), problems
