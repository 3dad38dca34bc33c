"""The connections' frame protocol: whatever the chunks a stream arrives in, it hands over
exactly the frames a frame-at-a-time reader would, in order, then the same error."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.emulated.frame_protocol import CLOSED_BY_PEER, FrameProtocol
from nodes.emulated.read_budget import SMALL_BODY_BYTES, ReadBudget
from nodes.emulated.runtime import BodyBound, Violation
from nodes.frames import PREFIX_BYTES, FrameError, decode_body, encode
from nodes.messages import Message, MsgType


def _frames(sizes: list[int]) -> list[bytes]:
    return [encode(Message(MsgType.PUBLISH, i + 1, "p", 0, {"blob": "x" * n}))
            for i, n in enumerate(sizes)]


class _Transport(asyncio.Transport):
    """The reading side of a transport: whether the protocol has paused it."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading


async def _feed(chunks: list[bytes], bound: BodyBound | None = None,
                gate: asyncio.Event | None = None) -> tuple[list[Message], FrameProtocol]:
    """Feed ``chunks`` and the stream's end to a FrameProtocol as a transport would (no
    data while it has paused reading); the messages handed over, and the protocol."""
    transport = _Transport()
    got: list[Message] = []
    frames = FrameProtocol(transport, lambda msg, size: got.append(msg), gate=gate, bound=bound)
    for chunk in chunks:
        while not transport.reading and not frames.done.done():
            await asyncio.sleep(0.01)
        frames.data_received(chunk)
    while not transport.reading and not frames.done.done():
        await asyncio.sleep(0.01)
    frames.eof_received()
    await asyncio.wait([frames.done], timeout=5)
    return got, frames


async def _read_all(chunks: list[bytes], bound: BodyBound | None = None
                    ) -> tuple[list[Message], str | None]:
    """Every message handed over for a stream arriving in ``chunks``, and the error that
    ended it (None for a clean end)."""
    got, frames = await _feed(chunks, bound)
    try:
        assert frames.done.result() == CLOSED_BY_PEER
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
    assert budget.free_bytes == budget.total_bytes  # given back once the body was read
    too_small = BodyBound(ReadBudget(SMALL_BODY_BYTES), 0.2)
    with pytest.raises(Violation, match="read budget"):
        asyncio.run(_read_all([b"".join(frames)], too_small))


def test_a_large_body_that_stalls_is_cut_off_and_gives_its_share_back() -> None:
    frame = _frames([SMALL_BODY_BYTES + 1000])[0]
    budget = ReadBudget(4 * SMALL_BODY_BYTES)

    async def stalled() -> FrameProtocol:
        frames = FrameProtocol(_Transport(), lambda msg, size: None,
                               bound=BodyBound(budget, 0.2))
        frames.data_received(frame[:1000])  # and then nothing more
        await asyncio.wait([frames.done], timeout=5)
        return frames

    frames = asyncio.run(stalled())
    with pytest.raises(Violation, match="did not arrive"):
        frames.done.result()
    assert budget.free_bytes == budget.total_bytes


def test_a_clear_gate_stops_reading_until_it_opens() -> None:
    """Backpressure: past a clear gate nothing is handed on and the transport stops
    reading; once the gate opens, the frames that waited follow in order."""
    frames = _frames([10, 20, 30])

    async def gated() -> tuple[list[int], bool, list[int]]:
        gate = asyncio.Event()
        transport = _Transport()
        got: list[Message] = []
        proto = FrameProtocol(transport, lambda msg, size: got.append(msg), gate=gate)
        proto.data_received(b"".join(frames))
        before, reading = [m.msg_id for m in got], transport.reading
        gate.set()
        await asyncio.sleep(0.01)
        return before, reading, [m.msg_id for m in got]

    before, reading, after = asyncio.run(gated())
    assert before == [] and not reading
    assert after == [1, 2, 3]


def test_read_frames_takes_over_a_stream_with_what_its_reader_holds(tmp_path) -> None:
    """On a real connection: the frames that arrived with the first one (in the stream
    reader's buffer when the protocol takes over) and those after it are all handed on,
    in order, and the peer's close ends the stream cleanly."""
    from nodes.emulated.frame_protocol import read_frames
    from nodes.emulated.runtime import read_message
    from nodes.logs import JsonlLog

    frames = _frames([10, 20, 30, 40])
    log = JsonlLog(tmp_path / "x.jsonl", "x")

    async def run() -> tuple[int, list[int], str]:
        result: asyncio.Future[tuple[int, list[int], str]] = asyncio.Future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first = await read_message(reader)
            assert first is not None
            await asyncio.sleep(0.05)  # the rest waits in the reader's buffer meanwhile
            got: list[int] = []
            reason = await read_frames("peer", reader, writer, log,
                                       lambda msg, size: got.append(msg.msg_id))
            result.set_result((first.msg_id, got, reason))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(frames[:3]))
        await asyncio.sleep(0.2)
        writer.write(frames[3])
        writer.close()
        out = await asyncio.wait_for(result, 5)
        server.close()
        return out

    first, got, reason = asyncio.run(run())
    log.close()
    assert (first, got, reason) == (1, [2, 3, 4], CLOSED_BY_PEER)
