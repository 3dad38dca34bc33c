"""Routing cores: purity, the registry, the spanning-tree helper and the flood core."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import random
from pathlib import Path

import networkx as nx
import pytest

from nodes.cores import CORES, make_core, overlay_params, spanning_tree_neighbours
from nodes.cores.flood import FloodCore
from nodes.cores.interface import (
    Arrived,
    Deliver,
    FromClient,
    LinkStats,
    LinkWindow,
    Record,
    RoutingCore,
    Send,
)
from nodes.messages import Message, MsgType
from nodes.model import filter_from_json, matches
from nodes.workloads.stock import stock_workload

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {"asyncio", "socket", "time", "random", "mininet", "os_ken"}
PURE_ROOTS = ["nodes/cores/interface.py", "nodes/model.py", "nodes/matching/__init__.py",
              "nodes/matching/columns.py"]


def _package_of(path: Path) -> str:
    """The package a file's relative imports start from (its folder, also for __init__)."""
    return ".".join(path.relative_to(REPO).parts[:-1])


def _imports(source: str, package: str) -> list[str]:
    """Absolute module names ``source`` (a module of ``package``) imports."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "__import__" and node.args
              and isinstance(node.args[0], ast.Constant)):
            names.append(str(node.args[0].value))
    return names


def _module_file(name: str) -> Path | None:
    """The repository file of module ``name``, or None for modules outside the repository."""
    base = REPO.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_core_modules_are_pure() -> None:
    """No core, nor anything in the repository a core imports, touches I/O, clocks or
    global randomness (found by parsing, following imports inside the repository)."""
    roots = [REPO / p for p in PURE_ROOTS] + sorted((REPO / "nodes" / "cores").rglob("*.py"))
    for root in roots:
        assert root.is_file(), f"{root} is missing"
    todo, seen, offenders = list(roots), set(), []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path.read_text(), _package_of(path)):
            if name.split(".")[0] in FORBIDDEN:
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
            found = _module_file(name)
            if found is not None:
                todo.append(found)
    assert not offenders, offenders
    assert REPO / "nodes" / "messages.py" in seen  # imports were really followed


def test_purity_check_sees_every_import_form() -> None:
    source = "from time import monotonic\nimport os_ken.base\nfrom . import flood\n" \
             "from ..core import Send\nx = __import__('socket')\n"
    names = _imports(source, "nodes.cores")
    for name in ("time", "os_ken.base", "nodes.cores.flood", "nodes.core", "socket"):
        assert name in names


def test_make_core_names_the_allowed_cores() -> None:
    with pytest.raises(ValueError, match=r"allowed: .*flood"):
        make_core("nope", "b0", (), {})
    with pytest.raises(ValueError, match="allowed"):
        overlay_params("nope", nx.Graph())
    assert "flood" in CORES


def test_make_core_checks_the_declared_params() -> None:
    """The broker process and the simulator both build cores here: a misspelt param is
    refused by name, a bad value by its rule."""
    derived = {"cluster": 0, "primary": ["b1"], "secondary": {}}  # one SCOT cluster
    with pytest.raises(ValueError, match=r"no param\(s\) thetta; allowed: theta, ce_min"):
        make_core("idr", "b0", ("b1",), {**derived, "thetta": 99})
    with pytest.raises(ValueError, match=r"routing.params.idr.theta: bad value 'x'"):
        make_core("idr", "b0", ("b1",), {**derived, "theta": "x"})
    assert make_core("idr", "b0", ("b1",), {**derived, "theta": 99}).lst.theta == 99


@pytest.mark.parametrize("name", sorted(CORES))
def test_make_core_completes_the_declared_defaults(name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A core built with no params receives every declared param at its default, and the
    derived ones as given."""
    got: dict[str, object] = {}

    def record(broker: str, neighbours: object, params: dict[str, object]) -> RoutingCore:
        got.update(params)
        return FloodCore(broker, (), {})

    info = CORES[name]
    monkeypatch.setitem(CORES, name, dataclasses.replace(info, factory=record))
    derived = dict.fromkeys(info.derived_keys, "derived")
    make_core(name, "b0", (), derived)
    assert got == {**{p.name: p.default for p in info.params}, **derived}


@pytest.mark.parametrize("name", ["codd", "flood", "meghdoot", "siena"])
def test_derived_keys_name_what_the_overlay_gives(name: str) -> None:
    g = nx.path_graph(["b0", "b1", "b2"])
    for params in overlay_params(name, g).values():
        assert set(params) <= set(CORES[name].derived_keys)


def _is_spanning_tree(g: nx.Graph, tree: dict[str, tuple[str, ...]]) -> bool:
    t = nx.Graph()
    t.add_nodes_from(g.nodes)
    for a, nbs in tree.items():
        for b in nbs:
            assert a in tree[b], "tree neighbours must be symmetric"
            assert g.has_edge(a, b), "tree edges must be overlay edges"
            t.add_edge(a, b)
    return nx.is_tree(t)


@pytest.mark.parametrize("seed", range(5))
def test_spanning_tree_is_a_tree_and_independent_of_edge_order(seed: int) -> None:
    g = nx.relabel_nodes(nx.connected_watts_strogatz_graph(30, 4, 0.3, seed=seed),
                         lambda i: f"b{i:02d}")
    edges = list(g.edges)
    tree = spanning_tree_neighbours(edges)
    assert _is_spanning_tree(g, tree)
    shuffled = [(b, a) if i % 2 else (a, b) for i, (a, b) in enumerate(edges)]
    random.Random(seed).shuffle(shuffled)
    assert spanning_tree_neighbours(shuffled) == tree
    # BFS from the smallest broker: its overlay neighbours are all its tree neighbours.
    assert tree["b00"] == tuple(sorted(g.neighbors("b00")))


def test_spanning_forest_of_a_disconnected_overlay() -> None:
    tree = spanning_tree_neighbours([("a", "b"), ("b", "c"), ("c", "a"), ("x", "y")])
    assert tree == {"a": ("b", "c"), "b": ("a",), "c": ("a",), "x": ("y",), "y": ("x",)}


def test_flood_overlay_params_are_the_tree() -> None:
    edges = [("a", "b"), ("b", "c"), ("c", "a")]
    assert overlay_params("flood", nx.Graph(edges)) == {
        b: {"tree_neighbours": nbs} for b, nbs in spanning_tree_neighbours(edges).items()
    }


# ---- the flood core -----------------------------------------------------------------


@pytest.fixture(scope="module")
def stock() -> tuple[list[Message], list[Message]]:
    """Subscriptions and publications of a small stock workload."""
    w = stock_workload(["b0", "b1"], n_publishers=2, n_subscribers=30, pubs_per_publisher=40,
                       publish_rate_hz=100.0, seed=3, selectivity=0.2)
    subs = [op.msg for op in w.ops if op.msg.type is MsgType.SUBSCRIBE]
    pubs = [op.msg for op in w.ops if op.msg.type is MsgType.PUBLISH]
    return subs, pubs


def _flood() -> FloodCore:
    return FloodCore("b1", ["b3", "b0", "b2"], {"tree_neighbours": ["b2", "b0"]})


def test_flood_forwards_over_the_tree_never_back(stock) -> None:
    _, pubs = stock
    core = _flood()
    msg = pubs[0]
    sends = [a for a in core.handle(FromClient(msg.origin, msg), 1.0) if isinstance(a, Send)]
    assert [s.link for s in sends] == ["b0", "b2"]
    assert all(s.msg.hops == msg.hops + 1 and s.msg.key == msg.key for s in sends)
    arrived = msg.forwarded()
    sends = [a for a in core.handle(Arrived("b0", arrived), 1.0) if isinstance(a, Send)]
    assert [(s.link, s.msg.hops) for s in sends] == [("b2", 2)]
    leaf = FloodCore("b3", ["b1"], {"tree_neighbours": ["b1"]})
    assert leaf.handle(Arrived("b1", arrived), 1.0) == []


def test_flood_delivers_once_to_each_matching_local_subscriber(stock) -> None:
    subs, pubs = stock
    core = _flood()
    filters = {}
    for i, sub in enumerate(subs):
        client = f"c{i % 7}"  # several subscriptions per client
        sub = Message(sub.type, i, client, 0, sub.payload)
        assert core.handle(FromClient(client, sub), 0.0) == []
        filters.setdefault(client, []).append(filter_from_json(sub.payload["filter"]))
    assert core.table_sizes() == {"srt": 0, "prt": len(subs)}
    delivered_any = False
    for pub in pubs:
        for event in (FromClient(pub.origin, pub), Arrived("b0", pub.forwarded())):
            actions = core.handle(event, 2.0)
            got = [a.client for a in actions if isinstance(a, Deliver)]
            want = sorted(c for c, fs in filters.items()
                          if any(matches(f, pub.payload["attrs"]) for f in fs))
            assert got == want
            delivered_any |= bool(got)
            (record,) = [a for a in actions if isinstance(a, Record)]
            assert record.kind == "match"
            assert record.fields["matched"] == len(want)
            assert record.fields["subscriptions"] == len(subs)
    assert delivered_any, "fixture too selective to test delivery"


def test_flood_unsubscribe_and_advertise(stock) -> None:
    subs, pubs = stock
    core = _flood()
    sub = subs[0]
    core.handle(FromClient("c0", sub), 0.0)
    unsub = Message(MsgType.UNSUBSCRIBE, 99, "c0", 0, {"sub_id": sub.msg_id})
    assert core.handle(FromClient("c0", unsub), 0.5) == []
    assert core.table_sizes()["prt"] == 0
    for pub in pubs:
        assert not any(isinstance(a, Deliver | Record) for a in core.handle(
            FromClient(pub.origin, pub), 1.0))
    adv = Message(MsgType.ADVERTISE, 0, "p0", 0, {"filter": sub.payload["filter"]})
    assert core.handle(FromClient("p0", adv), 0.0) == []
    assert core.handle(Arrived("b0", adv.forwarded()), 0.0) == []
    other = Message(MsgType.HEARTBEAT, 1, "b0")
    (rec,) = core.handle(Arrived("b0", other), 0.0)
    assert rec == Record("unhandled", {"type": "HEARTBEAT", "origin": "b0", "msg_id": 1})
    stats = LinkStats(50.0, {"b0": LinkWindow(3, 1, 2)})
    assert core.handle(stats, 0.05) == []


def test_flood_params_are_checked() -> None:
    with pytest.raises(ValueError, match="tree_neighbours"):
        FloodCore("b1", ["b0"], {})
    with pytest.raises(ValueError, match="not neighbours"):
        FloodCore("b1", ["b0"], {"tree_neighbours": ["b0", "b9"]})


def test_flood_is_deterministic(stock) -> None:
    """Two cores fed the same events in the same order return equal actions."""
    subs, pubs = stock
    runs = []
    for _ in range(2):
        core = _flood()
        out = [core.handle(FromClient(f"c{i % 5}", s), 0.0) for i, s in enumerate(subs)]
        out += [core.handle(FromClient(p.origin, p), 1.0) for p in itertools.islice(pubs, 20)]
        runs.append(out)
    assert runs[0] == runs[1]
