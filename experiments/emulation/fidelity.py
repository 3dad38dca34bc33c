"""Link fidelity check: is the emulation doing what the spec says?

Two measurements, both written to the run manifest:
- achieved TCP rate (iperf3) across a seeded sample of overlay links, against the
  configured rate (the narrowest link on the path);
- the share of idle CPU in each second of the run. Mininet-HiFi's criterion is that the
  machine stays at least 35 % idle; below that, emulated timing cannot be trusted, and the
  run is flagged (never hidden). The criterion judges the seconds in which a workload
  runs (its clients' t = 0 until the last client ended), where every timed message is;
  the seconds around them (the link check, brokers and clients starting, each one
  importing its modules, and stopping) are recorded beside it and reported, not judged:
  on a quiet 2-core machine the demo's 18 Python processes starting at once took the
  machine to 3 % idle with no message in flight.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from topologies.graph import endpoint_ip, overlay_of, path_links
from topologies.links import LinkParams

IPERF_PORT = 5201
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in these


def cpu_times_of(stat_line: str) -> tuple[int, int]:
    """Idle (with iowait) and total jiffies of /proc/stat's first line."""
    values = [int(x) for x in stat_line.split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return idle, sum(values)


def _cpu_times() -> tuple[int, int]:
    return cpu_times_of(Path("/proc/stat").read_text().splitlines()[0])


def process_kind(argv: Sequence[str]) -> str:
    """What a run's process is, by its command line: ``broker``, ``clients`` (a client
    group), the program's name (``tcpdump``, ``iperf3``, ...), or ``ssh`` for the local end
    of a process on another server (its own CPU is that server's; only the SSH client's
    is this machine's)."""
    if any(Path(a).name == "ssh" for a in argv[:5]):
        return "ssh"
    for module, kind in (("nodes.emulated.broker", "broker"), ("nodes.emulated.client",
                                                               "clients")):
        if module in argv:
            return kind
    args = list(argv)
    if args and Path(args[0]).name == "mnexec":  # mnexec [-flags] [-a pid] [-g grp] cmd
        args.pop(0)
        while args and args[0].startswith("-"):
            flags = args.pop(0)
            if flags[-1] in "agr" and args:  # the last flag takes the next word
                args.pop(0)
    return Path(args[0]).name if args else "?"


def _process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` so far (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class IdleSampler:
    """Samples the machine-wide idle CPU share once per ``period_s`` in a thread; with
    ``path``, appends each sample to it as it comes (a JSON line: ``t_wall``,
    ``idle_pct``), for `pubsublab watch` to read during the run.

    With ``processes`` (a list that the run appends its ``Popen`` objects to), it also
    reads each one's CPU seconds at every sample, so the summary says which kind of
    process (:func:`process_kind`) used the CPU: a process's last reading is at most one
    period before its end, so the figures are lower bounds by up to a period's use."""

    def __init__(self, period_s: float = 1.0, path: Path | None = None,
                 processes: list[subprocess.Popen[bytes]] | None = None,
                 cpu_times: Callable[[], tuple[int, int]] = _cpu_times,
                 group_cpu_s: Callable[[], float | None] | None = None) -> None:
        self.period_s = period_s
        self._cpu_times = cpu_times  # another server's (RemoteCpuTimes), or this one's
        # Another server's: the CPU seconds of the run's cgroup there, read each period.
        self._group_cpu_s = group_cpu_s
        self._group_read: list[float] = []  # its first and latest readings
        self.path = path
        self.samples: list[tuple[float, float, float]] = []  # (from, to) wall s, idle %
        self._processes = processes if processes is not None else []
        self._cpu_s: dict[int, tuple[str, float]] = {}  # pid: (kind, CPU s at last read)
        self._first_cpu_s: dict[int, float] = {}  # pid: CPU s when first seen
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="idle-sampler")

    def _read_processes(self) -> None:
        for proc in list(self._processes):
            # once reaped its pid may be another process's: its last reading stands
            cpu_s = None if proc.returncode is not None else _process_cpu_s(proc.pid)
            if cpu_s is None:
                continue
            if proc.pid in self._cpu_s:
                kind = self._cpu_s[proc.pid][0]
            else:  # read from its command line once
                args = proc.args if isinstance(proc.args, list | tuple) else [str(proc.args)]
                kind = process_kind([str(a) for a in args])
            self._cpu_s[proc.pid] = (kind, cpu_s)
            # A process started before sampling began counts from its first reading.
            self._first_cpu_s.setdefault(proc.pid, cpu_s)

    def _read_group(self) -> None:
        cpu_s = self._group_cpu_s() if self._group_cpu_s is not None else None
        if cpu_s is not None:
            self._group_read = [self._group_read[0] if self._group_read else cpu_s, cpu_s]

    def _loop(self) -> None:
        self._read_processes()
        idle0, total0 = self._cpu_times()
        t0 = time.time()
        while not self._stop.wait(self.period_s):
            self._read_processes()
            self._read_group()
            idle1, total1 = self._cpu_times()
            t1 = time.time()
            if total1 > total0:
                pct = round(100.0 * (idle1 - idle0) / (total1 - total0), 1)
                self.samples.append((t0, t1, pct))
                if self.path is not None:
                    with open(self.path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps({"idle_pct": pct, "t_wall": t1}) + "\n")
            idle0, total0, t0 = idle1, total1, t1

    def __enter__(self) -> IdleSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def process_cpu(self) -> dict[str, dict[str, float | int]]:
        """CPU the run's processes used while sampled, by kind: ``cpu_s`` (s),
        ``cores`` (the mean over the sampled time) and ``processes``."""
        span_s = max(time.monotonic() - self._started, 1e-9)
        by_kind: dict[str, dict[str, float | int]] = {}
        for pid, (kind, cpu_s) in self._cpu_s.items():
            row = by_kind.setdefault(kind, {"cpu_s": 0.0, "cores": 0.0, "processes": 0})
            row["cpu_s"] += cpu_s - self._first_cpu_s[pid]
            row["processes"] += 1
        for row in by_kind.values():
            row["cpu_s"] = round(row["cpu_s"], 2)
            row["cores"] = round(row["cpu_s"] / span_s, 3)
        return dict(sorted(by_kind.items()))

    def summary(self, min_idle_pct: float,
                workload_wall: Sequence[Sequence[float]] | None = None) -> dict[str, Any]:
        """The criterion over the samples that overlap one of ``workload_wall``'s (start,
        end) wall-clock spans (every sample when none is given, e.g. a run without
        a workload): ``per_second_pct`` and the figures beside it; the other samples'
        figures under ``outside_workload``."""
        inside, outside = split_by_spans(self.samples, workload_wall)
        return {**idle_figures(inside, min_idle_pct),
                **({"outside_workload": idle_figures(outside, min_idle_pct)}
                   if workload_wall is not None else {}),
                **({"by_process": self.process_cpu()} if self._cpu_s else {}),
                **({"run_group": self.group_cpu()} if self._group_read else {})}

    def group_cpu(self) -> dict[str, float]:
        """The run's group on another server while sampled: ``cpu_s`` and mean ``cores``."""
        span_s = max(time.monotonic() - self._started, 1e-9)
        cpu_s = round(self._group_read[1] - self._group_read[0], 2)
        return {"cpu_s": cpu_s, "cores": round(cpu_s / span_s, 3)}


def split_by_spans(samples: Sequence[tuple[float, float, float]],
                   spans: Sequence[Sequence[float]] | None) -> tuple[list[float], list[float]]:
    """The idle shares of ``samples`` ((from, to, pct)) that overlap one of ``spans`` (a
    second partly in a workload counts as in it), and those of the rest; with ``spans``
    None, all of them and none."""
    if spans is None:
        return [pct for _, _, pct in samples], []
    inside, outside = [], []
    for t0, t1, pct in samples:
        (inside if any(t0 < b and t1 > a for a, b in spans) else outside).append(pct)
    return inside, outside


def idle_figures(pcts: Sequence[float], min_idle_pct: float) -> dict[str, Any]:
    """The criterion's figures over per-second idle shares."""
    below = sum(1 for x in pcts if x < min_idle_pct)
    return {"criterion_min_idle_pct": min_idle_pct, "per_second_pct": list(pcts),
            "mean_pct": round(sum(pcts) / len(pcts), 1) if pcts else None,
            "min_pct": min(pcts) if pcts else None, "seconds_below": below,
            "ok": bool(pcts) and below == 0}


def process_cpu_text(by_kind: dict[str, dict[str, float | int]]) -> str:
    """``by_process`` of the idle summary in one line: mean cores and processes per kind,
    busiest first (the rest of the machine's use is Mininet, the kernel and others)."""
    rows = sorted(by_kind.items(), key=lambda kv: -kv[1]["cores"])
    return "mean cores: " + ", ".join(f"{kind} {row['cores']:.2f} ({row['processes']})"
                                      for kind, row in rows)


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
