"""Throttling a live overlay link by hand changes the rate a TCP flow achieves."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from experiments.emulation.doctor import probe
from experiments.emulation.fidelity import iperf_pair
from experiments.emulation.network import Emulation
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
