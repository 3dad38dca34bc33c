"""Whether an emulated run kept its fidelity, from the ``fidelity`` record its manifest
holds (:mod:`experiments.emulation.fidelity` measures it): the verdict the report's box,
`pubsublab run`'s closing lines and its ``--json`` all give.

Two criteria, each as the runner measured it:

- **CPU**: the machine stayed at least ``criterion_min_idle_pct`` % idle (Mininet-HiFi's
  35 %) in every second of the run's workloads (every second sampled, for a record
  without workload spans); a run below it in some seconds fails, with the share of
  seconds below. The seconds outside the workloads (``cpu_idle.outside_workload``: the
  link check, processes starting and stopping) are given beside it, not judged. A run
  spread over servers holds it only if every server did (each is sampled alike:
  ``cpu_idle.servers``);
- **links**: every sampled overlay link's iperf3 rate came within 10 % of its configured
  rate; a run with a link outside fails, naming it.

A run that failed either is **not trustworthy** in its timing (delays, queues, rates):
its counts (deliveries, messages) still hold. A criterion the run did not measure (no
CPU sample, no link sampled) is said so, and does not pass for a success.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def fidelity_verdict(fidelity: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The verdict of a manifest's ``fidelity`` record; None when the run has none (a
    simulated run, or one stopped before its fidelity check).

    ``ok``: True when both criteria were measured and held, False when one failed, None
    when none failed but one was not measured; ``cpu_idle``: ``seconds_below`` of
    ``seconds`` sampled (``share_below_pct``, %) under ``criterion_min_idle_pct``, or None
    without samples; ``links``: ``checked`` sampled links, ``off`` those outside 10 %."""
    if not fidelity:
        return None
    idle = fidelity.get("cpu_idle") or {}
    cpu = _cpu(idle)
    others = {s: _cpu(x) for s, x in (idle.get("servers") or {}).items()}
    if cpu is not None and others:
        cpu["servers"] = others
        cpu["ok"] = cpu["ok"] and all(x is not None and x["ok"] for x in others.values())
    checked = fidelity.get("links") or []
    links = {"checked": len(checked),
             "off": [{k: r.get(k) for k in ("a", "b", "configured_mbps", "achieved_mbps")}
                     for r in checked if not r.get("within_10pct", True)]}
    failed = (cpu is not None and not cpu["ok"]) or bool(links["off"])
    measured = cpu is not None and bool(checked)
    return {"ok": False if failed else (True if measured else None), "cpu_idle": cpu,
            "links": links}


def _cpu(idle: Mapping[str, Any]) -> dict[str, Any] | None:
    """The CPU criterion of one machine's idle samples (None without samples)."""
    samples = idle.get("per_second_pct") or []
    if not samples:
        return None
    below = int(idle.get("seconds_below", 0))
    outside = idle.get("outside_workload")
    return {"criterion_min_idle_pct": idle.get("criterion_min_idle_pct"),
            "seconds_below": below, "seconds": len(samples),
            "share_below_pct": round(100 * below / len(samples), 1),
            "min_pct": idle.get("min_pct"), "ok": below == 0,
            "judged": "workload" if outside is not None else "every second",
            **({"outside_workload": {"seconds_below": outside["seconds_below"],
                                     "seconds": len(outside["per_second_pct"]),
                                     "min_pct": outside["min_pct"]}}
               if outside is not None else {})}


def _cpu_text(cpu: Mapping[str, Any]) -> str:
    of = " of the workloads" if cpu.get("judged") == "workload" else ""
    if cpu["seconds_below"] == 0:
        return (f"CPU idle at or above {cpu['criterion_min_idle_pct']:g} % in all "
                f"{cpu['seconds']} s{of} sampled")
    return (f"CPU idle below {cpu['criterion_min_idle_pct']:g} % in {cpu['seconds_below']} "
            f"of {cpu['seconds']} s{of} ({cpu['share_below_pct']:g} %, min "
            f"{cpu['min_pct']:g} %)")


def fidelity_text(verdict: Mapping[str, Any]) -> str:
    """One line: ``fidelity ok: ...``, ``fidelity FAILED: ...`` (what failed, the share of
    seconds under the CPU criterion) or ``fidelity unchecked: ...``."""
    cpu, links = verdict["cpu_idle"], verdict["links"]
    parts = []
    if cpu is None:
        parts.append("CPU idle not sampled")
    elif "servers" in cpu:
        parts.append("; ".join([f"here: {_cpu_text(cpu)}"] + [
            f"on {s}: " + ("CPU idle not sampled" if x is None else _cpu_text(x))
            for s, x in cpu["servers"].items()]))
    else:
        parts.append(_cpu_text(cpu))
    if links["off"]:
        parts.append(f"{len(links['off'])} of {links['checked']} sampled links outside 10 % "
                     "of their rate (" + ", ".join(
                         f"{r['a']}-{r['b']} {r['achieved_mbps']:g} of "
                         f"{r['configured_mbps']:g} Mbit/s" for r in links["off"]) + ")")
    elif links["checked"]:
        parts.append(f"{links['checked']} of {links['checked']} sampled links within 10 % "
                     "of their rate")
    else:
        parts.append("no link's rate sampled")
    if verdict["ok"] is False:
        return (f"fidelity FAILED: {'; '.join(parts)}: emulated timing in this run is not "
                "trustworthy")
    return f"fidelity {'ok' if verdict['ok'] else 'unchecked'}: {'; '.join(parts)}"
