"""What every run's ``manifest.json`` starts with, whichever runtime writes it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

from experiments.plan import RunPlan
from experiments.spec import Spec

REPO = Path(__file__).resolve().parents[2]
# The packages whose code a run runs (the design's top-level folders).
CODE_PACKAGES = ("nodes", "topologies", "analysis", "experiments", "controller")


def git_revision() -> dict[str, Any]:
    """The repository's commit and whether tracked files differ from it."""
    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                             check=False)
        return res.stdout.strip() if res.returncode == 0 else ""
    return {"commit": git("rev-parse", "HEAD") or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def code_fingerprint() -> str:
    """A digest of the project's Python sources (every ``.py`` file of its packages,
    tracked or not, by path and content): equal only for the same code, with or without
    git (a paused run goes on only on the code it started on)."""
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            digest.update(str(path.relative_to(REPO)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return f"sha256:{digest.hexdigest()[:16]}"


def spec_as_written(spec: Spec) -> Any:
    """The resolved ``spec`` as :func:`base_manifest` puts it in a manifest once written
    (JSON types), for comparing a run folder's spec with a spec now."""
    return json.loads(json.dumps(spec.to_dict(), default=str))


def base_manifest(plan: RunPlan, run_dir: Path, runtime: str) -> dict[str, Any]:
    """The fields every manifest has: run, runtime, resolved spec and plan, seed, scale
    (the stated factor by which the paper's workload was scaled), git revision."""
    return {"run": run_dir.name, "runtime": runtime, "started": datetime.now().isoformat(),
            "spec": plan.spec.to_dict(), "plan": plan.describe(), "seed": plan.spec.seed,
            "scale": plan.spec.scale, "git": git_revision()}


def node_names(plan: RunPlan) -> dict[str, list[str]]:
    """The manifest's ``nodes``: the brokers and the workload's clients, each of which
    leaves one log per algorithm (``pubsublab analyze`` checks the folder against it)."""
    clients = plan.workload.clients if plan.workload is not None else {}
    return {"brokers": sorted(plan.overlay.nodes), "clients": sorted(clients)}


def workload_wall(manifest: dict[str, Any]) -> list[list[float]]:
    """The run's workload spans (wall-clock start and end, s), kept in its manifest's
    ``fidelity``: the seconds its CPU criterion judges."""
    return manifest.setdefault("fidelity", {}).setdefault("workload_wall", [])
