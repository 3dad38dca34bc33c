"""A real emulated run with capture, analysed: the wire's inter-broker messages equal the
brokers' logged ones per type, delays agree with the logs, the Parquet outputs read with
pandas, and a damaged copy of the run (truncated pcap, empty log, a line that is not
JSON) is analysed with every problem named and the rest kept; a copy without one client's
log names that log instead of passing its deliveries off as loss, and a copy whose
capture reports kernel drops gets an incomplete wire check instead of agreement."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from analysis.pipeline import format_result, run_analysis
from analysis.session import spark_session
from experiments.plan import compile_plan
from experiments.runs.emulated import broker_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec

pytestmark = pytest.mark.root

SPEC = {
    "name": "wire",
    "topology": {"name": "scot", "params": {"tree": "a-b,b-c", "m": 2, "mode": "overlay"}},
    "links": {"bw_mbps": 20, "delay_ms": 2},
    "seed": 5,
    "fidelity": {"links": 0},
    "capture": {"max_mb": 60, "file_mb": 5},
    "workload": {"n_publishers": 3, "n_subscribers": 8, "pubs_per_publisher": 100,
                 "publish_rate_hz": 50, "selectivity": 0.1},
    "routing": {"algorithms": ["flood"]},
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = compile_plan(parse_spec(SPEC))
    assert plan.capture.enabled  # automatic: a stock workload is captured
    run, manifest = run_experiment(plan, tmp_path_factory.mktemp("runs"),
                                   phases=(broker_phase(plan),))
    assert manifest["status"] == "ok"
    return run


@pytest.fixture(scope="module")
def analysed(run_dir: Path) -> dict:
    """``pubsublab analyze RUN --json`` as a user runs it."""
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "analyze", str(run_dir),
                          "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    assert "[analyze]" in res.stderr  # progress goes to standard error
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_capture_is_bounded_and_recorded(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    cap = manifest["capture"]
    assert cap["enabled"] and cap["snaplen"] == 262144 and cap["filter"] == "tcp port 7000"
    assert cap["bound_bytes"] <= 60e6 * 1.01
    flood = cap["algorithms"]["flood"]
    assert flood["dropped_by_kernel"] == 0 and flood["overwritten_packets"] == 0
    assert flood["packets_in_files"] > 0 and set(flood["hosts"]) == {
        "a0", "a1", "b0", "b1", "c0", "c1"}
    record = json.loads((run_dir / "flood" / "pcap" / "capture.json").read_text())
    assert all(h["interfaces"] for h in record["hosts"].values())


def test_wire_counts_equal_logged_counts(run_dir: Path, analysed: dict) -> None:
    summary = json.loads((run_dir / "flood" / "summary.json").read_text())
    assert analysed["wire_matches_logs"] is True
    assert analysed["wire_ims_by_type"] == analysed["log_ims_by_type"] == summary["ims_by_type"]
    assert summary["ims_by_type"]["PUBLISH"] == 5 * summary["published"]  # 6 brokers: a tree
    flood = analysed["algorithms"]["flood"]
    assert flood["wire_received_by_type"] == flood["wire_ims_by_type"]
    assert flood["summary_agrees"], flood["summary_differences"]
    assert analysed["problems"] == []
    assert Path(analysed["report"]).read_text().count("Wire and logs agree") == 1


def test_delays_are_consistent_with_the_logs(run_dir: Path, analysed: dict) -> None:
    metrics = run_dir / "metrics"
    delays = pd.read_parquet(metrics / "delays")
    summary = json.loads((run_dir / "flood" / "summary.json").read_text())
    assert len(delays) == summary["delivered"] + summary["duplicates"]
    assert (delays["delay_ms"] >= 0).all()
    # t_pub is stamped as the publisher writes to its socket, just before its send record.
    assert ((delays["send_to_recv_ms"] - delays["delay_ms"]).abs() < 50).all()
    # Every overlay hop holds a message 2 ms (the brokers' delay line); a subscriber on the
    # publisher's own broker takes none.
    assert (delays["delay_ms"] >= 2.0 * delays["hops"] - 0.01).all()
    assert delays["hops"].max() >= 2
    for q in ("p50", "p95", "max"):
        assert analysed["algorithms"]["flood"]["delay_ms"][q] == pytest.approx(
            summary["delay_ms"]["notification"][q], abs=1e-3)


def test_parquet_outputs_read_with_pandas(run_dir: Path, analysed: dict) -> None:
    metrics = run_dir / "metrics"
    packets = pd.read_parquet(metrics / "packets")
    assert len(packets) == analysed["packets"] > 0
    assert {"t_wall", "host", "interface", "ip_src", "tcp_seq", "tcp_flags"} <= set(packets)
    assert packets["interface"].notna().all()  # named from the capture's interface record
    frames = pd.read_parquet(metrics / "wire_frames")
    assert (frames["type"] == "HELLO").any()
    for name in ("log_events", "ims_by_link", "ims_by_type", "link_timeseries", "queue",
                 "deliveries"):
        assert len(pd.read_parquet(metrics / name)) > 0, name
    ts = pd.read_parquet(metrics / "link_timeseries")
    assert ts["kbit_s"].max() > 0


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session()
    yield session
    session.stop()


def test_damaged_run_is_reported_and_the_rest_analysed(run_dir: Path, tmp_path: Path,
                                                       spark: SparkSession) -> None:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("metrics", "report.html"))
    pcap = sorted((copy / "flood" / "pcap").glob("b0.pcap*"))[0]
    pcap.write_bytes(pcap.read_bytes()[:-25])
    (copy / "flood" / "s0.jsonl").write_text("")
    log = copy / "flood" / "a1.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]) + "{this is not json\n" + "".join(lines[3:]))
    result = run_analysis(spark, copy)
    where = {(Path(p["file"]).name, p["where"]) for p in result["problems"]}
    assert ("a1.jsonl", "line 4") in where
    assert ("s0.jsonl", "") in where
    assert any(name == pcap.name and w.startswith("byte ") for name, w in where)
    events = pd.read_parquet(copy / "metrics" / "log_events")
    assert (events["file"].str.endswith("a1.jsonl")).sum() == len(lines)  # the rest kept
    good = pd.read_parquet(run_dir / "metrics" / "packets")
    assert result["packets"] == len(good) - 1  # only the cut record is lost
    assert "Problems met while parsing" in (copy / "report.html").read_text()


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("metrics", "report.html"))
    return copy


def test_a_deleted_log_is_named_not_taken_for_loss(run_dir: Path, tmp_path: Path,
                                                   spark: SparkSession) -> None:
    copy = _copy(run_dir, tmp_path)
    received = {p.stem: sum('"ev":"recv"' in line and '"PUBLISH"' in line
                            for line in p.read_text().splitlines())
                for p in (copy / "flood").glob("s*.jsonl")}
    victim = max(received, key=received.__getitem__)
    assert received[victim] > 0
    (copy / "flood" / f"{victim}.jsonl").unlink()
    result = run_analysis(spark, copy, report=False)
    flood = result["algorithms"]["flood"]
    assert flood["deliveries"]["missing"] == received[victim]  # what it would look like
    assert flood["missing_logs"] == {"brokers": [], "clients": [victim]}
    (problem,) = [p for p in result["problems"] if p["source"] == "run folder"]
    assert problem["file"] == str(copy / "flood" / f"{victim}.jsonl")
    assert problem["problem"] == (f"no log of client {victim}, which the manifest lists: "
                                  "its deliveries count as missing")
    assert f"MISSING LOGS {victim}: the manifest lists them" in format_result(result)


def test_capture_drops_make_the_wire_check_incomplete(run_dir: Path, tmp_path: Path,
                                                      spark: SparkSession) -> None:
    copy = _copy(run_dir, tmp_path)
    record_path = copy / "flood" / "pcap" / "capture.json"
    record = json.loads(record_path.read_text())
    # What hostile traffic on the overlay port did to one host's capture.
    record["hosts"]["b0"]["dropped_by_kernel"] = record["dropped_by_kernel"] = 13494
    record_path.write_text(json.dumps(record))
    result = run_analysis(spark, copy)
    flood = result["algorithms"]["flood"]
    assert not flood["mismatches"]  # every frame the brokers logged was still seen
    assert result["wire_check"] == flood["wire_check"] == "incomplete"
    assert result["wire_matches_logs"] is False
    assert flood["capture"]["dropped_by_kernel"] == 13494  # still recorded
    text = format_result(result)
    assert text.startswith("wire and logs check INCOMPLETE: ")
    assert "the capture lost 13494 packet(s) (13494 dropped by the kernel" in text
    report = (copy / "report.html").read_text()
    assert "WIRE CHECK INCOMPLETE" in report and "Wire and logs agree" not in report
