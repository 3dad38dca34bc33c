"""What a workload tells a host that derives routing figures before a run: every filter
each broker's clients will subscribe to, and the attributes of its publications (a
calibration sample of the event distribution).

Kyra's zones and trees and the multicast baseline's groups are derived from these
(:func:`nodes.cores.kyra.run_params`, :func:`nodes.cores.multicast.run_params`).
"""

from __future__ import annotations

from collections.abc import Mapping

from nodes.messages import MsgType
from nodes.model import Filter, Value, filter_from_json
from nodes.workloads.ops import Workload


def subscriptions_by_broker(w: Workload) -> dict[str, list[Filter]]:
    """Per broker, the filters of every SUBSCRIBE its clients send, in workload order."""
    out: dict[str, list[Filter]] = {}
    for o in w.ops:
        if o.msg.type is MsgType.SUBSCRIBE:
            out.setdefault(o.broker, []).append(filter_from_json(o.msg.payload["filter"]))
    return out


def publication_attrs(w: Workload) -> list[Mapping[str, Value]]:
    """The attributes of every PUBLISH, in workload order."""
    return [o.msg.payload["attrs"] for o in w.ops if o.msg.type is MsgType.PUBLISH]
