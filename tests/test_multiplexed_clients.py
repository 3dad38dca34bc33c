"""Client groups: one ``nodes.emulated.client`` process runs several clients, each with its own
connection, HELLO name, log and exit status; the emulated runtime starts one such process
per broker host, and the brokers time their cores' matching (summary ``delay_ms.matching``).

The first tests run processes on loopback addresses (no root); the last one is a real
Mininet run of the 3 x 3 SCOT."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from scot_cases import AGREE_SPEC, pairs
from test_broker import NOTIFICATION, REPO, SECRET, SUBSCRIPTION, free_port

from experiments.plan import compile_plan
from experiments.runs.emulated import broker_phase
from experiments.runs.testbed import run_experiment
from experiments.spec import parse_spec
from nodes.emulated.broker import wait_until_ready
from nodes.emulated.client import read_group_status
from nodes.metrics.log_summary import client_receipts
from nodes.workloads.oracle import expected_deliveries


def run_client_process(config: dict[str, Any], path: Path, timeout_s: float = 20.0
                       ) -> subprocess.CompletedProcess[str]:
    path.write_text(json.dumps(config))
    return subprocess.run([sys.executable, "-m", "nodes.emulated.client", "--config", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout_s)


def records(path: Path, ev: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["ev"] == ev]


@pytest.mark.parametrize(("change", "named"), [
    ({"clients": [{"client": "a", "role": "subscriber", "subscribe": SUBSCRIPTION},
                  {"client": "b", "role": "subscriber", "subscrbe": SUBSCRIPTION}]},
     "client b: "),
    ({"clients": [{"client": "a", "role": "subscriber", "subscribe": SUBSCRIPTION}] * 2},
     "client a: named twice"),
    ({"statusfile": "x.json"}, "unknown keys ['statusfile']"),
    ({"clients": []}, "non-empty list"),
])
def test_a_bad_group_config_exits_2_naming_the_culprit(tmp_path: Path, change: dict[str, Any],
                                                       named: str) -> None:
    group = {"common": {"broker": "b1", "broker_addr": ["127.0.0.1", 1],
                        "log_dir": str(tmp_path), "secret": SECRET, "duration_s": 1.0},
             "clients": [{"client": "a", "role": "subscriber", "subscribe": SUBSCRIPTION}],
             "status_file": str(tmp_path / "group.status.json"), **change}
    proc = run_client_process(group, tmp_path / "group.json")
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr
    assert not list(tmp_path.glob("*.jsonl")), "no client of a rejected group may start"
    assert read_group_status(tmp_path / "group.status.json") is None


def test_each_client_of_a_group_has_its_own_connection_log_and_status(tmp_path: Path) -> None:
    """Two clients reach a live broker and get the notification; a third is pointed at a
    dead address: it alone fails (1), and the process says so (1)."""
    host = "127.0.0.21"
    addr = [host, free_port(host)]
    broker_cfg = tmp_path / "b1.config.json"
    broker_cfg.write_text(json.dumps({
        "broker": "b1", "listen": addr, "neighbours": {}, "log_dir": str(tmp_path),
        "secret": SECRET, "core": {"name": "flood", "params": {"tree_neighbours": []}}}))
    with open(tmp_path / "b1.out", "wb") as out:
        broker = subprocess.Popen([sys.executable, "-m", "nodes.emulated.broker", "--config",
                                   str(broker_cfg)], cwd=REPO, stdout=out, stderr=out)
    try:
        assert not wait_until_ready(tmp_path, ["b1"], timeout_s=10)
        dead = ["127.0.0.22", free_port("127.0.0.22")]
        group = {
            "common": {"broker": "b1", "broker_addr": addr, "log_dir": str(tmp_path),
                       "secret": SECRET, "start_at_wall": time.time() + 0.5,
                       "duration_s": 1.5},
            "clients": [
                {"client": "s", "role": "subscriber", "subscribe": SUBSCRIPTION},
                {"client": "p", "role": "publisher", "publish": NOTIFICATION, "count": 3,
                 "rate_per_s": 10, "start_s": 0.3},
                {"client": "lost", "broker_addr": dead, "role": "subscriber",
                 "subscribe": SUBSCRIPTION},
            ],
            "status_file": str(tmp_path / "group.status.json"),
        }
        proc = run_client_process(group, tmp_path / "group.json")
    finally:
        broker.terminate()
        broker.wait(timeout=10)
    assert proc.returncode == 1, proc.stderr
    assert read_group_status(tmp_path / "group.status.json")["codes"] == {
        "lost": 1, "p": 0, "s": 0}
    for client in ("s", "p"):
        hellos = [r for r in records(tmp_path / f"{client}.jsonl", "send")
                  if r["type"] == "HELLO"]
        assert [r["origin"] for r in hellos] == [client]  # its own HELLO, its own log
    got = [r for r in records(tmp_path / "s.jsonl", "recv") if r["type"] == "PUBLISH"]
    assert [r["msg_id"] for r in got] == [1, 2, 3]
    ups = [r for r in records(tmp_path / "b1.jsonl", "link") if r["state"] == "up"]
    assert sorted(r["link"] for r in ups) == ["p", "s"]
    assert len({r["peer"] for r in ups}) == 2  # two connections, not one shared
    # The broker timed its core for each publication it took from the client.
    matched = [r for r in records(tmp_path / "b1.jsonl", "recv") if r["type"] == "PUBLISH"]
    assert len(matched) == 3 and all(r["matching_ms"] > 0 for r in matched)
    assert records(tmp_path / "lost.jsonl", "error")[-1]["stage"] == "dial"


SPEC = {**AGREE_SPEC, "name": "multiplexed",
        "workload": {**AGREE_SPEC["workload"], "advertise_spread_s": 0.3},
        "routing": {"algorithms": ["snr"]}}


@pytest.mark.root
def test_grouped_clients_on_mininet_deliver_the_oracle_set(tmp_path: Path) -> None:
    plan = compile_plan(parse_spec(SPEC))
    workload = plan.workload
    assert workload is not None
    expected = pairs(expected_deliveries(workload))
    assert len(expected) > 50, "the workload should exercise many deliveries"
    by_broker: dict[str, list[str]] = {}
    for client, broker in sorted(workload.clients.items()):
        by_broker.setdefault(broker, []).append(client)
    assert max(map(len, by_broker.values())) >= 2, "some broker host should run a group"

    run_dir, _ = run_experiment(plan, tmp_path, phases=(broker_phase(plan),))
    out = run_dir / "snr"

    # One process per broker host with clients, running exactly that broker's clients.
    groups = {p.name.removesuffix(".clients.json"): json.loads(p.read_text())
              for p in (out / "config").glob("*.clients.json")}
    assert {b: sorted(e["client"] for e in g["clients"]) for b, g in groups.items()} == by_broker
    assert not [p for p in (out / "config").glob("*.json")
                if p.name.removesuffix(".json") in workload.clients], "no lone client process"
    for broker, clients in by_broker.items():
        status = read_group_status(out / f"{broker}.clients.status.json")
        assert status is not None and status["codes"] == dict.fromkeys(clients, 0), broker
        # The broker saw each client under its own name, on its own connection.
        ups = [r for r in records(out / f"{broker}.jsonl", "link")
               if r["role"] == "client" and r["state"] == "up"]
        assert sorted(r["link"] for r in ups) == clients, broker
        assert len({r["peer"] for r in ups}) == len(clients), broker

    assert pairs(client_receipts(out, workload)["deliveries"]) == expected  # each once
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["missing"], summary["duplicates"]) == (0, 0)
    assert summary["client_failures"] == {}
    matching = summary["delay_ms"]["matching"]
    assert matching is not None and 0 < matching["p50"] <= matching["p95"] <= matching["max"]
    assert 0 < matching["mean"] < 100.0  # milliseconds: a core matches in well under that
