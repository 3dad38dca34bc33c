"""A simulation paused to a file and resumed in steps makes exactly what one
uninterrupted run makes (nodes.sim.checkpoint; docs/design/simulator.md, "Pausing")."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_sim_on_demand import EVENTS, Scripted, _bare, _script

import nodes.sim.engine
from experiments.plan import compile_plan
from experiments.runs.simulated import on_demand_links
from experiments.spec import load_spec
from nodes.sim.checkpoint import (
    MAGIC,
    Pause,
    Paused,
    StateRefused,
    key_path,
    read_state,
    write_state,
)
from nodes.sim.links import LinkModel
from nodes.sim.result import SimResult
from nodes.sim.settings import SimSettings
from nodes.sim.simulator import resume, simulate

# A Meghdoot run with joins, load reports, links on demand and events in flight: every
# kind of state the simulator holds between two events.
SMALL = ["topology.params.n=40", "workload.n_subscriptions=400", "workload.n_events=400"]
# Three times its events, so that the parts of the command-line test, 4,096 events each,
# are a handful.
LARGER = ["topology.params.n=60", "workload.n_subscriptions=800", "workload.n_events=800"]


def _run(pause: Pause | None = None) -> SimResult:
    plan = compile_plan(load_spec("meghdoot-peers", SMALL))
    alg = plan.algorithms[0]
    return simulate(plan.overlay, plan.workload, alg.name,
                    SimSettings(core_params=dict(alg.params), derived=alg.derived,
                                seed=plan.spec.seed, log_messages=False, window_ms=plan.window_ms,
                                until_s=plan.phase_s(), on_demand=on_demand_links(plan),
                                pause=pause))


def _comparable(result: SimResult) -> dict[str, object]:
    """Every field of a result but the wall time each notification's handling took."""
    fields = dataclasses.asdict(result)
    fields.pop("matching_s")
    return fields


def test_a_run_paused_many_times_makes_what_one_run_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _run()
    # A look at the clock every 500 events, each past the deadline: a pause at every
    # look, wherever the run then is.
    monkeypatch.setattr(nodes.sim.engine, "PAUSE_CHECK_EVERY", 500)
    path = tmp_path / "state.pickle"
    pause = Pause(until=0.0, path=path)
    plan = compile_plan(load_spec("meghdoot-peers", SMALL))
    done: list[float] = []
    try:
        result = _run(pause)
    except Paused as first:
        done.append(first.done)
        while True:
            try:
                result = resume(path, on_demand=on_demand_links(plan), pause=pause)
                break
            except Paused as again:
                done.append(again.done)
    # It paused many times, each time further on, from the start to near the end.
    assert len(done) >= 5, done
    assert done == sorted(done) and done[0] < 0.2 and done[-1] > 0.8, done
    assert whole.deliveries, "the run made no deliveries: the comparison says nothing"
    assert _comparable(result) == _comparable(whole)


def test_resume_needs_the_link_model_the_run_started_with(tmp_path: Path) -> None:
    path = tmp_path / "state.pickle"
    with pytest.raises(Paused):
        _run(Pause(until=0.0, path=path))
    with pytest.raises(ValueError, match="resume it with the same link model"):
        resume(path)


def test_a_run_with_logs_cannot_pause(tmp_path: Path) -> None:
    plan = compile_plan(load_spec("meghdoot-peers", SMALL))
    alg = plan.algorithms[0]
    with pytest.raises(ValueError, match="writes no logs"):
        simulate(plan.overlay, plan.workload, alg.name,
                 SimSettings(core_params=dict(alg.params), seed=1, out_dir=tmp_path,
                             pause=Pause(until=0.0, path=tmp_path / "x")))
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


# ---- the command line: each part in its own process ---------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "experiments.cli", *args],
                          capture_output=True, text=True, timeout=600, check=False)


def _last_json(res: subprocess.CompletedProcess[str]) -> dict:
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _without_wall_time(summary: dict) -> dict:
    """A summary without the one figure measured in wall time (matching delay)."""
    return {**summary, "delay_ms": {k: v for k, v in summary["delay_ms"].items()
                                    if k != "matching"}}


def test_pubsublab_resume_goes_on_in_new_processes_to_the_same_summary(
        tmp_path: Path) -> None:
    sets = [a for s in LARGER for a in ("--set", s)]
    whole = _last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                            "--out", str(tmp_path / "whole")))["meghdoot"]
    # A budget of 6 ms: spent before the first look at the clock, so each part runs
    # PAUSE_CHECK_EVERY events and pauses.
    out = _last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                          "--pause-after-min", "0.0001", "--out", str(tmp_path / "paused")))
    parts = 1
    while "paused" in out:
        run = Path(out["paused"])
        assert (run / "paused.json").exists() and (run / "meghdoot" / "simulator.pickle").exists()
        assert not (run / "manifest.json").exists()
        out = _last_json(_cli("resume", str(run), "--pause-after-min", "0.0001", "--json"))
        parts += 1
    assert parts >= 3
    assert _without_wall_time(out["meghdoot"]) == _without_wall_time(whole)
    assert out["meghdoot"]["delivered"] > 0 and out["meghdoot"]["missing"] == 0
    manifest = json.loads((run / "manifest.json").read_text())
    spent = manifest["resources"]
    assert len(spent["parts"]) == parts
    assert spent["wall_s"] == pytest.approx(sum(p["wall_s"] for p in spent["parts"]), abs=0.01)
    assert spent["peak_rss_mib"] == max(p["peak_rss_mib"] for p in spent["parts"])
    # The pause's files are gone; the figures were drawn as for any run.
    assert not (run / "paused.json").exists()
    assert not (run / "meghdoot" / "simulator.pickle").exists()
    assert list(run.glob("*.png"))


def test_pause_and_resume_refuse_bad_input_with_one_line(tmp_path: Path) -> None:
    res = _cli("sim", "meghdoot-peers", *[a for s in SMALL for a in ("--set", s)],
               "--pause-after-min", "5", "--out", str(tmp_path))
    assert res.returncode != 0 and "--no-logs" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no run folder started
    res = _cli("resume", str(tmp_path))
    assert res.returncode != 0 and "not a paused run" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = _cli("sim", "meghdoot-peers", "--no-logs", "--pause-after-min", "0",
               "--out", str(tmp_path))
    assert res.returncode != 0 and "must be positive" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_resume_refuses_other_code_and_a_broken_pause_file(tmp_path: Path) -> None:
    sets = [a for s in SMALL for a in ("--set", s)]
    out = _last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                          "--pause-after-min", "0.0001", "--out", str(tmp_path)))
    run = Path(out["paused"])
    paused = json.loads((run / "paused.json").read_text())
    (run / "paused.json").write_text(json.dumps({**paused, "code": "sha256:0"}))
    res = _cli("resume", str(run))
    assert res.returncode != 0 and "goes on only on the code it started on" in res.stderr
    commit = paused["manifest"]["git"]["commit"]
    assert commit and f"commit {commit[:12]}" in res.stderr  # the code to check out
    assert len(res.stderr.strip().splitlines()) == 1
    (run / "paused.json").write_text(json.dumps({k: v for k, v in paused.items()
                                                 if k != "algorithm"}))
    res = _cli("resume", str(run))
    assert res.returncode != 0 and "unreadable (KeyError" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    # Put right, it goes on; not while another process holds the run.
    (run / "paused.json").write_text(json.dumps(paused))
    shutil.copytree(run, tmp_path / "copy")
    fd = os.open(run, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    res = _cli("resume", str(run))
    os.close(fd)
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        f"pubsublab: error: {run}: another process is going on with this run now"]
    done = _last_json(_cli("resume", str(run), "--json"))
    assert done["meghdoot"]["missing"] == 0
    # A part stopped after the algorithm's summary was written and its state deleted
    # (paused.json still names it): the run goes on from there, to the same summary.
    copy = tmp_path / "copy"
    shutil.copy(run / "meghdoot" / "summary.json", copy / "meghdoot" / "summary.json")
    (copy / "meghdoot" / "simulator.pickle").unlink()
    assert _last_json(_cli("resume", str(copy), "--json")) == done
    assert not (copy / "paused.json").exists() and (copy / "manifest.json").exists()


def test_a_state_that_cannot_be_written_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"cannot write the paused state to .*No such file"):
        _run(Pause(until=0.0, path=tmp_path / "missing" / "state.pickle"))


def test_frames_flushed_before_a_pause_stay_flushed_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """b queues 40 frames to a on a slow link and a closes the connection: the frames
    still queued when b's side closes are flushed, their arrivals (on the heap already)
    never happen, across a pause at every third event too."""
    w = _script([(1.0, "a", [["send", "b", 1]]),
                 (2.0, "b", [["send", "a", k] for k in range(2, 42)]),
                 (2.001, "a", [["disconnect", "b"]])])
    model = LinkModel(latency_ms=10.0, link_mbps=0.01)

    def run(pause: Pause | None) -> SimResult:
        return simulate(_bare(sorted(w.clients.values())), w, Scripted,
                        SimSettings(seed=0, on_demand=model, window_ms=10_000.0, pause=pause))

    EVENTS.clear()
    whole, heard = run(None), list(EVENTS)
    assert sum(what.startswith("arrived b") for _, _, what in heard) < 40  # some flushed
    monkeypatch.setattr(nodes.sim.engine, "PAUSE_CHECK_EVERY", 3)
    path = tmp_path / "state.pickle"
    pause = Pause(until=0.0, path=path)
    EVENTS.clear()
    try:
        result = run(pause)
    except Paused:
        while True:
            try:
                result = resume(path, on_demand=model, pause=pause)
                break
            except Paused:
                pass
    assert heard == EVENTS
    assert _comparable(result) == _comparable(whole)


# ---- a paused state is read only if this user's key signed it ------------------------------


class Planted:
    """A pickle that makes a folder when it is loaded: code run from a received file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def _one_line_error(res: subprocess.CompletedProcess[str], *words: str) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("pubsublab: error: "), res.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_read_state_refuses_what_this_key_did_not_sign(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "state.pickle"
    write_state({"heap": [1, 2, 3]}, path)
    assert read_state(path) == {"heap": [1, 2, 3]}
    signed = path.read_bytes()
    assert signed.startswith(MAGIC)
    payload = pickle.dumps(Planted(marker))
    tampered = {
        "a plain pickle": payload,
        "a forged tag": MAGIC + bytes(32) + payload,
        "a payload spliced after the tag": signed[:len(MAGIC) + 32] + payload + signed[
            len(MAGIC) + 32:],
        "one byte changed": signed[:-1] + bytes([signed[-1] ^ 1]),
        "truncated": signed[:len(signed) // 2],
        "empty": b"",
    }
    for what, data in tampered.items():
        path.write_bytes(data)
        with pytest.raises(StateRefused, match=re.escape(str(path))):
            read_state(path)
        assert not marker.exists(), f"{what}: its code ran"
    # A directory in the file's place; a missing file.
    path.unlink()
    path.mkdir()
    with pytest.raises(StateRefused, match="cannot be read as a paused state"):
        read_state(path)
    with pytest.raises(StateRefused, match="cannot be read as a paused state"):
        read_state(tmp_path / "missing")
    # Trusted, a file is loaded whatever signed it (the caller vouched for it).
    (tmp_path / "plain").write_bytes(payload)
    read_state(tmp_path / "plain", trust=True)
    assert marker.is_dir()


def test_the_key_is_private_and_made_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "state"))
    path = tmp_path / "state.pickle"
    write_state([1], path)
    key = key_path()
    assert key == tmp_path / "state" / "pause.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_bytes()
    write_state([2], path)
    assert key.read_bytes() == first and read_state(path) == [2]
    key.chmod(0o644)  # open to others: anyone could sign, so nothing is read
    with pytest.raises(StateRefused, match="open to other users"):
        read_state(path)
    key.chmod(0o600)
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "other"))
    with pytest.raises(StateRefused, match="no pause key"):
        read_state(path)


def test_resume_refuses_a_received_state_and_runs_nothing_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run folder from elsewhere: its planted state is refused in one line, nothing
    of it runs, the folder is kept; the author's genuine state, signed by another key, is
    refused too, and goes on to the exact summary once the user trusts it."""
    sets = [a for s in SMALL for a in ("--set", s)]
    whole = _last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                            "--out", str(tmp_path / "whole")))["meghdoot"]
    # The author: paused on another machine (another key).
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "author"))
    out = _last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                          "--pause-after-min", "0.0001", "--out", str(tmp_path / "runs")))
    run = Path(out["paused"])
    state = run / "meghdoot" / "simulator.pickle"
    genuine = state.read_bytes()
    monkeypatch.setenv("PUBSUBLAB_KEY_DIR", str(tmp_path / "user"))
    marker = tmp_path / "ran"
    state.write_bytes(genuine[:len(MAGIC) + 32] + pickle.dumps(Planted(marker)) +
                      genuine[len(MAGIC) + 32:])
    line = _one_line_error(_cli("resume", str(run)), str(state), "not a format for sharing",
                           "pubsublab sim meghdoot-peers", "--trust-paused-state")
    assert "no pause key" in line  # this user never paused a run here
    assert not marker.exists() and state.exists() and (run / "paused.json").exists()
    # The genuine state: refused by this user's key too, the same way through reproduce's
    # resume (which reaches the same check).
    state.write_bytes(genuine)
    write_state([0], tmp_path / "mine.pickle")  # this user has a key now
    _one_line_error(_cli("resume", str(run)), "signature is not this machine's")
    # Bad pause records and states: one line each, nothing lost.
    paused = json.loads((run / "paused.json").read_text())
    (run / "paused.json").write_text(json.dumps({**paused, "done": "x"}))
    _one_line_error(_cli("resume", str(run)), "unreadable", "done")
    (run / "paused.json").write_text(json.dumps(paused))
    state.rename(state.with_name("aside"))
    state.mkdir()
    _one_line_error(_cli("resume", str(run), "--trust-paused-state"),
                    "cannot be read as a paused state")
    state.rmdir()
    state.write_bytes(genuine[:1000])
    # Trusted, a damaged state is known only once its loading fails: after the progress
    # lines, one line and no traceback.
    res = _cli("resume", str(run), "--trust-paused-state")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "not a readable paused state" in res.stderr.strip().splitlines()[-1]
    state.with_name("aside").rename(state)
    # Trusted, the author's state goes on to what one uninterrupted run makes.
    done = _last_json(_cli("resume", str(run), "--trust-paused-state", "--json"))
    assert _without_wall_time(done["meghdoot"]) == _without_wall_time(whole)


# ---- a damaged paused run: one line naming the file, nothing started or changed -------------


@pytest.fixture(scope="module")
def paused_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small meghdoot-peers run paused once (the cases below damage copies of it)."""
    out = tmp_path_factory.mktemp("paused-small")
    sets = [a for s in SMALL for a in ("--set", s)]
    return Path(_last_json(_cli("sim", "meghdoot-peers", *sets, "--no-logs", "--json",
                                "--pause-after-min", "0.0001", "--out", str(out)))["paused"])


def _signed_elsewhere(state: Path) -> None:
    """Sign a state with another user's key, as a received folder would be."""
    here = os.environ["PUBSUBLAB_KEY_DIR"]
    os.environ["PUBSUBLAB_KEY_DIR"] = str(state.parent / "elsewhere-key")
    try:
        write_state({"heap": []}, state)
    finally:
        os.environ["PUBSUBLAB_KEY_DIR"] = here
    shutil.rmtree(state.parent / "elsewhere-key")


def _rewrite_pause(run: Path, **fields: object) -> None:
    paused = json.loads((run / "paused.json").read_text())
    (run / "paused.json").write_text(json.dumps({**paused, **fields}))


STATE = "meghdoot/simulator.pickle"
DAMAGES = {
    "truncated state": (STATE, lambda run: (run / STATE).write_bytes(
        (run / STATE).read_bytes()[:1000])),
    "empty state": (STATE, lambda run: (run / STATE).write_bytes(b"")),
    "random state": (STATE, lambda run: (run / STATE).write_bytes(os.urandom(4096))),
    "foreign state": (STATE, lambda run: _signed_elsewhere(run / STATE)),
    "state a folder": (STATE, lambda run: ((run / STATE).unlink(), (run / STATE).mkdir())),
    "state missing": (STATE, lambda run: (run / STATE).unlink()),
    "pause not JSON": ("paused.json", lambda run: (run / "paused.json").write_text("{")),
    "pause a list": ("paused.json", lambda run: (run / "paused.json").write_text("[1]")),
    "done a string": ("paused.json", lambda run: _rewrite_pause(run, done="x")),
    "done past 1": ("paused.json", lambda run: _rewrite_pause(run, done=2)),
    "set not a list": ("paused.json", lambda run: _rewrite_pause(run, set="scale=1")),
    "parts of numbers": ("paused.json", lambda run: _rewrite_pause(run, parts=[1])),
    "pause missing": ("paused.json", lambda run: (run / "paused.json").unlink()),
}


def _contents(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("how", sorted(DAMAGES))
def test_a_damaged_paused_run_is_one_line_naming_the_file(
        paused_small: Path, tmp_path: Path, how: str) -> None:
    name, damage = DAMAGES[how]
    run = tmp_path / paused_small.name
    shutil.copytree(paused_small, run)
    damage(run)
    before = _contents(run)
    res = _cli("resume", str(run))
    _one_line_error(res, str(run / name), "run the point again")
    assert "resuming" not in res.stderr, "nothing is started"
    assert _contents(run) == before, "nothing in the folder is changed"
