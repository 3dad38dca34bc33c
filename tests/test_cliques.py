"""Kyra's server cliques (nodes.cores.cliques): the size and distance bounds hold, no two
cliques could still merge, the paper's endless-loop input ends, the heap version agrees
with a naive transcription of Fig. 5, and the paper's Fig. 4 grouping comes out."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.cores.cliques import server_cliques

Matrix = dict[str, dict[str, float]]


def _symmetric(names: list[str], latency: Mapping[frozenset[str], float]) -> Matrix:
    """A full matrix (diagonal 0) from one latency per unordered pair."""
    return {a: {b: 0.0 if a == b else latency[frozenset((a, b))] for b in names}
            for a in names}


def _linkage(lat: Matrix, x: list[str], y: list[str]) -> float:
    """Complete linkage, naively: the largest latency between a server of x and one of y."""
    return max(lat[a][b] for a in x for b in y)


def _fig5(lat: Matrix, max_distance_ms: float, max_size: int, *, fixed: bool = True,
          max_passes: int = 10_000) -> list[list[str]] | None:
    """Fig. 5 transcribed line by line, every distance recomputed on every pass, ties by
    the cliques' smallest names. ``fixed``: a pass that merges nothing ends the loop (our
    fix); without it, the paper's text; ``None`` when it is still looping after
    ``max_passes`` passes. Unreachable pairs (inf) never merge, as in the module."""
    cliques = [[s] for s in sorted(lat)]
    passes = 0
    while len(cliques) > 1:
        passes += 1
        if passes > max_passes:
            return None
        pairs = sorted((_linkage(lat, x, y), x[0], y[0], i, j)
                       for (i, x), (j, y) in itertools.combinations(enumerate(cliques), 2))
        merged = False
        for d, _, _, i, j in pairs:
            if d > max_distance_ms or d == math.inf:
                return sorted(cliques)
            if len(cliques[i]) + len(cliques[j]) <= max_size:
                union = sorted(cliques[i] + cliques[j])
                cliques = sorted([c for k, c in enumerate(cliques) if k not in (i, j)]
                                 + [union])  # so x[0] < y[0] in every pair above
                merged = True
                break
        if fixed and not merged:
            return sorted(cliques)
    return sorted(cliques)


# Small inputs with many ties: a few distinct latencies (and unreachable pairs), names
# whose sorted order differs from the order they are drawn in.
NAMES = st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=3), unique=True,
                 max_size=12)
LATENCY = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0]),
                    st.floats(0, 10, allow_nan=False),
                    st.just(math.inf))
MAX_DISTANCE = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0, math.inf]),
                         st.floats(0, 12, allow_nan=False))
MAX_SIZE = st.integers(1, 6)


@st.composite
def matrices(draw: st.DrawFn) -> Matrix:
    names = draw(NAMES)
    latency = {frozenset(p): draw(LATENCY) for p in itertools.combinations(names, 2)}
    return _symmetric(names, latency)


@settings(max_examples=300)
@given(matrices(), MAX_DISTANCE, MAX_SIZE)
def test_a_partition_into_cliques_of_at_most_max_size(lat: Matrix, max_d: float,
                                                       max_size: int) -> None:
    cliques = server_cliques(lat, max_d, max_size)
    flat = [s for c in cliques for s in c]
    assert sorted(flat) == sorted(lat) and len(flat) == len(set(flat))
    assert all(1 <= len(c) <= max_size for c in cliques)
    assert all(c == sorted(c) for c in cliques)
    assert [c[0] for c in cliques] == sorted(c[0] for c in cliques)


@settings(max_examples=300)
@given(matrices(), MAX_DISTANCE, MAX_SIZE)
def test_every_pair_in_a_clique_is_within_the_bound(lat: Matrix, max_d: float,
                                                    max_size: int) -> None:
    for c in server_cliques(lat, max_d, max_size):
        for a, b in itertools.combinations(c, 2):
            assert lat[a][b] <= max_d and lat[a][b] < math.inf, (a, b, lat[a][b])


@settings(max_examples=300)
@given(matrices(), MAX_DISTANCE, MAX_SIZE)
def test_no_two_cliques_could_still_merge(lat: Matrix, max_d: float, max_size: int) -> None:
    cliques = server_cliques(lat, max_d, max_size)
    for x, y in itertools.combinations(cliques, 2):
        d = _linkage(lat, x, y)
        assert len(x) + len(y) > max_size or d > max_d or d == math.inf, (x, y, d)


@settings(max_examples=400)
@given(matrices(), MAX_DISTANCE, MAX_SIZE)
def test_agrees_with_the_naive_fig5(lat: Matrix, max_d: float, max_size: int) -> None:
    assert server_cliques(lat, max_d, max_size) == _fig5(lat, max_d, max_size)


def test_agrees_with_the_naive_fig5_on_sixty_random_points() -> None:
    rng = random.Random(7)
    points = {f"s{i:02d}": (rng.uniform(0, 100), rng.uniform(0, 100)) for i in range(60)}
    lat = {a: {b: math.dist(p, q) for b, q in points.items()} for a, p in points.items()}
    for max_d, max_size in [(15.0, 4), (30.0, 8), (math.inf, 5), (50.0, 60)]:
        assert server_cliques(lat, max_d, max_size) == _fig5(lat, max_d, max_size)


@settings(max_examples=100)
@given(matrices(), MAX_DISTANCE, MAX_SIZE, st.randoms(use_true_random=False))
def test_the_mappings_order_does_not_matter(lat: Matrix, max_d: float, max_size: int,
                                            rnd: random.Random) -> None:
    def shuffled(m: Mapping[str, float]) -> list[str]:
        keys = list(m)
        rnd.shuffle(keys)
        return keys

    reordered = {a: {b: lat[a][b] for b in shuffled(lat[a])} for a in shuffled(lat)}
    assert server_cliques(reordered, max_d, max_size) == server_cliques(lat, max_d, max_size)


def test_the_input_that_loops_the_papers_pseudocode_ends() -> None:
    # All three pairs within the bound; after A+B, the only pair left is size-blocked, so
    # Fig. 5's `for` ends without merging or returning, and its `while` runs again.
    lat = _symmetric(["A", "B", "C"], {frozenset(p): 1.0 for p in ["AB", "AC", "BC"]})
    assert _fig5(lat, 5.0, 2, fixed=False) is None  # the paper's text: still looping
    assert server_cliques(lat, 5.0, 2) == [["A", "B"], ["C"]]


# Fig. 4: three close groups, far apart.
FIG4_GROUPS = [["A", "B", "C"], ["D", "E"], ["F", "G", "H"]]


def _fig4_latencies() -> Matrix:
    names = [s for g in FIG4_GROUPS for s in g]
    group = {s: i for i, g in enumerate(FIG4_GROUPS) for s in g}
    rng = random.Random(4)
    latency = {frozenset((a, b)): rng.uniform(1.0, 5.0) if group[a] == group[b]
               else rng.uniform(40.0, 80.0) for a, b in itertools.combinations(names, 2)}
    return _symmetric(names, latency)


@pytest.mark.parametrize("max_d", [10.0, math.inf])
def test_the_papers_fig4_cliques(max_d: float) -> None:
    # 10 ms: the distance bound separates the groups; inf: only the size bound does, and
    # that is again the paper's endless-loop case (every pair in range, all blocked).
    lat = _fig4_latencies()
    assert server_cliques(lat, max_d, 3) == FIG4_GROUPS
    assert _fig5(lat, max_d, 3) == FIG4_GROUPS
    if max_d == math.inf:
        assert _fig5(lat, max_d, 3, fixed=False) is None


def test_ties_go_to_the_smallest_names() -> None:
    # Every pair at 1 ms but a-b at 9: (a, c) comes before (a, d) and (b, c).
    latency = {frozenset(p): 1.0 for p in itertools.combinations("abcd", 2)}
    latency[frozenset("ab")] = 9.0
    assert server_cliques(_symmetric(list("abcd"), latency), 5.0, 2) == [["a", "c"],
                                                                        ["b", "d"]]
    # Three at the same distance, room for two: a and b go together.
    lat = _symmetric(list("cba"), {frozenset(p): 2.0 for p in ["ab", "ac", "bc"]})
    assert server_cliques(lat, 2.0, 2) == [["a", "b"], ["c"]]


def test_merges_follow_complete_not_single_linkage() -> None:
    # A chain a-b-c at 1 ms steps, a-c at 3: with a bound of 2, c may not join {a, b}.
    lat = _symmetric(list("abc"), {frozenset("ab"): 1.0, frozenset("bc"): 1.5,
                                   frozenset("ac"): 3.0})
    assert server_cliques(lat, 2.0, 3) == [["a", "b"], ["c"]]
    assert server_cliques(lat, 3.0, 3) == [["a", "b", "c"]]


def test_unreachable_servers_never_share_a_clique() -> None:
    lat = _symmetric(list("abc"), {frozenset("ab"): 1.0, frozenset("bc"): math.inf,
                                   frozenset("ac"): 2.0})
    assert server_cliques(lat, math.inf, 3) == [["a", "b"], ["c"]]


def test_edge_sizes() -> None:
    assert server_cliques({}, 1.0, 1) == []
    assert server_cliques({"a": {"a": 0.0}}, 0.0, 1) == [["a"]]
    lat = _symmetric(list("ab"), {frozenset("ab"): 0.0})
    assert server_cliques(lat, 0.0, 1) == [["a"], ["b"]]
    assert server_cliques(lat, 0.0, 2) == [["a", "b"]]


def test_last_bit_asymmetry_is_tolerated_and_the_larger_figure_counts() -> None:
    lat = {"a": {"a": 0.0, "b": 1.0}, "b": {"a": 1.0 + 1e-12, "b": 0.0}}
    assert server_cliques(lat, 1.0 + 1e-12, 2) == [["a", "b"]]
    assert server_cliques(lat, 1.0, 2) == [["a"], ["b"]]


def _two() -> Matrix:
    return {"a": {"a": 0.0, "b": 1.0}, "b": {"a": 1.0, "b": 0.0}}


def _with(a: str, b: str, value: object) -> Matrix:
    m: dict = _two()
    m[a][b] = value
    return m


@pytest.mark.parametrize(("lat", "max_d", "max_size", "message"), [
    ({"a": {"a": 0.0, "b": 1.0}, "b": {"b": 0.0}}, 1.0, 2, "not square"),
    ({"a": {"a": 0.0, "b": 1.0}, "b": {"a": 1.0, "b": 0.0, "c": 1.0}}, 1.0, 2, "not square"),
    ({"a": {"a": 0.0}, "b": {"a": 1.0, "b": 0.0}}, 1.0, 2, "not square"),
    (_with("a", "b", 2.0), 1.0, 2, "not symmetric"),
    (_with("a", "b", math.inf), 1.0, 2, "not symmetric"),
    (_with("a", "b", -1.0), 1.0, 2, ">= 0"),
    (_with("a", "a", -1.0), 1.0, 2, ">= 0"),
    (_with("a", "b", math.nan), 1.0, 2, ">= 0"),
    (_with("a", "b", "1.0"), 1.0, 2, ">= 0"),
    (_with("a", "b", True), 1.0, 2, ">= 0"),
    (_two(), -0.5, 2, "max_distance_ms"),
    (_two(), math.nan, 2, "max_distance_ms"),
    (_two(), 1.0, 0, "max_size"),
    (_two(), 1.0, 2.0, "max_size"),
    (_two(), 1.0, True, "max_size"),
])
def test_bad_inputs_are_one_line_errors(lat: Matrix, max_d: float, max_size: int,
                                        message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        server_cliques(lat, max_d, max_size)
    assert "\n" not in str(info.value)
