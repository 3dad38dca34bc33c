"""`pubsublab bench meghdoot`: a small point runs the shipped spec's stream up to the share
asked and reports its time per operation."""

from __future__ import annotations

import pytest

from experiments.bench import meghdoot as bench_meghdoot
from experiments.cli import main


def test_bench_meghdoot_runs_the_share_of_the_stream_asked_with_each_reading() -> None:
    report = bench_meghdoot.run(peer_counts=(30,), share=0.05)
    zone, peer = report["points"]
    assert (zone["load_reports"], peer["load_reports"]) == ("zone", "peer")
    for point in (zone, peer):
        # The subscriptions stored before the first join, then 5 % of the operations from
        # it on (ties at the last op's time included), joins among them
        head, rest = point["first_join"], point["of_operations"] - point["first_join"]
        assert head == 14029 + 1  # every subscription first, then the first event
        assert point["operations"] >= head + round(0.05 * rest)
        assert point["operations"] < head + 0.06 * rest
        # routing, joins and loads: messages flowed once peers joined
        assert point["ims"] > point["operations"] - head
        # the wall time is rounded to 10 ms (off by up to 5 ms) and the time per operation to
        # 1 µs (off by up to 0.5 µs)
        assert point["ms_per_operation"] == pytest.approx(
            1000 * point["wall_s"] / point["operations"], abs=5 / point["operations"] + 5e-4)
        assert point["peak_mib"] > point["baseline_mib"] > 0
        assert point["deliveries"] > 0  # events reached their subscribers
        # CPU per message and the share of a bare heapq loop measured beside it
        assert point["us_per_im"] == pytest.approx(1e6 * point["cpu_s"] / point["ims"],
                                                   rel=0.01, abs=0.01)
        assert 0 < point["floor_share"] < 1 and point["floor_events_per_s"] > 0
    # One stream: the same operations; every peer reporting sends no fewer messages.
    assert zone["operations"] == peer["operations"] and peer["ims"] >= zone["ims"]
    (ratio,) = report["ratios"]
    assert ratio["ims"] == round(peer["ims"] / zone["ims"], 2)
    table = bench_meghdoot.format_result(report).splitlines()
    assert table[2].split()[:3] == ["30", "zone", str(zone["operations"])]
    assert table[2].split()[-2] == f"{zone['floor_share']:.1%}"
    assert table[3].split()[:2] == ["30", "peer"]
    assert table[-1].startswith("    30 peers: ")
    assert table[2].split()[-3] == str(zone["deliveries"])
    per_delivery = next(line for line in table if line.startswith("peak over the process"))
    assert per_delivery.endswith(f"{bench_meghdoot._bytes_per_delivery(peer):.0f} B")


@pytest.mark.parametrize(("argv", "says"), [
    (["bench", "meghdoot", "--share", "1.5"], "--share 1.5: must be in (0, 1]"),
    (["bench", "meghdoot", "--peers", "1"], "--peers: at least one bound"),
    (["bench", "meghdoot", "--reports", "zone,all"], "--reports 'zone,all'"),
    (["bench", "sim", "--peers", "100"], "--peers: only for bench meghdoot"),
    (["bench", "sim", "--allow-large"], "--allow-large: only for bench meghdoot"),
])
def test_bench_meghdoot_options_are_checked_in_one_line(argv: list[str], says: str,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines


def test_bench_meghdoot_builds_a_point_too_large_for_the_machine_only_when_allowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import experiments.plan
    from experiments.spec import SpecError

    monkeypatch.setattr(experiments.plan, "physical_memory_bytes", lambda: 2**20)
    with pytest.raises(SpecError, match="pass --allow-large"):
        bench_meghdoot._measure(30, 0.1, "zone")
    assert bench_meghdoot._measure(30, 0.1, "zone", allow_large=True)["peers"] == 30
