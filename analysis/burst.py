"""The figures of the high-rate-publisher burst (OctopiA Section VIII, Fig. 11), from its
summary blocks (:func:`nodes.metrics.burst.burst_metrics`, whose docstring defines them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

from analysis.paper_figures import save_png

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

_LOG_Y_RATIO = 50.0  # a log y axis once block maxima span this factor


def draw_burst(metrics: Mapping[str, Mapping[str, Any] | None], out_dir: Path) -> list[Path]:
    """Figures comparing algorithms (``{algorithm: burst_metrics(...)}``, None entries
    skipped) in ``out_dir``: ``fig-burst-delay.png``, the max delay per block over time
    (Fig. 11), and ``fig-burst-summary.png``, bars of the share under ``under_s``, the mean
    notification delay, the mean queue length on the HRP broker's links and the time to
    return to normal. Returns the PNG paths written (none without metrics)."""
    by_alg = {a: m for a, m in sorted(metrics.items()) if m}
    if not by_alg:
        return []
    out_dir = Path(out_dir)
    colors = {a: f"C{i}" for i, a in enumerate(by_alg)}
    written = []

    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    values = [v for m in by_alg.values() for v in m["blocks"]["max_delay_ms"] if v > 0]
    for a, m in by_alg.items():
        ax.plot(m["blocks"]["t_s"], m["blocks"]["max_delay_ms"], marker=".", lw=1,
                color=colors[a], label=f"{a} (blocks of {m['block_size']})")
        if m["normal"]["at_s"] is not None:
            ax.axvline(m["normal"]["at_s"], color=colors[a], ls=":", lw=1)
    first = next(iter(by_alg.values()))
    if first.get("duration_s") is not None:
        ax.axvspan(0.0, max(first["duration_s"], 1e-3), color="0.85", zorder=0, label="burst")
    if values and max(values) / min(values) > _LOG_Y_RATIO:
        ax.set_yscale("log")
    ax.set_xlabel("time since the burst started (s)")
    ax.set_ylabel("max delay per block (ms)")
    ax.set_title("Max notification delay per block of consecutive deliveries "
                 "(dotted: back to normal)")
    ax.grid(alpha=0.3)
    ax.legend()
    written.append(save_png(fig, out_dir / "fig-burst-delay.png"))

    under_s = first.get("under_s", 1.0)
    panels = (
        (f"Delivered under {under_s:g} s", "share of deliveries (%)",
         lambda m: None if m["share_under"] is None else 100.0 * m["share_under"]),
        ("Notification delay", "mean delay (ms)", lambda m: m["delay_ms_mean"]),
        ("Queue on the HRP broker's links", "mean queue length (messages)",
         lambda m: m["queue"]["mean_len"]),
        ("Back to normal after the burst", "time (s)", lambda m: m["normal"]["return_s"]),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    algs = list(by_alg)
    for ax, (title, y_label, get) in zip(axes, panels, strict=True):
        ys = [get(by_alg[a]) for a in algs]
        ax.bar(algs, [y or 0.0 for y in ys], color=[colors[a] for a in algs])
        for x, y in enumerate(ys):
            if y is None:  # not measured (or never back to normal): say so on the bar
                ax.annotate("n/a", (x, 0), ha="center", va="bottom")
        ax.set_title(title)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
    fig.suptitle("High-rate publisher burst")
    written.append(save_png(fig, out_dir / "fig-burst-summary.png"))
    return written
