"""The records of connections a broker turns away (``link`` ``refused`` and ``error``
``stage: handshake``), rate-limited so that a flood of them cannot fill the log.

Each refusal reason, and handshake errors as one kind, may write :data:`BURST_RECORDS`
records at once and :data:`RECORDS_PER_S` a second after that (a token bucket); once the
log is past its bound (:class:`nodes.logs.JsonlLog`) none. The rest are counted, and the
counts written at most once a second and at the end as a ``record`` of kind
``admission_suppressed`` (``refused``: {reason: n}, ``handshake_errors``: n, both since
the previous such record), which the summary adds to the records it counts.
"""

from __future__ import annotations

import time
from typing import Any

from nodes.logs import Ev, JsonlLog

BURST_RECORDS = 50
RECORDS_PER_S = 5.0
HANDSHAKE = "handshake"  # the bucket of handshake errors (their reasons are free text)


class AdmissionLog:
    """Writes refusals and handshake errors to ``log`` within the rate above."""

    def __init__(self, log: JsonlLog) -> None:
        self._log = log
        self._tokens: dict[str, tuple[float, float]] = {}  # key: (tokens, at monotonic s)
        self._suppressed: dict[str, int] = {}

    def refused(self, **fields: Any) -> None:
        """A ``link`` record ``state: refused`` with ``fields`` (``reason`` among them)."""
        self._write(fields["reason"], Ev.LINK, state="refused", **fields)

    def handshake_error(self, **fields: Any) -> None:
        """An ``error`` record ``stage: handshake`` with ``fields``."""
        self._write(HANDSHAKE, Ev.ERROR, stage="handshake", **fields)

    def _write(self, key: str, ev: Ev, **fields: Any) -> None:
        now_s = time.monotonic()
        tokens, then_s = self._tokens.get(key, (float(BURST_RECORDS), now_s))
        tokens = min(float(BURST_RECORDS), tokens + (now_s - then_s) * RECORDS_PER_S)
        if tokens < 1.0 or self._log.full:
            self._tokens[key] = (tokens, now_s)
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._tokens[key] = (tokens - 1.0, now_s)
        self._log.write(ev, now_s, time.time(), **fields)

    def write_counts(self) -> None:
        """The counts of what was not written since the last call, if any, as a record."""
        if not self._suppressed:
            return
        counts, self._suppressed = self._suppressed, {}
        handshake_errors = counts.pop(HANDSHAKE, 0)
        self._log.write(Ev.RECORD, time.monotonic(), time.time(), kind="admission_suppressed",
                        refused=dict(sorted(counts.items())), handshake_errors=handshake_errors)
