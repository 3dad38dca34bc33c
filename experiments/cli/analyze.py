"""``pubsublab analyze RUN_DIR``: Spark over a run folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import emit, json_flag

NAME = "analyze"
HELP = "Spark over a run folder: Parquet metrics, the wire/log cross-check, report.html"


def add_parser(sub: Any) -> None:
    """Add the ``analyze`` subcommand to ``sub`` (the subparsers action)."""
    an = sub.add_parser(NAME, description="Parse the run's pcaps and logs with Spark, write "
                                          "Parquet metrics under RUN_DIR/metrics/ and "
                                          "RUN_DIR/report.html; the same job runs on a "
                                          "cluster as `spark-submit analysis/job.py "
                                          "RUN_DIR`.")
    an.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    an.add_argument("--master", help="Spark master URL (default local[2])")
    an.add_argument("--no-report", action="store_true", help="metrics only, no report.html")
    json_flag(an)
    an.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Analyse the run folder and print what was written."""
    from analysis.job import analyze
    from analysis.pipeline import format_result

    result = analyze(args.run_dir, args.master, report=not args.no_report)
    emit(args, result, format_result(result))
    return 0
