"""The verdict of a run that throttles an overlay link under SNR and IDR (the demo's
question): did IDR route around the throttled link, and did that pay?

Read from the algorithms' ``summary.json`` (both runtimes write the same fields):
``scheduled_link_notifications`` (notification copies the brokers sent on each direction
of the links the spec's ``link_schedule`` changes), the notification delay's p50 and p95
(ms), and the deliveries against the oracle. The direction judged is the one SNR loaded
most (the throttle applies to both; the burst flows one way).

IDR **holds** when it put fewer copies on that direction than SNR, its p95 delay is
lower, and both delivered every expected notification exactly once: the three things
the demo is meant to show. A run that misses any of them says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first
import pandas as pd

PAIR = ("snr", "idr")


def idr_verdict(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """SNR against IDR on the throttled link (see the module docstring); None when the run
    lacks either algorithm or throttled no link."""
    if not all(a in summaries and summaries[a].get("scheduled_link_notifications")
               for a in PAIR):
        return None
    snr_links = summaries["snr"]["scheduled_link_notifications"]
    link = max(sorted(snr_links), key=lambda k: snr_links[k])
    rows = {}
    for a in PAIR:
        s = summaries[a]
        d = (s.get("delay_ms") or {}).get("notification") or {}
        rows[a] = {"copies": int(s["scheduled_link_notifications"].get(link, 0)),
                   "p50_ms": d.get("p50"), "p95_ms": d.get("p95"),
                   "delivered": s.get("delivered"), "expected": s.get("expected_deliveries"),
                   "exactly_once": s.get("missing") == 0 and s.get("duplicates") == 0}
    snr, idr = rows["snr"], rows["idr"]
    checks = {
        "fewer_copies": idr["copies"] < snr["copies"],
        "lower_p95": (idr["p95_ms"] is not None and snr["p95_ms"] is not None
                      and idr["p95_ms"] < snr["p95_ms"]),
        "exactly_once": snr["exactly_once"] and idr["exactly_once"],
    }
    return {"link": link.replace(">", "→"), "algorithms": rows, "checks": checks,
            "holds": all(checks.values())}


def verdict_text(v: Mapping[str, Any]) -> str:
    """The verdict in one or two sentences for a terminal or a page."""
    snr, idr = v["algorithms"]["snr"], v["algorithms"]["idr"]
    head = ("IDR routed around the throttled link" if v["holds"]
            else "IDR did NOT show its advantage in this run")
    text = (f"{head}: {idr['copies']:,} notification copies on {v['link']} under IDR "
            f"against {snr['copies']:,} under SNR; p95 delay {_ms(idr['p95_ms'])} against "
            f"{_ms(snr['p95_ms'])}; IDR delivered {idr['delivered']:,} of "
            f"{idr['expected']:,} expected, SNR {snr['delivered']:,}")
    missed = {"fewer_copies": "IDR did not put fewer copies on the link",
              "lower_p95": "IDR's p95 delay was not lower",
              "exactly_once": "a notification was lost or delivered twice"}
    failed = [missed[k] for k, ok in v["checks"].items() if not ok]
    return text + (f" ({'; '.join(failed)})." if failed else
                   ", each expected notification exactly once.")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


def fig_idr_verdict(v: Mapping[str, Any], queue: pd.DataFrame) -> plt.Figure:
    """Three panels: copies on the throttled link, delay p50/p95 per algorithm, and the
    sender's output queue on that link over time (from the metrics' ``queue`` table: the
    brokers' queue windows; seconds from each algorithm's first window)."""
    rows = v["algorithms"]
    fig, (ax_c, ax_d, ax_q) = plt.subplots(1, 3, figsize=(12, 3.6),
                                           gridspec_kw={"width_ratios": [1, 1.2, 2.2]})
    colors = {"snr": "C3", "idr": "C2"}
    ax_c.bar(list(PAIR), [rows[a]["copies"] for a in PAIR], color=[colors[a] for a in PAIR])
    ax_c.set_title(f"copies on throttled {v['link']}")
    ax_c.set_ylabel("notification copies")
    for i, q in enumerate(("p50_ms", "p95_ms")):
        bars = ax_d.bar([j + 0.4 * i for j in range(len(PAIR))],
                        [rows[a][q] or 0 for a in PAIR], 0.4,
                        color=[colors[a] for a in PAIR], alpha=0.5 + 0.5 * i)
        ax_d.bar_label(bars, [f"{q[:3]} {rows[a][q] or 0:.0f}" for a in PAIR], fontsize=7)
    ax_d.set_xticks([j + 0.2 for j in range(len(PAIR))], list(PAIR))
    ax_d.set_title("notification delay (light p50, dark p95)")
    ax_d.set_ylabel("ms")
    src, dst = v["link"].split("→")
    on_link = (queue[(queue["src_broker"] == src) & (queue["dst_broker"] == dst)]
               if not queue.empty else queue)
    for a in PAIR:
        d = on_link[on_link["algorithm"] == a].sort_values("t_wall") if not on_link.empty \
            else on_link
        if not d.empty:
            ax_q.step(d["t_wall"] - d["t_wall"].min(), d["queue_len"], where="post",
                      color=colors[a], label=a)
    if on_link.empty:
        ax_q.text(0.5, 0.5, "no queue windows logged on this link", ha="center",
                  va="center", transform=ax_q.transAxes, color="#555")
    else:
        ax_q.legend()
    ax_q.set_title(f"{src}'s output queue to {dst}")
    ax_q.set_xlabel("time since the algorithm's first window on the link (s)")
    ax_q.set_ylabel("messages queued")
    ax_q.grid(alpha=0.3)
    fig.tight_layout()
    return fig
