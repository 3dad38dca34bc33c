"""``pubsublab specs``: the shipped experiment specs, each with its description."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "specs"
HELP = "list the shipped experiment specs with their one-line descriptions"


def add_parser(sub: Any) -> None:
    """Add the ``specs`` subcommand to ``sub`` (the subparsers action)."""
    s = sub.add_parser(NAME, description="The specs shipped in experiments/specs/NAME.yaml, "
                                         "sorted by name, each with its description field: "
                                         "any NAME is a SPEC for plan, run and sim.")
    json_flag(s)
    s.set_defaults(func=run)


def _description(path: Path) -> str:
    """A spec file's ``description:`` field on one line, else its first comment line.
    Only YAML is read, nothing validated: listing stays fast and never fails on one spec's
    content (``pubsublab plan NAME`` checks it)."""
    import yaml

    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path.name}: not valid YAML: {str(exc).splitlines()[0]}") from None
    description = data.get("description") if isinstance(data, dict) else None
    if isinstance(description, str) and description.strip():
        return " ".join(description.split())
    comments = [ln.lstrip("#").strip() for ln in text.splitlines() if ln.startswith("#")]
    return next((c for c in comments if c), "")


def shipped() -> dict[str, str]:
    """Every shipped spec's name (its file's stem), sorted, mapped to its description."""
    from experiments.spec import SPECS_DIR

    paths = sorted(SPECS_DIR.glob("*.yaml"), key=lambda p: p.stem)  # a-b before a-b-c
    return {p.stem: _description(p) for p in paths}


def run(args: argparse.Namespace) -> int:
    """Print one spec a line, the name padded (with --json one object name -> description)."""
    specs = shipped()
    width = max((len(name) for name in specs), default=0)
    emit(args, specs, "\n".join(f"{name:<{width}}  {text}" for name, text in specs.items()))
    return 0
