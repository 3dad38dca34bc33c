"""Meghdoot's summary block (Gupta et al., Middleware 2004, §5: Figs. 9–15, Table 1)
from the peers' final records; its figures are :mod:`analysis.meghdoot`'s.

:func:`meghdoot_metrics` reads the ``can_peer`` records the routing core
(:mod:`nodes.cores.meghdoot`, ``MeghdootCore.final_records``) logs for every joined peer
at the end of a run (``ev: record``; the simulator writes them only with per-message logs
on) and the workload (:func:`nodes.workloads.meghdoot.meghdoot_workload`): its PUBLISH
operations are the events (key ``"<origin>:<msg_id>"``, time ``t_s``) and
``meta["membership"]`` maps each peer to its ``[[join_s, leave_s or None], ...]``.
A record names its peer in ``node`` (the log's field).

The block's parts (each reading in full: docs/design/meghdoot-metrics.md):

- **Peers contacted** (Figs. 9–11, M1): per event, the distinct peers contacted, in % of
  the peers live at its publication: a histogram over :data:`CONTACT_BUCKETS_PCT`, the
  shares of events under 5 % and 10 %, mean and p95, ``no_contact``, ``late_contacts`` and
  ``unknown_keys``.
- **Load** (Figs. 12–14, M2): per peer, its share (%) of the messages received since it
  joined; the mean share of each tenth of the peers, most loaded first; ``sum_pct``.
- **Zones** (Table 1, Fig. 15, M3): unique zones, the histogram of replication degrees,
  ``group_mismatches``, ``volume_sum``, neighbour zones and peers per peer.
- **Joins**: the joins that replicated a zone, in bands of the peers live before each.
- **Hops**: routing hops from the origin peer to the point's owner: count, mean, p50, p95,
  max.
- **Tables**: ``missing``, ``stale`` and ``extra`` entries of the neighbour tables, and the
  ``inexact_peers`` (0 everywhere: an exact CAN).
- **Duplicates** and ``handoff_first``, summed over the peers.
- **Repairs** (ours; only when the workload has crashes or leaves, or a peer repaired
  anything): the workload's ``crashes`` and ``leaves``, and the ``can_repairs`` records
  of the peers alive at the end summed (:meth:`nodes.cores.meghdoot_repair.Repair.counts`:
  peers declared failed, zones taken over after a crash and after a leave, subscriptions
  recovered from mirror copies, zones left without an owner, peers that left).

All percentages are in % (0–100); times in seconds.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from nodes.cores.can import zone_digest
from nodes.cores.can_table import abutting as can_abutting
from nodes.cores.meghdoot import bucket_of
from nodes.messages import MsgType
from nodes.metrics.summary import value_stats
from nodes.workloads.ops import Workload

# The paper's x axis of Figs. 9–11 (% of the live peers contacted per event).
CONTACT_BUCKETS_PCT: tuple[tuple[float, float], ...] = (
    (0, 5), (5, 10), (10, 15), (15, 20), (20, 30), (30, 40), (40, 50), (50, 60), (60, 100))
N_GROUPS = 10  # Figs. 12–14: peers ranked by load in groups of 10 %


def bucket_label(lo: float, hi: float) -> str:
    """A bucket's or a group's key in the block, as its figure labels it: ``lo-hi``."""
    return f"{lo:g}-{hi:g}"


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, p50, p95 and max of ``values`` (None each when empty)."""
    return value_stats(values) or dict.fromkeys(("mean", "p50", "p95", "max"))


def _live_counter(membership: Mapping[str, Sequence[Sequence[float | None]]]
                  ) -> Callable[[float], int]:
    """A function of ``t_s`` giving the number of peers live then (join <= t < leave)."""
    joins = sorted(float(j) for spans in membership.values() for j, _ in spans)
    leaves = sorted(float(x) for spans in membership.values() for _, x in spans
                    if x is not None)

    def live(t_s: float) -> int:
        return bisect.bisect_right(joins, t_s) - bisect.bisect_right(leaves, t_s)
    return live


def _contacted(peers: Sequence[Mapping[str, Any]], workload: Workload,
               live: Callable[[float], int]) -> dict[str, Any]:
    events = {f"{op.msg.origin}:{op.msg.msg_id}": op.t_s for op in workload.ops
              if op.msg.type is MsgType.PUBLISH}
    membership = workload.meta.get("membership", {})
    first_join = {p: min(float(j) for j, _ in spans) for p, spans in membership.items() if spans}
    count: Counter[str] = Counter()
    late = unknown = 0
    for r in peers:
        joined = first_join.get(r.get("node"), 0.0)
        for key in set(r.get("contacts", ())):
            if key not in events:
                unknown += 1
                continue
            count[key] += 1
            late += joined > events[key]
    pcts = []
    for key, t_s in events.items():
        n_live = live(t_s)
        if n_live < 1:
            raise ValueError(f"event {key} at {t_s} s: no peer live then (membership)")
        pcts.append(100.0 * count[key] / n_live)
    n = len(pcts)
    hist = Counter(next((i for i, (_, hi) in enumerate(CONTACT_BUCKETS_PCT) if p <= hi),
                        len(CONTACT_BUCKETS_PCT) - 1) for p in pcts)
    stats = _stats(pcts)

    def share(pred: Callable[[float], bool]) -> float | None:
        return 100.0 * sum(1 for p in pcts if pred(p)) / n if n else None

    return {
        "events": n,
        "buckets_pct": {bucket_label(lo, hi): (100.0 * hist[i] / n if n else None)
                        for i, (lo, hi) in enumerate(CONTACT_BUCKETS_PCT)},
        "bucket_rule": "0-5 holds [0, 5], every other bucket (lo, hi]; in % of events",
        "share_under_5_pct": share(lambda p: p < 5.0),
        "share_under_10_pct": share(lambda p: p < 10.0),
        "mean_pct": stats["mean"], "p95_pct": stats["p95"], "max_pct": stats["max"],
        "no_contact": sum(1 for k in events if count[k] == 0),
        "late_contacts": late, "unknown_keys": unknown,
    }


def _load(peers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    widths = {float(r["bucket_s"]) for r in peers}
    if len(widths) > 1:
        raise ValueError(f"peers' records disagree on bucket_s: {sorted(widths)}")
    bucket_s = widths.pop() if widths else None
    totals: Counter[int] = Counter()
    mismatched = 0
    for r in peers:
        own = 0
        for k, c in r.get("buckets", ()):
            totals[int(k)] += int(c)
            own += int(c)
        mismatched += own != int(r["received"])
    keys = sorted(totals)
    suffix = [0] * (len(keys) + 1)  # suffix[i]: messages in buckets keys[i:]
    for i in range(len(keys) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + totals[keys[i]]
    shares = []
    for r in peers:
        start = bucket_of(float(r.get("joined_s") or 0.0), bucket_s) if bucket_s else 0
        since = suffix[bisect.bisect_left(keys, start)]
        shares.append((100.0 * int(r["received"]) / since if since else 0.0, r))
    shares.sort(key=lambda sr: (-sr[0], str(sr[1].get("node", ""))))
    ranked = [s for s, _ in shares]
    n = len(ranked)
    size, extra = divmod(n, N_GROUPS)
    groups: dict[str, float | None] = {}
    sizes = []
    at = 0
    for g in range(N_GROUPS):
        m = size + (g < extra)
        part = ranked[at:at + m]
        at += m
        sizes.append(m)
        groups[bucket_label(100 * g // N_GROUPS, 100 * (g + 1) // N_GROUPS)] = (
            math.fsum(part) / m if m else None)
    return {
        "peers": n, "bucket_s": bucket_s, "messages": suffix[0],
        "deciles_pct": groups, "decile_sizes": sizes,
        "max_pct": ranked[0] if ranked else None, "sum_pct": math.fsum(ranked),
        # Who the most loaded peer is, so a max_pct above the paper's can be traced:
        # a share counts the messages since the peer joined, so a late joiner's
        # share stands on fewer messages.
        "max_peer": _most_loaded(shares[0][1]) if shares else None,
        "received_mismatches": mismatched,
    }


def _most_loaded(r: Mapping[str, Any]) -> dict[str, Any]:
    """The most loaded peer's name, join time (s) and messages received."""
    return {"node": str(r.get("node", "")), "joined_s": float(r.get("joined_s") or 0.0),
            "received": int(r["received"])}


def _zone(r: Mapping[str, Any]) -> tuple:
    """A record's zone as a hashable ``(lo, hi)`` of float tuples."""
    return tuple(tuple(map(float, side)) for side in r["zone"])


def _zones(peers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    holders: dict[tuple, list[str]] = {}
    volume: dict[tuple, float] = {}
    for r in peers:
        z = _zone(r)
        holders.setdefault(z, []).append(str(r.get("node", "")))
        volume.setdefault(z, float(r.get("volume", math.nan)))
    by_degree = Counter(len(h) for h in holders.values())
    group_of = {name: sorted(h) for h in holders.values() for name in h}
    mismatches = sum(1 for r in peers
                     if "group" in r and sorted(r["group"]) != group_of[str(r.get("node", ""))])
    return {
        "unique_zones": len(holders), "peers": len(peers),
        "degree_hist": {str(d): by_degree[d] for d in sorted(by_degree)},
        "max_degree": max(by_degree, default=0),
        "replicated_zones": sum(n for d, n in by_degree.items() if d > 1),
        "group_mismatches": mismatches, "volume_sum": math.fsum(volume.values()),
        "neighbour_zones": _stats([r["neighbours"][0] for r in peers if "neighbours" in r]),
        "neighbour_peers": _stats([r["neighbours"][1] for r in peers if "neighbours" in r]),
    }


def _tables(peers: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    """How far the peers' neighbour tables are from the zones the records hold: per
    entry, ``missing`` (a peer of an abutting zone the table lacks), ``stale`` (listed
    with another zone than it holds) and ``extra`` (listed, not abutting); ``inexact``
    peers have any. None when the records carry no tables (older runs)."""
    if not peers or any("table" not in r for r in peers):
        return None
    zones: dict[tuple, list[str]] = {}
    zone_of: dict[str, tuple] = {}
    for r in peers:
        z = _zone(r)
        zones.setdefault(z, []).append(str(r["node"]))
        zone_of[str(r["node"])] = z
    order = list(zones)
    lo = np.array([z[0] for z in order])
    hi = np.array([z[1] for z in order])
    digest = {z: zone_digest(z) for z in order}
    abutting = {z: [order[j] for j in can_abutting(lo, hi, i)] for i, z in enumerate(order)}
    missing = stale = extra = inexact = 0
    for r in peers:
        table = r["table"]
        want = {q for n in abutting[zone_of[str(r["node"])]] for q in zones[n]}
        gaps = len(want - table.keys())
        wrong = sum(1 for q, d in table.items() if q in want and d != digest[zone_of[q]])
        beyond = sum(1 for q in table if q not in want)
        missing, stale, extra = missing + gaps, stale + wrong, extra + beyond
        inexact += bool(gaps or wrong or beyond)
    return {"inexact_peers": inexact, "missing": missing, "stale": stale, "extra": extra}


def _joins(peers: Sequence[Mapping[str, Any]], live: Callable[[float], int]
           ) -> dict[str, Any]:
    bands: dict[int, Counter[str]] = {}  # decade of the peers live before -> modes
    for r in peers:
        if r.get("joined_as") is not None:
            before = max(1, live(float(r["joined_s"])) - 1)  # the newcomer is live then
            bands.setdefault(len(str(before)) - 1, Counter())[str(r["joined_as"])] += 1
    return {f"{10 ** k}-{10 ** (k + 1) - 1}": {
        "joins": modes.total(), "replicas": modes["replica"],
        "replica_pct": 100.0 * modes["replica"] / modes.total()}
        for k, modes in sorted(bands.items())}


def _hops(hists: Iterable[Sequence[Sequence[int]]]) -> dict[str, Any]:
    merged: Counter[int] = Counter()
    for hist in hists:
        for h, c in hist:
            merged[int(h)] += int(c)
    values = [h for h in sorted(merged) for _ in range(merged[h])]
    return {"count": len(values), **_stats(values)}


REPAIR_COUNTS = ("declared_down", "took_over_crashed", "took_over_left", "recovered",
                 "orphaned", "left")  # a can_repairs record's counts (Repair.counts)


def _repairs(records: Sequence[Mapping[str, Any]], workload: Workload) -> dict[str, Any]:
    """The crashes and leaves the workload made, and what the peers alive at the end
    repaired (their ``can_repairs`` records summed; a peer that crashed took its counts
    with it)."""
    meta = workload.meta
    return {"crashes": len(meta.get("crashes_s", {})), "leaves": len(meta.get("leaves_s", {})),
            **{k: sum(int(r.get(k, 0)) for r in records) for k in REPAIR_COUNTS}}


def meghdoot_metrics(peers: Sequence[Mapping[str, Any]], workload: Workload,
                     repairs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The metrics of docs/design/meghdoot-metrics.md from the ``can_peer`` records ``peers`` (one
    per joined peer), the ``can_repairs`` records ``repairs`` (one per peer that repaired
    anything) and the run's ``workload``; a JSON-able dict. ``repairs`` is a part of it
    when the workload has crashes or leaves, or a peer repaired anything."""
    live = _live_counter(workload.meta.get("membership", {}))
    churn = workload.meta.get("crashes_s") or workload.meta.get("leaves_s")
    return {
        **({"repairs": _repairs(repairs, workload)} if churn or repairs else {}),
        "contacted": _contacted(peers, workload, live),
        "load": _load(peers),
        "zones": _zones(peers),
        "joins_by_peers": _joins(peers, live),
        "hops": {"subscriptions": _hops(r.get("sub_hops", ()) for r in peers),
                 "events": _hops(r.get("event_hops", ()) for r in peers)},
        "duplicates": sum(int(r.get("duplicates", 0)) for r in peers),
        "handoff_first": sum(int(r.get("handoff_first", 0)) for r in peers),
        "tables": _tables(peers),
    }
