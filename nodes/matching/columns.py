"""Filters as rows of per-attribute numpy columns: a vectorised scan, exact.

:class:`ColumnIndex` holds every distinct filter it is given as one row (equal filters,
interval for interval, share the row: OctopiA's 5,000 ``Symbol`` windows at 2 % are
about 410 rows); per attribute any row constrains, two ``int32`` columns hold each row's
lower and upper bound as a *rank code*, so a notification is matched by two comparisons
and an AND per attribute over all rows at once, and the ids come out by one boolean
selection of the rows and one ``set.update`` over their ids.

Rank codes
----------
Per attribute, the distinct constants of the rows' bounds are kept sorted, ``k_0 < k_1
< ...``. A value ``x`` is coded ``2j + 1`` if it equals ``k_j`` and ``2j`` if it lies
between ``k_{j-1}`` and ``k_j`` (found with :func:`bisect.bisect_left`, so by Python's own
comparison: strings, ints and floats compare exactly as :func:`nodes.model.matches`
compares them, with no float conversion). The code is order-preserving, so each bound
becomes one integer a code is compared with:

- lower bound ``>= k_j``: code ``>= 2j + 1``; ``> k_j``: code ``>= 2j + 2``;
- upper bound ``<= k_j``: code ``<= 2j + 1``; ``< k_j``: code ``<= 2j``;
- a row that leaves the attribute free holds ``[-1, _TOP]``; a notification without the
  attribute is coded ``-1``, which every constraining row's lower bound (``>= 0``)
  refuses and every free row admits.

Updates
-------
Rows are stored densely in arrays with spare capacity (doubled when full: amortised O(1)
per add). An ``add`` equal to a row joins it, O(1); ``remove`` of a row's last id moves
the last row into the hole (swap-remove, O(attributes)). An ``add`` whose constants are
all known already is coded and appended at once. One that brings a new constant waits
in ``pending`` (tested with :func:`nodes.model.matches` at each ``match``) until more
than ``_REBUILD_SLACK + rows / _PENDING_SHARE`` wait; the rebuild merges the new
constants into each attribute's sorted keys (dropping those no row uses any more),
recodes the existing rows with one lookup-table gather per column (numpy, O(rows), after
an O(keys log keys) pass in Python to place the old keys), then codes and appends the
pending rows: amortised, a few key placements per add.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from nodes.model import Filter, Interval, Notification, Value, filter_bounds, matches

SubId = Hashable

_MISSING = object()
_TOP = np.iinfo(np.int32).max  # the upper code of a row that leaves an attribute free
_FREE_LO = -1  # its lower code; also the code of a notification lacking the attribute
_MIN_CAPACITY = 64  # rows allocated at first; doubled when full
# Pending filters are tested one by one at every match, a rebuild recodes every row with
# numpy. Measured with bench matching's churn (remove, add, match) at 5,000 stock
# subscriptions: (slack, share) = (4, 256), (16, 64) and (64, 16) differ by less than
# the run-to-run noise (44-49k/s OctopiA, 38-46k/s Meghdoot), so the middle one.
_REBUILD_SLACK = 16
_PENDING_SHARE = 64


@dataclass(slots=True)
class _Column:
    """One attribute: sorted distinct constants, their use counts, and the codes."""

    keys: list[Value]
    lo: np.ndarray
    hi: np.ndarray
    rank: dict[Value, int] = field(default_factory=dict)  # constant -> index in keys
    uses: dict[Value, int] = field(default_factory=dict)  # constant -> bounds using it
    rows: int = 0  # rows that constrain the attribute

    def code(self, x: Value) -> int:
        """The rank code of a notification's value."""
        keys = self.keys
        j = bisect.bisect_left(keys, x)
        return 2 * j + 1 if j < len(keys) and keys[j] == x else 2 * j

    def encode(self, iv: Interval) -> tuple[int, int]:
        """The (lower, upper) codes of a row's interval; its constants must be keys."""
        # No lower bound: 0 admits every value a notification carries, not a missing one.
        lo = 0 if iv.lo is None else 2 * self.rank[iv.lo] + (1 if iv.lo_closed else 2)
        hi = _TOP if iv.hi is None else 2 * self.rank[iv.hi] + (1 if iv.hi_closed else 0)
        return lo, hi

    def count(self, iv: Interval, step: int) -> None:
        """Add ``step`` to the use counts of the interval's constants."""
        for c in (iv.lo, iv.hi):
            if c is not None:
                self.uses[c] = self.uses.get(c, 0) + step

    def rekey(self, new_constants: set[Value], n: int) -> None:
        """Merge ``new_constants`` into the keys, drop unused ones, recode rows ``[0, n)``."""
        old = self.keys
        keys = sorted({k for k in old if self.uses.get(k, 0) > 0} | new_constants)
        # Old index i -> new index (an unused old key maps anywhere in range: no row
        # refers to it, nor to the gap codes beside it that only its own bounds use).
        where = np.fromiter((bisect.bisect_left(keys, k) for k in old), np.int64, len(old))
        m = len(old)
        lo_map = np.zeros(2 * m + 3, np.int32)  # indexed by old lower code + 1
        lo_map[0] = _FREE_LO
        lo_map[2 : 2 * m + 2 : 2] = 2 * where + 1  # closed at k_i: code 2i + 1
        lo_map[3 : 2 * m + 3 : 2] = 2 * where + 2  # open at k_i: code 2i + 2
        hi_map = np.zeros(2 * m, np.int32)  # indexed by old upper code
        hi_map[0::2] = 2 * where  # open at k_i: code 2i
        hi_map[1::2] = 2 * where + 1  # closed at k_i: code 2i + 1
        lo, hi = self.lo[:n], self.hi[:n]
        lo[:] = lo_map[lo + 1]
        bounded = hi != _TOP
        hi[bounded] = hi_map[hi[bounded]]
        self.keys = keys
        self.rank = {k: i for i, k in enumerate(keys)}
        self.uses = {k: u for k, u in self.uses.items() if u > 0}


# A row's identity: its intervals, attribute by attribute (equal filters share a row).
_RowKey = tuple[tuple[str, Value | None, bool, Value | None, bool], ...]


def _row_key(bounds: dict[str, Interval]) -> _RowKey:
    return tuple(sorted(((a, iv.lo, iv.lo_closed, iv.hi, iv.hi_closed)
                         for a, iv in bounds.items()), key=lambda t: t[0]))


class ColumnIndex:
    """Every filter a row of per-attribute rank-code columns (see the module docstring)."""

    def __init__(self) -> None:
        self._n = 0  # live rows, stored in [0, n)
        # Per row, its ids as a dict (set.update reads a dict's keys with their stored
        # hashes, and an id leaves in O(1)).
        self._members = np.empty(_MIN_CAPACITY, dtype=object)
        self._rows: list[tuple[_RowKey, dict[str, Interval]]] = []  # per row
        self._row_of_key: dict[_RowKey, int] = {}
        self._key_of: dict[SubId, _RowKey] = {}  # every id in a row
        self._cols: dict[str, _Column] = {}
        self._pending: dict[SubId, tuple[Filter, dict[str, Interval], _RowKey]] = {}

    def __len__(self) -> int:
        return len(self._key_of) + len(self._pending)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._key_of or sub_id in self._pending

    def add(self, sub_id: SubId, f: Filter) -> None:
        """Index ``f`` under ``sub_id`` (replacing any filter it had)."""
        if sub_id in self:
            self.remove(sub_id)
        f = tuple(f)
        bounds = filter_bounds(f)
        key = _row_key(bounds)
        if key in self._row_of_key:
            self._join(sub_id, key)
            return
        cols = self._cols
        for attr, iv in bounds.items():
            col = cols.get(attr)
            if col is None or any(c is not None and c not in col.rank for c in (iv.lo, iv.hi)):
                self._pending[sub_id] = (f, bounds, key)
                return
        self._append(sub_id, bounds, key)

    def remove(self, sub_id: SubId) -> None:
        """Drop ``sub_id``; ``KeyError`` if unknown."""
        if self._pending.pop(sub_id, None) is not None:
            return
        row = self._row_of_key[self._key_of.pop(sub_id)]
        members = self._members[row]
        del members[sub_id]
        if not members:
            self._drop_row(row)

    def match(self, notification: Notification) -> set[SubId]:
        """The ids whose filters ``notification`` satisfies."""
        if len(self._pending) > _REBUILD_SLACK + self._n // _PENDING_SHARE:
            self._rebuild()
        n = self._n
        mask = None
        get = notification.get
        for attr, col in self._cols.items():
            x = get(attr, _MISSING)
            c = _FREE_LO if x is _MISSING else col.code(x)
            m = col.lo[:n] <= c
            m &= col.hi[:n] >= c
            if mask is None:
                mask = m
            else:
                mask &= m
        members = self._members[:n]
        out: set[SubId] = set()
        out.update(*(members if mask is None else members[mask]).tolist())
        for sub_id, (f, _, _) in self._pending.items():
            if matches(f, notification):
                out.add(sub_id)
        return out

    def _join(self, sub_id: SubId, key: _RowKey) -> None:
        """Add ``sub_id`` to the row of an equal filter."""
        self._members[self._row_of_key[key]][sub_id] = None
        self._key_of[sub_id] = key

    def _append(self, sub_id: SubId, bounds: dict[str, Interval], key: _RowKey) -> None:
        """Code ``bounds`` (their constants known) into a new last row."""
        row = self._n
        if row == len(self._members):
            self._grow(2 * row)
        self._members[row] = {sub_id: None}
        self._rows.append((key, bounds))
        self._row_of_key[key] = row
        self._key_of[sub_id] = key
        for attr, col in self._cols.items():
            iv = bounds.get(attr)
            if iv is None:
                col.lo[row], col.hi[row] = _FREE_LO, _TOP
            else:
                col.lo[row], col.hi[row] = col.encode(iv)
                col.count(iv, 1)
                col.rows += 1
        self._n = row + 1

    def _drop_row(self, row: int) -> None:
        """Remove a row whose last id went: the last row moves into its place."""
        key, bounds = self._rows[row]
        del self._row_of_key[key]
        for attr, iv in bounds.items():
            col = self._cols[attr]
            col.count(iv, -1)
            col.rows -= 1
            if not col.rows:
                del self._cols[attr]  # every row left is free there: nothing to test
        last = self._n - 1
        if row != last:
            self._members[row] = self._members[last]
            self._rows[row] = self._rows[last]
            self._row_of_key[self._rows[row][0]] = row
            for col in self._cols.values():
                col.lo[row] = col.lo[last]
                col.hi[row] = col.hi[last]
        self._members[last] = None
        self._rows.pop()
        self._n = last

    def _grow(self, capacity: int) -> None:
        self._members = _resized(self._members, capacity, None)
        for col in self._cols.values():
            col.lo = _resized(col.lo, capacity, _FREE_LO)
            col.hi = _resized(col.hi, capacity, _TOP)

    def _rebuild(self) -> None:
        """Merge the pending filters' constants into the keys, recode, append them."""
        new: dict[str, set[Value]] = {}
        for _, bounds, _ in self._pending.values():
            for attr, iv in bounds.items():
                new.setdefault(attr, set()).update(c for c in (iv.lo, iv.hi) if c is not None)
        capacity = len(self._members)
        for attr, constants in new.items():
            col = self._cols.get(attr)
            if col is None:
                self._cols[attr] = _Column(
                    [], np.full(capacity, _FREE_LO, np.int32), np.full(capacity, _TOP, np.int32)
                )
                col = self._cols[attr]
            col.rekey(constants, self._n)
        pending, self._pending = self._pending, {}
        for sub_id, (_, bounds, key) in pending.items():
            if key in self._row_of_key:
                self._join(sub_id, key)
            else:
                self._append(sub_id, bounds, key)


def _resized(a: np.ndarray, capacity: int, fill: object) -> np.ndarray:
    out = np.full(capacity, fill, a.dtype)
    out[: len(a)] = a
    return out
