"""Subscription indexes: which subscriptions does a notification match?

:class:`LinearIndex` tests every filter (the brute-force oracle).
:class:`SubscriptionIndex` gives the same answers, exactly, with hash buckets for the
filters that pin an attribute and per-attribute numpy columns
(:class:`~nodes.matching.columns.ColumnIndex`) for the rest. :class:`ColumnIndex` alone,
every filter in the columns, is the numpy scan ``pubsublab bench matching`` prints
beside it. All take any hashable subscription id, such as ``(client, msg_id)``. ``add``
with an id already present replaces its filter; ``remove`` of an unknown id raises
``KeyError``. ``match`` returns a set: callers must not (and do not) depend on an order.

How :class:`SubscriptionIndex` works
------------------------------------
Each filter is reduced to one interval per constrained attribute
(:func:`nodes.model.filter_bounds`).

- **Equality access.** A filter that pins an attribute to one value (``Symbol = 'aapl'``,
  or a range ``[v, v]``) is hashed under (attribute, value), and only the filters in the
  notification's buckets have their other intervals (the *residual*) tested, inline.
  Among several pinned attributes a filter takes the one whose bucket is smallest when
  it arrives (ties: the attribute with more distinct values so far, as Symbol beats
  Exchange), the cheap stand-in for "most selective".
- **Range filters** (no pinned attribute) are rows of numpy columns: per attribute, each
  row's bounds as rank codes, so one notification is two comparisons and an AND per
  attribute over all rows (:mod:`nodes.matching.columns`, with its update costs).
- Filters no value can satisfy are only counted; the empty filter matches everything.

Which structure where, measured
-------------------------------
``pubsublab bench matching`` on the stock workload, notifications per CPU-second, the
index and the columns alone (the numpy scan) taking turns in one run; 2-core shared
Xeon with other work on it (load average 2-10), December 2026, at 5,000 subscriptions:

- Meghdoot mode (95 % of filters pin ``Symbol``): hash buckets with the residual tested
  inline beat every filter in the columns 1.7-2.4x (85-135k/s against 50-55k/s: a
  bucket holds about ten filters, the columns scan 3,556 rows), so pinned filters stay
  hashed. At 50,000 (about 95 filters a bucket) the columns win instead (0.55-0.63x):
  buckets are not yet turned into columns when they grow.
- OctopiA mode (every filter a ``Symbol`` window, none pinned): the columns replace the
  bitmap sweep this index used before, 2.9-3.2x faster in one run (106-142k/s against
  37-44k/s); the index is then the column scan behind a call, at 0.91-0.96x of it.

Filters and notifications must share one schema (see :mod:`nodes.model`): string bounds
cannot be compared with a number.
"""

from __future__ import annotations

from nodes.matching.columns import ColumnIndex, SubId
from nodes.model import Filter, Interval, Notification, Value, filter_bounds, matches

__all__ = ["ColumnIndex", "LinearIndex", "SubId", "SubscriptionIndex"]

_MISSING = object()


class LinearIndex:
    """Tests every filter against every notification."""

    def __init__(self) -> None:
        self._filters: dict[SubId, Filter] = {}

    def add(self, sub_id: SubId, f: Filter) -> None:
        """Index ``f`` under ``sub_id`` (replacing any filter it had)."""
        self._filters[sub_id] = tuple(f)

    def remove(self, sub_id: SubId) -> None:
        """Drop ``sub_id``; ``KeyError`` if unknown."""
        del self._filters[sub_id]

    def match(self, notification: Notification) -> set[SubId]:
        """The ids whose filters ``notification`` satisfies."""
        return {sid for sid, f in self._filters.items() if matches(f, notification)}

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._filters


# A hashed filter's residual, per attribute: (attr, lo, lo_closed, hi, hi_closed), a
# ``None`` bound unbounded; tested inline, without a call per predicate.
_Check = tuple[str, Value | None, bool, Value | None, bool]


def _checks(bounds: dict[str, Interval], hashed: str) -> tuple[_Check, ...]:
    return tuple((attr, iv.lo, iv.lo_closed, iv.hi, iv.hi_closed)
                 for attr, iv in bounds.items() if attr != hashed)


class SubscriptionIndex:
    """Exact subscription matching by hashing and columns (see the module docstring)."""

    def __init__(self) -> None:
        self._slot_of: dict[SubId, int] = {}
        self._next_slot = 0
        # attr -> value -> slot -> (id, residual checks)
        self._eq: dict[str, dict[Value, dict[int, tuple[SubId, tuple[_Check, ...]]]]] = {}
        self._eq_home: dict[int, tuple[str, Value]] = {}
        self._always: dict[int, SubId] = {}  # the empty filters, by slot
        self._ranges = ColumnIndex()  # the filters with no pinned attribute, by id

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._slot_of

    def placement(self) -> dict[str, int]:
        """How many filters are where: hash buckets, numpy columns, matching everything,
        matching nothing."""
        hashed = len(self._eq_home)
        always = len(self._always)
        columns = len(self._ranges)
        return {"hashed": hashed, "columns": columns, "always": always,
                "never": len(self) - hashed - always - columns}

    def add(self, sub_id: SubId, f: Filter) -> None:
        """Index ``f`` under ``sub_id`` (replacing any filter it had)."""
        if sub_id in self._slot_of:
            self.remove(sub_id)
        f = tuple(f)
        bounds = filter_bounds(f)
        slot = self._next_slot
        self._next_slot += 1
        self._slot_of[sub_id] = slot
        if any(iv.witness() is None for iv in bounds.values()):
            return  # no value satisfies it: counted, never matched
        if not bounds:
            self._always[slot] = sub_id
            return
        pinned = [attr for attr, iv in bounds.items() if iv.is_point]
        if not pinned:
            self._ranges.add(sub_id, f)
            return
        attr = min(pinned, key=lambda a: self._eq_rank(a, bounds[a].lo))
        value = bounds[attr].lo
        self._eq.setdefault(attr, {}).setdefault(value, {})[slot] = (
            sub_id, _checks(bounds, attr))
        self._eq_home[slot] = (attr, value)

    def _eq_rank(self, attr: str, value: Value) -> tuple[int, int, str]:
        table = self._eq.get(attr, {})
        return (len(table.get(value, ())), -len(table), attr)

    def remove(self, sub_id: SubId) -> None:
        """Drop ``sub_id``; ``KeyError`` if unknown."""
        slot = self._slot_of.pop(sub_id)
        if sub_id in self._ranges:
            self._ranges.remove(sub_id)
            return
        if slot in self._always:
            del self._always[slot]
            return
        home = self._eq_home.pop(slot, None)
        if home is None:
            return  # it matched nothing
        attr, value = home
        table = self._eq[attr]
        del table[value][slot]
        if not table[value]:
            del table[value]
            if not table:
                del self._eq[attr]

    def match(self, notification: Notification) -> set[SubId]:
        """The ids whose filters ``notification`` satisfies."""
        out = self._ranges.match(notification)
        out.update(self._always.values())
        get = notification.get
        for attr, table in self._eq.items():
            v = get(attr, _MISSING)
            if v is _MISSING:
                continue
            bucket = table.get(v)
            if bucket is None:
                continue
            for sub_id, checks in bucket.values():
                for a, lo, lo_closed, hi, hi_closed in checks:
                    x = get(a, _MISSING)
                    if (x is _MISSING
                            or (lo is not None and (x < lo if lo_closed else x <= lo))
                            or (hi is not None and (x > hi if hi_closed else x >= hi))):
                        break
                else:
                    out.add(sub_id)
        return out
