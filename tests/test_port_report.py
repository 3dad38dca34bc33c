"""The switch-side figure: utilization from the controller's cumulative port counters."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import fig_ports, port_utilization


def _row(t: float, port: int, rx: int, tx: int) -> dict:
    return {"t_wall": 1000.0 + t, "t_mono": t, "dpid": "0000000000000001", "switch": "s1",
            "port": port, "port_name": f"s1-eth{port}", "rx_bytes": rx, "tx_bytes": tx}


def test_rates_are_differences_of_cumulative_counters() -> None:
    rows = [_row(0, 1, 0, 0), _row(1, 1, 1_250_000, 0), _row(2, 1, 2_500_000, 125_000),
            _row(0, 2, 10, 10), _row(1, 2, 5, 20)]  # port 2's counter went back: dropped
    u = port_utilization(pd.DataFrame(rows))
    p1 = u[u["port_name"] == "s1-eth1"]
    assert p1["rx_mbps"].tolist() == pytest.approx([10.0, 10.0])
    assert p1["tx_mbps"].tolist() == pytest.approx([0.0, 1.0])
    assert u[u["port_name"] == "s1-eth2"].empty


def test_figure_only_when_the_controller_logged(tmp_path: Path) -> None:
    assert fig_ports(tmp_path, pd.DataFrame()) is None
    (tmp_path / "controller").mkdir()
    lines = [_row(t, 1, t * 1_000_000, 0) for t in range(4)]
    (tmp_path / "controller" / "port_stats.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines))
    fig = fig_ports(tmp_path, pd.DataFrame())
    assert fig is not None
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([8.0, 8.0, 8.0])
    # Beside the broker figures: time measured from the throughput metrics' first bin.
    ts = pd.DataFrame({"t_bin_s": [999.0, 1003.0], "algorithm": ["flood", "flood"]})
    (line,) = fig_ports(tmp_path, ts).axes[0].get_lines()
    assert list(line.get_xdata()) == pytest.approx([2.0, 3.0, 4.0])
