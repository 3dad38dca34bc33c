"""``pubsublab analyze --master spark://...`` on a real Spark standalone cluster (one master,
one one-core worker on 127.0.0.1, started from the jars inside PySpark) writes the same
Parquet metrics and the same result as the default local mode, and really runs on the
cluster: the master lists the application as finished and the worker holds its
executor's folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from spark_standalone import Cluster, spark_env, standalone_cluster

BIN = Path(sys.executable).parent  # the venv's bin: its python, pubsublab
APP_NAME = "pubsublab-analysis"  # analysis.session.spark_session's default
# Keys of the --json result that name this run's folder or measure time, not the analysis.
UNCOMPARED = ("run_dir", "metrics_dir", "report", "timing_s")
ANALYZE_TIMEOUT_S = 420  # bounded; a loaded two-core machine needs minutes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and a worker, started; the test waits for them (wait_for_workers) while
    its local run goes on."""
    with standalone_cluster(tmp_path_factory.mktemp("spark"), workers=1) as started:
        yield started


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
    return subprocess.Popen([str(BIN / "pubsublab"), "analyze", str(run), *master, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=spark_env())


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
        cluster.wait_for_workers()
        procs["cluster"] = _analyze(on_cluster, "--master", cluster.url)
        got = {name: _result(p, name, cluster if name == "cluster" else None)
               for name, p in procs.items()}
    finally:
        for p in procs.values():
            _end(p)

    # It ran on the cluster: the master lists it finished, the worker ran its executor.
    finished = cluster.finished_apps(APP_NAME, 1)
    assert len(finished) == 1, (f"the master lists no finished {APP_NAME}: "
                                f"{cluster.state()}\n{cluster.tails()}")
    app_dirs = list(cluster.work_dirs[0].glob("app-*"))
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
