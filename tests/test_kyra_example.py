"""The Kyra paper's worked example (Figs. 1-4), exactly as our reading decodes it
(``../shared/READINGS-WAVE2.md`` 3.3): one subscriber per subscription of Fig. 1, event 9
published at server A, routed by filter-based routing (Siena, Fig. 2), by multicast
groups (Fig. 3) and by Kyra (Fig. 4); then every event from every server; and the shipped
specs ``kyra-example`` and ``kyra-example-siena`` run through ``pubsublab sim``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from kyra_cases import (
    EXAMPLE_EVENTS,
    EXAMPLE_KYRA,
    EXAMPLE_MULTICAST,
    FIG2_TABLES,
    FIG3_GROUPING,
    example_workload,
    matched_values,
    publication_hops,
    run,
    run_on,
    values,
)

from experiments.plan import compile_plan
from experiments.spec import load_spec
from nodes.cores import CORES, overlay_params, resolve_params
from nodes.cores.kyra import derive_layout as kyra_layout
from nodes.cores.multicast import derive_layout as multicast_layout
from nodes.cores.zones import zone_filter
from nodes.messages import MsgType
from nodes.model import filter_from_json
from nodes.workloads.interests import subscriptions_by_broker
from nodes.workloads.kyra_example import FIG1_SUBSCRIPTIONS
from nodes.workloads.oracle import expected_deliveries
from topologies.kyra_example import FIG2_TREE, FIG4_CLIQUES, example_latency

# ---- Fig. 2: filter-based routing (Siena) --------------------------------------------------


@pytest.mark.parametrize("covering", [False, True])
def test_fig2_tables_and_event_9_matched_at_c_e_f_g_before_h(covering: bool) -> None:
    w = example_workload()
    tree = nx.Graph(FIG2_TREE)
    result, cores, sent = run_on(tree, "siena", w, overlay_params("siena", tree),
                                 {"covering": covering})
    for b, want in FIG2_TABLES.items():
        got = {nb: matched_values(t.values()) for nb, t in cores[b].table().items()}
        assert got == {nb: values(text) for nb, text in want.items()}, b
    # A -> C -> E -> F -> G -> H: matched four times on the way, delivered at H only.
    assert publication_hops(sent) == [("A", "C"), ("C", "E"), ("E", "F"), ("F", "G"),
                                      ("G", "H")]
    matched = {b: c.counters()["events_matched"] for b, c in cores.items()}
    assert matched == {"A": 1, "B": 0, "C": 1, "D": 0, "E": 1, "F": 1, "G": 1, "H": 1}
    assert result.deliveries == {("p", 1): ["sh9"]}
    if not covering:  # every subscription reached every server: 16 entries each
        assert {b: c.table_sizes()["prt"] for b, c in cores.items()} \
            == dict.fromkeys(FIG1_SUBSCRIPTIONS, 16)


# ---- Fig. 3: multicast groups --------------------------------------------------------------

FIG3_GROUPS = {frozenset({5, 8}): ("A", "B", "E", "F"),
               frozenset({0, 1, 4, 6}): ("A", "C", "D", "G"),
               frozenset({2, 3, 7, 9}): ("B", "C", "E", "F", "H")}


def _resolved(algorithm: str, params: dict) -> dict:
    return resolve_params(algorithm, CORES[algorithm].params, params)


def test_fig3_groups_have_the_papers_members() -> None:
    layout = multicast_layout(example_latency(), subscriptions_by_broker(example_workload()),
                              EXAMPLE_EVENTS, _resolved("multicast", EXAMPLE_MULTICAST),
                              FIG3_GROUPING)
    assert layout.cuts == (tuple(range(1, 10)),)  # one cell per event
    assert {frozenset(c for (c,) in cells): members
            for cells, members in layout.groups} == FIG3_GROUPS


def test_fig3_event_9_reaches_b_needlessly_and_not_g() -> None:
    """g2's tree carries event 9 to every member, B too ("extraneous network traffic"),
    but not through G as Siena's tree does; A is no member and hands it to g2's member
    nearest to it."""
    result, cores, sent = run("multicast", example_latency(), example_workload(),
                              EXAMPLE_MULTICAST, EXAMPLE_EVENTS, FIG3_GROUPING)
    hops = publication_hops(sent)
    assert {b for _, b in hops} == {"B", "C", "E", "F", "H"}
    assert len(hops) == 5  # A to the entry, then the four edges of g2's tree
    assert hops[0] == ("A", "B")  # 1 ms away, as C is: ties go to the name
    unwanted = {b for b, c in cores.items() if c.counters()["events_unwanted"]}
    assert unwanted == {"B", "C", "E", "F"}
    assert 9 not in FIG1_SUBSCRIPTIONS["B"]
    assert result.deliveries == {("p", 1): ["sh9"]}


# ---- Fig. 4: Kyra ----------------------------------------------------------------------------

FIG4_ZONES = {"A": "0-3", "B": "4-6", "C": "7-9", "D": "0-4", "E": "5-9", "F": "0-3",
              "G": "4-6", "H": "7-9"}
FIG4_TREES = [("0-3", ("A", "D", "F"), (("A", "D"), ("D", "F"))),
              ("4-6", ("B", "D", "E", "G"), (("B", "E"), ("B", "G"), ("D", "E"))),
              ("7-9", ("C", "E", "H"), (("C", "E"), ("C", "H")))]
# The paper prints "-" for B: A's subscription to 5 needs a proxy in 4-6 (our reading).
FIG4_PROXY = {"A": "1,2", "B": "5", "C": "7,8", "D": "0,3", "E": "5,6", "F": "2",
              "G": "4-6", "H": "7,9"}
# Per (server, tree): per tree neighbour, the events its table entries match.
FIG4_TABLES = {("A", 0): {"D": "0,2,3"}, ("B", 1): {"E": "5,6", "G": "4-6"},
               ("C", 2): {"E": "-", "H": "7,9"}, ("D", 0): {"A": "1,2", "F": "2"},
               ("D", 1): {"E": "4-6"}, ("E", 1): {"D": "-", "B": "4-6"},
               ("E", 2): {"C": "7-9"}, ("F", 0): {"D": "0-3"}, ("G", 1): {"B": "5,6"},
               ("H", 2): {"C": "7,8"}}


def test_fig4_cliques_zones_and_trees() -> None:
    layout = kyra_layout(example_latency(), EXAMPLE_EVENTS, _resolved("kyra", EXAMPLE_KYRA))
    assert layout.cliques == FIG4_CLIQUES
    assert {s: matched_values([layout.zone_of(s)]) for s in FIG1_SUBSCRIPTIONS} \
        == {s: values(z) for s, z in FIG4_ZONES.items()}
    trees = [(matched_values([zone_filter("v", layout.global_cuts, t)]), members, edges)
             for t, (members, edges) in enumerate(zip(layout.tree_members, layout.tree_edges,
                                                       strict=True))]
    assert trees == [(values(z), m, e) for z, m, e in FIG4_TREES]  # T = 3, the largest clique


def test_fig4_proxies_tables_and_event_9_from_a_to_c_to_h() -> None:
    w = example_workload()
    result, cores, sent = run("kyra", example_latency(), w, EXAMPLE_KYRA, EXAMPLE_EVENTS)
    filters = {(o.client, o.msg.msg_id): filter_from_json(o.msg.payload["filter"])
               for o in w.ops if o.msg.type is MsgType.SUBSCRIBE}
    assert {b: matched_values(filters[k] for k in c.proxy_subscriptions())
            for b, c in cores.items()} == {b: values(v) for b, v in FIG4_PROXY.items()}
    tables = {(b, t): {nb: matched_values(entries.values())
                       for nb, entries in tree.table().items()}
              for b, c in cores.items() for t, tree in c.trees.items()}
    assert tables == {k: {nb: values(v) for nb, v in want.items()}
                      for k, want in FIG4_TABLES.items()}
    # "first forwarded to server C, and then routed on tree t2 to arrive at server H".
    assert publication_hops(sent) == [("A", "C"), ("C", "H")]
    matched = {b: c.counters()["events_matched"] for b, c in cores.items()}
    assert matched == {"A": 0, "B": 0, "C": 1, "D": 0, "E": 0, "F": 0, "G": 0, "H": 1}
    assert {b for b, c in cores.items() if c.counters()["events_unwanted"]} == {"C"}
    assert result.deliveries == {("p", 1): ["sh9"]}


# ---- every event from every server -----------------------------------------------------------

@pytest.mark.parametrize("publisher", sorted(FIG1_SUBSCRIPTIONS))
@pytest.mark.parametrize("event", range(10))
def test_every_event_from_every_server_reaches_exactly_its_subscribers(publisher: str,
                                                                       event: int) -> None:
    """All three deliver the oracle's set once each; Siena's publications cross exactly
    the tree edges towards subscribers; Kyra notifies each clique once, from the clique's
    proxy for the event, and routes on the tree whose zone holds it."""
    w = example_workload(publisher, event)
    want = {k: sorted(v) for k, v in expected_deliveries(w).items()}
    tree = nx.Graph(FIG2_TREE)
    runs = {"siena": run_on(tree, "siena", w, overlay_params("siena", tree), {}),
            "multicast": run("multicast", example_latency(), w, EXAMPLE_MULTICAST,
                             EXAMPLE_EVENTS, FIG3_GROUPING),
            "kyra": run("kyra", example_latency(), w, EXAMPLE_KYRA, EXAMPLE_EVENTS)}
    for name, (result, _, _) in runs.items():
        assert {k: sorted(v) for k, v in result.deliveries.items()} == want, name
        assert "unhandled" not in result.record_counts, name
    _, cores, sent = runs["kyra"]
    clique_of = {s: i for i, c in enumerate(FIG4_CLIQUES) for s in c}
    zone = {s: values(z) for s, z in FIG4_ZONES.items()}
    notified = Counter((clique_of[b], link) for b, link, m in sent if m.type is MsgType.NOTIFY)
    assert all(n == 1 for n in notified.values())  # one NOTIFY per origin server
    senders = {b for b, _, m in sent if m.type is MsgType.NOTIFY}
    assert all(event in zone[b] for b in senders)  # only an event's proxies notify
    tree_hops = [m.payload["tree"] for _, _, m in sent
                 if m.type is MsgType.PUBLISH and "tree" in m.payload]
    assert set(tree_hops) <= {event // 4 if event < 7 else 2}
    # A publisher's clique sends the event once, to its proxy for it (or keeps it).
    first = [(b, link) for b, link, m in sent if m.type is MsgType.PUBLISH
             and "tree" not in m.payload]
    proxy = next(s for s in FIG4_CLIQUES[clique_of[publisher]] if event in zone[s])
    assert first == ([] if proxy == publisher else [(publisher, proxy)])
    assert sum(c.counters()["events_matched"] for c in cores.values()) == 1 + len(tree_hops)


# ---- the shipped specs ------------------------------------------------------------------------

def _sim(spec: str, out: Path) -> tuple[dict, Path]:
    """``pubsublab sim SPEC --json``: the summaries and the run folder."""
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "sim", spec, "--out",
                          str(out), "--json"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stderr
    (run_dir,) = out.iterdir()
    return json.loads(res.stdout.strip().splitlines()[-1]), run_dir


def _publication_sends(folder: Path) -> list[tuple[str, str]]:
    """(broker, link) of every PUBLISH a broker's log shows leaving, in time order."""
    sends = []
    for log in folder.glob("*.jsonl"):
        if log.stem not in set("abcdefgh"):
            continue  # a client's log
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec["ev"] == "send" and rec.get("type") == "PUBLISH":
                sends.append((rec["t_mono"], log.stem, rec["link"]))
    return [(node, link) for _, node, link in sorted(sends)]


def test_the_shipped_example_specs_route_event_9_as_the_figures_do(tmp_path: Path) -> None:
    """``pubsublab sim kyra-example`` and ``kyra-example-siena``: event 9 from a reaches
    h's subscriber once under every routing, a -> c -> h under Kyra (Fig. 4) and along
    Fig. 2's tree under Siena; the plan derives Fig. 4's cliques and trees."""
    kyra, kyra_dir = _sim("kyra-example", tmp_path / "kyra")
    siena, siena_dir = _sim("kyra-example-siena", tmp_path / "siena")
    summaries = {**kyra, **siena}
    assert sorted(summaries) == ["kyra", "multicast", "siena"]
    for s in summaries.values():
        assert (s["expected_deliveries"], s["delivered"], s["missing"], s["duplicates"]) \
            == (1, 1, 0, 0)
    assert _publication_sends(kyra_dir / "kyra") == [("a", "c"), ("c", "h")]
    assert _publication_sends(siena_dir / "siena") == [("a", "c"), ("c", "e"), ("e", "f"),
                                                        ("f", "g"), ("g", "h")]
    plan = compile_plan(load_spec("kyra-example"), netem=False)
    derived = plan.algorithm("kyra").derived
    assert {tuple(derived[b]["clique"]) for b in derived} == {("a", "b", "c"), ("d", "e"),
                                                               ("f", "g", "h")}
    assert {(b, int(t)): tuple(nbs) for b in derived
            for t, nbs in derived[b]["routing_trees"].items()} == {
        ("a", 0): ("d",), ("d", 0): ("a", "f"), ("f", 0): ("d",),
        ("b", 1): ("e", "g"), ("d", 1): ("e",), ("e", 1): ("b", "d"), ("g", 1): ("b",),
        ("c", 2): ("e", "h"), ("e", 2): ("c",), ("h", 2): ("c",)}
    # Multicast: event 9's group tree from a (or from its entry, when a is no member).
    groups = plan.algorithm("multicast").derived
    group = groups["a"]["group_of"]["9"]
    members = {b for b, p in groups.items() if str(group) in p["trees"]}
    assert summaries["multicast"]["ims_by_type"]["PUBLISH"] \
        == len(members) - 1 + ("a" not in members)
    assert len(_publication_sends(kyra_dir / "multicast")) == len(members) - 1 + (
        "a" not in members)
