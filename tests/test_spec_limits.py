"""Hostile and careless spec input: one line, exit 2, nothing started, memory bounded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from experiments.plan import compile_plan, emulation_fits
from experiments.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
BASE = 'name: t\ntopology: {name: scot, params: {tree: "a-b", m: 2, mode: overlay}}\n'


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _one_line_error(res: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubsublab: error: "), res.stderr
    assert fragment in lines[0], lines[0]
    assert len(lines[0]) < 400


def _bomb(levels: int) -> str:
    text = BASE + "workload:\n  burst:\n"
    text += '    a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        text += f"    a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize(("text", "fragment"), [
    (_bomb(9), "YAML aliases"),                       # 72 aliases
    (_bomb(6), "values once aliases are expanded"),   # 45 aliases, 9^6 values
    (BASE + "links: {bw_mbps: 10}\nlinks: {bw_mbps: 0.01}\n", "key 'links' appears twice"),
    (BASE + "link_overrides:\n  - {a: a0, b: a1, bw_mbps: 2}\n  - {a: a1, b: a0, bw_mbps: 3}\n",
     "a second override of link a1-a0"),
    ('name: t\ntopology: {name: scot, params: {tree: "a-b", m: 100000}}\n',
     "a SCOT of at most 20000 brokers"),
    (BASE + "capture: {max_mb: 1}\nworkload: {n_subscribers: 2}\n", "capture.max_mb"),
    (BASE + "routing: {algorithms: [snr, snr]}\n", "twice"),
    (BASE + "routing: {algorithms: [idr], params: {theta: -5}}\n",
     "routing.params.idr.theta: bad value -5"),
    (BASE + "routing: {algorithms: [idr], params: {idr: {cluster: 3}}}\n",
     "idr has no param(s) cluster"),
])
def test_bad_specs_fail_in_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    res = _cli("run", str(spec), "--out", str(tmp_path / "runs"))
    _one_line_error(res, fragment)
    assert not (tmp_path / "runs").exists()


def test_binary_folder_and_bad_out_fail_in_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    _one_line_error(_cli("plan", str(binary)), "not UTF-8")
    _one_line_error(_cli("sim", str(tmp_path)), "is a folder")
    _one_line_error(_cli("sim", "flood-demo", "--out", "/dev/null"), "cannot hold run folders")
    _one_line_error(_cli("sim", "flood-demo", "--out", str(tmp_path / ("x" * 300))),
                    "cannot hold run folders")
    _one_line_error(_cli("topo", "show", "scot", "-p", "m=[1"), "not valid YAML")
    _one_line_error(_cli("plan", "demo", "--set", "links={bw_mbps: [1"), "not valid YAML")


def test_an_override_changes_only_the_fields_it_names() -> None:
    plan = compile_plan(load_spec("demo", ["link_overrides=[{a: a0, b: a1, bw_mbps: 2}]"]))
    edge = plan.edge("a0", "a1")
    assert (edge.bw_mbps, edge.delay_ms) == (2, 5)  # delay inherited from links: 5 ms


def test_emulation_size_is_bounded_by_the_machine() -> None:
    plan = compile_plan(load_spec("octopia-publishers"))  # 70 brokers
    assert emulation_fits(plan, cores=2, mem_mb=24_000) is None
    assert "at most 64" in emulation_fits(plan, cores=1, mem_mb=24_000)
    assert "MB" in emulation_fits(plan, cores=8, mem_mb=4_000)
    # The m: 400 (1,200 brokers, 239,400 links) compiles for the simulator but is
    # refused for emulation, with the flag named.
    res = _cli("run", "flood-demo", "--set", "topology.params.m=400", "--set",
               "routing.algorithms=[snr]", "--set", "capture.enabled=false")
    _one_line_error(res, "1200 brokers on")
    assert "--allow-large" in res.stderr
