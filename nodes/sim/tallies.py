"""What a simulated run counts for its result beside the links' figures: publications,
deliveries, the clients' send times and how far each advertisement and subscription
reached, delay samples and records (docs/design/simulator.md, "Delays").

A :class:`Tallies` pickles with the simulation (a pause).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from nodes.messages import MsgType
from nodes.metrics.summary import latest_arrival, propagation_delays, propagation_hops
from nodes.sim.deliveries import Deliveries
from nodes.sim.samples import SampleFile

SentKey = tuple[MsgType, str, int]  # (type, origin, msg_id) of a client's message


class Tallies:
    """The counts of one run whose workload attaches ``clients``."""

    def __init__(self, clients: Iterable[str]) -> None:
        self.deliveries = Deliveries(clients)
        self.records: Counter[str] = Counter()
        # One sample a delivery, as doubles in a file (nodes.sim.samples): in memory they
        # took 8 bytes a delivery, 580 MB of a 72-million-delivery Meghdoot run.
        self.notification_delays = SampleFile()
        # Wall time of core.handle per notification (nodes.metrics.summary's matching delay):
        # it depends on the machine, so it goes to the summary only, never to a log.
        self.matching_s = SampleFile()  # as SimResult.matching_s
        self.sent_at: dict[SentKey, float] = {}  # client operations' send times
        # Per advertisement/subscription: the brokers it has reached, and the time the
        # latest of them was first reached with the hops its copy had taken then
        # (nodes.metrics.summary.latest_arrival).
        self.reached_by: dict[SentKey, set[int]] = {}
        self.reached_at: dict[SentKey, tuple[float, int]] = {}
        self.published = 0
        self.first_pub_s = math.inf
        self.last_delivery_s = -math.inf

    def reached(self, key: SentKey, broker: int, t: float, hops: int) -> None:
        """The client message ``key`` reached ``broker`` (an index) at ``t``, in a copy
        that had taken ``hops`` overlay hops."""
        if key in self.sent_at:
            reached = self.reached_by.setdefault(key, set())
            if broker not in reached:  # later copies reach no new broker
                reached.add(broker)
                self.reached_at[key] = latest_arrival(self.reached_at.get(key), t, hops)

    def delays_s(self) -> dict[str, Sequence[float]]:
        """Delay samples per kind (s): one per delivery (``notification``), one per
        propagated advertisement and subscription."""
        return {
            "notification": self.notification_delays,
            **propagation_delays(self._sent(), {(t.name, o, i): s for (t, o, i), (s, _)
                                                in self.reached_at.items()}),
        }

    def hops(self) -> dict[str, list[int]]:
        """Per kind (advertisement, subscription), the hops behind each propagation delay
        sample of :meth:`delays_s`, in the samples' order."""
        return propagation_hops(self._sent(), {(t.name, o, i): h for (t, o, i), (_, h)
                                               in self.reached_at.items()})

    def _sent(self) -> dict[tuple[str, str, int], float]:
        return {(t.name, o, i): s for (t, o, i), s in self.sent_at.items()}

    def span_s(self) -> float:
        """From the first publication's send to the last notification's delivery (s), 0
        without deliveries."""
        return (max(0.0, self.last_delivery_s - self.first_pub_s)
                if self.last_delivery_s > self.first_pub_s else 0.0)
