"""Independent points (of a reproduction or a sweep) as Spark tasks, one point a task.

``pubsublab reproduce PAPER --master URL`` and ``pubsublab sim SPEC --sweep ... --master
URL`` hand their points to a Spark cluster instead of running them one after another.

Choices:

- **One process per point**: the Spark task starts ``python -m experiments.point_process``
  on its executor, which runs the point with the same function as a local run; a point
  that runs out of memory or crashes takes only its own process down, and the task
  reports it failed with its log. The point dies with the task (``PR_SET_PDEATHSIG``): an
  executor that is lost takes its point with it, and the point is failed (Spark's next
  attempt of the task reports it and runs nothing: a point that takes its worker down,
  out of memory, would take every worker down in turn).
- **One Spark job per point**, submitted from its own driver thread: a failed point
  fails its job alone, and the others' results come back.
- **Shared paths**: the executors run the point in this project at the driver's path,
  with the interpreter Spark runs there (``$PYSPARK_PYTHON`` as the driver sets it), and
  write into the reproduction (or sweep) folder at the driver's path: every executor
  must see both under the same names (a shared file system; on one machine, any local
  folder). Each point's output goes to ``<its out folder>/<label>.log``.
- **The session** is :func:`analysis.session.spark_session`'s, named ``pubsublab-points:
  WHAT`` (``reproduce PAPER``, ``sweep``), stopped when the points are done (the master
  then lists the application finished).
- **Masters**: ``spark://HOST:PORT`` (a standalone master, checked with a TCP connect
  before anything starts) or ``local[N]`` (N executor threads on this machine, each
  point still its own process).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.progress import log
from experiments.spec import SpecError

APP_NAME = "pubsublab-points"
CONNECT_TIMEOUT_S = 3.0
_ROOT = Path(__file__).resolve().parent.parent  # the project, as executors must see it
_STANDALONE = re.compile(r"spark://(?P<host>[^:/\s]+):(?P<port>\d{1,5})")
_LOCAL = re.compile(r"local(\[(\d+|\*)\])?")


def check_master(master: str) -> None:
    """SpecError in one line unless ``master`` is ``local[N]`` or a ``spark://HOST:PORT``
    that accepts a TCP connection within :data:`CONNECT_TIMEOUT_S`."""
    if _LOCAL.fullmatch(master):
        return
    url = _STANDALONE.fullmatch(master)
    if url is None or not 0 < int(url["port"]) < 65536:
        raise SpecError(f"--master {master!r}: not a Spark master URL; wanted "
                        "spark://HOST:PORT (a standalone master) or local[N]")
    host, port = url["host"], int(url["port"])
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SpecError(f"--master {master}: no Spark master answers at {host}:{port} "
                        f"({why}, {CONNECT_TIMEOUT_S:g} s timeout)") from None


@dataclass(frozen=True)
class PointJob:
    """One point to run: ``name`` as the log and the page name it, ``task`` what
    :mod:`experiments.point_process` runs (JSON), ``log`` where its output goes."""

    name: str
    task: dict[str, Any]
    log: Path


@dataclass(frozen=True)
class PointOutcome:
    """How a point ended: ``result``, the point process's (None if it failed), else
    ``error``, one line; ``host``, the executor's (None if no task reported)."""

    job: PointJob
    result: dict[str, Any] | None
    error: str | None
    host: str | None


def _launcher(python_path: str) -> Callable[[tuple[str, str]], dict[str, Any]]:
    """The function a Spark task runs: start the point process, wait, report. Made here,
    it is shipped by value (it imports only the standard library and pyspark): the
    executors import nothing of this project but the point process, from ``python_path``."""

    def launch(job: tuple[str, str]) -> dict[str, Any]:
        import ctypes
        import os
        import signal
        import socket
        import subprocess
        import sys

        from pyspark import TaskContext

        task, log_path = job
        host = socket.gethostname()
        if not os.path.isdir(os.path.join(python_path, "experiments")):
            return {"host": host, "error": f"no pubsublab at {python_path} on {host}: "
                                           "every executor needs it at the driver's path"}
        attempt = TaskContext.get().attemptNumber()
        if attempt > 0:  # an earlier attempt's executor was lost with the point
            return {"host": host, "error": f"its executor was lost while it ran (Spark's "
                                           f"attempt {attempt + 1}, not run again: a point "
                                           f"that takes its worker down would take them "
                                           f"all); log {log_path}"}

        def die_with_task() -> None:  # PR_SET_PDEATHSIG (1): SIGKILL when the task ends
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)

        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as out:  # a point run again adds to its log
            proc = subprocess.run(
                [sys.executable, "-m", "experiments.point_process", task],
                stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": python_path}, cwd=python_path,
                preexec_fn=die_with_task, check=False)
        lines = proc.stdout.decode(errors="replace").strip().splitlines()
        return {"host": host, "returncode": proc.returncode,
                "result": lines[-1] if lines else None}

    return launch


def _outcome(job: PointJob, reported: dict[str, Any]) -> PointOutcome:
    """What a task reported, as an outcome: the point process's last line of output is
    its result; for a process that failed, the signal that killed it or its status."""
    host = reported.get("host")
    if "error" in reported:
        return PointOutcome(job, None, reported["error"], host)
    code = reported["returncode"]
    if code == 0 and reported["result"]:
        return PointOutcome(job, json.loads(reported["result"]), None, host)
    how = (f"killed by signal {-code}" if code < 0 else f"exited with status {code}")
    return PointOutcome(job, None, f"the point's process {how} on {host}; log {job.log}",
                        host)


def _first_line(exc: Exception) -> str:
    """The first line of a Java exception's message, as Py4J passes it on."""
    text = str(getattr(exc, "java_exception", exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_points(master: str, jobs: Sequence[PointJob], what: str) -> list[PointOutcome]:
    """Run ``jobs`` as Spark tasks on ``master`` (module docstring), all at once, and
    return their outcomes in their order. Each task is told whether it is among the
    first the cluster starts (one per core: ``first`` in its task), which a reproduction
    with a time limit runs even without time left, so that every sitting gets on."""
    from py4j.protocol import Py4JJavaError

    from analysis.session import spark_session

    check_master(master)
    try:
        spark = spark_session(master, app_name=f"{APP_NAME}: {what}")
    except Py4JJavaError as exc:  # something answers at host:port that is no Spark master
        raise SpecError(f"--master {master}: the application did not start there "
                        f"({_first_line(exc)}); is it a Spark master?") from None
    try:
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        launch = _launcher(str(_ROOT))
        log(f"{what}: {len(jobs)} points on {sc.master} ({slots} at a time)")

        def one(index: int, job: PointJob) -> PointOutcome:
            task = json.dumps({**job.task, "first": index < slots})
            try:
                (reported,) = sc.parallelize([(task, str(job.log))], 1).map(launch).collect()
                outcome = _outcome(job, reported)
            except Py4JJavaError as exc:  # the task failed as often as Spark retries it
                outcome = PointOutcome(job, None, f"Spark task failed: {_first_line(exc)}; "
                                                  f"log {job.log}", None)
            log(f"{what}: {job.name} ended on {outcome.host}" if outcome.error is None
                else f"{what}: {job.name} FAILED: {outcome.error}")
            return outcome

        with ThreadPoolExecutor(max_workers=len(jobs) or 1) as pool:
            return list(pool.map(one, range(len(jobs)), jobs))
    finally:
        spark.stop()


def point_log(out: Path, label: str) -> Path:
    """Where the output of the point labelled ``label`` that runs into ``out`` goes."""
    return out / f"{label}.log"
