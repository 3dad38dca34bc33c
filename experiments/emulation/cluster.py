"""One emulated network on several servers, built with Mininet's cluster edition.

Mininet ships it with its examples (``mininet.examples.cluster``): ``RemoteMixin`` makes
any node class run its shell on another server over SSH (``mnexec`` there, attached to
the node's namespace), and ``RemoteLink`` makes the two ends of a link wherever their
nodes are, through a tunnel when the servers differ. This module adds only what our
networks need on top of it:

- **The tunnel.** The cluster edition carries cross-server links in SSH Ethernet
  tunnels (TCP in TCP, and the encryption costs the CPU a run spreads out to save) or in
  GRE. This kernel has no ``gretap`` (``ip link add ... type gretap``: "Unknown device
  type"); VXLAN, the kernel's other Ethernet-in-UDP tunnel, is there, so
  our link class (:func:`node_classes`) is ``RemoteGRELink``'s way with VXLAN (UDP port
  :data:`VXLAN_PORT`, one network identifier per link): each end is made in its server's
  root namespace and moved into the node's. Its interfaces are Mininet's TC interfaces,
  so HTB shapes a cross-server link's rate as it shapes every other link's; delay and
  loss are the brokers' as everywhere on this kernel (no netem). The tunnel's 50 bytes
  of headers leave 1450 of a 1500-byte underlay for a frame, so every interface of the
  run gets MTU :data:`TUNNEL_MTU` (as Mininet's GRE link does) and TCP sizes its
  segments to it on every path alike.
- **SSH.** :class:`Servers` holds the command every SSH connection starts with:
  ``BatchMode`` (never a password prompt), and ``-F FILE`` when the run names a client
  configuration (the test's servers have their own keys and host keys). Mininet's
  classes take it as their ``sshbase``.
- **The run's group on each server.** A process on another server is not a child of
  this one, so the run's cgroup here does not hold it. Each remote server gets a group
  of its own, ``pubsublab/<runner pid>-<server>`` in its cgroup2 hierarchy, named in the
  run's state file before it is made; every remote host shell and every process started
  there (:class:`RemoteProcess`) writes itself into it first. Teardown, and the next
  run's sweep after a killed one, kill that group through SSH and delete our interfaces
  and bridges on the server (:func:`undo_server`), as :mod:`experiments.emulation.leftovers`
  does here.
- **Signals.** A process on another server is started through ``ssh``; signalling the
  local ``ssh`` would not reach it. :class:`RemoteProcess` sends SIGTERM, SIGINT and
  SIGKILL to the remote pid (which the process wrote to a file on its server first).

What the servers must share: the run folder's path (brokers and clients write their
logs and statuses there; a file system all servers mount, as the lab VMs' ``/vagrant``),
and the same pubsublab checkout and Python at the same path (``pubsublab doctor
--servers`` checks both).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VXLAN_PORT = 4789  # IANA's VXLAN port
TUNNEL_MTU = 1450  # 1500 less VXLAN's outer Ethernet, IP, UDP and VXLAN headers
SSH_TIMEOUT_S = 20.0
# The shared connections' sockets, per process that opens them; %C hashes this user, the
# server and its port. A SIGKILLed runner's stay behind, for the next run's sweep.
CONTROL_DIR = Path("/tmp")


def control_paths(runner_pid: int) -> list[Path]:
    """The control sockets a runner's SSH connections made (:meth:`Servers.ssh_base`)."""
    return sorted(CONTROL_DIR.glob(f"pubsublab-ssh-{runner_pid}-*"))
PID_WAIT_S = 10.0  # how long a remote process has to write its pid file
REMOTE_STATE = "/run/pubsublab/remote"  # pid files of remote processes, per run group
# How a process enters its node: mnexec -a without Mininet's usual -d. The cluster
# edition starts every process in a process group of its own (RemoteMixin._popen), and
# mnexec -d forks when it leads one: its parent would exit at once, so the process would
# look ended (and a remote one's ssh session would close) while it runs on.
MNEXEC = ("mnexec", "-a")
_CGROUP2 = "$(awk '$3 == \"cgroup2\" {print $2; exit}' /proc/mounts)"


@dataclass(frozen=True)
class Servers:
    """The servers of one run: ``names`` (``localhost`` among them) and the SSH client
    configuration file to reach the others (None: the user's own)."""

    names: tuple[str, ...]
    ssh_config: Path | None = None

    @property
    def remote(self) -> tuple[str, ...]:
        return tuple(s for s in self.names if s != "localhost")

    def control_path(self) -> str:
        """The socket of this process's shared connections (%C: user, server and port)."""
        return f"{CONTROL_DIR}/pubsublab-ssh-{os.getpid()}-%C"

    def ssh_base(self, control_master: str = "no") -> list[str]:
        """How every SSH connection of the run starts (without the destination). Each
        goes through the server's shared connection when one is open (:meth:`master`),
        so that a command there (a throttle's tc, a signal) costs a round trip rather
        than a key exchange, and connects by itself otherwise. None of them is ever the
        shared one (``control_master`` is ``yes`` only for :meth:`master`): a node's shell
        that were would, when Mininet ends it, wait for every other shell's session to
        close while Mininet waits for it to exit."""
        cfg = ["-F", str(self.ssh_config)] if self.ssh_config is not None else []
        return ["ssh", "-q", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S:g}",
                "-o", f"ControlMaster={control_master}",
                "-o", f"ControlPath={self.control_path()}", *cfg]

    def argv(self, server: str, script: str) -> list[str]:
        """The command that runs the shell ``script`` as root on ``server``."""
        return [*self.ssh_base(), f"root@{server}", "sh", "-c", shlex.quote(script)]

    def master(self, server: str) -> subprocess.Popen[bytes]:
        """Open the shared connection to ``server`` (no command of its own) and return
        once it takes sessions; RuntimeError in one line if it does not within the SSH
        timeout. Ending the process closes it and every session it carries."""
        argv = [*self.ssh_base("yes"), "-o", "ControlPersist=no", "-N", f"root@{server}"]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        check = [*self.ssh_base(), "-O", "check", f"root@{server}"]
        deadline = time.monotonic() + SSH_TIMEOUT_S
        while subprocess.run(check, capture_output=True, check=False).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.communicate()[1].decode(errors="replace").strip()
                raise RuntimeError(f"server {server}: no shared SSH connection: "
                                   f"{err or 'it did not come up'}")
            time.sleep(0.05)
        return proc

    def run(self, server: str, script: str, timeout_s: float = SSH_TIMEOUT_S
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(server, script), capture_output=True, text=True,
                              timeout=timeout_s, check=False)


def server_ip(server: str) -> str:
    """The IPv4 address of ``server`` (a name is looked up); ValueError if it has none."""
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", server):
        return server
    out = subprocess.run(["getent", "ahostsv4", server], capture_output=True, text=True,
                         check=False).stdout.split()
    if not out:
        raise ValueError(f"servers: {server!r} has no IPv4 address (getent ahostsv4)")
    return out[0]


def local_ip_towards(address: str) -> str:
    """This machine's source address for packets to ``address`` (its route's ``src``)."""
    out = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True,
                         check=False).stdout
    m = re.search(r"\bsrc (\S+)", out)
    if m is None:
        raise ValueError(f"servers: no route from this machine to {address}")
    return m.group(1)


def group_name(runner_pid: int, server: str) -> str:
    """The run's group on ``server`` (``pubsublab/<name>`` in its cgroup2 hierarchy): the
    server in the name keeps two groups apart when two servers share one kernel."""
    return f"{runner_pid}-{re.sub(r'[^A-Za-z0-9.-]', '_', server)}"


def make_server_group(servers: Servers, server: str, name: str) -> None:
    """Make the run's group and pid-file folder on ``server``; RuntimeError in one line
    naming the server if it cannot."""
    script = (f"set -e; G={_CGROUP2}/pubsublab/{name}; [ -n \"{_CGROUP2}\" ]; "
              f"mkdir -p \"$G\"; [ -e \"$G/cgroup.kill\" ]; mkdir -p {REMOTE_STATE}/{name}")
    res = servers.run(server, script)
    if res.returncode != 0:
        raise RuntimeError(f"server {server}: cannot make the run's cgroup there (cgroup2 "
                           f"with cgroup.kill, Linux 5.14+): {res.stderr.strip() or 'ssh failed'}")


def join_script(name: str, pid: int | str = "$$") -> str:
    """Shell words that put process ``pid`` (by default the calling shell) into the run's
    group on its server."""
    return f"echo {pid} > {_CGROUP2}/pubsublab/{name}/cgroup.procs"


def undo_server(servers: Servers, server: str, name: str, nodes: Sequence[str]
                ) -> tuple[list[str], list[str]]:
    """On ``server``: kill the run's group and remove it, its pid files, and every
    root-namespace interface or bridge named for one of ``nodes`` (``<node>`` or
    ``<node>-...``). What was removed and what is left, each prefixed by the server."""
    names = " ".join(shlex.quote(n) for n in nodes)
    script = f"""G={_CGROUP2}/pubsublab/{name}
if [ -d "$G" ]; then
  n=$(wc -l < "$G/cgroup.procs"); echo 1 > "$G/cgroup.kill"; i=0
  while grep -q '^populated 1' "$G/cgroup.events" && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
  rmdir "$G" 2>/dev/null && echo "removed $n processes"
  [ -d "$G" ] && echo "left cgroup $G"
fi
rm -rf {REMOTE_STATE}/{name}
for i in $(ip -o link show | awk -F': ' '{{print $2}}' | cut -d@ -f1); do
  for n in {names}; do
    case "$i" in "$n"|"$n"-*) ip link del "$i" 2>/dev/null && echo "removed intf:$i";; esac
  done
done
for i in $(ip -o link show | awk -F': ' '{{print $2}}' | cut -d@ -f1); do
  for n in {names}; do case "$i" in "$n"|"$n"-*) echo "left intf:$i";; esac; done
done
"""
    try:
        res = servers.run(server, script, timeout_s=60.0)
    except subprocess.TimeoutExpired:
        return [], [f"{server}: no answer over ssh within 60 s"]
    if res.returncode == 255:  # ssh's own failure: the server was not reached
        return [], [f"{server}: unreachable over ssh ({res.stderr.strip() or 'no reason'})"]
    removed, left = [], []
    for line in res.stdout.splitlines():
        kind, _, what = line.partition(" ")
        (removed if kind == "removed" else left).append(f"{server}: {what}")
    return removed, left


class RemoteProcess:
    """A process on another server, started through ``ssh``: ``local`` is the ``ssh``
    here (its exit is the process's), signals go to the remote pid. ``pid`` is the local
    ``ssh``'s, so that what samples this machine's processes sees what runs here."""

    def __init__(self, local: subprocess.Popen[bytes], servers: Servers, server: str,
                 pid_file: str) -> None:
        self.local = local
        self.servers = servers
        self.server = server
        self.pid_file = pid_file
        self._remote_pid: int | None = None

    @property
    def pid(self) -> int:
        return self.local.pid

    @property
    def args(self) -> Any:
        return self.local.args

    @property
    def returncode(self) -> int | None:
        return self.local.returncode

    def poll(self) -> int | None:
        return self.local.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.local.wait(timeout)

    def communicate(self, input: bytes | None = None, timeout: float | None = None
                    ) -> tuple[bytes | None, bytes | None]:
        return self.local.communicate(input, timeout)

    def remote_pid(self) -> int | None:
        """The process's pid on its server (None if it never wrote it: it did not start)."""
        deadline = time.monotonic() + PID_WAIT_S
        while self._remote_pid is None and time.monotonic() < deadline:
            out = self.servers.run(self.server, f"cat {self.pid_file} 2>/dev/null").stdout
            if out.strip().isdigit():
                self._remote_pid = int(out)
            elif self.local.poll() is not None:
                break
            else:
                time.sleep(0.05)
        return self._remote_pid

    def send_signal(self, sig: int) -> None:
        if self.local.poll() is not None:
            return
        pid = self.remote_pid()
        if pid is not None:
            self.servers.run(self.server, f"kill -{int(sig)} {pid} 2>/dev/null")

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        if self.local.poll() is None:
            self.local.kill()


def remote_argv(argv: Sequence[str], node_pid: int, name: str, pid_file: str) -> list[str]:
    """The words a remote shell reads (SSH joins them with spaces) to run ``argv`` in the
    namespace of the node whose shell is ``node_pid``, after joining the run's group and
    writing its pid to ``pid_file``: both before ``mnexec`` enters the node, whose
    namespace has a /sys of its own without the cgroup mount. (:data:`MNEXEC` says why
    not ``mnexec -d``.)"""
    script = f"{join_script(name)} && echo $$ > {pid_file} && exec \"$@\""
    return [shlex.quote(a) for a in ("sh", "-c", script, "sh", *MNEXEC, str(node_pid),
                                     *argv)]


def node_classes(servers: Servers, local_ip: dict[str, str]) -> tuple[Any, Any, Any]:
    """Mininet's remote-capable host and Linux-bridge classes with our SSH command, and
    the link class: Mininet's cluster link with TC interfaces, a veth pair when both
    nodes are on one server, else a VXLAN tunnel between the ``local_ip`` addresses of
    the two servers (module docstring)."""
    from mininet.examples.cluster import RemoteHost, RemoteLink, RemoteMixin
    from mininet.link import Link
    from mininet.nodelib import LinuxBridge

    from topologies.mininet_topo import HighBwTCLink

    base = [*servers.ssh_base(), "-tt"]  # Mininet's shells want a terminal; popen drops -tt

    class Host(RemoteHost):
        sshbase = base

    class Bridge(RemoteMixin, LinuxBridge):
        sshbase = base

    vni = iter(range(1, 2**24))  # VXLAN network identifiers, one per cross-server link

    class VxlanTCLink(RemoteLink, HighBwTCLink):
        def __init__(self, node1: Any, node2: Any, **kwargs: Any) -> None:
            self.node1, self.node2, self.tunnel, self.cmd = node1, node2, None, None
            # TCLink's constructor: RemoteLink's would skip it and its TC interfaces.
            HighBwTCLink.__init__(self, node1, node2, **kwargs)

        def makeIntfPair(self, intfname1: str, intfname2: str,
                         addr1: str | None = None, addr2: str | None = None,
                         node1: Any = None, node2: Any = None,
                         deleteIntfs: bool = True) -> None:
            node1 = self.node1 if node1 is None else node1
            node2 = self.node2 if node2 is None else node2
            if node1.server == node2.server:
                Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2,
                                  deleteIntfs=deleteIntfs)
                return
            self.tunnel = next(vni)
            for node, name, addr, other in ((node1, intfname1, addr1, node2.server),
                                            (node2, intfname2, addr2, node1.server)):
                out = node.rcmd(f"ip link add {name} type vxlan id {self.tunnel} local "
                                f"{local_ip[node.server]} remote {local_ip[other]} "
                                f"dstport {VXLAN_PORT}")
                if out.strip():
                    raise RuntimeError(f"server {node.server}: VXLAN end {name} not made: "
                                       f"{out.strip()}")
                if addr:
                    node.rcmd(f"ip link set {name} address {addr}")
                node.rcmd(f"ip link set {name} mtu {TUNNEL_MTU} up")
                self.moveIntf(name, node)

        def stop(self) -> None:
            if self.tunnel is not None:
                self.intf1.delete()
                self.intf2.delete()
            else:
                Link.stop(self)
            self.tunnel = None

    return Host, Bridge, VxlanTCLink


def tunnel_addresses(servers: Servers) -> dict[str, str]:
    """Each server's tunnel address: a remote server's own, and this machine's source
    address towards the first remote server (ValueError if one has no address/route)."""
    ips = {s: server_ip(s) for s in servers.remote}
    ips["localhost"] = local_ip_towards(next(iter(ips.values())))
    return ips


class RemoteCpuTimes:
    """Another server's CPU counters, as :class:`experiments.emulation.fidelity.IdleSampler`
    reads this machine's: one SSH session prints /proc/stat's first line every
    :data:`CPU_READ_S`, a thread keeps the latest, and calling the object returns its
    idle and total jiffies (a context manager: the session ends on exit). With ``group``
    (the run's cgroup there, :func:`group_name`) the session also prints that group's
    ``usage_usec``: the CPU of every process of the run on that server, which
    :meth:`group_cpu_s` gives."""

    CPU_READ_S = 0.1

    def __init__(self, servers: Servers, server: str,
                 parse: Callable[[str], tuple[int, int]], group: str | None = None) -> None:
        usage = (f"; grep -s '^usage_usec' {_CGROUP2}/pubsublab/{group}/cpu.stat"
                 if group is not None else "")
        script = f"while :; do head -1 /proc/stat{usage}; sleep {self.CPU_READ_S:g}; done"
        self._group_usec: int | None = None
        self._proc = subprocess.Popen(servers.argv(server, script), stdout=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, text=True)
        self._parse = parse
        self._latest: tuple[int, int] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"cpu-{server}")
        self._thread.start()
        if not self._ready.wait(SSH_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"server {server}: its CPU counters were not read over ssh")

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("cpu "):
                self._latest = self._parse(line)
                self._ready.set()
            elif line.startswith("usage_usec "):
                self._group_usec = int(line.split()[1])

    def __call__(self) -> tuple[int, int]:
        assert self._latest is not None
        return self._latest

    def group_cpu_s(self) -> float | None:
        """CPU seconds the run's group on the server has used so far (None before it
        exists or without ``group``)."""
        return None if self._group_usec is None else self._group_usec / 1e6

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def __enter__(self) -> RemoteCpuTimes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
