"""Throttling a live overlay link by hand changes the rate a TCP flow achieves; bad input
is refused in one line before anything changes; a throttle during a run is recorded in
its folder and undone before the next algorithm."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_broker import wait_for

from experiments.emulation.doctor import probe
from experiments.emulation.fidelity import iperf_pair
from experiments.emulation.network import Emulation
from experiments.emulation.throttle import link_interfaces
from nodes.emulated.broker import read_status
from topologies.links import LinkParams
from topologies.registry import build_graph

pytestmark = pytest.mark.root


def _throttle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", "throttle", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_throttle_cli_changes_the_measured_rate() -> None:
    g = build_graph("scot", {"tree": "a-b", "m": 2, "mode": "overlay"}, LinkParams(bw_mbps=50))
    emu = Emulation(g, switch="bridge", probe=probe(), log=lambda _m: None)
    try:
        emu.start()
        before = iperf_pair(emu.net, g, "a0", "a1", duration_s=2)["achieved_mbps"]
        res = _throttle("a0", "a1", "--bw-mbps", "5", "--json")
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout.splitlines()[-1])["bw_mbps"] == 5
        after = iperf_pair(emu.net, g, "a0", "a1", duration_s=2)["achieved_mbps"]
        other = iperf_pair(emu.net, g, "a0", "b0", duration_s=2)["achieved_mbps"]
        missing = _throttle("a0", "b1", "--bw-mbps", "5")  # no link between them
    finally:
        emu.stop()
    assert 45 <= before <= 55
    assert 4.5 <= after <= 5.5
    assert 45 <= other <= 55, "only the named link may change"
    assert missing.returncode == 2 and "share no host-to-host link" in missing.stderr


@pytest.mark.parametrize(("args", "says"), [
    (("b0", "b0", "--bw-mbps", "5"), "b0 b0: the same broker twice"),
    (("a0", "a1", "--bw-mbps", "1e-9"), "--bw-mbps: bad value 1e-09; allowed: 0.001 to "
                                       "100000 Mbit/s"),
    (("a0", "a1", "--bw-mbps", "nan"), "--bw-mbps: bad value nan"),
    (("a0", "a1", "--bw-mbps", "2e5"), "--bw-mbps: bad value 200000"),
])
def test_throttle_refuses_bad_input_in_one_line(args: tuple[str, ...], says: str) -> None:
    res = _throttle(*args)
    assert res.returncode == 2
    assert res.stderr.startswith(f"pubsublab: error: {says}") and res.stderr.count("\n") == 1


def _rate(a: str, b: str) -> str:
    """The HTB rate of a's end of the link a-b, as tc prints it (e.g. 20Mbit)."""
    (pid, intf), _ = link_interfaces(a, b)
    out = subprocess.run(["mnexec", "-a", str(pid), "tc", "class", "show", "dev", intf],
                         capture_output=True, text=True, check=True).stdout
    words = out.split()
    return words[words.index("rate") + 1]


def test_a_throttle_during_a_run_is_recorded_and_undone(tmp_path: Path) -> None:
    spec = tmp_path / "manual.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "manual",
        "topology": {"name": "scot", "params": {"tree": "a-b", "m": 2, "mode": "overlay"}},
        "links": {"bw_mbps": 20, "delay_ms": 2}, "seed": 3, "fidelity": {"links": 0},
        "capture": {"enabled": False}, "routing": {"algorithms": ["flood", "snr"]},
        "workload": {"n_publishers": 2, "n_subscribers": 6, "pubs_per_publisher": 20,
                     "publish_rate_hz": 10, "selectivity": 0.3}}))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "run", str(spec),
                             "--out", str(runs), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (config,) = wait_for(lambda: list(runs.glob("*/flood/config/b0.clients.json")), 60,
                             "flood's clients to start")
        t0_wall = json.loads(config.read_text())["common"]["start_at_wall"]
        time.sleep(max(0.0, t0_wall + 1.0 - time.time()))  # 1 s into the workload
        res = _throttle("a0", "a1", "--bw-mbps", "0.5", "--json")
        assert res.returncode == 0, res.stderr
        throttled = json.loads(res.stdout.splitlines()[-1])
        assert _rate("a0", "a1") == "500Kbit"
        snr = wait_for(lambda: list(runs.glob("*/snr")), 60, "the second algorithm")[0]
        wait_for(lambda: (read_status(snr, "a0") or {}).get("state") == "running", 30,
                  "snr's brokers")
        rate_after = _rate("a0", "a1")
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert rate_after == "20Mbit", "the throttle carried into the next algorithm"
    run_dir = Path(json.loads(stdout.strip().splitlines()[-1])["run_dir"])
    assert throttled["recorded_in"] == str(run_dir / "throttles.jsonl")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (recorded,) = manifest["manual_throttles"]
    assert (recorded["a"], recorded["b"], recorded["bw_mbps"]) == ("a0", "a1", 0.5)
    (during,) = manifest["summaries"]["flood"]["manual_throttles"]
    assert during["t_wall"] == recorded["t_wall"] and 1.0 <= during["t_s"] <= 1.5
    assert manifest["summaries"]["snr"]["manual_throttles"] == []
