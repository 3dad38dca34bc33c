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
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from analysis.burst import burst_metrics, draw_burst
from experiments.capture import Capture, CapturePlan, manifest_entry, plan_capture
from experiments.network import Emulation
from experiments.plan import algorithm_params
from experiments.spec import Spec
from experiments.throttle import ScheduledRates
from experiments.workload import Workload, expected_deliveries, workload_to_jsonl
from nodes.broker import read_status, wait_until_ready
from nodes.client import read_group_status
from nodes.cores import overlay_params
from nodes.logs import iter_jsonl
from nodes.summary import (
    CARRIES,
    MATCHED_TYPES,
    PROPAGATED_KINDS,
    MsgKey,
    OpKey,
    build_summary,
    propagation_delays,
)
from topologies.graph import brokers, endpoint_ip, overlay_of, path_links
from topologies.links import LinkParams

BROKER_PORT = 7000
START_MARGIN_S = 2.0  # clients' t_s = 0 lies at least this far after they are started
# ... plus this much per client process: one costs about 80 ms of CPU to start (measured
# on the 2-core machines), and 70 of them start while 70 brokers run; a client that
# starts late sends its subscriptions late, possibly after the publications.
CLIENT_PROCESS_START_S = 0.1
SETTLE_S = 2.0  # clients keep listening this long after the last scheduled op


def start_margin_s(workload: Workload) -> float:
    """How long before the schedule's t_s = 0 the clients of ``workload`` are started:
    :data:`START_MARGIN_S`, plus :data:`CLIENT_PROCESS_START_S` per process (one per
    broker host with clients, see :meth:`BrokerRun.start_clients`)."""
    return START_MARGIN_S + CLIENT_PROCESS_START_S * len(set(workload.clients.values()))


def path_delay_loss(graph: nx.Graph, a: str, b: str) -> tuple[float, float]:
    """One-way delay (ms) and loss (%) from a to b: sums and compounds over the path."""
    delay_ms, keep = 0.0, 1.0
    for u, v in path_links(graph, a, b):
        p: LinkParams = graph.edges[u, v]["params"]
        delay_ms += p.delay_ms
        keep *= 1.0 - p.loss_pct / 100.0
    return delay_ms, round(100.0 * (1.0 - keep), 6)


def configured_rates(graph: nx.Graph) -> dict[tuple[str, str], float | None]:
    """The configured rate (Mbit/s) of every overlay link, by its two brokers."""
    return {(a, b): graph.edges[a, b]["params"].bw_mbps if graph.has_edge(a, b) else None
            for a, b in overlay_of(graph).edges}


def broker_configs(graph: nx.Graph, algorithm: str, params: dict[str, Any], *,
                   emulate_link: bool, log_dir: Path, seed: int,
                   write_buffer_bytes: int | None = None) -> dict[str, dict[str, Any]]:
    """One broker config (see :mod:`nodes.broker`) per broker of ``graph``."""
    overlay = overlay_of(graph)
    derived = overlay_params(algorithm, overlay)
    configs = {}
    for b in brokers(graph):
        neighbours = {}
        for n in sorted(overlay.neighbors(b)):
            delay_ms, loss_pct = path_delay_loss(graph, b, n)
            neighbours[n] = {"addr": [endpoint_ip(graph, b, n), BROKER_PORT],
                             "delay_ms": delay_ms, "loss_pct": loss_pct}
        configs[b] = {
            "broker": b, "listen": ["0.0.0.0", BROKER_PORT], "neighbours": neighbours,
            "core": {"name": algorithm, "params": {**derived.get(b, {}), **params}},
            "log_dir": str(log_dir), "emulate_link": emulate_link, "seed": seed,
            "write_buffer_bytes": write_buffer_bytes,
        }
    return configs


class BrokerRun:
    """The processes of one algorithm's run on a live :class:`Emulation`."""

    def __init__(self, emu: Emulation, out_dir: Path) -> None:
        self.emu = emu
        self.out_dir = out_dir
        self.config_dir = out_dir / "config"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.brokers: dict[str, Any] = {}
        # Client name -> its process; the clients of a group share one.
        self.clients: dict[str, Any] = {}
        self._group_status: dict[str, Path] = {}  # grouped client -> its group's status file

    def _start(self, host: str, module: str, name: str, config: dict[str, Any]) -> Any:
        path = self.config_dir / f"{name}.json"
        path.write_text(json.dumps(config, indent=1, sort_keys=True))
        err = open(self.out_dir / f"{name}.stderr", "wb")  # noqa: SIM115 - child owns it
        try:
            return self.emu.popen(host, [sys.executable, "-m", module, "--config", str(path)],
                                  stdout=err, stderr=err)
        finally:
            err.close()

    def start_brokers(self, configs: dict[str, dict[str, Any]]) -> None:
        for b, cfg in configs.items():
            self.brokers[b] = self._start(b, "nodes.broker", b, cfg)

    def status(self, broker: str) -> dict[str, Any] | None:
        return read_status(self.out_dir, broker)

    def wait_links_up(self, timeout_s: float) -> float:
        """Seconds until every broker reports all its overlay links up; RuntimeError
        naming the missing links (and any broker that died) on timeout."""
        t0 = time.monotonic()
        while True:
            dead = [b for b, p in self.brokers.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"broker(s) exited during start-up: {', '.join(dead)} "
                                   f"(see {self.out_dir}/<broker>.stderr)")
            # One look (timeout 0): this loop also watches for brokers that died.
            missing = wait_until_ready(self.out_dir, self.brokers, timeout_s=0.0)
            if not missing:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                links = sorted({"-".join(sorted((b, n))) for b, ns in missing.items()
                                for n in ns})
                raise RuntimeError(f"overlay links not up after {timeout_s:.0f} s: "
                                   f"{', '.join(links)}")
            time.sleep(0.1)

    def start_clients(self, workload: Workload, *, start_at_wall: float,
                      duration_s: float) -> None:
        """Start ``workload``'s clients: one process per broker host runs all of that
        broker's clients (see :meth:`start_client_group`), each with its own ops file."""
        ops_by_client: dict[str, list[str]] = defaultdict(list)
        for op in workload.ops:
            m = op.msg
            ops_by_client[op.client].append(json.dumps(
                {"t_s": op.t_s, "type": m.type.name, "msg_id": m.msg_id, "origin": m.origin,
                 "payload": m.payload}, sort_keys=True))
        by_broker: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for client, broker in sorted(workload.clients.items()):
            ops_path = self.config_dir / f"{client}.ops.jsonl"
            ops_path.write_text("\n".join(ops_by_client[client]) + "\n")
            by_broker[broker].append({"client": client, "ops": str(ops_path)})
        for broker, clients in sorted(by_broker.items()):
            self.start_client_group(broker, clients, {"start_at_wall": start_at_wall,
                                                      "duration_s": duration_s})

    def _client_config(self, broker: str) -> dict[str, Any]:
        """What every client on ``broker``'s host has in its config: its broker, over the
        host's loopback, and the log folder."""
        return {"broker": broker, "broker_addr": ["127.0.0.1", BROKER_PORT],
                "log_dir": str(self.out_dir)}

    def start_client(self, client: str, broker: str, settings: dict[str, Any]) -> None:
        """Start ``client`` on ``broker``'s host, connected to it over the host's loopback;
        ``settings`` complete its config (ops or a role, timing; see :mod:`nodes.client`)."""
        self.clients[client] = self._start(broker, "nodes.client", client, {
            "client": client, **self._client_config(broker), **settings})

    def start_client_group(self, broker: str, clients: list[dict[str, Any]],
                           settings: dict[str, Any]) -> None:
        """Start one process on ``broker``'s host for ``clients`` (each a client config's
        own part: ``client``, and ops or a role), all connected to ``broker`` over the
        host's loopback; ``settings`` are common to them (timing). Its config, standard
        error and status file are ``<broker>.clients.*``."""
        name = f"{broker}.clients"
        status = self.out_dir / f"{name}.status.json"
        proc = self._start(broker, "nodes.client", name, {
            "clients": clients, "common": {**self._client_config(broker), **settings},
            "status_file": str(status)})
        for entry in clients:
            self.clients[entry["client"]] = proc
            self._group_status[entry["client"]] = status

    def wait_clients(self, timeout_s: float) -> dict[str, int]:
        """Each client's exit status (see :mod:`nodes.client`: 1 lost or never reached its
        broker, 2 bad config), once every client process has ended; a process still
        running at the timeout is killed. A grouped client's status comes from its
        group's status file, or is the process's when the group wrote none (rejected or
        killed)."""
        deadline = time.monotonic() + timeout_s
        exit_codes: dict[Any, int] = {}  # by process: a group's is shared
        for p in self.clients.values():
            if p in exit_codes:
                continue
            try:
                exit_codes[p] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                exit_codes[p] = p.wait()
        codes = {}
        statuses: dict[Path, dict[str, Any] | None] = {}
        for c, p in self.clients.items():
            codes[c] = exit_codes[p]
            path = self._group_status.get(c)
            if path is not None:
                if path not in statuses:
                    statuses[path] = read_group_status(path)
                status = statuses[path]
                if status is not None:
                    codes[c] = int(status["codes"].get(c, codes[c]))
        return codes

    def stop_brokers(self) -> dict[str, int]:
        for p in self.brokers.values():
            if p.poll() is None:
                p.terminate()
        return {b: p.wait(timeout=15) for b, p in self.brokers.items()}


def link_notifications(out_dir: Path, links: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Notification copies (:data:`~nodes.summary.MATCHED_TYPES`: PUBLISH and IDR's
    CIV_NOTIFY) that left each broker's output queue onto the given overlay links, per
    direction: ``{"a>b": n, "b>a": m}``, from the brokers' ``send`` records (the same
    records in both runtimes). Each broker's log is read once."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for a, b in links:
        wanted[a].add(b)
        wanted[b].add(a)
    counts: dict[str, int] = {}
    for src, dsts in sorted(wanted.items()):
        per_dst = dict.fromkeys(sorted(dsts), 0)
        for r in iter_jsonl(out_dir / f"{src}.jsonl", "send"):
            if r.get("link") in per_dst and r.get("type") in MATCHED_TYPES:
                per_dst[r["link"]] += 1
        counts.update({f"{src}>{dst}": n for dst, n in per_dst.items()})
    return counts


def log_extras(out_dir: Path, spec: Spec, workload: Workload, graph: nx.Graph
               ) -> dict[str, Any]:
    """Summary figures either runtime reads from one algorithm's logs in ``out_dir``: the
    notifications on the links the spec's ``link_schedule`` changes, and the burst's
    metrics (:func:`analysis.burst.burst_metrics`) when the workload has one."""
    extras: dict[str, Any] = {}
    if spec.link_schedule:
        extras["scheduled_link_notifications"] = link_notifications(
            out_dir, [(c.a, c.b) for c in spec.link_schedule])
    if "burst" in workload.meta:
        extras["burst"] = burst_metrics(out_dir, workload, graph)
    return extras


def client_receipts(out_dir: Path, workload: Workload) -> dict[str, Any]:
    """What the clients' logs say: notifications received per (origin, msg_id) with the
    receiving subscribers (duplicates kept), notification delays, publications sent, the
    wall-clock span from the first publication to the last receipt, and the send times
    (``t_wall``) of advertisements and subscriptions by (type, origin, msg_id)."""
    deliveries: dict[tuple[str, int], list[str]] = defaultdict(list)
    delays: list[float] = []
    sent_s: dict[OpKey, float] = {}
    published = 0
    t_first, t_last = math.inf, -math.inf
    for client in sorted(workload.clients):
        for r in iter_jsonl(out_dir / f"{client}.jsonl"):
            if r["ev"] == "send" and r.get("type") in PROPAGATED_KINDS:
                sent_s[(r["type"], r["origin"], r["msg_id"])] = r["t_wall"]
            if r.get("type") != "PUBLISH":
                continue
            if r["ev"] == "send":
                published += 1
                t_first = min(t_first, r["t_wall"])
            elif r["ev"] == "recv":
                deliveries[(r["origin"], r["msg_id"])].append(client)
                delays.append(r["t_wall"] - r["t_pub"])
                t_last = max(t_last, r["t_wall"])
    return {"deliveries": dict(deliveries), "delays_s": delays, "published": published,
            "span_s": (t_last - t_first) if t_last > t_first else 0.0, "sent_s": sent_s}


def summarize_logs(out_dir: Path, graph: nx.Graph, workload: Workload, algorithm: str,
                   scale: float, expected: Mapping[MsgKey, frozenset[str]]
                   ) -> dict[str, Any]:
    """summary.json of an emulated run, from the broker and client logs; ``expected``:
    the oracle's deliveries of ``workload`` (computed once for all algorithms of a run).

    Advertisement and subscription delays follow :mod:`nodes.summary`: per client
    operation, the latest over brokers of its first inter-broker ``recv`` (of a message
    type in :data:`~nodes.summary.CARRIES`), minus the client's ``send``. Matching
    delays are the brokers' ``matching_ms`` (on ``recv`` records of notifications).
    """
    names = set(brokers(graph))
    got = client_receipts(out_dir, workload)
    ims: dict[str, int] = defaultdict(int)
    tables: dict[str, list[int]] = defaultdict(list)
    reached_s: dict[OpKey, float] = {}
    matching_s: list[float] = []
    for b in sorted(names):
        seen: set[OpKey] = set()
        for r in iter_jsonl(out_dir / f"{b}.jsonl"):
            if "matching_ms" in r:
                matching_s.append(r["matching_ms"] / 1000.0)
            if r["ev"] == "send" and r.get("link") in names and r.get("type") != "HELLO":
                ims[r["type"]] += 1
            elif r["ev"] == "recv" and r.get("link") in names and r.get("type") in CARRIES:
                key = (CARRIES[r["type"]], r["origin"], r["msg_id"])
                if key not in seen:  # a broker's log is in time order: this is the first
                    seen.add(key)
                    reached_s[key] = max(reached_s.get(key, -math.inf), r["t_wall"])
            elif r["ev"] == "record" and r.get("kind") == "tables":
                for kind in ("srt", "prt"):
                    tables[kind].append(int(r.get(kind, 0)))
    delays = {"notification": got["delays_s"], "matching": matching_s,
              **propagation_delays(got["sent_s"], reached_s)}
    return build_summary(
        algorithm=algorithm, runtime="emulated", scale=scale, published=got["published"],
        expected=expected, deliveries=got["deliveries"],
        ims_by_type=ims, delays_s=delays, table_sizes=tables, duration_s=got["span_s"])


def run_algorithm(emu: Emulation, spec: Spec, workload: Workload, algorithm: str,
                  out_dir: Path, *, log: Any, expected: Mapping[MsgKey, frozenset[str]],
                  link_timeout_s: float = 60.0, capture: CapturePlan | None = None
                  ) -> dict[str, Any]:
    """Run ``workload`` with ``algorithm`` on the live network (``expected``: the
    oracle's deliveries of ``workload``); returns the summary.
    With ``capture``, tcpdump records ``out_dir/pcap/`` from before the brokers start
    until after they stop."""
    emulate = emu.probe["mechanisms"]["delay_loss"] == "in-broker"
    configs = broker_configs(emu.graph, algorithm, dict(algorithm_params(spec, algorithm)),
                             emulate_link=emulate, log_dir=out_dir, seed=spec.seed,
                             write_buffer_bytes=spec.broker.write_buffer_bytes)
    run = BrokerRun(emu, out_dir)
    rates: ScheduledRates | None = None
    with Capture(emu, capture, out_dir / "pcap", log) if capture else contextlib.nullcontext():
        try:
            run.start_brokers(configs)
            up_s = run.wait_links_up(link_timeout_s)
            log(f"{algorithm}: {len(configs)} brokers, every overlay link up in {up_s:.1f} s")
            last_op_s = max((op.t_s for op in workload.ops), default=0.0)
            duration_s = last_op_s + SETTLE_S
            margin_s = start_margin_s(workload)
            t0_wall = time.time() + margin_s
            if spec.link_schedule:
                rates = ScheduledRates(spec.link_schedule, configured_rates(emu.graph),
                                       t0_wall, log)
                rates.start()
            run.start_clients(workload, start_at_wall=t0_wall, duration_s=duration_s)
            log(f"{algorithm}: {len(run.clients)} clients, {len(workload.ops)} operations "
                f"over {duration_s:.1f} s")
            codes = run.wait_clients(margin_s + duration_s + 30.0)
        finally:
            try:
                if rates is not None:
                    rates.stop()
            finally:
                run.stop_brokers()
    failed = {c: code for c, code in sorted(codes.items()) if code != 0}
    if 2 in failed.values():
        raise RuntimeError(f"{algorithm}: clients rejected their configs: {failed} "
                           f"(see {out_dir}/<broker>.clients.stderr)")
    if failed:
        log(f"WARNING {algorithm}: clients lost their broker: {failed}")
    summary = summarize_logs(out_dir, emu.graph, workload, algorithm, spec.scale, expected)
    summary["links_up_s"] = round(up_s, 3)
    summary["client_failures"] = failed
    summary.update(log_extras(out_dir, spec, workload, emu.graph))
    if rates is not None:
        summary["link_schedule"] = rates.applied
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def broker_phase(spec: Spec, workload: Workload, log: Any) -> Any:
    """A runner phase running every algorithm of ``spec`` in turn; the summaries go to
    ``<run>/<algorithm>/summary.json`` and into the manifest, and so does the capture
    (its limit, and per algorithm what was captured, dropped and overwritten)."""

    def phase(emu: Emulation, run_dir: Path, manifest: dict[str, Any]) -> None:
        workload_to_jsonl(workload, run_dir / "workload.jsonl")
        expected = expected_deliveries(workload)
        manifest["workload"] = dict(workload.meta)
        summaries = manifest.setdefault("summaries", {})
        plan = None
        manifest["capture"] = {"enabled": False}
        if spec.capture.enabled:
            plan = plan_capture(spec.capture, brokers(emu.graph), BROKER_PORT)
            manifest["capture"] = {**plan.describe(), "algorithms": {}}
        for algorithm in spec.routing.algorithms:
            out = run_dir / algorithm
            out.mkdir()
            try:
                s = run_algorithm(emu, spec, workload, algorithm, out, log=log,
                                  expected=expected, capture=plan)
            finally:
                if plan:
                    manifest["capture"]["algorithms"][algorithm] = manifest_entry(out / "pcap")
            summaries[algorithm] = s
            log(f"{algorithm}: delivered {s['delivered']} of {s['expected_deliveries']}, "
                f"missing {s['missing']}, duplicates {s['duplicates']}, IMs {s['ims_total']}")
        draw_burst({a: sm.get("burst") for a, sm in summaries.items()}, run_dir)

    return phase
