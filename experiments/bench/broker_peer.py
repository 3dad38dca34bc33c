"""`pubsublab bench broker --peer mosquitto`: our broker beside mosquitto, on loopback or
on Mininet's three hosts.

For each filter count and rate, A/B pairs (ours, mosquitto, ours, mosquitto, ...), every
process plain on 127.0.0.1 (no Mininet, no root), or with ``--on mininet`` each on a
host of its own (publisher pc1, broker pc2, subscriber pc3 on one Linux bridge, 1 Gbit/s
links: the setup of ``bench broker``), so that the frames cross veth pairs and a bridge as
in a run:

- **ours**: the emulated broker (flood core, no neighbours), one subscriber client with
  ``filters`` content-based filters of which exactly one (``Symbol = ACME``) matches every
  publication, one publisher client sending :data:`QUOTE` at the rate.
- **mosquitto**: ``mosquitto -c CONF`` (its own temporary config, TCP_NODELAY as on
  ours), ``mosquitto_sub`` on ``bench/match`` plus ``filters - 1`` topics nothing is
  published on, ``mosquitto_pub -l`` fed one line per message by this process (the send
  time, padded to :data:`PAYLOAD_BYTES`), QoS 0: ours is TCP without acknowledgements,
  the closest match.

Per step: the generator's achieved rate, delivered/sent, the broker's CPU time per
delivered message (its whole CPU time from just before the first publication until the
subscriber ended, idle not subtracted) and the delays. A (broker, filters) pair's zero-loss
rate is the highest offered rate whose steps, every repeat, delivered everything, with no
delay above ``MAX_DELAY_S`` and the generator at 95 % of the rate at least.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.bench.broker import MAX_DELAY_S, QUOTE, _median, machine, process_cpu_s
from nodes.emulated.admission import MAX_FILTERS_PER_CLIENT
from nodes.logs import iter_jsonl
from nodes.metrics.summary import percentile
from nodes.runfolder import (
    RUNS_BASE,
    config_path,
    log_path,
    new_run_dir,
    ops_path,
    status_path,
    stderr_path,
    write_config,
    write_json,
)
from nodes.time_left import TimeLeft, write_line

RATES_HZ = (2000, 5000, 10000, 20000)
STEP_S = 3.0
FILTER_COUNTS = (1, 100, 5000)
REPEATS = 2
PAYLOAD_BYTES = 100  # mosquitto's payload: about the size of our PUBLISH frame of QUOTE
GENERATOR_SHARE = 0.95  # a step whose sender made less of the rate is capped by it
PEERS = {"mosquitto": ("/usr/sbin/mosquitto", "mosquitto")}  # binary, Debian package
PEER_CLIENTS = (("/usr/bin/mosquitto_pub", "mosquitto-clients"),
                ("/usr/bin/mosquitto_sub", "mosquitto-clients"))
_LEAD_S = 1.5  # the clients' t_s = 0 (ours) or the first line (mosquitto) this far ahead
_TAIL_S = 2.0  # the subscriber's time after the last publication
_STOP_TIMEOUT_S = 5.0


def _log(msg: str) -> None:
    write_line(f"[bench broker --peer] {msg}")


def missing_peer(peer: str = "mosquitto") -> str | None:
    """One line naming what to install if ``peer``'s broker or clients are absent."""
    for path, package in (PEERS[peer], *PEER_CLIENTS):
        if shutil.which(Path(path).name) is None and not Path(path).exists():
            return f"{Path(path).name} not found: install the Debian package {package} " \
                   f"(sudo apt-get install {package})"
    return None


def _binary(path: str) -> str:
    return shutil.which(Path(path).name) or path


@dataclass(frozen=True)
class Sites:
    """Where a step's processes run: ``popen(role, argv, **kw)`` starts the broker, the
    publisher or the subscriber (``role``) where it belongs; ``broker_ip`` is what the
    broker listens on and the clients dial; ``listening(port)`` whether the broker's
    host has a listener on ``port``."""
    broker_ip: str
    popen: Callable[..., subprocess.Popen[bytes]]
    listening: Callable[[int], bool]


def _loopback_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


LOOPBACK = Sites("127.0.0.1", lambda role, argv, **kw: subprocess.Popen(argv, **kw),
                 _loopback_listening)
MININET_HOSTS = {"pub": "pc1", "broker": "pc2", "sub": "pc3"}  # as in bench broker


@contextlib.contextmanager
def mininet_sites() -> Iterator[Sites]:
    """The three hosts of ``bench broker`` (root): the network built, then torn down."""
    from experiments.bench.broker import three_hosts

    with three_hosts(_log) as emu:
        broker = emu.net[MININET_HOSTS["broker"]]

        def popen(role: str, argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
            # Mininet's popen pipes stdout by default, which nothing here would read.
            return emu.net[MININET_HOSTS[role]].popen(argv, **{"stdout": subprocess.DEVNULL,
                                                               **kw})

        def listening(port: int) -> bool:
            return f":{port} " in broker.cmd(f"ss -Htln 'sport = :{port}'")

        yield Sites(emu.graph.nodes[MININET_HOSTS["broker"]]["ip"], popen,
                    listening)


def free_port() -> int:
    """A TCP port on 127.0.0.1 no one listens on now (the kernel's pick for port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Terminate ``proc`` and reap it; kill it if it does not end in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _delays_figures(delays_ms: list[float]) -> dict[str, float | None]:
    xs = sorted(delays_ms)
    if not xs:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": _round(percentile(xs, 0.5)), "p99": _round(percentile(xs, 0.99)),
            "max": _round(xs[-1])}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _step_record(rate_hz: int, sent_walls: list[float], delivered: int,
                 delays_ms: list[float], cpu_s: float, max_delay_s: float) -> dict[str, Any]:
    """One step's figures from what was sent (its send times) and received."""
    span_s = max(sent_walls) - min(sent_walls) if len(sent_walls) > 1 else 0.0
    achieved = (len(sent_walls) - 1) / span_s if span_s > 0 else 0.0
    delay = _delays_figures(delays_ms)
    capped = achieved < GENERATOR_SHARE * rate_hz
    return {"rate_hz": rate_hz, "sent": len(sent_walls), "delivered": delivered,
            "achieved_send_hz": round(achieved, 1), "generator_capped": capped,
            "broker_cpu_s": round(cpu_s, 4),
            "cpu_per_msg_us": round(1e6 * cpu_s / delivered, 2) if delivered else None,
            "delay_ms": delay,
            "zero_loss": (not capped and len(sent_walls) > 0 and delivered == len(sent_walls)
                          and delay["max"] is not None
                          and delay["max"] <= 1000.0 * max_delay_s)}


def _sub_ops(filters: int) -> list[dict[str, Any]]:
    """One filter matching QUOTE and ``filters - 1`` on symbols never published."""
    wanted = [[["Symbol", "=", QUOTE["Symbol"]]]]
    others = [[["Symbol", "=", f"S{i:05d}"]] for i in range(1, filters)]
    return [{"t_s": 0.0, "type": "SUBSCRIBE", "msg_id": i + 1, "origin": "sub",
             "payload": {"filter": f}} for i, f in enumerate(wanted + others)]


def _pub_start_s(filters: int) -> float:
    # the subscriber's filters must be in place before the first publication
    return 1.0 + filters / 5000


def _write_lines(path: Path, ops: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(o) + "\n" for o in ops))


def run_ours(rate_hz: int, step_s: float, filters: int, out: Path,
             max_delay_s: float = MAX_DELAY_S,
             buffers: Mapping[str, int | None] | None = None,
             sites: Sites = LOOPBACK) -> dict[str, Any]:
    """One step through our broker at ``sites`` (logs in ``out``); ``buffers``
    (``write_buffer_bytes``, ``read_buffer_bytes``) go to the broker's and the clients'
    configs (absent: the kernel's own)."""
    buffers = dict(buffers or {})
    (out / "config").mkdir(parents=True)
    port, secret = free_port(), secrets.token_hex(16)

    def start(module: str, name: str, role: str, cfg: dict[str, Any]
              ) -> subprocess.Popen[bytes]:
        write_config(config_path(out, name), cfg)
        with stderr_path(out, name).open("wb") as err:
            return sites.popen(role, [sys.executable, "-m", module, "--config",
                                      str(config_path(out, name))], stderr=err)

    broker = start("nodes.emulated.broker", "b", "broker", {
        "broker": "b", "listen": [sites.broker_ip, port], "neighbours": {},
        "core": {"name": "flood", "params": {"tree_neighbours": []}}, "log_dir": str(out),
        "emulate_link": False, "seed": 0, "secret": secret,
        # the default cap (1000 filters a client) would cut the subscriber off
        "max_filters_per_client": max(MAX_FILTERS_PER_CLIENT, filters), **buffers})
    clients: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.time() + 20
        while not status_path(out, "b").exists():
            if broker.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"our broker did not start: see {stderr_path(out, 'b')}")
            time.sleep(0.05)
        pub_s, n = _pub_start_s(filters), int(rate_hz * step_s)
        _write_lines(ops_path(out, "sub"), _sub_ops(filters))
        _write_lines(ops_path(out, "pub"), [
            {"t_s": pub_s + i / rate_hz, "type": "PUBLISH", "msg_id": i + 1,
             "origin": "pub", "payload": {"attrs": QUOTE}} for i in range(n)])
        start_at = time.time() + _LEAD_S
        for name in ("sub", "pub"):
            clients.append(start("nodes.emulated.client", name, name, {
                "client": name, "broker": "b", "broker_addr": [sites.broker_ip, port],
                "secret": secret, "log_dir": str(out), "ops": str(ops_path(out, name)),
                "start_at_wall": start_at, "duration_s": pub_s + step_s + _TAIL_S,
                **buffers}))
        time.sleep(max(0.0, start_at + pub_s - 0.1 - time.time()))
        cpu0 = process_cpu_s(broker.pid)
        for c in clients:
            c.wait(_LEAD_S + pub_s + step_s + _TAIL_S + 60)
        cpu1 = process_cpu_s(broker.pid)
    finally:
        for p in (*clients, broker):
            _stop(p)
    sent = [r["t_pub"] for r in iter_jsonl(log_path(out, "pub"))
            if r["ev"] == "send" and r.get("type") == "PUBLISH"]
    recv = [r for r in iter_jsonl(log_path(out, "sub"))
            if r["ev"] == "recv" and r.get("type") == "PUBLISH"]
    return _step_record(rate_hz, sent, len(recv),
                        [1000.0 * (r["t_wall"] - r["t_pub"]) for r in recv],
                        cpu1 - cpu0, max_delay_s)


def mosquitto_conf(port: int, ip: str = "127.0.0.1") -> str:
    """A mosquitto config for one anonymous listener on ``ip``, nothing on disk; Nagle
    off, as asyncio sets it on our broker's sockets (else a delayed ACK holds small
    messages some 40 ms)."""
    return (f"listener {port} {ip}\nallow_anonymous true\npersistence false\n"
            "log_dest none\nset_tcp_nodelay true\n")


def _feed(pub: subprocess.Popen[bytes], rate_hz: int, n: int, start_wall: float
          ) -> list[float]:
    """Write ``n`` lines to mosquitto_pub at ``rate_hz``, the ones due at each millisecond
    tick together; each line holds its send time, padded to PAYLOAD_BYTES. Returns the
    send times."""
    assert pub.stdin is not None
    sent: list[float] = []
    while len(sent) < n:
        now = time.time()
        due = min(n, int((now - start_wall) * rate_hz) + 1)
        if due > len(sent):
            line = f"{now:.6f}".ljust(PAYLOAD_BYTES - 1).encode() + b"\n"
            pub.stdin.write(line * (due - len(sent)))
            pub.stdin.flush()
            sent.extend([now] * (due - len(sent)))
        time.sleep(0.001)
    pub.stdin.close()
    return sent


def run_mosquitto(rate_hz: int, step_s: float, filters: int, out: Path,
                  max_delay_s: float = MAX_DELAY_S, sites: Sites = LOOPBACK
                  ) -> dict[str, Any]:
    """One step through mosquitto at ``sites`` (its subscriber's output in ``out``)."""
    out.mkdir(parents=True)
    port, n = free_port(), int(rate_hz * step_s)
    tmp = Path(tempfile.mkdtemp(prefix="peer-mosquitto-"))
    conf = tmp / "mosquitto.conf"
    conf.write_text(mosquitto_conf(port, sites.broker_ip))
    host = ["-h", sites.broker_ip, "-p", str(port)]
    topics = [a for i in range(1, filters) for a in ("-t", f"bench/other{i}")]
    procs: list[subprocess.Popen[bytes]] = []
    received = out / "sub.txt"
    try:
        with stderr_path(out, "mosquitto").open("wb") as err:
            broker = sites.popen("broker", [_binary(PEERS["mosquitto"][0]), "-c", str(conf)],
                                 stderr=err, stdout=err)
        procs.append(broker)
        _wait_listening(port, broker, sites)
        timeout_s = int(_LEAD_S + _pub_start_s(filters) + step_s + _TAIL_S + 30)
        with received.open("wb") as sub_out, stderr_path(out, "sub").open("wb") as err:
            procs.append(sites.popen(
                "sub", [_binary(PEER_CLIENTS[1][0]), *host, "-q", "0", "--nodelay",
                 "-t", "bench/match", *topics,
                 "-C", str(n), "-W", str(timeout_s), "-F", "%U %p"],
                stdout=sub_out, stderr=err))
        with stderr_path(out, "pub").open("wb") as err:
            pub = sites.popen("pub", [_binary(PEER_CLIENTS[0][0]), *host, "-q", "0",
                                      "--nodelay", "-t", "bench/match", "-l"],
                              stdin=subprocess.PIPE, stderr=err)
        procs.append(pub)
        start_wall = time.time() + _LEAD_S + _pub_start_s(filters)
        time.sleep(max(0.0, start_wall - 0.1 - time.time()))
        cpu0 = process_cpu_s(broker.pid)
        sent = _feed(pub, rate_hz, n, start_wall)
        pub.wait(step_s + 30)
        # the same window as ours: until _TAIL_S after the last scheduled publication
        with contextlib.suppress(subprocess.TimeoutExpired):
            procs[1].wait(max(0.0, start_wall + step_s + _TAIL_S - time.time()))
        time.sleep(max(0.0, start_wall + step_s + _TAIL_S - time.time()))
        cpu1 = process_cpu_s(broker.pid)
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    delays_ms = []
    for line in received.read_text().splitlines():
        recv_s, sent_s = line.split()[:2]
        delays_ms.append(1000.0 * (float(recv_s) - float(sent_s)))
    return _step_record(rate_hz, sent, len(delays_ms), delays_ms, cpu1 - cpu0, max_delay_s)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], sites: Sites,
                    timeout_s: float = 10) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"mosquitto exited with status {proc.returncode}")
        if sites.listening(port):
            return
        time.sleep(0.05)
    raise RuntimeError(f"mosquitto did not listen on port {port} within {timeout_s:g} s")


RUNNERS = {"ours": run_ours, "mosquitto": run_mosquitto}
SETUPS: dict[str, Callable[[], contextlib.AbstractContextManager[Sites]]] = {
    "loopback": lambda: contextlib.nullcontext(LOOPBACK), "mininet": mininet_sites}


def zero_loss_hz(steps: list[dict[str, Any]]) -> int:
    """The highest offered rate whose steps (all repeats) were zero-loss; 0 if none."""
    rates = {s["rate_hz"] for s in steps}
    return max((r for r in rates if all(s["zero_loss"] for s in steps if s["rate_hz"] == r)),
               default=0)


def _cpu_median_us(steps: list[dict[str, Any]], rate_hz: int) -> float | None:
    xs = [s["cpu_per_msg_us"] for s in steps
          if s["rate_hz"] == rate_hz and s["cpu_per_msg_us"] is not None]
    return round(_median(xs), 2) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def comparison(steps: list[dict[str, Any]], filters: int, rates_hz: Sequence[int]
               ) -> dict[str, Any]:
    """Zero-loss rates, median CPU per message by rate and their ours/mosquitto ratios."""
    by = {b: [s for s in steps if s["broker"] == b and s["filters"] == filters]
          for b in RUNNERS}
    zl = {b: zero_loss_hz(by[b]) for b in RUNNERS}
    cpu = {b: {r: _cpu_median_us(by[b], r) for r in rates_hz} for b in RUNNERS}
    return {"filters": filters, "zero_loss_hz": zl,
            "zero_loss_ratio": _ratio(zl["ours"], zl["mosquitto"]),
            "cpu_per_msg_us_median": cpu,
            "cpu_ratio": {r: _ratio(cpu["ours"][r], cpu["mosquitto"][r]) for r in rates_hz}}


def run_peer(rates_hz: Sequence[int] = RATES_HZ, step_s: float = STEP_S,
             filter_counts: Sequence[int] = FILTER_COUNTS, repeats: int = REPEATS,
             out_dir: Path | None = None, peer: str = "mosquitto", on: str = "loopback"
             ) -> dict[str, Any]:
    """Every (filters, rate) step, ours then the peer, ``repeats`` times, on ``on``
    (``loopback`` or ``mininet``, module docstring); the comparison per filter count.
    Logs and ``result.json`` go to ``out_dir`` (default: a new run folder under runs/)."""
    problem = missing_peer(peer)
    if problem:
        raise RuntimeError(problem)
    if on not in SETUPS:
        raise ValueError(f"on: {on!r}; allowed: {', '.join(SETUPS)}")
    out = out_dir or new_run_dir(RUNS_BASE, f"bench-broker-{peer}"
                                            + ("-mininet" if on == "mininet" else ""))
    _log(f"logs in {out}")
    plan = [(f, r, k, b) for f in filter_counts for r in rates_hz for k in range(repeats)
            for b in RUNNERS]
    progress = TimeLeft("bench broker --peer", [
        (f"{b}, {f} filter(s), {r}/s, repeat {k + 1}", step_s + 5.0) for f, r, k, b in plan],
        _log)
    steps = []
    with SETUPS[on]() as sites:
        for f, r, k, b in plan:
            progress.start()
            step = RUNNERS[b](r, step_s, f, out / f"{b}-f{f}-r{r}-{k + 1}", sites=sites)
            steps.append({"broker": b, "filters": f, "repeat": k + 1, **step})
            progress.finish()
            _log(f"{b}, {f} filter(s), {r}/s: sent {step['sent']} at "
                 f"{step['achieved_send_hz']}/s, delivered {step['delivered']}, "
                 f"{step['cpu_per_msg_us']} us/msg, delay {step['delay_ms']} ms, zero loss "
                 f"{step['zero_loss']}")
    where = ("loopback (127.0.0.1), plain processes" if on == "loopback" else
             "Mininet: publisher pc1, broker pc2, subscriber pc3 on one Linux bridge, "
             "1 Gbit/s links")
    result = {
        "peer": peer, "on": on, "rates_hz": list(rates_hz), "step_s": step_s, "repeats": repeats,
        "filter_counts": list(filter_counts), "max_delay_s": MAX_DELAY_S, "steps": steps,
        "comparison": [comparison(steps, f, rates_hz) for f in filter_counts],
        "method": f"{where}; ours: content-based filters "
                  "(one matches), TCP without acknowledgements; mosquitto: topic-based "
                  "subscriptions (one matches), QoS 0, TCP_NODELAY; broker CPU from "
                  "/proc/<pid>/task/*/schedstat from just before the first publication "
                  "to the subscriber's end, idle not subtracted, over the messages delivered",
        "logs": str(out), "machine": machine(),
        "date": datetime.now(UTC).isoformat(timespec="seconds")}
    write_json(out / "result.json", result)
    return result


def format_peer_result(result: dict[str, Any]) -> str:
    """The steps' table, then the ours/mosquitto ratios per filter count."""
    lines = [f"{'broker':>9} {'filters':>7} {'rate/s':>7} {'send/s':>8} {'sent':>7} "
             f"{'dlvd':>7} {'us/msg':>7} {'p50_ms':>7} {'p99_ms':>7} {'max_ms':>8}  zero loss"]
    for s in result["steps"]:
        d = s["delay_ms"]
        lines.append(f"{s['broker']:>9} {s['filters']:7} {s['rate_hz']:7} "
                     f"{s['achieved_send_hz']:8.0f} {s['sent']:7} {s['delivered']:7} "
                     f"{s['cpu_per_msg_us'] or 0:7.1f} {d['p50'] or 0:7.1f} "
                     f"{d['p99'] or 0:7.1f} {d['max'] or 0:8.1f}  {s['zero_loss']}"
                     + ("  (capped by the generator)" if s["generator_capped"] else ""))
    for c in result["comparison"]:
        zl = c["zero_loss_hz"]
        cpu = ", ".join(f"{r}/s {x}" for r, x in c["cpu_ratio"].items())
        lines.append(f"{c['filters']} filter(s): zero-loss rate ours {zl['ours']}/s, "
                     f"mosquitto {zl['mosquitto']}/s, ratio {c['zero_loss_ratio']}; "
                     f"CPU per message ours/mosquitto (median of repeats): {cpu}")
    m = result["machine"]
    lines.append(f"{result['method']}; on {m['hostname']} ({m['cpu_model']}, {m['cores']} "
                 f"cores) at {result['date']}")
    return "\n".join(lines)
