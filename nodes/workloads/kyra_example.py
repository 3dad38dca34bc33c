"""The Kyra paper's worked example as a workload (Cao and Singh, INFOCOM 2004, Fig. 1).

Events are the integers 0-9 (one attribute, ``v``); Fig. 1 lists two subscriptions per
server. Each becomes its own subscriber client, ``s<server><value>``, subscribing to
``v = value`` at 0 s; client ``p`` of the publishing server then publishes the chosen
events, the first at 1 s (Fig. 1's example publishes event 9 at server A). Its meta
carries the calibration sample routing figures are derived from. Server names
are the figure's letters unless ``servers`` maps them to broker names (topologies want
lowercase names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.workloads.ops import ClientOp, Workload

# Fig. 1: per server, the events its subscriptions ask for.
FIG1_SUBSCRIPTIONS: dict[str, tuple[int, ...]] = {
    "A": (1, 5), "B": (7, 8), "C": (1, 2), "D": (0, 6), "E": (3, 5), "F": (5, 7),
    "G": (4, 6), "H": (2, 9)}
SCHEMA = Schema({"v": "int"})
PUBLISH_GAP_S = 0.1  # between two published events: far longer than the example's paths
# The event distribution that routing figures are balanced on (meta["calibration"]): every
# event once, as Fig. 1 gives no distribution (and Fig. 4's zones, 0-3, 4-6, 7-9, are
# what an even split of 0-9 into three gives).
CALIBRATION: list[dict[str, int]] = [{"v": v} for v in range(10)]


def kyra_example_workload(publisher: str = "A", events: Sequence[int] = (9,),
                          servers: Mapping[str, str] | None = None) -> Workload:
    """Fig. 1's subscriptions, then ``events`` published at ``publisher`` (a figure
    letter), :data:`PUBLISH_GAP_S` apart from 1 s on; ValueError for an unknown server
    or an event outside 0-9."""
    names = dict(servers) if servers is not None else {s: s for s in FIG1_SUBSCRIPTIONS}
    if sorted(names) != sorted(FIG1_SUBSCRIPTIONS):
        raise ValueError(f"servers must map each of {sorted(FIG1_SUBSCRIPTIONS)} to a broker")
    if publisher not in names:
        raise ValueError(f"publisher: bad value {publisher!r}; allowed: one of "
                         f"{sorted(FIG1_SUBSCRIPTIONS)}")
    if not events or any(isinstance(e, bool) or e not in range(10) for e in events):
        raise ValueError(f"events: bad value {list(events)!r}; allowed: integers 0-9")
    ops = [ClientOp(0.0, f"s{s.lower()}{v}", names[s],
                    Message(MsgType.SUBSCRIBE, 1, f"s{s.lower()}{v}", 0,
                            {"filter": [["v", "=", v]]}))
           for s, vs in FIG1_SUBSCRIPTIONS.items() for v in vs]
    ops += [ClientOp(1.0 + PUBLISH_GAP_S * i, "p", names[publisher],
                     Message(MsgType.PUBLISH, i + 1, "p", 0, {"attrs": {"v": e}}))
            for i, e in enumerate(events)]
    return Workload(SCHEMA, {o.client: o.broker for o in ops}, tuple(ops),
                    {"source": "Kyra (INFOCOM 2004) Fig. 1", "publisher": publisher,
                     "events": list(events), "calibration": CALIBRATION})
