"""The ``summary.json`` of one algorithm's run, from plain records (either runtime).

Inputs are what both runtimes can produce from their logs: which subscriber got which
notification (duplicates kept), inter-broker message counts by type, delay samples by
kind, and per-broker routing-table sizes. Definitions:

- ``expected_deliveries``: (notification, subscriber) pairs the oracle expects;
- ``delivered``: distinct (notification, subscriber) pairs that were delivered, expected
  or not; ``unexpected`` counts the delivered pairs the oracle does not expect;
- ``duplicates``: deliveries beyond the first of the same pair;
- ``missing``: expected pairs never delivered;
- ``delay_ms``: per kind, ``p50``/``p95`` by linear interpolation between order
  statistics (numpy's and pandas' default, so figures made with pandas agree), ``max``
  and ``mean``; ``null`` for a kind without samples. The kinds:

  - ``notification``: one sample per delivery, from the publisher's send to the
    subscriber's receipt (end to end);
  - ``advertisement`` and ``subscription``: one sample per client ADVERTISE or SUBSCRIBE
    that crossed a broker link, from the client's send until the last broker it reaches
    has it: per broker, the *first* inter-broker arrival of a message carrying it, and the
    latest of those over brokers (the paper's "maximum time elapsed ... to reach every
    broker" / "... to brokers hosting publishers that issued matching advertisements").
    A message carries the client operation with the same origin and msg_id if its type
    maps to that operation's in :data:`CARRIES`: copies of the ADVERTISE and SUBSCRIBE,
    and OctopiA's CIB_SET, which takes a subscription to a publisher's host broker.
    Later copies (the duplicates of TID flooding) reach no new broker and do not count;
    OctopiA's ADV_REPLY is a reply, not the advertisement, and does not count either.
    An operation that never crosses a broker link has no sample. Both runtimes apply
    this definition: the simulator to simulated arrival times, the emulated runtime to
    the brokers' ``recv`` and the clients' ``send`` records (``t_wall``; brokers and
    clients share the machine's clock);
  - ``matching``: one sample per notification a broker's routing core handled (a
    message of a type in :data:`MATCHED_TYPES`, from a client or a neighbour): the time
    ``core.handle`` took on ``time.perf_counter`` (matching against the PRT and choosing
    the next hops; not carrying the actions out), the paper's matching delay. It is
    measured, never modelled: the emulated broker logs it as ``matching_ms`` on the
    message's ``recv`` record; the simulator times the same cores on its own machine and
    keeps the samples out of its logs (which must not depend on the machine);
- ``hops``: per kind (``advertisement``, ``subscription``), ``mean`` and ``max`` over the
  operations with a delay sample of the overlay hops the message that set the delay had
  taken (its ``hops`` field when the last broker it reaches first has it; of arrivals at
  the same instant, the most hops): how far the operation went, which its delay is made
  of when a hop's link delay dominates; ``null`` for a kind without samples;
- ``srt_size``/``prt_size``: mean and max over brokers (0 for cores without tables);
- ``ims_by_type``/``ims_total``: inter-broker messages, counted when they leave a
  broker's output queue onto the wire (``send`` records; :mod:`nodes.hosting`), in both
  runtimes;
- ``duration_s``: from the first publication's send to the last notification's receipt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DELAY_KINDS = ("advertisement", "subscription", "notification", "matching")
# Message types whose handling by a core is a matching (see the module doc): a
# publication, and IDR's CIV-N, which is one with the clusters still to be served.
MATCHED_TYPES = ("PUBLISH", "CIV_NOTIFY")
TABLE_KINDS = ("srt", "prt")
# delay_stats_ms sorts at least this many samples as one numpy array (see there).
_ARRAY_SAMPLES = 100_000
# Inter-broker message type -> the client operation type it carries (see the module doc).
CARRIES: dict[str, str] = {
    "ADVERTISE": "ADVERTISE",
    "SUBSCRIBE": "SUBSCRIBE",
    "CIB_SET": "SUBSCRIBE",
}
PROPAGATED_KINDS: dict[str, str] = {"ADVERTISE": "advertisement", "SUBSCRIBE": "subscription"}

MsgKey = tuple[str, int]
# The oracle's answer as the summaries take it: a mapping, or (key, subscribers) pairs
# given one publication at a time (nodes.workloads.oracle.iter_expected).
Expected = Mapping[MsgKey, frozenset[str]] | Iterable[tuple[MsgKey, frozenset[str]]]
OpKey = tuple[str, str, int]  # (client operation type name, origin, msg_id)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of non-empty ascending values, linear interpolation."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def value_stats(values: Sequence[float]) -> dict[str, float] | None:
    """p50, p95, max and mean of ``values`` (interpolated percentiles, module doc); None
    if empty."""
    if not values:
        return None
    return _sorted_stats(sorted(values))


def _sorted_stats(v: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(v, 0.5), "p95": percentile(v, 0.95), "max": v[-1],
            "mean": math.fsum(v) / len(v)}


def delay_stats_ms(delays_s: Sequence[float]) -> dict[str, float] | None:
    """p50, p95, max and mean in milliseconds of delays in seconds; None if empty.
    Many samples are scaled and sorted as one array of doubles, to the same figures: a
    10,000-peer simulation times some ten million matchings, and as Python floats their
    scaled list and its sorted copy took 40 bytes a sample at the end of the run. A few
    are sorted as Python floats, as quick at that size: `pubsublab watch` asks every half
    second and need not import numpy for it (0.08 s here, 0.4 s from a cold cache)."""
    if not len(delays_s):
        return None
    if len(delays_s) < _ARRAY_SAMPLES:
        stats = _sorted_stats(sorted(d * 1000.0 for d in delays_s))
    else:
        import numpy as np  # here: brokers import this module, and numpy is slow to import

        # Scaled into one new array, sorted in place: one copy of the samples, not two.
        scaled_ms = np.asarray(delays_s, dtype=float) * 1000.0
        scaled_ms.sort()
        stats = _sorted_stats(scaled_ms)
    return {k: round(float(x), 6) for k, x in stats.items()}


def propagation_delays(
    sent_s: Mapping[OpKey, float], reached_s: Mapping[OpKey, float]
) -> dict[str, list[float]]:
    """Advertisement and subscription delay samples in seconds, in key order: for every
    client operation in ``reached_s`` (the time the last broker it reaches has it) that
    is also in ``sent_s`` (the client's send time), the difference."""
    delays: dict[str, list[float]] = {kind: [] for kind in PROPAGATED_KINDS.values()}
    for key in sorted(reached_s):
        if key in sent_s:
            delays[PROPAGATED_KINDS[key[0]]].append(reached_s[key] - sent_s[key])
    return delays


def propagation_hops(
    sent_s: Mapping[OpKey, float], reached_hops: Mapping[OpKey, int]
) -> dict[str, list[int]]:
    """Per kind, the hops behind each sample of :func:`propagation_delays` (the same
    operations, in key order): ``reached_hops`` holds, per client operation, the hops of
    the arrival at the last broker it reached."""
    hops: dict[str, list[int]] = {kind: [] for kind in PROPAGATED_KINDS.values()}
    for key in sorted(reached_hops):
        if key in sent_s:
            hops[PROPAGATED_KINDS[key[0]]].append(reached_hops[key])
    return hops


def latest_arrival(reached: tuple[float, int] | None, t_s: float, hops: int
                   ) -> tuple[float, int]:
    """(time, hops) of an operation's latest first arrival at a broker so far, given the
    latest before (``reached``, None at the first) and one more at ``t_s`` after ``hops``
    hops: the later one; at the same instant, the one of more hops (so that both runtimes'
    readers, whichever order they see a tie in, agree)."""
    if reached is None or t_s > reached[0]:
        return t_s, hops
    if t_s == reached[0] and hops > reached[1]:
        return t_s, hops
    return reached


def _hop_stats(values: Sequence[int]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": round(sum(values) / len(values), 6), "max": max(values)}


def _mean_max(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "max": 0}
    return {"mean": round(sum(values) / len(values), 6), "max": max(values)}


def build_summary(
    *,
    algorithm: str,
    runtime: str,
    scale: float,
    published: int,
    expected: Expected,
    deliveries: Mapping[MsgKey, Sequence[str]],
    ims_by_type: Mapping[str, int],
    delays_s: Mapping[str, Sequence[float]],
    hops: Mapping[str, Sequence[int]],
    table_sizes: Mapping[str, Sequence[int]],
    duration_s: float,
) -> dict[str, Any]:
    """The summary.json object (DESIGN.md, "CLI and output conventions").

    ``expected`` is the oracle's answer as a mapping or as ``(key, subscribers)`` pairs
    (:data:`Expected`; a key given twice counts as the later), taken one publication at
    a time and not held. Deliveries are compared with it publication by publication:
    the two sets of every (publication, subscriber) pair, expected and delivered, took
    172 bytes a delivery (735 MiB for a Meghdoot run's 4.5 million, more than a 300-peer
    simulation holds at its end)."""
    pairs = expected.items() if isinstance(expected, Mapping) else expected
    # Per publication the oracle names: its expected pairs, its delivered pairs, and how
    # many of those it did not expect.
    counted: dict[MsgKey, tuple[int, int, int]] = {}
    for key, subs in pairs:
        got = set(deliveries.get(key, ()))
        counted[key] = (len(subs), len(got), len(got.difference(subs)))
    total = delivered = unexpected = 0
    for key, subs_got in deliveries.items():
        total += len(subs_got)
        if key in counted:
            _, n_got, n_unexpected = counted[key]
        else:  # a publication the oracle does not know: every delivery is unexpected
            n_got = n_unexpected = len(set(subs_got))
        delivered += n_got
        unexpected += n_unexpected
    expected_total = sum(n for n, _, _ in counted.values())
    ims = {name: int(n) for name, n in sorted(ims_by_type.items())}
    return {
        "algorithm": algorithm,
        "runtime": runtime,
        "scale": scale,
        "published": published,
        "expected_deliveries": expected_total,
        "delivered": delivered,
        "unexpected": unexpected,
        "duplicates": total - delivered,
        "missing": expected_total - (delivered - unexpected),
        "ims_by_type": ims,
        "ims_total": sum(ims.values()),
        "srt_size": _mean_max(table_sizes.get("srt", ())),
        "prt_size": _mean_max(table_sizes.get("prt", ())),
        "delay_ms": {kind: delay_stats_ms(delays_s.get(kind, ())) for kind in DELAY_KINDS},
        "hops": {kind: _hop_stats(hops.get(kind, ())) for kind in PROPAGATED_KINDS.values()},
        "duration_s": round(duration_s, 6),
    }
