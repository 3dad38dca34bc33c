"""The broker workload of an emulated run: real broker and client processes on Mininet
hosts, one algorithm after another on the same network.

For each algorithm: write one config per broker (overlay neighbours with the address to
dial and the link's delay/loss, which the broker applies itself where the kernel has no
netem), start the brokers, wait until every overlay link is up (a timeout names the
missing links), start one client process per broker host that runs all of that
broker's workload clients (a :mod:`nodes.client` group: each client still has its own
connection over the host's loopback, HELLO name and ``<client>.jsonl``, so brokers and
cores see the same clients as with one process each, but the 2-core machine runs 70
interpreters instead of hundreds), wait for the clients to finish their schedule, stop
the brokers, and turn the logs into ``summary.json`` with the same code the simulator
uses.

Membership operations: JOIN and LEAVE are client operations like any other (the broker
wakes at a JOIN and sleeps after a LEAVE, see :mod:`nodes.broker`); a CRASH operation is
never sent: at its time on the workload's clock (``t0 + t_s``) the runner SIGKILLs that
broker's process (:class:`CrashSchedule`). The clients of a crashed broker lose their
connection and exit 1; they are listed under ``crashed`` in the summary, not under
``client_failures``, which keeps the failures nobody asked for. The oracle does not order
membership operations: it gets the workload without them and with the membership they
stand for (:func:`nodes.workloads.membership.oracle_workload`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from analysis.burst import draw_burst
from experiments.emulation.capture import Capture, CapturePlan, manifest_entry, plan_capture
from experiments.emulation.network import Emulation
from experiments.emulation.throttle import ScheduledRates
from experiments.plan import RunPlan
from experiments.progress import log
from experiments.runs.brokers import BrokerRun, broker_configs, start_margin_s
from experiments.runs.summaries import log_extras
from nodes.log_summary import summarize_logs
from nodes.messages import MsgType
from nodes.runfolder import PCAP_DIR, WORKLOAD, write_summary
from nodes.runtime import BROKER_PORT
from nodes.summary import MsgKey
from nodes.workloads.membership import oracle_workload
from nodes.workloads.ops import Workload, workload_to_jsonl
from nodes.workloads.oracle import expected_deliveries


class CrashSchedule:
    """Kills brokers at the times of the workload's CRASH operations, in a thread: each
    at ``t0_wall + t_s``; ``applied`` lists what was done (broker, ``t_s``, and how late
    in ms)."""

    def __init__(self, run: BrokerRun, workload: Workload, t0_wall: float) -> None:
        self._run = run
        self._crashes = sorted({(op.t_s, op.broker) for op in workload.ops
                                if op.msg.type is MsgType.CRASH})
        self._t0_wall = t0_wall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="crashes", daemon=True)
        self.applied: list[dict[str, Any]] = []

    def start(self) -> None:
        if self._crashes:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

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


def configured_rates(plan: RunPlan) -> dict[tuple[str, str], float | None]:
    """The configured rate (Mbit/s) of every overlay link that is a link of its own, by
    its two brokers (what a scheduled rate change restores)."""
    return {(e.a, e.b): e.bw_mbps if len(e.links) == 1 else None for e in plan.edges}


def run_algorithm(emu: Emulation, plan: RunPlan, algorithm: str, out_dir: Path, *,
                  expected: Mapping[MsgKey, frozenset[str]], link_timeout_s: float = 60.0,
                  capture: CapturePlan | None = None) -> dict[str, Any]:
    """Run the plan's workload with ``algorithm`` on the live network (``expected``: the
    oracle's deliveries of the workload); returns the summary.
    With ``capture``, tcpdump records ``out_dir/pcap/`` from before the brokers start
    until after they stop."""
    workload = plan.workload
    assert workload is not None  # broker_phase runs stock workloads only
    emulate = emu.probe["mechanisms"]["delay_loss"] == "in-broker"
    configs = broker_configs(plan, algorithm, emulate_link=emulate, log_dir=out_dir)
    run = BrokerRun(emu, out_dir)
    rates: ScheduledRates | None = None
    crashes: CrashSchedule | None = None
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
                rates = ScheduledRates(plan.link_schedule, configured_rates(plan),
                                       t0_wall, log)
                rates.start()
            run.start_clients(workload, start_at_wall=t0_wall, duration_s=duration_s)
            crashes = CrashSchedule(run, workload, t0_wall)
            crashes.start()
            log(f"{algorithm}: {len(run.clients)} clients, {len(workload.ops)} operations "
                f"over {duration_s:.1f} s")
            codes = run.wait_clients(margin_s + duration_s + 30.0)
        finally:
            try:
                if crashes is not None:
                    crashes.stop()
                if rates is not None:
                    rates.stop()
            finally:
                run.stop_brokers()
    crashed = {c["broker"] for c in crashes.applied} if crashes is not None else set()
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
        summaries = manifest.setdefault("summaries", {})
        cap = None
        manifest["capture"] = {"enabled": False}
        if plan.capture.enabled:
            cap = plan_capture(plan.capture, list(plan.overlay.nodes), BROKER_PORT)
            manifest["capture"] = {**cap.describe(), "algorithms": {}}
        for alg in plan.algorithms:
            out = run_dir / alg.name
            out.mkdir()
            try:
                s = run_algorithm(emu, plan, alg.name, out, expected=expected, capture=cap)
            finally:
                if cap:
                    manifest["capture"]["algorithms"][alg.name] = manifest_entry(out / PCAP_DIR)
            summaries[alg.name] = s
            log(f"{alg.name}: delivered {s['delivered']} of {s['expected_deliveries']}, "
                f"missing {s['missing']}, duplicates {s['duplicates']}, IMs {s['ims_total']}")
        draw_burst({a: sm.get("burst") for a, sm in summaries.items()}, run_dir)

    return phase
