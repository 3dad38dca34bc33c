"""What a runner adds to an algorithm's summary from its logs, and how summaries print."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from experiments.plan import RunPlan
from nodes.logs import COMMON_FIELDS, Ev, iter_jsonl
from nodes.metrics.blocks import BLOCKS, summary_block
from nodes.metrics.burst import burst_metrics
from nodes.metrics.kyra import routing_load_from_logs
from nodes.metrics.log_summary import link_notifications


def summed_counters(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The cores' plain counts summed over the brokers, by name: ``records`` are the
    brokers' end-of-run ``counters`` records (:func:`nodes.hosting.final_records`), from
    the logs or from the simulator's result, so a run with and without per-message logs
    gives the same sums. A broker that died logged none, and counts for none."""
    total: Counter[str] = Counter()
    for r in records:
        total.update({k: v for k, v in r.items()
                      if k not in COMMON_FIELDS and type(v) is int})
    return dict(sorted(total.items()))


def record_extras(records: Iterable[Mapping[str, Any]], plan: RunPlan) -> dict[str, Any]:
    """Summary figures from the brokers' end-of-run records (each with its ``kind``), read
    from the logs or from the simulator's result alike: the cores' counters summed over
    the brokers (:func:`summed_counters`, when the core counts) and the workload kind's
    summary block (:func:`nodes.metrics.blocks.summary_block`: Meghdoot's from its peers'
    ``can_peer`` records, CoDD's from its nodes' ``codd_node`` and ``codd_root``)."""
    extras: dict[str, Any] = {}
    block = plan.kind.block if plan.kind is not None else None
    wanted = ("counters", *(BLOCKS[block].records if block is not None else ()))
    records = [r for r in records if r.get("kind") in wanted]  # the logs hold many more
    counters = [r for r in records if r["kind"] == "counters"]
    if counters:
        extras["counters"] = summed_counters(counters)
    if block is not None and plan.workload is not None:
        extras[block] = summary_block(block, records, plan.workload)
    return extras


def log_extras(out_dir: Path, plan: RunPlan) -> dict[str, Any]:
    """Summary figures either runtime reads from one algorithm's logs in ``out_dir``: the
    figures of the brokers' end-of-run records (:func:`record_extras`), the notifications
    on the links the plan's ``link_schedule`` changes, the burst's metrics
    (:func:`nodes.metrics.burst.burst_metrics`) when the workload has one, and the Kyra paper's
    routing load (:func:`nodes.metrics.kyra.routing_load`) when the workload kind's
    ``routing_load`` asks for it (the Kyra example; a stock workload on a modelled
    underlay, ``transit-stub``)."""
    extras = record_extras((r for b in plan.overlay.nodes if (out_dir / f"{b}.jsonl").exists()
                            for r in iter_jsonl(out_dir / f"{b}.jsonl", Ev.RECORD)), plan)
    if plan.link_schedule:
        extras["scheduled_link_notifications"] = link_notifications(
            out_dir, [(c.a, c.b) for c in plan.link_schedule])
    if plan.workload is not None and "burst" in plan.workload.meta:
        extras["burst"] = burst_metrics(out_dir, plan.workload, plan.overlay)
    load = plan.kind.routing_load if plan.kind is not None else "never"
    if load == "always" or (load == "underlay" and "latency_ms" in plan.graph.graph):
        extras["routing_load"] = routing_load_from_logs(out_dir, plan.graph, plan.overlay.nodes)
    return extras


def summary_table(summaries: dict[str, dict[str, Any]]) -> str:
    """A short human-readable table of per-algorithm summaries: deliveries, lost
    (expected but never delivered), duplicates, inter-broker messages, notification
    delays, and, when the spec scheduled link changes, the notification copies sent on
    those links."""
    throttled = any("scheduled_link_notifications" in s for s in summaries.values())
    head = ("algorithm     delivered  expected   lost  dup      IMs   p50_ms   p95_ms   max_ms"
            + ("  on_changed_links" if throttled else ""))
    rows = [head]
    for name, s in summaries.items():
        d = (s.get("delay_ms") or {}).get("notification") or {}
        row = (f"{name:13} {s['delivered']:9} {s['expected_deliveries']:9} {s['missing']:6} "
               f"{s['duplicates']:4} {s['ims_total']:8} {d.get('p50', float('nan')):8.2f} "
               f"{d.get('p95', float('nan')):8.2f} {d.get('max', float('nan')):8.2f}")
        if throttled:
            row += f"  {sum((s.get('scheduled_link_notifications') or {}).values()):16}"
        rows.append(row)
    return "\n".join(rows)
