"""The run plan: a spec compiled once into what every runner runs.

:func:`compile_plan` turns a validated :class:`~experiments.spec.Spec` into a frozen
:class:`RunPlan` or one :class:`~experiments.spec.SpecError` line, before anything starts
(no root, no Mininet, no process). The emulated runner, the simulator and the bulk rounds
consume the plan, never the raw spec, so they cannot disagree on:

- **the overlay and its per-edge figures**: each overlay edge is the path between its two
  brokers in the topology graph; its one-way delay (ms) is the sum of the path's link
  delays, its loss compounds theirs (1 - prod(1 - p)), its rate (Mbit/s) is the slowest
  shaped link's (``None``: unshaped); in switch mode a broker's access link is also its
  NIC (``nic_mbps``). The simulator uses exactly these figures;
- **each algorithm's params** (:func:`algorithm_params`), checked against the core's
  declaration (:mod:`nodes.cores.params`), defaults filled in, merged with what the core
  derives from the overlay (a core that cannot run on this overlay is refused here);
- the statistics window, the workload (built and placed once, with its oracle input), the
  link schedule, the capture, the broker settings, the simulator's processing model
  (:func:`processing_model`) and the duration.

Each workload kind's keys, defaults, checks and builder are its entry of
:data:`nodes.workloads.kinds.WORKLOADS`; the plan asks that entry and never branches on a
kind's name. ``kind: bulk`` is compiled here into a :class:`~nodes.workloads.bulk.BulkPlan`
(:func:`bulk_plan`, run by :mod:`experiments.runs.bulk`); ``kind: codd`` and ``kind:
meghdoot`` need ``routing.links: on-demand``; cores that derive their routing from the run
(``kyra``, ``multicast``) get it from :func:`run_derived` once the workload is built.

Links (``RunPlan.links``): ``fixed`` (the default: each broker's overlay edges, dialled at
start) or ``on-demand`` (every broker may reach every other, each pair's figures those of
the path between them, :func:`pair_figures`; a broker with a JOIN op starts dormant; a
switch-mode topology only). ``duration_s`` (seconds) bounds a stock workload's phase;
without it the phase lasts until the last operation plus :data:`SETTLE_S`. A bulk spec
with ``duration_s``, ``link_schedule`` or an explicit ``capture.enabled: true`` is refused.

The plan's decisions in full, with the ``workload`` section's keys:
docs/design/run-plan.md.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from experiments.emulation.capture import plan_capture
from experiments.runs.resources import physical_memory_bytes
from experiments.spec import BrokerSpec, CaptureSpec, LinkChange, Spec, SpecError
from nodes.cores import CORES, core_info, resolve_params
from nodes.cores.params import ParamValueError, is_integer, short_repr
from nodes.emulated.runtime import BROKER_PORT
from nodes.sim.processing import DEFAULT_BUFFER_MSGS, Processing, ServiceTime, calibrated_service
from nodes.workloads.bulk import GIB, BulkPlan
from nodes.workloads.interests import publication_attrs, subscriptions_by_broker
from nodes.workloads.kinds import WORKLOADS, RunContext, WorkloadKind, check_types, workload_size
from nodes.workloads.ops import Workload
from topologies.graph import brokers, overlay_of, path_links
from topologies.links import LinkParams
from topologies.placement import cross_server_links, place_on_servers
from topologies.registry import build_graph

SETTLE_S = 2.0  # a stock phase lasts until its last operation plus this (no duration_s)
# The longest workload a spec may ask for (s): no experiment here runs for a week (a whole
# reproduction takes hours), so a later operation means a mistyped rate or gap.
MAX_WORKLOAD_S = 7 * 24 * 3600.0



@dataclass(frozen=True)
class OverlayEdge:
    """One overlay edge as both runtimes carry it (see the module docstring): ``links``
    are the emulated links on its path; ``mechanism`` says, per configured figure, what
    carries it on this machine (``htb``, ``netem``, ``in-broker``)."""

    a: str
    b: str
    kind: str
    bw_mbps: float | None
    delay_ms: float
    loss_pct: float
    links: tuple[tuple[str, str], ...]
    mechanism: Mapping[str, str]

    def describe(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "type": self.kind, "bw_mbps": self.bw_mbps,
                "delay_ms": self.delay_ms, "loss_pct": self.loss_pct,
                "links": ["-".join(link) for link in self.links],
                "mechanism": dict(self.mechanism)}


@dataclass(frozen=True)
class AlgorithmPlan:
    """One algorithm of the run: its declared params (defaults filled in) and, per broker,
    what its core derives from the overlay."""

    name: str
    params: Mapping[str, Any]
    derived: Mapping[str, Mapping[str, Any]]

    def broker_params(self, broker: str) -> dict[str, Any]:
        """The params ``broker``'s core gets: derived and declared keys never overlap."""
        return {**self.derived.get(broker, {}), **self.params}


@dataclass(frozen=True)
class RunPlan:
    """A compiled spec (see the module docstring). ``graph`` is the topology graph with the
    spec's link overrides; ``overlay`` the broker overlay carrying each edge's figures
    (``bw_mbps``, ``delay_ms``, ``loss_pct``) and, in switch mode, each broker's
    ``nic_mbps``; both are frozen. ``workload`` is the built stock workload (``None`` for
    bulk and for a network-only spec), ``bulk`` the resolved bulk workload."""

    spec: Spec
    graph: nx.Graph
    overlay: nx.Graph
    edges: tuple[OverlayEdge, ...]
    algorithms: tuple[AlgorithmPlan, ...]
    window_ms: float
    workload_kind: str | None
    workload_params: Mapping[str, Any]
    workload: Workload | None
    bulk: BulkPlan | None
    link_schedule: tuple[LinkChange, ...]
    capture: CaptureSpec
    broker: BrokerSpec
    duration_s: float | None
    delay_loss_mechanism: str
    notes: tuple[str, ...] = field(default=())
    links: str = "fixed"  # or "on-demand" (see the module docstring)
    processing: Processing | None = None  # the simulator's processing model
    # Node -> server when the spec spreads the network over servers (placement_of); {}: here.
    placement: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> WorkloadKind | None:
        """The workload's kind (:data:`nodes.workloads.kinds.WORKLOADS`); None without one."""
        return WORKLOADS[self.workload_kind] if self.workload_kind is not None else None

    @property
    def rounds(self) -> bool:
        """Whether the workload is bulk data in rounds (:mod:`experiments.runs.bulk`), not
        client operations through the cores."""
        return self.kind is not None and self.kind.build is None

    def algorithm(self, name: str) -> AlgorithmPlan:
        return next(a for a in self.algorithms if a.name == name)

    def edge(self, a: str, b: str) -> OverlayEdge:
        """The overlay edge between brokers ``a`` and ``b`` (either order)."""
        for e in self.edges:
            if {e.a, e.b} == {a, b}:
                return e
        raise KeyError(f"no overlay edge {a}-{b}")

    def phase_s(self) -> float:
        """How long the stock workload's phase lasts on its clock (see the module doc)."""
        if self.duration_s is not None:
            return self.duration_s
        last = max((op.t_s for op in self.workload.ops), default=0.0) if self.workload else 0.0
        return last + SETTLE_S + self.repair_s()

    def repair_s(self) -> float:
        """Room after the last operation for CoDD's failure repairs (0 without its
        heartbeats): the kind's ``repairs`` of them one after another, each given up after at
        most two detection times, ``(failure_periods + 1) * heartbeat_s``."""
        repairs = self.kind.repairs if self.kind is not None else 0
        if not repairs:
            return 0.0
        return max((repairs * 2 * (a.params.get("failure_periods", 0) + 1)
                    * a.params.get("heartbeat_s", 0.0) for a in self.algorithms), default=0.0)

    def describe(self) -> dict[str, Any]:
        """The plan as plain data: ``pubsublab plan --json`` and every run's manifest."""
        w = self.workload
        return {
            "spec": self.spec.name, "seed": self.spec.seed, "scale": self.spec.scale,
            "topology": {"name": self.spec.topology.name,
                         "params": dict(self.spec.topology.params),
                         "mode": self.graph.graph.get("mode"),
                         "nodes": self.graph.number_of_nodes(),
                         "links": self.graph.number_of_edges()},
            "overlay": {"brokers": self.overlay.number_of_nodes(),
                        "edges": [e.describe() for e in self.edges],
                        "nic_mbps": {b: n for b, n in self.overlay.nodes(data="nic_mbps")
                                     if n is not None}},
            "delay_loss_mechanism": self.delay_loss_mechanism,
            "algorithms": {a.name: {"params": dict(a.params),
                                    "declared": [p.describe() for p in
                                                 CORES[a.name].params],
                                    "derived_keys": sorted({k for d in a.derived.values()
                                                            for k in d})}
                           for a in self.algorithms},
            "window_ms": self.window_ms,
            "workload": {"kind": self.workload_kind, "params": dict(self.workload_params),
                         **({"clients": len(w.clients), "ops": len(w.ops),
                             "meta": dict(w.meta)} if w is not None else {}),
                         **({"bulk": self.bulk.describe()} if self.bulk else {})},
            "phase_s": self.phase_s() if self.workload is not None else None,
            "link_schedule": [vars(c).copy() for c in self.link_schedule],
            "capture": vars(self.capture).copy(),
            "broker": {**vars(self.broker), "cpu": dict(self.broker.cpu)},
            "duration_s": self.duration_s,
            "notes": list(self.notes),
            "links": self.links,
            "processing": None if self.processing is None else {
                "base_us": self.processing.service.base_us,
                "per_match_us": self.processing.service.per_match_us,
                "buffer_msgs": self.processing.buffer_msgs,
                "per_broker": {b: vars(t).copy()
                               for b, t in self.processing.per_broker.items()},
                "cpu_share": dict(self.processing.cpu_share)},
            **({"servers": self.servers_describe()} if self.placement else {}),
        }

    def servers_describe(self) -> dict[str, Any]:
        """The placement on servers: per server its nodes and their estimated demand
        (:func:`broker_demand`), and the links that cross servers."""
        demand = broker_demand(self.workload)
        per: dict[str, dict[str, Any]] = {s: {"nodes": [], "demand_ops": 0}
                                          for s in self.spec.servers}
        for node, server in sorted(self.placement.items()):
            per[server]["nodes"].append(node)
            per[server]["demand_ops"] += demand.get(node, 0)
        return {"placement": per,
                "cross_server_links": [list(e) for e in
                                       cross_server_links(self.graph, self.placement)]}


# What one emulated broker host costs: the broker and its client group are Python
# processes of about 25 MB each at rest (measured), plus queues, logs and a tcpdump.
HOST_MB = 60
BROKERS_PER_CORE = 64  # 70 brokers on 2 cores keep Mininet-HiFi's idle-CPU criterion


def emulation_fits(plan: RunPlan, cores: int, mem_mb: float) -> str | None:
    """Why this machine cannot emulate the plan's overlay (None if it can): more brokers
    than :data:`BROKERS_PER_CORE` per core, or more memory than half of ``mem_mb``."""
    n = plan.overlay.number_of_nodes()
    if n > BROKERS_PER_CORE * cores:
        return (f"{n} brokers on {cores} cores; allowed: at most {BROKERS_PER_CORE * cores} "
                f"({BROKERS_PER_CORE} per core)")
    if n * HOST_MB > mem_mb / 2:
        return (f"{n} brokers need about {n * HOST_MB} MB; allowed: half of this machine's "
                f"{mem_mb:.0f} MB")
    return None


def workload_fits(kind: WorkloadKind, p: Mapping[str, Any], run: RunContext,
                  mem_mb: float) -> str | None:
    """Why this machine cannot hold the workload about to be built (None if it can): its
    estimated operations (:func:`nodes.workloads.kinds.workload_size`) need more than
    half of ``mem_mb``, the same budget as :func:`emulation_fits`'s."""
    key, ops, size = workload_size(kind, p, run)
    if key is None or size <= mem_mb / 2 * 2**20:
        return None
    if key == "topology":
        name = f"topology {run.topology!r} ({len(brokers(run.graph))} brokers)"
    else:
        value: Any = p
        for part in key.split("."):
            value = value[part]
        name = f"workload.{key}={value}"
    return (f"{name} would build about {ops:.2g} operations (~{_bytes(size)}); this "
            f"machine holds about {_bytes(mem_mb / 2 * 2**20)} (half of its memory)")


def _bytes(n: float) -> str:
    """``n`` bytes in decimal units, three significant digits (EB past that)."""
    units = ("B", "kB", "MB", "GB", "TB", "PB")
    for unit in units:
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} EB"


def netem_in_kernel() -> bool:
    """Whether this kernel has netem, without root: ``sch_netem`` built in or shipped as a
    module. (``pubsublab doctor`` tries the qdisc for real; runs use its answer.)"""
    release = os.uname().release
    moddir = f"/lib/modules/{release}"
    try:
        with open(f"{moddir}/modules.builtin", encoding="utf-8") as fh:
            if any("sch_netem" in line for line in fh):
                return True
    except OSError:
        pass
    try:
        with open("/proc/modules", encoding="utf-8") as fh:
            if any(line.startswith("sch_netem ") for line in fh):
                return True
    except OSError:
        pass
    return any("sch_netem" in f for _, _, files in os.walk(f"{moddir}/kernel/net/sched")
               for f in files)


def links_mode(spec: Spec, graph: nx.Graph) -> str:
    """``routing.links`` checked against the topology (module docstring), or a SpecError."""
    mode = spec.routing.links
    if mode == "on-demand" and graph.graph.get("mode") != "switch":
        raise SpecError(f"routing.links: on-demand links need a switch-mode topology (every "
                        f"host reaches every other); topology {spec.topology.name!r} is in "
                        f"{graph.graph.get('mode')} mode")
    return mode


def pair_figures(graph: nx.Graph, a: str, b: str, links: list[tuple[str, str]] | None = None
                 ) -> tuple[float | None, float, float]:
    """Rate (Mbit/s, ``None``: unshaped), one-way delay (ms) and loss (%) of the path
    between brokers ``a`` and ``b`` (``links``, if the caller has them), by the rules of
    the overlay edges (module doc): what a link opened on demand between them meets. A
    topology that models an underlay it does not emulate (``transit-stub``) gives the
    pairs' delays in ``graph['latency_ms']``; they are added to the path's own."""
    if links is None:
        links = path_links(graph, a, b)
    params = [graph.edges[u, v]["params"] for u, v in links]
    rates = [p.bw_mbps for p in params if p.bw_mbps is not None]
    keep = math.prod(1.0 - p.loss_pct / 100.0 for p in params)
    underlay_ms = graph.graph["latency_ms"][a][b] if "latency_ms" in graph.graph else 0.0
    return (min(rates) if rates else None,
            round(underlay_ms + sum(p.delay_ms for p in params), 9),
            round(100.0 * (1.0 - keep), 6))


def topology_graph(spec: Spec) -> nx.Graph:
    """The topology graph of a spec with its link overrides applied (SpecError if bad)."""
    try:
        g = build_graph(spec.topology.name, spec.topology.params, spec.links)
    except ValueError as exc:
        raise SpecError(f"topology: {exc}") from None
    for a, b, fields in spec.link_overrides:
        if not g.has_edge(a, b):
            raise SpecError(f"link_overrides: no link between {a!r} and {b!r} in "
                            f"topology {spec.topology.name!r}")
        # Only the fields the override names change; the others keep the link's own.
        g.edges[a, b]["params"] = replace(g.edges[a, b]["params"], **fields)
    return g


def _check_schedule(spec: Spec, g: nx.Graph) -> None:
    overlay = overlay_of(g)
    for c in spec.link_schedule:
        if not overlay.has_edge(c.a, c.b):
            raise SpecError(f"link_schedule: no overlay link between {c.a!r} and {c.b!r} in "
                            f"topology {spec.topology.name!r}")
        if not g.has_edge(c.a, c.b):  # brokers that meet through a switch share its links
            raise SpecError(f"link_schedule: {c.a}-{c.b} is not a link of its own; changing "
                            "one overlay link's rate needs an overlay-as-links topology "
                            "(topology.params.mode: overlay)")


def _check_broker_names(spec: Spec, g: nx.Graph) -> None:
    """``broker.cpu`` and ``broker.service.brokers`` may name brokers only (a switch has
    no host to limit and handles no message)."""
    names = brokers(g)
    service = (spec.broker.service or {}).get("brokers", {})
    for where, named in (("broker.cpu", spec.broker.cpu), ("broker.service.brokers", service)):
        for b in named:
            if b not in names:
                some = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                raise SpecError(f"{where}: {b!r} is not a broker of topology "
                                f"{spec.topology.name!r}; allowed: its brokers ({some})")


def processing_model(spec: Spec) -> Processing | None:
    """The simulator's processing model from ``broker.service`` (None: off): figures
    the spec leaves out come from the calibration (``nodes/sim/calibration.json``); brokers
    of ``broker.cpu`` take 1/share as long."""
    service = spec.broker.service
    if service is None:
        return None
    given = {k: service[k] for k in ("base_us", "per_match_us") if k in service}
    if len(given) < 2:
        try:
            calibrated = calibrated_service()
        except ValueError as exc:
            raise SpecError(f"broker.service: {exc}") from exc
        given = {**vars(calibrated), **given}
    default = ServiceTime(**given)
    return Processing(
        service=default,
        per_broker={b: ServiceTime(**{**vars(default), **t})
                    for b, t in service.get("brokers", {}).items()},
        cpu_share=dict(spec.broker.cpu),
        buffer_msgs=service.get("buffer_msgs", DEFAULT_BUFFER_MSGS))


def _mechanism(p: LinkParams, netem: bool) -> dict[str, str]:
    mech: dict[str, str] = {}
    if p.bw_mbps is not None:
        mech["bw_mbps"] = "htb" + (" (Mininet's 1000 Mbit/s cap raised)"
                                   if p.bw_mbps > 1000 else "")
    for key, value in (("delay_ms", p.delay_ms), ("loss_pct", p.loss_pct)):
        if value:
            mech[key] = "netem" if netem else "in-broker"
    if p.max_queue_pkts is not None:
        mech["max_queue_pkts"] = "netem limit" if netem else "pfifo"
    return mech


def link_mechanisms(graph: nx.Graph, netem: bool) -> list[dict[str, Any]]:
    """For every emulated link, which mechanism carries each configured parameter."""
    return [{"a": a, "b": b, "type": data.get("type"), "params": vars(data["params"]).copy(),
             "mechanism": _mechanism(data["params"], netem)}
            for a, b, data in sorted(graph.edges(data=True))]


def overlay_edges(graph: nx.Graph, netem: bool) -> tuple[nx.Graph, tuple[OverlayEdge, ...]]:
    """The broker overlay with each edge's figures, and the edges (see the module doc)."""
    overlay = overlay_of(graph)
    switch_mode = graph.graph.get("mode") == "switch"
    ov = nx.Graph()
    ov.add_nodes_from((b, overlay.nodes[b]) for b in brokers(graph))
    edges = []
    for a, b, kind in sorted((min(u, v), max(u, v), k) for u, v, k in overlay.edges(data="type")):
        path = path_links(graph, a, b)
        links = tuple(path)
        bw_mbps, delay_ms, loss_pct = pair_figures(graph, a, b, path)
        edge = OverlayEdge(
            a=a, b=b, kind=kind or "overlay", bw_mbps=bw_mbps, delay_ms=delay_ms,
            loss_pct=loss_pct, links=links,
            mechanism={k: v for u, w in links
                       for k, v in _mechanism(graph.edges[u, w]["params"], netem).items()}
            | ({"delay_ms": "in-broker (modelled underlay)"} if "latency_ms" in graph.graph
               else {}))
        edges.append(edge)
        ov.add_edge(a, b, type=edge.kind, bw_mbps=edge.bw_mbps, delay_ms=edge.delay_ms,
                    loss_pct=edge.loss_pct)
    if switch_mode:
        for b in ov:
            access = [graph.edges[b, n]["params"] for n in graph.neighbors(b)]
            ov.nodes[b]["nic_mbps"] = access[0].bw_mbps if len(access) == 1 else None
    return ov, tuple(edges)


def algorithm_params(spec: Spec, algorithm: str) -> dict[str, Any]:
    """The ``routing.params`` one algorithm is given, before checking.

    A key that names an algorithm of the spec holds a mapping of that algorithm's own
    params; every other key is shared. An algorithm gets the shared keys it declares, with
    its own mapping merged over them. A shared key that no algorithm of the spec declares
    is refused by :func:`compile_plan` (a misspelling, most likely)."""
    params = spec.routing.params
    names = set(spec.routing.algorithms)
    declared = {p.name for p in CORES[algorithm].params} if algorithm in CORES else set()
    shared = {k: v for k, v in params.items() if k not in names and k in declared}
    own = params.get(algorithm) or {}
    if not isinstance(own, Mapping):
        raise SpecError(f"routing.params.{algorithm}: bad value {own!r}; allowed: a mapping "
                        "of that algorithm's params")
    return {**shared, **own}


def _algorithms(spec: Spec, overlay: nx.Graph, kind: str | None) -> tuple[AlgorithmPlan, ...]:
    names = spec.routing.algorithms
    for name in names:
        try:
            info = core_info(name)
        except ValueError:
            raise SpecError(f"routing.algorithms: bad value {name!r}; allowed: "
                            f"{', '.join(sorted(CORES))}") from None
        if kind is not None and info.workload != kind:
            fits = sorted(n for n, i in CORES.items() if i.workload == kind)
            raise SpecError(f"routing.algorithms: {name} does not run a {kind} workload; "
                            f"allowed: {', '.join(fits)}")
    for key in spec.routing.params:
        if key in names:
            continue
        if key in CORES:
            raise SpecError(f"routing.params.{key}: {key} is not among routing.algorithms "
                            f"({', '.join(names)})")
        if not any(key in {p.name for p in CORES[n].params} for n in names):
            allowed = sorted({p.name for n in names for p in CORES[n].params} | set(names))
            raise SpecError(f"routing.params: no algorithm of this spec has a param "
                            f"{key!r}; allowed: {', '.join(allowed) or 'none'}")
    plans = []
    for name in names:
        try:
            params = resolve_params(name, CORES[name].params, algorithm_params(spec, name))
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        derive = CORES[name].derive
        try:
            derived = derive(overlay) if derive is not None else {}
        except ValueError as exc:
            raise SpecError(f"routing.algorithms: {name} cannot run on topology "
                            f"{spec.topology.name!r}: {exc}") from None
        plans.append(AlgorithmPlan(name, params, derived))
    return tuple(plans)


def workload_params(spec: Spec) -> dict[str, Any]:
    """The resolved workload section (its kind's defaults filled in, its checked fields
    normalised), or a SpecError."""
    name = spec.workload.get("kind", "stock")
    if name not in WORKLOADS:
        raise SpecError(f"workload.kind: bad value {name!r}; allowed: "
                        f"{', '.join(WORKLOADS)}")
    kind = WORKLOADS[name]
    unknown = sorted(set(spec.workload) - set(kind.defaults))
    if unknown:
        raise SpecError(f"workload: unknown field(s) {', '.join(unknown)}; allowed: "
                        f"{', '.join(sorted(kind.defaults))}")
    resolved = {**kind.defaults, **spec.workload}
    try:
        check_types(kind, resolved)  # before anything derives from the values
        for key, checked in kind.fields.items():
            resolved[key] = checked(resolved[key])
    except ValueError as exc:  # names its field
        raise SpecError(str(exc)) from None
    return resolved


def run_derived(algorithms: Sequence[AlgorithmPlan], overlay: nx.Graph,
                workload: Workload | None,
                latency_ms: Mapping[str, Mapping[str, float]] | None = None
                ) -> tuple[AlgorithmPlan, ...]:
    """The algorithms with the params their cores derive from the run (``derive_run``:
    Kyra's cliques, zones and trees, the multicast groups), or a SpecError.

    Their inputs, stated: the latency between two servers is ``latency_ms`` when the
    topology gives one (the underlay's, ``transit-stub``), else the shortest path over the
    overlay by ``delay_ms`` (on a full mesh with metric delays, the direct link); the
    subscriptions are every SUBSCRIBE of the workload (the multicast baseline's global
    view); the calibration sample is the workload's ``meta["calibration"]`` (a list of
    events' attributes) when it has one, else its own publications (the best case for
    balanced zones and weighted groups: the sample is the stream itself)."""
    if not any(CORES[a.name].derive_run for a in algorithms):
        return tuple(algorithms)
    if workload is None:
        raise SpecError(f"routing.algorithms: {', '.join(a.name for a in algorithms)} derive "
                        "their routing from the workload, and this spec has none")
    names = sorted(overlay)
    latency: dict[str, dict[str, float]] = {a: dict.fromkeys(names, math.inf) for a in names}
    if latency_ms is not None:
        for a in names:
            latency[a].update(latency_ms[a])
    else:
        for a, dist in nx.all_pairs_dijkstra_path_length(overlay, weight="delay_ms"):
            latency[a].update(dist)
    subscriptions = subscriptions_by_broker(workload)
    calibration = workload.meta.get("calibration") or publication_attrs(workload)
    out = []
    for alg in algorithms:
        derive = CORES[alg.name].derive_run
        if derive is not None:
            try:
                alg = replace(alg, derived=derive(latency, subscriptions, calibration,
                                                  alg.params))
            except ParamValueError as exc:
                raise SpecError(f"routing.params.{alg.name}.{exc.param}: {exc}") from None
            except ValueError as exc:
                raise SpecError(f"routing.algorithms: {alg.name} cannot derive its routing "
                                f"from this run: {exc}") from None
        out.append(alg)
    return tuple(out)


def bulk_plan(spec: Spec, names: Sequence[str], p: Mapping[str, Any]) -> BulkPlan:
    """The spec's bulk workload over brokers ``names`` (in topology order), or a SpecError."""
    publisher = p["publisher"] or names[0]
    if publisher not in names:
        raise SpecError(f"workload.publisher: bad value {publisher!r}; allowed: {names}")
    others = tuple(b for b in names if b != publisher)
    counts = p["subscriber_counts"] or [len(others)]
    if not isinstance(counts, list | tuple) or not all(
            is_integer(n) and 1 <= n <= len(others) for n in counts):
        raise SpecError(f"workload.subscriber_counts: bad value {short_repr(counts)}; "
                        f"allowed: a list of integers 1..{len(others)}")
    counts = tuple(counts)
    slice_bytes = int(p["slice_kb"] * 1024)
    data_bytes = max(slice_bytes, round(p["data_gb"] * GIB * spec.scale))
    failure = p["failure"]
    if failure is not None:
        victims = others[: max(counts)]
        if not isinstance(failure, Mapping) or failure.get("victim") not in victims or (
                ("at_s" in failure) == ("at_fraction" in failure)):
            raise SpecError(f"workload.failure: bad value {failure!r}; allowed: {{victim: "
                            f"one of {list(victims)}, at_s: S or at_fraction: F, "
                            f"algorithms: [...]}}")
    return BulkPlan(topic=str(p["topic"]), data_bytes=data_bytes, slice_bytes=slice_bytes,
                    seed=spec.seed, start_s=float(p["start_s"]), publisher=publisher,
                    others=others, counts=counts, failure=failure,
                    rate_bin_s=float(p["rate_bin_s"]), stream_mbps=p["stream_mbps"])


def _check_span(workload: Workload, wparams: Mapping[str, Any]) -> None:
    """ValueError if ``workload``'s last operation comes after :data:`MAX_WORKLOAD_S`,
    naming the params of rates and times it was built with."""
    last_s = max((op.t_s for op in workload.ops), default=0.0)
    if not last_s <= MAX_WORKLOAD_S:  # NaN too
        timed = ", ".join(f"workload.{k}={v!r}" for k, v in sorted(wparams.items())
                          if k.endswith(("_hz", "_s")) and isinstance(v, int | float))
        raise ValueError(f"workload: its last operation would come at {last_s:.3g} s; "
                         f"allowed: at most {MAX_WORKLOAD_S:.0f} s (a week); its rates and "
                         f"times: {timed}")


def compile_plan(spec: Spec, *, netem: bool | None = None,
                 allow_large: bool = False) -> RunPlan:
    """Compile ``spec`` (see the module docstring); ``netem`` says whether the kernel has
    netem (default: :func:`netem_in_kernel`); only the recorded mechanisms depend on it.
    Unless ``allow_large``, a workload this machine cannot hold (:func:`workload_fits`:
    its estimated operations at ``OP_BYTES`` each within half the physical memory) is
    refused before it is built."""
    if netem is None:
        netem = netem_in_kernel()
    graph = topology_graph(spec)
    _check_schedule(spec, graph)
    _check_broker_names(spec, graph)
    links = links_mode(spec, graph)
    overlay, edges = overlay_edges(graph, netem)
    wparams = workload_params(spec) if spec.workload else {}
    kind = WORKLOADS[wparams["kind"]] if wparams else None
    algorithms = _algorithms(spec, overlay, kind.serves if kind is not None else None)
    notes = list(graph.graph.get("notes", []))
    workload, bulk = None, None
    capture = spec.capture
    if kind is not None and kind.build is None:  # bulk data in rounds
        for key, bad in (("duration_s", spec.duration_s is not None),
                         ("link_schedule", bool(spec.link_schedule)),
                         ("capture.enabled", spec.capture.enabled is True)):
            if bad:
                raise SpecError(f"{key}: not supported with workload.kind bulk (bulk rounds "
                                "end when every subscriber holds the data; no capture of "
                                "bulk slices; scheduled rate changes are for stock "
                                "workloads): remove it")
        if not wparams["sweep_nodes"]:
            bulk = bulk_plan(spec, brokers(graph), wparams)
        elif wparams["stream_mbps"] is not None:
            raise SpecError("workload.stream_mbps: not supported with workload.sweep_nodes "
                            "(the depth sweep measures the tree, not rates): remove it")
        elif list(spec.routing.algorithms) != ["lbdd"]:
            raise SpecError("routing.algorithms: the depth sweep (workload.sweep_nodes) runs "
                            "lbdd only; allowed: [lbdd]")
        capture = CaptureSpec(**{**vars(capture), "enabled": False})
    else:
        if kind is not None:
            run = RunContext(graph=graph, topology=spec.topology.name, seed=spec.seed,
                             scale=spec.scale, links=links,
                             algorithms={a.name: a.params for a in algorithms},
                             duration_s=spec.duration_s)
            try:
                kind.check(wparams, run)
                if not allow_large:
                    too_big = workload_fits(kind, wparams, run,
                                            physical_memory_bytes() / 2**20)
                    if too_big:
                        raise SpecError(f"{too_big}; lower it or pass --allow-large")
                workload = kind.build(wparams, run)
                _check_span(workload, wparams)
            except ValueError as exc:  # one line naming the field
                raise SpecError(str(exc)) from None
            except OverflowError as exc:
                raise SpecError(f"workload: a size too large to build ({exc})") from None
            except MemoryError:  # only with allow_large: the estimate refuses it otherwise
                raise SpecError("workload: ran out of memory building it; lower its "
                                "sizes") from None
        algorithms = run_derived(algorithms, overlay, workload, graph.graph.get("latency_ms"))
        capture = CaptureSpec(**{**vars(capture), "enabled": capture.enabled is not False})
        if capture.enabled and kind is not None and kind.capture_checked:
            plan_capture(capture, brokers(graph), BROKER_PORT)  # SpecError if too small
    return RunPlan(
        spec=spec, graph=nx.freeze(graph), overlay=nx.freeze(overlay), edges=edges,
        algorithms=algorithms, window_ms=spec.routing.window_ms,
        workload_kind=kind.name if kind is not None else None,
        workload_params=wparams, workload=workload, bulk=bulk,
        link_schedule=spec.link_schedule, capture=capture, broker=spec.broker,
        duration_s=spec.duration_s, delay_loss_mechanism="netem" if netem else "in-broker",
        notes=tuple(notes), links=links, processing=processing_model(spec),
        placement=placement_of(spec, graph, workload, bulk))


def broker_demand(workload: Workload | None) -> dict[str, int]:
    """Per broker, the client operations it serves (publications, subscriptions and the
    rest): the placement's estimate of a broker's share of the run's CPU. A broker's host
    runs its clients too, and every operation costs the broker at least one message; what
    the overlay routes through it is not counted, so it errs toward even shares."""
    demand: dict[str, int] = {}
    for op in workload.ops if workload is not None else ():
        demand[op.broker] = demand.get(op.broker, 0) + 1
    return demand


def placement_of(spec: Spec, graph: nx.Graph, workload: Workload | None,
                 bulk: BulkPlan | None = None) -> dict[str, str]:
    """Which server builds each node (:func:`topologies.placement.place_on_servers` by
    :func:`broker_demand`, a bulk publisher's host on this machine); {} for a spec
    without ``servers``."""
    if not spec.servers:
        return {}
    pinned = {bulk.publisher: "localhost"} if bulk is not None else {}
    return place_on_servers(graph, broker_demand(workload), spec.servers, pinned)
