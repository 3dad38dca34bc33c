"""Links opened on demand in the emulated runtime, without Mininet: broker processes on
127.0.0.x loopback addresses (as in tests/test_broker.py) whose configs list every other
broker as a ``peer`` and no fixed neighbour, hosting the ``gossip`` core (peers learnt from
messages). The brokers run a wrapper of gossip that also logs every LinkUp and LinkDown it
is handed (``record`` kind ``seen``), so the tests see what reached the core, not only what
the broker did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_broker import (
    SECRET,
    _answer,
    _hello,
    free_port,
    read_log,
    records,
    status,
    terminate_all,
    wait_for,
)

from nodes.emulated.admission import MAX_UNPROVEN
from nodes.emulated.broker import NOFILE_BASE, NOFILE_CLIENTS, NOFILE_PER_LINK, nofile_needed
from nodes.emulated.client import Op, dump_ops
from nodes.frames import PREFIX_BYTES, body_length, decode_body, encode
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.workloads.ops import ClientOp, Workload

REPO = Path(__file__).resolve().parent.parent
IBM = {"filter": [["symbol", "=", "IBM"]]}
SAP = {"filter": [["symbol", "=", "SAP"]]}

# The broker process: nodes.emulated.broker's entry point with ``gossip-watch`` registered, gossip
# plus a ``seen`` record for every LinkUp and LinkDown handed to the core.
_LAUNCH = """
import sys
from nodes import cores
from nodes.emulated.broker import main
from nodes.cores.interface import LinkDown, LinkUp, Record
from nodes.cores import CoreInfo, gossip

class WatchCore(gossip.GossipCore):
    def handle(self, event, now_s):
        out = super().handle(event, now_s)
        if isinstance(event, LinkUp | LinkDown):
            out = [Record("seen", {"event": type(event).__name__, "peer": event.link}), *out]
        return out

cores.CORES["gossip-watch"] = CoreInfo(WatchCore, gossip.PARAMS)
sys.exit(main(sys.argv[1:]))
"""

Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start a broker (``kind`` "broker") or a client group (``kind`` "clients") from a
    config; every process is stopped at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(kind: str, name: str, config: dict[str, Any],
              preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
        path = tmp_path / f"{name}.config.json"
        path.write_text(json.dumps(config))
        if kind == "broker":
            argv = [sys.executable, "-c", _LAUNCH, "--config", str(path)]
        else:
            argv = [sys.executable, "-m", "nodes.emulated.client", "--config", str(path)]
        with open(tmp_path / f"{name}.out", "ab") as out:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=preexec_fn)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        terminate_all(procs)


class Mesh:
    """Brokers that know every other one as a peer, each on its own 127.0.0.x."""

    def __init__(self, log_dir: Path, names: Sequence[str], **params: Any) -> None:
        self.log_dir = log_dir
        self.names = list(names)
        self.addr = {n: [f"127.0.0.{21 + i}", 0] for i, n in enumerate(self.names)}
        for a in self.addr.values():
            a[1] = free_port(a[0])
        self.params = params

    def config(self, name: str, *, dormant: bool = False) -> dict[str, Any]:
        return {"broker": name, "listen": self.addr[name], "neighbours": {},
                "peers": {p: self.addr[p] for p in self.names if p != name},
                "dormant": dormant, "core": {"name": "gossip-watch", "params": self.params},
                "log_dir": str(self.log_dir), "secret": SECRET, "connect_timeout_s": 1.0}

    def start(self, spawn: Spawn, dormant: Sequence[str] = ()) -> dict[str, Any]:
        procs = {n: spawn("broker", n, self.config(n, dormant=n in dormant)) for n in self.names}
        for n in self.names:
            wait_for(lambda n=n: status(self.log_dir, n).get("state") == "running", 15,
                     f"{n} running")
        return procs

    def clients(self, spawn: Spawn, ops: Mapping[str, tuple[str, list[Op]]], start_at: float,
                duration_s: float) -> subprocess.Popen[bytes]:
        """One client group process: ``ops`` maps each client to (its broker, its ops)."""
        entries = []
        for client, (broker, client_ops) in sorted(ops.items()):
            dump_ops(self.log_dir / f"{client}.ops.jsonl", client_ops)
            entries.append({"client": client, "broker": broker, "broker_addr": self.addr[broker],
                            "ops": f"{client}.ops.jsonl"})
        return spawn("clients", "clients", {
            "clients": entries, "status_file": str(self.log_dir / "clients.status.json"),
            "common": {"log_dir": str(self.log_dir), "secret": SECRET,
                       "start_at_wall": start_at, "duration_s": duration_s,
                       "connect_timeout_s": 1.0}})


def _join(client: str, boot: str, t_s: float, msg_id: int = 1) -> Op:
    return Op(t_s, Message(MsgType.JOIN, msg_id, client, 0, {"bootstrap": boot}))


def _sub(client: str, flt: dict[str, Any], t_s: float, msg_id: int) -> Op:
    return Op(t_s, Message(MsgType.SUBSCRIBE, msg_id, client, 0, flt))


def _pub(client: str, symbol: str, t_s: float, msg_id: int) -> Op:
    return Op(t_s, Message(MsgType.PUBLISH, msg_id, client, 0,
                           {"attrs": {"symbol": symbol, "price": 20.0 + msg_id}}))


def _leave(client: str, t_s: float, msg_id: int) -> Op:
    return Op(t_s, Message(MsgType.LEAVE, msg_id, client, 0, {}))


def _workload(ops: Mapping[str, tuple[str, list[Op]]]) -> Workload:
    flat = sorted((ClientOp(op.t_s, c, b, op.msg) for c, (b, lst) in ops.items() for op in lst),
                  key=lambda op: op.t_s)
    return Workload(Schema({}), {c: b for c, (b, _) in ops.items()}, tuple(flat), {})


def _received(log_dir: Path, clients: Sequence[str]) -> Counter[tuple[str, int, str]]:
    return Counter((r["origin"], r["msg_id"], c) for c in clients
                   for r in records(log_dir, c, "recv", type="PUBLISH"))


def _before(rs: list[dict[str, Any]], t_wall: float) -> list[dict[str, Any]]:
    return [r for r in rs if r["t_wall"] < t_wall]


def _stop(procs: Mapping[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for name, p in procs.items():
        assert p.wait(timeout=10) == 0, name


def _seen(log_dir: Path, broker: str, event: str, before: float = float("inf")) -> list[str]:
    return [r["peer"] for r in _before(records(log_dir, broker, "record", kind="seen",
                                               event=event), before)]


def _ups(log_dir: Path, broker: str) -> list[dict[str, Any]]:
    return records(log_dir, broker, "link", state="up", role="broker")


# ---- the tests ------------------------------------------------------------------------------


def test_gossip_on_six_brokers_from_one_seed(tmp_path: Path, spawn: Spawn) -> None:
    """b1 is the only member at start; b2..b6 are dormant until they JOIN through it.
    Every broker then publishes at once to every other (crossed dials, resolved), and every
    subscriber gets each matching publication exactly once."""
    from nodes.workloads.membership import membership_intervals, oracle_workload
    from nodes.workloads.oracle import expected_deliveries

    names = [f"b{i}" for i in range(1, 7)]
    mesh = Mesh(tmp_path, names, heartbeat_s=0.3, timeout_s=3.0)
    brokers = mesh.start(spawn, dormant=names[1:])
    assert status(tmp_path, "b2")["dormant"] is True and status(tmp_path, "b1")["dormant"] is False
    ops: dict[str, tuple[str, list[Op]]] = {}
    for i, b in enumerate(names):
        c = f"c{b}"
        # b1 is the seed: it founds the overlay (a JOIN through itself starts its heartbeats)
        mine = [_join(c, "b1", 0.1 * i)]
        mine.append(_sub(c, IBM if i % 2 else SAP, 1.2, 2))
        mine += [_pub(c, "IBM" if k % 2 else "SAP", 1.8 + 0.02 * k, 3 + k) for k in range(4)]
        ops[c] = (b, mine)
    start = time.time() + 1.0
    clients = mesh.clients(spawn, ops, start, 3.0)
    assert clients.wait(timeout=20) == 0
    t_stop = time.time()
    _stop(brokers)

    workload = _workload(ops)
    assert membership_intervals(workload.ops) == {b: [[0.1 * i, None]]
                                                  for i, b in enumerate(names)}
    want = Counter((o, m, c) for (o, m), cs in
                   expected_deliveries(oracle_workload(workload)).items() for c in cs)
    assert len(want) == 6 * 4 * 3  # each publication matches 3 of the 6 subscribers
    assert _received(tmp_path, list(ops)) == want  # exactly once each
    for b in names:
        assert not records(tmp_path, b, "error")
        assert not _before(records(tmp_path, b, "drop"), t_stop)
        ups = _ups(tmp_path, b)
        # one kept connection per pair: one up per peer, and the core saw one LinkUp each
        assert sorted(r["link"] for r in ups) == [p for p in names if p != b], b
        assert sorted(_seen(tmp_path, b, "LinkUp")) == [p for p in names if p != b], b
        assert {r["reason"] for r in ups} <= {"dialled", "accepted"}
        for r in ups:  # the other end saw the same connection from its side
            other = _ups(tmp_path, r["link"])
            assert [o["reason"] for o in other if o["link"] == b] == [
                "accepted" if r["reason"] == "dialled" else "dialled"]
        refused = records(tmp_path, b, "link", state="refused")
        assert all(r["reason"] == "crossed" and b < r["link"] for r in refused)
        assert [r["state"] for r in records(tmp_path, b, "record", kind="membership")] == (
            ["dormant", "joined"] if b != "b1" else [])
        assert records(tmp_path, b, "record", kind="nofile")[0]["soft"] >= nofile_needed(5)


def test_leave_disconnects_and_dormant_peers_refuse(tmp_path: Path, spawn: Spawn) -> None:
    mesh = Mesh(tmp_path, ["a", "b", "c"])
    brokers = mesh.start(spawn, dormant=["b", "c"])
    ops = {
        # c joins through b while b is still dormant: refused, the JOIN is dropped
        "cc": ("c", [_join("cc", "b", 0.1), _join("cc", "a", 0.6, 2), _sub("cc", IBM, 1.0, 3),
                     _leave("cc", 1.8, 4), _pub("cc", "IBM", 2.3, 5)]),
        "cb": ("b", [_join("cb", "a", 0.4), _sub("cb", IBM, 1.0, 2)]),
        "ca": ("a", [_pub("ca", "IBM", 1.4, 1), _pub("ca", "IBM", 2.3, 2)]),
    }
    start = time.time() + 1.0
    clients = mesh.clients(spawn, ops, start, 2.8)
    assert clients.wait(timeout=20) == 0
    t_stop = time.time()
    _stop(brokers)

    # the dormant b turned c away; c's core got LinkDown and the JOIN was dropped
    assert [r["reason"] for r in records(tmp_path, "b", "link", state="refused")] == ["dormant"]
    failed = records(tmp_path, "c", "link", state="dial_failed")
    assert len(failed) == 1 and "dormant" in failed[0]["reason"] and "retry_in_s" not in failed[0]
    assert [(r["type"], r["reason"]) for r in records(tmp_path, "c", "drop")] == [
        ("JOIN", "dial_failed"), ("PUBLISH", "dormant")]  # the last: c's client after LEAVE
    assert _seen(tmp_path, "c", "LinkDown") == ["b"]
    # before the LEAVE both subscribers got a's publication; after it only b's
    assert _received(tmp_path, ["cb", "cc"]) == Counter(
        {("ca", 1, "cb"): 1, ("ca", 1, "cc"): 1, ("ca", 2, "cb"): 1})
    # c's LEAVE: LEAVE sent to both, then each link closed (no LinkDown at c: it asked)
    down = records(tmp_path, "c", "link", state="down", reason="disconnect")
    assert sorted(r["link"] for r in down) == ["a", "b"]
    log = read_log(tmp_path, "c")
    for peer in ("a", "b"):
        leave = next(i for i, r in enumerate(log) if r["ev"] == "send" and r["link"] == peer
                     and r["type"] == "LEAVE")
        closed = next(i for i, r in enumerate(log) if r["ev"] == "link" and r["link"] == peer
                      and r.get("reason") == "disconnect")
        assert leave < closed  # flushed, then closed
        # the peer saw the connection end: LinkDown to its core
        assert _seen(tmp_path, peer, "LinkDown", before=t_stop) == ["c"]
        assert records(tmp_path, peer, "record", kind="link_lost", peer="c")
    assert [r["state"] for r in records(tmp_path, "c", "record", kind="membership")] == [
        "dormant", "joined", "left"]
    assert status(tmp_path, "c")["dormant"] is True
    assert not any(records(tmp_path, n, "error") for n in ("a", "b", "c"))


def test_a_dial_on_demand_pays_the_links_delay(tmp_path: Path, spawn: Spawn) -> None:
    """Where the broker adds the link delay itself (emulate_link, 100 ms one way), a dial
    on demand takes what the simulator charges: the dialler's side up two delays after
    its Send, the acceptor's three, and the first message there after the acceptor's
    LinkUp, three delays after it was sent. (The kernel's handshake alone takes a
    millisecond here: a pair's first message used to skip the round trip.)"""
    delay_s = 0.1
    mesh = Mesh(tmp_path, ["a", "b"])
    configs = {}
    for n in mesh.names:
        cfg = mesh.config(n, dormant=n == "b")
        cfg["peers"] = {p: {"addr": addr, "delay_ms": delay_s * 1000}
                        for p, addr in cfg["peers"].items()}
        configs[n] = {**cfg, "emulate_link": True}
    brokers = {n: spawn("broker", n, configs[n]) for n in mesh.names}
    for n in mesh.names:
        wait_for(lambda n=n: status(tmp_path, n).get("state") == "running", 15, f"{n} running")
    ops = {"cb": ("b", [_join("cb", "a", 0.2)])}
    clients = mesh.clients(spawn, ops, time.time() + 1.0, 1.5)
    assert clients.wait(timeout=20) == 0
    _stop(brokers)

    # b's JOIN to a opened the link: its 'configured' record is the Send that dialled.
    dial = records(tmp_path, "b", "link", state="configured", link="a")[0]["t_wall"]
    (b_up,) = records(tmp_path, "b", "link", state="up", link="a")
    (a_up,) = records(tmp_path, "a", "link", state="up", link="b")
    assert (b_up["reason"], a_up["reason"]) == ("dialled", "accepted")
    slack_s = 0.15  # a loaded 2-core machine's scheduling
    assert 2 * delay_s <= b_up["t_wall"] - dial < 2 * delay_s + slack_s
    assert 3 * delay_s <= a_up["t_wall"] - dial < 3 * delay_s + slack_s
    join = records(tmp_path, "a", "recv", link="b", type="JOIN")[0]
    assert 3 * delay_s <= join["t_wall"] - dial < 3 * delay_s + slack_s
    log = read_log(tmp_path, "a")
    seen = next(i for i, r in enumerate(log) if r["ev"] == "record"
                and r.get("kind") == "seen" and r.get("peer") == "b")
    assert seen < log.index(join)  # LinkUp reached a's core before b's first message
    assert not any(records(tmp_path, n, "error") for n in mesh.names)


# ---- the dial race, played by the test against one broker ----------------------------------


def _frame_reader(sock_file: Any) -> Iterator[Message]:
    while True:
        prefix = sock_file.read(PREFIX_BYTES)
        if len(prefix) < PREFIX_BYTES:
            return
        yield decode_body(sock_file.read(body_length(prefix)))


def test_dial_race_keeps_the_smaller_names_connection(tmp_path: Path, spawn: Spawn) -> None:
    """Broker m dials a peer that dials m back before answering. Against z (m dials the
    larger name): m refuses z's connection and keeps its own. Against a (the smaller
    name): m takes a's connection, sends what it held on it, and its own refused dial ends
    without a failure."""
    import socket

    addr = {"m": ["127.0.0.31", free_port("127.0.0.31")]}
    listeners = {}
    for i, peer in enumerate(("a", "z")):
        host = f"127.0.0.{32 + i}"
        s = socket.socket()
        s.bind((host, 0))
        s.listen()
        s.settimeout(10)
        listeners[peer] = s
        addr[peer] = [host, s.getsockname()[1]]
    config = {"broker": "m", "listen": addr["m"], "neighbours": {},
              "peers": {p: addr[p] for p in ("a", "z")},
              "core": {"name": "gossip-watch", "params": {}}, "log_dir": str(tmp_path),
              "secret": SECRET, "connect_timeout_s": 2.0}
    broker = spawn("broker", "m", config)
    wait_for(lambda: status(tmp_path, "m").get("state") == "running", 15, "m running")
    client = socket.create_connection(tuple(addr["m"]), timeout=10)
    client.sendall(_hello("cl", "client", to="m"))
    conns = []
    try:
        for i, peer in enumerate(("z", "a")):
            client.sendall(encode(Message(MsgType.JOIN, i + 1, "cl", 0, {"bootstrap": peer})))
            dialled, _ = listeners[peer].accept()  # m's dial, held: no answer yet
            dialled.settimeout(10)
            conns.append(dialled)
            from_m = _frame_reader(dialled.makefile("rb"))
            m_hello = next(from_m)
            assert (m_hello.payload["name"], m_hello.payload["role"]) == ("m", "broker")
            # the peer's own connection comes from its configured address
            ours = socket.create_connection(tuple(addr["m"]), timeout=10,
                                            source_address=(addr[peer][0], 0))
            conns.append(ours)
            ours.sendall(_hello(peer, "broker", to="m"))
            frames = _frame_reader(ours.makefile("rb"))
            answer = next(frames)
            assert answer.payload["name"] == "m"
            if peer == "z":  # m < z, and m is dialling z: z's connection is refused
                assert answer.payload.get("refused") == "crossed"
                assert next(frames, None) is None  # and closed
                dialled.sendall(_answer("z", m_hello))  # now z answers m's dial
                got = next(from_m)
            else:  # a < m: m accepts a's connection and sends the held JOIN on it
                assert "refused" not in answer.payload
                got = next(frames)
                dialled.sendall(_answer("a", m_hello, refused="crossed"))  # a refuses m's dial
            assert (got.type, got.payload) == (MsgType.JOIN, {})
        wait_for(lambda: status(tmp_path, "m").get("peers_up") == ["a", "z"], 5, "both up")
        time.sleep(0.3)  # m's refused dial to a has ended by now
    finally:
        client.close()
        for c in conns:  # shut down first: the frame readers' file objects keep the fds
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        for s in listeners.values():
            s.close()
    wait_for(lambda: status(tmp_path, "m").get("peers_up") == [], 5, "both down")
    broker.send_signal(signal.SIGTERM)
    assert broker.wait(timeout=10) == 0
    assert [(r["link"], r["reason"]) for r in _ups(tmp_path, "m")] == [
        ("z", "dialled"), ("a", "accepted")]
    assert [(r["link"], r["reason"]) for r in records(tmp_path, "m", "link", state="refused")
            ] == [("z", "crossed")]
    assert not records(tmp_path, "m", "link", state="dial_failed")
    assert _seen(tmp_path, "m", "LinkUp") == ["z", "a"]
    assert sorted(_seen(tmp_path, "m", "LinkDown")) == ["a", "z"]  # we closed at the end
    assert not records(tmp_path, "m", "drop") and not records(tmp_path, "m", "error")


# ---- failure detection --------------------------------------------------------------------


def test_a_crash_is_detected_by_heartbeats(tmp_path: Path, spawn: Spawn) -> None:
    """Four members with heartbeats (0.2 s, timeout 1 s); j3 is SIGKILLed: the others'
    LinkDown, dials refused (with their heartbeats dropped and logged) and, within the
    timeout, ``member_down``."""
    names = ["s", "j1", "j2", "j3"]
    heartbeat_s, timeout_s = 0.2, 1.0
    mesh = Mesh(tmp_path, names, heartbeat_s=heartbeat_s, timeout_s=timeout_s)
    brokers = mesh.start(spawn, dormant=names)
    # s founds the overlay (its JOIN through itself starts its heartbeats); the others join
    ops = {f"c{b}": (b, [_join(f"c{b}", "s", 0.1 * i)]) for i, b in enumerate(names)}
    start = time.time() + 1.0
    clients = mesh.clients(spawn, ops, start, 6.0)
    survivors = names[:3]
    # every member knows every other once each has heard a heartbeat from all
    wait_for(lambda: all(sorted(r["link"] for r in _ups(tmp_path, b)) ==
                         sorted(set(names) - {b}) for b in names), 10, "a full mesh")
    victim = brokers.pop("j3")
    victim.kill()
    victim.wait()
    killed_wall = time.time()

    def detected() -> bool:
        return all(records(tmp_path, b, "record", kind="member_down", member="j3")
                   for b in survivors)

    wait_for(detected, timeout_s + 4 * heartbeat_s + 3.0, "member_down for j3")
    for b in survivors:
        down = records(tmp_path, b, "record", kind="member_down", member="j3")[0]
        assert down["t_wall"] - killed_wall <= timeout_s + 2 * heartbeat_s + 1.0
        assert "j3" in _seen(tmp_path, b, "LinkDown")
        assert records(tmp_path, b, "link", link="j3", state="down")
        # heartbeats sent after the crash found j3's port closed
        assert records(tmp_path, b, "link", link="j3", state="dial_failed")
        drops = records(tmp_path, b, "drop", link="j3")
        assert {r["type"] for r in drops} == {"HEARTBEAT"}
        assert "dial_failed" in {r["reason"] for r in drops}
        # (a heartbeat queued when the connection broke is dropped as link_down)
        assert {r["reason"] for r in drops} <= {"dial_failed", "link_down"}
        # and no live member was declared dead
        assert [r["member"] for r in records(tmp_path, b, "record", kind="member_down")] == ["j3"]
    clients.terminate()
    clients.wait(timeout=10)
    _stop(brokers)


# ---- file descriptors ---------------------------------------------------------------------


def test_nofile_limit_arithmetic() -> None:
    # a 64-broker full mesh: 2,016 connections, 63 per broker, one descriptor each side
    assert 64 * 63 // 2 == 2016
    assert (nofile_needed(63) == NOFILE_BASE + NOFILE_PER_LINK * 63 + NOFILE_CLIENTS
            + MAX_UNPROVEN == 1470)


def _low_nofile(limit: int) -> Callable[[], None]:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return set_limit


async def _serve_peers(addr: Mapping[str, list[Any]], members: list[str], got: dict[str, list[str]],
                       done: asyncio.Event, n_pubs: int) -> list[asyncio.Server]:
    """63 fake peers: each answers the hub's HELLO; p00 (the bootstrap) answers the JOIN
    with every member; each records the types that reach it."""

    async def serve(peer: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                prefix = await reader.readexactly(PREFIX_BYTES)
                msg = decode_body(await reader.readexactly(body_length(prefix)))
                if msg.type is MsgType.HELLO:
                    writer.write(_answer(peer, msg))
                    continue
                got.setdefault(peer, []).append(msg.type.name)
                if msg.type is MsgType.JOIN:
                    writer.write(encode(Message(MsgType.JOIN, 1, peer, 0, {"members": members})))
                if sum(t == "PUBLISH" for ts in got.values() for t in ts) == n_pubs:
                    done.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    servers = []
    for peer, (host, port) in addr.items():
        servers.append(await asyncio.start_server(
            lambda r, w, peer=peer: serve(peer, r, w), host, port))
    return servers


def test_one_broker_with_63_peers_fits_its_fd_limit(tmp_path: Path, spawn: Spawn) -> None:
    """A hub broker started with a soft RLIMIT_NOFILE of 64 (too small for 63 connections)
    raises it to what a 64-node full mesh needs, then opens 63 links at once: it learns
    63 members from its bootstrap and publishes to every one."""
    peers = [f"p{i:02d}" for i in range(63)]
    addr = {p: [f"127.0.1.{1 + i}", 0] for i, p in enumerate(peers)}
    for a in addr.values():
        a[1] = free_port(a[0])
    hub_addr = ["127.0.0.41", free_port("127.0.0.41")]
    config = {"broker": "hub", "listen": hub_addr, "neighbours": {}, "peers": addr,
              "core": {"name": "gossip-watch", "params": {}}, "log_dir": str(tmp_path),
              "secret": SECRET, "connect_timeout_s": 5.0}

    async def scenario() -> dict[str, list[str]]:
        got: dict[str, list[str]] = {}
        done = asyncio.Event()
        servers = await _serve_peers(addr, ["hub", *peers], got, done, len(peers))
        try:
            hub = spawn("broker", "hub", config, preexec_fn=_low_nofile(64))
            for _ in range(300):
                if (status(tmp_path, "hub") or {}).get("state") == "running":
                    break
                await asyncio.sleep(0.05)
            _, writer = await asyncio.open_connection(*hub_addr)
            writer.write(_hello("cl", "client", to="hub"))
            writer.write(encode(Message(MsgType.JOIN, 1, "cl", 0, {"bootstrap": "p00"})))
            for _ in range(200):
                if got.get("p00"):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # the member list is back at the hub
            writer.write(encode(Message(MsgType.PUBLISH, 2, "cl", 0,
                                        {"attrs": {"symbol": "IBM", "price": 1.0}})))
            await asyncio.wait_for(done.wait(), 30)
            fds = len(os.listdir(f"/proc/{hub.pid}/fd"))
            assert fds > 63 + 3, fds  # every link open at once, beyond the start limit
            hub.send_signal(signal.SIGTERM)
            writer.close()
            for _ in range(200):
                if hub.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            assert hub.wait(timeout=5) == 0
        finally:
            for s in servers:
                s.close()
        return got

    got = asyncio.run(scenario())
    assert sorted(got) == peers and all(ts.count("PUBLISH") == 1 for ts in got.values())
    st = status(tmp_path, "hub")
    assert st["nofile"]["needed"] == nofile_needed(63)
    assert st["nofile"]["soft"] >= nofile_needed(63)
    assert records(tmp_path, "hub", "record", kind="nofile")[0]["soft"] >= 1470
    assert sorted(r["link"] for r in _ups(tmp_path, "hub")) == peers
    assert not records(tmp_path, "hub", "error") and not records(tmp_path, "hub", "drop")


# ---- configs and the run plan ---------------------------------------------------------------


def test_plan_and_configs_for_links_on_demand(tmp_path: Path) -> None:
    from experiments.plan import compile_plan
    from experiments.runs.brokers import broker_configs, dormant_brokers
    from experiments.spec import SpecError, parse_spec
    from nodes.emulated.broker import BrokerConfig

    spec = {"name": "od", "topology": {"name": "gigabit-cluster", "params": {"n": 4}},
            "links": {"bw_mbps": 100, "delay_ms": 1},
            "routing": {"algorithms": ["gossip"],
                        "links": "on-demand", "params": {"heartbeat_s": 0.5}},
            "workload": {"n_publishers": 1, "n_subscribers": 2}}
    plan = compile_plan(parse_spec(spec))
    assert plan.links == "on-demand" and plan.describe()["links"] == "on-demand"
    assert plan.algorithm("gossip").params["heartbeat_s"] == 0.5  # "links" is no core param
    assert plan.workload is not None
    join = ClientOp(0.0, "j", "pc2", Message(MsgType.JOIN, 1, "j", 0, {"bootstrap": "pc1"}))
    plan = replace(plan, workload=replace(plan.workload, ops=(join, *plan.workload.ops),
                                          clients={**plan.workload.clients, "j": "pc2"}))
    assert dormant_brokers(plan) == {"pc2"}
    configs = broker_configs(plan, "gossip", emulate_link=True, log_dir=tmp_path)
    pc1 = configs["pc1"]
    assert pc1["neighbours"] == {} and sorted(pc1["peers"]) == ["pc2", "pc3", "pc4"]
    # the path between two hosts: two access links of 1 ms each, through the switch
    assert pc1["peers"]["pc2"] == {"addr": ["10.0.0.2", 7000], "delay_ms": 2, "loss_pct": 0.0}
    assert (pc1["dormant"], configs["pc2"]["dormant"]) == (False, True)
    parsed = BrokerConfig.from_json({**pc1, "secret": SECRET})  # BrokerRun adds it
    assert parsed.peers["pc3"].addr == ("10.0.0.3", 7000) and parsed.peers["pc3"].delay_ms == 2

    fixed = compile_plan(parse_spec({**spec, "routing": {"algorithms": ["gossip"]}}))
    fixed_configs = broker_configs(fixed, "gossip", emulate_link=True, log_dir=tmp_path)
    assert fixed.links == "fixed" and "peers" not in fixed_configs["pc1"]
    assert sorted(fixed_configs["pc1"]["neighbours"]) == ["pc2", "pc3", "pc4"]
    with pytest.raises(SpecError, match="switch-mode topology"):
        compile_plan(parse_spec({**spec, "topology": {"name": "overlay",
                                                      "params": {"edges": "a-b,b-c"}}}))
    with pytest.raises(SpecError, match=r"routing\.links: bad value 'sometimes'"):
        compile_plan(parse_spec({**spec, "routing": {"algorithms": ["gossip"],
                                                     "links": "sometimes"}}))


def test_broker_config_checks_peers_and_dormancy(tmp_path: Path) -> None:
    from nodes.emulated.broker import BrokerConfig

    base = {"broker": "a", "listen": ["127.0.0.1", 1], "neighbours": {},
            "core": {"name": "gossip"}, "log_dir": str(tmp_path), "secret": SECRET}
    cfg = BrokerConfig.from_json({**base, "peers": {"b": ["127.0.0.2", 2]}, "dormant": True})
    assert cfg.peers["b"].addr == ("127.0.0.2", 2) and cfg.dormant
    assert BrokerConfig.from_json(base).peers == {} and not BrokerConfig.from_json(base).dormant
    for bad in ({"peers": {"a": ["127.0.0.1", 1]}},  # itself
                {"peers": {"b": "127.0.0.2:2"}},
                {"peers": {"b": {"addr": ["127.0.0.2", 2], "delay": 1}}},
                {"dormant": "yes"},
                {"dormant": True, "neighbours": {"b": {"addr": ["127.0.0.2", 2]}}}):
        with pytest.raises(ValueError):
            BrokerConfig.from_json({**base, **bad})


def test_membership_from_join_leave_and_crash_ops() -> None:
    from nodes.workloads.membership import membership_intervals, oracle_workload

    def op(t_s: float, broker: str, mtype: MsgType) -> ClientOp:
        return ClientOp(t_s, f"c{broker}", broker, Message(mtype, int(t_s * 10), f"c{broker}"))

    ops = (op(0.0, "s", MsgType.JOIN), op(0.5, "a", MsgType.JOIN), op(1.0, "a", MsgType.LEAVE),
           op(1.5, "a", MsgType.JOIN), op(2.0, "b", MsgType.CRASH), op(2.5, "a", MsgType.CRASH),
           op(3.0, "a", MsgType.JOIN))
    assert membership_intervals(ops) == {
        "a": [[0.5, 1.0], [1.5, 2.5]],  # nothing after a crash: the process is gone
        "b": [[0.0, 2.0]],  # no JOIN: a member from the start
        "s": [[0.0, None]]}
    w = Workload(Schema({}), {"ca": "a", "cb": "b", "cs": "s"}, ops, {})
    plain = oracle_workload(w)
    assert plain.ops == () and plain.meta["membership"] == membership_intervals(ops)
    stated = replace(w, meta={"membership": {"a": [[0.0, None]]}})
    assert oracle_workload(stated).meta["membership"] == {"a": [[0.0, None]]}
    no_churn = replace(w, ops=())
    assert oracle_workload(no_churn) is no_churn
