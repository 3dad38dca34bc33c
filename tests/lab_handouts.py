"""The machine-readable part of the lab handouts (``labs/*.md``).

A handout marks what a test may run with the info string of its fenced blocks, which
Markdown renderers ignore after the language:

- ```` ```sh lab ````: commands the student types at a shell, run by the test in order;
- ```` ```sh manual ````: an interactive step (a Mininet prompt, a second terminal); the
  test cannot type into it, so the next fenced block must be a ``lab`` block, its
  scripted equivalent;
- ```` ```text expect ````: what the student should see from the ``lab`` block above it:
  every line must appear in that block's output (spaces collapsed), where ``<n>`` stands
  for any number and ``<A..B>`` for a number from A to B.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\w*)[ \t]*(\S*)[ \t]*$")
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
PLACEHOLDER = re.compile(r"<n>|<(-?[\d.]+)\.\.(-?[\d.]+)>")


@dataclass
class Step:
    """One ``lab`` block: its commands, the lines its output must show, and the manual
    block it stands in for (if any)."""

    line: int
    script: str
    expect: list[str] = field(default_factory=list)
    replaces_manual: bool = False


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line number, marker, body)`` of every fenced block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        blocks.append((start, opened.group(2), "\n".join(body)))
        i += 1
    return blocks


def steps(path: Path) -> list[Step]:
    """The handout's ``lab`` blocks in order, each with its ``expect`` lines. Raises
    ValueError for a marker out of place (an expect with no lab block above it, a manual
    block without its scripted equivalent next)."""
    found: list[Step] = []
    previous = ""
    for line, marker, body in fenced_blocks(path.read_text()):
        where = f"{path.name}:{line}"
        if previous == "manual" and marker != "lab":
            raise ValueError(f"{where}: a manual block must be followed by its scripted "
                             "equivalent, a ```sh lab block")
        if marker == "lab":
            found.append(Step(line, body, replaces_manual=previous == "manual"))
        elif marker == "expect":
            if previous != "lab":
                raise ValueError(f"{where}: an expect block must follow a ```sh lab block")
            found[-1].expect = [x for x in body.splitlines() if x.strip()]
        previous = marker
    return found


def as_root_script(script: str) -> str:
    """The block as the test runs it, already root: ``sudo`` dropped where a command
    starts (sudo resets PATH and may not be installed where the tests run)."""
    return re.sub(r"(^|[;&|(]\s*)sudo\s+", r"\1", script, flags=re.M)


def line_pattern(expected: str) -> re.Pattern[str]:
    """A regular expression for one expected line, spaces collapsed."""
    parts, last = [], 0
    text = " ".join(expected.split())
    for m in PLACEHOLDER.finditer(text):
        parts.append(re.escape(text[last:m.start()]))
        parts.append(f"({NUMBER})")
        last = m.end()
    parts.append(re.escape(text[last:]))
    return re.compile("".join(parts).replace(r"\ ", " +"))


def unmatched(expect: list[str], output: str) -> list[str]:
    """The expected lines that no output line shows (ranges checked)."""
    lines = [" ".join(x.split()) for x in output.splitlines()]
    missing = []
    for expected in expect:
        bounds = [(float(a), float(b)) for a, b in
                  (m.groups() for m in PLACEHOLDER.finditer(expected)) if a is not None]
        ranged = [m.group(0) != "<n>" for m in PLACEHOLDER.finditer(expected)]
        pattern = line_pattern(expected)
        if not any(_fits(pattern.search(x), ranged, bounds) for x in lines):
            missing.append(expected)
    return missing


def _fits(m: re.Match[str] | None, ranged: list[bool], bounds: list[tuple[float, float]]
          ) -> bool:
    if m is None:
        return False
    values = iter(bounds)
    for group, is_range in zip(m.groups(), ranged, strict=True):
        if is_range:
            low, high = next(values)
            if not low <= float(group.replace(",", "")) <= high:
                return False
    return True
