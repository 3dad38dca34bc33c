"""The plain-Mininet command the docs print (``sudo mn --custom topologies/custom.py
--topo scot,...,mode=switch ... --test pingall``, in docs/guide/running.md and the labs),
run end to end as a reader runs it: every host reaches every other, and nothing it made is
left behind."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from optparse import Values
from pathlib import Path

import pytest
from mininet.util import buildTopo

from experiments.emulation.leftovers import ovs_bridges, root_interfaces
from topologies import custom
from topologies.mn_switch import MN_SWITCH_ARGS, OVS_MODULE

REPO = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 120  # the command takes about a second; the broken default hung for minutes


def printed_pingall_commands() -> list[str]:
    """Every ``sudo mn --custom ... --test pingall`` line of the README, the docs and the
    labs, with backslash continuations joined."""
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted((REPO / "labs").glob("*.md"))]
    found = []
    for doc in docs:
        text = doc.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            line = " ".join(line.split())
            if line.startswith("sudo mn --custom") and "--test pingall" in line:
                found.append(line)
    return found


def mininet_pids() -> set[int]:
    """Processes of Mininet nodes: each node's shell is ``bash ... mininet:<name>``."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"mininet:" in cmdline:
                pids.add(int(proc.name))
    return pids


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_readme_prints_the_switch_the_doctor_names() -> None:
    commands = printed_pingall_commands()
    assert commands, "the docs print no `sudo mn --custom ... --test pingall` command"
    for cmd in commands:
        assert MN_SWITCH_ARGS in cmd, cmd


def test_custom_file_refuses_only_a_switch_that_forwards_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``mn`` hands the custom file's ``validate`` its options (its fallback already
    applied, so the default switch reads ``ovsbr``); it exits naming the doctor's options
    for an OVS switch on the kernel datapath with no module loaded, and for nothing else."""
    switch_mode, overlay = "scot,tree=a-b,m=2,mode=switch", "scot,tree=a-b,m=2"

    def refused(switch: str, topo: str) -> str | None:
        try:
            custom.validate(Values({"switch": switch, "topo": topo}))
        except SystemExit as exc:
            return str(exc)
        return None

    monkeypatch.setattr(custom, "OVS_MODULE", tmp_path / "no-such-module")
    for switch in ("ovsbr", "default", "ovs", "ovsk", "ovsbr,stp=1"):
        message = refused(switch, switch_mode)
        assert message is not None and MN_SWITCH_ARGS in message, switch
    for switch in ("lxbr", "ovsbr,datapath=user", "ovs,datapath=user,failMode=standalone"):
        assert refused(switch, switch_mode) is None, switch
    assert refused("ovsbr", overlay) is None  # no switch is made
    monkeypatch.setattr(custom, "OVS_MODULE", tmp_path)  # the module is loaded
    assert refused("ovsbr", switch_mode) is None


def run_mn(argv: list[str]) -> tuple[int, str, dict[str, list]]:
    """Run ``argv`` from the repository root as a reader would (``mn`` in the system
    Python, no venv variables), within :data:`TIME_LIMIT_S`: its exit status, its output
    and what it left behind (removed again)."""
    before = (set(root_interfaces()), set(ovs_bridges()), mininet_pids(), netns_names())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        remove_made_since(*before)
        pytest.fail(f"`{shlex.join(argv)}` still ran after {TIME_LIMIT_S} s:\n{out[-3000:]}")
    after = (set(root_interfaces()), set(ovs_bridges()), mininet_pids(), netns_names())
    left = {kind: sorted(a - b) for kind, a, b in
            zip(("interfaces", "ovs bridges", "node processes", "netns"), after, before,
                strict=True) if a - b}
    remove_made_since(*before)
    return proc.returncode, out, left


def pingall_line(argv: list[str]) -> str:
    """The line pingall prints when every host of ``argv``'s topology reaches every other
    (the host count from the custom file's own Topo)."""
    hosts = len(buildTopo(custom.topos, argv[argv.index("--topo") + 1]).hosts())
    pairs = hosts * (hosts - 1)
    return f"*** Results: 0% dropped ({pairs}/{pairs} received)"


def as_root(command: str) -> list[str]:
    argv = shlex.split(command)
    assert argv[0] == "sudo"
    return argv[1:]  # the tests run as root, where sudo may not be installed


@pytest.mark.root
@pytest.mark.parametrize("command", printed_pingall_commands())
def test_printed_mn_command_pings_all_and_leaves_nothing(command: str) -> None:
    argv = as_root(command)
    status, out, left = run_mn(argv)
    assert status == 0, out[-3000:]
    assert pingall_line(argv) in out, out[-3000:]
    assert not re.search(r"^\*\*\* (Error|Exception)", out, re.M), out[-3000:]
    assert left == {}, f"left behind: {left}"


@pytest.mark.root
def test_without_the_switch_options_mn_stops_at_once_or_works() -> None:
    """The printed command without the doctor's options, as a Mininet user would type it:
    where the kernel has no OVS module, a one-line refusal naming them (instead of minutes
    of lost pings); where it has one, mn's own OVS bridge passes pingall. Either way
    nothing is left behind."""
    argv = as_root(printed_pingall_commands()[0].replace(f" {MN_SWITCH_ARGS}", ""))
    assert "--switch" not in argv
    status, out, left = run_mn(argv)
    if OVS_MODULE.exists():
        assert status == 0 and pingall_line(argv) in out, out[-3000:]
    else:
        assert status == 1, out[-3000:]
        assert f"add {MN_SWITCH_ARGS}" in out.splitlines()[-1], out[-3000:]
        assert "*** Ping" not in out and "*** Creating network" not in out, out[-3000:]
    assert left == {}, f"left behind: {left}"


def remove_made_since(interfaces: set[str], bridges: set[str], pids: set[int],
                      netns: set[str]) -> None:
    """Undo what the command left: node processes, interfaces, bridges and namespaces
    that were not there before it (the lock keeps other Mininet runs off meanwhile)."""
    for pid in mininet_pids() - pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for br in set(ovs_bridges()) - bridges:
        subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br], check=False)
    for intf in set(root_interfaces()) - interfaces:
        subprocess.run(["ip", "link", "del", intf], check=False, capture_output=True)
    for ns in netns_names() - netns:
        subprocess.run(["ip", "netns", "del", ns], check=False)
