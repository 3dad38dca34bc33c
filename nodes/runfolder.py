"""The run folder: its layout and file names, in one place, for writers and readers alike.

Runners (emulated, simulated, bulk) write it, brokers and clients log into it, the Spark
analysis and the figures read it; none of them spells a file name of its own::

    <runs>/<stamp>-<spec>[-n]/          one run (:func:`new_run_dir`)
        manifest.json                   resolved plan, seed, git revision, probe, status
        workload.jsonl                  the exact client workload (nodes.workloads.ops)
        throttles.jsonl                 rates changed by hand during the workload
        cpu_idle.jsonl                  the machine's idle CPU share, one line a second
        controller/port_stats.jsonl     the SDN controller's port statistics, if any
        metrics/  report.html           written by `pubsublab analyze`
        <algorithm>/                    one folder per algorithm
            summary.json                the summary (nodes.metrics.summary)
            <node>.jsonl                one log per broker and client (nodes.logs)
            <broker>.status.json        a live broker's state
            <broker>.clients.status.json  a client group's exit codes
            <name>.stderr               a process's standard error
            config/<name>.json          a process's config (mode 0600: it holds the
                                        run's secret); config/<client>.ops.jsonl
            pcap/                       packet captures
            n<NN>/ failure/             bulk rounds: summary.json, rates.json, nic.json
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

RUNS_BASE = Path("runs")  # where run folders go unless a command is told otherwise
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
WORKLOAD = "workload.jsonl"
THROTTLES = "throttles.jsonl"
CPU_IDLE = "cpu_idle.jsonl"
SWEEP = "sweep.json"
PAUSED = "paused.json"  # a simulated run that paused: how to go on (experiments.runs.simulated)
PAUSED_STATE = "simulator.pickle"  # per algorithm: the paused simulator (nodes.sim.checkpoint)
RATES = "rates.json"
NIC = "nic.json"
CONFIG_DIR = "config"
PCAP_DIR = "pcap"
METRICS_DIR = "metrics"
REPORT = "report.html"
CONTROLLER_DIR = "controller"
# `pubsublab reproduce PAPER`: one folder with a run folder per experiment point, the
# index of those runs, and the page.
REPRODUCTION_INDEX = "reproduction.json"
REPRODUCTION_PAGE = "reproduction.html"


def log_path(folder: Path | str, node: str) -> Path:
    """The JSON-lines log of broker or client ``node``."""
    return Path(folder) / f"{node}.jsonl"


def status_path(folder: Path | str, name: str) -> Path:
    """The status file of a broker (or of a client group, ``<broker>.clients``)."""
    return Path(folder) / f"{name}.status.json"


def stderr_path(folder: Path | str, name: str) -> Path:
    """Where a process started for ``name`` writes its standard error."""
    return Path(folder) / f"{name}.stderr"


def config_path(folder: Path | str, name: str) -> Path:
    """The config file handed to the process started for ``name``."""
    return Path(folder) / CONFIG_DIR / f"{name}.json"


def ops_path(folder: Path | str, client: str) -> Path:
    """A client's scheduled operations (JSON lines)."""
    return Path(folder) / CONFIG_DIR / f"{client}.ops.jsonl"


def new_run_dir(base: Path, name: str) -> Path:
    """A fresh ``<base>/<stamp>-<name>[-n]`` folder (absolute: configs handed to processes
    on Mininet hosts carry its paths)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = base.resolve()
    run_dir = base / f"{stamp}-{name}"
    n = 1
    while run_dir.exists():
        n += 1
        run_dir = base / f"{stamp}-{name}-{n}"
    run_dir.mkdir(parents=True)
    return run_dir


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented, key-sorted JSON, through a temporary file and a rename, so a
    reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def write_config(path: Path, config: dict[str, Any]) -> None:
    """A process's config file, readable and writable by its owner only (it holds the
    run's secret, :mod:`nodes.emulated.auth`), whatever the umask and even if the file existed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(config, indent=1, sort_keys=True))


def read_json(path: Path | str) -> Any:
    """The JSON document in ``path``, or ``None`` if there is no such file."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_summary(folder: Path, summary: dict[str, Any]) -> None:
    write_json(folder / SUMMARY, summary)


def read_summary(folder: Path) -> dict[str, Any] | None:
    return read_json(folder / SUMMARY)


def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    write_json(run_dir / MANIFEST, manifest)


def read_manifest(run_dir: Path) -> dict[str, Any] | None:
    return read_json(run_dir / MANIFEST)


def algorithm_dirs(run_dir: Path) -> list[Path]:
    """The algorithm folders of a run: those holding a config folder or a summary."""
    return sorted(d for d in run_dir.iterdir()
                  if d.is_dir() and ((d / CONFIG_DIR).is_dir() or (d / SUMMARY).exists()))
