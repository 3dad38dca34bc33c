"""CoDD's workload (paper §5.1, §5.4): a producer streams documents down a tree that
consumers join, and some leave, while it runs; deterministic from a seed.

In short (every reading, ours where the paper is silent: docs/design/codd.md, "The
workload"; ``../shared/READINGS-WAVE2.md`` §2.4):

- The root is ``min(nodes)`` and never consumes. Document ``i`` is a PUBLISH from client
  ``producer`` at ``t = i * step_s`` (seconds), ``msg_id`` ``i + 1``, payload ``seq``,
  ``t_s`` and ``to`` or ``attrs``.
- Consumer ``i`` arrives half a step before document ``floor(i d / m)``: a JOIN from
  ``j-<x>`` (payload ``{"seeds": [root], "from_s": F}``), a quarter step later a SUBSCRIBE
  from ``q-<x>``; ``meta["settle_s"]`` is a quarter step.
- Interest: ``"classes"`` (``k`` buckets, shuffled every ``cf`` documents; ``to`` is a hex
  bitmap over ``meta["nodes"]`` and consumers subscribe ``{"addressed": True}``) or
  ``"stock"`` (Meghdoot's templates and events).
- ``leave_fraction`` of the consumers leave (UNSUBSCRIBE, then LEAVE :data:`LEAVE_GRACE_S`
  later) and ``crash_fraction`` crash (CRASH), always between documents.

``meta``: the parameters, ``root``, ``nodes`` (the bit order of ``to``), ``addressed``,
``membership`` (the oracle's convention), ``settle_s``, ``arrivals_s``, ``leaves_s``, the
measured ``selectivity`` beside ``selectivity_asked``, and per interest the buckets and
shuffles or the ``templates``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, Schema, filter_to_json
from nodes.workloads.meghdoot import (
    MEGHDOOT_SCHEMA,
    N_DAYS,
    N_SYMBOLS,
    uniform_event,
    uniform_subscription,
)
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import stock_universe, trading_days

INTERESTS = ("classes", "stock")
PRODUCER = "producer"
MIN_STAY_STEPS = 5  # a leaving consumer stays at least this many steps
LEAVE_GRACE_S = 5.0  # from a consumer's UNSUBSCRIBE to its broker's LEAVE (ample for the
# leave protocol: the root puts joins and leaves before reorganizations)
_ARRIVE, _LEAVE, _DOCUMENT = range(3)  # the order of operations at one time


def codd_workload(
    nodes: Sequence[str],
    n_documents: int,
    *,
    seed: int,
    interest: str = "classes",
    selectivity: float = 0.2,
    k: int = 20,
    c: int = 4,
    cf: int = 200,
    buckets_per_node: int = 1,
    step_s: float = 0.1,
    leave_fraction: float = 0.0,
    crash_fraction: float = 0.0,
) -> Workload:
    """The workload of docs/design/codd.md; ValueError (one line, naming the argument and
    what is allowed) for bad arguments."""
    _check_args(nodes, n_documents, interest, selectivity, k, c, cf, buckets_per_node,
                step_s, leave_fraction, crash_fraction)
    rng = random.Random(f"{seed}/codd")
    names = sorted(nodes)
    root, consumers = names[0], names[1:]
    d, m = n_documents, len(consumers)
    settle_s = step_s / 4
    first_doc = {x: i * d // m for i, x in enumerate(consumers)}
    arrivals = {x: max(0.0, round(_document_s(a, step_s) - step_s / 2, 9))
                for x, a in first_doc.items()}
    subscribes = {x: _subscribe_s(a, step_s, settle_s) for x, a in first_doc.items()}

    # The draws, in this order: interests, leaves, crashes, then each document's.
    members: list[set[str]] = []
    symbols: list[str] = []
    queries: dict[str, tuple[str, Filter]] | None = None
    if interest == "classes":
        members = _class_members(rng, consumers, k, buckets_per_node)
    else:
        symbols, queries = _stock_queries(rng, seed, consumers)
    leaves = _leaves(rng, first_doc, d, step_s, leave_fraction)
    crashes = _leaves(rng, {x: a for x, a in first_doc.items() if x not in leaves}, d, step_s,
                      crash_fraction)

    timed, clients = _consumer_ops(root, consumers, queries, arrivals, subscribes, settle_s,
                                   leaves, crashes)
    if queries is None:
        payloads, reached, by_interest = _class_documents(
            rng, members, names, d, step_s, c, cf, max(1, round(selectivity * k)))
    else:
        payloads, reached = _stock_documents(rng, queries, symbols, d, step_s)
        by_interest = {"templates": _templates(queries)}
    for i, payload in enumerate(payloads):
        t = payload["t_s"]
        timed.append((t, _DOCUMENT, ClientOp(t, PRODUCER, root, Message(
            MsgType.PUBLISH, i + 1, PRODUCER, payload=payload))))

    timed.sort(key=lambda e: (e[0], e[1]))  # stable: a JOIN stays before its SUBSCRIBE
    membership = _membership(root, arrivals, leaves, crashes)
    meta: dict[str, Any] = {
        "system": "codd", "seed": seed, "interest": interest,
        "selectivity_asked": selectivity, "selectivity": reached / (d * m),
        "k": k, "c": c, "cf": cf, "buckets_per_node": buckets_per_node,
        "n_documents": d, "step_s": step_s, "leave_fraction": leave_fraction,
        "crash_fraction": crash_fraction, "crashes_s": dict(sorted(crashes.items())),
        "root": root, "nodes": names,
        "addressed": [None if x == root else f"q-{x}" for x in names],
        "membership": membership, "settle_s": settle_s,
        "arrivals_s": arrivals, "leaves_s": dict(sorted(leaves.items())),
        **by_interest,
    }
    schema = Schema({}) if interest == "classes" else MEGHDOOT_SCHEMA
    return Workload(schema, clients, tuple(op for _, _, op in timed), meta)


def _class_members(rng: random.Random, consumers: Sequence[str], k: int,
                   buckets_per_node: int) -> list[set[str]]:
    """The ``k`` interest classes' consumers: each consumer in ``buckets_per_node`` of
    them, drawn at random."""
    members: list[set[str]] = [set() for _ in range(k)]
    for x in consumers:
        for b in rng.sample(range(k), buckets_per_node):
            members[b].add(x)
    return members


def _stock_queries(rng: random.Random, seed: int, consumers: Sequence[str]
                   ) -> tuple[list[str], dict[str, tuple[str, Filter]]]:
    """The stock interest's symbols and each consumer's query (Meghdoot's templates)."""
    stocks = sorted(rng.sample(stock_universe(seed), N_SYMBOLS), key=lambda s: s.symbol)
    symbols = [s.symbol for s in stocks]
    return symbols, {x: uniform_subscription(rng, symbols) for x in consumers}


def _class_documents(rng: random.Random, members: list[set[str]], names: Sequence[str],
                     n_documents: int, step_s: float, c: int, cf: int, j_buckets: int
                     ) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    """The documents addressed to interest classes, shuffling ``members`` every ``cf``
    documents: each one's payload, the consumers they reach in all, and the classes'
    ``meta`` (the buckets at the start, each document's, the shuffles)."""
    initial = [sorted(s) for s in members]
    bit = {x: 1 << n for n, x in enumerate(names)}
    masks = [sum(bit[x] for x in s) for s in members]
    payloads: list[dict[str, Any]] = []
    document_buckets: list[list[int]] = []
    shuffle_documents: list[int] = []
    shuffle_buckets: list[list[list[Any]]] = []
    reached = 0
    for i in range(n_documents):
        if i and c and i % cf == 0:
            rebuilt = _shuffle(rng, members, c)
            for b in rebuilt:
                masks[b] = sum(bit[x] for x in members[b])
            shuffle_documents.append(i)
            shuffle_buckets.append([[b, sorted(members[b])] for b in rebuilt])
        picked = rng.sample(range(len(members)), j_buckets)
        document_buckets.append(picked)
        to = 0
        for b in picked:
            to |= masks[b]
        reached += to.bit_count()
        payloads.append({"seq": i, "t_s": _document_s(i, step_s), "to": format(to, "x")})
    return payloads, reached, {
        "buckets_per_document": j_buckets, "buckets": initial,
        "document_buckets": document_buckets, "shuffle_documents": shuffle_documents,
        "shuffle_buckets": shuffle_buckets}


def _stock_documents(rng: random.Random, queries: Mapping[str, tuple[str, Filter]],
                     symbols: list[str], n_documents: int, step_s: float
                     ) -> tuple[list[dict[str, Any]], int]:
    """The stock interest's documents (Meghdoot's uniform events): each one's payload,
    and the queries they match in all."""
    days = trading_days(N_DAYS)
    index = SubscriptionIndex()
    for n, (_, f) in enumerate(queries.values()):
        index.add(n, f)
    payloads: list[dict[str, Any]] = []
    reached = 0
    for i in range(n_documents):
        event = uniform_event(rng, symbols, days)
        reached += len(index.match(event))
        payloads.append({"seq": i, "t_s": _document_s(i, step_s), "attrs": event})
    return payloads, reached


def _templates(queries: Mapping[str, tuple[str, Filter]]) -> dict[str, int]:
    """How many queries each template made, by template name."""
    templates: dict[str, int] = {}
    for template, _ in queries.values():
        templates[template] = templates.get(template, 0) + 1
    return dict(sorted(templates.items()))


def _consumer_ops(root: str, consumers: Sequence[str],
                  queries: Mapping[str, tuple[str, Filter]] | None,
                  arrivals: Mapping[str, float], subscribes: Mapping[str, float],
                  settle_s: float, leaves: Mapping[str, float], crashes: Mapping[str, float]
                  ) -> tuple[list[tuple[float, int, ClientOp]], dict[str, str]]:
    """Each consumer's ops, (time s, order at that time, op), and the clients by host:
    its JOIN client ``j-x`` joins at its arrival, its query client ``q-x`` subscribes
    (addressed, or its query of ``queries``), then it crashes, or unsubscribes and leaves
    ``LEAVE_GRACE_S`` later; the producer sits at the root."""
    timed: list[tuple[float, int, ClientOp]] = []
    clients = {PRODUCER: root}
    for x in consumers:
        q, j = f"q-{x}", f"j-{x}"
        clients[q] = clients[j] = x
        payload = ({"addressed": True} if queries is None
                   else {"filter": filter_to_json(queries[x][1])})
        timed.append((arrivals[x], _ARRIVE, ClientOp(arrivals[x], j, x, Message(
            MsgType.JOIN, 1, j, payload={"seeds": [root],
                                         "from_s": subscribes[x] + settle_s}))))
        timed.append((subscribes[x], _ARRIVE, ClientOp(subscribes[x], q, x, Message(
            MsgType.SUBSCRIBE, 1, q, payload=payload))))
        if x in crashes:
            timed.append((crashes[x], _LEAVE, ClientOp(crashes[x], j, x, Message(
                MsgType.CRASH, 2, j, payload={}))))
        if x in leaves:
            t = leaves[x]
            timed.append((t, _LEAVE, ClientOp(t, q, x, Message(
                MsgType.UNSUBSCRIBE, 2, q, payload={"sub_id": 1, "at_s": t}))))
            timed.append((t + LEAVE_GRACE_S, _LEAVE, ClientOp(t + LEAVE_GRACE_S, j, x, Message(
                MsgType.LEAVE, 2, j, payload={}))))
    return timed, clients


def _membership(root: str, arrivals: Mapping[str, float], leaves: Mapping[str, float],
                crashes: Mapping[str, float]) -> dict[str, list[list[float | None]]]:
    """Each node's membership interval [from s, to s or None]: the root throughout, a
    consumer from its arrival to its crash or the end of its leave's grace."""
    membership: dict[str, list[list[float | None]]] = {root: [[0.0, None]]}
    for x, arrival_s in arrivals.items():
        left = leaves.get(x)
        end = crashes.get(x, None if left is None else left + LEAVE_GRACE_S)
        membership[x] = [[arrival_s, end]]
    return membership


def _document_s(i: int, step_s: float) -> float:
    """Document ``i``'s time, rounded to the nanosecond so that the log reads 0.3, not
    0.30000000000000004."""
    return round(i * step_s, 9)


def _subscribe_s(first_doc: int, step_s: float, settle_s: float) -> float:
    """A quarter step before document ``first_doc`` (a quarter step after 0 for the
    first), nudged down until it plus the settle time is no later than the document in
    floating point: the oracle's inclusive boundary must count that document."""
    t_doc = _document_s(first_doc, step_s)
    if not first_doc:
        return round(step_s / 4, 9)
    t = round(t_doc - step_s / 4, 9)
    while t + settle_s > t_doc:
        t = math.nextafter(t, -math.inf)
    return t


def _leaves(rng: random.Random, first_doc: dict[str, int], d: int, step_s: float,
            leave_fraction: float) -> dict[str, float]:
    """Leaving consumer -> its LEAVE time (docs/design/codd.md). In half steps: an arrival
    at ``max(0, 2a - 1)``, a leave before document ``L`` at ``2L - 1``, at least
    ``2 MIN_STAY_STEPS`` half steps apart."""
    earliest = {x: -(-(max(0, 2 * a - 1) + 2 * MIN_STAY_STEPS + 1) // 2)
                for x, a in first_doc.items()}
    can_leave = [x for x in first_doc if earliest[x] <= d - 1]
    leaving = rng.sample(can_leave, round(leave_fraction * len(can_leave)))
    return {x: round(rng.randint(earliest[x], d - 1) * step_s - step_s / 2, 9)
            for x in sorted(leaving)}


def _shuffle(rng: random.Random, members: list[set[str]], c: int) -> list[int]:
    """One shuffle of docs/design/codd.md ("The workload"), in place; the rebuilt buckets,
    sorted."""
    picked = sorted(rng.sample(range(len(members)), c))
    halves: list[list[str]] = []
    for b in picked:
        group = sorted(members[b])
        rng.shuffle(group)
        halves += [group[: len(group) // 2], group[len(group) // 2:]]
    rng.shuffle(halves)  # consecutive halves pair up: a uniform random pairing
    merged = [set(halves[2 * n]) | set(halves[2 * n + 1]) for n in range(c)]
    for n in range(c):
        for x in sorted(set(halves[2 * n]) & set(halves[2 * n + 1])):
            # x met itself: it keeps its count in a new bucket without it. One exists, as
            # x was in at most c of the picked buckets.
            merged[rng.choice([q for q in range(c) if x not in merged[q]])].add(x)
    for b, s in zip(picked, merged, strict=True):
        members[b] = s
    return picked


def _check_args(nodes: Sequence[str], n_documents: int, interest: str, selectivity: float,
                k: int, c: int, cf: int, buckets_per_node: int, step_s: float,
                leave_fraction: float, crash_fraction: float) -> None:
    def integer(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def number(v: object) -> bool:
        return (isinstance(v, int | float) and not isinstance(v, bool)
                and math.isfinite(v))

    checks = (
        ("nodes", f"{len(nodes)} names, {len(set(nodes))} distinct",
         len(set(nodes)) == len(nodes) >= 2,
         "at least 2 distinct names (the root and a consumer)"),
        ("n_documents", n_documents, integer(n_documents) and n_documents >= 1,
         "an integer >= 1"),
        ("interest", interest, interest in INTERESTS, f"one of {', '.join(INTERESTS)}"),
        ("selectivity", selectivity, number(selectivity) and 0 < selectivity <= 1,
         "a number in (0, 1]"),
        ("k", k, integer(k) and k >= 1, "an integer >= 1"),
        ("c", c, integer(c) and integer(k) and 0 <= c <= k, f"an integer 0..k ({k})"),
        ("cf", cf, integer(cf) and cf >= 1, "an integer >= 1"),
        ("buckets_per_node", buckets_per_node,
         integer(buckets_per_node) and integer(k) and 1 <= buckets_per_node <= k,
         f"an integer 1..k ({k})"),
        ("step_s", step_s, number(step_s) and step_s > 0, "a number > 0"),
        ("leave_fraction", leave_fraction, number(leave_fraction) and 0 <= leave_fraction <= 1,
         "a number in [0, 1]"),
        ("crash_fraction", crash_fraction, number(crash_fraction) and 0 <= crash_fraction <= 1,
         "a number in [0, 1]"),
    )
    for name, value, ok, allowed in checks:
        if not ok:
            raise ValueError(f"{name}: bad value {value!r}; allowed: {allowed}")
