"""pcap files to packet-header columns, fast: struct for the file framing, numpy for headers.

A pcap file (libpcap format, not pcapng) is a 24-byte global header followed by records
of a 16-byte header (seconds, fraction, captured length, original length) and the
captured bytes. Choices:

- **Record framing is a sequential scan** (each record says how long it is), a tight
  ``struct`` loop of a few hundred nanoseconds per record; everything after that is
  vectorised: the header bytes of all records of a chunk are gathered with numpy fancy
  indexing and decoded column by column, so the per-packet Python cost is the scan alone.
- **Chunks.** A large file is cut into byte ranges parsed independently (one Spark task
  each). A range owns the records that *start* inside it. A range that does not start at
  the global header finds its first record by resynchronising: the first offset whose
  16 bytes read as a plausible record header (timestamp within a year of the file's first
  record, fraction below one second, captured length at most the original and at most
  the limit) *and* from which ``RESYNC_CHAIN`` records chain to further plausible headers
  (or exactly to the end of the file). Payload bytes that pass that by chance are not a
  practical concern; :func:`parse_chunk` over all ranges equals one sequential pass
  (a test checks it).
- **Damage is reported, not fatal.** A record header that is implausible in the middle of
  a file (corruption) is reported with its byte offset and the scan resynchronises after
  it; a file that ends inside a record (tcpdump killed, a copy cut short) is reported
  with the offset and the rest of the file is kept. A file whose global header is not
  pcap raises :class:`PcapError` naming the file.
- **Link types**: Ethernet (with one VLAN tag), Linux cooked capture v1 (SLL) and v2
  (SLL2, which is what ``tcpdump -i any -y LINUX_SLL2`` writes: interface index and
  direction per packet), and raw IPv4. Network layer: IPv4 only (Mininet hosts here
  carry IPv4); other packets keep their time, lengths and ethertype with null addresses.
- **Lengths**: ``wire_len`` is the record's original length, ``cap_len`` what was
  captured, ``ip_len`` the IPv4 total length, and ``payload_len`` the TCP/UDP payload
  length from the headers (so a snap length that cuts the payload does not shrink it).
- **Addresses** become dotted strings through the few distinct values of a chunk (a
  dictionary, then an Arrow ``take``), not one Python call per packet.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

GLOBAL_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 16
MAX_CAPLEN = 262144  # libpcap's largest snap length; records claiming more are damage
RESYNC_CHAIN = 4
_MAX_ORIGLEN = 1 << 20  # GSO/GRO super-packets reach 64 KiB; a megabyte means damage
_TS_SLACK_S = 366 * 86400
_GATHER_PAD = 128  # > link header + largest IPv4 header (60) + TCP header

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_IPV4,
                       LINKTYPE_LINUX_SLL2)
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_VLAN = 0x8100
SLL_OUTGOING = 4  # packet type of a packet this host sent
_PCAPNG_MAGIC = 0x0A0D0D0A

# (byte order, seconds per timestamp fraction unit) by the magic number read little-endian
_MAGICS = {0xA1B2C3D4: ("<", 1e-6), 0xD4C3B2A1: (">", 1e-6),
           0xA1B23C4D: ("<", 1e-9), 0x4D3CB2A1: (">", 1e-9)}

PACKET_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("t_wall", pa.float64(), "double"),
    ("ifindex", pa.int32(), "int"),
    ("interface", pa.string(), "string"),
    ("outgoing", pa.bool_(), "boolean"),
    ("ethertype", pa.int32(), "int"),
    ("ip_src", pa.string(), "string"),
    ("ip_dst", pa.string(), "string"),
    ("ip_proto", pa.int16(), "smallint"),
    ("ip_len", pa.int32(), "int"),
    ("sport", pa.int32(), "int"),
    ("dport", pa.int32(), "int"),
    ("tcp_flags", pa.int16(), "smallint"),
    ("tcp_seq", pa.int64(), "bigint"),
    ("tcp_ack", pa.int64(), "bigint"),
    ("payload_len", pa.int32(), "int"),
    ("cap_len", pa.int32(), "int"),
    ("wire_len", pa.int32(), "int"),
)
PAYLOAD_FIELD = ("payload", pa.binary())
TCP_SYN = 0x02


class PcapError(ValueError):
    """A file that is not a readable pcap file (the message names it)."""


@dataclass(frozen=True)
class PcapInfo:
    """What the global header (and the first record) of a pcap file say."""

    byte_order: str
    ts_unit_s: float
    snaplen: int
    linktype: int
    first_ts_s: int | None  # seconds of the first record, None for a file without records
    size: int

    @property
    def max_caplen(self) -> int:
        """Largest plausible captured length (some writers exceed their snap length)."""
        return max(self.snaplen, MAX_CAPLEN)


def read_info(path: str | Path) -> PcapInfo:
    """The global header of ``path``; :class:`PcapError` if it is not pcap."""
    with open(path, "rb") as fh:
        head = fh.read(GLOBAL_HEADER_BYTES + RECORD_HEADER_BYTES)
        size = fh.seek(0, 2)
    if len(head) < GLOBAL_HEADER_BYTES:
        raise PcapError(f"{path}: {len(head)} bytes, shorter than a pcap global header")
    (magic,) = struct.unpack_from("<I", head)
    if magic == _PCAPNG_MAGIC:
        raise PcapError(f"{path}: pcapng is not supported (write pcap: tcpdump -w does)")
    if magic not in _MAGICS:
        raise PcapError(f"{path}: not a pcap file (magic {magic:#010x})")
    order, unit = _MAGICS[magic]
    _, _, _, _, snaplen, linktype = struct.unpack_from(order + "HHiIII", head, 4)
    linktype &= 0x0FFFFFFF  # the top bits may carry FCS information
    first = None
    if len(head) == GLOBAL_HEADER_BYTES + RECORD_HEADER_BYTES:
        (first,) = struct.unpack_from(order + "I", head, GLOBAL_HEADER_BYTES)
    return PcapInfo(order, unit, snaplen, linktype, first, size)


def _u32_at_every_offset(b: np.ndarray, order: str) -> np.ndarray:
    """The 32-bit integer starting at each byte of ``b`` (len(b) - 3 values)."""
    w = [b[i:len(b) - 3 + i].astype(np.uint32) for i in range(4)]
    if order == "<":
        return w[0] | (w[1] << 8) | (w[2] << 16) | (w[3] << 24)
    return (w[0] << 24) | (w[1] << 16) | (w[2] << 8) | w[3]


class _Framing:
    """Record framing over a buffer holding bytes ``[base, base + len(buf))`` of a file."""

    def __init__(self, buf: bytes, base: int, info: PcapInfo) -> None:
        self.buf = buf
        self.base = base
        self.info = info
        self.end = base + len(buf)  # file offset just past the buffer
        self._u32 = struct.Struct(info.byte_order + "I").unpack_from
        self._hdr = struct.Struct(info.byte_order + "IIII").unpack_from

    def plausible(self, off: int) -> bool:
        """Whether a record header at file offset ``off`` reads as one."""
        rel = off - self.base
        if rel + RECORD_HEADER_BYTES > len(self.buf):
            return False
        sec, frac, cap, orig = self._hdr(self.buf, rel)
        first = self.info.first_ts_s or sec
        return (abs(sec - first) <= _TS_SLACK_S and frac * self.info.ts_unit_s < 1.0
                and cap <= orig <= _MAX_ORIGLEN and cap <= self.info.max_caplen)

    def chains(self, off: int) -> bool:
        """Whether ``RESYNC_CHAIN`` records chain from ``off`` (or reach the file's end)."""
        for _ in range(RESYNC_CHAIN):
            if off == self.info.size:
                return True
            if not self.plausible(off):
                return False
            off += RECORD_HEADER_BYTES + self._u32(self.buf, off - self.base + 8)[0]
        return off <= self.info.size

    def resync(self, start: int, stop: int) -> int | None:
        """The first offset in ``[start, stop)`` where a chain of records starts."""
        lo = start - self.base
        hi = min(stop, self.end - RECORD_HEADER_BYTES + 1) - self.base
        if hi <= lo:
            return None
        b = np.frombuffer(self.buf, dtype=np.uint8, count=hi - lo + RECORD_HEADER_BYTES - 1,
                          offset=lo)
        u32 = _u32_at_every_offset(b, self.info.byte_order).astype(np.int64)
        n = hi - lo
        sec, frac, cap, orig = u32[:n], u32[4:n + 4], u32[8:n + 8], u32[12:n + 12]
        first = self.info.first_ts_s if self.info.first_ts_s is not None else sec
        ok = ((np.abs(sec - first) <= _TS_SLACK_S)
              & (frac < round(1.0 / self.info.ts_unit_s))
              & (cap <= orig) & (orig <= _MAX_ORIGLEN) & (cap <= self.info.max_caplen))
        for cand in np.flatnonzero(ok):
            off = start + int(cand)
            if self.chains(off):
                return off
        return None

    def _run(self, off: int, stop: int) -> tuple[list[int], int, str | None]:
        """Record offsets (into the buffer) from ``off`` while records start before
        ``stop``; where it stopped, and why (None: reached ``stop``)."""
        offsets: list[int] = []
        append = offsets.append
        u32, buf, base, size = self._u32, self.buf, self.base, self.info.size
        limit = self.info.max_caplen
        while off < stop:  # the hot loop: one unpack per record, nothing else
            if off + RECORD_HEADER_BYTES > size:
                return offsets, off, "header"
            cap = u32(buf, off - base + 8)[0]
            if cap > limit:
                return offsets, off, "damaged"
            if off + RECORD_HEADER_BYTES + cap > size:
                return offsets, off, "record"
            append(off - base)
            off += RECORD_HEADER_BYTES + cap
        return offsets, off, None

    def _first_implausible(self, offsets: np.ndarray) -> int | None:
        """Index of the first record whose header is implausible (vectorised check)."""
        arr = np.frombuffer(self.buf, dtype=np.uint8)
        h = np.ascontiguousarray(_gather(arr, offsets, RECORD_HEADER_BYTES)).view(
            np.dtype([(k, self.info.byte_order + "u4") for k in ("sec", "frac", "cap", "orig")])
        ).ravel()
        sec = h["sec"].astype(np.int64)
        first = self.info.first_ts_s if self.info.first_ts_s is not None else sec[0]
        bad = ((np.abs(sec - first) > _TS_SLACK_S)
               | (h["frac"] >= round(1.0 / self.info.ts_unit_s))
               | (h["cap"] > h["orig"]) | (h["orig"] > _MAX_ORIGLEN))
        hits = np.flatnonzero(bad)
        return int(hits[0]) if len(hits) else None

    def scan(self, start: int, stop: int, *,
             resync: bool) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """Offsets (into the buffer) of the records starting in ``[start, stop)``, and the
        damage met as (file offset, what)."""
        problems: list[tuple[int, str]] = []
        parts: list[np.ndarray] = []
        size = self.info.size
        off: int | None = self.resync(start, stop) if resync else start
        while off is not None and off < stop:
            found, off, why = self._run(off, stop)
            run = np.asarray(found, dtype=np.int64)
            bad = self._first_implausible(run) if len(run) else None
            if bad is not None:
                run, off, why = run[:bad], int(run[bad]) + self.base, "damaged"
            parts.append(run)
            if why == "damaged":
                nxt = self.resync(off + 1, stop)
                problems.append((off, "implausible record header (damaged file); "
                                      + (f"resumed at byte {nxt}" if nxt is not None
                                         else "no record found after it in this chunk")))
                off = nxt
            elif why is not None:
                what = "record header" if why == "header" else "record's captured bytes"
                problems.append((off, f"file ends inside a {what} ({size - off} bytes "
                                      "left); the partial record is ignored"))
                break
        offsets = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return offsets, problems


def chunk_ranges(info: PcapInfo, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, stop)`` that cover the records of a file, ``chunk_bytes``
    each (the last one shorter); one range for a small file."""
    body = info.size - GLOBAL_HEADER_BYTES
    if body <= 0:
        return [(GLOBAL_HEADER_BYTES, GLOBAL_HEADER_BYTES)]
    n = max(1, -(-body // chunk_bytes))
    step = -(-body // n)
    return [(GLOBAL_HEADER_BYTES + i * step, min(info.size, GLOBAL_HEADER_BYTES + (i + 1) * step))
            for i in range(n)]


def _read_range(path: str | Path, info: PcapInfo, start: int, stop: int) -> bytes:
    # The last record starting before `stop` may run one record past it, and resync at
    # the start may check a chain of records beyond the first.
    extra = (RESYNC_CHAIN + 1) * (RECORD_HEADER_BYTES + info.max_caplen)
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(min(info.size, stop + extra) - start)


def count_records(path: str | Path) -> tuple[int, list[tuple[int, str]]]:
    """Records in a pcap file and the damage met (see :class:`_Framing`)."""
    info = read_info(path)
    total = 0
    problems: list[tuple[int, str]] = []
    for start, stop in chunk_ranges(info, 64 << 20):
        framing = _Framing(_read_range(path, info, start, stop), start, info)
        offsets, damage = framing.scan(start, stop, resync=start != GLOBAL_HEADER_BYTES)
        total += len(offsets)
        problems += damage
    return total, problems


def _gather(arr: np.ndarray, idx: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each index, one row per index. ``arr`` must end with at least
    ``width`` bytes of padding (rows that run into it hold garbage and are masked later).
    Indexing a sliding-window view copies one contiguous row per index, about a hundred
    times faster than a 2-D fancy index."""
    return sliding_window_view(arr, width)[idx]


def _be16(g: np.ndarray, i: int) -> np.ndarray:
    return (g[:, i].astype(np.int32) << 8) | g[:, i + 1]


def _be32(g: np.ndarray, i: int) -> np.ndarray:
    return np.ascontiguousarray(g[:, i:i + 4]).view(">u4").ravel().astype(np.int64)


def _nullable(values: np.ndarray, valid: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.array(values, type=typ, mask=~valid)


def _strings_by_value(values: np.ndarray, valid: np.ndarray, name_of: Any) -> pa.Array:
    """A string per value through the distinct values only (``name_of(value) -> str|None``);
    pandas' hash-based factorize is an order of magnitude faster than np.unique here."""
    codes, uniq = pd.factorize(values)
    names = pa.array([name_of(int(v)) for v in uniq], type=pa.string())
    taken = names.take(pa.array(codes.astype(np.int32)))
    return pc.if_else(pa.array(valid), taken, pa.scalar(None, pa.string()))


def _dotted(v: int) -> str:
    return socket.inet_ntoa(v.to_bytes(4, "big"))


def _payload_column(arr: np.ndarray, start: np.ndarray, length: np.ndarray,
                    keep: np.ndarray) -> pa.Array:
    """The captured payload bytes of the kept rows (null elsewhere), gathered in one go."""
    lens = np.where(keep, length, 0).astype(np.int64)
    offsets = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(start - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
    data = arr[idx] if total else np.zeros(0, dtype=np.uint8)
    validity = pa.py_buffer(np.packbits(keep, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), len(lens),
                                 [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def _link_layer(arr: np.ndarray, data: np.ndarray, cap: np.ndarray, linktype: int
                ) -> tuple[np.ndarray, ...]:
    """Per record starting at ``data`` (``cap`` bytes captured), what its link-layer
    header says: ethertype, where the IP header starts, the interface index and whether
    it is known, the direction (outgoing) and whether it is known."""
    n = len(data)
    ifindex = np.zeros(n, dtype=np.int64)
    has_if = np.zeros(n, dtype=bool)
    outgoing = np.zeros(n, dtype=bool)
    has_dir = np.zeros(n, dtype=bool)
    if linktype == LINKTYPE_LINUX_SLL2:
        g = _gather(arr, data, 20)
        ethertype = _be16(g, 0)
        ifindex = _be32(g, 4)
        has_if = has_dir = cap >= 20
        outgoing = g[:, 10] == SLL_OUTGOING
        l3 = data + 20
    elif linktype == LINKTYPE_LINUX_SLL:
        g = _gather(arr, data, 16)
        ethertype = _be16(g, 14)
        has_dir = cap >= 16
        outgoing = _be16(g, 0) == SLL_OUTGOING
        l3 = data + 16
    elif linktype == LINKTYPE_ETHERNET:
        g = _gather(arr, data, 18)
        ethertype = _be16(g, 12)
        vlan = ethertype == ETHERTYPE_VLAN
        ethertype = np.where(vlan, _be16(g, 16), ethertype)
        l3 = data + np.where(vlan, 18, 14)
    else:  # raw IP: the version nibble says which
        l3 = data
        ethertype = np.where(_gather(arr, data, 1)[:, 0] >> 4 == 4, ETHERTYPE_IPV4, 0)
    return ethertype, l3, ifindex, has_if, outgoing, has_dir


def decode_records(buf: bytes, offsets: np.ndarray, info: PcapInfo, *,
                   ifnames: dict[int, str] | None = None,
                   payload_ports: frozenset[int] | None = None) -> pa.RecordBatch:
    """The packet columns (:data:`PACKET_FIELDS`) of the records at ``offsets`` in
    ``buf``; with ``payload_ports``, also ``payload``: the captured TCP payload of
    segments from or to those ports (null for other packets)."""
    if info.linktype not in SUPPORTED_LINKTYPES:
        raise PcapError(f"link type {info.linktype} is not supported")
    # Padding, so that header windows of short records near the end stay in bounds.
    arr = np.frombuffer(bytes(buf) + bytes(_GATHER_PAD), dtype=np.uint8)
    rec = _gather(arr, offsets, RECORD_HEADER_BYTES)
    hdr = np.ascontiguousarray(rec).view(np.dtype([(k, info.byte_order + "u4") for k in
                                                   ("sec", "frac", "cap", "orig")])).ravel()
    cap = hdr["cap"].astype(np.int64)
    data = offsets + RECORD_HEADER_BYTES
    end = data + cap
    t_wall = hdr["sec"].astype(np.float64) + hdr["frac"].astype(np.float64) * info.ts_unit_s
    ethertype, l3, ifindex, has_if, outgoing, has_dir = _link_layer(arr, data, cap,
                                                                     info.linktype)
    ip = _gather(arr, l3, 20)
    ihl = (ip[:, 0] & 0x0F).astype(np.int64) * 4
    is_ip = (ethertype == ETHERTYPE_IPV4) & (l3 + 20 <= end) & (ip[:, 0] >> 4 == 4) & (ihl >= 20)
    ip_len = _be16(ip, 2)
    proto = ip[:, 9].astype(np.int16)
    l4 = l3 + ihl
    tcp = _gather(arr, l4, 20)
    is_tcp = is_ip & (proto == 6) & (l4 + 20 <= end)
    is_udp = is_ip & (proto == 17) & (l4 + 8 <= end)
    has_ports = is_tcp | is_udp
    doff = (tcp[:, 12] >> 4).astype(np.int64) * 4
    flags = (((tcp[:, 12] & 1).astype(np.int16)) << 8) | tcp[:, 13]
    payload_len = np.where(is_tcp, ip_len - ihl - doff,
                           np.where(is_udp, _be16(tcp, 4) - 8, 0))
    payload_len = np.maximum(payload_len, 0)
    columns: dict[str, pa.Array] = {
        "t_wall": pa.array(t_wall),
        "ifindex": _nullable(ifindex.astype(np.int32), has_if, pa.int32()),
        "interface": _strings_by_value(ifindex, has_if & bool(ifnames),
                                       (ifnames or {}).get),
        "outgoing": _nullable(outgoing, has_dir, pa.bool_()),
        "ethertype": pa.array(ethertype.astype(np.int32)),
        "ip_src": _strings_by_value(np.where(is_ip, _be32(ip, 12), 0), is_ip, _dotted),
        "ip_dst": _strings_by_value(np.where(is_ip, _be32(ip, 16), 0), is_ip, _dotted),
        "ip_proto": _nullable(proto, is_ip, pa.int16()),
        "ip_len": _nullable(ip_len, is_ip, pa.int32()),
        "sport": _nullable(_be16(tcp, 0), has_ports, pa.int32()),
        "dport": _nullable(_be16(tcp, 2), has_ports, pa.int32()),
        "tcp_flags": _nullable(flags, is_tcp, pa.int16()),
        "tcp_seq": _nullable(_be32(tcp, 4), is_tcp, pa.int64()),
        "tcp_ack": _nullable(_be32(tcp, 8), is_tcp, pa.int64()),
        "payload_len": _nullable(payload_len.astype(np.int32), has_ports, pa.int32()),
        "cap_len": pa.array(cap.astype(np.int32)),
        "wire_len": pa.array(hdr["orig"].astype(np.int32)),
    }
    fields = [(name, typ) for name, typ, _ in PACKET_FIELDS]
    if payload_ports is not None:
        start = l4 + doff
        captured = np.clip(np.minimum(payload_len, end - start), 0, None)
        ports = np.fromiter(payload_ports, dtype=np.int64, count=len(payload_ports))
        keep = is_tcp & (captured > 0) & (np.isin(_be16(tcp, 0), ports)
                                          | np.isin(_be16(tcp, 2), ports))
        columns["payload"] = _payload_column(arr, start, captured, keep)
        fields.append(PAYLOAD_FIELD)
    return pa.RecordBatch.from_arrays([columns[name] for name, _ in fields],
                                      schema=pa.schema(fields))


def parse_chunk(path: str | Path, info: PcapInfo, start: int, stop: int, *,
                ifnames: dict[int, str] | None = None,
                payload_ports: frozenset[int] | None = None,
                ) -> tuple[pa.RecordBatch, list[tuple[int, str]]]:
    """The packets of the records starting in ``[start, stop)`` of ``path``, and the
    damage met there as (byte offset, what)."""
    buf = _read_range(path, info, start, stop)
    framing = _Framing(buf, start, info)
    offsets, problems = framing.scan(start, stop, resync=start != GLOBAL_HEADER_BYTES)
    batch = decode_records(buf, offsets, info, ifnames=ifnames, payload_ports=payload_ports)
    return batch, problems


def spark_ddl(extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The Spark schema (DDL) of the packet columns, ``extra`` columns first."""
    cols = list(extra) + [(name, ddl) for name, _, ddl in PACKET_FIELDS]
    return ", ".join(f"{name} {ddl}" for name, ddl in cols)
