"""`pubsublab bench controller`: the os-ken controller's start-up time, flow set-up
latency and port-statistics accuracy, on a real Mininet network.

Network: the gigabit cluster with 4 PCs on one Open vSwitch switch (userspace datapath
here) run by the controller, links at 100 Mbit/s, port statistics every second.

- start-up: controller process start to its listening socket; switch start to the
  switch registered (handshake done, table-miss installed);
- flow set-up: ping RTT of the first packet between two hosts that never talked against
  the median of the next ones. Without ARP entries the first ping pays for the ARP
  request (flooded by the controller), the ARP reply (a flow) and both ICMP directions
  (a flow each); with static ARP entries only the two ICMP flow set-ups remain;
- packet-ins: the switch's packet-in count before and after the later pings (once the
  flows are in, pings should no longer reach the controller);
- port-statistics accuracy: an iperf3 transfer of a known size (``-n``); the change of
  the sender's switch port ``rx_bytes`` in the port-statistics log against the sender
  interface's own ``tx_bytes`` (the same frames counted by the kernel: should agree
  exactly) and against the transfer's size. The wire carries at least what the receiver
  read and at most what the sender wrote plus TCP/IP/Ethernet headers (1514/1448 = 1.046
  for full segments): iperf3 ends a ``-n`` test once the sender has written the bytes,
  and whatever still sits in socket buffers then may or may not cross the wire.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from controller import PORT_STATS_FILE
from experiments.emulation.controller import ControllerProcess, read_registry
from experiments.emulation.doctor import probe
from experiments.emulation.fidelity import iperf3_json
from experiments.emulation.network import Emulation
from nodes.time_left import write_line
from topologies.links import LinkParams
from topologies.registry import build_graph

TRANSFER_BYTES = 20_000_000
PINGS = 10
RTT_RE = re.compile(r"icmp_seq=(\d+) ttl=\d+ time=([\d.]+) ms")


def _log(msg: str) -> None:
    write_line(f"[bench controller] {msg}")


def ping_rtts_ms(net: Any, a: str, b: str, count: int,
                 interval_s: float = 0.2) -> list[float | None]:
    """RTT of each of ``count`` pings from host a to host b (None: no reply)."""
    out = net[a].cmd(f"ping -c {count} -i {interval_s:g} -W 2 {net[b].IP()}")
    got = {int(seq): float(ms) for seq, ms in RTT_RE.findall(out)}
    return [got.get(i) for i in range(1, count + 1)]


def reach_all_pairs(net: Any, settle_s: float = 30.0) -> list[tuple[str, str]]:
    """Ping every ordered pair of ``net``'s hosts until each has had one reply, for at most
    ``settle_s`` seconds in all; the pairs still unanswered then. A pair's first packet may
    need an ARP, a packet-in and a flow before it is forwarded, which takes longer than a
    ping's timeout on a loaded machine: wait for that, then require zero loss."""
    hosts = [h.name for h in net.hosts]
    waiting = [(a, b) for a in hosts for b in hosts if a != b]
    deadline = time.monotonic() + settle_s
    while waiting and time.monotonic() < deadline:
        waiting = [(a, b) for a, b in waiting if ping_rtts_ms(net, a, b, 1)[0] is None]
    return waiting


def static_arp(net: Any, a: str, b: str) -> None:
    """Give a and b each other's ARP entry, so their first packet is IP, not ARP."""
    for x, y in ((a, b), (b, a)):
        net[x].cmd(f"ip neigh replace {net[y].IP()} lladdr {net[y].MAC()} "
                   f"dev {net[x].defaultIntf().name}")


def switch_counters(out_dir: Path, dpid: str, polls_s: float = 2.5) -> dict[str, Any]:
    """The controller's counters for a switch, once the registry has been rewritten twice
    after now (so every packet-in up to now is counted); ``polls_s`` bounds the wait per
    poll."""
    start = read_registry(out_dir).get("polls", 0)
    deadline = time.monotonic() + 2 * polls_s
    while read_registry(out_dir).get("polls", 0) < start + 2:
        if time.monotonic() > deadline:
            raise RuntimeError(f"controller registry in {out_dir} stopped updating")
        time.sleep(0.05)
    return read_registry(out_dir)["switches"][dpid]


def port_line_after(out_dir: Path, port_name: str, t_mono: float,
                    timeout_s: float = 5.0) -> dict[str, Any]:
    """The first port-statistics line of ``port_name`` taken after ``t_mono``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(out_dir / PORT_STATS_FILE) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec["port_name"] == port_name and rec["t_mono"] > t_mono:
                    return rec
        if time.monotonic() > deadline:
            raise RuntimeError(f"no port statistics for {port_name} after t_mono {t_mono}")
        time.sleep(0.1)


def intf_counter(net: Any, host: str, counter: str) -> int:
    """A host interface's kernel counter, e.g. ``tx_bytes``."""
    intf = net[host].defaultIntf().name
    return int(net[host].cmd(f"cat /sys/class/net/{intf}/statistics/{counter}").strip())


def _switch_port(net: Any, host: str) -> str:
    """The switch interface at the other end of the host's link."""
    link = net[host].defaultIntf().link
    return (link.intf2 if link.intf1.node.name == host else link.intf1).name


def flow_setup(net: Any, a: str, b: str, *, with_arp: bool,
               count: int = PINGS) -> dict[str, Any]:
    """First-ping RTT against the later ones, between two hosts that never talked;
    ``with_arp=False`` gives them static ARP entries first."""
    if not with_arp:
        static_arp(net, a, b)
    rtts = ping_rtts_ms(net, a, b, count)
    later = [r for r in rtts[1:] if r is not None]
    return {"a": a, "b": b, "with_arp": with_arp, "first_ms": rtts[0],
            "later_median_ms": round(statistics.median(later), 3) if later else None,
            "lost": rtts.count(None)}


def port_stats_accuracy(net: Any, out_dir: Path, a: str, b: str,
                        n_bytes: int = TRANSFER_BYTES) -> dict[str, Any]:
    """Send ``n_bytes`` from a to b; compare the port-statistics log with the hosts' own
    interface counters and with the payload."""
    a_port, b_port = _switch_port(net, a), _switch_port(net, b)
    sent0, recv0 = intf_counter(net, a, "tx_bytes"), intf_counter(net, b, "rx_bytes")
    p_a0 = port_line_after(out_dir, a_port, time.monotonic())
    p_b0 = port_line_after(out_dir, b_port, p_a0["t_mono"] - 1e-6)
    result = iperf3_json(net, a, b, net[b].IP(), f"-n {n_bytes}")
    time.sleep(0.5)  # the last ACKs and FINs
    sent1, recv1 = intf_counter(net, a, "tx_bytes"), intf_counter(net, b, "rx_bytes")
    p_a1 = port_line_after(out_dir, a_port, time.monotonic())
    p_b1 = port_line_after(out_dir, b_port, p_a1["t_mono"] - 1e-6)
    port_in = p_a1["rx_bytes"] - p_a0["rx_bytes"]
    port_out = p_b1["tx_bytes"] - p_b0["tx_bytes"]
    return {"a": a, "b": b, "n_bytes": n_bytes,
            "sent_bytes": result["end"]["sum_sent"]["bytes"],
            "received_bytes": result["end"]["sum_received"]["bytes"],
            "sender_intf_tx_bytes": sent1 - sent0, "receiver_intf_rx_bytes": recv1 - recv0,
            "port_rx_bytes": port_in, "port_tx_bytes": port_out,
            "rx_vs_sender_intf": round(port_in / (sent1 - sent0), 4),
            "tx_vs_receiver_intf": round(port_out / (recv1 - recv0), 4),
            "rx_vs_n_bytes": round(port_in / n_bytes, 4)}


def run() -> dict[str, Any]:
    """Build the network with the controller and take every figure once."""
    found = probe()
    if not found["checks"][0]["ok"]:
        raise PermissionError("bench controller builds a Mininet network: run with sudo")
    graph = build_graph("gigabit-cluster", {"n": 4}, LinkParams(bw_mbps=100))
    out = Path(mkdtemp(prefix="pubsublab-bench-controller-"))
    ctl = ControllerProcess(out, log=_log)
    emu = Emulation(graph, switch="ovs", probe=found, log=_log, controller=ctl)
    try:
        emu.start()
        dpid = emu.net["s1"].dpid
        with_arp = flow_setup(emu.net, "pc1", "pc2", with_arp=True)
        static = flow_setup(emu.net, "pc3", "pc4", with_arp=False)
        before = switch_counters(out, dpid)["packet_ins"]
        later = ping_rtts_ms(emu.net, "pc1", "pc2", 20, interval_s=0.05)
        after = switch_counters(out, dpid)["packet_ins"]
        accuracy = port_stats_accuracy(emu.net, out, "pc1", "pc3")
    finally:
        emu.stop()
    return {"controller_startup_s": round(ctl.startup_s or 0.0, 3),
            "switch_connect_s": round(ctl.connect_s or 0.0, 3),
            "flow_setup": [with_arp, static],
            "packet_ins_during_20_later_pings": after - before,
            "later_pings_lost": later.count(None),
            "port_stats": accuracy, "logs": str(out)}


def format_result(result: dict[str, Any]) -> str:
    lines = [f"controller start-up {result['controller_startup_s']} s, switch connected "
             f"{result['switch_connect_s']} s after start"]
    for f in result["flow_setup"]:
        how = "with ARP" if f["with_arp"] else "static ARP"
        lines.append(f"flow set-up {f['a']}->{f['b']} ({how}): first ping {f['first_ms']} ms, "
                     f"later median {f['later_median_ms']} ms, lost {f['lost']}")
    lines.append(f"packet-ins during 20 pings over installed flows: "
                 f"{result['packet_ins_during_20_later_pings']}")
    p = result["port_stats"]
    lines.append(f"port stats, iperf3 -n {p['n_bytes']} {p['a']}->{p['b']} (sent "
                 f"{p['sent_bytes']}, received {p['received_bytes']}): switch port rx "
                 f"{p['port_rx_bytes']} = {p['rx_vs_sender_intf']:.4f} x sender interface, "
                 f"{p['rx_vs_n_bytes']:.4f} x n; tx {p['port_tx_bytes']} = "
                 f"{p['tx_vs_receiver_intf']:.4f} x receiver interface")
    return "\n".join(lines)
