"""`pubsublab demo`, as `sudo make demo` runs it: a run folder whose manifest carries real
fidelity measurements and whose brokers delivered exactly the oracle's set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("root")


def test_demo_leaves_a_complete_run_folder(tmp_path: Path) -> None:
    # A relative --out, as a user types it: paths handed to host processes must still work.
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "demo", "--json",
                          "--out", "myruns"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.strip().splitlines()[-1])
    run_dir = Path(result["run_dir"])
    assert run_dir.parent == tmp_path / "myruns"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert manifest["seed"] == 1 and manifest["scale"] == 1.0
    assert manifest["git"]["commit"]
    assert manifest["probe"]["mechanisms"]["delay_loss"] in ("netem", "in-broker")
    links = manifest["fidelity"]["links"]
    assert len(links) == 3
    for r in links:
        assert r["configured_mbps"] == 10 and 8.0 < r["achieved_mbps"] < 11.0, r
    assert manifest["fidelity"]["cpu_idle"]["per_second_pct"], "idle CPU was not sampled"
    for row in manifest["links"]:
        assert row["mechanism"]["bw_mbps"] == "htb"
        assert row["mechanism"]["delay_ms"] == manifest["probe"]["mechanisms"]["delay_loss"]
    summary = json.loads((run_dir / "flood" / "summary.json").read_text())
    assert summary["expected_deliveries"] > 0
    assert summary["missing"] == 0 and summary["duplicates"] == 0
    assert summary["client_failures"] == {}
    # 5 ms per overlay hop is configured: no notification can beat one hop.
    assert summary["delay_ms"]["notification"]["max"] >= 5.0
