"""The plain-Mininet command the README prints (``sudo mn --custom topologies/custom.py
--topo scot,...,mode=switch ... --test pingall``), run end to end as a reader runs it: every
host reaches every other, and nothing it made is left behind."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from mininet.util import buildTopo

from experiments.emulation.doctor import MN_SWITCH_ARGS
from experiments.emulation.leftovers import ovs_bridges, root_interfaces
from topologies import custom

REPO = Path(__file__).resolve().parents[1]
TIME_LIMIT_S = 120  # the command takes about a second; the broken default hung for minutes


def printed_pingall_commands() -> list[str]:
    """Every ``sudo mn --custom ... --test pingall`` line of the README and the labs, with
    backslash continuations joined."""
    docs = [REPO / "README.md", *sorted((REPO / "labs").glob("*.md"))]
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
    assert commands, "the README prints no `sudo mn --custom ... --test pingall` command"
    for cmd in commands:
        assert MN_SWITCH_ARGS in cmd, cmd


@pytest.mark.root
@pytest.mark.parametrize("command", printed_pingall_commands())
def test_printed_mn_command_pings_all_and_leaves_nothing(command: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == "sudo"
    argv = argv[1:]  # the tests run as root, where sudo may not be installed
    topo_arg = argv[argv.index("--topo") + 1]
    hosts = len(buildTopo(custom.topos, topo_arg).hosts())  # what pingall must reach
    expected = f"*** Results: 0% dropped ({hosts * (hosts - 1)}/{hosts * (hosts - 1)} received)"

    before = (set(root_interfaces()), set(ovs_bridges()), mininet_pids(), netns_names())
    # mn runs in the system Python, as /usr/bin/mn does for a reader: no venv variables.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        remove_made_since(*before)
        pytest.fail(f"`{command}` still ran after {TIME_LIMIT_S} s:\n{out[-3000:]}")
    after = (set(root_interfaces()), set(ovs_bridges()), mininet_pids(), netns_names())
    left = {kind: sorted(a - b) for kind, a, b in
            zip(("interfaces", "ovs bridges", "node processes", "netns"), after, before,
                strict=True) if a - b}
    remove_made_since(*before)

    assert proc.returncode == 0, out[-3000:]
    assert expected in out, out[-3000:]
    assert not re.search(r"^\*\*\* (Error|Exception)", out, re.M), out[-3000:]
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
