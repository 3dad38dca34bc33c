"""L2 learning switch and port-statistics monitor for every switch (OpenFlow 1.3).

Forwarding (the reference learning switch of Ryu's ``simple_switch_13``, bounded):

- on connect: delete every flow of table 0, then install the table-miss flow (priority
  0, whole packet to the controller), so a reconnecting switch and a fresh MAC table
  start consistent;
- on packet-in: learn source MAC → in-port; for a known unicast destination install a
  flow ``in_port, eth_src, eth_dst → output`` (priority 1, idle timeout
  ``idle_timeout_s``) and send the packet out; flood unknown and multicast
  destinations without a flow. Switch topologies must be loop-free (ours are: one
  switch, or compute-node switches on one core switch): there is no spanning tree;
- bounds: at most ``max_macs_per_dpid`` learned addresses per switch (least recently
  learned evicted, see :class:`controller.tables.MacTable`), and at most
  ``packet_in_rate_hz`` packet-ins handled per switch per second (burst: one second's
  worth); the excess is dropped unhandled and counted, and the log says how many once
  per poll.

Datapath registry: kept from state-change events (connected at MAIN, gone at DEAD). A
reconnecting switch replaces its old connection; the old one's later DEAD event is
logged and ignored. The registry is written to ``datapaths.json`` at every change and
every poll::

    {"pid": int, "t_wall": float, "polls": int,
     "connected": {dpid: {"address": "ip:port", "since_wall": float}},
     "switches": {dpid: {"name": str | null, "connections": int, "packet_ins": int,
                         "packet_ins_multicast": int, "packet_ins_dropped": int,
                         "flows_installed": int,
                         "macs": int, "macs_evicted": int}}}

Port statistics: every ``poll_s`` seconds a port-stats request goes to every connected
switch; each reply becomes one JSON line per port in ``port_stats.jsonl`` (schema
below; keys sorted). Counters are cumulative since the switch created the port, as the
switch reports them, so a utilization is the difference of consecutive lines of one
``(dpid, port)`` over the difference of their ``t_mono``. A switch reconnecting does not
reset them; a recreated port does (``duration_s`` drops).

- ``t_wall``: Unix time (s) when the controller received the reply, the brokers' clock;
- ``t_mono``: CLOCK_MONOTONIC (s) at the same moment; machine-wide on Linux, so it
  compares with the brokers' ``t_mono`` too;
- ``poll``: number of the poll round (1, 2, ...), shared by all switches of a round;
- ``dpid``: datapath id, 16 hex digits as ``ovs-ofctl`` and Mininet print it;
- ``switch``: the bridge name (e.g. ``s1``), from the switch's local port;
- ``port``: OpenFlow port number; ``port_name``: its interface (e.g. ``s1-eth3``;
  ``topologies.graph.intf_name`` gives the link of each name). The bridge's local port
  is left out;
- ``rx_bytes``, ``rx_packets``, ``rx_dropped``, ``rx_errors``: into the switch (sent by
  the attached host or switch); ``tx_bytes``, ``tx_packets``, ``tx_dropped``,
  ``tx_errors``: out of the switch towards it;
- ``duration_s``: how long the port has existed, by the switch.

The log (``controller.log``, text) says what happened: connections and disconnections,
port changes, flow-table resets, packet-in drops and MAC evictions, OpenFlow errors,
messages the framework could not parse.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

from controller import (
    IDLE_TIMEOUT_S,
    MAX_MACS_PER_DPID,
    PACKET_IN_RATE_HZ,
    POLL_S,
    PORT_STATS_FILE,
    REGISTRY_FILE,
)
from controller.framework import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    BaseApp,
    cfg,
    hub,
    ofp_event,
    ofproto_v1_3,
    set_ev_cls,
)
from controller.tables import MacTable, TokenBucket

OPTS_GROUP = "l2_monitor"
cfg.CONF.register_opts([
    cfg.StrOpt("out-dir", help="folder for the port statistics and the registry"),
    cfg.FloatOpt("poll-s", default=POLL_S, help="seconds between port-statistics polls"),
    cfg.IntOpt("idle-timeout-s", default=IDLE_TIMEOUT_S,
               help="idle timeout of installed flows"),
    cfg.IntOpt("max-macs-per-dpid", default=MAX_MACS_PER_DPID,
               help="cap of each switch's MAC table"),
    cfg.FloatOpt("packet-in-rate-hz", default=PACKET_IN_RATE_HZ,
                 help="packet-ins handled per switch per second; the excess is dropped"),
], group=OPTS_GROUP)

LLDP_ETHERTYPE = b"\x88\xcc"
FLOW_PRIORITY = 1


def dpid_str(dpid: int) -> str:
    """16 hex digits, as ovs-ofctl and Mininet print a datapath id."""
    return f"{dpid:016x}"


def mac_str(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


@dataclass
class SwitchCounters:
    """What the controller has seen of one switch, across its connections."""

    name: str | None = None
    connections: int = 0
    packet_ins: int = 0
    # Multicast and broadcast frames never get a flow, so they reach the controller for
    # as long as hosts send them (IPv6 neighbour discovery, ARP requests): counted apart,
    # a unicast packet-in is the sign of a missing flow.
    packet_ins_multicast: int = 0
    packet_ins_dropped: int = 0
    flows_installed: int = 0
    macs: int = 0
    macs_evicted: int = 0


class L2Monitor(BaseApp):
    """Learning switch plus port-statistics monitor; see the module docstring."""

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conf = self.CONF[OPTS_GROUP]
        if not conf.out_dir:
            raise ValueError(f"[{OPTS_GROUP}] out_dir is not set")
        self.out_dir = Path(conf.out_dir)
        self.poll_s = conf.poll_s
        self.idle_timeout_s = conf.idle_timeout_s
        self.max_macs = conf.max_macs_per_dpid
        self.packet_in_rate_hz = conf.packet_in_rate_hz
        self.datapaths: dict[int, Any] = {}
        self.connected_since: dict[int, float] = {}
        self.switches: dict[int, SwitchCounters] = {}
        self.macs: dict[int, MacTable] = {}
        self.buckets: dict[int, TokenBucket] = {}
        self.polls = 0
        self._reported_drops: dict[int, int] = {}
        self._reported_evictions: dict[int, int] = {}
        # The monitor thread and the event thread both write the registry file.
        self._registry_lock = threading.Lock()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Line-buffered: every line reaches the file as written, so a run that ends the
        # controller with a signal loses nothing.
        self._stats: IO[str] = open(  # noqa: SIM115 - open for the app's life
            self.out_dir / PORT_STATS_FILE, "a", buffering=1, encoding="utf-8")
        self._write_registry()
        self.threads.append(hub.spawn(self._monitor))
        self.logger.info("l2_monitor up: poll every %.3g s, flow idle timeout %d s, at most "
                         "%d MACs and %.0f packet-ins/s per switch", self.poll_s,
                         self.idle_timeout_s, self.max_macs, self.packet_in_rate_hz)

    # -- datapath registry ------------------------------------------------------------
    def _counters(self, dpid: int) -> SwitchCounters:
        return self.switches.setdefault(dpid, SwitchCounters())

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        dp = ev.datapath
        address = _address(dp)
        if ev.state == MAIN_DISPATCHER:
            old = self.datapaths.get(dp.id)
            if old is not None and old is not dp:
                self.logger.warning("switch %s reconnected from %s before its old connection "
                                    "was seen to close; replacing it", dpid_str(dp.id), address)
                # os-ken 4.x's native hub frees a closed connection's threads (and reports
                # it dead) only when something is sent on it; the old one gets no polls now.
                old.send_msg(old.ofproto_parser.OFPEchoRequest(old))
            self.datapaths[dp.id] = dp
            self.connected_since[dp.id] = time.time()
            c = self._counters(dp.id)
            c.connections += 1
            c.name = self._bridge_name(dp) or c.name
            self.logger.info("switch %s (%s) connected from %s (connection %d), %d ports",
                             dpid_str(dp.id), c.name, address, c.connections,
                             len(self._ports(dp)))
        elif dp.id is None:
            self.logger.info("connection from %s closed before the handshake finished",
                             address)
            return
        elif self.datapaths.get(dp.id) is dp:
            del self.datapaths[dp.id]
            self.connected_since.pop(dp.id, None)
            self.logger.warning("switch %s disconnected (%s)", dpid_str(dp.id), address)
        else:
            self.logger.info("old connection of switch %s from %s closed; the switch is "
                             "connected again", dpid_str(dp.id), address)
            return
        self._write_registry()

    def _write_registry(self) -> None:
        connected = {dpid_str(d): {"address": _address(dp),
                                   "since_wall": self.connected_since.get(d)}
                     for d, dp in list(self.datapaths.items())}
        switches = {}
        for d, c in list(self.switches.items()):
            table = self.macs.get(d)
            if table is not None:
                c.macs, c.macs_evicted = len(table), table.evicted
            switches[dpid_str(d)] = asdict(c)
        data = {"pid": os.getpid(), "t_wall": time.time(), "polls": self.polls,
                "connected": connected, "switches": switches}
        with self._registry_lock:
            tmp = self.out_dir / (REGISTRY_FILE + ".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            tmp.replace(self.out_dir / REGISTRY_FILE)

    @staticmethod
    def _ports(dp: Any) -> dict[int, Any]:
        return getattr(dp, "ports", None) or {}

    def _bridge_name(self, dp: Any) -> str | None:
        local = self._ports(dp).get(dp.ofproto.OFPP_LOCAL)
        return _text(local.name) if local is not None else None

    # -- forwarding -----------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _switch_features(self, ev: Any) -> None:
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        # Flows left from an earlier connection point at ports learned by a MAC table we
        # no longer have: start both afresh.
        dp.send_msg(parser.OFPFlowMod(datapath=dp, command=ofp.OFPFC_DELETE,
                                      table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                                      out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        miss = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        self._add_flow(dp, 0, parser.OFPMatch(), miss, idle_timeout_s=0)
        self.macs[dp.id] = MacTable(self.max_macs)
        self.buckets[dp.id] = TokenBucket(self.packet_in_rate_hz, self.packet_in_rate_hz)
        self.logger.info("switch %s: flow table reset, table-miss to controller installed",
                         dpid_str(dp.id))

    def _add_flow(self, dp: Any, priority: int, match: Any, actions: list[Any], *,
                  idle_timeout_s: int) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(datapath=dp, priority=priority, match=match,
                                      instructions=inst, idle_timeout=idle_timeout_s))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev: Any) -> None:
        msg = ev.msg
        dp = msg.datapath
        c = self._counters(dp.id)
        c.packet_ins += 1
        if msg.data and msg.data[0] & 1:
            c.packet_ins_multicast += 1
        bucket = self.buckets.get(dp.id)
        if bucket is None or not bucket.take(time.monotonic()):
            c.packet_ins_dropped += 1
            return
        data = msg.data
        # Only the Ethernet header is needed: slicing it is far cheaper than parsing the
        # whole packet, which matters in a packet-in burst.
        if len(data) < 14 or data[12:14] == LLDP_ETHERTYPE:
            return
        dst, src = mac_str(data[0:6]), mac_str(data[6:12])
        in_port = msg.match["in_port"]
        table = self.macs[dp.id]
        evicted = table.learn(src, in_port)
        if evicted is not None and table.evicted == 1:
            self.logger.warning("switch %s: MAC table full (%d entries); evicting the least "
                                "recently learned (first: %s)", dpid_str(dp.id),
                                table.max_entries, evicted)
        ofp, parser = dp.ofproto, dp.ofproto_parser
        multicast = data[0] & 1
        out_port = None if multicast else table.port(dst)
        if out_port == in_port:
            return  # the destination sits behind the port the frame came in on
        actions = [parser.OFPActionOutput(ofp.OFPP_FLOOD if out_port is None else out_port)]
        if out_port is not None:
            match = parser.OFPMatch(in_port=in_port, eth_src=src, eth_dst=dst)
            self._add_flow(dp, FLOW_PRIORITY, match, actions,
                           idle_timeout_s=self.idle_timeout_s)
            c.flows_installed += 1
        no_buffer = msg.buffer_id == ofp.OFP_NO_BUFFER
        dp.send_msg(parser.OFPPacketOut(datapath=dp, buffer_id=msg.buffer_id, in_port=in_port,
                                        actions=actions, data=data if no_buffer else None))

    # -- what the switches tell us ----------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev: Any) -> None:
        msg = ev.msg
        ofp = msg.datapath.ofproto
        reason = {ofp.OFPPR_ADD: "added", ofp.OFPPR_DELETE: "deleted",
                  ofp.OFPPR_MODIFY: "modified"}.get(msg.reason, f"reason {msg.reason}")
        down = bool(msg.desc.state & ofp.OFPPS_LINK_DOWN)
        self.logger.info("switch %s: port %d (%s) %s, link %s", dpid_str(msg.datapath.id),
                         msg.desc.port_no, _text(msg.desc.name), reason,
                         "down" if down else "up")

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _error(self, ev: Any) -> None:
        msg = ev.msg
        self.logger.warning("switch %s sent OpenFlow error type %d code %d (xid %d)",
                            dpid_str(msg.datapath.id or 0), msg.type, msg.code, msg.xid)

    @set_ev_cls(ofp_event.EventOFPExperimenter, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _experimenter(self, ev: Any) -> None:
        msg = ev.msg
        self.logger.info("switch %s sent experimenter message %#x type %d, ignored",
                         dpid_str(msg.datapath.id or 0), msg.experimenter, msg.exp_type)

    # -- port statistics --------------------------------------------------------------
    def _monitor(self) -> None:
        """Poll forever. Any error is logged and the loop goes on: os-ken's native hub
        swallows exceptions of spawned threads, which would end monitoring silently.

        Polling also notices dead connections: os-ken 4.x's native hub only closes a
        connection whose switch went away at the next message sent on it."""
        while self.is_active:
            hub.sleep(self.poll_s)
            try:
                self.polls += 1
                for dp in list(self.datapaths.values()):
                    parser = dp.ofproto_parser
                    dp.send_msg(parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY))
                self._report_bounds()
                self._write_registry()
            except Exception:
                self.logger.exception("port-statistics poll %d failed", self.polls)

    def _report_bounds(self) -> None:
        for dpid, c in list(self.switches.items()):
            new = c.packet_ins_dropped - self._reported_drops.get(dpid, 0)
            if new:
                self._reported_drops[dpid] = c.packet_ins_dropped
                self.logger.warning("switch %s: %d packet-ins over %.0f/s dropped since the "
                                    "last poll (%d in all)", dpid_str(dpid), new,
                                    self.packet_in_rate_hz, c.packet_ins_dropped)
            table = self.macs.get(dpid)
            if table is not None and table.evicted > self._reported_evictions.get(dpid, 0):
                self.logger.warning("switch %s: %d MAC entries evicted in all",
                                    dpid_str(dpid), table.evicted)
                self._reported_evictions[dpid] = table.evicted

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev: Any) -> None:
        dp = ev.msg.datapath
        t_wall, t_mono = time.time(), time.monotonic()
        for line in self._stats_lines(dp, ev.msg.body, t_wall, t_mono):
            self._stats.write(line)

    def _stats_lines(self, dp: Any, body: list[Any], t_wall: float,
                     t_mono: float) -> Iterator[str]:
        ports = self._ports(dp)
        switch = self._counters(dp.id).name
        for s in body:
            if s.port_no > dp.ofproto.OFPP_MAX:
                continue  # the bridge's local port carries no emulated traffic
            port = ports.get(s.port_no)
            rec = {"t_wall": round(t_wall, 6), "t_mono": round(t_mono, 6), "poll": self.polls,
                   "dpid": dpid_str(dp.id), "switch": switch, "port": s.port_no,
                   "port_name": _text(port.name) if port is not None else None,
                   "rx_bytes": s.rx_bytes, "rx_packets": s.rx_packets,
                   "rx_dropped": s.rx_dropped, "rx_errors": s.rx_errors,
                   "tx_bytes": s.tx_bytes, "tx_packets": s.tx_packets,
                   "tx_dropped": s.tx_dropped, "tx_errors": s.tx_errors,
                   "duration_s": round(s.duration_sec + s.duration_nsec / 1e9, 3)}
            yield json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"


def _address(dp: Any) -> str:
    """The switch's end of the connection, ``ip:port`` (IPv6 tuples have more fields)."""
    return f"{dp.address[0]}:{dp.address[1]}"


def _text(name: bytes | str) -> str:
    """Port names arrive as bytes or str depending on the framework version."""
    return name.decode(errors="replace") if isinstance(name, bytes) else name
