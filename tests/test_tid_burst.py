"""``tid-dynamic`` in OctopiA's burst (octopia-burst, quick workload): the HRP's broker
floods new advertisement trees when the links its tree leaves by are overloaded, the
HRP's notifications are rerouted over them, every subscriber still gets each one exactly
once, and the burst's mean delay falls below ``tid-static``'s. With ``max_trees`` 1 (no
new trees) the HRP's subscriptions are bound to one TID, nothing can be rerouted, and
the run is ``tid-static``'s. With the HRP's broker overwhelmed instead
(octopia-burst-overwhelmed) it cannot reroute, as the data file's conditions say."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.plan import RunPlan, compile_plan
from experiments.spec import load_spec
from nodes.cores.tid import TREE_ID_STRIDE
from nodes.sim.result import SimResult, summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.oracle import expected_deliveries

# The data file's quick burst (experiments/papers/octopia.yaml): 20 publishers of 30
# quotes, 20 subscribers, 600 HRP notifications at 83.3 a second.
QUICK = ["workload.n_publishers=20", "workload.n_subscribers=20",
         "workload.pubs_per_publisher=30", "workload.burst.count=600"]


def _run(plan: RunPlan, algorithm: str, **params: Any) -> tuple[SimResult, dict[str, Any]]:
    """Simulate ``algorithm`` under the plan's link schedule (no logs): the result and
    its summary against the oracle."""
    alg = next(a for a in plan.algorithms if a.name == algorithm)
    assert plan.workload is not None
    result = simulate(plan.overlay, plan.workload, algorithm, SimSettings(
        core_params={**alg.params, **params}, derived=alg.derived, seed=plan.spec.seed,
        window_ms=plan.window_ms, until_s=plan.duration_s, log_messages=False,
        link_changes=[(c.at_s, c.a, c.b, c.bw_mbps) for c in plan.link_schedule],
        processing=plan.processing))
    return result, summarize(result, expected_deliveries(plan.workload))


@pytest.fixture(scope="module")
def plan() -> RunPlan:
    return compile_plan(load_spec("octopia-burst", QUICK))


def _equals_static(plan: RunPlan, **params: Any) -> SimResult:
    """Simulate ``tid-dynamic``: exactly once, and every delivery and delay
    ``tid-static``'s; its result."""
    static, static_summary = _run(plan, "tid-static")
    dynamic, summary = _run(plan, "tid-dynamic", **params)
    _exactly_once(dynamic, summary)
    assert dynamic.deliveries == static.deliveries
    assert summary["delay_ms"] == {**static_summary["delay_ms"],
                                   "matching": summary["delay_ms"]["matching"]}
    return dynamic


def _exactly_once(result: SimResult, summary: dict[str, Any]) -> None:
    assert summary["delivered"] == summary["expected_deliveries"] > 0
    assert (summary["missing"], summary["duplicates"], summary["unexpected"]) == (0, 0, 0)
    assert "unhandled" not in result.record_counts


def test_the_burst_is_rerouted_over_new_trees_exactly_once(plan: RunPlan) -> None:
    _, static_summary = _run(plan, "tid-static")
    dynamic, summary = _run(plan, "tid-dynamic")
    _exactly_once(dynamic, summary)
    counts = dynamic.record_counts
    assert counts.get("new_tree", 0) >= 1 and counts.get("reroute", 0) >= 100
    # The new trees are floods of their own: more advertisement messages than static's.
    assert summary["ims_by_type"]["ADVERTISE"] > static_summary["ims_by_type"]["ADVERTISE"]
    mean_ms = summary["delay_ms"]["notification"]["mean"]
    assert mean_ms < 0.75 * static_summary["delay_ms"]["notification"]["mean"]


def test_with_one_tree_per_advertisement_nothing_is_rerouted(plan: RunPlan) -> None:
    dynamic = _equals_static(plan, max_trees=1)
    assert dynamic.record_counts.get("lst", 0) > 0  # congestion is seen ...
    assert "reroute" not in dynamic.record_counts  # ... and nothing can be done about it
    assert max(op.msg.msg_id for op in plan.workload.ops) < TREE_ID_STRIDE


def test_an_overwhelmed_hrp_broker_gets_no_new_tree() -> None:
    # The backlog waits in i1, which every HRP tree starts from; the overloaded links
    # (into i1) carry other publishers' notifications, whose host brokers see no overload.
    overwhelmed = compile_plan(load_spec("octopia-burst-overwhelmed", QUICK))
    dynamic = _equals_static(overwhelmed)
    counts = dynamic.record_counts
    assert counts.get("lst", 0) > 0
    assert ("new_tree" not in counts) and ("reroute" not in counts)
