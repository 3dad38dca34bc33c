"""``pubsublab run SPEC``: a spec in Mininet (root); also the runner ``demo`` builds on."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag, out_dir, plan_of, spec_arguments

NAME = "run"
HELP = "run an experiment spec in Mininet (root)"

# What both emulated commands leave and how they exit (run's and demo's --help).
LEAVES = (". Leaves a run folder with manifest.json (resolved spec, seed, git revision, "
          "probe, link mechanisms, fidelity measurements, faults, status), and says "
          "whether the run kept its fidelity: 'fidelity ok', or 'fidelity FAILED' with the "
          "seconds under the CPU criterion and the links off their rate (--json: "
          "fidelity_verdict).")
EXIT_STATUS = ("exit status: 0 ok; 3 lossy: some delivery was missing or came twice and no "
               "fault the spec declares (a CRASH operation, a link_schedule change, a bulk "
               "failure round) explains it; 2 an error (one line on standard error); "
               "130 interrupted")


def add_emulated_parser(sub: Any, name: str, helptext: str,
                        func: Callable[[argparse.Namespace], int], *, with_spec: bool) -> None:
    """Add an emulated-run subcommand (``run``, ``demo``): the same flags and exit codes."""
    r = sub.add_parser(name, description=helptext + LEAVES, epilog=EXIT_STATUS)
    spec_arguments(r, with_spec=with_spec)
    r.add_argument("--cli", action="store_true",
                   help="open the Mininet CLI on the live network before teardown")
    r.add_argument("--allow-large", action="store_true",
                   help="emulate even an overlay or workload larger than this machine "
                        "holds (64 brokers per core, 60 MB each within half the memory; "
                        "a workload's estimated operations at 200 B each within half)")
    r.add_argument("--servers", metavar="HOST,HOST,...",
                   help="spread the network over these servers (localhost is this machine; "
                        "the others reached as root by SSH with a key): brokers and their "
                        "clients placed by the client operations each broker serves, SCOT "
                        "clusters kept together where they fit, links between servers in "
                        "VXLAN tunnels; the run folder must be on a file system every "
                        "server mounts at the same path (the spec's field: servers)")
    r.add_argument("--ssh-config", type=Path, metavar="FILE",
                   help="with --servers: the SSH client configuration that reaches them "
                        "(default: root's own, ~/.ssh/config)")
    json_flag(r)
    r.set_defaults(func=func)


def add_parser(sub: Any) -> None:
    """Add the ``run`` subcommand to ``sub`` (the subparsers action)."""
    add_emulated_parser(sub, NAME, HELP, run, with_spec=True)


def run_emulated(args: argparse.Namespace) -> tuple[dict[str, Any], str, int]:
    """Run the command's spec in Mininet: the result, its text and the exit status.
    The text ends with the run folder, the status and the fidelity verdict (``fidelity
    FAILED: ...`` with the share of seconds under the CPU criterion; also
    ``fidelity_verdict`` in the result). SpecError if it does not fit this machine,
    PermissionError without root."""
    import os

    from analysis.fidelity_verdict import fidelity_text, fidelity_verdict
    from experiments.plan import emulation_fits
    from experiments.runs.faults import EXIT_LOSSY, LOSSY
    from experiments.runs.resources import physical_memory_bytes
    from experiments.runs.summaries import summary_table
    from experiments.runs.testbed import run_experiment, workload_phases

    if args.servers:
        args.set = [*args.set, f"servers=[{args.servers}]"]
    if args.ssh_config is not None and not args.ssh_config.is_file():
        raise SpecError(f"--ssh-config: {args.ssh_config} is not a file")
    plan = plan_of(args)
    if not args.allow_large:
        mem_mb = physical_memory_bytes() / 2**20
        too_big = emulation_fits(plan, os.cpu_count() or 1, mem_mb)
        if too_big:
            raise SpecError(f"topology too large to emulate here: {too_big} (--allow-large "
                            "to try anyway, or pubsublab sim)")
    if os.geteuid() != 0:
        raise PermissionError("emulated runs need root: run with sudo")
    phases = workload_phases(plan)
    run_dir, manifest = run_experiment(plan, out_dir(args.out), cli=args.cli, phases=phases,
                                       ssh_config=args.ssh_config)
    summaries = manifest.get("summaries", {})
    fidelity = fidelity_verdict(manifest.get("fidelity"))
    result = {"run_dir": str(run_dir), "status": manifest["status"],
              "fidelity": manifest.get("fidelity"), "fidelity_verdict": fidelity,
              "timing": manifest.get("timing"), "faults": manifest.get("faults"),
              **({"summaries": summaries} if summaries else {})}
    text = f"run folder: {run_dir}\nstatus: {manifest['status']}"
    if fidelity is not None:
        text += f"\n{fidelity_text(fidelity)}"
    if summaries:
        text = f"{summary_table(summaries)}\n{text}"
    return result, text, EXIT_LOSSY if manifest["status"] == LOSSY else 0


def run(args: argparse.Namespace) -> int:
    """Run the spec in Mininet and print its summaries; exit 0, or 3 if lossy."""
    result, text, code = run_emulated(args)
    emit(args, result, text)
    return code
