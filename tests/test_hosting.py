"""The rules both hosts follow (nodes.hosting): IMs counted when they leave a queue, a dead
neighbour is a LinkDown, one log-based summary, deterministic logs, robust process control.
Each test failed on the code before the run-plan issue's fixes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import networkx as nx
import pytest

from experiments.plan import compile_plan
from experiments.runs.brokers import BrokerRun
from experiments.runs.simulated import run_simulation
from experiments.spec import load_spec
from nodes.cores.flood import FloodCore
from nodes.cores.interface import Action, Event, LinkDown, Send
from nodes.emulated.auth import new_secret
from nodes.emulated.client import load_ops
from nodes.logs import iter_jsonl
from nodes.messages import Message, MsgType
from nodes.metrics.log_summary import summarize_logs
from nodes.model import Schema
from nodes.sim.result import summarize
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import simulate
from nodes.workloads.ops import ClientOp, Workload, workload_from_jsonl
from nodes.workloads.oracle import expected_deliveries

REPO = Path(__file__).resolve().parent.parent


class _Watcher:
    """A flood core that remembers the LinkDown events it gets."""

    downs: ClassVar[list[tuple[str, float, str]]] = []

    def __init__(self, broker: str, neighbours: Sequence[str], params: Mapping[str, Any]) -> None:
        self.inner = FloodCore(broker, neighbours, {"tree_neighbours": list(neighbours)})
        self.broker, self.neighbours = broker, self.inner.neighbours

    def handle(self, event: Event, now_s: float) -> list[Action]:
        if isinstance(event, LinkDown):
            _Watcher.downs.append((self.broker, now_s, event.link))
            return []
        return self.inner.handle(event, now_s)


def _pub(i: int, broker: str = "b0") -> ClientOp:
    return ClientOp(0.1 * i, "p", broker, Message(MsgType.PUBLISH, i, "p", 0,
                                                  {"attrs": {"x": i}, "pad": "x" * 500}))


def test_simulator_announces_a_death_with_linkdown(tmp_path: Path) -> None:
    """b1 dies at 1 s; b0 and b2 lose their links one link delay (20 ms) later."""
    g = nx.path_graph(["b0", "b1", "b2"])
    nx.set_edge_attributes(g, 20.0, "delay_ms")
    _Watcher.downs = []
    w = Workload(Schema({}), {"p": "b0"}, (_pub(1),), {})
    simulate(g, w, _Watcher, SimSettings(seed=1, out_dir=tmp_path, kill_at={"b1": 1.0}))
    assert sorted(_Watcher.downs) == [("b0", pytest.approx(1.02), "b1"),
                                      ("b2", pytest.approx(1.02), "b1")]
    (rec,) = [r for r in iter_jsonl(tmp_path / "b0.jsonl", "link")]
    assert (rec["link"], rec["state"]) == ("b1", "down")


def test_ims_are_counted_when_they_leave_the_queue(tmp_path: Path) -> None:
    """On a slow link the run stops with messages still queued: they are not IMs, and the
    count equals the `send` records (what the emulated runtime counts)."""
    g = nx.Graph()
    g.add_edge("b0", "b1", bw_mbps=0.05)  # ~80 ms per 500-byte message
    w = Workload(Schema({}), {"p": "b0"}, tuple(_pub(i) for i in range(1, 11)), {})

    class Push:
        def __init__(self, broker: str, neighbours: Sequence[str],
                     params: Mapping[str, Any]) -> None:
            self.broker, self.neighbours = broker, tuple(neighbours)

        def handle(self, event: Event, now_s: float) -> list[Action]:
            msg = getattr(event, "msg", None)
            if self.broker == "b0" and msg is not None and msg.type is MsgType.PUBLISH:
                return [Send("b1", msg)] * 5
            return []

    result = simulate(g, w, Push, SimSettings(seed=1, out_dir=tmp_path, until_s=1.2))
    sends = sum(1 for _ in iter_jsonl(tmp_path / "b0.jsonl", "send"))
    assert 0 < result.ims_by_type["PUBLISH"] == sends < 50


def test_log_summary_equals_the_in_memory_summary(tmp_path: Path) -> None:
    """The simulator's fast path (no logs) and the log reader both runtimes use agree."""
    plan = compile_plan(load_spec("demo"))
    run_dir, from_logs = run_simulation(plan, tmp_path)
    w = workload_from_jsonl(run_dir / "workload.jsonl")
    expected = expected_deliveries(w)
    for alg in plan.algorithms:
        result = simulate(plan.overlay, w, alg.name, SimSettings(
            core_params=dict(alg.params), derived=alg.derived, seed=plan.spec.seed,
            window_ms=plan.window_ms,
            link_changes=[(c.at_s, c.a, c.b, c.bw_mbps) for c in plan.link_schedule]))
        memory = summarize(result, expected, scale=plan.spec.scale)
        logged = summarize_logs(run_dir / alg.name, plan.overlay.nodes, w, alg.name,
                                "simulated", plan.spec.scale, expected)
        for key in ("published", "expected_deliveries", "delivered", "unexpected",
                    "duplicates", "missing", "ims_by_type", "ims_total", "srt_size",
                    "prt_size", "hops"):
            assert logged[key] == memory[key], key
        assert logged["duration_s"] == pytest.approx(memory["duration_s"], abs=1e-5)
        for kind in ("advertisement", "subscription", "notification"):
            for stat in ("p50", "p95", "max", "mean"):
                # the logs hold microseconds on an epoch scale: within 2 us of exact
                assert logged["delay_ms"][kind][stat] == pytest.approx(
                    memory["delay_ms"][kind][stat], abs=2e-3), (kind, stat)
        assert from_logs[alg.name]["delivered"] == memory["delivered"]


def test_a_torn_log_is_read_to_its_last_record_and_named(tmp_path: Path) -> None:
    """A broker killed mid-write leaves half a record at the end of its log: the summary
    reads every whole record before it, gives the same figures, and names the torn tail."""
    plan = compile_plan(load_spec("demo"))
    run_dir, _ = run_simulation(plan, tmp_path)
    w = workload_from_jsonl(run_dir / "workload.jsonl")
    expected = expected_deliveries(w)
    alg = plan.algorithms[0]

    def summary() -> dict[str, Any]:
        return summarize_logs(run_dir / alg.name, plan.overlay.nodes, w, alg.name,
                              "simulated", plan.spec.scale, expected)

    whole = summary()
    assert "logs_torn" not in whole
    broker = sorted(plan.overlay.nodes)[0]
    with open(run_dir / alg.name / f"{broker}.jsonl", "ab") as fh:
        fh.write(b'{"ev":"recv","hops":1,"lin')
    torn = summary()
    assert torn.pop("logs_torn") == {broker: len(b'{"ev":"recv","hops":1,"lin')}
    assert torn == whole


def test_simulated_logs_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """Two processes with different PYTHONHASHSEED write byte-identical logs."""
    logs = []
    for hash_seed in ("1", "4242"):
        out = tmp_path / f"h{hash_seed}"
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        subprocess.run([sys.executable, "-m", "experiments.cli", "sim", "demo", "--out",
                        str(out)], cwd=REPO, env=env, check=True, capture_output=True,
                       timeout=300)
        (run,) = list(out.iterdir())
        logs.append({p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*.jsonl"))})
    assert logs[0].keys() == logs[1].keys() and len(logs[0]) > 20
    differ = [str(k) for k in logs[0] if logs[0][k] != logs[1][k]]
    assert not differ, differ


def test_a_non_object_ops_line_is_a_bad_config(tmp_path: Path) -> None:
    ops = tmp_path / "c.ops.jsonl"
    ops.write_text('[1, 2, 3]\n')
    with pytest.raises(ValueError, match=r"c.ops.jsonl:1: bad op: expected a JSON object"):
        load_ops(ops, "c", "b0")
    ops.write_text('{"t_s": 0, "type": "PUBLISH"\n')
    with pytest.raises(ValueError, match=r"c.ops.jsonl:1: bad op"):
        load_ops(ops, "c", "b0")


def test_a_client_with_a_non_object_ops_line_exits_2(tmp_path: Path) -> None:
    ops = tmp_path / "c.ops.jsonl"
    ops.write_text('"just a string"\n')
    cfg = tmp_path / "c.json"
    cfg.write_text(f'{{"client": "c", "broker": "b0", "broker_addr": ["127.0.0.1", 9], '
                   f'"log_dir": "{tmp_path}", "ops": "{ops}", "secret": "{new_secret()}"}}')
    res = subprocess.run([sys.executable, "-m", "nodes.emulated.client", "--config", str(cfg)],
                         cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr


class _Hung:
    """A process that ignores SIGTERM, as a hung broker does."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c",
                                      "import signal, time\n"
                                      "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                      "time.sleep(60)"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proc, name)


def test_a_hung_broker_does_not_mask_the_original_error(tmp_path: Path) -> None:
    run = BrokerRun.__new__(BrokerRun)  # no emulation needed to stop processes
    run.brokers = {"b0": _Hung()}
    time.sleep(0.3)  # the child installs its handler
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="the original error"):
        try:
            raise RuntimeError("the original error")
        finally:
            codes = run.stop_brokers(timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert codes == {"b0": -9}
    assert Counter(p.poll() is not None for p in run.brokers.values()) == Counter({True: 1})
