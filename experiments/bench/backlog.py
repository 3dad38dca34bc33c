"""`pubsublab bench backlog`: where an overloaded broker's backlog waits, and for how long.

One publisher offers :data:`RATE_HZ` publications a second for :data:`STEP_S` seconds to
one broker (flood core, one match-all subscriber) on 127.0.0.1: more than the broker
forwards (31,000-36,000 a second on these 2-core machines, where one Python publisher
makes at most about 36,000), so a backlog must build somewhere. A/B pairs, the same
run with the kernel's own socket buffers (which Linux grows to megabytes) and with the
bounded ones every emulated run now has
(:data:`nodes.emulated.runtime.DEFAULT_BUFFER_BYTES` for ``write_buffer_bytes`` and
``read_buffer_bytes``, on the broker's and the clients' connections).

With the kernel's buffers the backlog sits in the publisher's send buffer and the
broker's receive buffer, where the broker's bounded queue and its backpressure do not
see it, so every publication waits longer than the one before. With bounded buffers the
publisher's writes block once the broker falls behind: it sends fewer (the generator's
achieved rate says how many) and what it sends waits a bounded time. Per run: sent,
delivered, the achieved send rate, the notification delay (p50, p99, max) and the worst
delay of what was published in the last :data:`LAST_S` seconds, which grows with the run
when the backlog is unbounded and stays flat when it is not.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from experiments.bench.broker import machine
from experiments.bench.broker_peer import run_ours
from nodes.emulated.runtime import DEFAULT_BUFFER_BYTES
from nodes.logs import iter_jsonl
from nodes.runfolder import log_path
from nodes.time_left import TimeLeft, write_line

RATE_HZ = 40_000
STEP_S = 20.0
REPEATS = 2
LAST_S = 2.0
BOUNDED = {"write_buffer_bytes": DEFAULT_BUFFER_BYTES, "read_buffer_bytes": DEFAULT_BUFFER_BYTES}


def _last_max_ms(out: Path, last_s: float) -> float | None:
    """The worst delay of the notifications published in the run's last ``last_s``."""
    recv = [r for r in iter_jsonl(log_path(out, "sub"))
            if r["ev"] == "recv" and r.get("type") == "PUBLISH"]
    if not recv:
        return None
    end = max(r["t_pub"] for r in recv)
    late = [1000.0 * (r["t_wall"] - r["t_pub"]) for r in recv if r["t_pub"] >= end - last_s]
    return round(max(late), 1)


def run(rate_hz: int = RATE_HZ, step_s: float = STEP_S, repeats: int = REPEATS
        ) -> dict[str, Any]:
    """The A/B pairs (module docstring) and their medians."""
    runs: list[dict[str, Any]] = []
    plan = [(label, buffers) for _ in range(repeats)
            for label, buffers in (("kernel", None), ("bounded", BOUNDED))]
    progress = TimeLeft("bench backlog", [(f"{label} buffers", step_s + 6) for label, _ in plan],
                        write_line)
    with tempfile.TemporaryDirectory(prefix="pubsublab-backlog-") as tmp:
        for i, (label, buffers) in enumerate(plan):
            progress.start(f"{rate_hz}/s for {step_s:g} s")
            out = Path(tmp) / f"{i}-{label}"
            step = run_ours(rate_hz, step_s, 1, out, max_delay_s=3600.0, buffers=buffers)
            runs.append({"buffers": label, **{k: step[k] for k in (
                "sent", "delivered", "achieved_send_hz", "delay_ms")},
                "last_max_ms": _last_max_ms(out, LAST_S)})

    def median(label: str, key: str) -> float | None:
        xs = sorted(v for r in runs if r["buffers"] == label
                    for v in [r["delay_ms"]["max"] if key == "max_ms" else r[key]]
                    if v is not None)
        return xs[len(xs) // 2] if xs else None

    summary = {label: {k: median(label, k) for k in ("max_ms", "last_max_ms",
                                                     "achieved_send_hz")}
               for label in ("kernel", "bounded")}
    k_max, b_max = summary["kernel"]["max_ms"], summary["bounded"]["max_ms"]
    return {"rate_hz": rate_hz, "step_s": step_s, "repeats": repeats,
            "bounded_bytes": DEFAULT_BUFFER_BYTES, "runs": runs, "median": summary,
            "max_delay_ratio_kernel_over_bounded": (round(k_max / b_max, 1)
                                                    if k_max and b_max else None),
            "machine": machine()}


def format_result(result: dict[str, Any]) -> str:
    lines = [f"one broker on 127.0.0.1 offered {result['rate_hz']:,}/s for "
             f"{result['step_s']:g} s; the kernel's socket buffers against "
             f"{result['bounded_bytes'] // 1024} KiB each way ({result['machine']['cpu_model']}"
             f", {result['machine']['cores']} cores)",
             f"{'buffers':8} {'sent':>8} {'delivered':>9} {'sent/s':>8} {'p50 ms':>8} "
             f"{'p99 ms':>8} {'max ms':>8} {'last ' + format(LAST_S, 'g') + ' s max':>12}"]
    for r in result["runs"]:
        d = r["delay_ms"]
        lines.append(f"{r['buffers']:8} {r['sent']:8} {r['delivered']:9} "
                     f"{r['achieved_send_hz']:8.0f} {d['p50'] or 0:8.1f} {d['p99'] or 0:8.1f} "
                     f"{d['max'] or 0:8.1f} {r['last_max_ms'] or 0:12.1f}")
    ratio = result["max_delay_ratio_kernel_over_bounded"]
    lines.append(f"median worst delay: kernel {result['median']['kernel']['max_ms']} ms, "
                 f"bounded {result['median']['bounded']['max_ms']} ms"
                 + (f" (kernel/bounded {ratio}x)" if ratio else ""))
    return "\n".join(lines)
