"""Build a topology graph into a running Mininet network, and take it down completely.

:class:`Emulation` owns everything a run creates on the machine: the Mininet network, the
processes started on its hosts, the cgroup that holds every one of them (the runner
enters it before starting anything, see :mod:`experiments.emulation.cgroups`), and the
state file that lets a later run undo a run killed outright
(:mod:`experiments.emulation.leftovers`). ``stop()`` is idempotent, is called from
``finally``, and is not cut short by SIGINT or SIGTERM (:mod:`experiments.interrupts`).

Mechanisms (chosen from the capability probe and written to the manifest):
- bandwidth: HTB via Mininet's TCLink (the limit raised above Mininet's 1000 Mbit/s cap
  for the 10 Gbit/s compute-node uplinks);
- delay and loss: kernel netem where it exists, else left to the brokers' in-process link
  emulation (the runner passes them in the broker configs);
- queue length: netem's limit where netem exists, else a pfifo of that many packets under
  the HTB class;
- switches: a Linux bridge by default (fastest here), Open vSwitch when asked for (userspace
  datapath when there is no kernel module, with checksum offload switched off on every
  interface, without which TCP over veth hangs);
- controller: none by default (OVS in standalone fail mode learns by itself); with a
  :class:`~experiments.emulation.controller.ControllerProcess`, the controller is started
  before the network and every OVS switch connects to it (OpenFlow 1.3, fail mode
  secure, so a switch never forwards behind the controller's back), and the network
  counts as up only once every switch has connected;
- CPU limits (``cpu_limits``: host -> share of one core): those hosts are Mininet
  ``CPULimitedHost`` s with the CFS scheduler, i.e. a cgroup (v1 ``cpu`` and
  ``cpuacct``, made with cgroup-tools' ``cgcreate``) holding the host's shell and every
  process started on it, with ``cpu.cfs_quota_us`` = share x ``cpu.cfs_period_us``. The
  period is 10 ms (Mininet's is 100 ms), longer only where the quota would fall under the
  kernel's 1 ms minimum (shares below 0.1): a host limited to 0.2 core then runs 2 ms and
  waits 8, rather than running 20 ms and waiting 80, so it looks more like a slower CPU
  than like one that stops (an 80 ms stop was the 95th-percentile delay of a broker at
  0.2 core well below its knee). The price is linearity: a saturated broker's CPU per
  message at 0.15 and 0.1 core is 5-11 % and about 10 % above that at 0.2 with 10 ms
  periods, against 0-6 % with 50 or 100 ms ones; but near the knee (2000-2300/s at 0.2
  core) the p95 delay is 4-6 ms with 10 ms periods, 14-29 ms with 50 ms and 40-149 ms
  with 100 ms. Under other work on the machine a host may also get less than its quota
  (0.185 of 0.2 core beside a Spark job and a browser): compare with the achieved share.
  Mininet's ``cpu`` is a fraction of the whole machine (it multiplies by the number of
  cores); we pass share / cores and then check (and, for rounding, correct) the quota
  the kernel holds; :meth:`Emulation.set_cpu_share` changes a limited host's share on
  the running network. :meth:`Emulation.cpu_sampler` measures what each limited host
  actually used from its cgroup's ``cpuacct.usage``. The limit is the broker's: a
  process started with ``popen(..., cpu_limited=False)`` (the runners' clients) runs in
  the host's namespace outside the cgroup.
- servers (``servers``, with the plan's ``placement`` of every node): the nodes on other
  servers are Mininet cluster-edition nodes there, links between servers VXLAN tunnels
  with HTB on their ends, and the run has a cgroup on every server
  (:mod:`experiments.emulation.cluster`).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import IO, Any

import networkx as nx

from experiments.emulation.cgroups import RunCgroup, cgroup_mount
from experiments.emulation.cluster import (
    MNEXEC,
    REMOTE_STATE,
    TUNNEL_MTU,
    RemoteProcess,
    Servers,
    group_name,
    join_script,
    make_server_group,
    node_classes,
    remote_argv,
    tunnel_addresses,
)
from experiments.emulation.controller import ControllerProcess
from experiments.emulation.leftovers import (
    STATE_DIR,
    RunState,
    remove_network_leftovers,
    sweep_stale,
    undo_run,
)
from experiments.interrupts import teardown
from topologies.links import LinkParams

Log = Callable[[str], None]


def _interrupt_pending_commands(net: Any) -> None:
    """A Ctrl-C that lands inside ``node.cmd()`` leaves that node's shell busy, and Mininet
    then refuses every later command, its own teardown included: interrupt and drain."""
    deadline = time.monotonic() + 5.0
    for node in net.values():
        if not getattr(node, "waiting", False):
            continue
        node.sendInt()
        while node.waiting and time.monotonic() < deadline:
            node.monitor(timeoutms=200)
        node.waiting = False


# CFS bandwidth control of CPU-limited hosts (module docstring): the kernel refuses a
# quota under 1 ms and a period over 1 s.
CFS_PERIOD_US, CFS_MIN_QUOTA_US, CFS_MAX_PERIOD_US = 10_000, 1_000, 1_000_000
CONTROLLER_NODE = "ofctl"  # no trailing digit: cannot collide with a broker (x + cluster)


def _add_remote_controller(net: Any, host: str, port: int) -> None:
    """Mininet's RemoteController for our controller process, with three fixes.

    - Mininet's listening check opens a telnet connection to the port, which the
      controller would take for a switch that never finishes its handshake; the runner
      has already seen the port listen.
    - ``RemoteController.stop`` does nothing, so the node's own shell (``bash ...
      mininet:<name>``) outlives the network; ``stop`` terminates it.
    - Mininet names its default controller ``c0``, the name of SCOT broker B(c, 0).
    """
    from mininet.node import RemoteController

    class ListeningController(RemoteController):
        def checkListening(self) -> None:
            return None

        def stop(self) -> None:
            self.terminate()

    net.addController(CONTROLLER_NODE, controller=ListeningController, ip=host, port=port)


def cgroup_file(controller: str, group: str, name: str) -> Path:
    """A file of cgroup ``group`` (a top-level group, as Mininet makes them)."""
    mount = cgroup_mount(controller)
    if mount is None:
        raise RuntimeError(f"no cgroup v1 {controller} controller is mounted")
    return mount / group / name


def _read_int(path: Path) -> int:
    return int(path.read_text().split()[0])


def cpu_stat(group: str) -> dict[str, int]:
    """``cpu.stat`` of a cgroup: nr_periods, nr_throttled, throttled_time (ns), ..."""
    text = cgroup_file("cpu", group, "cpu.stat").read_text()
    return {k: int(v) for k, v in (line.split()[:2] for line in text.splitlines() if line)}


def cpu_usage_ns(group: str) -> int:
    """CPU time (ns) used by every task that has been in cgroup ``group``."""
    return _read_int(cgroup_file("cpuacct", group, "cpuacct.usage"))


class CpuSampler:
    """Samples the cgroup CPU counters of CPU-limited hosts every ``interval_s`` on a
    thread (a context manager): per host, the share of one core used in each window
    (``cpuacct.usage`` difference over wall time), and the CFS throttling counters.
    :meth:`summary` is what the manifest's ``cpu_limits`` holds."""

    MAX_WINDOWS = 3600  # per host in the summary; the mean and max cover all of them

    def __init__(self, limits: Mapping[str, Mapping[str, Any]], interval_s: float = 1.0
                 ) -> None:
        self.limits = {h: dict(v) for h, v in limits.items()}
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[str, tuple[float, int, dict[str, int]]] = {}
        self._last: dict[str, tuple[float, int]] = {}
        self._end: dict[str, tuple[float, int, dict[str, int]]] = {}
        self._windows: dict[str, list[float]] = {h: [] for h in self.limits}
        self.errors: dict[str, str] = {}

    def _read(self, host: str) -> tuple[float, int]:
        return time.monotonic(), cpu_usage_ns(host)

    def _sample(self, *, final: bool = False) -> None:
        for host in self.limits:
            if host in self.errors:
                continue
            try:
                t, used = self._read(host)
            except (OSError, ValueError, RuntimeError) as exc:
                self.errors[host] = str(exc)
                continue
            t0, u0 = self._last[host]
            # A last partial window shorter than half the interval is too noisy for the
            # maximum (the CFS quota is enforced per period); it still counts in the mean.
            if t - t0 > 0 and (not final or t - t0 >= self.interval_s / 2):
                self._windows[host].append((used - u0) / 1e9 / (t - t0))
            self._last[host] = (t, used)
            if final:
                self._end[host] = (t, used, cpu_stat(host))

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self._sample()
            next_t += self.interval_s

    def __enter__(self) -> CpuSampler:
        for host in self.limits:
            try:
                t, used = self._read(host)
                self._first[host] = (t, used, cpu_stat(host))
                self._last[host] = (t, used)
            except (OSError, ValueError, RuntimeError) as exc:
                self.errors[host] = str(exc)
        if self.limits:
            self._thread = threading.Thread(target=self._loop, name="cpu-sampler",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self._end:
            self._sample(final=True)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per host: ``configured`` (share of one core), the cgroup's ``quota_us`` and
        ``period_us``, ``achieved_max`` (the largest share used in one window: the limit
        achieved under load), ``achieved_mean`` (over the whole sampling), ``window_s``,
        ``windows`` (each window's share, at most :data:`MAX_WINDOWS`), ``cpu_s``, the
        CFS ``periods``, ``throttled_periods`` and ``throttled_s`` over the sampling."""
        out: dict[str, dict[str, Any]] = {}
        for host, lim in self.limits.items():
            row: dict[str, Any] = {**lim, "window_s": self.interval_s}
            if host in self.errors or host not in self._end:
                row["error"] = self.errors.get(host, "not sampled")
                out[host] = row
                continue
            (t0, u0, s0), (t1, u1, s1) = self._first[host], self._end[host]
            w = self._windows[host]
            row.update({
                "achieved_max": round(max(w), 4) if w else None,
                "achieved_mean": round((u1 - u0) / 1e9 / (t1 - t0), 4) if t1 > t0 else None,
                "sampled_s": round(t1 - t0, 3), "cpu_s": round((u1 - u0) / 1e9, 4),
                "periods": s1.get("nr_periods", 0) - s0.get("nr_periods", 0),
                "throttled_periods": s1.get("nr_throttled", 0) - s0.get("nr_throttled", 0),
                "throttled_s": round((s1.get("throttled_time", 0)
                                      - s0.get("throttled_time", 0)) / 1e9, 4),
                "windows": [round(x, 4) for x in w[: self.MAX_WINDOWS]],
            })
            out[host] = row
        return out


def machine_lock(log: Log) -> IO[str]:
    """An exclusive lock on this machine's Mininet, held until the returned file closes."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fh = open(STATE_DIR / "mininet.lock", "w")  # noqa: SIM115 - held for the emulation's life
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log("another emulation is running on this machine; waiting for it to finish")
        fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


class Emulation:
    """A Mininet network built from a topology graph, with its processes.

    ``status_files``: JSON files (a run's manifest) whose ``status`` the next run sets to
    ``killed`` if this one dies without tearing down while they say ``running``."""

    def __init__(self, graph: nx.Graph, *, switch: str, probe: dict[str, Any], log: Log,
                 controller: ControllerProcess | None = None,
                 cpu_limits: Mapping[str, float] | None = None,
                 status_files: Sequence[Path] = (), servers: Servers | None = None,
                 placement: Mapping[str, str] | None = None) -> None:
        if controller is not None and switch != "ovs":
            raise ValueError(f"a controller needs switch 'ovs', not {switch!r}")
        self.cpu_limits = dict(cpu_limits or {})
        if servers is not None and (cpu_limits or switch != "bridge" or not placement):
            raise ValueError("servers: want a placement, switch 'bridge' and no cpu_limits")
        self.servers = servers
        self.placement = dict(placement or {})
        self._remote_started = 0  # numbers the pid files of processes on other servers
        self._ssh_masters: list[subprocess.Popen[bytes]] = []  # one per other server
        for host, share in self.cpu_limits.items():
            if graph.nodes.get(host, {}).get("kind", "switch") == "switch":
                raise ValueError(f"cpu_limits: {host!r} is not a host of the graph")
            if not 0 < share <= 1:
                raise ValueError(f"cpu_limits: {host}: share {share!r} not in (0, 1]")
        # Per limited host, once built: configured share, quota_us, period_us.
        self.cpu_cgroups: dict[str, dict[str, Any]] = {}
        self.graph = graph
        self.switch = switch
        self.controller = controller
        self.probe = probe
        self.log = log
        self.net: Any = None
        self.procs: list[Any] = []  # subprocess.Popen, or RemoteProcess on another server
        self.status_files = list(status_files)
        self.state: RunState | None = None
        self.cgroup: RunCgroup | None = None
        self._lock: IO[str] | None = None
        self.build_s = 0.0

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> None:
        """Build and start the network. Only one emulation runs on a machine at a time:
        Mininet node names and interfaces are machine-wide, so a second run waits here
        for the first to finish instead of colliding with it."""
        from mininet.log import setLogLevel
        from mininet.net import Mininet

        from topologies.mininet_topo import GraphTopo, HighBwTCLink

        self._lock = machine_lock(self.log)
        sweep_stale(self.log)
        setLogLevel("error")
        netem = self.probe["mechanisms"]["delay_loss"] == "netem"
        topo = GraphTopo(graph=self.graph, netem=netem)
        self._cpu_limited_hosts(topo)
        switches = [n for n, d in self.graph.nodes(data=True) if d["kind"] == "switch"]
        # The state names the group before it exists: a run killed in between leaves a
        # state the sweep can follow, never a group nobody knows of.
        self.cgroup = RunCgroup.named(str(os.getpid()))
        self.state = RunState(self.cgroup.path, self.status_files)
        self.cgroup.make()
        self.cgroup.enter()  # from here on, every process started is a member
        self.state.add_nodes(list(self.graph.nodes))
        if self.switch == "ovs":
            self.state.add_bridges(switches)
        if self.servers is not None:
            self._server_groups()
        # Our own names might still be taken by something a sweep could not attribute.
        remove_network_leftovers(list(self.graph.nodes), switches if self.switch == "ovs" else [])
        if self.controller is not None:
            self.controller.start()
            self.controller.wait_listening()
        t0 = time.monotonic()
        classes: dict[str, Any] = {"link": HighBwTCLink, "switch": self._switch_class()}
        if self.servers is not None:
            classes = self._cluster_classes(topo)
        self.net = Mininet(topo=topo, **classes, controller=None, autoSetMacs=True,
                           build=False, waitConnected=False)
        if self.controller is not None:
            _add_remote_controller(self.net, self.controller.host, self.controller.port)
        self.net.build()
        if self.servers is not None:
            self._join_server_groups()
        self._check_cpu_quotas()
        t_switches = time.monotonic()
        self.net.start()
        if self.controller is not None:
            self.controller.wait_connected({s.name: s.dpid for s in self.net.switches},
                                           since_mono=t_switches)
        if self.switch == "ovs" and self.probe["mechanisms"]["ovs_datapath"] == "user":
            self._checksum_offload_off()
        if not netem:
            self._queue_limits_without_netem()
        if self.servers is not None and self.cross_server_links():
            self._tunnel_mtu()
        self.build_s = time.monotonic() - t0

    # -- servers (experiments.emulation.cluster) -------------------------------------
    def _server_groups(self) -> None:
        """Name the run's group on every other server in the state, then make it."""
        assert self.servers is not None and self.state is not None
        entries = [{"server": s, "group": group_name(os.getpid(), s),
                    "ssh_config": None if self.servers.ssh_config is None
                    else str(self.servers.ssh_config)} for s in self.servers.remote]
        self.state.add_servers(entries)
        for e in entries:
            self._ssh_masters.append(self.servers.master(e["server"]))
            make_server_group(self.servers, e["server"], e["group"])

    def _cluster_classes(self, topo: Any) -> dict[str, Any]:
        """Mininet's classes for nodes on servers, each node's server in its topo info."""
        assert self.servers is not None
        ips = tunnel_addresses(self.servers)
        for node in topo.nodes():
            server = self.placement[node]
            topo.nodeInfo(node).update(server=server, serverIP=ips[server], user="root")
        host, bridge, link = node_classes(self.servers, ips)
        return {"host": host, "switch": partial(bridge, stp=False), "link": link}

    def _join_server_groups(self) -> None:
        """Put the shells of the nodes on other servers into the run's group there."""
        assert self.servers is not None
        for server in self.servers.remote:
            pids = [n.pid for n in self.net.hosts + self.net.switches if n.server == server]
            name = group_name(os.getpid(), server)
            script = "; ".join(join_script(name, pid) for pid in pids)
            res = self.servers.run(server, script or "true")
            if res.returncode != 0:
                raise RuntimeError(f"server {server}: node shells not put into the run's "
                                   f"cgroup: {res.stderr.strip()}")

    def cross_server_links(self) -> list[tuple[str, str]]:
        """The links whose ends are on different servers (none without servers)."""
        from topologies.placement import cross_server_links

        return cross_server_links(self.graph, self.placement) if self.placement else []

    def _tunnel_mtu(self) -> None:
        """Every interface gets the tunnel's MTU, so a frame that fits one link fits all."""
        for node in self.net.hosts + self.net.switches:
            names = [i.name for i in node.intfList() if i.name != "lo"]
            if names:
                node.cmd("; ".join(f"ip link set {n} mtu {TUNNEL_MTU}" for n in names))

    def _cpu_limited_hosts(self, topo: Any) -> None:
        """Make the limited hosts Mininet CPULimitedHosts (CFS) with their share."""
        if not self.cpu_limits:
            return
        if not self.probe["mechanisms"].get("cpu_limit"):
            fix = next((c["fix"] for c in self.probe["checks"] if c["name"] == "cpu_limit"),
                       "")
            raise RuntimeError(f"CPU limits requested but this machine cannot apply them: "
                               f"{fix or 'see pubsublab doctor'}")
        from mininet.node import CPULimitedHost
        from mininet.util import numCores

        for host, share in self.cpu_limits.items():
            # Mininet's cpu is a fraction of the machine: quota = period * cpu * cores.
            topo.nodeInfo(host).update(cls=CPULimitedHost, sched="cfs",
                                       cpu=share / numCores())

    def _check_cpu_quotas(self) -> None:
        """Read back each limited host's CFS quota; set it exactly where Mininet's
        fraction arithmetic rounded it off."""
        for host, share in list(self.cpu_limits.items()):
            self.set_cpu_share(host, share)

    def set_cpu_share(self, host: str, share: float) -> None:
        """Limit ``host`` (one built CPU-limited, see ``cpu_limits``) to ``share`` of one
        core, also while the network runs: the cgroup's ``cpu.cfs_quota_us`` is written
        (share x ``cpu.cfs_period_us``, at least 1000 us; the period as the module
        docstring says) and read back, and takes effect
        from the next CFS period for every process on the host; :attr:`cpu_limits` and
        :attr:`cpu_cgroups` follow."""
        if host not in self.cpu_limits:
            raise ValueError(f"{host!r} is not a CPU-limited host of this emulation "
                             f"(cpu_limits: {sorted(self.cpu_limits)})")
        if not 0 < share <= 1:
            raise ValueError(f"{host}: share {share!r} not in (0, 1]")
        period = min(CFS_MAX_PERIOD_US, max(CFS_PERIOD_US, math.ceil(CFS_MIN_QUOTA_US / share)))
        period_f = cgroup_file("cpu", host, "cpu.cfs_period_us")
        if _read_int(period_f) != period:
            period_f.write_text(f"{period}\n")
        quota_f = cgroup_file("cpu", host, "cpu.cfs_quota_us")
        want = max(CFS_MIN_QUOTA_US, round(period * share))
        if _read_int(quota_f) != want:
            quota_f.write_text(f"{want}\n")
        quota = _read_int(quota_f)
        if quota != want:
            raise RuntimeError(f"cgroup {host}: cpu.cfs_quota_us is {quota}, not {want}")
        self.cpu_limits[host] = share
        self.cpu_cgroups[host] = {"configured": share, "quota_us": quota, "period_us": period}
        self.log(f"{host}: CPU limited to {quota}/{period} us per period "
                 f"({quota / period:g} core)")

    def cpu_sampler(self, interval_s: float = 1.0) -> CpuSampler:
        """A :class:`CpuSampler` of every CPU-limited host (a context manager)."""
        return CpuSampler(self.cpu_cgroups, interval_s)

    def _switch_class(self) -> Any:
        if self.switch == "bridge":
            from mininet.nodelib import LinuxBridge

            return partial(LinuxBridge, stp=False)
        from mininet.node import OVSSwitch

        datapath = self.probe["mechanisms"]["ovs_datapath"]
        if datapath is None:
            raise RuntimeError("switch: ovs requested but Open vSwitch is not running "
                               "(run `sudo make setup`, or use switch: bridge)")
        kind = "user" if datapath == "user" else "kernel"
        if self.controller is None:
            return partial(OVSSwitch, datapath=kind, failMode="standalone")
        return partial(OVSSwitch, datapath=kind, failMode="secure", protocols="OpenFlow13")

    def _checksum_offload_off(self) -> None:
        for node in self.net.hosts + self.net.switches:
            for intf in node.intfList():
                if intf.name != "lo":
                    node.cmd(f"ethtool -K {intf.name} tx off rx off >/dev/null 2>&1")

    def _queue_limits_without_netem(self) -> None:
        for a, b, data in self.graph.edges(data=True):
            p: LinkParams = data["params"]
            if p.max_queue_pkts is None:
                continue
            for link in self.net.linksBetween(self.net[a], self.net[b]):
                for intf in (link.intf1, link.intf2):
                    parent = "parent 5:1 handle 10:" if p.bw_mbps is not None else "root"
                    out = intf.node.cmd(
                        f"tc qdisc add dev {intf.name} {parent} pfifo limit {p.max_queue_pkts}")
                    if out.strip():
                        raise RuntimeError(f"queue limit on {intf.name} failed: {out.strip()}")

    def popen(self, host: str, argv: list[str], *, cpu_limited: bool = True,
              **kwargs: Any) -> subprocess.Popen[bytes] | RemoteProcess:
        """Start a process on a Mininet host; it is ended by pid at teardown (and, as a
        member of the run's cgroup, by the next run if this one is killed). With
        ``cpu_limited`` false, a process on a CPU-limited host runs in the host's network
        namespace but outside its CPU cgroup, as on any other host."""
        node = self.net[host]
        if not cpu_limited and host in self.cpu_limits:
            # Mininet's CPULimitedHost.popen puts the process in the host's cgroup with
            # mnexec -g; a plain Host's mnexec (namespace only) leaves it in ours.
            kwargs["mncmd"] = ["mnexec", "-da", str(node.pid)]
        server = getattr(node, "server", "localhost")
        if self.servers is not None and server != "localhost":
            self._remote_started += 1
            name = group_name(os.getpid(), server)
            pid_file = f"{REMOTE_STATE}/{name}/{self._remote_started}.pid"
            local = node.popen(remote_argv(argv, node.pid, name, pid_file), mncmd=[], **kwargs)
            proc: Any = RemoteProcess(local, self.servers, server, pid_file)
        else:
            if self.servers is not None:
                kwargs.setdefault("mncmd", [*MNEXEC, str(node.pid)])
            proc = node.popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        """End our processes, stop the network, then end whatever is still in the run's
        cgroup and delete what is left of our naming. The state file goes only if nothing
        is left; else it stays for the next run's sweep. A SIGINT or SIGTERM meanwhile
        only says to wait."""
        with teardown():
            try:
                self._stop_processes_and_network()
            finally:
                try:
                    self._undo_run()
                finally:
                    if self._lock is not None:
                        self._lock.close()  # closing the file releases the flock
                        self._lock = None

    def _stop_processes_and_network(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5.0
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.procs.clear()
        try:
            if self.net is not None:
                net, self.net = self.net, None
                _interrupt_pending_commands(net)
                net.stop()
        finally:
            # After the network, so that no switch is left without its controller meanwhile.
            if self.controller is not None:
                self.controller.stop()

    def _undo_run(self) -> None:
        """Leave the run's cgroup, then do what the next run's sweep would: end every
        process still in the group, remove it, our interfaces, bridges and the
        CPU-limited hosts' v1 groups (Mininet deletes those when it stops a host, but not
        always all); delete the state file if nothing is left."""
        if self.cgroup is not None:
            self.cgroup.leave()
            self.cgroup = None
        if self.state is None:
            return
        for master in self._ssh_masters:  # ended here, they remove their sockets
            master.terminate()
            master.wait()
        self._ssh_masters.clear()
        removed, left = undo_run(self.state.data)
        if left:
            self.log(f"WARNING teardown could not remove {', '.join(left)}; the state stays "
                     f"in {self.state.path} for the next run's sweep")
        else:
            self.state.remove()
        if removed:
            self.log(f"teardown removed what Mininet left: {', '.join(removed)}")
        self.state = None
