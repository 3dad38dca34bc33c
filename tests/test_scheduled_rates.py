"""A spec's scheduled link changes (experiments.emulation.throttle.ScheduledRates), without a
network: the tc calls are recorded instead of run. Changes fire at their times, in
schedule order; a failing change is reported, not fatal to the timer; stop() restores
every link it touched, even one whose change failed half-way, and a failing restore is
logged so that the caller can still stop its brokers."""

from __future__ import annotations

import time
from typing import Any

import pytest

from experiments.emulation import throttle
from experiments.spec import LinkChange


@pytest.fixture
def tc(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def ends(a: str, b: str) -> tuple[tuple[int, str], tuple[int, str]]:
        if "x" in (a, b):
            raise LookupError(f"{a} and {b} share no host-to-host link")
        return (1, f"{a}-eth"), (2, f"{b}-eth")

    def set_rate(pid: int, intf: str, bw_mbps: float) -> None:
        calls.append((time.monotonic(), intf, bw_mbps))
        if intf == "c0-eth" and bw_mbps < 1:
            raise RuntimeError("tc: no such device")

    monkeypatch.setattr(throttle, "link_interfaces", ends)
    monkeypatch.setattr(throttle, "set_rate", set_rate)
    return calls


def test_changes_fire_in_order_and_every_touched_link_is_restored(tc: list[Any]) -> None:
    logged: list[str] = []
    changes = [LinkChange(0.2, "a0", "a1", 0.5), LinkChange(0.2, "b1", "c0", 0.5),
               LinkChange(5.0, "a0", "a1", 0.1)]
    t0 = time.time()
    rates = throttle.ScheduledRates(changes, {("a0", "a1"): 10.0, ("c0", "b1"): None}, t0,
                                    logged.append)
    rates.start()
    time.sleep(0.6)
    rates.stop()  # before the change at 5 s: it never fires
    applied = rates.applied
    assert [(e["a"], e["b"]) for e in applied] == [("a0", "a1"), ("b1", "c0")]
    assert applied[0]["interfaces"] == ["a0-eth", "a1-eth"] and "error" not in applied[0]
    assert 0.15 < float(applied[0]["applied_at_s"]) < 0.5
    assert "no such device" in str(applied[1]["error"])
    assert any("scheduled rate change failed" in m for m in logged)
    changed = [(intf, bw) for _, intf, bw in tc]
    # a0-a1 back to its configured 10 Mbit/s; b1-c0 (unshaped, and only half changed
    # when tc failed) to the stand-in for no limit.
    assert changed == [("a0-eth", 0.5), ("a1-eth", 0.5), ("b1-eth", 0.5), ("c0-eth", 0.5),
                       ("a0-eth", 10.0), ("a1-eth", 10.0),
                       ("b1-eth", 100_000.0), ("c0-eth", 100_000.0)]


def test_a_link_that_cannot_be_throttled_fails_before_the_workload(tc: list[Any]) -> None:
    rates = throttle.ScheduledRates([LinkChange(1.0, "a0", "x", 1.0)], {}, time.time(),
                                    lambda _m: None)
    with pytest.raises(LookupError, match="no host-to-host link"):
        rates.start()
    rates.stop()
    assert tc == []
