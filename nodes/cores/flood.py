"""The reference core: publications flooded over a spanning tree, subscriptions local.

Modelling choices:

- Publications travel over a spanning tree of the overlay (``params["tree_neighbours"]``,
  computed by the host with :func:`nodes.cores.overlay.spanning_tree_neighbours`; only a
  broker without neighbours may omit it), never back on the link they came from. On a
  tree every broker receives every publication exactly once, so no duplicate detection
  (and no per-message state) is needed even when the overlay itself has cycles.
- Subscriptions stay at the subscriber's broker, in a
  :class:`~nodes.matching.SubscriptionIndex`; every broker matches every publication it
  sees against its local subscriptions and delivers it once to each matching local
  client, however many of that client's subscriptions match.
- Advertisements and un-advertisements are accepted and ignored: flooding needs no
  publisher state. Any other message type is reported with an ``unhandled`` record.
- Matching work is reported as a ``match`` record (subscriptions held, clients
  matched) whenever the broker holds local subscriptions; without any, there is no work.
- Un-subscription payloads name the subscription by the ``msg_id`` of the SUBSCRIBE
  message in ``payload["sub_id"]``, sent by the same client.
- Statistics windows, timers and lost links need no reaction (a lost tree link
  partitions the flood; repairing the tree is left to the cores that model failures).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nodes.cores.actions import fan_out, unhandled
from nodes.cores.interface import Action, Arrived, Event, FromClient
from nodes.cores.overlay import spanning_tree_neighbours
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json

if TYPE_CHECKING:
    import networkx as nx

_IGNORED = frozenset({MsgType.ADVERTISE, MsgType.UNADVERTISE})


class FloodCore:
    """Flood publications over the spanning tree; match them against local subscriptions."""

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.broker = broker
        self.neighbours = tuple(sorted(neighbours))
        if "tree_neighbours" not in params and self.neighbours:
            raise ValueError(
                f"flood core at {broker}: params need 'tree_neighbours' "
                "(see nodes.cores.overlay_params / spanning_tree_neighbours)"
            )
        tree = tuple(sorted(params.get("tree_neighbours", ())))
        stray = sorted(set(tree) - set(self.neighbours))
        if stray:
            raise ValueError(f"flood core at {broker}: tree neighbours {stray} are not neighbours")
        self.tree_neighbours = tree
        # Subscription ids are the SUBSCRIBE message's (client, msg_id), as in the oracle
        # (nodes.workloads.oracle.expected_deliveries): unique system-wide.
        self._index = SubscriptionIndex()

    def table_sizes(self) -> dict[str, int]:
        """Routing-table sizes: no SRT; the PRT holds only local subscriptions."""
        return {"srt": 0, "prt": len(self._index)}

    def handle(self, event: Event, now_s: float) -> list[Action]:
        """Process one event; see the module docstring for the rules."""
        if isinstance(event, Arrived):
            if event.msg.type is MsgType.PUBLISH:
                return self._publish(event.msg, came_from=event.link)
            return self._other(event.msg)
        if isinstance(event, FromClient):
            msg = event.msg
            if msg.type is MsgType.PUBLISH:
                return self._publish(msg, came_from=None)
            if msg.type is MsgType.SUBSCRIBE:
                self._index.add((event.client, msg.msg_id), filter_from_json(msg.payload["filter"]))
                return []
            if msg.type is MsgType.UNSUBSCRIBE:
                sub_id = (event.client, int(msg.payload["sub_id"]))
                if sub_id in self._index:  # un-subscribing twice is harmless
                    self._index.remove(sub_id)
                return []
            return self._other(msg)
        return []

    def _publish(self, msg: Message, came_from: str | None) -> list[Action]:
        clients: set[str] = set()
        if len(self._index):
            clients = {client for client, _ in self._index.match(msg.payload["attrs"])}
        onward = {nb for nb in self.tree_neighbours if nb != came_from}
        return fan_out(msg, clients, onward, len(self._index))

    def _other(self, msg: Message) -> list[Action]:
        if msg.type in _IGNORED:
            return []
        return [unhandled(msg)]


# The keys :func:`overlay_params` gives each broker (the registry's ``derived_keys``).
DERIVED_KEYS = ("tree_neighbours",)


def overlay_params(overlay: nx.Graph) -> dict[str, dict[str, Any]]:
    """Per-broker params the host derives from the overlay: each broker's tree neighbours
    (only the edges matter; node and edge attributes are not read)."""
    return {
        broker: {"tree_neighbours": nbs}
        for broker, nbs in spanning_tree_neighbours(overlay.edges).items()
    }
