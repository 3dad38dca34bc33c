"""The summary of one algorithm's run read from its logs: the one path both runtimes take.

The broker and client logs (records of :mod:`nodes.logs`) are the same in both runtimes,
so the same reader turns them into ``summary.json`` (:func:`summarize_logs`, definitions in
:mod:`nodes.metrics.summary`). The simulator also has an in-memory path
(:func:`nodes.sim.result.summarize`), used when it writes no logs; a test holds the two equal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodes.logs import DISCONNECTIONS, REFUSALS, Ev, iter_jsonl, torn_tail_bytes
from nodes.metrics.summary import (
    CARRIES,
    MATCHED_TYPES,
    PROPAGATED_KINDS,
    Expected,
    OpKey,
    build_summary,
    latest_arrival,
    propagation_delays,
    propagation_hops,
)
from nodes.runfolder import log_path
from nodes.workloads.ops import Workload


def link_notifications(out_dir: Path, links: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Notification copies (:data:`~nodes.metrics.summary.MATCHED_TYPES`: PUBLISH and IDR's
    CIV_NOTIFY) that left each broker's output queue onto the given overlay links, per
    direction: ``{"a>b": n, "b>a": m}``, from the brokers' ``send`` records (the same
    records in both runtimes). Each broker's log is read once."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for a, b in links:
        wanted[a].add(b)
        wanted[b].add(a)
    counts: dict[str, int] = {}
    for src, dsts in sorted(wanted.items()):
        per_dst = dict.fromkeys(sorted(dsts), 0)
        for r in iter_jsonl(log_path(out_dir, src), Ev.SEND):
            if r.get("link") in per_dst and r.get("type") in MATCHED_TYPES:
                per_dst[r["link"]] += 1
        counts.update({f"{src}>{dst}": n for dst, n in per_dst.items()})
    return counts


def client_receipts(out_dir: Path, workload: Workload) -> dict[str, Any]:
    """What the clients' logs say: notifications received per (origin, msg_id) with the
    receiving subscribers (duplicates kept), notification delays, publications sent, the
    wall-clock span from the first publication to the last receipt, and the send times
    (``t_wall``) of advertisements and subscriptions by (type, origin, msg_id)."""
    deliveries: dict[tuple[str, int], list[str]] = defaultdict(list)
    delays: list[float] = []
    sent_s: dict[OpKey, float] = {}
    published = 0
    t_first, t_last = math.inf, -math.inf
    for client in sorted(workload.clients):
        for r in iter_jsonl(log_path(out_dir, client)):
            if r["ev"] == Ev.SEND and r.get("type") in PROPAGATED_KINDS:
                sent_s[(r["type"], r["origin"], r["msg_id"])] = r["t_wall"]
            if r.get("type") != "PUBLISH":
                continue
            if r["ev"] == Ev.SEND:
                published += 1
                t_first = min(t_first, r["t_wall"])
            elif r["ev"] == Ev.RECV:
                deliveries[(r["origin"], r["msg_id"])].append(client)
                delays.append(r["t_wall"] - r["t_pub"])
                t_last = max(t_last, r["t_wall"])
    return {"deliveries": dict(deliveries), "delays_s": delays, "published": published,
            "span_s": (t_last - t_first) if t_last > t_first else 0.0, "sent_s": sent_s}


def summarize_logs(out_dir: Path, broker_names: Iterable[str], workload: Workload,
                   algorithm: str, runtime: str, scale: float,
                   expected: Expected) -> dict[str, Any]:
    """summary.json of one algorithm's run from its broker and client logs, whichever
    runtime wrote them; ``expected``: the oracle's deliveries of ``workload``, as
    :func:`~nodes.metrics.summary.build_summary` takes them.

    Advertisement and subscription delays follow :mod:`nodes.metrics.summary`: per client
    operation, the latest over brokers of its first inter-broker ``recv`` (of a message
    type in :data:`~nodes.metrics.summary.CARRIES`), minus the client's ``send``; their
    ``hops``, that ``recv``'s. Matching
    delays are the brokers' ``matching_ms`` (on ``recv`` records of notifications).
    ``drops_by_reason`` counts the brokers' ``drop`` records by reason (every loss the
    brokers saw: ``queue_full``, ``link_down``, ``loss``, ...); ``backpressure_episodes``
    the times a broker stopped reading its clients (the overload policy of
    docs/design/broker.md); ``logs_truncated`` the nodes whose log reached its bound, with
    the records of single messages it skipped (the per-message figures above are then partial);
    ``logs_torn``, present only then, the nodes whose log ends in a record cut short (a
    node killed mid-write), with its length in bytes: the records before it are read.
    ``admission`` counts what the brokers turned away (:mod:`nodes.emulated.admission`), every
    code present: ``refused`` connections by code, clients ``disconnected`` by code
    (a slow consumer's missing notifications are among ``missing``), and
    ``handshake_errors`` (connections whose first frame was no acceptable HELLO), both
    with those the brokers counted instead of logging (:mod:`nodes.emulated.admission_log`).
    """
    names = set(broker_names)
    got = client_receipts(out_dir, workload)
    brokers = _BrokerFigures()
    for b in sorted(names):
        brokers.read(b, iter_jsonl(log_path(out_dir, b)), names)
    truncated = brokers.truncated
    for client in sorted(workload.clients):
        for r in iter_jsonl(log_path(out_dir, client), Ev.RECORD):
            if r.get("kind") == "log_limit" and r.get("state") == "final":
                truncated[client] = r["skipped"]
    reached_s = {key: t for key, (t, _) in brokers.reached.items()}
    delays = {"notification": got["delays_s"], "matching": brokers.matching_s,
              **propagation_delays(got["sent_s"], reached_s)}
    hops = propagation_hops(got["sent_s"], {key: h for key, (_, h) in brokers.reached.items()})
    summary = build_summary(
        algorithm=algorithm, runtime=runtime, scale=scale, published=got["published"],
        expected=expected, deliveries=got["deliveries"],
        ims_by_type=brokers.ims, delays_s=delays, hops=hops, table_sizes=brokers.tables,
        duration_s=got["span_s"])
    summary.update(drops_by_reason=dict(sorted(brokers.drops.items())),
                   backpressure_episodes=brokers.episodes, logs_truncated=truncated)
    summary["admission"] = {"refused": brokers.refused, "disconnected": brokers.disconnected,
                            "handshake_errors": brokers.handshake_errors}
    torn = {node: n for node in sorted(names | set(workload.clients))
            if (n := torn_tail_bytes(log_path(out_dir, node)))}
    if torn:
        summary["logs_torn"] = torn
    return summary


@dataclass
class _BrokerFigures:
    """What the brokers' logs say, summed over the brokers read so far (the fields of
    :func:`summarize_logs`): IMs sent by type, table sizes, when each client operation
    reached its last broker, matching times, drops by reason, backpressure episodes,
    truncated logs, and the admission's counts."""

    ims: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tables: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # Per client operation: (time, hops) of its latest first arrival at a broker.
    reached: dict[OpKey, tuple[float, int]] = field(default_factory=dict)
    matching_s: list[float] = field(default_factory=list)
    drops: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    episodes: int = 0
    truncated: dict[str, dict[str, int]] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))
    disconnected: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(DISCONNECTIONS, 0))
    handshake_errors: int = 0

    def read(self, broker: str, records: Iterable[dict[str, Any]], names: set[str]) -> None:
        """Add broker ``broker``'s log (its ``records``, in time order); ``names``: the
        brokers, whose links are the overlay's."""
        seen: set[OpKey] = set()
        for r in records:
            if "matching_ms" in r:
                self.matching_s.append(r["matching_ms"] / 1000.0)
            if r["ev"] == Ev.SEND and r.get("link") in names and r.get("type") != "HELLO":
                self.ims[r["type"]] += 1
            elif r["ev"] == Ev.RECV and r.get("link") in names and r.get("type") in CARRIES:
                key = (CARRIES[r["type"]], r["origin"], r["msg_id"])
                if key not in seen:  # a broker's log is in time order: this is the first
                    seen.add(key)
                    self.reached[key] = latest_arrival(self.reached.get(key), r["t_wall"],
                                                       int(r.get("hops", 0)))
            elif r["ev"] == Ev.DROP:
                self.drops[r.get("reason", "?")] += 1
            elif r["ev"] == Ev.RECORD and r.get("kind") == "tables":
                for kind in ("srt", "prt"):
                    self.tables[kind].append(int(r.get(kind, 0)))
            elif (r["ev"] == Ev.LINK and r.get("state") == "refused"
                  and r["reason"] in self.refused):
                self.refused[r["reason"]] += 1
            elif (r["ev"] == Ev.LINK and r.get("state") == "down"
                  and r["reason"] in self.disconnected):
                self.disconnected[r["reason"]] += 1
            elif r["ev"] == Ev.ERROR and r.get("stage") == "handshake":
                self.handshake_errors += 1
            elif r["ev"] == Ev.RECORD and r.get("kind") == "admission_suppressed":
                # refusals and handshake errors counted, not written (rate limit)
                for reason, n in r["refused"].items():
                    if reason in self.refused:
                        self.refused[reason] += n
                self.handshake_errors += r["handshake_errors"]
            elif r["ev"] == Ev.RECORD and r.get("kind") == "backpressure":
                self.episodes += r.get("state") == "on"
            elif r["ev"] == Ev.RECORD and r.get("kind") == "log_limit" \
                    and r.get("state") == "final":
                self.truncated[broker] = r["skipped"]
