"""What a run cost (:mod:`experiments.runs.resources`): the peak memory a point reports is
its own, not that of an earlier point run in the same process."""

from __future__ import annotations

import os

from experiments.runs.resources import RunCost, peak_rss_mib

MIB = 2**20


def test_a_run_reports_its_own_peak_not_an_earlier_runs() -> None:
    earlier = bytearray(400 * MIB)  # zeroed as it is made: resident
    before = peak_rss_mib()
    assert before > 400
    del earlier  # a large block goes back to the kernel at once
    cost = RunCost()
    ours = bytearray(50 * MIB)
    record = cost.record()
    del ours
    assert record["peak_reset"]
    # What the process held after the earlier block went, our 50 MiB on top: far below
    # the earlier peak, whatever the tests before this one left in the process.
    assert 50 < record["peak_rss_mib"] < before - 300, (before, record)
    assert record["wall_s"] >= 0 and record["cpus"] == os.cpu_count()
    assert record["mem_total_gib"] > 0
