"""The faults an emulated run injects and those it meets, and the status they give it.

A fault is **declared** when the spec injects it (:func:`declared_faults`): a CRASH
operation of the workload (the runner kills that broker), a rate change of the
``link_schedule``, or the failure round of a bulk workload. Declared or not, what a run
meets is recorded in each algorithm's summary:

- ``broker_exits``: the brokers whose process ended before the runner stopped them
  (:class:`ExitWatch`): when, on the workload's clock (to within :data:`EXIT_POLL_S`),
  the exit code and the signal, and ``declared`` when it was the runner's CRASH kill.
  Such a broker never wrote its last status, so the runner rewrites its status file
  (:meth:`experiments.runs.brokers.BrokerRun.record_exit`);
- ``link_downs``: the overlay links a broker declared down while the workload ran (a
  ``link`` record ``state: down``: the connection ended, or the keepalive of
  :mod:`nodes.emulated.broker` timed out), not graceful closes nor the shutdown at the end
  (:func:`link_downs`). With links opened on demand, the far side of a graceful
  Disconnect sees only the connection end (``closed by peer``, as after a crash), so
  such closes are listed too.

**Losses and status.** An algorithm's deliveries are exactly once when no expected
delivery is missing and none arrived twice; each missing or duplicate delivery of a
notification to a subscriber is a loss. A declared fault *explains* a loss only when it
can have caused it (:func:`delivery_faults`):

- a CRASH of broker ``c`` at ``t`` explains the loss when the notification was published
  no earlier than :data:`IN_FLIGHT_S` before ``t`` (a crash cannot touch a notification
  delivered before it; the bound covers one still on its way) **and** the notification
  could pass ``c``: ``c`` is the publisher's broker, the subscriber's, or on some simple
  path between them in the overlay (every broker, with links opened on demand;
  :func:`notification_routes`, :class:`topologies.graph.SimplePaths`). Both are
  necessary conditions, not a proof, so "explained" means "not excluded". A rendezvous
  off every such path (an LBDD tree's root hanging beyond the subscriber, say) is not
  counted: a loss it causes shows as unexplained, for the logs to settle;
- a ``link_schedule`` rate change explains nothing: the overlay runs over TCP, so a
  slower link delays notifications and never loses one (queues that drop count their
  drops by reason in the summary);
- a bulk run's failure round reports its own figures: its losses are those of its
  rounds without a failure (``by_subscribers``).

The summary's ``faults`` gives the declared faults and the losses they do not explain
(all of them when no crash is declared). A run in which some algorithm has an
unexplained loss ends with status :data:`LOSSY` and ``pubsublab run`` exits
:data:`EXIT_LOSSY` (:func:`run_faults`): a broker killed from outside, or a link that
went down, with losses and no declared crash to explain them, ends a run ``lossy``.
Unexpected deliveries (``unexpected``, pairs the oracle did not expect) are reported as
before and do not change the status.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx

from experiments.plan import RunPlan
from experiments.runs.brokers import BrokerRun
from nodes.logs import Ev, iter_jsonl
from nodes.messages import MsgType
from nodes.metrics.log_summary import client_receipts
from nodes.metrics.summary import MsgKey
from nodes.runfolder import log_path
from nodes.workloads.ops import Workload
from topologies.graph import SimplePaths

LOSSY = "lossy"  # the run status when deliveries were lost and no declared fault explains it
EXIT_LOSSY = 3  # pubsublab run's exit code then (2: an error, 130: interrupted)
IN_FLIGHT_S = 1.0  # how long before a fault a notification may still be on its way (s)
EXIT_POLL_S = 0.2  # how often ExitWatch looks at the broker processes (s)
# Link-down reasons of nodes.emulated.broker that are no fault: the link was closed on purpose.
_CLOSED_ON_PURPOSE = frozenset({"shutdown", "disconnect", "replaced by a new connection"})


def declared_faults(plan: RunPlan) -> list[dict[str, Any]]:
    """The faults the plan injects, each with its ``kind`` (``crash``, ``link_rate``,
    ``bulk_failure``) and, but for the last, its time ``t_s`` on the workload's clock."""
    faults: list[dict[str, Any]] = []
    if plan.workload is not None:
        faults += [{"kind": "crash", "broker": op.broker, "t_s": op.t_s}
                   for op in plan.workload.ops if op.msg.type is MsgType.CRASH]
    faults += [{"kind": "link_rate", "a": c.a, "b": c.b, "bw_mbps": c.bw_mbps, "t_s": c.at_s}
               for c in plan.link_schedule]
    if plan.bulk is not None and plan.bulk.failure:
        faults.append({"kind": "bulk_failure", "victim": plan.bulk.failure["victim"]})
    return faults


class RunThread:
    """A daemon thread beside a run's brokers, on the workload's clock (t = 0 at
    ``t0_wall``): :meth:`start`, then :meth:`stop`, which sets ``_stop`` and waits for the
    thread; a subclass gives the thread's ``name`` and its ``_loop``."""

    name = "run"

    def __init__(self, run: BrokerRun, t0_wall: float) -> None:
        self._run = run
        self._t0_wall = t0_wall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        raise NotImplementedError


class ExitWatch(RunThread):
    """Notes, in a thread, each broker of ``run`` whose process ends between
    :meth:`start` and :meth:`stop` (which takes one last look, so an exit just before is
    not missed): ``exits`` lists them (broker, ``t_s`` on the workload's clock;
    ``returncode``; ``signal``, the name of the one that killed it, or None)."""

    name = "exits"

    def __init__(self, run: BrokerRun, t0_wall: float) -> None:
        super().__init__(run, t0_wall)
        self.exits: list[dict[str, Any]] = []

    def _loop(self) -> None:
        while True:
            stopping = self._stop.wait(EXIT_POLL_S)
            seen = {e["broker"] for e in self.exits}
            for broker, proc in self._run.brokers.items():
                code = proc.poll() if broker not in seen else None
                if code is not None:
                    self.exits.append({
                        "broker": broker, "returncode": code,
                        "signal": signal.Signals(-code).name if code < 0 else None,
                        "t_s": round(time.time() - self._t0_wall, 3)})
            if stopping:
                return


def link_downs(out_dir: Path, brokers: Iterable[str], t0_wall: float, until_wall: float
               ) -> list[dict[str, Any]]:
    """The overlay links the brokers' logs in ``out_dir`` declare down before
    ``until_wall`` (when the runner began stopping them), not closed on purpose: per
    record the broker, the link, ``t_s`` on the workload's clock and the reason."""
    downs = []
    for b in sorted(brokers):
        for r in iter_jsonl(log_path(out_dir, b), Ev.LINK, contains='"state":"down"'):
            if (r.get("role") == "broker" and r["t_wall"] < until_wall
                    and r.get("reason") not in _CLOSED_ON_PURPOSE):
                downs.append({"broker": b, "link": r["link"], "reason": r.get("reason"),
                              "t_s": round(r["t_wall"] - t0_wall, 3)})
    return sorted(downs, key=lambda d: d["t_s"])


def notification_routes(plan: RunPlan) -> nx.Graph:
    """The brokers and links a notification of ``plan`` may cross: the overlay, or, with
    links opened on demand, every pair of brokers."""
    if plan.links == "on-demand":
        return nx.complete_graph(plan.overlay.nodes)
    return plan.overlay


def delivery_faults(out_dir: Path, workload: Workload, summary: Mapping[str, Any],
                    expected: Mapping[MsgKey, frozenset[str]],
                    declared: list[dict[str, Any]], routes: nx.Graph) -> dict[str, Any]:
    """The summary's ``faults`` (see the module docstring): ``declared``, ``exactly_once``
    and the losses no declared crash explains, ``unexplained`` (``missing``,
    ``duplicates``); ``routes`` is the graph notifications may cross
    (:func:`notification_routes`). The clients' logs in ``out_dir`` are read again only
    when there are both losses and declared crashes."""
    losses = {"missing": summary["missing"], "duplicates": summary["duplicates"]}
    crashes = [(f["broker"], f["t_s"]) for f in declared if f["kind"] == "crash"]
    unexplained = dict(losses)
    if any(losses.values()) and crashes:
        published = {op.msg.key: (op.t_s, op.broker) for op in workload.ops
                     if op.msg.type is MsgType.PUBLISH}
        simple = SimplePaths(routes)

        def explained(key: MsgKey, sub: str) -> bool:
            if key not in published:
                return False
            t_s, src = published[key]
            on_path = simple.between(src, workload.clients[sub])
            return any(t_s >= t_crash - IN_FLIGHT_S and broker in on_path
                       for broker, t_crash in crashes)

        got = {key: Counter(subs) for key, subs in
               client_receipts(out_dir, workload)["deliveries"].items()}
        unexplained = {
            "missing": sum(1 for key, subs in expected.items() for sub in subs
                           if not got.get(key, {}).get(sub) and not explained(key, sub)),
            "duplicates": sum(n - 1 for key, counts in got.items()
                              for sub, n in counts.items()
                              if n > 1 and not explained(key, sub))}
    return {"declared": declared, "exactly_once": not any(losses.values()),
            "unexplained": unexplained}


def _unexplained(summary: Mapping[str, Any]) -> dict[str, int]:
    """An algorithm's losses that no declared fault explains (see the module docstring)."""
    if "faults" in summary:
        return dict(summary["faults"]["unexplained"])
    rows = summary.get("by_subscribers")  # bulk: the rounds without a failure
    if rows is not None:
        return {k: sum(r[k] for r in rows) for k in ("missing", "duplicates")}
    return {k: summary.get(k, 0) for k in ("missing", "duplicates")}


def run_faults(plan: RunPlan, summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The manifest's ``faults``: the declared faults, per algorithm the brokers that
    exited, the links declared down and the unexplained losses, and ``lossy``: whether
    any algorithm has such a loss."""
    algorithms = {alg: {"broker_exits": s.get("broker_exits", []),
                        "link_downs": len(s.get("link_downs", [])),
                        "unexplained": _unexplained(s)} for alg, s in summaries.items()}
    return {"declared": declared_faults(plan), "algorithms": algorithms,
            "lossy": any(any(a["unexplained"].values()) for a in algorithms.values())}
