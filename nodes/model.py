"""Content-based data model: schema, predicates, filters, matching and overlap.

Pure: no I/O, clock or randomness, so routing cores may use it freely.

Readings and choices
--------------------
- A **notification** is a mapping attribute name -> value (``str``, ``int`` or
  ``float``). A **filter** is a conjunction: a tuple of :class:`Predicate`; the empty
  filter matches every notification. Several predicates on one attribute must all hold.
- A predicate on an attribute the notification does not carry fails (``matches``).
- Ordering predicates work on strings too (lexicographic, Python order), as Meghdoot's
  schema gives Symbol a range ``aaa .. zzzzz``.
- Values are never ``bool``, ``NaN`` or infinite: JSON cannot carry the last two and
  they break interval reasoning. Constants are checked when a predicate is built;
  notification values by :meth:`Schema.validate_notification`.
- Filters and notifications are assumed to follow one schema (validate them where they
  enter the system). Comparing a string with a number is an error (``TypeError`` from
  Python) rather than a silent mismatch.
- :func:`overlaps` is exact. Without a schema it reads numeric attributes as dense (any
  ``int`` or ``float``) and string attributes over all Python strings; with a schema,
  ``int`` attributes admit integers only, so ``x > 2 and x < 3`` does not overlap there.
- :func:`covers` (every notification matching one filter matches another) is exact on
  the same domains: ``x >= 3`` covers ``x > 2`` over an ``int`` attribute, not without
  a schema.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

AttrType = Literal["str", "float", "int"]
Value = str | int | float
Notification = Mapping[str, Value]

ATTR_TYPES: tuple[AttrType, ...] = ("str", "float", "int")
OPS: tuple[str, ...] = ("=", "<", "<=", ">", ">=", "range")

_MISSING = object()


class ValidationError(ValueError):
    """A predicate, filter, notification or schema that does not fit the data model."""


def _check_value(value: object, what: str) -> Value:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValidationError(f"{what} must be a str, int or float, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{what} must be finite, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Predicate:
    """``attr op value``; for ``op == 'range'``: ``value <= attr <= high`` (inclusive)."""

    attr: str
    op: str
    value: Value
    high: Value | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.attr, str) or not self.attr:
            raise ValidationError(f"attribute name must be a non-empty str, got {self.attr!r}")
        if self.op not in OPS:
            raise ValidationError(f"{self.attr}: unknown operator {self.op!r}; use one of {OPS}")
        _check_value(self.value, f"{self.attr} {self.op}: value")
        if self.op != "range":
            if self.high is not None:
                raise ValidationError(f"{self.attr} {self.op}: only 'range' takes a high bound")
            return
        if self.high is None:
            raise ValidationError(f"{self.attr} range: needs a high bound")
        _check_value(self.high, f"{self.attr} range: high")
        if isinstance(self.value, str) != isinstance(self.high, str):
            raise ValidationError(f"{self.attr} range: bounds mix str and number")
        if self.high < self.value:
            raise ValidationError(f"{self.attr} range: low {self.value!r} > high {self.high!r}")

    def holds(self, v: Value) -> bool:
        """Whether the attribute value ``v`` satisfies the predicate."""
        op = self.op
        c = self.value
        if op == "=":
            return v == c
        if op == "<":
            return v < c
        if op == "<=":
            return v <= c
        if op == ">":
            return v > c
        if op == ">=":
            return v >= c
        return c <= v <= self.high

    @property
    def interval(self) -> Interval:
        """The set of values the predicate admits, as an interval."""
        op = self.op
        c = self.value
        if op == "=":
            return Interval(c, True, c, True)
        if op == "<":
            return Interval(hi=c)
        if op == "<=":
            return Interval(hi=c, hi_closed=True)
        if op == ">":
            return Interval(lo=c)
        if op == ">=":
            return Interval(lo=c, lo_closed=True)
        return Interval(c, True, self.high, True)


Filter = tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval of one attribute's values; ``None`` bounds are unbounded."""

    lo: Value | None = None
    lo_closed: bool = False
    hi: Value | None = None
    hi_closed: bool = False

    def contains(self, v: Value) -> bool:
        """Whether ``v`` lies in the interval."""
        lo, hi = self.lo, self.hi
        if lo is not None and (v < lo or (v == lo and not self.lo_closed)):
            return False
        return hi is None or v < hi or (v == hi and self.hi_closed)

    def intersect(self, other: Interval) -> Interval:
        """The intersection (possibly empty: test with :meth:`witness`)."""
        lo, lo_closed = self.lo, self.lo_closed
        if other.lo is not None and (
            lo is None or other.lo > lo or (other.lo == lo and not other.lo_closed)
        ):
            lo, lo_closed = other.lo, other.lo_closed
        hi, hi_closed = self.hi, self.hi_closed
        if other.hi is not None and (
            hi is None or other.hi < hi or (other.hi == hi and not other.hi_closed)
        ):
            hi, hi_closed = other.hi, other.hi_closed
        return Interval(lo, lo_closed, hi, hi_closed)

    @property
    def is_point(self) -> bool:
        """Whether the interval is exactly one value (an equality constraint)."""
        return self.lo_closed and self.hi_closed and self.lo is not None and self.lo == self.hi

    def witness(self, attr_type: AttrType | None = None) -> Value | None:
        """A value in the interval, or ``None`` when it holds none.

        ``attr_type`` names the domain; ``None`` infers it from the bounds (string bounds:
        all strings; numeric or no bounds: all ints and floats). An empty result is exact
        for each domain: over strings ``(s, s + '\\x00')`` is empty, because
        ``s + '\\x00'`` is the successor of ``s``, and nothing lies below ``''``.
        """
        lo, hi = self.lo, self.hi
        if attr_type is None:
            attr_type = "str" if isinstance(lo, str) or isinstance(hi, str) else "float"
        if attr_type == "int":
            return self._int_witness()
        if lo is not None and hi is not None:
            if lo > hi:
                return None
            if lo == hi:
                return lo if self.lo_closed and self.hi_closed else None
        if lo is not None and self.lo_closed:
            return lo
        if hi is not None and self.hi_closed:
            return hi
        if attr_type == "str":
            return self._open_str_witness()
        return self._open_number_witness()

    def _int_witness(self) -> int | None:
        lo, hi = self.lo, self.hi
        first = None if lo is None else math.ceil(lo) if self.lo_closed else math.floor(lo) + 1
        last = None if hi is None else math.floor(hi) if self.hi_closed else math.ceil(hi) - 1
        if first is None:
            return 0 if last is None else last
        if last is None or first <= last:
            return first
        return None

    def _open_str_witness(self) -> str | None:
        lo, hi = self.lo, self.hi
        if lo is None:
            return "" if hi is None or hi > "" else None
        successor = lo + "\x00"
        return successor if hi is None or successor < hi else None

    def _open_number_witness(self) -> Value | None:
        lo, hi = self.lo, self.hi
        if lo is None:
            return 0 if hi is None else math.floor(hi) - 1
        above = math.floor(lo) + 1
        if hi is None or above < hi:
            return above
        # No integer fits; the float midpoint is strictly inside whenever any float is.
        mid = (lo + hi) / 2
        return mid if lo < mid < hi else None


def matches(f: Filter, notification: Notification) -> bool:
    """Whether ``notification`` satisfies every predicate of ``f``."""
    for p in f:
        v = notification.get(p.attr, _MISSING)
        if v is _MISSING or not p.holds(v):
            return False
    return True


def filter_bounds(f: Filter) -> dict[str, Interval]:
    """Per constrained attribute, the interval all of ``f``'s predicates on it admit."""
    bounds: dict[str, Interval] = {}
    for p in f:
        iv = p.interval
        prev = bounds.get(p.attr)
        if prev is not None:
            if isinstance(_bound_sample(prev), str) != isinstance(p.value, str):
                raise ValidationError(f"{p.attr}: predicates mix str and numeric constants")
            iv = prev.intersect(iv)
        bounds[p.attr] = iv
    return bounds


def _bound_sample(iv: Interval) -> Value:
    return iv.lo if iv.lo is not None else iv.hi


def overlaps(adv: Filter, sub: Filter, schema: Schema | None = None) -> bool:
    """Whether some notification could satisfy both ``adv`` and ``sub``.

    Exact for conjunctions: the two filters overlap iff, on every attribute either
    constrains, the intersection of all its constraints holds a value of the attribute's
    domain (see :meth:`Interval.witness`). An attribute only one side constrains is
    unbounded on the other.
    """
    types: Mapping[str, AttrType] = schema if schema is not None else {}
    return all(
        iv.witness(types.get(attr)) is not None for attr, iv in filter_bounds(adv + sub).items()
    )


def covers(f: Filter, g: Filter, schema: Schema | None = None) -> bool:
    """Whether every notification that matches ``g`` also matches ``f`` (``f`` covers
    ``g``; subscription covering, as Siena uses it to stop forwarding ``g``).

    Exact for conjunctions, on the domains :func:`overlaps` reads (dense numbers without
    a schema, integers for a schema's ``int`` attributes, all strings): per attribute
    ``f`` constrains, ``g``'s interval lies within ``f``'s. An attribute ``f`` leaves
    free is covered; one ``f`` constrains and ``g`` leaves free is not (``g`` then
    matches notifications without it, which ``f`` fails). A ``g`` no notification
    matches is covered by every ``f``. See :func:`bounds_cover` to reuse bounds.
    """
    return bounds_cover(filter_bounds(f), filter_bounds(g), schema)


def bounds_cover(outer: Mapping[str, Interval], inner: Mapping[str, Interval],
                 schema: Schema | None = None) -> bool:
    """:func:`covers` on bounds already computed with :func:`filter_bounds` (a routing
    core keeps them per subscription, so each test is a few comparisons)."""
    types: Mapping[str, AttrType] = schema if schema is not None else {}
    if any(iv.witness(types.get(attr)) is None for attr, iv in inner.items()):
        return True  # g matches nothing, so nothing it matches escapes f
    for attr, out in outer.items():
        inn = inner.get(attr)
        if inn is None:
            return False
        if isinstance(_bound_sample(out), str) != isinstance(_bound_sample(inn), str):
            raise ValidationError(f"{attr}: predicates mix str and numeric constants")
        if not _within(inn, out, types.get(attr)):
            return False
    return True


def _within(inn: Interval, out: Interval, attr_type: AttrType | None) -> bool:
    """Whether the non-empty interval ``inn`` lies within ``out``, over the domain."""
    if attr_type is None:
        attr_type = "str" if isinstance(_bound_sample(inn), str) else "float"
    if attr_type == "int":
        return _int_within(inn, out)
    if attr_type == "str":
        return _str_within(inn, out)
    lo_ok = out.lo is None or (inn.lo is not None and (
        inn.lo > out.lo or (inn.lo == out.lo and (out.lo_closed or not inn.lo_closed))))
    return lo_ok and (out.hi is None or (inn.hi is not None and (
        inn.hi < out.hi or (inn.hi == out.hi and (out.hi_closed or not inn.hi_closed)))))


def _int_within(inn: Interval, out: Interval) -> bool:
    # Over the integers every bound is a closed one: x > 2.5 is x >= 3.
    def lo(iv: Interval) -> int | None:
        if iv.lo is None:
            return None
        return math.ceil(iv.lo) if iv.lo_closed else math.floor(iv.lo) + 1

    def hi(iv: Interval) -> int | None:
        if iv.hi is None:
            return None
        return math.floor(iv.hi) if iv.hi_closed else math.ceil(iv.hi) - 1

    in_lo, out_lo, in_hi, out_hi = lo(inn), lo(out), hi(inn), hi(out)
    return ((out_lo is None or (in_lo is not None and in_lo >= out_lo))
            and (out_hi is None or (in_hi is not None and in_hi <= out_hi)))


def _str_within(inn: Interval, out: Interval) -> bool:
    # Over strings, s + '\x00' is the successor of s, so every interval is exactly
    # [lo, hi): x > s is x >= s + '\x00', x <= s is x < s + '\x00', and '' is the least
    # string. Then [a, b) within [c, d), for a non-empty [a, b), iff c <= a and b <= d.
    def lo(iv: Interval) -> str:
        if iv.lo is None:
            return ""
        return str(iv.lo) if iv.lo_closed else str(iv.lo) + "\x00"

    def hi(iv: Interval) -> str | None:
        if iv.hi is None:
            return None
        return str(iv.hi) + "\x00" if iv.hi_closed else str(iv.hi)

    in_hi, out_hi = hi(inn), hi(out)
    return lo(inn) >= lo(out) and (out_hi is None or (in_hi is not None and in_hi <= out_hi))


class Schema(Mapping[str, AttrType]):
    """Typed attribute schema: attribute name -> ``'str'`` | ``'float'`` | ``'int'``.

    ``float`` attributes accept int values too (JSON writes 20.0 and 20 alike for some
    producers); ``int`` attributes accept ints only. Numeric predicates may use int or
    float constants on either numeric type.
    """

    __slots__ = ("_types",)

    def __init__(self, types: Mapping[str, str]) -> None:
        for name, t in types.items():
            if not isinstance(name, str) or not name:
                raise ValidationError(f"attribute name must be a non-empty str, got {name!r}")
            if t not in ATTR_TYPES:
                raise ValidationError(f"attribute {name!r}: unknown type {t!r}; use {ATTR_TYPES}")
        self._types: dict[str, AttrType] = dict(types)

    def __getitem__(self, name: str) -> AttrType:
        return self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def __repr__(self) -> str:
        return f"Schema({self._types!r})"

    def validate_filter(self, f: Filter) -> None:
        """Raise :class:`ValidationError` unless every predicate fits the schema."""
        for p in f:
            if not isinstance(p, Predicate):
                raise ValidationError(f"filter item {p!r} is not a Predicate")
            t = self._types.get(p.attr)
            if t is None:
                raise ValidationError(f"unknown attribute {p.attr!r} (schema has {list(self)})")
            if (t == "str") != isinstance(p.value, str):
                raise ValidationError(
                    f"{p.attr} {p.op} {p.value!r}: constant does not fit attribute type {t!r}"
                )

    def validate_notification(self, notification: Mapping[str, Any]) -> None:
        """Raise :class:`ValidationError` unless every value fits its attribute's type.

        Attributes may be missing (predicates on them then fail); unknown ones may not.
        """
        for name, v in notification.items():
            t = self._types.get(name)
            if t is None:
                raise ValidationError(f"unknown attribute {name!r} (schema has {list(self)})")
            _check_value(v, f"notification attribute {name!r}")
            if (t == "str") != isinstance(v, str) or (t == "int" and not isinstance(v, int)):
                raise ValidationError(f"notification attribute {name!r}={v!r} is not {t!r}")


def filter_to_json(f: Filter) -> list[list[Value]]:
    """``[[attr, op, value], ...]``, with ``[attr, 'range', lo, hi]`` for ranges."""
    return [
        [p.attr, p.op, p.value] if p.op != "range" else [p.attr, p.op, p.value, p.high] for p in f
    ]


def filter_from_json(obj: Any) -> Filter:
    """The filter :func:`filter_to_json` wrote; :class:`ValidationError` if malformed."""
    if not isinstance(obj, Sequence) or isinstance(obj, str):
        raise ValidationError(f"a filter must be a list of predicates, got {obj!r}")
    preds = []
    for i, item in enumerate(obj):
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) not in (3, 4):
            raise ValidationError(f"predicate {i}: want [attr, op, value(, high)], got {item!r}")
        if (len(item) == 4) != (item[1] == "range"):
            raise ValidationError(f"predicate {i}: only 'range' has four items, got {item!r}")
        preds.append(Predicate(*item))
    return tuple(preds)
