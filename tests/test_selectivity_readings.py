"""OctopiA's two readings of "Advertisements and matching subscriptions were generated
synthetically with 2% selectivity" (nodes.workloads.stock, ``selectivity_of``)."""

from __future__ import annotations

import pytest

from experiments.plan import compile_plan
from experiments.spec import SpecError, load_spec
from nodes.messages import MsgType
from nodes.model import filter_from_json, matches
from nodes.workloads.kinds import WORKLOADS
from nodes.workloads.stock import stock_workload

# The subscriber-scalability point of octopia-subscribers: the paper's 100 publishers.
SIZES = {"n_publishers": 100, "n_subscribers": 250, "pubs_per_publisher": 2,
         "publish_rate_hz": 1.0, "seed": 1}
BROKERS = [f"b{i}" for i in range(70)]


def test_a_subscription_overlaps_two_percent_of_the_advertisements() -> None:
    w = stock_workload(BROKERS, selectivity_of="advertisements", **SIZES)
    assert w.meta["adv_overlap"] == pytest.approx(0.02, abs=0.002)
    assert w.meta["selectivity"] == pytest.approx(0.02, abs=0.004)
    assert w.meta["subscriptions_matching_nothing"] == 0


def test_domain_wide_advertisements_overlap_three_quarters_of_them() -> None:
    """Pinned: 74.9 % at these sizes (seed 1), the cause of the subscription figures
    going the other way from the paper's."""
    w = stock_workload(BROKERS, selectivity_of="publications", **SIZES)
    assert w.meta["adv_overlap"] == pytest.approx(0.749, abs=0.005)
    assert w.meta["selectivity"] == pytest.approx(0.02, abs=0.004)


@pytest.mark.parametrize("reading", ["advertisements", "publications"])
def test_every_publication_matches_its_publishers_advertisement(reading: str) -> None:
    w = stock_workload(BROKERS, selectivity_of=reading, **SIZES)
    advs = {op.client: filter_from_json(op.msg.payload["filter"]) for op in w.ops
            if op.msg.type is MsgType.ADVERTISE}
    pubs = [op for op in w.ops if op.msg.type is MsgType.PUBLISH]
    assert pubs and all(matches(advs[op.client], op.msg.payload["attrs"]) for op in pubs)


def test_the_reading_is_a_workload_parameter_defaulting_to_advertisements() -> None:
    assert WORKLOADS["stock"].defaults["selectivity_of"] == "advertisements"
    plan = compile_plan(load_spec("octopia-subscribers",
                                  ["workload.selectivity_of=publications"]))
    assert plan.workload is not None and plan.workload.meta["selectivity_of"] == "publications"
    with pytest.raises(SpecError, match="selectivity_of must be one of"):
        compile_plan(load_spec("octopia-subscribers", ["workload.selectivity_of=notes"]))
