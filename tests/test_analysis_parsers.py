"""The analysis' parsers without Spark: pcap framing and headers, TCP reassembly and
overlay frames, JSON-lines logs; capture planning and the capture spec field."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import pandas as pd
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import CookedLinuxV2, Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from analysis.logs import read_log, signed_msg_id
from analysis.pcap import (
    GLOBAL_HEADER_BYTES,
    PcapError,
    chunk_ranges,
    count_records,
    parse_chunk,
    read_info,
)
from analysis.streams import Segment, decode_stream
from experiments.emulation.capture import parse_tcpdump_stats, plan_capture
from experiments.spec import CaptureSpec, SpecError, parse_spec
from nodes.frames import encode
from nodes.messages import Message, MsgType

T0 = 1_795_000_000.0


def _ether_pcap(path: Path, n: int = 300) -> None:
    pkts = []
    for i in range(n):
        p = (Ether() / IP(src=f"10.0.0.{i % 5 + 1}", dst="10.0.1.1")
             / TCP(sport=7000 + i % 2, dport=40000, seq=1000 * i, ack=7, flags="PA")
             / Raw(b"x" * (i % 40)))
        p.time = T0 + i * 0.001
        pkts.append(p)
    udp = Ether() / IP(src="10.0.0.9", dst="10.0.0.8") / UDP(sport=53, dport=5353) / Raw(b"abc")
    udp.time = T0 + 1
    wrpcap(str(path), [*pkts, udp])


def _parse_all(path: Path, **kw: object) -> tuple:
    info = read_info(path)
    return parse_chunk(path, info, GLOBAL_HEADER_BYTES, info.size, **kw)


def test_ethernet_headers_match_scapy(tmp_path: Path) -> None:
    path = tmp_path / "e.pcap"
    _ether_pcap(path)
    batch, problems = _parse_all(path, payload_ports=frozenset({7000}))
    assert problems == []
    df = batch.to_pandas()
    assert len(df) == 301
    row = df.iloc[7]
    assert (row.ip_src, row.ip_dst, row.sport, row.dport) == ("10.0.0.3", "10.0.1.1", 7001, 40000)
    assert (row.tcp_seq, row.tcp_ack, row.tcp_flags, row.payload_len) == (7000, 7, 0x18, 7)
    assert row.t_wall == pytest.approx(T0 + 0.007)
    assert row.payload is None and df.payload[6] == b"x" * 6  # kept for port 7000 only
    assert row.ip_len == 20 + 20 + 7 and row.wire_len == row.cap_len == 14 + 40 + 7
    udp = df.iloc[-1]
    assert (udp.ip_proto, udp.sport, udp.dport, udp.payload_len) == (17, 53, 5353, 3)
    assert udp.payload is None and udp.tcp_seq != udp.tcp_seq  # NaN: no TCP header


def test_sll2_interface_and_direction(tmp_path: Path) -> None:
    path = tmp_path / "s.pcap"
    p = (CookedLinuxV2(ifindex=3, pkttype=4) / IP(src="1.2.3.4", dst="5.6.7.8")
         / TCP(sport=40000, dport=7000, flags="S", seq=99))
    p.time = T0
    q = CookedLinuxV2(ifindex=1, pkttype=0) / IP(src="5.6.7.8", dst="1.2.3.4") / TCP(flags="A")
    q.time = T0
    wrpcap(str(path), [p, q])
    assert read_info(path).linktype == 276
    df = _parse_all(path, ifnames={3: "b1-eth0"})[0].to_pandas()
    assert list(df.interface) == ["b1-eth0", None] and list(df.ifindex) == [3, 1]
    assert list(df.outgoing) == [True, False]
    assert (df.tcp_flags[0], df.tcp_seq[0], df.wire_len[0]) == (2, 99, 20 + 40)


def test_chunks_give_the_same_packets_as_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "e.pcap"
    _ether_pcap(path, 2000)
    info = read_info(path)
    whole = _parse_all(path)[0].to_pandas()
    for chunk in (700, 4096, 50_000):
        parts = [parse_chunk(path, info, a, b)[0].to_pandas() for a, b in
                 chunk_ranges(info, chunk)]
        assert len(parts) > 1
        got = pd.concat(parts, ignore_index=True)
        assert got.equals(whole), chunk


def test_truncated_and_damaged_files_are_reported_and_the_rest_kept(tmp_path: Path) -> None:
    src = tmp_path / "e.pcap"
    _ether_pcap(src)
    data = src.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-10])
    batch, problems = _parse_all(cut)
    assert batch.num_rows == 300
    ((offset, what),) = problems
    assert offset > GLOBAL_HEADER_BYTES and "ends inside" in what
    assert count_records(cut) == (300, problems)
    # An impossible captured length in the middle: reported, parsing resumes after it.
    damaged = bytearray(data)
    off = GLOBAL_HEADER_BYTES
    for _ in range(100):
        off += 16 + struct.unpack_from("<I", damaged, off + 8)[0]
    struct.pack_into("<I", damaged, off + 8, 10_000_000)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(damaged))
    batch, problems = _parse_all(bad)
    assert batch.num_rows == 300 and problems[0][0] == off and "damaged" in problems[0][1]
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a pcap at all, just text" * 3)
    with pytest.raises(PcapError, match=r"junk\.pcap"):
        read_info(junk)


def _stream(msgs: list[Message]) -> bytes:
    return b"".join(encode(m) for m in msgs)


MSGS = [Message(MsgType.HELLO, 2**63 + 1, "b1", 0, {"name": "b1", "role": "broker"})] + [
    Message(MsgType.PUBLISH, i, "p0", 2, {"attrs": {"x": i}, "t_pub": T0 + i})
    for i in range(1, 30)]
ISN = 2**32 - 50  # the stream wraps around 2^32


def _segments(data: bytes, cuts: list[tuple[int, int]], *, syn: bool = True) -> list[Segment]:
    out = [Segment(T0, ISN, 0x02, 0, b"")] if syn else []
    out += [Segment(T0 + 1 + i, (ISN + 1 + a) % 2**32, 0x18, b - a, data[a:b])
            for i, (a, b) in enumerate(cuts)]
    return out


def test_reassembly_orders_deduplicates_and_decodes() -> None:
    data = _stream(MSGS)
    cuts = [(a, min(a + 37, len(data))) for a in range(0, len(data), 37)]
    segs = _segments(data, cuts)
    random.Random(3).shuffle(segs)
    segs += _segments(data, cuts[2:6], syn=False)  # retransmissions
    frames, problems = decode_stream(segs)
    assert problems == []
    assert [f.type for f in frames] == ["HELLO"] + ["PUBLISH"] * 29
    assert [f.msg_id for f in frames[1:]] == list(range(1, 30))
    assert frames[0].msg_id == 2**63 + 1 and frames[3].t_pub == T0 + 3
    assert frames[0].frame_bytes == len(encode(MSGS[0]))
    # The frame is complete when its last segment arrived: the latest capture time.
    assert all(f.t_wall >= f.t_first for f in frames)


def test_a_gap_loses_only_the_frames_it_touches() -> None:
    data = _stream(MSGS)
    cuts = [(a, min(a + 37, len(data))) for a in range(0, len(data), 37)]
    frames, problems = decode_stream(_segments(data, cuts[:6] + cuts[7:]))
    gap = 6 * 37
    lost = [m for m, start in zip(MSGS, _starts(MSGS), strict=True)
            if start < gap + 37 and start + len(encode(m)) > gap]
    assert len(frames) == len(MSGS) - len(lost)
    kinds = {p.what for p in problems}
    assert "not captured (missing packets)" in kinds
    assert any(p.offset == gap and p.bytes == 37 for p in problems)


def _starts(msgs: list[Message]) -> list[int]:
    out, pos = [], 0
    for m in msgs:
        out.append(pos)
        pos += len(encode(m))
    return out


def test_snap_length_cut_and_missing_syn() -> None:
    data = _stream(MSGS)
    starts = [*_starts(MSGS), len(data)]
    whole = [(starts[i], starts[i + 1]) for i in range(len(MSGS))]
    segs = _segments(data, whole)
    cut = segs[5]
    segs[5] = Segment(cut.t_wall, cut.seq, cut.flags, cut.payload_len, cut.data[:20])
    frames, problems = decode_stream(segs)
    assert len(frames) == len(MSGS) - 1
    assert [p.what for p in problems] == ["frame continues into a gap", "cut by the snap length"]
    # Capture started mid-stream (no SYN): decoding finds the first frame boundary.
    frames, problems = decode_stream(_segments(data, [(starts[3] + 5, len(data))], syn=False))
    assert [f.msg_id for f in frames] == list(range(4, 30))
    assert problems and problems[0].what == "skipped to the next frame boundary"


def test_log_reader_reports_bad_lines_and_keeps_the_rest(tmp_path: Path) -> None:
    good = {"t_wall": 1.5, "t_mono": 0.1, "node": "b1", "ev": "send", "type": "HELLO",
            "origin": "b1", "msg_id": 2**63 + 5, "hops": 0, "link": "b2", "size": 48,
            "emulated": True}
    lines = [json.dumps(good), "{not json", "", json.dumps([1, 2]),
             json.dumps({"node": "b1", "ev": "send"}),
             json.dumps({**good, "hops": "three"}), json.dumps({**good, "msg_id": 2**64}),
             json.dumps({**good, "ev": "queue", "queue_len": 4, "window_ms": 50.0})]
    path = tmp_path / "b1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table, problems = read_log(path)
    df = table.to_pandas()
    assert list(df.line) == [1, 8]
    assert df.msg_id[0] == signed_msg_id(2**63 + 5) == 2**63 + 5 - 2**64
    assert json.loads(df.extra[0]) == {"emulated": True} and df.queue_len[1] == 4
    assert [n for n, _ in problems] == [2, 4, 5, 6, 7]
    assert "not JSON" in problems[0][1] and "missing field(s) t_wall" in problems[2][1]
    empty = tmp_path / "s0.jsonl"
    empty.write_text("")
    table, problems = read_log(empty)
    assert table.num_rows == 0 and problems == [(None, "empty log: no records")]


def test_capture_plan_bounds_the_disk() -> None:
    hosts = [f"h{i}" for i in range(9)]
    plan = plan_capture(CaptureSpec(max_mb=200, file_mb=10), hosts, 7000)
    assert (plan.file_mb, plan.files_per_host) == (10, 2)
    assert plan.bound_bytes <= 200e6 * 1.01 and plan.bpf_filter == "tcp port 7000"
    tight = plan_capture(CaptureSpec(max_mb=100, file_mb=10), [f"h{i}" for i in range(70)], 7000)
    assert (tight.file_mb, tight.files_per_host) == (1, 1)
    with pytest.raises(SpecError, match=r"capture\.max_mb"):
        plan_capture(CaptureSpec(max_mb=5), hosts, 7000)
    stats = parse_tcpdump_stats("tcpdump: listening on any\n12 packets captured\n"
                                "30 packets received by filter\n1 packet dropped by kernel\n")
    assert stats == {"captured": 12, "received_by_filter": 30, "dropped_by_kernel": 1}


def test_capture_spec_is_validated() -> None:
    base = {"name": "x", "topology": {"name": "scot"}}
    assert parse_spec(base).capture == CaptureSpec()
    spec = parse_spec({**base, "capture": {"snaplen": 256, "max_mb": 50, "enabled": False}})
    assert (spec.capture.snaplen, spec.capture.max_mb, spec.capture.enabled) == (256, 50, False)
    assert spec.to_dict()["capture"]["snaplen"] == 256
    for bad, field in (({"snaplen": 10}, "capture.snaplen"), ({"enabled": "yes"},
                                                                "capture.enabled"),
                       ({"max_mb": 0}, "capture.max_mb"), ({"rotate": 3}, "capture")):
        with pytest.raises(SpecError, match=re.escape(field)):
            parse_spec({**base, "capture": bad})
