"""What a run cost: its wall time and the peak memory of the process that ran it, for the
manifest (``resources``), so that a reproduction can say how long each point took and
how much memory it needed on the machine it names.

Peak memory is ``VmHWM`` of ``/proc/self/status``, the process's peak resident set size,
reset at the start of each run by writing ``5`` to ``/proc/self/clear_refs`` (Linux 4.0
and later): ``pubsublab reproduce`` runs its points one after the other in one process,
and without the reset a point would report the largest of the points before it. The
reset restarts the peak from what the process holds at that moment (what earlier points
left behind included), so a point's peak is what it held at its largest.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from nodes.time_left import duration_text, memory_text

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def peak_rss_mib() -> float:
    """This process's peak resident set size (MiB) since it began or since the last
    :func:`reset_peak_rss` (``VmHWM``; it starts afresh at exec, where ``ru_maxrss``
    would carry over the parent's peak into a spawned child). Without ``/proc`` (a
    container that does not mount it) ``ru_maxrss``, in KiB on Linux, never reset."""
    try:
        with open(_STATUS, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Start the peak resident set size afresh from the current one; False where the
    kernel does not allow it (then :func:`peak_rss_mib` includes earlier work)."""
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def physical_memory_bytes() -> int:
    """The machine's memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class RunCost:
    """Started when a run starts; :meth:`record` gives the manifest's ``resources``:
    ``wall_s`` (seconds since the start), ``peak_rss_mib`` (this process's peak since
    the start), ``peak_reset`` (whether that peak could be reset at the start: if not,
    it is the process's peak since it began, an upper bound), and the machine's
    ``cpus`` and ``mem_total_gib``. Starting one resets the whole process's peak, so a
    measure around it (a benchmark of the process) loses its own."""

    def __init__(self) -> None:
        self.peak_reset = reset_peak_rss()
        self.t0 = time.perf_counter()

    def record(self) -> dict[str, Any]:
        """The run's cost so far (see the class docstring)."""
        mem_bytes = physical_memory_bytes()
        return {"wall_s": round(time.perf_counter() - self.t0, 3),
                "peak_rss_mib": round(peak_rss_mib(), 1), "peak_reset": self.peak_reset,
                "cpus": os.cpu_count(), "mem_total_gib": round(mem_bytes / 2**30, 1)}


def parts_cost(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``resources`` of a run made in parts (a simulation paused and resumed, each
    part in its own process), from each part's :meth:`RunCost.record`: the wall time
    summed, the largest peak, and the parts themselves when there are several."""
    if len(parts) == 1:
        return parts[0]
    return {**parts[-1], "wall_s": round(sum(p["wall_s"] for p in parts), 3),
            "peak_rss_mib": max(p["peak_rss_mib"] for p in parts),
            "peak_reset": all(p["peak_reset"] for p in parts),
            "parts": [{k: p[k] for k in ("wall_s", "peak_rss_mib")} for p in parts]}


def cost_text(record: dict[str, Any]) -> str:
    """A run's :meth:`RunCost.record` as the line a runner logs at its end."""
    return (f"took {duration_text(record['wall_s'])}, peak memory "
            f"{memory_text(record['peak_rss_mib'])}")
