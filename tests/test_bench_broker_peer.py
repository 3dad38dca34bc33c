"""bench broker --peer mosquitto on loopback and on Mininet's three hosts: a tiny run
delivers everything on both sides and prints the ratios; a missing peer is one line
naming the package to install."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from experiments.bench import broker_peer
from experiments.cli import main


def _tiny_run(out: Path, on: str) -> dict[str, Any]:
    problem = broker_peer.missing_peer()
    if problem:
        pytest.fail(problem)
    return broker_peer.run_peer([500], 1.0, (1,), 1, out, on=on)


def test_tiny_run_delivers_everything_and_gives_ratios(tmp_path: Path) -> None:
    result = _tiny_run(tmp_path, "loopback")
    _assert_complete(result, tmp_path)


@pytest.mark.root
def test_tiny_run_on_three_mininet_hosts_delivers_everything(tmp_path: Path) -> None:
    result = _tiny_run(tmp_path, "mininet")
    assert result["on"] == "mininet" and "Mininet" in result["method"]
    _assert_complete(result, tmp_path)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True).stdout
    assert "pc2-eth0" not in links and "s1-eth" not in links, "the network is torn down"


def _assert_complete(result: dict[str, Any], out: Path) -> None:
    assert {s["broker"] for s in result["steps"]} == {"ours", "mosquitto"}
    for s in result["steps"]:
        assert s["sent"] == 500 and s["delivered"] == s["sent"], s
        assert s["cpu_per_msg_us"] > 0, s
    (c,) = result["comparison"]
    assert c["zero_loss_ratio"] is not None and c["cpu_ratio"][500] is not None
    text = broker_peer.format_peer_result(result)
    assert "ratio" in text and "QoS 0" in text and "content-based" in text
    assert (out / "result.json").exists()


def test_missing_peer_is_one_line_naming_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(broker_peer.PEERS, "mosquitto",
                        (str(tmp_path / "no-such-mosquitto"), "mosquitto"))
    assert "install the Debian package mosquitto" in (broker_peer.missing_peer() or "")
    assert main(["bench", "broker", "--peer", "mosquitto"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "no-such-mosquitto not found" in lines[0] and "apt-get install mosquitto" in lines[0]
