"""What a run made, written down before it is made, so that a run killed outright can be
undone by the next one.

Each runner process keeps a state file ``/run/pubsublab/<pid>.json`` naming its cgroup
(which holds every process the run starts, see :mod:`experiments.emulation.cgroups`), the
Mininet node names it is about to create, the OVS bridges, and the JSON files whose
``status`` says how the run ended (its manifest). A teardown that removed everything
deletes the file; one that could not keeps it. The machine lock (one emulation at a
time) is held from before the state file is made until after it is deleted, so a state
file found by a run holding the lock belongs to a run that is over. At the start of
every run such files are swept: every process in the group killed and the group
removed, which also frees the hosts' network namespaces and the interfaces in them;
root-namespace interfaces ``<node>-eth*`` and bridges deleted, and the v1 cgroups of
CPU-limited hosts; a status file still saying ``running`` set to ``killed``. Only our
own names are touched, never another tool's (unlike ``mn -c``). A state file is deleted
only once its sweep left nothing; else it stays, and the next run tries again.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from experiments.emulation.cgroups import RunCgroup, remove_host_groups
from experiments.emulation.cluster import Servers, control_paths, undo_server
from nodes.runfolder import read_json, write_json

STATE_DIR = Path(os.environ.get("PUBSUBLAB_STATE_DIR", "/run/pubsublab"))
KILLED = "killed"  # the status a swept run's status files get


class RunState:
    """The state file of this runner process: its cgroup (``cgroup``, a path) and the
    files whose ``status`` the sweep sets to ``killed`` if the run dies (``status_files``),
    then the names added as the network is built."""

    def __init__(self, cgroup: Path, status_files: Sequence[Path] = ()) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.path = STATE_DIR / f"{os.getpid()}.json"
        cmdline = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ")
        self.data: dict[str, Any] = {"runner": os.getpid(),  # for whoever reads the file
                                     "runner_cmd": cmdline.decode(errors="replace")[:200],
                                     "cgroup": str(cgroup),
                                     "status_files": [str(p) for p in status_files],
                                     "nodes": [], "bridges": []}
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)

    def add_nodes(self, names: list[str]) -> None:
        self.data["nodes"] = sorted(set(self.data["nodes"]) | set(names))
        self._save()

    def add_servers(self, entries: list[dict[str, Any]]) -> None:
        """The run's groups on other servers (``server``, ``group``, ``ssh_config``),
        named before they are made (:mod:`experiments.emulation.cluster`)."""
        self.data["servers"] = entries
        self._save()

    def add_bridges(self, names: list[str]) -> None:
        self.data["bridges"] = sorted(set(self.data["bridges"]) | set(names))
        self._save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


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


def network_leftovers(nodes: list[str], bridges: list[str]) -> list[str]:
    """Those of our bridges, and root-namespace interfaces of our nodes, that exist."""
    names = set(nodes)
    present = [f"ovs:{br}" for br in set(ovs_bridges()) & set(bridges)]
    for intf in root_interfaces():
        owner = intf.split("-", 1)[0]
        if intf in names or (owner in names and "-" in intf):
            present.append(f"intf:{intf}")
    return sorted(present)


def remove_network_leftovers(nodes: list[str], bridges: list[str]) -> list[str]:
    """Delete our bridges and any root-namespace interface of our nodes; what was removed."""
    removed = network_leftovers(nodes, bridges)
    for item in removed:
        kind, name = item.split(":", 1)
        cmd = (["ovs-vsctl", "--timeout=10", "--if-exists", "del-br", name] if kind == "ovs"
               else ["ip", "link", "del", name])
        subprocess.run(cmd, check=False, capture_output=True)
    return removed


def undo_run(state: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Remove what the run of ``state`` (a state file's content) left: what was removed,
    and what is still there after trying."""
    removed, left = [], []
    if state.get("cgroup"):
        cgroup = RunCgroup(Path(state["cgroup"]))
        try:
            n = cgroup.kill()
            cgroup.remove()
            if n:
                removed.append(f"{n} processes")
        except (OSError, RuntimeError) as exc:
            left.append(f"cgroup {cgroup.path}: {exc}")
    nodes, bridges = state.get("nodes", []), state.get("bridges", [])
    for entry in state.get("servers", []):
        cfg = entry.get("ssh_config")
        servers = Servers((entry["server"],), None if cfg is None else Path(cfg))
        there, left_there = undo_server(servers, entry["server"], entry["group"], nodes)
        removed += there
        left += left_there
    for sock in control_paths(int(state.get("runner", 0))) if state.get("servers") else ():
        sock.unlink(missing_ok=True)  # a killed runner's shared SSH connections
    removed += remove_network_leftovers(nodes, bridges)
    removed += remove_host_groups(nodes)
    left += network_leftovers(nodes, bridges)
    return removed, left


def _mark_killed(path: Path) -> None:
    """Set ``status`` to ``killed``, and ``swept`` to the time of the sweep, in a JSON file
    that still says ``running``."""
    try:
        doc = read_json(path)
    except (OSError, ValueError):
        return
    if isinstance(doc, dict) and doc.get("status") == "running":
        doc.update(status=KILLED, swept=datetime.now().isoformat(timespec="seconds"))
        write_json(path, doc)


def sweep_stale(log: Callable[[str], None]) -> None:
    """Undo what runs that are over left behind (call it holding the machine lock): mark
    their status files ``killed`` where they say ``running``, remove their processes,
    groups, interfaces and bridges, and delete each state file whose sweep left nothing."""
    if not STATE_DIR.is_dir():
        return
    for f in sorted(STATE_DIR.glob("*.json")):
        if not f.stem.isdigit():
            continue  # not a runner's state: other files live here too (the live run)
        try:
            state = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            f.unlink(missing_ok=True)
            continue
        for status_file in state.get("status_files", []):
            _mark_killed(Path(status_file))
        removed, left = undo_run(state)
        runner = state.get("runner")
        if left:
            log(f"WARNING could not clean up after earlier run {runner}: {', '.join(left)} "
                f"remain; its state stays in {f} for the next run to retry")
            continue
        f.unlink(missing_ok=True)
        log(f"cleaned leftovers of an earlier run (runner {runner}): "
            f"{', '.join(removed) or 'nothing was left'}")
