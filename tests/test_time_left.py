"""Long work says how far it is and about how long is left (:mod:`nodes.time_left`): the
estimate itself on a clock the test moves, then the lines a user reads on standard error
of a simulated run (per algorithm), a sweep (per point) and an LBDD simulation (per
round), and that every line arrives whole on a pipe, from threads logging at once too.
The emulated run's and the analysis' lines are checked on the demo (tests/test_demo.py);
reproduce's in tests/test_reproduce.py."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nodes import time_left
from nodes.time_left import TimeLeft, duration_text

LINE = re.compile(r"^\[pubsublab\] (?P<what>.+?): (?P<label>.+?) \((?P<i>\d+) of (?P<n>\d+)"
                  r"(?:, [^;]*)?; (?P<so_far>[\d.]+ (?:s|min)) so far, "
                  r"(?:about (?P<left>[\d.]+ (?:s|min)) left|time left not yet known)\)$")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The helper's clock, in seconds: the test sets ``clock[0]``."""
    now = [100.0]
    monkeypatch.setattr(time_left, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_a_resumed_step_paces_the_work_of_this_process_only(clock: list[float]) -> None:
    """A paused simulation goes on from 60 % in a new process: 10 s for the next 10 %
    leaves about 30 s, not the 60 % over 10 s an estimate from the start would take."""
    p = TimeLeft("simulating", [("meghdoot", 1.0)], lambda _: None, seconds=False)
    p.start()
    p.resumed(0.6)
    clock[0] += 10.0
    assert p.left_s(0.7) == pytest.approx(30.0)


def test_seconds_trust_the_plan_first_then_the_pace(clock: list[float]) -> None:
    lines: list[str] = []
    p = TimeLeft("run demo", [("snr", 10.0), ("idr", 30.0)], lines.append)
    p.start()
    assert lines[-1] == "run demo: snr (1 of 2; 0 s so far, about 40 s left)"
    clock[0] += 20.0  # snr took twice its estimate: the rest should too
    p.finish()
    p.start("9 brokers")
    assert lines[-1] == "run demo: idr (2 of 2, 9 brokers; 20 s so far, about 60 s left)"
    clock[0] += 30.0
    p.part(0.5)  # half of idr's 30 s in 30 s: still twice the plan
    assert lines[-1] == "run demo: idr (2 of 2, 50% done; 50 s so far, about 30 s left)"


def test_weights_name_no_time_until_something_is_done(clock: list[float]) -> None:
    lines: list[str] = []
    p = TimeLeft("sweep", [("n=4", 1.0), ("n=8", 1.0), ("n=16", 1.0)], lines.append,
                 seconds=False)
    p.start()
    assert lines[-1].endswith("(1 of 3; 0 s so far, time left not yet known)")
    clock[0] += 6.0
    p.part(0.25)  # a quarter of one point in 6 s: 24 s a point
    assert lines[-1].endswith("about 66 s left)")
    clock[0] += 18.0
    p.finish()
    p.start()
    assert lines[-1] == "sweep: n=8 (2 of 3; 24 s so far, about 48 s left)"


def test_a_skipped_step_does_not_set_the_pace(clock: list[float]) -> None:
    lines: list[str] = []
    p = TimeLeft("reproduce lbdd", [("a", 60.0), ("b", 60.0), ("c", 60.0)], lines.append)
    p.start()
    clock[0] += 5.0  # read from an earlier run in 5 s, not run
    p.skip()
    p.start()
    clock[0] += 120.0
    p.finish()
    p.start()
    # Only b measures the pace (120 s for 60): c should take 120 s, not (125 / 60) x 60.
    assert lines[-1].endswith("(3 of 3; 2.1 min so far, about 2.0 min left)")


def test_the_pace_is_the_recent_one_when_the_work_slows_down(clock: list[float]) -> None:
    # As a Meghdoot run: half the operations (subscriptions) in 10 s, then events that
    # take ten times as long each. The pace since the start would say about 73 s left.
    lines: list[str] = []
    p = TimeLeft("simulating", [("meghdoot", 1.0)], lines.append, seconds=False)
    p.start()
    clock[0] += 10.0
    p.part(0.5)
    clock[0] += 100.0
    p.part(0.6)  # 10 % in the last 100 s: 400 s for the 40 % left
    assert lines[-1].endswith("(1 of 1, 60% done; 1.8 min so far, about 6.7 min left)")
    clock[0] += 20.0
    p.part(0.62)  # the last third of the time worked (from 87 s on) is all slow work
    assert lines[-1].endswith("about 6.3 min left)")


def test_durations_read_as_seconds_then_minutes() -> None:
    assert duration_text(42.4) == "42 s"
    assert duration_text(89.0) == "89 s"
    assert duration_text(210.0) == "3.5 min"


def _stderr(*argv: str) -> list[str]:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *argv],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stderr.splitlines()


def _progress(lines: list[str], what: str) -> list[re.Match[str]]:
    return [m for ln in lines if (m := LINE.match(ln)) and m["what"] == what]


def test_a_simulated_run_says_each_algorithm_and_the_time_left(tmp_path: Path) -> None:
    found = _progress(_stderr("sim", "demo", "--out", str(tmp_path)), "simulating demo")
    assert [(m["label"], m["i"], m["n"]) for m in found] == [("snr", "1", "2"),
                                                              ("idr", "2", "2")]
    assert found[0]["left"] is None  # nothing measured yet: no guess
    assert found[1]["left"] is not None  # snr's pace estimates idr


def test_a_sweep_says_each_point_and_the_time_left(tmp_path: Path) -> None:
    lines = _stderr("sim", "flood-demo", "--out", str(tmp_path),
                    "--sweep", "workload.n_subscribers=4,8,12")
    found = _progress(lines, "sweep")
    assert [m["label"] for m in found] == [f"workload.n_subscribers={n}" for n in (4, 8, 12)]
    assert [m["left"] is not None for m in found] == [False, True, True]


def test_bulk_rounds_say_each_round_and_the_time_left(tmp_path: Path) -> None:
    lines = _stderr("sim", "lbdd-gigabit", "--out", str(tmp_path), "--set", "scale=0.0001",
                    "--set", "workload.subscriber_counts=[3, 11]")
    found = _progress(lines, "lbdd-gigabit rounds")
    # Three algorithms at 3 and 11 subscribers, and LBDD's failure round.
    assert [m["label"] for m in found] == ["lbdd n=3", "lbdd n=11", "p2p n=3", "p2p n=11",
                                           "p2p-parallel n=3", "p2p-parallel n=11",
                                           "lbdd failure"]
    assert {m["n"] for m in found} == {"7"}
    assert found[0]["left"] is None and all(m["left"] for m in found[1:])


# Four threads logging at once, as an emulated run's progress ticker, fault thread and
# main thread do, with standard error a pipe.
_THREADS = """
import threading
from experiments.progress import log
def lines(i):
    for j in range(2000):
        log(f"thread {i} line {j}")
threads = [threading.Thread(target=lines, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
log("carriage\\rreturn and\\nnewline")
"""


def test_threads_logging_at_once_write_whole_lines_on_a_pipe() -> None:
    res = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, timeout=120,
                         check=True)
    *lines, last = res.stderr.decode().split("\n")
    body = re.compile(r"^\[pubsublab\] thread (\d) line (\d+)$")
    glued = [ln for ln in lines[:-1] if not body.match(ln)]
    assert not glued, glued[:3]
    assert sorted((m[1], int(m[2])) for m in map(body.match, lines[:-1])) == sorted(
        (str(i), j) for i in range(4) for j in range(2000))
    # A message's own line breaks do not split or redraw its line.
    assert lines[-1] == "[pubsublab] carriage return and newline" and last == ""
    assert b"\r" not in res.stderr


def test_a_simulated_run_on_a_pipe_writes_whole_lines(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "sim", "flood-demo",
                          "--out", str(tmp_path)], capture_output=True, timeout=300,
                         check=True)
    err = res.stderr.decode()
    assert "\r" not in err and err.endswith("\n"), err
    lines = err.splitlines()
    assert all(ln.startswith("[pubsublab] ") for ln in lines), lines
    assert [m["label"] for m in _progress(lines, "simulating flood-demo")] == ["flood"]
    assert lines[-1].startswith("[pubsublab] took "), lines
