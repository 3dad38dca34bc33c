"""Link fidelity check: is the emulation doing what the spec says?

Two measurements, both written to the run manifest:
- achieved TCP rate (iperf3) across a seeded sample of overlay links, against the
  configured rate (the narrowest link on the path);
- the share of idle CPU in each second of the run. Mininet-HiFi's criterion is that the
  machine stays at least 35 % idle; below that, emulated timing cannot be trusted, and the
  run is flagged (never hidden).
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import networkx as nx

from topologies.graph import endpoint_ip, overlay_of, path_links
from topologies.links import LinkParams

IPERF_PORT = 5201


def _cpu_times() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(x) for x in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return idle, sum(values)


class IdleSampler:
    """Samples the machine-wide idle CPU share once per ``period_s`` in a thread; with
    ``path``, appends each sample to it as it comes (a JSON line: ``t_wall``,
    ``idle_pct``), for `pubsublab watch` to read during the run."""

    def __init__(self, period_s: float = 1.0, path: Path | None = None) -> None:
        self.period_s = period_s
        self.path = path
        self.samples_pct: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="idle-sampler")

    def _loop(self) -> None:
        idle0, total0 = _cpu_times()
        while not self._stop.wait(self.period_s):
            idle1, total1 = _cpu_times()
            if total1 > total0:
                pct = round(100.0 * (idle1 - idle0) / (total1 - total0), 1)
                self.samples_pct.append(pct)
                if self.path is not None:
                    with open(self.path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps({"idle_pct": pct, "t_wall": time.time()}) + "\n")
            idle0, total0 = idle1, total1

    def __enter__(self) -> IdleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self, min_idle_pct: float) -> dict[str, Any]:
        s = self.samples_pct
        below = sum(1 for x in s if x < min_idle_pct)
        return {
            "criterion_min_idle_pct": min_idle_pct,
            "per_second_pct": s,
            "mean_pct": round(sum(s) / len(s), 1) if s else None,
            "min_pct": min(s) if s else None,
            "seconds_below": below,
            "ok": bool(s) and below == 0,
        }


def configured_rate_mbps(graph: nx.Graph, a: str, b: str) -> float | None:
    """The narrowest configured bandwidth on the physical path from a to b."""
    rates = []
    for u, v in path_links(graph, a, b):
        p: LinkParams = graph.edges[u, v]["params"]
        if p.bw_mbps is None:
            continue
        rates.append(p.bw_mbps)
    return min(rates) if rates else None


def sample_links(graph: nx.Graph, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` overlay links chosen with ``seed`` (all of them when there are fewer)."""
    edges = sorted(tuple(sorted(e)) for e in overlay_of(graph).edges)
    rng = random.Random(seed)
    return sorted(rng.sample(edges, min(n, len(edges))))


def iperf3_json(net: Any, a: str, b: str, ip: str, client_args: str) -> dict[str, Any]:
    """One iperf3 TCP run from host a to the server it starts on host b at ``ip``;
    ``client_args`` choose the length (``-t SECONDS`` or ``-n BYTES``). iperf3's JSON."""
    server = net[b].popen(["iperf3", "-s", "-1", "-B", ip, "-p", str(IPERF_PORT)])
    try:
        out = ""
        for _ in range(50):  # the server needs a moment to listen
            out = net[a].cmd(f"iperf3 -c {ip} -p {IPERF_PORT} {client_args} -J")
            if '"error"' not in out:
                break
            time.sleep(0.1)
        result = json.loads(out)
        if "error" in result:
            raise RuntimeError(f"iperf3 {a}->{b}: {result['error']}")
        return result
    finally:
        server.kill()
        server.wait()


def iperf_pair(net: Any, graph: nx.Graph, a: str, b: str, duration_s: float) -> dict[str, Any]:
    """One iperf3 TCP run from a to b; the achieved rate against the configured one."""
    result = iperf3_json(net, a, b, endpoint_ip(graph, a, b), f"-t {duration_s:g} -O 1")
    achieved = result["end"]["sum_received"]["bits_per_second"] / 1e6
    configured = configured_rate_mbps(graph, a, b)
    ratio = achieved / configured if configured else None
    return {
        "a": a, "b": b, "configured_mbps": configured, "achieved_mbps": round(achieved, 2),
        "ratio": round(ratio, 3) if ratio is not None else None,
        "within_10pct": ratio is None or abs(ratio - 1.0) <= 0.10,
    }
