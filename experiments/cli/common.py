"""What the commands share: the parser class, the shared flags, the --json output and the
run-folder and pause helpers.

Nothing heavy is imported here or at any command module's top: each command's ``run``
imports what it needs, so ``pubsublab --help`` and a typo's error stay fast.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from experiments.spec import SpecError, load_spec
from nodes.runfolder import RUNS_BASE as DEFAULT_RUNS

__all__ = ["DEFAULT_RUNS", "Parser", "SpecError", "emit", "emit_or_pause", "json_flag",
           "out_dir", "pause_after_s", "pause_flag", "plan_of", "run_or_pause",
           "spec_arguments", "trust_flag"]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, like every other error of the CLI.

    A bad flag value, a missing argument or an unknown command prints
    ``pubsublab: error: MESSAGE (see PROG --help)`` on standard error and exits 2; the
    subcommands' parsers are of this class too (argparse makes them of their parent's).
    """

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())  # argparse's messages are one line; keep it so
        self.exit(2, f"pubsublab: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        """As argparse's, but an unknown flag is the command's error, pointing at that
        command's --help: argparse hands a subcommand's unknown flags up to the root
        parser, whose --help does not list the command's flags."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The innermost (sub)command parser that ``parsed`` went through."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None))
                if isinstance(chosen, Parser):
                    return chosen._chosen(parsed)
        return self


def emit(args: argparse.Namespace, result: Any, text: str) -> None:
    """Print ``text``, or with --json ``result`` as one JSON object on one line."""
    if getattr(args, "json", False):
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print(text)


def json_flag(parser: argparse.ArgumentParser) -> None:
    """Add --json: the command's result as one JSON object on the last line of stdout."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object as the last line")


def allow_large_flag(parser: argparse.ArgumentParser) -> None:
    """Add --allow-large for a command that builds a workload (``plan``, ``sim``)."""
    parser.add_argument("--allow-large", action="store_true",
                        help="build even a workload larger than this machine holds (its "
                             "estimated operations at 200 B each within half the memory)")


def spec_arguments(parser: argparse.ArgumentParser, *, with_spec: bool,
                   with_out: bool = True) -> None:
    """Add SPEC (if ``with_spec``), --set and (if ``with_out``) --out."""
    if with_spec:
        parser.add_argument("spec",
                            help="shipped spec name (experiments/specs/NAME.yaml) or path")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="override one spec field, e.g. --set scale=0.1 (repeatable)")
    if with_out:
        parser.add_argument("--out", type=Path, default=DEFAULT_RUNS,
                            help="folder for run folders (default ./runs)")


def pause_flag(parser: argparse.ArgumentParser) -> None:
    """Add --pause-after-min for one simulated run (sim, resume)."""
    parser.add_argument("--pause-after-min", type=float, metavar="MIN",
                        help="stop after MIN minutes of wall time, between two events, and "
                             "write the simulator's state into the run folder (seconds: "
                             "a 2.4 GiB run wrote 1.1 GiB in about 10 s; needs --no-logs); "
                             "`pubsublab resume "
                             "RUN_FOLDER` goes on later, for a run longer than one sitting")


def trust_flag(parser: argparse.ArgumentParser) -> None:
    """Add --trust-paused-state (resume, reproduce)."""
    parser.add_argument("--trust-paused-state", action="store_true",
                        help="read a paused simulator state that this user's key did not "
                             "sign (a received folder, or one paused before states were "
                             "signed): loading it runs any code planted in it, so only for "
                             "a folder whose author you trust. A paused state is not a "
                             "format for sharing: share finished runs")


def plan_of(args: argparse.Namespace) -> Any:
    """The compiled plan of the command's spec (every check done, nothing started)."""
    from experiments.plan import compile_plan

    return compile_plan(load_spec(args.spec, args.set),
                        allow_large=getattr(args, "allow_large", False))


def out_dir(path: Path) -> Path:
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


def pause_after_s(args: argparse.Namespace) -> float | None:
    """``--pause-after-min`` in seconds (None if not given); SpecError unless positive."""
    if args.pause_after_min is None:
        return None
    if not args.pause_after_min > 0:
        raise SpecError(f"--pause-after-min {args.pause_after_min}: must be positive")
    return args.pause_after_min * 60.0


def run_or_pause(args: argparse.Namespace, simulation: Callable[[], tuple[Path, Any]]) -> int:
    """Emit a simulation's summaries, or, if it paused, where it is and how to go on."""
    from experiments.runs.summaries import summary_table

    def work() -> tuple[Any, str]:
        run_dir, summaries = simulation()
        return summaries, f"{summary_table(summaries)}\nrun folder: {run_dir}"

    return emit_or_pause(args, work)


def emit_or_pause(args: argparse.Namespace, work: Callable[[], tuple[Any, str]]) -> int:
    """Emit what ``work`` returns (the --json object and the text), or, if it paused (a
    simulation or a reproduction), where it is and how to go on."""
    from experiments.runs.simulated import RunPaused

    try:
        result, text = work()
    except RunPaused as paused:
        result, text = paused.record(), str(paused)
    emit(args, result, text)
    return 0
