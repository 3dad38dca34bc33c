"""The SDN controller process of a run (``controller: os-ken`` in a spec).

:class:`~experiments.emulation.network.Emulation` owns it: it is started on the root namespace
after the machine lock is taken and before the network is built, listening on
127.0.0.1 on a port free at that moment (the lock keeps other runs' controllers out,
a free port keeps out whatever else listens on 6653); as a member of the run's cgroup
it is killed by the next run if this one is killed; the switches are waited for
through the registry the controller writes (``datapaths.json``: the handshake has
completed and the table-miss flow is installed); it is ended by pid at teardown.

Start-up time is measured from process start to the listening socket appearing in
``/proc/net/tcp``: watching the kernel's table avoids connecting to the controller, which
would count as a switch that never finished its handshake.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller import (
    IDLE_TIMEOUT_S,
    LOG_FILE,
    MAX_MACS_PER_DPID,
    PACKET_IN_RATE_HZ,
    POLL_S,
    PORT_STATS_FILE,
    REGISTRY_FILE,
)

LISTEN_HOST = "127.0.0.1"
TCP_LISTEN = "0A"  # socket state LISTEN in /proc/net/tcp


def free_port(host: str = LISTEN_HOST) -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def listening(host: str, port: int) -> bool:
    """Whether a socket of this network namespace listens on ``host:port`` (IPv4)."""
    # The kernel prints the address as a native-endian number of its network-order bytes.
    want = f"{int.from_bytes(socket.inet_aton(host), sys.byteorder):08X}:{port:04X}"
    with open("/proc/net/tcp") as fh:
        next(fh)
        return any(parts[1] == want and parts[3] == TCP_LISTEN
                   for parts in (line.split() for line in fh))


def read_registry(out_dir: Path) -> dict[str, Any]:
    """The controller's datapath registry (see :mod:`controller.l2_monitor`); empty until
    the controller has written it."""
    try:
        return json.loads((out_dir / REGISTRY_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


class ControllerProcess:
    """One controller process writing into ``out_dir`` (``<run>/controller``)."""

    def __init__(self, out_dir: Path, *, log: Callable[[str], None], poll_s: float = POLL_S,
                 idle_timeout_s: int = IDLE_TIMEOUT_S, max_macs: int = MAX_MACS_PER_DPID,
                 packet_in_rate_hz: float = PACKET_IN_RATE_HZ) -> None:
        self.out_dir = out_dir
        self.log = log
        self.settings = {"poll_s": poll_s, "idle_timeout_s": idle_timeout_s,
                         "max_macs": max_macs, "packet_in_rate_hz": packet_in_rate_hz}
        self.host = LISTEN_HOST
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self._t_start = 0.0
        self.startup_s: float | None = None
        self.connect_s: float | None = None

    def start(self) -> int:
        """Start the controller process; its pid (record it before waiting on it)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        argv = [sys.executable, "-m", "controller.launch", "--dir", str(self.out_dir),
                "--host", self.host, "--port", str(self.port)]
        for name, value in self.settings.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        self._t_start = time.monotonic()
        with open(self.out_dir / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=err, stderr=err, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        return self.pid

    def wait_listening(self, timeout_s: float = 30.0) -> float:
        """Seconds from start to listening; RuntimeError with the tail of its log if it
        exits or does not listen in time."""
        if self.proc is None:
            raise RuntimeError("the controller is not running")
        t0 = self._t_start
        while not listening(self.host, self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"the controller exited with status {self.proc.returncode} "
                                   f"during start-up: {self._tail()}")
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"the controller did not listen on {self.host}:{self.port} "
                                   f"within {timeout_s:.0f} s: {self._tail()}")
            time.sleep(0.01)
        self.startup_s = time.monotonic() - t0
        self.log(f"controller (os-ken, pid {self.pid}) listening on "
                 f"{self.host}:{self.port} after {self.startup_s:.2f} s")
        return self.startup_s

    def _tail(self, lines: int = 5) -> str:
        text = ""
        for name in ("stderr.log", LOG_FILE):
            with contextlib.suppress(OSError):
                text += (self.out_dir / name).read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"

    def wait_connected(self, dpids: dict[str, str], *, since_mono: float,
                       timeout_s: float = 30.0) -> float:
        """Seconds from ``since_mono`` (when the switches were started) until every switch
        (name → dpid, 16 hex digits) is connected; RuntimeError naming the missing ones
        on timeout or if the controller exits."""
        if self.proc is None:
            raise RuntimeError("the controller is not running")
        t0 = since_mono
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the controller exited with status {self.proc.returncode}: "
                                   f"{self._tail()}")
            connected = read_registry(self.out_dir).get("connected", {})
            missing = sorted(f"{name} (dpid {dpid})" for name, dpid in dpids.items()
                             if dpid not in connected)
            if not missing:
                self.connect_s = time.monotonic() - t0
                self.log(f"{len(dpids)} switches connected to the controller in "
                         f"{self.connect_s:.2f} s")
                return self.connect_s
            if time.monotonic() - t0 > timeout_s:
                raise RuntimeError(f"switches not connected to the controller after "
                                   f"{timeout_s:.0f} s: {', '.join(missing)} (log: "
                                   f"{self.out_dir / LOG_FILE})")
            time.sleep(0.05)

    def summary(self) -> dict[str, Any]:
        """What the manifest records about the controller."""
        return {"kind": "os-ken", "pid": self.pid,
                "listen": f"{self.host}:{self.port}", **self.settings,
                "startup_s": None if self.startup_s is None else round(self.startup_s, 3),
                "connect_s": None if self.connect_s is None else round(self.connect_s, 3),
                "files": {"log": str(self.out_dir / LOG_FILE),
                          "port_stats": str(self.out_dir / PORT_STATS_FILE),
                          "registry": str(self.out_dir / REGISTRY_FILE)}}

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the process by pid (SIGTERM, then SIGKILL); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
