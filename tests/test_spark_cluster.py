"""``pubsublab analyze --master spark://...`` on a real Spark standalone cluster (one master,
one one-core worker on 127.0.0.1, started from the jars inside PySpark) writes the same
Parquet metrics and the same result as the default local mode, and really runs on the
cluster: the master lists the application as finished and the worker holds its
executor's folder."""

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

import pandas as pd
import pyspark
import pytest

BIN = Path(sys.executable).parent  # the venv's bin: its python, pubsublab
SPARK_HOME = Path(pyspark.__file__).resolve().parent
APP_NAME = "pubsublab-analysis"  # analysis.session.spark_session's default
# Keys of the --json result that name this run's folder or measure time, not the analysis.
UNCOMPARED = ("run_dir", "metrics_dir", "report", "timing_s")
WORKER_TIMEOUT_S = 90
ANALYZE_TIMEOUT_S = 420  # bounded; a loaded two-core machine needs minutes


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
    work_dir: Path  # the worker's: one app-* folder per application it ran executors for
    logs: list[Path]
    procs: list[subprocess.Popen[bytes]]

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.json_url, timeout=5) as r:
            return json.load(r)

    def tails(self) -> str:
        """The ends of the master's and worker's logs and of every executor's."""
        executors = sorted(self.work_dir.glob("app-*/*/stderr"))
        return "\n".join(_tail(p) for p in [*self.logs, *executors])

    def wait_for_worker(self, timeout_s: float = WORKER_TIMEOUT_S) -> None:
        """Until the master's web UI lists the worker alive; fails with the logs' ends."""
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [p.args[5] for p in self.procs if p.poll() is not None]  # the class
            if dead:
                pytest.fail(f"Spark {', '.join(dead)} exited at start-up\n{self.tails()}")
            try:
                if self.state().get("aliveworkers", 0) >= 1:
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                pytest.fail(f"no worker registered with the master at {self.url} within "
                            f"{timeout_s} s\n{self.tails()}")
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and a worker, started; the test waits for them (wait_for_worker) while
    its local run goes on."""
    java = _java()
    if not (SPARK_HOME / "jars").is_dir():
        pytest.fail(f"{SPARK_HOME}/jars missing: reinstall pyspark (`sudo make setup`)")
    base = tmp_path_factory.mktemp("spark")
    port, ui, worker_port, worker_ui = (_free_port() for _ in range(4))
    url = f"spark://127.0.0.1:{port}"
    classpath = f"{SPARK_HOME / 'jars'}/*"
    # bin/spark-class would export it (load-spark-env.sh); the worker needs it to build its
    # executors' class path from SPARK_HOME/jars ("Cannot find any build directories").
    (core,) = (SPARK_HOME / "jars").glob("spark-core_*.jar")
    scala = core.name.removeprefix("spark-core_").split("-")[0]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    for role, cls, args in (
        ("master", "org.apache.spark.deploy.master.Master",
         ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)]),
        ("worker", "org.apache.spark.deploy.worker.Worker",
         [url, "--host", "127.0.0.1", "--port", str(worker_port), "--webui-port",
          str(worker_ui), "--cores", "1", "--memory", "1g", "--work-dir",
          str(base / "worker" / "work")]),
    ):
        d = base / role
        (d / "logs").mkdir(parents=True)
        (d / "work").mkdir()
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_SCALA_VERSION": scala,
               "SPARK_LOG_DIR": str(d / "logs"), "SPARK_WORKER_DIR": str(d / "work"),
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        logs.append(d / "logs" / f"{role}.log")
        procs.append(_start([java, "-Xmx512m", "-Dspark.master.rest.enabled=false", "-cp",
                            classpath, cls, *args], env, logs[-1]))
    try:
        yield Cluster(url=url, json_url=f"http://127.0.0.1:{ui}/json/",
                      work_dir=base / "worker" / "work", logs=logs, procs=procs)
    finally:
        for p in reversed(procs):
            _stop(p)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated run, as `pubsublab sim` leaves it (logs and summaries, no pcaps)."""
    out = tmp_path_factory.mktemp("runs")
    res = subprocess.run([str(BIN / "pubsublab"), "sim", "flood-demo", "--out", str(out),
                          "--json", "--set",
                          "workload={n_publishers: 2, n_subscribers: 8, selectivity: 0.1}"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    (run,) = out.iterdir()
    return run


def _analyze(run: Path, *master: str) -> subprocess.Popen[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen([str(BIN / "pubsublab"), "analyze", str(run), *master, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _end(proc: subprocess.Popen[str]) -> None:
    """Stop an analysis still running: SIGTERM stops its Spark session, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _result(proc: subprocess.Popen[str], what: str, cluster: Cluster | None = None
            ) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=ANALYZE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what}: analyze took over {ANALYZE_TIMEOUT_S} s\n{err[-4000:]}\n"
                    f"{cluster.tails() if cluster else ''}")
    assert proc.returncode == 0, (f"{what}: analyze failed\n{err[-4000:]}\n"
                                  f"{cluster.tails() if cluster else ''}")
    return json.loads(out.strip().splitlines()[-1])


def _comparable(result: dict[str, Any], run: Path) -> Any:
    """The result without timings and paths; this run's folder written as RUN."""
    kept = {k: v for k, v in result.items() if k not in UNCOMPARED}
    return json.loads(json.dumps(kept, sort_keys=True, default=str).replace(str(run), "RUN"))


def _table(path: Path, run: Path) -> pd.DataFrame:
    """A metrics table read with pandas, in a canonical order, its paths written as RUN."""
    df = pd.read_parquet(path)
    for col in df.columns:
        if isinstance(df[col].dtype, pd.CategoricalDtype):  # partition columns
            df[col] = df[col].astype(str)
        elif df[col].dtype == object:
            df[col] = df[col].map(
                lambda v: v.replace(str(run), "RUN") if isinstance(v, str) else v)
    df = df[sorted(df.columns)]
    keys = df.map(repr)  # every value sortable, lists and None included
    order = keys.sort_values(list(keys.columns), kind="stable").index
    return df.loc[order].reset_index(drop=True)


def test_cluster_and_local_mode_write_the_same_metrics(cluster: Cluster, run_dir: Path,
                                                       tmp_path: Path) -> None:
    on_cluster = tmp_path / "cluster" / run_dir.name
    local = tmp_path / "local" / run_dir.name
    shutil.copytree(run_dir, on_cluster)
    shutil.copytree(run_dir, local)
    procs = {"local": _analyze(local)}  # while the cluster starts; then both at once
    try:
        cluster.wait_for_worker()
        procs["cluster"] = _analyze(on_cluster, "--master", cluster.url)
        got = {name: _result(p, name, cluster if name == "cluster" else None)
               for name, p in procs.items()}
    finally:
        for p in procs.values():
            _end(p)

    # It ran on the cluster: the master lists it finished, the worker ran its executor.
    deadline = time.monotonic() + 15
    while True:
        state = cluster.state()
        finished = [a for a in state.get("completedapps", [])
                    if a.get("name") == APP_NAME and a.get("state") == "FINISHED"]
        if finished or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(finished) == 1, (f"the master lists no finished {APP_NAME}: {state}\n"
                                f"{cluster.tails()}")
    app_dirs = list(cluster.work_dir.glob("app-*"))
    assert [d.name for d in app_dirs] == [finished[0]["id"]], app_dirs
    assert list(app_dirs[0].glob("*/stderr")), "the executor left no log"

    # The same result, timings and paths aside, and a non-trivial one.
    assert _comparable(got["cluster"], on_cluster) == _comparable(got["local"], local)
    flood = got["local"]["algorithms"]["flood"]
    assert got["local"]["log_records"] > 0 and flood["deliveries"]["delivered"] > 0
    assert flood["summary_agrees"], flood["summary_differences"]

    # The same Parquet tables, row for row.
    tables = sorted(p.name for p in (local / "metrics").iterdir() if p.is_dir())
    assert tables == sorted(p.name for p in (on_cluster / "metrics").iterdir() if p.is_dir())
    assert {"log_events", "delays", "deliveries", "ims_by_link"} <= set(tables)
    for name in tables:
        a = _table(on_cluster / "metrics" / name, on_cluster)
        b = _table(local / "metrics" / name, local)
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=f"metrics/{name}")
    assert len(_table(local / "metrics" / "log_events", local)) == got["local"]["log_records"]
