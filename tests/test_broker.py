"""The emulated runtime without Mininet: broker and client processes on loopback addresses.

Every test starts real processes (``python -m nodes.emulated.broker`` /
``nodes.emulated.client``) on 127.0.0.x addresses with free ports, and always stops them
in the fixture's teardown. Brokers host the reference flood core, with the spanning-tree
params the host derives from the overlay (:func:`nodes.cores.overlay_params`).
"""

from __future__ import annotations

import json
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from nodes.cores import overlay_params
from nodes.emulated.auth import new_secret
from nodes.emulated.broker import read_status, wait_until_ready
from nodes.emulated.client import Op, dump_ops, load_ops, role_ops
from nodes.emulated.runtime import HelloCounter
from nodes.frames import PREFIX_BYTES, FrameError, body_length, decode_body, encode
from nodes.messages import Message, MsgType, message_to_json

REPO = Path(__file__).resolve().parent.parent
SECRET = new_secret()  # the run secret of every broker and client these tests start
SUBSCRIPTION = {"filter": [["symbol", "=", "IBM"]]}
NOTIFICATION = {"attrs": {"symbol": "IBM", "price": 21.5}}

Spawn = Callable[[str, dict[str, Any]], subprocess.Popen[bytes]]


def free_port(host: str) -> int:
    """A port free on ``host`` now, below Linux's ephemeral range (32768-60999), so no
    process's outgoing connection can take it before the broker binds it."""
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def read_log(log_dir: Path, node: str) -> list[dict[str, Any]]:
    path = log_dir / f"{node}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records(log_dir: Path, node: str, ev: str, **match: Any) -> list[dict[str, Any]]:
    return [r for r in read_log(log_dir, node)
            if r["ev"] == ev and all(r.get(k) == v for k, v in match.items())]


def status(log_dir: Path, node: str) -> dict[str, Any]:
    return read_status(log_dir, node) or {}


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (``VmRSS`` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start a node process from a config dict; every process is stopped at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(module: str, config: dict[str, Any]) -> subprocess.Popen[bytes]:
        name = config.get("broker") if module == "nodes.emulated.broker" else config["client"]
        path = tmp_path / f"{name}.config.json"
        path.write_text(json.dumps(config))
        with open(tmp_path / f"{name}.out", "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", module, "--config", str(path)],
                                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        terminate_all(procs)


def terminate_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, then wait for each (SIGKILL after 5 s)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Overlay:
    """Broker configs for an overlay given as edges, each broker on its own 127.0.0.x."""

    def __init__(self, log_dir: Path, edges: list[tuple[str, str]], **extra: Any) -> None:
        names = sorted({n for edge in edges for n in edge})
        self.log_dir = log_dir
        self.addr = {name: [f"127.0.0.{11 + i}", 0] for i, name in enumerate(names)}
        for addr in self.addr.values():
            addr[1] = free_port(addr[0])
        self.edges = edges
        self.extra = extra
        self.params = overlay_params("flood", nx.Graph(edges))

    def config(self, name: str, delay_ms: float = 0.0, loss_pct: float = 0.0) -> dict[str, Any]:
        nbs = sorted({b for a, b in self.edges if a == name}
                     | {a for a, b in self.edges if b == name})
        return {
            "broker": name,
            "listen": self.addr[name],
            "neighbours": {nb: {"addr": self.addr[nb], "delay_ms": delay_ms, "loss_pct": loss_pct}
                           for nb in nbs},
            "core": {"name": "flood", "params": self.params[name]},
            "log_dir": str(self.log_dir),
            "secret": SECRET,
            "connect_timeout_s": 1.0,
            **self.extra,
        }

    def client(self, name: str, broker: str, start_at_wall: float, duration_s: float,
               **role: Any) -> dict[str, Any]:
        return {"client": name, "broker": broker, "broker_addr": self.addr[broker],
                "log_dir": str(self.log_dir), "secret": SECRET, "start_at_wall": start_at_wall,
                "duration_s": duration_s, **role}

    def wait_up(self, *names: str, timeout_s: float = 10.0) -> None:
        missing = wait_until_ready(self.log_dir, names, timeout_s)
        outputs = {name: (self.log_dir / f"{name}.out").read_text()[-2000:] for name in missing}
        assert not missing, f"not ready: {missing}; outputs: {outputs}"


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then every process must exit 0 (graceful stop)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=5) == 0


# The clients' t = 0 this far ahead of their start: each imports its modules first (about
# 0.15 CPU-s, over a second on a loaded machine), and a subscriber still starting when the
# first publications come misses them.
CLIENT_LEAD_S = 2.0


def pub_sub(overlay: Overlay, spawn: Spawn, pub_broker: str, sub_broker: str, count: int,
            rate_per_s: float, tag: str = "") -> tuple[str, str]:
    """Run a publisher and a subscriber client to completion; their names."""
    pub, sub = f"p{tag}", f"s{tag}"
    start = time.time() + CLIENT_LEAD_S
    duration_s = 0.6 + count / rate_per_s + 0.5
    sp = spawn("nodes.emulated.client", overlay.client(sub, sub_broker, start, duration_s,
                                              role="subscriber", subscribe=SUBSCRIPTION))
    pp = spawn("nodes.emulated.client", overlay.client(pub, pub_broker, start, duration_s,
                                              role="publisher", publish=NOTIFICATION,
                                              count=count, rate_per_s=rate_per_s, start_s=0.3))
    assert pp.wait(timeout=duration_s + 10) == 0
    assert sp.wait(timeout=10) == 0
    return pub, sub


def test_line_of_three_delivers_every_notification(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("b1", "b2"), ("b2", "b3")])
    brokers = [spawn("nodes.emulated.broker", ov.config(name)) for name in ("b1", "b2", "b3")]
    ov.wait_up("b1", "b2", "b3")
    assert status(tmp_path, "b2")["up"] == ["b1", "b3"]

    # the publisher plays an ops file: an advertisement, then 20 publications of which
    # the even-numbered ones match the subscription
    ops = [Op(0.0, Message(MsgType.ADVERTISE, 1, "p", 0, SUBSCRIPTION))]
    ops += [Op(0.3 + i * 0.01, Message(MsgType.PUBLISH, i, "p", 0, {
        "attrs": {"symbol": "SAP" if i % 2 else "IBM", "price": 20.0 + i}})) for i in range(2, 22)]
    dump_ops(tmp_path / "p.ops.jsonl", ops)
    start, duration_s = time.time() + CLIENT_LEAD_S, 1.5
    clients = [
        spawn("nodes.emulated.client", ov.client("s", "b3", start, duration_s, role="subscriber",
                                        subscribe=SUBSCRIPTION)),
        spawn("nodes.emulated.client", ov.client("p", "b1", start, duration_s, ops="p.ops.jsonl")),
    ]
    assert [c.wait(timeout=10) for c in clients] == [0, 0]
    stop_all(brokers)

    sent = records(tmp_path, "p", "send", type="PUBLISH")
    assert [r["msg_id"] for r in sent] == list(range(2, 22))
    assert all(abs(r["t_wall"] - (start + 0.3 + r["msg_id"] * 0.01)) < 0.05 for r in sent)
    got = records(tmp_path, "s", "recv", type="PUBLISH", origin="p")
    assert [r["msg_id"] for r in got] == list(range(2, 22, 2))  # each match exactly once
    t_pub = {r["msg_id"]: r["t_pub"] for r in sent}
    assert all(r["t_pub"] == t_pub[r["msg_id"]] and 0 < r["t_wall"] - r["t_pub"] < 0.5
               for r in got)
    # the middle broker forwarded every publication, one hop further on
    fwd = records(tmp_path, "b2", "send", type="PUBLISH", link="b3")
    assert len(fwd) == 20 and {r["hops"] for r in fwd} == {2}
    assert len(records(tmp_path, "b3", "deliver", type="PUBLISH", link="s")) == 10
    for name in ("b1", "b2", "b3"):
        assert status(tmp_path, name)["state"] == "stopped"
        assert not records(tmp_path, name, "error")
        # at the stop every link went down (closed by us, or first by the stopping peer)
        down = records(tmp_path, name, "link", state="down", role="broker")
        assert {r["link"] for r in down} == set(ov.config(name)["neighbours"])


def _raw_exchange(addr: list[Any], data: bytes, timeout_s: float = 5.0,
                  source: str | None = None) -> bytes:
    """Send ``data`` (from address ``source``, if given), half-close, and read until the
    broker closes the connection."""
    source_address = (source, 0) if source else None
    with socket.create_connection(tuple(addr), timeout=timeout_s,
                                  source_address=source_address) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := s.recv(65536):
            received += chunk
        return received


def _hello(name: str, role: Any, to: str = "solo") -> bytes:
    """A fresh HELLO from ``name`` to broker ``to``, proving the tests' secret."""
    return encode(HelloCounter(name, role, bytes.fromhex(SECRET)).dialling(to))


def _answer(name: str, hello: Message, refused: str | None = None) -> bytes:
    """Broker ``name``'s answer to a dialler's ``hello`` (a refusal, with ``refused``),
    proving the tests' secret."""
    return encode(HelloCounter(name, "broker", bytes.fromhex(SECRET)).answer(
        hello.origin, hello.payload["nonce"], refused))


def test_bad_frames_close_only_their_connection(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("solo", "zed")])  # zed never starts: solo only serves clients
    broker = spawn("nodes.emulated.broker", ov.config("solo"))
    wait_for(lambda: status(tmp_path, "solo").get("state") == "running", 10, "solo running")
    rng = random.Random(20240501)
    good = encode(Message(MsgType.PUBLISH, 1, "fuzzer", 0, NOTIFICATION))
    head = good[PREFIX_BYTES : len(good) - len(json.dumps(NOTIFICATION, separators=(",", ":")))]
    client_hello = _hello("fuzzer", "client")

    def mutate(frame: bytes) -> bytes:
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(PREFIX_BYTES, len(data))] = rng.randrange(256)
        return bytes(data)

    before = [rng.randbytes(rng.randint(1, 300)) for _ in range(15)]  # pure noise
    before += [client_hello[: rng.randint(1, len(client_hello) - 1)] for _ in range(5)]  # cut
    before += [
        b"\xff\xff\xff\xff",  # length over the limit
        good,  # a valid frame, but not a HELLO
        _hello("mallory", "admin"),  # unknown role
        _hello("intruder", "broker"),  # not a neighbour
    ]
    after = [rng.randbytes(rng.randint(1, 300)) for _ in range(10)]
    after += [mutate(good) for _ in range(10)]
    after += [
        good[: rng.randint(1, len(good) - 1)],  # truncated mid-stream
        good[:9] + bytes([200]) + good[10:],  # unknown message type
        good[:8] + bytes([7]) + good[9:],  # unknown frame version
        client_hello,  # a second HELLO
        _frame(head + b"[" * 100_000),  # JSON too deep
        _frame(head + b"1" * 5000),  # int over digit limit
    ]
    for data in before:
        assert b"HELLO" not in _raw_exchange(ov.addr["solo"], data)
    # a neighbour, from its own address, but the smaller name (solo) dials
    assert not _raw_exchange(ov.addr["solo"], _hello("zed", "broker"), source=ov.addr["zed"][0])
    for data in after:
        reply = _raw_exchange(ov.addr["solo"], _hello("fuzzer", "client") + good + data)
        assert decode_body(reply[PREFIX_BYTES:]).type is MsgType.HELLO  # handshake answered
    # a peer that connects and says nothing is dropped after connect_timeout_s
    with socket.create_connection(tuple(ov.addr["solo"]), timeout=5) as s:
        assert s.recv(1) == b""

    assert broker.poll() is None
    # Random bytes can happen to form valid frames: a reference parse says which cases must
    # end in an error and how many frames get through before it.
    outcomes = [_reference_parse(data, "fuzzer") for data in after]
    expected = len(before) + 2 + sum(bad for _, bad in outcomes)

    def frame_errors() -> list[dict[str, Any]]:
        return [e for e in records(tmp_path, "solo", "error") if e.get("stage") != "core"]

    errors = wait_for(lambda: len(frame_errors()) >= expected and frame_errors(), 10,
                      "the error records (the log is flushed every window)")
    assert all(e["reason"] and e["peer"] for e in errors)
    assert sum(e.get("stage") == "handshake" for e in errors) == len(before) + 2
    assert len(errors) == expected
    assert sum(bad for _, bad in outcomes) >= len(after) - 3
    received = [r for r in records(tmp_path, "solo", "recv", link="fuzzer") if r["type"] != "HELLO"]
    assert len(received) == len(after) + sum(n for n, _ in outcomes)

    # a frame the core cannot handle costs only that event, not the connection
    bad_subscribe = encode(Message(MsgType.SUBSCRIBE, 1, "confused", 0, {"no": "filter"}))
    publication = encode(Message(MsgType.PUBLISH, 2, "confused", 0, NOTIFICATION))
    _raw_exchange(ov.addr["solo"], _hello("confused", "client") + bad_subscribe + publication)
    wait_for(lambda: records(tmp_path, "solo", "error", stage="core"), 2, "a core error")
    assert [r["type"] for r in records(tmp_path, "solo", "recv", link="confused")] == [
        "HELLO", "SUBSCRIBE", "PUBLISH"]
    assert records(tmp_path, "solo", "link", link="confused", state="down",
                   reason="closed by peer")

    # and the broker still serves well-behaved clients
    pub, sub = pub_sub(ov, spawn, "solo", "solo", count=5, rate_per_s=50)
    assert len(records(tmp_path, sub, "recv", type="PUBLISH", origin=pub)) == 5
    stop_all([broker])


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(PREFIX_BYTES, "big") + body


def _reference_parse(data: bytes, client: str) -> tuple[int, bool]:
    """How many frames of ``data`` a broker accepts from ``client`` after the handshake,
    and whether the data then ends in an error (rather than cleanly at a frame
    boundary); a frame under another origin is one."""
    n_ok = 0
    while data:
        try:
            if len(data) < PREFIX_BYTES:
                return n_ok, True
            end = PREFIX_BYTES + body_length(data[:PREFIX_BYTES])
            if len(data) < end:
                return n_ok, True
            msg = decode_body(data[PREFIX_BYTES:end])
            if msg.type is MsgType.HELLO or msg.origin != client:
                return n_ok, True
        except FrameError:
            return n_ok, True
        n_ok += 1
        data = data[end:]
    return n_ok, False


def test_killing_the_middle_broker(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("b1", "b2"), ("b2", "b3")], backoff_s=[0.1, 0.4])
    b1, b3 = (spawn("nodes.emulated.broker", ov.config(name)) for name in ("b1", "b3"))
    for name in ("b1", "b3"):
        wait_for(lambda name=name: status(tmp_path, name).get("state") == "running", 10, name)
    # without b2 the others are not ready, and the wait names what is missing
    assert wait_until_ready(tmp_path, ["b1", "b2", "b3"], timeout_s=0.5) == {
        "b1": ["b2"], "b2": ["<no status yet>"], "b3": ["b2"]}
    b2 = spawn("nodes.emulated.broker", ov.config("b2"))
    ov.wait_up("b1", "b2", "b3")

    b2.kill()
    b2.wait()
    for name in ("b1", "b3"):
        wait_for(lambda name=name: status(tmp_path, name).get("missing") == ["b2"], 5,
                 f"{name} to report the link to b2 down")
        assert records(tmp_path, name, "link", link="b2", state="down")
    # b1 dials b2: it redials with exponential backoff (the first 0.1 s is spent waiting
    # before the first redial), one record per failed attempt
    def redials() -> list[float]:
        log = read_log(tmp_path, "b1")
        lost = max(i for i, r in enumerate(log) if r["ev"] == "link" and r["state"] == "down")
        return [r["retry_in_s"] for r in log[lost:] if r["ev"] == "link"
                and r["state"] == "dial_failed" and r["link"] == "b2"]

    assert wait_for(lambda: redials()[3:], 10, "four failed redials from b1")
    assert redials()[:4] == [0.2, 0.4, 0.4, 0.4]
    assert not records(tmp_path, "b3", "link", state="dial_failed")  # b3 only accepts
    assert b1.poll() is None and b3.poll() is None

    # a restarted b2 is redialled by b1 and dials b3 itself; traffic flows again
    b2 = spawn("nodes.emulated.broker", ov.config("b2"))
    ov.wait_up("b1", "b2", "b3")
    pub, sub = pub_sub(ov, spawn, "b1", "b3", count=5, rate_per_s=50)
    assert len(records(tmp_path, sub, "recv", type="PUBLISH", origin=pub)) == 5
    stop_all([b1, b2, b3])


def _check_queue_log(log_dir: Path, broker: str, link: str, sent: int) -> list[dict[str, Any]]:
    """The queue records of one link add up: in = out (+ flushed) and each window's
    queue length follows from the one before."""
    windows = records(log_dir, broker, "queue", link=link)
    assert sum(w["count_in"] for w in windows) == sent
    assert sum(w["count_out"] for w in windows) == sent
    queue_len = 0
    for w in windows:  # a window missing from the log had all-zero figures
        queue_len += w["count_in"] - w["count_out"] - w["flushed"]
        assert w["queue_len"] == queue_len
    assert queue_len == 0
    return windows


def test_emulated_delay_and_queue_log(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("a", "b")], emulate_link=True)
    brokers = [spawn("nodes.emulated.broker", ov.config(name, delay_ms=20.0))
               for name in ("a", "b")]
    ov.wait_up("a", "b")
    count = 200
    pub_sub(ov, spawn, "a", "b", count=count, rate_per_s=200)
    stop_all(brokers)

    sent = {r["msg_id"]: r["t_mono"] for r in records(tmp_path, "a", "send", type="PUBLISH")}
    recv = {r["msg_id"]: r["t_mono"] for r in records(tmp_path, "b", "recv", type="PUBLISH")}
    assert len(sent) == len(recv) == count
    one_way_ms = sorted((recv[i] - sent[i]) * 1000 for i in sent)
    median_ms = statistics.median(one_way_ms)
    print(f"one-way delay on a 20 ms link: median {median_ms:.2f} ms, "
          f"min {one_way_ms[0]:.2f}, p95 {one_way_ms[int(0.95 * count)]:.2f}")
    assert 18.0 <= median_ms <= 22.0
    assert one_way_ms[0] >= 19.99  # never early
    configured = records(tmp_path, "a", "link", state="configured")
    assert configured == [{**configured[0], "link": "b", "delay_ms": 20.0, "emulated": True}]
    windows = _check_queue_log(tmp_path, "a", "b", count)
    assert all(w["window_ms"] > 0 for w in windows)


def test_emulated_loss_is_logged(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("a", "b")], emulate_link=True, seed=7)
    brokers = [spawn("nodes.emulated.broker", ov.config(name, loss_pct=25.0))
               for name in ("a", "b")]
    ov.wait_up("a", "b")
    _, sub = pub_sub(ov, spawn, "a", "b", count=200, rate_per_s=400)
    stop_all(brokers)
    drops = records(tmp_path, "a", "drop", type="PUBLISH", reason="loss", link="b")
    got = records(tmp_path, sub, "recv", type="PUBLISH")
    assert 20 <= len(drops) <= 80  # 25 % of 200, seeded
    assert len(got) + len(drops) == 200
    assert {r["msg_id"] for r in got}.isdisjoint(r["msg_id"] for r in drops)
    _check_queue_log(tmp_path, "a", "b", 200)  # lost messages did leave the queue


def test_backpressure_grows_the_output_queue(tmp_path: Path, spawn: Spawn) -> None:
    """A neighbour that stops reading: the output queue grows, then drains once it reads."""
    ov = Overlay(tmp_path, [("a", "z")], write_buffer_bytes=8192)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accept
        listener.bind(tuple(ov.addr["z"]))
        listener.listen()
        listener.settimeout(10)
        broker = spawn("nodes.emulated.broker", ov.config("a"))
        conn, _ = listener.accept()  # "a" < "z": a dials
    with conn:
        conn.settimeout(10)
        (dialled,) = _read_frames(conn, 1)  # a's HELLO, which z answers
        conn.sendall(_answer("z", dialled))
        wait_for(lambda: status(tmp_path, "a").get("all_up"), 10, "a up")
        count = 300
        big = {"attrs": {**NOTIFICATION["attrs"], "blob": "x" * 2000}}
        start = time.time() + 0.2
        pp = spawn("nodes.emulated.client", ov.client("p", "a", start, 1.0, role="publisher",
                                             publish=big, count=count, burst=True, start_s=0.0))
        backlog = wait_for(lambda: [w for w in records(tmp_path, "a", "queue", link="z")
                                    if w["queue_len"] > 50], 10, "the output queue to grow")
        assert backlog
        frames = _read_frames(conn, count)  # every publication
        assert [m.type for m in frames] == [MsgType.PUBLISH] * count
        assert pp.wait(timeout=10) == 0
        stop_all([broker])
    _check_queue_log(tmp_path, "a", "z", count)


def _read_frames(conn: socket.socket, n: int) -> list[Message]:
    buf = b""
    out: list[Message] = []
    while len(out) < n:
        chunk = conn.recv(65536)
        assert chunk, "broker closed the connection early"
        buf += chunk
        while len(buf) >= PREFIX_BYTES and len(buf) >= PREFIX_BYTES + body_length(buf[:4]):
            end = PREFIX_BYTES + body_length(buf[:4])
            msg = decode_body(buf[PREFIX_BYTES:end])
            if msg.type is not MsgType.KEEPALIVE:  # an idle link's, whenever it is idle
                out.append(msg)
            buf = buf[end:]
    return out


@pytest.mark.parametrize("module", ["nodes.emulated.broker", "nodes.emulated.client"])
def test_bad_config_exits_2(tmp_path: Path, module: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"broker": "x", "client": "x", "lisen": ["127.0.0.1", 1]}))
    proc = subprocess.run([sys.executable, "-m", module, "--config", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2
    assert "unknown keys" in proc.stderr


def test_client_ops_from_roles_and_files(tmp_path: Path) -> None:
    ops = role_ops("p", "publisher", {"publish": NOTIFICATION, "count": 3, "rate_per_s": 10,
                                      "advertise": SUBSCRIPTION})
    assert [(op.msg.type, op.msg.msg_id, op.msg.origin) for op in ops] == [
        (MsgType.ADVERTISE, 1, "p"), (MsgType.PUBLISH, 2, "p"), (MsgType.PUBLISH, 3, "p"),
        (MsgType.PUBLISH, 4, "p")]
    assert [op.t_s for op in ops] == pytest.approx([0.0, 0.5, 0.6, 0.7])
    burst = role_ops("p", "publisher", {"publish": NOTIFICATION, "count": 3, "burst": True,
                                        "start_s": 1.0})
    assert [op.t_s for op in burst] == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="rate_per_s or burst"):
        role_ops("p", "publisher", {"publish": NOTIFICATION, "count": 3})
    # a line of a workload file (with client and broker) is an op of that client only
    msg = Message(MsgType.PUBLISH, 9, "p", 0, NOTIFICATION)
    path = tmp_path / "ops.jsonl"
    path.write_text(json.dumps({"t_s": 0.2, "client": "p", "broker": "b1",
                                **message_to_json(msg)}) + "\n\n")
    assert load_ops(path, "p", "b1") == [Op(0.2, msg)]
    with pytest.raises(ValueError, match="another client"):
        load_ops(path, "q", "b1")


def test_client_without_a_broker_retries_then_fails(tmp_path: Path, spawn: Spawn) -> None:
    ov = Overlay(tmp_path, [("b1", "b2")])  # never started
    # 4 s: the first four retries (1.5 s of backoff) fit even when the process takes a
    # second or two to start on a loaded machine; the sixth would come only after 5.1 s.
    proc = spawn("nodes.emulated.client", ov.client("s", "b1", time.time(), 4.0, role="subscriber",
                                           subscribe=SUBSCRIPTION))
    assert proc.wait(timeout=15) == 1
    retries = [r["retry_in_s"] for r in records(tmp_path, "s", "link", state="dial_failed")]
    assert retries[:4] == [0.1, 0.2, 0.4, 0.8] and len(retries) <= 6  # backoff, no spinning
    assert records(tmp_path, "s", "error", stage="dial")
