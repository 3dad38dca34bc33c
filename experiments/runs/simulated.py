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
from experiments.plan import RunPlan, compile_plan
from experiments.progress import log
from experiments.runs.bulk.simulated import run_bulk_simulation
from experiments.runs.manifest import base_manifest, node_names
from experiments.runs.summaries import log_extras
from experiments.spec import load_spec
from nodes.log_summary import summarize_logs
from nodes.runfolder import SWEEP, WORKLOAD, new_run_dir, write_json, write_manifest, write_summary
from nodes.sim import simulate, summarize
from nodes.summary import delay_stats_ms
from nodes.workloads.ops import workload_to_jsonl
from nodes.workloads.oracle import expected_deliveries


def run_simulation(plan: RunPlan, out_base: Path, *, log_messages: bool = True,
                   label: str | None = None) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Simulate every algorithm of ``plan``; returns the run folder and the summaries.
    A bulk workload (LBDD, point-to-point) is run by :mod:`experiments.runs.bulk`.

    With logs, each summary is read from them (:func:`nodes.log_summary.summarize_logs`,
    as in the emulated runtime) and completed with the in-memory figures the logs do not
    hold (matching delay, events, lost messages); without logs it is the in-memory
    summary, which a test holds equal to the log-based one."""
    if plan.workload_kind == "bulk":
        return run_bulk_simulation(plan, out_base, label=label)
    workload = plan.workload
    if workload is None:
        raise ValueError(f"spec {plan.name!r} has no workload to simulate")
    overlay = plan.overlay
    expected = expected_deliveries(workload)
    run_dir = new_run_dir(out_base, label or f"{plan.name}-sim")
    workload_to_jsonl(workload, run_dir / WORKLOAD)
    manifest: dict[str, Any] = {
        **base_manifest(plan, run_dir, "simulated"),
        "workload": {**plan.workload_params, "meta": dict(workload.meta)},
        "overlay": {"brokers": overlay.number_of_nodes(), "links": overlay.number_of_edges()},
        **({"nodes": node_names(plan)} if log_messages else {}),
    }
    summaries = {}
    for alg in plan.algorithms:
        out = run_dir / alg.name
        out.mkdir()
        log(f"simulating {alg.name}: {overlay.number_of_nodes()} brokers, "
            f"{len(workload.ops)} client operations")
        result = simulate(overlay, workload, alg.name, dict(alg.params), derived=alg.derived,
                          seed=plan.spec.seed, out_dir=out if log_messages else None,
                          log_messages=log_messages, window_ms=plan.window_ms,
                          until_s=plan.duration_s,
                          link_changes=[(c.at_s, c.a, c.b, c.bw_mbps)
                                        for c in plan.link_schedule],
                          processing=plan.processing)
        if log_messages:
            summary = summarize_logs(out, overlay.nodes, workload, alg.name, "simulated",
                                     plan.spec.scale, expected)
            summary["delay_ms"]["matching"] = delay_stats_ms(result.matching_s)
            summary.update(events=result.events, lost=result.lost)
            summary.update(log_extras(out, plan))
        else:
            summary = summarize(result, expected, scale=plan.spec.scale)
        write_summary(out, summary)
        summaries[alg.name] = summary
        log(f"{alg.name}: delivered {summary['delivered']} of "
            f"{summary['expected_deliveries']}, missing {summary['missing']}, "
            f"duplicates {summary['duplicates']}")
    write_manifest(run_dir, manifest)
    draw([(None, summaries)], run_dir)
    draw_burst({a: s.get("burst") for a, s in summaries.items()}, run_dir)
    return run_dir, summaries


def run_sweep(spec_arg: str, overrides: list[str], key: str, values: list[Any],
              out_base: Path, *, log_messages: bool = True
              ) -> tuple[Path, dict[str, dict[str, dict[str, Any]]]]:
    """Simulate ``spec_arg`` once per value of the spec field ``key`` (as the papers'
    x axes sweep the number of advertisements or subscribers); one run folder per value
    inside a sweep folder, and line figures over the swept value."""
    # Every point is compiled before the first runs: a bad value fails the sweep at once.
    plans = [compile_plan(load_spec(spec_arg, [*overrides, f"{key}={v}"])) for v in values]
    sweep_dir = new_run_dir(out_base, f"{plans[0].name}-sim-sweep")
    points, results = [], {}
    for i, (value, plan) in enumerate(zip(values, plans, strict=True), 1):
        log(f"sweep {key}={value} ({i} of {len(values)})")
        label = re.sub(r"[^A-Za-z0-9._-]", "_", f"{key.rsplit('.', 1)[-1]}-{value}")
        _, summaries = run_simulation(plan, sweep_dir, log_messages=log_messages, label=label)
        points.append((float(value), summaries))
        results[str(value)] = summaries
    write_json(sweep_dir / SWEEP, {"key": key, "values": values, "summaries": results})
    figures = draw(points, sweep_dir, x_label=key.rsplit(".", 1)[-1],
                   figures=OCTOPIA_FIGURES + BURST_FIGURES)
    log(f"figures: {', '.join(str(f) for f in figures)}")
    return sweep_dir, results
