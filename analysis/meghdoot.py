"""Meghdoot's figures (Gupta et al., Middleware 2004, §5: Figs. 9–15) from its summary
blocks, :func:`nodes.metrics.meghdoot.meghdoot_metrics` (whose docstring defines them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib import ticker

from analysis.paper_figures import save_png
from nodes.metrics.meghdoot import CONTACT_BUCKETS_PCT, bucket_label

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first


def _grouped_bars(ax: Any, categories: Sequence[str],
                  values: Mapping[str, Sequence[float | None]]) -> None:
    """One bar per series in each category, side by side (None drawn as 0)."""
    width = 0.8 / max(1, len(values))
    for i, (label, ys) in enumerate(values.items()):
        xs = [c + (i - (len(values) - 1) / 2) * width for c in range(len(categories))]
        ax.bar(xs, [y or 0.0 for y in ys], width, color=f"C{i}", label=label)
    ax.set_xticks(range(len(categories)), categories)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()


def draw_meghdoot(series: Mapping[str, Mapping[str, Any] | None], out_dir: Path) -> list[Path]:
    """Figures comparing runs (``{label: meghdoot_metrics(...)}``, e.g. ``"100 peers"``;
    None entries skipped) in ``out_dir``: ``fig-meghdoot-contacted.png`` (% of events per
    bucket of % peers contacted, Figs. 9–11), ``fig-meghdoot-load.png`` (mean load share
    per decile of peers ranked by load, Figs. 12–14) and ``fig-meghdoot-replication.png``
    (zones per replication degree, log y, Fig. 15) and ``fig-meghdoot-joins.png`` (% of
    the joins that replicated a zone, by the peers live before them; not a figure of the
    paper's). Returns the PNG paths written (none without metrics)."""
    runs = {label: m for label, m in series.items() if m}
    if not runs:
        return []
    out_dir = Path(out_dir)
    written = []

    buckets = [bucket_label(lo, hi) for lo, hi in CONTACT_BUCKETS_PCT]
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    _grouped_bars(ax, buckets, {label: [m["contacted"]["buckets_pct"].get(b) for b in buckets]
                                for label, m in runs.items()})
    ax.set_xlabel("peers contacted per event (% of the peers live at publication)")
    ax.set_ylabel("events (%)")
    ax.set_title("Peers contacted to deliver an event (Meghdoot Figs. 9–11)")
    written.append(save_png(fig, out_dir / "fig-meghdoot-contacted.png"))

    groups = list(next(iter(runs.values()))["load"]["deciles_pct"])
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    _grouped_bars(ax, groups, {label: [m["load"]["deciles_pct"].get(g) for g in groups]
                               for label, m in runs.items()})
    ax.set_xlabel("peers ranked by message load (groups of 10 % of the peers)")
    ax.set_ylabel("messages received (% since joining)")
    ax.set_title("Load distribution (Meghdoot Figs. 12–14)")
    written.append(save_png(fig, out_dir / "fig-meghdoot-load.png"))

    degrees = sorted({int(d) for m in runs.values() for d in m["zones"]["degree_hist"]})
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    _grouped_bars(ax, [str(d) for d in degrees],
                  {label: [m["zones"]["degree_hist"].get(str(d)) for d in degrees]
                   for label, m in runs.items()})
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.8)
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("replication degree (peers holding the zone)")
    ax.set_ylabel("zones (count, log scale)")
    ax.set_title("Replication of zones (Meghdoot Fig. 15)")
    written.append(save_png(fig, out_dir / "fig-meghdoot-replication.png"))

    bands = sorted({b for m in runs.values() for b in m.get("joins_by_peers", {})},
                   key=lambda b: int(b.split("-")[0]))
    if bands:
        fig, ax = plt.subplots(figsize=(8.4, 4.2))
        _grouped_bars(ax, bands, {
            label: [(m.get("joins_by_peers", {}).get(b) or {}).get("replica_pct")
                    for b in bands] for label, m in runs.items()})
        ax.set_ylim(0, 100)
        ax.set_xlabel("peers live before the join")
        ax.set_ylabel("joins that replicated a zone (%)")
        ax.set_title("Joins that replicated a zone, as the CAN grew (ours, not a paper figure)")
        written.append(save_png(fig, out_dir / "fig-meghdoot-joins.png"))
    return written
