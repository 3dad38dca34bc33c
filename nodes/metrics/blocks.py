"""The systems' summary blocks by name: which end-of-run records each reads, and how.

A block is one key of an algorithm's ``summary.json`` (``meghdoot``, ``codd``), built from
the brokers' end-of-run records (``ev: record``, each with its ``kind`` and ``node``). The
records come from the logs, or without logs from the simulator's result; either way the
block is built by :func:`summary_block`, so a run with and without logs gives the same
block. A workload kind names its block (``block`` of
:data:`nodes.workloads.kinds.WORKLOADS`), and the figures are drawn by block name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.metrics.codd import codd_metrics
from nodes.metrics.meghdoot import meghdoot_metrics
from nodes.workloads.ops import Workload

Records = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class SummaryBlock:
    """A block: the ``kind`` of the records it reads, and the function from those records
    (of these kinds only, any order of brokers) and the run's workload to the block, a
    JSON-able dict."""

    records: tuple[str, ...]
    build: Callable[[Records, Workload], dict[str, Any]]


def _meghdoot(records: Records, workload: Workload) -> dict[str, Any]:
    return meghdoot_metrics([r for r in records if r["kind"] == "can_peer"], workload,
                            [r for r in records if r["kind"] == "can_repairs"])


def _codd(records: Records, workload: Workload) -> dict[str, Any]:
    return codd_metrics([r for r in records if r["kind"] == "codd_node"],
                        next((r for r in records if r["kind"] == "codd_root"), None))


BLOCKS: dict[str, SummaryBlock] = {
    "meghdoot": SummaryBlock(("can_peer", "can_repairs"), _meghdoot),
    "codd": SummaryBlock(("codd_node", "codd_root"), _codd),
}


def summary_block(name: str, records: Records, workload: Workload) -> dict[str, Any]:
    """Block ``name`` of :data:`BLOCKS` from ``records`` (end-of-run records of any kind:
    the block keeps those it reads) and ``workload``."""
    block = BLOCKS[name]
    return block.build([r for r in records if r["kind"] in block.records], workload)
