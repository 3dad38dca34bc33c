"""CLI conventions: --json puts one JSON object on the last line of standard output;
--help opens with where to start and the commands by group; every error is one line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _json(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_topo_show_paper_scot_counts() -> None:
    d = _json("topo", "show", "scot-paper", "--json")
    assert d["counts"]["brokers"] == 70
    assert (d["counts"]["aLinks"], d["counts"]["iLinks"]) == (65, 140)
    assert (d["counts"]["inner"], d["counts"]["edge"]) == (20, 50)
    assert {b["kind"] for b in d["brokers"]} == {"inner", "edge"}


def test_doctor_json_names_mechanisms() -> None:
    d = _json("doctor", "--json")
    assert {c["name"] for c in d["checks"]} >= {"root", "mininet", "openvswitch", "netem",
                                                 "htb", "java"}
    assert d["mechanisms"]["delay_loss"] in ("netem", "in-broker")
    for c in d["checks"]:
        assert c["ok"] or c["fix"], f"{c['name']} is missing without saying what to do"


def test_sim_json_maps_algorithm_to_summary(tmp_path: Path) -> None:
    d = _json("sim", "flood-demo", "--out", str(tmp_path), "--json",
              "--set", "workload={n_publishers: 2, n_subscribers: 8, selectivity: 0.1}")
    s = d["flood"]
    assert s["runtime"] == "simulated" and s["algorithm"] == "flood"
    assert s["missing"] == 0 and s["duplicates"] == 0 and s["delivered"] > 0
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "flood" / "summary.json").read_text()) == s


def test_compare_puts_runs_side_by_side(tmp_path: Path) -> None:
    for seed in (1, 2):
        _json("sim", "flood-demo", "--out", str(tmp_path), "--json", "--set", f"seed={seed}")
    runs = sorted(str(p) for p in tmp_path.iterdir())
    d = _json("compare", *runs, "--json")
    assert len(d) == 2 and all(label.endswith("/flood") for label in d)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "compare", *runs],
                         capture_output=True, text=True, timeout=60, check=False)
    header, *rows = res.stdout.splitlines()
    assert all(Path(r).name in header for r in runs)
    assert any(r.startswith("delivered") for r in rows)
    assert any(r.startswith("delay_ms.notification.p95") for r in rows)


def test_sweep_draws_line_figures_over_the_swept_value(tmp_path: Path) -> None:
    d = _json("sim", "flood-demo", "--out", str(tmp_path), "--json",
              "--sweep", "workload.n_subscribers=4,8")
    assert sorted(d) == ["4", "8"]
    (sweep,) = tmp_path.iterdir()
    assert (sweep / "fig-end-to-end.png").stat().st_size > 10_000
    assert json.loads((sweep / "sweep.json").read_text())["values"] == ["4", "8"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args], capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "COLUMNS": "80"})


def test_specs_lists_every_shipped_spec_with_its_description() -> None:
    shipped = sorted(p.stem for p in (REPO / "experiments" / "specs").glob("*.yaml"))
    d = _json("specs", "--json")
    assert list(d) == shipped and all(d.values()), d
    lines = _cli("specs").stdout.splitlines()
    width = max(map(len, shipped))
    assert lines == [f"{name:<{width}}  {d[name]}" for name in shipped]


def test_help_starts_with_where_to_start_and_groups_the_commands() -> None:
    from experiments.cli import GROUPS, build_parser

    text = _cli("--help").stdout
    assert all(len(line) <= 80 for line in text.splitlines()), text
    start = text.index("Start here:")
    assert "pubsublab doctor" in text[start:] and "docs/guide/" in text[start:]
    heads = [text.index(f"\n{group}:\n") for group, _ in GROUPS]
    assert start < heads[0] and heads == sorted(heads), text
    assert [g for g, _ in GROUPS] == ["run", "inspect", "analyse", "reproduce", "benchmark"]
    listed = {m.NAME for _, modules in GROUPS for m in modules}
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert listed == set(sub.choices), "every command is listed in one group"
    for _, modules in GROUPS:
        for m in modules:
            assert f"\n  {m.NAME} " in text


@pytest.mark.parametrize(("args", "says"), [
    (("sim", "demo", "--pause-after-min", "abc"),
     "argument --pause-after-min: invalid float value: 'abc'"),
    (("reproduce", "octopia", "--runtime", "cloud"),
     "argument --runtime: invalid choice: 'cloud'"),
    (("nosuchcommand",), "argument COMMAND: invalid choice: 'nosuchcommand'"),
    (("run", "demo", "--bogus"), "unrecognized arguments: --bogus (see pubsublab run --help)"),
    (("topo", "show", "x", "--zz"), "unrecognized arguments: --zz (see pubsublab topo --help)"),
])
def test_a_bad_flag_value_is_a_one_line_error(args: tuple[str, ...], says: str) -> None:
    res = _cli(*args)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(f"pubsublab: error: {says}"), res.stderr
    assert res.stderr.count("\n") == 1 and "usage:" not in res.stderr, res.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly() -> None:
    # `pubsublab plan codd-nodes --json | head -c 10`: the JSON line is far longer than a
    # pipe holds, so the write after the reader left fails
    proc = subprocess.Popen([sys.executable, "-m", "experiments.cli", "plan", "codd-nodes",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
