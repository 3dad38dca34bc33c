"""``pubsublab demo``: the demo spec in Mininet, then its analysis and the next lab."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import emit
from experiments.cli.run import add_emulated_parser, run_emulated

NAME = "demo"
HELP = "run the demo experiment in Mininet (root), then analyse it into report.html"

# The handout that picks up where the demo ends: the same throttled iLink, live.
NEXT_LAB = "labs/lab3-congestion-idr.md"


def add_parser(sub: Any) -> None:
    """Add the ``demo`` subcommand to ``sub``: run's flags, without SPEC."""
    add_emulated_parser(sub, NAME, HELP, run, with_spec=False)


def run(args: argparse.Namespace) -> int:
    """The demo experiment, then its analysis: the verdict, the run's fidelity, the wire
    check, the report's path and the lab to read next. The run's table prints before the
    analysis starts (it takes half a minute)."""
    from analysis.fidelity_verdict import fidelity_text
    from analysis.idr_verdict import idr_verdict, verdict_text
    from analysis.job import analyze
    from experiments.progress import log

    args.spec = "demo"
    result, text, code = run_emulated(args)
    if not args.json:
        print(text, flush=True)
    log("analysing the run with Spark: captures and logs to metrics and report.html")
    analysis = analyze(Path(result["run_dir"]), None, report=True)
    verdict = idr_verdict(result.get("summaries", {}))
    result.update(report=analysis["report"], wire_check=analysis["wire_check"],
                  idr_verdict=verdict, next_lab=NEXT_LAB)
    lines = [verdict_text(verdict)] if verdict else []
    # The verdict's delays hold only as far as the fidelity does: said beside it.
    if result["fidelity_verdict"] is not None:
        lines.append(fidelity_text(result["fidelity_verdict"]))
    lines += [f"wire and logs: {analysis['wire_check']}", f"report: {analysis['report']}",
              f"next: {NEXT_LAB} (throttle an iLink yourself and watch IDR react live)"]
    emit(args, result, "\n".join(lines))
    return code
