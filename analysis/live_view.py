"""The screen of `pubsublab watch`: one frame from a :class:`~analysis.live_state.Snapshot`.

Left, one row per overlay link (one direction: a broker's output queue towards a
neighbour): the longest queue of the last second as a bar, the last window's queue
length and the longest as numbers, the congestion element CE of the last window, and
OVERLOADED when a window of the last second was (with how many); a replay's frame covers
more of the run when faster, and the bar, the longest queue and the overloaded windows
cover all of it (a queue that filled and drained within a frame still shows). Right:
deliveries against the oracle, notification delay over the last seconds, IDR's decisions
by case, and the CPU-idle fidelity figure.
Rendering only: the figures come from :mod:`analysis.live_state`.

In a terminal narrower than both sides at full width (about 160 columns for the demo),
the bars shrink first, then the panels on the right (their text wraps), down to
``MIN_BAR_WIDTH`` and ``MIN_RIGHT_WIDTH``: the link names, kinds and statuses stay whole,
in 120 columns too, where leaving the layout to the table cut the names first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from analysis.live_state import IDR_CASES, CpuIdle, LinkRow, Snapshot

BAR_WIDTH = 28  # the queue bar's full width, in columns, when the terminal has room
MIN_BAR_WIDTH = 8  # the heading "0..N" of a bar up to 10,000 msgs
RIGHT_WIDTH = 64  # the panels beside the link table, in columns
MIN_RIGHT_WIDTH = 44
_GAP = 2  # columns between the link table and the panels
# Rows the frame needs beside the link table (header, table head and borders, caption).
_FRAME_ROWS = 8


@dataclass(frozen=True)
class Frame:
    """What the view shows besides the snapshot: the run, the algorithm being shown (and
    its place in the run's list), the mode (``live`` or ``replay xN``), whether the
    runtime measured CPU idle (the simulator does not), the LST's theta, a message for a
    run with no workload under way yet, and lines of the log that could not be read."""

    run: str
    algorithm: str | None
    position: str
    mode: str
    runtime: str
    theta: int
    waiting: str = ""
    bad_lines: int = 0
    cpu_note: str = ""


def _bar(row: LinkRow, scale: int, width: int, ascii_only: bool) -> Text:
    n = 0 if scale <= 0 else math.ceil(width * min(row.peak_len, scale) / scale)
    style = "bold red" if row.overloaded else ("yellow" if row.peak_len else "green")
    return Text(("#" if ascii_only else "█") * n, style=style)


def _link_table(rows: list[LinkRow], theta: int, hold_s: float, max_rows: int,
                ascii_only: bool, bar_width: int = BAR_WIDTH) -> Table:
    """The links, all of them if they fit in ``max_rows``; else the overloaded ones and
    the longest queues, in name order, with a caption saying how many were left out.
    ``bar_width``: the queue bar's full width in columns."""
    shown = rows
    if len(rows) > max_rows:
        busiest = sorted(rows, key=lambda r: (not r.overloaded, -r.peak_len, r.broker,
                                              r.neighbour))[:max_rows]
        shown = sorted(busiest, key=lambda r: (r.broker, r.neighbour))
    # The bar's full width is four times theta, or the longest queue shown if longer.
    scale = max([4 * max(theta, 1), *(r.peak_len for r in shown)])
    table = Table(title=f"output queues: overloaded when queue > {theta} msgs and CE >= "
                        f"ce_min, in a window of the last {hold_s:g} s",
                  title_justify="left", pad_edge=False)
    table.add_column("link", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    heading = f"queue (bar 0..{scale} msgs)"
    # A narrow bar keeps a heading of one line, its unit beside it in "msgs".
    table.add_column(heading if len(heading) <= bar_width else f"0..{scale}",
                     width=bar_width, no_wrap=True)
    table.add_column("msgs", justify="right", no_wrap=True)
    table.add_column(f"peak {hold_s:g}s", justify="right", no_wrap=True)
    table.add_column("CE", justify="right", no_wrap=True)
    table.add_column("status (windows)", no_wrap=True, min_width=16)
    for r in shown:
        ce = "inf" if math.isinf(r.ce) else f"{r.ce:.2f}"
        status = (Text(f"OVERLOADED x{r.overloaded_windows}", style="bold red")
                  if r.overloaded else Text("ok", style="green"))
        table.add_row(f"{r.broker} -> {r.neighbour}", r.kind,
                      _bar(r, scale, bar_width, ascii_only),
                      str(r.queue_len), str(r.peak_len), ce, status)
    if len(shown) < len(rows):
        table.caption = f"{len(rows) - len(shown)} quieter links not shown"
    return table


def _deliveries(s: Snapshot) -> Panel:
    lines = []
    if s.expected_total is None:
        lines.append(f"delivered {s.delivered:,} (the oracle waits for the workload file)")
    else:
        share = f" ({100 * s.delivered / s.expected_total:.0f} %)" if s.expected_total else ""
        lines.append(f"delivered {s.delivered:,} of {s.expected_total:,} expected{share}")
        lines.append(f"expected from the {s.published:,} publications so far: "
                     f"{s.expected_so_far:,}")
    lines.append(f"duplicates {s.duplicates:,}, unexpected {s.unexpected:,}")
    return Panel("\n".join(lines), title="deliveries", title_align="left")


def _delay(s: Snapshot, window_s: float) -> Panel:
    if s.delay_ms is None:
        body = Text(f"no delivery in the last {window_s:g} s")
    else:
        d = s.delay_ms
        body = Text(f"p50 {d['p50']:,.1f} ms  p95 {d['p95']:,.1f} ms  max {d['max']:,.1f} ms"
                    f"  ({s.delay_samples:,} deliveries)")
    return Panel(body, title=f"notification delay, last {window_s:g} s",
                 subtitle="publication to the subscriber's broker handing it over",
                 title_align="left", subtitle_align="left")


def _idr(s: Snapshot, algorithm: str | None, window_s: float) -> Panel:
    if algorithm != "idr" and not s.idr_total:
        return Panel(f"none: {algorithm} does not route around overloaded links",
                     title="IDR decisions", title_align="left")
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("case", no_wrap=True)
    table.add_column("what IDR did")  # wraps in a narrow terminal
    table.add_column("total", justify="right", no_wrap=True)
    table.add_column(f"last {window_s:g}s", justify="right", no_wrap=True)
    for case, what in IDR_CASES.items():
        table.add_row(f"({case})", what, f"{s.idr_total.get(case, 0):,}",
                      f"{s.idr_recent.get(case, 0):,}")
    parts: list[RenderableType] = [table]
    last = s.idr_last
    if last is not None:
        parts.append(Text(f"last: {last['node']} avoided {', '.join(last['avoided'])}, "
                          f"CIV-N on {last['carrier']} for clusters {last['civ']} "
                          f"(case {last['case']})"))
    return Panel(Group(*parts), title="IDR decisions", title_align="left")


def _cpu(cpu: CpuIdle | None, note: str) -> Panel:
    title = "fidelity: CPU idle (Mininet-HiFi asks for at least "
    if cpu is None or not cpu.samples_pct:
        return Panel(note or "no sample yet", title="fidelity: CPU idle", title_align="left")
    title += f"{cpu.min_idle_pct:g} %)"
    now = cpu.samples_pct[-1]
    below = cpu.seconds_below
    text = Text()
    text.append(f"now {now:.1f} %", style="bold red" if now < cpu.min_idle_pct else "green")
    text.append(f"   min {min(cpu.samples_pct):.1f} %\n")
    judged = cpu.judged_below  # a finished run: the seconds below its verdict judges
    text.append(f"below the criterion in {below} of {len(cpu.samples_pct)} s so far"
                + (f" ({judged} in a workload)" if judged is not None and below else ""),
                style="red" if below else "")
    if below and judged != 0:
        text.append("\nemulated timing is not trustworthy while the CPU is this busy",
                    style="red")
    return Panel(text, title=title, title_align="left")


def render(frame: Frame, snap: Snapshot | None, cpu: CpuIdle | None, *, height: int,
           window_s: float, hold_s: float, ascii_only: bool = False) -> RenderableType:
    """One frame of the view for a terminal ``height`` rows high."""
    head = Text()
    head.append("pubsublab watch  ", style="bold")
    head.append(f"{frame.run}  ")
    head.append(f"{frame.algorithm or '-'}", style="bold cyan")
    head.append(f" {frame.position}  {frame.mode}  {frame.runtime}")
    if snap is not None:
        head.append(f"  t = {snap.elapsed_s:.1f} s")
    if frame.bad_lines:
        head.append(f"  ({frame.bad_lines} unreadable log lines skipped)", style="yellow")
    if snap is None:
        return Group(head, Text(frame.waiting), _cpu(cpu, frame.cpu_note))
    right = Group(_deliveries(snap), _delay(snap, window_s),
                  _idr(snap, frame.algorithm, window_s), _cpu(cpu, frame.cpu_note))
    max_rows = max(height - _FRAME_ROWS, 4)
    return Group(head, _Beside(lambda bar: _link_table(snap.links, frame.theta, hold_s,
                                                       max_rows, ascii_only, bar), right))


class _Beside:
    """The link table (built by ``table`` for a bar width) with ``right`` beside it, the
    widths chosen when rich knows the terminal's: bars first, then the panels, give up
    columns (see the module docstring)."""

    def __init__(self, table: Callable[[int], Table], right: RenderableType) -> None:
        self.table = table
        self.right = right

    def __rich_console__(self, console: Console,
                         options: ConsoleOptions) -> Iterator[RenderableType]:
        width = options.max_width
        # The table's own columns at their natural width, the bar's one column aside.
        unbounded = options.update_width(max(width, 1000))
        rest = Measurement.get(console, unbounded, self.table(1)).maximum - 1
        right = max(MIN_RIGHT_WIDTH, min(RIGHT_WIDTH, width - _GAP - rest - MIN_BAR_WIDTH))
        bar = max(MIN_BAR_WIDTH, min(BAR_WIDTH, width - _GAP - rest - right))
        body = Table.grid(padding=(0, _GAP))
        body.add_column()  # the table's title wraps (its columns do not)
        body.add_column(width=right)
        body.add_row(self.table(bar), self.right)
        yield body
