"""`pubsublab bench meghdoot`: a small point runs the shipped spec's stream up to the share
asked and reports its time per operation."""

from __future__ import annotations

import pytest

from experiments.bench import meghdoot as bench_meghdoot


def test_bench_meghdoot_runs_the_share_of_the_stream_asked_with_each_reading() -> None:
    report = bench_meghdoot.run(peer_counts=(30,), share=0.05)
    zone, peer = report["points"]
    assert (zone["load_reports"], peer["load_reports"]) == ("zone", "peer")
    for point in (zone, peer):
        # 5 % of the operations (ties at the last op's time included), joins among them
        assert point["operations"] >= round(0.05 * point["of_operations"])
        assert point["operations"] < 0.06 * point["of_operations"]
        assert point["ims"] > point["operations"]  # routing, joins and loads: messages flowed
        # the wall time is rounded to 10 ms
        assert point["ms_per_operation"] == pytest.approx(
            1000 * point["wall_s"] / point["operations"], abs=10 / point["operations"])
        assert point["peak_mib"] > point["baseline_mib"] > 0
    # One stream: the same operations; every peer reporting sends no fewer messages.
    assert zone["operations"] == peer["operations"] and peer["ims"] >= zone["ims"]
    (ratio,) = report["ratios"]
    assert ratio["ims"] == round(peer["ims"] / zone["ims"], 2)
    table = bench_meghdoot.format_result(report).splitlines()
    assert table[2].split()[:3] == ["30", "zone", str(zone["operations"])]
    assert table[3].split()[:2] == ["30", "peer"]
    assert table[-1].startswith("    30 peers: ")
