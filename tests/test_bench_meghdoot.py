"""`pubsublab bench meghdoot`: a small point runs the shipped spec's stream up to the share
asked and reports its time per operation."""

from __future__ import annotations

import pytest

from experiments.bench import meghdoot as bench_meghdoot


def test_bench_meghdoot_runs_the_share_of_the_stream_asked() -> None:
    report = bench_meghdoot.run(peer_counts=(30,), share=0.05)
    (point,) = report["points"]
    # 5 % of the operations (ties at the last op's time included), joins among them
    assert point["operations"] >= round(0.05 * point["of_operations"])
    assert point["operations"] < 0.06 * point["of_operations"]
    assert point["ims"] > point["operations"]  # routing, joins and loads: messages flowed
    # the wall time is rounded to 10 ms
    assert point["ms_per_operation"] == pytest.approx(
        1000 * point["wall_s"] / point["operations"], abs=10 / point["operations"])
    assert point["peak_mib"] > point["baseline_mib"] > 0
    table = bench_meghdoot.format_result(report)
    assert f"{point['operations']:6}" in table.splitlines()[-1]
    assert table.splitlines()[-1].split()[0] == "30"
