"""Run an experiment spec on a real Mininet network and leave a run folder.

A run: probe the machine, write the manifest (with the compiled plan), build the
network, check link fidelity (iperf3 on sampled links, idle CPU every second), run the
workload (sampling the CPU-limited hosts' cgroup counters meanwhile: the manifest's
``cpu_limits`` gives, per host of ``broker.cpu``, the configured share and the share
achieved under load, see :class:`~experiments.emulation.network.CpuSampler`), optionally
open the Mininet CLI, and always tear down in ``finally`` (Ctrl-C and SIGTERM included;
one arriving during the teardown does not cut it short, see :mod:`experiments.interrupts`).
The manifest is rewritten at the end with what was measured and how the run ended:
``status`` ``ok``, ``lossy`` (deliveries lost that no fault of the spec explains, see
:mod:`experiments.runs.faults`), ``interrupted`` or ``failed: ...``; if the runner is
killed outright, the next run sets it to ``killed``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.emulation.cluster import (
    TUNNEL_MTU,
    VXLAN_PORT,
    RemoteCpuTimes,
    Servers,
    group_name,
)
from experiments.emulation.controller import ControllerProcess
from experiments.emulation.doctor import probe
from experiments.emulation.fidelity import (
    IdleSampler,
    cpu_times_of,
    iperf_pair,
    process_cpu_text,
    sample_links,
)
from experiments.emulation.network import Emulation
from experiments.emulation.server_checks import check_servers, first_failure
from experiments.interrupts import at_prompt, teardown
from experiments.plan import RunPlan, link_mechanisms
from experiments.progress import log
from experiments.runs.faults import LOSSY, run_faults
from experiments.runs.manifest import base_manifest, code_fingerprint
from experiments.spec import Spec, SpecError
from nodes.runfolder import CONTROLLER_DIR, CPU_IDLE, MANIFEST, new_run_dir, write_manifest

Phase = Callable[[Emulation, Path, dict[str, Any]], None]


def workload_phases(plan: RunPlan) -> tuple[Phase, ...]:
    """The phase that drives ``plan``'s workload on the live network: the bulk rounds or
    the brokers' client operations; none for a plan without a workload (a network check).
    A bulk plan the testbed cannot run is a SpecError."""
    if plan.rounds:
        from experiments.runs.bulk.emulated import bulk_phase

        try:
            return (bulk_phase(plan),)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    if plan.workload is None:
        return ()
    from experiments.runs.emulated import broker_phase

    return (broker_phase(plan),)


def run_experiment(plan: RunPlan, out_base: Path, *, cli: bool = False,
                   phases: tuple[Phase, ...] = (), ssh_config: Path | None = None
                   ) -> tuple[Path, dict[str, Any]]:
    """Run ``plan`` in Mininet; returns the run folder and the final manifest.
    A plan placed on servers is built across them, reached with ``ssh_config``
    (:mod:`experiments.emulation.cluster`).

    ``phases`` run in order on the live network after the fidelity check (the brokers'
    workload, the bulk rounds); each may add its results to the manifest dict it gets.
    """
    spec, graph = plan.spec, plan.graph
    if os.geteuid() != 0:
        raise PermissionError("emulated runs need root: run with sudo")
    found = probe()
    missing = [c for c in found["checks"] if c["required"] and not c["ok"]]
    if missing:
        raise RuntimeError("; ".join(f"{c['name']}: {c['fix'] or c['detail']}" for c in missing))
    if plan.broker.cpu and not found["mechanisms"].get("cpu_limit"):
        check = next(c for c in found["checks"] if c["name"] == "cpu_limit")
        raise RuntimeError(f"broker.cpu: this machine cannot CPU-limit hosts "
                           f"({check['detail']}): {check['fix']}")
    if plan.delay_loss_mechanism != found["mechanisms"]["delay_loss"]:
        # The plan guessed netem from the kernel's module list; the probe tried it.
        plan = replace(plan, delay_loss_mechanism=found["mechanisms"]["delay_loss"])
    servers = Servers(spec.servers, ssh_config) if plan.placement else None
    if servers is not None:  # every server can take its part, or one line and nothing built
        failed = first_failure(check_servers(servers, code_fingerprint(), out_base))
        if failed:
            raise RuntimeError(failed)
    run_dir = new_run_dir(out_base, spec.name)
    mechanisms = link_mechanisms(graph, found["mechanisms"]["delay_loss"] == "netem")
    if plan.placement:
        mark_cross_server(mechanisms, plan.placement)
    manifest: dict[str, Any] = {
        **base_manifest(plan, run_dir, "emulated"), "status": "running",
        "probe": found, "switch": spec.switch,
        "topology": {"nodes": graph.number_of_nodes(), "links": graph.number_of_edges(),
                     "notes": list(graph.graph.get("notes", []))},
        "links": mechanisms,
        **({"servers": plan.servers_describe()} if plan.placement else {}),
    }
    in_broker = sorted({k for row in mechanisms for k, v in row["mechanism"].items()
                        if v == "in-broker"})
    if in_broker:
        log(f"no netem on this kernel: {', '.join(in_broker)} will be emulated in the brokers "
            "(recorded in the manifest)")
    write_manifest(run_dir, manifest)
    log(f"run folder {run_dir}")
    controller = ControllerProcess(run_dir / CONTROLLER_DIR, log=log) if spec.controller else None
    emu = Emulation(graph, switch=spec.switch, probe=found, log=log, controller=controller,
                    cpu_limits=plan.broker.cpu, status_files=[run_dir / MANIFEST],
                    servers=servers, placement=plan.placement)
    t_start = time.monotonic()
    try:
        log(f"building {graph.number_of_nodes()} nodes, {graph.number_of_edges()} links")
        emu.start()
        manifest["timing"] = {"build_s": round(emu.build_s, 2)}
        if controller is not None:
            manifest["controller"] = controller.summary()
            manifest["timing"]["controller_start_s"] = manifest["controller"]["startup_s"]
        log(f"network up in {emu.build_s:.1f} s")
        # Idle CPU is sampled while the network carries traffic, not while it is built;
        # on every server of the run.
        with IdleSampler(path=run_dir / CPU_IDLE, processes=emu.procs) as idle, \
                contextlib.ExitStack() as stack:
            remote_idle = {}
            for s in servers.remote if servers is not None else ():
                there = stack.enter_context(RemoteCpuTimes(servers, s, cpu_times_of,
                                                           group_name(os.getpid(), s)))
                remote_idle[s] = stack.enter_context(IdleSampler(
                    cpu_times=there, group_cpu_s=there.group_cpu_s))
            manifest["fidelity"] = {"links": _check_links(emu, graph, spec)}
            # The CPU-limited hosts' cgroup counters, sampled while the workload runs.
            sampler = emu.cpu_sampler()
            try:
                with sampler:
                    for phase in phases:
                        phase(emu, run_dir, manifest)
            finally:
                manifest["cpu_limits"] = sampler.summary()
                _report_cpu_limits(manifest["cpu_limits"])
            if cli:
                from mininet.cli import CLI

                log("entering the Mininet CLI; type exit to tear down")
                with at_prompt():
                    CLI(emu.net)
        spans = manifest["fidelity"].get("workload_wall") or None  # none: every second
        manifest["fidelity"]["cpu_idle"] = idle.summary(spec.fidelity.min_idle_pct, spans)
        if remote_idle:
            manifest["fidelity"]["cpu_idle"]["servers"] = {
                s: sampler.summary(spec.fidelity.min_idle_pct, spans)
                for s, sampler in remote_idle.items()}
        # Deliveries lost without a declared fault to explain them end the run "lossy".
        manifest["faults"] = run_faults(plan, manifest.get("summaries", {}))
        manifest["status"] = LOSSY if manifest["faults"]["lossy"] else "ok"
    except KeyboardInterrupt:
        manifest["status"] = "interrupted"
        raise
    except BaseException as exc:
        manifest["status"] = f"failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        with teardown():
            t_down = time.monotonic()
            emu.stop()
            timing = manifest.setdefault("timing", {})
            timing["teardown_s"] = round(time.monotonic() - t_down, 2)
            timing["total_s"] = round(time.monotonic() - t_start, 2)
            manifest["finished"] = datetime.now().isoformat()
            write_manifest(run_dir, manifest)
            log(f"torn down; manifest {run_dir / MANIFEST} ({manifest['status']})")
    _report_fidelity(manifest["fidelity"], spec)
    return run_dir, manifest


def mark_cross_server(mechanisms: list[dict[str, Any]], placement: Mapping[str, str]) -> None:
    """Add to each link's row the servers of its ends, whether it crosses servers and,
    where it does, what carries it there (the tunnel; the rate stays HTB's on its ends)."""
    for row in mechanisms:
        ends = {row["a"]: placement[row["a"]], row["b"]: placement[row["b"]]}
        row["servers"] = ends
        row["crosses_servers"] = len(set(ends.values())) > 1
        if row["crosses_servers"]:
            row["mechanism"] = {**row["mechanism"],
                                "tunnel": f"vxlan udp/{VXLAN_PORT}, mtu {TUNNEL_MTU}"}


def _check_links(emu: Emulation, graph: nx.Graph, spec: Spec) -> list[dict[str, Any]]:
    results = []
    for a, b in sample_links(graph, spec.fidelity.links, spec.seed):
        r = iperf_pair(emu.net, graph, a, b, spec.fidelity.iperf_s)
        log(f"fidelity {a}->{b}: {r['achieved_mbps']} Mbit/s of {r['configured_mbps']}")
        results.append(r)
    return results


def _report_cpu_limits(limits: dict[str, dict[str, Any]]) -> None:
    for host, row in limits.items():
        if "error" in row:
            log(f"CPU limit {host}: not measured ({row['error']})")
        else:
            log(f"CPU limit {host}: configured {row['configured']:g} core, achieved at most "
                f"{row['achieved_max']} (mean {row['achieved_mean']}, throttled in "
                f"{row['throttled_periods']} of {row['periods']} periods)")


def _report_fidelity(fidelity: dict[str, Any], spec: Spec) -> None:
    for r in fidelity["links"]:
        if not r["within_10pct"]:
            log(f"FIDELITY WARNING: {r['a']}->{r['b']} achieved {r['achieved_mbps']} Mbit/s "
                f"of {r['configured_mbps']} configured")
    idle = fidelity["cpu_idle"]
    outside = idle.get("outside_workload")
    of = " of the workloads" if outside is not None else ""
    if not idle["ok"]:
        log(f"FIDELITY WARNING: CPU idle fell below {spec.fidelity.min_idle_pct} % in "
            f"{idle['seconds_below']} of {len(idle['per_second_pct'])} s{of} (min "
            f"{idle['min_pct']} %): emulated timing in this run is not trustworthy")
    if outside is not None and outside["seconds_below"]:
        log(f"CPU idle outside the workloads (the link check, processes starting and "
            f"stopping; no message is timed then, not judged): below "
            f"{spec.fidelity.min_idle_pct} % in {outside['seconds_below']} of "
            f"{len(outside['per_second_pct'])} s (min {outside['min_pct']} %)")
    for server, there in idle.get("servers", {}).items():
        if not there["ok"]:
            log(f"FIDELITY WARNING: on server {server}, CPU idle fell below "
                f"{spec.fidelity.min_idle_pct} % in {there['seconds_below']} of "
                f"{len(there['per_second_pct'])} s (min {there['min_pct']} %)")
    if "by_process" in idle:
        log(f"CPU of the run's own processes, {process_cpu_text(idle['by_process'])}")
    for server, there in idle.get("servers", {}).items():
        if "run_group" in there:
            log(f"CPU of the run's processes on server {server}: mean cores "
                f"{there['run_group']['cores']:.2f} ({there['run_group']['cpu_s']:g} s)")
