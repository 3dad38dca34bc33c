"""The broker's batched reader: whatever the chunks a stream arrives in, it hands over
exactly the frames a frame-at-a-time reader would, in order, then the same error."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.emulated.read_budget import SMALL_BODY_BYTES, ReadBudget
from nodes.emulated.runtime import BodyBound, FrameReader, Violation
from nodes.frames import PREFIX_BYTES, FrameError, decode_body, encode
from nodes.messages import Message, MsgType


def _frames(sizes: list[int]) -> list[bytes]:
    return [encode(Message(MsgType.PUBLISH, i + 1, "p", 0, {"blob": "x" * n}))
            for i, n in enumerate(sizes)]


async def _read_all(chunks: list[bytes], bound: BodyBound | None = None
                    ) -> tuple[list[Message], str | None]:
    """Every message FrameReader hands over for a stream arriving in ``chunks``, and the
    error that ended it (None for a clean end)."""
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    frames = FrameReader(reader, bound)
    got: list[Message] = []
    try:
        while bodies := await frames.bodies():
            got.extend(decode_body(b) for b in bodies)
    except FrameError as exc:
        return got, str(exc)
    return got, None


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if b > a]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=30),
       st.lists(st.integers(0, 10**6), max_size=12))
def test_any_chunking_gives_the_same_frames(sizes: list[int], cuts: list[int]) -> None:
    frames = _frames(sizes)
    got, error = asyncio.run(_read_all(_cut(b"".join(frames), cuts)))
    assert error is None
    assert got == [decode_body(f[PREFIX_BYTES:]) for f in frames]


def test_frames_before_a_bad_prefix_are_handed_over_first() -> None:
    frames = _frames([10, 20])
    bad = (2**31).to_bytes(PREFIX_BYTES, "big")  # far over the frame limit
    got, error = asyncio.run(_read_all([b"".join(frames) + bad]))
    assert [m.msg_id for m in got] == [1, 2]
    assert error is not None and "exceeds" in error


@pytest.mark.parametrize(("tail", "why"), [(3, "inside a length prefix"),
                                           (PREFIX_BYTES + 5, "truncated frame")])
def test_a_stream_cut_inside_a_frame_is_a_truncated_frame(tail: int, why: str) -> None:
    frames = _frames([10, 50])
    got, error = asyncio.run(_read_all([frames[0] + frames[1][:tail]]))
    assert [m.msg_id for m in got] == [1]
    assert error is not None and why in error


def test_a_large_frame_waits_for_its_reservation_and_keeps_what_follows() -> None:
    """A body over SMALL_BODY_BYTES is read only with a share of the read budget, even
    when it arrived whole in one chunk with more frames after it."""
    frames = _frames([10, SMALL_BODY_BYTES + 1000, 30])
    budget = ReadBudget(4 * SMALL_BODY_BYTES)
    got, error = asyncio.run(_read_all([b"".join(frames)], BodyBound(budget, 1.0)))
    assert error is None and [m.msg_id for m in got] == [1, 2, 3]
    too_small = BodyBound(ReadBudget(SMALL_BODY_BYTES), 0.2)
    with pytest.raises(Violation, match="read budget"):
        asyncio.run(_read_all([b"".join(frames)], too_small))
