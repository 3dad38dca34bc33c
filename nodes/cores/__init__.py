"""Routing cores: pure state machines, one per broker, hosted by either runtime.

``CORES`` maps an algorithm name to its factory ``(broker, neighbours, params) -> core``.
Some cores need figures derived from the whole overlay (a spanning tree, SCOT clusters);
``OVERLAY_PARAMS`` maps such a core's name to a pure function from the overlay graph to
per-broker params, which the host merges under its own params (the host's win). The
overlay is an ``nx.Graph`` over broker names carrying the topology contract's attributes
(:mod:`topologies.graph`): nodes ``cluster``, ``region``, ``role``; edges ``type``
(``aLink`` | ``iLink`` | ``overlay``). Derived params must be JSON-able: the emulated
runtime hands them to each broker process in its config file.

Registered cores: ``flood`` (the reference), ``snr`` (OctopiA's static notification
routing on a clustered SCOT, :mod:`nodes.cores.octopia`), ``idr`` (OctopiA's inter-cluster
dynamic routing, :mod:`nodes.cores.idr`), ``tid-static`` (PADRES's
TID-based static routing on an unclustered overlay, :mod:`nodes.cores.tid`) and
``tid-dynamic`` (its dynamic variant, which may reroute a notification over another last
hop of the same subscriptions, :class:`nodes.cores.tid.TidDynamicCore`), and the
bulk-data agents ``lbdd`` (:mod:`nodes.cores.lbdd`), ``p2p`` and ``p2p-parallel``
(:mod:`nodes.cores.p2p`), which need every broker's ``ip`` node attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.core import RoutingCore
from nodes.cores import flood, idr, lbdd, octopia, p2p, tid
from nodes.cores.dissemination import agent_ips
from nodes.cores.overlay import spanning_tree_neighbours

if TYPE_CHECKING:  # annotations only: cores read the graph, they never build one
    import networkx as nx

CoreFactory = Callable[[str, Sequence[str], Mapping[str, Any]], RoutingCore]
OverlayParams = Callable[["nx.Graph"], dict[str, dict[str, Any]]]

CORES: dict[str, CoreFactory] = {
    "flood": flood.FloodCore,
    "snr": octopia.OctopiaCore,
    "idr": idr.IdrCore,
    "tid-static": tid.TidCore,
    "tid-dynamic": tid.TidDynamicCore,
    "lbdd": lbdd.LbddCore,
    "p2p": p2p.P2PCore,
    "p2p-parallel": p2p.P2PParallelCore,
}
OVERLAY_PARAMS: dict[str, OverlayParams] = {
    "flood": flood.overlay_params,
    "snr": octopia.overlay_params,
    "idr": octopia.overlay_params,
    "lbdd": agent_ips,
    "p2p": agent_ips,
    "p2p-parallel": agent_ips,
}

__all__ = [
    "CORES",
    "OVERLAY_PARAMS",
    "CoreFactory",
    "OverlayParams",
    "make_core",
    "overlay_params",
    "spanning_tree_neighbours",
]


def _check(name: str) -> None:
    if name not in CORES:
        raise ValueError(f"unknown routing core {name!r}; allowed: {', '.join(sorted(CORES))}")


def make_core(
    name: str, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]
) -> RoutingCore:
    """Build core ``name`` for ``broker``; ValueError names the allowed cores."""
    _check(name)
    return CORES[name](broker, neighbours, params)


def overlay_params(name: str, overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Per-broker params core ``name`` derives from the overlay graph (empty if it needs
    none); ValueError when the overlay lacks what the core needs (SCOT clusters, ...)."""
    _check(name)
    derive = OVERLAY_PARAMS.get(name)
    return derive(overlay) if derive is not None else {}
