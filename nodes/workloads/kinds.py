"""The workload kinds by name (:data:`WORKLOADS`): what a spec's ``workload`` section of
each kind holds, how it is checked and built, and what its runs measure.

A kind's functions speak the spec's language: they raise ValueError with one line naming
the spec field (``workload.k: bad value ...``) or section (``topology: ...``), which the
run plan (:mod:`experiments.plan`) turns into its error; nothing here reads a spec. The
checks run before the build (a refused spec costs no workload); a check that needs the
built workload, or the values the build checks first, runs in the builder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import networkx as nx

from nodes.cores.meghdoot_repair import churn_times_s
from nodes.cores.params import KINDS, is_number, kind_of, short_repr
from nodes.workloads.bulk import slice_kb, stream_cap_mbps, sweep_node_counts
from nodes.workloads.burst import add_burst, burst_settings
from nodes.workloads.codd import codd_workload
from nodes.workloads.interests import publication_attrs
from nodes.workloads.kyra_example import FIG1_SUBSCRIPTIONS, kyra_example_workload
from nodes.workloads.meghdoot import CHURN_FIELDS, meghdoot_workload
from nodes.workloads.ops import Workload
from nodes.workloads.stock import SELECTIVITY_READINGS, stock_workload
from topologies.graph import brokers


@dataclass(frozen=True)
class RunContext:
    """What a kind's checks and builder read besides its own section: the topology graph
    (link overrides applied) and its name, the spec's seed and scale, its links mode
    (``fixed`` | ``on-demand``), each algorithm's declared params (defaults filled in) by
    name, and its ``duration_s``."""

    graph: nx.Graph
    topology: str
    seed: int
    scale: float
    links: str
    algorithms: Mapping[str, Mapping[str, Any]]
    duration_s: float | None


Check = Callable[[Mapping[str, Any], RunContext], None]
Estimate = Callable[[Mapping[str, Any], RunContext], Mapping[str, int]]

OP_BYTES = 200
"""About what one built client operation holds in memory (the op, its attributes and
the builder's working lists), in bytes: the unit of :func:`workload_size`'s bytes."""


def _count(p: Mapping[str, Any], key: str) -> int:
    """A size field as a count (0 when it is not a number: the builder refuses it)."""
    v = p.get(key)
    if not is_number(v):
        return 0
    return max(int(min(v, 10**30)), 0)


def _no_estimate(p: Mapping[str, Any], ctx: RunContext) -> Mapping[str, int]:
    return {}


def workload_size(kind: WorkloadKind, p: Mapping[str, Any], ctx: RunContext
                  ) -> tuple[str | None, int, int]:
    """Before the build: the size field that adds the most operations (a dotted path
    in the section, or ``topology``; None without one), about how many operations the
    workload will hold, and their bytes (:data:`OP_BYTES` each); cheap arithmetic from
    the kind's ``estimate``."""
    parts = kind.estimate(p, ctx)
    if not parts:
        return None, 0, 0
    key = max(parts, key=lambda k: parts[k])
    ops = sum(parts.values())
    return key, ops, ops * OP_BYTES


def _no_check(p: Mapping[str, Any], ctx: RunContext) -> None:
    return None


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of workload.

    - ``defaults``: every key its section may hold (``kind`` among them), with its default;
    - ``fields``: keys whose value a function checks and normalises (ValueError if bad);
    - ``serves``: the workload the routing cores must serve (``CoreInfo.workload`` of
      :mod:`nodes.cores`): the Kyra example's filters are stock notifications;
    - ``estimate`` (section, run) -> operations by size field, before the build (see
      :func:`workload_size`): cheap arithmetic, within a small factor of the built ops;
    - ``check`` (section, run) -> None, then ``build`` (section, run) -> the workload;
      ``build`` None: bulk data in rounds (the run plan's ``BulkPlan``), no client
      operations;
    - ``timers_bound_run``: its cores keep timers for ever (Meghdoot's load reports), so
      the phase, not the last event, ends a simulated run;
    - ``repairs``: room after the last operation for this many failure repairs (CoDD's
      heartbeats, see ``RunPlan.repair_s``);
    - ``block``: its summary block and figures (a name of
      :data:`nodes.metrics.blocks.BLOCKS`), or None;
    - ``routing_load``: when its summaries carry the Kyra paper's routing load from the
      logs: ``always``, on a modelled ``underlay`` only (``transit-stub``), or ``never``;
    - ``capture_checked``: an emulated run's capture is sized against its brokers when
      the plan is made;
    - ``line`` (the plan's workload description, its phase in s) -> one line for
      ``pubsublab plan``.
    """

    name: str
    defaults: Mapping[str, Any]
    line: Callable[[Mapping[str, Any], float | None], str]
    serves: str
    build: Callable[[Mapping[str, Any], RunContext], Workload] | None = None
    check: Check = _no_check
    estimate: Estimate = _no_estimate
    fields: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    timers_bound_run: bool = False
    repairs: int = 0
    block: str | None = None
    routing_load: Literal["always", "underlay", "never"] = "never"
    capture_checked: bool = False


def check_types(kind: WorkloadKind, p: Mapping[str, Any]) -> None:
    """ValueError (one line naming the field) for the first value of section ``p`` that is
    not of its default's type: an integer for an int default (``true`` is no count), a
    finite number for a float one, a string, a bool or a list. Keys with a ``fields``
    check, and keys whose default is None, are left to that check or to the builder."""
    for key, default in kind.defaults.items():
        if key in kind.fields or default is None:
            continue
        value = p[key]
        if isinstance(default, list):
            ok, allowed = isinstance(value, list), "a list"
        else:
            test, allowed = KINDS[kind_of(default)]
            ok = test(value)
        if not ok:
            raise ValueError(f"workload.{key}: bad value {short_repr(value)}; allowed: "
                             f"{allowed} (its default is {default!r})")


def _needs_on_demand(why: str) -> Check:
    """A check refusing fixed links: the kind's overlay ``why`` (it grows as it runs)."""
    def check(p: Mapping[str, Any], ctx: RunContext) -> None:
        if ctx.links != "on-demand":
            raise ValueError(f"routing.links: {why}; allowed: on-demand")
    return check


# --- stock ------------------------------------------------------------------------------

def _spread_s(value: Any) -> float | None:
    """``workload.subscribe_spread_s`` checked: seconds (a finite number) or None (half
    of ``phase_gap_s``); its range is the builder's check, which knows the gap."""
    if value is None:
        return None
    if not is_number(value):
        raise ValueError(f"workload.subscribe_spread_s: bad value {short_repr(value)}; "
                         "allowed: a number of seconds or null (half of phase_gap_s)")
    return float(value)


def _stock(p: Mapping[str, Any], ctx: RunContext) -> Workload:
    """The stock workload over the graph's brokers, with its burst and its calibration
    sample (``calibration_seed``); refused if it runs past ``duration_s``."""
    names = brokers(ctx.graph)
    try:
        w = stock_workload(
            names, n_publishers=p["n_publishers"], n_subscribers=p["n_subscribers"],
            pubs_per_publisher=p["pubs_per_publisher"], publish_rate_hz=p["publish_rate_hz"],
            seed=ctx.seed, mode=p["mode"], selectivity=p["selectivity"],
            selectivity_of=p["selectivity_of"],
            phase_gap_s=p["phase_gap_s"], advertise_spread_s=p["advertise_spread_s"],
            subscribe_spread_s=p["subscribe_spread_s"],
            publish_spread_share=p["publish_spread_share"])
        seed = p["calibration_seed"]
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ValueError(f"calibration_seed: bad value {seed!r}; allowed: an "
                                 "integer or null")
            sample = stock_workload(
                names, n_publishers=p["n_publishers"], n_subscribers=0,
                pubs_per_publisher=p["pubs_per_publisher"],
                publish_rate_hz=p["publish_rate_hz"], seed=seed, mode=p["mode"],
                selectivity=p["selectivity"], selectivity_of=p["selectivity_of"])
            w = replace(w, meta={**w.meta, "calibration": publication_attrs(sample)})
    except (ValueError, TypeError) as exc:
        raise ValueError(f"workload: {exc}") from None
    if p["burst"] is not None:
        w = add_burst(w, ctx.graph, p["burst"], seed=ctx.seed)  # its error names its field
    last = max((op.t_s for op in w.ops), default=0.0)
    if ctx.duration_s is not None and last > ctx.duration_s:
        raise ValueError(f"duration_s: bad value {ctx.duration_s!r}; allowed: at least "
                         f"{last:g} (the workload's last operation, in s)")
    return w


def _stock_estimate(p: Mapping[str, Any], ctx: RunContext) -> Mapping[str, int]:
    """Each publisher's advertisement and publications (twice with a calibration
    sample), each subscriber's subscription."""
    pubs = _count(p, "n_publishers")
    sample = 2 if p.get("calibration_seed") is not None else 1
    burst = p.get("burst") if isinstance(p.get("burst"), Mapping) else {}
    return {"pubs_per_publisher": pubs * _count(p, "pubs_per_publisher") * sample,
            "n_publishers": pubs, "n_subscribers": _count(p, "n_subscribers"),
            "burst.count": _count(burst, "count"),
            "burst.n_subscribers": _count(burst, "n_subscribers")}


def _stock_line(w: Mapping[str, Any], phase_s: float | None) -> str:
    return (f"workload stock: {w['clients']} clients, {w['ops']} operations, phase "
            f"{phase_s:g} s; measured selectivity {w['meta'].get('selectivity', 0):.4f}")


STOCK = WorkloadKind(
    name="stock", serves="stock", build=_stock, line=_stock_line, estimate=_stock_estimate,
    fields={"burst": burst_settings, "subscribe_spread_s": _spread_s},
    routing_load="underlay", capture_checked=True,
    defaults={
        "kind": "stock", "mode": "octopia", "n_publishers": 2, "n_subscribers": 6,
        "pubs_per_publisher": 20, "publish_rate_hz": 10.0, "selectivity": 0.02,
        "selectivity_of": SELECTIVITY_READINGS[0],
        "phase_gap_s": 1.0, "advertise_spread_s": 0.0, "subscribe_spread_s": None,
        "publish_spread_share": 1.0, "burst": None, "calibration_seed": None,
    })


# --- bulk -------------------------------------------------------------------------------

BULK = WorkloadKind(
    name="bulk", serves="bulk",
    fields={"stream_mbps": stream_cap_mbps, "slice_kb": slice_kb,
            "sweep_nodes": sweep_node_counts},
    line=lambda w, phase_s: f"workload bulk: {w.get('bulk') or 'depth sweep'}",
    defaults={
        "kind": "bulk", "data_gb": 8.0, "slice_kb": 64, "topic": "bulk", "start_s": 1.0,
        "publisher": None, "subscriber_counts": None, "failure": None, "rate_bin_s": 1.0,
        "sweep_nodes": None, "trials": 20, "stream_mbps": None,
    })


# --- meghdoot ---------------------------------------------------------------------------

def _meghdoot(p: Mapping[str, Any], ctx: RunContext) -> Workload:
    """Meghdoot's stream over the graph's brokers as peers; a peer's load is counted per
    workload step, so an algorithm's ``bucket_s`` must be ``step_s`` (checked after the
    build, which checks ``step_s`` first). Its crashes and leaves wait on the slowest
    algorithm's load reports and takeovers
    (:func:`nodes.cores.meghdoot_repair.churn_times_s`), so that every algorithm meets
    the same stream; crashes need failure detection."""
    times = [churn_times_s(params) for params in ctx.algorithms.values()]
    deaf = [name for name, (_, repair_s) in zip(ctx.algorithms, times, strict=True)
            if not repair_s]
    if p["crash_fraction"] and deaf:
        raise ValueError(f"workload.crash_fraction: {', '.join(deaf)} would never find a "
                         "crashed peer; allowed: 0, or routing.params.load_period_s and "
                         "failure_periods > 0 (failure detection)")
    try:
        w = meghdoot_workload(
            brokers(ctx.graph), p["n_subscriptions"], p["n_events"], seed=ctx.seed,
            events=p["events"], join_probability=p["join_probability"],
            events_scale=ctx.scale, order=p["order"],
            step_s=p["step_s"], n_symbols=p["n_symbols"], n_days=p["n_days"],
            crash_fraction=p["crash_fraction"], leave_fraction=p["leave_fraction"],
            churn_from=p["churn_from"], lead_s=max((lead for lead, _ in times), default=0.0),
            repair_s=max((repair for _, repair in times), default=0.0))
    except (ValueError, TypeError) as exc:
        text = str(exc)  # a churn field's error names it: "crash_fraction: bad value ..."
        raise ValueError(f"workload.{text}" if text.startswith(CHURN_FIELDS)
                         else f"workload: {text}") from None
    for name, params in ctx.algorithms.items():
        bucket_s = params.get("bucket_s")
        if bucket_s is not None and bucket_s != p["step_s"]:
            raise ValueError(f"routing.params.{name}.bucket_s: bad value {bucket_s!r}; "
                             f"allowed: {p['step_s']!r} (workload.step_s: a peer's load is "
                             "counted per workload step)")
    return w


def _meghdoot_estimate(p: Mapping[str, Any], ctx: RunContext) -> Mapping[str, int]:
    """A step per subscription and per event, a join per peer (``topology``: the peers
    are its brokers), and the trading days the quotes are drawn over (a quote per
    symbol and day for skewed events)."""
    days = _count(p, "n_days") * (_count(p, "n_symbols") if p.get("events") == "skewed"
                                  else 1)
    return {"n_subscriptions": _count(p, "n_subscriptions"),
            "n_events": _count(p, "n_events"), "topology": len(brokers(ctx.graph)),
            "n_days": days}


def _meghdoot_line(w: Mapping[str, Any], phase_s: float | None) -> str:
    m = w["meta"]
    churn = (f" ({len(m['crashes_s'])} crash, {len(m['leaves_s'])} leave)"
             if m.get("crashes_s") or m.get("leaves_s") else "")
    return (f"workload meghdoot: {m['n_subscriptions']} subscriptions and {m['n_events']} "
            f"{m['events']} events ({m['order']}), {m['n_peers']} of {m['n_peers_bound']} "
            f"peers joined{churn}, {w['ops']} operations, phase {phase_s:g} s")


def _join_probability(v: Any) -> Any:
    """``workload.join_probability``: ``paper`` or a probability; ValueError otherwise."""
    if v == "paper" or (is_number(v) and 0 < v <= 1):
        return v
    raise ValueError(f"workload.join_probability: bad value {short_repr(v)}; allowed: paper "
                     "or a number in (0, 1]")


# Meghdoot's stream (nodes.workloads.meghdoot): the paper's 14,029 subscriptions, its
# 115,000 events scaled by 0.1, its 10 % join probability scaled to the stream's length
# (the paper's events are ours over the spec's scale), 100 symbols over 1,154 days; no
# crash or leave (ours), which go from half of the stream on when asked for.
MEGHDOOT = WorkloadKind(
    name="meghdoot", serves="meghdoot", build=_meghdoot, estimate=_meghdoot_estimate,
    check=_needs_on_demand("a meghdoot workload builds its overlay while it runs"),
    line=_meghdoot_line, timers_bound_run=True, block="meghdoot",
    fields={"join_probability": _join_probability},
    defaults={
        "kind": "meghdoot", "n_subscriptions": 14029, "n_events": 11500,
        "events": "uniform", "join_probability": "paper", "order": "interleaved",
        "step_s": 0.1, "n_symbols": 100, "n_days": 1154,
        "crash_fraction": 0.0, "leave_fraction": 0.0, "churn_from": 0.5,
    })


# --- codd -------------------------------------------------------------------------------

def _codd_check(p: Mapping[str, Any], ctx: RunContext) -> None:
    _needs_on_demand("a codd workload builds its trees while it runs")(p, ctx)
    for churn in ("leave_fraction", "crash_fraction"):
        if p[churn] and "codd-siena" in ctx.algorithms:
            raise ValueError(f"workload.{churn}: the Siena emulation places servers and "
                             "clients as they arrive and has no leave or repair; allowed: "
                             "0 with codd-siena")


def _codd(p: Mapping[str, Any], ctx: RunContext) -> Workload:
    """CoDD's stream over the graph's brokers (the first by name is the root); crashes
    need failure detection (checked after the build, which checks the fractions first)."""
    names = brokers(ctx.graph)
    if len(names) < 2:
        raise ValueError(f"topology: a codd workload needs at least 2 brokers (the root and "
                         f"a consumer); {ctx.topology!r} has {len(names)}")
    try:
        w = codd_workload(
            names, p["n_documents"], seed=ctx.seed, interest=p["interest"],
            selectivity=p["selectivity"], k=p["k"], c=p["c"], cf=p["cf"],
            buckets_per_node=p["buckets_per_node"], step_s=p["step_s"],
            leave_fraction=p["leave_fraction"], crash_fraction=p["crash_fraction"])
    except ValueError as exc:  # "field: bad value ...; allowed: ..."
        raise ValueError(f"workload.{exc}") from None
    deaf = [name for name, params in ctx.algorithms.items() if not params.get("heartbeat_s")]
    if p["crash_fraction"] and deaf:
        raise ValueError(f"workload.crash_fraction: {', '.join(deaf)} would never find a "
                         "crashed node; allowed: 0, or routing.params.heartbeat_s > 0 "
                         "(failure detection)")
    return w


def _codd_estimate(p: Mapping[str, Any], ctx: RunContext) -> Mapping[str, int]:
    """A publication per document, a join and subscriptions per node (one per bucket),
    and a member set per interest class (``k``)."""
    nodes = len(brokers(ctx.graph))
    return {"n_documents": _count(p, "n_documents"),
            "buckets_per_node": nodes * (1 + _count(p, "buckets_per_node")),
            "k": _count(p, "k") if p.get("interest") == "classes" else 0}


def _codd_line(w: Mapping[str, Any], phase_s: float | None) -> str:
    m = w["meta"]
    interest = (f"interest classes k {m['k']}, c {m['c']} every {m['cf']}, selectivity "
                f"{m['selectivity_asked']:g} asked" if m["interest"] == "classes"
                else "Meghdoot-template stock queries")
    return (f"workload codd: {m['n_documents']} documents from root {m['root']} to "
            f"{len(m['nodes']) - 1} consumers ({len(m['leaves_s'])} leave, "
            f"{len(m.get('crashes_s', {}))} crash), {interest}, {m['selectivity']:.4f} "
            f"measured; {w['ops']} operations, phase {phase_s:g} s")


# CoDD's stream (nodes.workloads.codd): the paper's defaults (Fig. 8, §5.1): 10,000
# documents, selectivity 0.2, k = 20 interest classes, a shuffle of c = 4 every 200.
CODD = WorkloadKind(
    name="codd", serves="codd", check=_codd_check, build=_codd, line=_codd_line,
    estimate=_codd_estimate,
    repairs=5, block="codd",
    defaults={
        "kind": "codd", "n_documents": 10000, "interest": "classes", "selectivity": 0.2,
        "k": 20, "c": 4, "cf": 200, "buckets_per_node": 1, "step_s": 0.1,
        "leave_fraction": 0.0, "crash_fraction": 0.0,
    })


# --- kyra-example -----------------------------------------------------------------------

def _kyra_example(p: Mapping[str, Any], ctx: RunContext) -> Workload:
    """The Kyra paper's example over brokers ``a`` .. ``h`` (Fig. 1's servers)."""
    letters = sorted(FIG1_SUBSCRIPTIONS)
    if sorted(brokers(ctx.graph)) != [s.lower() for s in letters]:
        raise ValueError("topology: a kyra-example workload needs the brokers "
                         f"{', '.join(s.lower() for s in letters)} (topology kyra-example, "
                         "or an overlay over them)")
    try:
        return kyra_example_workload(p["publisher"], p["events"],
                                     {s: s.lower() for s in letters})
    except ValueError as exc:  # "field: bad value ...; allowed: ..."
        raise ValueError(f"workload.{exc}") from None


def _kyra_example_line(w: Mapping[str, Any], phase_s: float | None) -> str:
    m = w["meta"]
    return (f"workload kyra-example: events {m['events']} published at server "
            f"{m['publisher']} to Fig. 1's subscriptions; {w['clients']} clients, "
            f"{w['ops']} operations, phase {phase_s:g} s")


# The Kyra paper's worked example (nodes.workloads.kyra_example): Fig. 1's subscriptions,
# then these events (0-9) published at this server (a figure letter).
KYRA_EXAMPLE = WorkloadKind(
    name="kyra-example", serves="stock", build=_kyra_example, line=_kyra_example_line,
    routing_load="always",
    defaults={"kind": "kyra-example", "publisher": "A", "events": [9]})


WORKLOADS: dict[str, WorkloadKind] = {
    k.name: k for k in (STOCK, BULK, MEGHDOOT, CODD, KYRA_EXAMPLE)}
