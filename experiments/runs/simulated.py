"""`pubsublab sim SPEC`: run a spec's workload through the discrete-event simulator.

No root, no Mininet: the same overlay, link figures and workload as the emulated run,
hosted by :mod:`nodes.sim.simulator`. The run folder holds a manifest, the exact workload, and one
subfolder per algorithm with the per-node logs and ``summary.json``.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.block_figures import draw_blocks, draw_sweep_blocks
from analysis.paper_figures import BURST_FIGURES, OCTOPIA_FIGURES, draw
from experiments.plan import AlgorithmPlan, RunPlan, compile_plan, pair_figures
from experiments.progress import log
from experiments.runs.bulk.simulated import run_bulk_simulation
from experiments.runs.manifest import (
    base_manifest,
    code_fingerprint,
    node_names,
    spec_as_written,
)
from experiments.runs.resources import RunCost, cost_text, parts_cost
from experiments.runs.summaries import log_extras, record_extras
from experiments.spark_points import PointJob, check_master, point_log, run_points
from experiments.spec import SpecError, load_spec
from nodes.metrics.log_summary import summarize_logs
from nodes.metrics.summary import delay_stats_ms
from nodes.runfolder import (
    PAUSED,
    PAUSED_STATE,
    SUMMARY,
    SWEEP,
    WORKLOAD,
    new_run_dir,
    read_json,
    write_json,
    write_manifest,
    write_summary,
)
from nodes.sim.checkpoint import Pause, Paused, StateRefused, check_state
from nodes.sim.links import LinkModel
from nodes.sim.result import SimResult, processing_figures, summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import resume, simulate
from nodes.time_left import TimeLeft, duration_text, memory_text
from nodes.workloads.ops import workload_to_jsonl
from nodes.workloads.oracle import iter_expected
from topologies.links import LinkParams


def run_simulation(plan: RunPlan, out_base: Path, *, log_messages: bool = True,
                   label: str | None = None, pause_after_s: float | None = None,
                   source: tuple[str, list[str]] | None = None
                   ) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Simulate every algorithm of ``plan``; returns the run folder and the summaries.
    A bulk workload (LBDD, point-to-point) is run by :mod:`experiments.runs.bulk`.

    With logs, each summary is read from them (:func:`nodes.metrics.log_summary.summarize_logs`,
    as in the emulated runtime) and completed with the in-memory figures the logs do not
    hold (matching delay, events, lost messages); without logs it is the in-memory
    summary, which a test holds equal to the log-based one.

    With ``pause_after_s`` (no logs) the run stops after that much wall time and raises
    :class:`RunPaused`: the folder holds the simulator's state and ``paused.json``, and
    :func:`resume_simulation` goes on. ``source`` is the spec argument and overrides the
    plan was compiled from, which make it again then."""
    if plan.rounds:
        return run_bulk_simulation(plan, out_base, label=label)
    workload = plan.workload
    if workload is None:
        raise ValueError(f"spec {plan.name!r} has no workload to simulate")
    if pause_after_s is not None and (log_messages or source is None):
        raise ValueError("a run that may pause needs no logs and its spec's source")
    cost = RunCost()
    overlay = plan.overlay
    run_dir = new_run_dir(out_base, label or f"{plan.name}-sim")
    workload_to_jsonl(workload, run_dir / WORKLOAD)
    manifest: dict[str, Any] = {
        **base_manifest(plan, run_dir, "simulated"),
        "workload": {**plan.workload_params, "meta": dict(workload.meta)},
        "overlay": {"brokers": overlay.number_of_nodes(), "links": overlay.number_of_edges()},
        **({"nodes": node_names(plan)} if log_messages else {}),
    }
    # The code is named as it is when the run starts: files changed while it runs do
    # not change what this process runs.
    paused = (_Paused(source, manifest, parts=[], code=code_fingerprint())
              if source is not None else None)
    return run_dir, _simulate(plan, run_dir, manifest, cost, log_messages=log_messages,
                              pause_after_s=pause_after_s, paused=paused)


class RunPaused(Exception):
    """A simulated run (or a reproduction) paused: ``run_dir`` holds it, ``how_far``
    says how far it got, and the message adds the command ``go_on`` that goes on."""

    def __init__(self, run_dir: Path, how_far: str, go_on: str) -> None:
        super().__init__(f"{how_far}. Go on with: {go_on}")
        self.run_dir, self.how_far, self.go_on = run_dir, how_far, go_on

    def record(self) -> dict[str, str]:
        """The pause as the commands' --json print it."""
        return {"paused": str(self.run_dir), "how_far": self.how_far, "go_on": self.go_on}


@dataclass
class _Paused:
    """What ``paused.json`` holds besides the pause itself: the spec argument and
    overrides the plan is compiled from again, the manifest so far, the cost of each
    part of the run so far, and the code it runs (:func:`code_fingerprint`)."""

    source: tuple[str, list[str]]
    manifest: dict[str, Any]
    parts: list[dict[str, Any]]
    code: str


def _simulate(plan: RunPlan, run_dir: Path, manifest: dict[str, Any], cost: RunCost, *,
              log_messages: bool, pause_after_s: float | None, paused: _Paused | None,
              resumed: tuple[str, float] | None = None, trust: bool = False
              ) -> dict[str, dict[str, Any]]:
    """Simulate the plan's algorithms into ``run_dir`` (those with a summary there
    already were run by an earlier part; ``resumed``: the algorithm whose paused state
    is there, and the share of its client operations done; ``trust``: read that state
    even if this user's key did not sign it), then the manifest and the figures."""
    workload, overlay = plan.workload, plan.overlay
    assert workload is not None
    summaries = {a.name: read_json(run_dir / a.name / SUMMARY) for a in plan.algorithms
                 if (run_dir / a.name / SUMMARY).exists()}
    # The algorithms are counted alike: the first one's pace sets the estimate.
    progress = TimeLeft(f"simulating {plan.name}", [(a.name, 1.0) for a in plan.algorithms],
                        log, seconds=False)
    pause = None
    for alg in plan.algorithms:
        if alg.name in summaries:  # an earlier part ran it
            progress.skip()
            continue
        out = run_dir / alg.name
        state = out / PAUSED_STATE
        if pause_after_s is not None:
            pause = Pause(cost.t0 + pause_after_s, state)
        progress.start(f"{overlay.number_of_nodes()} brokers, {len(workload.ops)} client "
                       "operations")
        try:
            if resumed is not None and resumed[0] == alg.name:
                progress.resumed(resumed[1])
                result = _resume_state(state, plan, paused, progress, pause, trust)
            else:
                # It may exist: a part stopped (killed) after the algorithm before
                # finished, before this one paused; without logs nothing stale is in it.
                out.mkdir(exist_ok=True)
                result = simulate(overlay, workload, alg.name, sim_settings(
                    plan, alg, out_dir=out if log_messages else None,
                    progress=progress.part, pause=pause))
        except Paused as stop:
            assert paused is not None
            raise _paused(run_dir, alg.name, stop, paused, cost) from None
        # The oracle's answer, one publication at a time after each simulation, never
        # held whole: at a 10,000-peer Meghdoot run's 40,000 events it was 57.8 million
        # (event, subscriber) pairs, 3 GiB as sets, and a run's summing up peaked 5 GiB
        # over its simulation. Worked out again for each algorithm: a second or two for
        # the stock workloads (17 s at 1,000 Meghdoot peers and 10,000 events, whose
        # plans have one algorithm).
        expected = iter_expected(workload)
        if log_messages:
            summary = summarize_logs(out, overlay.nodes, workload, alg.name, "simulated",
                                     plan.spec.scale, expected)
            summary["delay_ms"]["matching"] = delay_stats_ms(result.matching_s)
            summary.update(events=result.events, lost=result.lost)
            summary.update(log_extras(out, plan))
        else:
            summary = summarize(result, expected, scale=plan.spec.scale)
            # The records log_extras reads from the logs, read from the result instead.
            summary.update(record_extras(final_records(result), plan))
        if (processing := processing_figures(result)) is not None:
            summary["processing"] = processing
        write_summary(out, summary)
        state.unlink(missing_ok=True)  # from here on a resume skips the algorithm
        summaries[alg.name] = summary
        progress.finish()
        log(f"{alg.name}: delivered {summary['delivered']} of "
            f"{summary['expected_deliveries']}, missing {summary['missing']}, "
            f"duplicates {summary['duplicates']}")
    parts = [*paused.parts, cost.record()] if paused is not None else [cost.record()]
    manifest["resources"] = parts_cost(parts)
    write_manifest(run_dir, manifest)
    (run_dir / PAUSED).unlink(missing_ok=True)
    log(cost_text(manifest["resources"]))
    draw([(None, summaries)], run_dir)
    draw_blocks(summaries, run_dir)
    return summaries


def sim_settings(plan: RunPlan, alg: AlgorithmPlan, *, out_dir: Path | None = None,
                 until_s: float | None = None, progress: Callable[[float], None] | None = None,
                 pause: Pause | None = None) -> SimSettings:
    """The simulator's settings for algorithm ``alg`` of ``plan``: its parameters, seed,
    window, links (on demand, :func:`on_demand_links`), rate changes and processing model;
    per-message logs into ``out_dir`` (``None``: none), to simulated time ``until_s``
    (``None``: the plan's end, the end of its phase when timers would run for ever, as
    Meghdoot's load reports and CoDD's heartbeats do, else its duration)."""
    if until_s is None:
        timers = plan.kind.timers_bound_run or plan.repair_s() > 0
        until_s = plan.phase_s() if timers else plan.duration_s
    return SimSettings(
        seed=plan.spec.seed, core_params=dict(alg.params), derived=alg.derived,
        out_dir=out_dir, log_messages=out_dir is not None, window_ms=plan.window_ms,
        until_s=until_s, on_demand=on_demand_links(plan),
        link_changes=[(c.at_s, c.a, c.b, c.bw_mbps) for c in plan.link_schedule],
        processing=plan.processing, progress=progress, pause=pause)


def _paused(run_dir: Path, algorithm: str, stop: Paused, paused: _Paused,
            cost: RunCost) -> RunPaused:
    """Write ``paused.json`` for a run that just paused; the exception that says so."""
    parts = [*paused.parts, cost.record()]
    write_json(run_dir / PAUSED, {
        "spec": paused.source[0], "set": paused.source[1], "algorithm": algorithm,
        "code": paused.code,
        "done": stop.done, "t_s": stop.t_s, "parts": parts, "manifest": paused.manifest})
    size = memory_text(stop.path.stat().st_size / 2**20)
    return RunPaused(run_dir, f"{algorithm} paused at {stop.done:.0%} of its client "
                              f"operations (simulated time {stop.t_s:.1f} s) after "
                              f"{duration_text(parts[-1]['wall_s'])}; its state "
                              f"({size}) is in {stop.path}",
                     shlex.join(["pubsublab", "resume", str(run_dir)]))


def _resume_state(state: Path, plan: RunPlan, paused: _Paused | None, progress: TimeLeft,
                  pause: Pause | None, trust: bool) -> SimResult:
    """The paused simulation in ``state`` run on; a state that is refused (unsigned, by
    another key, damaged) or not this plan's is a SpecError in one line saying what to
    do, with nothing of it unpickled or run."""
    assert paused is not None
    try:
        return resume(state, on_demand=on_demand_links(plan), progress=progress.part,
                      pause=pause, trust=trust)
    except StateRefused as exc:
        raise _refused(exc, paused.source, trust) from None
    except ValueError as exc:  # a trusted pickle of something else, or another link model
        raise SpecError(str(exc)) from None


def _again(source: tuple[str, list[str]] | None) -> str:
    """The command that runs a paused point again from its start (``source``: its spec
    argument and overrides; None when the pause record that holds them is unreadable)."""
    if source is None:
        return "pubsublab sim SPEC --no-logs"
    spec, overrides = source
    return shlex.join(["pubsublab", "sim", spec,
                       *[a for o in overrides for a in ("--set", o)], "--no-logs"])


def _refused(exc: StateRefused, source: tuple[str, list[str]], trust: bool) -> SpecError:
    """The one line for a refused paused state: why, and what to do."""
    hint = ("" if trust else "; or, if you trust whoever made this folder, go on with "
            "--trust-paused-state (any code in the state then runs)")
    return SpecError(f"{exc}. A paused state is not a format for sharing: run the point "
                     f"again ({_again(source)}){hint}")


def resume_simulation(run_dir: Path, *, pause_after_s: float | None = None,
                      trust: bool = False) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Go on with the simulated run paused in ``run_dir`` (:func:`run_simulation` with
    ``pause_after_s``), on the code it started on, until it ends or pauses again.
    Every check is made before the state is read: SpecError, one line, else. The
    simulator's state is read only if this user's key signed it (:mod:`nodes.sim.checkpoint`)
    or with ``trust``, which the user gives for a folder they decide to trust."""
    cost = RunCost()
    if not run_dir.is_dir():
        raise SpecError(f"{run_dir}: no such run folder")
    with _only_here(run_dir):
        return run_dir, _resumed(run_dir, cost, pause_after_s, trust)


@contextmanager
def _only_here(run_dir: Path) -> Iterator[None]:
    """``run_dir`` locked by this process (an advisory lock on the folder, let go when
    the process ends however it ends): a second process going on with the same run, a
    `resume` beside a `reproduce --resume` that found it, would write the same state and
    summaries. SpecError in one line if another process holds it."""
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpecError(f"{run_dir}: another process is going on with this run "
                            "now") from None
        yield
    finally:
        os.close(fd)


def _resumed(run_dir: Path, cost: RunCost, pause_after_s: float | None, trust: bool
             ) -> dict[str, dict[str, Any]]:
    """:func:`resume_simulation`'s work, the folder held."""
    try:
        state = read_json(run_dir / PAUSED)
        if state is not None:
            manifest, spec, overrides, algorithm = (
                state["manifest"], state["spec"], state["set"], state["algorithm"])
            done, parts, code = state["done"], state["parts"], state["code"]
            _check_pause_record(manifest, spec, overrides, algorithm, done, parts, code)
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{run_dir / PAUSED}: unreadable ({type(exc).__name__}: {exc}); "
                        f"the run cannot go on: run the point again ({_again(None)})"
                        ) from None
    if state is None:
        raise SpecError(f"{run_dir / PAUSED}: missing, so {run_dir} is not a paused run "
                        f"(a finished run has none; else run the point again: "
                        f"{_again(None)})")
    here = code_fingerprint()
    if here != code:
        git = manifest.get("git") or {}
        at = (f"commit {git['commit'][:12]}{' with changes' if git.get('dirty') else ''}"
              if git.get("commit") else "code outside git")
        raise SpecError(f"{run_dir} was paused on code {code} (a digest of the sources, "
                        f"{at}); this is {here}: a paused run goes on only on the code it "
                        f"started on (check that out, or remove the folder to run anew)")
    plan = compile_plan(load_spec(spec, overrides))
    if spec_as_written(plan.spec) != manifest["spec"]:
        raise SpecError(f"{run_dir}: spec {spec!r} with {overrides} no longer resolves to "
                        "the spec the run started with")
    paused = _Paused((spec, overrides), manifest, parts, here)
    if (run_dir / algorithm / SUMMARY).exists():
        # A part stopped (killed) after the paused algorithm finished: the next ones go
        # on from their start.
        log(f"resuming {run_dir.name}: after {algorithm} (part {len(parts) + 1})")
        return _simulate(plan, run_dir, manifest, cost, log_messages=False,
                         pause_after_s=pause_after_s, paused=paused)
    if not (run_dir / algorithm / PAUSED_STATE).exists():
        raise SpecError(f"{run_dir / algorithm / PAUSED_STATE}: missing, the paused state "
                        f"of {algorithm}: run the point again ({_again((spec, overrides))})")
    try:  # before anything is said or started; the load checks again
        check_state(run_dir / algorithm / PAUSED_STATE, trust=trust)
    except StateRefused as exc:
        raise _refused(exc, (spec, overrides), trust) from None
    log(f"resuming {run_dir.name}: {algorithm} from {done:.0%} of its client operations "
        f"(part {len(parts) + 1})")
    return _simulate(plan, run_dir, manifest, cost, log_messages=False,
                     pause_after_s=pause_after_s, paused=paused, resumed=(algorithm, done),
                     trust=trust)


def _check_pause_record(manifest: Any, spec: Any, overrides: Any, algorithm: Any,
                        done: Any, parts: Any, code: Any) -> None:
    """TypeError naming the first field of ``paused.json`` of the wrong kind (a share
    ``done`` outside 0..1 included), which would otherwise fail deep in the run."""
    kinds = {"manifest": (manifest, dict), "spec": (spec, str), "algorithm": (algorithm, str),
             "code": (code, str), "set": (overrides, list), "parts": (parts, list)}
    for name, (value, kind) in kinds.items():
        if not isinstance(value, kind):
            raise TypeError(f"{name} is {type(value).__name__}, wanted {kind.__name__}")
    if not all(isinstance(o, str) for o in overrides):
        raise TypeError("set holds a value that is not a string")
    if not all(isinstance(p, dict) for p in parts):
        raise TypeError("parts holds a value that is not an object")
    if isinstance(done, bool) or not isinstance(done, int | float) or not 0 <= done <= 1:
        raise TypeError(f"done is {done!r}, wanted a share from 0 to 1")


def final_records(result: SimResult) -> list[dict[str, Any]]:
    """The brokers' end-of-run records (the cores' ``counters``, Meghdoot's ``can_peer``,
    CoDD's ``codd_node`` and ``codd_root`` ...), each naming its ``node`` and ``kind`` as
    its log record does."""
    return [{"node": b, **fields, "kind": k} for b, records in result.final.items()
            for k, fields in records]


def on_demand_links(plan: RunPlan) -> LinkModel | None:
    """How the simulator opens links on demand for ``plan`` (None: fixed links only): each
    pair meets the delay and the narrowest rate of the path between them. On one switch
    (the peers topology) the path is the two access links, summed per broker, so ten
    thousand peers need no path search per pair."""
    if plan.links != "on-demand":
        return None
    graph = plan.graph
    access: dict[str, tuple[str, LinkParams]] = {}  # broker -> its one switch, its link
    for b in plan.overlay.nodes:
        ends = list(graph.neighbors(b))
        if len(ends) == 1 and ends[0] not in plan.overlay:
            access[b] = (ends[0], graph.edges[b, ends[0]]["params"])

    @functools.cache  # asked once for the delay, once for the rate
    def searched(a: str, b: str) -> tuple[float | None, float]:
        bw, delay_ms, _ = pair_figures(graph, a, b)
        return bw, delay_ms

    def figures(a: str, b: str) -> tuple[float | None, float]:
        # Two brokers on one switch need no search and no cache: ten thousand peers
        # open millions of pairs, and a cache entry per pair cost more than the sum.
        if (a in access and b in access and access[a][0] == access[b][0]
                and "latency_ms" not in graph.graph):  # an underlay's pair delays
            pa, pb = access[a][1], access[b][1]
            rates = [r for r in (pa.bw_mbps, pb.bw_mbps) if r is not None]
            return (min(rates) if rates else None), pa.delay_ms + pb.delay_ms
        return searched(a, b)

    return LinkModel(latency_ms=lambda a, b: figures(a, b)[1],
                     link_mbps=lambda a, b: figures(a, b)[0])


def run_sweep(spec_arg: str, overrides: list[str], key: str, values: list[Any],
              out_base: Path, *, log_messages: bool = True, allow_large: bool = False,
              master: str | None = None
              ) -> tuple[Path, dict[str, dict[str, dict[str, Any]]]]:
    """Simulate ``spec_arg`` once per value of the spec field ``key`` (as the papers'
    x axes sweep the number of advertisements or subscribers); one run folder per value
    inside a sweep folder, and line figures over the swept value. With ``master``, a
    Spark master URL, the points run on that cluster at once
    (:mod:`experiments.spark_points`); RuntimeError naming those whose process failed."""
    if master is not None:
        check_master(master)
    # Every point is compiled before the first runs: a bad value fails the sweep at once.
    sets = [[*overrides, f"{key}={v}"] for v in values]
    plans = [compile_plan(load_spec(spec_arg, s), allow_large=allow_large) for s in sets]
    sweep_dir = new_run_dir(out_base, f"{plans[0].name}-sim-sweep")
    labels = [re.sub(r"[^A-Za-z0-9._-]", "_", f"{key.rsplit('.', 1)[-1]}-{v}") for v in values]
    if master is not None:
        summaries = _sweep_on_cluster(master, spec_arg, sets, labels, plans, sweep_dir,
                                      log_messages, allow_large)
    else:
        summaries = []
        progress = TimeLeft("sweep", [(f"{key}={v}", 1.0) for v in values], log, seconds=False)
        for plan, label in zip(plans, labels, strict=True):
            progress.start()
            summaries.append(run_simulation(plan, sweep_dir, log_messages=log_messages,
                                            label=label)[1])
            progress.finish()
    points = [(float(v), s) for v, s in zip(values, summaries, strict=True)]
    results = {str(v): s for v, s in zip(values, summaries, strict=True)}
    write_json(sweep_dir / SWEEP, {"key": key, "values": values, "summaries": results})
    x_label = key.rsplit(".", 1)[-1]
    figures = draw(points, sweep_dir, x_label=x_label, figures=OCTOPIA_FIGURES + BURST_FIGURES)
    figures += draw_sweep_blocks(results, x_label, sweep_dir)
    log(f"figures: {', '.join(str(f) for f in figures)}")
    return sweep_dir, results


def _sweep_on_cluster(master: str, spec_arg: str, sets: list[list[str]], labels: list[str],
                      plans: list[RunPlan], sweep_dir: Path, log_messages: bool,
                      allow_large: bool) -> list[dict[str, dict[str, Any]]]:
    """A sweep's points (their overrides ``sets``, compiled to ``plans``) run on the
    Spark ``master``, each into ``sweep_dir``; their summaries, read back from their run
    folders, in order, by algorithm in the plan's order (as a local run returns them)."""
    jobs = [PointJob(label, {"kind": "sweep", "spec": spec_arg, "overrides": s,
                             "out": str(sweep_dir), "label": label, "logs": log_messages,
                             "allow_large": allow_large}, point_log(sweep_dir, label))
            for s, label in zip(sets, labels, strict=True)]
    outcomes = run_points(master, jobs, "sweep")
    failed = [f"{o.job.name} ({o.error})" for o in outcomes if o.result is None]
    if failed:
        raise RuntimeError(f"sweep {sweep_dir}: {len(failed)} of {len(jobs)} points "
                           f"failed: {'; '.join(failed)}")
    return [{a.name: read_json(Path(o.result["run_dir"]) / a.name / SUMMARY)
             for a in plan.algorithms}
            for o, plan in zip(outcomes, plans, strict=True) if o.result is not None]
