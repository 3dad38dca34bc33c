"""Bulk data workloads (LBDD, point-to-point): one publisher pushes seeded data in slices
to its subscribers, round by round (:class:`BulkPlan`); the client operations of a round
for the simulator (:func:`bulk_workload`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.cores.params import is_integer, is_number, short_repr
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.workloads.bulkdata import data_messages, slice_count
from nodes.workloads.ops import ClientOp, Workload

GIB = 2**30


@dataclass(frozen=True)
class BulkPlan:
    """A bulk workload resolved against a list of brokers (see the module docstring)."""

    topic: str
    data_bytes: int
    slice_bytes: int
    seed: int
    start_s: float
    publisher: str
    others: tuple[str, ...]
    counts: tuple[int, ...]
    failure: Mapping[str, Any] | None
    rate_bin_s: float
    stream_mbps: float | None = None

    @property
    def n_slices(self) -> int:
        return slice_count(self.data_bytes, self.slice_bytes)

    @property
    def publisher_client(self) -> str:
        return f"pub-{self.publisher}"

    def describe(self) -> dict[str, Any]:
        """JSON-able summary, for the plan and the manifest."""
        return {"topic": self.topic, "data_bytes": self.data_bytes,
                "slice_bytes": self.slice_bytes, "n_slices": self.n_slices,
                "start_s": self.start_s, "publisher": self.publisher,
                "subscriber_counts": list(self.counts),
                "failure": dict(self.failure) if self.failure else None,
                "rate_bin_s": self.rate_bin_s, "stream_mbps": self.stream_mbps}

    @staticmethod
    def client_of(broker: str) -> str:
        """The subscriber client on ``broker``."""
        return f"sub-{broker}"


def stream_cap_mbps(value: Any) -> float | None:
    """``workload.stream_mbps`` checked: a per-connection rate cap in Mbit/s (a positive
    number) or None (no cap); a ValueError with the one-line message otherwise."""
    if value is None:
        return None
    if not is_number(value) or value <= 0:
        raise ValueError(f"workload.stream_mbps: bad value {short_repr(value)}; allowed: a "
                         "positive number of Mbit/s (the per-connection rate cap) or null")
    return float(value)


def sweep_node_counts(value: Any) -> list[int] | None:
    """``workload.sweep_nodes`` checked: the node counts of LBDD's depth sweep (integers of
    at least 2, a publisher and a subscriber) or None (no sweep); a ValueError with the
    one-line message otherwise."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(
            is_integer(n) and n >= 2 for n in value):
        raise ValueError(f"workload.sweep_nodes: bad value {short_repr(value)}; allowed: a "
                         "list of node counts (integers >= 2) or null")
    return [int(n) for n in value]


MAX_SLICE_KB = 2**20  # 1 GiB: a slice is one message, held whole in memory


def slice_kb(value: Any) -> int:
    """``workload.slice_kb`` checked: the slice size in KiB, an integer from 1 to
    :data:`MAX_SLICE_KB`; a ValueError with the one-line message otherwise."""
    if not is_integer(value) or not 1 <= value <= MAX_SLICE_KB:
        raise ValueError(f"workload.slice_kb: bad value {short_repr(value)}; allowed: an "
                         f"integer from 1 to {MAX_SLICE_KB} (KiB)")
    return value


def bulk_workload(plan: BulkPlan, subscribers: Sequence[str]) -> Workload:
    """The client operations of one round, for the simulator: ADVERTISE and SUBSCRIBE at
    0, the publisher's whole data at ``start_s`` (what the client roles send)."""
    pub = plan.publisher_client
    clients = {pub: plan.publisher, **{plan.client_of(b): b for b in subscribers}}
    topic = {"topic": plan.topic}
    ops = [ClientOp(0.0, pub, plan.publisher, Message(MsgType.ADVERTISE, 1, pub, 0, topic))]
    ops += [ClientOp(0.0, plan.client_of(b), b,
                     Message(MsgType.SUBSCRIBE, 1, plan.client_of(b), 0, topic))
            for b in subscribers]
    ops += [ClientOp(plan.start_s, pub, plan.publisher, m) for m in data_messages(
        pub, plan.topic, plan.data_bytes, plan.slice_bytes, plan.seed)]
    meta = {"kind": "bulk", "data_bytes": plan.data_bytes, "slice_bytes": plan.slice_bytes,
            "n_slices": plan.n_slices, "subscribers": len(subscribers)}
    return Workload(Schema({}), clients, tuple(ops), meta)
