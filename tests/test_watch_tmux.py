"""`pubsublab watch` as a person uses it: in a real terminal (a tmux pane 160 x 50),
read off the screen (`tmux capture-pane -p`).

Live: the demo's SNR part runs in Mininet (the iLink b0-b1 throttled to 0.5 Mbit/s at
t = 2 s under a high-rate publisher's burst); `pubsublab watch`, started with no
argument in the folder the run was started from, finds the run in progress and must
show b0 -> b1 as ok before the throttle and OVERLOADED within two seconds of the runner
saying the throttle took effect; at the end every expected delivery is on the screen.
Replay: a simulated demo run, replayed at three times its pace, shows the throttled
link overloaded under SNR, then IDR's decisions under IDR, frame after frame.
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
    """A detached tmux session 160 x 50 running one command in ``cwd``."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.name = f"pubsublab-watch-test-{os.getpid()}-{time.monotonic_ns()}"
        shell = " ".join(command) + f"; echo {EXITED} $?; sleep 600"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50",
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
    pane = Pane([*CLI, "watch", str(sim_run), "--speed", "3"], tmp_path)
    frames: dict[str, set[str]] = {"snr": set(), "idr": set()}
    snr_overloaded = idr_case_i = False
    screen = ""
    try:
        deadline = time.monotonic() + 120
        while _exit_code(screen) is None:
            assert time.monotonic() < deadline, f"the replay never ended:\n{screen}"
            screen = pane.screen()
            head = screen.splitlines()[0] if screen.strip() else ""
            for alg in frames:
                if f" {alg} (" in head:
                    frames[alg].add(head)  # the header carries the replay's clock
            status = _status(screen, "b0 -> b1") or ""
            snr_overloaded |= " snr (1 of 2)" in head and status.startswith("OVERLOADED")
            case_i = re.search(r"\(i\) +CIV-N on the least-queued free iLink +(\d+)", screen)
            idr_case_i |= " idr (2 of 2)" in head and bool(case_i and int(case_i[1]) > 0)
            time.sleep(0.1)
    finally:
        pane.close()
    assert _exit_code(screen) == 0, screen
    assert "replay x3  simulated" in screen
    assert all(len(f) >= 3 for f in frames.values()), f"a paced replay, frame by frame: {frames}"
    assert snr_overloaded, "under SNR the throttled iLink b0 -> b1 overloads"
    assert idr_case_i, "under IDR, b0 hands cluster 1 to a free iLink (case i)"
    assert "delivered 7,308 of 7,308 expected (100 %)" in screen
    assert "not measured in a simulated run" in screen
