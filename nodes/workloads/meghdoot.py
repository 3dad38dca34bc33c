"""Meghdoot's workload (§5.1): one stream of subscriptions and stock events over a CAN
that grows by joins, deterministic from a seed.

Readings (ours, where the paper is silent; ``../shared/READINGS-WAVE2.md`` §1.4):

- **Peers**: the first by name is the first peer (it owns the whole space, see
  :mod:`nodes.cores.meghdoot`); the others JOIN in the order given, each through a live
  peer drawn at random.
- **The stream** interleaves subscriptions and events at random (a step is a
  subscription with probability remaining subscriptions / remaining steps), one step
  every ``step_s``; after each step a new peer joins with probability
  ``join_probability`` until every peer has, half a step later. The paper's is 10 % of
  its stream, whose events ours stand for at ``events_scale`` (its standard stream:
  14,029 subscriptions and 115,000 events); ``join_probability="paper"`` scales the 10 %
  by the paper's stream length (our subscriptions plus our events over
  ``events_scale``) over ours (capped at 1), so that a peer bound is reached at the same
  share of the stream as in the paper (10,000 peers of the standard stream at about
  77 %, of 150,000 subscriptions at 38 %): fewer joins per step would leave a scaled
  stream short of the bound.
  ``order: subs_first`` puts every subscription before every event instead, and
  ``order: joins_with_events`` too, with joins only after events (a reading of the
  paper's "a new peer joins the system after each simulation event" in which its
  simulation events are the published events: every subscription is stored at the first
  peer, and the CAN grows over the events; ``join_probability="paper"`` then scales the
  10 % by the paper's events over ours).
- **Subscriptions** follow Meghdoot's five templates (:data:`MEGHDOOT_TEMPLATES`), each
  from its own client ``s00000..`` on a live peer drawn at random.
- **Events**, from a client ``e-<peer>`` on a live peer drawn at random, carry the seven
  attributes of the space. ``uniform`` (the paper's synthetic set): Date uniform over the
  ``n_days`` trading days, Symbol over the ``n_symbols`` symbols, each price uniform on
  [0, 500] independently (Low and High need not bracket Open and Close) and Volume
  uniform on [0, 310,000,000]; the templates' parameters are drawn alike. ``skewed`` (the
  paper's real set, which needs the network we do not have): the quotes of the symbols'
  series (:func:`nodes.workloads.stock.quote_series`, most prices between $10 and $30),
  a random sample of them in date order, and template parameters drawn from the series.
- The paper's real set holds 100 stocks over 2/Jan/98 .. 31/Dec/02 (115,353 events); the
  defaults are 100 symbols and 1,154 trading days (115,400 quotes).

- **Crashes and leaves** (ours; the paper has none in its runs): ``crash_fraction`` and
  ``leave_fraction`` of the peers but the first (each rounded; together at most all of
  them) crash (CRASH from ``j-<peer>``) or leave gracefully (LEAVE), one at a time, in a
  seeded order of crashes and leaves spread evenly over the steps from the share
  ``churn_from`` of the stream on (churner ``i`` of ``c`` after step ``S + (i + 1)(N -
  S) // (c + 1)``, ``S = floor(churn_from N)`` of the ``N`` steps), never after the
  last. Each goes while the stream holds still: ``churn_lead_s`` after its step (half a
  step, for the step's join, plus ``lead_s``, for a load report of the zone as it then
  is) the churner, drawn (seeded) from the live peers but the first, goes; the next step
  comes ``repair_s`` later after a crash (the longest its zone's takeover takes), or
  ``churn_lead_s`` after a leave. So no event is in flight while a peer goes or while
  its zone is repaired, as in the paper's sequential simulator, and the oracle owes
  each member exactly the events that match its subscriptions: a peer that went draws
  no later operation (each step's peer is drawn from the live ones), so every event is
  published by a member, and its own clients' subscriptions count no more. The run
  plan takes ``lead_s`` and ``repair_s`` from the algorithms' params
  (:func:`nodes.cores.meghdoot_repair.churn_times_s`). With both fractions 0 the
  stream is the one it always was.

``meta`` records ``membership`` (every peer from its join on, until it crashed or left),
``settle_s`` (half a step: a subscription counts for events published from the next step
on), the counts, the join times, the stream's order, and the churn: its fractions,
``crashes_s`` and ``leaves_s`` (peer -> time), ``churn_from``, ``churn_lead_s`` and
``repair_s``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from nodes.messages import Message, MsgType
from nodes.model import Filter, Predicate, Schema, filter_to_json
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import (
    MEGHDOOT_TEMPLATES,
    Stock,
    meghdoot_subscription,
    quote_series,
    stock_universe,
    trading_days,
    weighted_choice,
)

MEGHDOOT_SCHEMA = Schema({"Date": "str", "Symbol": "str", "Open": "float", "High": "float",
                          "Low": "float", "Close": "float", "Volume": "int"})
EVENT_SETS = ("uniform", "skewed")
CHURN_FIELDS = ("crash_fraction", "leave_fraction", "churn_from")
ORDERS = ("interleaved", "subs_first", "joins_with_events")
PRICE_TOP, VOLUME_TOP = 500.0, 310_000_000
PAPER_JOIN_PROBABILITY = 0.1
N_SYMBOLS, N_DAYS = 100, 1154  # the paper's real set: 100 stocks over 1,154 trading days


def uniform_subscription(rng: random.Random, symbols: list[str]) -> tuple[str, Filter]:
    """One subscription of the paper's synthetic set: a template drawn by its
    probability, its parameters uniform (module docstring); (template, filter)."""
    template = weighted_choice(rng, MEGHDOOT_TEMPLATES)
    if template == "volume_ge":
        return template, (Predicate("Volume", ">=", rng.randint(0, VOLUME_TOP)),)
    head = Predicate("Symbol", "=", rng.choice(symbols))
    price = round(rng.uniform(0, PRICE_TOP), 2)
    if template == "symbol_open_range":
        lo, hi = sorted((price, round(rng.uniform(0, PRICE_TOP), 2)))
        return template, (head, Predicate("Open", "range", lo, hi))
    if template == "symbol_low_le":
        return template, (head, Predicate("Low", "<=", price))
    if template == "symbol_high_ge":
        return template, (head, Predicate("High", ">=", price))
    return template, (head, Predicate("Volume", ">=", rng.randint(0, VOLUME_TOP)))


def uniform_event(rng: random.Random, symbols: list[str], days: list[str]
                  ) -> dict[str, Any]:
    """One event of the paper's synthetic set: every attribute uniform (module docstring)."""
    return {"Date": rng.choice(days), "Symbol": rng.choice(symbols),
            **{a: round(rng.uniform(0, PRICE_TOP), 2) for a in ("Open", "High", "Low", "Close")},
            "Volume": rng.randint(0, VOLUME_TOP)}


def meghdoot_workload(
    peers: Sequence[str],
    n_subscriptions: int,
    n_events: int,
    *,
    seed: int,
    events: str = "uniform",
    join_probability: float | str = "paper",
    events_scale: float = 1.0,
    order: str = "interleaved",
    step_s: float = 0.1,
    n_symbols: int = N_SYMBOLS,
    n_days: int = N_DAYS,
    crash_fraction: float = 0.0,
    leave_fraction: float = 0.0,
    churn_from: float = 0.5,
    lead_s: float = 2.0,
    repair_s: float = 9.0,
) -> Workload:
    """The workload of the module docstring; ValueError (one line) for bad arguments.
    ``lead_s`` and ``repair_s`` default to what the core's default params call for."""
    _check_args(peers, n_subscriptions, n_events, events, order, events_scale)
    churn = _Churn(peers, n_subscriptions + n_events, seed, step_s, crash_fraction,
                   leave_fraction, churn_from, lead_s, repair_s)
    if join_probability == "paper":
        join_probability = _paper_join_probability(order, n_subscriptions, n_events,
                                                    events_scale)
    if (isinstance(join_probability, str) or not 0 < join_probability <= 1 or step_s <= 0
            or not 1 <= n_symbols <= 500 or n_days < 1):
        raise ValueError("need 0 < join_probability <= 1 (or 'paper'), step_s > 0, "
                         "1 <= n_symbols <= 500, n_days >= 1")
    rng = random.Random(f"{seed}/meghdoot")
    stocks = sorted(rng.sample(stock_universe(seed), n_symbols), key=lambda s: s.symbol)
    days = trading_days(n_days)
    draws = _Draws(rng, [s.symbol for s in stocks], days)
    if events == "skewed":
        draws.draw_quotes(stocks, seed, n_events)

    overlay = _Overlay(peers)
    clients: dict[str, str] = {}
    ops: list[ClientOp] = []
    subs_left, events_left = n_subscriptions, n_events
    templates: dict[str, int] = {}
    for step in range(n_subscriptions + n_events):
        t = churn.step_s(step)
        peer = rng.choice(overlay.live)
        if order != "interleaved":
            is_sub = subs_left > 0
        else:
            is_sub = rng.random() * (subs_left + events_left) < subs_left
        if is_sub:
            k = n_subscriptions - subs_left
            subs_left -= 1
            template, f = draws.subscription()
            templates[template] = templates.get(template, 0) + 1
            client = f"s{k:06d}"
            msg = Message(MsgType.SUBSCRIBE, 1, client, payload={"filter": filter_to_json(f)})
        else:
            k = n_events - events_left
            events_left -= 1
            event = draws.event(k)
            client = f"e-{peer}"
            msg = Message(MsgType.PUBLISH, k + 1, client, payload={"attrs": event})
        clients[client] = peer
        ops.append(ClientOp(t, client, peer, msg))
        if (overlay.waiting() and not (is_sub and order == "joins_with_events")
                and rng.random() < join_probability):
            overlay.join(rng, t + step_s / 2, clients, ops)
        churn.after(step, t, overlay, ops)
    meta = {
        "system": "meghdoot", "seed": seed, "events": events, "order": order,
        "n_peers_bound": overlay.bound, "n_peers": len(overlay.joins) + 1,
        "n_subscriptions": n_subscriptions, "n_events": n_events,
        "join_probability": join_probability, "step_s": step_s,
        "n_symbols": n_symbols, "n_days": n_days, "templates": dict(sorted(templates.items())),
        "membership": overlay.membership, "settle_s": step_s / 2,
        "join_times_s": overlay.joins, **churn.meta(),
    }
    return Workload(MEGHDOOT_SCHEMA, clients, tuple(ops), meta)


def _check_args(peers: Sequence[str], n_subscriptions: int, n_events: int, events: str,
                order: str, events_scale: float) -> None:
    """ValueError (one line) for a bad event set, order, peer list, count or scale."""
    if events not in EVENT_SETS or order not in ORDERS:
        raise ValueError(f"events must be one of {EVENT_SETS} and order one of {ORDERS}, "
                         f"got {events!r}, {order!r}")
    if not peers or len(set(peers)) != len(peers) or n_subscriptions < 0 or n_events < 0:
        raise ValueError("need distinct peers (at least one), n_subscriptions >= 0, "
                         "n_events >= 0")
    if not events_scale > 0:
        raise ValueError(f"need events_scale > 0, got {events_scale}")


def _paper_join_probability(order: str, n_subscriptions: int, n_events: int,
                            events_scale: float) -> float:
    """The paper's join probability per step, spread over our steps so that as many
    peers join over the run as over the paper's (module docstring)."""
    if order == "joins_with_events":
        paper_steps, ours = n_events / events_scale, n_events
    else:
        paper_steps = n_subscriptions + n_events / events_scale
        ours = n_subscriptions + n_events
    return min(1.0, PAPER_JOIN_PROBABILITY * paper_steps / max(1, ours))


class _Draws:
    """The subscriptions and events of the run, drawn from its one generator: uniform,
    or (after :meth:`draw_quotes`) the skewed set over real quotes."""

    def __init__(self, rng: random.Random, symbols: list[str], days: list[str]) -> None:
        self._rng, self._symbols, self._days = rng, symbols, days
        self._by_symbol: dict[str, list[dict[str, Any]]] = {}
        self._quotes: list[dict[str, Any]] = []
        self._volumes = [0]
        self._skewed = False

    def draw_quotes(self, stocks: Sequence[Stock], seed: int, n_events: int) -> None:
        """Draw the skewed set's ``n_events`` events from the symbols' quotes, in date
        order; ValueError when the quotes are fewer."""
        attrs = tuple(MEGHDOOT_SCHEMA)
        for s in stocks:
            self._by_symbol[s.symbol] = [{a: q[a] for a in attrs}
                                         for q in quote_series(s, self._days, seed)]
        pool = [q for qs in self._by_symbol.values() for q in qs]
        self._quotes = sorted(self._rng.sample(pool, min(n_events, len(pool))),
                              key=lambda q: (q["Date"], q["Symbol"]))
        if n_events > len(pool):
            raise ValueError(f"n_events {n_events} > the {len(pool)} quotes of "
                             f"{len(stocks)} symbols over {len(self._days)} days")
        self._volumes = [q["Volume"] for q in self._quotes] or [0]
        self._skewed = True

    def subscription(self) -> tuple[str, Filter]:
        """The next subscription: (template, filter)."""
        if self._skewed:
            return meghdoot_subscription(self._rng, self._by_symbol, self._symbols,
                                         self._volumes)
        return uniform_subscription(self._rng, self._symbols)

    def event(self, k: int) -> dict[str, Any]:
        """Event ``k`` of the run."""
        if self._skewed:
            return self._quotes[k]
        return uniform_event(self._rng, self._symbols, self._days)


class _Overlay:
    """The peers as they join and go: the first is there from 0, the others join in name
    order through a live peer drawn at random; who is live, when each joined (and went)."""

    def __init__(self, peers: Sequence[str]) -> None:
        first = self.first = min(peers)
        self.bound = len(peers)
        self._joining = iter([p for p in peers if p != first])
        self.live = [first]
        self.joins: list[float] = []
        self.membership: dict[str, list[list[float | None]]] = {first: [[0.0, None]]}

    def waiting(self) -> bool:
        """Whether some peer has yet to join."""
        return len(self.joins) + 1 < self.bound

    def join(self, rng: random.Random, t_s: float, clients: dict[str, str],
             ops: list[ClientOp]) -> None:
        """The next peer joins at ``t_s``: its joining client and JOIN operation."""
        name = next(self._joining)
        boot = rng.choice(self.live)
        clients[f"j-{name}"] = name
        ops.append(ClientOp(t_s, f"j-{name}", name, Message(
            MsgType.JOIN, 1, f"j-{name}", payload={"bootstrap": boot})))
        self.live.append(name)
        self.joins.append(t_s)
        self.membership[name] = [[t_s, None]]


class _Churn:
    """The crashes and leaves of the module docstring: when each goes, and the stream's
    clock, which holds still around each (drawn from a generator of its own, so that
    with no churn every other draw is what it always was)."""

    def __init__(self, peers: Sequence[str], n_steps: int, seed: int, step_s: float,
                 crash_fraction: float, leave_fraction: float, churn_from: float,
                 lead_s: float, repair_s: float) -> None:
        _check_churn(crash_fraction, leave_fraction, churn_from, lead_s, repair_s)
        others = len(peers) - 1
        n_leave = round(leave_fraction * others)
        n_crash = min(round(crash_fraction * others), others - n_leave)
        self._rng = random.Random(f"{seed}/meghdoot-churn")
        kinds = [MsgType.CRASH] * n_crash + [MsgType.LEAVE] * n_leave
        self._rng.shuffle(kinds)
        if kinds and n_steps < 2:
            raise ValueError("crash_fraction: a peer goes between two steps, and "
                             f"the stream has {n_steps}; allowed: 0 (and leave_fraction 0) "
                             "with fewer than 2 steps")
        start = math.floor(churn_from * n_steps)
        self._at: dict[int, list[MsgType]] = {}
        for i, kind in enumerate(kinds):
            step = min(start + (i + 1) * (n_steps - start) // (len(kinds) + 1), n_steps - 2)
            self._at.setdefault(step, []).append(kind)
        self.fractions = (crash_fraction, leave_fraction, churn_from)
        self.step, self.lead_s, self.repair_s = step_s, step_s / 2 + lead_s, repair_s
        self._offset = 0.0  # how long the stream has held still so far
        self.gone: dict[str, tuple[MsgType, float]] = {}

    def step_s(self, step: int) -> float:
        """The time of ``step``: ``step * step_s`` plus the holds so far (rounded to the
        nanosecond then, so that the log reads 12.3, not 12.300000000000002)."""
        t = step * self.step
        return round(t + self._offset, 9) if self._offset else t

    def after(self, step: int, t_s: float, overlay: _Overlay, ops: list[ClientOp]) -> None:
        """The peers that go after ``step`` (at ``t_s``), one after another."""
        for kind in self._at.get(step, ()):
            candidates = sorted(p for p in overlay.live if p != overlay.first)
            if not candidates:
                raise ValueError(f"churn_from: after step {step} no peer but the "
                                 "first is live to go; allowed: a later churn_from, lower "
                                 "crash_fraction and leave_fraction, or more joins")
            peer = self._rng.choice(candidates)
            t_go = round(t_s + self.lead_s, 9)
            ops.append(ClientOp(t_go, f"j-{peer}", peer, Message(kind, 2, f"j-{peer}")))
            overlay.live.remove(peer)
            overlay.membership[peer][-1][1] = t_go
            self.gone[peer] = (kind, t_go)
            t_s = t_go + (self.repair_s if kind is MsgType.CRASH else self.lead_s)
            self._offset = t_s - (step + 1) * self.step

    def meta(self) -> dict[str, Any]:
        crash, leave, churn_from = self.fractions
        return {"crash_fraction": crash, "leave_fraction": leave, "churn_from": churn_from,
                "churn_lead_s": self.lead_s, "repair_s": self.repair_s,
                **{key: {p: t for p, (k, t) in sorted(self.gone.items()) if k is kind}
                   for key, kind in (("crashes_s", MsgType.CRASH), ("leaves_s", MsgType.LEAVE))}}


def _check_churn(crash_fraction: float, leave_fraction: float, churn_from: float,
                 lead_s: float, repair_s: float) -> None:
    """ValueError (one line naming the argument: ``name: bad value ...; allowed: ...``)
    for a bad fraction, share or time."""
    def share(v: object) -> bool:
        return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and 0 <= v <= 1)

    for name, value in (("crash_fraction", crash_fraction), ("leave_fraction", leave_fraction),
                        ("churn_from", churn_from)):
        if not share(value):
            raise ValueError(f"{name}: bad value {value!r}; allowed: a number in [0, 1]")
    if crash_fraction + leave_fraction > 1:
        raise ValueError(f"crash_fraction: bad value {crash_fraction!r} with "
                         f"leave_fraction {leave_fraction!r}; allowed: the two sum to at "
                         "most 1 (of the peers but the first)")
    for name, value in (("lead_s", lead_s), ("repair_s", repair_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: bad value {value!r}; allowed: a number of s >= 0")
