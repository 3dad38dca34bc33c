"""A Spark standalone cluster on 127.0.0.1 for tests: one master and one-core workers,
started from the jars inside PySpark (no Spark installation), stopped with everything
their executors started."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).resolve().parent
WORKER_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path}: no log)"
    return f"--- {path} (last {n} lines) ---\n" + "\n".join(lines[-n:])


@dataclass
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    json_url: str  # the master's web UI state as JSON
    work_dirs: list[Path]  # per worker: one app-* folder per application it ran executors for
    logs: list[Path]
    procs: list[subprocess.Popen[bytes]]

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.json_url, timeout=5) as r:
            return json.load(r)

    def tails(self) -> str:
        """The ends of the master's and workers' logs and of every executor's."""
        executors = sorted(p for d in self.work_dirs for p in d.glob("app-*/*/stderr"))
        return "\n".join(_tail(p) for p in [*self.logs, *executors])

    def wait_for_workers(self, timeout_s: float = WORKER_TIMEOUT_S) -> None:
        """Until the master's web UI lists every worker alive; fails with the logs' ends."""
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [p.args[5] for p in self.procs if p.poll() is not None]  # the class
            if dead:
                pytest.fail(f"Spark {', '.join(dead)} exited at start-up\n{self.tails()}")
            try:
                if self.state().get("aliveworkers", 0) >= len(self.work_dirs):
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                pytest.fail(f"not all {len(self.work_dirs)} workers registered with the "
                            f"master at {self.url} within {timeout_s} s\n{self.tails()}")
            time.sleep(0.5)

    def finished_apps(self, name: str, n: int, timeout_s: float = 15) -> list[dict[str, Any]]:
        """The applications named ``name`` the master lists finished, once there are
        ``n`` of them (or after ``timeout_s``: the master learns of an end a moment
        after the driver stops)."""
        deadline = time.monotonic() + timeout_s
        while True:
            finished = [a for a in self.state().get("completedapps", [])
                        if a.get("name") == name and a.get("state") == "FINISHED"]
            if len(finished) >= n or time.monotonic() > deadline:
                return finished
            time.sleep(0.5)


def _java() -> str:
    java = shutil.which("java", path=os.environ.get("PATH"))
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        java = str(Path(home) / "bin" / "java")
    if not java:
        pytest.fail("Java is missing (Spark needs it): run `sudo make setup`")
    return java


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        # Own session: teardown can also reach the executors the worker forked.
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the worker's shutdown hook kills its executors
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):  # left in its session: an orphaned executor
        os.killpg(proc.pid, signal.SIGKILL)


def spark_env() -> dict[str, str]:
    """The environment of a driver on this machine: bound to 127.0.0.1, the executors
    running this interpreter."""
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


@contextlib.contextmanager
def standalone_cluster(base: Path, workers: int) -> Iterator[Cluster]:
    """A master and ``workers`` one-core workers with 1 GiB each, started in ``base``
    and stopped at the end; the caller waits for them (:meth:`Cluster.wait_for_workers`)
    while it does other work."""
    java = _java()
    if not (SPARK_HOME / "jars").is_dir():
        pytest.fail(f"{SPARK_HOME}/jars missing: reinstall pyspark (`sudo make setup`)")
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    classpath = f"{SPARK_HOME / 'jars'}/*"
    # bin/spark-class would export it (load-spark-env.sh); the worker needs it to build its
    # executors' class path from SPARK_HOME/jars ("Cannot find any build directories").
    (core,) = (SPARK_HOME / "jars").glob("spark-core_*.jar")
    scala = core.name.removeprefix("spark-core_").split("-")[0]
    roles = [("master", "org.apache.spark.deploy.master.Master",
              ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)])]
    for i in range(1, workers + 1):
        roles.append((f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                      [url, "--host", "127.0.0.1", "--port", str(_free_port()),
                       "--webui-port", str(_free_port()), "--cores", "1", "--memory", "1g",
                       "--work-dir", str(base / f"worker{i}" / "work")]))
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for role, cls, args in roles:
            d = base / role
            (d / "logs").mkdir(parents=True)
            (d / "work").mkdir()
            env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                   "SPARK_SCALA_VERSION": scala,
                   "SPARK_LOG_DIR": str(d / "logs"), "SPARK_WORKER_DIR": str(d / "work"),
                   "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
            logs.append(d / "logs" / f"{role}.log")
            procs.append(_start([java, "-Xmx512m", "-Dspark.master.rest.enabled=false",
                                 "-cp", classpath, cls, *args], env, logs[-1]))
        yield Cluster(url=url, json_url=f"http://127.0.0.1:{ui}/json/",
                      work_dirs=[base / f"worker{i}" / "work" for i in range(1, workers + 1)],
                      logs=logs, procs=procs)
    finally:
        for p in reversed(procs):
            _stop(p)
