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

``meta`` records ``membership`` (every peer from its join on), ``settle_s`` (half a step:
a subscription counts for events published from the next step on), the counts, the
join times and the stream's order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from nodes.messages import Message, MsgType
from nodes.model import Filter, Predicate, Schema, filter_to_json
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import (
    MEGHDOOT_TEMPLATES,
    meghdoot_subscription,
    quote_series,
    stock_universe,
    trading_days,
    weighted_choice,
)

MEGHDOOT_SCHEMA = Schema({"Date": "str", "Symbol": "str", "Open": "float", "High": "float",
                          "Low": "float", "Close": "float", "Volume": "int"})
EVENT_SETS = ("uniform", "skewed")
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
) -> Workload:
    """The workload of the module docstring; ValueError (one line) for bad arguments."""
    if events not in EVENT_SETS or order not in ORDERS:
        raise ValueError(f"events must be one of {EVENT_SETS} and order one of {ORDERS}, "
                         f"got {events!r}, {order!r}")
    if not peers or len(set(peers)) != len(peers) or n_subscriptions < 0 or n_events < 0:
        raise ValueError("need distinct peers (at least one), n_subscriptions >= 0, "
                         "n_events >= 0")
    steps = n_subscriptions + n_events
    if not events_scale > 0:
        raise ValueError(f"need events_scale > 0, got {events_scale}")
    if join_probability == "paper":
        if order == "joins_with_events":
            paper_steps, ours = n_events / events_scale, n_events
        else:
            paper_steps, ours = n_subscriptions + n_events / events_scale, steps
        join_probability = min(1.0, PAPER_JOIN_PROBABILITY * paper_steps / max(1, ours))
    if (isinstance(join_probability, str) or not 0 < join_probability <= 1 or step_s <= 0
            or not 1 <= n_symbols <= 500 or n_days < 1):
        raise ValueError("need 0 < join_probability <= 1 (or 'paper'), step_s > 0, "
                         "1 <= n_symbols <= 500, n_days >= 1")
    rng = random.Random(f"{seed}/meghdoot")
    stocks = sorted(rng.sample(stock_universe(seed), n_symbols), key=lambda s: s.symbol)
    symbols = [s.symbol for s in stocks]
    days = trading_days(n_days)
    attrs = tuple(MEGHDOOT_SCHEMA)
    quotes: list[dict[str, Any]] = []
    by_symbol: dict[str, list[dict[str, Any]]] = {}
    if events == "skewed":
        for s in stocks:
            by_symbol[s.symbol] = [{a: q[a] for a in attrs}
                                   for q in quote_series(s, days, seed)]
        pool = [q for qs in by_symbol.values() for q in qs]
        quotes = sorted(rng.sample(pool, min(n_events, len(pool))),
                        key=lambda q: (q["Date"], q["Symbol"]))
        if n_events > len(pool):
            raise ValueError(f"n_events {n_events} > the {len(pool)} quotes of "
                             f"{n_symbols} symbols over {n_days} days")
    volumes = [q["Volume"] for q in quotes] or [0]

    first = min(peers)
    joining = iter([p for p in peers if p != first])
    n_peers = len(peers)
    live = [first]
    clients: dict[str, str] = {}
    ops: list[ClientOp] = []
    joins: list[float] = []
    membership: dict[str, list[list[float | None]]] = {first: [[0.0, None]]}
    subs_left, events_left = n_subscriptions, n_events
    templates: dict[str, int] = {}
    for step in range(steps):
        t = step * step_s
        peer = rng.choice(live)
        if order != "interleaved":
            is_sub = subs_left > 0
        else:
            is_sub = rng.random() * (subs_left + events_left) < subs_left
        if is_sub:
            k = n_subscriptions - subs_left
            subs_left -= 1
            if events == "skewed":
                template, f = meghdoot_subscription(rng, by_symbol, symbols, volumes)
            else:
                template, f = uniform_subscription(rng, symbols)
            templates[template] = templates.get(template, 0) + 1
            client = f"s{k:06d}"
            clients[client] = peer
            msg = Message(MsgType.SUBSCRIBE, 1, client, payload={"filter": filter_to_json(f)})
        else:
            k = n_events - events_left
            events_left -= 1
            event = quotes[k] if events == "skewed" else uniform_event(rng, symbols, days)
            client = f"e-{peer}"
            clients[client] = peer
            msg = Message(MsgType.PUBLISH, k + 1, client, payload={"attrs": event})
        ops.append(ClientOp(t, client, peer, msg))
        if (len(live) < n_peers and not (is_sub and order == "joins_with_events")
                and rng.random() < join_probability):
            name = next(joining)
            t_join = t + step_s / 2
            boot = rng.choice(live)
            clients[f"j-{name}"] = name
            ops.append(ClientOp(t_join, f"j-{name}", name,
                                Message(MsgType.JOIN, 1, f"j-{name}",
                                        payload={"bootstrap": boot})))
            live.append(name)
            joins.append(t_join)
            membership[name] = [[t_join, None]]
    meta = {
        "system": "meghdoot", "seed": seed, "events": events, "order": order,
        "n_peers_bound": n_peers, "n_peers": len(live), "n_subscriptions": n_subscriptions,
        "n_events": n_events, "join_probability": join_probability, "step_s": step_s,
        "n_symbols": n_symbols, "n_days": n_days, "templates": dict(sorted(templates.items())),
        "membership": membership, "settle_s": step_s / 2, "join_times_s": joins,
    }
    return Workload(MEGHDOOT_SCHEMA, clients, tuple(ops), meta)
