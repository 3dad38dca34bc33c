"""Facts of Meghdoot's runs that a reproduction page's whys quote, measured from the run
folders themselves (manifest and summary), so a why that quotes them holds at any scale.

The first event (fields of :func:`first_event_facts`): in a stream that stores every
subscription before its first event (``order`` ``subs_first`` or ``joins_with_events``,
:mod:`nodes.workloads.meghdoot`), the first event is published at step
``n_subscriptions``, and under ``joins_with_events`` no peer has joined yet: the first
peer owns the whole space and is the only one live, so that event contacts every live
peer. A point's ``contacted.max_pct`` is then 100 % whatever the CAN grows to; the
60-100 % bucket counts the few events like it, published while the CAN had few peers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SUBSCRIPTIONS_FIRST = ("subs_first", "joins_with_events")


def _live_at(membership: Mapping[str, Sequence[Sequence[float | None]]], t_s: float) -> int:
    """Peers live at ``t_s`` (join <= t < leave) by the workload's membership."""
    return sum(1 for spans in membership.values() for j, leave in spans
               if float(j) <= t_s and (leave is None or t_s < float(leave)))


def _one_or_range(values: Sequence[float]) -> str:
    """``5`` when every point gives the same figure, ``5 to 6`` otherwise."""
    lo, hi = min(values), max(values)
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f} to {hi:,.0f}"


def first_event_facts(points: Sequence[Any]) -> dict[str, str]:
    """From the points (each with ``manifest`` and ``summaries``) of a Meghdoot
    experiment whose stream stores its subscriptions first: ``first_event_s`` (when the
    first event is published, s), ``first_event_peers`` (peers live then),
    ``first_event_pct`` (the least share of them it contacts, one peer: %),
    ``events_over_60`` (events that contacted over 60 % of the live peers, per point) and
    ``events`` (events per point), as the page prints them; {} for other streams."""
    firsts, lives, over, events = [], [], [], []
    for p in points:
        meta = (p.manifest.get("workload") or {}).get("meta") or {}
        block = (p.summaries.get("meghdoot") or {}).get("meghdoot") or {}
        contacted = block.get("contacted") or {}
        if (meta.get("order") not in SUBSCRIPTIONS_FIRST or "membership" not in meta
                or not contacted.get("events")):
            return {}
        t_s = meta["n_subscriptions"] * meta["step_s"]
        firsts.append(t_s)
        lives.append(_live_at(meta["membership"], t_s))
        over.append(contacted["buckets_pct"]["60-100"] * contacted["events"] / 100.0)
        events.append(contacted["events"])
    if not firsts:
        return {}
    return {"first_event_s": _one_or_range(firsts),
            "first_event_peers": _one_or_range(lives),
            "first_event_pct": f"{100.0 / max(lives):.3g}",
            "events_over_60": _one_or_range([round(v) for v in over]),
            "events": _one_or_range(events)}
