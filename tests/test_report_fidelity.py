"""A run that failed its fidelity check says so where a reader looks first: in the report's
verdict box (opened in a real headless Chromium: the box is not the clean green, and its
first line gives the share of seconds under the CPU criterion), and in `pubsublab run`'s
closing lines and its --json.

The run folder is the demo simulated, its manifest given the fidelity record an emulated
run on a busy machine left (40 of 40 s below 35 % idle CPU, the issue's demo run), then
analysed with `pubsublab analyze` as a user runs it (Spark, local)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_reproduce import _browser

from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec

# Three sampled links at their 10 Mbit/s, as the demo measures them before the throttle.
LINKS = [{"a": a, "b": b, "configured_mbps": 10, "achieved_mbps": 9.6, "ratio": 0.96,
          "within_10pct": True} for a, b in (("a0", "a1"), ("b0", "b1"), ("b1", "c1"))]


def _fidelity(idle_pct: list[float], links: list[dict[str, Any]] = LINKS) -> dict[str, Any]:
    """A manifest's fidelity record as experiments.emulation.fidelity writes it."""
    below = sum(1 for x in idle_pct if x < 35.0)
    return {"links": links, "cpu_idle": {
        "criterion_min_idle_pct": 35.0, "per_second_pct": idle_pct,
        "mean_pct": round(sum(idle_pct) / len(idle_pct), 1), "min_pct": min(idle_pct),
        "seconds_below": below, "ok": below == 0}}


BUSY = _fidelity([12.0 + (i % 5) for i in range(40)])  # 40 of 40 s below 35 %
QUIET = _fidelity([80.0] * 40)


def _set_fidelity(run_dir: Path, fidelity: dict[str, Any]) -> None:
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "fidelity": fidelity}))


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The run folder, analysed (report.html written), and the analysis's --json."""
    run_dir, _ = run_simulation(compile_plan(load_spec("demo", [])),
                                tmp_path_factory.mktemp("runs"))
    _set_fidelity(run_dir, BUSY)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "analyze", str(run_dir),
                          "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir, json.loads(res.stdout.strip().splitlines()[-1])


def _first_box(page: Path) -> dict[str, Any]:
    """The report's first verdict box as Chromium draws it: class, colours, text, and its
    top on the page (px)."""
    # Chromium's singleton socket lives in its TMPDIR and must fit a socket path's 108
    # bytes, which pytest's per-test folders leave too little of.
    with tempfile.TemporaryDirectory(prefix="report-") as tmp:
        return _box_in(page, Path(tmp))


def _box_in(page: Path, tmp: Path) -> dict[str, Any]:
    driver = _browser(tmp)
    try:
        driver.get(page.as_uri())
        return driver.execute_script(
            "const b = document.querySelector('.box'), s = getComputedStyle(b);"
            "return {cls: b.className, background: s.backgroundColor, border: "
            "s.borderTopColor, text: b.innerText, top: b.getBoundingClientRect().top, "
            "heading: b.previousElementSibling.innerText}")
    finally:
        driver.quit()


def test_the_verdict_box_of_a_run_that_failed_fidelity_is_not_the_clean_one(
        busy_run: tuple[Path, dict[str, Any]]) -> None:
    from analysis.report import write_report

    run_dir, result = busy_run
    busy = _first_box(run_dir / "report.html")
    untrusted = "This run failed its fidelity check: its delays are not trustworthy"
    assert untrusted in (run_dir / "report.html").read_text()  # above the delays' table
    # The same run with its fidelity kept: the clean box, for the colours to differ from.
    _set_fidelity(run_dir, QUIET)
    clean = _first_box(write_report(run_dir, result))
    assert busy["heading"] == clean["heading"] == "SNR against IDR on the throttled link"
    assert clean["cls"] == "box ok"
    assert clean["text"].endswith("fidelity ok: CPU idle at or above 35 % in all 40 s "
                                  "sampled; 3 of 3 sampled links within 10 % of their rate")
    assert busy["cls"] != "box ok"
    assert (busy["background"], busy["border"]) != (clean["background"], clean["border"])
    assert busy["text"].startswith("fidelity FAILED: CPU idle below 35 % in 40 of 40 s "
                                   "(100 %, min 12 %); 3 of 3 sampled links within 10 % of "
                                   "their rate: emulated timing in this run is not "
                                   "trustworthy\n"), busy["text"]
    assert "IDR routed around the throttled link" in busy["text"]  # the verdict still there
    assert busy["top"] < 400, "on the first screen"
    assert untrusted not in (run_dir / "report.html").read_text()


def test_a_failed_link_check_colours_the_wire_box_and_names_the_link() -> None:
    """A run without the IDR verdict carries the fidelity in its wire-check box."""
    from analysis.fidelity_verdict import fidelity_verdict
    from analysis.report import _verdict

    off = [*LINKS[:2], {**LINKS[2], "achieved_mbps": 7.1, "ratio": 0.71,
                        "within_10pct": False}]
    agree = {"algorithms": {}, "wire_matches_logs": True, "wire_ims_by_type": {"PUBLISH": 9},
             "wire_check": "agree"}
    box = _verdict(agree, fidelity_verdict(_fidelity([80.0] * 10, off)))
    assert box.startswith("<div class='box unfit'><p class='fid'><b>fidelity FAILED: CPU "
                          "idle at or above 35 % in all 10 s sampled; 1 of 3 sampled links "
                          "outside 10 % of their rate (b1-c1 7.1 of 10 Mbit/s)"), box
    assert _verdict(agree, fidelity_verdict(QUIET)).startswith("<div class='box ok'>")


def test_run_closes_with_the_fidelity_and_puts_it_in_its_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`pubsublab run` as it ends after an emulated run on a busy machine (the runner
    stubbed: what it returns is the run folder and the manifest it wrote)."""
    import experiments.runs.testbed as testbed
    from experiments.cli import main

    run_dir = tmp_path / "20260101-120000-demo"

    def finished(plan: Any, out: Path, **_: Any) -> tuple[Path, dict[str, Any]]:
        return run_dir, {"status": "ok", "fidelity": BUSY, "timing": {"total_s": 80.0},
                         "faults": {"lossy": False}}

    monkeypatch.setattr(testbed, "run_experiment", finished)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main(["run", "demo", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [f"run folder: {run_dir}", "status: ok",
                          "fidelity FAILED: CPU idle below 35 % in 40 of 40 s (100 %, min "
                          "12 %); 3 of 3 sampled links within 10 % of their rate: emulated "
                          "timing in this run is not trustworthy"]
    assert main(["run", "demo", "--out", str(tmp_path), "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out.splitlines()[-1])["fidelity_verdict"]
    assert verdict["ok"] is False
    assert verdict["cpu_idle"] == {"criterion_min_idle_pct": 35.0, "seconds_below": 40,
                                   "seconds": 40, "share_below_pct": 100.0, "min_pct": 12.0,
                                   "ok": False, "judged": "every second"}
    assert verdict["links"] == {"checked": 3, "off": []}
