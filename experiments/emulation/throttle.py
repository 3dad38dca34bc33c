"""Change an overlay link's rate on a live network, from anywhere on the machine.

`sudo pubsublab throttle A B --bw-mbps R` finds the Mininet hosts of brokers A and B by
their shells (``bash ... mininet:A``), finds the two ends of their own link (in
overlay-as-links mode each overlay edge is a host-to-host link with its own /30, so the
ends are the interfaces of A and B that share a subnet), and changes the HTB class that
shapes each end. Queued packets are kept: this is ``tc class change``, not a rebuild.
It works while a run is live (for example from a second terminal during
``pubsublab run SPEC --cli``) and is what a spec's scheduled link changes use.

It refuses a broker named twice and a rate outside :data:`MIN_MBPS`..:data:`MAX_MBPS`
(the bounds of a spec's ``link_schedule``), in one line, before touching anything. While
a run's workload runs (:func:`live_run`), each manual throttle is appended to the run
folder's ``throttles.jsonl``, and the runner puts every link so changed back to its
configured rate before and after each algorithm (:func:`restore_manual`) and lists the
throttles in the summaries and the manifest: a manual change is an undeclared fault,
never a silent one, and it does not carry into the next algorithm.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.emulation.cluster import Servers
from experiments.emulation.leftovers import STATE_DIR
from experiments.spec import MAX_LINK_MBPS, MIN_LINK_MBPS, LinkChange
from nodes.logs import iter_jsonl
from nodes.runfolder import THROTTLES, read_json, write_json

HTB_PARENT = "5:0"  # Mininet's TCIntf layout: root qdisc 5:0, one class 5:1
HTB_CLASS = "5:1"
# The run whose workload runs now: its folder and its runner's pid (see live_run), as
# JSON; not named *.json, which in STATE_DIR are the runners' own state files.
LIVE_RUN = STATE_DIR / "live-run"


class ShellPid(int):
    """The pid of a Mininet host's shell on another server of the live run: an int, so
    that a link's ends stay (pid, interface), that also knows how to reach its server."""

    servers: Servers
    server: str

    def __new__(cls, pid: int, servers: Servers, server: str) -> ShellPid:
        obj = super().__new__(cls, pid)
        obj.servers, obj.server = servers, server
        return obj


def _remote_shell(name: str) -> ShellPid | None:
    """The shell of host ``name`` if the live run placed it on another server."""
    server = (_live().get("placement") or {}).get(name, "localhost")
    if server == "localhost":
        return None
    cfg = _live().get("ssh_config")
    servers = Servers((server,), None if cfg is None else Path(cfg))
    # Mininet's host shell, exactly: mnexec ... env PS1=.. bash --norc --noediting -is NAME
    res = servers.run(server, "pgrep -o -x -f " + shlex.quote(
        f"bash --norc --noediting -is mininet:{name}"))
    if not res.stdout.strip().isdigit():
        raise LookupError(f"no Mininet host named {name!r} is running on server {server}")
    return ShellPid(int(res.stdout), servers, server)


def mininet_host_pid(name: str) -> int:
    """The pid of the shell of Mininet host ``name`` (LookupError if none runs): on this
    machine, or, where the live run placed it on another server, there (a
    :class:`ShellPid`)."""
    remote = _remote_shell(name)
    if remote is not None:
        return remote
    marker = f"mininet:{name}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in args and b"bash" in args[0]:
            return int(d.name)
    raise LookupError(f"no Mininet host named {name!r} is running")


def _in_ns(pid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = ["mnexec", "-a", str(int(pid)), *argv]
    if isinstance(pid, ShellPid):
        return pid.servers.run(pid.server, shlex.join(cmd))
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _addresses(pid: int) -> list[tuple[str, ipaddress.IPv4Interface]]:
    out = _in_ns(pid, ["ip", "-o", "-4", "addr", "show"]).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "inet" and parts[1] != "lo":
            found.append((parts[1], ipaddress.IPv4Interface(parts[3])))
    return found


def link_interfaces(a: str, b: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """((pid, interface) of a, (pid, interface) of b) for the link joining a and b."""
    pa, pb = mininet_host_pid(a), mininet_host_pid(b)
    addresses_b = _addresses(pb)
    for ia, addr_a in _addresses(pa):
        for ib, addr_b in addresses_b:
            if addr_a.network == addr_b.network and addr_a.network.prefixlen >= 30:
                return (pa, ia), (pb, ib)
    raise LookupError(f"{a} and {b} share no host-to-host link (throttling needs an "
                      "overlay-as-links topology: mode: overlay)")


def set_rate(pid: int, intf: str, bw_mbps: float) -> None:
    """Set the HTB rate of ``intf`` in the namespace of ``pid`` (adding HTB if the link
    was unshaped)."""
    rate = ["htb", "rate", f"{bw_mbps:g}Mbit", "burst", "15k", "quantum", "200000"]
    res = _in_ns(pid, ["tc", "class", "change", "dev", intf, "parent", HTB_PARENT,
                       "classid", HTB_CLASS, *rate])
    if res.returncode == 0:
        return
    for argv in (["tc", "qdisc", "add", "dev", intf, "root", "handle", HTB_PARENT, "htb",
                  "default", "1"],
                 ["tc", "class", "add", "dev", intf, "parent", HTB_PARENT, "classid",
                  HTB_CLASS, *rate]):
        res = _in_ns(pid, argv)
        if res.returncode != 0:
            raise RuntimeError(f"tc on {intf}: {res.stderr.strip()}")


def configured_mbps(configured: Mapping[tuple[str, str], float | None], a: str, b: str
                    ) -> float:
    """The rate (Mbit/s) that puts link a-b back as configured: its configured rate in
    either order, or, for an unshaped link, one no overlay link reaches (its HTB class
    stays, which is simpler than removing it)."""
    return configured.get((a, b)) or configured.get((b, a)) or MAX_LINK_MBPS


@contextlib.contextmanager
def live_run(run_dir: Path, placement: Mapping[str, str] | None = None,
             ssh_config: Path | None = None) -> Iterator[None]:
    """While the body runs, :func:`throttle` records each change in ``run_dir``, and
    finds the hosts the run placed on other servers there (``placement``, reached with
    ``ssh_config``)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    write_json(LIVE_RUN, {"run_dir": str(run_dir), "runner": os.getpid(),
                          **({"placement": dict(placement),
                              "ssh_config": None if ssh_config is None else str(ssh_config)}
                             if placement else {})})
    try:
        yield
    finally:
        LIVE_RUN.unlink(missing_ok=True)


def _live() -> dict[str, Any]:
    """The live run's record ({} if none: a killed runner's stale record is ignored)."""
    live = read_json(LIVE_RUN)
    if not isinstance(live, dict) or not Path(f"/proc/{live.get('runner')}").exists():
        return {}
    return live


def _live_run_dir() -> Path | None:
    """The folder of the run whose workload runs now, if any."""
    live = _live()
    return Path(live["run_dir"]) if live else None


def throttle(a: str, b: str, bw_mbps: float) -> dict[str, Any]:
    """Set the rate of the link between brokers a and b, both directions; record it in
    the live run's folder if a run's workload runs (``recorded_in``: the file, or None).
    ValueError, before anything changes, for a broker named twice or a rate out of
    bounds."""
    if a == b:
        raise ValueError(f"{a} {b}: the same broker twice; name the two brokers of one "
                         "overlay link, e.g. a0 a1")
    if not MIN_LINK_MBPS <= bw_mbps <= MAX_LINK_MBPS:
        raise ValueError(f"--bw-mbps: bad value {bw_mbps:g}; allowed: {MIN_LINK_MBPS:g} to "
                         f"{MAX_LINK_MBPS:g} Mbit/s")
    ends = link_interfaces(a, b)
    for pid, intf in ends:
        set_rate(pid, intf, bw_mbps)
    result: dict[str, Any] = {"a": a, "b": b, "bw_mbps": bw_mbps,
                              "interfaces": [i for _, i in ends], "recorded_in": None}
    run_dir = _live_run_dir()
    if run_dir is not None:
        path = run_dir / THROTTLES
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({**result, "t_wall": time.time()}, sort_keys=True) + "\n")
        result["recorded_in"] = str(path)
    return result


def restore_manual(run_dir: Path, configured: Mapping[tuple[str, str], float | None],
                   log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Put every link a manual throttle recorded in ``run_dir`` changed back to its
    configured rate (a failure is logged, so the caller's own cleanup still runs); the
    throttles recorded so far, oldest first (``t_wall``: when each took effect)."""
    throttles = list(iter_jsonl(run_dir / THROTTLES))
    for a, b in sorted({(t["a"], t["b"]) for t in throttles}):
        bw = configured_mbps(configured, a, b)
        try:
            for pid, intf in link_interfaces(a, b):
                set_rate(pid, intf, bw)
        except Exception as exc:  # the caller must still stop its brokers
            log(f"WARNING link {a}-{b}: could not undo a manual throttle: {exc}")
    return throttles


class ScheduledRates:
    """A spec's ``link_schedule`` carried out on the live network.

    :meth:`start` finds both ends of every scheduled link at once (so a link that cannot
    be throttled fails the run before its workload starts, instead of leaving a
    comparison without its congestion), then one timer thread per distinct time fires at
    ``t0_wall + at_s`` (``t0_wall``: the Unix time the workload's t = 0 stands for) and
    only runs ``tc``. :meth:`stop` cancels what has not fired and puts every link it
    touched back to its configured rate, so the next algorithm of a run starts on the same
    network. ``applied`` lists what happened, in schedule order, for the summary: the
    change, when it took effect (seconds on the workload clock) and the interfaces, or the
    error."""

    def __init__(self, changes: Sequence[LinkChange], configured_mbps: Mapping[tuple[str, str],
                 float | None], t0_wall: float, log: Callable[[str], None]) -> None:
        self._changes = list(changes)
        self._configured = configured_mbps
        self._t0_wall = t0_wall
        self._log = log
        self._ends: dict[tuple[str, str], tuple[tuple[int, str], tuple[int, str]]] = {}
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._touched: set[tuple[str, str]] = set()
        self._applied: dict[int, dict[str, object]] = {}

    @property
    def applied(self) -> list[dict[str, object]]:
        with self._lock:
            return [self._applied[i] for i in sorted(self._applied)]

    def start(self) -> None:
        """Resolve every scheduled link's interfaces (LookupError if one has no
        host-to-host link) and start the timers."""
        for c in self._changes:
            if (c.a, c.b) not in self._ends:
                self._ends[(c.a, c.b)] = link_interfaces(c.a, c.b)
        by_time: dict[float, list[int]] = {}
        for i, c in enumerate(self._changes):
            by_time.setdefault(c.at_s, []).append(i)
        for at_s, indices in sorted(by_time.items()):
            delay_s = max(0.0, self._t0_wall + at_s - time.time())
            timer = threading.Timer(delay_s, self._fire, args=(indices,))
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _fire(self, indices: list[int]) -> None:
        for i in indices:
            c = self._changes[i]
            ends = self._ends[(c.a, c.b)]
            entry: dict[str, object] = {"at_s": c.at_s, "a": c.a, "b": c.b,
                                        "bw_mbps": c.bw_mbps, "interfaces": [f for _, f in ends]}
            with self._lock:
                self._touched.add((c.a, c.b))  # restored even if only one end changed
            try:
                for pid, intf in ends:
                    set_rate(pid, intf, c.bw_mbps)
                entry["applied_at_s"] = round(time.time() - self._t0_wall, 3)
                self._log(f"link {c.a}-{c.b} set to {c.bw_mbps:g} Mbit/s at "
                          f"t = {entry['applied_at_s']} s")
            except Exception as exc:  # a timer thread must report its failure, not die
                entry["error"] = str(exc)
                self._log(f"WARNING link {c.a}-{c.b}: scheduled rate change failed: {exc}")
            with self._lock:
                self._applied[i] = entry

    def stop(self) -> None:
        """Cancel what has not fired; restore every touched link (errors are logged, so
        that the caller's own cleanup still runs)."""
        for timer in self._timers:
            timer.cancel()
        for timer in self._timers:
            timer.join()
        with self._lock:
            touched = sorted(self._touched)
        for a, b in touched:
            bw = configured_mbps(self._configured, a, b)
            try:
                for pid, intf in self._ends[(a, b)]:
                    set_rate(pid, intf, bw)
            except Exception as exc:  # the caller must still stop its brokers
                self._log(f"WARNING link {a}-{b}: could not restore {bw:g} Mbit/s: {exc}")
