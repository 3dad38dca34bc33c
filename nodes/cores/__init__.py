"""Routing cores: pure state machines, one per broker, hosted by either runtime.

``CORES`` maps an algorithm name to its factory ``(broker, neighbours, params) -> core``.
Some cores need figures derived from the whole overlay (a spanning tree, SCOT clusters);
``OVERLAY_PARAMS`` maps such a core's name to a pure function from the overlay's edge
list to per-broker params, which the host merges under its own params (the host's win).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodes.core import RoutingCore
from nodes.cores import flood
from nodes.cores.overlay import spanning_tree_neighbours

CoreFactory = Callable[[str, Sequence[str], Mapping[str, Any]], RoutingCore]
OverlayParams = Callable[[Iterable[tuple[str, str]]], dict[str, dict[str, Any]]]

CORES: dict[str, CoreFactory] = {"flood": flood.FloodCore}
OVERLAY_PARAMS: dict[str, OverlayParams] = {"flood": flood.overlay_params}

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


def overlay_params(
    name: str, overlay_edges: Iterable[tuple[str, str]]
) -> dict[str, dict[str, Any]]:
    """Per-broker params core ``name`` derives from the overlay (empty if it needs none)."""
    _check(name)
    derive = OVERLAY_PARAMS.get(name)
    return derive(overlay_edges) if derive is not None else {}
