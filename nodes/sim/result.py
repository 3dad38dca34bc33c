"""What a simulated run produced (:class:`SimResult`) and its summary.json object
(:func:`summarize`), with its ``processing`` block under the processing model
(:func:`processing_figures`)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nodes.metrics.summary import Expected, build_summary, delay_stats_ms
from nodes.sim.deliveries import Deliveries


@dataclass
class SimResult:
    """What one simulated run produced (all of it deterministic for a given seed).

    ``deliveries`` lists, per notification (origin, msg_id), the subscribers it reached in
    delivery order, one entry per delivery (duplicates stay visible; a
    :class:`~nodes.sim.deliveries.Deliveries`, 4 bytes a delivery). ``ims_by_type``
    counts inter-broker messages (Send actions) by type name. ``delays_s`` has samples
    per kind (``notification``: one per delivery; ``advertisement`` and
    ``subscription``: one per propagated message). ``table_sizes`` lists, per table kind,
    one size per broker in sorted broker order. ``events`` counts client operations,
    arrivals and timers processed; ``end_s`` is the time of the last of them.
    ``counters`` maps each broker whose core counts (``counters()``) to its counters.
    """

    algorithm: str
    published: int
    deliveries: Deliveries
    ims_by_type: dict[str, int]
    delays_s: dict[str, Sequence[float]]
    table_sizes: dict[str, list[int]]
    record_counts: dict[str, int]
    lost: int
    events: int
    end_s: float
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    # From the first publication's send to the last notification's delivery (seconds), the
    # summary's duration_s in both runtimes; 0 without deliveries.
    span_s: float = 0.0
    # Links opened on demand: directed links that came up (one per `link` record with
    # state up; a connection is two), and dials that failed (`link` state dial_failed).
    links_opened: int = 0
    dials_failed: int = 0
    # Processing model only: each broker's time spent handling messages (s), and per
    # message a broker handled, the time it waited in the broker's input buffer (s).
    busy_s: dict[str, float] = field(default_factory=dict)
    wait_s: Sequence[float] = field(default_factory=lambda: array("d"), repr=False)
    # Per kind (advertisement, subscription), the hops behind each propagation delay
    # sample, in the samples' order (nodes.metrics.summary, ``hops``).
    hops: dict[str, list[int]] = field(default_factory=dict)
    # Each live broker's end-of-run records (kind, fields), as its log ends with them
    # (:func:`nodes.hosting.final_records`); kept with or without logs.
    final: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict,
                                                                repr=False)
    # The one figure that is not deterministic: seconds (time.perf_counter) each core
    # handle of a notification took, the matching delay; left out of comparisons.
    # Doubles, 8 bytes a sample where a list of floats takes 32, the simulator's in a
    # file (nodes.sim.samples): one sample per publication a core handles, some ten
    # million at 10,000 Meghdoot peers.
    matching_s: Sequence[float] = field(default_factory=lambda: array("d"), compare=False,
                                        repr=False)


def summarize(
    result: SimResult,
    expected: Expected,
    *,
    scale: float = 1.0,
) -> dict[str, Any]:
    """The summary.json object of a simulated run against the oracle's ``expected`` (as
    :func:`~nodes.metrics.summary.build_summary` takes it)."""
    summary = build_summary(
        algorithm=result.algorithm,
        runtime="simulated",
        scale=scale,
        published=result.published,
        expected=expected,
        deliveries=result.deliveries,
        ims_by_type=result.ims_by_type,
        delays_s={**result.delays_s, "matching": result.matching_s},
        hops=result.hops,
        table_sizes=result.table_sizes,
        duration_s=result.span_s,
    )
    summary["events"] = result.events
    summary["lost"] = result.lost
    return summary


def processing_figures(result: SimResult) -> dict[str, Any] | None:
    """The summary's ``processing`` block of a run under the processing model (None
    without it): ``wait_ms``, over the messages the brokers handled, the time each waited
    in its broker's input buffer before the broker started on it (the queueing the model
    adds; frames a full window holds back wait in their senders' output queues instead);
    ``busy_s``, each broker's time spent handling messages, mean and max over the brokers,
    and ``busiest``, the broker of the max."""
    if not result.busy_s:
        return None
    busiest = max(sorted(result.busy_s), key=result.busy_s.__getitem__)
    busy = result.busy_s.values()
    return {"wait_ms": delay_stats_ms(result.wait_s),
            "busy_s": {"mean": round(math.fsum(busy) / len(busy), 6),
                       "max": round(result.busy_s[busiest], 6), "busiest": busiest}}
