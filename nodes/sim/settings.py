"""How one simulated run goes, beside what it simulates: :class:`SimSettings`, the one
argument :func:`nodes.sim.simulator.simulate` takes after the overlay, the workload and
the core (a run plan makes it: :func:`experiments.runs.simulated.sim_settings`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodes.sim.checkpoint import Pause
from nodes.sim.links import LinkModel
from nodes.sim.processing import Processing

# The cores' parameters: one mapping for every broker, or a function of the broker name.
ParamsArg = Mapping[str, Any] | Callable[[str], Mapping[str, Any]]
# A scheduled rate change: (t_s, broker a, broker b, bw_mbps), both directions of a-b.
RateChange = tuple[float, str, str, float]


@dataclass(frozen=True)
class SimSettings:
    """The settings of one simulated run (docs/design/simulator.md says what each models).
    Checked when made: ``window_ms`` > 0, and no ``pause`` with ``out_dir``."""

    seed: int
    """Seeds each lossy link's draws (``random.Random(f"{seed}:{src}:{dst}")``)."""
    core_params: ParamsArg | None = None
    """The cores' parameters, over ``derived`` (:func:`nodes.hosting.merge_params`)."""
    derived: Mapping[str, Mapping[str, Any]] | None = None
    """Per broker, the parameters a run plan derived from the overlay; ``None``: derived
    here (:func:`nodes.cores.overlay_params`) when the core is named, none for a factory."""
    out_dir: Path | None = None
    """Where every broker and client gets ``<node>.jsonl`` (overwritten); ``None``: no logs."""
    window_ms: float = 50.0
    """Length of a statistics window (ms): windows end at ``k * window_ms``."""
    until_s: float | None = None
    """Simulated time (s) after which no event is processed; ``None``: to the last event."""
    log_messages: bool = True
    """Per-message log records; ``False`` writes only the ``queue`` records."""
    default_bw_mbps: float | None = None
    """Rate (Mbit/s) of an overlay edge without ``bw_mbps``; ``None``: unshaped."""
    default_delay_ms: float = 0.0
    """Propagation delay (ms) of an overlay edge without ``delay_ms``."""
    default_loss_pct: float = 0.0
    """Loss (%) of an overlay edge without ``loss_pct``."""
    kill_at: Mapping[str, float] | None = None
    """Broker -> simulated time (s) it dies (CRASH ops add theirs)."""
    link_changes: Sequence[RateChange] = ()
    """Rate changes ``(t_s, a, b, bw_mbps)`` of overlay links, both directions."""
    on_demand: LinkModel | None = None
    """Links opened as cores send (the overlay's edges then optional); ``None``: fixed links."""
    processing: Processing | None = None
    """Brokers' service times and input windows; ``None``: handling takes no time."""
    progress: Callable[[float], None] | None = None
    """Called with the share of client operations done (weighted by members), at most
    every :data:`nodes.time_left.PROGRESS_EVERY_S` seconds of wall time."""
    pause: Pause | None = None
    """Stop at this wall-clock deadline and write the state (a run without logs only)."""

    def __post_init__(self) -> None:
        if self.window_ms <= 0:
            raise ValueError(f"window_ms must be > 0, got {self.window_ms}")
        if self.pause is not None and self.out_dir is not None:
            raise ValueError("a run that may pause writes no logs (out_dir must be None)")
