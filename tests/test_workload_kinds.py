"""The workload kinds' registry: each kind describes itself, and the plan, the runners and
the figures ask it instead of branching on a kind's name."""

from __future__ import annotations

from pathlib import Path

from analysis.block_figures import BLOCK_FIGURES, draw_blocks
from experiments.plan import compile_plan
from experiments.plan_text import format_plan
from experiments.spec import load_spec
from nodes.cores import CORES
from nodes.metrics.blocks import BLOCKS
from nodes.workloads.kinds import WORKLOADS


def test_every_kind_is_served_and_names_blocks_that_exist() -> None:
    served = {info.workload for info in CORES.values()}
    for name, kind in WORKLOADS.items():
        assert kind.name == name == kind.defaults["kind"]
        assert kind.serves in served, name
        if kind.block is not None:
            assert kind.block in BLOCKS and kind.block in BLOCK_FIGURES, name


def test_the_plan_text_names_the_kyra_example_not_bulk() -> None:
    """The text once labelled every kind it did not know as a bulk depth sweep."""
    text = format_plan(compile_plan(load_spec("kyra-example", []), netem=False))
    (line,) = [x for x in text.splitlines() if x.startswith("workload")]
    assert line.startswith("workload kyra-example: events [9] published at server A"), line


def test_a_run_draws_only_the_blocks_its_summaries_have(tmp_path: Path) -> None:
    assert draw_blocks({"snr": {"delivered": 3}, "idr": {"delivered": 3}}, tmp_path) == []
    assert list(tmp_path.iterdir()) == []
