"""Stock-quote workloads (OctopiA and Meghdoot), deterministic from a seed.

Everything is generated offline from ``random.Random`` instances seeded with strings
derived from ``seed`` (``f"{seed}/universe"``, ``f"{seed}/series/{symbol}"``, ...), so
a workload never depends on global random state, hash seeds or the network, and one
symbol's series does not change when the number of publishers does.

In short (every reading of the papers, with its figures: docs/design/stock-workload.md):

- **Data**: Meghdoot's ``Date, Symbol, Open, High, Low, Close, Volume`` plus ``Exchange``,
  ``Change`` and ``Trades`` (OctopiA's 10 attributes); ``Date`` is ISO, trading days from
  1998-01-02; 500 symbols; prices in cents, from a mean-reverting log walk (about 88 % in
  [$10, $30]).
- **Publishers** ``p0..`` quote contiguous blocks of the sorted symbols (one symbol each
  past 500); a publisher's advertisement covers what it publishes.
- **Subscribers** ``s0..``, one subscription each: Meghdoot's five templates
  (:data:`MEGHDOOT_TEMPLATES`) with ``mode='meghdoot'``; with ``mode='octopia'``, one of
  about ``selectivity`` under OctopiA's two readings (``selectivity_of``): ``advertisements``
  (the default: a ``Symbol`` window over ``k`` adjacent publishers' blocks) or
  ``publications`` (windows on :data:`OCTOPIA_ATTRS` calibrated on the workload's own
  publications). Selectivity and ``adv_overlap`` are measured into ``meta``, never assumed.
- **Timing** (seconds): advertisements over ``[start_s, start_s + advertise_spread_s)``,
  subscriptions a gap later over ``subscribe_spread_s``, publications from ``start_s + 2
  gap`` at ``publish_rate_hz`` per publisher, their starts spread over
  ``publish_spread_share`` of a period; each spread is at most half a gap, so every
  subscription is in place before the first publication.
"""

from __future__ import annotations

import bisect
import datetime
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.messages import Message, MsgType
from nodes.model import (
    Filter,
    Predicate,
    Schema,
    Value,
    filter_from_json,
    filter_to_json,
    overlaps,
)
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.oracle import expected_deliveries

STOCK_SCHEMA = Schema(
    {
        "Date": "str",
        "Symbol": "str",
        "Open": "float",
        "High": "float",
        "Low": "float",
        "Close": "float",
        "Volume": "int",
        "Exchange": "str",
        "Change": "float",
        "Trades": "int",
    }
)
N_SYMBOLS = 500
PRICE_MIN, PRICE_MAX = 0.01, 500.0  # Meghdoot: Open..Close FLOAT 0..500
VOLUME_MIN, VOLUME_MAX = 100, 310_000_000  # Meghdoot: Volume INTEGER 0..310000000
FIRST_DAY = datetime.date(1998, 1, 2)  # Meghdoot's data starts 2/Jan/98

MEGHDOOT_TEMPLATES: tuple[tuple[str, float], ...] = (
    ("symbol_open_range", 0.20),  # Symbol = P1 and P2 <= Open <= P3
    ("symbol_low_le", 0.35),  # Symbol = P1 and Low <= P2
    ("symbol_high_ge", 0.35),  # Symbol = P1 and High >= P2
    ("symbol_volume_ge", 0.05),  # Symbol = P1 and Volume >= P2
    ("volume_ge", 0.05),  # Volume >= P1
)
OCTOPIA_ATTRS: tuple[str, ...] = (
    "Symbol",
    "Date",
    "Open",
    "High",
    "Low",
    "Close",
    "Volume",
    "Change",
    "Trades",
)
MODES = ("octopia", "meghdoot")
# What OctopiA's "2 % selectivity" is a share of (docs/design/stock-workload.md); the first
# is the default.
SELECTIVITY_READINGS = ("advertisements", "publications")
_RANGED_ATTRS = ("Open", "High", "Low", "Close", "Volume", "Trades", "Change")

_EXCHANGES = (("NYSE", 0.45), ("NASDAQ", 0.45), ("AMEX", 0.10))
_SYMBOL_LENGTHS = ((3, 0.3), (4, 0.5), (5, 0.2))
_BASE_PRICE_MEDIAN, _BASE_PRICE_LOG_SD = 18.0, 0.35
_REVERSION, _DAILY_LOG_SD = 0.05, 0.02
_GAP_LOG_SD, _SPAN_SD = 0.005, 0.01
_BASE_VOLUME_MEDIAN, _BASE_VOLUME_LOG_SD, _DAILY_VOLUME_LOG_SD = 1e6, 1.0, 0.4
_TRADE_SIZE_RANGE, _TRADE_SIZE_LOG_SD = (150.0, 600.0), 0.2
_GENERAL_VOLUME_DRAWS = 20  # "Volume >= P1" takes the max of this many published volumes


@dataclass(frozen=True)
class Stock:
    """A symbol's fixed traits: its exchange, the base of its mean-reverting price walk
    (dollars), its median daily volume (shares) and its average trade size (shares)."""

    symbol: str
    exchange: str
    base_price: float
    base_volume: float
    trade_size: float


def weighted_choice(rng: random.Random, choices: Sequence[tuple[Any, float]]) -> Any:
    """An item of ``(item, probability)`` pairs drawn with ``rng`` by its probability."""
    x = rng.random()
    for item, p in choices:
        x -= p
        if x < 0:
            return item
    return choices[-1][0]


def stock_universe(seed: int) -> list[Stock]:
    """The 500 symbols, sorted, with their fixed traits."""
    rng = random.Random(f"{seed}/universe")
    symbols: list[str] = []
    seen: set[str] = set()
    while len(symbols) < N_SYMBOLS:
        length = weighted_choice(rng, _SYMBOL_LENGTHS)
        sym = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))
        if sym not in seen:
            seen.add(sym)
            symbols.append(sym)
    return [draw_stock(sym, rng) for sym in sorted(symbols)]


def draw_stock(symbol: str, rng: random.Random) -> Stock:
    """A symbol's fixed traits (exchange, base price and volume, trade size), drawn from
    the universe's distributions (docs/design/stock-workload.md) with ``rng``."""
    return Stock(
        symbol=symbol,
        exchange=weighted_choice(rng, _EXCHANGES),
        base_price=_BASE_PRICE_MEDIAN * rng.lognormvariate(0.0, _BASE_PRICE_LOG_SD),
        base_volume=_BASE_VOLUME_MEDIAN * rng.lognormvariate(0.0, _BASE_VOLUME_LOG_SD),
        trade_size=rng.uniform(*_TRADE_SIZE_RANGE),
    )


def trading_days(n: int) -> list[str]:
    """The first ``n`` weekdays from :data:`FIRST_DAY`, ISO formatted."""
    days: list[str] = []
    d = FIRST_DAY
    while len(days) < n:
        if d.weekday() < 5:
            days.append(d.isoformat())
        d += datetime.timedelta(days=1)
    return days


def _clamp_price(p: float) -> float:
    return round(min(PRICE_MAX, max(PRICE_MIN, p)), 2)


def quote_series(stock: Stock, dates: Sequence[str], seed: int) -> list[dict[str, Value]]:
    """Daily quotes of ``stock`` for ``dates`` (docs/design/stock-workload.md has the model)."""
    rng = random.Random(f"{seed}/series/{stock.symbol}")
    log_base = math.log(stock.base_price)
    log_close = log_base
    prev_close = _clamp_price(stock.base_price)
    quotes: list[dict[str, Value]] = []
    for date in dates:
        open_ = _clamp_price(prev_close * math.exp(rng.gauss(0.0, _GAP_LOG_SD)))
        log_close += _REVERSION * (log_base - log_close) + rng.gauss(0.0, _DAILY_LOG_SD)
        close = _clamp_price(math.exp(log_close))
        high = _clamp_price(max(open_, close) * (1 + abs(rng.gauss(0.0, _SPAN_SD))))
        low = _clamp_price(min(open_, close) * (1 - abs(rng.gauss(0.0, _SPAN_SD))))
        volume = round(stock.base_volume * rng.lognormvariate(0.0, _DAILY_VOLUME_LOG_SD))
        volume = min(VOLUME_MAX, max(VOLUME_MIN, volume))
        trade_size = stock.trade_size * rng.lognormvariate(0.0, _TRADE_SIZE_LOG_SD)
        quotes.append(
            {
                "Date": date,
                "Symbol": stock.symbol,
                "Open": open_,
                "High": max(high, open_, close),  # rounding must not invert the span
                "Low": min(low, open_, close),
                "Close": close,
                "Volume": volume,
                "Exchange": stock.exchange,
                "Change": round(close - prev_close, 2),
                "Trades": min(volume, max(1, round(volume / trade_size))),
            }
        )
        prev_close = close
    return quotes


def _blocks(stocks: list[Stock], n_publishers: int) -> list[list[Stock]]:
    if n_publishers <= len(stocks):
        n = len(stocks)
        return [
            stocks[i * n // n_publishers : (i + 1) * n // n_publishers] for i in range(n_publishers)
        ]
    return [[stocks[i % len(stocks)]] for i in range(n_publishers)]


def stock_advertisement(block: list[Stock], first_date: str, last_date: str,
                        quotes: Sequence[Mapping[str, Value]] = ()) -> Filter:
    """What the publisher of ``block`` advertises from ``first_date`` to ``last_date``: the
    schema's domains on the price, volume and change attributes or, given its ``quotes``
    (the ``advertisements`` reading, docs/design/stock-workload.md), only the symbols it
    quotes and the range its quotes span on every attribute."""
    if quotes:
        quoted = {q["Symbol"] for q in quotes}
        block = [s for s in block if s.symbol in quoted]
    first, last = block[0].symbol, block[-1].symbol
    preds = [
        Predicate("Symbol", "=", first)
        if first == last
        else Predicate("Symbol", "range", first, last)
    ]
    if all(s.exchange == block[0].exchange for s in block):
        preds.append(Predicate("Exchange", "=", block[0].exchange))
    preds.append(Predicate("Date", "range", first_date, last_date))
    if quotes:
        return (*preds, *(Predicate(a, "range", min(q[a] for q in quotes),
                                    max(q[a] for q in quotes)) for a in _RANGED_ATTRS))
    preds += [Predicate(a, "range", 0.0, PRICE_MAX) for a in ("Open", "High", "Low", "Close")]
    preds += [Predicate(a, "range", 0, VOLUME_MAX) for a in ("Volume", "Trades")]
    preds.append(Predicate("Change", "range", -PRICE_MAX, PRICE_MAX))
    return tuple(preds)


def meghdoot_subscription(
    rng: random.Random,
    by_symbol: Mapping[str, list[dict[str, Value]]],
    symbols: list[str],
    volumes: list[Value],
) -> tuple[str, Filter]:
    template = weighted_choice(rng, MEGHDOOT_TEMPLATES)
    if template == "volume_ge":
        return template, (
            Predicate("Volume", ">=", max(rng.choices(volumes, k=_GENERAL_VOLUME_DRAWS))),
        )
    sym = rng.choice(symbols)
    quotes = by_symbol[sym]
    head = Predicate("Symbol", "=", sym)
    if template == "symbol_open_range":
        lo, hi = sorted((rng.choice(quotes)["Open"], rng.choice(quotes)["Open"]))
        return template, (head, Predicate("Open", "range", lo, hi))
    if template == "symbol_low_le":
        return template, (head, Predicate("Low", "<=", rng.choice(quotes)["Low"]))
    if template == "symbol_high_ge":
        return template, (head, Predicate("High", ">=", rng.choice(quotes)["High"]))
    return template, (head, Predicate("Volume", ">=", rng.choice(quotes)["Volume"]))


def _octopia_attrs(columns: Mapping[str, list[Value]], selectivity: float) -> list[str]:
    """The attributes fine enough for windows, coarsest first.

    An attribute whose commonest value alone covers more than ``selectivity`` of the
    publications (Date, when a run spans few trading days) cannot carry a window at the
    target size; if every attribute is that coarse (tiny workloads), all are kept.
    """
    n = len(columns[OCTOPIA_ATTRS[0]])
    counts = {a: Counter(columns[a]) for a in OCTOPIA_ATTRS}
    fine = [a for a in OCTOPIA_ATTRS if max(counts[a].values()) <= selectivity * n]
    return sorted(fine or OCTOPIA_ATTRS, key=lambda a: (len(counts[a]), a))


def _octopia_subscription(
    rng: random.Random,
    pubs: list[dict[str, Value]],
    columns: Mapping[str, list[Value]],
    attrs: list[str],
    selectivity: float,
    max_preds: int,
) -> tuple[int, Filter]:
    """Nested windows: each predicate keeps a window of the publications still selected,
    so that the last leaves about ``selectivity * len(pubs)`` of them.

    The finest attribute goes last, where no later window can make up for ties; a window
    ends at the distinct value that brings its count (ties included) nearest the target.
    """
    goal = max(1.0, selectivity * len(pubs))
    n_preds = rng.randint(1, min(max_preds, len(attrs)))
    chosen = pubs
    preds: list[Predicate] = []
    picked = sorted(rng.sample(attrs, n_preds), key=attrs.index)
    for step, attr in enumerate(picked):
        left = n_preds - step
        values = columns[attr] if chosen is pubs else sorted(p[attr] for p in chosen)
        n = len(values)
        k = min(n, max(1, round(n * (goal / n) ** (1 / left))))
        first = bisect.bisect_left(values, values[rng.randrange(n - k + 1)])
        lo, hi = values[first], values[first + k - 1]
        end = bisect.bisect_right(values, hi)
        before = bisect.bisect_left(values, hi)
        if before > first and abs(before - first - k) < abs(end - first - k):
            hi, end = values[before - 1], before
        if lo == hi:
            preds.append(Predicate(attr, "=", lo))
        elif first > 0 and end < n:
            preds.append(Predicate(attr, "range", lo, hi))
        elif first > 0:
            preds.append(Predicate(attr, ">=", lo))
        elif end < n:
            preds.append(Predicate(attr, "<=", hi))
        # else the window holds every value left: no constraint needed
        if left > 1:
            chosen = [p for p in chosen if lo <= p[attr] <= hi]
    return n_preds, tuple(preds)


def _span_subscription(rng: random.Random, groups: Sequence[Sequence[str]],
                       selectivity: float) -> Filter:
    """A ``Symbol`` window for the ``advertisements`` reading (docs/design/stock-workload.md) over
    ``groups``, the symbols each distinct block's publisher quotes, in order: ``k =
    round(selectivity x len(groups))`` adjacent groups, or, where ``selectivity`` of
    the quoted symbols is fewer than a group holds (few publishers), that many symbols
    of one group (one advertisement, the fewest a subscription can overlap)."""
    n_symbols = sum(len(g) for g in groups)
    m = max(1, round(selectivity * n_symbols))
    if m * len(groups) >= n_symbols:  # at least a group's worth, on average
        k = max(1, round(selectivity * len(groups)))
        j = rng.randrange(len(groups) - k + 1)
        first, last = groups[j][0], groups[j + k - 1][-1]
    else:
        group = rng.choice([g for g in groups if len(g) >= m])
        j = rng.randrange(len(group) - m + 1)
        first, last = group[j], group[j + m - 1]
    if first == last:
        return (Predicate("Symbol", "=", first),)
    return (Predicate("Symbol", "range", first, last),)


def stock_workload(
    brokers: Sequence[str],
    *,
    n_publishers: int,
    n_subscribers: int,
    pubs_per_publisher: int,
    publish_rate_hz: float,
    seed: int,
    mode: str = "octopia",
    selectivity: float = 0.02,
    selectivity_of: str = SELECTIVITY_READINGS[0],
    phase_gap_s: float = 1.0,
    start_s: float = 0.0,
    max_preds: int = 3,
    advertise_spread_s: float = 0.0,
    subscribe_spread_s: float | None = None,
    publish_spread_share: float = 1.0,
) -> Workload:
    """A stock-quote workload; docs/design/stock-workload.md gives every choice.

    ``selectivity`` is the target of ``mode='octopia'`` (unused by Meghdoot's templates),
    a share of what ``selectivity_of`` names (:data:`SELECTIVITY_READINGS`,
    docs/design/stock-workload.md);
    ``max_preds`` bounds the predicates of an OctopiA-mode subscription;
    ``advertise_spread_s`` and ``subscribe_spread_s`` (``None``: half of ``phase_gap_s``)
    spread their phases, each over at most half of ``phase_gap_s``;
    ``publish_spread_share`` (in (0, 1]) is the share of a publish period the publishers'
    start times spread over.
    """
    subscribe_spread_s = _check_args(
        brokers, n_publishers, n_subscribers, pubs_per_publisher, publish_rate_hz, mode,
        selectivity, selectivity_of, phase_gap_s, max_preds, publish_spread_share,
        advertise_spread_s, subscribe_spread_s)

    stocks = stock_universe(seed)
    blocks = _blocks(stocks, n_publishers)
    # Advertisements cover the quotes themselves only under OctopiA's second reading.
    tight = mode == "octopia" and selectivity_of == "advertisements"
    n_days = math.ceil(pubs_per_publisher / min(len(b) for b in blocks))
    dates = trading_days(n_days)
    placement = random.Random(f"{seed}/placement")
    clients: dict[str, str] = {}
    pub_ops, adv_ops, publications = _publishers(
        blocks, dates, brokers, placement, clients, seed=seed,
        pubs_per_publisher=pubs_per_publisher, publish_rate_hz=publish_rate_hz,
        t_pub0_s=start_s + 2 * phase_gap_s, start_s=start_s,
        advertise_spread_s=advertise_spread_s, publish_spread_share=publish_spread_share,
        tight=tight)

    subs_rng = random.Random(f"{seed}/subscriptions/{mode}")
    if tight:
        # Beyond 500 publishers blocks repeat: each distinct block once, its quoted symbols.
        groups = [[s.symbol for s in b[:pubs_per_publisher]] for b in blocks[: len(stocks)]]
        drawn = [("symbol_span", _span_subscription(subs_rng, groups, selectivity))
                 for _ in range(n_subscribers)]
        mode_meta: dict[str, Any] = {"selectivity_target": selectivity}
    else:
        drawn, mode_meta = _subscriptions(
            mode, subs_rng, publications, n_subscribers, selectivity, max_preds
        )
    sub_ops = _subscriber_ops([f for _, f in drawn], brokers, placement, clients,
                              start_s + phase_gap_s, subscribe_spread_s)

    ops = tuple(sorted(adv_ops + sub_ops + pub_ops, key=lambda op: op.t_s))
    meta = _measure(Workload(STOCK_SCHEMA, clients, ops, {}), [kind for kind, _ in drawn])
    meta.update(
        mode=mode, **({"selectivity_of": selectivity_of} if mode == "octopia" else {}),
        seed=seed, n_symbols=N_SYMBOLS, n_publishers=n_publishers,
        n_subscribers=n_subscribers, pubs_per_publisher=pubs_per_publisher,
        publish_rate_hz=publish_rate_hz, phase_gap_s=phase_gap_s, start_s=start_s,
        advertise_spread_s=advertise_spread_s, subscribe_spread_s=subscribe_spread_s,
        publish_spread_share=publish_spread_share, **mode_meta)
    return Workload(STOCK_SCHEMA, clients, ops, meta)


def _check_args(brokers: Sequence[str], n_publishers: int, n_subscribers: int,
                pubs_per_publisher: int, publish_rate_hz: float, mode: str,
                selectivity: float, selectivity_of: str, phase_gap_s: float, max_preds: int,
                publish_spread_share: float, advertise_spread_s: float,
                subscribe_spread_s: float | None) -> float:
    """ValueError naming the first of :func:`stock_workload`'s arguments out of range;
    else the subscribe phase's spread, s (``None``: half of ``phase_gap_s``)."""
    if not brokers:
        raise ValueError("need at least one broker")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if selectivity_of not in SELECTIVITY_READINGS:
        raise ValueError(f"selectivity_of must be one of {SELECTIVITY_READINGS}, "
                         f"got {selectivity_of!r}")
    if n_publishers < 1 or pubs_per_publisher < 1 or n_subscribers < 0:
        raise ValueError("need n_publishers >= 1, pubs_per_publisher >= 1, n_subscribers >= 0")
    if publish_rate_hz <= 0 or phase_gap_s <= 0 or not 0 < selectivity <= 1 or max_preds < 1:
        raise ValueError(
            "need publish_rate_hz > 0, phase_gap_s > 0, 0 < selectivity <= 1, max_preds >= 1"
        )
    # 0 would make every publisher tie; above 1 publisher i's slot overlaps i+1's next one.
    if not 0 < publish_spread_share <= 1:
        raise ValueError(f"need 0 < publish_spread_share <= 1, got {publish_spread_share}")
    if subscribe_spread_s is None:
        subscribe_spread_s = 0.5 * phase_gap_s
    for name, spread in (("advertise_spread_s", advertise_spread_s),
                         ("subscribe_spread_s", subscribe_spread_s)):
        if not 0 <= spread <= 0.5 * phase_gap_s:
            raise ValueError(f"need 0 <= {name} <= phase_gap_s / 2 = {0.5 * phase_gap_s}, "
                             f"got {spread}")
    return subscribe_spread_s


def _publishers(blocks: list[list[Stock]], dates: Sequence[str],
                brokers: Sequence[str], placement: random.Random, clients: dict[str, str],
                *, seed: int, pubs_per_publisher: int, publish_rate_hz: float,
                t_pub0_s: float, start_s: float, advertise_spread_s: float,
                publish_spread_share: float, tight: bool
                ) -> tuple[list[ClientOp], list[ClientOp], list[dict[str, Value]]]:
    """Publisher ``p{i}`` per block, placed on a broker drawn from ``placement`` (into
    ``clients``): its PUBLISH ops from ``t_pub0_s`` at ``publish_rate_hz``, its
    ADVERTISE op (tight to its quotes when ``tight``), and every quote published."""
    n_publishers = len(blocks)
    series: dict[str, list[dict[str, Value]]] = {}
    pub_ops: list[ClientOp] = []
    adv_ops: list[ClientOp] = []
    publications: list[dict[str, Value]] = []
    for i, block in enumerate(blocks):
        name = f"p{i}"
        broker = clients[name] = placement.choice(brokers)
        last_day = (pubs_per_publisher - 1) // len(block)
        offset_s = publish_spread_share * i / (n_publishers * publish_rate_hz)
        quotes = []
        for j in range(pubs_per_publisher):
            stock = block[j % len(block)]
            if stock.symbol not in series:
                series[stock.symbol] = quote_series(stock, dates, seed)
            attrs = series[stock.symbol][j // len(block)]
            quotes.append(attrs)
            t_s = t_pub0_s + offset_s + j / publish_rate_hz
            msg = Message(
                MsgType.PUBLISH, j + 2, name, payload={"attrs": dict(attrs), "t_pub": t_s}
            )
            pub_ops.append(ClientOp(t_s, name, broker, msg))
        publications += quotes
        adv = stock_advertisement(block, dates[0], dates[last_day], quotes if tight else ())
        adv_ops.append(
            ClientOp(
                start_s + advertise_spread_s * i / n_publishers,
                name,
                broker,
                Message(MsgType.ADVERTISE, 1, name, payload={"filter": filter_to_json(adv)}),
            )
        )
    return pub_ops, adv_ops, publications


def _subscriber_ops(filters: Sequence[Filter], brokers: Sequence[str],
                    placement: random.Random, clients: dict[str, str], t0_s: float,
                    spread_s: float) -> list[ClientOp]:
    """Subscriber ``s{i}`` per filter, placed on a broker drawn from ``placement`` (into
    ``clients``), subscribing at ``t0_s`` plus its share of ``spread_s``."""
    ops: list[ClientOp] = []
    for i, f in enumerate(filters):
        name = f"s{i}"
        broker = clients[name] = placement.choice(brokers)
        t_s = t0_s + spread_s * i / len(filters)
        msg = Message(MsgType.SUBSCRIBE, 1, name, payload={"filter": filter_to_json(f)})
        ops.append(ClientOp(t_s, name, broker, msg))
    return ops


def _subscriptions(
    mode: str,
    rng: random.Random,
    publications: list[dict[str, Value]],
    n: int,
    selectivity: float,
    max_preds: int,
) -> tuple[list[tuple[str, Filter]], dict[str, Any]]:
    """``n`` (kind, filter) pairs for ``mode``, and the mode's parameters for ``meta``."""
    if mode == "meghdoot":
        by_symbol: dict[str, list[dict[str, Value]]] = {}
        for q in publications:
            by_symbol.setdefault(q["Symbol"], []).append(q)
        symbols = list(by_symbol)
        volumes = [q["Volume"] for q in publications]
        drawn = [meghdoot_subscription(rng, by_symbol, symbols, volumes) for _ in range(n)]
        return drawn, {"template_probabilities": dict(MEGHDOOT_TEMPLATES)}
    columns = {a: sorted(q[a] for q in publications) for a in OCTOPIA_ATTRS}
    attrs = _octopia_attrs(columns, selectivity)
    drawn = []
    for _ in range(n):
        n_preds, f = _octopia_subscription(
            rng, publications, columns, attrs, selectivity, max_preds
        )
        drawn.append((f"{n_preds}_preds", f))
    params = {"selectivity_target": selectivity, "max_preds": max_preds, "octopia_attrs": attrs}
    return drawn, params


def adv_overlap(w: Workload) -> float:
    """The mean share of ``w``'s advertisements a subscription of ``w`` overlaps
    (:func:`nodes.model.overlaps`; 0.0 without subscriptions or advertisements)."""
    filters: dict[MsgType, list[Filter]] = {MsgType.ADVERTISE: [], MsgType.SUBSCRIBE: []}
    for op in w.ops:
        if op.msg.type in filters:
            filters[op.msg.type].append(filter_from_json(op.msg.payload["filter"]))
    advs, subs = filters[MsgType.ADVERTISE], filters[MsgType.SUBSCRIBE]
    if not advs or not subs:
        return 0.0
    hits = sum(overlaps(a, s, w.schema) for s in subs for a in advs)
    return hits / (len(advs) * len(subs))


def _measure(w: Workload, kinds: list[str]) -> dict[str, Any]:
    """Counts and measured selectivity (overall and per subscription kind)."""
    deliveries = expected_deliveries(w)
    per_client = Counter(c for clients in deliveries.values() for c in clients)
    n_notes = len(deliveries)
    pairs_by_kind: Counter[str] = Counter()
    none = 0
    for i, kind in enumerate(kinds):
        hits = per_client[f"s{i}"]
        pairs_by_kind[kind] += hits
        none += hits == 0
    kind_counts = Counter(kinds)
    closes = [op.msg.payload["attrs"]["Close"] for op in w.ops if op.msg.type is MsgType.PUBLISH]
    pairs = sum(pairs_by_kind.values())
    return {
        "n_notifications": n_notes,
        "expected_deliveries": pairs,
        "selectivity": pairs / (n_notes * len(kinds)) if kinds else 0.0,
        "subscription_kinds": dict(sorted(kind_counts.items())),
        "selectivity_by_kind": {
            k: pairs_by_kind[k] / (n_notes * c) for k, c in sorted(kind_counts.items())
        },
        "subscriptions_matching_nothing": none,
        "adv_overlap": adv_overlap(w),
        "close_share_10_30": sum(10 <= c <= 30 for c in closes) / len(closes),
    }
