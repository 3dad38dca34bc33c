"""Figures in the papers' terms, drawn from ``summary.json`` files (matplotlib, PNG).

A figure compares algorithms (OctopiA's ``snr`` against the ``tid-static`` baseline, ...)
on the metrics a paper plots. With one run the algorithms are bars; with a sweep (one
run per value of a workload parameter, e.g. the number of advertisements, as on the
papers' x axes) they are lines over the swept value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

from nodes.metrics.summary import MATCHED_TYPES

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

# (file stem, title, [(panel title, y label, path into summary.json)])
OCTOPIA_FIGURES: tuple[tuple[str, str, tuple[tuple[str, str, tuple[str, ...]], ...]], ...] = (
    ("fig-publisher-scalability", "Publisher scalability", (
        ("Advertisement delay", "mean delay (ms)", ("delay_ms", "advertisement", "mean")),
        ("SRT size", "mean entries per broker", ("srt_size", "mean")),
        ("Advertisement IMs", "messages", ("ims_by_type", "ADVERTISE")),
    )),
    ("fig-subscriber-scalability", "Subscriber scalability", (
        ("Subscription delay", "mean delay (ms)", ("delay_ms", "subscription", "mean")),
        ("PRT size", "mean entries per broker", ("prt_size", "mean")),
        ("Subscription IMs", "messages", ("ims_by_type", "SUBSCRIBE")),
    )),
    ("fig-end-to-end", "End-to-end", (
        ("Notification delay", "mean delay (ms)", ("delay_ms", "notification", "mean")),
        ("Notification delay p95", "p95 delay (ms)", ("delay_ms", "notification", "p95")),
        ("IMs per notification", "messages / publication", ("ims_per_notification",)),
    )),
)

# The burst experiment over a swept burst rate (the paper's 100K, 80K and 60K a minute);
# one run's burst figures are analysis.burst.draw_burst's.
BURST_FIGURES: tuple[tuple[str, str, tuple[tuple[str, str, tuple[str, ...]], ...]], ...] = (
    ("fig-burst-rates", "High-rate publisher burst", (
        ("Notification delay", "mean delay (ms)", ("burst", "delay_ms_mean")),
        ("Delivered under 1 s", "share of deliveries", ("burst", "share_under")),
        ("Queue on the HRP broker's links", "mean length (messages)",
         ("burst", "queue", "mean_len")),
        ("Back to normal", "s after the burst", ("burst", "normal", "return_s")),
    )),
)


def metric(summary: Mapping[str, Any], path: Sequence[str]) -> float | None:
    """The figure at ``path`` in a summary (None where absent); IMs per notification is
    derived as publication IMs over publications."""
    if tuple(path) == ("ims_per_notification",):
        pubs = summary.get("published") or 0
        ims = summary.get("ims_by_type", {})
        n = sum(ims.get(t, 0) for t in MATCHED_TYPES)
        return n / pubs if pubs else None
    node: Any = summary
    for key in path:
        if not isinstance(node, Mapping) or node.get(key) is None:
            return None
        node = node[key]
    return float(node)


def draw(points: Sequence[tuple[float | None, Mapping[str, Mapping[str, Any]]]],
         out_dir: Path, *, x_label: str | None = None,
         figures: tuple = OCTOPIA_FIGURES) -> list[Path]:
    """Draw each figure from ``points`` = [(x value or None, {algorithm: summary})];
    returns the PNG paths written. A figure with no data (every value absent or zero) is
    skipped: a system without advertisements, Meghdoot say, gets no SRT figure."""
    written = []
    algorithms = sorted({a for _, by_alg in points for a in by_alg})
    sweep = len(points) > 1 and all(x is not None for x, _ in points)
    for stem, title, panels in figures:
        values = {(p, a): [metric(by_alg[a], path) if a in by_alg else None
                           for _, by_alg in points]
                  for p, (_, _, path) in enumerate(panels) for a in algorithms}
        if not any(v for series in values.values() for v in series):
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
        for p, (ax, (panel, y_label, _)) in enumerate(zip(axes, panels, strict=True)):
            if sweep:
                xs = [x for x, _ in points]
                for a in algorithms:
                    ys = values[p, a]
                    ax.plot([x for x, y in zip(xs, ys, strict=True) if y is not None],
                            [y for y in ys if y is not None], marker="o", label=a)
                ax.set_xlabel(x_label or "")
            else:
                ys = [values[p, a][0] or 0.0 for a in algorithms]
                ax.bar(algorithms, ys, color=[f"C{i}" for i in range(len(algorithms))])
            ax.set_title(panel)
            ax.set_ylabel(y_label)
            ax.grid(alpha=0.3)
        if sweep:
            axes[0].legend()
        fig.suptitle(title)
        written.append(save_png(fig, out_dir / f"{stem}.png"))
    return written


def save_png(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` (PNG, 110 dpi) and close it; ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
