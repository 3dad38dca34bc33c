"""The figures of `pubsublab watch`, updated one log record at a time.

:class:`LiveState` takes the records :mod:`analysis.live` reads (from a live run or a
replay, in the order they come) and answers, at any moment, with a :class:`Snapshot`:

- **per overlay link** (one direction: the output queue of ``broker`` towards
  ``neighbour``) the queue length of its last statistics window and whether it is
  overloaded. The verdict is the Link Status Table's own rule
  (:class:`nodes.cores.congestion.LinkStatusTable`, with the algorithm's ``theta`` and
  ``ce_min`` or their defaults), so under IDR it is what the broker itself decided, and
  under any other algorithm what IDR would have. A throttled link's queue fills and
  drains in bursts (a window with nothing out, then one that empties it), so one window
  says little to a person who looks twice a second: a link shows as overloaded when any
  of its windows in the last ``hold_s`` seconds was, with how many;
- **IDR's decisions** (``idr`` records) by the paper's case, in total and in the last
  ``window_s`` seconds, and the last one;
- **deliveries so far** (brokers' ``deliver`` records: a notification handed to a
  subscriber) against the oracle's expected deliveries, both of the whole workload and of
  the publications that have entered the overlay so far (a broker's ``recv`` of a
  PUBLISH from a client), with duplicates and deliveries the oracle did not expect;
- **notification delay** p50/p95/max over the deliveries of the last ``window_s``
  seconds, from publication to the broker's hand-off to the subscriber (the client's
  own receipt, which summary.json uses, is a loopback hop later, and a client flushes its
  log too rarely to be read live);
- **CPU idle**, Mininet-HiFi's fidelity criterion: the runner's per-second samples
  (``cpu_idle.jsonl``), the last one and the seconds below the criterion so far.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nodes.cores.congestion import LinkStatusTable
from nodes.cores.interface import LinkWindow
from nodes.metrics.summary import MsgKey, delay_stats_ms

# What each of IDR's cases does (nodes.cores.idr), as the view names them.
IDR_CASES: dict[str, str] = {
    "i": "CIV-N on the least-queued free iLink",
    "ii": "CIV-N piggybacked on a free aLink",
    "iv": "CIV-N on the least overloaded iLink",
}


@dataclass(frozen=True)
class LinkRow:
    """One overlay link's output queue (``broker`` towards ``neighbour``) in a snapshot:
    the last window's ``queue_len`` (messages) and ``ce``, the most messages queued at the
    end of any window in the last ``hold_s`` seconds, and how many of those windows were
    overloaded."""

    broker: str
    neighbour: str
    kind: str
    queue_len: int
    ce: float
    peak_len: int
    overloaded_windows: int

    @property
    def overloaded(self) -> bool:
        return self.overloaded_windows > 0


@dataclass(frozen=True)
class Snapshot:
    """Everything the view shows at one moment; ``elapsed_s``: since the first record of
    this algorithm; delays in ms (None: no delivery in the window)."""

    elapsed_s: float
    links: list[LinkRow]
    idr_total: dict[str, int]
    idr_recent: dict[str, int]
    idr_last: dict[str, Any] | None
    delivered: int
    duplicates: int
    unexpected: int
    expected_total: int | None
    expected_so_far: int | None
    published: int
    delay_ms: dict[str, float] | None
    delay_samples: int


class _Link:
    """One link's recent windows: (t_wall, queue_len, overloaded)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.recent: deque[tuple[float, int, bool]] = deque()


class CpuIdle:
    """The runner's per-second idle-CPU samples (``idle_pct``, ``t_wall`` at the end of
    its second) of the whole run; with ``workload_wall`` (a finished run's workload spans,
    the seconds its verdict judges), which of the seconds below fell in a workload."""

    def __init__(self, min_idle_pct: float,
                 workload_wall: Sequence[tuple[float, float]] | None = None) -> None:
        self.min_idle_pct = min_idle_pct
        self.workload_wall = workload_wall
        self.samples_pct: list[float] = []
        self._ends: list[float] = []

    def take(self, rec: Mapping[str, Any]) -> None:
        self.samples_pct.append(float(rec["idle_pct"]))
        self._ends.append(float(rec.get("t_wall", 0.0)))

    @property
    def seconds_below(self) -> int:
        return sum(1 for x in self.samples_pct if x < self.min_idle_pct)

    @property
    def judged_below(self) -> int | None:
        """Of :attr:`seconds_below`, those overlapping a workload span (None without)."""
        if self.workload_wall is None:
            return None
        return sum(1 for x, t1 in zip(self.samples_pct, self._ends, strict=True)
                   if x < self.min_idle_pct
                   and any(t1 - 1.0 < b and t1 > a for a, b in self.workload_wall))


class LiveState:
    """The figures of one algorithm's run, fed record by record (see the module
    docstring).

    ``edges``: the overlay's links as (a, b, kind), each followed in both directions;
    ``expected``: the oracle's deliveries per notification (None while unknown, e.g.
    before the workload file exists, see :meth:`set_expected`); ``window_s``: the span of
    the recent delay and decision figures; ``hold_s``: how long a link stays shown as
    overloaded after an overloaded window."""

    def __init__(self, edges: Iterable[tuple[str, str, str]], *, theta: int, ce_min: float,
                 expected: Mapping[MsgKey, frozenset[str]] | None = None,
                 window_s: float = 5.0, hold_s: float = 1.0) -> None:
        self._links: dict[tuple[str, str], _Link] = {}
        self._lst: dict[str, LinkStatusTable] = {}
        for a, b, kind in edges:
            for u, v in ((a, b), (b, a)):
                self._links[(u, v)] = _Link(kind)
                self._lst.setdefault(u, LinkStatusTable(theta=theta, ce_min=ce_min))
        self.window_s = window_s
        self.hold_s = hold_s
        self.t_first: float | None = None
        self._idr_total: Counter[str] = Counter()
        self._idr_recent: deque[tuple[float, str]] = deque()
        self._idr_last: dict[str, Any] | None = None
        self._received: set[tuple[str, str, int]] = set()
        self._duplicates = 0
        self._published: set[MsgKey] = set()
        self._delays: deque[tuple[float, float]] = deque()
        self.expected: Mapping[MsgKey, frozenset[str]] | None = None
        self._delivered = self._unexpected = self._expected_so_far = 0
        self._expected_total = 0
        if expected is not None:
            self.set_expected(expected)

    def set_expected(self, expected: Mapping[MsgKey, frozenset[str]]) -> None:
        """The oracle's deliveries, once known: what was seen so far is counted against
        them."""
        self.expected = expected
        self._expected_total = sum(len(s) for s in expected.values())
        self._delivered = sum(1 for c, o, m in self._received if c in expected.get((o, m), ()))
        self._unexpected = len(self._received) - self._delivered
        self._expected_so_far = sum(len(expected.get(k, ())) for k in self._published)

    def take(self, rec: Mapping[str, Any]) -> None:
        """One broker log record (:mod:`nodes.logs`); the others are ignored."""
        t = rec["t_wall"]
        if self.t_first is None:
            self.t_first = t
        ev, node = rec.get("ev"), rec.get("node")
        if ev == "queue":
            self._take_window(node, rec, t)
        elif ev == "record" and rec.get("kind") == "idr":
            self._idr_total[rec["case"]] += 1
            self._idr_recent.append((t, rec["case"]))
            self._idr_last = {k: rec.get(k) for k in ("node", "case", "avoided", "carrier",
                                                      "civ", "origin", "msg_id", "t_wall")}
        elif ev == "deliver" and rec.get("type") == "PUBLISH":
            self._take_delivery(rec, t)
        elif ev == "recv" and rec.get("type") == "PUBLISH" and (node, rec.get("link")) \
                not in self._links:  # from a client, not over an overlay link
            key = (rec["origin"], rec["msg_id"])
            if key not in self._published:
                self._published.add(key)
                if self.expected is not None:
                    self._expected_so_far += len(self.expected.get(key, ()))

    def _take_window(self, node: str, rec: Mapping[str, Any], t: float) -> None:
        link = self._links.get((node, rec["link"]))
        if link is None:  # a client's queue, not an overlay link's
            return
        lst = self._lst[node]
        lst.update({rec["link"]: LinkWindow(count_in=rec["count_in"],
                                            count_out=rec["count_out"],
                                            queue_len=rec["queue_len"])})
        link.recent.append((t, rec["queue_len"], lst.overloaded(rec["link"])))

    def _take_delivery(self, rec: Mapping[str, Any], t: float) -> None:
        key = (rec["link"], rec["origin"], rec["msg_id"])
        if key in self._received:
            self._duplicates += 1
        else:
            self._received.add(key)
            if self.expected is not None:
                if key[0] in self.expected.get(key[1:], ()):
                    self._delivered += 1
                else:
                    self._unexpected += 1
        if rec.get("t_pub") is not None:
            self._delays.append((t, t - rec["t_pub"]))

    def snapshot(self, now: float) -> Snapshot:
        """The figures at ``now`` (``t_wall`` scale: the wall clock of a live run, the
        replay's clock of a replay)."""
        rows = []
        for (broker, neighbour), link in sorted(self._links.items()):
            while len(link.recent) > 1 and link.recent[0][0] < now - self.hold_s:
                link.recent.popleft()  # the last window stays: it is the current state
            held = [w for w in link.recent if w[0] >= now - self.hold_s]
            status = self._lst[broker].status(neighbour)
            rows.append(LinkRow(broker, neighbour, link.kind, status.queue_len, status.ce,
                                max((q for _, q, _ in held), default=status.queue_len),
                                sum(1 for *_, over in held if over)))
        # Logs read live come a broker at a time, not in time order: the deques are
        # trimmed from the left as far as they are ordered, and filtered.
        cutoff = now - self.window_s
        while self._delays and self._delays[0][0] < cutoff:
            self._delays.popleft()
        while self._idr_recent and self._idr_recent[0][0] < cutoff:
            self._idr_recent.popleft()
        delays = [d for t, d in self._delays if t >= cutoff]
        known = self.expected is not None
        return Snapshot(
            elapsed_s=0.0 if self.t_first is None else max(0.0, now - self.t_first),
            links=rows, idr_total=dict(self._idr_total),
            idr_recent=dict(Counter(c for t, c in self._idr_recent if t >= cutoff)),
            idr_last=self._idr_last,
            delivered=self._delivered if known else len(self._received),
            duplicates=self._duplicates, unexpected=self._unexpected,
            expected_total=self._expected_total if known else None,
            expected_so_far=self._expected_so_far if known else None,
            published=len(self._published),
            delay_ms=delay_stats_ms(delays), delay_samples=len(delays))
