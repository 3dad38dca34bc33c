"""``pubsublab analyze RUN_DIR``: a run folder's pcaps and logs to Parquet metrics, the
wire/log cross-check, and ``report.html``.

Inputs, per algorithm subfolder ``<run>/<algorithm>/``: ``pcap/<host>.pcap*`` (and
``pcap/capture.json`` for interface names), the JSON-lines logs ``*.jsonl`` (a node is a
client when the run's ``workload.jsonl`` names it one, else a broker), the broker configs
``config/*.json`` (addresses of the overlay links) and ``summary.json``; at the run's
top, ``workload.jsonl`` (the oracle's expected deliveries) and ``manifest.json``.

Outputs under ``<run>/metrics/`` (Parquet, overwritten by a new analysis), each
partitioned by ``algorithm``:

- ``packets/`` (also by ``host``): one row per captured packet (header fields);
- ``wire_frames/``: overlay frames decoded from the TCP streams, per capture host, with
  the brokers at both ends;
- ``log_events/``: every log record;
- ``ims_by_link/``, ``ims_by_type/``: IMs from the wire beside IMs from the logs;
- ``link_timeseries/``: per link direction and time bin, wire throughput beside the
  sender's output-queue length; ``queue/``: the queue windows as logged;
- ``delays/``: one row per notification received; ``deliveries/``: every
  (notification, subscriber) pair against the oracle;
- ``analysis.json``: the result (also what ``--json`` prints).

The wire/log verdict (``wire_matches_logs``) is true only when every algorithm has a
complete capture and, per overlay link direction and message type, the sender's capture
saw as many frames as its log says reached the socket. ``wire_check`` says which way it
fails: ``disagree``, or ``incomplete`` when the capture itself lost packets (dropped by
the kernel, or overwritten by the ring of files; ``pcap/capture.json``), for then the
frames it lost cannot be compared (hostile traffic on the overlay port can cause that).

The run folder is checked against the manifest's list of nodes (``nodes``: brokers and
clients, written by the emulated runner): a log that is not there is named among the
problems and in the algorithm's ``missing_logs``, for a deleted client log would
otherwise show only as missing deliveries, which look like loss on the network.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analysis import transforms as T
from analysis.logs import signed_msg_id
from nodes.emulated.runtime import BROKER_PORT
from nodes.runfolder import (
    CONFIG_DIR,
    METRICS_DIR,
    PCAP_DIR,
    SUMMARY,
    WORKLOAD,
    algorithm_dirs,
    log_path,
    read_manifest,
)
from nodes.time_left import TimeLeft, write_line

BIN_S = 0.1
# The stages' relative lengths, for the estimate of the time left: the demo's analysis
# on the 2-core machines (local[2], 15 MB of pcaps, 84,000 log records) took 21, 24, 9,
# 43 and 17 s.
STAGES = (("packets", 1.0), ("wire frames", 1.1), ("logs", 0.45), ("tables", 2.0),
          ("report", 0.8))
_PCAP_NAME = re.compile(r"^(?P<host>.+)\.pcap\d*$")
Progress = Callable[[str], None]


class RunFolderError(RuntimeError):
    """A folder that holds no run to analyse."""


def progress(msg: str) -> None:
    """Progress goes to standard error, so --json output stays clean."""
    write_line(f"[analyze] {msg}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def discover(run_dir: Path) -> dict[str, Any]:
    """What a run folder holds, as the job's inputs (see the module docstring)."""
    header = {}
    workload = run_dir / WORKLOAD
    if workload.exists():
        with open(workload, encoding="utf-8") as fh:
            header = json.loads(fh.readline() or "{}")
    clients = set(header.get("clients", {}))
    found: dict[str, Any] = {"algorithms": [], "pcaps": [], "logs": [], "addresses": [],
                             "summaries": {}, "captures": {}}
    for d in algorithm_dirs(run_dir):  # controller/ and metrics/ are not among them
        logs = sorted(d.glob("*.jsonl"))
        pcap_dir = d / PCAP_DIR
        if not logs and not pcap_dir.is_dir():
            continue
        alg = d.name
        found["algorithms"].append(alg)
        found["logs"] += [{"path": str(p), "algorithm": alg,
                           "node_role": "client" if p.stem in clients else "broker"}
                          for p in logs]
        for cfg in sorted((d / CONFIG_DIR).glob("*.json")):
            c = _read_json(cfg) or {}
            for name, nb in (c.get("neighbours") or {}).items():
                found["addresses"].append((alg, nb["addr"][0], name))
        capture = _read_json(pcap_dir / "capture.json") or {}
        found["captures"][alg] = capture
        for p in sorted(pcap_dir.glob("*.pcap*")):
            m = _PCAP_NAME.match(p.name)
            if m:
                host = m.group("host")
                ifaces = capture.get("hosts", {}).get(host, {}).get("interfaces", {})
                found["pcaps"].append({"path": str(p), "algorithm": alg, "host": host,
                                       "ifnames": {k: v["name"] for k, v in ifaces.items()}})
        summary = _read_json(d / SUMMARY)
        if summary:
            found["summaries"][alg] = summary
    found["addresses"] = sorted(set(found["addresses"]))
    return found


def missing_logs(run_dir: Path, algorithms: list[str]) -> dict[str, dict[str, list[str]]]:
    """Per algorithm, the brokers and clients the manifest lists (``nodes``) that have no
    log in its folder; nothing for a manifest without the list (an older run)."""
    nodes = (read_manifest(run_dir) or {}).get("nodes") or {}
    return {alg: {role: [n for n in nodes.get(role, [])
                         if not log_path(run_dir / alg, n).exists()]
                  for role in ("brokers", "clients")} for alg in algorithms}


def _expected(spark: SparkSession, run_dir: Path, algorithms: list[str],
              problems: list[dict[str, Any]]) -> DataFrame:
    from nodes.workloads.ops import workload_from_jsonl
    from nodes.workloads.oracle import expected_deliveries

    schema = "algorithm string, origin string, msg_id bigint, subscriber string"
    try:
        expected = expected_deliveries(workload_from_jsonl(run_dir / WORKLOAD))
    except (OSError, ValueError, KeyError) as exc:
        problems.append({"source": "oracle", "file": str(run_dir / WORKLOAD),
                         "where": "", "problem": f"no expected deliveries: {exc}"})
        return spark.createDataFrame([], schema)
    rows = [(alg, origin, signed_msg_id(msg_id), sub) for alg in algorithms
            for (origin, msg_id), subs in expected.items() for sub in sorted(subs)]
    return spark.createDataFrame(rows, schema)


def _write(df: DataFrame, path: Path, *partition: str) -> None:
    df.write.mode("overwrite").partitionBy(*partition).parquet(str(path))


def _by_type(rows: list[Any], alg: str, column: str) -> dict[str, int]:
    return {r["type"]: int(r[column]) for r in rows if r["algorithm"] == alg and r[column]}


def _problem_rows(items: set[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [{"source": s, "file": f, "where": w, "problem": p} for s, f, w, p in sorted(items)]


def run_analysis(spark: SparkSession, run_dir: Path, *, report: bool = True,
                 bin_s: float = BIN_S, chunk_bytes: int = 16 << 20,
                 log: Progress = progress) -> dict[str, Any]:
    """Analyse ``run_dir`` (see the module docstring); returns the result dict."""
    t0 = time.monotonic()
    run_dir = run_dir.resolve()
    metrics = run_dir / METRICS_DIR
    inputs = _inputs(run_dir, log)
    algorithms = inputs["algorithms"]
    problems_acc = T.set_accumulator(spark)
    timing: dict[str, float] = {}
    progress = TimeLeft(run_dir.name, STAGES if report else STAGES[:-1], log, seconds=False)

    def step(name: str, since: float) -> float:
        now = time.monotonic()
        timing[name] = round(now - since, 2)
        progress.finish()
        return now

    progress.start()
    t = time.monotonic()
    parts = T.write_packet_table(spark, inputs["pcaps"], metrics / "packets",
                                 problems=problems_acc, chunk_bytes=chunk_bytes)
    packets = T.read_packet_table(spark, metrics / "packets")
    n_packets = sum(p["packets"] for p in parts)
    t = step("packets_s", t)
    log(f"packets: {n_packets} parsed in {timing['packets_s']} s -> metrics/packets")
    progress.start()

    addresses, frames = _wire_frames(spark, inputs, metrics, problems_acc, chunk_bytes)
    n_frames = frames.count()
    t = step("wire_s", t)
    log(f"wire: {n_frames} overlay frames reassembled in {timing['wire_s']} s")
    progress.start()

    events = _log_events(spark, inputs, metrics, problems_acc)
    n_events = events.count()
    t = step("logs_s", t)
    log(f"logs: {n_events} records in {timing['logs_s']} s")
    progress.start()

    other: list[dict[str, Any]] = []
    cross, by_type, delays, deliveries = _tables(spark, run_dir, algorithms, packets,
                                                 addresses, frames, events, bin_s, other)
    t = step("tables_s", t)
    log(f"tables: ims, link time series, queues, delays, deliveries in {timing['tables_s']} s")

    per_file = _packets_per_file(parts)
    absent = missing_logs(run_dir, algorithms)
    per_alg = _per_algorithm(spark, inputs, per_file, absent, cross, by_type, frames, delays,
                             deliveries)
    for df in (frames, events, cross, delays):
        df.unpersist()

    problems = (_problem_rows(problems_acc.value) + other
                + _absent_inputs(run_dir, absent, inputs["pcaps"], per_file))
    result = {
        "run_dir": str(run_dir), "metrics_dir": str(metrics), **_totals(per_alg),
        "algorithms": per_alg, "packets": n_packets, "wire_frames": n_frames,
        "log_records": n_events, "problems": problems, "timing_s": timing,
    }
    for p in problems:
        log(f"PROBLEM {p['source']} {p['file']} {p['where']}: {p['problem']}")
    log(f"cross-check: wire and logs {_VERDICT[result['wire_check']]} "
        f"(wire {result['wire_ims_by_type']}, "
        f"logs {result['log_ims_by_type']})")
    if report:
        from analysis.report import write_report

        progress.start()
        result["report"] = str(write_report(run_dir, result))
        step("report_s", t)
        log(f"report: {result['report']}")
    timing["total_s"] = round(time.monotonic() - t0, 2)
    (metrics / "analysis.json").write_text(json.dumps(result, indent=1, sort_keys=True,
                                                      default=str) + "\n")
    return result


def _inputs(run_dir: Path, log: Progress) -> dict[str, Any]:
    """The run folder's inputs (:func:`discover`), said in one line; RunFolderError when
    it holds no algorithm's logs or captures."""
    inputs = discover(run_dir)
    algorithms = inputs["algorithms"]
    if not algorithms:
        raise RunFolderError(f"{run_dir}: no algorithm folders with logs or pcaps "
                             "(is it a run folder?)")
    pcap_mb = sum(Path(p["path"]).stat().st_size for p in inputs["pcaps"]) / 1e6
    log(f"{run_dir.name}: {', '.join(algorithms)}; {len(inputs['pcaps'])} pcap files "
        f"({pcap_mb:.1f} MB), {len(inputs['logs'])} logs")
    return inputs


def _packets_per_file(parts: list[dict[str, Any]]) -> dict[str, int]:
    """The packets parsed per capture file, from the packet table's parts."""
    per_file: dict[str, int] = defaultdict(int)
    for p in parts:
        per_file[p["path"]] += p["packets"]
    return per_file


def _log_events(spark: SparkSession, inputs: dict[str, Any], metrics: Path,
                problems: T.Acc) -> DataFrame:
    """The records of every log (persisted; written to ``metrics/log_events``)."""
    events = T.events_from_logs(spark, inputs["logs"], problems=problems
                                ).persist(StorageLevel.MEMORY_AND_DISK)
    _write(events, metrics / "log_events", "algorithm")
    return events


def _wire_frames(spark: SparkSession, inputs: dict[str, Any], metrics: Path, problems: T.Acc,
                 chunk_bytes: int) -> tuple[DataFrame, DataFrame]:
    """The brokers' addresses, and the overlay's frames reassembled from the captures and
    labelled with their brokers (persisted; written to ``metrics/wire_frames``)."""
    addresses = spark.createDataFrame(inputs["addresses"] or [],
                                      "algorithm string, ip string, broker string")
    segments = T.overlay_segments(spark, inputs["pcaps"], port=BROKER_PORT,
                                  problems=problems, chunk_bytes=chunk_bytes)
    frames = T.label_brokers(spark, T.wire_frames(spark, segments, problems=problems),
                             addresses).persist(StorageLevel.MEMORY_AND_DISK)
    _write(frames, metrics / "wire_frames", "algorithm")
    return addresses, frames


def _per_algorithm(spark: SparkSession, inputs: dict[str, Any], per_file: dict[str, int],
                   absent: dict[str, dict[str, list[str]]], cross: DataFrame,
                   by_type: DataFrame, frames: DataFrame, delays: DataFrame,
                   deliveries: DataFrame) -> dict[str, dict[str, Any]]:
    """Each algorithm's result (:func:`_algorithm_result`) from the tables, collected;
    ``per_file``: the packets parsed per capture file; ``absent``: the missing logs."""
    type_rows = [r.asDict() for r in by_type.collect()]
    mismatched = [r.asDict() for r in cross.where(~F.col("match")).collect()]
    flows = _flows_of(frames, mismatched)
    delivery = {r["algorithm"]: r.asDict() for r in
                T.delivery_summary(spark, deliveries).collect()}
    stats = {r["algorithm"]: r.asDict() for r in T.delay_stats(spark, delays).collect()}
    packets_by_alg: dict[str, int] = defaultdict(int)
    for p in inputs["pcaps"]:
        packets_by_alg[p["algorithm"]] += per_file.get(p["path"], 0)
    per_alg = {}
    for alg in inputs["algorithms"]:
        per_alg[alg] = _algorithm_result(alg, inputs, type_rows, mismatched, flows,
                                         delivery.get(alg), stats.get(alg),
                                         packets_by_alg.get(alg, 0))
        per_alg[alg]["missing_logs"] = absent[alg]
    return per_alg


def _totals(per_alg: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's IMs by type over its algorithms, and its wire check: the worst of
    theirs."""
    checks = {a["wire_check"] for a in per_alg.values()}
    return {
        "wire_ims_by_type": _sum_types(per_alg, "wire_ims_by_type"),
        "log_ims_by_type": _sum_types(per_alg, "log_ims_by_type"),
        "log_sends_by_type": _sum_types(per_alg, "log_sends_by_type"),
        "wire_matches_logs": all(a["wire_matches_logs"] for a in per_alg.values()),
        "wire_check": next(c for c in ("disagree", "incomplete", "agree") if c in checks),
    }


def _tables(spark: SparkSession, run_dir: Path, algorithms: list[str], packets: DataFrame,
            addresses: DataFrame, frames: DataFrame, events: DataFrame, bin_s: float,
            other: list[dict[str, Any]]) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """Write the derived tables under the run's metrics folder (IMs by link and type,
    queues, the links' time series, delays, deliveries against the oracle, whose reading
    problems go into ``other``); returns the IM cross-check (persisted), the IMs by type,
    the delays (persisted) and the deliveries, which the summary reads on."""
    metrics = run_dir / METRICS_DIR
    cross = T.ims_cross_check(spark, T.wire_ims_by_link(spark, frames),
                              T.log_ims_by_link(spark, events)).persist()
    by_type = T.ims_by_type(spark, cross)
    labelled = T.label_brokers(spark, packets, addresses)
    throughput = T.link_throughput(spark, labelled, port=BROKER_PORT, bin_s=bin_s)
    queues = T.queue_lengths(spark, events)
    delays = T.notification_delays(spark, events).persist()
    deliveries = T.deliveries_vs_oracle(spark, delays,
                                        _expected(spark, run_dir, algorithms, other))
    for name, df in (("ims_by_link", cross), ("ims_by_type", by_type), ("queue", queues),
                     ("link_timeseries", T.link_timeseries(spark, throughput, queues,
                                                           bin_s=bin_s)),
                     ("delays", delays), ("deliveries", deliveries)):
        _write(df, metrics / name, "algorithm")
    return cross, by_type, delays, deliveries


def _absent_inputs(run_dir: Path, absent: dict[str, dict[str, list[str]]],
                   pcaps: list[dict[str, Any]], per_file: dict[str, int]
                   ) -> list[dict[str, Any]]:
    """Problem rows for what the run folder lacks: each log the manifest lists that is
    not there (by algorithm and role), and each capture that held no packets."""
    rows = [{"source": "run folder", "file": str(log_path(run_dir / alg, name)),
             "where": "", "problem": f"no log of {role[:-1]} {name}, which the manifest "
                                     "lists" + (": its deliveries count as missing"
                                                if role == "clients" else "")}
            for alg, by_role in absent.items() for role, names in by_role.items()
            for name in names]
    rows += [{"source": "pcap", "file": p["path"], "where": "", "problem": "no packets"}
             for p in pcaps if p["path"] in per_file and per_file[p["path"]] == 0]
    return rows


def _flows_of(frames: DataFrame, mismatched: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The TCP flows (per capture host) that carry the link directions of ``mismatched``."""
    if not mismatched:
        return []
    links = {(m["algorithm"], m["src_broker"], m["dst_broker"]) for m in mismatched}
    rows = (frames.where(F.col("src_broker").isNotNull() & F.col("dst_broker").isNotNull())
            .select(*T.LINK_KEYS, "host", "ip_src", "sport", "ip_dst", "dport")
            .distinct().collect())
    return [r.asDict() for r in rows
            if (r["algorithm"], r["src_broker"], r["dst_broker"]) in links]


def _sum_types(per_alg: dict[str, dict[str, Any]], key: str) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for a in per_alg.values():
        for typ, n in a[key].items():
            total[typ] += n
    return dict(sorted(total.items()))


def _algorithm_result(alg: str, inputs: dict[str, Any], type_rows: list[dict[str, Any]],
                      mismatched: list[dict[str, Any]], flows: list[dict[str, Any]],
                      delivery: dict[str, Any] | None, stats: dict[str, Any] | None,
                      n_packets: int) -> dict[str, Any]:
    captured = any(p["algorithm"] == alg for p in inputs["pcaps"]) and n_packets > 0
    mine = [m for m in mismatched if m["algorithm"] == alg]
    capture = inputs["captures"].get(alg, {})
    dropped, overwritten = (capture.get(k) or 0 for k in ("dropped_by_kernel",
                                                           "overwritten_packets"))
    lost = dropped + overwritten  # packets the capture itself lost
    wire = _by_type(type_rows, alg, "wire_sent")
    out: dict[str, Any] = {
        "captured": captured, "packets": n_packets,
        "wire_ims_by_type": wire,
        "wire_received_by_type": _by_type(type_rows, alg, "wire_received"),
        "log_ims_by_type": _by_type(type_rows, alg, "log_on_wire"),
        "log_sends_by_type": _by_type(type_rows, alg, "log_sent"),
        "wire_matches_logs": captured and not mine and not lost,
        # A capture that lost packets cannot tell its own gaps from the brokers' lies.
        "wire_check": ("incomplete" if captured and lost
                       else "agree" if captured and not mine else "disagree"),
        "mismatches": [{**m, "flows": [f for f in flows if f["algorithm"] == alg
                                       and f["src_broker"] == m["src_broker"]
                                       and f["dst_broker"] == m["dst_broker"]]}
                       for m in mine],
        "deliveries": {k: v for k, v in (delivery or {}).items() if k != "algorithm"},
        "delay_ms": {k: (round(v, 6) if isinstance(v, float) else v)
                     for k, v in (stats or {}).items() if k != "algorithm"},
        "capture": {k: capture.get(k) for k in
                    ("bytes", "packets_in_files", "dropped_by_kernel", "overwritten_packets",
                     "bound_bytes", "snaplen")},
    }
    if not captured:
        out["why_not"] = "no packets captured for this algorithm"
    elif lost:
        out["why_incomplete"] = (f"the capture lost {lost} packet(s) "
                                 f"({dropped} dropped by the kernel, {overwritten} "
                                 "overwritten by rotation): the frames in them cannot be "
                                 "compared with the logs")
    summary = inputs["summaries"].get(alg)
    if summary:
        keys = ("expected_deliveries", "delivered", "missing", "duplicates", "unexpected")
        differ = {k: {"summary": summary.get(k), "analysis": out["deliveries"].get(k)}
                  for k in keys if summary.get(k) != out["deliveries"].get(k)}
        if summary.get("ims_by_type", {}) != out["log_sends_by_type"]:
            differ["ims_by_type"] = {"summary": summary.get("ims_by_type"),
                                     "analysis": out["log_sends_by_type"]}
        out["summary_agrees"] = not differ
        out["summary_differences"] = differ
    return out


_VERDICT = {"agree": "agree", "disagree": "DISAGREE", "incomplete": "check INCOMPLETE"}


def format_result(result: dict[str, Any]) -> str:
    """The analysis in a few lines for a terminal."""
    verdict = _VERDICT[result["wire_check"]]
    wire, logged = result["wire_ims_by_type"], result["log_ims_by_type"]
    types = sorted(set(wire) | set(logged))
    lines = [f"wire and logs {verdict}: " + (", ".join(
        f"{t} wire {wire.get(t, 0)} {'=' if wire.get(t, 0) == logged.get(t, 0) else '!='} "
        f"logs {logged.get(t, 0)}" for t in types) or "no inter-broker messages")]
    for alg, a in result["algorithms"].items():
        d, s = a["deliveries"], a["delay_ms"]
        delay = (f", delay p50 {s['p50']:.1f} ms p95 {s['p95']:.1f} ms"
                 if s.get("p50") is not None else "")
        lines.append(f"{alg}: {a['packets']} packets, delivered {d.get('delivered')} of "
                     f"{d.get('expected_deliveries')}, missing {d.get('missing')}, "
                     f"duplicates {d.get('duplicates')}{delay}")
        if a.get("why_incomplete"):
            lines.append(f"  WIRE CHECK INCOMPLETE: {a['why_incomplete']}")
        absent = [n for names in a["missing_logs"].values() for n in names]
        if absent:
            lines.append(f"  MISSING LOGS {', '.join(absent)}: the manifest lists them; what "
                         "they would show counts as missing, not as loss on the network")
        for m in a["mismatches"]:
            lines.append(f"  MISMATCH {m['src_broker']}->{m['dst_broker']} {m['type']}: wire "
                         f"{m['wire_sent']}, logs {m['log_on_wire']}")
    lines.append(f"problems: {len(result['problems'])}"
                 + "".join(f"\n  {p['file']} {p['where']}: {p['problem']}"
                           for p in result["problems"][:10]))
    if result.get("report"):
        lines.append(f"report: {result['report']}")
    lines.append(f"metrics: {result['metrics_dir']}")
    return "\n".join(lines)
