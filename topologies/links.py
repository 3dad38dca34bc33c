"""Link parameters, validated before they reach Mininet.

Mininet's ``TCLink`` silently drops keyword arguments it does not know and only logs an
error for a bandwidth outside 0..1000 Mbit/s, so a typo or an out-of-range value would
quietly give an unshaped link. Everything goes through :class:`LinkParams` first.

Units are in the names: Mbit/s, milliseconds, percent, packets. ``bw_mbps=None`` means
"not shaped" (the veth pair runs as fast as the CPU allows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

# HTB at 100 Gbit/s is far beyond what veth pairs carry here; above that a value is
# almost certainly a unit mistake (bit/s or kbit/s given as Mbit/s).
MAX_BW_MBPS = 100_000


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _bad(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{field}: bad value {value!r}; allowed: {allowed}")


@dataclass(frozen=True)
class LinkParams:
    """Parameters of one emulated link (both directions get the same)."""

    bw_mbps: float | None = None
    delay_ms: float = 0
    loss_pct: float = 0
    max_queue_pkts: int | None = None

    def __post_init__(self) -> None:
        bw = self.bw_mbps
        if bw is not None and not (_is_number(bw) and 0 < bw <= MAX_BW_MBPS):
            raise _bad("bw_mbps", bw, f"a number > 0 and <= {MAX_BW_MBPS}, or null (unshaped)")
        if not (_is_number(self.delay_ms) and self.delay_ms >= 0):
            raise _bad("delay_ms", self.delay_ms, "a number >= 0")
        if not (_is_number(self.loss_pct) and 0 <= self.loss_pct < 100):
            raise _bad("loss_pct", self.loss_pct, "a number >= 0 and < 100")
        q = self.max_queue_pkts
        if q is not None and not (isinstance(q, int) and not isinstance(q, bool) and q >= 1):
            raise _bad("max_queue_pkts", q, "an integer >= 1, or null (kernel default)")

    @classmethod
    def from_mapping(cls, d: Mapping[str, Any], where: str) -> LinkParams:
        """Build from plain data (YAML, CLI); ``where`` prefixes every error message.

        Unknown keys are an error, unlike in Mininet. Missing keys take the defaults.
        """
        allowed = ", ".join(f.name for f in fields(cls))
        if not isinstance(d, Mapping):
            raise _bad(where, d, f"a mapping with keys {allowed}")
        unknown = sorted(set(d) - {f.name for f in fields(cls)}, key=str)
        if unknown:
            raise ValueError(f"{where}: unknown link parameter(s) "
                             f"{', '.join(map(str, unknown))}; allowed: {allowed}")
        try:
            return cls(**d)
        except ValueError as exc:
            raise ValueError(f"{where}.{exc}") from None


UNSHAPED = LinkParams()
