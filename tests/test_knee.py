"""The processing model's knee against the emulated broker (root): a broker host limited
to a share of a core saturates where the simulator, with the calibrated service time
divided by that share, says it does (within 25 %), and keeps up below it.

The service time is calibrated here, on this machine, as ``pubsublab bench broker``
does (saturated, at 0.2 core), and the knee is then predicted at another share: the
committed ``nodes/calibration.json`` describes the machine it was measured on, and a
CI machine may be faster or slower."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodes.processing import Processing, ServiceTime

CALIBRATION_SHARE = 0.2
SHARE = 0.15  # not the calibration's share: the model must carry over


@pytest.mark.root
def test_a_cpu_limited_broker_has_the_simulated_knee(tmp_path: Path) -> None:
    from experiments.bench.broker import chain_delays, saturation_point
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
        # Calibrate: the cost of one message (one delivery) when saturated, measured
        # before and after the step at the other share and averaged (the machine's pace
        # drifts by up to 20 % over a minute here; the two bracket the step).
        cal = saturation_point(emu, CALIBRATION_SHARE, 8000, 3.0, tmp_path / "calibration")
        assert cal["throughput_hz"] < 0.9 * cal["send_hz"], cal
        # The emulated broker at the other share, offered about 3x the knee it would have
        # at the first calibration.
        guess_hz = SHARE / (cal["saturated_cost_us"] * 1e-6)
        sat = saturation_point(emu, SHARE, round(3 * guess_hz), 3.0, tmp_path / "over")
        again = saturation_point(emu, CALIBRATION_SHARE, 8000, 3.0, tmp_path / "again")
        cost_us = (cal["saturated_cost_us"] + again["saturated_cost_us"]) / 2
        proc = Processing(ServiceTime(cost_us), cpu_share={BROKER: SHARE})
        base_s, per_match_s = proc.seconds(BROKER)
        knee_hz = 1.0 / (base_s + per_match_s)
        # The simulator, measured: saturated at the knee above it, keeping up below it.
        over = simulated_chain(3 * knee_hz, 2.0, proc)
        under = simulated_chain(0.5 * knee_hz, 2.0, proc)
        assert over["throughput_hz"] == pytest.approx(knee_hz, rel=0.01)
        assert under["throughput_hz"] == pytest.approx(0.5 * knee_hz, rel=0.01)
        (kept,) = chain_delays(emu, [round(0.5 * knee_hz)], 3.0, tmp_path / "under")
    finally:
        emu.stop()
    assert sat["throughput_hz"] < 0.9 * sat["send_hz"], sat  # a backlog, so saturated
    assert sat["throughput_hz"] == pytest.approx(over["throughput_hz"], rel=0.25), sat
    assert kept["delivered"] == kept["published"], kept
    assert kept["throughput_hz"] == pytest.approx(0.5 * knee_hz, rel=0.05), kept
