"""The processes of an emulated run on a live Mininet network: broker configs from the run
plan, and :class:`BrokerRun`, which starts brokers and client groups on their hosts, waits
for overlay links and clients, and stops them.

Each :class:`BrokerRun` draws its own secret (:mod:`nodes.emulated.auth`), which every HELLO of its
brokers and clients must prove, and puts it in every config it writes. The config files
(``config/<name>.json`` in the algorithm's folder) are the one place it is stored, mode
0600: the processes read it there, as they read the rest. Nothing else gets it (logs,
status files, the manifest, summaries). A copy of the run folder made later holds it,
but authenticates nothing: the processes that took it are gone, and the next
``BrokerRun`` (the next algorithm of the same run too) draws another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.emulation.network import Emulation
from experiments.plan import RunPlan, pair_figures
from experiments.progress import log
from nodes.emulated.admission import BODY_TIMEOUT_S, HELLO_TIMEOUT_S
from nodes.emulated.auth import new_secret
from nodes.emulated.broker import CONNECT_TIMEOUT_S, LINK_TIMEOUT_S, read_status, wait_until_ready
from nodes.emulated.client import read_group_status
from nodes.emulated.runtime import BROKER_PORT, DEFAULT_BUFFER_BYTES
from nodes.messages import MsgType, message_to_json
from nodes.runfolder import (
    CONFIG_DIR,
    config_path,
    ops_path,
    status_path,
    stderr_path,
    write_config,
    write_json,
)
from nodes.workloads.ops import Workload
from topologies.graph import endpoint_ip

START_MARGIN_S = 2.0  # clients' t_s = 0 lies at least this far after they are started
# A broker process spends its first 0.1-0.25 s of CPU loading the interpreter and its
# imports. Nine started at once on the 2-core machines held the CPU under 15 % idle for
# the second they took, in every algorithm of the demo: below Mininet-HiFi's 35 %, for
# work that is not the experiment. So at most half the cores start brokers at once.
STARTING_BROKERS_MAX = max(1, (os.cpu_count() or 1) // 2)
STARTING_WAIT_S = 10.0  # a broker silent this long no longer holds the next one back
# ... plus this much per client process: one costs about 80 ms of CPU to start (measured
# on the 2-core machines), and 70 of them start while 70 brokers run; a client that
# starts late sends its subscriptions late, possibly after the publications.
CLIENT_PROCESS_START_S = 0.1


def start_margin_s(workload: Workload) -> float:
    """How long before the schedule's t_s = 0 the clients of ``workload`` are started:
    :data:`START_MARGIN_S`, plus :data:`CLIENT_PROCESS_START_S` per process (one per
    broker host with clients, see :meth:`BrokerRun.start_clients`)."""
    return START_MARGIN_S + CLIENT_PROCESS_START_S * len(set(workload.clients.values()))


def dormant_brokers(plan: RunPlan) -> frozenset[str]:
    """The brokers that start dormant: with links on demand, those whose node has a JOIN
    operation in the workload (see :mod:`nodes.emulated.broker`)."""
    if plan.links != "on-demand" or plan.workload is None:
        return frozenset()
    return frozenset(op.broker for op in plan.workload.ops if op.msg.type is MsgType.JOIN)


def cpu_timeouts(share: float) -> dict[str, float]:
    """A broker's dial, keepalive, HELLO and frame-body timeouts (s) when it or a neighbour
    runs on ``share`` of a core (``broker.cpu``): the defaults over the share (a slow
    broker reads a HELLO or a large body as slowly as it does the rest). The timeouts bound how long
    a peer may take to answer; a broker at a share f does everything 1/f times as slowly
    and stalls for whole CFS periods (143 ms at 0.007), so at the defaults OctopiA's
    overwhelmed i1 (0.007 core) was declared dead by its neighbours after 5 s of
    silence, could not finish a HELLO in 3 s, and lost the notifications queued on the
    dropped links, where the simulator's slow broker only delays them."""
    return {key: round(default_s / share, 3) for key, default_s in
            (("connect_timeout_s", CONNECT_TIMEOUT_S), ("link_timeout_s", LINK_TIMEOUT_S),
             ("hello_timeout_s", HELLO_TIMEOUT_S), ("body_timeout_s", BODY_TIMEOUT_S))}


def broker_configs(plan: RunPlan, algorithm: str, *, emulate_link: bool, log_dir: Path
                   ) -> dict[str, dict[str, Any]]:
    """One broker config (see :mod:`nodes.emulated.broker`) per broker of the plan: each overlay
    neighbour with the address to dial and the edge's delay and loss from the plan (which
    the broker applies itself when ``emulate_link``, where the kernel has no netem), and a
    bulk workload's per-stream cap (``stream_mbps``) as each link's ``rate_mbps``, which
    the broker always applies itself (pacing, :mod:`nodes.emulated.overlay_link`). A CPU-limited
    broker and its neighbours get timeouts stretched to the smallest share among them
    (:func:`cpu_timeouts`).

    With links on demand (``plan.links``) a broker has no fixed neighbours (on a modelled
    underlay, ``transit-stub``, it keeps the overlay's edges, the servers' latency MST that
    Siena's core needs as its neighbours, as the simulator does) but every other broker
    as a peer, with the figures of the path between them
    (:func:`experiments.plan.pair_figures`), and is ``dormant`` if its node joins later
    (:func:`dormant_brokers`)."""
    alg = plan.algorithm(algorithm)
    on_demand = plan.links == "on-demand"
    # A modelled underlay (transit-stub) is on no emulated link: its pairs' latency is
    # added in the broker, netem or not.
    underlay = "latency_ms" in plan.graph.graph
    emulate_link = emulate_link or underlay
    dormant = dormant_brokers(plan)
    # A bulk workload's per-stream cap: every agent-to-agent link paced to it in the broker.
    stream_mbps = plan.bulk.stream_mbps if plan.bulk is not None else None
    cpu = plan.broker.cpu
    configs = {}
    for b in plan.overlay.nodes:
        neighbours = {}
        for n in [] if on_demand and not underlay else sorted(plan.overlay.neighbors(b)):
            edge = plan.overlay.edges[b, n]
            neighbours[n] = {"addr": [endpoint_ip(plan.graph, b, n), BROKER_PORT],
                             "delay_ms": edge["delay_ms"], "loss_pct": edge["loss_pct"]}
            if stream_mbps is not None:
                neighbours[n]["rate_mbps"] = stream_mbps
        configs[b] = {
            "broker": b, "listen": ["0.0.0.0", BROKER_PORT], "neighbours": neighbours,
            "core": {"name": algorithm, "params": alg.broker_params(b)},
            "log_dir": str(log_dir), "emulate_link": emulate_link, "seed": plan.spec.seed,
            "window_ms": plan.window_ms, **socket_buffers(plan),
        }
        share = min([cpu.get(x, 1.0) for x in (b, *neighbours)])
        if share < 1.0:
            configs[b].update(cpu_timeouts(share))
        if on_demand:
            peers = {}
            for p in plan.overlay.nodes:
                if p != b:
                    _, delay_ms, loss_pct = pair_figures(plan.graph, b, p)
                    peers[p] = {"addr": [endpoint_ip(plan.graph, b, p), BROKER_PORT],
                                "delay_ms": delay_ms, "loss_pct": loss_pct}
            configs[b].update(peers=peers, dormant=b in dormant)
    return configs


def socket_buffers(plan: RunPlan) -> dict[str, int | None]:
    """The broker and client configs' kernel buffer sizes for the plan's ``broker``
    settings: its bytes; null (the kernel's own) for ``kernel``; for None the default,
    except in bulk rounds, which keep the kernel's: they time a volume of data at link
    rate, not a notification's wait, and a bounded window would cap a gigabit link at a
    round trip of netem's delays (256 KiB per 10 ms is 210 Mbit/s)."""
    default = None if plan.rounds else DEFAULT_BUFFER_BYTES

    def size(v: int | str | None) -> int | None:
        return default if v is None else None if v == "kernel" else int(v)
    return {"write_buffer_bytes": size(plan.broker.write_buffer_bytes),
            "read_buffer_bytes": size(plan.broker.read_buffer_bytes)}


class BrokerRun:
    """The processes of one algorithm's run on a live :class:`Emulation`; every client
    connection gets ``buffers`` (:func:`socket_buffers`; None: the kernel's own)."""

    def __init__(self, emu: Emulation, out_dir: Path,
                 buffers: Mapping[str, int | None] | None = None) -> None:
        self.buffers = dict(buffers or {})
        self.emu = emu
        self.out_dir = out_dir
        self.config_dir = out_dir / CONFIG_DIR
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.secret = new_secret()  # put in every config _start writes; see the module doc
        self.brokers: dict[str, Any] = {}
        # Client name -> its process; the clients of a group share one.
        self.clients: dict[str, Any] = {}
        self._group_status: dict[str, Path] = {}  # grouped client -> its group's status file

    def _start(self, host: str, module: str, name: str, config: dict[str, Any]) -> Any:
        path = config_path(self.out_dir, name)
        write_config(path, config)
        err = open(stderr_path(self.out_dir, name), "wb")  # noqa: SIM115 - child owns it
        try:
            # broker.cpu limits the broker, as the simulator's processing model does
            # (clients' operations cost no broker time there): a client process on a
            # CPU-limited host runs outside the limit, or at OctopiA's 0.007 core the
            # HRP client alone would take a quarter of its broker's share.
            return self.emu.popen(host, [sys.executable, "-m", module, "--config", str(path)],
                                  cpu_limited=module != "nodes.emulated.client", stdout=err,
                                  stderr=err)
        finally:
            err.close()

    def start_brokers(self, configs: dict[str, dict[str, Any]]) -> None:
        """Start one broker process per config, no more than :data:`STARTING_BROKERS_MAX`
        still starting at a time (alive without a status file: loading its imports)."""
        started: dict[str, float] = {}  # broker -> when its process was started (monotonic)
        for b, cfg in configs.items():
            while sum(1 for s, t in started.items()
                      if time.monotonic() - t < STARTING_WAIT_S
                      and self.brokers[s].poll() is None
                      and self.status(s) is None) >= STARTING_BROKERS_MAX:
                time.sleep(0.01)  # one that hangs is wait_links_up's to report
            started[b] = time.monotonic()
            self.brokers[b] = self._start(b, "nodes.emulated.broker", b,
                                          {**cfg, "secret": self.secret})

    def kill(self, broker: str) -> float:
        """SIGKILL ``broker``'s process (a crash: no shutdown, no last records); the
        monotonic time it was sent. Its clients see the connection end and exit."""
        proc = self.brokers[broker]
        proc.send_signal(signal.SIGKILL)  # on its server, if it runs on another
        return time.monotonic()

    def status(self, broker: str) -> dict[str, Any] | None:
        return read_status(self.out_dir, broker)

    def record_exit(self, broker: str, returncode: int) -> None:
        """Write ``broker``'s last status for it: its process ended without writing one
        (killed; the file still says ``running``). ``state`` becomes ``exited``, with the
        ``returncode`` (negative: the signal that killed it) and when the runner noticed."""
        status = self.status(broker) or {"node": broker}
        if status.get("state") in ("stopped", "failed"):
            return  # it wrote its own last status
        write_json(status_path(self.out_dir, broker),
                   {**status, "state": "exited", "returncode": returncode,
                    "t_wall": time.time()})

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
        broker's clients (see :meth:`start_client_group`), each with its own ops file
        (without CRASH operations: the runner carries them out, :meth:`kill`)."""
        ops_by_client: dict[str, list[str]] = defaultdict(list)
        for op in workload.ops:
            if op.msg.type is MsgType.CRASH:
                continue  # the runner kills the broker at that time (a crash sends nothing)
            ops_by_client[op.client].append(json.dumps(
                {"t_s": op.t_s, **message_to_json(op.msg)}, sort_keys=True))
        by_broker: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for client, broker in sorted(workload.clients.items()):
            path = ops_path(self.out_dir, client)
            path.write_text("\n".join(ops_by_client[client]) + "\n")
            by_broker[broker].append({"client": client, "ops": str(path)})
        for broker, clients in sorted(by_broker.items()):
            self.start_client_group(broker, clients, {"start_at_wall": start_at_wall,
                                                      "duration_s": duration_s})

    def _client_config(self, broker: str) -> dict[str, Any]:
        """What every client on ``broker``'s host has in its config: its broker, over the
        host's loopback, the log folder and the run's secret."""
        share = getattr(self.emu, "cpu_limits", {}).get(broker)
        return {"broker": broker, "broker_addr": ["127.0.0.1", BROKER_PORT],
                "log_dir": str(self.out_dir), "secret": self.secret, **self.buffers,
                # a slow broker answers a client's HELLO as slowly as a neighbour's
                **({"connect_timeout_s": cpu_timeouts(share)["connect_timeout_s"]}
                   if share is not None else {})}

    def start_client(self, client: str, broker: str, settings: dict[str, Any]) -> None:
        """Start ``client`` on ``broker``'s host, connected to it over the host's loopback;
        ``settings`` complete its config (ops or a role, timing; see
        :mod:`nodes.emulated.client`)."""
        self.clients[client] = self._start(broker, "nodes.emulated.client", client, {
            "client": client, **self._client_config(broker), **settings})

    def start_client_group(self, broker: str, clients: list[dict[str, Any]],
                           settings: dict[str, Any]) -> None:
        """Start one process on ``broker``'s host for ``clients`` (each a client config's
        own part: ``client``, and ops or a role), all connected to ``broker`` over the
        host's loopback; ``settings`` are common to them (timing). Its config, standard
        error and status file are ``<broker>.clients.*``."""
        name = f"{broker}.clients"
        status = status_path(self.out_dir, name)
        proc = self._start(broker, "nodes.emulated.client", name, {
            "clients": clients, "common": {**self._client_config(broker), **settings},
            "status_file": str(status)})
        for entry in clients:
            self.clients[entry["client"]] = proc
            self._group_status[entry["client"]] = status

    def wait_clients(self, timeout_s: float) -> dict[str, int]:
        """Each client's exit status (see :mod:`nodes.emulated.client`: 1 lost or never reached its
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

    def stop_brokers(self, timeout_s: float = 15.0) -> dict[str, int]:
        """Stop every broker (SIGTERM, then SIGKILL for one that has not exited within
        ``timeout_s``); their exit codes. Never raises for a hung broker: this runs in
        ``finally`` blocks, where an exception would mask the one being handled."""
        for p in self.brokers.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout_s
        codes = {}
        for b, p in self.brokers.items():
            try:
                codes[b] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"WARNING broker {b} did not stop within {timeout_s:g} s: killed")
                p.kill()
                codes[b] = p.wait()
        return codes


