"""The os-ken controller: its bounded tables, its robustness against a scripted switch,
and, with real Open vSwitch and Mininet, forwarding, flows, port statistics, reconnection
and the runner's start and teardown of it."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import LOG_FILE, PORT_STATS_FILE
from controller.tables import MacTable, TokenBucket
from experiments.bench.controller import (
    ping_rtts_ms,
    port_stats_accuracy,
    reach_all_pairs,
    switch_counters,
)
from experiments.emulation.controller import ControllerProcess, read_registry
from experiments.emulation.doctor import probe
from experiments.emulation.leftovers import STATE_DIR
from experiments.emulation.network import Emulation
from experiments.spec import SpecError, load_spec, parse_spec
from topologies.links import LinkParams
from topologies.registry import build_graph

REPO = Path(__file__).resolve().parent.parent


def _eventually(what: str, check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def _log_text(out_dir: Path) -> str:
    return (out_dir / LOG_FILE).read_text()


# -- bounded state, no switch needed ----------------------------------------------------
def test_mac_table_caps_and_evicts_least_recently_learned() -> None:
    t = MacTable(2)
    assert t.learn("a", 1) is None
    assert t.learn("b", 2) is None
    assert t.learn("a", 3) is None  # refreshed: now the most recent, port updated
    assert t.learn("c", 4) == "b"
    assert len(t) == 2 and t.evicted == 1
    assert (t.port("a"), t.port("b"), t.port("c")) == (3, None, 4)


def test_token_bucket_limits_rate_after_burst() -> None:
    b = TokenBucket(rate_hz=10, burst=5)
    assert sum(b.take(0.0) for _ in range(20)) == 5
    assert sum(b.take(1.0) for _ in range(20)) == 5  # refilled to the burst, not beyond
    assert [b.take(1.1), b.take(1.1)] == [True, False]  # 0.1 s at 10/s: one token


def test_spec_with_controller_uses_ovs_and_refuses_bridge() -> None:
    base = {"name": "x", "topology": {"name": "gigabit-cluster", "params": {"n": 2}}}
    assert parse_spec(base).switch == "bridge"
    assert parse_spec({**base, "controller": "os-ken"}).switch == "ovs"
    with pytest.raises(SpecError, match=r"switch: bad value .bridge.*controller"):
        parse_spec({**base, "controller": "os-ken", "switch": "bridge"})
    assert load_spec("controller-demo").controller == "os-ken"


# -- a scripted switch against the real controller process -------------------------------
OFP_VERSION = 4
OFPT_HELLO, OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY, OFPT_EXPERIMENTER = 0, 1, 2, 3, 4
OFPT_FEATURES_REQUEST, OFPT_FEATURES_REPLY, OFPT_PACKET_IN = 5, 6, 10
OFPT_MULTIPART_REQUEST, OFPT_MULTIPART_REPLY, OFPMP_PORT_DESC = 18, 19, 13
OFPP_LOCAL = 0xFFFFFFFE


def _ofp(msg_type: int, body: bytes = b"", xid: int = 0) -> bytes:
    return struct.pack("!BBHI", OFP_VERSION, msg_type, 8 + len(body), xid) + body


def _packet_in(in_port: int, frame: bytes) -> bytes:
    # ofp_match with one OXM (OFPXMT_OFB_IN_PORT), padded to 8 bytes, then 2 bytes of pad.
    match = struct.pack("!HHII", 1, 12, 0x80000004, in_port) + b"\0" * 4
    return _ofp(OFPT_PACKET_IN, struct.pack("!IHBBQ", 0xFFFFFFFF, len(frame), 0, 0, 0)
                + match + b"\0\0" + frame)


class ScriptedSwitch:
    """Speaks just enough OpenFlow 1.3 to connect, then sends whatever a test scripts; a
    reader thread drains the controller's messages and keeps their types."""

    def __init__(self, port: int, dpid: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.dpid = dpid
        self.received: list[tuple[int, int]] = []  # (type, xid)
        self._buf = b""
        self._handshake()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _recv_msg(self) -> tuple[int, int, bytes]:
        while len(self._buf) < 8 or len(self._buf) < struct.unpack("!H", self._buf[2:4])[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("controller closed the connection")
            self._buf += chunk
        _v, t, length, xid = struct.unpack("!BBHI", self._buf[:8])
        msg, self._buf = self._buf[:length], self._buf[length:]
        return t, xid, msg[8:]

    def _wait_for(self, msg_type: int) -> tuple[int, bytes]:
        while True:
            t, xid, body = self._recv_msg()
            if t == msg_type:
                return xid, body

    def _handshake(self) -> None:
        self.sock.sendall(_ofp(OFPT_HELLO))
        xid, _ = self._wait_for(OFPT_FEATURES_REQUEST)
        self.sock.sendall(_ofp(OFPT_FEATURES_REPLY,
                               struct.pack("!QIBB2xII", self.dpid, 0, 254, 0, 0, 0), xid))
        while True:
            xid, body = self._wait_for(OFPT_MULTIPART_REQUEST)
            if struct.unpack("!H", body[:2])[0] == OFPMP_PORT_DESC:
                break
        local = struct.pack("!I4x6s2x16sIIIIIIII", OFPP_LOCAL, b"\0" * 6, b"fake0", 0, 0,
                            0, 0, 0, 0, 0, 0)
        self.sock.sendall(_ofp(OFPT_MULTIPART_REPLY,
                               struct.pack("!HH4x", OFPMP_PORT_DESC, 0) + local, xid))

    def _drain(self) -> None:
        try:
            while True:
                t, xid, _ = self._recv_msg()
                self.received.append((t, xid))
        except OSError:
            return

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        # shutdown first: a plain close() while the reader thread sits in recv() sends no
        # FIN, and the controller would never see the switch go.
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    ctl = ControllerProcess(tmp_path / "controller", log=lambda _m: None, max_macs=100,
                            packet_in_rate_hz=500)
    ctl.start()
    ctl.wait_listening()
    try:
        yield ctl
    finally:
        ctl.stop()


def _mac(n: int) -> bytes:
    return bytes([0x02, 0, 0, 0, 0, 0]) if n == 0 else bytes([0x02]) + n.to_bytes(5, "big")


def test_controller_survives_unknown_messages_bursts_and_reconnects(
        controller: ControllerProcess) -> None:
    out, dpid = controller.out_dir, 0xFEED
    key = f"{dpid:016x}"
    sw = ScriptedSwitch(controller.port, dpid)
    _eventually("the scripted switch to register", lambda: key in read_registry(out).get(
        "connected", {}))
    assert read_registry(out)["switches"][key]["name"] == "fake0"

    sw.send(_ofp(99, b"\x01" * 16))  # no such message type
    sw.send(_ofp(OFPT_ERROR, struct.pack("!HH", 1, 1) + b"\0" * 8))
    sw.send(_ofp(OFPT_EXPERIMENTER, struct.pack("!II", 0xABCDEF, 7) + b"junk"))
    # A burst of 3,000 packet-ins from 3,000 different source addresses.
    rng = random.Random(7)
    burst = b"".join(_packet_in(1 + i % 4, _mac(1) + _mac(rng.randrange(2, 2**40))
                                + b"\x08\x00" + b"\0" * 46) for i in range(3000))
    t0 = time.monotonic()
    sw.send(burst)
    counters = _eventually("every packet-in to be counted", lambda: (
        (c := read_registry(out)["switches"][key])["packet_ins"] == 3000 and c), 20)
    print(f"3000 packet-ins taken in {time.monotonic() - t0:.2f} s: {counters}")
    assert counters["packet_ins_dropped"] > 0
    assert counters["macs"] <= 100 and counters["macs_evicted"] > 0

    sw.send(_ofp(OFPT_ECHO_REQUEST, b"", xid=4242))
    _eventually("an echo reply after all that", lambda: (OFPT_ECHO_REPLY, 4242) in sw.received)

    sw.close()  # the switch goes away and comes back
    sw2 = ScriptedSwitch(controller.port, dpid)
    _eventually("the second connection", lambda: read_registry(out)["switches"][key][
        "connections"] == 2 and key in read_registry(out)["connected"])
    sw2.send(_ofp(OFPT_ECHO_REQUEST, b"", xid=4343))
    _eventually("an echo reply on the new connection",
                lambda: (OFPT_ECHO_REPLY, 4343) in sw2.received)
    sw2.close()
    _eventually("the disconnection to be noticed",
                lambda: key not in read_registry(out)["connected"])
    assert controller.proc is not None and controller.proc.poll() is None
    log = _log_text(out)
    for said in ("error while parsing OpenFlow", "OpenFlow error type 1 code 1",
                 "experimenter message 0xabcdef", "packet-ins over 500/s dropped",
                 "MAC table full", "(connection 2)", f"switch {key} disconnected"):
        assert said in log, f"log does not say {said!r}:\n{log}"
    # Either the first connection was seen to close before the second came, or the second
    # replaced it and the first was then reported closed.
    assert log.count(f"switch {key} disconnected") == 2 \
        or f"old connection of switch {key}" in log, log


# -- real Open vSwitch and Mininet ------------------------------------------------------
def _emulation(topo: str, params: dict[str, Any], out: Path,
               bw_mbps: float | None = 100) -> tuple[Emulation, ControllerProcess]:
    ctl = ControllerProcess(out, log=lambda _m: None)
    g = build_graph(topo, params, LinkParams(bw_mbps=bw_mbps))
    return Emulation(g, switch="ovs", probe=probe(), log=lambda _m: None, controller=ctl), ctl


def _dump_flows(switch: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch],
                         capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if "actions=" in line]


@pytest.fixture(scope="class")
def cluster(tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Emulation, ControllerProcess]]:
    """The 4-PC gigabit cluster on one OVS switch with the controller, for the tests of
    one class in turn (a network each would hold the machine's Mininet longer). Class
    scope, not module: the network holds the machine lock, and a later test of this
    module that builds its own network would wait for it forever."""
    emu, ctl = _emulation("gigabit-cluster", {"n": 4}, tmp_path_factory.mktemp("cluster"))
    try:
        emu.start()
        yield emu, ctl
    finally:
        emu.stop()


@pytest.mark.root
class TestOnTheGigabitCluster:
    """One network, four tests in order: forwarding, flows, port statistics, reconnection."""

    def test_pingall_through_controller_installs_flows(
            self, cluster: tuple[Emulation, ControllerProcess]) -> None:
        emu, ctl = cluster
        print(f"controller start-up {ctl.startup_s:.3f} s, switch connected "
              f"{ctl.connect_s:.3f} s after start")
        assert reach_all_pairs(emu.net) == []
        assert emu.net.pingAll(timeout="2") == 0
        flows = _dump_flows("s1")
        learned = [f for f in flows if "priority=1," in f and "dl_src=" in f and "dl_dst=" in f]
        assert any("priority=0 actions=CONTROLLER" in f for f in flows), flows
        assert len(learned) >= 4 * 3, flows  # at least one flow per ordered pair of hosts
        assert all("idle_timeout=30" in f for f in learned), learned

    def test_later_packets_no_longer_reach_the_controller(
            self, cluster: tuple[Emulation, ControllerProcess]) -> None:
        emu, ctl = cluster
        assert ping_rtts_ms(emu.net, "pc2", "pc4", 1)[0] is not None  # flows in place
        dpid = emu.net["s1"].dpid
        before = switch_counters(ctl.out_dir, dpid)
        rtts = ping_rtts_ms(emu.net, "pc2", "pc4", 50, interval_s=0.02)
        after = switch_counters(ctl.out_dir, dpid)
        assert None not in rtts
        # 100 ICMP packets crossed the switch and none reached the controller: the only
        # unicast frames were pc2's and pc4's, whose flows were in place. The hosts' own
        # multicast (IPv6 neighbour discovery, flooded without a flow) still arrives, as
        # many as the machine's timing makes: once 10 in this window, under load.
        unicast = [c["packet_ins"] - c["packet_ins_multicast"] for c in (before, after)]
        assert unicast[1] == unicast[0], (before, after)
        mac2, mac4 = emu.net["pc2"].MAC(), emu.net["pc4"].MAC()
        pair = [f for f in _dump_flows("s1") if f"dl_src={mac2},dl_dst={mac4}" in f]
        n_packets = int(re.search(r"n_packets=(\d+)", pair[0]).group(1)) if pair else 0
        assert n_packets >= 50, pair

    def test_port_statistics_agree_with_a_transfer_of_known_size(
            self, cluster: tuple[Emulation, ControllerProcess]) -> None:
        emu, ctl = cluster
        r = port_stats_accuracy(emu.net, ctl.out_dir, "pc1", "pc3", n_bytes=10_000_000)
        print(f"port statistics: {r}")
        assert abs(r["rx_vs_sender_intf"] - 1) < 0.01, r
        assert abs(r["tx_vs_receiver_intf"] - 1) < 0.01, r
        # At least what was read, at most what was written plus headers (see the bench).
        assert r["received_bytes"] <= r["port_rx_bytes"] <= 1.06 * r["sent_bytes"], r
        with open(ctl.out_dir / PORT_STATS_FILE) as fh:
            rec = json.loads(fh.readline())
        assert set(rec) == {"t_wall", "t_mono", "poll", "dpid", "switch", "port", "port_name",
                            "rx_bytes", "rx_packets", "rx_dropped", "rx_errors", "tx_bytes",
                            "tx_packets", "tx_dropped", "tx_errors", "duration_s"}
        assert rec["switch"] == "s1" and rec["port_name"] == f"s1-eth{rec['port']}"

    def test_switch_reconnects_and_forwarding_resumes(
            self, cluster: tuple[Emulation, ControllerProcess]) -> None:
        emu, ctl = cluster
        dpid = emu.net["s1"].dpid
        out = ctl.out_dir
        subprocess.run(["ovs-vsctl", "del-controller", "s1"], check=True)
        _eventually("the controller to see s1 go",
                    lambda: dpid not in read_registry(out).get("connected", {}))
        subprocess.run(["ovs-vsctl", "set-controller", "s1", f"tcp:{ctl.host}:{ctl.port}"],
                       check=True)
        _eventually("s1 to reconnect", lambda: dpid in read_registry(out)["connected"]
                    and read_registry(out)["switches"][dpid]["connections"] == 2)
        # the flows went with the old connection: each pair's first packet is a packet-in
        assert reach_all_pairs(emu.net) == []
        assert emu.net.pingAll(timeout="2") == 0
        log = _log_text(out)
        assert f"switch {dpid} disconnected" in log and "(connection 2)" in log


@pytest.mark.root
@pytest.mark.parametrize(("topo", "params", "n_switches"), [
    ("scot", {"tree": "a-b,b-c", "m": 3, "mode": "switch"}, 1),
    ("scot-compute-nodes", {"hang": "0+0+0+0", "m": 3, "n_nodes": 3}, 4),
])
def test_pingall_on_scot_switch_topologies(tmp_path: Path, topo: str, params: dict[str, Any],
                                           n_switches: int) -> None:
    emu, ctl = _emulation(topo, params, tmp_path / "controller", bw_mbps=None)
    try:
        emu.start()
        unreached = reach_all_pairs(emu.net)
        loss = emu.net.pingAll(timeout="2")
        registered = read_registry(ctl.out_dir)["connected"]
    finally:
        emu.stop()
    assert len(registered) == n_switches
    assert unreached == [] and loss == 0


# -- the runner -------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        return b"controller.launch" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _controller_targets(port: int) -> list[str]:
    """OVS controller rows that point at this port: our switches, if any were left."""
    out = subprocess.run(["ovs-vsctl", "--bare", "--columns=target", "find", "Controller",
                          f'target="tcp:127.0.0.1:{port}"'], capture_output=True, text=True,
                         check=True).stdout
    return out.split()


def _pubsublab(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "experiments.cli", "run", "controller-demo", "--out",
            str(tmp_path), *args]


@pytest.mark.root
def test_controller_demo_runs_end_to_end_and_leaves_nothing(tmp_path: Path) -> None:
    res = subprocess.run(_pubsublab(tmp_path, "--json"), capture_output=True, text=True,
                         timeout=600, check=False, cwd=REPO)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert result["status"] == "ok" and result["summaries"]["flood"]["missing"] == 0, result
    run_dir = Path(result["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ctl = manifest["controller"]
    assert manifest["switch"] == "ovs" and ctl["startup_s"] > 0
    assert manifest["timing"]["controller_start_s"] == ctl["startup_s"]
    stats = [json.loads(line) for line in Path(ctl["files"]["port_stats"]).read_text()
             .splitlines()]
    assert {r["port_name"] for r in stats} == {f"s1-eth{i}" for i in range(1, 5)}
    assert not _alive(ctl["pid"])
    assert _controller_targets(int(ctl["listen"].rsplit(":", 1)[1])) == []


@pytest.mark.root
def test_killed_runners_controller_is_ended_by_the_next_run(tmp_path: Path) -> None:
    proc = subprocess.Popen(_pubsublab(tmp_path, "--set", "fidelity.iperf_s=20"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen, pid = "", None
    deadline = time.monotonic() + 300  # it may wait for another emulation's lock
    while "network up" not in seen and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if m := re.search(r"controller \(os-ken, pid (\d+)\) listening", line):
            pid = int(m.group(1))
    if pid is None or "network up" not in seen:
        proc.kill()
        pytest.fail(f"the run never came up:\n{seen}")
    os.kill(proc.pid, signal.SIGKILL)  # no finally runs: the controller is orphaned
    proc.wait()
    assert _alive(pid)
    assert list(STATE_DIR.glob(f"{proc.pid}.json"))
    second = subprocess.run(_pubsublab(tmp_path, "--set", "workload={}", "--set",
                                       "fidelity.links=0"),
                            capture_output=True, text=True, timeout=600, check=False, cwd=REPO)
    assert second.returncode == 0, second.stderr
    assert "cleaned leftovers" in second.stderr
    assert not _alive(pid)
