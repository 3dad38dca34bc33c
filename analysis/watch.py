"""`pubsublab watch [RUN_DIR]`: a live view of a run, or a replay of a finished one.

A run in progress is one whose ``manifest.json`` says ``status: running`` (the
emulated runner writes that at the start and its final status at the end; a killed
run is set to ``killed`` by the next one; a simulation writes its manifest only when
it is over, and is replayed). Without RUN_DIR the newest such run folder under the runs
folder is watched. The view follows the algorithm whose folder the
runner created last, tails its brokers' logs and the runner's CPU samples
(:mod:`analysis.live`) about twice a second, and ends when the manifest no longer says
``running``.

A finished run (emulated or simulated) is replayed: per algorithm in the run's order
(or the one asked for), its records are merged in time order and fed to the view on
their own clock (``t_wall``; the simulator's is its simulated time) one frame at a time.
A frame covers a whole number of the run's statistics windows (``window_ms``: about
``speed`` x 0.5 s of the run, at least one window) and follows the last one by that span
divided by ``speed``: speed changes the wall time a window takes, never which windows are
shown. A frame shows, per link, the longest queue and the overloaded windows of all the
windows it covers (the state's hold is the frame's span, and its recent delays and IDR
decisions cover at least the frame too), so a congestion episode shorter than a frame
still shows; pacing by the wall clock instead had the replay at
``--speed 5`` jump 2.5 s a frame and show only the last second of each, and the
throttled link of the demo ok in every frame. A frame drawn late is followed a whole
period later: a slow terminal slows the replay, it skips nothing.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from analysis.live import FolderTail, LogTail, replay_records
from analysis.live_state import CpuIdle, LiveState
from analysis.live_view import Frame, render
from nodes.cores.congestion import DEFAULT_CE_MIN, DEFAULT_THETA
from nodes.logs import iter_jsonl
from nodes.metrics.summary import MsgKey
from nodes.runfolder import CPU_IDLE, WORKLOAD, log_path, read_manifest
from nodes.workloads.membership import oracle_workload
from nodes.workloads.ops import workload_from_jsonl
from nodes.workloads.oracle import expected_deliveries

RUNNING = "running"  # the manifest status of a run in progress (experiments.runs.testbed)


def _any_line(line: bytes) -> bool:
    return bool(line.strip())


@dataclass(frozen=True)
class RunInfo:
    """What the view needs from a run's manifest (``stats_window_s``: the brokers'
    statistics window W, in seconds)."""

    run_dir: Path
    runtime: str
    algorithms: tuple[str, ...]
    brokers: tuple[str, ...]
    edges: tuple[tuple[str, str, str], ...]
    lst: Mapping[str, tuple[int, float]]
    min_idle_pct: float
    stats_window_s: float
    live: bool
    cpu_summary: Mapping[str, Any] | None
    # The workloads' wall-clock spans, the seconds the CPU verdict judges (a finished run).
    workload_wall: tuple[tuple[float, float], ...] | None = None

    @classmethod
    def read(cls, run_dir: Path) -> RunInfo:
        """From ``run_dir``'s manifest; ValueError, in one line, if it cannot be watched."""
        manifest = read_manifest(run_dir)
        if not isinstance(manifest, dict) or "plan" not in manifest:
            raise ValueError(f"{run_dir}: no run manifest there (a run folder has "
                             "manifest.json)")
        plan = manifest["plan"]
        if (plan.get("workload") or {}).get("kind") == "bulk":
            raise ValueError(f"{run_dir}: a bulk-data run; watch shows brokers' queues and "
                             "notifications, which bulk rounds do not have")
        edges = tuple((e["a"], e["b"], e.get("type") or "link")
                      for e in plan["overlay"]["edges"])
        lst = {}
        for name, alg in plan["algorithms"].items():
            params = alg.get("params", {})
            lst[name] = (int(params.get("theta", DEFAULT_THETA)),
                         float(params.get("ce_min", DEFAULT_CE_MIN)))
        fidelity = manifest.get("spec", {}).get("fidelity") or {}
        # The plan's algorithms are keyed (and written) in name order; the spec keeps the
        # order they run in.
        order = manifest["spec"]["routing"]["algorithms"]
        return cls(run_dir=run_dir, runtime=manifest.get("runtime", "?"),
                   algorithms=tuple(order),
                   brokers=tuple(sorted({n for a, b, _ in edges for n in (a, b)})),
                   edges=edges, lst=lst,
                   min_idle_pct=float(fidelity.get("min_idle_pct", 35.0)),
                   stats_window_s=float(plan.get("window_ms", 50.0)) / 1000,
                   live=manifest.get("status") == RUNNING,
                   cpu_summary=(manifest.get("fidelity") or {}).get("cpu_idle"),
                   workload_wall=tuple((float(a), float(b)) for a, b in spans)
                   if (spans := (manifest.get("fidelity") or {}).get("workload_wall"))
                   else None)

    def started(self) -> list[str]:
        """The algorithms whose folder exists, in the run's order."""
        return [a for a in self.algorithms if (self.run_dir / a).is_dir()]

    def cpu_note(self) -> str:
        """What the CPU panel says when there are no samples to show."""
        if self.runtime == "simulated":
            return "not measured in a simulated run"
        s = self.cpu_summary
        if s and s.get("per_second_pct"):
            return (f"no per-second file in this run; its manifest: mean {s['mean_pct']} %, "
                    f"min {s['min_pct']} %, below {s['criterion_min_idle_pct']:g} % in "
                    f"{s['seconds_below']} of {len(s['per_second_pct'])} s")
        return "no sample yet (the runner samples once a second from the fidelity check on)"


def find_live_run(base: Path) -> Path | None:
    """The newest run folder under ``base`` whose manifest says the run is in progress
    (folder names start with their start time, so the newest sorts last)."""
    if not base.is_dir():
        return None
    for d in sorted((d for d in base.iterdir() if d.is_dir()), reverse=True):
        manifest = read_manifest(d)
        if isinstance(manifest, dict) and manifest.get("status") == RUNNING:
            return d
    return None


def expected_of(run_dir: Path) -> dict[MsgKey, frozenset[str]] | None:
    """The oracle's deliveries of the run's workload (None until the runner has written
    ``workload.jsonl``)."""
    path = run_dir / WORKLOAD
    if not path.is_file():
        return None
    return expected_deliveries(oracle_workload(workload_from_jsonl(path)))


class _View:
    """The rich Live display and the frame around the figures."""

    def __init__(self, info: RunInfo, console: Console, mode: str, window_s: float) -> None:
        self.info = info
        self.console = console
        self.mode = mode
        self.window_s = window_s

    def show(self, live: Live, algorithm: str | None, state: LiveState | None,
             cpu: CpuIdle, now: float, bad_lines: int = 0) -> None:
        info = self.info
        position = (f"({info.algorithms.index(algorithm) + 1} of {len(info.algorithms)})"
                    if algorithm in info.algorithms else "")
        theta = info.lst.get(algorithm or "", (DEFAULT_THETA, DEFAULT_CE_MIN))[0]
        frame = Frame(run=info.run_dir.name, algorithm=algorithm, position=position,
                      mode=self.mode, runtime=info.runtime, theta=theta,
                      waiting="waiting for the workload to start (the runner builds the "
                              "network and checks link fidelity first)",
                      bad_lines=bad_lines, cpu_note=info.cpu_note())
        snap = state.snapshot(now) if state is not None else None
        live.update(render(frame, snap, cpu, height=self.console.size.height,
                           window_s=self.window_s, hold_s=state.hold_s if state else 1.0,
                           ascii_only=self.console.options.ascii_only), refresh=True)


class _Ticks:
    """Waits for the next multiple of ``period_s`` since it was made, so that a frame's
    own work (reading the logs, drawing: a few tenths of a second while the emulation
    keeps both cores busy) does not stretch the period: sleeping a whole period after
    each frame put the frames 0.9 s apart in the demo's burst, and the throttled link's
    overload on the screen up to 2.1 s after the throttle. A frame later than its tick
    is followed a whole period later, not hurried."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.next = time.monotonic() + period_s

    def wait(self) -> None:
        now = time.monotonic()
        if now < self.next:
            time.sleep(self.next - now)
            self.next += self.period_s
        else:
            self.next = now + self.period_s


def _state(info: RunInfo, algorithm: str, expected: Mapping[MsgKey, frozenset[str]] | None,
           window_s: float, hold_s: float = 1.0) -> LiveState:
    theta, ce_min = info.lst[algorithm]
    return LiveState(info.edges, theta=theta, ce_min=ce_min, expected=expected,
                     window_s=window_s, hold_s=hold_s)


def watch_live(info: RunInfo, console: Console, *, refresh_s: float = 0.5,
               window_s: float = 5.0) -> None:
    """Follow a run in progress until its manifest says it ended."""
    view = _View(info, console, "live", window_s)
    cpu = CpuIdle(info.min_idle_pct)
    cpu_tail = LogTail(info.run_dir / CPU_IDLE, keep=_any_line)
    expected = None
    algorithm: str | None = None
    state: LiveState | None = None
    tail: FolderTail | None = None
    ticks = _Ticks(refresh_s)
    with Live(console=console, auto_refresh=False, transient=False) as live:
        while True:
            running = RunInfo.read(info.run_dir).live
            started = info.started()
            if started and started[-1] != algorithm:
                algorithm = started[-1]
                state = _state(info, algorithm, expected, window_s)
                tail = FolderTail(info.run_dir / algorithm, info.brokers)
            if expected is None and state is not None:
                expected = expected_of(info.run_dir)
                if expected is not None:
                    state.set_expected(expected)
            for rec in cpu_tail.read():
                cpu.take(rec)
            if state is not None and tail is not None:
                for rec in tail.read():
                    state.take(rec)
            view.show(live, algorithm, state, cpu, time.time(),
                      tail.bad_lines if tail is not None else 0)
            if not running:
                return
            ticks.wait()


def frame_windows(speed: float, window_s: float, refresh_s: float = 0.5) -> int:
    """How many statistics windows of ``window_s`` seconds one replay frame covers at
    ``speed``: as many as the run spent in ``speed`` x ``refresh_s``, at least one."""
    return max(1, math.floor(speed * refresh_s / window_s + 0.5))


def _frames(records: Iterator[dict[str, Any]], t0: float,
            span_s: float) -> Iterator[tuple[float, list[dict[str, Any]]]]:
    """``records`` cut at ``t0`` + k x ``span_s`` (k = 1, 2, ...): (the frame's end on the
    run's clock, the records up to it since the previous frame's end)."""
    pending = next(records, None)
    k = 0
    while pending is not None:
        k += 1
        now = t0 + k * span_s
        batch = []
        while pending is not None and pending["t_wall"] <= now:
            batch.append(pending)
            pending = next(records, None)
        yield now, batch


def replay(info: RunInfo, console: Console, *, speed: float, algorithm: str | None = None,
           refresh_s: float = 0.5, window_s: float = 5.0) -> None:
    """Replay a finished run's algorithms (or ``algorithm``) at ``speed``, frame after
    frame (see the module docstring)."""
    names = info.started() if algorithm is None else [algorithm]
    if algorithm is not None and algorithm not in info.started():
        raise ValueError(f"--algorithm {algorithm!r}: this run has "
                         f"{', '.join(info.started()) or 'no algorithm folder'}")
    span_s = frame_windows(speed, info.stats_window_s, refresh_s) * info.stats_window_s
    # The recent delays and decisions cover at least the frame, as the queues do.
    window_s = max(window_s, span_s)
    view = _View(info, console, f"replay x{speed:g}", window_s)
    expected = expected_of(info.run_dir)
    cpu_samples = list(iter_jsonl(info.run_dir / CPU_IDLE))
    with Live(console=console, auto_refresh=False, transient=False) as live:
        for name in names:
            state = _state(info, name, expected, window_s, hold_s=max(1.0, span_s))
            records = replay_records([log_path(info.run_dir / name, b) for b in info.brokers])
            first = next(records, None)
            if first is None:
                continue
            cpu = CpuIdle(info.min_idle_pct, info.workload_wall)
            samples = iter(cpu_samples)
            sample = next(samples, None)
            ticks = _Ticks(span_s / speed)
            # The first frame ends one span after the first record, as a window does.
            for now, batch in _frames(itertools.chain([first], records), first["t_wall"],
                                      span_s):
                for rec in batch:
                    state.take(rec)
                while sample is not None and sample["t_wall"] <= now:
                    cpu.take(sample)
                    sample = next(samples, None)
                view.show(live, name, state, cpu, now)
                ticks.wait()


def watch(run_dir: Path | None, runs_base: Path, *, speed: float = 1.0,
          algorithm: str | None = None, console: Console | None = None) -> None:
    """`pubsublab watch`: ``run_dir`` (default: the run in progress under ``runs_base``)
    live if it is in progress, else replayed. ValueError, in one line, for a folder that
    cannot be watched or no run in progress."""
    if not speed > 0:
        raise ValueError(f"--speed {speed:g}: must be above 0")
    if math.isinf(speed):
        raise ValueError("--speed inf: must be finite (a replay shows every window)")
    if run_dir is None:
        run_dir = find_live_run(runs_base)
        if run_dir is None:
            raise ValueError(f"no run in progress under {runs_base}/ (its manifest would "
                             "say running); give a RUN_DIR to replay a finished run")
    info = RunInfo.read(run_dir)
    console = console or Console()
    if info.live:
        if algorithm is not None:
            raise ValueError("--algorithm: only for a replay (a live view follows the "
                             "algorithm that runs)")
        watch_live(info, console)
    else:
        replay(info, console, speed=speed, algorithm=algorithm)
