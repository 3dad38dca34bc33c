"""The Spark transforms on tiny hand-built DataFrames with known answers, the sources on
small files (problems reported with file and line), and the whole job on a simulated run
(no capture there, so the wire side is absent and says so). One Spark session for the
module: it takes several seconds to start."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from analysis import transforms as T
from analysis.pipeline import run_analysis
from analysis.session import spark_session
from experiments.bench.analysis import write_pcap
from nodes.frames import encode
from nodes.messages import Message, MsgType
from nodes.metrics.summary import percentile

ISN = 1000


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session()
    yield session
    session.stop()


EVENTS_DDL = ("algorithm string, node_role string, node string, ev string, type string, "
              "origin string, msg_id bigint, link string, reason string, t_wall double, "
              "t_pub double, hops int, queue_len bigint, count_in bigint, count_out bigint, "
              "flushed bigint, window_ms double")


def _events(spark: SparkSession, rows: list[dict]) -> object:
    cols = [c.split()[0] for c in EVENTS_DDL.split(", ")]
    return spark.createDataFrame([tuple(r.get(c) for c in cols) for r in rows], EVENTS_DDL)


def _msg(ev: str, node: str, link: str, msg_id: int, *, typ: str = "PUBLISH",
         reason: str | None = None) -> dict:
    return {"algorithm": "flood", "node_role": "broker", "node": node, "ev": ev, "type": typ,
            "origin": "p0", "msg_id": msg_id, "link": link, "reason": reason, "t_wall": 1.0}


def test_log_ims_count_what_reached_the_socket(spark: SparkSession) -> None:
    rows = [_msg("send", "b1", "b2", i) for i in range(5)]
    rows += [_msg("send", "b1", "b2", 9, typ="HELLO"), _msg("send", "b1", "s0", 1),
             _msg("drop", "b1", "b2", 3, reason="loss"),  # sent, then lost in the broker
             _msg("drop", "b1", "b2", 4, reason="link_down"),  # sent, then flushed
             _msg("drop", "b1", "b2", 7, reason="link_down"),  # never sent: queued only
             _msg("send", "b2", "b1", 1), _msg("recv", "b2", "b1", 1)]
    rows += [{**_msg("recv", "b1", "b1", 0), "node": "b1", "link": "b2"}]
    got = T.log_ims_by_link(spark, _events(spark, rows))
    expected = spark.createDataFrame(
        [("flood", "b1", "b2", "PUBLISH", 5, 3), ("flood", "b2", "b1", "PUBLISH", 1, 1)],
        "algorithm string, src_broker string, dst_broker string, type string, "
        "log_sent long, log_on_wire long")
    assertDataFrameEqual(got, expected)


FRAMES_DDL = ("algorithm string, host string, src_broker string, dst_broker string, "
              "type string")


def test_wire_ims_count_each_frame_once_at_the_sender(spark: SparkSession) -> None:
    frames = spark.createDataFrame(
        [("flood", "b1", "b1", "b2", "PUBLISH")] * 3 + [("flood", "b2", "b1", "b2", "PUBLISH")] * 3
        + [("flood", "b1", "b1", "b2", "HELLO"), ("flood", "b1", "b1", None, "PUBLISH"),
           ("flood", "b2", "b2", "b1", "SUBSCRIBE")], FRAMES_DDL)
    got = T.wire_ims_by_link(spark, frames)
    expected = spark.createDataFrame(
        [("flood", "b1", "b2", "PUBLISH", 3, 3), ("flood", "b2", "b1", "SUBSCRIBE", 1, 0)],
        "algorithm string, src_broker string, dst_broker string, type string, "
        "wire_sent long, wire_received long")
    assertDataFrameEqual(got, expected)


def test_cross_check_flags_the_differing_link(spark: SparkSession) -> None:
    wire = spark.createDataFrame(
        [("a", "b1", "b2", "PUBLISH", 5, 5), ("a", "b2", "b1", "PUBLISH", 2, 2)],
        "algorithm string, src_broker string, dst_broker string, type string, "
        "wire_sent long, wire_received long")
    logged = spark.createDataFrame(
        [("a", "b1", "b2", "PUBLISH", 5, 5), ("a", "b2", "b1", "PUBLISH", 3, 3),
         ("a", "b2", "b3", "SUBSCRIBE", 1, 1)],
        "algorithm string, src_broker string, dst_broker string, type string, "
        "log_sent long, log_on_wire long")
    cross = T.ims_cross_check(spark, wire, logged)
    assert sorted((r.src_broker, r.dst_broker, r.type) for r in
                  cross.where("not match").collect()) == [("b2", "b1", "PUBLISH"),
                                                         ("b2", "b3", "SUBSCRIBE")]
    by_type = T.ims_by_type(spark, cross)
    expected = spark.createDataFrame(
        [("a", "PUBLISH", 7, 7, 8, 8, False), ("a", "SUBSCRIBE", 0, 0, 1, 1, False)],
        "algorithm string, type string, wire_sent long, wire_received long, log_sent long, "
        "log_on_wire long, match boolean")
    assertDataFrameEqual(by_type, expected)


def test_label_brokers_and_link_throughput(spark: SparkSession) -> None:
    addresses = spark.createDataFrame([("a", "10.0.0.1", "b1"), ("a", "10.0.0.2", "b2")],
                                      "algorithm string, ip string, broker string")
    packets = spark.createDataFrame(
        [("a", "b1", "10.0.0.1", 40000, "10.0.0.2", 7000, 0.01, 100),
         ("a", "b1", "10.0.0.1", 40000, "10.0.0.2", 7000, 0.05, 300),
         ("a", "b1", "10.0.0.1", 40000, "10.0.0.2", 7000, 0.15, 50),
         ("a", "b2", "10.0.0.1", 40000, "10.0.0.2", 7000, 0.02, 100),  # receiver's copy
         ("a", "b1", "127.0.0.1", 7000, "127.0.0.1", 50000, 0.02, 99)],  # a client
        "algorithm string, host string, ip_src string, sport int, ip_dst string, dport int, "
        "t_wall double, ip_len int")
    got = T.link_throughput(spark, T.label_brokers(spark, packets, addresses), port=7000,
                            bin_s=0.1)
    expected = spark.createDataFrame(
        [("a", "b1", "b2", 0.0, 2, 400, 32.0), ("a", "b1", "b2", 0.1, 1, 50, 4.0)],
        "algorithm string, src_broker string, dst_broker string, t_bin_s double, "
        "packets long, ip_bytes long, kbit_s double")
    assertDataFrameEqual(got, expected, checkRowOrder=False, rtol=1e-9)
    queues = T.queue_lengths(spark, _events(spark, [
        {**_msg("queue", "b1", "b2", 0), "algorithm": "a", "type": None, "t_wall": 0.12,
         "queue_len": 4, "count_out": 2},
        {**_msg("queue", "b1", "b2", 0), "algorithm": "a", "type": None, "t_wall": 0.17,
         "queue_len": 7, "count_out": 1},
        {**_msg("queue", "b2", "b1", 0), "algorithm": "a", "type": None, "t_wall": 0.31,
         "queue_len": 0, "count_out": 0}]))
    ts = T.link_timeseries(spark, got, queues, bin_s=0.1)
    rows = {(r.src_broker, r.dst_broker, round(r.t_bin_s, 3)): (r.kbit_s, r.queue_len_max,
                                                                r.messages_out)
            for r in ts.collect()}
    assert rows == {("b1", "b2", 0.0): (32.0, 0, 0), ("b1", "b2", 0.1): (4.0, 7, 3),
                    ("b2", "b1", 0.3): (0.0, 0, 0)}


def _client(ev: str, node: str, origin: str, msg_id: int, t: float, t_pub: float) -> dict:
    return {"algorithm": "a", "node_role": "client", "node": node, "ev": ev,
            "type": "PUBLISH", "origin": origin, "msg_id": msg_id, "link": "b1",
            "t_wall": t, "t_pub": t_pub, "hops": 2}


def test_delays_and_deliveries_against_the_oracle(spark: SparkSession) -> None:
    events = _events(spark, [
        _client("send", "p0", "p0", 1, 10.000, 10.000), _client("send", "p0", "p0", 2, 11.0, 11.0),
        _client("recv", "s1", "p0", 1, 10.020, 10.000),
        _client("recv", "s2", "p0", 1, 10.030, 10.000),
        _client("recv", "s2", "p0", 1, 10.031, 10.000),  # a duplicate
        _client("recv", "s3", "p0", 2, 11.010, 11.000)])  # not expected
    delays = T.notification_delays(spark, events)
    got = sorted((r.subscriber, r.msg_id, round(r.delay_ms, 6), round(r.send_to_recv_ms, 6))
                 for r in delays.collect())
    assert got == [("s1", 1, 20.0, 20.0), ("s2", 1, 30.0, 30.0), ("s2", 1, 31.0, 31.0),
                   ("s3", 2, 10.0, 10.0)]
    expected = spark.createDataFrame([("a", "p0", 1, "s1"), ("a", "p0", 1, "s2"),
                                      ("a", "p0", 2, "s4")],
                                     "algorithm string, origin string, msg_id bigint, "
                                     "subscriber string")
    deliveries = T.deliveries_vs_oracle(spark, delays, expected)
    assert sorted((r.subscriber, r.msg_id, r.status, r.copies) for r in deliveries.collect()) == [
        ("s1", 1, "delivered", 1), ("s2", 1, "duplicate", 2), ("s3", 2, "unexpected", 1),
        ("s4", 2, "missing", 0)]
    summary = T.delivery_summary(spark, deliveries)
    assertDataFrameEqual(summary, spark.createDataFrame(
        [("a", 3, 3, 1, 1, 1)], "algorithm string, expected_deliveries long, delivered long, "
        "unexpected long, duplicates long, missing long"))
    stats = T.delay_stats(spark, delays).collect()[0]
    ms = [20.0, 30.0, 31.0, 10.0]
    assert stats.p50 == pytest.approx(percentile(sorted(ms), 0.5))
    assert stats.p95 == pytest.approx(percentile(sorted(ms), 0.95))
    assert (stats.n, stats.max, stats.mean) == (4, pytest.approx(31.0), pytest.approx(22.75))


def test_wire_frames_from_segments(spark: SparkSession) -> None:
    msgs = [Message(MsgType.HELLO, 2**63, "b1", 0, {"name": "b1", "role": "broker"}),
            *(Message(MsgType.PUBLISH, i, "p0", 1, {"t_pub": 5.0 + i}) for i in range(1, 4))]
    data = b"".join(encode(m) for m in msgs)
    half = len(data) // 2
    key = ("a", "b1", "10.0.0.1", 40000, "10.0.0.2", 7000)
    rows = [(*key, 1.0, ISN, 2, 0, None),
            (*key, 1.2, ISN + 1 + half, 0x18, len(data) - half, data[half:]),  # reordered
            (*key, 1.1, ISN + 1, 0x18, half, data[:half])]
    segments = spark.createDataFrame(rows, T.SEGMENT_DDL)
    problems = T.set_accumulator(spark)
    frames = T.wire_frames(spark, segments, problems=problems).orderBy("offset").collect()
    assert [(f.type, f.msg_id, f.hops) for f in frames] == [
        ("HELLO", 2**63 - 2**64, 0), ("PUBLISH", 1, 1), ("PUBLISH", 2, 1), ("PUBLISH", 3, 1)]
    assert frames[-1].t_wall == 1.2 and frames[-1].t_pub == 8.0
    assert problems.value == set()


def test_sources_report_damage_and_keep_the_rest(spark: SparkSession, tmp_path: Path) -> None:
    good = tmp_path / "good.pcap"
    write_pcap(good, 5000)
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(good.read_bytes()[:-30])
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"\x00" * 100)
    files = [{"path": str(p), "algorithm": "a", "host": h, "ifnames": {}}
             for p, h in ((good, "h1"), (cut, "h2"), (junk, "h3"))]
    problems = T.set_accumulator(spark)
    parts = T.write_packet_table(spark, files, tmp_path / "packets", problems=problems,
                                 chunk_bytes=200_000)
    assert sum(p["packets"] for p in parts if p["path"] == str(good)) == 5000
    assert sum(p["packets"] for p in parts if p["path"] == str(cut)) == 4999
    table = pd.read_parquet(tmp_path / "packets")
    assert len(table) == 9999 and set(table["host"]) == {"h1", "h2"}
    assert T.read_packet_table(spark, tmp_path / "packets").count() == 9999
    found = {(Path(f).name, what.split(" (")[0].split(";")[0]) for _, f, _, what in
             problems.value}
    assert ("cut.pcap", "file ends inside a record's captured bytes") in found
    assert any(name == "junk.pcap" and "not a pcap" in what for name, what in found)

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "b1.jsonl").write_text('{"t_wall": 1.0, "node": "b1", "ev": "link"}\n'
                                   "garbage line\n"
                                   '{"t_wall": 2.0, "node": "b1", "ev": "queue"}\n')
    (logs / "b2.jsonl").write_text("")
    problems = T.set_accumulator(spark)
    events = T.events_from_logs(spark, [{"path": str(logs / n), "algorithm": "a",
                                         "node_role": "broker"} for n in ("b1.jsonl", "b2.jsonl")],
                                problems=problems)
    assert sorted((r.node, r.line) for r in events.collect()) == [("b1", 1), ("b1", 3)]
    assert {(Path(f).name, where, what.split(" (")[0]) for _, f, where, what in
            problems.value} == {("b1.jsonl", "line 2", "not JSON"),
                                ("b2.jsonl", "", "empty log: no records")}


def test_job_on_a_simulated_run(spark: SparkSession, tmp_path: Path) -> None:
    """A simulated run has logs and no pcaps: metrics and report still come out, and the
    verdict says the wire side is missing instead of claiming agreement."""
    from experiments.plan import compile_plan
    from experiments.runs.simulated import run_simulation
    from experiments.spec import load_spec

    spec = load_spec("flood-demo", ["workload.pubs_per_publisher=5"])
    run_dir, summaries = run_simulation(compile_plan(spec), tmp_path)
    with (run_dir / "flood" / "a0.jsonl").open("a") as fh:
        fh.write("not json\n")
    # A controller's folder (JSON lines, but no algorithm) must not pass for an algorithm.
    (run_dir / "controller").mkdir()
    (run_dir / "controller" / "port_stats.jsonl").write_text('{"dpid": "1", "port": 1}\n')
    result = run_analysis(spark, run_dir)
    assert sorted(result["algorithms"]) == ["flood"]
    a = result["algorithms"]["flood"]
    assert result["wire_matches_logs"] is False and a["captured"] is False
    assert a["log_sends_by_type"] == summaries["flood"]["ims_by_type"]
    assert a["summary_agrees"], a["summary_differences"]
    assert a["delay_ms"]["n"] == summaries["flood"]["delivered"]
    bad = [p for p in result["problems"] if p["file"].endswith("a0.jsonl")]
    assert bad and bad[0]["where"].startswith("line ")
    assert (run_dir / "report.html").read_text().count("WIRE AND LOGS DISAGREE") == 1
    assert json.loads((run_dir / "metrics" / "analysis.json").read_text())["packets"] == 0
    assert len(pd.read_parquet(run_dir / "metrics" / "deliveries")) == \
        summaries["flood"]["expected_deliveries"]
    shutil.rmtree(run_dir)
