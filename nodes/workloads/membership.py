"""Churn workloads: nodes JOIN through a bootstrap, subscribe once they are members,
publish later, and some LEAVE, CRASH and re-JOIN; for cores that learn their peers from
messages (``gossip``) over links opened on demand (:mod:`nodes.sim.simulator`, ``on_demand``); and
the membership intervals JOIN, LEAVE and CRASH operations stand for, as the oracle reads
them (:func:`membership_intervals`, :func:`oracle_workload`).

The schedule (our choices; deterministic from ``seed``):

- **Nodes** ``n0000..`` (``prefix`` plus a zero-padded index), one client each, ``c0000..``
  on node ``n0000..``, which issues every operation of its node. Nodes ``0..n_seeds-1``
  are seeds: members from time 0 with no JOIN op, each the bootstrap of its own group.
  From ``join_start_s`` on, one ``join_gap_s`` apart, every other node JOINs (payload
  ``{"bootstrap": NAME}``) through seed ``i % n_seeds``, and each publisher through
  every seed in turn (a JOIN op per seed), so that publishers know every group.
  Why groups: gossip's bootstrap announces each newcomer to every member it knows, so
  one group of n nodes costs n²/2 announcements (2 million at 2,000 nodes) and
  ``n_seeds`` groups about n²/(2 ``n_seeds``). A group's seed is its only bootstrap, so
  its answers serialise the joins and member lists are complete without timing
  assumptions; a node learns its group and the publishers, a publisher everyone.
- **Subscriptions**: ``n_subscribers`` nodes drawn from all of them; each subscribes
  once, at the instant it joins (a seed at time 0), right after its (first) JOIN, to
  ``topic = tK`` with K uniform over ``n_topics``.
- **Publications**: ``n_publishers`` non-seed nodes drawn from those that neither leave
  nor crash; phase 1 starts ``settle_s`` after the last join, each publisher sending
  ``pubs_per_publisher`` notifications ``{"topic": tK, "seq": j}`` ``publish_gap_s``
  apart, publisher p shifted by ``p / n_publishers`` of a gap so that none tie.
- **Churn**: ``settle_s`` after phase 1, ``n_leave`` nodes LEAVE and then ``n_crash``
  nodes CRASH (drawn from the non-seed nodes, publishers apart), one ``churn_gap_s``
  apart. With ``rejoin`` the nodes that left JOIN again (through their group's seed)
  ``settle_s`` after the last churn op, one ``join_gap_s`` apart; phase 2 (as many
  publications as phase 1, when there was churn) starts ``settle_s`` after that.
  Phases are ``settle_s`` apart, so no notification is in flight while a node joins,
  leaves or crashes: the oracle's verdict never depends on a race.

``meta`` records ``membership`` (node -> ``[[join_t, leave_t or None], ...]``, every
node: a seed from 0, an interval ended by a LEAVE or a CRASH), ``settle_s`` (what
:func:`nodes.workloads.oracle.expected_deliveries` adds to a subscription's time; the
oracle also checks that a subscriber's node is a member at the publication), the seeds,
subscribers, publishers, leaves, crashes and phase times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from nodes.messages import Message, MsgType
from nodes.model import Predicate, Schema, filter_to_json
from nodes.workloads.ops import ClientOp, Workload

MEMBERSHIP_SCHEMA = Schema({"topic": "str", "seq": "int"})


def churn_workload(
    n_nodes: int,
    *,
    n_seeds: int = 1,
    n_subscribers: int | None = None,
    n_publishers: int = 2,
    pubs_per_publisher: int = 5,
    n_topics: int = 4,
    n_leave: int = 0,
    n_crash: int = 0,
    rejoin: bool = False,
    join_start_s: float = 0.1,
    join_gap_s: float = 0.01,
    publish_gap_s: float = 0.1,
    churn_gap_s: float = 0.5,
    settle_s: float = 1.0,
    prefix: str = "n",
    seed: int = 0,
) -> Workload:
    """A churn workload over ``n_nodes`` nodes (see the module docstring);
    ``n_subscribers`` ``None``: every node subscribes. ``ValueError`` when the counts
    do not fit (publishers and churners are distinct, seeds never churn or publish)."""
    _check_counts(n_nodes, n_seeds, n_publishers, pubs_per_publisher, n_topics, n_leave,
                  n_crash)
    if min(join_gap_s, publish_gap_s, churn_gap_s) <= 0 or settle_s < 0 or join_start_s < 0:
        raise ValueError("gaps must be > 0, settle_s and join_start_s >= 0")
    rng = random.Random(f"{seed}/membership")
    width = len(str(n_nodes - 1))
    nodes = [f"{prefix}{i:0{width}d}" for i in range(n_nodes)]
    log = _OpLog({f"c{i:0{width}d}": nodes[i] for i in range(n_nodes)})
    # Every draw happens here, in this order, so a seed always gives the same workload.
    seeds = nodes[:n_seeds]
    churn = rng.sample(nodes[n_seeds:], n_leave + n_crash)
    leaving, crashing = churn[:n_leave], churn[n_leave:]
    publishers = sorted(rng.sample([b for b in nodes[n_seeds:] if b not in set(churn)],
                                   n_publishers))
    n_subs = n_nodes if n_subscribers is None else n_subscribers
    subscribers = set(rng.sample(nodes, n_subs))
    topic = {b: f"t{rng.randrange(n_topics)}" for b in nodes}
    group = {b: seeds[i % n_seeds] for i, b in enumerate(nodes)}

    membership, t = _join_phase(log, nodes, seeds, publishers, subscribers, topic, group,
                                join_start_s, join_gap_s)
    last_join = t - join_gap_s if n_nodes > n_seeds else 0.0
    publications = _Publications(publishers, pubs_per_publisher, n_topics, publish_gap_s)
    phases: dict[str, float] = {"last_join_s": last_join}
    phases["publish1_s"] = p1 = last_join + settle_s
    end = publications.phase(log, p1, 0)
    churn_at: dict[str, float] = {}
    if churn:
        churn_at, end = _churn_phase(log, membership, churn, set(leaving), end + settle_s,
                                     churn_gap_s)
        if rejoin and leaving:
            end = _rejoin_phase(log, membership, leaving, group, end + settle_s, join_gap_s)
        phases["publish2_s"] = p2 = end + settle_s
        end = publications.phase(log, p2, pubs_per_publisher)
    phases["end_s"] = end

    ordered = tuple(sorted(log.ops, key=lambda o: o.t_s))  # stable: JOIN before SUBSCRIBE
    meta = {
        "generator": "membership", "seed": seed, "n_nodes": n_nodes, "settle_s": settle_s,
        "membership": membership, "seeds": seeds, "subscribers": sorted(subscribers),
        "publishers": publishers, "leaves": {b: churn_at[b] for b in leaving},
        "crashes": {b: churn_at[b] for b in crashing}, "rejoin": rejoin, "phases": phases,
        "published": sum(o.msg.type is MsgType.PUBLISH for o in ordered),
    }
    return Workload(MEMBERSHIP_SCHEMA, log.clients, ordered, meta)


def _check_counts(n_nodes: int, n_seeds: int, n_publishers: int, pubs_per_publisher: int,
                  n_topics: int, n_leave: int, n_crash: int) -> None:
    """ValueError unless the counts fit: publishers and churners distinct, seeds apart."""
    if n_nodes < 1 or not 1 <= n_seeds <= n_nodes:
        raise ValueError(f"need n_nodes >= 1 and 1 <= n_seeds <= n_nodes, got {n_nodes}, "
                         f"{n_seeds}")
    if min(n_publishers, n_leave, n_crash, pubs_per_publisher) < 0 or n_topics < 1:
        raise ValueError("counts must be >= 0 and n_topics >= 1")
    if n_leave + n_crash + n_publishers > n_nodes - n_seeds:
        raise ValueError(f"{n_nodes} nodes cannot hold {n_seeds} seeds, {n_leave} leaving, "
                         f"{n_crash} crashing and {n_publishers} distinct publishers")


class _OpLog:
    """The operations issued so far; each node's client numbers its messages from 1."""

    def __init__(self, clients: dict[str, str]) -> None:
        self.clients = clients
        self._client_of = {b: c for c, b in clients.items()}
        self._ids = dict.fromkeys(clients, 0)
        self.ops: list[ClientOp] = []

    def add(self, t_s: float, node: str, mtype: MsgType, payload: dict[str, Any]) -> None:
        c = self._client_of[node]
        self._ids[c] += 1
        self.ops.append(ClientOp(round(t_s, 9), c, node,
                                 Message(mtype, self._ids[c], c, 0, payload)))


def _join_phase(log: _OpLog, nodes: list[str], seeds: list[str], publishers: list[str],
                subscribers: set[str], topic: dict[str, str], group: dict[str, str],
                start_s: float, gap_s: float
                ) -> tuple[dict[str, list[list[float | None]]], float]:
    """Every non-seed node JOINs (a publisher through every seed), every subscriber
    subscribes as it joins; returns the membership so far and the time after the last
    join."""
    membership: dict[str, list[list[float | None]]] = {}
    t = start_s
    for b in nodes:
        joined = 0.0
        if b not in seeds:
            joined = t
            for boot in seeds if b in publishers else [group[b]]:
                log.add(t, b, MsgType.JOIN, {"bootstrap": boot})
                t += gap_s
        membership[b] = [[round(joined, 9), None]]
        if b in subscribers:
            sub = filter_to_json((Predicate("topic", "=", topic[b]),))
            log.add(joined, b, MsgType.SUBSCRIBE, {"filter": sub})
    return membership, t


@dataclass(frozen=True)
class _Publications:
    """One publication phase's schedule: each publisher's notifications a gap apart,
    publisher p shifted by ``p / len(publishers)`` of a gap."""

    publishers: list[str]
    per_publisher: int
    n_topics: int
    gap_s: float

    def phase(self, log: _OpLog, start_s: float, base: int) -> float:
        """Issue one phase from ``start_s``, sequence numbers from ``base``; returns the
        time of its last publication (``start_s`` without any)."""
        end = start_s
        for p, b in enumerate(self.publishers):
            for j in range(self.per_publisher):
                t_p = start_s + (j + p / max(1, len(self.publishers))) * self.gap_s
                log.add(t_p, b, MsgType.PUBLISH,
                        {"attrs": {"topic": f"t{(j + p) % self.n_topics}", "seq": base + j}})
                end = max(end, t_p)
        return end


def _churn_phase(log: _OpLog, membership: dict[str, list[list[float | None]]],
                 churn: list[str], leaving: set[str], start_s: float, gap_s: float
                 ) -> tuple[dict[str, float], float]:
    """The churners LEAVE (those in ``leaving``) or CRASH one gap apart, ending their
    membership; returns each one's time and the last one's."""
    churn_at: dict[str, float] = {}
    c = start_s
    for b in churn:
        churn_at[b] = round(c, 9)
        log.add(c, b, MsgType.LEAVE if b in leaving else MsgType.CRASH, {})
        membership[b][-1][1] = round(c, 9)
        c += gap_s
    return churn_at, c - gap_s


def _rejoin_phase(log: _OpLog, membership: dict[str, list[list[float | None]]],
                  leaving: list[str], group: dict[str, str], start_s: float,
                  gap_s: float) -> float:
    """The nodes that left JOIN again through their group's seed, one gap apart; returns
    the last one's time."""
    t = start_s
    for b in leaving:
        log.add(t, b, MsgType.JOIN, {"bootstrap": group[b]})
        membership[b].append([round(t, 9), None])
        t += gap_s
    return t - gap_s


MEMBERSHIP_OPS = frozenset({MsgType.JOIN, MsgType.LEAVE, MsgType.CRASH})


def membership_intervals(ops: tuple[ClientOp, ...] | list[ClientOp]
                         ) -> dict[str, list[list[float | None]]]:
    """The membership the JOIN, LEAVE and CRASH operations of ``ops`` stand for, in the
    oracle's convention (``meta["membership"]``, :mod:`nodes.workloads.oracle`): a node
    with a JOIN operation is a member from each JOIN until the next LEAVE or CRASH; a
    node without one, from 0 until its first LEAVE or CRASH. A crashed node stays out
    (its process is gone). Nodes with none of these operations are not listed (always
    members)."""
    by_node: dict[str, list[ClientOp]] = {}
    for op in sorted(ops, key=lambda op: op.t_s):
        if op.msg.type in MEMBERSHIP_OPS:
            by_node.setdefault(op.broker, []).append(op)
    out: dict[str, list[list[float | None]]] = {}
    for node, node_ops in sorted(by_node.items()):
        joins = any(op.msg.type is MsgType.JOIN for op in node_ops)
        start: float | None = None if joins else 0.0
        spans: list[list[float | None]] = []
        for op in node_ops:
            if op.msg.type is MsgType.JOIN and start is None:
                start = op.t_s
            elif op.msg.type is not MsgType.JOIN and start is not None:
                spans.append([start, op.t_s])
                start = None
            if op.msg.type is MsgType.CRASH:
                break
        else:
            if start is not None:
                spans.append([start, None])
        out[node] = spans
    return out


def oracle_workload(w: Workload) -> Workload:
    """``w`` as the oracle takes it: without JOIN, LEAVE and CRASH operations, and with
    ``meta["membership"]`` from them (:func:`membership_intervals`) unless the workload
    states it; a workload without such operations is returned as it is."""
    ops = tuple(op for op in w.ops if op.msg.type not in MEMBERSHIP_OPS)
    if len(ops) == len(w.ops):
        return w
    meta = dict(w.meta)
    meta.setdefault("membership", membership_intervals(w.ops))
    return Workload(w.schema, w.clients, ops, meta)
