"""`pubsublab watch` as a person uses it: in a real terminal (a tmux pane 160 x 50),
read off the screen (`tmux capture-pane -p`).

Live: the demo's SNR part runs in Mininet (the iLink b0-b1 throttled to 0.5 Mbit/s at
t = 2 s under a high-rate publisher's burst); `pubsublab watch`, started with no
argument in the folder the run was started from, finds the run in progress and must
show b0 -> b1 as ok before the throttle and OVERLOADED within two seconds of the runner
saying the throttle took effect; at the end every expected delivery is on the screen.
Replay: a simulated demo run, replayed at three times its pace, shows the throttled
link overloaded under SNR, then IDR's decisions under IDR, frame after frame. At five
times its pace, a demo whose burst is cut to 600 quotes (b0 -> b1 overloaded for 1.4 s
of the run, shorter than the 2.5 s a frame covers) still shows the link OVERLOADED,
every frame a whole number of statistics windows later than the last; in a pane 120
columns wide every link's name and status stay whole.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec
from nodes.runfolder import read_manifest

CLI = [sys.executable, "-m", "experiments.cli"]
EXITED = "WATCH-EXIT"


class Pane:
    """A detached tmux session ``columns`` x 50 running one command in ``cwd``."""

    def __init__(self, command: list[str], cwd: Path, columns: int = 160) -> None:
        self.name = f"pubsublab-watch-test-{os.getpid()}-{time.monotonic_ns()}"
        shell = " ".join(command) + f"; echo {EXITED} $?; sleep 600"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", str(columns),
                        "-y", "50",
                        "-c", str(cwd),
                        # The pane's own size, not one inherited from whoever started the
                        # tmux server (a COLUMNS there would hold rich to it).
                        f"env -u COLUMNS -u LINES LANG=C.UTF-8 {shell}"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], check=False,
                       capture_output=True)


def _status(screen: str, link: str) -> str | None:
    """The status cell of ``link``'s row in the link table (e.g. "b0 -> b1"), if the row
    is on the screen: "ok" or "OVERLOADED xN"."""
    for line in screen.splitlines():
        cells = line.split("│")
        if len(cells) > 7 and cells[1].strip() == link:
            return cells[7].strip()
    return None


def _exit_code(screen: str) -> int | None:
    m = re.search(rf"{EXITED} (\d+)", screen)
    return int(m.group(1)) if m else None


@pytest.mark.root
def test_live_view_shows_the_throttled_link_overloaded_within_two_seconds(
        tmp_path: Path) -> None:
    run_err = tmp_path / "run.err"
    with open(run_err, "w") as err, open(tmp_path / "run.out", "w") as out:
        run = subprocess.Popen([*CLI, "run", "demo", "--set", "routing.algorithms=[snr]",
                                "--set", "fidelity.links=1"],
                               cwd=tmp_path, stdout=out, stderr=err)
    pane = None
    try:
        deadline = time.monotonic() + 120
        while not any((read_manifest(d) or {}).get("status") == "running"
                      for d in (tmp_path / "runs").glob("*")):
            assert run.poll() is None, run_err.read_text()
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)
        pane = Pane([*CLI, "watch"], tmp_path)  # no RUN_DIR: the run in progress
        t_throttle = t_overloaded = None
        ok_before_throttle = False
        screen = ""
        deadline = time.monotonic() + 240
        while _exit_code(screen) is None:
            assert time.monotonic() < deadline, f"watch never ended:\n{screen}"
            screen = pane.screen()
            now = time.monotonic()
            if t_throttle is None and "link b0-b1 set to 0.5 Mbit/s" in run_err.read_text():
                t_throttle = now
            status = _status(screen, "b0 -> b1")
            if status is not None and "snr (1 of 1)" in screen:
                if status.startswith("OVERLOADED") and t_overloaded is None:
                    t_overloaded = now
                    overloaded_screen = screen
                ok_before_throttle |= t_throttle is None and status == "ok"
            time.sleep(0.1)
        assert run.wait(timeout=120) == 0, run_err.read_text()
    finally:
        if pane is not None:
            pane.close()
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=120)
    assert ok_before_throttle, "b0 -> b1 must show ok while it runs at its 10 Mbit/s"
    assert t_throttle is not None, run_err.read_text()
    assert t_overloaded is not None, f"b0 -> b1 never showed OVERLOADED:\n{screen}"
    lag_s = t_overloaded - t_throttle
    print(f"b0 -> b1 shown overloaded {lag_s:.2f} s after the throttle took effect")
    assert 0 <= lag_s <= 2.0, overloaded_screen
    assert _exit_code(screen) == 0, screen
    assert "delivered 7,308 of 7,308 expected (100 %)" in screen, screen
    assert "duplicates 0, unexpected 0" in screen
    assert re.search(r"below the criterion in \d+ of \d+ s so far", screen), \
        "the CPU-idle figure is shown"


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    run_dir, _ = run_simulation(compile_plan(load_spec("demo", [])), out)
    return run_dir


def test_replay_of_a_simulated_run_shows_snr_then_idr(sim_run: Path, tmp_path: Path) -> None:
    frames: dict[str, set[str]] = {"snr": set(), "idr": set()}
    snr_overloaded = idr_case_i = False
    screens = _replay_screens(sim_run, tmp_path, 3)
    for screen in screens:
        head = screen.splitlines()[0] if screen.strip() else ""
        for alg in frames:
            if f" {alg} (" in head:
                frames[alg].add(head)  # the header carries the replay's clock
        status = _status(screen, "b0 -> b1") or ""
        snr_overloaded |= " snr (1 of 2)" in head and status.startswith("OVERLOADED")
        case_i = re.search(r"\(i\) +CIV-N on the least-queued free iLink +(\d+)", screen)
        idr_case_i |= " idr (2 of 2)" in head and bool(case_i and int(case_i[1]) > 0)
    screen = screens[-1]
    assert "replay x3  simulated" in screen
    assert all(len(f) >= 3 for f in frames.values()), f"a paced replay, frame by frame: {frames}"
    assert snr_overloaded, "under SNR the throttled iLink b0 -> b1 overloads"
    assert idr_case_i, "under IDR, b0 hands cluster 1 to a free iLink (case i)"
    assert "delivered 7,308 of 7,308 expected (100 %)" in screen
    assert "not measured in a simulated run" in screen


@pytest.fixture(scope="module")
def short_burst_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo with half its burst: the throttled link's overload under SNR lasts 1.4 s
    of the run (2.6 to 3.95 s after its first record)."""
    out = tmp_path_factory.mktemp("runs")
    run_dir, _ = run_simulation(compile_plan(load_spec("demo", ["workload.burst.count=600"])),
                                out)
    return run_dir


def _replay_screens(run_dir: Path, tmp_path: Path, speed: float,
                    columns: int = 160) -> list[str]:
    """Every distinct screen of ``pubsublab watch RUN_DIR --speed SPEED`` in a tmux pane,
    read ten times a second until it exits 0."""
    pane = Pane([*CLI, "watch", str(run_dir), "--speed", f"{speed:g}"], tmp_path, columns)
    screens: list[str] = []
    screen = ""
    try:
        deadline = time.monotonic() + 120
        while _exit_code(screen) is None:
            assert time.monotonic() < deadline, f"the replay never ended:\n{screen}"
            screen = pane.screen()
            if not screens or screen != screens[-1]:
                screens.append(screen)
            time.sleep(0.1)
    finally:
        pane.close()
    assert _exit_code(screen) == 0, screen
    return screens


def test_a_replay_at_speed_5_shows_an_overload_shorter_than_a_frame(
        short_burst_run: Path, tmp_path: Path) -> None:
    screens = _replay_screens(short_burst_run, tmp_path, 5)
    snr = [s for s in screens if " snr (1 of 2)  replay x5 " in s.splitlines()[0]]
    assert len(snr) >= 2, "a paced replay, frame after frame"
    overloaded = [s for s in snr if (_status(s, "b0 -> b1") or "").startswith("OVERLOADED")]
    assert overloaded, "under SNR the throttled iLink b0 -> b1 overloads:\n" + snr[-1]
    # Its bar draws the longest queue of the frame, drained or not by the frame's end.
    (bar,) = [line.split("│")[3] for line in overloaded[0].splitlines()
              if line.startswith("│b0 -> b1 ")]
    assert bar.strip(" ") and set(bar.strip(" ")) == {"█"}, overloaded[0]
    # The frame says it covers 2.5 s of the run, and its clock moves by whole frames.
    assert "in a window of the last 2.5 s" in " ".join(overloaded[0].split())
    clocks = [float(re.search(r"t = ([\d.]+) s", s.splitlines()[0])[1]) for s in snr]
    assert all(round(t / 2.5, 6).is_integer() for t in clocks), clocks


def test_a_replay_in_120_columns_keeps_every_link_name_whole(sim_run: Path,
                                                             tmp_path: Path) -> None:
    screens = _replay_screens(sim_run, tmp_path, 5, columns=120)
    info_edges = {(a, b) for a, b, _ in _edges(sim_run)}
    names = {f"{u} -> {v}" for a, b in info_edges for u, v in ((a, b), (b, a))}
    frame = next(s for s in reversed(screens) if " idr (2 of 2) " in s.splitlines()[0])
    rows = [line.split("│") for line in frame.splitlines()
            if line.startswith("│") and " -> " in line.split("│")[1]]
    assert {cells[1].strip() for cells in rows} == names, frame
    for cells in rows:
        assert cells[2].strip() in ("iLink", "aLink"), frame
        assert re.fullmatch(r"ok|OVERLOADED x\d+", cells[7].strip()), frame
    assert all(len(line) <= 120 for line in frame.splitlines())


def _edges(run_dir: Path) -> list[tuple[str, str, str]]:
    from analysis.watch import RunInfo

    return list(RunInfo.read(run_dir).edges)
