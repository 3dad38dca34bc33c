"""The overwhelmed-broker variant of OctopiA's burst (octopia-burst-overwhelmed): the HRP's
broker slowed by a CPU share instead of throttled links, and what IDR sees of it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from experiments.plan import compile_plan
from experiments.plan_text import format_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec

SPEC = "octopia-burst-overwhelmed"
# A short run of the same shape: all 100 regular publishers (their traffic through i1 is
# what waits upstream), a burst of 7 s that still outruns i1 (83.3/s against about 39/s).
QUICK = ["workload.n_subscribers=50",
         "workload.pubs_per_publisher=30", "workload.burst.count=600",
         "routing.algorithms=[snr,idr]"]


def test_the_spec_slows_the_hrp_broker_and_leaves_its_links_alone() -> None:
    spec = load_spec(SPEC)
    plan = compile_plan(spec)
    assert spec.link_schedule == ()  # the throttled-link variant is octopia-burst
    assert plan.workload.meta["burst"]["broker"] == "i1"
    base_s, per_s = plan.processing.seconds("i1")
    # An HRP notification handed on to its 5 clusters: i1 manages under 50 a second, the
    # lowest scaled burst rate, while any other broker manages thousands.
    assert 1 / (base_s + 5 * per_s) < 50
    other_base_s, other_per_s = plan.processing.seconds("i0")
    assert 1 / (other_base_s + 5 * other_per_s) > 1000
    text = format_plan(plan)
    assert "i1 0.007" in text and "i1 at its CPU share" in text
    assert "input window 16 frames" in text


def _queue_and_lst(run_dir: Path, alg: str, t0_s: float, t1_s: float) -> tuple[int, int]:
    """Longest queue toward i1 at its neighbours during [t0_s, t1_s] (wall clock), and the
    ``lst`` records in which a neighbour finds its link to i1 overloaded."""
    longest, flagged = 0, 0
    for log in (run_dir / alg).glob("*.jsonl"):
        for line in log.open():
            if '"ev":"queue"' in line and '"link":"i1"' in line:
                r = json.loads(line)
                if t0_s <= r["t_wall"] <= t1_s:
                    longest = max(longest, r["queue_len"])
            elif '"kind":"lst"' in line and '"node":"i1"' not in line:
                flagged += "i1" in json.loads(line)["overloaded"]
    return longest, flagged


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    plan = compile_plan(load_spec(SPEC, QUICK))
    run_dir, summaries = run_simulation(plan, tmp_path_factory.mktemp("runs"))
    return run_dir, summaries


def test_upstream_queues_grow_and_idr_sees_i1_overloaded(
        quick_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, summaries = quick_run
    first_s = min(json.loads(line)["t_wall"] for line in (run_dir / "snr" / "hrp.jsonl").open()
                  if '"ev":"send"' in line)
    # From the burst's start on: i1 works off its backlog long after the HRP stops.
    during = (first_s, math.inf)
    theta = 10
    for alg in ("snr", "idr"):
        assert summaries[alg]["missing"] == 0
        longest, _ = _queue_and_lst(run_dir, alg, *during)
        assert longest > theta, alg  # i1's full window holds frames in its neighbours
    # IDR's congestion signal: SNR keeps no Link Status Table.
    assert _queue_and_lst(run_dir, "snr", *during)[1] == 0
    assert _queue_and_lst(run_dir, "idr", *during)[1] > 0
    # i1 itself emits no faster than it handles: its own links stay short.
    assert summaries["snr"]["burst"]["queue"]["max_len"] <= theta
