"""Meghdoot's content space and the CAN zones that tile it: pure geometry, no state.

The space (Meghdoot §3.2): a schema of n attributes, each with a domain [L, H], gives a
2n-dimensional space. Attribute i gives dimension 2i (the start of a subscription's range
on it) and 2i+1 (the end; 0-based here, the paper counts from 1). A subscription is the
point ``(l1, h1, ..., ln, hn)`` of its range bounds (an unconstrained attribute gives
``(L, H)``, an equality ``(v, v)``); an event with values ``c`` is the point ``(c1, c1,
..., cn, cn)`` (an attribute it does not carry: ``(L, H)``), and the subscriptions it
matches lie in its *affected region*: start dimensions in ``[L, ci]``, end dimensions in
``[ci, H]``. That region's corner ``(c1, c1, ...)`` is the event point itself, its
"bottom-right" corner in the paper's pictures (start dimensions grow to the right, end
dimensions grow upwards, as upper_left reads them).

Readings and choices (ours; the paper leaves them open):

- **Coordinates are normalised** to [0, 1] per dimension (``(x - L) / (H - L)``, clamped),
  so that routing distances weigh a price and a volume alike.
- **Embeddings** map values to numbers preserving order (never strictly: values that
  differ only beyond the embedding's precision meet at one point; placement uses the
  point, the final match the filter, so this costs extra candidates, never a miss):
  ``num`` is the value; ``symbol`` reads the first ``SYMBOL_WIDTH`` characters as base-27
  digits (``a``..``z`` = 1..26, padding 0; a character below ``a`` is 0 and ends the
  word, one above ``z`` is 26 and fills the rest with 26, which keeps the order for any
  string); ``date`` is the ISO date's day number.
- **Zones** are boxes ``(lo, hi)`` of normalised coordinates, half-open ``[lo, hi)`` per
  dimension except at the domain's top (1.0), which belongs to the zone that reaches it.
  Splits cut a zone in two at one coordinate, so zones stay boxes and two zones that share
  a face share its coordinate exactly (no float tolerance is needed).
- **Neighbours** (CAN): zones that abut along exactly one dimension and overlap (with
  positive length) in every other.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import json
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.model import Filter, Value, filter_bounds

Point = tuple[float, ...]
Zone = tuple[Point, Point]  # (lo, hi), normalised coordinates
EMBEDDINGS = ("num", "symbol", "date")
SYMBOL_WIDTH = 5  # Meghdoot's Symbol domain is aaa .. zzzzz
_BASE = 27
# Events whose geometry a space remembers: far more than are ever spreading at once.
GEOMETRY_KEPT = 4096


def _symbol_number(s: str) -> int:
    digits: list[int] = []
    for ch in s[:SYMBOL_WIDTH]:
        code = ord(ch) - 96
        if code < 1:  # below 'a': 0, and the word ends here
            break
        if code > 26:  # above 'z': the largest word with this prefix
            digits += [26] * (SYMBOL_WIDTH - len(digits))
            break
        digits.append(code)
    digits += [0] * (SYMBOL_WIDTH - len(digits))
    n = 0
    for d in digits:
        n = n * _BASE + d
    return n


def _date_number(s: str) -> int:
    return datetime.date.fromisoformat(s).toordinal()


@dataclass(frozen=True)
class Attribute:
    """One attribute of the space: its name, embedding and domain (in its own values)."""

    name: str
    embedding: str
    lo: Value
    hi: Value

    def number(self, v: Value) -> float:
        """``v`` embedded (not normalised)."""
        if self.embedding == "symbol":
            return float(_symbol_number(str(v)))
        if self.embedding == "date":
            return float(_date_number(str(v)))
        return float(v)


class Space:
    """The 2n-dimensional space of a list of attributes (module docstring)."""

    def __init__(self, attributes: Sequence[Attribute]) -> None:
        if not attributes:
            raise ValueError("a content space needs at least one attribute")
        self.attributes = tuple(attributes)
        self.names = tuple(a.name for a in attributes)
        self.dims = 2 * len(attributes)
        self._lo: list[float] = []
        self._span: list[float] = []
        # event_geometry's answers by event name, oldest first
        self._geometry: dict[str, tuple[Mapping[str, Value], Point, Zone]] = {}
        for a in attributes:
            if a.embedding not in EMBEDDINGS:
                raise ValueError(f"attribute {a.name}: embedding {a.embedding!r} not in "
                                 f"{EMBEDDINGS}")
            lo, hi = a.number(a.lo), a.number(a.hi)
            if not hi > lo:
                raise ValueError(f"attribute {a.name}: empty domain {a.lo!r} .. {a.hi!r}")
            self._lo.append(lo)
            self._span.append(hi - lo)

    def unit(self, i: int, v: Value) -> float:
        """Attribute ``i``'s value ``v`` normalised to [0, 1] (clamped)."""
        x = (self.attributes[i].number(v) - self._lo[i]) / self._span[i]
        return min(1.0, max(0.0, x))

    def sub_point(self, f: Filter) -> Point:
        """The point of subscription ``f``: per attribute, its range's start and end."""
        bounds = filter_bounds(f)
        out: list[float] = []
        for i, name in enumerate(self.names):
            iv = bounds.get(name)
            lo = 0.0 if iv is None or iv.lo is None else self.unit(i, iv.lo)
            hi = 1.0 if iv is None or iv.hi is None else self.unit(i, iv.hi)
            out += (lo, max(lo, hi))  # an empty range still gets a point in the space
        return tuple(out)

    def event_point(self, attrs: Mapping[str, Value]) -> Point:
        """The point of an event (the bottom-right corner of its affected region)."""
        out: list[float] = []
        for i, name in enumerate(self.names):
            v = attrs.get(name)
            out += (0.0, 1.0) if v is None else (self.unit(i, v),) * 2
        return tuple(out)

    def affected_region(self, attrs: Mapping[str, Value]) -> Zone:
        """The closed box holding the points of every subscription the event may match."""
        return self._region_at(self.event_point(attrs))

    def _region_at(self, p: Point) -> Zone:
        """The affected region of the event whose point is ``p``."""
        lo = tuple(0.0 if j % 2 == 0 else p[j] for j in range(self.dims))
        hi = tuple(p[j] if j % 2 == 0 else 1.0 for j in range(self.dims))
        return lo, hi

    def event_geometry(self, key: str, attrs: Mapping[str, Value]) -> tuple[Point, Zone]:
        """The event point and affected region of the event named ``key``, remembered for
        the last :data:`GEOMETRY_KEPT` events (with their attributes, so that another run
        in the same process reusing a name is not given the old answer): in the
        simulator every peer an event reaches asks the one shared space, and working them
        out again at each was a fifth of a 2,000-peer run's time."""
        found = self._geometry.get(key)
        if found is None or not (found[0] is attrs or found[0] == attrs):
            point = self.event_point(attrs)
            found = self._geometry[key] = (attrs, point, self._region_at(point))
            if len(self._geometry) > GEOMETRY_KEPT:
                del self._geometry[next(iter(self._geometry))]  # the oldest
        return found[1], found[2]

    def to_json(self) -> str:
        """The space as a JSON list ``[[name, embedding, lo, hi], ...]`` (a core param)."""
        return json.dumps([[a.name, a.embedding, a.lo, a.hi] for a in self.attributes])

    @staticmethod
    def from_json(text: str) -> Space:
        """The space :meth:`to_json` wrote; ValueError names what is malformed."""
        try:
            items = json.loads(text)
            return Space([Attribute(str(n), str(e), lo, hi) for n, e, lo, hi in items])
        except (TypeError, ValueError) as e:
            raise ValueError(f"space: want [[name, embedding, lo, hi], ...], got "
                             f"{text[:60]!r} ({e})") from None


# Meghdoot's stock schema (§5.1); the workload's prices start at 0.01 and volumes at 100.
STOCK_SPACE = Space([
    Attribute("Date", "date", "1998-01-02", "2002-12-31"),
    Attribute("Symbol", "symbol", "aaa", "zzzzz"),
    Attribute("Open", "num", 0.0, 500.0),
    Attribute("High", "num", 0.0, 500.0),
    Attribute("Low", "num", 0.0, 500.0),
    Attribute("Close", "num", 0.0, 500.0),
    Attribute("Volume", "num", 0, 310_000_000),
])
SPACES: dict[str, Space] = {"stock": STOCK_SPACE}


def space_named(name: str) -> Space:
    """A registered space, or one given as JSON (:meth:`Space.to_json`)."""
    if name in SPACES:
        return SPACES[name]
    if name.lstrip().startswith("["):
        return Space.from_json(name)
    raise ValueError(f"unknown space {name!r}; allowed: {', '.join(SPACES)} or a JSON list")


# ---- zones ------------------------------------------------------------------------------


def whole(dims: int) -> Zone:
    """The zone of the whole space."""
    return (0.0,) * dims, (1.0,) * dims


def contains(z: Zone, p: Point) -> bool:
    """Whether point ``p`` belongs to zone ``z`` (half-open, closed at the top)."""
    lo, hi = z
    return all(a <= x and (x < b or b == 1.0) for a, x, b in zip(lo, p, hi, strict=True))


def meets(z: Zone, box: Zone) -> bool:
    """Whether zone ``z`` holds a point of the closed ``box``."""
    zl, zh = z
    bl, bh = box
    return all(a <= d and (c < b or b == 1.0)
               for a, b, c, d in zip(zl, zh, bl, bh, strict=True))


def inside(a: Zone, b: Zone) -> bool:
    """Whether zone ``a`` lies within zone ``b`` (equal zones included)."""
    return all(bl <= al and ah <= bh for al, ah, bl, bh in zip(a[0], a[1], b[0], b[1],
                                                              strict=True))


def distance2(z: Zone, p: Point) -> float:
    """Squared Euclidean distance from ``p`` to the box of ``z`` (0 inside it)."""
    s = 0.0
    for a, x, b in zip(z[0], p, z[1], strict=True):
        d = a - x if x < a else x - b if x > b else 0.0
        s += d * d
    return s


def abutment(a: Zone, b: Zone) -> tuple[int, int] | None:
    """``(dim, side)`` if ``b`` is a CAN neighbour of ``a``: they touch on dimension ``dim``
    (``side`` -1: ``b`` below ``a``, +1: above) and overlap in every other; else None."""
    found: tuple[int, int] | None = None
    for j, (al, ah, bl, bh) in enumerate(zip(a[0], a[1], b[0], b[1], strict=True)):
        if bh == al or bl == ah:
            if found is not None:
                return None  # touching on two dimensions: a corner, not a face
            found = (j, -1 if bh == al else 1)
        elif not (bl < ah and al < bh):
            return None
    return found


def upper_left(n: Zone, z: Zone) -> bool:
    """Whether neighbour ``n`` lies upper-left of ``z`` (Meghdoot's DeliverEvent): below
    ``z`` on a start dimension ("left") or above it on an end dimension ("up")."""
    ab = abutment(z, n)
    return ab is not None and (ab[1] == -1) == (ab[0] % 2 == 0)


def bottom_right(n: Zone, z: Zone) -> bool:
    """Whether neighbour ``n`` lies bottom-right of ``z`` (the mirror of :func:`upper_left`)."""
    ab = abutment(z, n)
    return ab is not None and (ab[1] == 1) == (ab[0] % 2 == 0)


def split(z: Zone, dim: int, at: float) -> tuple[Zone, Zone]:
    """``z`` cut at coordinate ``at`` of ``dim``: (the lower part, the upper part)."""
    lo, hi = z
    if not lo[dim] < at < hi[dim]:
        raise ValueError(f"cut {at} outside ({lo[dim]}, {hi[dim]}) on dimension {dim}")
    upper_lo = (*lo[:dim], at, *lo[dim + 1:])
    lower_hi = (*hi[:dim], at, *hi[dim + 1:])
    return (lo, lower_hi), (upper_lo, hi)


def merged(a: Zone, b: Zone) -> Zone | None:
    """The box ``a`` and ``b`` make together (CAN's takeover of a sibling), or None when
    they are no neighbours or differ on a dimension other than the one they touch on."""
    ab = abutment(a, b)
    if ab is None or any((a[0][j], a[1][j]) != (b[0][j], b[1][j])
                         for j in range(len(a[0])) if j != ab[0]):
        return None
    return (tuple(map(min, a[0], b[0])), tuple(map(max, a[1], b[1])))


def volume(z: Zone) -> float:
    """The share of the space ``z`` covers."""
    return math.prod(b - a for a, b in zip(z[0], z[1], strict=True))


def reflection(p: Point) -> Point:
    """``p`` mirrored in the space's diagonal hyperplane (Meghdoot §4.3): each attribute's
    start and end swapped. A subscription's reflection lies in the lower-right half (start
    above end), where no subscription lies."""
    return tuple(p[j ^ 1] for j in range(len(p)))


def step_out(z: Zone) -> tuple[int, float] | None:
    """Where a point of ``z`` steps out of it when its reflection falls in it (§4.3):
    ``(dim, coordinate)``, the same for every point of ``z``. The paper moves "along the
    increasing values of all odd dimensions" (1-based: our start dimensions 2i) to a
    neighbour zone, and when they reach the domain's top, "towards the decreasing even
    dimensional coordinate values" (2-d: right, else down). Ours: onto the top face of
    the first start dimension on which ``z`` ends below the domain's top, else just below
    the bottom face of the first end dimension on which it starts above 0, so the point
    stays in the lower-right half; a zone that reaches the top of every start dimension
    and the bottom of every end one (the paper stops there) steps out of its first other
    face, below a start dimension's bottom or onto an end dimension's top. None for the
    whole space (no other zone)."""
    lo, hi = z
    starts, ends = range(0, len(lo), 2), range(1, len(lo), 2)
    for j in starts:
        if hi[j] < 1.0:
            return j, hi[j]
    for j in ends:
        if lo[j] > 0.0:
            return j, math.nextafter(lo[j], 0.0)  # the largest coordinate below the face
    for j in starts:
        if lo[j] > 0.0:
            return j, math.nextafter(lo[j], 0.0)
    for j in ends:
        if hi[j] < 1.0:
            return j, hi[j]
    return None


def stepped_out(z: Zone, p: Point) -> Point | None:
    """``p`` moved out of ``z`` as :func:`step_out` says (None for the whole space)."""
    out = step_out(z)
    if out is None:
        return None
    dim, at = out
    return (*p[:dim], at, *p[dim + 1:])


def mirror_point(z: Zone, p: Point) -> Point | None:
    """Where the mirror copy of a subscription at ``p``, stored in ``z``, is filed: its
    reflection, or, when that lies in ``z`` too, the reflection stepped out of ``z``
    (:func:`step_out`); never in ``z``. None when ``z`` is the whole space."""
    r = reflection(p)
    return r if not contains(z, r) else stepped_out(z, r)


def mirror_regions(z: Zone) -> list[Zone]:
    """The closed boxes that hold every mirror copy of a subscription stored in ``z``: the
    reflection of its box, and the face its own reflections step out to (if any)."""
    boxes = [(reflection(z[0]), reflection(z[1]))]
    lo, hi = stepped_out(z, z[0]), stepped_out(z, z[1])
    if lo is not None and hi is not None:
        boxes.append((lo, hi))
    return boxes


def halving_cut(z: Zone) -> tuple[int, float]:
    """CAN's geometric cut: the middle of the longest side (the first of equals)."""
    sides = [b - a for a, b in zip(z[0], z[1], strict=True)]
    dim = max(range(len(sides)), key=lambda j: (sides[j], -j))
    return dim, (z[0][dim] + z[1][dim]) / 2


def corner_cut(dim: int, below: float, above: float) -> bool:
    """Whether a cut between the subscription values ``below`` and ``above`` on ``dim``
    parts the subscriptions at the corner every event's affected region holds (0 on a
    start dimension, 1 on an end one: the attribute's range left open there) from the
    rest. Such a cut lies half way across the gap between the corner and the nearest
    value a subscription names: the half it bounds excludes only the events whose value
    lies in that gap, and the other half holds subscriptions every event meets in that
    plane, so it can never exclude one there. A cut between two values subscriptions
    name parts events where the subscriptions themselves differ. ``split_rule:
    balanced_separating`` leaves corner cuts out."""
    return below == 0.0 if dim % 2 == 0 else above == 1.0


def balanced_cut(z: Zone, points: Sequence[Point], *, separating: bool = False
                 ) -> tuple[int, float] | None:
    """A cut that leaves half of ``points`` on either side (Meghdoot's split "so that the
    two partitions have even distribution of subscriptions"): of all cuts half way between
    two consecutive distinct values on one dimension, the most balanced; of equally
    balanced cuts, the one on the zone's longest side (then the first, by dimension and
    value). None when no dimension holds two distinct values.

    The tie matters: a subscription that names one symbol has the same value on the
    symbol's low and high dimensions, so both cut it alike. Always taking the first
    would slice the zones along the low dimension only, each slice reaching to the top
    of the high one, and an event would meet every slice below its symbol; taking the
    longer side alternates the two, as CAN's cyclic order of cuts does (sixteen such
    zones: an event meets 3.8 of them on average, against 8.5 slices; tests/test_can.py).

    With ``separating``, :func:`corner_cut` cuts are left out (``split_rule:
    balanced_separating``)."""
    best: tuple[int, float, int, float] | None = None  # (imbalance, -side, dim, at)
    n = len(points)
    for dim in range(len(z[0])):
        values = sorted(p[dim] for p in points)
        distinct = sorted(set(values))
        side = z[1][dim] - z[0][dim]
        for v, above in itertools.pairwise(distinct):
            at = (v + above) / 2
            if not z[0][dim] < at < z[1][dim] or (separating and corner_cut(dim, v, above)):
                continue
            rank = (abs(n - 2 * bisect.bisect_right(values, v)), -side, dim, at)
            if best is None or rank < best:
                best = rank
    return None if best is None else (best[2], best[3])


SPLIT_RULES = ("balanced", "halving", "balanced_separating")


def split_cut(rule: str, z: Zone, points: Sequence[Point]) -> tuple[int, float]:
    """Where a Meghdoot join splits ``z``, whose subscriptions lie at ``points``
    (``split_rule``, one of :data:`SPLIT_RULES`): ``balanced``, the most balanced cut
    (:func:`balanced_cut`, the paper's "even distribution of subscriptions"); ``halving``,
    CAN's geometric cut, always; ``balanced_separating``, the most balanced cut that is
    not a :func:`corner_cut` (the paper's even distribution, cut only where it can part
    the events as well as the subscriptions), else the most balanced. Each falls back to
    :func:`halving_cut` when no cut divides the points."""
    if rule not in SPLIT_RULES:
        raise ValueError(f"split_rule: {rule!r} not in {SPLIT_RULES}")
    cut = None
    if rule == "balanced_separating":
        cut = balanced_cut(z, points, separating=True)
    if cut is None and rule != "halving":
        cut = balanced_cut(z, points)
    return cut if cut is not None else halving_cut(z)


def zone_to_json(z: Zone) -> list[list[float]]:
    """``[lo, hi]`` lists (JSON carries floats exactly: shared faces stay shared)."""
    return [list(z[0]), list(z[1])]


def zone_digest(z: Zone) -> int:
    """A 32-bit fingerprint of ``z`` (CRC-32 of its coordinates as doubles): a peer's
    final record names the zone it holds for each neighbour by it, so a run can count the
    entries that are stale without writing a million zones out."""
    return zlib.crc32(struct.pack(f"{2 * len(z[0])}d", *z[0], *z[1]))


_ZONES: dict[Zone, Zone] = {}  # one object per distinct zone read (see zone_from_json)
_ZONES_MAX = 1 << 20


def zone_from_json(obj: Any) -> Zone:
    """The zone :func:`zone_to_json` wrote. Equal zones come back as one object: every
    neighbour of a zone files it (14-dimensional zones are 360 bytes each, and 10,000
    peers hold over a million neighbour entries); the table of them is emptied past
    ``_ZONES_MAX`` entries, which only costs sharing."""
    z = (tuple(map(float, obj[0])), tuple(map(float, obj[1])))
    if len(_ZONES) >= _ZONES_MAX:
        _ZONES.clear()
    return _ZONES.setdefault(z, z)
