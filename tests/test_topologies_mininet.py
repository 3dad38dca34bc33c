"""The Mininet layer of topologies/: Topo objects (no root), the `mn --custom` path (the
system Python, as /usr/bin/mn runs it) and one real network (root)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mininet.link import TCIntf

from topologies import custom, mininet_topo
from topologies.graph import brokers, intf_name, link_ports
from topologies.links import LinkParams
from topologies.mininet_topo import (
    GigabitClusterTopo,
    GraphTopo,
    HighBwTCIntf,
    HighBwTCLink,
    ScotComputeNodesTopo,
    ScotPaperTopo,
    ScotTopo,
    link_opts,
)
from topologies.registry import TOPOLOGIES, build_graph, describe, parameters

REPO = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"
MN = "/usr/bin/mn"


def test_link_opts_netem_gating() -> None:
    p = LinkParams(bw_mbps=10, delay_ms=2.5, loss_pct=1, max_queue_pkts=50)
    assert link_opts(p, netem=False) == {"bw": 10}
    assert link_opts(p, netem=True) == {"bw": 10, "delay": "2.5ms", "loss": 1,
                                        "max_queue_size": 50}
    assert link_opts(LinkParams(), netem=True) == {}


def test_high_bw_intf_shapes_above_mininets_limit() -> None:
    stock = TCIntf.__new__(TCIntf)
    ours = HighBwTCIntf.__new__(HighBwTCIntf)
    assert stock.bwCmds(bw=10_000) == ([], " root ")  # Mininet: error log, link unshaped
    cmds, parent = ours.bwCmds(bw=10_000)
    assert parent == " parent 5:1 "
    assert any("htb rate 10000.000000Mbit" in c and c.endswith(" quantum 200000") for c in cmds)


def test_graph_topo_overlay_mode() -> None:
    g = build_graph("scot-paper", {}, LinkParams(bw_mbps=100, delay_ms=5))
    topo = GraphTopo(graph=g, netem=False)
    assert len(topo.hosts()) == 70 and topo.switches() == []
    links = list(topo.links(withInfo=True))
    assert len(links) == 205
    ports = link_ports(g)
    for *_, info in links:
        a, b = info["node1"], info["node2"]
        edge = (a, b) if (a, b) in ports else (b, a)
        assert info["intfName1"] == intf_name(a, ports[edge][a])
        assert info["port1"] == ports[edge][a] and info["port2"] == ports[edge][b]
        assert info["params1"] == {"ip": g.edges[a, b]["ips"][a]}
        assert info["params2"] == {"ip": g.edges[a, b]["ips"][b]}
        assert info["cls"] is HighBwTCLink and info["bw"] == 100 and "delay" not in info
    assert topo.nodeInfo("a0") == {"ip": f"{g.nodes['a0']['ip']}/30"}


def test_graph_topo_switch_mode_dpids() -> None:
    g = build_graph("scot-compute-nodes", {})
    topo = GraphTopo(graph=g)
    dpids = [topo.nodeInfo(s)["dpid"] for s in topo.switches()]
    assert len(topo.switches()) == 7 and len(set(dpids)) == 7
    assert all(len(d) == 16 and int(d, 16) > 0 for d in dpids)
    uplinks = [info for *_, info in topo.links(withInfo=True) if "core" in
               (info["node1"], info["node2"])]
    assert len(uplinks) == 6 and {u["bw"] for u in uplinks} == {10_000}


def test_mn_topo_classes_take_text_keywords() -> None:
    t = ScotTopo(tree="f-g+g-h", m=3, mode="switch", bw_mbps=50, delay_ms=1, netem="0")
    assert len(t.hosts()) == 9 and t.switches() == ["s1"]
    assert {info.get("delay") for *_, info in t.links(withInfo=True)} == {None}
    t = ScotTopo(tree="f-g", m=2, delay_ms=1)  # netem is on by default under mn
    assert {info["delay"] for *_, info in t.links(withInfo=True)} == {"1ms"}
    assert len(ScotPaperTopo(hang="1+1+1+1", m=2).hosts()) == 16
    assert len(GigabitClusterTopo(paper_ips="1").hosts()) == 12
    assert len(ScotComputeNodesTopo(n_nodes=5).switches()) == 6
    with pytest.raises(ValueError, match="topology 'scot': m: bad value 1"):
        ScotTopo(m=1)
    with pytest.raises(ValueError, match=r"--topo scot\.bw_mbps: bad value 0"):
        ScotTopo(bw_mbps=0)
    with pytest.raises(ValueError, match="netem: bad value 'maybe'"):
        ScotTopo(netem="maybe")


# The way /usr/bin/mn loads a --custom file (MininetRunner.custom/setCustom), in the
# system Python: no __file__ in the exec'ed namespace, the repo not on sys.path, every
# name of the file copied into mn's globals, and topos built by buildTopo from text.
MN_SCRIPT = textwrap.dedent("""
    import importlib.machinery, importlib.util, json, sys
    import networkx
    from mininet.util import buildTopo

    loader = importlib.machinery.SourceFileLoader("mn_script", sys.argv[1])
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("mn_script", loader))
    loader.exec_module(mod)  # __name__ is not "__main__", so mn does not start
    mn_globals = vars(mod)
    out = {"networkx": networkx.__version__, "topos": {}, "clashes": []}
    for file_name, topo_args in json.loads(sys.argv[2]).items():
        customs = {}
        exec(compile(open(file_name).read(), file_name, "exec"), customs, customs)
        for name, value in customs.items():
            special = name in ("topos", "switches", "hosts", "controllers", "tests")
            if (name != "topos" and special) or (
                    name in mn_globals and mn_globals[name] is not value
                    and not name.startswith("__")):
                out["clashes"].append(f"{file_name}:{name}")
        for arg in topo_args:
            topo = buildTopo(customs["topos"], arg)
            out["topos"][arg] = [len(topo.hosts()), len(topo.switches()), len(topo.links())]
    print(json.dumps(out))
""")


def test_mn_custom_file_loads_like_mn_does(tmp_path: Path) -> None:
    assert os.path.exists(MN), "Debian's Mininet is missing: run `sudo make setup`"
    script = tmp_path / "as_mn.py"  # not run from the repo: sys.path[0] is tmp_path
    script.write_text(MN_SCRIPT)
    custom = {
        "topologies/custom.py": ["scot", "scot,tree=f-g+g-h+h-i,m=3,mode=switch,bw_mbps=100",
                                 "scot-paper", "scot-paper,hang=1+1+1+1,m=2,netem=0",
                                 "gigabit-cluster,paper_ips=1",
                                 "scot-compute-nodes,uplink_mbps=10000"],
    }
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([SYSTEM_PYTHON, str(script), MN, json.dumps(custom)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["clashes"] == []
    assert out["topos"] == {
        "scot": [9, 0, 15],
        "scot,tree=f-g+g-h+h-i,m=3,mode=switch,bw_mbps=100": [12, 1, 12],
        "scot-paper": [70, 0, 205],
        "scot-paper,hang=1+1+1+1,m=2,netem=0": [16, 0, 2 * 7 + 8],
        "gigabit-cluster,paper_ips=1": [12, 1, 12],
        "scot-compute-nodes,uplink_mbps=10000": [70, 7, 76],
    }


def test_custom_topos_cover_every_topo_class() -> None:
    """``topos`` of the mn entry file names each ``mn --topo`` class by its registry name;
    each takes that topology's parameters plus the link keywords and builds its graph."""
    classes = {c for c in vars(mininet_topo).values()
               if isinstance(c, type) and issubclass(c, GraphTopo) and c is not GraphTopo}
    assert set(custom.topos.values()) == classes
    assert set(custom.topos) <= set(TOPOLOGIES)
    link = {"bw_mbps", "delay_ms", "loss_pct", "max_queue_pkts", "netem"}
    for name, cls in custom.topos.items():
        keywords = set(inspect.signature(cls.build).parameters) - {"self"}
        assert keywords == set(parameters(name)) | link, name
        g = build_graph(name, {})
        topo = cls()
        assert set(topo.hosts()) == set(brokers(g)), name
        assert len(topo.links()) == g.number_of_edges(), name


# Each module of topologies/ imported first: before each import every topologies module
# is forgotten (third-party ones stay loaded, which keeps it to one interpreter).
IMPORT_EACH_FIRST = textwrap.dedent("""
    import importlib, json, sys
    failed = {}
    for name in sys.argv[1:]:
        for loaded in [m for m in sys.modules if m.split(".")[0] == "topologies"]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(failed))
""")


def test_every_topologies_module_imports_first() -> None:
    """An import cycle shows at run time (``partially initialized module``) only when the
    wrong module of the circle is imported first: import each module first."""
    names = sorted("topologies" if p.stem == "__init__" else f"topologies.{p.stem}"
                   for p in (REPO / "topologies").glob("*.py"))
    assert "topologies.custom" in names and "topologies.mininet_topo" in names
    res = subprocess.run([sys.executable, "-c", IMPORT_EACH_FIRST, *names], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {}


def test_same_graphs_with_the_system_networkx() -> None:
    """mn runs the builders on Debian's networkx 2.8; they must give the very same graphs
    (names, addresses, link order) as on the venv's networkx 3."""
    code = ("import json, networkx; from topologies.registry import TOPOLOGIES, build_graph, "
            "describe; print(json.dumps([networkx.__version__, "
            "{n: describe(build_graph(n, {})) for n in TOPOLOGIES}]))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([SYSTEM_PYTHON, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    version, theirs = json.loads(res.stdout)
    ours = {n: describe(build_graph(n, {})) for n in TOPOLOGIES}
    assert theirs == json.loads(json.dumps(ours)), f"networkx {version} differs"


@pytest.mark.root
def test_real_network_overlay_links_and_10g_shaping() -> None:
    """Every overlay link carries ping between its two /30 ends, and HTB shapes 10 Gbit/s.

    Unusual labels (qx, qy, qz) keep our interface names apart from other runs'."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("error")
    g = build_graph("scot", {"tree": "qx-qy,qy-qz", "m": 2}, LinkParams(bw_mbps=10_000))
    net = Mininet(topo=GraphTopo(graph=g), controller=None, build=False)
    try:
        net.build()
        net.start()
        for (u, v), ports in link_ports(g).items():
            assert net[u].intf(intf_name(u, ports[u])).IP() == g.edges[u, v]["ips"][u][:-3]
            far = g.edges[u, v]["ips"][v].split("/")[0]
            assert " 0% packet loss" in net[u].cmd(f"ping -c1 -W2 {far}"), (u, v)
            shown = net[u].cmd(f"tc class show dev {intf_name(u, ports[u])}")
            assert "rate 10Gbit" in shown, shown
    finally:
        net.stop()
    left = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert not any(f"{n}-eth" in left.stdout for n in g)
