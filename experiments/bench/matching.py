"""Benchmark: notifications matched per second, SubscriptionIndex vs LinearIndex.

For each subscription workload mode (Meghdoot's templates; OctopiA's 2 % selectivity),
one stock workload with ``max(sizes)`` subscribers is generated; each size takes the
first ``size`` subscriptions (they are drawn independently, so a prefix is a sample of
the same mix). Both indexes are filled and timed in the same run on the workload's own
notifications. The linear scan gets fewer notifications as the index grows, to keep the
run short (about ``n_notifications * 500 / size``, at least 20); the counts are in the
result. Building time covers the ``add`` calls and the first ``match`` (which builds
:class:`SubscriptionIndex`'s trees) and is not part of the throughput. Both indexes'
answers on the shared notifications are compared, and the comparison is reported.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from nodes.matching import LinearIndex, SubscriptionIndex
from nodes.messages import MsgType
from nodes.model import Notification, filter_from_json
from nodes.workloads.stock import MODES, stock_workload

_PUBLISHERS = 10
_LINEAR_MIN_NOTIFICATIONS = 20
_LINEAR_REFERENCE_SIZE = 500  # the size at which the linear scan gets every notification


def _fill(
    index: LinearIndex | SubscriptionIndex, subs: Sequence[Any], probe: Notification
) -> float:
    t0 = time.perf_counter()
    for sid, f in subs:
        index.add(sid, f)
    index.match(probe)
    return time.perf_counter() - t0


def _throughput(
    index: LinearIndex | SubscriptionIndex, notes: Sequence[Notification]
) -> tuple[float, list[set[Any]]]:
    t0 = time.perf_counter()
    results = [index.match(n) for n in notes]
    return len(notes) / (time.perf_counter() - t0), results


def run(
    sizes: Sequence[int] = (500, 5000, 50000),
    n_notifications: int = 2000,
    seed: int = 0,
    modes: Sequence[str] = MODES,
) -> dict[str, Any]:
    """Throughput of both indexes per mode and size; progress goes to stderr."""
    out: dict[str, Any] = {"seed": seed, "sizes": list(sizes), "modes": {}}
    for mode in modes:
        t0 = time.perf_counter()
        w = stock_workload(
            ["b0"],
            n_publishers=_PUBLISHERS,
            n_subscribers=max(sizes),
            pubs_per_publisher=max(1, n_notifications // _PUBLISHERS),
            publish_rate_hz=1.0,
            seed=seed,
            mode=mode,
        )
        subs = [
            (op.client, filter_from_json(op.msg.payload["filter"]))
            for op in w.ops
            if op.msg.type is MsgType.SUBSCRIBE
        ]
        notes = [op.msg.payload["attrs"] for op in w.ops if op.msg.type is MsgType.PUBLISH]
        print(
            f"[bench matching] {mode}: {len(subs)} subscriptions, {len(notes)} notifications, "
            f"selectivity {w.meta['selectivity']:.4f} ({time.perf_counter() - t0:.1f} s)",
            file=sys.stderr,
        )
        rows = []
        for size in sizes:
            n_linear = min(
                len(notes),
                max(_LINEAR_MIN_NOTIFICATIONS, len(notes) * _LINEAR_REFERENCE_SIZE // size),
            )
            index, linear = SubscriptionIndex(), LinearIndex()
            index_build_s = _fill(index, subs[:size], notes[0])
            linear_build_s = _fill(linear, subs[:size], notes[0])
            index_hz, index_results = _throughput(index, notes)
            linear_hz, linear_results = _throughput(linear, notes[:n_linear])
            row = {
                "subscriptions": size,
                "index_notifications": len(notes),
                "linear_notifications": n_linear,
                "index_per_s": round(index_hz, 1),
                "linear_per_s": round(linear_hz, 1),
                "speedup": round(index_hz / linear_hz, 1),
                "index_build_s": round(index_build_s, 3),
                "linear_build_s": round(linear_build_s, 3),
                "mean_matches": round(sum(map(len, index_results)) / len(notes), 2),
                "agree": index_results[:n_linear] == linear_results,
            }
            rows.append(row)
            print(
                f"[bench matching] {mode} {size:>6} subs: index {index_hz:10.1f}/s, "
                f"linear {linear_hz:8.1f}/s, x{row['speedup']}, agree={row['agree']}",
                file=sys.stderr,
            )
        out["modes"][mode] = {"selectivity": w.meta["selectivity"], "results": rows}
    return out


if __name__ == "__main__":
    print(json.dumps(run()))


def format_result(result: dict[str, Any]) -> str:
    """The benchmark as a table: index and linear scan side by side, and their ratio."""
    lines = [f"{'mode':9} {'subs':>7} {'index/s':>10} {'linear/s':>10} {'ratio':>7}  agree"]
    for mode, m in sorted(result["modes"].items()):
        for r in m["results"]:
            lines.append(f"{mode:9} {r['subscriptions']:7} {r['index_per_s']:10.0f} "
                         f"{r['linear_per_s']:10.1f} {r['speedup']:6.1f}x  {r['agree']}")
        lines.append(f"{'':9} measured selectivity {100 * m['selectivity']:.2f} %")
    return "\n".join(lines)
