"""CLI conventions: --json puts one JSON object on the last line of standard output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _json(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_topo_show_paper_scot_counts() -> None:
    d = _json("topo", "show", "scot-paper", "--json")
    assert d["counts"]["brokers"] == 70
    assert (d["counts"]["aLinks"], d["counts"]["iLinks"]) == (65, 140)
    assert (d["counts"]["inner"], d["counts"]["edge"]) == (20, 50)
    assert {b["kind"] for b in d["brokers"]} == {"inner", "edge"}


def test_doctor_json_names_mechanisms() -> None:
    d = _json("doctor", "--json")
    assert {c["name"] for c in d["checks"]} >= {"root", "mininet", "openvswitch", "netem",
                                                 "htb", "java"}
    assert d["mechanisms"]["delay_loss"] in ("netem", "in-broker")
    for c in d["checks"]:
        assert c["ok"] or c["fix"], f"{c['name']} is missing without saying what to do"


def test_sim_json_maps_algorithm_to_summary(tmp_path: Path) -> None:
    d = _json("sim", "flood-demo", "--out", str(tmp_path), "--json",
              "--set", "workload={n_publishers: 2, n_subscribers: 8, selectivity: 0.1}")
    s = d["flood"]
    assert s["runtime"] == "simulated" and s["algorithm"] == "flood"
    assert s["missing"] == 0 and s["duplicates"] == 0 and s["delivered"] > 0
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "flood" / "summary.json").read_text()) == s


def test_compare_puts_runs_side_by_side(tmp_path: Path) -> None:
    for seed in (1, 2):
        _json("sim", "flood-demo", "--out", str(tmp_path), "--json", "--set", f"seed={seed}")
    runs = sorted(str(p) for p in tmp_path.iterdir())
    d = _json("compare", *runs, "--json")
    assert len(d) == 2 and all(label.endswith("/flood") for label in d)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "compare", *runs],
                         capture_output=True, text=True, timeout=60, check=False)
    header, *rows = res.stdout.splitlines()
    assert all(Path(r).name in header for r in runs)
    assert any(r.startswith("delivered") for r in rows)
    assert any(r.startswith("delay_ms.notification.p95") for r in rows)


def test_sweep_draws_line_figures_over_the_swept_value(tmp_path: Path) -> None:
    d = _json("sim", "flood-demo", "--out", str(tmp_path), "--json",
              "--sweep", "workload.n_subscribers=4,8")
    assert sorted(d) == ["4", "8"]
    (sweep,) = tmp_path.iterdir()
    assert (sweep / "fig-end-to-end.png").stat().st_size > 10_000
    assert json.loads((sweep / "sweep.json").read_text())["values"] == ["4", "8"]
