"""The data model and both subscription indexes agree with brute force, exactly."""

from __future__ import annotations

import itertools
import json
import math
import random
from contextlib import nullcontext
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.matching import ColumnIndex, LinearIndex, SubscriptionIndex, columns
from nodes.model import (
    OPS,
    Filter,
    Interval,
    Predicate,
    Schema,
    ValidationError,
    filter_from_json,
    filter_to_json,
    matches,
    overlaps,
)

# Small discrete constant pools, so that random filters and notifications collide often.
INTS = list(range(-2, 7))
FLOATS = [x / 2 for x in range(-2, 13)] + [2.25]
STRS = ["", "a", "a\x00", "ab", "b", "ba", "c"]
POOLS = {"int": INTS, "float": FLOATS, "str": STRS}
# Notifications also carry values between and beyond the constants.
NOTE_VALUES = {
    "int": list(range(-4, 9)),
    "float": [x / 4 for x in range(-8, 30)] + INTS,
    "str": [*STRS, "a\x00\x00", "aa", "abc", "bb", "d"],
}

schemas = st.dictionaries(
    st.sampled_from("uvwxy"), st.sampled_from(["str", "float", "int"]), min_size=1, max_size=4
).map(Schema)


@st.composite
def predicates(draw: st.DrawFn, schema: Schema) -> Predicate:
    attr = draw(st.sampled_from(sorted(schema)))
    op = draw(st.sampled_from(OPS))
    pool = POOLS[schema[attr]]
    value = draw(st.sampled_from(pool))
    if op != "range":
        return Predicate(attr, op, value)
    high = draw(st.sampled_from([v for v in pool if v >= value]))
    return Predicate(attr, op, value, high)


def filters(schema: Schema, max_size: int = 4) -> st.SearchStrategy[Filter]:
    return st.lists(predicates(schema), max_size=max_size).map(tuple)


@st.composite
def notifications(draw: st.DrawFn, schema: Schema) -> dict:
    return {
        attr: draw(st.sampled_from(NOTE_VALUES[t]))
        for attr, t in schema.items()
        if draw(st.integers(0, 9))  # one attribute in ten is missing
    }


@st.composite
def index_scenarios(draw: st.DrawFn) -> tuple:
    schema = draw(schemas)
    subs = draw(st.lists(filters(schema), max_size=150))
    notes = draw(st.lists(notifications(schema), min_size=1, max_size=12))
    removed = draw(st.sets(st.integers(0, max(0, len(subs) - 1)), max_size=len(subs)))
    readded = draw(st.lists(filters(schema), max_size=40))
    return subs, notes, removed, readded


def _brute(subs: dict, note: dict) -> set:
    return {sid for sid, f in subs.items() if matches(f, note)}


def _check_all(subs: dict, indexes: tuple, notes: list) -> None:
    for note in notes:
        want = _brute(subs, note)
        for index in indexes:
            assert index.match(note) == want, (note, type(index).__name__)
            assert len(index) == len(subs)


# Tuning overrides for the numpy columns: small examples then grow the arrays from one
# row, and rebuild at every match with a new constant pending (or keep them pending).
TUNINGS = [
    {},
    {"_REBUILD_SLACK": 0, "_MIN_CAPACITY": 1},
    {"_REBUILD_SLACK": 0, "_PENDING_SHARE": 1, "_MIN_CAPACITY": 1},
]


@settings(max_examples=200, deadline=None)
@given(index_scenarios(), st.sampled_from(TUNINGS))
def test_indexes_equal_brute_force_through_adds_and_removes(scenario: tuple, tuning: dict) -> None:
    with patch.multiple(columns, **tuning) if tuning else nullcontext():
        _run_scenario(*scenario)


def _run_scenario(subs_list: list, notes: list, removed: set, readded: list) -> None:
    subs = {("c", i): f for i, f in enumerate(subs_list)}
    indexes = (SubscriptionIndex(), ColumnIndex(), LinearIndex())
    for index in indexes:
        for sid, f in subs.items():
            index.add(sid, f)
    _check_all(subs, indexes, notes)
    for i in sorted(removed):
        del subs[("c", i)]
        for index in indexes:
            index.remove(("c", i))
    _check_all(subs, indexes, notes)
    # Re-adding replaces: half the new filters reuse ids still present or removed.
    for j, f in enumerate(readded):
        sid = ("c", j) if j % 2 else ("d", j)
        subs[sid] = f
        for index in indexes:
            index.add(sid, f)
    _check_all(subs, indexes, notes)


def test_large_random_population_with_churn_matches_linear() -> None:
    """Thousands of filters: array growth, swap-removes, rebuilds with new constants."""
    rng = random.Random(5)
    schema = Schema({"n": "float", "k": "int", "s": "str"})
    words = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 3))) for _ in range(40)]

    def constant(attr: str) -> object:
        return {"n": rng.randint(0, 400) / 4, "k": rng.randint(0, 60), "s": rng.choice(words)}[attr]

    def random_filter() -> Filter:
        preds = []
        for attr in rng.sample(sorted(schema), rng.randint(1, 3)):
            op = rng.choice(OPS)
            a, b = sorted((constant(attr), constant(attr)))
            preds.append(Predicate(attr, op, a, b) if op == "range" else Predicate(attr, op, a))
        return tuple(preds)

    indexes = (SubscriptionIndex(), ColumnIndex())
    li = LinearIndex()
    live: list[int] = []

    def add(sid: int, f: Filter) -> None:
        for index in (*indexes, li):
            index.add(sid, f)
        live.append(sid)

    for sid in range(4000):
        add(sid, random_filter())
    notes = [{a: constant(a) for a in schema if rng.random() < 0.95} for _ in range(60)]
    for round_ in range(4):
        for note in notes:
            want = li.match(note)
            assert [index.match(note) for index in indexes] == [want, want]
        for sid in rng.sample(live, 600):  # beyond the pending share: forces rebuilds
            for index in (*indexes, li):
                index.remove(sid)
            live.remove(sid)
        for sid in range(10_000 * (round_ + 1), 10_000 * (round_ + 1) + 300):
            add(sid, random_filter())
    assert [len(index) for index in indexes] == [len(li), len(li)] == [len(live)] * 2


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_predicate_holds_iff_its_interval_contains(data: st.DataObject) -> None:
    schema = data.draw(schemas)
    p = data.draw(predicates(schema))
    v = data.draw(st.sampled_from(NOTE_VALUES[schema[p.attr]]))
    assert p.holds(v) == p.interval.contains(v)


def _candidates(t: str, constants: set) -> list:
    """Values that witness every non-empty interval with these endpoints, for domain t."""
    if t == "int":
        return list(range(-4, 9))
    if t == "float":
        # Eighth steps past the constants (quarter steps from -2 to 7.25): a
        # witness strictly between any two of them and outside every one.
        return [x / 8 for x in range(-40, 72)]
    return sorted({"", *constants, *(c + "\x00" for c in constants)})


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_overlaps_is_exact_against_brute_force(data: st.DataObject) -> None:
    schema = data.draw(schemas)
    adv = data.draw(filters(schema))
    sub = data.draw(filters(schema))
    attrs = sorted({p.attr for p in adv + sub})
    domains = []
    for a in attrs:
        bounds = {c for p in adv + sub if p.attr == a for c in (p.value, p.high)}
        domains.append(_candidates(schema[a], bounds - {None}))
    notes = (dict(zip(attrs, vs, strict=True)) for vs in itertools.product(*domains))
    brute = any(matches(adv, note) and matches(sub, note) for note in notes)
    assert overlaps(adv, sub, schema) == brute
    assert overlaps(sub, adv, schema) == brute


def test_overlaps_reads_numbers_as_dense_without_a_schema() -> None:
    adv = (Predicate("x", ">", 2),)
    sub = (Predicate("x", "<", 3),)
    assert overlaps(adv, sub)
    assert not overlaps(adv, sub, Schema({"x": "int"}))
    assert overlaps(adv, sub, Schema({"x": "float"}))


@pytest.mark.parametrize(
    ("iv", "attr_type", "empty"),
    [
        (Interval("a", False, "a\x00", False), None, True),  # "a\x00" succeeds "a"
        (Interval("a", False, "a\x00\x00", False), None, False),
        (Interval(None, False, "", False), None, True),  # nothing sorts below ""
        (Interval(None, False, "", True), None, False),
        (Interval(2, False, 3, False), "int", True),
        (Interval(2.5, True, 2.9, True), "int", True),
        (Interval(2, False, 3, False), "float", False),
        (Interval(1.0, False, math.nextafter(1.0, 2.0), False), None, True),
        (Interval(1.0, False, math.nextafter(math.nextafter(1.0, 2.0), 2.0), False), None, False),
        (Interval(2.0**53, False, 2.0**53 + 2, False), None, False),  # the int 2**53 + 1
        (Interval(5, True, 5, True), "int", False),
        (Interval(5, True, 5, False), None, True),
    ],
)
def test_interval_witness_edges(iv: Interval, attr_type: str | None, empty: bool) -> None:
    w = iv.witness(attr_type)
    assert (w is None) == empty
    if w is not None:
        assert iv.contains(w)


def test_float_interval_without_floats_is_never_matched() -> None:
    tiny = (Predicate("x", ">", 1.0), Predicate("x", "<", math.nextafter(1.0, 2.0)))
    index = SubscriptionIndex()
    index.add("tiny", tiny)
    assert len(index) == 1
    assert index.match({"x": 1.0}) == set()
    index.remove("tiny")
    assert len(index) == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_filter_json_round_trip(data: st.DataObject) -> None:
    schema = data.draw(schemas)
    f = data.draw(filters(schema, max_size=6))
    wire = json.loads(json.dumps(filter_to_json(f)))
    assert filter_from_json(wire) == f
    for p, item in zip(f, wire, strict=True):
        assert type(item[2]) is type(p.value)  # ints stay ints, floats stay floats


def test_index_basics() -> None:
    index = SubscriptionIndex()
    index.add(("s1", 1), ())  # the empty filter matches everything
    index.add(("s2", 1), (Predicate("sym", "=", "aapl"), Predicate("p", ">=", 10.0)))
    index.add(("s3", 1), (Predicate("p", "<", 5), Predicate("p", ">", 7)))  # unsatisfiable
    index.add(("s4", 1), (Predicate("p", "range", 10, 10),))  # a one-value range hashes
    assert len(index) == 4
    assert ("s3", 1) in index
    assert index.match({"sym": "aapl", "p": 10}) == {("s1", 1), ("s2", 1), ("s4", 1)}
    assert index.match({"sym": "ibm", "p": 12.0}) == {("s1", 1)}
    assert index.match({"sym": "aapl"}) == {("s1", 1)}  # missing attribute fails
    index.add(("s2", 1), (Predicate("sym", "=", "ibm"),))  # replaces
    assert index.match({"sym": "ibm", "p": 0}) == {("s1", 1), ("s2", 1)}
    for sid in [("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1)]:
        index.remove(sid)
    assert len(index) == 0
    with pytest.raises(KeyError):
        index.remove(("s1", 1))
    with pytest.raises(KeyError):
        LinearIndex().remove("nope")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("x", "!=", 1), "unknown operator"),
        (("x", "=", True), "must be a str, int or float"),
        (("x", "<", float("nan")), "finite"),
        (("x", "<", float("inf")), "finite"),
        (("x", "range", 1), "needs a high bound"),
        (("x", "range", 3, 1), "low 3 > high 1"),
        (("x", "range", "a", 1), "mix str and number"),
        (("x", "=", 1, 2), "only 'range' takes a high bound"),
        (("", "=", 1), "non-empty str"),
    ],
)
def test_bad_predicates_are_refused_clearly(args: tuple, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Predicate(*args)


def test_schema_validation_names_the_problem() -> None:
    schema = Schema({"Symbol": "str", "Volume": "int", "Close": "float"})
    schema.validate_filter((Predicate("Volume", ">=", 1e6), Predicate("Symbol", "=", "ibm")))
    with pytest.raises(ValidationError, match="unknown attribute 'Vol'"):
        schema.validate_filter((Predicate("Vol", ">=", 1),))
    with pytest.raises(ValidationError, match="does not fit attribute type 'str'"):
        schema.validate_filter((Predicate("Symbol", "=", 3),))
    with pytest.raises(ValidationError, match="does not fit attribute type 'float'"):
        schema.validate_filter((Predicate("Close", "<", "3"),))
    schema.validate_notification({"Symbol": "ibm", "Volume": 5, "Close": 3})
    with pytest.raises(ValidationError, match=r"'Volume'=5\.0 is not 'int'"):
        schema.validate_notification({"Volume": 5.0})
    with pytest.raises(ValidationError, match="must be a str, int or float"):
        schema.validate_notification({"Volume": True})
    with pytest.raises(ValidationError, match="finite"):
        schema.validate_notification({"Close": float("nan")})
    with pytest.raises(ValidationError, match="unknown attribute 'Open'"):
        schema.validate_notification({"Open": 1.0})
    with pytest.raises(ValidationError, match="unknown type"):
        Schema({"x": "decimal"})


def test_mixed_kinds_on_one_attribute_are_refused() -> None:
    with pytest.raises(ValidationError, match="mix str and numeric"):
        overlaps((Predicate("x", "=", "a"),), (Predicate("x", "<", 3),))


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("x", "must be a list"),
        ([["x", "="]], r"want \[attr, op, value"),
        ([["x", "=", 1, 2]], "only 'range' has four items"),
        ([["x", "range", 1]], "only 'range' has four items"),
        ([["x", "~", 1]], "unknown operator"),
        ([3], r"want \[attr, op, value"),
    ],
)
def test_malformed_filter_json_is_refused(obj: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        filter_from_json(obj)


@pytest.mark.parametrize("tuning", TUNINGS)
@pytest.mark.parametrize("seed", range(4))
def test_interleaved_adds_removes_and_matches_equal_brute_force(tuning: dict, seed: int) -> None:
    """Subscribe, unsubscribe and publish interleaved at random, every operator and
    several predicates on one attribute, notifications on the bounds themselves (ints and
    floats that compare equal: 2 and 2.0), between them and beyond, and attributes left
    out on either side: both indexes answer as brute force after every step."""
    rng = random.Random(seed)
    schema = {"i": "int", "f": "float", "s": "str", "q": "int"}
    constants = {"i": [-1, 0, 2, 3, 7], "f": [-0.5, 0.0, 2.0, 2.5, 6.0],
                 "s": ["", "a", "a\x00", "ab", "b"], "q": [5]}
    values = {"i": [-3, -1, 0, 1, 2, 2.0, 3, 5, 7, 9], "f": [-1, -0.5, 0, 1.25, 2, 2.5, 6.0, 8],
              "s": ["", "a", "a\x00", "aa", "ab", "abc", "b", "c"], "q": [4, 5, 6]}

    def predicate(attr: str) -> Predicate:
        op = rng.choice(OPS)
        a, b = sorted(rng.sample(constants[attr], 2) if len(constants[attr]) > 1
                      else constants[attr] * 2)
        return Predicate(attr, op, a, b) if op == "range" else Predicate(attr, op, a)

    def random_filter() -> Filter:
        return tuple(predicate(rng.choice(sorted(schema))) for _ in range(rng.randint(0, 3)))

    def note() -> dict:
        return {a: rng.choice(values[a]) for a in schema if rng.random() < 0.85}

    with patch.multiple(columns, **tuning) if tuning else nullcontext():
        indexes = (SubscriptionIndex(), ColumnIndex())
        subs: dict = {}
        for step in range(1500):
            r = rng.random()
            if r < 0.45 or not subs:
                sid = (rng.choice("xyz"), rng.randrange(120))  # re-adding replaces
                subs[sid] = random_filter()
                for index in indexes:
                    index.add(sid, subs[sid])
            elif r < 0.7:
                sid = rng.choice(sorted(subs))
                del subs[sid]
                for index in indexes:
                    index.remove(sid)
            else:
                n = note()
                want = _brute(subs, n)
                assert [index.match(n) for index in indexes] == [want, want], (step, n)
            assert [len(index) for index in indexes] == [len(subs)] * 2
            assert all(sid in index for index in indexes for sid in list(subs)[:3])
        for sid in sorted(subs):
            for index in indexes:
                index.remove(sid)
        assert [index.match(note()) for index in indexes] == [set(), set()]
