"""Benchmark: notifications matched per second, SubscriptionIndex beside a numpy scan.

For each subscription workload mode (Meghdoot's templates; OctopiA's 2 % selectivity),
one stock workload with ``max(sizes) + churn`` subscribers is generated; each size takes
the first ``size`` subscriptions (they are drawn independently, so a prefix is a sample
of the same mix). Three indexes are filled and timed in the same run on the workload's
own notifications: :class:`~nodes.matching.SubscriptionIndex` (hash buckets for the
filters that pin an attribute, numpy columns for the rest), the numpy scan
(:class:`~nodes.matching.ColumnIndex`: every filter in the columns) and
:class:`~nodes.matching.LinearIndex` (one Python test per filter, the oracle). Rates are
notifications per CPU-second of this process (one core: on a shared machine the others'
work costs wall time, not the figure). The index and the numpy scan take turns in
chunks of ``_CHUNK`` notifications (A/B, then B/A) and each rate is the median over its
chunks, so their ratio is the figure a shared machine moves least.
The linear scan gets fewer notifications as the index grows, to keep the run short
(about ``n_notifications * 500 / size``, at least 20); the counts are in the result.
Building time (wall) covers the ``add`` calls and the first ``match`` and is not part of
the throughput. Every index's answers on the shared notifications are compared with the
linear scan's, and the comparison is reported.

Churn: the index then matches ``churn`` notifications, each after one ``remove`` of a
live subscription and one ``add`` of a new one (drawn beyond the prefix, so with new
constants); ``churn_per_s`` is that rate, add and remove included.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from nodes.matching import ColumnIndex, LinearIndex, SubscriptionIndex
from nodes.messages import MsgType
from nodes.model import Notification, filter_from_json
from nodes.workloads.stock import MODES, stock_workload

_PUBLISHERS = 10
_LINEAR_MIN_NOTIFICATIONS = 20
_LINEAR_REFERENCE_SIZE = 500  # the size at which the linear scan gets every notification
_CHURN = 1000  # remove + add + match rounds, and the subscriptions drawn for them
_CHUNK = 100  # notifications per turn when two indexes alternate

Index = LinearIndex | SubscriptionIndex | ColumnIndex


def _fill(index: Index, subs: Sequence[Any], probe: Notification) -> float:
    t0 = time.perf_counter()
    for sid, f in subs:
        index.add(sid, f)
    index.match(probe)
    return time.perf_counter() - t0


def _throughput(index: Index, notes: Sequence[Notification]) -> tuple[float, list[set[Any]]]:
    """Notifications per CPU-second of this process, and the answers."""
    t0 = time.process_time()
    results = [index.match(n) for n in notes]
    return len(notes) / (time.process_time() - t0), results


def _side_by_side(a: Index, b: Index, notes: Sequence[Notification]
                  ) -> tuple[tuple[float, float], tuple[list[set[Any]], list[set[Any]]]]:
    """Both indexes' notifications per CPU-second, the median over chunks of ``_CHUNK``
    that they take in turns (A/B, then B/A), so that a neighbour's load on a shared
    machine weighs on both alike and a burst of it on neither figure."""
    rates: tuple[list[float], list[float]] = ([], [])
    results: tuple[list[set[Any]], list[set[Any]]] = ([], [])
    for i in range(0, len(notes), _CHUNK):
        chunk = notes[i : i + _CHUNK]
        for k in (0, 1) if i // _CHUNK % 2 == 0 else (1, 0):
            index = (a, b)[k]
            t0 = time.process_time()
            results[k].extend(index.match(n) for n in chunk)
            rates[k].append(len(chunk) / max(time.process_time() - t0, 1e-9))
    return (statistics.median(rates[0]), statistics.median(rates[1])), results


def _churn(index: Index, live: Sequence[Any], fresh: Sequence[Any],
           notes: Sequence[Notification]) -> float:
    """Notifications matched per second, each after one remove and one add."""
    t0 = time.process_time()
    for (old, _), (sid, f), note in zip(live, fresh, notes, strict=False):
        index.remove(old)
        index.add(sid, f)
        index.match(note)
    return min(len(live), len(fresh), len(notes)) / (time.process_time() - t0)


def run(
    sizes: Sequence[int] = (500, 5000, 50000),
    n_notifications: int = 2000,
    seed: int = 0,
    modes: Sequence[str] = MODES,
    churn: int = _CHURN,
) -> dict[str, Any]:
    """Throughput of the three indexes per mode and size; progress goes to stderr."""
    out: dict[str, Any] = {"seed": seed, "sizes": list(sizes), "modes": {},
                           "cores": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
    for mode in modes:
        t0 = time.perf_counter()
        w = stock_workload(
            ["b0"],
            n_publishers=_PUBLISHERS,
            n_subscribers=max(sizes) + churn,
            pubs_per_publisher=max(1, n_notifications // _PUBLISHERS),
            publish_rate_hz=1.0,
            seed=seed,
            mode=mode,
        )
        drawn = [
            (op.client, filter_from_json(op.msg.payload["filter"]))
            for op in w.ops
            if op.msg.type is MsgType.SUBSCRIBE
        ]
        subs, fresh = drawn[: max(sizes)], drawn[max(sizes) :]
        notes = [op.msg.payload["attrs"] for op in w.ops if op.msg.type is MsgType.PUBLISH]
        print(
            f"[bench matching] {mode}: {len(subs)} subscriptions (+{len(fresh)} for churn), "
            f"{len(notes)} notifications, selectivity {w.meta['selectivity']:.4f} "
            f"({time.perf_counter() - t0:.1f} s)",
            file=sys.stderr,
        )
        out["modes"][mode] = {
            "selectivity": w.meta["selectivity"],
            "results": [_row(mode, subs[:size], fresh, notes) for size in sizes],
        }
    out["load_average_end"] = os.getloadavg()[0]
    return out


def _row(mode: str, subs: Sequence[Any], fresh: Sequence[Any],
         notes: Sequence[Notification]) -> dict[str, Any]:
    size = len(subs)
    n_linear = min(
        len(notes), max(_LINEAR_MIN_NOTIFICATIONS, len(notes) * _LINEAR_REFERENCE_SIZE // size)
    )
    index, numpy_scan, linear = SubscriptionIndex(), ColumnIndex(), LinearIndex()
    index_build_s = _fill(index, subs, notes[0])
    numpy_build_s = _fill(numpy_scan, subs, notes[0])
    linear_build_s = _fill(linear, subs, notes[0])
    (index_hz, numpy_hz), (index_results, numpy_results) = _side_by_side(
        index, numpy_scan, notes)
    linear_hz, linear_results = _throughput(linear, notes[:n_linear])
    row = {
        "subscriptions": size,
        "hashed": index.placement()["hashed"],
        "index_notifications": len(notes),
        "linear_notifications": n_linear,
        "index_per_s": round(index_hz, 1),
        "numpy_per_s": round(numpy_hz, 1),
        "linear_per_s": round(linear_hz, 1),
        "index_vs_numpy": round(index_hz / numpy_hz, 2),
        "speedup": round(index_hz / linear_hz, 1),
        "index_build_s": round(index_build_s, 3),
        "numpy_build_s": round(numpy_build_s, 3),
        "linear_build_s": round(linear_build_s, 3),
        "mean_matches": round(sum(map(len, index_results)) / len(notes), 2),
        "agree": index_results[:n_linear] == linear_results
        and numpy_results[:n_linear] == linear_results
        and index_results == numpy_results,
        "churn_per_s": round(_churn(index, subs, fresh, notes), 1),
    }
    print(
        f"[bench matching] {mode} {size:>6} subs: index {index_hz:9.0f}/s, "
        f"numpy {numpy_hz:9.0f}/s (x{row['index_vs_numpy']}), linear {linear_hz:7.0f}/s, "
        f"churn {row['churn_per_s']:8.0f}/s, agree={row['agree']}",
        file=sys.stderr,
    )
    return row


if __name__ == "__main__":
    print(json.dumps(run()))


def format_result(result: dict[str, Any]) -> str:
    """The benchmark as a table: the index, the numpy scan and the linear scan side by
    side in one run, with the ratios, and how the index placed the filters."""
    lines = [
        f"{'mode':9} {'subs':>6} {'hashed':>6} {'index/s':>9} {'numpy/s':>9} {'idx/np':>6} "
        f"{'linear/s':>9} {'idx/lin':>7} {'churn/s':>8}  agree"
    ]
    for mode, m in sorted(result["modes"].items()):
        for r in m["results"]:
            lines.append(
                f"{mode:9} {r['subscriptions']:6} {r['hashed']:6} {r['index_per_s']:9.0f} "
                f"{r['numpy_per_s']:9.0f} {r['index_vs_numpy']:5.2f}x {r['linear_per_s']:9.1f} "
                f"{r['speedup']:6.1f}x {r['churn_per_s']:8.0f}  {r['agree']}"
            )
        lines.append(f"{'':9} measured selectivity {100 * m['selectivity']:.2f} %")
    lines.append(
        "Notifications per CPU-second (index and numpy: medians over chunks taken in turns). "
        "hashed: filters the index keeps in hash buckets (they pin an attribute); the rest "
        "are in its numpy columns, the split measured per mode (nodes/matching/__init__.py)."
        "\nnumpy: every filter in the columns. churn/s: index matches with one remove and "
        f"one add before each. Machine: {result.get('cores')} cores, load average "
        f"{result.get('load_average_start', 0):.1f} at the start, "
        f"{result.get('load_average_end', 0):.1f} at the end."
    )
    return "\n".join(lines)
