"""The summary block of the high-rate-publisher burst (OctopiA Section VIII, Fig. 11); its
figures are :mod:`analysis.burst`'s.

:func:`burst_metrics` reads one algorithm's run folder, written by either runtime
(:mod:`nodes.sim.simulator` or the emulated brokers and clients, both through
:class:`nodes.logs.JsonlLog`): the clients' ``recv`` records of PUBLISH (with ``t_pub``),
the HRP's ``send`` records, and the ``queue`` records of the HRP's broker. A record's
time is its ``t_wall`` (``t_s`` where a log has no ``t_wall``); ``t_pub`` is on the same
clock (the simulator puts both on :data:`nodes.sim.engine.SIM_EPOCH_S` plus simulated time).
Every time in the result is in seconds from the burst's start, the HRP's first
publication as its log records it, so runs of several algorithms line up although their
wall clocks differ.

Definitions (our choices where the paper is silent; all parameters):

- **Deliveries**: every ``recv`` of a PUBLISH by any client, regular and HRP
  notifications alike (the paper's points cover "notifications received"), duplicates
  included; delay = receipt time minus ``t_pub``.
- **Max delay per block** (Fig. 11): deliveries in receipt order, cut into blocks of
  ``block_size`` consecutive ones (the last block may be shorter); per block its largest
  delay and the time of its last receipt. The paper's blocks hold 1,000 of about 6
  million deliveries; by default a block holds ``min(1000, max(10, n // 100))`` of the
  run's ``n`` deliveries: the paper's 1,000 from 100,000 deliveries on, about 100
  points for a scaled run, and never fewer than 10 deliveries a point.
- **Share under** ``under_s`` (default 1 s): deliveries with delay < ``under_s`` over all
  deliveries; ``delay_ms_mean``: the mean delay. Both also for HRP notifications alone.
- **Queue on the HRP's target links**: all overlay links of the HRP's broker. With the
  HRP's subscribers in every cluster, each of its iLinks leads to a target cluster, and
  its aLinks carry the subscription trees of its own cluster; counting every link is the
  simplest definition that needs no routing state. ``mean_len`` is the time-weighted
  mean of ``queue_len`` over those links and the burst (the windows ending after the
  first HRP publication and by its last, or one window if the burst is shorter): the sum
  of ``queue_len * window_ms`` over those ``queue`` records, over the number of links
  times the burst's length. A window without a record counts as empty (both runtimes
  write a link's record only when it was active in the window or the one before).
- **Return to normal**: the threshold is ``normal_ms`` if given, else ``normal_factor``
  (2) times the largest delay received before the burst started (the worst a normal
  block looked; a p95 would call ordinary tails abnormal, as a block's maximum is a high
  quantile), or ``under_s`` when nothing was received before the burst. The system is
  normal from the end of the last block at or over the threshold (the burst's last
  publication if that is earlier): ``return_s`` is that time minus the burst's last
  publication, ``None`` when the last block of the run is still over the threshold.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from nodes.logs import Ev, iter_jsonl
from nodes.workloads.ops import Workload
from topologies.graph import overlay_of

PAPER_BLOCK = 1000  # "a maximum delivery delay of 1000 notifications received in a sequence"


def default_block_size(n_deliveries: int) -> int:
    """The paper's 1,000 from 100,000 deliveries on; about 100 blocks below; at least 10."""
    return min(PAPER_BLOCK, max(10, n_deliveries // 100))


def _time_s(r: Mapping[str, Any]) -> float:
    return float(r["t_wall"] if "t_wall" in r else r["t_s"])


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(x, nd)


def burst_metrics(run_dir: Path, workload: Workload, graph: nx.Graph, *,
                  block_size: int | None = None, under_s: float = 1.0,
                  normal_factor: float = 2.0, normal_ms: float | None = None
                  ) -> dict[str, Any]:
    """The burst metrics of one algorithm's run folder (see the module docstring);
    a JSON-able dict, stored by the runtimes as ``summary["burst"]``."""
    burst = workload.meta["burst"]
    hrp, broker = burst["hrp"], burst["broker"]
    run_dir = Path(run_dir)

    # Compact columns: a paper-scale run has millions of deliveries.
    t_col, d_col, h_col = array("d"), array("d"), array("b")
    for client in sorted(workload.clients):
        for r in iter_jsonl(run_dir / f"{client}.jsonl", Ev.RECV):
            if r.get("type") == "PUBLISH" and r.get("t_pub") is not None:
                t = _time_s(r)
                t_col.append(t)
                d_col.append(t - float(r["t_pub"]))
                h_col.append(r.get("origin") == hrp)
    # Receipt order; ties keep client-name order, then log order (a stable sort).
    order = np.argsort(np.frombuffer(t_col, dtype=float), kind="stable")
    t_s = np.frombuffer(t_col, dtype=float)[order]
    delay_s = np.frombuffer(d_col, dtype=float)[order]
    is_hrp = np.frombuffer(h_col, dtype=np.int8)[order].astype(bool)
    pubs = [float(r.get("t_pub", _time_s(r))) for r in iter_jsonl(run_dir / f"{hrp}.jsonl", Ev.SEND)
            if r.get("type") == "PUBLISH"]
    if not pubs:  # no HRP log (or one without sends): its receipts still carry t_pub
        pubs = (t_s - delay_s)[is_hrp].tolist()
    t0 = min(pubs) if pubs else None
    t1 = max(pubs) if pubs else None

    n = len(t_s)
    k = block_size or default_block_size(n)
    zero = t0 if t0 is not None else (float(t_s[0] - delay_s[0]) if n else 0.0)
    starts = np.arange(0, n, k)
    block_t = [round(float(x) - zero, 6) for x in t_s[np.minimum(starts + k, n) - 1]]
    block_max_ms = ([round(float(x) * 1000.0, 6) for x in np.maximum.reduceat(delay_s, starts)]
                    if n else [])

    def share_mean(d: np.ndarray) -> tuple[float | None, float | None]:
        if not len(d):
            return None, None
        return float(np.count_nonzero(d < under_s)) / len(d), math.fsum(d) * 1000.0 / len(d)

    share, mean_ms = share_mean(delay_s)
    hrp_share, hrp_mean_ms = share_mean(delay_s[is_hrp])
    before_s = delay_s[t_s < t0] if t0 is not None else delay_s[:0]
    return {
        "hrp": hrp, "broker": broker, "rate_hz": burst["rate_hz"], "count": burst["count"],
        "published": len(pubs),
        "duration_s": _r(t1 - t0) if t0 is not None and t1 is not None else None,
        "deliveries": n, "hrp_deliveries": int(np.count_nonzero(is_hrp)),
        "block_size": k,
        "blocks": {"t_s": block_t, "max_delay_ms": block_max_ms},
        "under_s": under_s, "share_under": _r(share), "delay_ms_mean": _r(mean_ms),
        "hrp_share_under": _r(hrp_share), "hrp_delay_ms_mean": _r(hrp_mean_ms),
        "queue": _queue(run_dir, broker, graph, t0, t1),
        "normal": _normal(before_s.tolist(), block_t, block_max_ms,
                          None if t1 is None else t1 - zero, under_s=under_s,
                          normal_factor=normal_factor, normal_ms=normal_ms),
    }


def _queue(run_dir: Path, broker: str, graph: nx.Graph, t0: float | None,
           t1: float | None) -> dict[str, Any]:
    """Time-weighted mean and max queue length on the HRP broker's links (module doc)."""
    links = sorted(overlay_of(graph).neighbors(broker))
    out: dict[str, Any] = {"links": links, "definition": "all overlay links of the HRP's "
                           "broker; time-weighted over the burst, missing windows empty",
                           "mean_len": None, "max_len": None, "per_link_mean": {}}
    if t0 is None or t1 is None or not links:
        return out
    recs = [r for r in iter_jsonl(run_dir / f"{broker}.jsonl", Ev.QUEUE) if r.get("link") in links]
    window_s = (sorted(r["window_ms"] for r in recs)[len(recs) // 2] / 1000.0) if recs else 0.05
    end = max(t1, t0 + window_s)
    area = dict.fromkeys(links, 0.0)
    top = 0
    for r in recs:
        if t0 < _time_s(r) <= end:
            area[r["link"]] += r["queue_len"] * r["window_ms"] / 1000.0
            top = max(top, int(r["queue_len"]))
    span_s = end - t0
    out.update(mean_len=round(math.fsum(area.values()) / (len(links) * span_s), 6),
               max_len=top, per_link_mean={b: round(a / span_s, 6) for b, a in area.items()})
    return out


def _normal(before_s: list[float], block_t: list[float], block_max_ms: list[float],
            end_s: float | None, *, under_s: float, normal_factor: float,
            normal_ms: float | None) -> dict[str, Any]:
    """Threshold and time to return to normal after the burst (module doc); ``before_s``
    are the delays received before the burst, ``end_s`` its last publication's time."""
    if normal_ms is not None:
        threshold_ms, source = float(normal_ms), "normal_ms"
    elif before_s:
        threshold_ms = normal_factor * max(before_s) * 1000.0
        source = f"{normal_factor:g} x max delay before the burst"
    else:
        threshold_ms, source = under_s * 1000.0, "under_s (nothing received before the burst)"
    out: dict[str, Any] = {"threshold_ms": round(threshold_ms, 6), "threshold": source,
                           "baseline_deliveries": len(before_s), "at_s": None,
                           "return_s": None, "reason": None}
    if end_s is None or not block_t or block_t[-1] <= end_s:
        out["reason"] = "no deliveries after the burst"
        return out
    bad = [i for i, m in enumerate(block_max_ms) if m >= threshold_ms]
    if bad and bad[-1] == len(block_t) - 1:
        out["reason"] = "still over the threshold when the run ended"
        return out
    at = max(end_s, block_t[bad[-1]]) if bad else end_s
    out.update(at_s=round(at, 6), return_s=round(at - end_s, 6))
    return out
