"""The typed log-record schema (:mod:`nodes.logs`): what the writers write obeys it, and the
analysis reads its columns from it.

A record's fields must be in :data:`nodes.logs.LOG_FIELDS`, with values of the declared
kind (``null`` is allowed: it means an absent field), and its ``ev`` an :class:`Ev`.
The exception is the payload of an ``ev == "record"`` record: a core's
:class:`~nodes.cores.interface.Record` fields (and a host's ``tables``/``counters``, a client's
``data_send``/``data_recv`` summary) are free-form, except that a payload field named like
a LOG_FIELDS field must have that field's kind, since the analysis reads it into that
field's column.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_broker import (  # noqa: F401 - spawn is a fixture
    NOTIFICATION,
    SUBSCRIPTION,
    Overlay,
    Spawn,
    _raw_exchange,
    spawn,
    status,
    stop_all,
    wait_for,
)

from analysis import logs as alogs
from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec
from nodes import logs
from nodes.logs import (
    COMMON_FIELDS,
    FIELDS_BY_NAME,
    LOG_FIELDS,
    Ev,
    JsonlLog,
    iter_jsonl,
    message_fields,
    torn_tail_bytes,
)
from nodes.messages import Message, MsgType

_INT32 = (-(1 << 31), (1 << 31) - 1)


def _has_kind(value: Any, kind: str) -> bool:
    if value is None:
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "float":
        return isinstance(value, int | float)
    if kind == "int":
        return isinstance(value, int)
    if kind == "int32":
        return isinstance(value, int) and _INT32[0] <= value <= _INT32[1]
    if kind == "str":
        return isinstance(value, str)
    raise AssertionError(f"unknown kind {kind!r}")


def violations(rec: dict[str, Any]) -> list[str]:
    """What is wrong with one parsed record (nothing if it obeys the schema)."""
    out = [f"missing {name}" for name in COMMON_FIELDS if name not in rec]
    ev = rec.get("ev")
    if ev not in set(Ev):
        out.append(f"ev {ev!r} is not an Ev")
    for name, value in rec.items():
        field = FIELDS_BY_NAME.get(name)
        if field is None:
            if ev != Ev.RECORD:
                out.append(f"unknown field {name}")
            continue
        if not _has_kind(value, field.kind):
            out.append(f"{name} = {value!r} is not a {field.kind}")
    if ev == Ev.RECORD and not isinstance(rec.get("kind"), str):
        out.append("record without a kind")
    return out


def check_logs(paths: Iterable[Path]) -> Counter[str]:
    """Assert every record of the logs obeys the schema; the records per event."""
    seen: Counter[str] = Counter()
    bad: list[str] = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            rec = json.loads(line)
            seen[rec.get("ev")] += 1
            bad += [f"{path.name}:{number}: {why}" for why in violations(rec)]
    assert not bad, "\n".join(bad[:20])
    return seen


# ---- the table itself --------------------------------------------------------------------


def test_the_table_is_well_formed() -> None:
    names = [f.name for f in LOG_FIELDS]
    assert len(names) == len(set(names))
    assert {f.kind for f in LOG_FIELDS} <= set(alogs.KIND_TYPES)
    assert all(f.meaning for f in LOG_FIELDS)
    assert set(COMMON_FIELDS) <= set(names)
    assert set(names) >= alogs.IN_EXTRA
    # the module docstring, the human description, names every event and field
    doc = logs.__doc__ or ""
    missing = [n for n in [*names, *(e.value for e in Ev)] if f"``{n}``" not in doc]
    assert not missing, missing


def test_events_are_plain_strings_in_files(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "n.jsonl", "n")
    log.write(Ev.SEND, 1.0, 2.0, link="x", kind=f"data_{Ev.RECV}")
    log.close()
    assert (tmp_path / "n.jsonl").read_text() == (
        '{"ev":"send","kind":"data_recv","link":"x","node":"n","t_mono":1.0,"t_wall":2.0}\n')
    assert [r["ev"] for r in iter_jsonl(tmp_path / "n.jsonl", Ev.SEND)] == ["send"]
    assert list(iter_jsonl(tmp_path / "n.jsonl", Ev.RECV)) == []


@pytest.mark.parametrize("ev", ["send", "bogus", None, 3])
def test_write_refuses_an_event_that_is_not_an_ev(tmp_path: Path, ev: Any) -> None:
    log = JsonlLog(tmp_path / "n.jsonl", "n")
    with pytest.raises(ValueError, match="not an Ev"):
        log.write(ev, 0.0, 0.0)
    log.close()
    assert (tmp_path / "n.jsonl").read_text() == ""


# ---- the analysis's columns --------------------------------------------------------------

# The columns of the stored log_events tables (Parquet): they must not change by accident.
TODAY_DDL = ("t_wall double, t_mono double, node string, ev string, type string, "
             "origin string, msg_id bigint, hops int, link string, size bigint, "
             "t_pub double, count_in bigint, count_out bigint, queue_len bigint, "
             "flushed bigint, window_ms double, kind string, state string, reason string, "
             "role string, extra string, line bigint")


def test_analysis_columns_come_from_the_table() -> None:
    columns = [f for f in LOG_FIELDS if f.name not in alogs.IN_EXTRA]
    schema = alogs.log_schema()
    assert schema.names == [f.name for f in columns] + ["extra", "line"]
    assert [schema.field(f.name).type for f in columns] == [
        alogs.KIND_TYPES[f.kind][0] for f in columns]
    assert schema.field("extra").type == pa.string() and schema.field("line").type == pa.int64()
    assert alogs.spark_ddl() == ", ".join(
        [f"{f.name} {alogs.KIND_TYPES[f.kind][1]}" for f in columns]
        + ["extra string", "line bigint"])
    assert alogs.spark_ddl() == TODAY_DDL
    assert alogs.spark_ddl((("algorithm", "string"),)) == "algorithm string, " + TODAY_DDL


def test_fields_in_extra_stay_in_extra(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    log = JsonlLog(path, "b")
    log.write(Ev.RECV, 1.0, 2.0, link="a", type="PUBLISH", origin="p", msg_id=3, hops=1,
              size=50, matching_ms=0.25)
    log.write(Ev.LINK, 1.0, 2.0, link="a", role="broker", state="configured", delay_ms=5.0,
              loss_pct=0.0, emulated=True)
    log.close()
    table, problems = alogs.read_log(path)
    assert problems == []
    assert [json.loads(x) for x in table["extra"].to_pylist()] == [
        {"matching_ms": 0.25}, {"delay_ms": 5.0, "emulated": True, "loss_pct": 0.0}]


# ---- the writers -------------------------------------------------------------------------


def test_simulated_records_obey_the_schema(tmp_path: Path) -> None:
    run_dir, _ = run_simulation(compile_plan(load_spec("demo")), tmp_path)
    paths = [p for p in sorted(run_dir.rglob("*.jsonl")) if p.name != "workload.jsonl"]
    assert paths
    seen = check_logs(paths)
    assert {Ev.SEND, Ev.RECV, Ev.DELIVER, Ev.QUEUE, Ev.RECORD} <= set(seen), seen


def test_emulated_records_obey_the_schema(tmp_path: Path, spawn: Spawn) -> None:  # noqa: F811
    """Real broker and client processes on loopback (as tests/test_broker.py): link
    configuration, a failed handshake, notifications, and a client's DATA. Each step
    waits for the records of the one before, so a slow process start only costs time."""
    ov = Overlay(tmp_path, [("a", "b")], emulate_link=True)
    brokers = [spawn("nodes.emulated.broker", ov.config(name, delay_ms=2.0)) for name in ("a", "b")]
    ov.wait_up("a", "b")
    _raw_exchange(ov.addr["a"], b"\x00\x00\x00\x05noise")  # an error record

    def logged(node: str, **match: Any) -> list[dict[str, Any]]:
        path = tmp_path / f"{node}.jsonl"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        # complete lines only: the process may be writing the file
        recs = (json.loads(line) for line in text.split("\n")[:-1])
        return [r for r in recs if all(r.get(k) == v for k, v in match.items())]

    # a subscriber on b (connected before anything is published), a publisher on a
    sub = spawn("nodes.emulated.client", ov.client("s", "b", time.time(), 30.0, role="subscriber",
                                          subscribe=SUBSCRIPTION))
    wait_for(lambda: "s" in status(tmp_path, "b").get("clients", []), 10, "s connected")
    wait_for(lambda: logged("b", ev="recv", type="SUBSCRIBE", link="s"), 5, "s subscribed")
    pub = spawn("nodes.emulated.client", ov.client("p", "a", time.time(), 30.0, role="publisher",
                                          publish=NOTIFICATION, count=5, rate_per_s=100,
                                          start_s=0.0))
    wait_for(lambda: len(logged("b", ev="deliver", link="s")) == 5, 10, "5 deliveries")
    # a client sending DATA slices (the broker's flood core does not route them)
    data = spawn("nodes.emulated.client", ov.client("d", "b", time.time(), 30.0,
                                                    role="bulk-publisher", topic="t",
                                                    data_bytes=2500, slice_bytes=1000,
                                                    start_s=0.0))
    wait_for(lambda: logged("d", kind="data_send"), 10, "d's data_send record")
    stop_all([sub, pub, data])  # first: a client whose broker went away exits 1
    stop_all(brokers)

    paths = sorted(tmp_path.glob("*.jsonl"))
    assert {p.stem for p in paths} == {"a", "b", "p", "s", "d"}
    seen = check_logs(paths)
    assert set(Ev) - {Ev.DROP} <= set(seen), seen
    assert logged("d", ev="send", type="DATA")[0].keys() >= {"index", "sha256", "duplicate"}
    assert logged("b", ev="recv", type="PUBLISH")[0]["matching_ms"] >= 0
    assert logged("a", ev="link", state="configured")[0]["emulated"] is True
    assert logged("a", ev="error", stage="handshake")


def test_a_torn_last_record_is_skipped_and_measured(tmp_path: Path) -> None:
    """A node killed mid-write leaves half a record at the end of its log: the readers
    take every whole record before it and say how long the torn tail is."""
    log = JsonlLog(tmp_path / "b.jsonl", "b")
    for i in range(3):
        log.write(Ev.RECORD, float(i), float(i), kind="k", n=i)
    log.close()
    whole = (tmp_path / "b.jsonl").read_bytes()
    assert torn_tail_bytes(tmp_path / "b.jsonl") == 0
    (tmp_path / "b.jsonl").write_bytes(whole + b'{"ev":"recv","t_mo')
    assert [r["n"] for r in iter_jsonl(tmp_path / "b.jsonl")] == [0, 1, 2]
    assert torn_tail_bytes(tmp_path / "b.jsonl") == len(b'{"ev":"recv","t_mo')
    assert torn_tail_bytes(tmp_path / "missing.jsonl") == 0


# ---- the message fast path ---------------------------------------------------------------

_PUB = Message(MsgType.PUBLISH, 7, "pub", 2, {"attrs": {"Symbol": "ACME"}})
# (event, link, message, size, optional fields): one of each kind a broker or client writes
_MESSAGE_RECORDS: list[tuple[Ev, str, Message, int, dict[str, Any]]] = [
    (Ev.RECV, "pub", _PUB, 100, {"matching_ms": 0.021331}),
    (Ev.RECV, "pub", _PUB, 100, {}),
    (Ev.DELIVER, "sub", _PUB, 100, {"t_pub": 1796282758.7471118}),
    (Ev.DELIVER, "sub", _PUB, 100, {"t_pub": None}),
    (Ev.SEND, "b2", _PUB.forwarded(), 101, {}),
    (Ev.SEND, "b", _PUB, 100, {"t_pub": 1796282758.7471118}),
    (Ev.DROP, "sub", _PUB, 100, {"reason": "slow_consumer"}),
    (Ev.RECV, "b", Message(MsgType.DATA, (1 << 64) - 1, "d\u00e9\"x", 0), 1200,
     {"index": 3, "sha256": "ab" * 32, "duplicate": False, "t_pub": None}),
]


def _lines(path: Path, write: Any) -> list[str]:
    log = JsonlLog(path, "b\u00e4")
    for i, (ev, link, msg, size, extra) in enumerate(_MESSAGE_RECORDS):
        write(log, ev, 273.9256021234 + i, 1796282758.7483311 + i, link, msg, size, extra)
    log.close()
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_message_records_are_the_lines_of_the_general_writer(tmp_path: Path) -> None:
    """JsonlLog.message writes, byte for byte, what JsonlLog.write writes for the same
    record (message_fields plus the optional fields), which users grep and Spark reads."""
    fast = _lines(tmp_path / "fast.jsonl",
                  lambda log, ev, tm, tw, link, msg, size, extra:
                  log.message(ev, tm, tw, link, msg, size, **extra))
    general = _lines(tmp_path / "general.jsonl",
                     lambda log, ev, tm, tw, link, msg, size, extra:
                     log.write(ev, tm, tw, link=link, **message_fields(msg, size), **extra))
    assert fast == general
    assert fast[0] == ('{"ev":"recv","hops":2,"link":"pub","matching_ms":0.021331,"msg_id":7,'
                       '"node":"b\u00e4","origin":"pub","size":100,"t_mono":273.925602,'
                       '"t_wall":1796282758.748331,"type":"PUBLISH"}\n')
    assert fast[3] == ('{"ev":"deliver","hops":2,"link":"sub","msg_id":7,"node":"b\u00e4",'
                       '"origin":"pub","size":100,"t_mono":276.925602,"t_pub":null,'
                       '"t_wall":1796282761.748331,"type":"PUBLISH"}\n')
    assert '"origin":"d\u00e9\\"x"' in fast[-1] and '"msg_id":18446744073709551615' in fast[-1]
    check_logs([tmp_path / "fast.jsonl"])


def test_message_records_obey_the_log_bound(tmp_path: Path) -> None:
    """Past max_bytes the fast path counts its records as skipped, as write does, and the
    two give the same file."""
    texts = []
    for name, fast in (("fast", True), ("general", False)):
        log = JsonlLog(tmp_path / f"{name}.jsonl", "b", max_bytes=400)
        for i in range(10):
            if fast:
                log.message(Ev.RECV, float(i), float(i), "pub", _PUB, 100)
            else:
                log.write(Ev.RECV, float(i), float(i), link="pub", **message_fields(_PUB, 100))
            log.write(Ev.QUEUE, float(i), float(i), link="x", count_in=i)
        log.close()
        assert log.skipped == {Ev.RECV: 8}
        texts.append((tmp_path / f"{name}.jsonl").read_text())
    assert texts[0] == texts[1]
    assert texts[0].count('"ev":"queue"') == 10


@pytest.mark.parametrize("ev", [Ev.QUEUE, Ev.LINK, "recv"])
def test_message_refuses_an_event_that_is_not_a_messages(tmp_path: Path, ev: Any) -> None:
    log = JsonlLog(tmp_path / "n.jsonl", "n")
    with pytest.raises(ValueError, match="not the Ev of a message"):
        log.message(ev, 0.0, 0.0, "x", _PUB, 100)
    log.close()
    assert (tmp_path / "n.jsonl").read_text() == ""


def test_the_fixed_records_are_in_sorted_order_and_in_the_table() -> None:
    names = list(logs.MessageRecord.__struct_fields__)
    assert names == sorted(names)
    assert set(names) <= set(FIELDS_BY_NAME)
    names = list(logs.MatchRecord.__struct_fields__)
    assert names == sorted(names)
    assert set(COMMON_FIELDS) | {"kind"} <= set(names)


def test_core_records_are_the_lines_of_the_general_writer(tmp_path: Path) -> None:
    """JsonlLog.core_record writes what write writes for ev record: a match record (its
    fast path), one with other fields, and another kind."""
    records = [("match", {"origin": "p\u00e9", "msg_id": (1 << 64) - 1, "subscriptions": 5000,
                          "matched": 1}),
               ("match", {"origin": "p", "msg_id": 1, "subscriptions": 3, "matched": 0,
                          "tested": 2}),
               ("unhandled", {"type": "TREE", "origin": "p", "msg_id": 2})]
    texts = []
    for name, fast in (("fast", True), ("general", False)):
        log = JsonlLog(tmp_path / f"{name}.jsonl", "b", max_bytes=1 << 20)
        for i, (kind, fields) in enumerate(records):
            if fast:
                log.core_record(5.0000004 + i, 1796282758.7483311 + i, kind, fields)
            else:
                log.write(Ev.RECORD, 5.0000004 + i, 1796282758.7483311 + i, kind=kind, **fields)
        log.close()
        texts.append((tmp_path / f"{name}.jsonl").read_text(encoding="utf-8"))
    assert texts[0] == texts[1]
    assert texts[0].splitlines()[0] == (
        '{"ev":"record","kind":"match","matched":1,"msg_id":18446744073709551615,"node":"b",'
        '"origin":"p\u00e9","subscriptions":5000,"t_mono":5.0,"t_wall":1796282758.748331}')
