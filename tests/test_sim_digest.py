"""The simulator's results, pinned: small runs of shipped specs give the summaries they gave
before the simulator's hot paths were made cheaper (frame sizes, deliveries, NIC
reservations, matching, Meghdoot's hops), every key but the wall-clock matching delay.

A digest differs when any figure of the run does: a change meant to alter results
changes the digest with it, printed by the failing assertion (and the change says why).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec

CASES = {
    # joins, splits and replicas, routing, spreads and notifications (its 70 s end before
    # the first load report, at 100 s)
    "meghdoot-peers": ("meghdoot-peers", ["topology.params.n=30",
                                          "workload.n_subscriptions=400",
                                          "workload.n_events=300"],
                       {"meghdoot": "3e0b298e3232cff6"}),
    # Meghdoot's first reading of load reports (report_rule periodic, every load period)
    # at 1,000 peers, pinned before the second was added: 250,601 of its 439,862
    # messages are load reports, over the ten load periods (10 s here) of its joins. The
    # shipped workload at 1,000 peers takes 2 to 3 min, too long for the suite; this one
    # takes 15 s of CPU.
    "meghdoot-peers-1000": ("meghdoot-peers", [
        "topology.params.n=1000", "workload.n_subscriptions=1000", "workload.n_events=1100",
        "routing.params.load_period_s=10.0", "routing.params.report_rule=periodic"],
        {"meghdoot": "bf96ccf0c92d35da"}),
    # fixed links with NICs' queues, the flood core
    "flood-demo": ("flood-demo", [], {"flood": "b36989d72269c8a9"}),
    # crashes and leaves, heartbeats, links on demand (the digests changed when the
    # summary gained reorganization.successful_*, then reorganization.move_effects, and with
    # every case's when it gained hops: the run's other figures were equal each time)
    "codd-failures": ("codd-failures", ["topology.params.n=30", "workload.n_documents=200"],
                      {"codd": "77ddf20cdfd5b644", "codd-flood": "560ea986ca31d6cc",
                       "codd-nr": "cd9373f4026fe363"}),
}


def digest(summary: dict) -> str:
    """The summary's keys and values but the matching delay (wall time), hashed."""
    kept = {**summary, "delay_ms": {k: v for k, v in summary["delay_ms"].items()
                                    if k != "matching"}}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_small_run_of_a_shipped_spec_summarises_as_before(case: str, tmp_path: Path) -> None:
    spec, overrides, want = CASES[case]
    _, summaries = run_simulation(compile_plan(load_spec(spec, overrides), netem=False),
                                  tmp_path, log_messages=False)
    assert {alg: digest(s) for alg, s in sorted(summaries.items())} == want
