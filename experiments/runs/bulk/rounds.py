"""What one bulk round produced, from either runtime, and its summary; the rounds of a plan
(every algorithm x subscriber count, and the failure round), whichever runtime runs them.
Definitions of the metrics: :mod:`experiments.runs.bulk`."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.plan import RunPlan
from experiments.progress import log
from nodes.cores import CORES
from nodes.cores.dissemination import TreeFn
from nodes.cores.lbdd import tree_stats
from nodes.metrics.summary import build_summary
from nodes.runfolder import RATES, write_json, write_summary
from nodes.time_left import TimeLeft
from nodes.workloads.bulk import BulkPlan
from nodes.workloads.bulkdata import FIRST_DATA_ID, source_checksum

RECORD_KINDS = ("path", "member_down", "resume", "transfer_complete")


@dataclass
class Observation:
    """One round on one clock (seconds): receipts ``(t, subscriber broker, index)``, DATA
    copies each broker sent ``(t, frame bytes)``, core records ``(t, broker, kind,
    fields)``, the publisher's NIC as ``(t, bytes sent so far)``, and checksums by node."""

    subscribers: tuple[str, ...]
    start_s: float
    receipts: list[tuple[float, str, int]] = field(default_factory=list)
    data_sent: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    ims_by_type: dict[str, int] = field(default_factory=dict)
    records: list[tuple[float, str, str, dict[str, Any]]] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    nic_tx: list[tuple[float, int]] = field(default_factory=list)
    checksums: dict[str, str | None] = field(default_factory=dict)
    killed_s: float | None = None


def round_limit_s(plan: BulkPlan, n_subscribers: int, nic_mbps: float | None,
                   params: Mapping[str, Any], failure: bool) -> float:
    """A generous bound on one round: every copy through the publisher's NIC, or one
    stream after another at the per-stream cap if that is slower, thrice over, plus time
    to detect and repair a failure if there is one."""
    rate_mbps = min(nic_mbps or 1000.0, plan.stream_mbps or math.inf)
    wire_s = n_subscribers * plan.data_bytes * 8 / (rate_mbps * 1e6)
    if not failure:
        return 3 * wire_s + 10.0
    heartbeat_s = float(params.get("heartbeat_s") or 0.5)
    return 3 * wire_s + 4 * float(params.get("timeout_s") or 4 * heartbeat_s) + 10.0



def _series_mbps(events: Sequence[tuple[float, int]], start_s: float, end_s: float,
                 bin_s: float) -> list[float]:
    """Mbit/s per bin of ``bin_s`` from ``start_s`` to ``end_s`` of (t, bytes) events (the
    last bin over its own, possibly shorter, width)."""
    n_bins = max(1, int((end_s - start_s) / bin_s + 0.999999))
    bins = [0] * n_bins
    for t, n_bytes in events:
        if start_s <= t <= end_s:
            bins[min(n_bins - 1, int((t - start_s) / bin_s))] += n_bytes
    widths = [bin_s] * (n_bins - 1) + [max(1e-9, end_s - start_s - (n_bins - 1) * bin_s)]
    return [round(b * 8 / w / 1e6, 3) for b, w in zip(bins, widths, strict=True)]


def _nic_load(obs: Observation, publisher: str, nic_mbps: float | None, end_s: float | None,
              bin_s: float) -> dict[str, Any] | None:
    """The publisher NIC's load (%) over the distribution: the mean, and (from kernel
    counters only) the peak over windows of at least ``bin_s`` between two samples."""
    if not nic_mbps or end_s is None or end_s <= obs.start_s:
        return None
    capacity_bps = nic_mbps * 1e6 / 8
    if not obs.nic_tx:  # the simulator's frames are timed when queued, not on the wire
        sent = sum(b for t, b in obs.data_sent.get(publisher, []) if obs.start_s <= t <= end_s)
        return {"mean_pct": round(100 * sent / ((end_s - obs.start_s) * capacity_bps), 2),
                "peak_pct": None, "source": "DATA frames sent"}
    inside = [(t, b) for t, b in obs.nic_tx if obs.start_s <= t <= end_s]
    if len(inside) < 2:
        return None
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    peak = 0.0
    for i, (ta, ba) in enumerate(inside):
        later = next(((t, b) for t, b in inside[i + 1:] if t - ta >= bin_s), None)
        if later is not None:
            peak = max(peak, (later[1] - ba) / (later[0] - ta))
    return {"mean_pct": round(100 * (b1 - b0) / ((t1 - t0) * capacity_bps), 2),
            "peak_pct": round(100 * max(peak, (b1 - b0) / (t1 - t0)) / capacity_bps, 2),
            "source": "kernel counters"}


def _last_parents(obs: Observation, before_s: float) -> dict[str, str | None]:
    """Each agent's parent in its last ``path`` record before ``before_s``."""
    parents: dict[str, str | None] = {}
    for t, broker, kind, f in obs.records:
        if kind == "path" and t < before_s:
            parents[broker] = f["parent"]
    return parents


def _failure_report(obs: Observation, victim: str, survivors: Sequence[str]) -> dict[str, Any]:
    assert obs.killed_s is not None
    kill = obs.killed_s
    before = _last_parents(obs, kill)
    orphans = sorted(b for b in survivors if before.get(b) == victim)
    detected = [t - kill for t, b, kind, f in obs.records
                if kind == "member_down" and f["agent"] == victim and b in survivors]
    repath = {b: min((t for t, x, kind, _ in obs.records
                      if kind == "path" and x == b and t >= kill), default=None)
              for b in orphans}
    resumed = {}
    for b in orphans:
        after = [t for t, sub, _ in obs.receipts if sub == b and repath[b] is not None
                 and t >= repath[b]]
        resumed[b] = min(after) - kill if after else None
    resumes = [{"t_s": round(t - kill, 6), "parent": b, "child": f["child"],
                "child_has": f["child_has"], "to_send": f["to_send"]}
               for t, b, kind, f in obs.records
               if kind == "resume" and t >= kill and f["child"] in orphans]
    repair = list(resumed.values())
    return {
        "victim": victim,
        "killed_after_start_s": round(kill - obs.start_s, 6),
        "detected_first_s": round(min(detected), 6) if detected else None,
        "detected_last_s": round(max(detected), 6) if detected else None,
        "detected_by": len({b for t, b, kind, f in obs.records if kind == "member_down"
                            and f["agent"] == victim and b in survivors}),
        "orphans": orphans,
        "repair_s": (round(max(repair), 6) if repair and None not in repair else None),
        "resumes": resumes,
        "slices_received_twice": sum(obs.counters.get(b, {}).get("slices_duplicate", 0)
                                     for b in survivors),
    }


def round_summary(obs: Observation, plan: BulkPlan, algorithm: str, runtime: str,
                  scale: float, ips: Mapping[str, str], nic_mbps: float | None,
                  victim: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary.json of one round (DESIGN.md's keys plus the bulk figures), and its rate
    series (``rates.json``)."""
    n_slices = plan.n_slices
    survivors = [b for b in obs.subscribers if b != victim]
    pub = plan.publisher_client
    keys = [(pub, FIRST_DATA_ID + i) for i in range(n_slices)]
    expected = dict.fromkeys(keys, frozenset(plan.client_of(b) for b in survivors))
    deliveries: dict[tuple[str, int], list[str]] = defaultdict(list)
    seen: dict[str, set[int]] = defaultdict(set)
    done_s: dict[str, float] = {}
    got: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for t, sub, index in sorted(obs.receipts):
        if sub == victim:
            continue
        deliveries[keys[index]].append(plan.client_of(sub))
        if index not in seen[sub]:
            seen[sub].add(index)
            got[sub].append((t, min(plan.slice_bytes, plan.data_bytes - index * plan.slice_bytes)))
            if len(seen[sub]) == n_slices:
                done_s[sub] = t
    complete = all(b in done_s for b in survivors)
    end_s = max(done_s.values()) if complete and done_s else None
    delay_s = None if end_s is None else end_s - obs.start_s
    summary = build_summary(
        algorithm=algorithm, runtime=runtime, scale=scale, published=n_slices,
        expected=expected, deliveries=deliveries, ims_by_type=obs.ims_by_type,
        delays_s={"notification": [t - obs.start_s for t, sub, _ in obs.receipts
                                   if sub != victim]},
        hops={}, table_sizes={}, duration_s=delay_s or 0.0)
    copies = {b: len(sent) / n_slices for b, sent in sorted(obs.data_sent.items())}
    source_ip = ips[plan.publisher]
    tree_fn: TreeFn = CORES[algorithm].factory.tree
    want = tree_fn(source_ip, sorted(ips[b] for b in survivors))
    final = _last_parents(obs, float("inf"))
    built = {ips[b]: ips[p] for b in survivors if (p := final.get(b)) is not None}
    summary.update({
        "publisher": plan.publisher, "subscribers": len(obs.subscribers),
        "data_bytes": plan.data_bytes, "slice_bytes": plan.slice_bytes, "n_slices": n_slices,
        "complete": complete,
        "distribution_delay_s": None if delay_s is None else round(delay_s, 6),
        "rate_mbps": {b: round(plan.data_bytes * 8 / (done_s[b] - obs.start_s) / 1e6, 3)
                      for b in survivors if b in done_s},
        "publisher_nic": _nic_load(obs, plan.publisher, nic_mbps, end_s, plan.rate_bin_s),
        "contribution": {b: round(c / len(obs.subscribers), 6) for b, c in copies.items()},
        "copies_sent": {b: round(c, 6) for b, c in copies.items()},
        "counters": obs.counters,
        "tree": {b: final.get(b) for b in survivors},
        "tree_as_computed": built == want,
        "tree_stats": tree_stats(source_ip, want) if want else None,
    })
    if obs.checksums:
        expected_sum = source_checksum(plan.data_bytes, plan.slice_bytes, plan.seed)
        summary["checksum"] = expected_sum
        summary["checksums_ok"] = all(obs.checksums.get(b) == expected_sum
                                      for b in [plan.publisher, *survivors])
    if victim is not None:
        summary["failure"] = _failure_report(obs, victim, survivors)
    rates = {"bin_s": plan.rate_bin_s, "start_s": obs.start_s, "mbps": {
        b: _series_mbps(got[b], obs.start_s, end_s or max(t for t, _ in got[b]),
                        plan.rate_bin_s) for b in survivors if got[b]}}
    return summary, rates


def _by_subscribers(row: Mapping[str, Any]) -> dict[str, Any]:
    rates = list(row["rate_mbps"].values())
    nic = row["publisher_nic"] or {}
    return {"subscribers": row["subscribers"], "complete": row["complete"],
            "distribution_delay_s": row["distribution_delay_s"],
            "rate_mbps_mean": round(sum(rates) / len(rates), 3) if rates else None,
            "publisher_nic_mean_pct": nic.get("mean_pct"),
            "publisher_nic_peak_pct": nic.get("peak_pct"),
            "publisher_contribution": row["contribution"].get(row["publisher"], 0.0),
            "missing": row["missing"], "duplicates": row["duplicates"],
            **({"checksums_ok": row["checksums_ok"]} if "checksums_ok" in row else {})}


RoundFn = Callable[[str, Sequence[str], Path, float | None], tuple[Observation, float | None]]
"""``(algorithm, subscribers, out_dir, kill_after_s) -> (observation, nic_mbps)``."""


def run_rounds(run_plan: RunPlan, ips: Mapping[str, str], runtime: str,
               round_fn: RoundFn, out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every algorithm x subscriber count (and the failure round) of the plan: one folder
    per round with summary.json and rates.json; per algorithm a summary.json whose top
    level is the largest round's, with ``by_subscribers`` and ``failure`` added."""
    summaries = {}
    plan = run_plan.bulk
    assert plan is not None
    algorithms = [a.name for a in run_plan.algorithms]
    scale = run_plan.spec.scale
    failure = plan.failure
    failing = failure.get("algorithms", algorithms) if failure else []
    # Rounds are counted alike: the rounds done so far set the pace.
    progress = TimeLeft(f"{run_plan.name} rounds",
                        [(f"{a} n={n}", 1.0) for a in algorithms for n in plan.counts]
                        + [(f"{a} failure", 1.0) for a in algorithms if a in failing],
                        log, seconds=False)
    for algorithm in algorithms:
        rows = []
        for n in plan.counts:
            progress.start()
            subs = plan.others[:n]
            folder = out_dir / algorithm / f"n{n:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            obs, nic = round_fn(algorithm, subs, folder, None)
            row, rates = round_summary(obs, plan, algorithm, runtime, scale, ips, nic)
            write_summary(folder, row)
            write_json(folder / RATES, rates)
            log(f"{algorithm} n={n}: distribution delay {row['distribution_delay_s']} s, "
                f"publisher NIC {row['publisher_nic']}, missing {row['missing']}, "
                f"duplicates {row['duplicates']}")
            rows.append(row)
            progress.finish()
        top = dict(rows[-1])
        top["by_subscribers"] = [_by_subscribers(r) for r in rows]
        if failure and algorithm in failing:
            progress.start()
            delay = top["distribution_delay_s"] or 0.0
            after_s = float(failure.get("at_s", failure.get("at_fraction", 0.0) * delay))
            folder = out_dir / algorithm / "failure"
            folder.mkdir(parents=True, exist_ok=True)
            subs = plan.others[: max(plan.counts)]
            obs, nic = round_fn(algorithm, subs, folder, after_s)
            row, rates = round_summary(obs, plan, algorithm, runtime, scale, ips, nic,
                                       victim=failure["victim"])
            write_summary(folder, row)
            write_json(folder / RATES, rates)
            top["failure"] = {**row["failure"], "complete": row["complete"],
                              "missing": row["missing"], "duplicates": row["duplicates"],
                              "distribution_delay_s": row["distribution_delay_s"],
                              **({"checksums_ok": row["checksums_ok"]}
                                 if "checksums_ok" in row else {})}
            log(f"{algorithm} failure: {top['failure']}")
            progress.finish()
        write_summary(out_dir / algorithm, top)
        summaries[algorithm] = top
    return summaries


