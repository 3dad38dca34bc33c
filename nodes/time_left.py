"""Progress lines with an estimate of the time left, for long work done in steps: the
algorithms and phases of a run, the points of a sweep or a reproduction, the stages of an
analysis. One helper for all of them, so every long command speaks the same line.

The estimate: the expected length of what is not done yet, times the recent pace (the
seconds spent over the expected length done, a step under way counted by its share done,
over the last :data:`RECENT_SHARE` of the time worked). Expected lengths are seconds
when a plan or a data file knows them (a run's workload phases, a reproduction's
``est_s``): before anything is done the pace is taken as 1. When they are only weights
(``seconds=False``: a sweep's points, counted alike), the line names no time left until
some work is done, rather than guess.

Why the recent pace rather than the pace since the start: in a Meghdoot simulation the
first 55 % of the client operations are subscriptions stored in a minute, and each later
event reaches more peers as peers join, so the pace since the start said "65 % done,
about 3.6 min left" twenty minutes before the end of a 10,000-peer run. Work whose pace
is steady gets the same estimate either way.

It lives below ``experiments`` and ``analysis`` because both use it: it formats lines
and hands them to the caller's ``log``, and :func:`write_line` is how every ``log``
puts one on standard error (whole, so a harness reading a pipe sees each line).
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections.abc import Callable, Sequence

PROGRESS_EVERY_S = 10.0  # wall-clock seconds between two lines about one step, at least
# The pace is measured over this share of the time worked, the most recent.
RECENT_SHARE = 1 / 3
# Re-entrant: a signal handler calling write_line in a thread that holds the lock would
# hang on a plain lock (handlers use experiments.progress.log_from_signal_handler).
_WRITING = threading.RLock()


def write_line(text: str) -> None:
    """Write ``text`` on standard error as one whole line: its line breaks made spaces,
    then the text and its newline in one write, flushed, one thread at a time.

    ``print`` writes the text and the newline in two calls, so two threads logging at
    once (an emulated run's progress ticker, its fault thread and its main thread) glued
    their lines on a pipe: ``A`` ``B`` then two newlines. A carriage return inside would
    redraw on a terminal and hide a line from a reader of the pipe; no line holds one.
    """
    line = " ".join(text.splitlines()) + "\n"
    with _WRITING:
        sys.stderr.write(line)
        sys.stderr.flush()


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: ``42 s`` under 90 s, else ``3.5 min``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def memory_text(mib: float) -> str:
    """An amount of memory or disk as a person reads it: ``270 MiB``, else ``4.2 GiB``."""
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


class TimeLeft:
    """Progress through ``steps`` (label, expected length: seconds, or a weight when
    ``seconds`` is false), in order; each line goes to ``log`` as
    ``<what>: <label> (<i> of <n>[, detail]; <elapsed> so far, about <left> left)``."""

    def __init__(self, what: str, steps: Sequence[tuple[str, float]],
                 log: Callable[[str], None], *, seconds: bool = True) -> None:
        self.what, self.steps, self.log, self.seconds = what, list(steps), log, seconds
        self.done = 0  # steps finished or skipped
        self.spent_est = 0.0  # expected length of the finished steps (skipped ones not)
        self.t0 = time.monotonic()
        self._skipped_s = 0.0  # wall time of skipped steps: no measure of the pace
        self._step_t0 = self.t0
        # (time worked, expected length done) at each line and step's end, for the pace.
        self._worked: list[float] = [0.0]
        self._done_est: list[float] = [0.0]

    def elapsed_s(self) -> float:
        """Seconds since the work began."""
        return time.monotonic() - self.t0

    def step_elapsed_s(self) -> float:
        """Seconds since the current step began."""
        return time.monotonic() - self._step_t0

    def _now(self, share: float) -> tuple[float, float]:
        """Seconds worked (skipped steps left out) and expected length done, the current
        step ``share`` done."""
        est_now = self.steps[self.done][1] if self.done < len(self.steps) else 0.0
        return self.elapsed_s() - self._skipped_s, self.spent_est + est_now * share

    def left_s(self, share: float = 0.0) -> float | None:
        """Seconds left when the current step is ``share`` done (0..1); None while the
        expected lengths are weights and nothing is done to measure the pace by."""
        worked, done_est = self._now(share)
        left_est = sum(e for _, e in self.steps[self.done:]) - (done_est - self.spent_est)
        if done_est <= 0 or worked <= 0:
            return left_est if self.seconds else None
        # The last mark at least RECENT_SHARE of the time worked ago, and one at which
        # less was done than now (else the pace since the start).
        i = bisect.bisect_right(self._worked, worked * (1 - RECENT_SHARE)) - 1
        while i > 0 and self._done_est[i] >= done_est:
            i -= 1
        return left_est * (worked - self._worked[i]) / (done_est - self._done_est[i])

    def _mark(self, share: float) -> None:
        """Remember how much was done by now (the current step ``share`` done)."""
        worked, done_est = self._now(share)
        if worked >= self._worked[-1]:
            self._worked.append(worked)
            self._done_est.append(done_est)

    def line(self, detail: str = "", share: float = 0.0) -> str:
        """The progress line of the current step (see the class docstring)."""
        i = min(self.done, len(self.steps) - 1)
        left = self.left_s(share)
        tail = ("time left not yet known" if left is None
                else f"about {duration_text(left)} left")
        detail = f", {detail}" if detail else ""
        return (f"{self.what}: {self.steps[i][0]} ({i + 1} of {len(self.steps)}{detail}; "
                f"{duration_text(self.elapsed_s())} so far, {tail})")

    def start(self, detail: str = "") -> None:
        """Say that the next step begins."""
        self._step_t0 = time.monotonic()
        self.log(self.line(detail))

    def part(self, share: float, detail: str = "") -> None:
        """Say how far the current step is (``share``, 0..1), for a long one."""
        share = min(max(share, 0.0), 1.0)
        self.log(self.line(detail or f"{share:.0%} done", share))
        self._mark(share)

    def resumed(self, share: float) -> None:
        """The current step goes on from ``share`` done in an earlier process (a paused
        run): the pace is measured from here, not over work this process did not do."""
        self._mark(min(max(share, 0.0), 1.0))

    def finish(self) -> None:
        """The current step is done: it counts towards the pace."""
        self.spent_est += self.steps[self.done][1]
        self.done += 1
        self._mark(0.0)

    def skip(self) -> None:
        """The current step is done without measuring the pace (read from an earlier
        run, say): its wall time is left out of the pace."""
        self._skipped_s += time.monotonic() - self._step_t0
        self.done += 1
