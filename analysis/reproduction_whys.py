"""A headline row's "why": the cause we found, written for the numbers it explains.

In a paper's data file each row's ``why`` maps the scale and runtime its text was
written for to the text::

    why: {full/simulated: "...", quick/simulated: "..."}

``SCALE/RUNTIME``: SCALE is the scale the row's experiment ran at (``full``, the specs'
stated scale; ``quick``, the tests' and CI's; ``emulated``, the data file's Mininet
scale of an experiment that has one), RUNTIME where its points ran (``simulated`` or
``emulated``). A text is shown only on a page whose row was measured at its key, so it
is never read beside numbers it was not written for; elsewhere the row names the keys
it has (:func:`why_for`). The key ``any`` is for a text that quotes numbers of ours only
through its fields, filled from the run itself, and so holds at every scale.

A text's fields (``str.format``): ``{ours}``, ``{paper}`` and ``{ratio}``, the row's as
the page prints them; ``{against}``, the number ours is compared with (the ``against``
algorithm's, or ``of``'s at ``against_pick``); and the facts the row's points give: each
algorithm's number of the row under its name, ``-`` written ``_`` (``{tid_static}``,
:func:`analysis.reproduction.algorithm_facts`), and Meghdoot's first event
(:func:`analysis.meghdoot_facts.first_event_facts`). A field the points do not give (an
algorithm that did not run at that scale, say) leaves the text unshown, said as such,
rather than a number made up.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

SCALES = ("full", "quick", "emulated")
RUNTIMES = ("simulated", "emulated")
ANY = "any"
ROW_FIELDS = ("ours", "paper", "ratio", "against")
# A sentence ends at . ! or ? before a space and a capital or an opening bracket: "Fig. 9"
# and "x0.93" do not end one.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def why_key(scale: str, runtime: str) -> str:
    """The key of a why written for ``scale`` and ``runtime`` (``full/simulated``)."""
    return f"{scale}/{runtime}"


def check_why(why: Any, where: str) -> None:
    """ValueError in one line naming ``where`` (the row) if ``why`` is not a mapping of
    keys ``SCALE/RUNTIME`` or ``any`` to non-empty texts whose fields are known names."""
    keys = [why_key(s, r) for s in SCALES for r in RUNTIMES]
    if not isinstance(why, Mapping) or not why:
        raise ValueError(f"{where}: why must map SCALE/RUNTIME (e.g. full/simulated) to "
                         f"its text, not {type(why).__name__}")
    for key, text in why.items():
        if key != ANY and key not in keys:
            raise ValueError(f"{where}: why key {key!r}: want {ANY} or SCALE/RUNTIME with "
                             f"SCALE one of {', '.join(SCALES)} and RUNTIME one of "
                             f"{', '.join(RUNTIMES)}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: why {key}: an empty text")
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        except ValueError as exc:
            raise ValueError(f"{where}: why {key}: {exc} (a literal brace is {{{{ or }}}})"
                             ) from None
        bad = [f for f in fields if not re.fullmatch(r"[a-z_0-9]+", f)]
        if bad:
            raise ValueError(f"{where}: why {key}: field {{{bad[0]}}}: a plain name is "
                             f"wanted ({', '.join(ROW_FIELDS)} or a fact of the points)")


def why_for(why: Mapping[str, str], key: str, values: Mapping[str, str]
            ) -> tuple[str | None, list[str]]:
    """(the text to show, the keys it comes from) for a row measured at ``key``: the
    ``any`` text, then the text of ``key``, each filled from ``values`` (the row's
    numbers as printed, and the points' facts); a text with a field ``values`` lacks is
    left out. (None, []) when none is left."""
    shown: list[tuple[str, str]] = []
    for k in (ANY, key):
        if k in why:
            try:
                shown.append((k, " ".join(why[k].format_map(values).split())))
            except KeyError:
                continue
    if not shown:
        return None, []
    return " ".join(t for _, t in shown), [k for k, _ in shown]


def first_sentence(text: str) -> tuple[str, str]:
    """``text`` split after its first sentence: (that sentence, the rest, maybe empty)."""
    parts = _SENTENCE_END.split(text, maxsplit=1)
    return parts[0], parts[1] if len(parts) > 1 else ""
