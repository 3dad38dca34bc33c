"""What a run cost (:mod:`experiments.runs.resources`): the peak memory a point reports is
its own, not that of an earlier point run in the same process."""

from __future__ import annotations

from experiments.runs.resources import RunCost, peak_rss_mib

MIB = 2**20


def test_a_run_reports_its_own_peak_not_an_earlier_runs() -> None:
    earlier = bytearray(400 * MIB)
    earlier[::4096] = b"x" * len(earlier[::4096])  # touched: resident, not only mapped
    assert peak_rss_mib() > 400
    del earlier  # a large block goes back to the kernel at once
    cost = RunCost()
    ours = bytearray(50 * MIB)
    ours[::4096] = b"y" * len(ours[::4096])
    record = cost.record()
    assert record["peak_reset"]
    # The process's resident set now, our 50 MiB included, and far below the earlier 400.
    assert 50 < record["peak_rss_mib"] < 300, record
    assert record["wall_s"] >= 0 and record["cpus"] >= 1 and record["mem_total_gib"] > 0
