"""`pubsublab reproduce PAPER`: run a paper's shipped experiment specs and write the page.

A paper is a data file, ``experiments/papers/PAPER.yaml`` (its headline numbers with
their sources in the seed text, and the experiments that measure ours; the file's head
comment describes its fields). Each experiment is a shipped spec run once per value of
its ``x.key`` (one run otherwise), at the spec's stated scale or, with ``quick``, at the
smaller scale the data file states for tests and CI. Everything goes into one folder::

    <out>/<stamp>-reproduce-<paper>-<runtime>[-quick]/
        <experiment>/<stamp>-<label>/      one run folder per point (manifest, summaries)
        reproduction.json                  the rows and the runs (the --json object)
        reproduction.html                  the page (analysis.reproduction)

``runtime``: ``sim`` runs the points in the simulator; ``emulated`` in Mininet (root),
except experiments the data file marks ``simulated_only`` (LBDD's 100..500-node depth
sweep), which run in the simulator and say so in the page's run list.

``beside``: an earlier reproduction folder of the same paper and scale in the other
runtime, whose rows and curves the page and the JSON show next to this one's (read from
its run folders, nothing run again).

``run=False`` (``--no-run``) with ``resume``: the page of the points the folder has,
nothing run; the points it lacks are listed (the JSON's ``not_run``, a table on the
page) with the data file's estimate of their time and how far a paused one got, and the
rows say which points they stand on. Meghdoot's shipped points are read this way in
seconds, where two of its points take longer than a working session here.

``pause_after_s``: the reproduction stops once that much wall time has passed, inside a
simulated point (one without logs, not bulk: the simulator's state goes into the point's
run folder, :mod:`experiments.runs.simulated`) or else before the next point
(:data:`START_LEFT_S`), and raises :class:`~experiments.runs.simulated.RunPaused`. The
first point it runs goes on to its first pause however little time is left, so that
each sitting gets on. ``resume`` goes on: a paused point is resumed where it stopped, on
the code it started on. A reproduction of Meghdoot at full scale (about 17 hours here)
runs this way over several sittings.

``master``: a Spark master URL; the points to run go to that cluster at once, each in its
own process on an executor (:mod:`experiments.spark_points`, which runs
:func:`simulate_point` there through :mod:`experiments.point_process`), and the page is
a local run's. A point whose process fails is listed on the page (``failed``: its error
and log) and ``resume`` runs it again. With ``pause_after_s`` each point pauses inside
its process at the sitting's end; points that had no time to start are named in the
pause.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from analysis.reproduction import (
    Beside,
    Point,
    headline_rows,
    load_point,
    reproduction_points,
    run_records,
    with_beside,
    write_page,
)
from analysis.reproduction_whys import check_why
from experiments.plan import RunPlan, compile_plan
from experiments.progress import log
from experiments.runs.manifest import spec_as_written
from experiments.runs.simulated import RunPaused, resume_simulation, run_simulation
from experiments.spark_points import PointJob, check_master, point_log, run_points
from experiments.spec import PAPERS, PAPERS_DIR, Spec, SpecError, load_spec
from nodes.runfolder import (
    MANIFEST,
    PAUSED,
    REPRODUCTION_INDEX,
    SUMMARY,
    new_run_dir,
    write_json,
)
from nodes.time_left import TimeLeft, duration_text

RUNTIMES = ("sim", "emulated")
# With a time limit, a point that can pause starts only with this much time left: it
# builds its workload and peers before its first pause, and a pause writes its whole
# state (gigabytes at 10,000 peers). One that cannot pause (logs, bulk, Mininet) starts
# only if its estimate fits.
START_LEFT_S = 60.0


def load_paper(name: str) -> dict[str, Any]:
    """The data file of paper ``name`` (SpecError naming the papers there are)."""
    if name not in PAPERS:
        raise SpecError(f"paper {name!r}: no data file; allowed: {', '.join(PAPERS)}")
    paper = yaml.safe_load((PAPERS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    for i, row in enumerate(paper["rows"], 1):
        try:
            check_why(row.get("why"), f"{name}.yaml row {i} ({row.get('figure')})")
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    return paper


def _mode_name(exp: Mapping[str, Any], quick: bool, emulated: bool) -> str:
    """The scale an experiment runs at: ``quick``; else, in Mininet, ``emulated`` where
    the data file gives one (fewer points or a smaller workload that 2 cores emulate
    faithfully, with its own ``conditions``); else ``full``."""
    if quick:
        return "quick"
    return "emulated" if emulated and "emulated" in exp else "full"


def _points(exp: Mapping[str, Any], mode: Mapping[str, Any]
            ) -> list[tuple[float | None, list[str]]]:
    """(x, spec overrides) of every run of one experiment at the scale ``mode``."""
    overrides = [*exp.get("set", []), *mode.get("set", [])]
    x = exp.get("x")
    if x is None:
        return [(None, overrides)]
    return [(float(v), [*overrides, f"{x['key']}={v}"]) for v in mode["values"]]


def paper_specs(experiments: Mapping[str, Any], modes: Mapping[str, Mapping[str, Any]]
                ) -> dict[str, list[tuple[float | None, list[str], Spec]]]:
    """Per experiment of a paper's data file, (x, spec overrides, resolved spec) of every
    point at the scale ``modes`` gives it (:func:`_mode_name`)."""
    return {name: [(x, overrides, load_spec(exp["spec"], overrides))
                   for x, overrides in _points(exp, modes[name])]
            for name, exp in experiments.items()}


def _run_emulated(plan: RunPlan, out: Path) -> Path:
    from experiments.runs.testbed import run_experiment, workload_phases

    run_dir, _ = run_experiment(plan, out, phases=workload_phases(plan))
    return run_dir


def _estimates(mode: Mapping[str, Any], n: int, emulated: bool = False) -> list[float]:
    """Per point, the seconds it should take: ``est_s`` is one figure for every point or
    a list with one per value (points whose times differ a hundredfold, as Meghdoot's
    100 to 10,000 peers, would otherwise make a poor estimate of the time left);
    ``est_emulated_s``, in the same form, replaces it for points run in Mininet (Kyra's
    64 servers take 20 s simulated and minutes emulated)."""
    est = mode.get("est_emulated_s", mode["est_s"]) if emulated else mode["est_s"]
    if isinstance(est, list):
        if len(est) != n:
            raise SpecError(f"est_s: {len(est)} figures for {n} points")
        return [float(e) for e in est]
    return [float(est)] * n


def _at(x: float | None) -> str:
    """`` at X`` for a point of a sweep, nothing for an experiment's one run."""
    return f" at {x:g}" if x is not None else ""


def _emulated(runtime: str, exp: Mapping[str, Any]) -> bool:
    """Whether an experiment's points run in Mininet under ``runtime``."""
    return runtime == "emulated" and not exp.get("simulated_only")


def finished_run(out: Path, spec: Spec, runtime: str) -> Path | None:
    """A run folder under ``out`` of an earlier run of exactly the resolved ``spec`` in
    ``runtime`` (``simulated`` or ``emulated``, as manifests say) that got as far as its
    summaries; None if there is none."""
    want = spec_as_written(spec)
    for manifest_path in sorted(out.glob(f"*/{MANIFEST}")):
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a run cut off while writing it: run the point again
        if (manifest.get("spec") == want and manifest.get("runtime") == runtime
                and any(manifest_path.parent.glob(f"*/{SUMMARY}"))):
            return manifest_path.parent
    return None


def paused_run(out: Path, plan: RunPlan) -> tuple[Path, float] | None:
    """A run folder under ``out`` of a simulated run of exactly ``plan``'s resolved spec
    that paused, and the share of the point done (its algorithms counted alike, the
    paused one by its client operations done); None if there is none. A pause file that
    cannot be read counts as none, and says so: the point runs anew."""
    want = spec_as_written(plan.spec)
    names = [a.name for a in plan.algorithms]
    for paused_path in sorted(out.glob(f"*/{PAUSED}")):
        try:
            paused = json.loads(paused_path.read_text(encoding="utf-8"))
            if paused["manifest"]["spec"] == want:
                share = (names.index(paused["algorithm"]) + float(paused["done"])) / len(names)
                return paused_path.parent, share
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log(f"{paused_path}: unreadable ({type(exc).__name__}: {exc}); not gone on with")
    return None


def _resume_folder(resume: Path, paper_name: str, runtime: str, quick: bool) -> Path:
    """The reproduction folder ``resume``, checked to be one of this paper and runtime."""
    name = f"reproduce-{paper_name}-{runtime}{'-quick' if quick else ''}"
    if not resume.is_dir() or not re.search(rf"-{re.escape(name)}(-\d+)?$", resume.name):
        raise SpecError(f"--resume {resume}: not a folder of `reproduce {paper_name}` "
                        f"({'--quick, ' if quick else ''}{runtime}), named <stamp>-{name}")
    return resume.resolve()


def _shown(runtime: str) -> str:
    """A --runtime value as manifests and pages name it."""
    return "emulated" if runtime == "emulated" else "simulated"


def load_beside(folder: Path, paper_name: str, runtime: str, quick: bool,
                figures: list[tuple[str, str]]) -> Beside:
    """The reproduction ``folder`` to show beside this one, checked to be of the same
    paper and scale in the other runtime, with the rows (figure, metric) of the data file
    now, and read back (SpecError in one line if not)."""
    want = f"a folder of `reproduce {paper_name}{' --quick' if quick else ''}`"
    try:
        result = json.loads((folder / REPRODUCTION_INDEX).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"--beside {folder}: not {want} that finished "
                        f"({type(exc).__name__}: {exc})") from None
    # A hand-edited or foreign index fails here in one line, not deep in the page.
    rows = result.get("rows") if isinstance(result, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "figure" in r
                                             and "metric" in r for r in rows):
        raise SpecError(f"--beside {folder / REPRODUCTION_INDEX}: not the index of {want} "
                        "(its rows are not a list of rows); reproduce it again")
    if (result.get("paper"), bool(result.get("quick"))) != (paper_name, quick):
        scale = "--quick" if result.get("quick") else "full scale"
        raise SpecError(f"--beside {folder}: a reproduction of {result.get('paper')!r} at "
                        f"{scale}; wanted {want}")
    if result.get("runtime") == runtime:
        raise SpecError(f"--beside {folder}: runtime {runtime} as this one; wanted the "
                        f"other runtime")
    if [(r["figure"], r["metric"]) for r in rows] != figures:
        raise SpecError(f"--beside {folder}: its rows are not the paper data file's now "
                        f"(written from another version of it); reproduce it again")
    try:
        points = reproduction_points(folder, result)
    except (OSError, ValueError, KeyError) as exc:
        raise SpecError(f"--beside {folder}: its runs cannot be read back "
                        f"({type(exc).__name__}: {exc})") from None
    return Beside(_shown(result["runtime"]), folder.resolve(), points, result["rows"])


def simulate_point(plan: RunPlan, out: Path, label: str, source: tuple[str, list[str]],
                   logs: bool, pause_after_s: float | None, progress: TimeLeft,
                   trust: bool = False) -> Path:
    """Run one point in the simulator into ``out`` (its run folder returned), going on
    with its paused run there if it has one. ``source``: the spec argument and overrides
    the plan was compiled from; ``pause_after_s``: when to pause, if at all (a point
    with ``logs`` runs to its end)."""
    paused = paused_run(out, plan)
    if paused is not None:
        progress.resumed(paused[1])
        return resume_simulation(paused[0], pause_after_s=pause_after_s, trust=trust)[0]
    out.mkdir(exist_ok=True)
    pause_after_s = None if logs else pause_after_s
    return run_simulation(plan, out, log_messages=logs, label=label,
                          pause_after_s=pause_after_s,
                          source=source if pause_after_s is not None else None)[0]


def _sitting_over(folder: Path, again: str, progress: TimeLeft, spent_s: float,
                  where: str, done: int | None = None) -> RunPaused:
    """The RunPaused of the reproduction in ``folder`` that paused after ``spent_s``
    ``where`` (a point and how far it got, or the point it stopped before); ``again``:
    the command that goes on; ``done``: the points done, if not ``progress``'s count."""
    done = progress.done if done is None else done
    return RunPaused(folder, f"{progress.what} paused after {duration_text(spent_s)}, "
                             f"{done} of {len(progress.steps)} points done, {where}",
                     again)


def _not_run_text(point: Mapping[str, Any]) -> str:
    """A point of ``not_run`` as the log names it: where, its estimate, how far it got."""
    paused = f", paused at {point['paused']:.0%}" if "paused" in point else ""
    return (f"{point['experiment']}{_at(point['x'])} (estimated "
            f"{duration_text(point['est_s'])}{paused})")


def go_on_command(paper_name: str, runtime: str, quick: bool, folder: Path,
                  beside: Path | None, pause_after_s: float | None,
                  master: str | None = None, allow_large: bool = False) -> str:
    """The command that goes on with the reproduction in ``folder`` after a pause, as
    the shell reads it (paths quoted; sudo for Mininet)."""
    return shlex.join([*(["sudo"] if runtime == "emulated" else []),
                       "pubsublab", "reproduce", paper_name,
                       *(["--runtime", runtime] if runtime != "sim" else []),
                       *(["--quick"] if quick else []), "--resume", str(folder.resolve()),
                       *(["--beside", str(beside.resolve())] if beside is not None else []),
                       *(["--pause-after-min", f"{pause_after_s / 60:g}"]
                         if pause_after_s is not None else []),
                       *(["--master", master] if master is not None else []),
                       *(["--allow-large"] if allow_large else [])])


def reproduce(paper_name: str, runtime: str, quick: bool, out_base: Path,
              resume: Path | None = None, beside: Path | None = None, run: bool = True,
              pause_after_s: float | None = None, trust: bool = False,
              master: str | None = None, allow_large: bool = False
              ) -> tuple[Path, dict[str, Any]]:
    """Run every experiment of the paper, then write the page; returns the folder and the
    result (``paper``, ``runtime``, ``rows``, ``runs``, ``page``). With ``resume``, an
    earlier reproduction folder of the same paper, runtime and scale: each point that has
    a finished run there (the same resolved spec) is read instead of run again, the others
    run into it, and the page is written anew. With ``beside``, an earlier reproduction of
    the same paper and scale in the other runtime: its rows go beside ours (each row's
    ``beside``) and its folder into the result's ``beside``. With ``run`` false, nothing
    runs: the points ``resume`` lacks go into the result's ``not_run`` (experiment, x,
    the data file's ``est_s`` and, for a point paused part way, ``paused``: the share
    done) and onto the page. With ``pause_after_s``, the
    reproduction pauses after that much wall time (module docstring): RunPaused, whose
    message says how to go on. A paused point's state is read only if this user's key
    signed it, or with ``trust`` (:mod:`nodes.sim.checkpoint`). With ``master``, a Spark
    master URL, the points to run go to that cluster all at once
    (:mod:`experiments.spark_points`); a point whose process fails goes into the
    result's ``failed`` (experiment, x, error, log) and onto the page, and ``resume``
    runs it again. With ``allow_large``, points larger than this machine holds are built
    anyway (:func:`experiments.plan.compile_plan`)."""
    t0 = time.monotonic()
    _check_flags(runtime, resume, run, pause_after_s, master)
    paper = load_paper(paper_name)
    other = (load_beside(beside, paper_name, runtime, quick,
                         [(r["figure"], r["metric"]) for r in paper["rows"]])
             if beside is not None else None)
    paper, in_mininet, todo, est_s = _plan_points(paper, runtime, quick, allow_large)
    if run and runtime == "emulated" and os.geteuid() != 0:
        raise PermissionError("emulated reproduction needs root: run with sudo")
    experiments: dict[str, Any] = paper["experiments"]
    folder = (_resume_folder(resume, paper_name, runtime, quick) if resume is not None
              else new_run_dir(out_base, f"reproduce-{paper_name}-{runtime}"
                                         f"{'-quick' if quick else ''}"))
    progress = TimeLeft(f"reproduce {paper_name}", [
        (f"{name} run {i} of {len(pts)}{_at(x)}", est) for name, pts in todo.items()
        for i, ((x, _, _), est) in enumerate(zip(pts, est_s[name], strict=True), 1)], log)
    again = go_on_command(paper_name, runtime, quick, folder, beside, pause_after_s, master,
                          allow_large)
    points: dict[str, list[Point | None]] = {}
    # With a master, the points to run there: (experiment, index) -> (x, job).
    jobs: dict[tuple[str, int], tuple[float | None, PointJob]] = {}
    not_run: list[dict[str, Any]] = []
    ran = False  # a point has run (or gone on) in this sitting
    for name, plans in todo.items():
        exp = experiments[name]
        points[name] = []
        for (x, overrides, plan), est in zip(plans, est_s[name], strict=True):
            out = folder / name
            emulated = in_mininet[name]
            logs = bool(exp.get("logs"))
            done = (finished_run(out, plan.spec, "emulated" if emulated else "simulated")
                    if resume is not None else None)
            left_s = _left_s(t0, pause_after_s)
            if (run and done is None and ran and master is None
                    and not time_for(left_s, not (emulated or logs or plan.rounds), est)):
                raise _sitting_over(folder, again, progress, time.monotonic() - t0,
                                    f"before {name}{_at(x)}")
            if run and (master is None or done is not None):  # no time left to tell else
                progress.start()
            if done is not None:
                log(f"reproduce {paper_name}: {name}{_at(x)}: reusing {done.name}")
                points[name].append(load_point(done, x))
                progress.skip()
                continue
            if not run:
                not_run.append(_not_run_entry(name, x, est, None if emulated
                                              else paused_run(out, plan)))
                continue
            ran = True
            if master is not None:
                jobs[name, len(points[name])] = x, _point_job(
                    name, x, exp, overrides, plan, out, est, t0, pause_after_s, trust,
                    allow_large)
                points[name].append(None)
                continue
            if emulated:
                run_dir = _run_emulated(plan, out)
            else:
                try:
                    run_dir = simulate_point(plan, out, _point_label(plan, exp, x),
                                             (exp["spec"], overrides),
                                             logs, left_s, progress, trust)
                except RunPaused as paused:
                    raise _sitting_over(folder, again, progress, time.monotonic() - t0,
                                        f"{name}{_at(x)}: {paused.how_far}") from None
            points[name].append(load_point(run_dir, x))
            progress.finish()
    failed = (_run_on_cluster(master, jobs, points, folder, again, progress, t0)
              if jobs and master is not None else [])
    result = _write_result(paper, paper_name, runtime, quick, folder,
                           {n: [p for p in pts if p is not None] for n, pts in points.items()},
                           other, not_run if not run else None, failed)
    log(f"reproduce {paper_name}: {len(result['rows'])} rows in "
        f"{duration_text(progress.elapsed_s())}; page {result['page']}")
    if failed:
        log(f"reproduce {paper_name}: {len(failed)} points failed: "
            + "; ".join(f"{p['experiment']}{_at(p['x'])} ({p['error']})" for p in failed)
            + f". Run them again with: {again}")
    return folder, result


def _point_job(name: str, x: float | None, exp: Mapping[str, Any], overrides: list[str],
               plan: RunPlan, out: Path, est_s: float, t0: float,
               pause_after_s: float | None, trust: bool, allow_large: bool = False
               ) -> PointJob:
    """A point of the reproduction as :mod:`experiments.point_process` runs it: into
    ``out``, pausing at the sitting's end (``t0`` its monotonic start) as a local run's."""
    label = _point_label(plan, exp, x)
    deadline = (None if pause_after_s is None
                else time.time() + pause_after_s - (time.monotonic() - t0))
    return PointJob(f"{name}{_at(x)}", {
        "kind": "reproduce", "name": f"{name}{_at(x)}", "spec": exp["spec"],
        "overrides": overrides, "out": str(out), "label": label,
        "logs": bool(exp.get("logs")), "est_s": est_s, "deadline": deadline,
        "can_pause": not (exp.get("logs") or plan.rounds),
        "trust": trust, "allow_large": allow_large}, point_log(out, label))


def _run_on_cluster(master: str,
                    jobs: Mapping[tuple[str, int], tuple[float | None, PointJob]],
                    points: dict[str, list[Point | None]], folder: Path, again: str,
                    progress: TimeLeft, t0: float) -> list[dict[str, Any]]:
    """Run ``jobs`` on the Spark ``master`` and put each finished one's point in its place
    in ``points``; returns the failed ones (experiment, x, error, log). RunPaused if a
    point paused or had no time to start, naming them (the page is written once none
    does, as in a local run)."""
    outcomes = run_points(master, [job for _, job in jobs.values()], progress.what)
    failed, stopped = [], []
    for ((name, i), (x, _)), outcome in zip(jobs.items(), outcomes, strict=True):
        result = outcome.result
        if result is None:
            failed.append({"experiment": name, "x": x, "error": outcome.error,
                           "log": str(outcome.job.log.relative_to(folder))})
        elif "run_dir" in result:
            points[name][i] = load_point(Path(result["run_dir"]), x)
        else:
            stopped.append(f"{outcome.job.name}: {result.get('paused', 'not started')}")
    if stopped:
        done = sum(p is not None for pts in points.values() for p in pts)
        raise _sitting_over(folder, again, progress, time.monotonic() - t0,
                            "; ".join(stopped), done)
    return failed


def time_for(left_s: float | None, can_pause: bool, est_s: float) -> bool:
    """Whether a point that is not the sitting's first may start with ``left_s`` seconds
    left (None: no bound): one that can pause needs ``START_LEFT_S``, another its whole
    estimate ``est_s``. The first point of a sitting runs even past the time (to its
    first pause): every sitting gets on."""
    return left_s is None or left_s >= (START_LEFT_S if can_pause else est_s)


def _left_s(t0: float, pause_after_s: float | None) -> float | None:
    """Seconds of the sitting left (monotonic ``t0`` its start), None without a bound."""
    return None if pause_after_s is None else max(0.0, t0 + pause_after_s - time.monotonic())


def _point_label(plan: RunPlan, exp: Mapping[str, Any], x: float | None) -> str:
    """A point's run folder label: the spec's name, and at a swept x the key's last part
    and the value, in file-name characters."""
    if x is None:
        return plan.name
    return re.sub(r"[^A-Za-z0-9._-]", "_",
                  f"{plan.name}-{exp['x']['key'].rsplit('.', 1)[-1]}-{x:g}")


def _not_run_entry(name: str, x: float | None, est_s: float,
                   part_way: tuple[Path, float] | None) -> dict[str, Any]:
    """A point --no-run lists: its experiment, x, estimated seconds and, paused part way,
    the share done."""
    return {"experiment": name, "x": x, "est_s": est_s,
            **({"paused": part_way[1]} if part_way else {})}


def _plan_points(paper: dict[str, Any], runtime: str, quick: bool, allow_large: bool = False
                 ) -> tuple[dict[str, Any], dict[str, bool],
                            dict[str, list[tuple[float | None, list[str], RunPlan]]],
                            dict[str, list[float]]]:
    """The paper with each experiment's conditions at the scale its points run at (the
    rows state them), whether each experiment runs in Mininet, its points' plans (x,
    overrides, plan) and their estimated seconds."""
    experiments: dict[str, Any] = paper["experiments"]
    in_mininet = {name: _emulated(runtime, exp) for name, exp in experiments.items()}
    names = {name: _mode_name(exp, quick, in_mininet[name])
             for name, exp in experiments.items()}
    modes = {name: experiments[name][mode] for name, mode in names.items()}
    paper = {**paper, "experiments": {
        name: {**exp, "conditions": modes[name].get("conditions", exp["conditions"]),
               "scale_name": names[name]}
        for name, exp in experiments.items()}}
    # Every point compiled before the first runs: a bad override fails at once.
    todo = {name: [(x, overrides, compile_plan(spec, allow_large=allow_large))
                   for x, overrides, spec in points]
            for name, points in paper_specs(experiments, modes).items()}
    # Which experiment, how far, and the time left: the data file's per-point estimates,
    # stretched by how long the points done so far took against theirs.
    est_s = {name: _estimates(modes[name], len(pts), in_mininet[name])
             for name, pts in todo.items()}
    return paper, in_mininet, todo, est_s


def _check_flags(runtime: str, resume: Path | None, run: bool,
                 pause_after_s: float | None, master: str | None = None) -> None:
    """SpecError for flags that do not go together, and for a Spark master that is no
    URL or does not answer, before anything is read or made."""
    if master is not None:
        if runtime == "emulated":
            raise SpecError("--master: Mininet points run one at a time on this machine; "
                            "--master is for --runtime sim")
        if not run:
            raise SpecError("--master: --no-run runs nothing on it")
        check_master(master)
    if not run and resume is None:
        raise SpecError("--no-run reads the finished points of a reproduction folder: "
                        "give it with --resume FOLDER")
    if not run and pause_after_s is not None:
        raise SpecError("--pause-after-min: --no-run runs nothing to pause")
    if runtime not in RUNTIMES:
        raise SpecError(f"--runtime {runtime!r}; allowed: {', '.join(RUNTIMES)}")


def _write_result(paper: dict[str, Any], paper_name: str, runtime: str, quick: bool,
                  folder: Path, points: dict[str, list[Point]], other: Beside | None,
                  not_run: list[dict[str, Any]] | None,
                  failed: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows, the reproduction index and the page of the points read or run; with
    ``not_run`` (--no-run) or ``failed`` (points whose process failed on a cluster), the
    points missing go onto both. Returns the index with the page's path."""
    shown = _shown(runtime)
    rows = headline_rows(paper, points, shown, [*(not_run or []), *failed])
    if other is not None:
        rows = with_beside(rows, other.rows, other.runtime)
    result = {"paper": paper_name, "runtime": runtime, "quick": quick, "rows": rows,
              "runs": run_records(points, folder),
              **({"not_run": not_run} if not_run is not None else {}),
              **({"failed": failed} if failed else {}),
              **({"beside": str(other.folder)} if other is not None else {})}
    write_json(folder / REPRODUCTION_INDEX, result)
    page = write_page(paper, rows, points, folder, runtime=shown, quick=quick,
                      beside=other, not_run=not_run or [], failed=failed)
    if not_run:
        log(f"reproduce {paper_name}: {len(not_run)} points not run (--no-run): "
            + ", ".join(map(_not_run_text, not_run)))
    return {**result, "page": str(page)}
