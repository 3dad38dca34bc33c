"""``pubsublab reproduce PAPER --master spark://...`` on a standalone cluster of one master
and two one-core workers on 127.0.0.1 (tests/spark_standalone.py): Kyra's quick
reproduction (7 points, the quickest paper here) writes the page of a local run, its
points run as tasks of both workers' executors, each point in its own process, and a
small sweep summarises as a local one; a point whose process is killed, and one whose
worker is killed under it, are listed failed on the page with their logs, and --resume
runs them again; Meghdoot's points pause on the cluster; a --master that is no Spark
URL or does not answer fails in one line before anything runs. 4 to 5.5 minutes here
(2 cores shared with other runs, load 8 to 17)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_standalone import Cluster, spark_env, standalone_cluster

from experiments.spark_points import APP_NAME

PAPER = "kyra"
POINTS = 7  # Kyra's quick points: 5 experiments of one point, selectivity at 2
TIMEOUT_S = 420  # bounded; a loaded two-core machine needs minutes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark"), workers=2) as started:
        yield started


def _reproduce(out: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", "reproduce", PAPER,
                             "--quick", "--out", str(out), "--json", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=spark_env())


def _result(proc: subprocess.Popen[str], what: str, cluster: Cluster | None = None,
            status: int = 0) -> tuple[dict[str, Any], str]:
    """The --json object and the stderr of a reproduction that exits with ``status``."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what}: over {TIMEOUT_S} s\n{err[-4000:]}")
    assert proc.returncode == status, (f"{what}: exit {proc.returncode}\n{err[-4000:]}\n"
                                       f"{cluster.tails() if cluster else ''}")
    return json.loads(out.strip().splitlines()[-1]), err


def _summaries(result: dict[str, Any]) -> list[tuple[str, float | None, dict[str, Any]]]:
    """Per run, its experiment, x and summaries by algorithm, the matching delay (a
    measure of wall time) left out."""
    folder = Path(result["page"]).parent
    runs = []
    for run in result["runs"]:
        summaries = {}
        for f in sorted((folder / run["run_dir"]).glob("*/summary.json")):
            s = json.loads(f.read_text())
            s["delay_ms"] = {k: v for k, v in s["delay_ms"].items() if k != "matching"}
            summaries[f.parent.name] = s
        runs.append((run["experiment"], run["x"], summaries))
    return runs


def _runs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The run list without what names this run or measures its time."""
    return [{k: v for k, v in r.items() if k not in ("run_dir", "resources")}
            for r in result["runs"]]


def _sweep(out: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "experiments.cli", "sim", "flood-demo",
                             "--sweep", "workload.n_publishers=2,4", "--no-logs", "--out",
                             str(out), "--json", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=spark_env())


@pytest.fixture(scope="module")
def local_and_cluster(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
                      ) -> dict[str, tuple[dict[str, Any], str]]:
    """The quick reproduction and a small sweep run here (while the cluster starts) and
    on the cluster (both at once: the master starts the second application as the first
    frees the cores): each one's --json object and stderr."""
    out = tmp_path_factory.mktemp("reproductions")
    procs = {"local": _reproduce(out / "local"), "sweep-local": _sweep(out / "sweep-local")}
    try:
        cluster.wait_for_workers()
        procs["cluster"] = _reproduce(out / "cluster", "--master", cluster.url)
        procs["sweep-cluster"] = _sweep(out / "sweep-cluster", "--master", cluster.url)
        return {name: _result(p, name, cluster) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()


def test_the_cluster_writes_the_page_of_a_local_run(
        cluster: Cluster, local_and_cluster: dict[str, tuple[dict[str, Any], str]]) -> None:
    (local, _), (remote, err) = local_and_cluster["local"], local_and_cluster["cluster"]
    assert f"{POINTS} points on {cluster.url}" in err
    assert remote["rows"] == local["rows"] and len(local["rows"]) > 10
    assert any(r["ours"] is not None for r in remote["rows"])
    assert _runs(remote) == _runs(local) and len(remote["runs"]) == POINTS
    assert _summaries(remote) == _summaries(local)
    folder = Path(remote["page"]).parent
    assert (folder / "reproduction.html").stat().st_size > 10_000
    # Each point ran in its own process, its output in its own log beside its run.
    logs = sorted(folder.glob("*/*.log"))
    assert len(logs) == POINTS and all("took" in p.read_text() for p in logs), logs
    # It ran on the cluster: the master lists it finished, both workers ran executors.
    finished = cluster.finished_apps(f"{APP_NAME}: reproduce {PAPER}", 1)
    assert len(finished) == 1, f"{cluster.state()}\n{cluster.tails()}"
    for work in cluster.work_dirs:
        assert (work / finished[0]["id"]).is_dir(), cluster.tails()


@pytest.mark.parametrize(("command", "master", "line"), [
    (["reproduce", PAPER, "--quick"], "yarn",
     "--master 'yarn': not a Spark master URL; wanted spark://HOST:PORT (a standalone "
     "master) or local[N]"),
    (["reproduce", PAPER, "--quick"], "spark://127.0.0.1:FREE",
     "--master spark://127.0.0.1:FREE: no Spark master answers at 127.0.0.1:FREE "
     "(Connection refused, 3 s timeout)"),
    (["sim", "flood-demo", "--sweep", "workload.n_publishers=2,4"], "spark://127.0.0.1",
     "--master 'spark://127.0.0.1': not a Spark master URL; wanted spark://HOST:PORT (a "
     "standalone master) or local[N]"),
], ids=["no-url", "nothing-listens", "sweep-without-port"])
def test_a_master_that_is_no_url_or_does_not_answer_fails_in_one_line(
        command: list[str], master: str, line: str, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on (bound, not listening)
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
        res = subprocess.run([sys.executable, "-m", "experiments.cli", *command,
                              "--master", master.replace("FREE", port), "--out",
                              str(tmp_path)],
                             capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"pubsublab: error: {line.replace('FREE', port)}"]
    assert not list(tmp_path.iterdir())  # nothing made, nothing run


def test_points_that_can_pause_pause_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """Meghdoot's quick reproduction (its points can pause) in a sitting of no time: the
    first two points (one per worker's core) pause inside at their first pause, the
    others do not start, and the command printed goes on on the cluster."""
    cluster.wait_for_workers()
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "reproduce",
                             "meghdoot", "--quick", "--out", str(tmp_path), "--master",
                             cluster.url, "--pause-after-min", "0.0001", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=spark_env())
    paused, _ = _result(proc, "meghdoot, one sitting", cluster)
    folder = Path(paused["paused"])
    assert paused["go_on"] == (f"pubsublab reproduce meghdoot --quick --resume {folder} "
                               f"--pause-after-min 0.0001 --master {cluster.url}")
    how_far = paused["how_far"]
    assert re.match(r"reproduce meghdoot paused after .*, 0 of 9 points done, ", how_far)
    shares = re.findall(r"meghdoot paused at (\d+)% of its client operations", how_far)
    assert len(shares) == 2 and all(0 < int(s) < 100 for s in shares), how_far
    assert how_far.count(": not started") == 7, how_far
    assert len(list(folder.rglob("paused.json"))) == 2
    assert not (folder / "reproduction.html").exists()  # the page waits for every point


def _sweep_summaries(result: dict[str, Any]) -> dict[str, Any]:
    """A sweep's summaries by value and algorithm, the matching delay (wall time) left out."""
    return {v: {alg: {**s, "delay_ms": {k: d for k, d in s["delay_ms"].items()
                                        if k != "matching"}}
                for alg, s in summaries.items()} for v, summaries in result.items()}


def test_a_sweep_on_the_cluster_summarises_as_a_local_one(
        cluster: Cluster, local_and_cluster: dict[str, tuple[dict[str, Any], str]]) -> None:
    (local, _), (remote, err) = (local_and_cluster["sweep-local"],
                                 local_and_cluster["sweep-cluster"])
    assert f"2 points on {cluster.url}" in err
    assert _sweep_summaries(remote) == _sweep_summaries(local)
    assert sorted(local) == ["2", "4"]
    assert all(s["flood"]["delivered"] > 0 for s in local.values())
    # Each point's output in its own log in the sweep folder (where the figures are).
    figure = re.search(r"figures: (\S+\.png)", err)
    assert figure, err
    assert sorted(p.name for p in Path(figure[1]).parent.glob("*.log")) == [
        "n_publishers-2.log", "n_publishers-4.log"]


def _ancestors(pid: int) -> Iterator[int]:
    """The pids of a process's parent, its parent's parent, ... (while they are alive)."""
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        yield pid


def _point_process(out: Path, deadline_s: float, under: int | None = None,
                   not_label: str | None = None) -> tuple[int, dict[str, Any]]:
    """The first point process found whose task names ``out`` (and, if given, that runs
    under the process ``under`` and is not the point ``not_label``): its pid and task."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # ended meanwhile
            if (len(argv) > 3 and argv[2] == b"experiments.point_process"
                    and str(out).encode() in argv[3]):
                task = json.loads(argv[3])
                if task["label"] != not_label and (
                        under is None or under in _ancestors(int(pid))):
                    return int(pid), task
        time.sleep(0.02)
    pytest.fail(f"no point process of {out} within {deadline_s} s")


def _log_of(task: dict[str, Any]) -> str:
    """A point's log as the page names it (in the reproduction folder)."""
    return f"{Path(task['out']).name}/{task['label']}.log"


def test_a_point_whose_process_or_worker_dies_is_failed_and_resume_runs_it(
        cluster: Cluster, local_and_cluster: dict[str, tuple[dict[str, Any], str]],
        tmp_path: Path) -> None:
    """One point's process killed (as the kernel's OOM killer would), then the second
    worker with everything it started while it runs another point (as a machine that
    goes down): both points are failed on the page, with their logs; the other five
    make the rows; --resume runs the two alone. The last test here: one worker is left."""
    local, _ = local_and_cluster["local"]
    _, first, second = cluster.procs  # the master, the workers
    proc = _reproduce(tmp_path, "--master", cluster.url)
    try:
        # On the first worker: its task reports it before the second worker goes down.
        pid, killed = _point_process(tmp_path, TIMEOUT_S, under=first.pid)
        os.kill(pid, signal.SIGKILL)
        _, lost = _point_process(tmp_path, TIMEOUT_S, under=second.pid,
                                 not_label=killed["label"])
        os.killpg(second.pid, signal.SIGKILL)  # the worker, its executor, their processes
        result, err = _result(proc, "cluster, a point and a worker killed", cluster,
                              status=1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    failed = {p["log"]: p for p in result["failed"]}
    assert sorted(failed) == sorted([_log_of(killed), _log_of(lost)]), result["failed"]
    assert "killed by signal 9" in failed[_log_of(killed)]["error"]
    assert "its executor was lost while it ran" in failed[_log_of(lost)]["error"]
    folder = Path(result["page"]).parent
    assert all((folder / log).is_file() for log in failed)
    assert len(result["runs"]) == POINTS - 2
    page = (folder / "reproduction.html").read_text()
    assert "<h2>Points failed</h2>" in page
    assert all(f"href='{log}'" in page for log in failed)
    assert "2 points failed: " in err and f"--resume {folder} --master {cluster.url}" in err
    # --resume (here, without the cluster) runs those points alone, and the page is whole.
    again, err = _result(_reproduce(tmp_path, "--resume", str(folder)), "resume")
    assert err.count("reusing") == POINTS - 2 and "failed" not in again
    assert again["rows"] == local["rows"]
    assert "Points failed" not in (folder / "reproduction.html").read_text()
