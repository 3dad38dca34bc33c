"""LBDD and the point-to-point baselines without root: the tree (Theorems 1 and 2, the
paper's twelve addresses against a tree computed here from hashlib.md5), the agents'
membership, flow control and resume, whole distributions and a failure in the
simulator, the depth sweep, the bulk data and its checksums, specs and the CLI."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from experiments.plan import bulk_plan, compile_plan, workload_params
from experiments.runs.bulk.simulated import depth_sweep, run_bulk_simulation, simulate_round
from experiments.spec import SpecError, load_spec, parse_spec
from nodes.cores import make_core, resolve_params
from nodes.cores.dissemination import agent_params, ranges
from nodes.cores.interface import (
    Action,
    Arrived,
    Deliver,
    FromClient,
    Record,
    Send,
    SetTimer,
    TimerFired,
)
from nodes.cores.lbdd import LbddCore, bucket_of, buckets, digest, lbdd_tree, tree_stats
from nodes.cores.p2p import P2PCore, P2PParallelCore
from nodes.messages import Message, MsgType
from nodes.workloads.bulkdata import (
    FIRST_DATA_ID,
    DataLog,
    SliceChecker,
    data_messages,
    slice_count,
    slice_data,
    source_checksum,
)
from topologies.gigabit_cluster import PAPER_IPS
from topologies.graph import brokers

SOURCE, MEMBERS = PAPER_IPS[0], list(PAPER_IPS[1:])


def _random_ips(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ips: dict[str, None] = {}
    while len(ips) < n:
        ips[".".join(str(rng.randrange(256)) for _ in range(4))] = None
    return list(ips)


# ---- the tree -----------------------------------------------------------------------


def _md5_tree(source: str, members: list[str]) -> dict[str, str]:
    """The paper's Algorithms 1 and 2, written again here from hashlib.md5: the highest
    32 bits of MD5(ip) (hex), buckets by log2 of the XOR distance, rank by digest, and
    1-based ranges [floor(ratio (r-1)) + 1, floor(ratio r)] with an exact ratio."""
    def top32(ip: str) -> int:
        return int(hashlib.md5(ip.encode()).hexdigest()[:8], 16)

    def bucket(ip: str) -> int:
        return math.floor(math.log2(top32(ip) ^ top32(source))) + 1

    parent: dict[str, str] = {}
    senders = [source]
    for k in sorted({bucket(m) for m in members}):
        targets = sorted((m for m in members if bucket(m) == k), key=top32)
        ratio = Fraction(len(targets), len(senders))
        for rank, sender in enumerate(senders, 1):
            for pos in range(math.floor(ratio * (rank - 1)) + 1, math.floor(ratio * rank) + 1):
                parent[targets[pos - 1]] = sender
        senders = targets
    return parent


def test_the_paper_twelve_addresses_give_the_md5_tree() -> None:
    tree = lbdd_tree(SOURCE, MEMBERS)
    assert tree == _md5_tree(SOURCE, MEMBERS)
    ip = {octet: f"10.3.17.{octet}" for octet in (74, 97, 234, 90, 98, 64, 61, 184, 72, 88,
                                                  44, 68)}
    assert tree == {
        ip[98]: ip[74], ip[64]: ip[74],  # bucket 30: the publisher's two children
        ip[184]: ip[98], ip[61]: ip[64],  # bucket 31
        ip[68]: ip[184], ip[234]: ip[184], ip[90]: ip[184],  # bucket 32, 7 split 3 + 4
        ip[72]: ip[61], ip[44]: ip[61], ip[88]: ip[61], ip[97]: ip[61],
    }
    stats = tree_stats(SOURCE, tree)
    assert (stats["depth"], stats["source_out_degree"], stats["max_out_degree"]) == (3, 2, 4)
    assert digest("10.3.17.74") == int.from_bytes(hashlib.md5(b"10.3.17.74").digest()[:4],
                                                  "big")


@pytest.mark.parametrize("seed", range(12))
def test_theorem_1_one_parent_no_cycle_all_reached(seed: int) -> None:
    rng = random.Random(seed)
    ips = _random_ips(rng.choice([2, 3, 5, 12, 40, 150, 400]), seed)
    source, members = ips[0], ips[1:]
    tree = lbdd_tree(source, members)
    assert tree == _md5_tree(source, members)
    assert sorted(tree) == sorted(members)  # one parent each, nobody left out
    for m in members:  # a path to the source, through strictly smaller buckets
        seen = {m}
        node = m
        while node != source:
            up = tree[node]
            assert up == source or bucket_of(source, up) < bucket_of(source, node)
            assert up not in seen
            seen.add(up)
            node = up
    # Target selection: each sender's children are one contiguous range of the next
    # bucket (rank order), and the ranges follow the senders' ranks.
    levels = [[source], *buckets(source, members).values()]
    for senders, targets in itertools.pairwise(levels):
        owners = [senders.index(tree[t]) for t in targets]
        assert owners == sorted(owners)
        sizes = [owners.count(r) for r in range(len(senders))]
        assert max(sizes) - min(sizes) <= 1  # floor or ceil of the paper's ratio


@pytest.mark.parametrize("seed", range(4))
def test_theorem_2_mean_out_degree_is_two(seed: int) -> None:
    ips = _random_ips(5001, 100 + seed)
    stats = tree_stats(ips[0], lbdd_tree(ips[0], ips[1:]))
    assert stats["mean_out_degree"] == pytest.approx(2.0, abs=0.15)
    assert 10 <= stats["depth"] <= 18  # log2(5000) ~ 12.3 non-empty buckets


def test_tree_helpers_reject_what_is_not_a_tree() -> None:
    with pytest.raises(ValueError, match="distinct"):
        lbdd_tree(SOURCE, [MEMBERS[0], MEMBERS[0]])
    with pytest.raises(ValueError, match="source"):
        lbdd_tree(SOURCE, [SOURCE])
    with pytest.raises(ValueError, match="no path"):
        tree_stats("s", {"a": "b", "b": "a"})
    assert tree_stats("s", {})["depth"] == 0
    star = tree_stats("s", dict.fromkeys("abc", "s"))
    assert (star["depth"], star["mean_out_degree"]) == (1, 3.0)


# ---- the agents, event by event ------------------------------------------------------

TOPIC = {"topic": "t"}


def _msg(mtype: MsgType, origin: str, payload: dict, msg_id: int = 1) -> Message:
    return Message(mtype, msg_id, origin, 0, payload)


def _join(origin: str, ip: str, pubs=(), subs=()) -> Message:
    return _msg(MsgType.JOIN, origin, {"ip": ip, "pubs": list(pubs), "subs": list(subs)})


def _slices(n: int) -> list[Message]:
    return list(data_messages("pub", "t", n * 1000, 1000, seed=1))


def _sends(actions: list[Action], mtype: MsgType) -> list[tuple[str, int]]:
    """(link, slice index) of the sends of one type."""
    return [(a.link, a.msg.payload.get("index", -1)) for a in actions
            if isinstance(a, Send) and a.msg.type is mtype]


def _ack(origin: str, index: int) -> Message:
    return _msg(MsgType.DATA_ACK, origin, {"source": "pc1", "topic": "t", "index": index})


def _have(origin: str, have: list[list[int]]) -> Message:
    return _msg(MsgType.HAVE, origin, {"source": "pc1", "topic": "t", "have": have})


def _publisher(core_cls: type, subscribers: dict[str, str], **params: object):
    """The publisher's agent (pc1) with its subscribers joined and their HAVEs in."""
    declared = agent_params(core_cls.default_window_slices)
    core = core_cls("pc1", sorted(subscribers),
                    {"ip": SOURCE, **resolve_params(core_cls.__name__, declared, params)})
    core.handle(FromClient("pub", _msg(MsgType.ADVERTISE, "pub", TOPIC)), 0.0)
    for name, ip in subscribers.items():
        core.handle(Arrived(name, _join(name, ip, subs=["t"])), 0.0)
    out = core.handle(TimerFired("path_update"), 0.0)
    return core, out


def test_agent_announces_itself_and_detects_silence() -> None:
    core = make_core("lbdd", "pc2", ["pc1", "pc3"], {"ip": PAPER_IPS[1]})
    out = core.handle(FromClient("sub", _msg(MsgType.SUBSCRIBE, "sub", TOPIC)), 0.0)
    joins = [a for a in out if isinstance(a, Send)]
    assert [a.link for a in joins] == ["pc1", "pc3"]
    assert joins[0].msg.payload == {"ip": PAPER_IPS[1], "pubs": [], "subs": ["t"]}
    assert SetTimer("heartbeat", 0.5) in out and SetTimer("path_update", 0.0) in out
    out = core.handle(Arrived("pc1", _join("pc1", SOURCE, pubs=["t"])), 0.1)
    assert Record("member_up", {"agent": "pc1", "ip": SOURCE}) in out
    out = core.handle(TimerFired("path_update"), 0.1)
    assert Record("path", {"source": "pc1", "topic": "t", "parent": "pc1",
                           "children": []}) in out
    query = _msg(MsgType.HAVE_QUERY, "pc1", {"source": "pc1", "topic": "t"})
    (answer,) = core.handle(Arrived("pc1", query), 0.1)  # a new parent asks what we hold
    assert answer.link == "pc1" and answer.msg.type is MsgType.HAVE
    assert answer.msg.payload == {"source": "pc1", "topic": "t", "have": []}
    out = core.handle(TimerFired("heartbeat"), 2.0)
    assert [a.link for a in out if isinstance(a, Send)] == ["pc1", "pc3"]
    assert not [a for a in out if isinstance(a, Record)]
    out = core.handle(TimerFired("heartbeat"), 2.2)  # 2.1 s of silence > timeout_s = 2.0
    assert Record("member_down", {"agent": "pc1", "silent_s": 2.1}) in out
    out = core.handle(TimerFired("path_update"), 2.2)
    assert Record("path", {"source": "pc1", "topic": "t", "parent": None,
                           "children": []}) in out
    core.handle(Arrived("pc1", _join("pc1", SOURCE, pubs=["t"])), 2.3)  # heard again
    out = core.handle(TimerFired("path_update"), 2.3)
    assert Record("path", {"source": "pc1", "topic": "t", "parent": "pc1",
                           "children": []}) in out
    with pytest.raises(ValueError, match="'ip'"):
        LbddCore("pc2", [], {})


def test_parent_resumes_a_child_from_what_it_holds() -> None:
    core, out = _publisher(LbddCore, {"pc5": PAPER_IPS[4]}, window_slices=3)
    assert Record("path", {"source": "pc1", "topic": "t", "parent": None,
                           "children": ["pc5"]}) in out
    assert _sends(out, MsgType.HAVE_QUERY) == [("pc5", -1)]
    assert core.handle(Arrived("pc3", _have("pc3", [])), 0.5) == []  # not a child: ignored
    sent = []
    for msg in _slices(8):  # the child's state is unknown: nothing goes out yet
        sent += _sends(core.handle(FromClient("pub", msg), 1.0), MsgType.DATA)
    assert sent == []
    out = core.handle(Arrived("pc5", _have("pc5", [[0, 3], [4, 5]])), 1.1)
    assert Record("resume", {"source": "pc1", "topic": "t", "child": "pc5", "child_has": 4,
                             "to_send": 4}) in out
    assert _sends(out, MsgType.DATA) == [("pc5", 3), ("pc5", 5), ("pc5", 6)]  # window 3
    out = core.handle(Arrived("pc5", _ack("pc5", 3)), 1.2)
    assert _sends(out, MsgType.DATA) == [("pc5", 7)]
    assert core.counters() == {"slices_received": 8, "slices_duplicate": 0, "slices_sent": 4}


def test_a_relay_acknowledges_upstream_only_once_it_forwarded() -> None:
    # 10.3.17.98 (bucket 30) relays from the publisher to 10.3.17.184 (bucket 31).
    core = make_core("lbdd", "pc5", ["pc1", "pc8"], {"ip": "10.3.17.98", "window_slices": 1})
    core.handle(FromClient("sub", _msg(MsgType.SUBSCRIBE, "sub", TOPIC)), 0.0)
    core.handle(Arrived("pc1", _join("pc1", SOURCE, pubs=["t"])), 0.0)
    core.handle(Arrived("pc8", _join("pc8", "10.3.17.184", subs=["t"])), 0.0)
    core.handle(TimerFired("path_update"), 0.0)
    core.handle(Arrived("pc8", _have("pc8", [])), 0.0)
    first, second = (m.forwarded(payload={**m.payload, "source": "pc1"}) for m in _slices(2))
    out = core.handle(Arrived("pc1", first), 1.0)
    assert Deliver("sub", first) in out
    assert _sends(out, MsgType.DATA) == [("pc8", 0)]
    assert _sends(out, MsgType.DATA_ACK) == [("pc1", 0)]
    out = core.handle(Arrived("pc1", second), 1.1)  # pc8's window is full: hold the ack
    assert _sends(out, MsgType.DATA) == [] and _sends(out, MsgType.DATA_ACK) == []
    out = core.handle(Arrived("pc8", _ack("pc8", 0)), 1.2)
    assert _sends(out, MsgType.DATA) == [("pc8", 1)]
    assert _sends(out, MsgType.DATA_ACK) == [("pc1", 1)]
    out = core.handle(Arrived("pc1", first), 1.3)  # a duplicate: acked, not delivered
    assert _sends(out, MsgType.DATA_ACK) == [("pc1", 0)] and not any(
        isinstance(a, Deliver) for a in out)
    assert core.counters()["slices_duplicate"] == 1


def test_p2p_sends_each_slice_to_one_subscriber_after_another() -> None:
    subs = {"pc2": PAPER_IPS[1], "pc3": PAPER_IPS[2]}
    core, _ = _publisher(P2PCore, subs)
    for name in subs:
        core.handle(Arrived(name, _have(name, [])), 0.0)
    sent = []
    for msg in _slices(2):
        sent += _sends(core.handle(FromClient("pub", msg), 1.0), MsgType.DATA)
    for ack in [("pc2", 0), ("pc3", 0), ("pc2", 1)]:
        sent += _sends(core.handle(Arrived(ack[0], _ack(*ack)), 1.1), MsgType.DATA)
    assert sent == [("pc2", 0), ("pc3", 0), ("pc2", 1), ("pc3", 1)]
    parallel, _ = _publisher(P2PParallelCore, subs, window_slices=2)
    for name in subs:
        parallel.handle(Arrived(name, _have(name, [])), 0.0)
    sent = []
    for msg in _slices(3):
        sent += _sends(parallel.handle(FromClient("pub", msg), 1.0), MsgType.DATA)
    assert sorted(sent) == [("pc2", 0), ("pc2", 1), ("pc3", 0), ("pc3", 1)]


def test_ranges_round_trip() -> None:
    assert ranges({0, 1, 2, 5, 7, 8}) == [[0, 3], [5, 6], [7, 9]]
    assert ranges([]) == []


# ---- whole distributions in the simulator ----------------------------------------------


def _spec(**workload: object) -> dict:
    return {"name": "lbdd-test", "topology": {"name": "gigabit-cluster",
                                              "params": {"paper_ips": True}},
            "links": {"bw_mbps": 100}, "seed": 3, "scale": 1 / 2048,
            "workload": {"kind": "bulk", "subscriber_counts": [11], **workload},
            "routing": {"algorithms": ["lbdd", "p2p", "p2p-parallel"],
                        "params": {"heartbeat_s": 0.5, "timeout_s": 2.0}}}


def test_every_subscriber_gets_every_slice_once_in_the_simulator(tmp_path: Path) -> None:
    _, summaries = run_bulk_simulation(compile_plan(parse_spec(_spec())), tmp_path)
    for name, s in summaries.items():
        assert s["complete"] and s["missing"] == 0 and s["duplicates"] == 0, name
        assert s["n_slices"] == 64 and s["expected_deliveries"] == 11 * 64
        assert s["tree_as_computed"], name
        assert s["ims_by_type"]["DATA"] == 11 * 64  # exactly n copies: one per subscriber
    lbdd, p2p, par = (summaries[k] for k in ("lbdd", "p2p", "p2p-parallel"))
    assert lbdd["contribution"]["pc1"] == pytest.approx(2 / 11)  # two children
    assert lbdd["contribution"]["pc7"] == pytest.approx(4 / 11)
    assert p2p["contribution"] == {"pc1": 1.0}
    # The publisher's NIC is the bottleneck of point-to-point; LBDD's agent with four
    # children is its own: 11 / 4 = 2.75 times faster.
    ratio = p2p["distribution_delay_s"] / lbdd["distribution_delay_s"]
    assert ratio == pytest.approx(2.75, rel=0.05)
    assert par["distribution_delay_s"] <= p2p["distribution_delay_s"]
    assert lbdd["publisher_nic"]["mean_pct"] < 70 < par["publisher_nic"]["mean_pct"]


def test_failure_in_the_simulator_is_detected_and_repaired(tmp_path: Path) -> None:
    spec = parse_spec({**_spec(failure={"victim": "pc7", "at_s": 0.4, "algorithms": ["lbdd"]}),
                       "routing": {"algorithms": ["lbdd"],
                                   "params": {"heartbeat_s": 0.5, "timeout_s": 2.0}}})
    _, summaries = run_bulk_simulation(compile_plan(spec), tmp_path)
    failure = summaries["lbdd"]["failure"]
    row = json.loads((tmp_path / next(tmp_path.iterdir()).name / "lbdd" / "failure"
                      / "summary.json").read_text())
    assert failure["complete"] and failure["missing"] == 0 and failure["duplicates"] == 0
    assert row["expected_deliveries"] == 10 * 64 and row["unexpected"] == 0
    assert failure["orphans"] == ["pc10", "pc11", "pc2", "pc9"]  # pc7's four children
    assert failure["detected_by"] == 10
    # Dead after timeout_s = 2 s of silence, checked every heartbeat_s = 0.5 s; silence
    # starts at the last message heard, up to one heartbeat before the kill.
    assert 1.5 <= failure["detected_first_s"] <= failure["detected_last_s"] <= 2.5 + 1e-6
    assert failure["detected_last_s"] <= failure["repair_s"] < failure["detected_last_s"] + 0.5
    resumed = {r["child"]: r for r in failure["resumes"]}
    assert sorted(resumed) == failure["orphans"]
    for r in resumed.values():  # from what each holds, not from the start
        assert r["parent"] == "pc8"
        assert 0 < r["child_has"] < 64 and r["to_send"] == 64 - r["child_has"]
    assert row["tree_as_computed"]  # the tree of the ten survivors


def test_simulated_rounds_are_deterministic() -> None:
    run_plan = compile_plan(parse_spec(_spec(failure={"victim": "pc7", "at_s": 0.4})))
    names = brokers(run_plan.graph)
    plan = run_plan.bulk
    assert plan is not None and plan == bulk_plan(run_plan.spec, names,
                                                  workload_params(run_plan.spec))
    overlay = run_plan.overlay
    # Switch mode: each broker's access link (the spec's 100 Mbit/s) is its NIC.
    assert dict(overlay.nodes(data="nic_mbps")) == dict.fromkeys(names, 100.0)
    alg = run_plan.algorithm("lbdd")
    runs = [simulate_round(overlay, plan, "lbdd", alg.params, names[1:], derived=alg.derived,
                           kill_after_s=0.4) for _ in range(2)]
    assert runs[0].receipts == runs[1].receipts and runs[0].records == runs[1].records
    assert runs[0].data_sent == runs[1].data_sent and runs[0].receipts


def test_depth_sweep_rows(tmp_path: Path) -> None:
    spec = parse_spec({"name": "sweep", "topology": {"name": "gigabit-cluster"},
                       "links": {"bw_mbps": 1000}, "seed": 1, "scale": 1 / 8192,
                       "workload": {"kind": "bulk", "sweep_nodes": [60, 120], "trials": 6,
                                    "start_s": 0.2},
                       "routing": {"algorithms": ["lbdd"], "params": {"heartbeat_s": 60.0}}})
    summaries = depth_sweep(compile_plan(spec), 1000.0, tmp_path)
    rows = summaries["lbdd"]["sweep"]
    assert [r["nodes"] for r in rows] == [60, 120]
    for r in rows:
        assert r["simulated"]["complete"] and r["simulated"]["tree_as_computed"]
        assert r["simulated"]["missing"] == 0 and r["simulated"]["duplicates"] == 0
        assert 3 <= r["depth"]["min"] <= r["depth"]["mean"] <= r["depth"]["max"] <= 12
        assert 1.3 < r["mean_out_degree"]["mean"] < 2.7
    assert (tmp_path / "lbdd" / "summary.json").is_file()


# ---- bulk data, specs, CLI -------------------------------------------------------------


def test_slices_are_seeded_and_checksums_see_every_byte() -> None:
    assert slice_count(1000, 300) == 4 and len(slice_data(1, 3, 1000, 300)) == 100
    assert slice_data(1, 2, 1000, 300) == slice_data(1, 2, 1000, 300)
    assert slice_data(1, 2, 1000, 300) != slice_data(2, 2, 1000, 300)
    msgs = list(data_messages("pub", "t", 1000, 300, 1))
    assert [m.msg_id for m in msgs] == [FIRST_DATA_ID + i for i in range(4)]
    checker = SliceChecker()
    for m in reversed(msgs):  # any order
        checker.add(m)
    assert checker.add(msgs[0])[2] is True  # a duplicate
    assert checker.summary()["checksum"] == source_checksum(1000, 300, 1)
    assert checker.summary()["duplicates"] == 1
    flipped = Message(MsgType.DATA, msgs[1].msg_id, "pub", 0, msgs[1].payload,
                      bytes([msgs[1].body[0] ^ 1]) + msgs[1].body[1:])
    other = SliceChecker()
    for m in [msgs[0], flipped, *msgs[2:]]:
        other.add(m)
    assert other.summary()["checksum"] != source_checksum(1000, 300, 1)
    log = DataLog()
    assert [log.add(m)[1] is not None for m in msgs] == [False, False, False, True]


def test_bulk_specs_are_checked() -> None:
    spec = load_spec("lbdd-gigabit")
    plan = bulk_plan(spec, [f"pc{i}" for i in range(1, 13)], workload_params(spec))
    assert (plan.publisher, plan.n_slices, plan.counts[-1]) == ("pc1", 512, 11)
    assert plan.others[:2] == ("pc2", "pc3")
    sweep = load_spec("lbdd-depth-sweep")
    assert workload_params(sweep)["sweep_nodes"] == [100, 200, 300, 400, 500]
    with pytest.raises(SpecError, match="unknown field"):
        workload_params(parse_spec(_spec(n_publishers=3)))
    with pytest.raises(SpecError, match="failure"):
        bad = parse_spec(_spec(failure={"victim": "pc7"}))
        bulk_plan(bad, [f"pc{i}" for i in range(1, 13)], workload_params(bad))


def _cli(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *args],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_cli_lbdd_tree_prints_the_cores_tree() -> None:
    d = _cli("lbdd-tree", "--source", SOURCE, "--members", ",".join(MEMBERS), "--json")
    assert d["parent"] == lbdd_tree(SOURCE, MEMBERS)
    assert (d["depth"], d["mean_out_degree"]) == (3, 2.2)
    assert d["buckets"]["30"] == ["10.3.17.98", "10.3.17.64"]
    bad = subprocess.run([sys.executable, "-m", "experiments.cli", "lbdd-tree", "--source",
                          "10.3.17.074", "--members", "10.3.17.1"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 2 and "dotted-quad" in bad.stderr


def test_cli_sim_of_the_shipped_spec(tmp_path: Path) -> None:
    d = _cli("sim", "lbdd-gigabit", "--out", str(tmp_path), "--json", "--set",
             "scale=0.0001", "--set", "workload.subscriber_counts=[3, 11]", "--set",
             "workload.failure=null")
    assert sorted(d) == ["lbdd", "p2p", "p2p-parallel"]
    for s in d.values():
        assert s["runtime"] == "simulated" and s["missing"] == 0 and s["duplicates"] == 0
        assert [r["subscribers"] for r in s["by_subscribers"]] == [3, 11]
