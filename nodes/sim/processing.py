"""A broker's processing capacity, as the simulator models it (:func:`nodes.sim.simulator.simulate`,
``processing=``).

Without this model a simulated broker handles every message in no time, so nothing ever
waits at a broker, however fast messages come: the simulator's notification delay on a
burst stays at the links' figures while an emulated broker that cannot keep up lets a
backlog grow. With it, each broker is one server with a FIFO input buffer:

- **Service time.** Handling a message (a frame from another broker or a client's
  operation) takes ``base_us + per_match_us x n`` microseconds of the broker's time,
  where n is the number of notifications the handling hands on: the Deliver and Send
  actions the core returns. (Cores do not report how many subscriptions matched; in the
  calibration each matched subscription is exactly one delivery, so n is the figure the
  calibration's per-subscription cost was fitted against.) A broker whose host is
  CPU-limited to a share f of a core (``broker.cpu``) takes 1/f times as long. Timers,
  statistics windows and link events are handled in no time: they are rare beside
  messages, and a core's control logic must not wait behind the backlog it reacts to.
- **Input buffer and backpressure.** A broker accepts at most ``buffer_msgs`` frames
  from other brokers that are in flight to it or waiting in its buffer (a receive window
  shared by its connections, as a host's socket buffers are bounded); a sender's
  frame that finds the window full stays in the sender's output queue, so the upstream
  queue (what IDR-style cores watch) grows, as it does over TCP. Window space frees when
  the broker starts handling a frame, and goes to the waiting links in turn. Clients'
  operations join the buffer without a bound (a client's own send queue is not modelled).

The default service time is the emulated broker's measured cost when saturated,
``nodes/sim/calibration.json`` (written by ``pubsublab bench broker``, which says why the
saturated cost and not the cost at a moderate rate).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CALIBRATION_FILE = Path(__file__).resolve().parent / "calibration.json"
# Frames a broker takes in before its senders must hold theirs. An emulated broker
# that cannot keep up leaves its backlog in its socket's receive queue, which Linux grows
# to megabytes: 12,000 to 46,000 frames of about 100 bytes at the end of 5 s of overload
# in `pubsublab bench broker`'s saturation runs. A spec that wants the upstream output
# queues to grow early sets a small window (and broker.write_buffer_bytes for the
# emulated runtime).
DEFAULT_BUFFER_MSGS = 16384


@dataclass(frozen=True)
class ServiceTime:
    """What handling one message costs a broker with a whole core, in microseconds:
    ``base_us`` plus ``per_match_us`` per notification handed on."""

    base_us: float
    per_match_us: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_us", "per_match_us"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf:
                raise ValueError(f"service time {name}: want a number of us >= 0, got {v!r}")


@dataclass(frozen=True)
class Processing:
    """The processing model of one simulated run (module docstring): ``service`` for
    every broker unless ``per_broker`` names it, each divided by the broker's
    ``cpu_share`` (default 1), and the input window ``buffer_msgs``."""

    service: ServiceTime
    per_broker: Mapping[str, ServiceTime] = field(default_factory=dict)
    cpu_share: Mapping[str, float] = field(default_factory=dict)
    buffer_msgs: int = DEFAULT_BUFFER_MSGS

    def __post_init__(self) -> None:
        if isinstance(self.buffer_msgs, bool) or not isinstance(self.buffer_msgs, int) \
                or self.buffer_msgs < 1:
            raise ValueError(f"buffer_msgs: want an integer >= 1, got {self.buffer_msgs!r}")
        for b, f in self.cpu_share.items():
            if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 1:
                raise ValueError(f"cpu_share of {b}: want a share of one core in (0, 1], "
                                 f"got {f!r}")

    def seconds(self, broker: str) -> tuple[float, float]:
        """``broker``'s service time as (base, per notification) in seconds."""
        s = self.per_broker.get(broker, self.service)
        f = self.cpu_share.get(broker, 1.0)
        return s.base_us / f / 1e6, s.per_match_us / f / 1e6


def calibrated_service(path: Path = CALIBRATION_FILE) -> ServiceTime:
    """The emulated broker's measured per-message cost, as written by ``pubsublab bench
    broker`` (``base_us``, ``per_matched_subscription_us``)."""
    try:
        data = json.loads(path.read_text())
        return ServiceTime(float(data["base_us"]), float(data["per_matched_subscription_us"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: no usable calibration ({exc}); run "
                         "'sudo pubsublab bench broker' to measure one") from exc
