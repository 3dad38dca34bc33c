"""The Spark side of the analysis: sources (pcap and log files to DataFrames) and the
transforms, each a function ``(spark, DataFrame, ...) -> DataFrame`` testable on tiny
hand-built frames.

Choices:

- **Parallel parsing.** A source is a DataFrame of task descriptors (a pcap byte range,
  a log file), packed into a few partitions and turned into rows by ``mapInArrow``: the
  workers hand Arrow batches straight to the JVM, without a Python object per row. The
  packet table, the one large output, is written by the workers themselves (see
  :func:`write_packet_table`).
- **Problems travel in an accumulator** (a set, so a re-computed partition does not count
  twice): (source, file or flow, where, what). The job prints them and puts them in its
  result; a parse problem costs a record or a line, never the rest of a file.
- **Overlay links** are broker-to-broker TCP flows on the overlay port; an address maps
  to a broker through the run's broker configs (every neighbour's address). A message
  is counted on the wire once, at the capture of the host that sent it; the receiving
  host's count is kept beside it as a check of the capture itself.
- **Logged IMs** are broker ``send`` records to another broker, HELLO excluded (the
  definition of ``summary.json``). ``send`` is logged when a message leaves the output
  queue, before in-broker loss and the delay line: ``log_on_wire`` subtracts the
  messages dropped for loss and those flushed from the delay line by a lost link (a
  ``drop`` after a ``send`` of the same message on the same link), which never reach
  the socket. That is what the wire count must equal.
- **Time bins** for throughput and queue length are absolute (``floor(t / bin) * bin``
  on the Unix clock), so the two sides of the join line up.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import Accumulator
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import logs as logfmt
from analysis import pcap
from analysis.streams import Segment, decode_stream
from nodes.logs import Ev
from nodes.messages import LINK_FRAMES

Acc = Accumulator[set[Any]]
FLOW_KEYS = ["algorithm", "host", "ip_src", "sport", "ip_dst", "dport"]
LINK_KEYS = ["algorithm", "src_broker", "dst_broker"]
_SOURCE_COLUMNS = (("algorithm", "string"), ("host", "string"))
_LOG_COLUMNS = (("algorithm", "string"), ("node_role", "string"), ("file", "string"))
LOG_TASK_BYTES = 64 << 20
_SEGMENT_COLUMNS = ["ip_src", "sport", "ip_dst", "dport", "t_wall", "tcp_seq", "tcp_flags",
                    "payload_len", "payload"]
SEGMENT_DDL = ("algorithm string, host string, ip_src string, sport int, ip_dst string, "
               "dport int, t_wall double, tcp_seq bigint, tcp_flags smallint, "
               "payload_len int, payload binary")
_PART_DDL = "path string, start bigint, packets bigint, part string"
_PART_SCHEMA = pa.schema([("path", pa.string()), ("start", pa.int64()), ("packets", pa.int64()),
                          ("part", pa.string())])
FRAME_DDL = ("algorithm string, host string, ip_src string, sport int, ip_dst string, "
             "dport int, offset bigint, frame_bytes int, t_first double, t_wall double, "
             "type string, msg_id bigint, origin string, hops int, t_pub double")


class SetParam(AccumulatorParam[set[Any]]):
    """Set union: a task run twice adds the same items once."""

    def zero(self, value: Any) -> set[Any]:
        return set()

    def addInPlace(self, a: set[Any], b: set[Any]) -> set[Any]:
        a |= b
        return a


def set_accumulator(spark: SparkSession) -> Acc:
    """An accumulator of problem tuples (see the module docstring)."""
    return spark.sparkContext.accumulator(set(), SetParam())


def _descriptors(spark: SparkSession, items: list[dict[str, Any]], sizes: list[int],
                 task_bytes: int) -> DataFrame:
    """JSON task descriptors packed into partitions: twice as many as there are cores, or
    one per ``task_bytes`` of input when that is more; largest first onto the least
    loaded partition. (A task per small file would cost a Python round trip each.)"""
    n = min(len(items), max(2 * spark.sparkContext.defaultParallelism,
                            -(-sum(sizes) // task_bytes)))
    bins: list[list[str]] = [[] for _ in range(max(1, n))]
    loads = [0] * len(bins)
    for size, item in sorted(zip(sizes, (json.dumps(i) for i in items), strict=True),
                             key=lambda x: -x[0]):
        k = loads.index(min(loads))
        bins[k].append(item)
        loads[k] += size
    rdd = spark.sparkContext.parallelize(bins, len(bins)).flatMap(lambda b: [(t,) for t in b])
    return spark.createDataFrame(rdd, "task string")


def _constant(value: str, n: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, dtype=np.int32)))


def _tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        for text in batch.column(0).to_pylist():
            yield json.loads(text)


def _parse_task(t: dict[str, Any], problems: Acc,
                payload_ports: frozenset[int] | None) -> pa.RecordBatch | None:
    """One pcap byte range parsed; damage and unreadable files go to ``problems``."""
    try:
        info = pcap.read_info(t["path"])
        rb, damage = pcap.parse_chunk(t["path"], info, t["start"], t["stop"],
                                      ifnames={int(k): v for k, v in t["ifnames"].items()},
                                      payload_ports=payload_ports)
    except (OSError, pcap.PcapError) as exc:
        problems.add({("pcap", t["path"], f"bytes {t['start']}-{t['stop']}", str(exc))})
        return None
    problems.add({("pcap", t["path"], f"byte {off}", what) for off, what in damage})
    return rb


def _pcap_tasks(spark: SparkSession, files: list[dict[str, Any]], problems: Acc,
                chunk_bytes: int) -> DataFrame | None:
    """Task descriptors for the byte ranges of ``files`` ({path, algorithm, host,
    ifnames}); a file that is not pcap is reported instead. None when nothing is left."""
    tasks = []
    for f in files:
        try:
            info = pcap.read_info(f["path"])
        except (OSError, pcap.PcapError) as exc:
            problems.add({("pcap", f["path"], "global header", str(exc))})
            continue
        tasks += [{**f, "start": a, "stop": b} for a, b in pcap.chunk_ranges(info, chunk_bytes)]
    if not tasks:
        return None
    return _descriptors(spark, tasks, [t["stop"] - t["start"] for t in tasks], chunk_bytes)


def _write_parts(problems: Acc, out_dir: str,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for t in _tasks(batches):
        rb = _parse_task(t, problems, None)
        if rb is None:
            continue
        part = (Path(out_dir) / f"algorithm={t['algorithm']}" / f"host={t['host']}"
                / f"part-{Path(t['path']).name}-{t['start']:012d}.parquet")
        part.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_batches([rb]), part)
        yield pa.RecordBatch.from_pylist([{"path": t["path"], "start": t["start"],
                                           "packets": rb.num_rows, "part": str(part)}],
                                         schema=_PART_SCHEMA)


def write_packet_table(spark: SparkSession, files: list[dict[str, Any]], out_dir: Path, *,
                       problems: Acc, chunk_bytes: int = 16 << 20) -> list[dict[str, Any]]:
    """Parse ``files`` ({path, algorithm, host, ifnames}) in Spark tasks, one per
    ``chunk_bytes`` of a file, each writing its share of the packet table (Parquet,
    ``out_dir/algorithm=*/host=*/``) with pyarrow; returns (path, start, packets, part)
    per chunk. Writing from the workers skips Spark's Arrow-to-row conversion and row
    writer, which cost several times the parsing itself (``pubsublab bench analysis``);
    Spark reads the table back with its vectorised reader (:func:`read_packet_table`).
    Like Spark's own overwrite, a previous table in ``out_dir`` is removed first."""
    shutil.rmtree(out_dir, ignore_errors=True)
    tasks = _pcap_tasks(spark, files, problems, chunk_bytes)
    if tasks is None:
        return []
    rows = tasks.mapInArrow(partial(_write_parts, problems, str(out_dir)), _PART_DDL).collect()
    return [r.asDict() for r in rows]


def read_packet_table(spark: SparkSession, out_dir: Path) -> DataFrame:
    """The packet table :func:`write_packet_table` wrote (empty if it wrote none)."""
    if not any(out_dir.rglob("*.parquet")):
        return spark.createDataFrame([], pcap.spark_ddl(_SOURCE_COLUMNS))
    return spark.read.parquet(str(out_dir))


def _segment_tasks(problems: Acc, port: int,
                   batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for t in _tasks(batches):
        rb = _parse_task(t, problems, frozenset({port}))
        if rb is None:
            continue
        table = pa.Table.from_batches([rb])
        on_port = pc.or_(pc.equal(table["sport"], port), pc.equal(table["dport"], port))
        syn = pc.not_equal(pc.bit_wise_and(table["tcp_flags"], pa.scalar(pcap.TCP_SYN,
                                                                          pa.int16())), 0)
        keep = pc.and_(pc.and_(pc.equal(table["ip_proto"], 6), on_port),
                       pc.or_(pc.greater(table["payload_len"], 0), syn))
        table = table.filter(pc.fill_null(keep, False)).select(_SEGMENT_COLUMNS)
        n = table.num_rows
        consts = [pa.chunked_array([_constant(t[k], n)]) for k in ("algorithm", "host")]
        yield from pa.Table.from_arrays(
            [*consts, *table.columns], names=["algorithm", "host", *_SEGMENT_COLUMNS]
        ).to_batches()


def overlay_segments(spark: SparkSession, files: list[dict[str, Any]], *, port: int,
                     problems: Acc, chunk_bytes: int = 16 << 20) -> DataFrame:
    """The TCP segments to or from ``port`` that carry payload or a SYN, with their
    captured payload: the input of :func:`wire_frames`. Parsed again from the pcaps
    rather than stored: parsing costs less than keeping a copy of every payload."""
    tasks = _pcap_tasks(spark, files, problems, chunk_bytes)
    if tasks is None:
        return spark.createDataFrame([], SEGMENT_DDL)
    return tasks.mapInArrow(partial(_segment_tasks, problems, port), SEGMENT_DDL)


def _read_log_tasks(problems: Acc,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for t in _tasks(batches):
        try:
            table, issues = logfmt.read_log(t["path"])
        except OSError as exc:
            problems.add({("log", t["path"], "", str(exc))})
            continue
        problems.add({("log", t["path"], f"line {n}" if n else "", what)
                      for n, what in issues})
        n = table.num_rows
        consts = [pa.chunked_array([_constant(t[k], n)])
                  for k in ("algorithm", "node_role", "path")]
        yield from pa.Table.from_arrays(
            [*consts, *table.columns],
            names=["algorithm", "node_role", "file", *table.schema.names]).to_batches()


def events_from_logs(spark: SparkSession, files: list[dict[str, Any]], *,
                     problems: Acc) -> DataFrame:
    """The records of the JSON-lines logs ``files`` ({path, algorithm, node_role}), one
    task per file; bad lines and empty files are reported in ``problems``."""
    ddl = logfmt.spark_ddl(_LOG_COLUMNS)
    if not files:
        return spark.createDataFrame([], ddl)
    sizes = [Path(f["path"]).stat().st_size for f in files]
    return _descriptors(spark, files, sizes, LOG_TASK_BYTES).mapInArrow(
        partial(_read_log_tasks, problems), ddl)


# ---- wire: reassembly and overlay frames ---------------------------------------------


def _decode_flow(problems: Acc, pdf: pd.DataFrame) -> pd.DataFrame:
    pdf = pdf.sort_values("t_wall", kind="stable")
    segments = [Segment(float(t), int(seq), int(flags), int(n), p if p is not None else b"")
                for t, seq, flags, n, p in zip(pdf["t_wall"], pdf["tcp_seq"], pdf["tcp_flags"],
                                                pdf["payload_len"], pdf["payload"], strict=True)]
    frames, issues = decode_stream(segments)
    key = {k: pdf[k].iloc[0] for k in FLOW_KEYS}
    if issues:
        flow = (f"{key['algorithm']}/{key['host']}: {key['ip_src']}:{key['sport']} -> "
                f"{key['ip_dst']}:{key['dport']}")
        problems.add({("wire", flow, f"stream byte {p.offset}", f"{p.what} ({p.bytes} bytes)")
                      for p in issues})
    out = pd.DataFrame([{**key, "offset": f.offset, "frame_bytes": f.frame_bytes,
                         "t_first": f.t_first, "t_wall": f.t_wall, "type": f.type,
                         "msg_id": logfmt.signed_msg_id(f.msg_id), "origin": f.origin,
                         "hops": f.hops, "t_pub": f.t_pub} for f in frames],
                       columns=[c.split()[0] for c in FRAME_DDL.split(", ")])
    return out


def wire_frames(spark: SparkSession, segments: DataFrame, *, problems: Acc) -> DataFrame:
    """Overlay frames decoded from each TCP flow direction of ``segments`` (see
    :func:`overlay_segments`), per capture host (a frame seen by both ends' captures
    appears twice, once per host); stream gaps and undecodable bytes go to ``problems``."""

    def decode(pdf: pd.DataFrame) -> pd.DataFrame:
        # A plain function, not a partial: Spark reads the eval type from its annotations.
        return _decode_flow(problems, pdf)

    return segments.groupBy(*FLOW_KEYS).applyInPandas(decode, FRAME_DDL)


def label_brokers(spark: SparkSession, df: DataFrame, addresses: DataFrame) -> DataFrame:
    """``df`` with ``src_broker`` and ``dst_broker``: the brokers owning ``ip_src`` and
    ``ip_dst`` in ``addresses`` (algorithm, ip, broker); null for other addresses."""
    def side(ip_col: str, name: str) -> DataFrame:
        return F.broadcast(addresses.select("algorithm", F.col("ip").alias(ip_col),
                                            F.col("broker").alias(name)))
    return (df.join(side("ip_src", "src_broker"), ["algorithm", "ip_src"], "left")
              .join(side("ip_dst", "dst_broker"), ["algorithm", "ip_dst"], "left"))


def _overlay() -> Column:
    return F.col("src_broker").isNotNull() & F.col("dst_broker").isNotNull()


def wire_ims_by_link(spark: SparkSession, frames: DataFrame) -> DataFrame:
    """IMs on the wire per overlay link direction and type: ``wire_sent`` counted at the
    sender's capture, ``wire_received`` at the receiver's (HELLO and KEEPALIVE excluded:
    :data:`~nodes.messages.LINK_FRAMES`, which brokers do not log as sends)."""
    f = frames.where(_overlay() & ~F.col("type").isin([t.name for t in LINK_FRAMES]))
    return f.groupBy(*LINK_KEYS, "type").agg(
        F.sum((F.col("host") == F.col("src_broker")).cast("long")).alias("wire_sent"),
        F.sum((F.col("host") == F.col("dst_broker")).cast("long")).alias("wire_received"))


def log_ims_by_link(spark: SparkSession, events: DataFrame) -> DataFrame:
    """IMs the brokers logged per link direction and type: ``log_sent`` (the ``send``
    records, as summary.json counts them) and ``log_on_wire`` (those that reached the
    socket; see the module docstring)."""
    b = events.where(F.col("node_role") == "broker")
    brokers = b.select("algorithm", F.col("node").alias("link")).distinct()
    keys = ["algorithm", "node", "link", "type", "origin", "msg_id"]
    sends = (b.where((F.col("ev") == Ev.SEND.value) & (F.col("type") != "HELLO"))
              .join(brokers, ["algorithm", "link"], "left_semi"))
    drops = b.where(F.col("ev") == Ev.DROP.value).join(brokers, ["algorithm", "link"], "left_semi")
    unwritten = (drops.where(F.col("reason") == "loss")
                 .unionByName(drops.where(F.col("reason") == "link_down")
                              .join(sends.select(*keys).distinct(), keys, "left_semi")))
    group = ["algorithm", "node", "link", "type"]
    counted = (sends.groupBy(*group).agg(F.count(F.lit(1)).alias("log_sent"))
               .join(unwritten.groupBy(*group).agg(F.count(F.lit(1)).alias("unwritten")),
                     group, "left")
               .fillna(0, ["unwritten"]))
    return counted.select(F.col("algorithm"), F.col("node").alias("src_broker"),
                          F.col("link").alias("dst_broker"), "type", "log_sent",
                          (F.col("log_sent") - F.col("unwritten")).alias("log_on_wire"))


def ims_cross_check(spark: SparkSession, wire: DataFrame, logged: DataFrame) -> DataFrame:
    """Wire and log IM counts side by side per link direction and type; ``match`` when
    the sender's capture saw exactly the messages its log says reached the socket."""
    keys = [*LINK_KEYS, "type"]
    counts = ["wire_sent", "wire_received", "log_sent", "log_on_wire"]
    return (wire.join(logged, keys, "full").fillna(0, counts)
            .withColumn("match", F.col("wire_sent") == F.col("log_on_wire")))


def ims_by_type(spark: SparkSession, cross: DataFrame) -> DataFrame:
    """The cross-check per algorithm and type (sums over links; ``match`` only when
    every link direction matches)."""
    return cross.groupBy("algorithm", "type").agg(
        *(F.sum(c).alias(c) for c in ("wire_sent", "wire_received", "log_sent", "log_on_wire")),
        F.min(F.col("match").cast("int")).cast("boolean").alias("match"))


# ---- throughput, queues ---------------------------------------------------------------


def _bin(t: Column, bin_s: float) -> Column:
    return F.floor(t / bin_s) * bin_s


def link_throughput(spark: SparkSession, packets: DataFrame, *, port: int,
                    bin_s: float) -> DataFrame:
    """IP bytes per overlay link direction and time bin, from the sender's capture
    (``packets`` labelled with brokers)."""
    p = packets.where(_overlay() & (F.col("host") == F.col("src_broker"))
                      & ((F.col("sport") == port) | (F.col("dport") == port)))
    return (p.groupBy(*LINK_KEYS, _bin(F.col("t_wall"), bin_s).alias("t_bin_s"))
             .agg(F.count(F.lit(1)).alias("packets"), F.sum("ip_len").alias("ip_bytes"))
             .withColumn("kbit_s", F.col("ip_bytes") * 8 / 1000.0 / bin_s))


def queue_lengths(spark: SparkSession, events: DataFrame) -> DataFrame:
    """The brokers' output-queue windows (``queue`` records) per link direction."""
    return (events.where((F.col("node_role") == "broker") & (F.col("ev") == Ev.QUEUE.value))
            .select("algorithm", F.col("node").alias("src_broker"),
                    F.col("link").alias("dst_broker"), "t_wall", "queue_len", "count_in",
                    "count_out", "flushed", "window_ms"))


def link_timeseries(spark: SparkSession, throughput: DataFrame, queues: DataFrame, *,
                    bin_s: float) -> DataFrame:
    """Per link direction and time bin: wire throughput beside the sender's output
    queue (longest queue and messages out in the bin). A bin missing on one side is
    zero there: brokers log no queue window for an idle link, idle links carry no
    packets."""
    q = (queues.groupBy(*LINK_KEYS, _bin(F.col("t_wall"), bin_s).alias("t_bin_s"))
         .agg(F.max("queue_len").alias("queue_len_max"),
              F.sum("count_out").alias("messages_out")))
    return (throughput.join(q, [*LINK_KEYS, "t_bin_s"], "full")
            .fillna(0, ["packets", "ip_bytes", "kbit_s", "queue_len_max", "messages_out"]))


# ---- notifications ----------------------------------------------------------------------


def notification_delays(spark: SparkSession, events: DataFrame) -> DataFrame:
    """One row per notification received by a subscriber: ``delay_ms`` from the
    ``t_pub`` stamped in it (what summary.json reports) and ``send_to_recv_ms`` from the
    publisher's ``send`` record (null if that record is missing), with the hop count."""
    c = events.where((F.col("node_role") == "client") & (F.col("type") == "PUBLISH"))
    sent = (c.where(F.col("ev") == Ev.SEND.value)
            .groupBy("algorithm", "origin", "msg_id").agg(F.min("t_wall").alias("t_sent")))
    recv = c.where(F.col("ev") == Ev.RECV.value).select(
        "algorithm", "origin", "msg_id", F.col("node").alias("subscriber"), "t_pub",
        F.col("t_wall").alias("t_recv"), "hops")
    return (recv.join(sent, ["algorithm", "origin", "msg_id"], "left")
            .withColumn("delay_ms", (F.col("t_recv") - F.col("t_pub")) * 1000.0)
            .withColumn("send_to_recv_ms", (F.col("t_recv") - F.col("t_sent")) * 1000.0))


def deliveries_vs_oracle(spark: SparkSession, delays: DataFrame,
                         expected: DataFrame) -> DataFrame:
    """Per (algorithm, notification, subscriber): whether the oracle expects it, how many
    copies arrived, and ``status``: delivered, duplicate, missing or unexpected."""
    keys = ["algorithm", "origin", "msg_id", "subscriber"]
    got = delays.groupBy(*keys).agg(F.count(F.lit(1)).alias("copies"))
    return (expected.select(*keys).withColumn("expected", F.lit(True))
            .join(got, keys, "full")
            .fillna({"expected": False, "copies": 0})
            .withColumn("status", F.when(~F.col("expected"), "unexpected")
                        .when(F.col("copies") == 0, "missing")
                        .when(F.col("copies") > 1, "duplicate")
                        .otherwise("delivered")))


def delivery_summary(spark: SparkSession, deliveries: DataFrame) -> DataFrame:
    """summary.json's delivery figures per algorithm (same definitions)."""
    exp, copies = F.col("expected"), F.col("copies")
    return deliveries.groupBy("algorithm").agg(
        F.sum(exp.cast("long")).alias("expected_deliveries"),
        F.sum((copies > 0).cast("long")).alias("delivered"),
        F.sum((~exp & (copies > 0)).cast("long")).alias("unexpected"),
        F.sum(F.greatest(copies - 1, F.lit(0))).alias("duplicates"),
        F.sum((exp & (copies == 0)).cast("long")).alias("missing"))


def delay_stats(spark: SparkSession, delays: DataFrame) -> DataFrame:
    """p50, p95 (linear interpolation, as summary.json), max and mean of ``delay_ms``."""
    d = F.col("delay_ms")
    return delays.groupBy("algorithm").agg(
        F.count(d).alias("n"), F.percentile(d, F.lit(0.5)).alias("p50"),
        F.percentile(d, F.lit(0.95)).alias("p95"), F.max(d).alias("max"),
        F.mean(d).alias("mean"), F.min(d).alias("min"))
