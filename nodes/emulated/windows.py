"""The broker's statistics windows (docs/design/broker.md, "Statistics
windows"): each link's figures per window, and its ``queue`` records.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodes.cores.interface import LinkWindow
from nodes.emulated.overlay_link import OverlayLink
from nodes.emulated.runtime import log_now
from nodes.logs import Ev, JsonlLog


class QueueWindows:
    """Closes one window after another: a link's ``queue`` record goes to ``log`` only in
    a window in which it was active or was active in the window before, so every return
    to idle is visible and a missing window means all zeros."""

    def __init__(self, log: JsonlLog) -> None:
        self._log = log
        self._active: set[str] = set()  # links active in the window last closed
        self.start = 0.0  # the current window's start (event loop time)

    def close(self, links: Mapping[str, OverlayLink],
              now: float) -> tuple[float, dict[str, LinkWindow]]:
        """End the current window at ``now``: log each link's figures; (window_ms, figures)."""
        window_ms = round((now - self.start) * 1000.0, 3)
        self.start = now
        figures: dict[str, LinkWindow] = {}
        active: set[str] = set()
        for name, link in links.items():
            w, flushed = link.take_window()
            figures[name] = w
            if w.count_in or w.count_out or w.queue_len or flushed:
                active.add(name)
            if name in active or name in self._active:
                log_now(self._log, Ev.QUEUE, link=name, count_in=w.count_in,
                        count_out=w.count_out, queue_len=w.queue_len, flushed=flushed,
                        window_ms=window_ms)
        self._active = active
        return window_ms, figures
