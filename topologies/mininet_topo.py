"""Mininet layer: a ``Topo`` from any topology graph, and the link class it needs.

Only this module imports Mininet (and :mod:`topologies.custom`, the ``mn`` entry file,
imports it), so the pure builders import (and test) without it.

- :class:`GraphTopo` adds every node and link of a graph (see :mod:`topologies.graph`):
  hosts with their main address, switches with explicit datapath ids (``cn1`` and ``s1``
  would both default to dpid 1, and ``core`` has no digits at all), links with explicit
  ports and ``<name>-eth<N>`` interface names, so which interface carries which link is
  known before the network starts (:func:`topologies.graph.link_ports`). Host-to-host
  links get each end's /30 from the edge's ``ips``.
- Link parameters become :class:`HighBwTCLink` keywords. Bandwidth is always passed.
  Delay, loss and the queue limit are passed only with ``netem=True``: Mininet implements
  all three with netem (the queue limit is netem's ``limit``), which some kernels lack;
  the runner decides and carries them otherwise.
- The ``mn --topo`` classes (:class:`ScotTopo`, ...), which :mod:`topologies.custom`
  lists in ``topos`` for ``mn``, take the registry's parameters plus ``bw_mbps``,
  ``delay_ms``, ``loss_pct``, ``max_queue_pkts`` (which replace the topology's default
  link parameters as a whole) and ``netem`` (default true under mn: there Mininet applies
  everything, as its users expect). Keywords left out take the registry's defaults; ``mn``
  passes numbers as numbers and everything else as text. Example::

      sudo mn --custom topologies/custom.py --topo scot,tree=f-g+g-h,m=3,mode=switch \\
          --switch lxbr --controller none --test pingall

  Beware: when building the topology fails (a bad keyword), ``mn`` runs its full cleanup,
  like ``mn -c``: it deletes every ``*-ethN`` link and OVS bridge and kills every Mininet
  node on the machine, not only its own. ``pubsublab topo show`` checks parameters safely.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
from mininet.link import TCIntf, TCLink
from mininet.topo import Topo

from topologies.graph import SWITCH, brokers, check_names, intf_name, link_ports
from topologies.links import MAX_BW_MBPS, LinkParams
from topologies.registry import as_bool, build_graph


class HighBwTCIntf(TCIntf):
    """TCIntf that shapes up to :data:`~topologies.links.MAX_BW_MBPS`.

    Mininet's ``TCIntf.bwCmds`` leaves a link unshaped (logging only an error) when
    ``bw > bwParamMax``, which is 1000; the 10 Gbit/s uplinks need more. The HTB commands
    themselves are unchanged.
    """

    bwParamMax = MAX_BW_MBPS

    def bwCmds(self, *args: Any, **kwargs: Any) -> tuple[list[str], str]:
        cmds, parent = super().bwCmds(*args, **kwargs)
        # Above 16 Mbit/s the kernel warns "sch_htb: quantum of class 50001 is big" and
        # Mininet prints that as "*** Error:" for every link. The quantum only divides
        # spare rate among sibling classes and there is a single class, so an explicit
        # one changes nothing but the noise.
        return [c + " quantum 200000" if " htb rate " in c else c for c in cmds], parent


class HighBwTCLink(TCLink):
    """TCLink whose interfaces are :class:`HighBwTCIntf`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("cls1", HighBwTCIntf)
        kwargs.setdefault("cls2", HighBwTCIntf)
        super().__init__(*args, **kwargs)


def link_opts(params: LinkParams, netem: bool) -> dict[str, Any]:
    """TCLink keywords for ``params``; netem-borne ones only when ``netem``."""
    opts: dict[str, Any] = {}
    if params.bw_mbps is not None:
        opts["bw"] = params.bw_mbps
    if netem:
        if params.delay_ms > 0:
            opts["delay"] = f"{params.delay_ms:g}ms"  # tc reads a bare number as microseconds
        if params.loss_pct > 0:
            opts["loss"] = params.loss_pct
        if params.max_queue_pkts is not None:
            opts["max_queue_size"] = params.max_queue_pkts
    return opts


class GraphTopo(Topo):
    """A Mininet topology with the nodes and links of a topology graph."""

    def build(self, graph: nx.Graph, netem: bool = False) -> None:
        self.add_graph(graph, netem=netem)

    def add_graph(self, graph: nx.Graph, *, netem: bool) -> None:
        check_names(graph)
        switches = [n for n, kind in graph.nodes(data="kind") if kind == SWITCH]
        for i, s in enumerate(switches, 1):
            self.addSwitch(s, dpid=f"{i:016x}")
        for b in brokers(graph):
            d = graph.nodes[b]
            self.addHost(b, ip=f"{d['ip']}/{d['prefixlen']}")
        for (u, v), ports in link_ports(graph).items():
            data = graph.edges[u, v]
            opts = link_opts(data["params"], netem)
            if "ips" in data:
                opts.update(params1={"ip": data["ips"][u]}, params2={"ip": data["ips"][v]})
            self.addLink(u, v, port1=ports[u], port2=ports[v], intfName1=intf_name(u, ports[u]),
                         intfName2=intf_name(v, ports[v]), cls=HighBwTCLink, **opts)

    def add_named(self, name: str, params: dict[str, Any], link: dict[str, Any],
                  netem: Any) -> None:
        """Build registry topology ``name`` from ``mn --topo`` keywords (None = default)."""
        given = {k: v for k, v in link.items() if v is not None}
        link_params = LinkParams.from_mapping(given, f"--topo {name}") if given else None
        graph = build_graph(name, {k: v for k, v in params.items() if v is not None},
                            link_params)
        self.add_graph(graph, netem=as_bool(netem, "netem"))


class ScotTopo(GraphTopo):
    """``--topo scot,tree=f-g+g-h,m=3,mode=overlay|switch`` (see topologies.scot)."""

    def build(self, tree: str | None = None, m: int | None = None, mode: str | None = None,
              bw_mbps: float | None = None, delay_ms: float | None = None,
              loss_pct: float | None = None, max_queue_pkts: int | None = None,
              netem: Any = True) -> None:
        self.add_named("scot", {"tree": tree, "m": m, "mode": mode},
                       {"bw_mbps": bw_mbps, "delay_ms": delay_ms, "loss_pct": loss_pct,
                        "max_queue_pkts": max_queue_pkts}, netem)


class ScotPaperTopo(GraphTopo):
    """``--topo scot-paper,hang=3+2+2+3,m=5,mode=overlay|switch`` (70 brokers)."""

    def build(self, hang: str | None = None, m: int | None = None, mode: str | None = None,
              bw_mbps: float | None = None, delay_ms: float | None = None,
              loss_pct: float | None = None, max_queue_pkts: int | None = None,
              netem: Any = True) -> None:
        self.add_named("scot-paper", {"hang": hang, "m": m, "mode": mode},
                       {"bw_mbps": bw_mbps, "delay_ms": delay_ms, "loss_pct": loss_pct,
                        "max_queue_pkts": max_queue_pkts}, netem)


class GigabitClusterTopo(GraphTopo):
    """``--topo gigabit-cluster,n=12,paper_ips=1`` (1000 Mbit/s unless bw_mbps is given)."""

    def build(self, n: int | None = None, paper_ips: Any = None,
              bw_mbps: float | None = None, delay_ms: float | None = None,
              loss_pct: float | None = None, max_queue_pkts: int | None = None,
              netem: Any = True) -> None:
        self.add_named("gigabit-cluster", {"n": n, "paper_ips": paper_ips},
                       {"bw_mbps": bw_mbps, "delay_ms": delay_ms, "loss_pct": loss_pct,
                        "max_queue_pkts": max_queue_pkts}, netem)


class ScotComputeNodesTopo(GraphTopo):
    """``--topo scot-compute-nodes,n_nodes=6,uplink_mbps=10000`` (link keywords: access
    links)."""

    def build(self, n_nodes: int | None = None, uplink_mbps: float | None = None,
              hang: str | None = None, m: int | None = None,
              bw_mbps: float | None = None, delay_ms: float | None = None,
              loss_pct: float | None = None, max_queue_pkts: int | None = None,
              netem: Any = True) -> None:
        self.add_named("scot-compute-nodes",
                       {"n_nodes": n_nodes, "uplink_mbps": uplink_mbps, "hang": hang, "m": m},
                       {"bw_mbps": bw_mbps, "delay_ms": delay_ms, "loss_pct": loss_pct,
                        "max_queue_pkts": max_queue_pkts}, netem)
