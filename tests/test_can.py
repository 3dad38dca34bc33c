"""Meghdoot's content space and CAN zone geometry (nodes.cores.can): embeddings keep
order, a matching subscription's point lies in the event's affected region, and the
neighbour and direction tests on hand-made zones."""

from __future__ import annotations

import datetime
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.cores import can
from nodes.model import Predicate, matches

LETTERS = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=130), max_size=8)


@given(LETTERS, LETTERS)
def test_symbol_embedding_keeps_string_order(a: str, b: str) -> None:
    lo, hi = sorted((a, b))
    attr = can.Attribute("S", "symbol", "aaa", "zzzzz")
    assert attr.number(lo) <= attr.number(hi)


@given(st.dates(datetime.date(1998, 1, 2), datetime.date(2002, 12, 31)),
       st.dates(datetime.date(1998, 1, 2), datetime.date(2002, 12, 31)))
def test_date_embedding_is_the_day_number(a: datetime.date, b: datetime.date) -> None:
    space = can.STOCK_SPACE
    assert (space.unit(0, a.isoformat()) < space.unit(0, b.isoformat())) == (a < b)


_OPS = st.sampled_from(["=", "<", "<=", ">", ">=", "range"])
_VALUES = st.floats(0, 100, allow_nan=False).map(lambda x: round(x, 1))
SPACE = can.Space([can.Attribute("x", "num", 0, 100), can.Attribute("y", "num", 0, 100),
                   can.Attribute("s", "symbol", "aaa", "zzzzz")])


@st.composite
def predicates(draw: st.DrawFn) -> tuple[Predicate, ...]:
    out = []
    for attr in draw(st.sets(st.sampled_from(["x", "y", "s"]), min_size=1)):
        op = draw(_OPS)
        if attr == "s":
            v = draw(st.sampled_from(["aab", "abc", "ibm", "zz"]))
            out.append(Predicate(attr, "=" if op == "range" else op, v))
        elif op == "range":
            lo, hi = sorted((draw(_VALUES), draw(_VALUES)))
            out.append(Predicate(attr, op, lo, hi))
        else:
            out.append(Predicate(attr, op, draw(_VALUES)))
    return tuple(out)


@settings(max_examples=300)
@given(predicates(), _VALUES, _VALUES, st.sampled_from(["aab", "abc", "ibm", "zz", "zzzzz"]))
def test_a_matching_subscription_lies_in_the_affected_region(f, x: float, y: float, s: str
                                                             ) -> None:
    event = {"x": x, "y": y, "s": s}
    point = SPACE.sub_point(f)
    region = SPACE.affected_region(event)
    assert all(0.0 <= c <= 1.0 for c in point)
    if matches(f, event):
        assert all(lo <= c <= hi for lo, c, hi in zip(region[0], point, region[1],
                                                      strict=True))


def test_an_events_geometry_is_remembered_by_name_and_attributes() -> None:
    space = can.space_named("stock")
    quote = {"Date": "2001-03-05", "Symbol": "ibm", "Open": 90.0, "High": 93.5,
             "Low": 89.0, "Close": 92.0, "Volume": 4_000_000}
    want = (space.event_point(quote), space.affected_region(quote))
    assert space.event_geometry("e-p1:1", quote) == want
    assert space.event_geometry("e-p1:1", dict(quote)) == want  # the same, remembered
    # Another run in the same process names another event alike: not the old answer.
    other = {**quote, "Symbol": "aapl"}
    assert space.event_geometry("e-p1:1", other) == (space.event_point(other),
                                                     space.affected_region(other)) != want
    for i in range(can.GEOMETRY_KEPT + 10):  # bounded
        space.event_geometry(f"e-p2:{i}", quote)
    assert len(space._geometry) == can.GEOMETRY_KEPT


def test_neighbours_and_directions_on_a_2d_space() -> None:
    # One attribute: dimension 0 is the range start ("right" grows), 1 its end ("down").
    z = ((0.5, 0.0), (1.0, 0.5))
    left = ((0.0, 0.0), (0.5, 0.5))  # below z on the start dimension: upper-left
    below_end = ((0.5, 0.5), (1.0, 1.0))  # above z on the end dimension: "up", upper-left
    corner = ((0.0, 0.5), (0.5, 1.0))  # touches z at a corner only: no neighbour
    assert can.abutment(z, left) == (0, -1) and can.upper_left(left, z)
    assert can.abutment(z, below_end) == (1, 1) and can.upper_left(below_end, z)
    assert can.abutment(z, corner) is None and not can.upper_left(corner, z)
    assert can.bottom_right(z, left) and can.bottom_right(z, below_end)
    lower, upper = can.split(can.whole(2), 0, 0.25)
    assert can.abutment(lower, upper) == (0, 1)
    assert can.volume(lower) + can.volume(upper) == pytest.approx(1.0)
    assert can.contains(upper, (1.0, 1.0)) and not can.contains(lower, (0.25, 0.0))
    with pytest.raises(ValueError, match="outside"):
        can.split(lower, 0, 0.25)


def test_the_balanced_cut_halves_the_points_on_the_most_balanced_dimension() -> None:
    z = can.whole(2)
    points = [(0.1, 0.5), (0.2, 0.5), (0.3, 0.5), (0.9, 0.5)]  # dimension 1: one value
    dim, at = can.balanced_cut(z, points)
    assert dim == 0 and 0.2 < at < 0.3
    assert can.balanced_cut(z, [(0.5, 0.5)] * 3) is None
    assert can.halving_cut(((0.0, 0.0), (0.5, 1.0))) == (1, 0.5)


def test_equally_balanced_cuts_alternate_so_events_meet_fewer_zones() -> None:
    # One attribute, as a subscription naming one value puts it: low = high, so a cut on
    # either dimension is as balanced. Slicing the low one only leaves every zone
    # reaching to the top of the high one, and an event meets every slice below its
    # value; taking the longer side of a tie alternates the two, as CAN's cuts do.
    points = [(i / 17, i / 17) for i in range(1, 17)]
    zones = [can.whole(2)]
    for _ in range(4):  # four rounds of balanced splits: sixteen zones, one point each
        nxt = []
        for z in zones:
            dim, at = can.balanced_cut(z, [p for p in points if can.contains(z, p)])
            nxt += can.split(z, dim, at)
        zones = nxt
    edges = [0.0, *((points[i][0] + points[i + 1][0]) / 2 for i in range(15)), 1.0]
    slices = [((lo, 0.0), (hi, 1.0)) for lo, hi in itertools.pairwise(edges)]
    values = [i / 100 for i in range(1, 100)]

    def mean_met(zs: list[can.Zone]) -> float:
        return sum(sum(can.meets(z, ((0.0, v), (v, 1.0))) for z in zs) for v in values) / 99

    assert all(sum(can.contains(z, p) for p in points) == 1 for z in zones)
    assert mean_met(zones) < mean_met(slices) / 2  # 3.8 zones against 8.5
    assert {can.balanced_cut(z, [(0.1, 0.1), (0.9, 0.9)])[0]
            for z in (((0.0, 0.0), (0.5, 1.0)), ((0.0, 0.0), (1.0, 0.5)))} == {1, 0}


def test_the_split_rules_cut_where_they_say() -> None:
    # One attribute: two subscriptions leave its start open (the corner every event's
    # region holds), two start at 0.02 and 0.03. The most balanced cut parts the open
    # ones from the rest, half way to the corner (0.01); balanced_separating takes the
    # most balanced cut between two values subscriptions name (0.025), which parts the
    # events between them; halving cuts the middle of the longest side.
    z = can.whole(2)
    points = [(0.0, 1.0), (0.0, 1.0), (0.02, 1.0), (0.03, 1.0)]
    assert can.corner_cut(0, 0.0, 0.02) and can.corner_cut(1, 0.04, 1.0)
    assert not can.corner_cut(0, 0.02, 0.03) and not can.corner_cut(1, 0.0, 0.04)
    assert can.split_cut("balanced", z, points) == can.balanced_cut(z, points) == (0, 0.01)
    assert can.split_cut("balanced_separating", z, points) == (0, 0.025)
    assert can.split_cut("halving", z, points) == can.halving_cut(z) == (0, 0.5)
    # Only corner cuts: the most balanced of them; no cut at all: halving, for each rule.
    assert can.split_cut("balanced_separating", z, points[1:3]) == (0, 0.01)
    for rule in can.SPLIT_RULES:
        assert can.split_cut(rule, z, [(0.2, 0.7)] * 3) == (0, 0.5)
    with pytest.raises(ValueError, match="split_rule"):
        can.split_cut("even", z, points)


def test_a_mirror_copy_goes_to_the_reflection_or_right_else_down_on_a_2d_space() -> None:
    """The paper's Fig. 8 on one attribute (x: the range's start, y: its end): a copy at
    the subscription's reflection; one whose reflection lies in its own zone moves right
    into the next zone, or down when its zone reaches the right edge."""
    left, right = can.split(can.whole(2), 0, 0.5)
    assert can.mirror_point(left, (0.1, 0.9)) == (0.9, 0.1)  # reflection in another zone
    assert can.mirror_point(left, (0.1, 0.3)) == (0.5, 0.1)  # S' in its zone: right
    assert can.contains(right, (0.5, 0.1))
    bottom, top = can.split(right, 1, 0.5)
    below = math.nextafter(0.5, 0.0)
    assert can.mirror_point(top, (0.6, 0.8)) == (0.8, below)  # at the right edge: down
    assert can.contains(bottom, (0.8, below)) and not can.contains(top, (0.8, below))
    assert can.mirror_point(can.whole(2), (0.1, 0.3)) is None  # no other zone
    # Where a zone's copies lie: the reflection of its box, and the face it steps out to.
    assert can.mirror_regions(left) == [((0.0, 0.0), (1.0, 0.5)), ((0.5, 0.0), (0.5, 1.0))]
    assert can.mirror_regions(top) == [((0.5, 0.5), (1.0, 1.0)), ((0.5, below), (1.0, below))]


def test_a_bad_space_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="embedding"):
        can.Space([can.Attribute("x", "words", 0, 1)])
    with pytest.raises(ValueError, match="empty domain"):
        can.Space([can.Attribute("x", "num", 1, 1)])
    with pytest.raises(ValueError, match="unknown space"):
        can.space_named("stocks")
    assert can.space_named(SPACE.to_json()).names == ("x", "y", "s")
