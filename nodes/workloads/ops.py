"""Client operations and workloads: what a client sends, when, through which broker; and
a workload's JSON-lines form (``workload.jsonl`` in a run folder)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodes.messages import Message, message_from_json, message_to_json
from nodes.model import Schema


@dataclass(frozen=True)
class ClientOp:
    """Client ``client``, attached to broker ``broker``, sends ``msg`` at ``t_s``."""

    t_s: float
    client: str
    broker: str
    msg: Message


@dataclass(frozen=True)
class Workload:
    """A complete client workload: ``ops`` are sorted by ``t_s``; ``clients`` maps each
    client to its broker; ``meta`` (JSON-able) holds the measured selectivity, counts,
    seed and subscription mix."""

    schema: Schema
    clients: Mapping[str, str]
    ops: tuple[ClientOp, ...]
    meta: Mapping[str, Any]


def workload_to_jsonl(w: Workload, path: str | Path) -> None:
    """Write ``w`` as JSON lines: a header (schema, clients, meta), then one op per line
    (``t_s``, ``client``, ``broker`` and the message, :func:`~nodes.messages.message_to_json`)."""
    with open(path, "w", encoding="utf-8") as fh:
        header = {"schema": dict(w.schema), "clients": dict(w.clients), "meta": dict(w.meta)}
        fh.write(json.dumps(header, sort_keys=True) + "\n")
        for op in w.ops:
            rec = {"t_s": op.t_s, "client": op.client, "broker": op.broker,
                   **message_to_json(op.msg)}
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def workload_from_jsonl(path: str | Path) -> Workload:
    """The workload :func:`workload_to_jsonl` wrote."""
    with open(path, encoding="utf-8") as fh:
        header = json.loads(fh.readline())
        ops = []
        for line in fh:
            r = json.loads(line)
            t_s, client, broker = r.pop("t_s"), r.pop("client"), r.pop("broker")
            ops.append(ClientOp(t_s, client, broker, message_from_json(r)))
    return Workload(Schema(header["schema"]), header["clients"], tuple(ops), header["meta"])
