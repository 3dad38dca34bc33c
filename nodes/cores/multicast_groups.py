"""Multicast groups for multicast-based event routing: cells grouped by who wants them (pure).

This is the grouping step of the Kyra paper's second baseline (Kyra §II, "the approach in
[25]"; the reference list is missing from our copy, very likely Riabov et al., ICDCS 2002):
"the event space is partitioned into a limited number of multicast groups. For each group, a
multicast tree is built that spans all servers with subscription for any event in that
group." The host cuts the event space into cells, calls :func:`interest_vectors`,
:func:`forgy_kmeans` and :func:`multicast_groups` once when it derives a multicast core's
params, and builds one tree per group; an event is then multicast on its cell's group.

Why by hand: routing cores may import only the standard library and numpy
(``tests/test_layering.py``), and no clustering library is a dependency. Lloyd's iteration
is a dozen lines here, and writing it out pins what a library would leave open: the Forgy
draw (from a hash of the seed, as every random choice of a core: no random number
generator, so the same on every Python version and platform), the tie-break
and the empty cluster.

Weights (our reading; Kyra's example has none): a cell's event probability enters the
*centroid mean*, not the point. A cluster's centroid is the probability-weighted mean of its
cells' 0/1 vectors, so Lloyd's iteration lowers sum(p_cell * |x_cell - centroid|^2), the
squared mismatch between a cell's interested servers and its group counted per *event*
rather than per cell: a popular cell pulls its group's centroid harder than a rare one. The
alternative the reading proposes, scaling each vector by its probability, mixes "how
likely" into "who wants it": two cells wanted by exactly the same servers, one likely and
one rare, lie far apart and may get different groups (an extra group that saves nothing),
while rare cells with disjoint interest sit together near the origin. With centroid
weights, cells with the same interest vector are always in the same group (equal
distances, same tie-break). A caller who wants the scaled reading passes
``vectors * p[:, None]`` and no weights.

Kyra's Fig. 3 grouping (g0 {5, 8}, g1 {0, 1, 4, 6}, g2 {2, 3, 7, 9}) is not what K-means
gives: event 7 (servers B, F) is nearer g0's centroid (squared distance 1.0) than g2's
(1.5), so the partition is not a fixed point of Lloyd's iteration, and no Forgy start
reaches it, converged or cut short (``tests/test_multicast_groups.py``). The figure
illustrates extraneous traffic; it is not a K-means output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence, Set
from numbers import Integral
from typing import TYPE_CHECKING

# numpy is imported in the functions that use it: every broker process imports every
# core (nodes.cores), and numpy's import took 0.15 of a broker's 0.24 CPU-s of
# start-up on the 2-core machines, for cores that never call it.
if TYPE_CHECKING:  # annotations only
    import numpy as np

# Lloyd iterations when the caller gives none: on the grids we cluster (a few thousand
# cells) the labels settle well before this; the cap only ends a rare cycle between ties.
DEFAULT_ITERATIONS = 100


def interest_vectors(
    cells: Sequence[Hashable],
    servers: Sequence[str],
    wants: Mapping[str, Set[Hashable]],
) -> np.ndarray:
    """Per cell, the 0/1 vector of the servers that want it.

    ``wants[server]`` is the set of cells the server wants: a server wants a cell when one
    of its subscriptions can match an event of that cell (the caller decides that, e.g. a
    filter's bounds overlap the cell). A server missing from ``wants`` wants nothing.

    Returns a float array of shape ``(len(cells), len(servers))``: row ``i`` is cell
    ``cells[i]``, column ``j`` is server ``servers[j]``, 1.0 where the server wants the cell.
    Probabilities do not enter here; they are :func:`forgy_kmeans`'s ``weights`` (the
    module docstring says why). Duplicate cells or servers, a server in ``wants`` that is
    not among ``servers`` and a wanted cell that is not among ``cells`` are ValueErrors.
    """
    import numpy as np
    row = _positions(cells, "cell")
    col = _positions(servers, "server")
    out = np.zeros((len(row), len(col)))
    for server, wanted in wants.items():
        if server not in col:
            raise ValueError(f"wants names server {server!r}, which is not among the servers")
        for cell in wanted:
            out[_position(row, cell, server), col[server]] = 1.0
    return out


def forgy_kmeans(
    vectors: np.ndarray | Sequence[Sequence[float]],
    k: int,
    seed: int | str,
    iterations: int = DEFAULT_ITERATIONS,
    weights: np.ndarray | Sequence[float] | None = None,
) -> list[int]:
    """A cluster label in ``[0, k)`` per row of ``vectors``: Forgy's K-means.

    Forgy's start: the initial centroids are ``k`` cells drawn at random, one after another
    without replacement, by :func:`unit_draw` draws from ``seed``; a cell whose vector equals an
    already drawn one is skipped, so the ``k`` centroids are distinct (two equal centroids
    would leave one cluster empty for ever). Cluster ``i`` starts at the ``i``-th drawn
    cell. Then Lloyd's iteration (:func:`lloyd`) runs for at most ``iterations`` centroid
    updates.

    ``weights`` (one per row, >= 0, not all 0; e.g. each cell's event probability) weight
    the centroid means, not the points or the draw (module docstring). ``None``: every row
    weighs the same.

    ``k`` must be between 1 and the number of distinct rows (a ValueError names that
    number, so a caller asking for G groups can use ``min(G, distinct)``); empty,
    non-2-D or non-finite ``vectors``, a ``seed`` that is not an int or str (``None`` would
    draw from the OS and not repeat) and bad ``iterations`` or ``weights`` are ValueErrors
    too.

    Cost: O(iterations * k * rows * servers) arithmetic, one k-th of it in memory at a time.
    """
    x = _points(vectors)
    w = _weights(weights, len(x))
    distinct = len({tuple(row) for row in x.tolist()})
    if isinstance(k, bool) or not isinstance(k, Integral) or not 1 <= k <= distinct:
        raise ValueError(f"k must be an int from 1 to {distinct} (the distinct vectors), "
                         f"got {k!r}")
    if isinstance(seed, bool) or not isinstance(seed, Integral | str):
        raise ValueError(f"seed must be an int or str, got {seed!r}")
    start = x[_forgy_draw(x, int(k), str(seed if isinstance(seed, str) else int(seed)))]
    return _lloyd(x, start, w, _iterations(iterations))


def lloyd(
    vectors: np.ndarray | Sequence[Sequence[float]],
    centroids: np.ndarray | Sequence[Sequence[float]],
    iterations: int = DEFAULT_ITERATIONS,
    weights: np.ndarray | Sequence[float] | None = None,
) -> list[int]:
    """Lloyd's iteration from the given centroids: a label in ``[0, len(centroids))`` per row.

    Assign every row to its nearest centroid (Euclidean; of equally near centroids the
    lowest index), then repeat at most ``iterations`` times: move every centroid to the
    weighted mean of its rows and assign again; stop early when no label changes. So
    ``iterations=0`` is one assignment to the given centroids. A cluster with no rows, or
    whose rows all weigh 0, keeps its previous centroid. The within-cluster sum of squares
    (weighted) never increases from one iteration to the next.

    ``centroids`` must be a finite 2-D array with at least one row and as many columns as
    ``vectors``; the other arguments are checked as in :func:`forgy_kmeans`.
    """
    x = _points(vectors)
    c = _points(centroids, "centroids")
    if c.shape[1] != x.shape[1]:
        raise ValueError(f"centroids have {c.shape[1]} columns, vectors {x.shape[1]}")
    return _lloyd(x, c, _weights(weights, len(x)), _iterations(iterations))


def multicast_groups(
    labels: Sequence[int],
    cells: Sequence[Hashable],
    wants: Mapping[str, Set[Hashable]],
) -> list[tuple[tuple[Hashable, ...], tuple[str, ...]]]:
    """The multicast groups: ``(cells of the group, servers of the group)`` per cluster.

    ``labels[i]`` is cell ``cells[i]``'s cluster (from :func:`forgy_kmeans`); ``wants`` as
    in :func:`interest_vectors`. A group's servers are every server that wants any of its
    cells (its multicast tree spans them), sorted by name; its cells keep their order in
    ``cells``. A group whose cells nobody wants has no servers: its events go nowhere.

    Groups are ordered by their first cell's position in ``cells``, not by label: a label's
    number only says which cell Forgy drew first, so two runs that find the same partition
    give the same list. Labels with no cell give no group. Mismatched lengths, a label that
    is not an int >= 0, duplicate cells and a wanted cell not among ``cells`` are
    ValueErrors.
    """
    if len(labels) != len(cells):
        raise ValueError(f"{len(labels)} labels for {len(cells)} cells")
    row = _positions(cells, "cell")
    wanted_by: list[set[str]] = [set() for _ in cells]
    for server, wanted in wants.items():
        for cell in wanted:
            wanted_by[_position(row, cell, server)].add(server)
    members: dict[int, list[int]] = {}  # label -> rows, in order of each label's first cell
    for i, label in enumerate(labels):
        if isinstance(label, bool) or not isinstance(label, Integral) or label < 0:
            raise ValueError(f"label of cell {cells[i]!r} must be an int >= 0, got {label!r}")
        members.setdefault(int(label), []).append(i)
    return [(tuple(cells[i] for i in rows), tuple(sorted(set().union(*(wanted_by[i]
                                                                      for i in rows)))))
            for rows in members.values()]


def _lloyd(x: np.ndarray, centroids: np.ndarray, w: np.ndarray, iterations: int) -> list[int]:
    import numpy as np
    c = centroids.copy()
    labels = _nearest(x, c)
    for _ in range(iterations):
        for j in range(len(c)):
            member = labels == j
            total = w[member].sum()
            if total > 0:  # otherwise (empty, or all weight 0) the centroid stays put
                c[j] = (w[member, None] * x[member]).sum(axis=0) / total
        new = _nearest(x, c)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels.tolist()


def _nearest(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    # One centroid at a time, and by subtraction rather than |x|^2 - 2x.c + |c|^2: every row
    # goes through the same arithmetic, so equal rows get equal distances and an exact tie
    # stays a tie (argmin then takes the lowest index), and memory stays rows x servers.
    import numpy as np
    dist = np.empty((len(x), len(c)))
    for j, centroid in enumerate(c):
        dist[:, j] = ((x - centroid) ** 2).sum(axis=1)
    return dist.argmin(axis=1)


def unit_draw(seed: str, i: int) -> float:
    """The ``i``-th draw from ``seed``, uniform on [0, 1): a hash, not a random number
    generator (cores keep no global randomness: tests/test_cores.py)."""
    digest = hashlib.sha256(f"{seed}:{i}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _forgy_draw(x: np.ndarray, k: int, seed: str) -> list[int]:
    """Rows of ``k`` distinct vectors, drawn in order (a partial Fisher-Yates shuffle)."""
    order = list(range(len(x)))
    drawn: list[int] = []
    seen: set[tuple[float, ...]] = set()
    for i in range(len(order)):
        # min(): the product may round up to the top.
        j = min(len(order) - 1, i + int(unit_draw(seed, i) * (len(order) - i)))
        order[i], order[j] = order[j], order[i]
        key = tuple(x[order[i]].tolist())
        if key not in seen:
            seen.add(key)
            drawn.append(order[i])
            if len(drawn) == k:
                break
    return drawn


def _points(vectors: object, name: str = "vectors") -> np.ndarray:
    import numpy as np
    try:
        x = np.asarray(vectors, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 2-D array of numbers ({exc})") from None
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"{name} must be a 2-D array with at least one row, got shape "
                         f"{x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite")
    return x


def _weights(weights: object, n: int) -> np.ndarray:
    import numpy as np
    if weights is None:
        return np.ones(n)
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"weights must be numbers ({exc})") from None
    if w.shape != (n,):
        raise ValueError(f"weights must be one per row ({n}), got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights must be finite, >= 0 and not all 0")
    return w


def _iterations(iterations: object) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, Integral) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    return int(iterations)


def _positions(items: Sequence[Hashable], what: str) -> dict[Hashable, int]:
    out: dict[Hashable, int] = {}
    for i, item in enumerate(items):
        if item in out:
            raise ValueError(f"{what} {item!r} appears twice")
        out[item] = i
    return out


def _position(row: Mapping[Hashable, int], cell: Hashable, server: str) -> int:
    if cell not in row:
        raise ValueError(f"server {server!r} wants cell {cell!r}, which is not among the cells")
    return row[cell]
