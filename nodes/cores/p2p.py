"""Point-to-point baselines: the publisher's agent sends every slice to every subscriber.

Both are the dissemination agent of :mod:`nodes.cores.dissemination` (same membership,
heartbeats, slices, acknowledgements and resume as LBDD) over a star: every subscriber's
parent is the source. They differ only in pacing:

- ``p2p`` (:class:`P2PCore`) is the paper's point-to-point approach, read from its text
  ("the publisher sends data sequentially", "to one subscriber at a time"): slice ``i``
  goes to every subscriber one after another (subscribers in name order), then slice
  ``i+1``, with ``window_slices`` (default 1) slices unacknowledged over all subscribers
  together; with the default, each copy waits for the previous one's DATA_ACK
  (stop-and-wait), so the publisher serves one subscriber at a time.
- ``p2p-parallel`` (:class:`P2PParallelCore`) is a fairer baseline: one stream per
  subscriber, each with its own window (default 8, as LBDD's children), all at once, so
  the TCP connections share the publisher's NIC.
"""

from __future__ import annotations

from collections.abc import Sequence

from nodes.cores.dissemination import DisseminationAgent


def star_tree(source_ip: str, member_ips: Sequence[str]) -> dict[str, str]:
    """Every member's parent is the source."""
    return dict.fromkeys(member_ips, source_ip)


class P2PCore(DisseminationAgent):
    """``p2p``: sequential point-to-point, the paper's baseline (see the module doc)."""

    tree = staticmethod(star_tree)
    window_per_child = False
    default_window_slices = 1


class P2PParallelCore(DisseminationAgent):
    """``p2p-parallel``: one windowed stream per subscriber, all at once."""

    tree = staticmethod(star_tree)
