"""The finished points of long reproductions shipped under ``experiments/papers/finished``
(docs/guide/reproducing.md): each is a point its paper's full-scale reproduction runs
now, the same resolved spec, so `reproduce PAPER --resume` of a copy reads it rather than
running it again; it ran from a clean commit, and its summaries are of that run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.reproduction import load_point
from experiments.reproduce import finished_run, load_paper, paper_specs
from nodes.runfolder import MANIFEST, REPRODUCTION_INDEX, REPRODUCTION_PAGE, SUMMARY

FINISHED = Path(__file__).resolve().parent.parent / "experiments" / "papers" / "finished"
FOLDERS = sorted(FINISHED.glob("*-reproduce-*-sim"))


def test_there_are_shipped_points() -> None:
    assert FOLDERS, f"no reproduction folder under {FINISHED}"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_every_shipped_point_is_one_the_reproduction_runs(folder: Path) -> None:
    paper = re.fullmatch(r"\d{8}-\d{6}-reproduce-(\w+)-sim", folder.name)
    assert paper, f"{folder.name}: not named <stamp>-reproduce-PAPER-sim"
    experiments = load_paper(paper[1])["experiments"]
    specs = paper_specs(experiments, {name: exp["full"] for name, exp in experiments.items()})
    runs = sorted(p.parent for p in folder.glob(f"*/*/{MANIFEST}"))
    assert runs
    for run in runs:
        exp = run.parent.name
        assert exp in specs, f"{run}: {exp} is not an experiment of {paper[1]}"
        found = [(x, spec) for x, _, spec in specs[exp]
                 if finished_run(folder / exp, spec, "simulated") == run]
        assert len(found) == 1, (f"{run}: no point of {exp} has its spec now (or two runs "
                              f"have one): run that point again, or remove it")
        # Only what --resume reads: the manifest and the summaries.
        assert {f.relative_to(run).as_posix() for f in run.rglob("*") if f.is_file()} == {
            MANIFEST, *(f"{a}/{SUMMARY}" for a in found[0][1].routing.algorithms)}
        point = load_point(run, found[0][0])
        assert point.manifest["git"]["dirty"] is False
        spec = found[0][1]
        for summary in point.summaries.values():
            # The summary is of this run: the runtime, scale and workload it names.
            assert (summary["runtime"], summary["scale"]) == ("simulated", spec.scale)
            events = point.manifest["spec"]["workload"].get("n_events")  # Meghdoot's
            assert events is None or summary["published"] == events


def _files(folder: Path) -> set[str]:
    return {f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file()}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_no_run_reads_the_shipped_points_and_lists_the_others(folder: Path,
                                                              tmp_path: Path) -> None:
    """`reproduce PAPER --resume COPY --no-run`: the page of the shipped points, nothing
    run, and exactly the data file's points without a shipped run listed as not run, with
    the data file's estimates; the rows over fewer points than the paper's say which."""
    paper = re.fullmatch(r"\d{8}-\d{6}-reproduce-(\w+)-sim", folder.name)[1]
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    before = _files(copy)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", paper,
                          "--resume", str(copy), "--no-run", "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert _files(copy) - before == {REPRODUCTION_INDEX, REPRODUCTION_PAGE}  # nothing ran
    assert "simulating" not in res.stderr and "left)" not in res.stderr
    experiments = load_paper(paper)["experiments"]
    specs = paper_specs(experiments, {name: exp["full"] for name, exp in experiments.items()})
    unshipped = [{"experiment": name, "x": x, "est_s": float(est)}
                 for name, exp in experiments.items()
                 for (x, _, spec), est in zip(specs[name], exp["full"]["est_s"], strict=True)
                 if finished_run(folder / name, spec, "simulated") is None]
    assert result["not_run"] == unshipped
    assert len(result["runs"]) == len(list(folder.glob(f"*/*/{MANIFEST}")))
    page = (copy / REPRODUCTION_PAGE).read_text(encoding="utf-8")
    for row in result["rows"]:
        missing = [p["x"] for p in unshipped if p["experiment"] == row["experiment"]]
        said = "; not run: " + ", ".join(f"{x:g}" for x in missing)
        assert (said in row["scale"]) == bool(missing), row["scale"]
    if unshipped:
        assert "<table id='not-run'>" in page
        for p in unshipped:
            assert f"<td>{p['experiment']}</td><td>{p['x']:,g}</td>" in page


def test_no_run_without_a_folder_to_read_is_refused_and_starts_nothing(
        tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--no-run", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        "pubsublab: error: --no-run reads the finished points of a reproduction folder: "
        "give it with --resume FOLDER"]
    assert not any(tmp_path.iterdir())
