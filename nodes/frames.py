"""Binary frame encoding of overlay messages (versions 1 and 2).

A frame is a 4-byte big-endian length (of everything after it) followed by::

    version  u8    (FRAME_VERSION, or BODY_FRAME_VERSION)
    type     u8    (MsgType code)
    hops     u16   (at most nodes.messages.MAX_HOPS)
    msg_id   u64
    origin   u8 length + UTF-8 bytes (1..255)
    version 1:  payload      compact JSON (UTF-8), the rest of the frame
    version 2:  payload_len  u32, then payload (compact JSON, that many bytes),
                body         raw bytes, the rest of the frame

A message without a body (every message but a bulk data slice) is written as version 1,
byte for byte what it was before version 2 existed; a message with a body (a 64 KB
slice) is written as version 2, so its bytes travel raw instead of inside JSON. The
length prefix lets a reader split a TCP byte stream into frames; :func:`decode_body`
reads both versions. Anything that does not decode raises :class:`FrameError`, which the
runtime logs before dropping the connection.

Payloads are encoded and decoded with msgspec: about eight times faster than the standard
library's ``json`` here (a broker does both on every hop) and, unlike orjson, exact on
integers of any size. Its bytes are compact JSON as before; it writes ``1e-05`` as
``0.00001`` and UTF-8 rather than ``\\u`` escapes, and it refuses what RFC 8259 does
(``NaN``, lone surrogates), which ``json`` accepted.
"""

from __future__ import annotations

import struct

import msgspec

from nodes.messages import Message, MsgType

FRAME_VERSION = 1
BODY_FRAME_VERSION = 2
MAX_FRAME_BYTES = 16 * 1024 * 1024  # a bulk slice of 64 KB fits many times over
_LEN = struct.Struct("!I")
_HEAD = struct.Struct("!BBHQB")
_PAYLOAD_LEN = struct.Struct("!I")
_encode_payload = msgspec.json.Encoder().encode
_decode_payload = msgspec.json.Decoder().decode
_TYPES = {int(t): t for t in MsgType}  # a dict lookup: MsgType(code) costs several times more


class FrameError(ValueError):
    """A frame that cannot be decoded (bad version, type, length or payload)."""


def _parts(msg: Message) -> list[bytes]:
    """The frame body of ``msg`` in pieces (joined once, so a slice is copied once)."""
    origin = msg.origin.encode()
    if not 1 <= len(origin) <= 255:
        raise FrameError(f"origin must be 1..255 bytes, got {len(origin)}")
    payload = _encode_payload(msg.payload)
    version = BODY_FRAME_VERSION if msg.body else FRAME_VERSION
    head = _HEAD.pack(version, int(msg.type), msg.hops, msg.msg_id, len(origin))
    if not msg.body:
        return [head, origin, payload]
    return [head, origin, _PAYLOAD_LEN.pack(len(payload)), payload, msg.body]


def encode(msg: Message) -> bytes:
    """The frame for ``msg``, length prefix included."""
    parts = _parts(msg)
    return b"".join([_LEN.pack(sum(map(len, parts))), *parts])


def frame_size(msg: Message) -> int:
    """Bytes ``msg`` takes on the wire as a frame (what the simulator serialises and the
    logs record), computed without building the frame: the length of each of
    :func:`_parts`' pieces, the payload the only one encoded (the simulator sizes every
    message it sends)."""
    origin = len(msg.origin.encode())
    if not 1 <= origin <= 255:
        raise FrameError(f"origin must be 1..255 bytes, got {origin}")
    size = _LEN.size + _HEAD.size + origin + len(_encode_payload(msg.payload))
    return size + _PAYLOAD_LEN.size + len(msg.body) if msg.body else size


def decode_body(body: bytes | bytearray | memoryview) -> Message:
    """Decode one frame body (the bytes after the length prefix); a memoryview of a large
    body is decoded without a copy of it besides the message's own ``body``."""
    if len(body) < _HEAD.size:
        raise FrameError(f"frame body too short: {len(body)} bytes")
    version, code, hops, msg_id, olen = _HEAD.unpack_from(body)
    if version not in (FRAME_VERSION, BODY_FRAME_VERSION):
        raise FrameError(f"unknown frame version {version}")
    mtype = _TYPES.get(code)
    if mtype is None:
        raise FrameError(f"unknown message type {code}")
    end = _HEAD.size + olen
    if olen == 0 or len(body) < end:
        raise FrameError("truncated origin")
    raw = b""
    payload_end = len(body)
    if version == BODY_FRAME_VERSION:
        if len(body) < end + _PAYLOAD_LEN.size:
            raise FrameError("truncated payload length")
        (plen,) = _PAYLOAD_LEN.unpack_from(body, end)
        end += _PAYLOAD_LEN.size
        payload_end = end + plen
        if len(body) < payload_end:
            raise FrameError(f"payload of {plen} bytes runs past the frame")
        raw = bytes(body[payload_end:])  # one copy whether body is bytes or a view
    try:
        origin = str(body[_HEAD.size : _HEAD.size + olen], "utf-8")
        payload = _decode_payload(body[end:payload_end]) if payload_end > end else {}
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad UTF-8 and bad JSON (msgspec's DecodeError is one);
        # RecursionError, JSON nested deeper than the decoder allows.
        raise FrameError(f"bad origin or payload: {exc}") from None
    if not isinstance(payload, dict):
        raise FrameError("payload is not a JSON object")
    return Message(mtype, msg_id, origin, hops, payload, raw)


def body_length(prefix: bytes, max_bytes: int = MAX_FRAME_BYTES) -> int:
    """The body length announced by a 4-byte prefix, checked against ``max_bytes`` (a
    broker reads a peer's first frame with a much smaller limit than the rest)."""
    if len(prefix) != _LEN.size:
        raise FrameError(f"length prefix must be {_LEN.size} bytes, got {len(prefix)}")
    (n,) = _LEN.unpack(prefix)
    if n > max_bytes:
        raise FrameError(f"frame of {n} bytes exceeds the {max_bytes}-byte limit")
    return n


PREFIX_BYTES = _LEN.size
