"""A run interrupted by SIGINT, by an exception, or killed outright leaves nothing behind:
no interfaces, namespaces, bridges, processes or state of ours; the next run starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.emulation.leftovers import STATE_DIR, ovs_bridges, root_interfaces
from experiments.plan import compile_plan, topology_graph
from experiments.runs.testbed import run_experiment
from experiments.spec import load_spec

pytestmark = pytest.mark.root

DEMO_NODES = set(topology_graph(load_spec("flood-demo")).nodes)


def _our_interfaces() -> list[str]:
    return [i for i in root_interfaces() if i.split("-", 1)[0] in DEMO_NODES or i in DEMO_NODES]


def _mininet_shells() -> list[int]:
    """Host shells Mininet started (mnexec ... bash --norc -is mininet:<name>)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "mininet:" in cmd and any(f"mininet:{n}" in cmd for n in DEMO_NODES):
                pids.append(int(d.name))
    return pids


def _assert_clean() -> None:
    assert _our_interfaces() == []
    shells = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
              for pid in _mininet_shells() if Path(f"/proc/{pid}").exists()}
    assert not shells, f"Mininet shells left: {shells}"
    assert not [b for b in ovs_bridges() if b in DEMO_NODES]
    assert not list(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else True


def _start_run(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "run", "flood-demo", "--out", str(tmp_path),
         *extra],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout_s: float = 120) -> str:
    seen = ""
    deadline = time.monotonic() + timeout_s
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if marker in line:
            return seen
    proc.kill()
    pytest.fail(f"never saw {marker!r}; stderr so far:\n{seen}")


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_tears_down(tmp_path: Path, signo: int) -> None:
    proc = _start_run(tmp_path, "--set", "fidelity.iperf_s=20")
    _wait_for(proc, "network up")
    time.sleep(1.0)
    proc.send_signal(signo)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    _assert_clean()


def test_exception_mid_run_tears_down(tmp_path: Path) -> None:
    def boom(*_args: object) -> None:
        raise RuntimeError("injected failure")

    plan = compile_plan(load_spec("flood-demo", ["fidelity.links=1"]))
    with pytest.raises(RuntimeError, match="injected"):
        run_experiment(plan, tmp_path, phases=(boom,))
    (run_dir,) = tmp_path.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: RuntimeError")
    _assert_clean()


def test_killed_runner_is_swept_by_the_next_run(tmp_path: Path) -> None:
    proc = _start_run(tmp_path, "--set", "fidelity.iperf_s=20")
    _wait_for(proc, "network up")
    os.kill(proc.pid, signal.SIGKILL)  # no finally runs: leftovers stay
    proc.wait()
    # The host shells die with their pty, but the run's state is left for the sweep.
    assert list(STATE_DIR.glob(f"{proc.pid}.json")), "a SIGKILLed run leaves its state file"
    second = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "run", "flood-demo", "--out", str(tmp_path),
         "--set", "fidelity.links=1", "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert "cleaned leftovers" in second.stderr
    result = json.loads(second.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok"
    _assert_clean()
