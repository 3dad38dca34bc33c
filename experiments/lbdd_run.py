"""Bulk data distribution runs: LBDD against point-to-point, simulated and in Mininet, and
LBDD's simulated depth sweep (Li et al. 2014, Section 4).

A spec with ``workload.kind: bulk`` (keys and defaults: :data:`experiments.plan.BULK_DEFAULTS`)::

    data_gb: 8              # the paper's data; a run sends data_gb GiB x scale, at least
                            # one slice (scale 1/128: 64 MiB)
    slice_kb: 64            # the paper's slice size
    topic: bulk
    start_s: 1.0            # the data starts this long after the clients, once joins settled
    publisher: null         # the publisher's broker (null: the first, pc1 = 10.3.17.74)
    subscriber_counts: null # rounds with the first n other brokers subscribing (null: all)
    failure: null           # {victim: pc7, at_s: 2.0 | at_fraction: 0.4, algorithms: [lbdd]}
    rate_bin_s: 1.0         # bins of the per-subscriber rate and NIC load series
    sweep_nodes: null       # [100, ..., 500]: the depth sweep instead (simulated only)
    trials: 20              # random IP sets per sweep size

Readings and choices:

- **Who publishes.** The paper has one PC publish and the eleven others subscribe, but
  does not say which: we take the first address it lists (10.3.17.74, ``pc1``). With
  ``n`` subscribers a round uses the first ``n`` other PCs in the paper's order. Every PC
  runs its agent in every round; only subscribers take part in the tree.
- **Rounds.** For each algorithm and each subscriber count: agents started (the complete
  overlay up), then one client per PC that takes part (:mod:`nodes.client`: the publisher's
  ``bulk-publisher`` role, the subscribers' ``subscriber`` role), the data starting
  ``start_s`` after them. A round ends when every surviving subscriber has every slice.
- **Failure round** (``failure``): the largest count again, the victim's agent and user
  killed (SIGKILL; ``kill_at`` in the simulator) ``at_s`` after the data starts, or at
  ``at_fraction`` of the same algorithm's distribution delay without failure.
- **Metrics** (one clock per round: the runtime's monotonic clock, shared by all Mininet
  hosts, or simulated time). *Distribution delay*: from the publisher's first slice to the
  moment the last surviving subscriber holds every slice. *Rate per subscriber*: its data
  over its own completion time, and a series of Mbit/s per ``rate_bin_s``.
  *Publisher NIC load*: bytes its interface sent during the distribution over what its
  link carries in that time (mean), and the busiest bin (peak); emulated runs read the
  interface's kernel counters (so TCP/IP headers, acknowledgements and heartbeats
  count), simulated runs the DATA frames the agent sent. *Contribution* of a node (the
  paper's ``1/n x copies sent``): DATA slices it sent over the slices of the data, over
  the number of subscribers. *Slice delay* (``delay_ms.notification``): a slice's
  receipt minus its hand-over by the publisher's user. *Failure*: detection is the time
  from the kill until the survivors' heartbeats declared the victim dead (first and
  last); repair, until every orphan (a survivor whose parent was the victim) received a
  slice after its path update; resumes list what each orphan already held; slices
  received twice are the agents' duplicates (never delivered twice).
- **Checksums.** Emulated subscribers hash every slice (:class:`nodes.bulkdata.DataLog`);
  a round checks every survivor's checksum against the publisher's and against the
  checksum regenerated here from the seed. The simulator passes the publisher's bytes
  objects along, so there is nothing to check there.
- **Depth sweep.** For each size ``n``: ``trials`` sets of ``n`` random distinct IPv4
  addresses (seeded), the first the publisher; depth and out-degrees of
  :func:`nodes.cores.lbdd.lbdd_tree`; then the first set is simulated end to end (a
  complete overlay, each node's NIC at the topology's link rate) to check that the
  agents build that very tree and deliver every slice exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.emulated import BrokerRun, broker_configs
from experiments.network import Emulation
from experiments.plan import algorithm_params, overlay_links, workload_params
from experiments.runner import git_revision, log, new_run_dir, spec_graph, write_json
from experiments.spec import Spec, SpecError
from experiments.workload import ClientOp, Workload
from nodes.bulkdata import FIRST_DATA_ID, data_messages, slice_count, source_checksum
from nodes.core import Action, Deliver, Event, Record, Send
from nodes.cores import CORES, make_core, overlay_params
from nodes.cores.dissemination import TreeFn
from nodes.cores.lbdd import lbdd_tree, tree_stats
from nodes.frames import frame_size
from nodes.logs import iter_jsonl
from nodes.messages import Message, MsgType
from nodes.model import Schema
from nodes.sim import simulate
from nodes.summary import build_summary
from topologies.graph import brokers

GIB = 2**30
START_MARGIN_S = 2.0  # clients' t = 0 lies this far after they are started
NIC_FILE = "nic.json"  # an emulated round's publisher NIC samples and kill time
_RECORD_KINDS = ("path", "member_down", "resume", "transfer_complete")


@dataclass(frozen=True)
class BulkPlan:
    """A bulk workload resolved against a list of brokers (see the module docstring)."""

    topic: str
    data_bytes: int
    slice_bytes: int
    seed: int
    start_s: float
    publisher: str
    others: tuple[str, ...]
    counts: tuple[int, ...]
    failure: Mapping[str, Any] | None
    rate_bin_s: float

    @property
    def n_slices(self) -> int:
        return slice_count(self.data_bytes, self.slice_bytes)

    @property
    def publisher_client(self) -> str:
        return f"pub-{self.publisher}"

    @staticmethod
    def client_of(broker: str) -> str:
        """The subscriber client on ``broker``."""
        return f"sub-{broker}"


def bulk_plan(spec: Spec, names: Sequence[str]) -> BulkPlan:
    """The spec's bulk workload over brokers ``names`` (in topology order), or a SpecError."""
    p = workload_params(spec)
    publisher = p["publisher"] or names[0]
    if publisher not in names:
        raise SpecError(f"workload.publisher: bad value {publisher!r}; allowed: {names}")
    others = tuple(b for b in names if b != publisher)
    counts = tuple(p["subscriber_counts"] or [len(others)])
    if not all(isinstance(n, int) and 1 <= n <= len(others) for n in counts):
        raise SpecError(f"workload.subscriber_counts: bad value {counts!r}; allowed: "
                        f"integers 1..{len(others)}")
    slice_bytes = int(p["slice_kb"] * 1024)
    data_bytes = max(slice_bytes, round(p["data_gb"] * GIB * spec.scale))
    failure = p["failure"]
    if failure is not None:
        victims = others[: max(counts)]
        if not isinstance(failure, Mapping) or failure.get("victim") not in victims or (
                ("at_s" in failure) == ("at_fraction" in failure)):
            raise SpecError(f"workload.failure: bad value {failure!r}; allowed: {{victim: "
                            f"one of {list(victims)}, at_s: S or at_fraction: F, "
                            f"algorithms: [...]}}")
    return BulkPlan(topic=str(p["topic"]), data_bytes=data_bytes, slice_bytes=slice_bytes,
                    seed=spec.seed, start_s=float(p["start_s"]), publisher=publisher,
                    others=others, counts=counts, failure=failure,
                    rate_bin_s=float(p["rate_bin_s"]))


def bulk_workload(plan: BulkPlan, subscribers: Sequence[str]) -> Workload:
    """The client operations of one round, for the simulator: ADVERTISE and SUBSCRIBE at
    0, the publisher's whole data at ``start_s`` (what the client roles send)."""
    pub = plan.publisher_client
    clients = {pub: plan.publisher, **{plan.client_of(b): b for b in subscribers}}
    topic = {"topic": plan.topic}
    ops = [ClientOp(0.0, pub, plan.publisher, Message(MsgType.ADVERTISE, 1, pub, 0, topic))]
    ops += [ClientOp(0.0, plan.client_of(b), b,
                     Message(MsgType.SUBSCRIBE, 1, plan.client_of(b), 0, topic))
            for b in subscribers]
    ops += [ClientOp(plan.start_s, pub, plan.publisher, m) for m in data_messages(
        pub, plan.topic, plan.data_bytes, plan.slice_bytes, plan.seed)]
    meta = {"kind": "bulk", "data_bytes": plan.data_bytes, "slice_bytes": plan.slice_bytes,
            "n_slices": plan.n_slices, "subscribers": len(subscribers)}
    return Workload(Schema({}), clients, tuple(ops), meta)


# ---- what a round produced, from either runtime ----------------------------------------


@dataclass
class Observation:
    """One round on one clock (seconds): receipts ``(t, subscriber broker, index)``, DATA
    copies each broker sent ``(t, frame bytes)``, core records ``(t, broker, kind,
    fields)``, the publisher's NIC as ``(t, bytes sent so far)``, and checksums by node."""

    subscribers: tuple[str, ...]
    start_s: float
    receipts: list[tuple[float, str, int]] = field(default_factory=list)
    data_sent: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    ims_by_type: dict[str, int] = field(default_factory=dict)
    records: list[tuple[float, str, str, dict[str, Any]]] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    nic_tx: list[tuple[float, int]] = field(default_factory=list)
    checksums: dict[str, str | None] = field(default_factory=dict)
    killed_s: float | None = None


class _Observer:
    """Collects what the simulated agents do (the simulator hosts them wrapped in
    :class:`_Observed`), on simulated time."""

    def __init__(self, clients: Mapping[str, str]) -> None:
        self.clients = clients
        self.obs_receipts: list[tuple[float, str, int]] = []
        self.data_sent: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.records: list[tuple[float, str, str, dict[str, Any]]] = []

    def note(self, broker: str, actions: list[Action], now_s: float) -> None:
        for a in actions:
            if isinstance(a, Deliver) and a.msg.type is MsgType.DATA:
                self.obs_receipts.append((now_s, self.clients[a.client],
                                          int(a.msg.payload["index"])))
            elif isinstance(a, Send) and a.msg.type is MsgType.DATA:
                self.data_sent[broker].append((now_s, frame_size(a.msg)))
            elif isinstance(a, Record) and a.kind in _RECORD_KINDS:
                self.records.append((now_s, broker, a.kind, dict(a.fields)))


class _Observed:
    """A routing core whose actions an :class:`_Observer` sees."""

    def __init__(self, core: Any, observer: _Observer) -> None:
        self.broker = core.broker
        self.neighbours = core.neighbours
        self._core = core
        self._observer = observer

    def handle(self, event: Event, now_s: float) -> list[Action]:
        actions = self._core.handle(event, now_s)
        self._observer.note(self.broker, actions, now_s)
        return actions

    def counters(self) -> dict[str, int]:
        return self._core.counters()


def _round_limit_s(plan: BulkPlan, n_subscribers: int, nic_mbps: float | None,
                   params: Mapping[str, Any], failure: bool) -> float:
    """A generous bound on one round: every copy through the publisher's NIC thrice over,
    plus time to detect and repair a failure if there is one."""
    wire_s = n_subscribers * plan.data_bytes * 8 / ((nic_mbps or 1000.0) * 1e6)
    if not failure:
        return 3 * wire_s + 10.0
    heartbeat_s = float(params.get("heartbeat_s", 0.5))
    return 3 * wire_s + 4 * float(params.get("timeout_s", 4 * heartbeat_s)) + 10.0


def simulate_round(overlay: nx.Graph, plan: BulkPlan, algorithm: str,
                   params: Mapping[str, Any], subscribers: Sequence[str], *,
                   kill_after_s: float | None = None) -> Observation:
    """One round in the simulator (the overlay's nodes carry ``ip`` and ``nic_mbps``)."""
    workload = bulk_workload(plan, subscribers)
    observer = _Observer(workload.clients)
    derived = overlay_params(algorithm, overlay)

    def factory(broker: str, neighbours: Sequence[str], p: Mapping[str, Any]) -> _Observed:
        return _Observed(make_core(algorithm, broker, neighbours, p), observer)

    victim = plan.failure["victim"] if kill_after_s is not None and plan.failure else None
    kill_at = {victim: plan.start_s + kill_after_s} if victim else None
    nic = overlay.nodes[plan.publisher].get("nic_mbps")
    result = simulate(overlay, workload, factory, lambda b: {**derived[b], **params},
                      seed=plan.seed, log_messages=False, kill_at=kill_at,
                      until_s=plan.start_s + _round_limit_s(plan, len(subscribers), nic,
                                                            params, victim is not None))
    return Observation(subscribers=tuple(subscribers), start_s=plan.start_s,
                       receipts=observer.obs_receipts, data_sent=dict(observer.data_sent),
                       ims_by_type=result.ims_by_type, records=observer.records,
                       counters=result.counters,
                       killed_s=None if kill_at is None else plan.start_s + kill_after_s)


# ---- summaries ------------------------------------------------------------------------


def _series_mbps(events: Sequence[tuple[float, int]], start_s: float, end_s: float,
                 bin_s: float) -> list[float]:
    """Mbit/s per bin of ``bin_s`` from ``start_s`` to ``end_s`` of (t, bytes) events (the
    last bin over its own, possibly shorter, width)."""
    n_bins = max(1, int((end_s - start_s) / bin_s + 0.999999))
    bins = [0] * n_bins
    for t, n_bytes in events:
        if start_s <= t <= end_s:
            bins[min(n_bins - 1, int((t - start_s) / bin_s))] += n_bytes
    widths = [bin_s] * (n_bins - 1) + [max(1e-9, end_s - start_s - (n_bins - 1) * bin_s)]
    return [round(b * 8 / w / 1e6, 3) for b, w in zip(bins, widths, strict=True)]


def _nic_load(obs: Observation, publisher: str, nic_mbps: float | None, end_s: float | None,
              bin_s: float) -> dict[str, Any] | None:
    """The publisher NIC's load (%) over the distribution: the mean, and (from kernel
    counters only) the peak over windows of at least ``bin_s`` between two samples."""
    if not nic_mbps or end_s is None or end_s <= obs.start_s:
        return None
    capacity_bps = nic_mbps * 1e6 / 8
    if not obs.nic_tx:  # the simulator's frames are timed when queued, not on the wire
        sent = sum(b for t, b in obs.data_sent.get(publisher, []) if obs.start_s <= t <= end_s)
        return {"mean_pct": round(100 * sent / ((end_s - obs.start_s) * capacity_bps), 2),
                "peak_pct": None, "source": "DATA frames sent"}
    inside = [(t, b) for t, b in obs.nic_tx if obs.start_s <= t <= end_s]
    if len(inside) < 2:
        return None
    (t0, b0), (t1, b1) = inside[0], inside[-1]
    peak = 0.0
    for i, (ta, ba) in enumerate(inside):
        later = next(((t, b) for t, b in inside[i + 1:] if t - ta >= bin_s), None)
        if later is not None:
            peak = max(peak, (later[1] - ba) / (later[0] - ta))
    return {"mean_pct": round(100 * (b1 - b0) / ((t1 - t0) * capacity_bps), 2),
            "peak_pct": round(100 * max(peak, (b1 - b0) / (t1 - t0)) / capacity_bps, 2),
            "source": "kernel counters"}


def _last_parents(obs: Observation, before_s: float) -> dict[str, str | None]:
    """Each agent's parent in its last ``path`` record before ``before_s``."""
    parents: dict[str, str | None] = {}
    for t, broker, kind, f in obs.records:
        if kind == "path" and t < before_s:
            parents[broker] = f["parent"]
    return parents


def _failure_report(obs: Observation, victim: str, survivors: Sequence[str]) -> dict[str, Any]:
    assert obs.killed_s is not None
    kill = obs.killed_s
    before = _last_parents(obs, kill)
    orphans = sorted(b for b in survivors if before.get(b) == victim)
    detected = [t - kill for t, b, kind, f in obs.records
                if kind == "member_down" and f["agent"] == victim and b in survivors]
    repath = {b: min((t for t, x, kind, _ in obs.records
                      if kind == "path" and x == b and t >= kill), default=None)
              for b in orphans}
    resumed = {}
    for b in orphans:
        after = [t for t, sub, _ in obs.receipts if sub == b and repath[b] is not None
                 and t >= repath[b]]
        resumed[b] = min(after) - kill if after else None
    resumes = [{"t_s": round(t - kill, 6), "parent": b, "child": f["child"],
                "child_has": f["child_has"], "to_send": f["to_send"]}
               for t, b, kind, f in obs.records
               if kind == "resume" and t >= kill and f["child"] in orphans]
    repair = list(resumed.values())
    return {
        "victim": victim,
        "killed_after_start_s": round(kill - obs.start_s, 6),
        "detected_first_s": round(min(detected), 6) if detected else None,
        "detected_last_s": round(max(detected), 6) if detected else None,
        "detected_by": len({b for t, b, kind, f in obs.records if kind == "member_down"
                            and f["agent"] == victim and b in survivors}),
        "orphans": orphans,
        "repair_s": (round(max(repair), 6) if repair and None not in repair else None),
        "resumes": resumes,
        "slices_received_twice": sum(obs.counters.get(b, {}).get("slices_duplicate", 0)
                                     for b in survivors),
    }


def round_summary(obs: Observation, plan: BulkPlan, algorithm: str, runtime: str,
                  scale: float, ips: Mapping[str, str], nic_mbps: float | None,
                  victim: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary.json of one round (DESIGN.md's keys plus the bulk figures), and its rate
    series (``rates.json``)."""
    n_slices = plan.n_slices
    survivors = [b for b in obs.subscribers if b != victim]
    pub = plan.publisher_client
    keys = [(pub, FIRST_DATA_ID + i) for i in range(n_slices)]
    expected = dict.fromkeys(keys, frozenset(plan.client_of(b) for b in survivors))
    deliveries: dict[tuple[str, int], list[str]] = defaultdict(list)
    seen: dict[str, set[int]] = defaultdict(set)
    done_s: dict[str, float] = {}
    got: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for t, sub, index in sorted(obs.receipts):
        if sub == victim:
            continue
        deliveries[keys[index]].append(plan.client_of(sub))
        if index not in seen[sub]:
            seen[sub].add(index)
            got[sub].append((t, min(plan.slice_bytes, plan.data_bytes - index * plan.slice_bytes)))
            if len(seen[sub]) == n_slices:
                done_s[sub] = t
    complete = all(b in done_s for b in survivors)
    end_s = max(done_s.values()) if complete and done_s else None
    delay_s = None if end_s is None else end_s - obs.start_s
    summary = build_summary(
        algorithm=algorithm, runtime=runtime, scale=scale, published=n_slices,
        expected=expected, deliveries=deliveries, ims_by_type=obs.ims_by_type,
        delays_s={"notification": [t - obs.start_s for t, sub, _ in obs.receipts
                                   if sub != victim]},
        table_sizes={}, duration_s=delay_s or 0.0)
    copies = {b: len(sent) / n_slices for b, sent in sorted(obs.data_sent.items())}
    source_ip = ips[plan.publisher]
    tree_fn: TreeFn = CORES[algorithm].tree
    want = tree_fn(source_ip, sorted(ips[b] for b in survivors))
    final = _last_parents(obs, float("inf"))
    built = {ips[b]: ips[p] for b in survivors if (p := final.get(b)) is not None}
    summary.update({
        "publisher": plan.publisher, "subscribers": len(obs.subscribers),
        "data_bytes": plan.data_bytes, "slice_bytes": plan.slice_bytes, "n_slices": n_slices,
        "complete": complete,
        "distribution_delay_s": None if delay_s is None else round(delay_s, 6),
        "rate_mbps": {b: round(plan.data_bytes * 8 / (done_s[b] - obs.start_s) / 1e6, 3)
                      for b in survivors if b in done_s},
        "publisher_nic": _nic_load(obs, plan.publisher, nic_mbps, end_s, plan.rate_bin_s),
        "contribution": {b: round(c / len(obs.subscribers), 6) for b, c in copies.items()},
        "copies_sent": {b: round(c, 6) for b, c in copies.items()},
        "counters": obs.counters,
        "tree": {b: final.get(b) for b in survivors},
        "tree_as_computed": built == want,
        "tree_stats": tree_stats(source_ip, want) if want else None,
    })
    if obs.checksums:
        expected_sum = source_checksum(plan.data_bytes, plan.slice_bytes, plan.seed)
        summary["checksum"] = expected_sum
        summary["checksums_ok"] = all(obs.checksums.get(b) == expected_sum
                                      for b in [plan.publisher, *survivors])
    if victim is not None:
        summary["failure"] = _failure_report(obs, victim, survivors)
    rates = {"bin_s": plan.rate_bin_s, "start_s": obs.start_s, "mbps": {
        b: _series_mbps(got[b], obs.start_s, end_s or max(t for t, _ in got[b]),
                        plan.rate_bin_s) for b in survivors if got[b]}}
    return summary, rates


def _by_subscribers(row: Mapping[str, Any]) -> dict[str, Any]:
    rates = list(row["rate_mbps"].values())
    nic = row["publisher_nic"] or {}
    return {"subscribers": row["subscribers"], "complete": row["complete"],
            "distribution_delay_s": row["distribution_delay_s"],
            "rate_mbps_mean": round(sum(rates) / len(rates), 3) if rates else None,
            "publisher_nic_mean_pct": nic.get("mean_pct"),
            "publisher_nic_peak_pct": nic.get("peak_pct"),
            "publisher_contribution": row["contribution"].get(row["publisher"], 0.0),
            "missing": row["missing"], "duplicates": row["duplicates"],
            **({"checksums_ok": row["checksums_ok"]} if "checksums_ok" in row else {})}


# ---- the rounds of a spec, in either runtime ---------------------------------------------

RoundFn = Callable[[str, Sequence[str], Path, float | None], tuple[Observation, float | None]]
"""``(algorithm, subscribers, out_dir, kill_after_s) -> (observation, nic_mbps)``."""


def run_rounds(spec: Spec, plan: BulkPlan, ips: Mapping[str, str], runtime: str,
               round_fn: RoundFn, out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every algorithm x subscriber count (and the failure round) of ``spec``: one folder
    per round with summary.json and rates.json; per algorithm a summary.json whose top
    level is the largest round's, with ``by_subscribers`` and ``failure`` added."""
    summaries = {}
    for algorithm in spec.routing.algorithms:
        rows = []
        for n in plan.counts:
            subs = plan.others[:n]
            folder = out_dir / algorithm / f"n{n:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            obs, nic = round_fn(algorithm, subs, folder, None)
            row, rates = round_summary(obs, plan, algorithm, runtime, spec.scale, ips, nic)
            write_json(folder / "summary.json", row)
            write_json(folder / "rates.json", rates)
            log(f"{algorithm} n={n}: distribution delay {row['distribution_delay_s']} s, "
                f"publisher NIC {row['publisher_nic']}, missing {row['missing']}, "
                f"duplicates {row['duplicates']}")
            rows.append(row)
        top = dict(rows[-1])
        top["by_subscribers"] = [_by_subscribers(r) for r in rows]
        failure = plan.failure
        if failure and algorithm in failure.get("algorithms", spec.routing.algorithms):
            delay = top["distribution_delay_s"] or 0.0
            after_s = float(failure.get("at_s", failure.get("at_fraction", 0.0) * delay))
            folder = out_dir / algorithm / "failure"
            folder.mkdir(parents=True, exist_ok=True)
            subs = plan.others[: max(plan.counts)]
            obs, nic = round_fn(algorithm, subs, folder, after_s)
            row, rates = round_summary(obs, plan, algorithm, runtime, spec.scale, ips, nic,
                                       victim=failure["victim"])
            write_json(folder / "summary.json", row)
            write_json(folder / "rates.json", rates)
            top["failure"] = {**row["failure"], "complete": row["complete"],
                              "missing": row["missing"], "duplicates": row["duplicates"],
                              "distribution_delay_s": row["distribution_delay_s"],
                              **({"checksums_ok": row["checksums_ok"]}
                                 if "checksums_ok" in row else {})}
            log(f"{algorithm} failure: {top['failure']}")
        write_json(out_dir / algorithm / "summary.json", top)
        summaries[algorithm] = top
    return summaries


def _nic_of(graph: nx.Graph, broker: str) -> float | None:
    """The bandwidth of ``broker``'s access link (its NIC), None in overlay mode."""
    for _, _, data in graph.edges(broker, data=True):
        if data.get("type") == "access":
            return data["params"].bw_mbps
    return None


def _random_ips(n: int, rng: random.Random) -> list[str]:
    found: dict[str, None] = {}
    while len(found) < n:
        v = rng.getrandbits(32)
        found[".".join(str((v >> s) & 255) for s in (24, 16, 8, 0))] = None
    return list(found)


def depth_sweep(spec: Spec, plan_params: Mapping[str, Any], nic_mbps: float | None,
                out_dir: Path) -> dict[str, Any]:
    """The simulated sweep of tree depth and out-degree (see the module docstring)."""
    rows = []
    params = algorithm_params(spec, "lbdd")
    for n in plan_params["sweep_nodes"]:
        stats = []
        for trial in range(int(plan_params["trials"])):
            ips = _random_ips(n, random.Random(f"{spec.seed}:{n}:{trial}"))
            stats.append(tree_stats(ips[0], lbdd_tree(ips[0], ips[1:])))
        ips = _random_ips(n, random.Random(f"{spec.seed}:{n}:0"))
        names = [f"h{i:03d}" for i in range(n)]
        overlay = nx.complete_graph(names)
        for name, ip in zip(names, ips, strict=True):
            overlay.nodes[name].update(ip=ip, nic_mbps=nic_mbps)
        plan = BulkPlan(topic=str(plan_params["topic"]), data_bytes=max(
            int(plan_params["slice_kb"] * 1024), round(plan_params["data_gb"] * GIB * spec.scale)),
            slice_bytes=int(plan_params["slice_kb"] * 1024), seed=spec.seed,
            start_s=float(plan_params["start_s"]), publisher=names[0],
            others=tuple(names[1:]), counts=(n - 1,), failure=None,
            rate_bin_s=float(plan_params["rate_bin_s"]))
        obs = simulate_round(overlay, plan, "lbdd", params, names[1:])
        row, _ = round_summary(obs, plan, "lbdd", "simulated", spec.scale,
                               dict(zip(names, ips, strict=True)), nic_mbps)
        depths = [s["depth"] for s in stats]
        means = [s["mean_out_degree"] for s in stats]
        sweep_row = {
            "nodes": n, "trials": len(stats),
            "depth": {"min": min(depths), "mean": round(sum(depths) / len(depths), 3),
                      "max": max(depths)},
            "mean_out_degree": {"min": min(means), "mean": round(sum(means) / len(means), 4),
                                "max": max(means)},
            "source_out_degree_mean": round(sum(s["source_out_degree"] for s in stats)
                                            / len(stats), 3),
            "max_out_degree": max(s["max_out_degree"] for s in stats),
            "simulated": {k: row[k] for k in ("complete", "missing", "duplicates",
                                              "distribution_delay_s", "tree_as_computed")},
            "publisher_contribution": row["contribution"].get(names[0], 0.0),
            "max_subscriber_contribution": max((c for b, c in row["contribution"].items()
                                                if b != names[0]), default=0.0),
        }
        rows.append(sweep_row)
        log(f"sweep n={n}: depth {sweep_row['depth']}, mean out-degree "
            f"{sweep_row['mean_out_degree']['mean']}, simulated {sweep_row['simulated']}")
    per_node = ("contribution", "copies_sent", "counters", "rate_mbps", "tree", "tree_stats")
    top = {k: v for k, v in row.items() if k not in per_node}  # 500 nodes' maps: see rows
    top["sweep"] = rows
    (out_dir / "lbdd").mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "lbdd" / "summary.json", top)
    return {"lbdd": top}


def run_bulk_simulation(spec: Spec, out_base: Path, *, label: str | None = None
                        ) -> tuple[Path, dict[str, dict[str, Any]]]:
    """``pubsublab sim`` for a bulk spec: the rounds in the simulator, or the depth sweep;
    the run folder is named ``label`` (default ``<spec>-sim``)."""
    graph = spec_graph(spec)
    p = workload_params(spec)
    for name in spec.routing.algorithms:
        if name not in CORES or not hasattr(CORES[name], "tree"):
            raise SpecError(f"routing.algorithms: bad value {name!r} for a bulk workload; "
                            "allowed: lbdd, p2p, p2p-parallel")
    run_dir = new_run_dir(out_base, label or f"{spec.name}-sim")
    manifest: dict[str, Any] = {"run": run_dir.name, "runtime": "simulated",
                                "spec": spec.to_dict(), "seed": spec.seed, "scale": spec.scale,
                                "git": git_revision(), "workload": p}
    names = brokers(graph)
    nic = _nic_of(graph, names[0])
    if p["sweep_nodes"]:
        if list(spec.routing.algorithms) != ["lbdd"]:
            raise SpecError("routing.algorithms: the depth sweep runs lbdd only")
        summaries = depth_sweep(spec, p, nic, run_dir)
    else:
        plan = bulk_plan(spec, names)
        overlay = overlay_links(graph, spec.links)
        for b in names:
            overlay.nodes[b]["nic_mbps"] = _nic_of(graph, b)
        manifest["bulk"] = {"data_bytes": plan.data_bytes, "n_slices": plan.n_slices}

        def round_fn(algorithm: str, subs: Sequence[str], _folder: Path,
                     kill_after_s: float | None) -> tuple[Observation, float | None]:
            obs = simulate_round(overlay, plan, algorithm, algorithm_params(spec, algorithm),
                                 subs, kill_after_s=kill_after_s)
            return obs, nic

        ips = {b: graph.nodes[b]["ip"] for b in names}
        summaries = run_rounds(spec, plan, ips, "simulated", round_fn, run_dir)
    write_json(run_dir / "manifest.json", manifest)
    return run_dir, summaries


# ---- emulated rounds ----------------------------------------------------------------------


class _NicSampler:
    """Samples a Mininet host's interface transmit counter (``/proc/<pid>/net/dev`` of a
    process in the host's network namespace) every ``interval_s``, with monotonic times."""

    def __init__(self, pid: int, intf: str, interval_s: float = 0.1) -> None:
        self._path = Path(f"/proc/{pid}/net/dev")
        self._intf = intf
        self._interval_s = interval_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> int:
        for line in self._path.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == self._intf:
                return int(rest.split()[8])  # receive has 8 columns, then transmit bytes
        raise RuntimeError(f"interface {self._intf} not in {self._path}")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._read()))
            self._stop.wait(self._interval_s)

    def __enter__(self) -> _NicSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), self._read()))


def observation_from_logs(out_dir: Path, plan: BulkPlan, subscribers: Sequence[str],
                          names: Sequence[str]) -> Observation:
    """An emulated round's observation, from its broker and client logs and ``nic.json``
    (the publisher's interface counters and the kill time, written by the round)."""
    pub_log = list(iter_jsonl(out_dir / f"{plan.publisher_client}.jsonl"))
    starts = [r["t_mono"] for r in pub_log if r["ev"] == "send" and r.get("type") == "DATA"]
    obs = Observation(subscribers=tuple(subscribers), start_s=min(starts, default=0.0))
    obs.checksums[plan.publisher] = next(
        (r["checksum"] for r in pub_log if r.get("kind") == "data_send"), None)
    for b in subscribers:
        obs.checksums[b] = None
        for r in iter_jsonl(out_dir / f"{plan.client_of(b)}.jsonl"):
            if r["ev"] == "recv" and r.get("type") == "DATA":
                obs.receipts.append((r["t_mono"], b, r["index"]))
            elif r.get("kind") == "data_recv":
                obs.checksums[b] = r["checksum"]
    ims: dict[str, int] = defaultdict(int)
    for b in names:
        for r in iter_jsonl(out_dir / f"{b}.jsonl"):
            if r["ev"] == "send" and r.get("link") in names and r["type"] != "HELLO":
                ims[r["type"]] += 1
                if r["type"] == "DATA":
                    obs.data_sent.setdefault(b, []).append((r["t_mono"], r["size"]))
            elif r["ev"] == "record" and r["kind"] in _RECORD_KINDS:
                fields = {k: v for k, v in r.items()
                          if k not in ("t_mono", "t_wall", "node", "ev", "kind")}
                obs.records.append((r["t_mono"], b, r["kind"], fields))
            elif r["ev"] == "record" and r["kind"] == "counters":
                obs.counters[b] = {k: v for k, v in r.items() if k.startswith("slices_")}
    obs.ims_by_type = dict(sorted(ims.items()))
    obs.records.sort(key=lambda rec: rec[0])
    if (out_dir / NIC_FILE).exists():
        nic = json.loads((out_dir / NIC_FILE).read_text())
        obs.nic_tx = [(t, b) for t, b in nic["tx_bytes"]]
        obs.killed_s = nic["killed_s"]
    return obs


def _wait_for_markers(paths: Sequence[Path], marker: bytes, timeout_s: float) -> list[Path]:
    """Wait until every file holds ``marker``; the ones that do not at the timeout."""
    offsets = dict.fromkeys(paths, 0)
    tails = dict.fromkeys(paths, b"")
    waiting = set(paths)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for path in sorted(waiting):
            with contextlib.suppress(FileNotFoundError), path.open("rb") as fh:
                fh.seek(offsets[path])
                chunk = fh.read()
                offsets[path] += len(chunk)
                if marker in tails[path] + chunk:
                    waiting.discard(path)
                tails[path] = (tails[path] + chunk)[-len(marker):]
        time.sleep(0.2)
    return sorted(waiting)


def emulated_round(emu: Emulation, spec: Spec, plan: BulkPlan, algorithm: str,
                   subscribers: Sequence[str], out_dir: Path,
                   kill_after_s: float | None = None) -> Observation:
    """One round on the live network; see the module docstring."""
    emulate = emu.probe["mechanisms"]["delay_loss"] == "in-broker"
    configs = broker_configs(emu.graph, algorithm, dict(algorithm_params(spec, algorithm)),
                             emulate_link=emulate, log_dir=out_dir, seed=spec.seed)
    run = BrokerRun(emu, out_dir)
    host = emu.net[plan.publisher]
    victim = plan.failure["victim"] if kill_after_s is not None and plan.failure else None
    limit_s = _round_limit_s(plan, len(subscribers), _nic_of(emu.graph, plan.publisher),
                             algorithm_params(spec, algorithm), victim is not None)
    killed_s = None
    try:
        run.start_brokers(configs)
        run.wait_links_up(60.0)
        start_at = time.time() + START_MARGIN_S
        run.start_client(plan.publisher_client, plan.publisher, {
            "role": "bulk-publisher", "topic": plan.topic, "data_bytes": plan.data_bytes,
            "slice_bytes": plan.slice_bytes, "data_seed": plan.seed, "start_s": plan.start_s,
            "start_at_wall": start_at})
        for b in subscribers:
            run.start_client(plan.client_of(b), b, {
                "role": "subscriber", "subscribe": {"topic": plan.topic},
                "start_at_wall": start_at})
        with _NicSampler(host.pid, host.defaultIntf().name) as nic:
            if victim is not None:
                assert kill_after_s is not None
                time.sleep(max(0.0, start_at + plan.start_s + kill_after_s - time.time()))
                for proc in (run.brokers[victim], run.clients[plan.client_of(victim)]):
                    os.kill(proc.pid, signal.SIGKILL)
                killed_s = time.monotonic()
            survivors = [b for b in subscribers if b != victim]
            late = _wait_for_markers([out_dir / f"{plan.client_of(b)}.jsonl" for b in survivors],
                                     b'"kind":"data_recv"', START_MARGIN_S + limit_s)
        if late:
            log(f"WARNING {algorithm}: no complete data after {limit_s:.0f} s at "
                f"{', '.join(p.stem for p in late)}")
    finally:
        for proc in run.clients.values():
            if proc.poll() is None:
                proc.terminate()
        run.wait_clients(15.0)
        run.stop_brokers()
    write_json(out_dir / NIC_FILE, {"host": plan.publisher, "intf": host.defaultIntf().name,
                                    "tx_bytes": nic.samples, "killed_s": killed_s})
    return observation_from_logs(out_dir, plan, subscribers, brokers(emu.graph))


def bulk_phase(spec: Spec) -> Callable[[Emulation, Path, dict[str, Any]], None]:
    """A runner phase running the spec's rounds on the live network; the summaries go to
    ``<run>/<algorithm>/summary.json`` and into the manifest."""

    def phase(emu: Emulation, run_dir: Path, manifest: dict[str, Any]) -> None:
        names = brokers(emu.graph)
        plan = bulk_plan(spec, names)
        manifest["workload"] = {**workload_params(spec), "data_bytes": plan.data_bytes,
                                "n_slices": plan.n_slices}
        ips = {b: emu.graph.nodes[b]["ip"] for b in names}
        nic = _nic_of(emu.graph, plan.publisher)

        def round_fn(algorithm: str, subs: Sequence[str], folder: Path,
                     kill_after_s: float | None) -> tuple[Observation, float | None]:
            return emulated_round(emu, spec, plan, algorithm, subs, folder, kill_after_s), nic

        manifest["summaries"] = run_rounds(spec, plan, ips, "emulated", round_fn, run_dir)

    return phase
