"""The `pubsublab` command line: one module per command, each with ``add_parser(sub)`` and
``run(args) -> int``; this package's ``main`` parses and dispatches.

Every subcommand has --help. Commands that accept --json print progress on standard error
and, as the last line of standard output, one JSON object with their results. Every error
is one line on standard error, ``pubsublab: error: ...``, exit status 2 (a bad flag value
too). Emulated commands need root and say so in one line when run without it.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from types import ModuleType

from experiments.cli import (
    analyze,
    bench,
    compare,
    demo,
    doctor,
    lbdd_tree,
    plan,
    reproduce,
    resume,
    run,
    sim,
    specs,
    throttle,
    topo,
    watch,
)
from experiments.cli.common import Parser, SpecError

# The commands by group, in the order --help lists them and build_parser adds them.
GROUPS: tuple[tuple[str, tuple[ModuleType, ...]], ...] = (
    ("run", (run, demo, sim, resume, throttle)),
    ("inspect", (doctor, specs, topo, plan, watch, lbdd_tree)),
    ("analyse", (analyze, compare)),
    ("reproduce", (reproduce,)),
    ("benchmark", (bench,)),
)

START_HERE = """\
Start here:
  pubsublab doctor                   what this machine can emulate
  pubsublab plan demo                what the demo runs, checked, not started
  pubsublab sim demo                 the demo in the simulator (no root)
  pubsublab reproduce PAPER --quick  a paper's headline numbers beside ours
  docs/guide/                        one page per task"""

WIDTH = 80  # the help reads at 80 columns whatever the terminal
EXIT_BROKEN_PIPE = 141  # what a shell reports for a tool its reader left (128 + SIGPIPE)
NAME_COLUMN = 14


def _commands_text() -> str:
    """The grouped list of commands with their one-line help, wrapped at WIDTH."""
    blocks = []
    for group, modules in GROUPS:
        lines = [f"{group}:"]
        for module in modules:
            head = f"  {module.NAME}".ljust(NAME_COLUMN)
            lines.append(textwrap.fill(module.HELP, WIDTH, initial_indent=head,
                                       subsequent_indent=" " * NAME_COLUMN,
                                       break_on_hyphens=False))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI's parser: every command of GROUPS, in that order, added by its module
    (which sets ``func``, its ``run``). Its errors are one line (common.Parser)."""
    p = Parser(
        prog="pubsublab",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Mininet testbed for publish/subscribe broker overlays (OctopiA, LBDD,\n"
                    f"Meghdoot, CoDD, Kyra).\n\n{START_HERE}\n\n{_commands_text()}",
    )
    # The commands carry no help= of their own: argparse would list them a second time,
    # ungrouped; the description above lists them by group.
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="one of the commands above; pubsublab COMMAND --help says "
                                "the rest")
    for _, modules in GROUPS:
        for module in modules:
            module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: sys.argv), run the command, return its exit status: the
    command's own, 2 after a one-line error, 130 if interrupted, 141 (quietly) when the
    reader of its output left."""
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
    except BrokenPipeError:
        # The reader of our output left (`pubsublab plan X | head`): stop quietly, as
        # other Unix tools do, and point stdout at /dev/null so that the interpreter's
        # final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
