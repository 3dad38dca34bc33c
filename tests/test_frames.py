"""Frame encoding: every message round-trips (with or without a raw body); anything else
decodes to FrameError only."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodes.frames import (
    BODY_FRAME_VERSION,
    FRAME_VERSION,
    MAX_FRAME_BYTES,
    PREFIX_BYTES,
    FrameError,
    body_length,
    decode_body,
    encode,
    frame_size,
)
from nodes.messages import Message, MsgType, message_from_json, message_to_json

json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)
origins = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= 255)
messages = st.builds(
    Message,
    type=st.sampled_from(MsgType),
    msg_id=st.integers(0, 2**64 - 1),
    origin=origins,
    hops=st.integers(0, 2**16 - 1),
    payload=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
)


def decode_frame(frame: bytes) -> Message:
    """Decode one whole frame as a reader would: prefix, then exactly that many bytes."""
    n = body_length(frame[:PREFIX_BYTES])
    body = frame[PREFIX_BYTES:]
    if len(body) != n:
        raise FrameError(f"frame announces {n} body bytes, has {len(body)}")
    return decode_body(body)


def decodes_or_frame_error(frame: bytes) -> Message | None:
    """The message, or None for a FrameError; any other exception fails the test."""
    try:
        return decode_frame(frame)
    except FrameError:
        return None


@given(messages)
def test_round_trip(msg: Message) -> None:
    frame = encode(msg)
    assert body_length(frame[:PREFIX_BYTES]) == len(frame) - PREFIX_BYTES
    assert decode_frame(frame) == msg


@given(messages)
def test_message_json_round_trip(msg: Message) -> None:
    assert message_from_json(message_to_json(msg)) == msg


@given(messages, st.data())
def test_truncated_frames(msg: Message, data: st.DataObject) -> None:
    frame = encode(msg)
    assert decodes_or_frame_error(frame[: data.draw(st.integers(0, len(frame) - 1))]) is None
    body = frame[PREFIX_BYTES:]
    cut = data.draw(st.integers(0, len(body) - 1))
    try:
        got = decode_body(body[:cut])
    except FrameError:
        return
    # Only a cut exactly where the payload starts leaves a valid (payload-less) body.
    payload_at = len(encode(Message(msg.type, 0, msg.origin))) - PREFIX_BYTES - len(b"{}")
    assert cut == payload_at
    assert got == Message(msg.type, msg.msg_id, msg.origin, msg.hops, {})


@settings(max_examples=300)
@given(st.binary(max_size=300), st.sampled_from(MsgType), st.booleans())
def test_random_bodies(rest: bytes, mtype: MsgType, plausible: bool) -> None:
    # Half the bodies start with a valid version and type, so the fuzz reaches the
    # origin and payload decoding instead of stopping at the first byte.
    body = bytes([1, mtype]) + rest if plausible else rest
    with contextlib.suppress(FrameError):
        decode_body(body)


@settings(max_examples=300)
@given(messages, st.data())
def test_mutated_frames(msg: Message, data: st.DataObject) -> None:
    frame = bytearray(encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    decodes_or_frame_error(bytes(frame))


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"[" * 100_000, "nesting deeper than the interpreter's recursion limit"),
        (b'{"a":' + b"1" * 5000 + b"}", "an integer over Python's digit limit"),
        (b"\xff\xfe{", "bytes that are not UTF-8"),
        (b"[1, 2]", "JSON that is not an object"),
    ],
)
def test_hostile_payloads(payload: bytes, why: str) -> None:
    body = encode(Message(MsgType.PUBLISH, 1, "x"))[PREFIX_BYTES:-2] + payload  # drop "{}"
    with pytest.raises(FrameError):
        decode_body(body)


def test_length_prefix_checks() -> None:
    with pytest.raises(FrameError):
        body_length((MAX_FRAME_BYTES + 1).to_bytes(PREFIX_BYTES, "big"))
    with pytest.raises(FrameError):
        body_length(b"\x00\x01")  # a prefix cut short
    assert body_length(MAX_FRAME_BYTES.to_bytes(PREFIX_BYTES, "big")) == MAX_FRAME_BYTES


# ---- version 2: a raw body beside the JSON payload (bulk data slices) -----------------

bodied = st.builds(lambda m, body: Message(m.type, m.msg_id, m.origin, m.hops, m.payload, body),
                   messages, st.binary(min_size=1, max_size=2000))


@given(bodied)
def test_body_round_trip(msg: Message) -> None:
    frame = encode(msg)
    assert frame[PREFIX_BYTES] == BODY_FRAME_VERSION
    assert frame_size(msg) == len(frame)
    assert decode_frame(frame) == msg
    assert frame.endswith(msg.body)  # the body travels raw, after the payload


@given(messages)
def test_messages_without_body_keep_version_1(msg: Message) -> None:
    frame = encode(msg)
    assert frame[PREFIX_BYTES] == FRAME_VERSION
    assert frame_size(msg) == len(frame)
    # The version-1 layout: length, header, origin, then the payload as JSON that any
    # JSON reader reads back (the standard library's here, not the encoder's own).
    origin = msg.origin.encode()
    head = struct.pack("!BBHQB", 1, msg.type, msg.hops, msg.msg_id, len(origin)) + origin
    assert frame[:PREFIX_BYTES] == struct.pack("!I", len(frame) - PREFIX_BYTES)
    assert frame[PREFIX_BYTES:PREFIX_BYTES + len(head)] == head
    assert json.loads(frame[PREFIX_BYTES + len(head):]) == msg.payload


def test_a_64_kb_slice_costs_a_few_dozen_bytes_of_framing() -> None:
    body = bytes(range(256)) * 256
    msg = Message(MsgType.DATA, 7, "pub-pc1", 3, {"topic": "bulk", "index": 5}, body)
    frame = encode(msg)
    assert len(frame) - len(body) < 100
    assert decode_frame(frame).body == body


@given(bodied, st.data())
def test_truncated_body_frames(msg: Message, data: st.DataObject) -> None:
    body = encode(msg)[PREFIX_BYTES:]
    cut = data.draw(st.integers(0, len(body) - 1))
    try:
        got = decode_body(body[:cut])
    except FrameError:
        return
    # A cut inside the body still decodes: the body is the rest of the frame (the length
    # prefix, checked by the reader, is what guards a stream against cut frames).
    assert got.payload == msg.payload and msg.body.startswith(got.body)


@pytest.mark.parametrize("plen", [2**32 - 1, 10_000])
def test_payload_length_past_the_frame(plen: int) -> None:
    body = bytes([BODY_FRAME_VERSION, MsgType.DATA]) + bytes(10) + b"\x01x"
    body += plen.to_bytes(4, "big") + b"{}"
    with pytest.raises(FrameError, match="runs past"):
        decode_body(body)


@settings(max_examples=300)
@given(st.binary(max_size=300), st.sampled_from(MsgType))
def test_random_version_2_bodies(rest: bytes, mtype: MsgType) -> None:
    with contextlib.suppress(FrameError):
        decode_body(bytes([BODY_FRAME_VERSION, mtype]) + rest)
