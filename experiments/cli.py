"""The `pubsublab` command line.

Every subcommand has --help. Commands that accept --json print progress on standard error
and, as the last line of standard output, one JSON object with their results.
Emulated commands need root and say so in one line when run without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.spec import PAPERS, SpecError, load_spec
from nodes.runfolder import RUNS_BASE as DEFAULT_RUNS


def _emit(args: argparse.Namespace, result: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print(text)


def cmd_doctor(args: argparse.Namespace) -> int:
    from experiments.emulation.doctor import format_report, probe

    result = probe()
    _emit(args, result, format_report(result))
    return 0 if result["ok"] else 1


def _topo_params(pairs: list[str]) -> dict[str, Any]:
    import yaml

    params: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise SpecError(f"--param {pair!r}: expected key=value")
        k, v = pair.split("=", 1)
        try:
            params[k] = yaml.safe_load(v)
        except yaml.YAMLError as exc:
            raise SpecError(f"--param {pair!r}: not valid YAML: "
                            f"{str(exc).splitlines()[0]}") from None
    return params


def cmd_topo(args: argparse.Namespace) -> int:
    from topologies.links import LinkParams
    from topologies.registry import TOPOLOGIES, build_graph, describe

    if args.action == "list":
        _emit(args, {"topologies": sorted(TOPOLOGIES)}, "\n".join(sorted(TOPOLOGIES)))
        return 0
    if not args.name:
        raise SpecError("topo show: name a topology (pubsublab topo list)")
    try:
        links = None
        if args.bw_mbps is not None or args.delay_ms is not None:
            links = LinkParams(bw_mbps=args.bw_mbps, delay_ms=args.delay_ms or 0.0)
        g = build_graph(args.name, _topo_params(args.param), links)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    d = describe(g)
    counts = ", ".join(f"{k} {v}" for k, v in d["counts"].items())
    text = f"{d['name']} ({d['mode']}): {counts}"
    for note in d.get("notes", []):
        text += f"\nnote: {note}"
    _emit(args, d, text)
    return 0


def _plan(args: argparse.Namespace) -> Any:
    """The compiled plan of the command's spec (every check done, nothing started)."""
    from experiments.plan import compile_plan

    return compile_plan(load_spec(args.spec, args.set))


def _out_dir(path: Path) -> Path:
    """The ``--out`` folder, made if missing; SpecError (one line) if it cannot hold runs."""
    import os

    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as exc:
        raise SpecError(f"--out {str(path)[:80]!r}: cannot hold run folders "
                        f"({exc.strerror or exc})") from None
    return path


def cmd_plan(args: argparse.Namespace) -> int:
    from experiments.plan_text import format_plan

    plan = _plan(args)
    _emit(args, plan.describe(), format_plan(plan))
    return 0


def _run(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    """Run the command's spec in Mininet: the result, its text and the exit status."""
    import os

    from experiments.plan import emulation_fits
    from experiments.runs.faults import EXIT_LOSSY, LOSSY
    from experiments.runs.resources import physical_memory_bytes
    from experiments.runs.summaries import summary_table
    from experiments.runs.testbed import run_experiment, workload_phases

    plan = _plan(args)
    if not args.allow_large:
        mem_mb = physical_memory_bytes() / 2**20
        too_big = emulation_fits(plan, os.cpu_count() or 1, mem_mb)
        if too_big:
            raise SpecError(f"topology too large to emulate here: {too_big} (--allow-large "
                            "to try anyway, or pubsublab sim)")
    if os.geteuid() != 0:
        raise PermissionError("emulated runs need root: run with sudo")
    phases = workload_phases(plan)
    run_dir, manifest = run_experiment(plan, _out_dir(args.out), cli=args.cli, phases=phases)
    summaries = manifest.get("summaries", {})
    result = {"run_dir": str(run_dir), "status": manifest["status"],
              "fidelity": manifest.get("fidelity"), "timing": manifest.get("timing"),
              "faults": manifest.get("faults"),
              **({"summaries": summaries} if summaries else {})}
    text = f"run folder: {run_dir}\nstatus: {manifest['status']}"
    if summaries:
        text = f"{summary_table(summaries)}\n{text}"
    return result, text, EXIT_LOSSY if manifest["status"] == LOSSY else 0


def cmd_run(args: argparse.Namespace) -> int:
    result, text, code = _run(args)
    _emit(args, result, text)
    return code


def cmd_sim(args: argparse.Namespace) -> int:
    from experiments.runs.simulated import run_simulation, run_sweep
    from experiments.runs.summaries import summary_table

    pause_after_s = _pause_after_s(args)
    if pause_after_s is not None and (args.sweep or not args.no_logs):
        raise SpecError("--pause-after-min: only for one run with --no-logs (a paused run "
                        "cannot keep log files open)")
    if args.sweep:
        key, _, raw = args.sweep.partition("=")
        values = [v for v in raw.split(",") if v]
        if not key or not values:
            raise SpecError(f"--sweep {args.sweep!r}: expected key.path=V1,V2,...")
        sweep_dir, results = run_sweep(args.spec, args.set, key, values, _out_dir(args.out),
                                       log_messages=not args.no_logs)
        text = "\n".join(f"{key}={v}\n{summary_table(s)}" for v, s in results.items())
        _emit(args, results, f"{text}\nsweep folder: {sweep_dir}")
        return 0
    plan = _plan(args)
    if plan.workload is None and plan.workload_kind != "bulk":
        raise SpecError(f"spec {plan.name!r} has no workload section: nothing to simulate")
    if pause_after_s is not None and plan.workload_kind == "bulk":
        raise SpecError(f"--pause-after-min: spec {plan.name!r} runs a bulk workload, which "
                        "cannot pause")
    # A spec given as a file is named by its absolute path: a resume may start elsewhere.
    spec = str(Path(args.spec).resolve()) if Path(args.spec).is_file() else args.spec
    return _run_or_pause(args, lambda: run_simulation(
        plan, _out_dir(args.out), log_messages=not args.no_logs, pause_after_s=pause_after_s,
        source=(spec, list(args.set)) if pause_after_s is not None else None))


def cmd_resume(args: argparse.Namespace) -> int:
    from experiments.runs.simulated import resume_simulation

    pause_after_s = _pause_after_s(args)
    return _run_or_pause(args, lambda: resume_simulation(
        args.run, pause_after_s=pause_after_s, trust=args.trust_paused_state))


def _run_or_pause(args: argparse.Namespace, simulation: Callable[[], tuple[Path, Any]]) -> int:
    """Emit a simulation's summaries, or, if it paused, where it is and how to go on."""
    from experiments.runs.summaries import summary_table

    def work() -> tuple[Any, str]:
        run_dir, summaries = simulation()
        return summaries, f"{summary_table(summaries)}\nrun folder: {run_dir}"

    return _emit_or_pause(args, work)


def _emit_or_pause(args: argparse.Namespace, work: Callable[[], tuple[Any, str]]) -> int:
    """Emit what ``work`` returns (the --json object and the text), or, if it paused (a
    simulation or a reproduction), where it is and how to go on."""
    from experiments.runs.simulated import RunPaused

    try:
        result, text = work()
    except RunPaused as paused:
        result, text = paused.record(), str(paused)
    _emit(args, result, text)
    return 0


def _pause_after_s(args: argparse.Namespace) -> float | None:
    """``--pause-after-min`` in seconds (None if not given); SpecError unless positive."""
    if args.pause_after_min is None:
        return None
    if not args.pause_after_min > 0:
        raise SpecError(f"--pause-after-min {args.pause_after_min}: must be positive")
    return args.pause_after_min * 60.0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from analysis.reproduction import format_rows
    from experiments.reproduce import reproduce

    resume = Path(args.resume) if args.resume else None
    beside = Path(args.beside) if args.beside else None
    pause_after_s = _pause_after_s(args)

    def work() -> tuple[Any, str]:
        _, result = reproduce(args.paper, args.runtime, args.quick, _out_dir(args.out),
                              resume, beside, run=not args.no_run, pause_after_s=pause_after_s,
                              trust=args.trust_paused_state)
        return result, f"{format_rows(result['rows'])}\npage: {result['page']}"

    return _emit_or_pause(args, work)


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(f"experiments.bench.{args.which}")
    result = module.run()
    _emit(args, result, module.format_result(result) if hasattr(module, "format_result")
          else json.dumps(result, indent=2, sort_keys=True, default=str))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from analysis.compare import load_summaries, table

    try:
        summaries = load_summaries(args.runs)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    _emit(args, summaries, table(summaries))
    return 0


def cmd_throttle(args: argparse.Namespace) -> int:
    import os

    from experiments.emulation.throttle import throttle

    if os.geteuid() != 0:
        raise PermissionError("throttle changes tc on Mininet hosts: run with sudo")
    try:
        result = throttle(args.a, args.b, args.bw_mbps)
    except (LookupError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    recorded = (f"recorded in {result['recorded_in']}" if result["recorded_in"]
                else "no run's workload is live: recorded nowhere")
    _emit(args, result, f"{args.a}-{args.b}: {args.bw_mbps:g} Mbit/s on "
                        f"{', '.join(result['interfaces'])} ({recorded})")
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from analysis.job import analyze
    from analysis.pipeline import format_result

    result = analyze(args.run_dir, args.master, report=not args.no_report)
    _emit(args, result, format_result(result))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from analysis.watch import watch

    try:
        watch(args.run_dir, args.runs, speed=args.speed, algorithm=args.algorithm)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return 0


def _ipv4(text: str, where: str) -> str:
    """A dotted-quad IPv4 address exactly as LBDD hashes it (no leading zeros, no blanks)."""
    import ipaddress

    try:
        if str(ipaddress.IPv4Address(text)) == text:
            return text
    except ValueError:
        pass
    raise SpecError(f"{where}: bad address {text!r}; allowed: a dotted-quad IPv4 address "
                    "such as 10.3.17.74")


def cmd_lbdd_tree(args: argparse.Namespace) -> int:
    from nodes.cores.lbdd import buckets, lbdd_tree, tree_stats

    source = _ipv4(args.source, "--source")
    members = [_ipv4(m.strip(), "--members") for m in args.members.split(",") if m.strip()]
    if not members or len(set(members)) != len(members) or source in members:
        raise SpecError("--members: give distinct addresses, other than the source")
    parent = lbdd_tree(source, members)
    by_bucket = buckets(source, members)
    result = {"source": source, "parent": parent, **tree_stats(source, parent),
              "buckets": {str(k): ips for k, ips in by_bucket.items()}}
    lines = [f"source {source} (bucket 0), depth {result['depth']}, mean out-degree "
             f"{result['mean_out_degree']} (Theorem 2 counts the nodes that send to a next "
             f"bucket)"]
    for k, ips in by_bucket.items():
        lines.append(f"bucket {k}: " + ", ".join(f"{ip} <- {parent[ip]}" for ip in ips))
    _emit(args, result, "\n".join(lines))
    return 0


# The handout that picks up where the demo ends: the same throttled iLink, live.
NEXT_LAB = "labs/lab3-congestion-idr.md"


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo experiment, then its analysis: the report's path and the lab to read next.
    The run's table prints before the analysis starts (it takes half a minute)."""
    from analysis.idr_verdict import idr_verdict, verdict_text
    from analysis.job import analyze
    from experiments.progress import log

    args.spec = "demo"
    result, text, code = _run(args)
    if not args.json:
        print(text, flush=True)
    log("analysing the run with Spark: captures and logs to metrics and report.html")
    analysis = analyze(Path(result["run_dir"]), None, report=True)
    verdict = idr_verdict(result.get("summaries", {}))
    result.update(report=analysis["report"], wire_check=analysis["wire_check"],
                  idr_verdict=verdict, next_lab=NEXT_LAB)
    lines = [verdict_text(verdict)] if verdict else []
    lines += [f"wire and logs: {analysis['wire_check']}", f"report: {analysis['report']}",
              f"next: {NEXT_LAB} (throttle an iLink yourself and watch IDR react live)"]
    _emit(args, result, "\n".join(lines))
    return code


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object as the last line")


def _spec_arguments(parser: argparse.ArgumentParser, *, with_spec: bool,
                    with_out: bool = True) -> None:
    if with_spec:
        parser.add_argument("spec",
                            help="shipped spec name (experiments/specs/NAME.yaml) or path")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override one spec field, e.g. --set scale=0.1 (repeatable)")
    if with_out:
        parser.add_argument("--out", type=Path, default=DEFAULT_RUNS,
                            help="folder for run folders (default ./runs)")


def _pause_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pause-after-min", type=float, metavar="MIN",
                        help="stop after MIN minutes of wall time, between two events, and "
                             "write the simulator's state into the run folder (seconds: "
                             "a 2.4 GiB run wrote 1.1 GiB in about 10 s; needs --no-logs); "
                             "`pubsublab resume "
                             "RUN_FOLDER` goes on later, for a run longer than one sitting")


def _trust_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trust-paused-state", action="store_true",
                        help="read a paused simulator state that this user's key did not "
                             "sign (a received folder, or one paused before states were "
                             "signed): loading it runs any code planted in it, so only for "
                             "a folder whose author you trust. A paused state is not a "
                             "format for sharing: share finished runs")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pubsublab",
        description="Mininet testbed for publish/subscribe broker overlays "
                    "(OctopiA, LBDD, Meghdoot, CoDD, Kyra).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("doctor", help="check what this machine can emulate and what to install",
                       description="Probe root, Mininet, Open vSwitch, netem/htb/tbf, Java, "
                                   "cgroups, memory and cores; say what to install when missing.")
    _json_flag(d)
    d.set_defaults(func=cmd_doctor)

    t = sub.add_parser("topo", help="list topologies or show one's brokers and links",
                       description="Show a topology without building it (no root needed).")
    t.add_argument("action", choices=["show", "list"])
    t.add_argument("name", nargs="?", help="topology name, e.g. scot, scot-paper, "
                                           "gigabit-cluster, scot-compute-nodes")
    t.add_argument("--param", "-p", action="append", default=[], metavar="KEY=VALUE",
                   help="topology parameter, e.g. -p m=3 -p tree=a-b,b-c (repeatable)")
    t.add_argument("--bw-mbps", type=float, help="link bandwidth (default: the topology's)")
    t.add_argument("--delay-ms", type=float, help="link delay (default: the topology's)")
    _json_flag(t)
    t.set_defaults(func=cmd_topo)

    pl = sub.add_parser("plan", help="print what a spec will run, checked, without running it",
                        description="Compile a spec into its run plan and print it (no root, "
                                    "nothing started): per overlay edge the rate, delay and "
                                    "loss both runtimes use and which mechanism carries each; "
                                    "per algorithm its params with defaults filled in; the "
                                    "statistics window, the workload, the link schedule, the "
                                    "capture. Every error a run would meet in its spec is "
                                    "reported here, in one line.")
    _spec_arguments(pl, with_spec=True, with_out=False)
    _json_flag(pl)
    pl.set_defaults(func=cmd_plan)

    sm = sub.add_parser("sim", help="run a spec through the discrete-event simulator (no root)",
                        description="Run a spec's workload through the deterministic "
                                    "simulator hosting the same routing cores; one subfolder "
                                    "per algorithm with logs and summary.json.")
    _spec_arguments(sm, with_spec=True)
    sm.add_argument("--sweep", metavar="KEY.PATH=V1,V2,...",
                    help="one run per value of a spec field, with line figures over it, "
                         "e.g. --sweep workload.n_publishers=100,200,300")
    sm.add_argument("--no-logs", action="store_true",
                    help="count only; skip per-message logs (for very large runs)")
    _pause_flag(sm)
    _json_flag(sm)
    sm.set_defaults(func=cmd_sim)

    rs = sub.add_parser("resume", help="go on with a simulated run that paused",
                        description="Go on with a run that `pubsublab sim ... "
                                    "--pause-after-min` paused, from the simulator's state "
                                    "in its folder, in this process: it makes what the run "
                                    "would have made without the pause (the manifest's "
                                    "resources list each part). Only on the code the run "
                                    "started on (its commit, and the same changes to it), "
                                    "and only a state this user's key signed on this "
                                    "machine: a paused state is not a format for sharing "
                                    "(see --trust-paused-state).")
    rs.add_argument("run", type=Path, metavar="RUN_FOLDER",
                    help="the paused run's folder (it holds paused.json)")
    _pause_flag(rs)
    _trust_flag(rs)
    _json_flag(rs)
    rs.set_defaults(func=cmd_resume)

    rp = sub.add_parser("reproduce", help="run a paper's experiments and write "
                                          "reproduction.html beside the paper's numbers",
                        description="Run the paper's shipped experiment specs (at their "
                                    "stated scale; --quick at the smaller one its data file "
                                    "states) and write one self-contained reproduction.html: "
                                    "per headline number of the paper its source, ours, the "
                                    "ratio, whether the direction agrees and why they differ, "
                                    "with our figure on the paper's axes and links to the run "
                                    "folders. Papers: experiments/papers/PAPER.yaml.")
    rp.add_argument("paper", help=f"one of: {', '.join(PAPERS)}")
    rp.add_argument("--runtime", choices=["sim", "emulated"], default="sim",
                    help="simulator (default) or Mininet (root)")
    rp.add_argument("--resume", metavar="FOLDER",
                    help="an earlier reproduction folder of this paper (same runtime and "
                         "scale): its finished points are read, not run again; the rest "
                         "run into it and the page is written anew")
    rp.add_argument("--beside", metavar="FOLDER",
                    help="an earlier reproduction folder of this paper and scale in the "
                         "other runtime: its numbers go in their own columns and its "
                         "curves, dashed, on our figures (read, not run again); e.g. "
                         "sudo pubsublab reproduce octopia --runtime emulated --beside "
                         "runs/<stamp>-reproduce-octopia-sim")
    rp.add_argument("--no-run", action="store_true",
                    help="with --resume: run nothing; the page of the points the folder "
                         "has, listing those it lacks with their estimated time (e.g. "
                         "a copy of experiments/papers/finished/<stamp>-reproduce-"
                         "meghdoot-sim, read in seconds)")
    rp.add_argument("--quick", action="store_true",
                    help="the smaller scale the data file states (about a minute each)")
    rp.add_argument("--pause-after-min", type=float, metavar="MIN",
                    help="stop after MIN minutes of wall time: inside a simulated point "
                         "without logs (its simulator's state goes into its run folder, "
                         "gigabytes at 10,000 peers) or else before the next point (one "
                         "that cannot pause, with logs, bulk or in Mininet, starts only if "
                         "its estimate fits, and runs to its end); the "
                         "command printed then (--resume FOLDER) goes on, the paused point "
                         "from where it stopped, on the code it started on (a sitting's "
                         "first point runs at least to its first pause, so each sitting "
                         "gets on). For a "
                         "reproduction longer than one sitting (Meghdoot's, about 17 hours).")
    rp.add_argument("--out", type=Path, default=DEFAULT_RUNS,
                    help="folder for the reproduction folder (default ./runs)")
    _trust_flag(rp)
    _json_flag(rp)
    rp.set_defaults(func=cmd_reproduce)

    c = sub.add_parser("compare", help="the summaries of several runs side by side",
                       description="Print a side-by-side table of summary.json figures. "
                                   "Each RUN is a run folder (all its algorithms) or a "
                                   "summary.json file.")
    c.add_argument("runs", nargs="+", metavar="RUN")
    _json_flag(c)
    c.set_defaults(func=cmd_compare)

    th = sub.add_parser("throttle", help="change a live overlay link's rate (root)",
                        description="Set the rate of the emulated link between brokers A and "
                                    "B on the running network (overlay-as-links mode), e.g. "
                                    "from a second terminal during `pubsublab run SPEC --cli`. "
                                    "While a run's workload runs, the change is recorded in "
                                    "its folder (throttles.jsonl, then the summaries and the "
                                    "manifest) and undone before the next algorithm.")
    th.add_argument("a", help="one broker, e.g. a0")
    th.add_argument("b", help="the other broker, e.g. a1")
    th.add_argument("--bw-mbps", type=float, required=True,
                    help="new rate in Mbit/s, 0.001 to 100000")
    _json_flag(th)
    th.set_defaults(func=cmd_throttle)

    an = sub.add_parser("analyze", help="Spark over a run folder: Parquet metrics, the "
                                        "wire/log cross-check, report.html",
                        description="Parse the run's pcaps and logs with Spark, write Parquet "
                                    "metrics under RUN_DIR/metrics/ and RUN_DIR/report.html; "
                                    "the same job runs on a cluster as `spark-submit "
                                    "analysis/job.py RUN_DIR`.")
    an.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    an.add_argument("--master", help="Spark master URL (default local[2])")
    an.add_argument("--no-report", action="store_true", help="metrics only, no report.html")
    _json_flag(an)
    an.set_defaults(func=cmd_analyze)

    w = sub.add_parser("watch", help="a live view of a running experiment, or a replay of "
                                     "a finished one",
                       description="Refreshed about twice a second: per overlay link its "
                                   "output-queue length and whether it is overloaded, IDR's "
                                   "decisions by case, deliveries against the oracle, "
                                   "notification delay p50/p95 over the last 5 s, the "
                                   "CPU-idle fidelity figure. Reads the run's logs as they "
                                   "are written; a finished run (emulated or simulated) is "
                                   "replayed.")
    w.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR",
                   help="a run folder (default: the newest run in progress under --runs)")
    w.add_argument("--runs", type=Path, default=DEFAULT_RUNS,
                   help="where to look for the run in progress (default ./runs)")
    w.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="replay at X times the pace of the run (default 1)")
    w.add_argument("--algorithm", metavar="NAME",
                   help="replay only this algorithm's part of the run")
    w.set_defaults(func=cmd_watch)

    lt = sub.add_parser("lbdd-tree", help="print the LBDD tree of a source and members",
                        description="The MD5 dissemination tree LBDD's agents build "
                                    "(nodes.cores.lbdd.lbdd_tree): each member's parent, "
                                    "the buckets, the depth and the mean out-degree.")
    lt.add_argument("--source", required=True, metavar="IP", help="the publisher's address")
    lt.add_argument("--members", required=True, metavar="IP,IP,...",
                    help="the subscribers' addresses, comma-separated")
    _json_flag(lt)
    lt.set_defaults(func=cmd_lbdd_tree)

    b = sub.add_parser("bench", help="benchmarks that print figures",
                       description="matching: index vs linear scan at 500/5,000/50,000 "
                                   "subscriptions; sim: simulated messages/s at 1,000 and "
                                   "10,000 nodes; broker: one broker's zero-loss rate in "
                                   "Mininet and its per-message cost, the simulator's "
                                   "calibration (root); chain: simulated against emulated "
                                   "notification delay through one CPU-limited broker at "
                                   "rising rates, the processing model's check (root); "
                                   "controller: the SDN controller's start-up, "
                                   "flow set-up latency and port-statistics accuracy in "
                                   "Mininet (root); analysis: pcap to Parquet packets/s with "
                                   "Spark beside tshark and scapy; meghdoot: milliseconds "
                                   "per operation of the meghdoot-peers stream at 1,000 "
                                   "and 3,000 peers (its first 30 %), load reports by zone "
                                   "beside load reports by peer.")
    b.add_argument("which", choices=["matching", "sim", "broker", "chain", "controller",
                                     "analysis", "meghdoot"])
    bo = b.add_argument_group(
        "bench broker", "the zero-loss rate steps, then the per-message cost calibration "
                        "(experiments.bench.broker); logs go to runs/<stamp>-bench-broker/ "
                        "(bench chain: runs/<stamp>-bench-chain/)")
    bo.add_argument("--rates", metavar="HZ,HZ,...", help="rate steps (default 1000,2000,"
                    "5000,10000,20000,30000,40000); 'none' skips them")
    bo.add_argument("--step-s", type=float, metavar="S", help="length of a rate step (3)")
    bo.add_argument("--max-delay-s", type=float, metavar="S",
                    help="a step fails if any notification takes longer end to end (1)")
    bo.add_argument("--sub-counts", metavar="K,K,...", help="subscription counts of the "
                    "calibration (1,4,8; at least two); 'none' skips it")
    bo.add_argument("--calibration-rate", type=int, metavar="HZ",
                    help="publication rate of a calibration step (1000)")
    bo.add_argument("--calibration-step-s", type=float, metavar="S",
                    help="length of a calibration step (5)")
    bo.add_argument("--calibration-repeats", type=int, metavar="N",
                    help="rounds over the subscription counts; the fit takes medians (3)")
    bo.add_argument("--calibration-out", type=Path, metavar="PATH",
                    help="where the calibration goes (nodes/sim/calibration.json); 'none': "
                         "nowhere")
    _json_flag(b)

    def bench(args: argparse.Namespace) -> int:  # bench broker takes the options above
        from experiments.bench import broker

        def ints(text: str, flag: str) -> list[int]:
            if text.strip().lower() == "none":
                return []
            try:
                return [int(x) for x in text.split(",") if x.strip()]
            except ValueError:
                raise SpecError(f"{flag} {text!r}: expected integers, comma-separated "
                                "(or none)") from None

        options = {key: getattr(args, key) for key in ("rates", "step_s", "max_delay_s",
                                                      "sub_counts",
                                                      "calibration_rate",
                                                      "calibration_step_s",
                                                      "calibration_repeats",
                                                      "calibration_out")}
        given = {k: v for k, v in options.items() if v is not None}
        if args.which != "broker":
            if given:
                raise SpecError(f"--{next(iter(given)).replace('_', '-')}: only for "
                                "bench broker")
            return cmd_bench(args)
        kw: dict[str, Any] = {}
        if "rates" in given:
            kw["rates_hz"] = ints(given["rates"], "--rates")
        if "sub_counts" in given:
            kw["sub_counts"] = ints(given["sub_counts"], "--sub-counts")
        for key, name in (("step_s", "step_s"), ("max_delay_s", "max_delay_s"),
                          ("calibration_rate", "calibration_rate_hz"),
                          ("calibration_step_s", "calibration_step_s"),
                          ("calibration_repeats", "repeats")):
            if key in given:
                if given[key] <= 0:
                    raise SpecError(f"--{key.replace('_', '-')}: must be positive")
                kw[name] = given[key]
        if "calibration_out" in given:
            out = given["calibration_out"]
            kw["calibration_out"] = None if str(out).lower() == "none" else out
        result = broker.run(**kw)
        _emit(args, result, broker.format_result(result))
        return 0

    b.set_defaults(func=bench)

    for name, func, helptext in (
        ("run", cmd_run, "run an experiment spec in Mininet (root)"),
        ("demo", cmd_demo, "run the demo experiment in Mininet (root), then analyse it "
                           "into report.html"),
    ):
        r = sub.add_parser(name, help=helptext, description=helptext + ". Leaves a run folder "
                           "with manifest.json (resolved spec, seed, git revision, probe, link "
                           "mechanisms, fidelity measurements, faults, status).",
                           epilog="exit status: 0 ok; 3 lossy: some delivery was missing or "
                                  "came twice and no fault the spec declares (a CRASH "
                                  "operation, a link_schedule change, a bulk failure round) "
                                  "explains it; 2 an error (one line on standard error); "
                                  "130 interrupted")
        _spec_arguments(r, with_spec=name == "run")
        r.add_argument("--cli", action="store_true",
                       help="open the Mininet CLI on the live network before teardown")
        r.add_argument("--allow-large", action="store_true",
                       help="emulate even an overlay larger than this machine holds "
                            "(64 brokers per core, 60 MB each within half the memory)")
        _json_flag(r)
        r.set_defaults(func=func)
    return p


def main(argv: list[str] | None = None) -> int:
    from experiments.interrupts import interrupt_once

    args = build_parser().parse_args(argv)
    interrupt_once()  # SIGTERM ends a run like Ctrl-C; a second one waits for teardown
    try:
        return args.func(args)
    except (SpecError, PermissionError, RuntimeError) as exc:
        print(f"pubsublab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pubsublab: interrupted; cleaned up", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
