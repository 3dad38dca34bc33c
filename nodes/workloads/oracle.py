"""The oracle: which subscriber must receive which publication, and when it must.

:func:`expected_deliveries` maps each publication key ``(origin, msg_id)`` to the set
of subscriber clients that must receive it; :mod:`nodes.metrics.summary` counts
``expected_deliveries``, ``missing`` and ``unexpected`` against it (``duplicates`` does
not use it). It has a global view and ignores routing, but not timing. The contract in
short (every boundary and convention in full: docs/design/oracle.md):

- A SUBSCRIBE of client ``c`` at ``t`` (``msg_id`` ``m``, via broker ``b``) counts for a
  PUBLISH at ``t_p`` iff its filter matches the publication's ``attrs``; it is installed,
  ``t + settle_s <= t_p`` (inclusive; ``settle_s`` is ``meta["settle_s"]``, absent 0, or
  the argument); it is not cancelled, ``t_p < u`` (exclusive) for the earliest UNSUBSCRIBE
  of ``c`` with ``sub_id == m`` at ``u >= t`` (an UNSUBSCRIBE of nothing is ignored, one
  without ``sub_id`` is a ``ValueError``); and ``b`` is a member at ``t_p``.
- **Addressed** publications (payload ``to``: hex bits into ``meta["addressed"]``, CoDD's
  interest classes) go to the candidates with a counting ``{"addressed": true}``
  subscription; addressed and filter subscriptions never match each other's publications.
- **Membership**: ``meta["membership"]`` maps a node to ``[join_t, leave_t]`` intervals
  (inclusive, exclusive; ``leave_t`` ``None``: never); a node it does not list is always a
  member; JOIN, LEAVE or CRASH ops without ``membership`` are refused. Only the
  subscriber's node is consulted, and leaving does not cancel its subscriptions.
- ADVERTISE changes nothing; UNADVERTISE and other types are refused, as are two
  SUBSCRIBEs of one client with one ``msg_id``; a publication key met twice keeps the later.

Matching uses the exact :class:`~nodes.matching.SubscriptionIndex`: phase-separated
workloads one index over all subscriptions, others one time line, by the ``"filter"`` or
the ``"sweep"`` variant as the live share says. Times are in seconds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Filter, filter_from_json
from nodes.workloads.membership import MEMBERSHIP_OPS
from nodes.workloads.ops import ClientOp, Workload

Key = tuple[str, int]
Method = Literal["auto", "filter", "sweep"]
METHODS: tuple[str, ...] = ("auto", "filter", "sweep")
SWEEP_BELOW_LIVE_SHARE = 0.25  # "auto" sweeps when fewer pairs than this share are live

_INF = math.inf
_HEX_DIGITS = frozenset("0123456789abcdef")
# Event kinds on the general path's time line; state changes sort before publications.
_ADD, _REMOVE, _JOIN, _LEAVE, _PUBLISH = range(5)


@dataclass(frozen=True, slots=True)
class _Sub:
    client: str
    broker: str
    filter: Filter
    start_s: float  # installed from here: operation time + settle time (inclusive)
    end_s: float  # cancelled from here: its UNSUBSCRIBE's time (exclusive); inf if never


def expected_deliveries(
    w: Workload, *, settle_s: float | None = None, method: Method = "auto"
) -> dict[Key, frozenset[str]]:
    """Publication key ``(origin, msg_id)`` -> the subscriber clients that must get it.

    A subscription counts for a publication sent at or after its operation time plus
    ``settle_s`` (``None``: ``w.meta.get("settle_s", 0.0)``) and before its UNSUBSCRIBE,
    when its node is a member at the publication (``w.meta["membership"]``); see
    docs/design/oracle.md for every boundary and convention. Workloads whose phases put every
    subscription before every publication (all of them before timing existed) get the
    result they always had. ``method`` picks the general path's variant (for tests and
    benchmarks; all give the same result): ``"auto"`` takes the phases computation
    when it applies, else the faster variant by the live share. ``ValueError`` for ops
    the oracle does not model, for JOIN/LEAVE/CRASH ops without ``membership``, for
    a malformed ``settle_s`` or ``membership``, and for an addressed publication or
    subscription that breaks its convention.
    """
    # A dict of the publications in op order: a key published twice keeps the later set.
    return dict(iter_expected(w, settle_s=settle_s, method=method))


def iter_expected(
    w: Workload, *, settle_s: float | None = None, method: Method = "auto"
) -> Iterator[tuple[Key, frozenset[str]]]:
    """:func:`expected_deliveries` one publication at a time, in op order: ``(key,
    subscribers)``, a key published twice given twice. A filtered publication's answer is
    held only until it is given (answers worked out along the time line wait for those
    of earlier ops): at 10,000 Meghdoot peers the whole answer is some 57 million
    (publication, subscriber) pairs, 3 GiB as frozensets. Addressed publications'
    answers are worked out on the call and held, each its address bits' clients at most.
    The input is checked (``ValueError``) on the call, before the first publication."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    settle = _settle_s(w.meta, settle_s)
    membership = _membership(w.meta)
    subs, addressed, pubs, churn = _scan(w, settle)
    if churn and membership is None:
        raise ValueError(f"the workload has {churn} JOIN/LEAVE/CRASH ops but no "
                         "meta['membership'] (see nodes.workloads.oracle)")
    filtered = [p for p in pubs if "to" not in p[1].payload]
    # Addressed publications (CoDD's) are worked out here, which checks them before the
    # first publication is given; each answer is its address bits' clients at most.
    reached = (_addressed(addressed, [p for p in pubs if "to" in p[1].payload],
                          membership or {}, w.meta.get("addressed"))
               if len(filtered) < len(pubs) else {})
    return _in_op_order(pubs, _filtered(subs, filtered, membership, method), reached)


def _in_op_order(pubs: Sequence[tuple[float, Message]],
                 answers: Iterator[tuple[int, frozenset[str]]],
                 reached: Mapping[Key, frozenset[str]]) -> Iterator[tuple[Key, frozenset[str]]]:
    """Each publication's key and answer in op order: the addressed ones' from
    ``reached``, the others' from ``answers`` (index among the filtered publications,
    answer), which come in time order: in op order for a Workload's sorted ops, not for
    ops made by hand out of order (or with a NaN time, which no comparison orders)."""
    early: dict[int, frozenset[str]] = {}  # answers that came before an earlier op's
    j = 0  # the next filtered publication's index
    for _, m in pubs:
        if "to" in m.payload:
            yield m.key, reached[m.key]
            continue
        while j not in early:
            i, got = next(answers)
            early[i] = got
        yield m.key, early.pop(j)
        j += 1


def _filtered(subs: Sequence[_Sub], pubs: Sequence[tuple[float, Message]],
              membership: Mapping[str, Sequence[tuple[float, float]]] | None,
              method: Method) -> Iterator[tuple[int, frozenset[str]]]:
    """Filter subscriptions against non-addressed publications (docs/design/oracle.md):
    ``(index in pubs, subscribers)``, in index order if ``pubs`` is in time order."""
    if not pubs:
        return iter(())
    times = sorted(t for t, _ in pubs)
    if method == "auto" and membership is None and all(
        s.start_s <= times[0] and s.end_s > times[-1] for s in subs
    ):
        return _phases(subs, pubs)
    if method == "auto":
        live = sum(
            bisect.bisect_left(times, s.end_s) - bisect.bisect_left(times, s.start_s)
            for s in subs
            if s.start_s < s.end_s
        )
        method = "sweep" if live < SWEEP_BELOW_LIVE_SHARE * len(subs) * len(pubs) else "filter"
    return _general(subs, pubs, membership or {}, incremental=method == "sweep")


def _phases(subs: Sequence[_Sub], pubs: Sequence[tuple[float, Message]]
            ) -> Iterator[tuple[int, frozenset[str]]]:
    """Every subscription counts for every publication: one index, one match each."""
    index = SubscriptionIndex()
    for k, s in enumerate(subs):
        index.add(k, s.filter)
    for i, (_, m) in enumerate(pubs):
        yield i, frozenset(subs[k].client for k in index.match(m.payload["attrs"]))


def _general(
    subs: Sequence[_Sub],
    pubs: Sequence[tuple[float, Message]],
    membership: Mapping[str, Sequence[tuple[float, float]]],
    *,
    incremental: bool,
) -> Iterator[tuple[int, frozenset[str]]]:
    """The time line: state changes, then the publications at each time (module doc)."""
    index = SubscriptionIndex()
    events: list[tuple[float, int, int, int]] = []  # (time, change 0 | publication 1, kind, ref)
    for k, s in enumerate(subs):
        if s.start_s >= s.end_s:
            continue  # cancelled before it was installed: never live
        if not incremental:
            index.add(k, s.filter)
            continue
        events.append((s.start_s, 0, _ADD, k))
        if s.end_s != _INF:
            events.append((s.end_s, 0, _REMOVE, k))
    nodes = sorted(membership)
    for n, node in enumerate(nodes):
        for join_s, leave_s in membership[node]:
            if join_s < leave_s:
                events.append((join_s, 0, _JOIN, n))
                if leave_s != _INF:
                    events.append((leave_s, 0, _LEAVE, n))
    events.extend((t, 1, _PUBLISH, i) for i, (t, _) in enumerate(pubs))
    events.sort()

    starts = [s.start_s for s in subs]
    ends = [s.end_s for s in subs]
    clients = [s.client for s in subs]
    brokers = [s.broker for s in subs]
    intervals_open = [0] * len(nodes)  # per listed node: intervals it is in now
    away = set(nodes)  # listed nodes that are not members now
    for t, _, kind, ref in events:
        if kind == _PUBLISH:
            matched = index.match(pubs[ref][1].payload["attrs"])
            # The interval test is needed by "filter" only; "sweep" holds live ones only.
            if away:
                yield ref, frozenset([clients[k] for k in matched
                                      if starts[k] <= t < ends[k] and brokers[k] not in away])
            else:
                yield ref, frozenset([clients[k] for k in matched if starts[k] <= t < ends[k]])
        elif kind == _ADD:
            index.add(ref, subs[ref].filter)
        elif kind == _REMOVE:
            index.remove(ref)
        elif kind == _JOIN:
            intervals_open[ref] += 1
            away.discard(nodes[ref])
        else:
            intervals_open[ref] -= 1
            if not intervals_open[ref]:
                away.add(nodes[ref])


def _addressed(
    subs: Sequence[_Sub],
    pubs: Sequence[tuple[float, Message]],
    membership: Mapping[str, Sequence[tuple[float, float]]],
    addressed: Any,
) -> dict[Key, frozenset[str]]:
    """Addressed publications: each set bit's client, if one of its addressed
    subscriptions is live and its broker a member (docs/design/oracle.md)."""
    if not isinstance(addressed, Sequence) or isinstance(addressed, str):
        raise ValueError("addressed publications need meta['addressed'], the client of "
                         f"each bit of 'to' (a list), got {addressed!r}")
    live: dict[str, list[_Sub]] = {}
    for s in subs:
        if s.start_s < s.end_s:
            live.setdefault(s.client, []).append(s)

    def member(node: str, t: float) -> bool:
        spans = membership.get(node)
        return spans is None or any(j <= t < leave for j, leave in spans)

    out: dict[Key, frozenset[str]] = {}
    for t, m in pubs:
        to = m.payload["to"]
        if not isinstance(to, str) or not to or set(to) - _HEX_DIGITS:
            raise ValueError(f"publication {m.key}: 'to' must be a lowercase hex string, "
                             f"got {to!r}")
        bits = int(to, 16)
        if bits.bit_length() > len(addressed):
            raise ValueError(f"publication {m.key}: 'to' sets bit {bits.bit_length() - 1} "
                             f"but meta['addressed'] lists {len(addressed)} clients")
        got = set()
        while bits:
            low = bits & -bits
            bits ^= low
            client = addressed[low.bit_length() - 1]
            if client is not None and any(s.start_s <= t < s.end_s and member(s.broker, t)
                                          for s in live.get(client, ())):
                got.add(client)
        out[m.key] = frozenset(got)
    return out


def _settle_s(meta: Mapping[str, Any], settle_s: float | None) -> float:
    value = meta.get("settle_s", 0.0) if settle_s is None else settle_s
    if not _is_time(value) or value < 0:
        raise ValueError(f"settle_s must be a finite number >= 0, got {value!r}")
    return float(value)


def _is_time(x: object) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


def _membership(meta: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]] | None:
    """``meta["membership"]`` checked, ``null`` leave times as ``inf``; ``None`` if absent."""
    raw = meta.get("membership")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"meta['membership'] must map node -> intervals, got {raw!r}")
    out: dict[str, list[tuple[float, float]]] = {}
    for node, intervals in raw.items():
        if not isinstance(intervals, Sequence) or isinstance(intervals, str):
            raise ValueError(f"membership of {node!r}: want a list of intervals, got "
                             f"{intervals!r}")
        spans = []
        for iv in intervals:
            if not isinstance(iv, Sequence) or isinstance(iv, str) or len(iv) != 2:
                raise ValueError(f"membership of {node!r}: want [join_t, leave_t or null], "
                                 f"got {iv!r}")
            join_s, leave_s = iv
            if not _is_time(join_s) or not (leave_s is None or _is_time(leave_s)):
                raise ValueError(f"membership of {node!r}: times must be finite numbers, "
                                 f"got {iv!r}")
            leave = _INF if leave_s is None else float(leave_s)
            if leave < join_s:
                raise ValueError(f"membership of {node!r}: leaves before it joins, {iv!r}")
            spans.append((float(join_s), leave))
        out[str(node)] = spans
    return out


def _scan(w: Workload, settle_s: float
          ) -> tuple[list[_Sub], list[_Sub], list[tuple[float, Message]], int]:
    """The filter and the addressed subscriptions with their live intervals (an
    addressed one has an empty filter), the publications in op order, and the number of
    membership ops."""
    subscribed: dict[Key, tuple[float, str, Filter | None]] = {}
    unsubscribed: dict[Key, list[float]] = {}
    pubs: list[tuple[float, Message]] = []
    churn = 0
    for op in w.ops:
        msg = op.msg
        t = msg.type
        if t is MsgType.PUBLISH:
            pubs.append((op.t_s, msg))
        elif t is MsgType.SUBSCRIBE:
            key = (op.client, msg.msg_id)
            if key in subscribed:
                raise ValueError(f"two SUBSCRIBE ops of client {op.client!r} share msg_id "
                                 f"{msg.msg_id}")
            subscribed[key] = (op.t_s, op.broker, _sub_filter(op))
        elif t is MsgType.UNSUBSCRIBE:
            if "sub_id" not in msg.payload:
                raise ValueError(f"UNSUBSCRIBE {msg.msg_id} of client {op.client!r} has no "
                                 "sub_id in its payload")
            key = (op.client, int(msg.payload["sub_id"]))
            unsubscribed.setdefault(key, []).append(op.t_s)
        elif t in MEMBERSHIP_OPS:
            churn += 1
        elif t is not MsgType.ADVERTISE:
            raise ValueError(f"expected_deliveries cannot order {t.name} ops (not modelled)")
    subs, addressed = [], []
    for key, (t_s, broker, f) in subscribed.items():
        # The earliest UNSUBSCRIBE at or after the SUBSCRIBE; others are ignored.
        end_s = min((u for u in unsubscribed.get(key, ()) if u >= t_s), default=_INF)
        if f is None:
            addressed.append(_Sub(key[0], broker, (), t_s + settle_s, end_s))
        else:
            subs.append(_Sub(key[0], broker, f, t_s + settle_s, end_s))
    return subs, addressed, pubs, churn


def _sub_filter(op: ClientOp) -> Filter | None:
    """A SUBSCRIBE's filter, or None for an addressed one (payload ``{"addressed": true}``)."""
    payload = op.msg.payload
    if "addressed" not in payload:
        return filter_from_json(payload["filter"])
    if payload["addressed"] is not True or "filter" in payload:
        raise ValueError(f"SUBSCRIBE {op.msg.msg_id} of client {op.client!r}: an addressed "
                         f"subscription is {{'addressed': true}} alone, got {payload!r}")
    return None
