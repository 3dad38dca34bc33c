"""``python -m experiments.point_process TASK``: one point of a reproduction or a sweep,
in its own process, as a Spark task starts it (:mod:`experiments.spark_points`).

``TASK`` is a JSON object: ``kind`` (``reproduce`` or ``sweep``), ``spec`` and
``overrides`` (what the point's plan is compiled from), ``out`` (the folder its run
folder goes into), ``label``, ``logs`` and ``first`` (among the first points the cluster
starts); a reproduction's point also ``name``, ``est_s``, ``can_pause``, ``deadline``
(the sitting's end in seconds since the epoch, null without a limit) and ``trust``; a
sweep's point ``allow_large``. The point runs with the function a local run uses; its
progress goes to standard error (the point's log) and its result, one JSON object, is
the last line of standard output: ``run_dir``, or ``paused`` (how far it got) or
``not_started`` (no time left for it). An error leaves a traceback in the log and a
non-zero status.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from experiments.plan import compile_plan
from experiments.progress import log
from experiments.spec import load_spec


def _reproduce_point(task: dict[str, Any]) -> dict[str, Any]:
    """A reproduction's point: :func:`experiments.reproduce.simulate_point`, with the
    time left of the sitting; one that is not among the first starts only if
    :func:`experiments.reproduce.time_for` says it may."""
    from experiments.reproduce import simulate_point, time_for
    from experiments.runs.simulated import RunPaused
    from nodes.time_left import TimeLeft

    deadline = task["deadline"]
    left_s = None if deadline is None else max(0.0, deadline - time.time())
    if not task["first"] and not time_for(left_s, task["can_pause"], task["est_s"]):
        return {"not_started": True}
    plan = compile_plan(load_spec(task["spec"], task["overrides"]),
                        allow_large=task.get("allow_large", False))
    progress = TimeLeft(task["name"], [(task["name"], task["est_s"])], log)
    progress.start()
    try:
        run_dir = simulate_point(plan, Path(task["out"]), task["label"],
                                 (task["spec"], task["overrides"]), task["logs"], left_s,
                                 progress, task["trust"])
    except RunPaused as paused:
        return {"paused": paused.how_far}
    progress.finish()
    return {"run_dir": str(run_dir)}


def _sweep_point(task: dict[str, Any]) -> dict[str, Any]:
    """A sweep's point: :func:`experiments.runs.simulated.run_simulation`."""
    from experiments.runs.simulated import run_simulation

    plan = compile_plan(load_spec(task["spec"], task["overrides"]),
                        allow_large=task["allow_large"])
    run_dir, _ = run_simulation(plan, Path(task["out"]), log_messages=task["logs"],
                                label=task["label"])
    return {"run_dir": str(run_dir)}


def main(argv: list[str]) -> int:
    """Run the point ``argv[0]`` describes and print its result (module docstring)."""
    task = json.loads(argv[0])
    run = {"reproduce": _reproduce_point, "sweep": _sweep_point}[task["kind"]]
    print(json.dumps(run(task)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
