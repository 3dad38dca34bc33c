"""The Kyra paper's worked example as a topology: eight servers, every pair linked.

The paper gives no latencies for its Figs. 1-4. Ours are chosen so that its clique
clustering (Fig. 5, clique distance 5 ms, 3 servers at most) finds Fig. 4's cliques
{A, B, C}, {D, E}, {F, G, H} and the latency MSTs are Fig. 4's routing trees: 1 ms inside
a clique, 10 ms on the six inter-clique pairs that are tree edges (A-D, D-F, B-E, B-G,
C-E, C-H), and on every other pair the shortest path over those (so the matrix is a
metric: no detour is faster than a direct link). Fig. 2's Siena tree is not this
matrix's MST (D-E, 1 ms, would be in it), so a Siena run of the example takes Fig. 2's
tree as its overlay (:data:`FIG2_TREE`, topology ``overlay``).
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from topologies.links import UNSHAPED, LinkParams
from topologies.overlay import overlay_as_links_graph

FIG4_CLIQUES = (("A", "B", "C"), ("D", "E"), ("F", "G", "H"))
FIG4_TREE_PAIRS = (("A", "D"), ("D", "F"), ("B", "E"), ("B", "G"), ("C", "E"), ("C", "H"))
FIG2_TREE = (("A", "C"), ("B", "C"), ("C", "D"), ("C", "E"), ("E", "F"), ("F", "G"),
             ("G", "H"))
INTRA_CLIQUE_MS = 1.0
TREE_PAIR_MS = 10.0


def example_latency() -> dict[str, dict[str, float]]:
    """One-way latency (ms) between the example's servers, by figure letter."""
    g = nx.Graph()
    for clique in FIG4_CLIQUES:
        g.add_edges_from(((a, b) for i, a in enumerate(clique) for b in clique[i + 1:]),
                         ms=INTRA_CLIQUE_MS)
    g.add_edges_from(FIG4_TREE_PAIRS, ms=TREE_PAIR_MS)
    return {a: dict(sorted(d.items())) for a, d in sorted(
        nx.all_pairs_dijkstra_path_length(g, weight="ms"))}


def kyra_example_graph(params: LinkParams = UNSHAPED) -> nx.Graph:
    """Overlay mode, one link per pair of servers (named by lowercase letter), each with
    ``params`` and the example's latency as its delay."""
    latency = example_latency()
    overlay = nx.Graph()
    overlay.add_edges_from((a.lower(), b.lower()) for a in latency for b in latency if a < b)
    g = overlay_as_links_graph(overlay, params, name="kyra-example")
    for u, v, data in g.edges(data=True):
        data["params"] = replace(data["params"], delay_ms=latency[u.upper()][v.upper()])
    g.graph["notes"].append("latencies chosen for the Kyra paper's Figs. 1-4 (the paper "
                            "gives none): 1 ms in a clique, 10 ms on the routing trees' "
                            "inter-clique edges, shortest paths elsewhere")
    return g
