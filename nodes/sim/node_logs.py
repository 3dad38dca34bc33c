"""The per-node JSON-lines logs of a simulated run (the records the emulated runtime
writes, so analysis does not care which runtime produced a run)."""

from __future__ import annotations

import resource
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nodes.logs import Ev, JsonlLog
from nodes.runfolder import log_path
from nodes.sim.engine import SIM_EPOCH_S

# Log files kept open at once (others are reopened in append mode): half the soft limit on
# open files, 512..4096, so a run of a few thousand nodes does not reopen a file per record.
MAX_OPEN_LOGS = max(512, min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2))

# A writer of one record: (node, event, simulated time in s, fields).
LogFn = Callable[..., None]


class NodeLogs:
    """One JSON-lines log per node, at most MAX_OPEN_LOGS files open at a time."""

    def __init__(self, out_dir: Path, nodes: Sequence[str]) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self._dir = out_dir
        self._open: dict[str, JsonlLog] = {}
        for node in nodes:
            # JsonlLog appends; start every file empty so reruns are byte-identical.
            log_path(out_dir, node).write_bytes(b"")

    def write(self, node: str, ev: Ev, t_s: float, **fields: Any) -> None:
        log = self._open.get(node)
        if log is None:
            if len(self._open) >= MAX_OPEN_LOGS:
                self._open.pop(next(iter(self._open))).close()
            log = self._open[node] = JsonlLog(log_path(self._dir, node), node)
        log.write(ev, t_s, SIM_EPOCH_S + t_s, **fields)

    def close(self) -> None:
        for log in self._open.values():
            log.close()
        self._open.clear()
