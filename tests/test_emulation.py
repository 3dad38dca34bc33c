"""Real Mininet networks: shaped rates, reachability, the compute-node placement."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.bench.controller import reach_all_pairs
from experiments.emulation.doctor import probe
from experiments.emulation.fidelity import iperf_pair
from experiments.emulation.network import Emulation
from topologies.links import LinkParams
from topologies.registry import build_graph

pytestmark = pytest.mark.root


def _emulation(topo: str, params: dict[str, Any], bw_mbps: float | None,
               switch: str = "bridge") -> Emulation:
    g = build_graph(topo, params, LinkParams(bw_mbps=bw_mbps))
    return Emulation(g, switch=switch, probe=probe(), log=lambda _m: None)


@pytest.mark.parametrize("bw_mbps", [10, 100])
def test_tcp_rate_within_10pct_of_configured(bw_mbps: float) -> None:
    emu = _emulation("scot", {"tree": "a-b", "m": 2, "mode": "overlay"}, bw_mbps)
    try:
        emu.start()
        r = iperf_pair(emu.net, emu.graph, "a0", "a1", duration_s=3)
    finally:
        emu.stop()
    assert r["configured_mbps"] == bw_mbps
    assert 0.90 * bw_mbps <= r["achieved_mbps"] <= 1.10 * bw_mbps, r


def test_overlay_neighbours_reach_each_other_over_their_own_link() -> None:
    emu = _emulation("scot", {"tree": "a-b,b-c", "m": 3, "mode": "overlay"}, 100)
    try:
        emu.start()
        failures = []
        for a, b, data in emu.graph.edges(data=True):
            ip = data["ips"][b].split("/")[0]
            out = emu.net[a].cmd(f"ping -c1 -W2 {ip}")
            if " 0% packet loss" not in out:
                failures.append((a, b, ip))
    finally:
        emu.stop()
    assert emu.graph.number_of_edges() == 3 * 2 + 3 * 3
    assert not failures


@pytest.mark.parametrize("switch", ["bridge", "ovs"])
def test_switched_cluster_pingall(switch: str) -> None:
    emu = _emulation("gigabit-cluster", {"n": 4}, 1000, switch=switch)
    try:
        emu.start()
        unreached = reach_all_pairs(emu.net)
        loss = emu.net.pingAll(timeout="2")
    finally:
        emu.stop()
    assert unreached == [] and loss == 0


def test_compute_node_placement_in_mininet() -> None:
    """70 brokers on 6 compute-node switches: each broker's host port is on its own compute
    node's switch, and no overlay neighbour shares that switch."""
    emu = _emulation("scot-compute-nodes", {}, 1000)
    try:
        emu.start()
        attached = {}
        for h in emu.net.hosts:
            (intf,) = [i for i in h.intfList() if i.name != "lo"]
            attached[h.name] = intf.link.intf2.node.name if intf.link.intf1 is intf \
                else intf.link.intf1.node.name
        build_s = emu.build_s
    finally:
        emu.stop()
    from topologies.graph import overlay_of

    g = emu.graph
    assert len(attached) == 70
    for broker, sw in attached.items():
        assert sw == g.nodes[broker]["compute"]
    for a, b in overlay_of(g).edges:
        assert attached[a] != attached[b], (a, b)
    print(f"70-broker compute-node network built in {build_s:.1f} s")
