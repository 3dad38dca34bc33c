"""Kyra's server cliques: servers grouped by network proximity (pure; no I/O, no RNG).

Kyra (paper §III, Fig. 5) groups the servers into *cliques* by hierarchical agglomerative
clustering with complete linkage: "the distance between two cliques is defined as the
furthest distance between any pair of servers in the two cliques". The host calls
:func:`server_cliques` once on the underlay latency matrix when it derives a Kyra core's
params, so every server sees the same cliques.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Mapping
from numbers import Integral, Real
from typing import TYPE_CHECKING

# numpy is imported in the functions that use it: every broker process imports every
# core (nodes.cores), and numpy's import took 0.15 of a broker's 0.24 CPU-s of
# start-up on the 2-core machines, for cores that never call it.
if TYPE_CHECKING:  # annotations only
    import numpy as np

# Two latencies a and b count as the same figure (a symmetric matrix) when they differ by
# at most this much, relative or absolute (ms): a shortest-path latency summed from each
# end may differ in its last bits.
SYMMETRY_TOLERANCE = 1e-9


def server_cliques(
    latency_ms: Mapping[str, Mapping[str, float]],
    max_distance_ms: float,
    max_size: int,
) -> list[list[str]]:
    """Kyra's server cliques: the paper's Fig. 5, with its endless loop fixed.

    ``latency_ms[a][b]`` is the latency (ms) between servers ``a`` and ``b``; every row
    must name exactly the servers of the outer mapping (the diagonal is not used), entries
    are non-negative (``math.inf``: unreachable; such a pair never shares a clique, even
    when ``max_distance_ms`` is ``math.inf``), and the matrix is symmetric up to
    :data:`SYMMETRY_TOLERANCE` (the larger of the two figures is used). A malformed
    matrix, a negative ``max_distance_ms`` or a ``max_size`` below 1 is a ValueError.

    The procedure (Fig. 5): start with one clique per server; take the pairs of cliques
    in increasing complete-linkage distance (the largest latency between a server of one
    and a server of the other); stop at the first pair farther than ``max_distance_ms``;
    merge the first pair whose sizes add up to at most ``max_size``, and start over. The
    paper's pseudocode loops forever when every remaining pair within ``max_distance_ms``
    is too big to merge (its ``for`` ends without merging or returning, and its ``while``
    runs again); here a pass that merges nothing also stops.

    Ties in distance are broken by the pair's names: a clique's name is its smallest
    server name (its first member), and of two pairs at the same distance the one whose
    smaller name sorts first goes first, then the one whose larger name does. The result
    depends only on the matrix, not on the mappings' order.

    Returns the cliques as sorted lists of server names, sorted by their first member.

    Why by hand: a general library's complete-linkage clustering builds the whole
    dendrogram (every pair eventually merges) and has no size bound; cutting it at
    ``max_distance_ms`` gives clusters that may be too big, and a size-blocked merge
    changes all later distances, so the bound cannot be applied afterwards. (Routing
    cores may import only the standard library and numpy, too.)

    Cost: O(n²) memory, O(n² log n) time (1,000 servers: well under a second when the
    bounds keep cliques small, about a second when everything merges). Complete linkage
    only grows distances when cliques merge (Lance-Williams: d(k, i+j) = max(d(k, i),
    d(k, j))), and sizes only grow, so a pair farther than the bound or too big never
    becomes mergeable again. So one heap of the pairs within both bounds replaces the
    paper's passes: the first entry popped that is current and fits is the pair Fig. 5
    would merge, a merge updates one row of the distance matrix and pushes the pairs
    whose distance grew, stale entries are skipped, and an empty heap is Fig. 5's stop.
    """
    servers, dist = _matrix(latency_ms)
    limit = _max_distance(max_distance_ms)
    size_bound = _max_size(max_size)
    rank, top = _ranks(dist, limit)
    members = _merge(rank, top, size_bound)
    cliques = [sorted(servers[i] for i in m) for m in members if m]
    return sorted(cliques, key=operator.itemgetter(0))


def _ranks(dist: np.ndarray, limit: float) -> tuple[np.ndarray, int]:
    """The latencies' ranks (equal latencies, equal ranks) and ``top``, the highest rank
    within ``limit`` ms (unreachable pairs and pairs beyond the bound rank above it).

    Complete linkage only ever takes maxima of the original latencies, so the merging
    runs on their ranks."""
    import numpy as np
    n = len(dist)
    values, inverse = np.unique(dist, return_inverse=True)
    rank = inverse.reshape(n, n).astype(np.int64)
    top = int(np.searchsorted(values, limit, side="right")) - 1
    if top >= 0 and not np.isfinite(values[top]):
        top -= 1
    return rank, top


def _merge(rank: np.ndarray, top: int, size_bound: int) -> list[list[int]]:
    """Merge the cliques (one per server at first) by the heap of :func:`server_cliques`,
    updating ``rank`` in place; each slot's members (empty for a clique merged away).

    A heap entry is one integer, (rank * n + a) * n + b for the pair of cliques a < b,
    which orders by distance, then by a, then by b (below n**4, so int64 holds it up to
    ~55,000 servers, far past what O(n²) memory allows). A clique lives in the slot of its
    smallest server (servers are in sorted order), so a slot number is also the clique's
    name for tie-breaking: merging b into a < b keeps the merged clique's name in slot a.
    """
    import numpy as np
    n = len(rank)
    alive = np.ones(n, dtype=bool)
    size = np.ones(n, dtype=np.int64)
    members: list[list[int]] = [[i] for i in range(n)]
    heap: list[int] = []
    if size_bound >= 2:
        a_s, b_s = np.nonzero(np.triu(rank <= top, 1))
        heap = ((rank[a_s, b_s] * n + a_s) * n + b_s).tolist()
        heapq.heapify(heap)
    # Invariant: for every pair a < b of live cliques within both bounds, the heap holds
    # the pair's key with its current rank. An entry is stale when a clique is gone or
    # the pair's distance grew; stale entries are skipped.
    n2 = n * n
    while heap:
        r, ab = divmod(heapq.heappop(heap), n2)
        a, b = divmod(ab, n)
        if not (alive[a] and alive[b]) or rank[a, b] != r:
            continue
        if size[a] + size[b] > size_bound:
            continue  # blocked now, so blocked for good: sizes only grow
        members[a].extend(members[b])
        members[b] = []
        alive[b] = False
        size[a] += size[b]
        new = np.maximum(rank[a], rank[b])  # Lance-Williams for complete linkage
        grew = new != rank[a]
        rank[a] = new
        rank[:, a] = new
        mask = alive & grew & (new <= top) & (size + size[a] <= size_bound)
        mask[a] = False  # the diagonal is not a pair
        fresh = np.flatnonzero(mask)
        lo = np.minimum(fresh, a)
        hi = np.maximum(fresh, a)
        for key in ((new[fresh] * n + lo) * n + hi).tolist():
            heapq.heappush(heap, key)
    return members


def _matrix(latency_ms: Mapping[str, Mapping[str, float]]) -> tuple[list[str], np.ndarray]:
    """The servers in sorted order and their symmetric latency matrix (diagonal 0)."""
    import numpy as np
    servers = sorted(latency_ms)
    names = set(servers)
    n = len(servers)
    dist = np.zeros((n, n))
    for i, a in enumerate(servers):
        row = latency_ms[a]
        if row.keys() != names:
            missing = sorted(names - row.keys())[:3]
            extra = sorted(map(repr, row.keys() - names))[:3]
            raise ValueError(f"latency matrix is not square: row {a!r} "
                             + (f"lacks {missing}" if missing else f"has extra {extra}"))
        values = [row[b] for b in servers]
        if not {type(v) for v in values} <= {float, int}:  # the common case, checked fast
            for b, v in zip(servers, values, strict=True):
                if isinstance(v, bool) or not isinstance(v, Real):
                    raise ValueError(f"latency {a!r} -> {b!r} = {v!r} is not a number >= 0")
        try:
            dist[i] = values
        except OverflowError:
            raise ValueError(f"latency row {a!r} has a number too large for a float") from None
        bad_row = ~(dist[i] >= 0)  # negative or NaN
        if bad_row.any():
            b = servers[int(np.flatnonzero(bad_row)[0])]
            raise ValueError(f"latency {a!r} -> {b!r} = {row[b]!r} is not a number >= 0")
    with np.errstate(invalid="ignore"):  # inf - inf
        gap = np.abs(dist - dist.T)
        bad = (gap > SYMMETRY_TOLERANCE * np.maximum(1.0, np.maximum(dist, dist.T))) | (
            np.isinf(dist) != np.isinf(dist.T))
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"latency matrix is not symmetric: {servers[i]!r} -> {servers[j]!r} "
                         f"= {float(dist[i, j])!r} but {servers[j]!r} -> {servers[i]!r} "
                         f"= {float(dist[j, i])!r}")
    dist = np.maximum(dist, dist.T)
    np.fill_diagonal(dist, 0.0)
    return servers, dist


def _max_distance(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value >= 0:
        raise ValueError(f"max_distance_ms={value!r} is not a number >= 0")
    return float(value)


def _max_size(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"max_size={value!r} is not an integer >= 1")
    return int(value)
