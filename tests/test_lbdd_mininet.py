"""LBDD and point-to-point in Mininet on the paper's twelve PCs: every subscriber ends with
data byte-identical to the publisher's (checksums), for both methods; and a subscriber
killed mid-transfer is noticed by heartbeat, the tree is rebuilt, and every survivor
still ends with every slice exactly once, resumed from what it held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.bulk.emulated import bulk_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.workloads.bulkdata import source_checksum

pytestmark = pytest.mark.root

SUBSCRIBERS = [f"pc{i}" for i in range(2, 13)]
SPEC = {
    "name": "lbdd-mininet",
    "topology": {"name": "gigabit-cluster", "params": {"paper_ips": True}},
    "links": {"bw_mbps": 100},
    "seed": 5,
    "scale": 1 / 2048,  # 4 MiB: 64 slices of 64 KiB
    "fidelity": {"links": 0},
    "workload": {"kind": "bulk", "subscriber_counts": [11],
                 "failure": {"victim": "pc7", "at_s": 0.5, "algorithms": ["lbdd"]}},
    "routing": {"algorithms": ["lbdd", "p2p"],
                "params": {"heartbeat_s": 0.5, "timeout_s": 2.0}},
}


def _records(path: Path, kind: str) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines())
            if r["ev"] == "record" and r["kind"] == kind]


def test_bulk_data_is_byte_identical_and_survives_a_failure(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    assert not plan.capture.enabled  # automatic: bulk slices are not captured
    run_dir, manifest = run_experiment(plan, tmp_path, phases=(bulk_phase(plan),))
    assert manifest["status"] == "ok"
    checksum = source_checksum(4 * 2**20, 65536, 5)
    for algorithm in ("lbdd", "p2p"):
        s = manifest["summaries"][algorithm]
        assert s["runtime"] == "emulated" and s["complete"], algorithm
        assert (s["missing"], s["duplicates"], s["delivered"]) == (0, 0, 11 * 64), algorithm
        assert s["checksums_ok"] and s["checksum"] == checksum, algorithm
        assert s["tree_as_computed"], algorithm
        logs = run_dir / algorithm / "n11"
        (sent,) = _records(logs / "pub-pc1.jsonl", "data_send")
        assert sent["checksum"] == checksum
        for sub in SUBSCRIBERS:
            (got,) = _records(logs / f"sub-{sub}.jsonl", "data_recv")
            assert (got["checksum"], got["slices"], got["duplicates"]) == (checksum, 64, 0)
            (counters,) = _records(logs / f"{sub}.jsonl", "counters")
            assert counters["slices_received"] == 64 and counters["slices_duplicate"] == 0
    assert manifest["summaries"]["lbdd"]["contribution"]["pc1"] == pytest.approx(2 / 11)
    assert manifest["summaries"]["p2p"]["contribution"] == {"pc1": 1.0}

    failure = manifest["summaries"]["lbdd"]["failure"]
    assert failure["complete"] and failure["checksums_ok"]
    assert failure["missing"] == 0 and failure["duplicates"] == 0
    assert failure["orphans"] == ["pc10", "pc11", "pc2", "pc9"]  # pc7's four children
    assert failure["detected_by"] == 10
    # Dead after 2 s of silence, checked every 0.5 s; silence starts at the last message
    # heard, up to a heartbeat before the kill; slack for a loaded machine.
    assert 1.5 <= failure["detected_first_s"] <= failure["detected_last_s"] < 4.0
    assert failure["repair_s"] >= failure["detected_first_s"]
    resumed = {r["child"]: r for r in failure["resumes"]}
    assert sorted(resumed) == failure["orphans"]
    for r in resumed.values():  # resumed from what each held, not restarted
        assert r["parent"] == "pc8" and 0 < r["child_has"] < 64
    row = json.loads((run_dir / "lbdd" / "failure" / "summary.json").read_text())
    assert row["tree_as_computed"] and row["expected_deliveries"] == 10 * 64


def test_the_per_stream_cap_holds_in_mininet(tmp_path: Path) -> None:
    # LBDD's three direct children of the publisher, each connection paced to 18 Mbit/s
    # in the brokers: the publisher's NIC (kernel counters, headers included) carries
    # three streams' worth, about 54 % of its 100 Mbit/s, where uncapped it would be full.
    spec = {**SPEC, "name": "lbdd-cap-mininet",
            "workload": {"kind": "bulk", "subscriber_counts": [3], "stream_mbps": 18},
            "routing": {"algorithms": ["lbdd"],
                        "params": {"heartbeat_s": 0.5, "timeout_s": 2.0}}}
    plan = compile_plan(parse_spec(spec))
    _, manifest = run_experiment(plan, tmp_path, phases=(bulk_phase(plan),))
    assert manifest["status"] == "ok"
    assert manifest["workload"]["stream_mbps_mechanism"].startswith("in-broker pacing")
    s = manifest["summaries"]["lbdd"]
    assert s["complete"] and s["checksums_ok"] and s["contribution"]["pc1"] == 1.0
    (row,) = s["by_subscribers"]
    assert 45 <= row["publisher_nic_mean_pct"] <= 62, row
    assert 15 <= row["rate_mbps_mean"] <= 18.5, row
