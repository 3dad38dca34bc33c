"""LBDD's publisher NIC curve under a per-stream limit (workload.stream_mbps): the shipped
lbdd-stream-cap spec, simulated on less data, and the parameter's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.bulk.simulated import run_bulk_simulation
from experiments.spec import SpecError, load_spec


def _nic_by_subscribers(summary: dict) -> dict[int, float]:
    return {r["subscribers"]: r["publisher_nic_mean_pct"] for r in summary["by_subscribers"]}


def test_stream_cap_keeps_lbdd_under_70_pct_and_fills_p2p_from_six(tmp_path: Path) -> None:
    # 1/4096 of 8 GB: 2 MiB, 32 slices a round; the loads are those of the full spec.
    spec = load_spec("lbdd-stream-cap", ["scale=0.000244140625",
                                         "workload.subscriber_counts=[1,2,3,5,6]",
                                         "routing.algorithms=[lbdd,p2p-parallel]"])
    _, summaries = run_bulk_simulation(compile_plan(spec), tmp_path)
    lbdd = _nic_by_subscribers(summaries["lbdd"])
    parallel = _nic_by_subscribers(summaries["p2p-parallel"])
    assert all(summaries[a]["complete"] for a in summaries)
    assert max(lbdd.values()) < 70, lbdd
    # Each direct child gets one 18 Mbit/s stream of the publisher's 100 Mbit/s NIC.
    assert [lbdd[n] for n in (1, 2, 3)] == pytest.approx([18, 36, 54], abs=3)
    assert parallel[5] < 90 <= parallel[6], parallel


@pytest.mark.parametrize("value", [0, -5, "fast", True])
def test_stream_mbps_is_checked_with_one_line(value: object) -> None:
    with pytest.raises(SpecError) as err:
        compile_plan(load_spec("lbdd-stream-cap", [f"workload.stream_mbps={value}"]))
    assert str(err.value).startswith("workload.stream_mbps: bad value")
    assert "\n" not in str(err.value)


def test_stream_mbps_is_refused_in_the_depth_sweep() -> None:
    with pytest.raises(SpecError, match=r"^workload.stream_mbps: not supported"):
        compile_plan(load_spec("lbdd-depth-sweep", ["workload.stream_mbps=18"]))
