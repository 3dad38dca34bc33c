"""Workload sizes are bounded before they are built: a size field this machine cannot
hold is refused in one line (exit 2, quickly, under a memory cap, nothing written), and
the estimate that refuses it stays close to the operations a shipped spec builds."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.spec import load_spec
from nodes.workloads.kinds import WORKLOADS, RunContext, workload_size
from topologies.graph import brokers

REPO = Path(__file__).resolve().parent.parent
HUGE = "10000000000000"
CAP = 2 * 2**30  # address space of the refused command


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _cli(*args: str, cwd: Path = REPO) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=60, check=False,
                         preexec_fn=_capped,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return res, time.monotonic() - start


def _one_line(res: subprocess.CompletedProcess[str], fragment: str) -> str:
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubsublab: error: "), res.stderr[-2000:]
    assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("command", "spec", "field"), [
    ("plan", "meghdoot-peers", "n_events"),
    ("plan", "meghdoot-peers", "n_subscriptions"),
    ("plan", "codd-nodes", "n_documents"),
    ("plan", "codd-nodes", "k"),
    ("plan", "meghdoot-peers", "n_days"),
    ("plan", "demo", "burst.count"),
    ("plan", "demo", "n_subscribers"),
    ("demo", None, "pubs_per_publisher"),
])
def test_huge_size_field_is_refused_in_one_line(tmp_path: Path, command: str,
                                                spec: str | None, field: str) -> None:
    out = tmp_path / "runs"
    args = [command, *([spec] if spec else []), "--set", f"workload.{field}={HUGE}"]
    if command == "demo":
        args += ["--out", str(out)]
    res, seconds = _cli(*args, cwd=tmp_path)
    line = _one_line(res, f"workload.{field}={HUGE} would build about")
    assert "--allow-large" in line and "this machine holds about" in line
    assert seconds < 15, seconds
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("command", ["plan", "sim"])
def test_allow_large_skips_the_check_but_overflow_is_one_line(tmp_path: Path,
                                                             command: str) -> None:
    res, seconds = _cli(command, "demo", "--allow-large", "--set",
                        f"workload.pubs_per_publisher={HUGE}", cwd=tmp_path)
    line = _one_line(res, "workload")
    assert "would build about" not in line and "Traceback" not in res.stderr
    assert seconds < 15, seconds


def test_shipped_spec_still_plans_where_its_huge_twin_is_refused() -> None:
    res, _ = _cli("plan", "meghdoot-peers")  # under the same memory cap
    assert res.returncode == 0, res.stderr[-2000:]
    assert "workload meghdoot" in res.stdout
    res, _ = _cli("plan", "meghdoot-peers", "--set", "workload.n_events=100000000000")
    _one_line(res, "workload.n_events=100000000000 would build about")


@pytest.mark.parametrize("spec", ["demo", "meghdoot-peers", "codd-nodes",
                                  "octopia-publishers"])
def test_estimate_is_close_to_the_built_operations(spec: str) -> None:
    plan = compile_plan(load_spec(spec))
    kind = WORKLOADS[plan.workload_kind]
    run = RunContext(graph=plan.graph, topology=plan.spec.topology.name, seed=plan.spec.seed,
                     scale=plan.spec.scale, links=plan.links,
                     algorithms={a.name: a.params for a in plan.algorithms},
                     duration_s=plan.duration_s)
    assert brokers(plan.graph)
    key, ops, size = workload_size(kind, plan.workload_params, run)
    built = len(plan.workload.ops)
    assert key is not None and built > 0
    assert built / 3 <= ops <= built * 3, (ops, built)
    assert size > 0


def test_every_kind_with_a_builder_estimates() -> None:
    for name, kind in WORKLOADS.items():
        if kind.build is not None and name != "kyra-example":  # its events are a short list
            assert kind.estimate.__name__ != "_no_estimate", name
