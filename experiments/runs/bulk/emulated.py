"""Bulk rounds on a live Mininet network: agents and clients on the hosts, the publisher's
NIC sampled from its interface counters, an optional kill, and the round read back from
the logs."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.emulation.network import Emulation
from experiments.plan import RunPlan
from experiments.progress import log
from experiments.runs.brokers import BrokerRun, broker_configs, socket_buffers
from experiments.runs.bulk.rounds import RECORD_KINDS, Observation, round_limit_s, run_rounds
from experiments.runs.manifest import workload_wall
from nodes.logs import Ev, iter_jsonl
from nodes.runfolder import NIC, log_path, read_json, write_json
from nodes.workloads.bulk import BulkPlan

START_MARGIN_S = 2.0  # clients' t = 0 lies this far after they are started


class _NicSampler:
    """Samples a Mininet host's interface transmit counter (``/proc/<pid>/net/dev`` of a
    process in the host's network namespace) every ``interval_s``, with monotonic times."""

    def __init__(self, pid: int, intf: str, interval_s: float = 0.1) -> None:
        self._path = Path(f"/proc/{pid}/net/dev")
        self._intf = intf
        self._interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> int:
        for line in self._path.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == self._intf:
                return int(rest.split()[8])  # receive has 8 columns, then transmit bytes
        raise RuntimeError(f"interface {self._intf} not in {self._path}")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._read()))
            self._stop.wait(self._interval_s)

    def __enter__(self) -> _NicSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), self._read()))


def observation_from_logs(out_dir: Path, plan: BulkPlan, subscribers: Sequence[str],
                          names: Sequence[str]) -> Observation:
    """An emulated round's observation, from its broker and client logs and ``nic.json``
    (the publisher's interface counters and the kill time, written by the round)."""
    pub_log = list(iter_jsonl(log_path(out_dir, plan.publisher_client)))
    starts = [r["t_mono"] for r in pub_log if r["ev"] == Ev.SEND and r.get("type") == "DATA"]
    obs = Observation(subscribers=tuple(subscribers), start_s=min(starts, default=0.0))
    obs.checksums[plan.publisher] = next(
        (r["checksum"] for r in pub_log if r.get("kind") == "data_send"), None)
    for b in subscribers:
        obs.checksums[b] = None
        for r in iter_jsonl(log_path(out_dir, plan.client_of(b))):
            if r["ev"] == Ev.RECV and r.get("type") == "DATA":
                obs.receipts.append((r["t_mono"], b, r["index"]))
            elif r.get("kind") == "data_recv":
                obs.checksums[b] = r["checksum"]
    ims: dict[str, int] = defaultdict(int)
    for b in names:
        for r in iter_jsonl(log_path(out_dir, b)):
            if r["ev"] == Ev.SEND and r.get("link") in names and r["type"] != "HELLO":
                ims[r["type"]] += 1
                if r["type"] == "DATA":
                    obs.data_sent.setdefault(b, []).append((r["t_mono"], r["size"]))
            elif r["ev"] == Ev.RECORD and r["kind"] in RECORD_KINDS:
                fields = {k: v for k, v in r.items()
                          if k not in ("t_mono", "t_wall", "node", "ev", "kind")}
                obs.records.append((r["t_mono"], b, r["kind"], fields))
            elif r["ev"] == Ev.RECORD and r["kind"] == "counters":
                obs.counters[b] = {k: v for k, v in r.items() if k.startswith("slices_")}
    obs.ims_by_type = dict(sorted(ims.items()))
    obs.records.sort(key=lambda rec: rec[0])
    nic = read_json(out_dir / NIC)
    if nic is not None:
        obs.nic_tx = [(t, b) for t, b in nic["tx_bytes"]]
        obs.killed_s = nic["killed_s"]
    return obs


def _wait_for_markers(paths: Sequence[Path], marker: bytes, timeout_s: float) -> list[Path]:
    """Wait until every file holds ``marker``; the ones that do not at the timeout."""
    offsets = dict.fromkeys(paths, 0)
    tails = dict.fromkeys(paths, b"")
    waiting = set(paths)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for path in sorted(waiting):
            with contextlib.suppress(FileNotFoundError), path.open("rb") as fh:
                fh.seek(offsets[path])
                chunk = fh.read()
                offsets[path] += len(chunk)
                if marker in tails[path] + chunk:
                    waiting.discard(path)
                tails[path] = (tails[path] + chunk)[-len(marker):]
        time.sleep(0.2)
    return sorted(waiting)


def emulated_round(emu: Emulation, run_plan: RunPlan, algorithm: str,
                   subscribers: Sequence[str], out_dir: Path,
                   kill_after_s: float | None = None,
                   workload_wall: list[list[float]] | None = None) -> Observation:
    """One round on the live network; see :mod:`experiments.runs.bulk`. The span from the
    clients' t = 0 until the round ended is appended to ``workload_wall``."""
    plan = run_plan.bulk
    assert plan is not None
    emulate = emu.probe["mechanisms"]["delay_loss"] == "in-broker"
    configs = broker_configs(run_plan, algorithm, emulate_link=emulate, log_dir=out_dir)
    run = BrokerRun(emu, out_dir, socket_buffers(run_plan))
    host = emu.net[plan.publisher]
    victim = plan.failure["victim"] if kill_after_s is not None and plan.failure else None
    limit_s = round_limit_s(plan, len(subscribers),
                             run_plan.overlay.nodes[plan.publisher].get("nic_mbps"),
                             run_plan.algorithm(algorithm).params, victim is not None)
    killed_s = None
    start_at: float | None = None
    try:
        run.start_brokers(configs)
        run.wait_links_up(60.0)
        start_at = time.time() + START_MARGIN_S
        run.start_client(plan.publisher_client, plan.publisher, {
            "role": "bulk-publisher", "topic": plan.topic, "data_bytes": plan.data_bytes,
            "slice_bytes": plan.slice_bytes, "data_seed": plan.seed, "start_s": plan.start_s,
            "start_at_wall": start_at})
        for b in subscribers:
            run.start_client(plan.client_of(b), b, {
                "role": "subscriber", "subscribe": {"topic": plan.topic},
                "start_at_wall": start_at})
        with _NicSampler(host.pid, host.defaultIntf().name) as nic:
            if victim is not None:
                assert kill_after_s is not None
                time.sleep(max(0.0, start_at + plan.start_s + kill_after_s - time.time()))
                killed_s = run.kill(victim)
                # The whole PC dies: its user (the subscriber client) with its agent,
                # on its server if it runs on another.
                run.clients[plan.client_of(victim)].send_signal(signal.SIGKILL)
            survivors = [b for b in subscribers if b != victim]
            late = _wait_for_markers([log_path(out_dir, plan.client_of(b)) for b in survivors],
                                     b'"kind":"data_recv"', START_MARGIN_S + limit_s)
        if late:
            log(f"WARNING {algorithm}: no complete data after {limit_s:.0f} s at "
                f"{', '.join(p.stem for p in late)}")
    finally:
        if workload_wall is not None and start_at is not None:
            workload_wall.append([start_at, time.time()])
        for proc in run.clients.values():
            if proc.poll() is None:
                proc.terminate()
        run.wait_clients(15.0)
        run.stop_brokers()
    write_json(out_dir / NIC, {"host": plan.publisher, "intf": host.defaultIntf().name,
                                    "tx_bytes": nic.samples, "killed_s": killed_s})
    return observation_from_logs(out_dir, plan, subscribers, list(run_plan.overlay.nodes))


def bulk_phase(run_plan: RunPlan) -> Callable[[Emulation, Path, dict[str, Any]], None]:
    """A runner phase running the plan's rounds on the live network; the summaries go to
    ``<run>/<algorithm>/summary.json`` and into the manifest."""
    plan = run_plan.bulk
    if plan is None:
        raise ValueError("the depth sweep runs in the simulator only (pubsublab sim)")

    def phase(emu: Emulation, run_dir: Path, manifest: dict[str, Any]) -> None:
        manifest["workload"] = {**run_plan.workload_params, **plan.describe()}
        if plan.stream_mbps is not None:
            # Which mechanism carries the parameter (never dropped silently).
            manifest["workload"]["stream_mbps_mechanism"] = (
                "in-broker pacing of every agent-to-agent link's output queue")
            log(f"per-stream cap {plan.stream_mbps:g} Mbit/s: paced in the brokers "
                "(recorded in the manifest)")
        ips = {b: run_plan.graph.nodes[b]["ip"] for b in run_plan.overlay.nodes}
        nic = run_plan.overlay.nodes[plan.publisher].get("nic_mbps")

        def round_fn(algorithm: str, subs: Sequence[str], folder: Path,
                     kill_after_s: float | None) -> tuple[Observation, float | None]:
            return emulated_round(emu, run_plan, algorithm, subs, folder, kill_after_s,
                                  workload_wall(manifest)), nic

        manifest["summaries"] = run_rounds(run_plan, ips, "emulated", round_fn, run_dir)

    return phase
