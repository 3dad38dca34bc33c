"""Bad specs give one line naming the field and a non-zero exit, and nothing starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.emulation.leftovers import STATE_DIR
from experiments.plan import compile_plan
from experiments.spec import SpecError, load_spec, parse_spec

GOOD = {
    "name": "t",
    "topology": {"name": "scot", "params": {"tree": "a-b,b-c", "m": 3}},
    "links": {"bw_mbps": 10},
}


def _with(**changes: object) -> dict:
    d = yaml.safe_load(yaml.safe_dump(GOOD))
    for path, value in changes.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return d


def test_good_spec_parses_into_frozen_objects() -> None:
    spec = parse_spec(GOOD)
    assert spec.links.bw_mbps == 10
    with pytest.raises(AttributeError):
        spec.seed = 3  # type: ignore[misc]


def test_defaults_left_to_the_plan() -> None:
    """No duration (the plan derives the phase), automatic capture, a 50 ms window."""
    spec = parse_spec(GOOD)
    assert spec.duration_s is None and spec.capture.enabled is None
    assert spec.routing.window_ms == 50.0
    assert spec.to_dict()["routing"]["window_ms"] == 50.0
    assert parse_spec(_with(routing={"window_ms": 20})).routing.window_ms == 20.0


def test_shipped_specs_all_compile() -> None:
    shipped = sorted(Path("experiments/specs").glob("*.yaml"))
    assert shipped
    for path in shipped:
        compile_plan(load_spec(str(path)))


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        (_with(links__bw_mbps=-5), "bw_mbps", "-5"),
        (_with(links__colour="red"), "colour", "allowed"),
        (_with(name="a;rm -rf /"), "name", "a;rm"),
        (_with(switch="hub"), "switch", "bridge"),
        (_with(seed=1.5), "seed", "integer"),
        (_with(link_schedule=[{"at_s": 1, "a": "a0", "b": "a1"}]), "link_schedule[0]",
         "bw_mbps"),
        (_with(link_schedule=[{"at_s": -1, "a": "a0", "b": "a1", "bw_mbps": 1}]),
         "link_schedule[0].at_s", "-1"),
        (_with(link_schedule=[{"at_s": 1, "a": "a0", "b": "a1", "bw_mbps": 0}]),
         "link_schedule[0].bw_mbps", "0"),
        (_with(broker={"write_buffer_bytes": 10}), "broker.write_buffer_bytes", "10"),
        (_with(broker={"sndbuf": 10}), "broker", "sndbuf"),
        (_with(routing={"algorithms": ["flood", "snr", "flood"]}), "routing.algorithms",
         "flood twice"),
        (_with(routing={"window_ms": 0}), "routing.window_ms", "0"),
        (_with(duration_s=0), "duration_s", "0"),
    ],
)
def test_bad_fields_are_named(data: dict, field: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    msg = str(info.value)
    assert field in msg and fragment in msg and "\n" not in msg


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("topology.name=nosuch", "nosuch"),
        ("links.bw_mbps=-1", "bw_mbps"),
        ("topology.params.m=1", "m"),
        ("topology.params.tree=a-b,b-c,c-a", "tree"),
        ("topology.params.tree=a-b,c-d", "tree"),
        ("topology.params.tree=a-b,b-$(reboot)", "reboot"),
        ("name=demo;reboot", "name"),
    ],
)
def test_bad_spec_on_the_cli_is_one_line_and_starts_nothing(override: str, fragment: str,
                                                            tmp_path: Path) -> None:
    before = set(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else set()
    res = _cli("run", "demo", "--set", override, "--out", str(tmp_path))
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("pubsublab: error:") and fragment in lines[0]
    assert not list(tmp_path.iterdir()), "a run folder was created for a bad spec"
    after = set(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else set()
    assert after == before, "a bad spec must not start a network"


def test_unknown_spec_name_lists_shipped_ones(tmp_path: Path) -> None:
    res = _cli("run", "nosuchspec", "--out", str(tmp_path))
    assert res.returncode == 2
    assert "demo" in res.stderr


def test_set_override_reaches_the_spec() -> None:
    spec = load_spec("flood-demo", ["scale=0.1", "routing.algorithms=[flood]"])
    assert spec.scale == 0.1 and spec.routing.algorithms == ("flood",)


def test_link_schedule_names_overlay_links() -> None:
    spec = load_spec("demo")
    assert [(c.at_s, c.a, c.b, c.bw_mbps) for c in spec.link_schedule] == [
        (2.0, "b0", "b1", 0.5)]
    assert spec.to_dict()["link_schedule"] == [
        {"at_s": 2.0, "a": "b0", "b": "b1", "bw_mbps": 0.5}]
    with pytest.raises(SpecError, match="no overlay link between 'a0' and 'c0'"):
        compile_plan(load_spec("demo",
                               ["link_schedule=[{at_s: 1, a: a0, b: c0, bw_mbps: 1}]"]))
    with pytest.raises(SpecError, match="mode: overlay"):
        compile_plan(load_spec("demo", ["topology.params.mode=switch"]))
