"""A reproduction page's scale line puts our x values beside the paper's own."""

from __future__ import annotations

from pathlib import Path

from analysis.reproduction import Point, headline_rows
from experiments.reproduce import load_paper


def test_meghdoots_events_rows_name_the_papers_event_counts_beside_ours() -> None:
    """Ours are the paper's 200,000-500,000 events at 0.1: the scale line says so."""
    paper = load_paper("meghdoot")
    points = {name: [] for name in paper["experiments"]}
    points["events"] = [Point(x, Path("."), {"scale": 0.1}, {}) for x in (20000, 50000)]
    rows = [r for r in headline_rows(paper, points, "sim") if r["experiment"] == "events"]
    assert rows
    for row in rows:
        assert "ours 20000, 50000 for the paper's 200000, 500000" in row["scale"], row["scale"]
