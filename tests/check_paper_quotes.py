"""The paper data files quote their papers right: every row's source names a section
its seed has (and the part of it the source names, if any), and every phrase in quotes
that a source, a why or a conditions line gives as the paper's is in the seed, a
source's inside the section it names.

The seeds (the papers' texts) are not part of the project, which may not redistribute
them, so this check is not in ``make test``: ``make check-papers`` runs it, with the
seeds in ``$PUBSUBLAB_SEEDS`` (default: ``shared/seeds`` beside the clone), and fails
when they are not there. Run it after editing ``experiments/papers/``.

The seeds are text extracted from the papers' PDFs, each in its own way: CoDD's two
columns interleave and its ligatures are "?", Meghdoot lost its spaces and its ligatures,
OctopiA and Kyra number their sections in Roman numerals. So phrases are compared with
case, whitespace, hyphens and dashes, ligatures (fi, fl, ff, ffi, ffl) and punctuation
other than a number's own points and commas ignored; "..." in a quote, or an insertion
in brackets of letters only ("follow[s]", "value of [q]": a symbol the extraction lost),
separates pieces that must come in order, close together.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PAPERS_DIR = REPO / "experiments" / "papers"
SEEDS = Path(os.environ.get("PUBSUBLAB_SEEDS", REPO.parent / "shared" / "seeds"))
PAPER_FILES = sorted(PAPERS_DIR.glob("*.yaml"))
# Pieces of one quote lie within this many normalised characters of each other.
PIECES_WITHIN = 1500
# A quote in a why or a conditions line is the paper's when "paper" is this close.
ATTRIBUTION_CHARS = 80

ROMAN = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6, "VII": 7, "VIII": 8,
         "IX": 9, "X": 10, "XI": 11, "XII": 12}
NUM = r"\d{1,2}(?:\.\d{1,2})*"
# Candidate headings; only those that follow the previous one in order are kept.
HEADINGS = (
    # a number on its own line, then its title or its first subsection's number
    re.compile(rf"(?m)^({NUM})[ \t]*\n(?=[A-Z]|\1\.\d)"),
    # "5.3 Evaluation", inline too, but not a plot's axis ("5 6 System Fanout")
    re.compile(rf"(?<![\d.])(?<!\d )({NUM}) (?=[A-Z][a-z])"),
    re.compile(r"(?m)^(\d)\.\n(\d)(?=[A-Z][a-z])"),  # Meghdoot's "5.\n2SystemScalability"
    re.compile(r"(?m)(?<!\d\.\n)^(\d)(?=[A-Z][a-z])"),  # Meghdoot's "5ExperimentalEvaluation"
    re.compile(r"(?<![\w-])(?<!Section )(?<!Sections )([IVX]+)(?:-([A-Z]))?\.? "
               r"(?=[A-Z]{2}|[A-Z][a-z])"),  # "III. KYRA DESIGN", "III-A Cartesian"
)
SECTION_CITED = re.compile(r"^(?:Section ([\dIVX]+(?:[.-][\dA-Z]+)*)|(Abstract))")
# A part a source names after its section: "Section 4.2, 1) Data distribution delay:",
# "Section VIII, Publisher Scalability:", "Section 5.4, Table 1:".
PART_CITED = re.compile(r",? ((?:[A-Z]|\d\) )[^:\"(]*):")


def section_id(text: str) -> tuple[int, ...]:
    """``"5.3"`` -> (5, 3); ``"VIII"`` -> (8,); ``"III-A"`` -> (3, 1)."""
    parts = re.split(r"[.-]", text)
    if parts[0] in ROMAN:
        return (ROMAN[parts[0]], *(ord(p) - ord("A") + 1 for p in parts[1:]))
    return tuple(int(p) for p in parts)


def follows(prev: tuple[int, ...], cand: tuple[int, ...]) -> bool:
    """Whether heading ``cand`` may come next after ``prev``: its first subsection, or
    the next at some level (a step of 2 allowed: one heading the extraction lost)."""
    if cand == (*prev, 1):
        return True
    return any(cand == (*prev[:i], prev[i] + step) for i in range(len(prev)) for step in (1, 2))


def headings(text: str) -> list[tuple[tuple[int, ...], int]]:
    """The seed's section headings in order, with their offsets; ``(0,)`` is the
    abstract. A paper numbers its sections one way: the first heading's (Roman or
    Arabic) is the only one read after it."""
    found = []
    for pattern in HEADINGS:
        for m in pattern.finditer(text):
            groups = [g for g in m.groups() if g]
            if pattern is HEADINGS[2]:
                ident = (int(groups[0]), int(groups[1]))
            else:
                ident = section_id("-".join(groups))
            found.append((m.start(), ident, groups[0] in ROMAN))
    abstract = re.search(r"Abstract", text)
    kept = [((0,), abstract.start() if abstract else 0)]
    roman = None
    for start, ident, is_roman in sorted(found):
        if (start > kept[-1][1] and roman in (None, is_roman)
                and follows(kept[-1][0], ident)):
            kept.append((ident, start))
            roman = is_roman
    return kept


def section_text(text: str, ident: tuple[int, ...]) -> str | None:
    """The seed's text of section ``ident`` with its subsections (None: no such
    heading)."""
    heads = headings(text)
    for k, (h, start) in enumerate(heads):
        if h == ident:
            end = next((s for g, s in heads[k + 1:] if g[:len(ident)] != ident), len(text))
            return text[start:end]
    return None


def norm(text: str) -> str:
    """``text`` as compared: see the module docstring."""
    s = unicodedata.normalize("NFKC", text).lower()
    s = re.sub(r"ffi|ffl|ff|fi|fl|\?", "", s)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"(?<=\d)\.(?=\d)", "\x01", s)
    s = re.sub(r"(?<=\d),(?=\d)", "\x02", s)
    return re.sub(r"[^a-z0-9%\x01\x02]", "", s)


def pieces(quote: str) -> list[str]:
    """The quote's pieces that must appear in order (split at "..." and at an insertion
    in brackets of letters only; "[5, 9]" is the paper's own)."""
    return [p for p in (norm(x) for x in re.split(r"\.\.\.|…|\[[A-Za-z ]*\]", quote)) if p]


def quoted_in(quote: str, text: str) -> bool:
    """Whether ``quote``'s pieces appear in ``text`` in order, each within
    :data:`PIECES_WITHIN` of the previous."""
    parts, hay = pieces(quote), norm(text)
    if not parts:
        return True

    def rest(at: int, k: int) -> bool:
        if k == len(parts):
            return True
        i = hay.find(parts[k], at)
        while i != -1 and i - at <= PIECES_WITHIN:
            if rest(i + len(parts[k]), k + 1):
                return True
            i = hay.find(parts[k], i + 1)
        return False

    i = hay.find(parts[0])
    while i != -1:
        if rest(i + len(parts[0]), 1):
            return True
        i = hay.find(parts[0], i + 1)
    return False


DOUBLE = re.compile(r"\"([^\"]+)\"")
SINGLE = re.compile(r"(?<![A-Za-z])'([^']+?)'(?![A-Za-z])")


def attributed_quotes(text: str) -> Iterator[str]:
    """The phrases in quotes in a why or a conditions line that it gives as the
    paper's: "paper" within :data:`ATTRIBUTION_CHARS` of the quote."""
    for pattern in (DOUBLE, SINGLE):
        for m in pattern.finditer(text):
            near = text[max(0, m.start() - ATTRIBUTION_CHARS):m.end() + ATTRIBUTION_CHARS]
            if "paper" in near.replace(m.group(0), ""):
                yield m.group(1)


def _load(path: Path) -> tuple[dict, str]:
    paper = yaml.safe_load(path.read_text(encoding="utf-8"))
    seed = SEEDS / paper["seed"]
    if not seed.exists():  # the seeds live beside the clone, not in it
        pytest.fail(f"no seed text {seed}: set PUBSUBLAB_SEEDS to the papers' texts")
    return paper, seed.read_text(encoding="utf-8")


def _conditions(paper: dict) -> Iterator[tuple[str, str]]:
    for name, exp in paper["experiments"].items():
        yield name, exp["conditions"]
        for mode in ("full", "quick", "emulated"):
            if isinstance(exp.get(mode), dict) and "conditions" in exp[mode]:
                yield f"{name}.{mode}", exp[mode]["conditions"]


@pytest.mark.parametrize("path", PAPER_FILES, ids=lambda p: p.stem)
def test_every_source_names_a_section_of_its_seed_and_quotes_it(path: Path) -> None:
    paper, seed = _load(path)
    failures = []
    for k, row in enumerate(paper["rows"]):
        where = f"row {k} ({row['figure']})"
        m = SECTION_CITED.match(row["source"])
        if not m:
            failures.append(f"{where}: the source names no section: {row['source']!r}")
            continue
        cited = m.group(1) or m.group(2)
        section = section_text(seed, (0,) if m.group(2) else section_id(cited))
        if section is None:
            failures.append(f"{where}: {paper['seed']} has no section {cited}")
            continue
        part = PART_CITED.match(row["source"], m.end())
        if part and not quoted_in(part.group(1), section):
            failures.append(f"{where}: section {cited} has no {part.group(1)!r}")
        for quote in DOUBLE.findall(row["source"]):
            if not quoted_in(quote, section):
                in_seed = "elsewhere in the seed" if quoted_in(quote, seed) else "not in the seed"
                failures.append(f"{where}: not in section {cited} ({in_seed}): {quote!r}")
    assert not failures, f"{path.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("path", PAPER_FILES, ids=lambda p: p.stem)
def test_every_phrase_a_why_or_a_condition_gives_as_the_papers_is_in_its_seed(
        path: Path) -> None:
    paper, seed = _load(path)
    texts = [(f"conditions of {name}", text) for name, text in _conditions(paper)]
    # a why is a text per scale and runtime it was written for
    texts += [(f"why ({key}) of row {k} ({row['figure']})", text)
              for k, row in enumerate(paper["rows"])
              for key, text in (row["why"].items() if isinstance(row["why"], dict)
                                else [("", row["why"])])]
    failures = [f"{where}: {quote!r}" for where, text in texts
                for quote in attributed_quotes(text) if not quoted_in(quote, seed)]
    assert not failures, f"{path.name}, not in {paper['seed']}:\n" + "\n".join(failures)


def test_the_section_reader_finds_the_seeds_headings() -> None:
    """The headings the checks stand on: enough of each seed's to tell 5.2 from 5.3."""
    if not SEEDS.is_dir():
        pytest.fail(f"no seed texts in {SEEDS}: set PUBSUBLAB_SEEDS to the papers' texts")
    codd = (SEEDS / "codd-cooperative-dissemination.txt").read_text(encoding="utf-8")
    ids = [h for h, _ in headings(codd)]
    assert ids[:10] == [(0,), (1,), (2,), (3,), (3, 1), (3, 2), (4,), (5,), (5, 1), (5, 2)]
    assert {(5, 3), (5, 4), (5, 5), (5, 5, 4), (6,), (7,)} <= set(ids)
    assert "decreases by over 50%" in section_text(codd, (5, 3))
    assert "decreases by over 50%" not in section_text(codd, (5, 2))
    kyra = (SEEDS / "kyra-event-routing.txt").read_text(encoding="utf-8")
    assert [h for h, _ in headings(kyra)] == [(0,), (1,), (2,), (3,)]
    assert quoted_in("Kyra significantly reduces the storage ... loads", kyra)
    assert not quoted_in("Kyra significantly reduces the latency", kyra)
