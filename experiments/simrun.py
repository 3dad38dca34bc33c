"""`pubsublab sim SPEC`: run a spec's workload through the discrete-event simulator.

No root, no Mininet: the same overlay, link figures and workload as the emulated run,
hosted by :mod:`nodes.sim`. The run folder holds a manifest, the exact workload, and one
subfolder per algorithm with the per-node logs and ``summary.json``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from analysis.burst import draw_burst
from analysis.paper_figures import BURST_FIGURES, OCTOPIA_FIGURES, draw
from experiments.emulated import log_extras
from experiments.lbdd_run import run_bulk_simulation
from experiments.plan import algorithm_params, build_workload, overlay_links, workload_params
from experiments.runner import git_revision, log, new_run_dir, spec_graph, write_json
from experiments.spec import Spec, SpecError, load_spec
from experiments.workload import expected_deliveries, workload_to_jsonl
from nodes.cores import CORES
from nodes.sim import simulate, summarize


def run_simulation(spec: Spec, out_base: Path, *, log_messages: bool = True,
                   label: str | None = None) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Simulate every algorithm of ``spec``; returns the run folder and the summaries.
    A bulk workload (LBDD, point-to-point) is run by :mod:`experiments.lbdd_run`."""
    if workload_params(spec)["kind"] == "bulk":
        return run_bulk_simulation(spec, out_base, label=label)
    graph = spec_graph(spec)
    for name in spec.routing.algorithms:
        if name not in CORES:
            raise SpecError(f"routing.algorithms: bad value {name!r}; allowed: "
                            f"{', '.join(sorted(CORES))}")
    workload = build_workload(spec, graph)
    overlay = overlay_links(graph, spec.links)
    expected = expected_deliveries(workload)
    run_dir = new_run_dir(out_base, label or f"{spec.name}-sim")
    workload_to_jsonl(workload, run_dir / "workload.jsonl")
    manifest: dict[str, Any] = {
        "run": run_dir.name, "runtime": "simulated", "spec": spec.to_dict(),
        "seed": spec.seed, "scale": spec.scale, "git": git_revision(),
        "workload": {**workload_params(spec), "meta": dict(workload.meta)},
        "overlay": {"brokers": overlay.number_of_nodes(), "links": overlay.number_of_edges()},
    }
    summaries = {}
    for name in spec.routing.algorithms:
        out = run_dir / name
        out.mkdir()
        log(f"simulating {name}: {overlay.number_of_nodes()} brokers, "
            f"{len(workload.ops)} client operations")
        result = simulate(overlay, workload, name, algorithm_params(spec, name),
                          seed=spec.seed, out_dir=out if log_messages else None,
                          log_messages=log_messages,
                          link_changes=[(c.at_s, c.a, c.b, c.bw_mbps)
                                        for c in spec.link_schedule])
        summary = summarize(result, expected, scale=spec.scale)
        if log_messages:  # these figures come from the logs
            summary.update(log_extras(out, spec, workload, overlay))
        write_json(out / "summary.json", summary)
        summaries[name] = summary
        log(f"{name}: delivered {summary['delivered']} of {summary['expected_deliveries']}, "
            f"missing {summary['missing']}, duplicates {summary['duplicates']}")
    write_json(run_dir / "manifest.json", manifest)
    draw([(None, summaries)], run_dir)
    draw_burst({a: s.get("burst") for a, s in summaries.items()}, run_dir)
    return run_dir, summaries


def run_sweep(spec_arg: str, overrides: list[str], key: str, values: list[Any],
              out_base: Path, *, log_messages: bool = True
              ) -> tuple[Path, dict[str, dict[str, dict[str, Any]]]]:
    """Simulate ``spec_arg`` once per value of the spec field ``key`` (as the papers'
    x axes sweep the number of advertisements or subscribers); one run folder per value
    inside a sweep folder, and line figures over the swept value."""
    first = load_spec(spec_arg, [*overrides, f"{key}={values[0]}"])
    sweep_dir = new_run_dir(out_base, f"{first.name}-sim-sweep")
    points, results = [], {}
    for i, value in enumerate(values, 1):
        spec = load_spec(spec_arg, [*overrides, f"{key}={value}"])
        log(f"sweep {key}={value} ({i} of {len(values)})")
        label = re.sub(r"[^A-Za-z0-9._-]", "_", f"{key.rsplit('.', 1)[-1]}-{value}")
        _, summaries = run_simulation(spec, sweep_dir, log_messages=log_messages, label=label)
        points.append((float(value), summaries))
        results[str(value)] = summaries
    write_json(sweep_dir / "sweep.json", {"key": key, "values": values, "summaries": results})
    figures = draw(points, sweep_dir, x_label=key.rsplit(".", 1)[-1],
                   figures=OCTOPIA_FIGURES + BURST_FIGURES)
    log(f"figures: {', '.join(str(f) for f in figures)}")
    return sweep_dir, results


def summary_table(summaries: dict[str, dict[str, Any]]) -> str:
    """A short human-readable table of per-algorithm summaries: deliveries, lost
    (expected but never delivered), duplicates, inter-broker messages, notification
    delays, and, when the spec scheduled link changes, the notification copies sent on
    those links."""
    throttled = any("scheduled_link_notifications" in s for s in summaries.values())
    head = ("algorithm     delivered  expected   lost  dup      IMs   p50_ms   p95_ms   max_ms"
            + ("  on_changed_links" if throttled else ""))
    rows = [head]
    for name, s in summaries.items():
        d = (s.get("delay_ms") or {}).get("notification") or {}
        row = (f"{name:13} {s['delivered']:9} {s['expected_deliveries']:9} {s['missing']:6} "
               f"{s['duplicates']:4} {s['ims_total']:8} {d.get('p50', float('nan')):8.2f} "
               f"{d.get('p95', float('nan')):8.2f} {d.get('max', float('nan')):8.2f}")
        if throttled:
            row += f"  {sum((s.get('scheduled_link_notifications') or {}).values()):16}"
        rows.append(row)
    return "\n".join(rows)
