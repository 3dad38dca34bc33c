"""Binary frame encoding of overlay messages (version 1).

A frame is a 4-byte big-endian length (of everything after it) followed by::

    version  u8    (FRAME_VERSION)
    type     u8    (MsgType code)
    hops     u16
    msg_id   u64
    origin   u8 length + UTF-8 bytes (1..255)
    payload  compact JSON (UTF-8), the rest of the frame

The length prefix lets a reader split a TCP byte stream into frames; the version byte
lets a later encoding coexist. Anything that does not decode raises :class:`FrameError`,
which the runtime logs before dropping the connection.
"""

from __future__ import annotations

import json
import struct

from nodes.messages import Message, MsgType

FRAME_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024  # a bulk slice of 64 KB fits many times over
_LEN = struct.Struct("!I")
_HEAD = struct.Struct("!BBHQB")


class FrameError(ValueError):
    """A frame that cannot be decoded (bad version, type, length or payload)."""


def encode(msg: Message) -> bytes:
    """The frame for ``msg``, length prefix included."""
    origin = msg.origin.encode()
    if not 1 <= len(origin) <= 255:
        raise FrameError(f"origin must be 1..255 bytes, got {len(origin)}")
    payload = json.dumps(msg.payload, separators=(",", ":")).encode()
    body = _HEAD.pack(FRAME_VERSION, int(msg.type), msg.hops, msg.msg_id, len(origin))
    body += origin + payload
    return _LEN.pack(len(body)) + body


def frame_size(msg: Message) -> int:
    """Bytes ``msg`` takes on the wire as a frame (what the simulator serialises)."""
    return len(encode(msg))


def decode_body(body: bytes) -> Message:
    """Decode one frame body (the bytes after the length prefix)."""
    if len(body) < _HEAD.size:
        raise FrameError(f"frame body too short: {len(body)} bytes")
    version, code, hops, msg_id, olen = _HEAD.unpack_from(body)
    if version != FRAME_VERSION:
        raise FrameError(f"unknown frame version {version}")
    try:
        mtype = MsgType(code)
    except ValueError:
        raise FrameError(f"unknown message type {code}") from None
    end = _HEAD.size + olen
    if olen == 0 or len(body) < end:
        raise FrameError("truncated origin")
    try:
        origin = body[_HEAD.size : end].decode()
        payload = json.loads(body[end:]) if len(body) > end else {}
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad UTF-8, bad JSON and integers over Python's digit limit;
        # RecursionError, JSON nested deeper than the interpreter's stack allows.
        raise FrameError(f"bad origin or payload: {exc}") from None
    if not isinstance(payload, dict):
        raise FrameError("payload is not a JSON object")
    return Message(mtype, msg_id, origin, hops, payload)


def body_length(prefix: bytes) -> int:
    """The body length announced by a 4-byte prefix, checked against the limit."""
    if len(prefix) != _LEN.size:
        raise FrameError(f"length prefix must be {_LEN.size} bytes, got {len(prefix)}")
    (n,) = _LEN.unpack(prefix)
    if n > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {n} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return n


PREFIX_BYTES = _LEN.size
