"""Build a topology graph into a running Mininet network, and take it down completely.

:class:`Emulation` owns everything a run creates on the machine: the Mininet network, the
processes started on its hosts, and the state file that lets a later run undo a crash
(:mod:`experiments.emulation.leftovers`). ``stop()`` is idempotent and is called from ``finally``.

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
  counts as up only once every switch has connected.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import time
from collections.abc import Callable
from functools import partial
from typing import IO, Any

import networkx as nx

from experiments.emulation.controller import ControllerProcess
from experiments.emulation.leftovers import (
    STATE_DIR,
    RunState,
    remove_network_leftovers,
    sweep_stale,
)
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
    """A Mininet network built from a topology graph, with its processes."""

    def __init__(self, graph: nx.Graph, *, switch: str, probe: dict[str, Any], log: Log,
                 controller: ControllerProcess | None = None) -> None:
        if controller is not None and switch != "ovs":
            raise ValueError(f"a controller needs switch 'ovs', not {switch!r}")
        self.graph = graph
        self.switch = switch
        self.controller = controller
        self.probe = probe
        self.log = log
        self.net: Any = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.state: RunState | None = None
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
        stale = sweep_stale()
        if stale:
            self.log(f"cleaned leftovers of an earlier run: {', '.join(stale)}")
        setLogLevel("error")
        netem = self.probe["mechanisms"]["delay_loss"] == "netem"
        topo = GraphTopo(graph=self.graph, netem=netem)
        switches = [n for n, d in self.graph.nodes(data=True) if d["kind"] == "switch"]
        self.state = RunState()
        self.state.add_nodes(list(self.graph.nodes))
        if self.switch == "ovs":
            self.state.add_bridges(switches)
        # Our own names might still be taken by something a sweep could not attribute.
        remove_network_leftovers(list(self.graph.nodes), switches if self.switch == "ovs" else [])
        if self.controller is not None:
            self.state.add_proc(self.controller.start())
            self.controller.wait_listening()
        t0 = time.monotonic()
        self.net = Mininet(topo=topo, link=HighBwTCLink, switch=self._switch_class(),
                           controller=None, autoSetMacs=True, build=False,
                           waitConnected=False)
        if self.controller is not None:
            _add_remote_controller(self.net, self.controller.host, self.controller.port)
        self.net.build()
        for h in self.net.hosts:
            self.state.add_proc(h.pid)
        t_switches = time.monotonic()
        self.net.start()
        if self.controller is not None:
            self.controller.wait_connected({s.name: s.dpid for s in self.net.switches},
                                           since_mono=t_switches)
        if self.switch == "ovs" and self.probe["mechanisms"]["ovs_datapath"] == "user":
            self._checksum_offload_off()
        if not netem:
            self._queue_limits_without_netem()
        self.build_s = time.monotonic() - t0

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

    def popen(self, host: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a process on a Mininet host; it is ended by pid at teardown."""
        proc = self.net[host].popen(argv, **kwargs)
        self.procs.append(proc)
        if self.state:
            self.state.add_proc(proc.pid)
        return proc

    def stop(self) -> None:
        """End our processes, stop the network, delete what is left of our naming."""
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
                try:
                    _interrupt_pending_commands(net)
                    net.stop()
                finally:
                    switches = [n for n, d in self.graph.nodes(data=True)
                                if d["kind"] == "switch"]
                    remove_network_leftovers(list(self.graph.nodes),
                                             switches if self.switch == "ovs" else [])
        finally:
            # After the network, so that no switch is left without its controller meanwhile.
            if self.controller is not None:
                self.controller.stop()
        if self.state is not None:
            self.state.remove()
            self.state = None
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None
