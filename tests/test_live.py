"""`pubsublab watch`'s reading of logs while they grow, and its figures.

The incremental reader is checked against reading the finished file at once: whatever
the sizes of the appends (lines cut anywhere, in the middle of a UTF-8 character too)
and of the reads, it returns each wanted record exactly once, in order, and never a half
line. The figures of a whole simulated run, fed record by record, are checked against
the run's own summary.json and against a brute-force count of its logs; the overloaded
verdict against the LST rule written out by hand.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from analysis.live import LogTail, replay_records, wanted
from analysis.live_state import LiveState
from analysis.watch import RunInfo, expected_of, find_live_run
from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec
from nodes.logs import Ev, JsonlLog, iter_jsonl
from nodes.runfolder import log_path, read_summary, write_manifest


def _log_bytes(tmp_path: Path, n: int) -> bytes:
    """A broker log of ``n`` records written by the real writer: every kind the view
    reads and some it skips, with non-ASCII text in a field."""
    path = tmp_path / "whole.jsonl"
    log = JsonlLog(path, "b0")
    for i in range(n):
        t = 1000.0 + i / 100
        match i % 5:
            case 0:
                log.write(Ev.QUEUE, t, t, link="b1", count_in=i, count_out=1, queue_len=i % 17,
                          flushed=0, window_ms=50.0)
            case 1:
                log.write(Ev.SEND, t, t, link="b1", type="PUBLISH", origin="p0", msg_id=i,
                          hops=1, size=200)
            case 2:
                log.write(Ev.RECORD, t, t, kind="idr", case="i", avoided=["b1"],
                          carrier="b2", civ=[1], origin="hrp", msg_id=i, note="é→ü")
            case 3:
                log.write(Ev.DELIVER, t, t, link="s0", type="PUBLISH", origin="p0",
                          msg_id=i, hops=1, size=200, t_pub=t - 0.01)
            case _:
                log.write(Ev.RECV, t, t, link="p0", type="PUBLISH", origin="p0", msg_id=i,
                          hops=0, size=200)
    log.close()
    return path.read_bytes()


@pytest.mark.parametrize("seed", range(5))
def test_a_growing_log_is_read_once_whatever_the_cuts(tmp_path: Path, seed: int) -> None:
    whole = _log_bytes(tmp_path, 300)
    oracle = [json.loads(line) for line in whole.splitlines() if wanted(line)]
    assert len(oracle) == 240  # sends are skipped, every other kind is read
    rng = random.Random(seed)
    growing = tmp_path / "growing.jsonl"
    tail = LogTail(growing)
    assert tail.read() == [], "a log not created yet has no records"
    got: list[dict] = []
    pos = 0
    while pos < len(whole):
        step = rng.randint(1, 400)  # cuts anywhere: mid-line, mid-character
        with open(growing, "ab") as fh:
            fh.write(whole[pos:pos + step])
        pos += step
        got += tail.read(limit_bytes=rng.randint(1, 600))
    got += tail.read()  # what the small reads left
    assert got == oracle
    assert tail.bad_lines == 0


def test_a_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "b0.jsonl"
    first = b'{"ev":"queue","link":"b1","node":"b0","queue_len":3,"t_wall":1.0}\n'
    second = b'{"ev":"queue","link":"b1","node":"b0","queue_len":12,"t_wall":1.05}\n'
    path.write_bytes(first + second[:20])
    tail = LogTail(path)
    assert [r["queue_len"] for r in tail.read()] == [3]
    assert tail.read() == [], "half a line is not a record"
    with open(path, "ab") as fh:
        fh.write(second[20:] + b'{"ev":"queue",broken\n' + b'{"ev":"queue","no":"t_wall"}\n')
    assert [r["queue_len"] for r in tail.read()] == [12]
    assert tail.bad_lines == 2, "damaged lines are counted, not returned"


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo spec (SNR then IDR, the throttled iLink b0-b1) through the simulator."""
    out = tmp_path_factory.mktemp("runs")
    run_dir, _ = run_simulation(compile_plan(load_spec("demo", [])), out)
    return run_dir


def _replayed(run_dir: Path, algorithm: str) -> LiveState:
    info = RunInfo.read(run_dir)
    theta, ce_min = info.lst[algorithm]
    state = LiveState(info.edges, theta=theta, ce_min=ce_min, expected=expected_of(run_dir))
    for rec in replay_records([log_path(run_dir / algorithm, b) for b in info.brokers]):
        state.take(rec)
    return state


@pytest.mark.parametrize("algorithm", ["snr", "idr"])
def test_replayed_figures_agree_with_the_summary_and_the_logs(sim_run: Path,
                                                              algorithm: str) -> None:
    state = _replayed(sim_run, algorithm)
    summary = read_summary(sim_run / algorithm)
    assert summary is not None
    snap = state.snapshot(now=state.t_first + 1e6)  # long after the end: nothing recent
    assert snap.expected_total == summary["expected_deliveries"] > 7000
    assert snap.delivered == summary["delivered"]
    assert snap.duplicates == summary["duplicates"] == 0
    assert snap.expected_so_far == snap.expected_total, "every publication was published"
    brokers = RunInfo.read(sim_run).brokers
    cases: dict[str, int] = {}
    for b in brokers:
        for r in iter_jsonl(log_path(sim_run / algorithm, b), Ev.RECORD):
            if r.get("kind") == "idr":
                cases[r["case"]] = cases.get(r["case"], 0) + 1
    assert snap.idr_total == cases
    assert (sum(cases.values()) > 0) == (algorithm == "idr")
    assert snap.delay_ms is None and snap.idr_recent == {}, "nothing in the last 5 s"


def test_the_throttled_link_is_overloaded_by_the_lst_rule(sim_run: Path) -> None:
    """Every snapshot of SNR's run, one per 50 ms window of b0's log, against the rule
    written out: overloaded when a window of the last second had queue > 10 and
    in/out >= 1 (out 0 with something in or queued counts as stalled)."""
    info = RunInfo.read(sim_run)
    state = LiveState(info.edges, theta=10, ce_min=1.0)
    windows: list[tuple[float, bool]] = []
    seen_overloaded = seen_free_after = False
    for rec in replay_records([log_path(sim_run / "snr", b) for b in info.brokers]):
        state.take(rec)
        if rec["ev"] == "queue" and rec["node"] == "b0" and rec["link"] == "b1":
            out, q = rec["count_out"], rec["queue_len"]
            stalled = out == 0 and (rec["count_in"] > 0 or q > 0)
            windows.append((rec["t_wall"], q > 10 and (stalled or (
                out > 0 and rec["count_in"] / out >= 1.0))))
            now = rec["t_wall"]
            expect = any(over for t, over in windows if t >= now - 1.0)
            (row,) = [r for r in state.snapshot(now).links
                      if (r.broker, r.neighbour) == ("b0", "b1")]
            assert row.overloaded == expect, (now, windows[-3:])
            assert row.queue_len == q
            seen_overloaded |= expect
            seen_free_after |= seen_overloaded and not expect
    assert seen_overloaded and seen_free_after, "the burst overloads b0-b1, then it drains"


def test_the_run_in_progress_is_the_newest_running_one(tmp_path: Path) -> None:
    for name, status in (("20260101-100000-demo", "running"), ("20260101-110000-demo", "ok"),
                         ("20260101-090000-demo", "running")):
        (tmp_path / name).mkdir()
        write_manifest(tmp_path / name, {"status": status})
    (tmp_path / "20260101-120000-demo-sim").mkdir()  # a simulation under way: no manifest
    assert find_live_run(tmp_path) == tmp_path / "20260101-100000-demo"
    assert find_live_run(tmp_path / "missing") is None


def test_watch_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.cli import main

    assert main(["watch", "--runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"pubsublab: error: no run in progress under {tmp_path}/ "
                                       "(its manifest would say running); give a RUN_DIR to "
                                       "replay a finished run\n")
    assert main(["watch", str(tmp_path), "--speed", "0"]) == 2
    assert capsys.readouterr().err == "pubsublab: error: --speed 0: must be above 0\n"
    assert main(["watch", str(tmp_path), "--speed", "inf"]) == 2
    assert capsys.readouterr().err == ("pubsublab: error: --speed inf: must be finite (a "
                                       "replay shows every window)\n")
    assert main(["watch", str(tmp_path)]) == 2
    assert "no run manifest there" in capsys.readouterr().err


def test_a_tall_overlay_shows_the_overloaded_and_busiest_links(sim_run: Path) -> None:
    """In a terminal too short for every link, the overloaded link and the longest queues
    stay on the screen, in name order, and the rest are counted."""
    from rich.console import Console

    from analysis.live_view import Frame, render

    info = RunInfo.read(sim_run)
    now = _replayed(sim_run, "snr").t_first + 3.0  # the burst: b0 -> b1 overloaded under SNR
    state = LiveState(info.edges, theta=10, ce_min=1.0)
    for rec in replay_records([log_path(sim_run / "snr", b) for b in info.brokers]):
        if rec["t_wall"] > now:
            break
        state.take(rec)
    snap = state.snapshot(now)
    (throttled,) = [r for r in snap.links if r.overloaded]
    assert (throttled.broker, throttled.neighbour) == ("b0", "b1")
    console = Console(width=160, height=14, record=True, file=io.StringIO())
    frame = Frame(run=sim_run.name, algorithm="snr", position="(1 of 2)", mode="replay x1",
                  runtime="simulated", theta=10)
    console.print(render(frame, snap, None, height=14, window_s=5.0, hold_s=1.0))
    text = console.export_text()
    rows = [line.split("│")[1].strip() for line in text.splitlines()
            if line.startswith("│") and " -> " in line.split("│")[1]]
    assert len(rows) == 14 - 8 and rows == sorted(rows)
    assert "b0 -> b1" in rows
    assert f"{len(snap.links) - len(rows)} quieter links not shown" in text


def test_the_cpu_panel_says_which_seconds_below_fell_in_a_workload() -> None:
    from rich.console import Console

    from analysis.live_state import CpuIdle
    from analysis.live_view import _cpu

    def shown(cpu: CpuIdle) -> str:
        out = io.StringIO()
        Console(width=100, file=out).print(_cpu(cpu, ""))
        return out.getvalue()

    # Processes starting (3 % idle at t = 1), the workload from t = 1.5 (20 % at t = 3).
    samples = [{"t_wall": 1.0, "idle_pct": 3.0}, {"t_wall": 2.0, "idle_pct": 90.0},
               {"t_wall": 3.0, "idle_pct": 20.0}]
    live, done = CpuIdle(35.0), CpuIdle(35.0, [(1.5, 3.0)])
    for rec in samples:
        live.take(rec)
        done.take(rec)
    assert live.judged_below is None and done.judged_below == 1
    assert "below the criterion in 2 of 3 s so far " in shown(live)
    assert "below the criterion in 2 of 3 s so far (1 in a workload)" in shown(done)
    assert "not trustworthy" in shown(done)
    starting_only = CpuIdle(35.0, [(1.5, 2.5)])
    for rec in samples[:2]:
        starting_only.take(rec)
    assert "(0 in a workload)" in shown(starting_only)
    assert "not trustworthy" not in shown(starting_only)
