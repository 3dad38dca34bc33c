"""The broker's gate on reading its local clients, the first rule of its overload policy
(docs/design/broker.md, "Overload policy", "Publishers slowed").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from nodes.emulated.overlay_link import OverlayLink
from nodes.emulated.runtime import log_now
from nodes.logs import Ev, JsonlLog


class ClientGate:
    """Open (:attr:`open` set) while no output queue of ``links`` is past its high-water
    mark; each change is a ``record`` kind ``backpressure`` in ``log``. ``links`` is the
    broker's own mapping of links, which grows as links open on demand."""

    def __init__(self, log: JsonlLog, links: Mapping[str, OverlayLink]) -> None:
        self._log = log
        self._links = links
        self._pressed: set[str] = set()  # links over their high-water mark
        self.open = asyncio.Event()  # set while clients may be read
        self.open.set()

    def pressure(self, link: str, on: bool) -> None:
        """Link ``link``'s queue passed the high-water mark (``on``) or fell back to half
        of it: stop or resume reading from the local clients."""
        if on:
            self._pressed.add(link)
        else:
            self._pressed.discard(link)
        if bool(self._pressed) == (not self.open.is_set()):
            return  # no change for the clients
        state = "on" if self._pressed else "off"
        queue = self._links[link].queue_len
        log_now(self._log, Ev.RECORD, kind="backpressure", state=state, link=link,
                queue_len=queue)
        if self._pressed:
            self.open.clear()
        else:
            self.open.set()
