"""The figures of a run's summary blocks, drawn by block name.

A summary block is one key of an algorithm's ``summary.json`` with figures of its own
(``burst``, ``meghdoot``, ``codd``; the workload kinds name theirs, see
:mod:`nodes.metrics.blocks`). A run draws the blocks its summaries have, no other; a
sweep draws those of :data:`SWEEP_SERIES_BLOCKS` with one series per swept value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from analysis.burst import draw_burst
from analysis.codd import draw_codd
from analysis.meghdoot import draw_meghdoot

# Each takes {algorithm or label: the block, or None} and the folder; returns the PNGs.
BLOCK_FIGURES: dict[str, Callable[[Mapping[str, Mapping[str, Any] | None], Path], list[Path]]] = {
    "burst": draw_burst, "meghdoot": draw_meghdoot, "codd": draw_codd}


def draw_blocks(summaries: Mapping[str, Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Draw, into ``out_dir``, the figures of every block of :data:`BLOCK_FIGURES` that
    some summary of ``summaries`` ({algorithm: summary}) has; returns the PNGs written."""
    written = []
    for name, draw in BLOCK_FIGURES.items():
        if any(name in s for s in summaries.values()):
            written += draw({a: s.get(name) for a, s in summaries.items()}, out_dir)
    return written


# The blocks a sweep draws with one series per swept value (Meghdoot's figures compare
# the paper's 100, 1,000, ... peers). The others' sweep figures are points over the swept
# value (analysis.paper_figures), drawn beside these.
SWEEP_SERIES_BLOCKS = ("meghdoot",)


def draw_sweep_blocks(results: Mapping[str, Mapping[str, Mapping[str, Any]]], x_label: str,
                      out_dir: Path) -> list[Path]:
    """Draw, into ``out_dir``, the figures of every block of :data:`SWEEP_SERIES_BLOCKS`
    that some summary of ``results`` ({swept value: {algorithm: summary}}) has, one series
    per value labelled ``"<x_label> <value>"``; returns the PNGs written."""
    written = []
    for name in SWEEP_SERIES_BLOCKS:
        if any(name in s for summaries in results.values() for s in summaries.values()):
            written += BLOCK_FIGURES[name]({f"{x_label} {v}": summaries[alg].get(name)
                                            for v, summaries in results.items()
                                            for alg in summaries}, out_dir)
    return written
