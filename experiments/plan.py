"""What a spec asks a runtime to run: the overlay with its link figures, and the workload.

Both runtimes take their inputs from here, so a spec run through the simulator and
through Mininet sees the same overlay, the same link parameters and the same workload.

The ``workload`` section of a spec (all optional; defaults are small so that a plain spec
runs in seconds)::

    kind: stock            # the stock-quote workload of experiments.workload
    mode: octopia          # octopia (target selectivity) | meghdoot (five templates)
    n_publishers: 2
    n_subscribers: 6
    pubs_per_publisher: 20
    publish_rate_hz: 10    # per publisher
    selectivity: 0.02
    phase_gap_s: 1.0       # advertisements, then subscriptions, then publications
    advertise_spread_s: 0.0    # advertisements evenly over this long (<= phase_gap_s / 2)
    subscribe_spread_s: null   # the same for subscriptions (null: phase_gap_s / 2)
    burst: null            # a high-rate publisher's burst (OctopiA Fig. 11), e.g.
                           # {rate_hz: 1000, count: 3000, start_s: 2.0, n_subscribers: 10};
                           # see experiments.burst

``kind: bulk`` is bulk data pushed to subscribers (LBDD, point-to-point), with its own
keys (:data:`BULK_DEFAULTS`), run by :mod:`experiments.lbdd_run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx

from experiments.burst import add_burst, burst_settings
from experiments.spec import Spec, SpecError
from experiments.workload import Workload, stock_workload
from topologies.graph import brokers, overlay_of
from topologies.links import LinkParams

WORKLOAD_DEFAULTS: dict[str, Any] = {
    "kind": "stock", "mode": "octopia", "n_publishers": 2, "n_subscribers": 6,
    "pubs_per_publisher": 20, "publish_rate_hz": 10.0, "selectivity": 0.02,
    "phase_gap_s": 1.0, "advertise_spread_s": 0.0, "subscribe_spread_s": None,
    "burst": None,
}
BULK_DEFAULTS: dict[str, Any] = {
    "kind": "bulk", "data_gb": 8.0, "slice_kb": 64, "topic": "bulk", "start_s": 1.0,
    "publisher": None, "subscriber_counts": None, "failure": None, "rate_bin_s": 1.0,
    "sweep_nodes": None, "trials": 20,
}


def overlay_links(graph: nx.Graph, default: LinkParams) -> nx.Graph:
    """The broker overlay with ``bw_mbps``, ``delay_ms`` and ``loss_pct`` on every edge.

    In overlay mode each overlay edge is its own emulated link and carries its own
    parameters; where brokers meet through switches the spec's default link parameters
    stand for the path (switch-mode topologies shape access links, not overlay edges).
    Brokers keep their attributes (``cluster``, ``region``, ``role``, ...) and edges their
    ``type`` (``aLink``/``iLink``/``overlay``): cores derive params from them (SCOT
    clusters for ``snr``, see :func:`nodes.cores.overlay_params`).
    """
    overlay = overlay_of(graph)
    ov = nx.Graph()
    ov.add_nodes_from((b, overlay.nodes[b]) for b in brokers(graph))
    for a, b, kind in overlay.edges(data="type"):
        p: LinkParams = graph.edges[a, b]["params"] if graph.has_edge(a, b) else default
        ov.add_edge(a, b, type=kind or "overlay", bw_mbps=p.bw_mbps, delay_ms=p.delay_ms,
                    loss_pct=p.loss_pct)
    return ov


def workload_params(spec: Spec) -> dict[str, Any]:
    """The resolved workload section (defaults filled in), or a SpecError."""
    kind = spec.workload.get("kind", "stock")
    if kind not in ("stock", "bulk"):
        raise SpecError(f"workload.kind: bad value {kind!r}; allowed: stock, bulk")
    defaults = BULK_DEFAULTS if kind == "bulk" else WORKLOAD_DEFAULTS
    unknown = sorted(set(spec.workload) - set(defaults))
    if unknown:
        raise SpecError(f"workload: unknown field(s) {', '.join(unknown)}; allowed: "
                        f"{', '.join(sorted(defaults))}")
    resolved = {**defaults, **spec.workload}
    if kind == "stock":
        resolved["burst"] = burst_settings(resolved["burst"])
    return resolved


def build_workload(spec: Spec, graph: nx.Graph) -> Workload:
    """The spec's workload over the graph's brokers, seeded with the spec's seed."""
    p = workload_params(spec)
    try:
        w = stock_workload(
            brokers(graph), n_publishers=p["n_publishers"], n_subscribers=p["n_subscribers"],
            pubs_per_publisher=p["pubs_per_publisher"], publish_rate_hz=p["publish_rate_hz"],
            seed=spec.seed, mode=p["mode"], selectivity=p["selectivity"],
            phase_gap_s=p["phase_gap_s"], advertise_spread_s=p["advertise_spread_s"],
            subscribe_spread_s=p["subscribe_spread_s"])
    except (ValueError, TypeError) as exc:
        raise SpecError(f"workload: {exc}") from None
    if p["burst"] is None:
        return w
    try:
        return add_burst(w, graph, p["burst"], seed=spec.seed)
    except SpecError:
        raise  # already names its field
    except ValueError as exc:
        raise SpecError(f"workload.burst: {exc}") from None


def algorithm_params(spec: Spec, algorithm: str) -> Mapping[str, Any]:
    """Routing params for one algorithm: ``routing.params`` may be shared or keyed by name."""
    params = spec.routing.params
    nested = params.get(algorithm)
    return dict(nested) if isinstance(nested, Mapping) else dict(params)
