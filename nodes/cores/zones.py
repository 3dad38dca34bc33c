"""Continuous zones of one attribute: a content space cut at points (pure).

Kyra partitions "the content space into non-overlapping continuous zones with balanced
load" (§III-B), described by their boundaries so that membership is a comparison; the
multicast baseline's cells are the product of such cuts over a few attributes. Both use
this module.

A partition of attribute ``attr`` into ``n`` zones is ``n - 1`` non-decreasing *cuts*:
zone 0 is ``attr < cuts[0]``, zone ``i`` is ``cuts[i-1] <= attr < cuts[i]``, the last
zone ``attr >= cuts[-1]``. Equal cuts make an empty zone. Values may be numbers or
strings (Python order), never both in one partition. An event must carry the attribute:
a filter that leaves it free matches events without it, which no zone's range holds, so
the cores report such an event rather than guess its zone.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from nodes.cores.params import ParamValueError
from nodes.model import Filter, Predicate, Value


def require_attrs(param: str, value: object, attrs: Sequence[str],
                  sample: Sequence[Mapping[str, Value]]) -> None:
    """A :class:`ParamValueError` naming ``param`` (whose ``value`` names ``attrs``) unless
    every event of the calibration ``sample`` carries each of ``attrs``: a zone needs its
    attribute's value in every event it cuts."""
    if not sample:
        return
    common = set.intersection(*(set(ev) for ev in sample))
    missing = [a for a in attrs if a not in common]
    if missing:
        raise ParamValueError(param, value, f"attributes every calibration event has "
                              f"({', '.join(sorted(common)) or 'none'}); {missing[0]!r} "
                              "is not one")


def balanced_cuts(sample: Sequence[Value], n: int) -> list[Value]:
    """Cuts of ``n`` zones that share the values of ``sample`` (a calibration sample of
    events' values of the attribute) as evenly as continuity allows.

    Cut ``i`` (zone ``i`` ends before it) is the smallest sample value with at least
    ``i * len(sample) / n`` sample values below it: each zone but the last takes values
    until it holds its share or more. On distinct values this is the usual quantile
    cut (0..9 into 3 zones: 0-3, 4-6, 7-9, Kyra's Fig. 4); a value repeated many times
    stays in one zone, so a heavy value can leave a zone over its share and the next
    under it. When no value has that many below it, the cut is the largest value (the
    zones between are empty). An empty sample, ``n`` below 1 or mixed strings and
    numbers are ValueErrors.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if not sample:
        raise ValueError("the calibration sample is empty")
    if len({isinstance(v, str) for v in sample}) > 1:
        raise ValueError("the calibration sample mixes strings and numbers")
    values = sorted(sample)
    distinct = sorted(set(values))
    below = [bisect.bisect_left(values, d) for d in distinct]  # non-decreasing
    cuts: list[Value] = []
    for i in range(1, n):
        target = i * len(values) / n
        j = bisect.bisect_left(below, math.ceil(target - 1e-9))
        cuts.append(distinct[min(j, len(distinct) - 1)])
    return cuts


def zone_index(cuts: Sequence[Value], value: Value) -> int:
    """The zone of ``value``: the number of cuts at or below it."""
    return bisect.bisect_right(cuts, value)


def zone_filter(attr: str, cuts: Sequence[Value], i: int) -> Filter:
    """Zone ``i`` of the partition as a filter (the empty filter when there is one zone)."""
    preds = []
    if i > 0:
        preds.append(Predicate(attr, ">=", cuts[i - 1]))
    if i < len(cuts):
        preds.append(Predicate(attr, "<", cuts[i]))
    return tuple(preds)
