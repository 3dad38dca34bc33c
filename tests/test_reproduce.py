"""`pubsublab reproduce PAPER --quick`: the page and the JSON, for every paper, simulated;
the page opened in a real headless Chromium (Debian's chromium and chromium-driver)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_sim_pause import Planted

REPO = Path(__file__).resolve().parent.parent
PAPERS = ("octopia", "lbdd", "meghdoot", "codd", "kyra")
ROW_KEYS = ("figure", "metric", "paper_value", "ours", "unit", "direction_agrees", "ratio",
            "within_2x", "conditions", "scale", "why")
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Each paper reproduced once at the quick scale: the --json object and the stderr."""
    out = tmp_path_factory.mktemp("reproduce")
    found = {}
    for paper in PAPERS:
        res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", paper,
                              "--quick", "--out", str(out), "--json"],
                             capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
        found[paper] = {**json.loads(res.stdout.strip().splitlines()[-1]),
                        "stderr": res.stderr}
    return found


@pytest.mark.parametrize("paper", PAPERS)
def test_every_row_is_filled(reproduced: dict[str, dict], paper: str) -> None:
    d = reproduced[paper]
    assert (d["paper"], d["runtime"]) == (paper, "sim")
    data = yaml.safe_load((REPO / "experiments" / "papers" / f"{paper}.yaml").read_text())
    assert [r["paper_value"] for r in d["rows"]] == [r["paper"] for r in data["rows"]]
    for row in d["rows"]:
        # A claim without a number (paper_value null) has no ratio either; a row whose
        # whys were all written for other scales shows none.
        numberless = ("paper_value", "ratio") if row["paper_value"] is None else ()
        whyless = ("why",) if row["why_from"] == [] else ()
        assert bool(whyless) == (row["measured_at"] not in row["why_keys"]
                                 and "any" not in row["why_keys"]), row
        missing = [k for k in ROW_KEYS if row.get(k) in (None, "")
                   and k not in (*numberless, *whyless)]
        assert not missing, f"{row['figure']} {row['metric']}: {missing} empty"
        assert isinstance(row["direction_agrees"], bool)
        if numberless:
            assert row["ratio"] is None and row["within_2x"] is False
            continue
        assert row["ratio"] == pytest.approx(row["ours"] / row["paper_value"], rel=1e-3)
        assert row["within_2x"] == (0.5 <= row["ratio"] <= 2.0)


@pytest.mark.parametrize("paper", PAPERS)
def test_runs_are_linked_with_manifest_seed_and_revision(reproduced: dict[str, dict],
                                                         paper: str) -> None:
    d = reproduced[paper]
    folder = Path(d["page"]).parent
    assert d["runs"]
    for run in d["runs"]:
        manifest = json.loads((folder / run["run_dir"] / "manifest.json").read_text())
        assert run["seed"] == manifest["seed"] == 1
        assert run["git"] == manifest["git"] and "commit" in run["git"]
        assert run["runtime"] == "simulated"
        # What the point cost, on this machine: its own peak (reset at its start), at
        # least the interpreter with numpy and networkx loaded.
        cost = run["resources"]
        assert cost == manifest["resources"]
        assert cost["peak_reset"] and cost["wall_s"] > 0 and cost["peak_rss_mib"] > 30
        assert cost["cpus"] == os.cpu_count()


@pytest.mark.parametrize("paper", PAPERS)
def test_a_run_folder_draws_only_figures_its_system_has_data_for(
        reproduced: dict[str, dict], paper: str) -> None:
    """OctopiA's advertisement figure (delay, SRT size, IMs) for OctopiA's runs, not zero
    bars for the systems without advertisements."""
    folder = Path(reproduced[paper]["page"]).parent
    drawn = {f.name for run in reproduced[paper]["runs"]
             for f in (folder / run["run_dir"]).glob("fig-*.png")}
    assert ("fig-publisher-scalability.png" in drawn) == (paper == "octopia"), sorted(drawn)


def test_progress_names_the_experiment_and_the_time_left(reproduced: dict[str, dict]) -> None:
    lines = [ln for ln in reproduced["octopia"]["stderr"].splitlines()
             if "reproduce octopia:" in ln and " left)" in ln]
    assert any("subscribers run 2 of 2" in ln for ln in lines), lines
    assert all("about " in ln for ln in lines)


def test_the_default_reading_gives_the_papers_subscription_directions(
        reproduced: dict[str, dict]) -> None:
    """OctopiA's PRTs larger and PADRES' subscription IMs fewer (Fig. 11(b), (c)) under the
    default reading of selectivity; the other way round under the other reading."""
    rows = {r["figure"]: r for r in reproduced["octopia"]["rows"]}
    assert rows["Fig. 11(b)"]["direction_agrees"] and rows["Fig. 11(c)"]["direction_agrees"]
    assert not rows["Fig. 11(b), other reading"]["direction_agrees"]
    assert not rows["Fig. 11(c), other reading"]["direction_agrees"]


def _browser(tmp: Path):
    """A headless Chromium driven through chromedriver, its profile and temporary files in
    ``tmp`` (left to itself it leaves a profile folder in /tmp per start); fails saying
    what to install."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not shutil.which(path):
            pytest.fail(f"{path} missing: run `sudo make setup` (apt-get install {package})")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: run `sudo make setup` "
                    "(pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                f"--user-data-dir={tmp / 'profile'}"):
        options.add_argument(arg)
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": str(tmp)})
    return webdriver.Chrome(service=service, options=options)


@pytest.mark.parametrize("paper", PAPERS)
def test_the_page_renders_in_a_browser(reproduced: dict[str, dict], paper: str,
                                       tmp_path: Path) -> None:
    d = reproduced[paper]
    driver = _browser(tmp_path)
    try:
        driver.get(Path(d["page"]).as_uri())
        body_rows = driver.execute_script(
            "return [...document.querySelectorAll('#rows tr')].slice(1).map("
            "tr => [...tr.cells].map(td => td.innerText.trim()))")
        assert len(body_rows) == len(d["rows"])
        for cells, row in zip(body_rows, d["rows"], strict=True):
            assert cells[0] == row["figure"] and cells[1] == row["metric"]
            assert cells[3] not in ("", "-")
        images = driver.execute_script(
            "return [...document.images].map(i => [i.complete, i.naturalWidth, "
            "i.naturalHeight, i.getBoundingClientRect().width, i.src.slice(0, 22)])")
        assert len(images) == len(d["rows"])
        for complete, width, height, shown, src in images:
            assert complete and width > 200 and height > 150 and shown > 200
            assert src == "data:image/png;base64,"  # embedded: the page stands alone
        run_links = driver.execute_script(
            "return [...document.querySelectorAll('#runs a')].map(a => a.href)")
        assert len(run_links) == 2 * len(d["runs"])
        assert all(link.startswith("file://") for link in run_links)
        costs = driver.execute_script(
            "return [...document.querySelectorAll('#runs tr')].slice(1).map("
            "tr => [tr.cells[8].innerText, tr.cells[9].innerText])")
        assert len(costs) == len(d["runs"])
        for (took, peak), run in zip(costs, d["runs"], strict=True):
            assert took.endswith((" s", " min"))
            assert peak == f"{run['resources']['peak_rss_mib']:.0f} MiB"  # under a GiB
    finally:
        driver.quit()


def test_time_estimates_are_one_per_point_or_one_for_all() -> None:
    from experiments.reproduce import _estimates
    from experiments.spec import SpecError

    assert _estimates({"est_s": 5}, 3) == [5.0, 5.0, 5.0]
    assert _estimates({"est_s": [40, 400, 1500]}, 3) == [40.0, 400.0, 1500.0]
    with pytest.raises(SpecError, match="est_s: 2 figures for 3 points"):
        _estimates({"est_s": [40, 400]}, 3)
    # Points run in Mininet take their own estimate where the data file gives one.
    kyra = {"est_s": 20, "est_emulated_s": 200}
    assert _estimates(kyra, 1, emulated=True) == [200.0]
    assert _estimates(kyra, 1) == [20.0]
    assert _estimates({"est_s": 5}, 2, emulated=True) == [5.0, 5.0]


def test_rows_name_the_runtime_their_points_ran_in(tmp_path: Path) -> None:
    """Under --runtime emulated a simulated-only experiment still runs in the simulator:
    its rows' conditions say simulated, an emulated experiment's say emulated."""
    from analysis.reproduction import Point, headline_rows

    summary = {"kyra": {"routing_load": {"per_event": {"hops_ratio": 3.0}}},
               "siena": {"routing_load": {"per_event": {"hops_ratio": 4.0}}}}
    row = {"figure": "Abstract", "source": "s", "metric": "m", "unit": "x", "paper": None,
           "direction": {"within": [0.8, 1.25]}, "why": {"full/simulated": "w"}}
    ours = {"y": "routing_load.per_event.hops_ratio", "compare": "ratio", "of": "kyra",
            "against": "siena"}
    paper = {"experiments": {"big": {"conditions": "1,000 servers", "simulated_only": True},
                             "small": {"conditions": "64 servers"}},
             "rows": [{**row, "ours": {**ours, "experiment": e}} for e in ("big", "small")]}
    points = {e: [Point(None, tmp_path, {"runtime": ran, "scale": 1.0}, summary)]
              for e, ran in (("big", "simulated"), ("small", "emulated"))}
    rows = headline_rows(paper, points, "emulated")
    assert [r["conditions"] for r in rows] == ["1,000 servers; simulated",
                                               "64 servers; emulated"]
    assert [r["ours"] for r in rows] == [0.75, 0.75]


def test_a_why_quotes_each_algorithms_number_as_the_rows_figure_draws_it(
        tmp_path: Path) -> None:
    """An ``any`` why's algorithm fields are the run's numbers, picked as the row picks
    its own and in its figure's units (a share as %), and ``{against}`` the number ours
    is compared with; one that names an algorithm the points lack (not run at that
    scale) is not shown."""
    from analysis.reproduction import Point, headline_rows

    def point(x: float, shares: dict[str, float]) -> Point:
        return Point(x, tmp_path, {"runtime": "simulated", "scale": 1.0},
                     {alg: {"burst": {"share_under": v}} for alg, v in shares.items()})

    points = {"burst": [point(50, {"idr": 0.5, "snr": 0.25, "tid-dynamic": 0.8}),
                        point(83.3, {"idr": 0.3, "snr": 0.15, "tid-dynamic": 0.6})]}
    row = {"figure": "F", "source": "s", "metric": "m", "unit": "%", "paper": 53.8,
           "direction": {"above": "snr"}}
    ours = {"experiment": "burst", "y": "burst.share_under", "compare": "percent",
            "of": "idr"}
    texts = ["Same direction: IDR {idr} %, SNR {snr} %, BID-based {tid_dynamic} %.",
             "TID {tid_static} %."]
    paper = {"experiments": {"burst": {"conditions": "c"}},
             "rows": [{**row, "ours": ours, "why": {"any": t}} for t in texts]
             + [{**row, "ours": {**ours, "pick": {"at": 83.3}}, "why": {"any": texts[0]}},
                {**row, "paper": 1.5, "direction": None,
                 "ours": {**ours, "compare": "ratio", "pick": {"at": 83.3},
                          "against_pick": {"at": 50}},
                 "why": {"any": "IDR {idr} at the high rate over {against} at the low."}}]}
    rows = headline_rows(paper, points, "simulated")
    assert rows[0]["ours"] == 40.0
    assert rows[0]["why"] == "Same direction: IDR 40 %, SNR 20 %, BID-based 70 %."
    assert (rows[1]["why"], rows[1]["why_from"]) == (None, [])
    assert rows[2]["why"] == "Same direction: IDR 30 %, SNR 15 %, BID-based 60 %."
    assert rows[3]["ours"] == 0.6
    assert rows[3]["why"] == "IDR 0.3 at the high rate over 0.5 at the low."


def test_resume_reads_the_finished_points_and_writes_the_same_rows(
        reproduced: dict[str, dict], tmp_path: Path) -> None:
    first = reproduced["meghdoot"]
    folder = Path(first["page"]).parent
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--quick", "--resume", str(folder), "--json"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    again = json.loads(res.stdout.strip().splitlines()[-1])
    assert again["rows"] == first["rows"] and again["runs"] == first["runs"]
    assert res.stderr.count("reusing") == len(first["runs"])
    assert "simulating" not in res.stderr  # nothing ran again
    # A folder of another paper or scale is refused in one line, nothing written.
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "lbdd",
                          "--quick", "--resume", str(folder)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        f"pubsublab: error: --resume {folder}: not a folder of `reproduce lbdd` "
        f"(--quick, sim), named <stamp>-reproduce-lbdd-sim-quick"]


def test_a_reproduction_in_sittings_writes_the_rows_of_one_run(
        reproduced: dict[str, dict], tmp_path: Path) -> None:
    """Meghdoot's quick reproduction in sittings that each have no time (each a new
    process going on with the command the last one printed): every sitting gets on by
    its first point's first pause (the simulator checks the clock every 4,096 events),
    the first point pauses inside until it is done, the sitting it ends in pauses
    before the next point; the last sitting, without a limit, writes the rows of the
    reproduction run in one go."""
    cmd = ["reproduce", "meghdoot", "--quick", "--out", str(tmp_path),
           "--pause-after-min", "0.0001", "--json"]
    pauses: list[str] = []
    while not pauses or "points done, before" not in pauses[-1]:
        assert len(pauses) < 20, pauses
        res = subprocess.run([sys.executable, "-m", "experiments.cli", *cmd],
                             capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
        out = json.loads(res.stdout.strip().splitlines()[-1])
        folder = Path(out["paused"])
        assert out["go_on"] == (f"pubsublab reproduce meghdoot --quick --resume {folder} "
                                "--pause-after-min 0.0001")
        pauses.append(out["how_far"])
        cmd = [*out["go_on"].split()[1:], "--json"]
        if len(pauses) == 1:  # the first point paused part way: --no-run says how far
            res = subprocess.run([sys.executable, "-m", "experiments.cli", *cmd[:-3],
                                  "--no-run", "--out", str(tmp_path), "--json"],
                                 capture_output=True, text=True, timeout=600, check=False)
            assert res.returncode == 0, res.stderr[-3000:]
            listed = json.loads(res.stdout.strip().splitlines()[-1])["not_run"]
            share = re.search(r"paused at (\d+%)", pauses[0])
            assert share and f"{listed[0]['paused']:.0%}" == share[1], (listed[0], pauses[0])
            assert [p for p in listed if "paused" in p] == listed[:1]
            assert f"peers-uniform at 100 (estimated 10 s, paused at {share[1]})" in res.stderr
            # The same folder received from elsewhere, its state swapped for a planted
            # pickle: refused in one line, nothing of it run.
            copy = tmp_path / "received" / folder.name
            shutil.copytree(folder, copy)
            marker = tmp_path / "ran"
            for state in copy.rglob("simulator.pickle"):
                state.write_bytes(pickle.dumps(Planted(marker)))
            res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce",
                                  "meghdoot", "--quick", "--resume", str(copy)],
                                 capture_output=True, text=True, timeout=600, check=False)
            lines = res.stderr.strip().splitlines()
            assert res.returncode == 2 and "not a signed paused state" in lines[-1], res.stderr
            assert "--trust-paused-state" in lines[-1] and "Traceback" not in res.stderr
            assert not marker.exists()
    shares = [int(m[1]) for m in map(re.compile(
        r"0 of 9 points done, peers-uniform at 100: meghdoot paused at (\d+)% of its "
        r"client operations").search, pauses[:-1]) if m]
    assert len(shares) == len(pauses) - 1 >= 2 and shares == sorted(shares), pauses
    assert shares[0] < shares[-1] < 100
    assert re.search(r"1 of 9 points done, before peers-uniform at 1000$", pauses[-1])
    # The first point's run lists the sittings it took; no pause file or state is left.
    first = json.loads(next(folder.glob("peers-uniform/*/manifest.json")).read_text())
    assert len(first["resources"]["parts"]) == len(pauses)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--quick", "--resume", str(folder), "--out", str(tmp_path),
                          "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["rows"] == reproduced["meghdoot"]["rows"]
    assert not list(folder.rglob("paused.json")) and not list(folder.rglob("*.pickle"))
    # Nothing to pause without running: refused in one line.
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--quick", "--resume", str(folder), "--no-run",
                          "--pause-after-min", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        "pubsublab: error: --pause-after-min: --no-run runs nothing to pause"]


def test_the_command_that_goes_on_is_one_the_shell_runs_as_printed(tmp_path: Path) -> None:
    """Quoted paths, absolute (the command may be run from elsewhere), sudo for Mininet,
    the other runtime's folder and the time limit kept."""
    from experiments.reproduce import go_on_command

    folder, other = (tmp_path / "a b" / "F").resolve(), (tmp_path / "it's" / "B").resolve()
    cmd = go_on_command("kyra", "emulated", True, folder, other, 150 * 60.0)
    assert shlex.split(cmd) == ["sudo", "pubsublab", "reproduce", "kyra", "--runtime",
                                "emulated", "--quick", "--resume", str(folder), "--beside",
                                str(other), "--pause-after-min", "150"]
    assert go_on_command("meghdoot", "sim", False, folder, None, None) == (
        f"pubsublab reproduce meghdoot --resume '{folder}'")
    assert shlex.split(go_on_command("meghdoot", "sim", False, folder, None, None,
                                     allow_large=True))[-1] == "--allow-large"


def test_allow_large_builds_points_this_machine_would_refuse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine too small for a reproduction's points, reproduce refuses them in one
    line that names --allow-large, and builds them with it."""
    import experiments.plan
    from experiments.reproduce import _plan_points, load_paper
    from experiments.spec import SpecError

    monkeypatch.setattr(experiments.plan, "physical_memory_bytes", lambda: 2**20)
    paper = load_paper("meghdoot")
    with pytest.raises(SpecError, match="pass --allow-large"):
        _plan_points(paper, "sim", True)
    _, _, todo, _ = _plan_points(paper, "sim", True, allow_large=True)
    assert sum(len(points) for points in todo.values()) > 1


def test_beside_refuses_another_paper_the_same_runtime_or_no_reproduction(
        reproduced: dict[str, dict], tmp_path: Path) -> None:
    """A wrong --beside folder is refused in one line before anything runs."""
    megh = Path(reproduced["meghdoot"]["page"]).parent
    cases = [
        (["lbdd", "--quick", "--beside", str(megh)],
         f"--beside {megh}: a reproduction of 'meghdoot' at --quick; wanted a folder of "
         "`reproduce lbdd --quick`"),
        (["meghdoot", "--beside", str(megh)],
         f"--beside {megh}: a reproduction of 'meghdoot' at --quick; wanted a folder of "
         "`reproduce meghdoot`"),
        (["meghdoot", "--quick", "--beside", str(megh)],
         f"--beside {megh}: runtime sim as this one; wanted the other runtime"),
        (["meghdoot", "--quick", "--beside", str(tmp_path)],
         f"--beside {tmp_path}: not a folder of `reproduce meghdoot --quick` that finished "
         f"(FileNotFoundError: [Errno 2] No such file or directory: "
         f"'{tmp_path / 'reproduction.json'}')"),
    ]
    out = tmp_path / "out"
    for args, message in cases:
        res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", *args,
                              "--out", str(out)],
                             capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [f"pubsublab: error: {message}"]
    assert not out.exists() or not any(out.iterdir())  # nothing started


@pytest.mark.root
def test_emulated_beside_simulated_shows_both_runtimes(reproduced: dict[str, dict],
                                                       tmp_path: Path) -> None:
    """Kyra's quick reproduction in Mininet beside the simulated one: each row carries the
    simulated row's numbers unchanged, the page has both groups of columns, both runs'
    folders and, per row, one figure with both runtimes' curves."""
    sim = reproduced["kyra"]
    sim_folder = Path(sim["page"]).parent
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "kyra",
                          "--runtime", "emulated", "--quick", "--beside", str(sim_folder),
                          "--out", str(tmp_path), "--json"],
                         capture_output=True, text=True, timeout=900, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    emu = json.loads(res.stdout.strip().splitlines()[-1])
    assert (emu["runtime"], emu["beside"]) == ("emulated", str(sim_folder.resolve()))
    assert len(emu["rows"]) == len(sim["rows"])
    for row, other in zip(emu["rows"], sim["rows"], strict=True):
        assert row["figure"] == other["figure"]
        assert row["beside"] == {"runtime": "simulated",
                                 **{k: other[k] for k in ("ours", "ratio", "direction_agrees",
                                                          "within_2x", "conditions", "scale")}}
    # The Mininet experiment's rows ran emulated; the simulated-only ones say so.
    ran = {r["conditions"].rsplit("; ", 1)[-1] for r in emu["rows"]}
    assert ran == {"emulated", "simulated"}
    driver = _browser(tmp_path)
    try:
        driver.get(Path(emu["page"]).as_uri())
        head = driver.execute_script(
            "return [...document.querySelectorAll('#rows tr')[0].cells].map(c => c.innerText)")
        assert head[8:12] == ["Ours, simulated", "Ours / paper, simulated",
                              "Direction agrees, simulated", "Within 2x, simulated"]
        body_rows = driver.execute_script(
            "return [...document.querySelectorAll('#rows tr')].slice(1).map("
            "tr => [...tr.cells].map(td => td.innerText.trim()))")
        assert [cells[8] not in ("", "-") for cells in body_rows] == [True] * len(body_rows)
        images = driver.execute_script(
            "return [...document.images].map(i => [i.complete, i.naturalWidth])")
        assert len(images) == len(emu["rows"]) and all(c and w > 200 for c, w in images)
        run_links = driver.execute_script(
            "return [...document.querySelectorAll('#runs a')].map(a => a.href)")
        assert len(run_links) == 2 * (len(emu["runs"]) + len(sim["runs"]))
    finally:
        driver.quit()


def test_the_run_list_says_which_runs_missed_deliveries(tmp_path: Path) -> None:
    from analysis.reproduction import Point, delivery_text

    exact = {"snr": {"missing": 0, "duplicates": 0}, "idr": {"missing": 0, "duplicates": 0}}
    assert delivery_text(Point(None, tmp_path, {}, exact)) == "exactly once"
    lossy = {**exact, "tid-static": {"missing": 8, "duplicates": 0},
             "tid-dynamic": {"missing": 0, "duplicates": 2}}
    assert delivery_text(Point(None, tmp_path, {}, lossy)) == (
        "tid-static: 8 missing, 0 twice; tid-dynamic: 0 missing, 2 twice")


def test_a_runs_cost_reads_in_mib_or_gib_and_says_when_its_peak_is_an_upper_bound() -> None:
    from analysis.reproduction import cost_cells

    base = {"wall_s": 4140.0, "cpus": 2, "mem_total_gib": 23.5, "peak_reset": True}
    assert ">69.0 min<" in cost_cells({**base, "peak_rss_mib": 9830.4})
    assert ">9.6 GiB<" in cost_cells({**base, "peak_rss_mib": 9830.4})
    assert ">812 MiB<" in cost_cells({**base, "peak_rss_mib": 812.3})
    unreset = cost_cells({**base, "peak_rss_mib": 812.3, "peak_reset": False})
    assert ">at most 812 MiB<" in unreset and "not reset" in unreset
    assert "title='2 CPUs, 23.5 GiB of memory'" in cost_cells({**base, "peak_rss_mib": 1})
    # Emulated runs, and runs from before the manifest said: two dashes.
    assert cost_cells(None) == cost_cells({}) == (
        "<td class='num'>-</td><td class='num'>-</td>")


@pytest.mark.parametrize("index", [{"paper": "meghdoot", "quick": True, "runtime": "emulated",
                                    "rows": "notalist"}, ["not", "an", "object"]])
def test_beside_refuses_an_index_whose_rows_are_not_rows(tmp_path: Path, index: object) -> None:
    """A --beside folder whose reproduction.json is damaged: one line, nothing started."""
    beside = tmp_path / "20261202-000000-reproduce-meghdoot-emulated-quick"
    beside.mkdir()
    (beside / "reproduction.json").write_text(json.dumps(index))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--quick", "--beside", str(beside), "--out", str(out)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"pubsublab: error: --beside {beside / 'reproduction.json'}: not the index of a folder "
        "of `reproduce meghdoot --quick` (its rows are not a list of rows); reproduce it again"]
    assert not out.exists() or not any(out.iterdir())


SHIPPED = REPO / "experiments" / "papers" / "finished"
MAX_PAGE_PX = 8000  # the tallest a page may be at 1,400 px wide
# How a why's first words claim the direction (the data file's wording).
AGREEING = ("Agrees", "Same direction", "Exact", "Near the paper's", "Within the paper's")
DISAGREEING = ("Opposite direction", "Does not hold")


@pytest.fixture(scope="module")
def shipped_meghdoot(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Meghdoot's page on its shipped full-scale points (`--resume COPY --no-run`)."""
    folder = next(SHIPPED.glob("*-reproduce-meghdoot-sim"))
    copy = tmp_path_factory.mktemp("shipped") / folder.name
    shutil.copytree(folder, copy)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--resume", str(copy), "--no-run", "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _pages(reproduced: dict[str, dict], shipped: dict) -> list[dict]:
    return [*(reproduced[p] for p in PAPERS), shipped]


def _page_rows(driver) -> list[dict]:
    """The rows table as a reader sees it: id, class, cells' text, the why's visible
    sentence and the paper points the figure marks."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#rows tr')].slice(1).map(tr => ({"
        "id: tr.id, cls: tr.className, cells: [...tr.cells].map(td => td.innerText.trim()),"
        "lead: (tr.querySelector('td.why summary') || tr.querySelector('td.why')).innerText,"
        "paper: JSON.parse(tr.querySelector('img').dataset.paper)}))")


def test_the_summary_counts_equal_the_rows(reproduced: dict[str, dict],
                                          shipped_meghdoot: dict, tmp_path: Path) -> None:
    """Every page opens with the counts a reader would make from its rows, and links
    each row that differs; a row without a paper number says so and is not shaded for
    it."""
    driver = _browser(tmp_path)
    try:
        for d in _pages(reproduced, shipped_meghdoot):
            driver.get(Path(d["page"]).as_uri())
            summary = driver.execute_script(
                "return [...document.querySelectorAll('#summary tr')[1].cells]"
                ".map(c => c.innerText.trim())")
            rows = _page_rows(driver)
            numbered = [r for r in rows if r["cells"][2] != "no paper number"]
            agree = [r for r in rows if r["cells"][6] == "yes"]
            within = [r for r in numbered if r["cells"][7] == "yes"]
            off = [r for r in rows if r["cls"] == "differs"]
            assert summary == [str(len(rows)), str(len(numbered)),
                               f"{len(agree)} of {len(rows)}",
                               f"{len(within)} of {len(numbered)}", str(len(off))], d["page"]
            assert len(rows) == len(d["rows"])
            for r, row in zip(rows, d["rows"], strict=True):
                if row["paper_value"] is None:
                    assert r["cells"][5] == r["cells"][7] == "no paper number"
                    assert (r["cls"] == "differs") == (not row["direction_agrees"])
            links = driver.execute_script(
                "return [...document.querySelectorAll('#differs a')].map(a => "
                "[a.getAttribute('href'), document.querySelector(a.getAttribute('href'))"
                ".cells[0].innerText.trim()])")
            assert links == [[f"#{r['id']}", r["cells"][0]] for r in off]
    finally:
        driver.quit()


def test_no_why_shown_contradicts_its_row(reproduced: dict[str, dict],
                                         shipped_meghdoot: dict, tmp_path: Path) -> None:
    """A why is shown only beside numbers of the scale and runtime it was written for,
    its first sentence visible; one that claims a direction claims the row's; one that
    quotes our number ({ours}) quotes the row's. Elsewhere the row says which scale's
    why there is."""
    driver = _browser(tmp_path)
    checked = 0
    try:
        for d in _pages(reproduced, shipped_meghdoot):
            data = yaml.safe_load((REPO / "experiments" / "papers" /
                                   f"{d['paper']}.yaml").read_text())
            driver.get(Path(d["page"]).as_uri())
            for r, row, spec in zip(_page_rows(driver), d["rows"], data["rows"],
                                    strict=True):
                written = [k for k in ("any", row["measured_at"]) if k in spec["why"]]
                if not written:
                    assert r["lead"].startswith("No explanation"), r["lead"]
                    assert all(k in r["lead"] for k in spec["why"]), r["lead"]
                    continue
                checked += 1
                assert row["why_from"] == written
                lead = r["lead"]
                assert len(lead) < 400 and lead in row["why"], lead
                if lead.startswith(AGREEING):
                    assert r["cells"][6] == "yes", (d["page"], r["cells"][:2], lead)
                if lead.startswith(DISAGREEING):
                    assert r["cells"][6] == "no", (d["page"], r["cells"][:2], lead)
                if any("{ours}" in spec["why"][k] for k in written):
                    assert f"Ours is {r['cells'][3]} " in row["why"], row["why"]
        assert checked >= len(shipped_meghdoot["rows"])
    finally:
        driver.quit()


def test_the_pages_stay_under_the_height_bound(reproduced: dict[str, dict],
                                              shipped_meghdoot: dict,
                                              tmp_path: Path) -> None:
    """At 1,400 px wide every page, Meghdoot's on its full-scale points among them, is
    at most 8,000 px tall: the rest of each why is folded away until opened."""
    driver = _browser(tmp_path)
    try:
        driver.set_window_size(1400, 1000)
        for d in _pages(reproduced, shipped_meghdoot):
            driver.get(Path(d["page"]).as_uri())
            assert driver.execute_script("return document.documentElement.clientWidth") > 1300
            height = driver.execute_script("return document.documentElement.scrollHeight")
            assert height <= MAX_PAGE_PX, f"{d['page']}: {height} px"
        # Each of Meghdoot's full-scale whys is longer than a sentence: all folded.
        folded = driver.execute_script(
            "return document.querySelectorAll('td.why details:not([open])').length")
        assert folded == len(shipped_meghdoot["rows"])
    finally:
        driver.quit()


def test_the_papers_points_are_markers_at_their_x(shipped_meghdoot: dict,
                                                 tmp_path: Path) -> None:
    """Table 1's 76 zones at 100 peers is one marker at x = 100, not a line across the
    axis; a claim over a sweep (at most 15 % for all event counts) one at each of ours."""
    from analysis.reproduction import draw_row, load_point
    from experiments.reproduce import load_paper

    paper = load_paper("meghdoot")
    folder = Path(shipped_meghdoot["page"]).parent
    points = {}
    for run in shipped_meghdoot["runs"]:
        points.setdefault(run["experiment"], []).append(
            load_point(folder / run["run_dir"], run["x"]))
    row = paper["rows"][0]
    fig, marker, labels = draw_row(paper, row, points["peers-uniform"])
    assert list(marker.get_xdata()) == [100.0] and list(marker.get_ydata()) == [76]
    assert marker.get_linestyle() == "None" and not labels
    assert [ln for ln in fig.axes[0].lines if ln.get_label() == "paper"] == [marker]
    driver = _browser(tmp_path)
    try:
        driver.get(Path(shipped_meghdoot["page"]).as_uri())
        for r, spec, got in zip(_page_rows(driver), paper["rows"], shipped_meghdoot["rows"],
                                strict=True):
            at = spec["ours"].get("pick")
            # the figures' x is the paper's where ours are its values scaled down
            x_axis = paper["experiments"][got["experiment"]].get("x") or {}
            per_ours = x_axis.get("paper_per_ours", 1)
            if isinstance(at, dict):
                assert r["paper"] == [[float(at["at"]) * per_ours, spec["paper"]]], \
                    r["cells"][:2]
            else:  # over the sweep: the paper's number at each of our x
                xs = [run["x"] * per_ours for run in shipped_meghdoot["runs"]
                      if run["experiment"] == got["experiment"]]
                assert r["paper"] == [[x, spec["paper"]] for x in sorted(xs)], r["cells"][:2]
    finally:
        driver.quit()


def test_the_event_that_contacts_every_peer_is_explained_from_the_run(
        shipped_meghdoot: dict, tmp_path: Path) -> None:
    """Every events point has an event that contacted 100 % of the live peers: the page
    says it is the stream's first, published while the first peer was the only one live,
    as the run's own manifest shows."""
    row = next(r for r in shipped_meghdoot["rows"] if r["metric"].startswith("most peers"))
    assert row["ours"] == 100.0
    folder = Path(shipped_meghdoot["page"]).parent
    over_60 = set()
    for run in shipped_meghdoot["runs"]:
        if run["experiment"] != "events":
            continue
        contacted = json.loads((folder / run["run_dir"] / "meghdoot" / "summary.json")
                               .read_text())["meghdoot"]["contacted"]
        assert contacted["max_pct"] == 100.0
        over_60.add(round(contacted["buckets_pct"]["60-100"] * contacted["events"] / 100))
        meta = json.loads((folder / run["run_dir"] / "manifest.json").read_text()
                          )["workload"]["meta"]
        first_s = meta["n_subscriptions"] * meta["step_s"]
        live = [p for p, spans in meta["membership"].items()
                if any(j <= first_s and (x is None or first_s < x) for j, x in spans)]
        assert live == ["p0000"]
    driver = _browser(tmp_path)
    try:
        driver.get(Path(shipped_meghdoot["page"]).as_uri())
        lead = next(r["lead"] for r in _page_rows(driver)
                    if r["cells"][1] == row["metric"])
        assert lead == ("Ours is 100 % because of the stream's first event, published when "
                        "1 peer is live.")
        assert over_60 == {5}
        assert "published at 5,000 s" in row["why"]
        assert "5 of the 20,000 to 50,000 events of a point contacted over 60 %" in row["why"]
    finally:
        driver.quit()


def test_a_why_not_tagged_with_a_scale_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import experiments.reproduce as reproduce
    from experiments.spec import SpecError

    data = yaml.safe_load((REPO / "experiments" / "papers" / "lbdd.yaml").read_text())
    monkeypatch.setattr(reproduce, "PAPERS_DIR", tmp_path)
    cases = [("Agrees.", "lbdd.yaml row 1 (Section 4.2 (1)): why must map SCALE/RUNTIME "
                         "(e.g. full/simulated) to its text, not str"),
             ({"full": "Agrees."}, "lbdd.yaml row 1 (Section 4.2 (1)): why key 'full': want "
                                   "any or SCALE/RUNTIME with SCALE one of full, quick, "
                                   "emulated and RUNTIME one of simulated, emulated"),
             ({"any": "Ours {ours.x}"}, "lbdd.yaml row 1 (Section 4.2 (1)): why any: field "
                                        "{ours.x}: a plain name is wanted (ours, paper, "
                                        "ratio, against or a fact of the points)")]
    for why, message in cases:
        data["rows"][0]["why"] = why
        (tmp_path / "lbdd.yaml").write_text(yaml.safe_dump(data))
        with pytest.raises(SpecError) as err:
            reproduce.load_paper("lbdd")
        assert str(err.value) == message


def test_a_why_of_another_scale_links_the_page_that_shows_it(
        reproduced: dict[str, dict], shipped_meghdoot: dict, tmp_path: Path) -> None:
    """The quick page of Meghdoot beside its full-scale page (the same --out): a row whose
    why was written for full/simulated only links that page's row; one that has a quick
    why shows it."""
    full = Path(shipped_meghdoot["page"])
    quick = full.parent.parent / Path(reproduced["meghdoot"]["page"]).parent.name
    shutil.copytree(Path(reproduced["meghdoot"]["page"]).parent, quick)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "reproduce", "meghdoot",
                          "--quick", "--resume", str(quick), "--no-run", "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    driver = _browser(tmp_path)
    try:
        driver.get((quick / "reproduction.html").as_uri())
        cells = driver.execute_script(
            "return [...document.querySelectorAll('#rows tr')].slice(1).map(tr => "
            "[tr.querySelector('td.why').innerText, [...tr.querySelectorAll('td.why a')]"
            ".map(a => a.href)])")
    finally:
        driver.quit()
    assert cells[0] == ["No explanation for quick/simulated: the data file's is for "
                        "full/simulated, shown on that page.", [f"{full.as_uri()}#row-1"]]
    assert cells[-1][0].startswith("At the quick scale the CAN has 30 peers") and not cells[-1][1]
