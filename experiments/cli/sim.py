"""``pubsublab sim SPEC``: a spec through the discrete-event simulator (no root)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import (
    SpecError,
    allow_large_flag,
    emit,
    json_flag,
    out_dir,
    pause_after_s,
    pause_flag,
    plan_of,
    run_or_pause,
    spec_arguments,
)

NAME = "sim"
HELP = "run a spec through the discrete-event simulator (no root)"


def add_parser(sub: Any) -> None:
    """Add the ``sim`` subcommand to ``sub`` (the subparsers action)."""
    sm = sub.add_parser(NAME, description="Run a spec's workload through the deterministic "
                                          "simulator hosting the same routing cores; one "
                                          "subfolder per algorithm with logs and "
                                          "summary.json.")
    spec_arguments(sm, with_spec=True)
    sm.add_argument("--sweep", metavar="KEY.PATH=V1,V2,...",
                    help="one run per value of a spec field, with line figures over it, "
                         "e.g. --sweep workload.n_publishers=100,200,300")
    sm.add_argument("--master", metavar="URL",
                    help="with --sweep: run the points on a Spark cluster, "
                         "spark://HOST:PORT (or local[N] on this machine), all at once, "
                         "each its own process on an executor; every executor must see "
                         "this project and the --out folder at the same paths as here (a "
                         "shared file system; on one machine any local folder)")
    sm.add_argument("--no-logs", action="store_true",
                    help="count only; skip per-message logs (for very large runs)")
    allow_large_flag(sm)
    pause_flag(sm)
    json_flag(sm)
    sm.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate the spec (or sweep one field) and print the summaries; a run paused by
    --pause-after-min prints where it is and how to go on."""
    from experiments.runs.simulated import run_simulation, run_sweep
    from experiments.runs.summaries import summary_table

    pause_s = pause_after_s(args)
    if pause_s is not None and (args.sweep or not args.no_logs):
        raise SpecError("--pause-after-min: only for one run with --no-logs (a paused run "
                        "cannot keep log files open)")
    if args.master is not None and not args.sweep:
        raise SpecError("--master: runs the points of a --sweep; one run runs here")
    if args.sweep:
        key, _, raw = args.sweep.partition("=")
        values = [v for v in raw.split(",") if v]
        if not key or not values:
            raise SpecError(f"--sweep {args.sweep!r}: expected key.path=V1,V2,...")
        sweep_dir, results = run_sweep(args.spec, args.set, key, values, out_dir(args.out),
                                       log_messages=not args.no_logs,
                                       allow_large=args.allow_large, master=args.master)
        text = "\n".join(f"{key}={v}\n{summary_table(s)}" for v, s in results.items())
        emit(args, results, f"{text}\nsweep folder: {sweep_dir}")
        return 0
    plan = plan_of(args)
    if plan.workload is None and not plan.rounds:
        raise SpecError(f"spec {plan.name!r} has no workload section: nothing to simulate")
    if pause_s is not None and plan.rounds:
        raise SpecError(f"--pause-after-min: spec {plan.name!r} runs a bulk workload, which "
                        "cannot pause")
    # A spec given as a file is named by its absolute path: a resume may start elsewhere.
    spec = str(Path(args.spec).resolve()) if Path(args.spec).is_file() else args.spec
    return run_or_pause(args, lambda: run_simulation(
        plan, out_dir(args.out), log_messages=not args.no_logs, pause_after_s=pause_s,
        source=(spec, list(args.set)) if pause_s is not None else None))
