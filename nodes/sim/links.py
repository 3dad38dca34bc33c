"""The simulator's links: the model of links opened on demand, fixed links read from the
overlay graph, and NIC reservations (docs/design/simulator.md, "Links", "NICs" and "Links
on demand", says how they behave).

Rates are kept as seconds per byte (``0.0``: unshaped) and delays as seconds, the figures
the engine's per-link arrays hold.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

_end = operator.itemgetter(1)  # a NIC reservation's end (start, end)

# A fixed directed link: (source, destination, bw_mbps or None, delay_ms, loss_pct).
FixedLink = tuple[str, str, float | None, float, float]

LatencyFn = Callable[[str, str], float]
RateFn = Callable[[str, str], float | None]


@dataclass(frozen=True)
class LinkModel:
    """How links opened on demand behave (docs/design/simulator.md, "Links on demand").

    ``latency_ms``: the one-way propagation delay of the directed link a -> b, a constant
    or a function ``(a, b) -> ms`` (:func:`underlay_latency` builds one from an underlay
    graph; ``math.inf`` means no route). ``nic_mbps``: the NIC rate of every broker
    without a ``nic_mbps`` node attribute, fixed links included (``None``: no NIC limit).
    ``link_mbps``: the rate of each link opened on demand, a constant or a function
    ``(a, b) -> Mbit/s`` (``None``: unshaped, only the NIC limits it).
    """

    latency_ms: float | LatencyFn = 0.0
    nic_mbps: float | None = None
    link_mbps: float | RateFn | None = None

    def __post_init__(self) -> None:
        if not callable(self.latency_ms):
            link_number("latency_ms", self.latency_ms, 0.0, math.inf)
        if self.nic_mbps is not None:
            link_number("nic_mbps", self.nic_mbps, 1e-9, math.inf)
        if self.link_mbps is not None and not callable(self.link_mbps):
            link_number("link_mbps", self.link_mbps, 1e-9, math.inf)

    def latency_s(self, a: str, b: str) -> float:
        """The delay of link a -> b in seconds (``math.inf``: no route)."""
        lat = self.latency_ms
        if not callable(lat):
            return lat / 1000.0  # checked in __post_init__
        ms = lat(a, b)
        if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms >= 0:
            raise ValueError(f"latency of {a} -> {b}: want ms >= 0 (inf: no route), got {ms!r}")
        return ms / 1000.0

    def s_per_byte(self, a: str, b: str) -> float:
        """The serialisation time of link a -> b in seconds per byte (``0.0``: unshaped)."""
        rate = self.link_mbps
        if rate is None:
            return 0.0
        if not callable(rate):
            return 8.0 / (rate * 1e6)  # checked in __post_init__
        mbps = rate(a, b)
        if mbps is None:
            return 0.0
        return 8.0 / (link_number("link_mbps", mbps, 1e-9, math.inf) * 1e6)


class UnderlayLatency:
    """``(a, b) -> ms``: the shortest-path latency over an underlay graph between the
    underlay nodes that host overlay brokers a and b (see :func:`underlay_latency`)."""

    def __init__(self, underlay: nx.Graph, *, weight: str = "delay_ms", default_ms: float = 0.0,
                 host_of: Mapping[str, Any] | None = None, max_sources: int = 1024) -> None:
        if max_sources < 1:
            raise ValueError(f"max_sources must be >= 1, got {max_sources}")
        self._g = underlay
        self._host = dict(host_of or {})
        self._symmetric = not underlay.is_directed()
        self._max = max_sources
        self._cache: OrderedDict[Any, dict[Any, float]] = OrderedDict()
        self.dijkstra_runs = 0  # single-source searches made (cache misses)

        def edge_ms(_u: Any, _v: Any, data: Mapping[str, Any]) -> float:
            return float(data.get(weight, default_ms))

        self._weight = edge_ms

    def __call__(self, a: str, b: str) -> float:
        ha, hb = self._host.get(a, a), self._host.get(b, b)
        for broker, host in ((a, ha), (b, hb)):
            if host not in self._g:
                raise ValueError(f"broker {broker!r}: host {host!r} is not in the underlay")
        if ha == hb:
            return 0.0
        src, dst = ha, hb
        if self._symmetric and hb in self._cache and ha not in self._cache:
            src, dst = hb, ha  # undirected: b's search answers a -> b too
        dist = self._cache.get(src)
        if dist is None:
            dist = nx.single_source_dijkstra_path_length(self._g, src, weight=self._weight)
            self.dijkstra_runs += 1
            self._cache[src] = dist
            if len(self._cache) > self._max:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(src)
        return float(dist.get(dst, math.inf))


def underlay_latency(underlay: nx.Graph, *, weight: str = "delay_ms", default_ms: float = 0.0,
                     host_of: Mapping[str, Any] | None = None,
                     max_sources: int = 1024) -> UnderlayLatency:
    """A :attr:`LinkModel.latency_ms` function: the least total ``weight`` (edge
    attribute, ms; ``default_ms`` where an edge lacks it) over ``underlay`` from the
    node hosting a to the node hosting b (``host_of`` maps a broker to its underlay node;
    a broker it does not list is its own underlay node), ``math.inf`` where there is no
    path. One Dijkstra search per source, cached for the ``max_sources`` most recently
    used sources (a 10,000-node underlay costs ~10,000 floats per cached source); on an
    undirected underlay a cached search from b answers a -> b as well. Each link asks
    once, when it opens."""
    return UnderlayLatency(underlay, weight=weight, default_ms=default_ms, host_of=host_of,
                           max_sources=max_sources)


def link_number(key: str, value: Any, lo: float, hi: float) -> float:
    """``value`` as a float if it is a number in [lo, hi], else ``ValueError`` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ValueError(f"link attribute {key}={value!r} outside [{lo}, {hi}]")
    return float(value)


def fixed_links(overlay: nx.Graph, defaults: tuple[float | None, float, float]) -> list[FixedLink]:
    """Both directions of every overlay edge but self-loops, sorted; an edge's missing
    ``bw_mbps``, ``delay_ms`` and ``loss_pct`` take ``defaults`` (in that order)."""
    bw_default, delay_default, loss_default = defaults
    directed: list[FixedLink] = []
    for a, b, data in overlay.edges(data=True):
        if a == b:
            continue
        bw = data.get("bw_mbps", bw_default)
        if bw is not None:
            bw = link_number("bw_mbps", bw, 1e-9, math.inf)
        delay = link_number("delay_ms", data.get("delay_ms", delay_default), 0.0, math.inf)
        loss = link_number("loss_pct", data.get("loss_pct", loss_default), 0.0, 100.0)
        directed.append((a, b, bw, delay, loss))
        directed.append((b, a, bw, delay, loss))
    directed.sort()
    return directed


def reserve_nic(busy: list[tuple[float, float]], ready: float, busy_s: float,
                now: float) -> float:
    """Reserve a NIC, whose reservations ``busy`` lists as (start, end) in time order, for
    ``busy_s`` in its earliest idle interval from ``ready`` on (updating ``busy``; see NICs
    in docs/design/simulator.md); the reservation's start.

    Reservations that touch are kept as one interval: a burst of frames queued at
    one instant is then one entry, not a list scanned once per frame."""
    # Reservations are disjoint and in order, so their ends are too: those over by
    # now can hold nothing up, and the search starts at the first that ends after
    # ready (found by bisection: a peer reporting its load to a thousand
    # neighbours holds as many reservations).
    if busy and busy[0][1] <= now:
        if busy[-1][1] <= now:  # all over (most frames: the NIC idle since the last)
            busy.clear()
        else:
            del busy[:bisect.bisect_right(busy, now, key=_end)]
    if not busy or busy[-1][1] < ready:  # after every reservation, touching none
        busy.append((ready, ready + busy_s))
        return ready
    start, pos = ready, len(busy)
    for i in range(bisect.bisect_right(busy, ready, key=_end), len(busy)):
        s, e = busy[i]
        if s >= start + busy_s:
            pos = i
            break
        start = e
    end = start + busy_s
    if pos > 0 and busy[pos - 1][1] == start:  # touches the one before: extend it
        pos -= 1
        start_run = busy[pos][0]
        if pos + 1 < len(busy) and busy[pos + 1][0] == end:  # and the one after
            end = busy.pop(pos + 1)[1]
        busy[pos] = (start_run, end)
    elif pos < len(busy) and busy[pos][0] == end:  # touches the one after
        busy[pos] = (start, busy[pos][1])
    else:
        busy.insert(pos, (start, end))
    return start
