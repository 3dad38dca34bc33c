"""The run folder's ``manifest.json`` checked before Spark starts (a minute of startup on
the 2-core machines): a manifest that cannot be read is refused in one line, not met as a
traceback once the tables are built.

What the analysis takes from it, each optional (runs older than a field lack it): the
nodes it lists (``nodes``: brokers and clients, each expected to have left a log: the
missing-log check) and what the report's header and sections show (``spec``, ``git``,
``fidelity``, ``capture``: objects; ``links``: a list). A folder without a manifest is
still analysed (its pcaps and logs are all there is to read), with a one-line warning
that the missing-log check was skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodes.runfolder import MANIFEST, read_manifest

# The manifest's fields the analysis reads, by the JSON kind each must be when present.
_KINDS: dict[str, type] = {"nodes": dict, "spec": dict, "git": dict, "fidelity": dict,
                           "capture": dict, "links": list}


def checked_manifest(run_dir: Path, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """``run_dir``'s manifest, checked to be what the analysis reads; None (after a
    warning through ``warn``) if there is none. RuntimeError, one line naming the file
    and what to do, if it is not JSON, not an object or has a field of the wrong kind."""
    path = run_dir / MANIFEST
    fix = "the analysis reads its node list and report fields; restore it from the run"
    try:
        manifest = read_manifest(run_dir)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: unreadable ({type(exc).__name__}: "
                           f"{' '.join(str(exc).split())}); {fix}") from None
    if manifest is None:
        warn(f"{run_dir.name}: no {MANIFEST}: the check that every node left a log is "
             "skipped, and the report has no spec, links or capture sections")
        return None
    if not isinstance(manifest, dict):
        raise RuntimeError(f"{path}: a JSON {type(manifest).__name__}, not an object; {fix}")
    for field, kind in _KINDS.items():
        value = manifest.get(field)
        if value is not None and not isinstance(value, kind):
            raise RuntimeError(f"{path}: {field} is a {type(value).__name__}, wanted "
                               f"{'an object' if kind is dict else 'a list'}; {fix}")
    for role, names in (manifest.get("nodes") or {}).items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RuntimeError(f"{path}: nodes.{role} is not a list of names; {fix}")
    return manifest
