"""Congestion detection on output queues: OctopiA's Link Status Table (LST).

Every statistics window W (default 50 ms) the runtime reports, per overlay link, the
messages that entered the output queue (``count_in``), those that left it onto the wire
(``count_out``) and the queue length ``q`` at the end of the window. The paper's
congestion element is ``CE = count_in / count_out``: above 1 the queue grew in the
window, below 1 it shrank; a queue is congestion-free when CE is 1 and q is 0.

The paper's Eq. 10 (when IDR treats a link as overloaded) is lost from its text. Our
reading, with both parameters configurable:

    overloaded  <=>  q > theta  and  CE >= ce_min        (defaults theta = 10, ce_min = 1)

``q > theta``: messages are waiting beyond a tolerance. ``CE >= ce_min`` rather than
``CE > 1``: a link saturated in steady state moves as many messages out as come in
(CE = 1) while its queue stays long, and it is still the link to avoid; once the queue
drains (CE < 1) the link is given back. Edge cases of the ratio: a window with nothing
out but something in, or a non-empty queue, is a stalled link (CE = infinity); a window
with nothing in, nothing out and an empty queue is idle (CE = 1, congestion-free).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nodes.cores.interface import LinkWindow, Record
from nodes.cores.params import Param

DEFAULT_THETA = 10
DEFAULT_CE_MIN = 1.0
# The LST's settings, declared by every core that keeps one (idr, tid-dynamic).
LST_PARAMS = (
    Param("theta", "int", DEFAULT_THETA, "messages",
          "queue length above which a link with CE > ce_min is overloaded (OctopiA's θ)",
          minimum=0),
    Param("ce_min", "float", DEFAULT_CE_MIN, "",
          "congestion element (in/out per window) a link must exceed to be overloaded",
          minimum=1e-9),
)


def congestion_element(w: LinkWindow) -> float:
    """CE of one window (see the module docstring for the edge cases)."""
    if w.count_out == 0:
        return math.inf if (w.count_in > 0 or w.queue_len > 0) else 1.0
    return w.count_in / w.count_out


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """One row of the Link Status Table: the last window's figures and the verdict."""

    ce: float
    queue_len: int
    overloaded: bool


FREE = LinkStatus(ce=1.0, queue_len=0, overloaded=False)


class LinkStatusTable:
    """The LST of one broker, updated once per statistics window."""

    def __init__(self, theta: int = DEFAULT_THETA, ce_min: float = DEFAULT_CE_MIN) -> None:
        if theta < 0 or ce_min <= 0:
            raise ValueError(f"theta must be >= 0 and ce_min > 0, got {theta}, {ce_min}")
        self.theta = theta
        self.ce_min = ce_min
        self._rows: dict[str, LinkStatus] = {}
        self._overloaded: tuple[str, ...] = ()

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LinkStatusTable:
        """The table a core's params ``theta`` and ``ce_min`` ask for (resolved: both present)."""
        return cls(theta=int(params["theta"]),
                   ce_min=float(params["ce_min"]))

    def observe(self, links: Mapping[str, LinkWindow]) -> list[Record]:
        """:meth:`update` with the window just ended; an ``lst`` record listing the
        overloaded links whenever that set changes (so a log shows every change of
        verdict without a record per window)."""
        self.update(links)
        overloaded = tuple(sorted(link for link, row in self._rows.items() if row.overloaded))
        if overloaded == self._overloaded:
            return []
        self._overloaded = overloaded
        return [Record("lst", {"overloaded": list(overloaded)})]

    def update(self, links: Mapping[str, LinkWindow]) -> None:
        """Replace the rows of the links reported for the window just ended."""
        for link, w in links.items():
            ce = congestion_element(w)
            self._rows[link] = LinkStatus(
                ce=ce, queue_len=w.queue_len,
                overloaded=w.queue_len > self.theta and ce >= self.ce_min)

    def status(self, link: str) -> LinkStatus:
        """The link's row; a link never reported is free."""
        return self._rows.get(link, FREE)

    def overloaded(self, link: str) -> bool:
        return self.status(link).overloaded

    def load_key(self, link: str) -> tuple[int, float, str]:
        """Order of load: queue length, then CE, then the name (so ties are
        deterministic)."""
        row = self.status(link)
        return (row.queue_len, row.ce, link)

    def least_loaded(self, links: Iterable[str]) -> str | None:
        """The link with the shortest queue (ties: lowest CE, then name), or None."""
        return min(links, key=self.load_key, default=None)
