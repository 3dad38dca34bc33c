"""CoDD's figures with the paper's axes, from its summary blocks
(:func:`nodes.metrics.codd.codd_metrics`, whose docstring defines them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

from analysis.paper_figures import save_png

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first


def draw_codd(series: Mapping[str, Mapping[str, Any] | None], out_dir: Path) -> list[Path]:
    """Figures comparing runs (``{label: codd_metrics(...)}``; None entries skipped) in
    ``out_dir``: ``fig-codd-overhead.png`` (per-node overhead, nodes ranked, Figs. 11-12),
    ``fig-codd-depth.png`` (weighted depth, nodes ranked, Fig. 9) and
    ``fig-codd-over-time.png`` (overhead per bucket of documents, Fig. 17). Returns the
    PNG paths written (none without metrics)."""
    runs = {label: m for label, m in series.items() if m}
    if not runs:
        return []
    out_dir = Path(out_dir)
    written = []
    for key, ylabel, title, name in (
            ("overhead", "fraction of useless documents", "Per-node overhead "
             "(CoDD Figs. 11-12)", "fig-codd-overhead.png"),
            ("depth", "weighted average depth (hops)", "Weighted depth per node (CoDD Fig. 9)",
             "fig-codd-depth.png")):
        fig, ax = plt.subplots(figsize=(8.4, 4.2))
        for label, m in runs.items():
            ranked = m[key]["ranked"]
            ax.plot(range(len(ranked)), ranked, label=label)
        ax.set_xlabel("node rank")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        written.append(save_png(fig, out_dir / name))
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    for label, m in runs.items():
        size = m["over_time"]["series_docs"] or 1
        pts = [(k * size, v) for k, v in m["over_time"]["buckets"] if v is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
    ax.set_xlabel("documents published")
    ax.set_ylabel("fraction of useless documents")
    ax.set_title("System overhead over time (CoDD Fig. 17)")
    ax.legend()
    written.append(save_png(fig, out_dir / "fig-codd-over-time.png"))
    return written
