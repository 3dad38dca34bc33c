"""Congestion detection: synthetic window series give the expected verdicts at the
boundaries of the overload rule (q > theta and CE >= ce_min)."""

from __future__ import annotations

import math

import pytest

from nodes.cores.congestion import LinkStatusTable, congestion_element
from nodes.cores.interface import LinkWindow


@pytest.mark.parametrize(
    ("count_in", "count_out", "queue_len", "ce"),
    [(10, 5, 3, 2.0), (5, 10, 0, 0.5), (0, 0, 0, 1.0), (3, 0, 0, math.inf),
     (0, 0, 4, math.inf), (7, 7, 20, 1.0)],
)
def test_congestion_element(count_in: int, count_out: int, queue_len: int, ce: float) -> None:
    assert congestion_element(LinkWindow(count_in, count_out, queue_len)) == ce


@pytest.mark.parametrize(
    ("window", "overloaded"),
    [
        (LinkWindow(20, 10, 10), False),  # q == theta: not beyond the tolerance
        (LinkWindow(20, 10, 11), True),  # q just above theta, queue growing
        (LinkWindow(10, 10, 50), True),  # saturated steady state: CE == 1, long queue
        (LinkWindow(9, 10, 50), False),  # draining: CE < 1
        (LinkWindow(5, 0, 11), True),  # stalled link
        (LinkWindow(0, 0, 0), False),  # idle
        (LinkWindow(100, 1, 0), False),  # bursty but nothing waiting
    ],
)
def test_overload_rule_at_the_boundaries(window: LinkWindow, overloaded: bool) -> None:
    lst = LinkStatusTable(theta=10)
    lst.update({"x": window})
    assert lst.overloaded("x") is overloaded


def test_a_series_turns_a_link_overloaded_then_free_again() -> None:
    lst = LinkStatusTable(theta=10)
    series = [(5, 5, 0), (40, 10, 30), (30, 30, 30), (10, 30, 10), (0, 10, 0)]
    verdicts = []
    for w in series:
        lst.update({"i": LinkWindow(*w)})
        verdicts.append(lst.overloaded("i"))
    assert verdicts == [False, True, True, False, False]


def test_unknown_link_is_free_and_least_loaded_orders_by_queue() -> None:
    lst = LinkStatusTable(theta=10)
    lst.update({"a": LinkWindow(1, 1, 7), "b": LinkWindow(1, 1, 2), "c": LinkWindow(1, 2, 2)})
    assert not lst.overloaded("zz")
    assert lst.least_loaded(["a", "b", "c"]) == "c"  # same queue as b, lower CE
    assert lst.least_loaded([]) is None
    with pytest.raises(ValueError):
        LinkStatusTable(theta=-1)
