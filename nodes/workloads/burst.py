"""The high-rate-publisher (HRP) burst of OctopiA's dynamic-routing experiment.

OctopiA (Section VIII, Fig. 11): 2,000 subscribers at 2 % selectivity and 100 publishers
at 60 notifications a minute; one HRP, whose interested subscribers (2 % of the
subscribers) sit in every SCOT cluster but never on the HRP's broker, sends a burst of
notifications at 100K, 80K or 60K a minute once every subscription is in place.

The spec's ``workload.burst`` (``null`` or absent: no burst; missing fields take
:data:`BURST_DEFAULTS`)::

    burst:
      rate_hz: 1000        # the HRP's publication rate
      count: 3000          # publications in the burst
      start_s: 2.0         # after the start of the publication phase
      n_subscribers: 10    # HRP subscribers hrps0.., at least one per cluster
      broker: null         # the HRP's broker (null: drawn with the spec's seed)

:func:`add_burst` adds to a built stock workload (our choices):

- client ``hrp`` on a broker drawn with ``random.Random(f"{seed}/burst")`` from the
  overlay's brokers (or the ``broker`` field). It quotes one dedicated symbol,
  :data:`HRP_SYMBOL`, which is not among the universe's (those have 3..5 letters) and
  sorts after all of them, so no regular publisher's ``Symbol`` range covers it. Its
  advertisement (the stock model's: symbol, exchange, dates, and schema domains or, under
  the ``advertisements`` reading of selectivity, its quotes' ranges) goes out at
  the end of the advertisement spread; its ``count`` quotes follow the stock price model
  of :mod:`nodes.workloads.stock` as ticks spread over the regular workload's trading
  days (dates in order, several ticks a day), so that its Date values lie in the run's
  range like a real intraday feed. PUBLISH ids are 2..count+1, as for regular
  publishers; quote k goes out at ``t_pub0 + start_s + k / rate_hz``, ``t_pub0`` being
  the start of the publication phase.
- subscribers ``hrps0..`` (not ``h0..``: the paper's SCOT has a broker ``h0``, and a
  client's log must not share a broker's file name) each subscribe to
  ``Symbol = HRP_SYMBOL`` (msg_id 1), spread over the subscription phase. Subscriber i
  sits in cluster ``clusters[i % n_clusters]`` (clusters in sorted order, so every
  cluster gets one before any gets two) on a broker of that cluster drawn with the same
  seeded generator, never the HRP's broker. Brokers without a ``cluster`` attribute
  (non-SCOT topologies) form one cluster.
- Regular subscriptions may match HRP quotes as well (a price window, ``Volume >= x``):
  their selectivity applies to every notification, the HRP's included, as the paper's
  "2 % selectivity" does; with OctopiA-mode windows over the publications there are
  about as many regular pairs as HRP-subscriber pairs at the paper's sizes, with the
  default ``Symbol`` windows over the advertisements none (the HRP's symbol sorts after
  every block). The oracle
  :func:`~nodes.workloads.oracle.expected_deliveries` counts those pairs like any other;
  ``meta["burst"]`` records how many there are (``regular_pairs``), besides the
  settings, the HRP's broker and cluster, the subscribers' brokers and the burst's first
  and last publication times on the workload's clock.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import networkx as nx

from nodes.cores.params import is_integer, is_number
from nodes.matching import SubscriptionIndex
from nodes.messages import Message, MsgType
from nodes.model import Predicate, filter_from_json, filter_to_json
from nodes.workloads.ops import ClientOp, Workload
from nodes.workloads.stock import draw_stock, quote_series, stock_advertisement, trading_days
from topologies.graph import overlay_of

HRP = "hrp"
HRP_SUBSCRIBER_PREFIX = "hrps"
# Six letters: no universe symbol (3..5 letters) equals it, and it sorts after "zzzzz".
HRP_SYMBOL = "zzzzzz"
_WHERE = "workload.burst"
BURST_DEFAULTS: dict[str, Any] = {
    "rate_hz": 1000.0, "count": 3000, "start_s": 2.0, "n_subscribers": 10, "broker": None,
}


def _bad(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{_WHERE}.{field}: bad value {value!r}; allowed: {allowed}")


def burst_settings(raw: Any) -> dict[str, Any] | None:
    """The validated ``workload.burst`` section with defaults filled in, or None for no
    burst; a ValueError whose one-line message names the first bad field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{_WHERE}: bad value {raw!r}; allowed: a mapping or null")
    unknown = sorted(set(raw) - set(BURST_DEFAULTS))
    if unknown:
        raise ValueError(f"{_WHERE}: unknown field(s) {', '.join(map(str, unknown))}; "
                         f"allowed: {', '.join(sorted(BURST_DEFAULTS))}")
    s = {**BURST_DEFAULTS, **raw}

    def number(key: str, *, positive: bool, integer: bool) -> None:
        v = s[key]
        ok = is_integer(v) if integer else is_number(v)
        if not ok or not (v > 0 if positive else v >= 0):
            kind = "an integer" if integer else "a number"
            raise _bad(key, v, f"{kind} {'> 0' if positive else '>= 0'}")

    number("rate_hz", positive=True, integer=False)
    number("count", positive=True, integer=True)
    number("start_s", positive=False, integer=False)
    number("n_subscribers", positive=True, integer=True)
    if s["broker"] is not None and not isinstance(s["broker"], str):
        raise _bad("broker", s["broker"], "a broker name or null")
    s["rate_hz"], s["start_s"] = float(s["rate_hz"]), float(s["start_s"])
    return s


def clusters_of(graph: nx.Graph) -> dict[Any, list[str]]:
    """Cluster -> its brokers (overlay order), clusters sorted; without a ``cluster``
    attribute on every broker, the whole overlay is one cluster (key None)."""
    ov = overlay_of(graph)
    names = list(ov.nodes)
    tags = [ov.nodes[b].get("cluster") for b in names]
    if not names or any(t is None for t in tags):
        return {None: names}
    out: dict[Any, list[str]] = {}
    for b, t in zip(names, tags, strict=True):
        out.setdefault(t, []).append(b)
    return dict(sorted(out.items()))


def add_burst(workload: Workload, graph: nx.Graph, settings: Mapping[str, Any], *,
              seed: int) -> Workload:
    """``workload`` plus the HRP and its subscribers (see the module docstring).

    ``settings``: a validated burst section (:func:`burst_settings`);
    ``graph`` is the topology or overlay
    graph the workload runs on. Raises ValueError naming the field when the
    overlay cannot hold the placement (an unknown ``broker``, fewer ``n_subscribers``
    than clusters, a cluster with no broker but the HRP's).
    """
    meta = dict(workload.meta)
    clusters = clusters_of(graph)
    rng = random.Random(f"{seed}/burst")
    broker, eligible = _place_hrp(workload, clusters, settings, rng)

    # The regular workload's clock and calendar.
    t_adv_s = meta["start_s"] + meta.get("advertise_spread_s", 0.0)
    gap_s = meta["phase_gap_s"]
    t_sub0_s = meta["start_s"] + gap_s
    sub_spread_s = meta.get("subscribe_spread_s") or 0.0
    t_pub0_s = meta["start_s"] + 2 * gap_s
    regular = [op for op in workload.ops if op.msg.type is MsgType.PUBLISH]
    days = sorted({op.msg.payload["attrs"]["Date"] for op in regular}) or trading_days(1)

    count, rate_hz = settings["count"], settings["rate_hz"]
    t_first_s = t_pub0_s + settings["start_s"]
    # Under the "advertisements" reading of selectivity, every advertisement is tight.
    tight = meta.get("selectivity_of") == "advertisements"
    quotes, new_ops = _hrp_ops(broker, days, count, rate_hz, t_adv_s, t_first_s, tight,
                               seed)
    clients = dict(workload.clients)
    clients[HRP] = broker
    n_subs = settings["n_subscribers"]
    placed, sub_ops = _hrp_subscriber_ops(rng, eligible, n_subs, t_sub0_s, sub_spread_s)
    clients.update(placed)

    ops = tuple(sorted([*workload.ops, *new_ops, *sub_ops], key=lambda op: op.t_s))
    meta["burst"] = {
        **{k: settings[k] for k in ("rate_hz", "count", "start_s", "n_subscribers")},
        "hrp": HRP, "broker": broker, "cluster": overlay_of(graph).nodes[broker].get("cluster"),
        "symbol": HRP_SYMBOL, "subscribers": placed,
        "clusters": len(clusters),
        "t_first_s": t_first_s, "t_last_s": t_first_s + (count - 1) / rate_hz,
        "hrp_pairs": count * n_subs, "regular_pairs": _regular_pairs(workload, quotes),
    }
    return Workload(workload.schema, clients, ops, meta)


def _place_hrp(workload: Workload, clusters: Mapping[Any, list[str]],
               settings: Mapping[str, Any], rng: random.Random
               ) -> tuple[str, dict[Any, list[str]]]:
    """The HRP's broker (``settings["broker"]``, or drawn) and, per cluster, the brokers
    its subscribers may sit on; ValueError naming the field when they do not fit."""
    all_brokers = [b for bs in clusters.values() for b in bs]
    names = [HRP, *(f"{HRP_SUBSCRIBER_PREFIX}{i}" for i in range(settings["n_subscribers"]))]
    taken = sorted(set(names) & (set(workload.clients) | set(all_brokers)))
    if taken:  # logs are named after nodes: a client cannot share a broker's name
        raise ValueError(f"{_WHERE}: HRP client name(s) already used: {', '.join(taken)}")
    broker = settings["broker"]
    if broker is None:
        broker = rng.choice(all_brokers)
    elif broker not in all_brokers:
        raise _bad("broker", broker, "a broker of the topology")
    if settings["n_subscribers"] < len(clusters):
        raise _bad("n_subscribers", settings["n_subscribers"],
                   f"an integer >= {len(clusters)} (one subscriber per cluster)")
    eligible = {c: [b for b in bs if b != broker] for c, bs in clusters.items()}
    empty = [c for c, bs in eligible.items() if not bs]
    if empty:
        raise _bad("broker", broker, f"a broker whose cluster {empty[0]!r} has another "
                                     f"broker for the HRP's subscribers")
    return broker, eligible


def _hrp_ops(broker: str, days: list[str], count: int, rate_hz: float, t_adv_s: float,
             t_first_s: float, tight: bool, seed: int
             ) -> tuple[list[dict[str, Any]], list[ClientOp]]:
    """The HRP's quotes (its own stock over the regular calendar) and its operations: the
    advertisement (``tight``: bounded by the quotes), then a quote every ``1 / rate_hz``
    s from ``t_first_s``."""
    stock = draw_stock(HRP_SYMBOL, random.Random(f"{seed}/burst/stock"))
    tick_dates = [days[k * len(days) // count] for k in range(count)]
    quotes = quote_series(stock, tick_dates, seed)
    adv = stock_advertisement([stock], days[0], days[-1], quotes if tight else ())
    ops = [ClientOp(t_adv_s, HRP, broker, Message(
        MsgType.ADVERTISE, 1, HRP, payload={"filter": filter_to_json(adv)}))]
    for k, attrs in enumerate(quotes):
        t_s = t_first_s + k / rate_hz
        ops.append(ClientOp(t_s, HRP, broker, Message(
            MsgType.PUBLISH, k + 2, HRP, payload={"attrs": dict(attrs), "t_pub": t_s})))
    return quotes, ops


def _hrp_subscriber_ops(rng: random.Random, eligible: Mapping[Any, list[str]], n_subs: int,
                        t_sub0_s: float, sub_spread_s: float
                        ) -> tuple[dict[str, str], list[ClientOp]]:
    """The HRP's subscribers, placed round-robin over the clusters on a drawn broker,
    subscribing across the regular subscription phase: their brokers by name, their
    operations."""
    order = list(eligible)
    sub_filter = filter_to_json((Predicate("Symbol", "=", HRP_SYMBOL),))
    placed: dict[str, str] = {}
    ops: list[ClientOp] = []
    for i in range(n_subs):
        name = f"{HRP_SUBSCRIBER_PREFIX}{i}"
        b = placed[name] = rng.choice(eligible[order[i % len(order)]])
        # Offset by half a slot, so the last one still lies inside the phase's spread.
        t_s = t_sub0_s + sub_spread_s * (i + 0.5) / n_subs
        ops.append(ClientOp(t_s, name, b, Message(
            MsgType.SUBSCRIBE, 1, name, payload={"filter": sub_filter})))
    return placed, ops


def _regular_pairs(workload: Workload, quotes: list[dict[str, Any]]) -> int:
    """The (quote, subscriber) pairs the regular subscriptions add: stated, not hidden. A
    client with two matching subscriptions counts once."""
    index = SubscriptionIndex()
    for op in workload.ops:
        if op.msg.type is MsgType.SUBSCRIBE:
            index.add((op.client, op.msg.msg_id), filter_from_json(op.msg.payload["filter"]))
    return sum(len({client for client, _ in index.match(q)}) for q in quotes)
