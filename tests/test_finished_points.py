"""The finished points of long reproductions shipped under ``experiments/papers/finished``
(README, "Reproducing a paper"): each is a point its paper's full-scale reproduction runs
now, the same resolved spec, so `reproduce PAPER --resume` of a copy reads it rather than
running it again; it ran from a clean commit, and its summaries are of that run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.reproduction import load_point
from experiments.reproduce import finished_run, load_paper, paper_specs
from nodes.runfolder import MANIFEST, SUMMARY

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
        found = [(x, spec) for x, spec in specs[exp]
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
