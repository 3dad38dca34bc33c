"""Pure helpers that derive per-broker routing parameters from the whole overlay.

A core sees only its own broker and neighbours; anything that needs the whole overlay
(a spanning tree, SCOT clusters, ...) is computed once by the host from the overlay's
edge list with these helpers and handed to each core in its ``params``. Both runtimes
call the same helpers, so both build the same trees.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping


def spanning_tree_neighbours(
    overlay_edges: Iterable[tuple[str, str]],
) -> dict[str, tuple[str, ...]]:
    """Each broker's neighbours in a BFS spanning tree of the overlay.

    Modelling choice: the tree is the breadth-first tree rooted at the lexicographically
    smallest broker, visiting neighbours in sorted order, so it depends only on the edge
    set (not on edge order) and every broker derives the same tree. BFS keeps the tree
    shallow, which keeps flooding delay close to the overlay's shortest paths from the
    root. A disconnected overlay gives a spanning forest: one BFS tree per component,
    each rooted at its smallest broker. Brokers without edges do not appear.
    """
    adjacency: dict[str, set[str]] = {}
    for a, b in overlay_edges:
        if a == b:
            continue  # a self-loop is never a tree edge
        adjacency.setdefault(a, set()).add(b)
        adjacency.setdefault(b, set()).add(a)
    tree: dict[str, list[str]] = {node: [] for node in adjacency}
    seen: set[str] = set()
    for root in sorted(adjacency):
        if root in seen:
            continue
        seen.add(root)
        frontier = deque([root])
        while frontier:
            node = frontier.popleft()
            for nb in sorted(adjacency[node]):
                if nb not in seen:
                    seen.add(nb)
                    tree[node].append(nb)
                    tree[nb].append(node)
                    frontier.append(nb)
    return {node: tuple(sorted(nbs)) for node, nbs in sorted(tree.items())}


def latency_mst(
    servers: Iterable[str], latency_ms: Mapping[str, Mapping[str, float]],
) -> list[tuple[str, str]]:
    """The edges ``(a, b)``, ``a < b``, of a minimum spanning tree of ``servers`` by
    latency (ms): Kruskal's algorithm, ties broken by the pair's names.

    Kyra's routing trees and the multicast baseline's group trees are "minimum spanning
    trees (MST)" by latency over their servers (Kyra §III-A). Taking the pairs in order
    of ``(latency, a, b)`` makes the tree a function of the matrix alone, so every
    broker's host derives the same one. An unreachable pair (``math.inf``) is never a
    tree edge, so servers with no finite path give a spanning forest. Sorted edges.
    Cost: O(n² log n) for n servers (1,000 servers: about a second).
    """
    names = sorted(set(servers))
    pairs = sorted((latency_ms[a][b], a, b) for i, a in enumerate(names)
                   for b in names[i + 1:] if math.isfinite(latency_ms[a][b]))
    parent = {s: s for s in names}

    def root(s: str) -> str:
        while parent[s] != s:
            parent[s] = parent[parent[s]]  # path halving keeps the finds short
            s = parent[s]
        return s

    edges: list[tuple[str, str]] = []
    for _, a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
            edges.append((a, b))
            if len(edges) == len(names) - 1:
                break
    return sorted(edges)


def tree_neighbours(edges: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Each node's neighbours (sorted) in the tree given by its edges."""
    out: dict[str, list[str]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
        out.setdefault(b, []).append(a)
    return {node: tuple(sorted(nbs)) for node, nbs in sorted(out.items())}
