"""Figures (pandas + matplotlib) and the self-contained ``report.html`` of a run.

Everything is read back from the Parquet metrics with pandas, so the report shows what
the metrics hold. Choices:

- **One HTML file, nothing external**: figures are PNGs embedded as base64, the style
  sheet is inline; the page opens from a USB stick or an e-mail attachment.
- **The verdicts come first**: in a run that throttles a link under SNR and IDR (the
  demo), whether IDR routed around it, with its figure (:mod:`analysis.idr_verdict`);
  then whether the wire and the logs agree, in a green or red
  box (orange when the capture lost packets: the check is incomplete); a disagreement
  lists the link directions, the counts and the TCP flows concerned. The first of these
  boxes carries the run's fidelity (:mod:`analysis.fidelity_verdict`): a run that failed
  the CPU or the link criterion says so on the box's first line, with the share of
  seconds under the CPU criterion, and the box is never the clean green (orange-bordered,
  or red if its own verdict is); a run that kept it says so on its last line. The
  delays below it repeat that they are not to be trusted.
  Problems met while parsing (files, lines, stream gaps) follow in an orange box.
- **Figures**: IMs by type (wire beside logs); per-link throughput as a heat map (one row
  per link direction, time across; readable at any number of links, where a line per
  link is not); the output-queue length of every link that ever queued (saying so
  when none did); with the SDN controller, per-port utilization from its port
  statistics beside them (the switch-side view of the same congestion); the
  notification delay CDF with p50/p95 marked; the paper-style
  summary figures of :mod:`analysis.paper_figures` when the summaries have their metrics.
- Time axes are seconds since the algorithm's first bin, so runs line up.
"""

from __future__ import annotations

import base64
import html
import io
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen first
import numpy as np
import pandas as pd

from analysis.fidelity_verdict import fidelity_text, fidelity_verdict
from analysis.idr_verdict import fig_idr_verdict, idr_verdict, verdict_text
from analysis.paper_figures import draw
from controller import PORT_STATS_FILE
from nodes.runfolder import CONTROLLER_DIR, METRICS_DIR, REPORT, read_manifest, read_summary

# The paper figures are OctopiA's (advertisement and subscription propagation); a run
# whose summaries have neither, such as the flood demo, would show empty panels.
PAPER_DELAY_KINDS = ("advertisement", "subscription")
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.meta{color:#555}.box{padding:.8em 1em;border-radius:6px;margin:1em 0}
.ok{background:#e6f4ea;border:1px solid #34a853}.bad{background:#fce8e6;border:2px solid #d93025}
.warn{background:#fef7e0;border:1px solid #f9ab00}
.unfit{background:#fef7e0;border:3px solid #e8710a}.unfit>p.fid{color:#b3261e;margin-top:0}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.mis td{background:#fce8e6}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}code{font-size:.9em}
"""


def _read(metrics: Path, name: str) -> pd.DataFrame:
    """A metrics table, or an empty frame when the job wrote none (no rows at all)."""
    path = metrics / name
    if not path.is_dir() or not any(path.rglob("*.parquet")):
        return pd.DataFrame()
    df = pd.read_parquet(path)
    if "algorithm" in df:
        df["algorithm"] = df["algorithm"].astype(str)  # partition columns come as categories
    return df


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def fig_ims(ims: pd.DataFrame) -> plt.Figure | None:
    """IMs by type: wire (sender's capture) beside logs (reached the socket), per algorithm."""
    if ims.empty:
        return None
    algs = sorted(ims["algorithm"].unique())
    n_types = ims["type"].nunique()
    fig, axes = plt.subplots(1, len(algs), figsize=((2.5 + 0.9 * n_types) * len(algs), 3.6),
                             squeeze=False)
    for ax, alg in zip(axes[0], algs, strict=True):
        d = ims[ims["algorithm"] == alg].sort_values("type")
        x = np.arange(len(d))
        ax.bar(x - 0.2, d["wire_sent"], 0.4, label="wire (pcap)", color="C0")
        ax.bar(x + 0.2, d["log_on_wire"], 0.4, label="broker logs", color="C1")
        for xi, (w, lg) in enumerate(zip(d["wire_sent"], d["log_on_wire"], strict=True)):
            ax.annotate("=" if w == lg else "≠", (xi, max(w, lg)), ha="center", va="bottom",
                        color="green" if w == lg else "red", fontsize=12)
        ax.set_xticks(x, d["type"], rotation=30, ha="right")
        ax.set_title(f"{alg}: inter-broker messages by type")
        ax.set_ylabel("messages")
        ax.margins(y=0.3)
        ax.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


def _t0(ts: pd.DataFrame, alg: str) -> float:
    return float(ts.loc[ts["algorithm"] == alg, "t_bin_s"].min())


def fig_throughput(ts: pd.DataFrame, bin_s: float) -> plt.Figure | None:
    """Per-link throughput over time (kbit/s of IP bytes) as a heat map per algorithm."""
    if ts.empty or not ts["kbit_s"].any():
        return None
    algs = sorted(ts["algorithm"].unique())
    n_links = int(ts[["algorithm", "src_broker", "dst_broker"]].drop_duplicates()
                  .groupby("algorithm").size().max())
    fig, axes = plt.subplots(len(algs), 1, figsize=(10, (1.5 + 0.2 * max(4, n_links))
                                                    * len(algs)), squeeze=False)
    for ax, alg in zip(axes[:, 0], algs, strict=True):
        d = ts[ts["algorithm"] == alg].copy()
        d["link"] = d["src_broker"] + "→" + d["dst_broker"]
        d["t"] = ((d["t_bin_s"] - _t0(ts, alg)) / bin_s).round().astype(int)
        grid = d.pivot_table(index="link", columns="t", values="kbit_s", aggfunc="sum",
                             fill_value=0.0)
        grid = grid.reindex(columns=range(int(grid.columns.max()) + 1), fill_value=0.0)
        im = ax.imshow(grid.values, aspect="auto", interpolation="nearest", cmap="viridis",
                       extent=(0, grid.shape[1] * bin_s, grid.shape[0] - 0.5, -0.5))
        ax.set_yticks(range(len(grid.index)), grid.index, fontsize=7)
        ax.set_xlabel("time since the first packet (s)")
        ax.set_title(f"{alg}: per-link throughput (wire, {bin_s * 1000:.0f} ms bins)")
        fig.colorbar(im, ax=ax, label="kbit/s", pad=0.01)
    fig.tight_layout()
    return fig


def fig_queues(queue: pd.DataFrame, ts: pd.DataFrame) -> plt.Figure | None:
    """Output-queue length over time for every link direction that ever queued."""
    if queue.empty:
        return None
    algs = sorted(queue["algorithm"].unique())
    fig, axes = plt.subplots(len(algs), 1, figsize=(10, 3.2 * len(algs)), squeeze=False)
    for ax, alg in zip(axes[:, 0], algs, strict=True):
        d = queue[queue["algorithm"] == alg]
        t0 = _t0(ts, alg) if not ts.empty and (ts["algorithm"] == alg).any() \
            else float(d["t_wall"].min())
        busy = d.groupby(["src_broker", "dst_broker"])["queue_len"].max()
        busy = busy[busy > 0].sort_values(ascending=False)
        for (src, dst) in busy.index[:12]:
            q = d[(d["src_broker"] == src) & (d["dst_broker"] == dst)].sort_values("t_wall")
            ax.step(q["t_wall"] - t0, q["queue_len"], where="post", label=f"{src}→{dst}")
        if busy.empty:
            ax.text(0.5, 0.5, f"every output queue stayed empty ({len(d)} windows of "
                    f"{d['window_ms'].median():.0f} ms logged)", transform=ax.transAxes,
                    ha="center", va="center", color="#555")
            ax.set_ylim(0, 1)
            ax.set_xlim(0, max(1.0, float(d["t_wall"].max() - t0)))
        else:
            ax.legend(fontsize=7, ncol=4, title=None if len(busy) <= 12 else
                      f"12 of {len(busy)} queueing links")
        ax.set_xlabel("time since the first packet (s)")
        ax.set_ylabel("messages queued")
        ax.set_title(f"{alg}: output-queue length (broker queue windows)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


PORT_STATS_FIELDS = frozenset({"t_wall", "t_mono", "dpid", "switch", "port", "port_name",
                               "rx_bytes", "tx_bytes"})


def port_utilization(port_stats: pd.DataFrame) -> pd.DataFrame:
    """Per switch port and poll interval: Mbit/s into and out of the switch.

    The controller's counters are cumulative (controller/l2_monitor.py), so a rate is the
    difference of consecutive polls of one (dpid, port) over the difference of their
    ``t_mono``; a counter that went backwards (a recreated port) starts a new series.
    """
    if port_stats.empty:
        return pd.DataFrame(columns=["t_wall", "switch", "port_name", "rx_mbps", "tx_mbps"])
    d = port_stats.sort_values(["dpid", "port", "t_mono"])
    g = d.groupby(["dpid", "port"])
    dt = g["t_mono"].diff()
    out = d[["t_wall", "switch", "port_name"]].copy()
    for col in ("rx", "tx"):
        dbytes = g[f"{col}_bytes"].diff()
        out[f"{col}_mbps"] = (8 * dbytes / dt / 1e6).where((dt > 0) & (dbytes >= 0))
    return out.dropna(subset=["rx_mbps", "tx_mbps"]).reset_index(drop=True)


def fig_ports(run_dir: Path, ts: pd.DataFrame) -> plt.Figure | None:
    """Switch-side view from the SDN controller's port statistics: per-port utilization
    (the busier direction of each port), beside the brokers' output queues above."""
    path = run_dir / CONTROLLER_DIR / PORT_STATS_FILE
    if not path.exists():
        return None
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off when the controller was killed mid-write
        if isinstance(row, dict) and row.keys() >= PORT_STATS_FIELDS:
            rows.append(row)
    util = port_utilization(pd.DataFrame(rows))
    if util.empty:
        return None
    # Same origin as the throughput figure (its t_bin_s is wall-clock seconds).
    t0 = util["t_wall"].min() if ts.empty else float(ts["t_bin_s"].min())
    fig, ax = plt.subplots(figsize=(10, 3.6))
    busiest = (util.assign(mbps=util[["rx_mbps", "tx_mbps"]].max(axis=1))
               .groupby("port_name")["mbps"].max().sort_values(ascending=False))
    for name in busiest.index[:12]:
        u = util[util["port_name"] == name]
        ax.plot(u["t_wall"] - t0, u[["rx_mbps", "tx_mbps"]].max(axis=1), label=name)
    ax.set_xlabel("time since the first packet (s)")
    ax.set_ylabel("Mbit/s (busier direction)")
    ax.set_title("switch ports: utilization from the controller's port statistics"
                 + (f" (12 busiest of {len(busiest)})" if len(busiest) > 12 else ""))
    ax.legend(fontsize=7, ncol=4)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def fig_delay_cdf(delays: pd.DataFrame) -> plt.Figure | None:
    """Notification end-to-end delay CDF per algorithm, p50 and p95 marked."""
    if delays.empty or delays["delay_ms"].dropna().empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, (alg, d) in enumerate(sorted(delays.groupby("algorithm"))):
        v = np.sort(d["delay_ms"].dropna().to_numpy())
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", color=f"C{i}",
                label=f"{alg} (n={len(v)})")
        for q, style in ((0.5, ":"), (0.95, "--")):
            ax.axvline(np.quantile(v, q), color=f"C{i}", ls=style, lw=0.8)
    ax.set_xlabel("notification delay, publisher to subscriber (ms)")
    ax.set_ylabel("fraction of notifications")
    ax.set_title("Delay CDF (dotted: p50, dashed: p95)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def _table(rows: list[Mapping[str, Any]], cols: list[tuple[str, str]],
           row_class: Any = None, show: Mapping[str, Mapping[Any, str]] | None = None) -> str:
    """An HTML table of ``rows``; ``show`` renders chosen columns' values as words."""
    if not rows:
        return "<p class='meta'>(none)</p>"
    # A heading sits over its column's values: left over text, right over numbers.
    head = "".join(f"<th class='l'>{html.escape(t)}</th>" if i == 0 or isinstance(
        rows[0].get(k), str) else f"<th>{html.escape(t)}</th>" for i, (k, t) in enumerate(cols))
    body = []
    for r in rows:
        cls = f" class='{row_class(r)}'" if row_class and row_class(r) else ""
        cells = []
        for i, (k, _) in enumerate(cols):
            v = r.get(k)
            if show and k in show:
                v = show[k].get(v, v)
            v = f"{v:.2f}" if isinstance(v, float) else ("" if v is None else v)
            cells.append(f"<td{' class=l' if i == 0 or isinstance(v, str) else ''}>"
                         f"{html.escape(str(v))}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _box(cls: str, inner: str, fidelity: Mapping[str, Any] | None = None) -> str:
    """A verdict box of class ``cls`` around ``inner`` (HTML); with ``fidelity`` (the
    run's :func:`fidelity_verdict`) it carries it: a failure first, in bold, the box
    orange-bordered unless it is red already; else on its last line."""
    if fidelity is not None:
        line = html.escape(fidelity_text(fidelity))
        if fidelity["ok"] is False:
            inner = f"<p class='fid'><b>{line}</b></p>{inner}"
            cls = cls if cls == "bad" else "unfit"
        else:
            inner = f"{inner}<p class='meta'>{line}</p>"
    return f"<div class='box {cls}'>{inner}</div>"


def _verdict(result: dict[str, Any], fidelity: Mapping[str, Any] | None = None) -> str:
    algs = result["algorithms"]
    if result["wire_matches_logs"]:
        counts = ", ".join(f"{t} {n}" for t, n in result["wire_ims_by_type"].items())
        return _box("ok", f"<b>Wire and logs agree.</b> Every inter-broker message the "
                    f"brokers logged as written to a socket was seen on the wire by the "
                    f"sender's capture, per link and type ({counts}).", fidelity)
    if result["wire_check"] == "incomplete":
        cls, parts = "warn", ["<b>WIRE CHECK INCOMPLETE.</b> The capture lost packets, so the "
                              "wire can neither confirm nor refute the logs; differences "
                              "below may be the capture's own gaps."]
    else:
        cls, parts = "bad", ["<b>WIRE AND LOGS DISAGREE.</b>"]
    for alg, a in algs.items():
        if not a["captured"]:
            parts.append(f"<p><b>{html.escape(alg)}</b>: {html.escape(a.get('why_not', ''))}"
                         "</p>")
            continue
        if a.get("why_incomplete"):
            parts.append(f"<p><b>{html.escape(alg)}</b>: {html.escape(a['why_incomplete'])}"
                         "</p>")
        if not a["mismatches"]:
            continue
        parts.append(f"<p><b>{html.escape(alg)}</b>: {len(a['mismatches'])} link direction(s) "
                     "and type(s) differ:</p>")
        rows = [{**m, "link": f"{m['src_broker']}→{m['dst_broker']}",
                 "flows": "; ".join(f"{f['host']}: {f['ip_src']}:{f['sport']}→"
                                    f"{f['ip_dst']}:{f['dport']}" for f in m["flows"])
                 or "no TCP flow seen"} for m in a["mismatches"]]
        parts.append(_table(rows, [("link", "link"), ("type", "type"),
                                   ("wire_sent", "wire (sender)"),
                                   ("wire_received", "wire (receiver)"),
                                   ("log_on_wire", "logs (to socket)"),
                                   ("log_sent", "logs (send)"), ("flows", "flows")]))
    return _box(cls, "".join(parts), fidelity)


def _summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for alg, a in result["algorithms"].items():
        d, s = a["deliveries"], a["delay_ms"]
        rows.append({"algorithm": alg, "packets": a["packets"],
                     "expected": d.get("expected_deliveries"), "delivered": d.get("delivered"),
                     "missing": d.get("missing"), "duplicates": d.get("duplicates"),
                     "unexpected": d.get("unexpected"),
                     "ims_log": sum(a["log_sends_by_type"].values()),
                     "ims_wire": sum(a["wire_ims_by_type"].values()),
                     "p50": s.get("p50"), "p95": s.get("p95"), "max": s.get("max"),
                     "agrees": {True: "yes", False: "NO"}.get(a.get("summary_agrees"), "-")})
    return rows


def _manifest_sections(manifest: dict[str, Any]) -> str:
    out = ["<h2>Fidelity check</h2>"]
    fid = manifest.get("fidelity") or {}
    out.append(_table([{**r, "link": f"{r['a']}–{r['b']}",
                        "ok": "yes" if r.get("within_10pct") else "NO"}
                       for r in fid.get("links", [])],
                      [("link", "link"), ("configured_mbps", "configured Mbit/s"),
                       ("achieved_mbps", "achieved Mbit/s"), ("ratio", "ratio"),
                       ("ok", "within 10 %")]))
    idle = fid.get("cpu_idle")
    if idle:
        cls = "ok" if idle.get("ok") else "warn"
        caveat = "" if idle.get("ok") else "Emulated timing in this run is not trustworthy."
        outside = idle.get("outside_workload")
        when = "while the workloads ran" if outside is not None else \
            "while the network carried traffic"
        rest = ("" if outside is None or not outside.get("per_second_pct") else
                f" Outside the workloads (the link check, processes starting and stopping; "
                f"not judged): {outside.get('seconds_below')} of "
                f"{len(outside['per_second_pct'])} s below, min {outside.get('min_pct')} %.")
        out.append(f"<div class='box {cls}'>Idle CPU {when}: mean "
                   f"{idle.get('mean_pct')} %, min {idle.get('min_pct')} %, "
                   f"{idle.get('seconds_below')} of {len(idle.get('per_second_pct') or [])} s "
                   f"below the {idle.get('criterion_min_idle_pct')} % criterion. {caveat}"
                   f"{rest}</div>")
    out.append("<h2>Link mechanisms</h2><p class='meta'>Which mechanism carried each "
               "configured link parameter (netem where the kernel has it, else the brokers "
               "emulate delay and loss).</p>")
    rows = [{"link": f"{r['a']}–{r['b']}", "type": r.get("type"),
             "params": ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items()
                                 if v not in (None, 0, 0.0)),
             "mechanism": ", ".join(f"{k}: {v}" for k, v in r.get("mechanism", {}).items())}
            for r in manifest.get("links", [])]
    out.append(_table(rows, [("link", "link"), ("type", "type"), ("params", "parameters"),
                             ("mechanism", "mechanism")]))
    return "".join(out)


def _capture_section(result: dict[str, Any], manifest: dict[str, Any]) -> str:
    cap = manifest.get("capture") or {}
    if not cap:
        return ""
    if not cap.get("enabled"):
        return "<h2>Capture</h2><p>Capture was disabled for this run.</p>"
    rows = [{"algorithm": alg, **a["capture"]} for alg, a in result["algorithms"].items()]
    where = html.escape(str(cap.get("interface")))
    return (f"<h2>Capture</h2><p class='meta'>tcpdump on every broker host ({where}, "
            f"filter <code>{html.escape(str(cap.get('filter')))}</code>),"
            f" snap length {cap.get('snaplen')} bytes; limit {cap.get('max_mb')} MB over all "
            f"hosts ({cap.get('files_per_host')} file(s) of {cap.get('file_mb')} MB per host, at "
            f"most {cap.get('bound_bytes', 0) / 1e6:.1f} MB per algorithm).</p>"
            + _table(rows, [("algorithm", "algorithm"), ("bytes", "bytes"),
                            ("packets_in_files", "packets"),
                            ("dropped_by_kernel", "dropped by kernel"),
                            ("overwritten_packets", "overwritten by rotation")]))


def write_report(run_dir: Path, result: dict[str, Any], bin_s: float = 0.1) -> Path:
    """Draw the figures and write ``run_dir/report.html``; returns its path."""
    metrics = run_dir / METRICS_DIR
    manifest = read_manifest(run_dir) or {}
    ims = _read(metrics, "ims_by_type")
    ts = _read(metrics, "link_timeseries")
    figures = [("Inter-broker messages by type: wire vs logs", fig_ims(ims)),
               ("Per-link throughput over time", fig_throughput(ts, bin_s)),
               ("Output-queue length over time", fig_queues(_read(metrics, "queue"), ts)),
               ("Notification delay CDF", fig_delay_cdf(_read(metrics, "delays")))]
    if (run_dir / CONTROLLER_DIR).is_dir():
        figures.insert(3, ("Switch port utilization (SDN controller)", fig_ports(run_dir, ts)))
    summaries = {alg: summary for alg in result["algorithms"]
                 if (summary := read_summary(run_dir / alg)) is not None}
    paper = []
    if any(s.get("delay_ms", {}).get(kind) for s in summaries.values()
           for kind in PAPER_DELAY_KINDS):
        with tempfile.TemporaryDirectory() as tmp:
            paper = [(p.stem, base64.b64encode(p.read_bytes()).decode())
                     for p in draw([(None, summaries)], Path(tmp))]
    parts = [_header(run_dir.name, manifest)]
    fidelity = fidelity_verdict(manifest.get("fidelity"))
    # A run that throttles a link under SNR and IDR (the demo) opens with that answer,
    # whose delays the fidelity qualifies; the first box carries the fidelity.
    idr = idr_verdict(summaries)
    if idr is not None:
        parts.append("<h2>SNR against IDR on the throttled link</h2>"
                     + _box("ok" if idr["holds"] else "bad", html.escape(verdict_text(idr)),
                            fidelity)
                     + "<img alt='SNR against IDR' src='data:image/png;base64,"
                     f"{_png(fig_idr_verdict(idr, _read(metrics, 'queue')))}'>")
    parts.append(_verdict(result, fidelity if idr is None else None))
    if result["problems"]:
        parts.append("<div class='box warn'><b>Problems met while parsing</b> (the rest of "
                     "each file was used):" + _table(
                         result["problems"], [("source", "source"), ("file", "file or flow"),
                                              ("where", "where"), ("problem", "problem")])
                     + "</div>")
    untrusted = (" <b>This run failed its fidelity check: its delays are not "
                 "trustworthy</b> (its counts are).") if fidelity and fidelity["ok"] is False \
        else ""
    parts.append("<h2>Summary per algorithm</h2><p class='meta'>Deliveries against the "
                 "oracle and notification delay (ms) from the Parquet metrics; <i>agrees</i>: "
                 f"same deliveries and logged IMs as the run's summary.json.{untrusted}</p>")
    parts.append(_table(_summary_rows(result), [
        ("algorithm", "algorithm"), ("packets", "packets"), ("expected", "expected"),
        ("delivered", "delivered"), ("missing", "missing"), ("duplicates", "duplicates"),
        ("unexpected", "unexpected"), ("ims_log", "IMs (logs)"), ("ims_wire", "IMs (wire)"),
        ("p50", "delay p50"), ("p95", "delay p95"), ("max", "delay max"),
        ("agrees", "agrees")]))
    parts.append("<h2>Inter-broker messages by type</h2>")
    parts.append(_table(ims.sort_values(["algorithm", "type"]).to_dict("records")
                        if not ims.empty else [],
                        [("algorithm", "algorithm"), ("type", "type"),
                         ("wire_sent", "wire (sender)"), ("wire_received", "wire (receiver)"),
                         ("log_sent", "logs: send"), ("log_on_wire", "logs: to socket"),
                         ("match", "match")],
                        row_class=lambda r: "" if r.get("match") else "mis",
                        show={"match": {True: "yes", False: "NO"}}))
    parts.append("<h2>Figures</h2>")
    for title, fig in figures:
        if fig is None:
            parts.append(f"<p class='meta'>{html.escape(title)}: no data.</p>")
        else:
            parts.append(f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' "
                         f"src='data:image/png;base64,{_png(fig)}'>")
    if paper:
        parts.append("<h2>Paper figures (from summary.json)</h2>")
        parts += [f"<img alt='{html.escape(stem)}' src='data:image/png;base64,{b64}'>"
                  for stem, b64 in paper]
    parts.append(_capture_section(result, manifest))
    if manifest:
        parts.append(_manifest_sections(manifest))
    timing = ", ".join(f"{k} {v}" for k, v in result.get("timing_s", {}).items())
    parts.append(f"<p class='meta'>Metrics (Parquet): <code>{html.escape(result['metrics_dir'])}"
                 f"</code>; analysis timing (s): {html.escape(timing)}.</p></body></html>")
    path = run_dir / REPORT
    path.write_text("".join(parts), encoding="utf-8")
    return path


def _state(manifest: dict[str, Any]) -> str:
    """An emulated run's status (ok, lossy, failed, ...), or for a simulated run, whose
    manifest has none, its runtime."""
    if "status" in manifest:
        return f"status <b>{html.escape(str(manifest['status']))}</b>"
    return f"runtime <b>{html.escape(str(manifest.get('runtime', '?')))}</b>"


def _header(name: str, manifest: dict[str, Any]) -> str:
    """The page's head and its first lines: the run, its spec, status (or runtime), start,
    commit, seed and scale (``?`` where the manifest has none)."""
    spec = manifest.get("spec", {})
    git = manifest.get("git") or {}
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>pubsublab report "
            f"{html.escape(name)}</title><style>{_CSS}</style></head><body>"
            f"<h1>Run {html.escape(name)}</h1>"
            f"<p class='meta'>{html.escape(spec.get('name', ''))}: "
            f"{html.escape(spec.get('description', ''))}<br>{_state(manifest)}, started "
            f"{html.escape(str(manifest.get('started', '?')))}, git "
            f"<code>{html.escape(str(git.get('commit') or '?')[:12])}</code>"
            f"{' (dirty)' if git.get('dirty') else ''}, seed {manifest.get('seed', '?')}, "
            f"scale {manifest.get('scale', '?')}</p>")
