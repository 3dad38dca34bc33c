"""The broker workload of an emulated run: real broker and client processes on Mininet
hosts, one algorithm after another on the same network.

For each algorithm: write one config per broker (overlay neighbours with the address to
dial and the link's delay/loss, which the broker applies itself where the kernel has no
netem), start the brokers, wait until every overlay link is up (a timeout names the
missing links), start one client process per broker host that runs all of that
broker's workload clients (a :mod:`nodes.emulated.client` group: each client still has its own
connection over the host's loopback, HELLO name and ``<client>.jsonl``, so brokers and
cores see the same clients as with one process each, but the 2-core machine runs 70
interpreters instead of hundreds), wait for the clients to finish their schedule, stop
the brokers, and turn the logs into ``summary.json`` with the same code the simulator
uses.

Membership operations: JOIN and LEAVE are client operations like any other (the broker
wakes at a JOIN and sleeps after a LEAVE, see :mod:`nodes.emulated.broker`); a CRASH operation is
never sent: at its time on the workload's clock (``t0 + t_s``) the runner SIGKILLs that
broker's process (:class:`CrashSchedule`). The clients of a crashed broker lose their
connection and exit 1; they are listed under ``crashed`` in the summary, not under
``client_failures``, which keeps the failures nobody asked for. The oracle does not order
membership operations: it gets the workload without them and with the membership they
stand for (:func:`nodes.workloads.membership.oracle_workload`).

Faults: each summary also records the brokers that exited before the runner stopped
them, the overlay links declared down while the workload ran, the links throttled by
hand (``pubsublab throttle``, undone before and after each algorithm), and which of its
losses no fault of the spec explains (:mod:`experiments.runs.faults`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from analysis.block_figures import draw_blocks
from experiments.emulation.capture import Capture, CapturePlan, manifest_entry, plan_capture
from experiments.emulation.network import Emulation
from experiments.emulation.throttle import ScheduledRates, live_run, restore_manual
from experiments.plan import RunPlan
from experiments.progress import log
from experiments.runs.brokers import BrokerRun, broker_configs, socket_buffers, start_margin_s
from experiments.runs.faults import (
    ExitWatch,
    RunThread,
    declared_faults,
    delivery_faults,
    link_downs,
    notification_routes,
)
from experiments.runs.manifest import node_names, workload_wall
from experiments.runs.summaries import log_extras
from nodes.emulated.runtime import BROKER_PORT
from nodes.logs import iter_jsonl
from nodes.messages import MsgType
from nodes.metrics.log_summary import summarize_logs
from nodes.metrics.summary import MsgKey
from nodes.runfolder import PCAP_DIR, THROTTLES, WORKLOAD, write_summary
from nodes.time_left import PROGRESS_EVERY_S, TimeLeft
from nodes.workloads.membership import oracle_workload
from nodes.workloads.ops import Workload, workload_to_jsonl
from nodes.workloads.oracle import expected_deliveries


class CrashSchedule(RunThread):
    """Kills brokers at the times of the workload's CRASH operations, in a thread: each
    at ``t0_wall + t_s``; ``applied`` lists what was done (broker, ``t_s``, and how late
    in ms)."""

    name = "crashes"

    def __init__(self, run: BrokerRun, workload: Workload, t0_wall: float) -> None:
        super().__init__(run, t0_wall)
        self._crashes = sorted({(op.t_s, op.broker) for op in workload.ops
                                if op.msg.type is MsgType.CRASH})
        self.applied: list[dict[str, Any]] = []

    def start(self) -> None:
        if self._crashes:
            super().start()

    def _loop(self) -> None:
        for t_s, broker in self._crashes:
            if self._stop.wait(max(0.0, self._t0_wall + t_s - time.time())):
                return
            if self._run.brokers[broker].poll() is not None:
                continue  # dead already (an earlier CRASH of the same broker)
            self._run.kill(broker)
            late_ms = round((time.time() - self._t0_wall - t_s) * 1000.0, 3)
            self.applied.append({"broker": broker, "t_s": t_s, "late_ms": late_ms})
            log(f"crashed broker {broker} at t = {t_s:g} s ({late_ms:.0f} ms late)")


class WorkloadProgress(RunThread):
    """A progress line every :data:`~nodes.time_left.PROGRESS_EVERY_S` while the clients
    run: how far the workload's clock is, and the run's time left (the algorithm's share
    done taken as its time so far over its estimate, ``step_s``: the workload runs in real
    time)."""

    name = "progress"

    def __init__(self, run: BrokerRun, t0_wall: float, duration_s: float,
                 progress: TimeLeft, step_s: float) -> None:
        super().__init__(run, t0_wall)
        self._duration_s, self._progress, self._step_s = duration_s, progress, step_s

    def _loop(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY_S):
            t_s = max(0.0, time.time() - self._t0_wall)
            # Capped below 1: an algorithm past its estimate is not done yet.
            share = min(0.99, self._progress.step_elapsed_s() / self._step_s)
            self._progress.part(share, f"workload at {t_s:.0f} of {self._duration_s:.0f} s")


# Starting nine brokers, waiting for their links, stopping them and summarizing their logs
# took 4-6 s per algorithm of the demo on the 2-core machines, on top of the workload.
ALGORITHM_OVERHEAD_S = 5.0


def algorithm_estimate_s(plan: RunPlan) -> float:
    """Seconds one algorithm of ``plan``'s stock workload should take on the live network:
    the clients' start margin, the workload's phase and :data:`ALGORITHM_OVERHEAD_S`."""
    assert plan.workload is not None
    return start_margin_s(plan.workload) + plan.phase_s() + ALGORITHM_OVERHEAD_S


def configured_rates(plan: RunPlan) -> dict[tuple[str, str], float | None]:
    """The configured rate (Mbit/s) of every overlay link that is a link of its own, by
    its two brokers (what a scheduled rate change restores)."""
    return {(e.a, e.b): e.bw_mbps if len(e.links) == 1 else None for e in plan.edges}


def run_algorithm(emu: Emulation, plan: RunPlan, algorithm: str, out_dir: Path, *,
                  expected: Mapping[MsgKey, frozenset[str]], link_timeout_s: float = 60.0,
                  capture: CapturePlan | None = None,
                  progress: TimeLeft | None = None,
                  workload_wall: list[list[float]] | None = None) -> dict[str, Any]:
    """Run the plan's workload with ``algorithm`` on the live network (``expected``: the
    oracle's deliveries of the workload); returns the summary.
    With ``capture``, tcpdump records ``out_dir/pcap/`` from before the brokers start
    until after they stop. With ``progress`` (its current step is this algorithm), a
    line with the time left comes every so often while the clients run. The wall-clock
    span from the clients' t = 0 until they all ended is appended to ``workload_wall``
    (the seconds the CPU criterion judges, :mod:`experiments.emulation.fidelity`)."""
    workload = plan.workload
    assert workload is not None  # broker_phase runs stock workloads only
    emulate = emu.probe["mechanisms"]["delay_loss"] == "in-broker"
    configs = broker_configs(plan, algorithm, emulate_link=emulate, log_dir=out_dir)
    run = BrokerRun(emu, out_dir, socket_buffers(plan))
    rates: ScheduledRates | None = None
    crashes: CrashSchedule | None = None
    exits: ExitWatch | None = None
    ticker: WorkloadProgress | None = None
    configured = configured_rates(plan)
    t_begin = time.time()
    t0_wall: float | None = None
    # A link throttled by hand after the last algorithm must not carry into this one.
    restore_manual(out_dir.parent, configured, log)
    with Capture(emu, capture, out_dir / PCAP_DIR, log) if capture else contextlib.nullcontext():
        try:
            run.start_brokers(configs)
            up_s = run.wait_links_up(link_timeout_s)
            log(f"{algorithm}: {len(configs)} brokers, every overlay link up in {up_s:.1f} s"
                + (" (links open on demand)" if plan.links == "on-demand" else ""))
            duration_s = plan.phase_s()
            margin_s = start_margin_s(workload)
            t0_wall = time.time() + margin_s
            if plan.link_schedule:
                rates = ScheduledRates(plan.link_schedule, configured, t0_wall, log)
                rates.start()
            run.start_clients(workload, start_at_wall=t0_wall, duration_s=duration_s)
            crashes = CrashSchedule(run, workload, t0_wall)
            crashes.start()
            exits = ExitWatch(run, t0_wall)
            exits.start()
            if progress is not None:
                ticker = WorkloadProgress(run, t0_wall, duration_s, progress,
                                          algorithm_estimate_s(plan))
                ticker.start()
            log(f"{algorithm}: {len(run.clients)} clients, {len(workload.ops)} operations "
                f"over {duration_s:.1f} s")
            codes = run.wait_clients(margin_s + duration_s + 30.0)
        finally:
            stopping_wall = time.time()  # link downs from here on are the shutdown's
            if workload_wall is not None and t0_wall is not None:
                workload_wall.append([t0_wall, stopping_wall])
            try:
                if ticker is not None:
                    ticker.stop()
                if crashes is not None:
                    crashes.stop()
                if exits is not None:
                    exits.stop()
                if rates is not None:
                    rates.stop()
                manual = restore_manual(out_dir.parent, configured, log)
            finally:
                run.stop_brokers()
    crashed = {c["broker"] for c in crashes.applied} if crashes is not None else set()
    assert exits is not None  # the workload ran
    broker_exits = [{**e, "declared": e["broker"] in crashed} for e in exits.exits]
    for e in broker_exits:
        run.record_exit(e["broker"], e["returncode"])
        if not e["declared"]:
            log(f"WARNING {algorithm}: broker {e['broker']} exited at t = {e['t_s']:g} s "
                f"(code {e['returncode']}), not by a CRASH of the workload")
    lost = {c: code for c, code in sorted(codes.items())
            if code == 1 and workload.clients.get(c) in crashed}
    failed = {c: code for c, code in sorted(codes.items()) if code != 0 and c not in lost}
    if 2 in failed.values():
        raise RuntimeError(f"{algorithm}: clients rejected their configs: {failed} "
                           f"(see {out_dir}/<broker>.clients.stderr)")
    if failed:
        log(f"WARNING {algorithm}: clients lost their broker: {failed}")
    summary = summarize_logs(out_dir, plan.overlay.nodes, workload, algorithm, "emulated",
                             plan.spec.scale, expected)
    summary["links_up_s"] = round(up_s, 3)
    summary["client_failures"] = failed
    if crashes is not None and crashes.applied:
        summary["crashed"] = {"brokers": crashes.applied, "clients": lost}
    summary.update(log_extras(out_dir, plan))
    if rates is not None:
        summary["link_schedule"] = rates.applied
    summary["broker_exits"] = broker_exits
    summary["link_downs"] = link_downs(out_dir, plan.overlay.nodes, t0_wall, stopping_wall)
    summary["manual_throttles"] = [{**t, "t_s": round(t["t_wall"] - t0_wall, 3)}
                                   for t in manual if t["t_wall"] >= t_begin]
    summary["faults"] = delivery_faults(out_dir, workload, summary, expected,
                                        declared_faults(plan), notification_routes(plan))
    if any(summary["faults"]["unexplained"].values()):
        log(f"WARNING {algorithm}: deliveries not exactly once, unexplained by a declared "
            f"fault: {summary['faults']['unexplained']}")
    write_summary(out_dir, summary)
    return summary


def broker_phase(plan: RunPlan) -> Callable[[Emulation, Path, dict[str, Any]], None]:
    """A runner phase running every algorithm of the plan in turn; the summaries go to
    ``<run>/<algorithm>/summary.json`` and into the manifest, and so does the capture
    (its limit, and per algorithm what was captured, dropped and overwritten)."""
    workload = plan.workload
    assert workload is not None

    def phase(emu: Emulation, run_dir: Path, manifest: dict[str, Any]) -> None:
        workload_to_jsonl(workload, run_dir / WORKLOAD)
        expected = expected_deliveries(oracle_workload(workload))
        manifest["workload"] = dict(workload.meta)
        manifest["nodes"] = node_names(plan)
        summaries = manifest.setdefault("summaries", {})
        cap = None
        manifest["capture"] = {"enabled": False}
        if plan.capture.enabled:
            cap = plan_capture(plan.capture, list(plan.overlay.nodes), BROKER_PORT)
            manifest["capture"] = {**cap.describe(), "algorithms": {}}
        progress = TimeLeft(f"run {plan.name}", [(a.name, algorithm_estimate_s(plan))
                                                 for a in plan.algorithms], log)
        with live_run(run_dir, emu.placement,
                      emu.servers.ssh_config if emu.servers is not None else None):
            try:
                for alg in plan.algorithms:
                    out = run_dir / alg.name
                    out.mkdir()
                    # Not "operations over": that phrase marks the clients' start (in
                    # run_algorithm), which the teardown tests wait for.
                    progress.start(f"{len(workload.ops)} client operations, a "
                                   f"{plan.phase_s():.0f} s workload")
                    try:
                        s = run_algorithm(emu, plan, alg.name, out, expected=expected,
                                          capture=cap, progress=progress,
                                          workload_wall=workload_wall(manifest))
                    finally:
                        if cap:
                            manifest["capture"]["algorithms"][alg.name] = manifest_entry(
                                out / PCAP_DIR)
                    summaries[alg.name] = s
                    progress.finish()
                    log(f"{alg.name}: delivered {s['delivered']} of "
                        f"{s['expected_deliveries']}, missing {s['missing']}, duplicates "
                        f"{s['duplicates']}, IMs {s['ims_total']}")
            finally:
                manifest["manual_throttles"] = list(iter_jsonl(run_dir / THROTTLES))
        draw_blocks(summaries, run_dir)

    return phase
