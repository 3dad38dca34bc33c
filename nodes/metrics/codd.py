"""CoDD's summary block (readings §2.5 item 14, §2.7) from the nodes' final records; its
plots with the paper's axes are :mod:`analysis.codd`'s.

Inputs: the ``codd_node`` records (one per consumer, :meth:`nodes.cores.codd.CoddCore.
final_records`) and the root's ``codd_root`` record. Definitions (ours where the paper
uses several denominators, readings 2.5 item 14):

- a node's **overhead** is its spurious documents over the documents it received (a
  node that received none has none); ``overhead.mean`` is the paper's "average overhead
  in system" (the mean over the nodes that received a document, Fig. 14);
  ``overhead.cumulative`` is all spurious over all received (Fig. 13, "(cumulative)");
  ``overhead.interior_mean`` the mean over nodes with children at the end (Figs. 11, 12,
  17 measure "non-leaf nodes"); ``overhead.ranked`` the per-node overheads, highest first
  (Figs. 11, 12, 24, x = node rank);
- a node's **weighted depth** is its documents' mean hop count from the root: its depth
  over time, weighted by the documents it received at each depth (item 15);
  ``depth.mean`` (Fig. 10) and ``depth.ranked`` (Fig. 9, deepest first);
- ``over_time``: per bucket of ``series_docs`` documents, all spurious over all received
  (Fig. 17's "fraction of useless documents" against documents), and the same share over
  the first and the last fifth of the buckets and the last over the first (Fig. 17's
  "decays appreciably toward the end"; ours over every node, the paper's over interior
  nodes with positive overhead);
- ``reorganization``: requests, the root's rounds and decisions (granted, refused, stale;
  "given up": a change that waited on a node that had died), re-joins after failures,
  moves per round with requests (Fig. 21's "moves per reorganization", a round being
  one), the share of a round's requests granted (Fig. 22), and per granted request the
  requester's spurious share after over before (Fig. 18's ratio); with the moves in the
  order they were done (by the last document the old parent had then), the share of them
  that lowered it (ratio below 1) over the first 40 % of the moves and over the later
  60 %, and the later's minus the first's in points (Fig. 18's "the latter 60% of the
  reorganizations are quite successful", the earlier ratios fluctuating);
- ``reorganization.move_effects``, per granted move: the requester's spurious share
  before (the period it asked in) and after, over the period the move fell in
  (``after``, the ratio above) and over that period's documents after the move alone
  (``after_moved``, the paper's "computed for the documents received after the node
  has moved"), with the share of moves that lowered it so; the new parent's share over
  its last period before the subtree came and over the documents after it came, and
  the rise in points; the seconds until a later period's share of the requester was
  back at the share before (``undone_s``: drift undid the gain), and how many moves
  were undone so before the run's end or the requester's next move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodes.metrics.summary import value_stats


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fifths(buckets: Mapping[int, Sequence[int]]) -> dict[str, float | None]:
    """All spurious over all received in the first and the last fifth of the buckets
    (by document order), and the last over the first."""
    keys = sorted(buckets)
    fifth = max(1, len(keys) // 5)

    def share(part: Sequence[int]) -> float | None:
        received = sum(buckets[k][0] for k in part)
        return sum(buckets[k][1] for k in part) / received if received else None

    first, last = share(keys[:fifth]), share(keys[-fifth:])
    return {"first_fifth": first, "last_fifth": last,
            "last_over_first": last / first if first and last is not None else None}


def _successful_pct(ratios: Sequence[float]) -> float | None:
    return 100 * sum(r < 1 for r in ratios) / len(ratios) if ratios else None


def _by_order(moves: Sequence[tuple[float, float]]) -> dict[str, float | None]:
    """Moves ``(order, ratio)``: the successful share of the first 40 % in order and of
    the later 60 %, and the later's minus the first's (points)."""
    ordered = [r for _, r in sorted(moves, key=lambda m: m[0])]
    k = round(0.4 * len(ordered))
    first, later = _successful_pct(ordered[:k]), _successful_pct(ordered[k:])
    return {"successful_first_40_pct": first, "successful_later_60_pct": later,
            "successful_later_minus_first_pts": (later - first if None not in (first, later)
                                                 else None)}


def _move_effects(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``move_effects`` figures of the module docstring."""
    effects = [e for n in nodes for e in n.get("effects", [])]
    adoptions = [a for n in nodes for a in n.get("adoptions", [])]
    moved = [(e[0], e[2]) for e in effects if e[0] and e[2] is not None]
    rise = [100 * (after - before) for before, after in adoptions
            if None not in (before, after)]
    undone = [e[4] for e in effects if e[4] is not None]
    return {
        "moves": len(effects),
        "before": value_stats([e[0] for e in effects]),
        "after": value_stats([e[1] for e in effects]),
        "after_moved": value_stats([a for _, a in moved]),
        "after_moved_below_before_pct": _successful_pct([a / b for b, a in moved]),
        "new_parent_before": value_stats([a[0] for a in adoptions if a[0] is not None]),
        "new_parent_after": value_stats([a[1] for a in adoptions if a[1] is not None]),
        "new_parent_rise_pts": value_stats(rise),
        "undone": len(undone), "undone_s": value_stats(undone)}


def codd_metrics(nodes: Sequence[Mapping[str, Any]], root: Mapping[str, Any] | None
                 ) -> dict[str, Any]:
    """The figures of the module docstring."""
    got = [n for n in nodes if n["received"]]
    overhead = [n["spurious"] / n["received"] for n in got]
    interior = [n["spurious"] / n["received"] for n in got if n["children"]]
    depth = [n["hops_sum"] / n["received"] for n in got]
    received = sum(n["received"] for n in got)
    buckets: dict[int, list[int]] = {}
    for n in nodes:
        for k, recv, spur in n["series"]:
            b = buckets.setdefault(k, [0, 0])
            b[0] += recv
            b[1] += spur
    series_docs = nodes[0]["series_docs"] if nodes else None
    moves = [(order, after / before) for n in nodes for before, after, order in n["ratios"]
             if before]
    ratios = [r for _, r in moves]
    rounds = (root or {}).get("rounds", [])
    decisions = (root or {}).get("decisions", [])
    outcomes = {o: sum(d["outcome"] == o for d in decisions)
                for o in ("granted", "refused", "stale", "given up")}
    granted_by_round: dict[int, int] = {}
    for d in decisions:
        if d["outcome"] == "granted":
            granted_by_round[d["round"]] = granted_by_round.get(d["round"], 0) + 1
    asked = [r for r in rounds if r[1]]
    return {
        "nodes": len(nodes), "nodes_received": len(got),
        "overhead": {"mean": _mean(overhead),
                     "cumulative": sum(n["spurious"] for n in got) / received if received
                     else None,
                     "interior_mean": _mean(interior), "interior_nodes": len(interior),
                     "stats": value_stats(overhead),
                     "ranked": sorted(overhead, reverse=True)},
        "depth": {"mean": _mean(depth), "max": max(depth, default=None),
                  "ranked": sorted(depth, reverse=True)},
        "over_time": {"series_docs": series_docs,
                      "buckets": [[k, b[1] / b[0] if b[0] else None]
                                  for k, b in sorted(buckets.items())],
                      **_fifths(buckets)},
        "documents": {"received": received, "spurious": sum(n["spurious"] for n in got),
                      "delivered": sum(n["delivered"] for n in nodes),
                      "duplicates": sum(n["duplicates"] for n in nodes),
                      "catchup": sum(n["catchup"] for n in nodes),
                      "published": (root or {}).get("published")},
        "reorganization": {
            "requests": sum(n["requests"] for n in nodes),
            "rounds": len(rounds), "rounds_with_requests": len(asked),
            "admitted": sum(r[2] for r in rounds), **outcomes,
            "moves": sum(n["moves"] for n in nodes),
            "moves_per_round": _mean([granted_by_round.get(r[0], 0) for r in asked]),
            "granted_share_per_round": _mean([granted_by_round.get(r[0], 0) / r[1]
                                              for r in asked]),
            "queried_per_search": _mean([d["queried"] for d in decisions
                                         if d["outcome"] in ("granted", "refused")]),
            "rejoins": sum(n.get("rejoins", 0) for n in nodes),
            "ratio": value_stats(ratios), "ratios": ratios,
            "ratio_below_1_pct": _successful_pct(ratios), **_by_order(moves),
            "move_effects": _move_effects(nodes)},
    }
