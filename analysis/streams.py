"""TCP stream reassembly of one flow direction, then overlay frames (:mod:`nodes.frames`)
decoded from the byte stream: the wire's own account of the messages a broker sent.

Choices:

- **Sequence numbers** are taken relative to the SYN when the capture saw it (the stream
  starts at ISN + 1), else relative to the lowest sequence number seen, with 32-bit
  wrap-around handled against the first segment (a flow under 2 GiB per direction, far
  above what a run here carries).
- **Reassembly** orders segments by stream offset (then capture time): a retransmission
  of bytes already taken is skipped, an overlap contributes only its new bytes. Bytes
  never captured (packets the capture missed, or payload cut by the snap length) make a
  **gap**; every gap is reported with its offset, length and cause.
- **Frame boundaries.** From the stream start, frames chain by their length prefixes.
  After a gap, or when the capture missed the SYN, the position of the next frame is
  unknown: decoding resumes at the first byte where a whole frame decodes (type byte,
  version, length, origin, JSON payload) and the frame after it chains on, and the
  bytes skipped are reported. A frame that does not decode in a gap-free stream (a
  protocol error) is reported the same way.
- **Times**: ``t_first`` is the capture time of the segment holding the frame's first
  byte, ``t_wall`` the latest capture time among the segments that carry it (when the
  receiver could have read it whole).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from nodes.frames import PREFIX_BYTES, FrameError, body_length, decode_body
from nodes.messages import MsgType

SEQ_MOD = 1 << 32
TCP_SYN = 0x02
_CODES = frozenset(int(t) for t in MsgType)


@dataclass(frozen=True, slots=True)
class Segment:
    """One captured TCP segment of a flow direction."""

    t_wall: float
    seq: int
    flags: int
    payload_len: int  # from the headers
    data: bytes  # what was captured of the payload (may be shorter)


@dataclass
class _Run:
    """Contiguous captured bytes from stream offset ``start``; ``ends`` and ``times`` are
    the end offset and capture time of each segment that supplied them, in offset order."""

    start: int
    data: bytearray = field(default_factory=bytearray)
    ends: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass(frozen=True, slots=True)
class WireFrame:
    """One overlay frame decoded from the stream."""

    offset: int  # stream offset of the length prefix
    frame_bytes: int  # prefix included
    t_first: float
    t_wall: float
    type: str
    msg_id: int
    origin: str
    hops: int
    t_pub: float | None


@dataclass(frozen=True, slots=True)
class StreamProblem:
    """Stream bytes that were not turned into frames, and why."""

    offset: int
    bytes: int
    what: str


def _relative(seq: int, ref: int) -> int:
    """``seq`` relative to ``ref`` as a signed 32-bit distance (wrap-around safe)."""
    return (seq - ref + SEQ_MOD // 2) % SEQ_MOD - SEQ_MOD // 2


def reassemble(segments: Sequence[Segment]) -> tuple[list[_Run], list[StreamProblem], bool]:
    """Contiguous runs of captured stream bytes, the gaps between them, and whether the
    SYN was seen (so the first run starts at a frame boundary)."""
    if not segments:
        return [], [], False
    ref = segments[0].seq
    syns = [s for s in segments if s.flags & TCP_SYN]
    with_data = [s for s in segments if s.payload_len > 0]
    if syns:
        base = _relative(syns[0].seq, ref) + 1  # the SYN takes one sequence number
    elif with_data:
        base = min(_relative(s.seq, ref) for s in with_data)
    else:
        return [], [], False
    ordered = sorted(((_relative(s.seq, ref) - base, s.t_wall, i) for i, s in
                      enumerate(with_data)))
    runs: list[_Run] = []
    gaps: list[StreamProblem] = []
    cursor = 0
    current: _Run | None = None
    for pos, t, i in ordered:
        seg = with_data[i]
        end = pos + seg.payload_len
        if end <= cursor:
            continue  # a retransmission of bytes already taken (or already given up)
        if pos > cursor:
            gaps.append(StreamProblem(cursor, pos - cursor, "not captured (missing packets)"))
            current, cursor = None, pos
        captured_end = pos + len(seg.data)
        if captured_end > cursor:
            if current is None:
                current = _Run(cursor)
                runs.append(current)
            current.data += seg.data[cursor - pos:]
            current.ends.append(captured_end)
            current.times.append(t)
            cursor = captured_end
        if captured_end < end:
            gaps.append(StreamProblem(cursor, end - cursor, "cut by the snap length"))
            current, cursor = None, end
    return runs, gaps, bool(syns)


def _frame_at(run: _Run, pos: int) -> tuple[int, WireFrame] | None:
    """The frame whose prefix starts at stream offset ``pos`` of ``run`` if it lies
    whole in the run and decodes; else None."""
    rel = pos - run.start
    if rel + PREFIX_BYTES > len(run.data):
        return None
    try:
        n = body_length(bytes(run.data[rel:rel + PREFIX_BYTES]))
        end = rel + PREFIX_BYTES + n
        if end > len(run.data):
            return None
        msg = decode_body(bytes(run.data[rel + PREFIX_BYTES:end]))
    except FrameError:
        return None
    first = bisect.bisect_right(run.ends, pos)
    last = bisect.bisect_left(run.ends, run.start + end)
    t_pub = msg.payload.get("t_pub")
    frame = WireFrame(pos, PREFIX_BYTES + n, run.times[first],
                      max(run.times[first:last + 1]), msg.type.name,
                      msg.msg_id, msg.origin, msg.hops,
                      float(t_pub) if isinstance(t_pub, int | float) else None)
    return run.start + end, frame


def _resync(run: _Run, pos: int) -> int | None:
    """The first offset at or after ``pos`` where a whole frame decodes and the next one
    chains on (or the run ends): a cheap type-byte test first (the version byte is left to
    :func:`~nodes.frames.decode_body`, which knows every version), a full decode of the
    candidates that pass."""
    data, start = run.data, run.start
    for rel in range(pos - start, len(data) - PREFIX_BYTES - 1):
        if data[rel + PREFIX_BYTES + 1] not in _CODES:
            continue
        got = _frame_at(run, start + rel)
        if got is None:
            continue
        nxt = got[0]
        if nxt == run.end or _frame_at(run, nxt) is not None or _frame_runs_past(run, nxt):
            return start + rel
    return None


def decode_stream(segments: Sequence[Segment]) -> tuple[list[WireFrame], list[StreamProblem]]:
    """The overlay frames of one flow direction, and what could not be decoded."""
    runs, problems, syn_seen = reassemble(segments)
    frames: list[WireFrame] = []
    for k, run in enumerate(runs):
        pos = run.start
        aligned = syn_seen and run.start == 0  # else the first frame start is unknown
        while pos < run.end:
            if not aligned:
                nxt = _resync(run, pos)
                if nxt is None:
                    problems.append(StreamProblem(pos, run.end - pos,
                                                  "no frame boundary found after a gap"))
                    break
                if nxt > pos:
                    problems.append(StreamProblem(pos, nxt - pos,
                                                  "skipped to the next frame boundary"))
                pos, aligned = nxt, True
            got = _frame_at(run, pos)
            if got is not None:
                pos, frame = got
                frames.append(frame)
                continue
            if _frame_runs_past(run, pos):
                cause = ("frame continues into a gap" if k < len(runs) - 1 or
                         any(p.offset >= run.end for p in problems)
                         else "stream ends inside a frame")
                problems.append(StreamProblem(pos, run.end - pos, cause))
                break
            problems.append(StreamProblem(pos, 0, "frame does not decode"))
            aligned = False
            pos += 1
    problems.sort(key=lambda p: p.offset)
    return frames, problems


def _frame_runs_past(run: _Run, pos: int) -> bool:
    """Whether the frame announced at ``pos`` is cut by the end of ``run`` (as opposed to
    not decoding at all)."""
    rel = pos - run.start
    if rel + PREFIX_BYTES > len(run.data):
        return True
    try:
        n = body_length(bytes(run.data[rel:rel + PREFIX_BYTES]))
    except FrameError:
        return False
    return rel + PREFIX_BYTES + n > len(run.data)
