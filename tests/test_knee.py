"""The processing model's knee against the emulated broker (root): a broker host limited
to a share of a core saturates where the simulator, with the calibrated service time
divided by that share, says it does (within 25 %), and keeps up below it.

The service time is calibrated here, on this machine, as ``pubsublab bench broker``
does (saturated, at 0.2 core), and the knee is then predicted at another share: the
committed ``nodes/sim/calibration.json`` describes the machine it was measured on, and a
CI machine may be faster or slower.

What the comparison is robust to, and how (each seen on this two-core machine):

- The machine's pace changing from one second to the next: at a fixed share, the CPU
  per message moved between about 185 and 385 us over 1 s windows (183 to 323 in one run), and
  by up to 40 % between 3 s steps; steps at the two shares one after the other once
  gave a ratio of 0.73. (A later, faster machine used about 70 us a message, and
  handled 2,600 a second at 0.2 core; the broker with batched reads and fixed-field log
  records kept up with 8,000 a second there, so 25 us or less: the offered rate must
  stand well above that.) So
  the calibration and the prediction come from one saturated run whose share
  alternates every ``WINDOW_S`` (``PAIRS`` windows at each share):
  both shares see the same mix of paces, and the cost at each is pooled over its
  windows (CPU used over messages handled). Eleven such runs here gave ratios of 0.84
  to 1.12.
- The broker host not getting its whole quota while other work keeps the cores busy
  (0.145 of 0.15 core, 0.185 of 0.2, with a Spark job and a headless Chromium running
  beside it): the cost is the CPU time the host's cgroup really used per message, and
  the simulator is given the share the host really used."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nodes.sim.processing import Processing, ServiceTime

CALIBRATION_SHARE = 0.2
SHARE = 0.15  # not the calibration's share: the model must carry over
PAIRS = 20  # windows at each share, alternating
WINDOW_S = 0.5
RATE_HZ = 20_000  # offered: 2.5x or more the knee at 0.2 core of the fastest broker seen
MIN_BACKLOG = 100  # publications waiting at every window's end: the broker never idled


def _pooled(windows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The share of a core used and the messages handled per second, over the windows."""
    length_s = sum(w["end_wall"] - w["start_wall"] for w in windows)
    used_s = sum(w["cpu_used_share"] * (w["end_wall"] - w["start_wall"]) for w in windows)
    return used_s / length_s, sum(w["handled"] for w in windows) / length_s


@pytest.mark.root
def test_a_cpu_limited_broker_has_the_simulated_knee(tmp_path: Path) -> None:
    from experiments.bench.broker import alternating_saturation, chain_delays
    from experiments.bench.chain import BROKER, simulated_chain
    from experiments.emulation.doctor import probe
    from experiments.emulation.network import Emulation
    from topologies.links import LinkParams
    from topologies.registry import build_graph

    found = probe()
    assert found["mechanisms"]["cpu_limit"], found["checks"]
    graph = build_graph("gigabit-cluster", {"n": 3}, LinkParams(bw_mbps=1000))
    emu = Emulation(graph, switch="bridge", probe=found, log=lambda _m: None,
                    cpu_limits={BROKER: CALIBRATION_SHARE})
    try:
        emu.start()
        windows = alternating_saturation(
            emu, [CALIBRATION_SHARE, SHARE] * PAIRS + [CALIBRATION_SHARE], WINDOW_S,
            RATE_HZ, tmp_path / "alternating")
        assert len(windows) == 2 * PAIRS + 1
        assert min(w["backlog"] for w in windows) > MIN_BACKLOG, windows
        cal_used, cal_hz = _pooled([w for w in windows if w["cpu_share"] == CALIBRATION_SHARE])
        used, emulated_hz = _pooled([w for w in windows if w["cpu_share"] == SHARE])
        cost_us = 1e6 * cal_used / cal_hz
        # The simulator, measured, with that cost and the share the host really had.
        proc = Processing(ServiceTime(cost_us), cpu_share={BROKER: used})
        base_s, per_match_s = proc.seconds(BROKER)
        over = simulated_chain(3 / (base_s + per_match_s), 2.0, proc)
        assert over["throughput_hz"] == pytest.approx(1 / (base_s + per_match_s), rel=0.01)
        # Below the knee, at the configured share: the simulator keeps up, and so must
        # the emulated broker.
        proc = Processing(ServiceTime(cost_us), cpu_share={BROKER: SHARE})
        base_s, per_match_s = proc.seconds(BROKER)
        half_hz = 0.5 / (base_s + per_match_s)
        under = simulated_chain(half_hz, 2.0, proc)
        assert under["throughput_hz"] == pytest.approx(half_hz, rel=0.01)
        (kept,) = chain_delays(emu, [round(half_hz)], 3.0, tmp_path / "under")
    finally:
        emu.stop()
    details = {"cost_us": round(cost_us, 2), "used_share": round(used, 4),
               "emulated_hz": round(emulated_hz, 1), "simulated_hz": over["throughput_hz"],
               "cost_at_share_us": round(1e6 * used / emulated_hz, 2)}
    assert emulated_hz / over["throughput_hz"] == pytest.approx(1.0, rel=0.25), details
    assert kept["delivered"] == kept["published"], kept
    assert kept["throughput_hz"] == pytest.approx(half_hz, rel=0.05), kept
