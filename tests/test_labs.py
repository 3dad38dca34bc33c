"""The lab handouts (``labs/*.md``) as a student follows them: every ``lab`` block of a
handout run in order, non-interactively, as root, in a scratch view of the checkout (so
run folders land in a temporary directory), each block's ``expect`` lines found in what
it printed. A handout whose commands or promised output drift from the code fails here.
The markers are described in :mod:`lab_handouts`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lab_handouts import as_root_script, steps, unmatched

REPO = Path(__file__).resolve().parents[1]
LABS = sorted((REPO / "labs").glob("lab*.md"))
SECTIONS = ("## Learning objectives", "## Prerequisites", "## Background", "## Steps",
            "## Questions", "## Food for thought", "## Troubleshooting", "## Clean-up")
BLOCK_GUARD_S = 900  # a hung block fails the test instead of stalling the suite


def scratch_checkout(where: Path) -> Path:
    """A folder that shows the checkout through symlinks, without its run folders."""
    view = where / "vagrant"
    view.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in ("runs", ".git"):
            (view / entry.name).symlink_to(entry)
    return view


def student_path(bin_dir: Path) -> str:
    """A PATH as Lab 1's prerequisites leave a student's: ``pubsublab`` linked into a
    folder of its own (``/usr/local/bin`` in the VM), the system's commands, and not the
    venv's other programs (its ``python`` among them: Debian has none outside the venv),
    so that a handout that runs bare ``python`` fails here as on a student's machine."""
    venv_bin = Path(sys.executable).parent
    bin_dir.mkdir()
    (bin_dir / "pubsublab").symlink_to(venv_bin / "pubsublab")
    kept = [d for d in os.environ["PATH"].split(os.pathsep)
            if d and Path(d).resolve() != venv_bin.resolve()]
    return os.pathsep.join([str(bin_dir), *kept])


def test_a_student_path_has_pubsublab_and_not_the_venvs_python(tmp_path: Path) -> None:
    path = student_path(tmp_path / "bin")
    assert shutil.which("pubsublab", path=path) == str(tmp_path / "bin" / "pubsublab")
    python = shutil.which("python", path=path)
    assert python is None or Path(python).parent != Path(sys.executable).parent


def test_five_handouts_with_their_sections_steps_and_answer_keys() -> None:
    assert len(LABS) >= 5, LABS
    for lab in LABS:
        text = lab.read_text()
        positions = [text.find(s) for s in SECTIONS]
        assert -1 not in positions, f"{lab.name} lacks {SECTIONS[positions.index(-1)]}"
        assert positions == sorted(positions), f"{lab.name}: sections out of order"
        found = steps(lab)
        assert found and all(s.expect for s in found), \
            f"{lab.name}: every lab block needs what the student should see"
        assert (REPO / "labs" / "answers" / lab.name).exists(), f"no answer key for {lab.name}"


def test_a_manual_step_without_its_scripted_equivalent_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "lab9.md"
    doc.write_text("```sh manual\npubsublab watch\n```\n\n```text expect\nok\n```\n")
    with pytest.raises(ValueError, match="scripted equivalent"):
        steps(doc)


def test_expected_lines_hold_numbers_and_ranges() -> None:
    out = "[  5]   0.00-3.03   sec  3.46 MBytes  9.56 Mbits/sec     receiver\n"
    assert unmatched(["sec <n> MBytes <9..10.5> Mbits/sec receiver"], out) == []
    assert unmatched(["sec <n> MBytes <9.7..10.5> Mbits/sec receiver"], out) != []
    assert unmatched(["delivered 7,308 of <n>"], "delivered 7,308 of 7,308 expected") == []


@pytest.mark.root
@pytest.mark.parametrize("lab", LABS, ids=[p.stem for p in LABS])
def test_every_command_of_the_handout_prints_what_it_promises(lab: Path,
                                                              tmp_path: Path) -> None:
    cwd = scratch_checkout(tmp_path)
    env = {**os.environ, "PATH": student_path(tmp_path / "bin"),
           "PUBSUBLAB_VENV": os.environ.get("PUBSUBLAB_VENV", sys.prefix),
           "COLUMNS": "160", "LINES": "50"}  # a student's terminal, for the live view
    for step in steps(lab):
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", as_root_script(step.script)],
                             cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=BLOCK_GUARD_S, check=False)
        output = res.stdout + res.stderr
        where = f"{lab.name}:{step.line}"
        assert res.returncode == 0, f"{where} exited {res.returncode}:\n{output[-3000:]}"
        missing = unmatched(step.expect, output)
        assert not missing, f"{where} did not show {missing}:\n{output[-4000:]}"


def _duration(seconds: float) -> str:
    """A reproduction's length as lab 5's table writes it: seconds under 90 s, minutes
    under 90 min, else hours to a tenth."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def test_lab5_lists_every_paper_with_the_times_its_data_file_estimates() -> None:
    """Lab 5's table of papers is the data files' (experiments/papers/*.yaml): every
    paper, and per paper the simulated reproduction's length, quick and full, as the sum
    of its points' estimates (what `pubsublab reproduce` counts the time left by)."""
    from experiments.reproduce import _estimates, _mode_name, _points, load_paper
    from experiments.spec import PAPERS

    text = (REPO / "labs" / "lab5-reproduce-a-figure.md").read_text()
    table = {m[1]: (m[2], m[3]) for m in re.finditer(
        r"^\| `(\w+)` \| ([^|]+?) \| ([^|]+?) \|$", text, flags=re.M)}
    assert sorted(table) == sorted(PAPERS), "lab 5 lists the papers the data files hold"
    for paper in PAPERS:
        experiments = load_paper(paper)["experiments"]
        lengths = []
        for quick in (True, False):
            modes = {name: exp[_mode_name(exp, quick, emulated=False)]
                     for name, exp in experiments.items()}
            lengths.append(_duration(sum(
                sum(_estimates(modes[name], len(_points(exp, modes[name]))))
                for name, exp in experiments.items())))
        assert table[paper] == tuple(lengths), paper
    assert "over an hour" not in text
