"""A paper's headline numbers beside ours: the rows and the page of `pubsublab reproduce`.

Inputs are plain data: a paper's data file as a mapping (``experiments/papers/NAME.yaml``:
its ``experiments`` and ``rows``, each row with the paper's number and where in the seed
it comes from) and, per experiment, the run folders of its points. Ours always come from
those folders' ``summary.json`` files; the paper's never leave their row's ``paper``
field.

One number per algorithm (a row's ``ours``): the summary figure ``y`` (a dotted path, or
a list of paths summed) over a curve, which is either the experiment's points (x: the
swept value) or a list inside one summary (``series``, x: its ``x`` field); divided by
the summary's ``scale`` with ``per_scale``; then ``pick`` makes the curve one number:
``mean`` (the default), ``max``, ``min`` or ``{at: X}``. The algorithms are compared,
``o`` being algorithm ``of``'s number and ``a`` algorithm ``against``'s:

=============  ==================  =========================================
``compare``    ours                direction agrees when
=============  ==================  =========================================
reduction      (1 - o / a) x 100   ours > 0 (the paper's "X % less")
increase       (o / a - 1) x 100   ours > 0 (the paper's "X % more")
factor         a / o               ours > 1 (the paper's "X times less")
ratio          o / a               ours is on the paper's side of 1
difference     a - o               ours > 0 (the paper's "X s before")
value          o                   the row's ``direction`` holds
percent        o x 100             the row's ``direction`` holds
=============  ==================  =========================================

``against_pick`` compares an algorithm with itself elsewhere on the curve: ``a`` is then
``against``'s number (``of``'s when ``against`` is absent) picked by ``against_pick``
(the paper's "grows as log n": depth at 1,000 nodes over depth at 100).

A row whose paper states a claim without a number (its plots did not survive) has
``paper: null``: no ratio, and its ``direction`` says what the claim asks of ours.
A row's ``direction`` (value rows) is the paper's claim about its number, which ours
must share: ``{above: ALG}`` / ``{below: ALG}`` (the same figure of another algorithm of
the same runs), ``{above: N}`` / ``{below: N}`` (a bound), ``{within: [LO, HI]}``.
``ratio`` is ours over the paper's and ``within_2x`` says whether it lies in [0.5, 2].

Beside another runtime: a reproduction in one runtime can carry the rows of an earlier one
of the same paper and scale in the other (``pubsublab reproduce --beside``); each row then
has a ``beside`` entry (that runtime's ours, ratio, direction, 2x and conditions), the page
a second group of columns, and each figure the other runtime's curves dashed.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

from analysis.meghdoot_facts import first_event_facts
from analysis.paper_figures import metric
from analysis.reproduction_whys import ANY, first_sentence, why_for, why_key
from nodes.runfolder import MANIFEST, REPRODUCTION_PAGE, SUMMARY
from nodes.time_left import duration_text, memory_text

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first

RELATIVE = ("reduction", "increase", "factor", "ratio", "difference")
# What a row carries of the other runtime's row (``beside``): its numbers, shown in
# their own columns, and what they were measured under.
BESIDE_NUMBERS = ("ours", "ratio", "direction_agrees", "within_2x")
BESIDE_KEYS = (*BESIDE_NUMBERS, "conditions", "scale")
COMPARES = (*RELATIVE, "value", "percent")
PICKS = ("mean", "max", "min")


@dataclass(frozen=True)
class Point:
    """One run of an experiment: the swept value ``x`` (None for a single run), its run
    folder, its manifest and its summaries by algorithm."""

    x: float | None
    run_dir: Path
    manifest: Mapping[str, Any]
    summaries: Mapping[str, Mapping[str, Any]]


def load_point(run_dir: Path, x: float | None) -> Point:
    """The manifest and every ``<algorithm>/summary.json`` of one run folder."""
    manifest = json.loads((run_dir / MANIFEST).read_text())
    summaries = {f.parent.name: json.loads(f.read_text())
                 for f in sorted(run_dir.glob(f"*/{SUMMARY}"))}
    if not summaries:
        raise ValueError(f"{run_dir}: no {SUMMARY} in any algorithm folder")
    return Point(x, run_dir, manifest, summaries)


@dataclass(frozen=True)
class Beside:
    """An earlier reproduction shown beside this one: its runtime (``simulated`` or
    ``emulated``), its folder, its points by experiment and its rows as it wrote them."""

    runtime: str
    folder: Path
    points: Mapping[str, Sequence[Point]]
    rows: Sequence[Mapping[str, Any]]


def reproduction_points(folder: Path, result: Mapping[str, Any]) -> dict[str, list[Point]]:
    """The points of an earlier reproduction in ``folder``, read back from the run folders
    its result (its ``reproduction.json``) lists."""
    points: dict[str, list[Point]] = {}
    for run in result["runs"]:
        points.setdefault(run["experiment"], []).append(
            load_point(folder / run["run_dir"], run["x"]))
    return points


def with_beside(rows: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]],
                runtime: str) -> list[dict[str, Any]]:
    """``rows`` each with the same row of another runtime under ``beside``."""
    return [{**row, "beside": {"runtime": runtime, **{k: o[k] for k in BESIDE_KEYS}}}
            for row, o in zip(rows, other, strict=True)]


def _paths(y: str | Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(p.split(".")) for p in ([y] if isinstance(y, str) else y)]


def _figure_of(summary: Mapping[str, Any], ours: Mapping[str, Any]) -> float | None:
    """The row's ``y`` in one summary (or series item): the sum of its paths' figures,
    None if none of them is there; divided by the scale with ``per_scale``."""
    found = [v for p in _paths(ours["y"]) if (v := metric(summary, p)) is not None]
    if not found:
        return None
    total = math.fsum(found)
    return total / summary["scale"] if ours.get("per_scale") else total


def curve(points: Sequence[Point], ours: Mapping[str, Any],
          algorithm: str) -> list[tuple[float, float]]:
    """(x, y) of ``algorithm`` for a row: over the experiment's points, or along the
    ``series`` list of the one point's summary (see the module docstring)."""
    series = ours.get("series")
    out: list[tuple[float, float]] = []
    if series is not None:
        if not points:  # the experiment's one run did not run (reproduce --no-run)
            return out
        summary = points[0].summaries.get(algorithm, {})
        for item in summary.get(series, []):
            y = _figure_of({**item, "scale": summary.get("scale")}, ours)
            if y is not None:
                out.append((float(item[ours["x"]]), y))
        return out
    for p in points:
        summary = p.summaries.get(algorithm)
        y = _figure_of(summary, ours) if summary is not None else None
        if y is not None:
            out.append((0.0 if p.x is None else float(p.x), y))
    return out


def pick(points: Sequence[tuple[float, float]], how: Any) -> float | None:
    """One number from a curve: ``mean`` | ``max`` | ``min`` | ``{at: X}``."""
    ys = [y for _, y in points]
    if not ys:
        return None
    if isinstance(how, Mapping):
        at = float(how["at"])
        return next((y for x, y in points if math.isclose(x, at, rel_tol=1e-6)), None)
    if how == "max":
        return max(ys)
    if how == "min":
        return min(ys)
    return math.fsum(ys) / len(ys)


def _compare(kind: str, o: float | None, a: float | None) -> float | None:
    if o is None or (kind in RELATIVE and (a is None or (a == 0 and kind != "difference"))):
        return None
    if kind == "reduction":
        return (1.0 - o / a) * 100.0
    if kind == "increase":
        return (o / a - 1.0) * 100.0
    if kind == "factor":
        return a / o if o else math.inf
    if kind == "ratio":
        return o / a
    if kind == "difference":
        return a - o
    return o * 100.0 if kind == "percent" else o


def _direction(row: Mapping[str, Any], ours: float, numbers: Mapping[str, float | None]
               ) -> bool:
    """Whether ours shares the paper's direction (module docstring)."""
    kind = row["ours"]["compare"]
    claim = row.get("direction")
    if claim is None and kind in ("reduction", "increase", "difference"):
        return ours > 0
    if claim is None and kind in ("factor", "ratio"):
        return (ours > 1) == (row["paper"] > 1)
    if "within" in claim:
        lo, hi = claim["within"]
        return lo <= ours <= hi
    side, ref = next(iter(claim.items()))
    if isinstance(ref, str):  # another algorithm's figure of the same runs
        ref = numbers.get(ref)
        if ref is None:
            return False
        ref = _compare(kind, ref, None)
    return ours > ref if side == "above" else ours < ref


def _scale_text(exp: Mapping[str, Any], points: Sequence[Point],
                missing: Sequence[float | None] = ()) -> str:
    """The scale the points ran at, their x values beside the paper's, and the x values
    of the experiment's points that did not run (``missing``), if any."""
    if not points:
        return "not run: no point of this experiment has finished"
    scale = points[0].manifest.get("scale")
    text = f"workload x{scale:g} of the paper's" if scale is not None else "as the spec states"
    x = exp.get("x")
    if x and len(points) > 1:
        ours = [p.x for p in points]
        paper = [round(v * x.get("paper_per_ours", 1.0), 3) for v in ours]
        text += (f"; {x['label']}: ours {', '.join(f'{v:g}' for v in ours)} for the "
                 f"paper's {', '.join(f'{v:g}' for v in paper)}")
    if missing:
        text += (f"; not run: {', '.join(f'{v:g}' for v in missing if v is not None)} "
                 "(Points not run)")
    return text


def _significant(v: float | None) -> float | None:
    """``v`` to 5 significant digits (the JSON shows no more than the runs support)."""
    return None if v is None else float(f"{v:.5g}")


def _ran_in(points: Sequence[Point], default: str) -> str:
    """The runtimes (``simulated``, ``emulated``) the points' manifests name."""
    ran = sorted({str(p.manifest["runtime"]) for p in points if p.manifest.get("runtime")})
    return ", ".join(ran) or default


def algorithm_facts(points: Sequence[Point], ours: Mapping[str, Any]) -> dict[str, str]:
    """Each algorithm's number of a row, picked as the row picks its own and in the
    units its figure draws (a ``percent`` row's shares as %), as the page prints it,
    under the algorithm's name with ``_`` for ``-`` (``{tid_static}``): the fields by
    which a why quotes the figures it compares, at whatever scale they were measured."""
    factor = 100.0 if ours["compare"] == "percent" else 1.0
    algorithms = sorted({a for p in points for a in p.summaries})
    facts = {}
    for alg in algorithms:
        v = pick(curve(points, ours, alg), ours.get("pick", "mean"))
        if v is not None:
            facts[alg.replace("-", "_")] = _fmt(_significant(v * factor))
    return facts


def headline_rows(paper: Mapping[str, Any], points: Mapping[str, Sequence[Point]],
                  runtime: str, not_run: Sequence[Mapping[str, Any]] = ()
                  ) -> list[dict[str, Any]]:
    """One row per headline number of ``paper``: the paper's, ours and how they compare
    (the keys of ``pubsublab reproduce --json``'s rows, plus ``source``). ``not_run``:
    points without a run (experiment and x), named in their experiment's rows' scale, so
    a row over fewer points than the paper's says so."""
    missing: dict[str, list[float | None]] = {}
    for p in not_run:
        missing.setdefault(p["experiment"], []).append(p["x"])
    rows = []
    for row in paper["rows"]:
        spec = row["ours"]
        exp = paper["experiments"][spec["experiment"]]
        pts = points[spec["experiment"]]
        algorithms = [spec["of"], *([spec["against"]] if "against" in spec else [])]
        refs = [r for r in (row.get("direction") or {}).values() if isinstance(r, str)]
        numbers = {alg: pick(curve(pts, spec, alg), spec.get("pick", "mean"))
                   for alg in {*algorithms, *refs}}
        against = numbers.get(spec.get("against"))
        if "against_pick" in spec:
            against = pick(curve(pts, spec, spec.get("against", spec["of"])),
                           spec["against_pick"])
        ours = _compare(spec["compare"], numbers[spec["of"]], against)
        ratio = ours / row["paper"] if ours is not None and row["paper"] else None
        measured_at = why_key(exp.get("scale_name", "full"), _ran_in(pts, runtime))
        why, why_from = why_for(row["why"], measured_at, {
            "ours": _fmt(_significant(ours)), "paper": _fmt(row["paper"]),
            "ratio": _fmt(_significant(ratio)), **algorithm_facts(pts, spec),
            **({} if against is None else {"against": _fmt(_significant(against))}),
            **first_event_facts(pts)})
        rows.append({
            "figure": row["figure"], "metric": row["metric"], "source": row["source"],
            "paper_value": row["paper"], "ours": _significant(ours),
            "unit": row["unit"],
            "direction_agrees": None if ours is None else _direction(row, ours, numbers),
            "ratio": _significant(ratio),
            "within_2x": ratio is not None and 0.5 <= ratio <= 2.0,
            # The runtime the points really ran in: under --runtime emulated, a
            # simulated-only experiment's rows still come from the simulator.
            "conditions": f"{exp['conditions']}; {_ran_in(pts, runtime)}",
            "scale": _scale_text(exp, pts, missing.get(spec["experiment"], ())),
            # The why written for the scale and runtime these numbers were measured at
            # (None if there is none), and the keys the data file has whys for.
            "why": why, "why_from": why_from, "measured_at": measured_at,
            "why_keys": sorted(row["why"]),
            "experiment": spec["experiment"],
        })
    return rows


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def row_figure(paper: Mapping[str, Any], row: Mapping[str, Any],
               points: Sequence[Point],
               beside: tuple[str, str, Sequence[Point]] | None = None
               ) -> tuple[str, list[tuple[Any, float]]]:
    """Our curves for one row on the paper's axes (x in the paper's units), as a base64
    PNG, and the paper's points drawn on it ((x, y) read back from their markers: x in
    the paper's units, or the bar's label on a bar chart). A value row marks the paper's
    number at the x it states (``pick: {at: X}``), or at each of our x where the paper's
    claim is over the whole sweep (a max, min or mean), or on the bar of ``of``.
    ``beside``: (this runtime, the other runtime, the other's points), drawn in the same
    colours, dashed."""
    fig, marker, labels = draw_row(paper, row, points, beside)
    drawn: list[tuple[Any, float]] = []
    if marker is not None:
        xs, ys = marker.get_data()
        drawn = [(labels[round(x)] if labels else float(x), float(y))
                 for x, y in zip(xs, ys, strict=True)]
    return _png(fig), drawn


def draw_row(paper: Mapping[str, Any], row: Mapping[str, Any], points: Sequence[Point],
             beside: tuple[str, str, Sequence[Point]] | None = None
             ) -> tuple[Any, Any, list[str]]:
    """The figure of :func:`row_figure`, its paper marker (a Line2D, None without a
    paper's number on these axes) and, on a bar chart, the bars' labels (their x being
    their index)."""
    spec = row["ours"]
    exp = paper["experiments"][spec["experiment"]]
    per_ours = 1.0 if spec.get("series") else (exp.get("x") or {}).get("paper_per_ours", 1.0)
    x_label = spec.get("x_label") or (exp.get("x") or {}).get("label", "")
    algorithms = spec.get("algorithms") or [spec["of"], *([spec["against"]]
                                                          if "against" in spec else [])]
    legend = paper.get("legend", {})
    y_factor = 100.0 if spec["compare"] == "percent" else 1.0
    fig, ax = plt.subplots(figsize=(3.6, 2.6))
    runs = [("", points, "-", "o", 1.0)]
    if beside is not None:
        this, other, other_points = beside
        runs = [(f" ({this})", points, "-", "o", 1.0),
                (f" ({other})", other_points, "--", "x", 0.5)]
    curves = [(alg, suffix, curve(pts, spec, alg), ls, marker, alpha)
              for suffix, pts, ls, marker, alpha in runs for alg in algorithms
              ] if points else []
    if not points:  # reproduce --no-run, no finished point: an empty bar would read as 0
        ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    single = all(len(c) <= 1 for _, _, c, *_ in curves)
    labels: list[str] = []
    for alg, suffix, c, ls, marker, alpha in curves:
        name = legend.get(alg, alg) + suffix
        # One colour per algorithm on every figure of the page: its place in the legend.
        color = f"C{list(legend).index(alg) if alg in legend else len(legend)}"
        if single:
            ax.bar([name], [c[0][1] * y_factor if c else 0.0], color=color, alpha=alpha)
            labels.append(name)
        else:
            ax.plot([x * per_ours for x, _ in c], [y * y_factor for _, y in c], ls=ls,
                    marker=marker, ms=3, color=color, label=name)
    if single and beside is not None:
        ax.tick_params(axis="x", labelrotation=30)
    paper_marker = None
    if spec["compare"] in ("value", "percent") and row["paper"] is not None and curves:
        of_curve = next((c for alg, _, c, *_ in curves if alg == spec["of"]), curves[0][2])
        xs = _paper_xs(spec, of_curve, per_ours, labels, legend.get(spec["of"], spec["of"]))
        (paper_marker,) = ax.plot(xs, [row["paper"]] * len(xs), ls="none", marker="D",
                                  ms=6, mfc="none", mec="k", mew=1.5, label="paper",
                                  zorder=3)
    at = spec.get("pick")
    if isinstance(at, Mapping) and not single:
        ax.axvline(float(at["at"]) * per_ours, color="grey", ls=":", lw=1)
    if not single:
        if max((abs(x) * per_ours for _, _, c, *_ in curves for x, _ in c), default=0) >= 1e4:
            # Tens of thousands (the burst's notifications a minute) overlap as full numbers.
            ax.xaxis.set_major_formatter(lambda v, _pos: f"{v / 1000:g}K")
        ax.set_xlabel(x_label, fontsize=8)
        ax.legend(fontsize=6)
    ax.set_ylabel(spec.get("y_label", ""), fontsize=8)
    ax.set_title(f"{row['figure']} (ours)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, paper_marker, labels


def _paper_xs(spec: Mapping[str, Any], ours: Sequence[tuple[float, float]], per_ours: float,
              labels: Sequence[str], of_label: str) -> list[float]:
    """Where the paper's number goes on a row's axes: on a bar chart the bar of ``of``
    (its index); else at the x the row picks, in the paper's units, or, for a claim over
    the whole sweep, at each x of ours."""
    if labels:
        return [float(next((i for i, name in enumerate(labels)
                            if name.startswith(of_label)), 0))]
    at = spec.get("pick")
    if isinstance(at, Mapping):
        return [float(at["at"]) * per_ours]
    return [x * per_ours for x, _ in ours]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return html.escape(str(v))


def delivery_text(point: Point) -> str:
    """Whether each algorithm of a run delivered the oracle's set exactly once:
    ``exactly once``, or per algorithm that did not, its missing and duplicate counts
    (a run whose numbers stand on fewer deliveries says so beside them)."""
    off = [f"{alg}: {s.get('missing', 0)} missing, {s.get('duplicates', 0)} twice"
           for alg, s in point.summaries.items() if s.get("missing") or s.get("duplicates")]
    return "; ".join(off) or "exactly once"


def run_records(points: Mapping[str, Sequence[Point]], page_dir: Path
                ) -> list[dict[str, Any]]:
    """Each run the page's numbers came from: experiment, x, folder (relative to the
    page), runtime, deliveries (see :func:`delivery_text`), seed, scale, git revision,
    what the run cost where its manifest says (``resources``: wall seconds, peak memory in
    MiB, the machine's CPUs and memory; simulated runs), and the workload's measured
    selectivity and advertisement overlap where it has them."""
    records = []
    for exp, pts in points.items():
        for p in pts:
            m = p.manifest
            meta = (m.get("workload") or {}).get("meta") or {}
            records.append({
                "experiment": exp, "x": p.x, "run_dir": str(p.run_dir.relative_to(page_dir)),
                "runtime": m.get("runtime"), "deliveries": delivery_text(p),
                "seed": m.get("seed"), "scale": m.get("scale"),
                "git": m.get("git"), "resources": m.get("resources"),
                **{k: meta[k] for k in ("selectivity", "adv_overlap", "selectivity_of")
                   if k in meta},
            })
    return records


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 4px 6px; vertical-align: top; font-size: 13px; }
th { background: #f0f0f0; }
td.num { text-align: right; white-space: nowrap; }
tr.differs td { background: #fff6e6; }
td.why { min-width: 14em; max-width: 22em; }
td.why summary { cursor: pointer; }
td.nonum { color: #666; font-style: italic; }
td.metric { max-width: 12em; }
table#summary td { font-size: 14px; }
td.cond { min-width: 22em; max-width: 30em; font-size: 12px; }
img { display: block; width: 264px; }
"""


def write_page(paper: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               points: Mapping[str, Sequence[Point]], out_dir: Path, *, runtime: str,
               quick: bool, beside: Beside | None = None,
               not_run: Sequence[Mapping[str, Any]] = (),
               failed: Sequence[Mapping[str, Any]] = ()) -> Path:
    """``out_dir/reproduction.html``: one self-contained page (figures inline as base64
    PNG) with the rows, our figure beside each, and links to the run folders; with
    ``beside``, the other runtime's numbers in their own columns and curves; with
    ``not_run`` (experiment, x, est_s), a table of the points that did not run; with
    ``failed`` (experiment, x, error, log: a path in ``out_dir``), a table of the points
    whose process failed, linking their logs."""
    e = html.escape
    scale = "quick scale (tests and CI)" if quick else "the specs' stated scale"
    shown = (f"<b>{e(runtime)}</b>, beside <b>{e(beside.runtime)}</b> (the reproduction "
             f"in <a href='{e(beside.folder.as_uri())}/'>{e(beside.folder.name)}</a>)"
             if beside else f"<b>{e(runtime)}</b>")
    other = (f"<th>Ours, {e(beside.runtime)}</th><th>Ours / paper, {e(beside.runtime)}"
             f"</th><th>Direction agrees, {e(beside.runtime)}</th>"
             f"<th>Within 2x, {e(beside.runtime)}</th>" if beside else "")
    body = [f"<h1>Reproduction: {e(paper['title'])}</h1>",
            f"<p>Runtime: {shown}; {scale}. The paper's numbers are quoted from "
            "the seed text "
            f"<code>{e(paper['seed'])}</code> with their places (hover a paper's number); "
            "ours come from the runs listed below. Rows whose direction differs from the "
            f"paper's or whose ratio lies outside 2x{' (in ' + e(runtime) + ')' if beside else ''}"
            " are shaded; a row without a paper number (a claim the paper states without "
            "one) is judged by its direction alone.</p>",
            *summary_lines(rows),
            "<table id='rows'><tr><th>Figure / section</th><th>Metric</th><th>Paper</th>"
            "<th>Ours</th><th>Unit</th><th>Ours / paper</th><th>Direction agrees</th>"
            f"<th>Within 2x</th>{other}<th>Scale and conditions</th><th>Why</th>"
            "<th>Our figure</th></tr>"]
    body += _row_lines(paper, rows, points, runtime, beside,
                       _other_pages(out_dir, paper["paper"], rows, beside))
    body.append("</table><h2>Sources of the paper's numbers</h2><ol>")
    body += [f"<li>{e(r['figure'])}, {e(r['metric'])}: {e(r['source'])}</li>" for r in rows]
    body += _run_lines(points, out_dir, beside)
    if not_run:
        body += _not_run_lines(paper, not_run, out_dir, runtime=runtime, quick=quick)
    if failed:
        body += _failed_lines(paper, failed, out_dir, quick=quick)
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>Reproduction: {e(paper['paper'])}</title><style>{_STYLE}</style>"
            f"</head><body>{''.join(body)}</body></html>")
    path = out_dir / REPRODUCTION_PAGE
    path.write_text(page, encoding="utf-8")
    return path


def differs(row: Mapping[str, Any]) -> bool:
    """Whether a row differs from the paper's: its direction does not agree, or it has a
    paper number and ours lies outside 2x of it (a row without one: its direction)."""
    return not row["direction_agrees"] or (row["paper_value"] is not None
                                           and not row["within_2x"])


def summary_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's summary: how many rows, with a paper number, agreeing in direction and
    within 2x, and the rows that differ, each linked to its row (``#row-N``)."""
    e = html.escape
    numbered = [r for r in rows if r["paper_value"] is not None]
    agree = sum(1 for r in rows if r["direction_agrees"])
    within = sum(1 for r in numbered if r["within_2x"])
    off = [(i, r) for i, r in enumerate(rows, 1) if differs(r)]
    items = "".join(
        f"<li><a href='#row-{i}'>{e(r['figure'])}: {e(r['metric'])}</a> ("
        + ", ".join([*(["direction differs"] if not r["direction_agrees"] else []),
                     *([f"ours / paper {_fmt(r['ratio'])}"] if r["paper_value"] is not None
                       and not r["within_2x"] else [])]) + ")</li>" for i, r in off)
    return ["<h2>Summary</h2><table id='summary'><tr><th>Rows</th>"
            "<th>With a paper number</th><th>Direction agrees</th>"
            "<th>Within 2x of the paper's number</th><th>Differ</th></tr>"
            f"<tr><td class='num'>{len(rows)}</td><td class='num'>{len(numbered)}</td>"
            f"<td class='num'>{agree} of {len(rows)}</td>"
            f"<td class='num'>{within} of {len(numbered)}</td>"
            f"<td class='num'>{len(off)}</td></tr></table>",
            f"<p>Rows that differ:</p><ul id='differs'>{items}</ul>" if off
            else "<p id='differs'>No row differs.</p>"]


def _other_pages(out_dir: Path, paper_name: str, rows: Sequence[Mapping[str, Any]],
                 beside: Beside | None) -> dict[tuple[int, str], Path]:
    """Pages of the same paper at other scales or runtimes, where a row's why for them
    is shown: (row index, the key it was measured at) to the page, from the reproduction
    folders beside ``out_dir`` (newest first) and ``beside``'s. Only a page whose rows
    are this data file's (same figures and metrics) counts."""
    folders = sorted(out_dir.parent.glob(f"*-reproduce-{paper_name}-*"), reverse=True)
    if beside is not None:
        folders.insert(0, beside.folder)
    found: dict[tuple[int, str], Path] = {}
    for folder in folders:
        if folder.resolve() == out_dir.resolve() or not (folder / REPRODUCTION_PAGE).is_file():
            continue
        try:
            theirs = json.loads((folder / "reproduction.json").read_text(encoding="utf-8"))
            if [(r["figure"], r["metric"]) for r in theirs["rows"]] != [
                    (r["figure"], r["metric"]) for r in rows]:
                continue
            for i, r in enumerate(theirs["rows"]):
                found.setdefault((i, r["measured_at"]), folder / REPRODUCTION_PAGE)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an index of another version, or cut off: no link to it
    return found


def _make_page(paper_name: str, key: str) -> str:
    """The command that makes a reproduction page measured at ``key`` (SCALE/RUNTIME)."""
    scale, runtime = key.split("/")
    emulated = runtime == "emulated"
    return (f"{'sudo ' if emulated else ''}pubsublab reproduce {paper_name}"
            f"{' --runtime emulated' if emulated else ''}{' --quick' if scale == 'quick' else ''}")


def _why_cell(row: Mapping[str, Any], index: int, paper_name: str,
              others: Mapping[tuple[int, str], Path]) -> str:
    """A row's why: its first sentence shown, the rest in a ``<details>``; without a why
    for the scale and runtime it was measured at, which ones it has and where they are
    shown (a linked page, or the command that makes one)."""
    e = html.escape
    if row["why"]:
        first, rest = first_sentence(row["why"])
        if not rest:
            return f"<td class='why'>{e(first)}</td>"
        return (f"<td class='why'><details><summary>{e(first)}</summary>{e(rest)}"
                "</details></td>")
    keys = [k for k in row["why_keys"] if k != ANY]
    if not keys:
        return f"<td class='why nowhy'>No explanation for {e(row['measured_at'])}.</td>"
    where = []
    for k in keys:
        page = others.get((index, k))
        where.append(f"<a href='{e(page.as_uri())}#row-{index + 1}'>{e(k)}</a>" if page
                     else f"{e(k)} (<code>{e(_make_page(paper_name, k))}</code>)")
    return (f"<td class='why nowhy'>No explanation for {e(row['measured_at'])}: the data "
            f"file's is for {', '.join(where)}, shown on that page.</td>")


def _row_lines(paper: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
               points: Mapping[str, Sequence[Point]], runtime: str,
               beside: Beside | None, others: Mapping[tuple[int, str], Path]) -> list[str]:
    """The rows table's body: one line of HTML per headline row (``id`` ``row-N``), our
    figure inline with the paper's points it marks (``data-paper``, JSON [[x, y]])."""
    e = html.escape
    body: list[str] = []
    nonum = "<td class='nonum'>no paper number</td>"
    for i, (spec, row) in enumerate(zip(paper["rows"], rows, strict=True)):
        png, marked = row_figure(paper, spec, points[row["experiment"]],
                                 (runtime, beside.runtime, beside.points[row["experiment"]])
                                 if beside else None)
        b = row.get("beside")
        numbered = row["paper_value"] is not None
        cells = ((f"<td class='num'>{_fmt(b['ours'])}</td>"
                  + (f"<td class='num'>{_fmt(b['ratio'])}</td>" if numbered else nonum)
                  + f"<td>{_fmt(b['direction_agrees'])}</td>"
                  + (f"<td>{_fmt(b['within_2x'])}</td>" if numbered else nonum))
                 if b else "")
        # The other runtime's scale and conditions, where they are not this one's.
        also = (f"<br><i>{e(b['runtime'])}</i>: {e(b['scale'])}; {e(b['conditions'])}"
                if b and (b["scale"], b["conditions"]) != (row["scale"], row["conditions"])
                else "")
        paper_cell = (f"<td class='num' title='{e(row['source'])}'>"
                      f"{_fmt(row['paper_value'])}</td>" if numbered
                      else f"<td class='nonum' title='{e(row['source'])}'>no paper number</td>")
        body.append(
            f"<tr id='row-{i + 1}' class='{'differs' if differs(row) else 'agrees'}'>"
            f"<td>{e(row['figure'])}</td><td class='metric'>{e(row['metric'])}</td>{paper_cell}"
            f"<td class='num'>{_fmt(row['ours'])}</td><td>{e(row['unit'])}</td>"
            + (f"<td class='num'>{_fmt(row['ratio'])}</td>" if numbered else nonum)
            + f"<td>{_fmt(row['direction_agrees'])}</td>"
            + (f"<td>{_fmt(row['within_2x'])}</td>" if numbered else nonum)
            + f"{cells}<td class='cond'>{e(row['scale'])}; {e(row['conditions'])}{also}</td>"
            f"{_why_cell(row, i, paper['paper'], others)}"
            f"<td><img alt='{e(row['figure'])}: {e(row['metric'])}' "
            f"data-paper='{e(json.dumps(marked))}' "
            f"src='data:image/png;base64,{png}'></td></tr>")
    return body


def _run_lines(points: Mapping[str, Sequence[Point]], out_dir: Path,
               beside: Beside | None) -> list[str]:
    """The runs table, ours and (with ``beside``) the other runtime's, linked."""
    e = html.escape
    body: list[str] = []
    body.append("</ol><h2>Runs</h2><table id='runs'><tr><th>Experiment</th><th>x</th>"
                "<th>Run folder</th><th>Runtime</th><th>Deliveries</th><th>Seed</th><th>Scale</th>"
                "<th>Git revision</th><th>Wall time</th><th>Peak memory</th>"
                "<th>Measured selectivity</th>"
                "<th>Advertisements a subscription overlaps</th></tr>")
    records = run_records(points, out_dir)
    if beside:
        # The other runtime's runs, linked where they lie (another reproduction folder).
        records += [{**r, "run_dir": str(beside.folder / r["run_dir"])}
                    for r in run_records(beside.points, beside.folder)]
    for r in records:
        git = r.get("git") or {}
        rev = (git.get("commit") or "unknown")[:12] + (" (modified)" if git.get("dirty")
                                                        else "")
        body.append(
            f"<tr><td>{e(r['experiment'])}</td><td>{_fmt(r['x'])}</td>"
            f"<td><a href='{e(r['run_dir'])}/'>{e(r['run_dir'])}</a> "
            f"(<a href='{e(r['run_dir'])}/{MANIFEST}'>manifest</a>)</td>"
            f"<td>{_fmt(r['runtime'])}</td><td>{_fmt(r['deliveries'])}</td><td>{_fmt(r['seed'])}</td>"
            f"<td>{_fmt(r['scale'])}</td><td><code>{e(rev)}</code></td>"
            f"{cost_cells(r.get('resources'))}"
            f"<td class='num'>{_pct(r.get('selectivity'))}</td>"
            f"<td class='num'>{_pct(r.get('adv_overlap'))}</td></tr>")
    body.append("</table>")
    return body


def _not_run_lines(paper: Mapping[str, Any], not_run: Sequence[Mapping[str, Any]],
                   out_dir: Path, *, runtime: str, quick: bool) -> list[str]:
    """The section of the points this folder has no finished run of, and how to run them."""
    e = html.escape
    flags = (" --runtime emulated" if runtime == "emulated" else "") + (
        " --quick" if quick else "")
    body: list[str] = []
    body.append(
        "<h2>Points not run</h2><p>This folder has no finished run of these points, "
        "so the rows above stand on the others (their scale names them). "
        f"<code>pubsublab reproduce {e(paper['paper'])}{flags} --resume "
        f"{e(str(out_dir))}</code> runs them (with <code>--pause-after-min MIN</code>, in "
        "sittings of MIN minutes; a point paused part way goes on where it stopped); the "
        "estimate is the data file's, from runs on a 2-core machine, for the whole "
        "point.</p><table id='not-run'><tr><th>Experiment</th><th>x</th>"
        "<th>Estimated time</th><th>Done</th></tr>")
    body += [f"<tr><td>{e(p['experiment'])}</td><td>{_fmt(p['x'])}</td>"
             f"<td class='num'>{duration_text(p['est_s'])}</td><td class='num'>"
             f"{'paused at ' + _pct(p['paused']) if 'paused' in p else '-'}</td></tr>"
             for p in not_run]
    body.append("</table>")
    return body


def _failed_lines(paper: Mapping[str, Any], failed: Sequence[Mapping[str, Any]],
                  out_dir: Path, *, quick: bool) -> list[str]:
    """The section of the points whose process failed (on a Spark cluster), with their
    logs, and the command that runs them again."""
    e = html.escape
    body = [
        "<h2>Points failed</h2><p>These points' processes failed, so the rows above stand "
        f"on the others (their scale names them). <code>pubsublab reproduce "
        f"{e(paper['paper'])}{' --quick' if quick else ''} --resume {e(str(out_dir))}"
        "</code> (with <code>--master URL</code> to run them on a cluster again) runs "
        "them again.</p><table id='failed'><tr><th>Experiment</th><th>x</th>"
        "<th>Error</th><th>Log</th></tr>"]
    body += [f"<tr><td>{e(p['experiment'])}</td><td>{_fmt(p['x'])}</td>"
             f"<td>{e(p['error'])}</td><td><a href='{e(p['log'])}'>{e(p['log'])}</a></td>"
             "</tr>" for p in failed]
    body.append("</table>")
    return body


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a plain-text table (``pubsublab reproduce`` without ``--json``)."""
    head: tuple[str, ...] = ("figure", "metric", "paper", "ours", "unit", "ours/paper",
                             "direction", "2x")
    # A row without a paper number has no ratio to be within 2x: "no number", not "no".
    cells = [(r["figure"], r["metric"], _fmt(r["paper_value"]), _fmt(r["ours"]),
              r["unit"], _fmt(r["ratio"]), _fmt(r["direction_agrees"]),
              _fmt(r["within_2x"]) if r["paper_value"] is not None else "no number")
             for r in rows]
    if rows and "beside" in rows[0]:
        short = rows[0]["beside"]["runtime"][:3]  # sim / emu
        head += (f"ours {short}", f"ours/paper {short}", f"direction {short}", f"2x {short}")
        cells = [(*c, *(_fmt(r["beside"][k]) for k in BESIDE_NUMBERS))
                 for c, r in zip(cells, rows, strict=True)]
    cells = [head, *cells]
    widths = [min(48, max(len(str(c[i])) for c in cells)) for i in range(len(head))]
    return "\n".join("  ".join(str(c)[:w].ljust(w) for c, w in zip(line, widths, strict=True))
                     .rstrip() for line in cells)


def cost_cells(resources: Mapping[str, Any] | None) -> str:
    """A run's wall time and peak memory as two cells, the machine in their tooltip; a
    dash for runs whose manifest does not say (emulated runs, and runs from before it
    was kept). A peak that could not be reset at the run's start is the process's since
    it began: an upper bound."""
    if not resources or "wall_s" not in resources or "peak_rss_mib" not in resources:
        return "<td class='num'>-</td><td class='num'>-</td>"
    machine = html.escape(f"{resources.get('cpus', '?')} CPUs, "
                          f"{resources.get('mem_total_gib', '?')} GiB of memory")
    peak = memory_text(resources["peak_rss_mib"])
    if not resources.get("peak_reset", True):
        peak = f"at most {peak}"
        machine += html.escape("; the process's peak since it began (not reset)")
    return (f"<td class='num' title='{machine}'>{duration_text(resources['wall_s'])}</td>"
            f"<td class='num' title='{machine}'>{peak}</td>")


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f} %"
