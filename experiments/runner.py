"""Run an experiment spec on a real Mininet network and leave a run folder.

A run: probe the machine, build the topology graph, write the manifest, build the
network, check link fidelity (iperf3 on sampled links, idle CPU every second), run the
workload, optionally open the Mininet CLI, and always tear down in ``finally`` (Ctrl-C
and SIGTERM included). The manifest is rewritten at the end with what was measured and
how the run ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.controller_proc import ControllerProcess
from experiments.doctor import probe
from experiments.fidelity import IdleSampler, iperf_pair, sample_links
from experiments.network import Emulation, link_mechanisms
from experiments.spec import Spec, SpecError
from topologies.graph import overlay_of
from topologies.registry import build_graph

REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    """Progress goes to standard error, so --json output stays clean."""
    print(f"[pubsublab] {msg}", file=sys.stderr, flush=True)


def git_revision() -> dict[str, Any]:
    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                             check=False)
        return res.stdout.strip() if res.returncode == 0 else ""
    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def spec_graph(spec: Spec) -> nx.Graph:
    """The topology graph of a spec with its link overrides applied (SpecError if bad)."""
    try:
        g = build_graph(spec.topology.name, spec.topology.params, spec.links)
    except ValueError as exc:
        raise SpecError(f"topology: {exc}") from None
    for a, b, params in spec.link_overrides:
        if not g.has_edge(a, b):
            raise SpecError(f"link_overrides: no link between {a!r} and {b!r} in "
                            f"topology {spec.topology.name!r}")
        g.edges[a, b]["params"] = params
    overlay = overlay_of(g)
    for c in spec.link_schedule:
        if not overlay.has_edge(c.a, c.b):
            raise SpecError(f"link_schedule: no overlay link between {c.a!r} and {c.b!r} in "
                            f"topology {spec.topology.name!r}")
        if not g.has_edge(c.a, c.b):  # brokers that meet through a switch share its links
            raise SpecError(f"link_schedule: {c.a}-{c.b} is not a link of its own; changing "
                            "one overlay link's rate needs an overlay-as-links topology "
                            "(topology.params.mode: overlay)")
    return g


def new_run_dir(base: Path, name: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = base.resolve()  # configs handed to processes on hosts carry absolute paths
    run_dir = base / f"{stamp}-{name}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{name}-{n}"
    run_dir.mkdir(parents=True)
    return run_dir


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


Phase = Callable[[Emulation, Path, dict[str, Any]], None]


def run_experiment(spec: Spec, out_base: Path, *, cli: bool = False,
                   phases: tuple[Phase, ...] = ()) -> tuple[Path, dict[str, Any]]:
    """Run ``spec`` in Mininet; returns the run folder and the final manifest.

    ``phases`` run in order on the live network after the fidelity check (the broker
    workload of later issues); each may add its results to the manifest dict it gets.
    """
    graph = spec_graph(spec)
    if os.geteuid() != 0:
        raise PermissionError("emulated runs need root: run with sudo")
    found = probe()
    missing = [c for c in found["checks"] if c["required"] and not c["ok"]]
    if missing:
        raise RuntimeError("; ".join(f"{c['name']}: {c['fix'] or c['detail']}" for c in missing))
    run_dir = new_run_dir(out_base, spec.name)
    mechanisms = link_mechanisms(graph, found)
    manifest: dict[str, Any] = {
        "run": run_dir.name, "status": "running", "started": datetime.now().isoformat(),
        "spec": spec.to_dict(), "seed": spec.seed, "scale": spec.scale,
        "git": git_revision(), "probe": found, "switch": spec.switch,
        "topology": {"nodes": graph.number_of_nodes(), "links": graph.number_of_edges(),
                     "notes": list(graph.graph.get("notes", []))},
        "links": mechanisms,
    }
    in_broker = sorted({k for row in mechanisms for k, v in row["mechanism"].items()
                        if v == "in-broker"})
    if in_broker:
        log(f"no netem on this kernel: {', '.join(in_broker)} will be emulated in the brokers "
            "(recorded in the manifest)")
    write_json(run_dir / "manifest.json", manifest)
    log(f"run folder {run_dir}")
    controller = ControllerProcess(run_dir / "controller", log=log) if spec.controller else None
    emu = Emulation(graph, switch=spec.switch, probe=found, log=log, controller=controller)
    t_start = time.monotonic()
    try:
        log(f"building {graph.number_of_nodes()} nodes, {graph.number_of_edges()} links")
        emu.start()
        manifest["timing"] = {"build_s": round(emu.build_s, 2)}
        if controller is not None:
            manifest["controller"] = controller.summary()
            manifest["timing"]["controller_start_s"] = manifest["controller"]["startup_s"]
        log(f"network up in {emu.build_s:.1f} s")
        # Idle CPU is sampled while the network carries traffic, not while it is built.
        with IdleSampler() as idle:
            manifest["fidelity"] = {"links": _check_links(emu, graph, spec)}
            for phase in phases:
                phase(emu, run_dir, manifest)
            if cli:
                from mininet.cli import CLI

                log("entering the Mininet CLI; type exit to tear down")
                CLI(emu.net)
        manifest["fidelity"]["cpu_idle"] = idle.summary(spec.fidelity.min_idle_pct)
        manifest["status"] = "ok"
    except KeyboardInterrupt:
        manifest["status"] = "interrupted"
        raise
    except BaseException as exc:
        manifest["status"] = f"failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        t_down = time.monotonic()
        emu.stop()
        manifest.setdefault("timing", {})["teardown_s"] = round(time.monotonic() - t_down, 2)
        manifest["timing"]["total_s"] = round(time.monotonic() - t_start, 2)
        manifest["finished"] = datetime.now().isoformat()
        write_json(run_dir / "manifest.json", manifest)
        log(f"torn down; manifest {run_dir / 'manifest.json'} ({manifest['status']})")
    _report_fidelity(manifest["fidelity"], spec)
    return run_dir, manifest


def _check_links(emu: Emulation, graph: nx.Graph, spec: Spec) -> list[dict[str, Any]]:
    results = []
    for a, b in sample_links(graph, spec.fidelity.links, spec.seed):
        r = iperf_pair(emu.net, graph, a, b, spec.fidelity.iperf_s)
        log(f"fidelity {a}->{b}: {r['achieved_mbps']} Mbit/s of {r['configured_mbps']}")
        results.append(r)
    return results


def _report_fidelity(fidelity: dict[str, Any], spec: Spec) -> None:
    for r in fidelity["links"]:
        if not r["within_10pct"]:
            log(f"FIDELITY WARNING: {r['a']}->{r['b']} achieved {r['achieved_mbps']} Mbit/s "
                f"of {r['configured_mbps']} configured")
    idle = fidelity["cpu_idle"]
    if not idle["ok"]:
        log(f"FIDELITY WARNING: CPU idle fell below {spec.fidelity.min_idle_pct} % in "
            f"{idle['seconds_below']} of {len(idle['per_second_pct'])} s (min "
            f"{idle['min_pct']} %): emulated timing in this run is not trustworthy")
