"""``pubsublab bench analysis``: packets per second from pcap to a Parquet packet table,
Spark on the machine's two cores beside tshark and scapy on the same file.

Method:

- **The file**: ``packets`` records (default 1,000,000) in the format the runs capture
  (``tcpdump -i any -y LINUX_SLL2``): a few overlay flows in both directions, 40 % bare
  ACKs and 60 % segments carrying one real overlay frame (a PUBLISH of a stock quote,
  encoded by :mod:`nodes.frames`), with consistent sequence numbers and 20 µs between
  packets. scapy builds each flow's headers once; the records are then written raw with
  ``struct`` (scapy writing a million packets itself would take minutes).
- **Spark**: :func:`analysis.transforms.write_packet_table` on ``local[2]``, the job
  ``pubsublab analyze`` runs: one task per 16 MB of pcap, each writing its share of the
  packet table (all header columns) to Parquet; timed twice: *cold* (the first job of the
  session starts the Python workers) and *warm*; the session's start-up is timed apart.
  The headline rate is the warm one.
- **tshark** (Debian's, single-threaded by design) exports the same fields with
  ``-T fields`` to a CSV file: name resolution off and TCP sequence analysis off, its
  fastest configuration for this job.
- **scapy**: full dissection of the first ``SCAPY_SAMPLE`` packets with ``PcapReader``,
  reading the same fields: the naive reference.
- **Same answer**: the Parquet table and tshark's CSV must agree on the row count and on
  sums of ports, sequence numbers and TCP payload lengths.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from nodes.emulated.runtime import BROKER_PORT
from nodes.time_left import write_line

SCAPY_SAMPLE = 20_000
FLOWS = 8
TSHARK_FIELDS = ("frame.time_epoch", "sll.ifindex", "sll.pkttype", "sll.etype", "ip.src",
                 "ip.dst", "ip.proto", "ip.len", "tcp.srcport", "tcp.dstport", "tcp.flags",
                 "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "frame.cap_len", "frame.len")
_T0 = 1_790_000_000.0


def _log(msg: str) -> None:
    write_line(f"[bench analysis] {msg}")


def _frames() -> list[bytes]:
    """Overlay frames of realistic sizes: PUBLISHes of stock quotes."""
    from nodes.frames import encode
    from nodes.messages import Message, MsgType

    out = []
    for i in range(32):
        attrs = {"Symbol": f"s{i:03d}", "Date": "1998-01-02", "Open": 10.5 + i,
                 "High": 11.0 + i, "Low": 10.0 + i, "Close": 10.75 + i,
                 "Volume": 1000 * (i + 1), "Trades": 17 * i, "Change": 0.25}
        out.append(encode(Message(MsgType.PUBLISH, i + 1, f"p{i % 3}", i % 4,
                                  {"attrs": attrs, "t_pub": _T0 + i})))
    return out


def write_pcap(path: Path, packets: int) -> int:
    """Write the benchmark pcap (see the module docstring); returns its size in bytes."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import CookedLinuxV2

    frames = _frames()
    # Per flow direction: its headers as bytes, with the offsets of the fields we vary.
    heads = []
    for f in range(FLOWS):
        for direction in (0, 1):
            src, dst = f"10.128.{f}.{1 + direction}", f"10.128.{f}.{2 - direction}"
            sport, dport = (40000 + f, BROKER_PORT) if direction == 0 else (BROKER_PORT,
                                                                             40000 + f)
            pkt = (CookedLinuxV2(ifindex=2 + f, pkttype=4 * (1 - direction))
                   / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags="PA",
                                                 options=[("NOP", None), ("NOP", None),
                                                          ("Timestamp", (1, 2))]))
            heads.append(bytearray(bytes(pkt)))
    hdr_len = len(heads[0])
    ip_off, tcp_off = 20, 40  # SLL2 is 20 bytes, the IPv4 header 20
    seqs = [1000 * i for i in range(len(heads))]
    rec = struct.Struct("<IIII")
    ip_total = struct.Struct("!H")
    seq_ack = struct.Struct("!II")
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 276))
        buf = bytearray()
        for i in range(packets):
            h = i % len(heads)
            head = heads[h]
            payload = frames[(i // len(heads)) % len(frames)] if i % 5 >= 2 else b""
            ip_total.pack_into(head, ip_off + 2, hdr_len - ip_off + len(payload))
            seq_ack.pack_into(head, tcp_off + 4, seqs[h] & 0xFFFFFFFF,
                              seqs[h ^ 1] & 0xFFFFFFFF)
            seqs[h] += len(payload)
            t = _T0 + i * 20e-6
            n = hdr_len + len(payload)
            buf += rec.pack(int(t), int((t % 1) * 1e6), n, n)
            buf += head
            buf += payload
            if len(buf) > 1 << 22:
                fh.write(buf)
                buf.clear()
        fh.write(buf)
    return path.stat().st_size


def _spark(pcap: Path, out: Path) -> dict[str, Any]:
    from analysis import transforms as T
    from analysis.session import spark_session

    t0 = time.perf_counter()
    spark = spark_session()
    start_s = time.perf_counter() - t0
    try:
        runs = []
        for label in ("cold", "warm"):
            problems = T.set_accumulator(spark)
            t = time.perf_counter()
            parts = T.write_packet_table(spark, [{"path": str(pcap), "algorithm": "bench",
                                                  "host": "h", "ifnames": {}}], out,
                                         problems=problems)
            runs.append(time.perf_counter() - t)
            _log(f"spark {label}: {runs[-1]:.1f} s")
        cores = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    return {"session_start_s": round(start_s, 2), "cold_s": round(runs[0], 2),
            "warm_s": round(runs[1], 2), "tasks": len(parts), "cores": cores,
            "problems": sorted(problems.value)}


def _tshark(pcap: Path, out: Path) -> dict[str, Any] | None:
    exe = shutil.which("tshark")
    if exe is None:
        return None
    cmd = [exe, "-r", str(pcap), "-n", "-T", "fields", "-E", "separator=,",
           "-o", "tcp.analyze_sequence_numbers:FALSE"]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    t = time.perf_counter()
    with open(out, "wb") as fh:
        subprocess.run(cmd, stdout=fh, stderr=subprocess.DEVNULL, check=True)
    elapsed = time.perf_counter() - t
    version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()[0]
    return {"s": round(elapsed, 2), "version": version, "command": " ".join(cmd[3:])}


def _scapy(pcap: Path, sample: int) -> dict[str, Any]:
    from scapy.layers.inet import IP, TCP
    from scapy.utils import PcapReader

    t = time.perf_counter()
    n = 0
    with PcapReader(str(pcap)) as reader:
        for pkt in reader:
            ip, tcp = pkt[IP], pkt[TCP]
            _ = (float(pkt.time), ip.src, ip.dst, ip.proto, ip.len, tcp.sport, tcp.dport,
                 int(tcp.flags), tcp.seq, tcp.ack, len(tcp.payload), len(pkt))
            n += 1
            if n >= sample:
                break
    elapsed = time.perf_counter() - t
    return {"sample_packets": n, "s": round(elapsed, 2), "packets_per_s": round(n / elapsed)}


def _agree(parquet: Path, csv: Path) -> dict[str, Any]:
    """Row counts and a few column sums of the two exports."""
    import pandas as pd

    ours = pd.read_parquet(parquet, columns=["sport", "dport", "tcp_seq", "payload_len"])
    theirs = pd.read_csv(csv, header=None, names=list(TSHARK_FIELDS),
                         usecols=["tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len"])
    a = {"rows": len(ours), "ports": int(ours["sport"].sum() + ours["dport"].sum()),
         "seq": int(ours["tcp_seq"].sum()), "tcp_len": int(ours["payload_len"].sum())}
    b = {"rows": len(theirs),
         "ports": int(theirs["tcp.srcport"].sum() + theirs["tcp.dstport"].sum()),
         "seq": int(theirs["tcp.seq_raw"].sum()), "tcp_len": int(theirs["tcp.len"].sum())}
    return {"spark": a, "tshark": b, "agree": a == b}


def run(packets: int = 1_000_000, scapy_sample: int = SCAPY_SAMPLE) -> dict[str, Any]:
    """Run the benchmark (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="pubsublab-bench-") as tmp:
        d = Path(tmp)
        pcap = d / "bench.pcap"
        t = time.perf_counter()
        size = write_pcap(pcap, packets)
        gen_s = time.perf_counter() - t
        _log(f"{packets} packets, {size / 1e6:.0f} MB written in {gen_s:.1f} s")
        spark = _spark(pcap, d / "packets.parquet")
        spark["packets_per_s"] = round(packets / spark["warm_s"])
        spark["cold_packets_per_s"] = round(packets / spark["cold_s"])
        _log(f"tshark -T fields on {packets} packets ...")
        tshark = _tshark(pcap, d / "tshark.csv")
        if tshark is not None:
            tshark["packets_per_s"] = round(packets / tshark["s"])
            _log(f"tshark: {tshark['s']:.1f} s")
        scapy = _scapy(pcap, scapy_sample)
        agree = _agree(d / "packets.parquet", d / "tshark.csv") if tshark else None
    result: dict[str, Any] = {
        "packets": packets, "pcap_bytes": size, "generate_s": round(gen_s, 2),
        "spark": spark, "tshark": tshark or {"missing": "tshark is not installed "
                                                        "(apt-get install tshark)"},
        "scapy": scapy, "same_fields": agree,
    }
    if tshark:
        result["speedup_vs_tshark"] = round(spark["packets_per_s"] / tshark["packets_per_s"], 2)
        result["faster_than_tshark"] = spark["packets_per_s"] > tshark["packets_per_s"]
    return result


def format_result(result: dict[str, Any]) -> str:
    """The three rates side by side."""
    s, t, c = result["spark"], result["tshark"], result["scapy"]
    lines = [f"pcap: {result['packets']:,} packets, {result['pcap_bytes'] / 1e6:.0f} MB "
             "(LINUX_SLL2, overlay flows)",
             f"{'tool':32} {'seconds':>8} {'packets/s':>11}",
             f"{'Spark local[' + str(s['cores']) + '], warm':32} {s['warm_s']:8.2f} "
             f"{s['packets_per_s']:11,}",
             f"{'Spark, cold (first job)':32} {s['cold_s']:8.2f} {s['cold_packets_per_s']:11,}"]
    if "s" in t:
        lines.append(f"{'tshark -T fields (1 core)':32} {t['s']:8.2f} {t['packets_per_s']:11,}")
    else:
        lines.append(f"tshark: {t['missing']}")
    lines.append(f"{'scapy dissection (' + format(c['sample_packets'], ',') + ' pkts)':32} "
                 f"{c['s']:8.2f} {c['packets_per_s']:11,}")
    lines.append(f"Spark session start-up (not counted): {s['session_start_s']:.1f} s, "
                 f"{s['tasks']} tasks")
    if "speedup_vs_tshark" in result:
        lines.append(f"Spark vs tshark: {result['speedup_vs_tshark']}x "
                     f"({'faster' if result['faster_than_tshark'] else 'SLOWER'}); same "
                     f"fields: {'yes' if result['same_fields']['agree'] else 'NO'}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(run()))
