"""A Meghdoot peer's neighbour zones as arrays, kept as its table changes.

DeliverEvent asks of every neighbour zone, for every event a peer handles, whether it
meets the event's affected region and lies upper-left (or bottom-right) of the peer's
own zone; greedy routing asks which zone is nearest to a point. Asked zone by zone
(:mod:`nodes.cores.can`) that was most of a large run's time, so the zones are rows of
arrays. At 10,000 peers a peer's table changes at every join near it (thousands of
neighbours in replicated zones), and rebuilding the arrays, the sides and the zones'
order after each change was a fifth of the run's time (a profile at 15 % of its
operations); :class:`ZoneTable` adds, moves and removes one row per change instead.
The paper's duplicate rule asks which of those zones lie upper-left of which: the table
keeps that too, as a (zones x zones) matrix of bits updated with the rows.

Memory: at the end of a 3,000-peer run with 50,000 subscriptions the tables held 545 of
the peers' 880 MB, 207 MB of it that matrix as one byte a pair, 130 MB the zones' bounds
and 130 MB their corners again as two more arrays. A table keeps the bounds alone
(routing and the zones' sides read them directly) and the matrix as bits, eight pairs a
byte.

Rows are in no particular order (a removed row's place takes the last row). What the
peer sends follows the zones' order by their first peer's name, as before: the rows a
question selects are sorted by it (a handful per event), and of equally near zones
greedy routing takes the first in that order. Every answer is the zone-by-zone rule's,
to the last bit (tests/test_can_table.py).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from nodes.cores import can
from nodes.cores.can import Point, Zone

# numpy is imported where it is used: every broker process imports every core, and
# numpy's import took most of a broker's start-up (see nodes/cores/meghdoot.py).
if TYPE_CHECKING:
    import numpy as np

# A full table grows by a quarter, at least _MIN_ROWS rows, and reset() makes it exact:
# doubling left about half the rows of 10,000 peers' tables unused (80 MB of arrays at
# a fifth of the run), and most of those peers' tables start empty.
_MIN_ROWS = 8
# reset() works out which zones lie upper-left of which this many rows at a time: a
# table of 3,600 zones at once would hold 360 M elements per temporary array.
_CHUNK_ROWS = 256
# Tables of at most this many zones answer propagation() zone by zone in Python: a
# Meghdoot run of 100 peers asks it of tables of 0 to 35 zones (61 % under 20), where
# the numpy calls' fixed cost is most of an answer. Benchmarked on 4-d tables, 50
# affected regions: 3.3 us a call at 10 zones where the arrays took 8.5, 5.5 at 19
# (9.1), 8.9 at 33 (10.7), 14.2 at 41 (11.5).
SMALL_ROWS = 32


def faces(bounds: np.ndarray, zones: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether the table's zones (``bounds``: :attr:`ZoneTable.bounds` columns, shape
    (2 * dims, ..., n)) lie upper-left and bottom-right of the zones ``zones`` (their
    :func:`_touches` columns, shape (2 * dims, ...)), over the broadcast shape of the
    two without their first axis (as :func:`can.upper_left`, :func:`can.bottom_right`):
    a face is a zone that meets the other closed on every dimension and touches it on
    exactly one, and lies upper-left when it touches below on a start dimension or
    above on an end one, bottom-right otherwise (zones have sides of positive length,
    so a zone touching on one dimension lies on one side of it). Both questions are one
    comparison of the columns each: ``[lo, -hi] == [z_hi, -z_lo]`` says where a zone
    touches (``lo == z_hi`` above, ``hi == z_lo`` below) and ``<=`` where it meets the
    other closed. A side closed at the domain's end (``-inf`` in the bounds) touches no
    zone there (no zone starts at 1.0) and meets every one. Worked out from the corners,
    as nine array operations over (zones x dimensions), it was a fifth to a quarter of a
    10,000-peer run's time while its peers joined (profiles of a minute), at every zone
    a peer's table gains."""
    import numpy as np
    touch = bounds == zones
    face = np.logical_and.reduce(bounds <= zones, axis=0)
    # Counted as bytes: summing booleans converts them to 8-byte integers first (26 us
    # where this takes 4, at 1,200 zones).
    face &= np.add.reduce(touch.view(np.uint8), axis=0, dtype=np.uint8) == 1
    left_rows = _left_rows(bounds.shape[0] // 2).reshape((-1,) + (1,) * (touch.ndim - 1))
    left = np.logical_or.reduce(touch & left_rows, axis=0)
    return face & left, face & ~left


def abutting(lo: np.ndarray, hi: np.ndarray, i: int) -> np.ndarray:
    """Indices of the zones (rows of ``lo``, ``hi``; last axis: dimensions) that abut
    zone ``i`` (:func:`can.abutment`), by :func:`faces`: a whole CAN's zones at once,
    for a run's final check of the peers' tables."""
    import numpy as np
    ul, br = faces(np.moveaxis(_bounds(lo, hi), -1, 0), _touches(lo[i], hi[i])[:, None])
    return np.flatnonzero(ul | br)


def _touches(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Columns ``[hi, -lo]`` of zones ``lo``, ``hi`` (last axis: dimensions; first axis
    of the result), which :func:`faces` compares the table's bounds with."""
    import numpy as np
    return np.moveaxis(np.concatenate([hi, -lo], axis=-1), -1, 0)


@functools.cache
def _left_rows(dims: int) -> np.ndarray:
    """Per row of a bounds column, whether touching there puts a zone upper-left: row
    ``j`` (``lo == z_hi``, above on dimension ``j``) on an end dimension (odd), row
    ``dims + j`` (``hi == z_lo``, below on it) on a start dimension (even)."""
    import numpy as np
    j = np.arange(2 * dims) % dims
    return np.where(np.arange(2 * dims) < dims, j % 2 == 1, j % 2 == 0)


@functools.lru_cache(maxsize=4096)
def probe(box: Zone) -> tuple[np.ndarray, np.ndarray]:
    """The closed ``box`` as the column :meth:`ZoneTable.meeting` compares each zone's
    :attr:`ZoneTable.bounds` column with, and the rows of those columns to compare:
    ``box``'s upper corner, then the largest float below each of its lower corner's
    negated coordinates, so that ``-z_hi <= that`` says ``lo < z_hi`` exactly. A row
    holds for every zone where the box reaches the domain's end (``z_lo <= 1.0``, as
    zones lie in [0, 1)) or starts at 0 (``-z_hi <= -5e-324``, as zones have sides of
    positive length), so it is left out: an event's affected region, ``[0, v]`` on each
    start dimension and ``[v, 1]`` on each end one, leaves half the rows, and the
    comparison took 10 us where the whole column took 18 at 1,000 zones (17 and 31 at
    2,000; the rows taken out cost less than comparing them). Remembered by box: every
    peer an event reaches asks of the same affected region
    (:meth:`nodes.cores.can.Space.event_geometry`)."""
    import numpy as np
    lo, hi = np.asarray(box[0], dtype=float), np.asarray(box[1], dtype=float)
    rows = np.flatnonzero(np.concatenate([hi < 1.0, lo > 0.0]))
    return np.concatenate([hi, np.nextafter(-lo, -np.inf)])[rows, None], rows


def _bounds(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Rows ``[lo, -hi]`` of zones ``lo``, ``hi`` (last axis: dimensions), a side that
    ends at the domain's end (1.0, closed there) as ``-inf`` (see :func:`probe`)."""
    import numpy as np
    return np.concatenate([lo, np.where(hi == 1.0, -np.inf, -hi)], axis=-1)


@functools.cache
def _masks() -> np.ndarray:
    """The bit of column ``k`` within its byte, by ``k % 8`` (np.packbits' order)."""
    import numpy as np
    return np.array([0x80 >> b for b in range(8)], dtype=np.uint8)


def _packed_width(cols: int) -> int:
    """Bytes of a row of ``cols`` bits."""
    return (cols + 7) // 8


class ZoneTable:
    """Neighbour zones with their peers (each zone's peers sorted by name), as rows of
    arrays, and which lie upper-left and bottom-right of the peer's own zone ``own``."""

    def __init__(self, dims: int) -> None:
        import numpy as np
        self.dims = dims
        self.own: Zone | None = None
        self.n = 0  # rows in use: 0 .. n-1
        self.zones: list[Zone] = []
        self.peers: list[list[str]] = []  # per row, sorted; the first names the zone's order
        self.row: dict[Zone, int] = {}
        # Per row, as a column here, [lo, -hi], with -inf for a side closed at the
        # domain's end (1.0): a zone meets a box when the column is at most probe(box)
        # on the rows the box can fail, one comparison (as two, with the closed end
        # tested apart, a fifth of a 1,000-peer run's time). Columns, so that the test
        # reduces over the dimensions row by row of contiguous zones: 15 us at 300 zones
        # where rows of dimensions took 26, 46 at 1,200 where they took 110, in a
        # benchmark of the two.
        self.bounds = np.zeros((2 * dims, 0))
        self.ahead = np.zeros(0, dtype=bool)  # upper-left of own
        self.later = np.zeros(0, dtype=bool)  # bottom-right of own
        # Bit k of row i (np.packbits' order): whether zone i lies upper-left of zone k
        # (the duplicate rule's question, kept as rows come and go: see propagation).
        self.ul = np.zeros((0, 0), dtype=np.uint8)

    def __len__(self) -> int:
        return self.n

    @property
    def capacity(self) -> int:
        """Rows the arrays have room for."""
        return self.bounds.shape[1]

    def upper_left(self, i: int, k: int) -> bool:
        """Whether the zone of row ``i`` lies upper-left of the zone of row ``k``."""
        return bool(self.ul[i, k >> 3] & _masks()[k & 7])

    def reset(self, own: Zone | None, nbrs: Mapping[str, Zone]) -> None:
        """The whole table anew: the peer holds ``own``, its neighbours ``nbrs``. Which
        zones lie upper-left of which does not depend on ``own``: the pairs of zones the
        table held before are copied, and only the new zones' rows are worked out (after
        a split most of a peer's neighbours stay; working out every pair anew was an
        eighth of a 10,000-peer run's time at half its operations)."""
        import numpy as np
        old_row, old_ul, old_n = self.row, self.ul, self.n
        self.own = own
        self.zones, self.peers, self.row = [], [], {}
        for peer in sorted(nbrs):
            zone = nbrs[peer]
            i = self.row.get(zone)
            if i is None:
                self.row[zone] = len(self.zones)
                self.zones.append(zone)
                self.peers.append([peer])
            else:
                self.peers[i].append(peer)
        self.n = n = len(self.zones)
        self.bounds = np.zeros((2 * self.dims, n))
        self.ahead, self.later = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        ul = np.zeros((n, n), dtype=bool)  # as bytes while it is worked out, then packed
        if n:
            lo = np.array([z[0] for z in self.zones], dtype=float)
            hi = np.array([z[1] for z in self.zones], dtype=float)
            self.bounds[:] = _bounds(lo, hi).T
            if own is not None:
                self.ahead[:], self.later[:] = faces(self.bounds, _touches(
                    np.asarray(own[0], dtype=float), np.asarray(own[1], dtype=float))[:, None])
            was = np.array([old_row.get(z, -1) for z in self.zones])
            kept, fresh = (was >= 0).nonzero()[0], (was < 0).nonzero()[0]
            if kept.size:
                old = np.unpackbits(old_ul[was[kept]], axis=1, count=old_n).view(bool)
                ul[np.ix_(kept, kept)] = old[:, was[kept]]
            for a in range(0, len(fresh), _CHUNK_ROWS):  # (2 dims x rows x n) at a time
                rows = fresh[a:a + _CHUNK_ROWS]
                # Every zone upper-left of each fresh zone (its column) and bottom-right
                # of it (the fresh zone upper-left of that zone: its row).
                left, right = faces(self.bounds[:, None, :],
                                    _touches(lo[rows], hi[rows])[:, :, None])
                ul[rows], ul[:, rows] = right, left.T
        self.ul = np.packbits(ul, axis=1)

    def add(self, peer: str, zone: Zone) -> None:
        """``peer`` holds ``zone``, a neighbour zone (not yet filed under it)."""
        import numpy as np
        i = self.row.get(zone)
        if i is not None:
            bisect.insort(self.peers[i], peer)
            return
        i = self.n
        if i == self.capacity:  # full: grow the arrays
            cap = i + max(_MIN_ROWS, i // 4)
            self.bounds = np.concatenate([self.bounds, np.zeros((2 * self.dims, cap - i))],
                                         axis=1)
            self.ahead = np.concatenate([self.ahead, np.zeros(cap - i, dtype=bool)])
            self.later = np.concatenate([self.later, np.zeros(cap - i, dtype=bool)])
            ul = np.zeros((cap, _packed_width(cap)), dtype=np.uint8)
            ul[:i, :self.ul.shape[1]] = self.ul[:i]
            self.ul = ul
        self.bounds[:, i] = _bounds(np.asarray(zone[0], dtype=float),
                                 np.asarray(zone[1], dtype=float))
        own = self.own
        self.ahead[i] = own is not None and can.upper_left(zone, own)
        self.later[i] = own is not None and can.bottom_right(zone, own)
        # Every zone upper-left of the new one (its column) and bottom-right of it (the
        # new zone upper-left of that zone: its row).
        left, right = faces(self.bounds[:, :i + 1], _touches(
            np.asarray(zone[0], dtype=float), np.asarray(zone[1], dtype=float))[:, None])
        self.ul[i] = 0
        self.ul[i, :_packed_width(i + 1)] = np.packbits(right)
        self._set_column(i, left)
        self.zones.append(zone)
        self.peers.append([peer])
        self.row[zone] = i
        self.n = i + 1

    def _set_column(self, k: int, bits: np.ndarray) -> None:
        """Bit ``k`` of the first ``len(bits)`` rows of ``ul``, to ``bits``."""
        import numpy as np
        mask = _masks()[k & 7]
        col = self.ul[:len(bits), k >> 3]  # a view: changed in place
        col &= ~mask
        col |= np.where(bits, mask, np.uint8(0))

    def remove(self, peer: str, zone: Zone) -> None:
        """``peer`` no longer holds ``zone``; the zone's row goes with its last peer."""
        i = self.row[zone]
        peers = self.peers[i]
        peers.remove(peer)
        if peers:
            return
        last = self.n - 1
        del self.row[zone]
        if i != last:  # the last row takes the place of the one removed
            moved = self.zones[last]
            self.zones[i], self.peers[i] = moved, self.peers[last]
            self.row[moved] = i
            self.bounds[:, i] = self.bounds[:, last]
            self.ahead[i], self.later[i] = self.ahead[last], self.later[last]
            ul = self.ul
            ul[i] = ul[last]
            # Every row's bit for the moved zone, row i's own included: there it is the
            # moved zone's bit for itself, never set.
            self._set_column(i, (ul[:last, last >> 3] & _masks()[last & 7]) != 0)
        self.zones.pop()
        self.peers.pop()
        self.n = last

    def ordered(self) -> list[tuple[Zone, list[str]]]:
        """Every zone with its peers, in the zones' order (by their first peer's name)."""
        rows = sorted(range(self.n), key=lambda i: self.peers[i][0])
        return [(self.zones[i], list(self.peers[i])) for i in rows]

    def meeting(self, box: Zone) -> np.ndarray:
        """Per row, whether the zone holds a point of the closed ``box`` (as can.meets:
        ``z_lo <= hi`` and ``lo < z_hi`` on every dimension, or ``z_hi`` is 1.0), for
        zones as CAN makes them (inside [0, 1], every side of positive length: see
        :func:`probe`)."""
        import numpy as np
        column, rows = probe(box)
        return np.logical_and.reduce(self.bounds[rows, :self.n] <= column, axis=0)

    def nearest(self, point: Point, avoid: Collection[str] = ()
                ) -> tuple[list[str], float, bool]:
        """The zone greedy routing takes toward ``point`` (the table must not be empty):
        of the zones nearest to it (:func:`can.distance2`, summed in the same order, so
        equal to the last bit), those that hold it if any, the first in the zones' order;
        its peers, its squared distance and whether it holds the point. Zones with a
        peer in ``avoid`` are passed over unless every zone has one. Read from the
        bounds: ``p > hi`` is ``-hi > -p``, ``p - hi`` is ``p + (-hi)`` to the bit, and
        a side closed at 1.0 (``-inf``) holds every point below it."""
        import numpy as np
        n, dims = self.n, self.dims
        lo, neg_hi = self.bounds[:dims, :n], self.bounds[dims:, :n]
        p = np.asarray(point)[:, None]
        gap = np.where(p < lo, lo - p, np.where(neg_hi > -p, p + neg_hi, 0.0))
        d2 = np.cumsum(gap * gap, axis=0)[-1]
        if avoid:  # only for a message gone round a loop: rows scanned in Python
            away = set(avoid)
            shunned = [i for i in range(n) if not away.isdisjoint(self.peers[i])]
            if len(shunned) < n:
                d2[shunned] = np.inf
        holds = np.logical_and.reduce((lo <= p) & (neg_hi < -p), axis=0)
        best = d2 == d2.min()
        if (best & holds).any():
            best &= holds
        rows = np.flatnonzero(best).tolist()
        i = rows[0] if len(rows) == 1 else min(rows, key=lambda r: self.peers[r][0])
        return self.peers[i], float(d2[i]), bool(holds[i])

    def propagation(self, region: Zone, *, paper: bool) -> list[list[str]]:
        """DeliverEvent's targets for an event whose affected region is ``region``: the
        peers of each upper-left zone that meets it, in the zones' order; with ``paper``
        (the paper's duplicate rule) not those a bottom-right zone in the region also
        reaches upper-left. The pairs of zones that rule asks of are the table's ``ul``,
        kept as rows come and go: working them out per event, (upper-left x
        bottom-right x dimensions) over arrays, was 40 % of a 10,000-peer run's time
        at half its operations (30 zones of each side a call), and zone by zone in
        Python about a third of that."""
        if not self.n:
            return []
        if self.n <= SMALL_ROWS:
            return self._small_propagation(region, paper)
        return self._array_propagation(region, paper)

    def _array_propagation(self, region: Zone, paper: bool) -> list[list[str]]:
        """:meth:`propagation` over the arrays, for a table of more than
        :data:`SMALL_ROWS` zones."""
        import numpy as np
        n = self.n
        inside = self.meeting(region)
        ahead = (inside & self.ahead[:n]).nonzero()[0]
        if paper and ahead.size:
            # The bottom-right zones in the region as one packed row, against the
            # upper-left zones' rows of ul: whole rows of bytes rather than the pairs'
            # bits one by one. Benchmarked on random tables (a third of the zones in
            # the region): 19 us a call at 300 zones where the pairs' bits took 34 and
            # the byte matrix before 23; 36 us at 1,200 zones (241, 192); 16 at 60 (22, 12).
            later = np.packbits(inside & self.later[:n])
            ahead = ahead[~(self.ul[ahead, :len(later)] & later).any(axis=1)]
        rows = sorted(ahead.tolist(), key=lambda r: self.peers[r][0])
        return [self.peers[r] for r in rows]

    def _small_propagation(self, region: Zone, paper: bool) -> list[list[str]]:
        """:meth:`propagation` zone by zone in Python, for a table of at most
        :data:`SMALL_ROWS` zones, with the same tests to the bit: a zone meets the region
        when ``z_lo <= hi`` on each dimension where the region ends below 1.0 and
        ``lo < z_hi`` (or ``z_hi`` is 1.0) on each where it starts above 0 (the rows
        :func:`probe` keeps), and the duplicate rule reads the pairs' bits of ``ul``."""
        n = self.n
        ends, starts = _sides(region)
        inside_ahead: list[int] = []
        inside_later: list[int] = []
        zones = self.zones
        # Loops rather than all() over generators: a generator's set-up cost twice a
        # zone's tests here.
        for i, ahead, later in zip(range(n), self.ahead[:n].tolist(),
                                   self.later[:n].tolist(), strict=True):
            if not (ahead or later):
                continue
            lo, hi = zones[i]
            for j, v in ends:
                if lo[j] > v:
                    break
            else:
                for j, v in starts:
                    if not (v < hi[j] or hi[j] == 1.0):
                        break
                else:
                    (inside_ahead if ahead else inside_later).append(i)
        if paper and inside_ahead and inside_later:
            ul = self.ul
            kept = []
            for a in inside_ahead:
                row = ul[a].tobytes()
                if not any(row[b >> 3] & (0x80 >> (b & 7)) for b in inside_later):
                    kept.append(a)
            inside_ahead = kept
        peers = self.peers
        return [peers[r] for r in sorted(inside_ahead, key=lambda r: peers[r][0])]


@functools.lru_cache(maxsize=4096)
def _sides(box: Zone) -> tuple[tuple[tuple[int, float], ...], tuple[tuple[int, float], ...]]:
    """Of the closed ``box``, the dimensions (with the coordinate) where it ends below 1.0
    and where it starts above 0: the only ones where a zone in [0, 1) can fail to meet
    it (see :func:`probe`). Remembered by box, as :func:`probe`."""
    lo, hi = box
    return (tuple((j, v) for j, v in enumerate(hi) if v < 1.0),
            tuple((j, v) for j, v in enumerate(lo) if v > 0.0))
