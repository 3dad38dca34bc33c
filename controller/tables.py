"""The controller's bounded state, free of any framework import (tested without a switch).

A burst of packet-ins must not grow the controller without bound nor starve the other
switches, so the learning table has a cap and packet-in handling has a rate limit.
"""

from __future__ import annotations

from collections import OrderedDict


class MacTable:
    """MAC address → switch port, at most ``max_entries`` entries.

    When full, learning a new address evicts the least recently learned or refreshed one
    (a burst of random source addresses then pushes out only stale entries; an evicted
    host's traffic is flooded until it is learned again, it is never lost).
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._ports: OrderedDict[str, int] = OrderedDict()
        self.evicted = 0

    def learn(self, mac: str, port: int) -> str | None:
        """Record that ``mac`` sits behind ``port``; returns the evicted address, if any."""
        if mac in self._ports:
            self._ports.move_to_end(mac)
            self._ports[mac] = port
            return None
        self._ports[mac] = port
        if len(self._ports) <= self.max_entries:
            return None
        self.evicted += 1
        return self._ports.popitem(last=False)[0]

    def port(self, mac: str) -> int | None:
        return self._ports.get(mac)

    def __len__(self) -> int:
        return len(self._ports)


class TokenBucket:
    """At most ``rate_hz`` events per second on average, ``burst`` at once."""

    def __init__(self, rate_hz: float, burst: float) -> None:
        if rate_hz <= 0 or burst < 1:
            raise ValueError(f"need rate_hz > 0 and burst >= 1, not {rate_hz}, {burst}")
        self.rate_hz = rate_hz
        self.burst = burst
        self._tokens = burst
        self._last_s: float | None = None

    def take(self, now_s: float) -> bool:
        """Spend one token at time ``now_s`` (monotonic seconds); False when none is left."""
        if self._last_s is not None:
            self._tokens = min(self.burst, self._tokens + (now_s - self._last_s) * self.rate_hz)
        self._last_s = now_s
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
