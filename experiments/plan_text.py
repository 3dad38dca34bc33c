"""The run plan as text, for ``pubsublab plan`` without ``--json``."""

from __future__ import annotations

from experiments.plan import RunPlan


def _num(v: float | None, unit: str) -> str:
    return "unshaped" if v is None else f"{v:g} {unit}"


def format_plan(plan: RunPlan) -> str:
    """What both runtimes will run: topology, overlay edges with their figures and
    mechanisms, algorithms with their params, window, workload, schedule, capture."""
    d = plan.describe()
    topo = d["topology"]
    lines = [f"spec {plan.name}: seed {d['seed']}, scale {d['scale']:g}",
             f"topology {topo['name']} ({topo['mode']}): {topo['nodes']} nodes, "
             f"{topo['links']} links; delay and loss carried by "
             f"{plan.delay_loss_mechanism}"]
    lines += [f"note: {n}" for n in plan.notes]
    lines.append(f"overlay: {d['overlay']['brokers']} brokers, {len(plan.edges)} edges "
                 "(rate, one-way delay, loss; the path's emulated links; mechanisms)")
    for e in plan.edges:
        mech = ", ".join(f"{k} {v}" for k, v in e.mechanism.items()) or "none"
        lines.append(f"  {e.a}-{e.b:<6} {e.kind:7} {_num(e.bw_mbps, 'Mbit/s'):>14} "
                     f"{e.delay_ms:8g} ms {e.loss_pct:8g} %   via "
                     f"{' '.join('-'.join(link) for link in e.links)}; {mech}")
    if d["overlay"]["nic_mbps"]:
        nics = sorted(set(d["overlay"]["nic_mbps"].values()))
        lines.append(f"  each broker's NIC (its access link, shared by its edges): "
                     f"{', '.join(f'{n:g}' for n in nics)} Mbit/s")
    lines.append(f"statistics window W: {plan.window_ms:g} ms")
    for name, a in d["algorithms"].items():
        params = ", ".join(f"{k}={v}" for k, v in a["params"].items()) or "no params"
        derived = (f"; derived per broker: {', '.join(a['derived_keys'])}"
                   if a["derived_keys"] else "")
        lines.append(f"algorithm {name}: {params}{derived}")
    w = d["workload"]
    lines.append("workload: none (network and fidelity check only)" if plan.kind is None
                 else plan.kind.line(w, d["phase_s"]))
    for c in d["link_schedule"]:
        lines.append(f"at {c['at_s']:g} s: {c['a']}-{c['b']} to {c['bw_mbps']:g} Mbit/s")
    if plan.broker.cpu:
        runtimes = "emulated" if plan.processing is None else "emulated and simulated"
        lines.append(f"CPU-limited broker hosts (share of one core; {runtimes}): " + ", ".join(
            f"{b} {share:g}" for b, share in plan.broker.cpu.items()))
    proc = d["processing"]
    if proc is not None:
        lines.append(f"simulated brokers take {proc['base_us']:g} us + {proc['per_match_us']:g} "
                     f"us per notification handed on (a whole core), input window "
                     f"{proc['buffer_msgs']} frames"
                     + "".join(f"; {b} {t['base_us']:g} + {t['per_match_us']:g} us"
                               for b, t in proc["per_broker"].items()))
        # What a CPU share means for a message, so a slowed broker reads as a capacity.
        for b in plan.broker.cpu:
            base_s, per_s = plan.processing.seconds(b)
            lines.append(f"  {b} at its CPU share: {base_s * 1e3:.3g} ms + {per_s * 1e3:.3g} ms "
                         f"per notification handed on")
    if "servers" in d:
        srv = d["servers"]
        total = sum(row["demand_ops"] for row in srv["placement"].values()) or 1
        lines.append(f"servers (placed by the client operations each broker serves; "
                     f"{len(srv['cross_server_links'])} links cross servers, in VXLAN tunnels):")
        for server, row in srv["placement"].items():
            lines.append(f"  {server:<16} {100 * row['demand_ops'] / total:5.1f} % of the "
                         f"operations: {', '.join(row['nodes']) or 'nothing'}")
    cap = d["capture"]
    lines.append("capture: " + (f"on, snaplen {cap['snaplen']}, at most {cap['max_mb']:g} MB"
                                if cap["enabled"] else "off"))
    return "\n".join(lines)
