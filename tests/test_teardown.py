"""A run interrupted by SIGINT (once or again and again), by an exception, or killed
outright leaves nothing behind: no processes, namespaces, interfaces, bridges or state of
ours; the next run starts.

What a run left is judged from outside, as a user would look: the processes of the run
seen while it ran (the runner's descendants, and whatever names the run folder on its
command line), and afterwards which of them still run and which of their network
namespaces are still held."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from experiments.emulation.cgroups import RunCgroup, cgroup_mount
from experiments.emulation.leftovers import STATE_DIR, ovs_bridges, root_interfaces
from experiments.plan import compile_plan, topology_graph
from experiments.runs.testbed import run_experiment
from experiments.spec import load_spec

pytestmark = pytest.mark.root

DEMO_NODES = set(topology_graph(load_spec("flood-demo")).nodes)


def _process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time in clock ticks since boot, command line) of every
    process not yet dead (a zombie has let go of its namespaces and sockets)."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        if fields[0] != "Z":
            table[int(d.name)] = (int(fields[1]), int(fields[19]), cmd)
    return table


def _now_ticks() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _net_namespace(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class _RunProcesses:
    """The processes of a live run: ``runner``'s descendants started after
    ``started_after_ticks`` and whatever names ``run_dir`` on its command line (a process
    that detached or forked away from the runner still carries its config path), each
    with its start time, so that a recycled pid is never taken for a survivor; and the
    network namespaces they hold."""

    def __init__(self, runner: int, run_dir: Path, started_after_ticks: int = 0) -> None:
        table = _process_table()
        members = {runner}
        grew = True
        while grew:
            kids = {p for p, (ppid, _, _) in table.items() if ppid in members} - members
            grew = bool(kids)
            members |= kids
        members = {p for p in members if table[p][1] >= started_after_ticks}
        members |= {p for p, (_, _, cmd) in table.items() if str(run_dir) in cmd}
        members.discard(runner)
        self.procs = {p: table[p][1:] for p in members}
        self.namespaces = {ns for p in self.procs if (ns := _net_namespace(p)) is not None}
        self.namespaces.discard(_net_namespace(os.getpid()))  # the root namespace
        self.taken_at_ticks = _now_ticks()

    def count(self, word: str) -> int:
        return sum(word in cmd for _, cmd in self.procs.values())

    def survivors(self) -> dict[int, str]:
        """Those still running (same pid, same start time)."""
        table = _process_table()
        return {p: cmd for p, (start, cmd) in self.procs.items()
                if p in table and table[p][1] == start}

    def namespaces_left(self) -> set[int]:
        """Those namespaces still held by a process that existed when the snapshot was
        taken (one made later may reuse a freed namespace's number)."""
        return {ns for p, (_, start, _) in _process_table().items()
                if start <= self.taken_at_ticks and (ns := _net_namespace(p)) in self.namespaces}


def _our_interfaces() -> list[str]:
    return [i for i in root_interfaces() if i.split("-", 1)[0] in DEMO_NODES or i in DEMO_NODES]


def _assert_clean(runner: int, run: _RunProcesses) -> None:
    """Nothing left of the run: no process, no namespace, no interface or bridge of the
    demo's names, no state file of ``runner`` (another engineer's run may have one)."""
    assert run.survivors() == {}
    assert run.namespaces_left() == set()
    assert _our_interfaces() == []
    assert not [b for b in ovs_bridges() if b in DEMO_NODES]
    assert not (STATE_DIR / f"{runner}.json").exists()


def _start_run(out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "run", "flood-demo", "--out", str(out),
         *extra],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout_s: float = 300) -> str:
    """Standard error up to the line with ``marker`` (the run may first wait for another
    emulation's lock)."""
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


def _start_workload(out: Path, *extra: str
                    ) -> tuple[subprocess.Popen[str], Path, _RunProcesses]:
    """A flood-demo run (no link check), once its brokers, tcpdumps and clients run."""
    proc = _start_run(out, "--set", "fidelity.links=0", *extra)
    _wait_for(proc, "operations over")
    (run_dir,) = out.iterdir()
    run = _RunProcesses(proc.pid, run_dir)
    n_brokers = len(compile_plan(load_spec("flood-demo")).overlay.nodes)
    assert run.count("nodes.emulated.broker") == n_brokers, run.procs
    assert run.count("tcpdump") == n_brokers, run.procs
    assert run.count("nodes.emulated.client") >= 1, run.procs
    return proc, run_dir, run


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_tears_down(tmp_path: Path, signo: int) -> None:
    proc = _start_run(tmp_path, "--set", "fidelity.iperf_s=20")
    _wait_for(proc, "network up")
    (run_dir,) = tmp_path.iterdir()
    run = _RunProcesses(proc.pid, run_dir)
    time.sleep(1.0)
    proc.send_signal(signo)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    _assert_clean(proc.pid, run)


def test_exception_mid_run_tears_down(tmp_path: Path) -> None:
    seen: list[_RunProcesses] = []
    t0 = _now_ticks()

    def boom(_emu: object, run_dir: Path, _manifest: dict[str, Any]) -> None:
        seen.append(_RunProcesses(os.getpid(), run_dir, started_after_ticks=t0))
        raise RuntimeError("injected failure")

    plan = compile_plan(load_spec("flood-demo", ["fidelity.links=1"]))
    with pytest.raises(RuntimeError, match="injected"):
        run_experiment(plan, tmp_path, phases=(boom,))
    (run_dir,) = tmp_path.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: RuntimeError")
    (run,) = seen
    assert run.count("mininet:") == len(DEMO_NODES), run.procs
    _assert_clean(os.getpid(), run)


@pytest.mark.parametrize("cpu_limited", [(), ("b0",)], ids=["plain", "cpu-limited"])
def test_run_killed_outright_is_swept_by_the_next_run(tmp_path: Path,
                                                       cpu_limited: tuple[str, ...]) -> None:
    """SIGKILL mid-workload: brokers, tcpdumps and clients are detached from the runner
    and survive it; the next run ends every one, frees their namespaces and interfaces,
    deletes the state and marks the killed run's manifest. A CPU-limited host's
    processes, which Mininet moves into a cgroup of the host, go too, and so does that
    cgroup."""
    limits = ",".join(f"{h}: 0.5" for h in cpu_limited)
    proc, run_dir, run = _start_workload(tmp_path / "killed", "--set", f"broker.cpu={{{limits}}}")
    os.kill(proc.pid, signal.SIGKILL)  # no finally runs: leftovers stay
    proc.wait()
    assert run.survivors(), "processes of the killed run should outlive its runner"
    assert (STATE_DIR / f"{proc.pid}.json").exists(), "a SIGKILLed run leaves its state"
    second = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "run", "flood-demo", "--out",
         str(tmp_path / "next"), "--set", "fidelity.links=0", "--set", "workload={}", "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert "cleaned leftovers" in second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["status"] == "ok"
    _assert_clean(proc.pid, run)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "killed"
    if cpu_limited:
        cpu = cgroup_mount("cpu")
        assert cpu is not None
        assert not [h for h in cpu_limited if (cpu / h).exists()]


def test_ctrl_c_again_and_again_does_not_cut_teardown_short(tmp_path: Path) -> None:
    """SIGINT every 0.25 s from mid-workload until the runner exits: the first ends the
    run, the others only make it say to wait; teardown finishes all the same."""
    proc, run_dir, run = _start_workload(tmp_path)
    assert proc.stderr is not None
    rest: list[str] = []  # drained meanwhile: a runner blocked on a full pipe never ends
    reader = threading.Thread(target=lambda: rest.append(proc.stderr.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    presses = 0
    while proc.poll() is None and time.monotonic() < deadline:
        proc.send_signal(signal.SIGINT)
        presses += 1
        time.sleep(0.25)
    if proc.poll() is None:
        proc.kill()
        pytest.fail("the runner did not end within 60 s of the first Ctrl-C")
    reader.join(timeout=10)
    err = "".join(rest)
    assert presses >= 3, err
    assert proc.returncode == 130, err
    assert "tearing down, please wait" in err
    assert "Traceback" not in err, err
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    _assert_clean(proc.pid, run)


def test_a_run_group_ends_processes_that_detach_and_fork() -> None:
    """What mnexec -da does (a new session) and a daemon does (fork, parent exits): the
    pid the runner knows is gone, the process lives on; the group still holds it."""
    group = RunCgroup.named(f"test-{os.getpid()}")
    group.make()
    try:
        group.enter()
        try:
            starter = subprocess.run(
                ["setsid", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
                capture_output=True, text=True, check=True, timeout=10)
        finally:
            group.leave()
        daemon = int(starter.stdout.strip())
        assert daemon in _process_table()
        assert group.members() == [daemon]
        assert group.kill() == 1
        assert daemon not in _process_table()
    finally:
        group.remove()
    assert not group.path.exists()
