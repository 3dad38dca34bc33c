"""The brute-force oracle: which subscriber must receive which publication."""

from __future__ import annotations

from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json
from nodes.workloads.ops import Workload


def expected_deliveries(w: Workload) -> dict[tuple[str, int], frozenset[str]]:
    """Publication key ``(origin, msg_id)`` -> subscribers whose subscription it matches.

    The oracle has a global view and ignores timing and routing: every subscription counts
    for every publication, which the phase separation of :func:`stock_workload` makes
    true in a run. Advertisements do not change the result because every publication
    matches its publisher's advertisement. Matching uses the exact
    :class:`~nodes.matching.SubscriptionIndex` (property-tested against brute force) so
    that large workloads stay fast. Workloads with UNSUBSCRIBE or UNADVERTISE need timing
    and are refused.
    """
    index = SubscriptionIndex()
    pubs: list[Message] = []
    for op in w.ops:
        t = op.msg.type
        if t is MsgType.SUBSCRIBE:
            index.add((op.client, op.msg.msg_id), filter_from_json(op.msg.payload["filter"]))
        elif t is MsgType.PUBLISH:
            pubs.append(op.msg)
        elif t is not MsgType.ADVERTISE:
            raise ValueError(f"expected_deliveries cannot order {t.name} ops (timing-dependent)")
    return {m.key: frozenset(client for client, _ in index.match(m.payload["attrs"])) for m in pubs}
