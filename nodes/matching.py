"""Subscription indexes: which subscriptions does a notification match?

:class:`LinearIndex` tests every filter (the brute-force oracle and the benchmark peer).
:class:`SubscriptionIndex` gives the same answers, exactly, with hash buckets for
equality filters and word-parallel bitmaps for range filters instead of a per-filter
scan. Both take any hashable subscription id, such as ``(client, msg_id)``. ``add`` with
an id already present replaces its filter; ``remove`` of an unknown id raises
``KeyError``.

How :class:`SubscriptionIndex` works
------------------------------------
Each filter is reduced to one interval per constrained attribute
(:func:`nodes.model.filter_bounds`).

- **Equality access.** A filter that pins an attribute to one value (``Symbol = 'aapl'``,
  or a range ``[v, v]``) is hashed under (attribute, value), and only the filters in the
  notification's buckets have their other predicates (the *residual*) tested. Among
  several pinned attributes a filter takes the one whose bucket is smallest when it
  arrives (ties: the attribute with more distinct values so far, as Symbol beats
  Exchange), the cheap stand-in for "most selective".
- **Range filters** (no pinned attribute) are bits in one bitmap (a Python int). Per
  attribute, their interval bounds are sorted into a sweep of events: passing a lower
  bound sets a filter's bit, passing its upper bound clears it, so the XOR of all events
  below a value is exactly the set of filters whose interval on that attribute holds the
  value. Masks are checkpointed every few events; a query XORs at most half a step of
  single bits onto the nearest checkpoint. Filters that do not constrain the attribute
  are always in its mask. The AND over attributes is the exact answer, with no
  per-filter work except for reporting the matches. Per attribute, memory is at most
  ``_MAX_CHECKPOINTS`` masks of one bit per range filter.
- The bitmap is rebuilt lazily at the next ``match`` once the range filters added since
  the last build (scanned linearly meanwhile) or removed since (masked out by an
  ``alive`` mask) exceed a fixed share, so an update costs amortised O(log n).
- Filters no value can satisfy are only counted; the empty filter matches everything.

Filters and notifications must share one schema (see :mod:`nodes.model`): string bounds
cannot be compared with a number.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from nodes.model import Filter, Interval, Notification, Value, filter_bounds, matches

SubId = Hashable

_MISSING = object()
# A rebuild waits until this many filters are pending (or stale), plus a share of the
# indexed ones, so a stream of subscribe/unsubscribe calls does not rebuild every time.
_REBUILD_SLACK = 32
_PENDING_SHARE = 8  # rebuild when pending > slack + indexed / 8
_STALE_SHARE = 4  # rebuild when stale > slack + indexed / 4
_MAX_CHECKPOINTS = 256  # per attribute: bounds the bitmap's memory
_MIN_STEP = 32  # events between checkpoints, at least


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


# Bound keys make open/closed bounds comparable as plain tuples: a lower bound is
# (lo, 0) if closed, (lo, 1) if open, and admits x iff key < (x, 1); an upper bound is
# (hi, 1) if closed, (hi, 0) if open, and rejects x iff key < (x, 1). So one probe,
# (x, 1), counts both the lower bounds passed and the upper bounds passed.
_Key = tuple[Value, int]


def _mask(positions: Iterable[int], n_bits: int) -> int:
    """The XOR of the given single bits (a position listed twice cancels), built in
    O(len(positions) + n_bits / 8) rather than one big-int operation per bit."""
    buf = bytearray((n_bits + 7) // 8)
    for p in positions:
        buf[p >> 3] ^= 1 << (p & 7)
    return int.from_bytes(buf, "little")


def _ids_of(mask: int, ids: list[SubId]) -> list[SubId]:
    """``ids`` at the positions of ``mask``'s set bits, the highest first: a list built in
    one loop over the mask's binary digits (a generator of positions took two resumptions
    a match, and a notification matches hundreds of filters)."""
    digits = bin(mask)
    top = len(digits) - 1
    find = digits.find
    out = []
    i = find("1", 2)
    while i != -1:
        out.append(ids[top - i])
        i = find("1", i + 1)
    return out


class _Sweep:
    """One attribute's bound events, sorted, with checkpointed masks."""

    __slots__ = ("absent", "checkpoints", "keys", "positions", "step")

    def __init__(self, absent: int, events: list[tuple[_Key, int]], start: int, n_bits: int):
        events.sort(key=lambda e: e[0])  # equal keys may come in any order: XOR commutes
        self.absent = absent  # the mask when a notification lacks the attribute
        self.keys = [k for k, _ in events]
        self.positions = [p for _, p in events]
        self.step = max(_MIN_STEP, -(-len(events) // _MAX_CHECKPOINTS))
        mask = absent | start
        self.checkpoints = [mask]
        for i in range(self.step, len(events) + 1, self.step):
            mask ^= _mask(self.positions[i - self.step : i], n_bits)
            self.checkpoints.append(mask)

    def mask_at(self, x: Value) -> int:
        """The filters whose interval on this attribute holds ``x`` (or that ignore it)."""
        j = bisect.bisect_left(self.keys, (x, 1))
        c, r = divmod(j, self.step)
        if r > self.step // 2 and c + 1 < len(self.checkpoints):
            mask = self.checkpoints[c + 1]
            flips = self.positions[j : (c + 1) * self.step]
        else:
            mask = self.checkpoints[c]
            flips = self.positions[c * self.step : j]
        for p in flips:
            mask ^= 1 << p
        return mask


class _Bitmap:
    """Range filters as bit positions, with one sweep per constrained attribute."""

    __slots__ = ("alive", "ids", "sweeps")

    def __init__(self, subs: list[_Sub]) -> None:
        n = len(subs)
        self.ids = [sub.sub_id for sub in subs]
        self.alive = (1 << n) - 1
        constrained: dict[str, list[int]] = {}
        unbounded_below: dict[str, list[int]] = {}
        events: dict[str, list[tuple[_Key, int]]] = {}
        for pos, sub in enumerate(subs):
            for attr, iv in sub.bounds.items():
                constrained.setdefault(attr, []).append(pos)
                ev = events.setdefault(attr, [])
                if iv.lo is None:
                    unbounded_below.setdefault(attr, []).append(pos)
                else:
                    ev.append(((iv.lo, 0 if iv.lo_closed else 1), pos))
                if iv.hi is not None:
                    ev.append(((iv.hi, 1 if iv.hi_closed else 0), pos))
        self.sweeps = {
            attr: _Sweep(
                self.alive & ~_mask(constrained[attr], n),
                ev,
                _mask(unbounded_below.get(attr, ()), n),
                n,
            )
            for attr, ev in events.items()
        }

    def match(self, notification: Notification) -> list[SubId]:
        mask = self.alive
        get = notification.get
        for attr, sweep in self.sweeps.items():
            if not mask:
                return []
            v = get(attr, _MISSING)
            mask &= sweep.absent if v is _MISSING else sweep.mask_at(v)
        return _ids_of(mask, self.ids) if mask else []


@dataclass(slots=True)
class _Sub:
    sub_id: SubId
    bounds: dict[str, Interval]
    residual: Filter  # what to test on a bucket hit (all of it while pending)


class SubscriptionIndex:
    """Exact subscription matching by hashing and bitmaps (see the module docstring)."""

    def __init__(self) -> None:
        self._subs: dict[int, _Sub] = {}  # live slot -> subscription
        self._slot_of: dict[SubId, int] = {}
        self._next_slot = 0
        self._eq: dict[str, dict[Value, dict[int, None]]] = {}  # attr -> value -> slots
        self._eq_home: dict[int, tuple[str, Value]] = {}
        self._always: dict[int, None] = {}
        self._ranged: dict[int, None] = {}  # every range-filter slot, in the bitmap or pending
        self._pending: dict[int, None] = {}  # range-filter slots added since the last build
        self._bitmap = _Bitmap([])
        self._bit_of: dict[int, int] = {}  # slot -> bitmap position
        self._stale = 0  # bitmap positions of removed filters

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._slot_of

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
        sub = _Sub(sub_id, bounds, f)
        self._subs[slot] = sub
        if not bounds:
            self._always[slot] = None
            return
        pinned = [attr for attr, iv in bounds.items() if iv.is_point]
        if not pinned:
            self._ranged[slot] = None
            self._pending[slot] = None
            return
        attr = min(pinned, key=lambda a: self._eq_rank(a, bounds[a].lo))
        value = bounds[attr].lo
        self._eq.setdefault(attr, {}).setdefault(value, {})[slot] = None
        self._eq_home[slot] = (attr, value)
        sub.residual = tuple(p for p in f if p.attr != attr)

    def _eq_rank(self, attr: str, value: Value) -> tuple[int, int, str]:
        table = self._eq.get(attr, {})
        return (len(table.get(value, ())), -len(table), attr)

    def remove(self, sub_id: SubId) -> None:
        """Drop ``sub_id``; ``KeyError`` if unknown."""
        slot = self._slot_of.pop(sub_id)
        if self._subs.pop(slot, None) is None:
            return
        home = self._eq_home.pop(slot, None)
        if home is not None:
            attr, value = home
            table = self._eq[attr]
            del table[value][slot]
            if not table[value]:
                del table[value]
                if not table:
                    del self._eq[attr]
        elif slot in self._ranged:
            del self._ranged[slot]
            if slot in self._pending:
                del self._pending[slot]
            else:
                self._bitmap.alive &= ~(1 << self._bit_of.pop(slot))
                self._stale += 1
        else:
            del self._always[slot]

    def match(self, notification: Notification) -> set[SubId]:
        """The ids whose filters ``notification`` satisfies."""
        built = len(self._ranged) - len(self._pending)
        if (
            len(self._pending) > _REBUILD_SLACK + built // _PENDING_SHARE
            or self._stale > _REBUILD_SLACK + built // _STALE_SHARE
        ):
            self._rebuild()
        subs = self._subs
        out = {subs[s].sub_id for s in self._always}
        out.update(self._bitmap.match(notification))
        get = notification.get
        for attr, table in self._eq.items():
            v = get(attr, _MISSING)
            if v is not _MISSING:
                bucket = table.get(v)
                if bucket:
                    self._collect(bucket, notification, out)
        self._collect(self._pending, notification, out)
        return out

    def _collect(self, slots: Iterable[int], notification: Notification, out: set[SubId]) -> None:
        # matches() inlined: a call per candidate filter was a tenth of a Meghdoot run.
        subs = self._subs
        get = notification.get
        add = out.add
        for s in slots:
            sub = subs[s]
            for p in sub.residual:
                v = get(p.attr, _MISSING)
                if v is _MISSING or not p.holds(v):
                    break
            else:
                add(sub.sub_id)

    def _rebuild(self) -> None:
        """Put every range filter, pending ones included, into a fresh bitmap."""
        slots = list(self._ranged)
        self._bitmap = _Bitmap([self._subs[s] for s in slots])
        self._bit_of = {slot: pos for pos, slot in enumerate(slots)}
        self._pending = {}
        self._stale = 0
