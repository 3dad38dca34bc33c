"""Pure helpers that derive per-broker routing parameters from the whole overlay.

A core sees only its own broker and neighbours; anything that needs the whole overlay
(a spanning tree, SCOT clusters, ...) is computed once by the host from the overlay's
edge list with these helpers and handed to each core in its ``params``. Both runtimes
call the same helpers, so both build the same trees.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


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
