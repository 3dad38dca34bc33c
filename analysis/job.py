"""The analysis as a Spark application: ``spark-submit analysis/job.py RUN_DIR [--json]``.

Runs unchanged on any Spark cluster (the master comes from ``spark-submit``; the code the
executors need is shipped by :func:`analysis.session.spark_session`) and locally
(``python analysis/job.py RUN_DIR`` starts ``local[2]``). It takes the options of
``pubsublab analyze`` (``--master``, ``--no-report``, ``--json``) and prints the same:
progress on standard error, then :func:`analysis.pipeline.format_result`, or with
``--json`` the result as one JSON object on the last line of standard output. Errors are
one line on standard error and exit status 2. Analysis code only: it must not import
:mod:`experiments`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any


def _sigterm(_signo: int, _frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


def analyze(run_dir: Path, master: str | None, *, report: bool) -> dict[str, Any]:
    """Start Spark (``master``, default local), analyse ``run_dir``, stop Spark; the
    result. RuntimeError (one line) when ``run_dir`` is not a folder or its manifest
    cannot be read (analysis.run_manifest), both before Spark starts. ``pubsublab
    analyze`` calls this too."""
    from analysis.pipeline import progress, run_analysis
    from analysis.run_manifest import checked_manifest
    from analysis.session import spark_session

    if not run_dir.is_dir():
        raise RuntimeError(f"{run_dir} is not a folder (give a run folder, "
                           "e.g. runs/20260101-120000-demo)")
    checked_manifest(run_dir, progress)  # before Spark's minute of startup
    spark = spark_session(master)
    try:
        return run_analysis(spark, run_dir, report=report)
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    """Analyse the run folder named in ``argv`` (default: this script's arguments)."""
    p = argparse.ArgumentParser(prog="job.py", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--master", help="Spark master URL (default: spark-submit's, else local[2])")
    p.add_argument("--no-report", action="store_true", help="metrics only, no report.html")
    p.add_argument("--json", action="store_true",
                   help="print the result as one JSON object on the last line")
    args = p.parse_args(argv)
    # spark-submit runs this file as a script: the packages it imports live beside it.
    repo = str(Path(__file__).resolve().parent.parent)
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from analysis.pipeline import format_result

    signal.signal(signal.SIGTERM, _sigterm)  # stop Spark on the way out, as on Ctrl-C
    try:
        result = analyze(args.run_dir, args.master, report=not args.no_report)
    except (PermissionError, RuntimeError) as exc:  # RunFolderError among them
        print(f"pubsublab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pubsublab: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(result, sort_keys=True, default=str) if args.json
          else format_result(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
