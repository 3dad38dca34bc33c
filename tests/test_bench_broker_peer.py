"""bench broker --peer mosquitto on loopback: a tiny run delivers everything on both sides
and prints the ratios; a missing peer is one line naming the package to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.bench import broker_peer
from experiments.cli import main


@pytest.mark.skipif(broker_peer.missing_peer() is not None, reason="mosquitto not installed")
def test_tiny_run_delivers_everything_and_gives_ratios(tmp_path: Path) -> None:
    result = broker_peer.run_peer([500], 1.0, (1,), 1, tmp_path)
    assert {s["broker"] for s in result["steps"]} == {"ours", "mosquitto"}
    for s in result["steps"]:
        assert s["sent"] == 500 and s["delivered"] == s["sent"], s
        assert s["cpu_per_msg_us"] > 0, s
    (c,) = result["comparison"]
    assert c["zero_loss_ratio"] is not None and c["cpu_ratio"][500] is not None
    text = broker_peer.format_peer_result(result)
    assert "ratio" in text and "QoS 0" in text and "content-based" in text
    assert (tmp_path / "result.json").exists()


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
