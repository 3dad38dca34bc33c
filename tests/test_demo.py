"""`pubsublab demo`, as `sudo make demo` runs it: SNR and then IDR on a small SCOT in
Mininet with one iLink throttled under a high-rate publisher's burst. The run folder's
manifest carries real fidelity measurements; both algorithms deliver exactly the oracle's
set once; IDR puts fewer notifications on the throttled link than SNR (counted in the
brokers' send records) and its delays are lower; the printed table says so. Then the
analysis: the demo ends with the verdict, the run's fidelity, the path of report.html
(which opens with the same verdict, in a box green only if the fidelity held, and its
figure) and the lab to read next; progress lines with the time left
come on standard error for each algorithm and each stage of the analysis."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parent.parent


def test_demo_throttled_ilink_idr_avoids_it_and_delivers_exactly_once(tmp_path: Path) -> None:
    # A relative --out, as a user types it: paths handed to host processes must still work.
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "demo", "--out", "myruns"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    # The table a user reads: one row per algorithm, then the run folder.
    lines = res.stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("algorithm"))
    header, snr, idr = lines[top:top + 3]
    (folder,) = [line for line in lines if line.startswith("run folder: ")]
    assert header.split()[:6] == ["algorithm", "delivered", "expected", "lost", "dup", "IMs"]
    assert snr.split()[0] == "snr" and idr.split()[0] == "idr"
    for row in (snr, idr):
        delivered, expected, lost, dup = (int(x) for x in row.split()[1:5])
        assert delivered == expected and lost == dup == 0
    run_dir = Path(folder.removeprefix("run folder: "))
    assert run_dir.parent == tmp_path / "myruns"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok"
    assert manifest["seed"] == 1 and manifest["scale"] == 1.0
    assert manifest["git"]["commit"]
    assert manifest["probe"]["mechanisms"]["delay_loss"] in ("netem", "in-broker")
    links = manifest["fidelity"]["links"]
    assert len(links) == 3
    for r in links:  # measured before the throttle: every link at its configured rate
        assert r["configured_mbps"] == 10 and 8.0 < r["achieved_mbps"] < 11.0, r
    assert manifest["fidelity"]["cpu_idle"]["per_second_pct"], "idle CPU was not sampled"
    # which of the run's processes used the CPU: 9 brokers and 9 client groups per
    # algorithm, and a capture per host
    by_process = manifest["fidelity"]["cpu_idle"]["by_process"]
    assert by_process["broker"]["processes"] == by_process["clients"]["processes"] == 18
    assert by_process["broker"]["cpu_s"] > 0 and "tcpdump" in by_process
    for row in manifest["links"]:
        assert row["mechanism"]["bw_mbps"] == "htb"
        assert row["mechanism"]["delay_ms"] == manifest["probe"]["mechanisms"]["delay_loss"]

    s = {a: json.loads((run_dir / a / "summary.json").read_text()) for a in ("snr", "idr")}
    assert s["snr"]["expected_deliveries"] == s["idr"]["expected_deliveries"] > 1000
    for summary in s.values():
        assert summary["missing"] == 0 and summary["duplicates"] == 0
        assert summary["unexpected"] == 0 and summary["client_failures"] == {}
        (change,) = summary["link_schedule"]
        assert "error" not in change and abs(change["applied_at_s"] - 2.0) < 0.5
        # 5 ms per overlay hop is configured: no notification can beat one hop.
        assert summary["delay_ms"]["notification"]["max"] >= 5.0
    on_link = {a: s[a]["scheduled_link_notifications"]["b0>b1"] for a in s}
    # SNR sends every burst notification for cluster 1 over b0-b1 (1,200 of them).
    assert on_link["snr"] >= 1200
    assert on_link["idr"] < 0.9 * on_link["snr"], on_link
    idr_ims = s["idr"]["ims_by_type"]
    assert idr_ims.get("CIV_NOTIFY", 0) > 0 and "CIV_NOTIFY" not in s["snr"]["ims_by_type"]
    p95 = {a: s[a]["delay_ms"]["notification"]["p95"] for a in s}
    assert p95["idr"] < p95["snr"], p95

    # The demo's last lines: the verdict, the fidelity, the wire check, the report, the
    # next lab.
    verdict, fidelity, wire, report, nxt = lines[-5:]
    assert verdict.startswith("IDR routed around the throttled link: "
                              f"{on_link['idr']:,} notification copies on b0→b1 under IDR "
                              f"against {on_link['snr']:,} under SNR"), verdict
    kept = fidelity.startswith("fidelity ok: CPU idle at or above 35 % in all ")
    assert kept or fidelity.startswith("fidelity FAILED: CPU idle "), fidelity
    assert kept == (manifest["fidelity"]["cpu_idle"]["ok"]
                    and all(r["within_10pct"] for r in links))
    assert f"\n{fidelity}\n" in res.stdout.split("\nrun folder: ")[1]  # and after the table
    assert wire == "wire and logs: agree"
    assert report == f"report: {run_dir / 'report.html'}"
    lab = nxt.removeprefix("next: ").split()[0]
    assert lab.startswith("labs/") and (REPO / lab).is_file(), nxt
    page = (run_dir / "report.html").read_text()
    # The page opens with the same verdict, green only if the fidelity held, and its
    # figure, before anything else.
    first = page.index("<h2>")
    box = ("<div class='box ok'>IDR routed around" if kept else
           "<div class='box unfit'><p class='fid'><b>fidelity FAILED: ")
    assert page[first:].startswith("<h2>SNR against IDR on the throttled link</h2>" + box)
    assert page.index("<img alt='SNR against IDR' src='data:image/png;base64,") < page.index(
        "Wire and logs agree")

    # Progress with the time left: each algorithm of the run, each stage of the analysis.
    left = re.compile(r"\((\d) of (\d)[^;]*; [\d.]+ (?:s|min) so far, about [\d.]+ (?:s|min) "
                      r"left\)$")
    run_lines = [m.groups() for ln in res.stderr.splitlines()
                 if ln.startswith("[pubsublab] run demo: ") and (m := left.search(ln))]
    assert ("1", "2") in run_lines and ("2", "2") in run_lines, res.stderr[-3000:]
    stages = [ln.split(": ", 1)[1].split(" (")[0] for ln in res.stderr.splitlines()
              if ln.startswith(f"[analyze] {run_dir.name}: ") and " so far, " in ln]
    assert stages == ["packets", "wire frames", "logs", "tables", "report"], stages
