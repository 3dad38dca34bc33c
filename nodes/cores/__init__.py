"""Routing cores: pure state machines, one per broker, hosted by either runtime.

``CORES`` maps an algorithm name to its :class:`CoreInfo`: the factory ``(broker,
neighbours, params) -> core``, the params a spec may set (:mod:`nodes.cores.params`), the
workload kind it serves (``stock`` notifications, ``bulk`` data, or ``meghdoot``'s
stream with joins), and, for cores that
need figures derived from the whole overlay (a spanning tree, SCOT clusters), a pure
function from the overlay graph to per-broker params; cores whose figures come from the
run itself (Kyra's cliques, zones and trees, the multicast groups) have ``derive_run``, a
pure function of the servers' latencies (ms, all pairs), every filter the workload
subscribes per broker, its publications (a calibration sample) and the declared params,
which the run plan calls once the workload is built. Derived and declared params never
share a key (a spec cannot set a derived one), so merging them is a plain union; each
entry names the keys its derivations give (``derived_keys``), so :func:`make_core` tells
them from a misspelt declared one. The
overlay is an ``nx.Graph`` over broker names carrying the topology contract's attributes
(:mod:`topologies.graph`): nodes ``cluster``, ``region``, ``role``; edges ``type``
(``aLink`` | ``iLink`` | ``overlay``). Derived params must be JSON-able: the emulated
runtime hands them to each broker process in its config file.

Registered cores: ``codd`` (cooperative data-aware dissemination trees with
reorganization, CoDD-R, :mod:`nodes.cores.codd`) and its variants ``codd-nr`` (without
reorganization), ``codd-siena`` (the paper's Siena emulation) and ``codd-flood`` (every
document down the whole tree), ``flood`` (the reference), ``gossip`` (peers learnt from
messages, links opened on demand, :mod:`nodes.cores.gossip`), ``meghdoot`` (content-based
pub/sub over a CAN, :mod:`nodes.cores.meghdoot`), ``snr`` (OctopiA's static notification
routing on a clustered SCOT, :mod:`nodes.cores.octopia`), ``idr`` (OctopiA's inter-cluster
dynamic routing, :mod:`nodes.cores.idr`), ``tid-static`` (PADRES's TID-based static
routing on an unclustered overlay, :mod:`nodes.cores.tid`), ``tid-dynamic`` (its dynamic
variant, which may reroute a notification over another last hop of the same subscriptions,
:class:`nodes.cores.tid.TidDynamicCore`), ``siena`` (Siena-style filter-based routing on a
spanning tree with optional covering, Kyra's baseline, :mod:`nodes.cores.siena`),
``multicast`` (Kyra's multicast-based baseline, :mod:`nodes.cores.multicast`; its groups
are derived from the subscriptions with :func:`~nodes.cores.multicast.derive_layout`),
``kyra`` (server cliques and per-zone routing trees, :mod:`nodes.cores.kyra`; derived with
:func:`~nodes.cores.kyra.derive_layout`), and the bulk-data agents ``lbdd``
(:mod:`nodes.cores.lbdd`), ``p2p`` and ``p2p-parallel`` (:mod:`nodes.cores.p2p`), which
need every broker's ``ip`` node attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nodes.cores import (
    codd,
    flood,
    gossip,
    idr,
    kyra,
    lbdd,
    meghdoot,
    multicast,
    octopia,
    p2p,
    siena,
    tid,
)
from nodes.cores.congestion import LST_PARAMS
from nodes.cores.dissemination import AGENT_DERIVED_KEYS, agent_ips, agent_params
from nodes.cores.interface import RoutingCore
from nodes.cores.overlay import spanning_tree_neighbours
from nodes.cores.params import Param, resolve_params
from nodes.model import Filter, Value

if TYPE_CHECKING:  # annotations only: cores read the graph, they never build one
    import networkx as nx

CoreFactory = Callable[[str, Sequence[str], Mapping[str, Any]], RoutingCore]
OverlayParams = Callable[["nx.Graph"], dict[str, dict[str, Any]]]
# (latency_ms[a][b], filters subscribed per broker, publications' attributes, declared
# params) -> per-broker params.
RunParams = Callable[[Mapping[str, Mapping[str, float]], Mapping[str, Sequence[Filter]],
                      Sequence[Mapping[str, Value]], Mapping[str, Any]],
                     dict[str, dict[str, Any]]]
WorkloadKind = Literal["stock", "bulk", "meghdoot", "codd"]


@dataclass(frozen=True)
class CoreInfo:
    """What the registry knows of one core (see the module docstring)."""

    factory: CoreFactory
    params: tuple[Param, ...] = ()
    workload: WorkloadKind = "stock"
    derive: OverlayParams | None = None
    derive_run: RunParams | None = None
    derived_keys: tuple[str, ...] = ()


CORES: dict[str, CoreInfo] = {
    **{name: CoreInfo(codd.variant(name), params, "codd", codd.overlay_params,
                     derived_keys=codd.DERIVED_KEYS)
       for name, (_, params) in codd.VARIANTS.items()},
    "flood": CoreInfo(flood.FloodCore, derive=flood.overlay_params,
                      derived_keys=flood.DERIVED_KEYS),
    "gossip": CoreInfo(gossip.GossipCore, gossip.PARAMS),
    "meghdoot": CoreInfo(meghdoot.MeghdootCore, meghdoot.PARAMS, "meghdoot",
                         meghdoot.overlay_params, derived_keys=meghdoot.DERIVED_KEYS),
    "snr": CoreInfo(octopia.OctopiaCore, derive=octopia.overlay_params,
                    derived_keys=octopia.DERIVED_KEYS),
    "idr": CoreInfo(idr.IdrCore, LST_PARAMS, derive=octopia.overlay_params,
                    derived_keys=octopia.DERIVED_KEYS),
    "siena": CoreInfo(siena.SienaCore, siena.PARAMS, derive=siena.overlay_params,
                      derived_keys=siena.DERIVED_KEYS),
    "multicast": CoreInfo(multicast.MulticastCore, multicast.PARAMS,
                          derive_run=multicast.run_params,
                          derived_keys=multicast.DERIVED_KEYS),
    "kyra": CoreInfo(kyra.KyraCore, kyra.PARAMS, derive_run=kyra.run_params,
                     derived_keys=kyra.DERIVED_KEYS),
    "tid-static": CoreInfo(tid.TidCore),
    "tid-dynamic": CoreInfo(tid.TidDynamicCore, tid.DYNAMIC_PARAMS),
    "lbdd": CoreInfo(lbdd.LbddCore, agent_params(lbdd.LbddCore.default_window_slices),
                     "bulk", agent_ips, derived_keys=AGENT_DERIVED_KEYS),
    "p2p": CoreInfo(p2p.P2PCore, agent_params(p2p.P2PCore.default_window_slices),
                    "bulk", agent_ips, derived_keys=AGENT_DERIVED_KEYS),
    "p2p-parallel": CoreInfo(p2p.P2PParallelCore,
                             agent_params(p2p.P2PParallelCore.default_window_slices),
                             "bulk", agent_ips, derived_keys=AGENT_DERIVED_KEYS),
}

__all__ = [
    "CORES",
    "CoreFactory",
    "CoreInfo",
    "OverlayParams",
    "core_info",
    "make_core",
    "overlay_params",
    "resolve_params",
    "spanning_tree_neighbours",
]


def core_info(name: str) -> CoreInfo:
    """The registry entry of ``name``; ValueError names the allowed cores."""
    if name not in CORES:
        raise ValueError(f"unknown routing core {name!r}; allowed: {', '.join(sorted(CORES))}")
    return CORES[name]


def make_core(
    name: str, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]
) -> RoutingCore:
    """Build core ``name`` for ``broker`` from ``params``: what the host derived (the
    entry's ``derived_keys``, passed as given) and the declared params, checked and
    completed with their defaults (:func:`~nodes.cores.params.resolve_params`), so the
    core gets every declared key. ValueError names the allowed cores, an unknown key with
    the keys allowed, or a bad value with its rule.
    """
    info = core_info(name)
    derived = {k: v for k, v in params.items() if k in info.derived_keys}
    declared = {k: v for k, v in params.items() if k not in info.derived_keys}
    return info.factory(broker, neighbours,
                        {**resolve_params(name, info.params, declared), **derived})


def overlay_params(name: str, overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Per-broker params core ``name`` derives from the overlay graph (empty if it needs
    none); ValueError when the overlay lacks what the core needs (SCOT clusters, ...)."""
    derive = core_info(name).derive
    return derive(overlay) if derive is not None else {}
