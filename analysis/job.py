"""The analysis as a Spark application: ``spark-submit analysis/job.py RUN_DIR [--json]``.

Runs unchanged on any Spark cluster (the master comes from ``spark-submit``; the code the
executors need is shipped by :func:`analysis.session.spark_session`) and locally
(``python analysis/job.py RUN_DIR`` starts ``local[2]``). It is ``pubsublab analyze``
with the same options (``--master``, ``--no-report``, ``--json``), so there is one
definition of what the job does and prints.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run ``pubsublab analyze`` with this script's arguments."""
    # spark-submit runs this file as a script: the packages it imports live beside it.
    repo = str(Path(__file__).resolve().parent.parent)
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from experiments.cli import main as cli_main

    return cli_main(["analyze", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
