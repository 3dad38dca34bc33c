"""What a run made, written down before it is made, so that a crashed run can be undone.

Each runner process keeps a state file ``/run/pubsublab/<pid>.json`` listing the Mininet
node names it is about to create, the OVS and Linux bridges, and the processes it started
(pid plus a fragment of the command line, so a recycled pid is never killed by mistake).
A normal teardown removes the file. At the start of every run, files whose runner is gone
are swept: processes killed, root-namespace interfaces ``<node>-eth*`` deleted, bridges
deleted. Only our own names are touched, never another tool's (unlike ``mn -c``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("PUBSUBLAB_STATE_DIR", "/run/pubsublab"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _settled_cmdline(pid: int, timeout_s: float = 1.0) -> str:
    """The command line of a process just started. Python starts children with vfork, and
    the parent resumes while the child's exec is still setting up: for that moment /proc
    shows an empty command line, which the sweep would never match, so wait it out."""
    deadline = time.monotonic() + timeout_s
    while not (cmd := _cmdline(pid)) and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    return cmd


class RunState:
    """The state file of this runner process."""

    def __init__(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = STATE_DIR / f"{os.getpid()}.json"
        self.data: dict[str, Any] = {"runner": os.getpid(),
                                     "runner_cmd": _cmdline(os.getpid())[:200],
                                     "nodes": [], "bridges": [], "procs": []}
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)

    def add_nodes(self, names: list[str]) -> None:
        self.data["nodes"] = sorted(set(self.data["nodes"]) | set(names))
        self._save()

    def add_bridges(self, names: list[str]) -> None:
        self.data["bridges"] = sorted(set(self.data["bridges"]) | set(names))
        self._save()

    def add_proc(self, pid: int) -> None:
        self.data["procs"].append([pid, _settled_cmdline(pid)[:200]])
        self._save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _kill_procs(procs: list[list[Any]]) -> int:
    killed = []
    for pid, cmd in procs:
        if _alive(pid) and cmd and _cmdline(pid)[:200] == cmd:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                killed.append(pid)
    found = len(killed)
    deadline = time.monotonic() + 3.0
    while killed and time.monotonic() < deadline:
        killed = [p for p in killed if _alive(p)]
        time.sleep(0.05)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


def root_interfaces() -> list[str]:
    """Interface names in the root network namespace."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(": ", 2)
        if len(parts) >= 2:
            names.append(parts[1].split("@", 1)[0])
    return names


def ovs_bridges() -> list[str]:
    res = subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"], capture_output=True,
                         text=True, check=False)
    return res.stdout.split() if res.returncode == 0 else []


def remove_network_leftovers(nodes: list[str], bridges: list[str]) -> list[str]:
    """Delete our bridges and any root-namespace interface of our nodes; what was removed."""
    removed = []
    present_ovs = set(ovs_bridges())
    for br in bridges:
        if br in present_ovs:
            subprocess.run(["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", br],
                           check=False, capture_output=True)
            removed.append(f"ovs:{br}")
    names = set(nodes)
    for intf in root_interfaces():
        owner = intf.split("-", 1)[0]
        if intf in names or (owner in names and "-" in intf):
            subprocess.run(["ip", "link", "del", intf], check=False, capture_output=True)
            removed.append(f"intf:{intf}")
    return removed


def sweep_stale() -> list[str]:
    """Undo what crashed runs left behind; returns a description of what was removed."""
    removed: list[str] = []
    if not STATE_DIR.is_dir():
        return removed
    for f in sorted(STATE_DIR.glob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            f.unlink(missing_ok=True)
            continue
        runner = int(data.get("runner", 0))
        if _alive(runner) and _cmdline(runner)[:200] == data.get("runner_cmd"):
            continue
        n = _kill_procs(data.get("procs", []))
        removed.append(f"state of dead runner {runner}" + (f" ({n} processes)" if n else ""))
        removed += remove_network_leftovers(data.get("nodes", []), data.get("bridges", []))
        f.unlink(missing_ok=True)
    return removed
