"""Spec values of the wrong type or shape: one line naming the field that was set (exit 2,
nothing written), never a Python error or another field's name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.plan import compile_plan
from experiments.spec import MAX_DEPTH, SpecError, load_spec, safe_yaml
from nodes.cores.params import Param, is_integer, is_number

REPO = Path(__file__).resolve().parent.parent
BASE = 'name: t\ntopology: {name: scot, params: {tree: "a-b", m: 2, mode: overlay}}\n'
SIENA_EDGES = "a-c,b-c,c-d,c-e,e-f,f-g,g-h"  # kyra-example-siena's overlay


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _one_line_error(res: subprocess.CompletedProcess[str], fragment: str) -> str:
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubsublab: error: "), res.stderr[-2000:]
    assert fragment in lines[0], lines[0]
    assert len(lines[0]) < 400
    return lines[0]


@pytest.mark.parametrize(("spec", "assignment", "fragment"), [
    # NaN was taken, then blamed on routing.params.meghdoot.bucket_s
    ("meghdoot-peers", "workload.step_s=.nan",
     "workload.step_s: bad value nan; allowed: a finite number"),
    # true was taken as 1 event
    ("meghdoot-peers", "workload.n_events=true",
     "workload.n_events: bad value True; allowed: an integer"),
    # "'<' not supported between instances of 'str' and 'int'"
    ("meghdoot-peers", "workload.n_events=many",
     "workload.n_events: bad value 'many'; allowed: an integer"),
    ("meghdoot-peers", "workload.join_probability=true",
     "workload.join_probability: bad value True; allowed: paper or a number in (0, 1]"),
    # the readings of Meghdoot's load reports
    ("meghdoot-peers", "routing.params.report_rule=hourly",
     "routing.params.meghdoot.report_rule: bad value 'hourly'; allowed: str in "
     "{periodic, on_change}"),
    ("meghdoot-peers", "routing.params.report_change=0",
     "routing.params.meghdoot.report_change: bad value 0; allowed: float > 0"),
    ("meghdoot-peers", "routing.params.heartbeat_periods=-1",
     "routing.params.meghdoot.heartbeat_periods: bad value -1; allowed: int >= 1"),
    # where a split cuts
    ("meghdoot-peers", "routing.params.split_rule=even",
     "routing.params.meghdoot.split_rule: bad value 'even'; allowed: str in "
     "{balanced, halving, balanced_separating}"),
    # "'float' object cannot be interpreted as an integer"
    ("demo", "workload.pubs_per_publisher=2.5",
     "workload.pubs_per_publisher: bad value 2.5; allowed: an integer"),
    ("demo", "workload.mode=3", "workload.mode: bad value 3; allowed: a string"),
    # true was taken as one subscriber (and the failure victim blamed)
    ("lbdd-gigabit", "workload.subscriber_counts=[1, true]",
     "workload.subscriber_counts: bad value [1, True]; allowed: a list of integers"),
    ("lbdd-gigabit", "workload.subscriber_counts=5",
     "workload.subscriber_counts: bad value 5; allowed: a list of integers"),
    # a ValueError traceback; 0 divided by zero
    ("lbdd-gigabit", "workload.slice_kb=abc", "workload.slice_kb: bad value 'abc'"),
    ("lbdd-gigabit", "workload.slice_kb=0", "workload.slice_kb: bad value 0"),
    ("lbdd-depth-sweep", "workload.slice_kb=0.5", "workload.slice_kb: bad value 0.5"),
    # was reported as the placement's own 'n'
    ("kyra-servers", "topology.params.n_servers=0",
     "'transit-stub': n_servers: bad value 0; allowed: an integer >= 1"),
    # were reported under routing.algorithms (the second with a whole calibration event)
    ("kyra-example", "routing.params.kyra.zone_attr=w",
     "routing.params.kyra.zone_attr: bad value 'w'; allowed: attributes every calibration "
     "event has (v)"),
    ("kyra-example", "routing.params.multicast.cell_attrs=v,w",
     "routing.params.multicast.cell_attrs: bad value 'v,w'; allowed: attributes every "
     "calibration event has (v); 'w' is not one"),
    # "'<=' not supported between instances of 'int' and 'str'"
    ("demo", "workload.subscribe_spread_s=abc",
     "workload.subscribe_spread_s: bad value 'abc'; allowed: a number of seconds or null"),
    # blamed on routing.algorithms
    ("lbdd-depth-sweep", "workload.sweep_nodes=abc",
     "workload.sweep_nodes: bad value 'abc'; allowed: a list of node counts"),
    ("lbdd-depth-sweep", "workload.sweep_nodes=[1]", "workload.sweep_nodes: bad value [1]"),
    # accepted, with a phase of about 3e301 s
    ("demo", "workload.publish_rate_hz=1e-300",
     "workload: its last operation would come at 2.97e+301 s; allowed: at most 604800 s"),
    ("demo", "workload.phase_gap_s=1e300", "workload.phase_gap_s=1e+300"),
    # merged into one edge silently
    ("kyra-example-siena", f"topology.params.edges={SIENA_EDGES},c-a",
     "edges: edge c-a given twice (in either direction)"),
    ("kyra-example-siena", f"topology.params.edges={SIENA_EDGES},g-h",
     "edges: edge g-h given twice"),
    # servers: bad lists, and what cannot cross servers
    ("demo", "servers=[192.168.56.12]", "servers: bad value ['192.168.56.12']; allowed: two "
     "or more distinct servers, localhost among them"),
    ("demo", "servers=[localhost, a b]", "servers: bad value 'a b'"),
    ("controller-demo", "servers=[localhost, 192.168.56.12]",
     "switch: bad value 'ovs'; allowed: bridge when servers are given"),
])
def test_bad_value_is_one_line_naming_its_field(tmp_path: Path, spec: str, assignment: str,
                                                fragment: str) -> None:
    res = _cli("plan", spec, "--set", assignment, cwd=tmp_path)
    _one_line_error(res, fragment)
    assert "Traceback" not in res.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("text", [
    BASE + "description: " + "[" * 20_000 + "]" * 20_000 + "\n",
    BASE + "description: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n",
    BASE + "workload:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(200)),
])
def test_deep_nesting_is_refused_with_its_limit(tmp_path: Path, text: str) -> None:
    spec = tmp_path / "deep.yaml"
    spec.write_text(text)
    res = _cli("run", str(spec), "--out", str(tmp_path / "runs"), cwd=tmp_path)
    line = _one_line_error(res, f"nested more than {MAX_DEPTH} deep")
    assert "recursion" not in line
    assert not (tmp_path / "runs").exists()


def test_nesting_within_the_limit_still_loads() -> None:
    depth = MAX_DEPTH - 1  # the spec's own mapping is the first level
    data = safe_yaml(BASE + "description: " + "[" * depth + "]" * depth + "\n", "spec")
    assert isinstance(data["description"], list)


def test_a_long_set_path_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError, match=f"allowed: at most {MAX_DEPTH}") as info:
        load_spec("demo", ["workload." + ".".join(["k"] * 5000) + "=1"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("text", "value"), [("1e-300", 1e-300), ("2.5e3", 2500.0),
                                             ("-1E+2", -100.0), ("1.0e+3", 1000.0)])
def test_exponents_are_numbers(text: str, value: float) -> None:
    """YAML 1.1 read ``1e-300`` (no dot) and ``2.5e3`` (no exponent sign) as strings, which
    a number field then refused with a Python error; they are floats, as in YAML 1.2."""
    assert safe_yaml(text, "x") == value
    spec = load_spec("demo", [f"workload.publish_rate_hz={text}"])
    assert spec.workload["publish_rate_hz"] == value


def test_text_that_only_looks_numeric_stays_text() -> None:
    assert [safe_yaml(t, "x") for t in ("1e", "e5", "a-b,b-c", "12")] == ["1e", "e5",
                                                                         "a-b,b-c", 12]


def test_a_float_default_takes_an_integer_and_shipped_values_compile() -> None:
    plan = compile_plan(load_spec("meghdoot-peers", ["workload.step_s=1",
                                                     "routing.params.bucket_s=1"]))
    assert plan.workload_params["step_s"] == 1
    plan = compile_plan(load_spec("meghdoot-peers", ["workload.join_probability=0.5"]))
    assert plan.workload.meta["join_probability"] == 0.5


def test_number_predicates() -> None:
    assert is_integer(3) and is_integer(10**400)
    assert not any(is_integer(v) for v in (True, 3.0, "3", None))
    assert is_number(2.5) and is_number(3) and is_number(10**400)
    assert not any(is_number(v) for v in (False, float("nan"), float("inf"), "1", None))


def test_a_huge_integer_param_is_checked_not_overflowed() -> None:
    """The int check called ``math.isfinite``, which overflows past 10**308."""
    param = Param("size", "int", 8, "", "a size", minimum=1, maximum=100)
    with pytest.raises(ValueError, match=r"^where: bad value 1000.*; allowed: int >= 1 and"):
        param.check(10**400, "where")
    assert Param("size", "int", 8, "", "a size", minimum=1).check(10**400, "w") == 10**400
