"""`pubsublab compare RUN_A RUN_B ...`: the summaries of several runs side by side.

A RUN is a run folder (every ``<algorithm>/summary.json`` in it is taken, or its own
``summary.json``) or a path to one ``summary.json``. Columns are labelled
``<run folder>/<algorithm>``; rows are the summary figures, nested objects flattened
with dots (``delay_ms.notification.p95``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nodes.runfolder import SUMMARY

# Rows in this order first; anything else a summary has follows alphabetically.
LEADING_ROWS = ("runtime", "scale", "published", "expected_deliveries", "delivered",
                "missing", "duplicates", "ims_total")


def load_summaries(paths: list[str]) -> dict[str, dict[str, Any]]:
    """Label -> summary for every summary found under ``paths`` (ValueError if none)."""
    found: dict[str, dict[str, Any]] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            files = [p]
        elif (p / SUMMARY).is_file():
            files = [p / SUMMARY]
        else:
            files = sorted(p.glob(f"*/{SUMMARY}"))
        if not files:
            raise ValueError(f"{raw}: no summary.json there (a run folder, or a summary file)")
        for f in files:
            try:
                summary = json.loads(f.read_text())
            except json.JSONDecodeError as exc:
                raise ValueError(f"{f}: not valid JSON ({exc})") from None
            run = f.parent.parent.name if f.parent != p or p.is_file() else p.name
            label = f"{run}/{summary.get('algorithm', f.parent.name)}"
            found[label] = summary
    return found


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """A plain-text table: one row per figure, one column per summary."""
    flat = {label: flatten(s) for label, s in summaries.items()}
    keys = {k for f in flat.values() for k in f} - {"algorithm"}
    rows = [k for k in LEADING_ROWS if k in keys] + sorted(keys - set(LEADING_ROWS))

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    labels = list(flat)
    width0 = max(len(r) for r in rows)
    widths = [max(len(lbl), *(len(cell(flat[lbl].get(r))) for r in rows)) for lbl in labels]
    lines = ["  ".join([" " * width0, *(lbl.rjust(w) for lbl, w in zip(labels, widths,
                                                                         strict=True))])]
    for r in rows:
        cells = (cell(flat[lbl].get(r)).rjust(w) for lbl, w in zip(labels, widths, strict=True))
        lines.append("  ".join([r.ljust(width0), *cells]))
    return "\n".join(lines)
